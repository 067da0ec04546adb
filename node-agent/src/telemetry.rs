//! The guest telemetry sink: a host-only HTTP endpoint on the slot network where each guest
//! posts its GPU utilisation with the token its cloud-init seed carried. A token names exactly
//! one running allocation on this host; anything else is refused. There is nothing to read:
//! the sink has one route, `POST /v1/gpu`, and answers 204 or an error, so a tenant learns
//! nothing about the host or other guests. The agent forwards per-allocation means with its
//! next heartbeat.
//!
//! Requests are unauthenticated until their token is checked, so checking is cheap and bounded:
//! tokens are known in memory, read again from the leases at most once every
//! [`REREAD_EVERY`] (a flood of bad tokens costs no more reads than one), and at most
//! [`AT_ONCE`] requests are handled at a time (more are answered 503 at once).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agent_protocol::GpuUtilisation;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde::Deserialize;

use crate::agent::Agent;

/// Sums per allocation since the last heartbeat.
#[derive(Default)]
pub struct Aggregator {
    sums: Mutex<HashMap<String, (u64, u32)>>,
}

impl Aggregator {
    pub fn add(&self, allocation: &str, pct: u8) {
        let mut sums = self.sums.lock().unwrap_or_else(|p| p.into_inner());
        let e = sums.entry(allocation.to_string()).or_default();
        e.0 += u64::from(pct);
        e.1 += 1;
    }

    /// The means since the last drain, and resets.
    pub fn drain(&self) -> Vec<GpuUtilisation> {
        let mut sums = self.sums.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<GpuUtilisation> = sums
            .drain()
            .filter(|(_, (_, n))| *n > 0)
            .map(|(allocation_id, (sum, n))| GpuUtilisation {
                allocation_id,
                gpu_util_pct: (sum as f64 / f64::from(n)).round().min(100.0) as u8,
                samples: n,
            })
            .collect();
        out.sort_by(|a, b| a.allocation_id.cmp(&b.allocation_id));
        out
    }
}

/// How long the running allocations' tokens are known before the leases are read again.
pub const REREAD_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Requests handled at once.
pub const AT_ONCE: usize = 16;

#[derive(Clone)]
struct Sink {
    agent: Arc<Agent>,
    totals: Arc<Aggregator>,
    tokens: Arc<Tokens>,
    at_once: Arc<tokio::sync::Semaphore>,
}

/// (telemetry token, allocation) for each running allocation.
type Known = Arc<Vec<(String, String)>>;

/// The running allocations' telemetry tokens, and when they were read.
#[derive(Default)]
struct Tokens {
    read: tokio::sync::Mutex<(Option<std::time::Instant>, Known)>,
}

impl Tokens {
    /// The allocation `token` belongs to, reading the leases again only when what is known is
    /// older than [`REREAD_EVERY`] (one reader at a time; the others wait for its answer).
    async fn allocation(&self, agent: &Arc<Agent>, token: &str) -> Option<String> {
        let known = {
            let mut read = self.read.lock().await;
            if read.0.is_none_or(|at| at.elapsed() >= REREAD_EVERY) {
                let a = agent.clone();
                let fresh = tokio::task::spawn_blocking(move || a.telemetry_tokens())
                    .await
                    .unwrap_or_default();
                *read = (Some(std::time::Instant::now()), Arc::new(fresh));
            }
            read.1.clone()
        };
        crate::agent::find_token(&known, token)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuReport {
    /// One figure per GPU the guest sees, 0–100.
    gpu_util_pct: Vec<u8>,
}

async fn gpu(
    State(sink): State<Sink>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> (StatusCode, String) {
    let Ok(_turn) = sink.at_once.clone().try_acquire_owned() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "busy; try again\n".into());
    };
    let token = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .trim();
    let Some(allocation) = sink.tokens.allocation(&sink.agent, token).await else {
        return (StatusCode::UNAUTHORIZED, "unknown telemetry token\n".into());
    };
    let report: GpuReport = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("bad report: {e}\n")),
    };
    if report.gpu_util_pct.is_empty() || report.gpu_util_pct.iter().any(|&p| p > 100) {
        return (
            StatusCode::BAD_REQUEST,
            "gpu_util_pct needs one figure per GPU, each 0–100\n".into(),
        );
    }
    let mean = report
        .gpu_util_pct
        .iter()
        .map(|&p| u32::from(p))
        .sum::<u32>()
        / report.gpu_util_pct.len() as u32;
    sink.totals.add(&allocation, mean as u8);
    (StatusCode::NO_CONTENT, String::new())
}

pub fn router(agent: Arc<Agent>, totals: Arc<Aggregator>) -> Router {
    Router::new().route("/v1/gpu", post(gpu)).with_state(Sink {
        agent,
        totals,
        tokens: Default::default(),
        at_once: Arc::new(tokio::sync::Semaphore::new(AT_ONCE)),
    })
}

/// The guests of a simulated host: every `every`, each running allocation posts a GPU
/// utilisation figure to the sink at `url` with its own token, as its guest's reporter would
/// (the figures wander between 35 and 95%). Runs until aborted.
pub async fn simulate_guests(agent: Arc<Agent>, url: String, every: std::time::Duration) {
    let http = reqwest::Client::new();
    let mut tick: u64 = 0;
    loop {
        tokio::time::sleep(every).await;
        tick += 1;
        let a = agent.clone();
        let leases = tokio::task::spawn_blocking(move || a.leases.all().unwrap_or_default())
            .await
            .unwrap_or_default();
        let mut seen = std::collections::HashSet::new();
        for l in leases {
            if l.kind != crate::lease::LeaseKind::Provision
                || l.phase != "running"
                || !seen.insert(l.allocation_id.clone())
            {
                continue;
            }
            let wobble = l
                .allocation_id
                .bytes()
                .fold(tick, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
            let pct = 35 + (wobble % 61) as u8;
            let _ = http
                .post(&url)
                .bearer_auth(&l.telemetry_token)
                .header("content-type", "application/json")
                .body(format!(r#"{{"gpu_util_pct":[{pct}]}}"#))
                .send()
                .await;
        }
    }
}
