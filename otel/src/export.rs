//! The OTLP exporter, configured as every OpenTelemetry SDK is: from the standard `OTEL_*`
//! environment variables, and off unless they ask for it.
//!
//! | variable | effect |
//! | --- | --- |
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | turns traces on and says where to send them |
//! | `OTEL_TRACES_EXPORTER` | `otlp` (with no endpoint: `http://localhost:4318`) or `none` |
//! | `OTEL_SDK_DISABLED` | `true` turns traces off whatever else is set |
//! | `OTEL_EXPORTER_OTLP_PROTOCOL` / `…_TRACES_PROTOCOL` | only `http/protobuf` is built in |
//! | `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` | the resource (default service name given by the binary) |
//! | `OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`, `OTEL_BSP_*`, `OTEL_TRACES_SAMPLER[_ARG]` | as the specification says |
//!
//! Spans are batched on the SDK's own thread and sent with a blocking client there, so no
//! request ever waits on the collector; a collector that is down costs dropped spans, never
//! a failed launch.

use std::collections::HashMap;

use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// Whether and where to send traces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Traces {
    Off,
    /// OTLP over HTTP/protobuf. `endpoint` is the whole URL of the traces resource (as
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is); `None` lets the exporter read the variables.
    Otlp {
        endpoint: Option<String>,
    },
}

impl Traces {
    /// From the process's environment.
    pub fn from_env() -> Result<Self, String> {
        // `vars_os`: a variable that isn't UTF-8 is none of ours, and must not panic.
        let vars = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Self::from_vars(&vars)
    }

    /// From `vars` (the environment, or a test's).
    pub fn from_vars(vars: &HashMap<String, String>) -> Result<Self, String> {
        let get = |k: &str| vars.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        if get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(Self::Off);
        }
        let endpoint = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or(get("OTEL_EXPORTER_OTLP_ENDPOINT"))
            .is_some();
        let wanted = match get("OTEL_TRACES_EXPORTER") {
            None => endpoint,
            Some("none") => false,
            Some("otlp") => true,
            Some(other) => {
                return Err(format!(
                    "OTEL_TRACES_EXPORTER={other:?}: this build exports traces with `otlp` (or `none`)"
                ));
            }
        };
        if !wanted {
            return Ok(Self::Off);
        }
        for var in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(p) = get(var)
                && p != "http/protobuf"
            {
                return Err(format!(
                    "{var}={p:?}: this build sends OTLP as `http/protobuf` only \
                     (a local OpenTelemetry Collector can forward to gRPC)"
                ));
            }
        }
        Ok(Self::Otlp { endpoint: None })
    }
}

/// The tracer provider for `traces`, named `default_service` unless `OTEL_SERVICE_NAME` says
/// otherwise; `None` when traces are off. Keep it, and call
/// [`shutdown`](SdkTracerProvider::shutdown) on the way out so the last spans are sent.
pub fn provider(
    traces: &Traces,
    default_service: &'static str,
) -> Result<Option<SdkTracerProvider>, String> {
    let Traces::Otlp { endpoint } = traces else {
        return Ok(None);
    };
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary);
    if let Some(e) = endpoint {
        exporter = exporter.with_endpoint(e.clone());
    }
    let exporter = exporter
        .build()
        .map_err(|e| format!("the OTLP trace exporter: {e}"))?;
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(default_service);
    }
    Ok(Some(
        SdkTracerProvider::builder()
            .with_resource(resource.build())
            .with_batch_exporter(exporter)
            .build(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn traces_are_off_unless_the_environment_asks_for_them() {
        let on = Traces::Otlp { endpoint: None };
        for (env, want) in [
            (vars(&[]), Ok(Traces::Off)),
            (
                vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]),
                Ok(on.clone()),
            ),
            (
                vars(&[(
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "http://c:4318/v1/traces",
                )]),
                Ok(on.clone()),
            ),
            (vars(&[("OTEL_TRACES_EXPORTER", "otlp")]), Ok(on.clone())),
            (
                vars(&[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_TRACES_EXPORTER", "none"),
                ]),
                Ok(Traces::Off),
            ),
            (
                vars(&[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_SDK_DISABLED", "TRUE"),
                ]),
                Ok(Traces::Off),
            ),
            (
                vars(&[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ]),
                Ok(on.clone()),
            ),
        ] {
            assert_eq!(Traces::from_vars(&env), want, "{env:?}");
        }
    }

    #[test]
    fn what_this_build_cannot_do_is_refused_by_name() {
        let e = Traces::from_vars(&vars(&[("OTEL_TRACES_EXPORTER", "zipkin")])).unwrap_err();
        assert!(e.contains("OTEL_TRACES_EXPORTER"), "{e}");
        let e = Traces::from_vars(&vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]))
        .unwrap_err();
        assert!(
            e.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && e.contains("grpc"),
            "{e}"
        );
        // Off wins over a protocol it couldn't speak.
        assert_eq!(
            Traces::from_vars(&vars(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])),
            Ok(Traces::Off)
        );
    }
}
