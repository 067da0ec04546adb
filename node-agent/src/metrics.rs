//! The agent's `/metrics` (Prometheus text format): phase durations, task failures, leases
//! held, and each GPU's health figures and XID errors. Labels are a phase or task kind (fixed
//! by this code), a GPU's PCI address (bounded by the host) and an XID number (1–999).
//!
//! It listens on its own address (loopback by default). A caller that is not on loopback must
//! send the scrape token; without a configured token only loopback may scrape.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use axum::Router;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::agent::Agent;
use crate::gpu_health::Watch;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabel {
    gpu: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EccLabel {
    gpu: String,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct XidLabel {
    gpu: String,
    xid: String,
}

/// What the agent counts while it works.
#[derive(Clone, Debug)]
pub struct AgentMetrics {
    phases: Family<PhaseLabel, Histogram>,
    task_failures: Family<KindLabel, Counter>,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        Self {
            // 10 ms to ~11 minutes: a lease is milliseconds, a wipe minutes.
            phases: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.01, 4.0, 11))
            }),
            task_failures: Family::default(),
        }
    }
}

impl AgentMetrics {
    /// A phase ended (`succeeded` or `failed`) after `seconds`. Phase names are the agent's own.
    pub fn phase_ended(&self, phase: &str, succeeded: bool, seconds: f64) {
        let phase: String = phase
            .chars()
            .filter(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
            .take(63)
            .collect();
        self.phases
            .get_or_create(&PhaseLabel {
                phase,
                outcome: if succeeded { "succeeded" } else { "failed" },
            })
            .observe(seconds);
    }

    pub fn task_failed(&self, kind: &'static str) {
        self.task_failures.get_or_create(&KindLabel { kind }).inc();
    }
}

/// Everything `/metrics` reads.
#[derive(Clone)]
pub struct Scrape {
    pub agent: Arc<Agent>,
    pub metrics: AgentMetrics,
    pub health: Arc<Watch>,
    /// Callers off loopback must send this (see the module docs).
    pub token: Option<String>,
}

/// The whole exposition, as of now.
pub fn render(s: &Scrape) -> String {
    let mut r = Registry::default();
    r.register_with_unit(
        "gpuaas_agent_phase_duration",
        "Time a task phase took on this host, by phase and outcome",
        Unit::Seconds,
        s.metrics.phases.clone(),
    );
    r.register(
        "gpuaas_agent_task_failures",
        "Tasks that failed on this host, by kind",
        s.metrics.task_failures.clone(),
    );
    let leases: Gauge = Gauge::default();
    leases.set(s.agent.leases.all().map(|l| l.len()).unwrap_or(0) as i64);
    r.register(
        "gpuaas_agent_leases",
        "Slot leases this agent holds (a slot being provisioned, leased or released)",
        leases,
    );
    let pending: Gauge = Gauge::default();
    pending.set(s.health.pending().len() as i64);
    r.register(
        "gpuaas_agent_gpu_events_pending",
        "GPU health events not yet acknowledged by the control plane",
        pending,
    );

    let util = Family::<GpuLabel, Gauge<f64, AtomicU64>>::default();
    let mem = Family::<GpuLabel, Gauge<f64, AtomicU64>>::default();
    let temp = Family::<GpuLabel, Gauge<f64, AtomicU64>>::default();
    let power = Family::<GpuLabel, Gauge<f64, AtomicU64>>::default();
    let slowdown = Family::<GpuLabel, Gauge>::default();
    let ecc = Family::<EccLabel, Counter>::default();
    for g in s.health.samples() {
        let gpu = GpuLabel {
            gpu: g.pci_address.clone(),
        };
        if let Some(v) = g.utilization_pct {
            util.get_or_create(&gpu).set(v / 100.0);
        }
        if let Some(v) = g.memory_used_mib {
            mem.get_or_create(&gpu).set(v * 1024.0 * 1024.0);
        }
        if let Some(v) = g.temperature_c {
            temp.get_or_create(&gpu).set(v);
        }
        if let Some(v) = g.power_w {
            power.get_or_create(&gpu).set(v);
        }
        if let Some(v) = g.thermal_slowdown {
            slowdown.get_or_create(&gpu).set(i64::from(v));
        }
        for (t, v) in [
            ("corrected", g.ecc_corrected),
            ("uncorrected", g.ecc_uncorrected),
        ] {
            if let Some(v) = v {
                ecc.get_or_create(&EccLabel {
                    gpu: g.pci_address.clone(),
                    r#type: t,
                })
                .inc_by(v);
            }
        }
    }
    r.register(
        "gpuaas_gpu_utilization_ratio",
        "GPU utilisation as nvidia-smi reports it (0–1)",
        util,
    );
    r.register_with_unit(
        "gpuaas_gpu_memory_used",
        "GPU memory in use",
        Unit::Bytes,
        mem,
    );
    r.register_with_unit(
        "gpuaas_gpu_temperature",
        "GPU core temperature",
        Unit::Celsius,
        temp,
    );
    r.register_with_unit(
        "gpuaas_gpu_power",
        "GPU power draw",
        Unit::Other("watts".into()),
        power,
    );
    r.register(
        "gpuaas_gpu_thermal_slowdown",
        "1 while the GPU's hardware thermal slowdown is active",
        slowdown,
    );
    r.register(
        "gpuaas_gpu_ecc_errors",
        "ECC errors since the driver loaded (volatile counts), by type",
        ecc,
    );
    let xids = Family::<XidLabel, Counter>::default();
    for ((gpu, xid), n) in s.health.xid_counts() {
        xids.get_or_create(&XidLabel {
            gpu,
            xid: xid.to_string(),
        })
        .inc_by(n);
    }
    r.register(
        "gpuaas_gpu_xid_errors",
        "XID errors the NVIDIA driver logged since the agent started, by number",
        xids,
    );
    let mut out = String::new();
    // Writing to a String can't fail.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &r);
    out
}

/// Whether a caller may scrape: loopback always; anyone else with the token, and nobody else
/// when no token is configured.
pub fn scrape_allowed(peer: std::net::IpAddr, headers: &HeaderMap, token: Option<&str>) -> bool {
    if peer.is_loopback() {
        return true;
    }
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    token.is_some_and(|t| agent_protocol::scrape::bearer_matches(sent, t))
}

async fn metrics(
    State(s): State<Scrape>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if !scrape_allowed(peer.ip(), &headers, s.token.as_deref()) {
        return (StatusCode::FORBIDDEN, "a scrape token is required\n").into_response();
    }
    let body = tokio::task::spawn_blocking(move || render(&s))
        .await
        .unwrap_or_default();
    (
        [(
            header::CONTENT_TYPE,
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        )],
        body,
    )
        .into_response()
}

/// `GET /metrics` (serve with `into_make_service_with_connect_info::<SocketAddr>()`).
pub fn router(scrape: Scrape) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(scrape)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_or_the_token_may_scrape() {
        let lo: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        let far: std::net::IpAddr = "10.0.0.9".parse().unwrap();
        let mut with = HeaderMap::new();
        with.insert(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        let mut wrong = HeaderMap::new();
        wrong.insert(header::AUTHORIZATION, "Bearer s3cres".parse().unwrap());
        let none = HeaderMap::new();
        assert!(scrape_allowed(lo, &none, None));
        assert!(!scrape_allowed(far, &none, None));
        assert!(!scrape_allowed(far, &with, None), "no token configured");
        assert!(!scrape_allowed(far, &none, Some("s3cret")));
        assert!(!scrape_allowed(far, &wrong, Some("s3cret")));
        assert!(scrape_allowed(far, &with, Some("s3cret")));
        assert!(!scrape_allowed(far, &with, Some("")));
    }
}
