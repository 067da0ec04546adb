//! Logs and traces.
//!
//! Logs: `tracing` lines, pretty or JSON (`PORTAL_LOG_FORMAT`), each inside the `request` span
//! of its request, which carries the request id and, when traces are on, the trace id.
//!
//! Traces: OpenTelemetry over OTLP, off unless the standard `OTEL_*` variables ask for it
//! ([`otel::export`]). Every `tracing` span becomes an OpenTelemetry span; a launch's trace
//! runs from its request through placement to the agent task row, which carries it on to the
//! dispatcher and the agent ([`control_plane::trace_context`]).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use otel::export::Traces;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::config::{Config, LogFormat};
use crate::error::ServerError;

/// The service name traces carry unless `OTEL_SERVICE_NAME` says otherwise.
pub const SERVICE_NAME: &str = "gpuaas-portal";

/// Keeps the trace exporter; [`Telemetry::shutdown`] sends what is still buffered.
#[must_use = "dropping it without shutdown loses the last spans"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn traces_on(&self) -> bool {
        self.provider.is_some()
    }

    /// Sends the spans still buffered, now (tests read them back at once).
    pub fn flush(&self) {
        if let Some(p) = &self.provider
            && let Err(e) = p.force_flush()
        {
            tracing::warn!(error.cause = %e, "flushing traces failed");
        }
    }

    /// Sends what is buffered and stops the exporter's thread.
    pub fn shutdown(self) {
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            eprintln!("server: flushing traces at exit failed: {e}");
        }
    }
}

/// From the configuration and the `OTEL_*` environment.
pub fn init(config: &Config) -> Result<Telemetry, ServerError> {
    let traces = Traces::from_env().map_err(ServerError::Config)?;
    init_with(&config.log_filter, config.log_format, &traces)
}

/// Installs the process's subscriber: the filter, log lines in `format`, and spans exported
/// as `traces` says. A second call (tests) keeps the first subscriber.
pub fn init_with(
    filter: &str,
    format: LogFormat,
    traces: &Traces,
) -> Result<Telemetry, ServerError> {
    let filter = EnvFilter::try_new(filter)
        .map_err(|e| ServerError::Config(format!("RUST_LOG {filter:?}: {e}")))?;
    let provider = otel::export::provider(traces, SERVICE_NAME).map_err(ServerError::Config)?;
    let spans = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer(SERVICE_NAME))
            .with_tracked_inactivity(false)
    });
    let lines = tracing_subscriber::fmt::layer()
        .with_target(true)
        // Colour only for people: files and log shippers get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    let lines = match format {
        LogFormat::Pretty => lines.boxed(),
        LogFormat::Json => lines
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .boxed(),
    };
    // A second init (tests) is harmless.
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(lines)
        .with(spans)
        .try_init();
    Ok(Telemetry { provider })
}
