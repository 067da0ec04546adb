//! `/metrics` in Prometheus's text format: HTTP requests by route and status with their
//! duration, the control plane's counters (launches by outcome and refusal reason, dispatch
//! lag, tasks, Stripe), the database pool, and the system's state read at scrape time
//! (`OpsApi::ops_gauges`: queues, slots, allocations, agents' heartbeats, rating lag, Stripe).
//!
//! Not public. It is served on its own listener (`PORTAL_METRICS_ADDR`, loopback by default),
//! where callers off loopback must send the scrape token, and on the public listener only to a
//! caller with the scrape token (`PORTAL_METRICS_TOKEN`); there, without one, it is a 404 like
//! any unknown path. The public listener never trusts the peer address: behind a reverse proxy
//! every caller would look like loopback.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, MatchedPath, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use control_plane::ControlPlane;
use control_plane::prelude::*;
use http::{HeaderMap, Request, StatusCode, header};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    /// `http.request.method`, from an allowlist (`_OTHER` for the rest, as OpenTelemetry says).
    method: &'static str,
    /// The route template (`/api/v1/instances/{id}`), never the path itself; `unmatched` for
    /// paths no route has (static files, unknown paths).
    route: String,
    status: u16,
}

/// What the server itself counts, and who may read it all.
#[derive(Clone)]
pub struct ServerMetrics {
    http: Family<HttpLabels, Histogram>,
    cp: ControlPlane,
    token: Option<Arc<str>>,
}

impl ServerMetrics {
    pub fn new(cp: ControlPlane, token: Option<&str>) -> Self {
        Self {
            http: Family::new_with_constructor(|| {
                Histogram::new([
                    0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                ])
            }),
            cp,
            token: token.filter(|t| !t.is_empty()).map(Arc::from),
        }
    }

    /// Whether the request carries the scrape token.
    fn has_token(&self, headers: &HeaderMap) -> bool {
        let sent = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        self.token
            .as_deref()
            .is_some_and(|t| agent_protocol::scrape::bearer_matches(sent, t))
    }

    /// The whole exposition, as of now.
    pub async fn render(&self) -> Result<String, control_plane::Error> {
        let gauges = self.cp.ops_gauges().await?;
        let mut r = Registry::default();
        r.register_with_unit(
            "http_server_request_duration",
            "HTTP requests served, by method, route template and status",
            Unit::Seconds,
            self.http.clone(),
        );
        self.cp.metrics().register(&mut r);
        state_gauges(&mut r, &gauges);
        let pool = self.cp.pool();
        let conns = Family::<StateLabel, Gauge>::default();
        let (in_use, idle) = pool.connections();
        conns
            .get_or_create(&StateLabel {
                state: "idle".into(),
            })
            .set(idle as i64);
        conns
            .get_or_create(&StateLabel {
                state: "in_use".into(),
            })
            .set(in_use as i64);
        r.register(
            "gpuaas_db_pool_connections",
            "Database connections of this server, by state",
            conns,
        );
        let max: Gauge = Gauge::default();
        max.set(pool.max_connections() as i64);
        r.register(
            "gpuaas_db_pool_max_connections",
            "The most database connections this server opens",
            max,
        );
        let mut out = String::new();
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &r);
        Ok(out)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: String,
}

fn gauge(r: &mut Registry, name: &str, help: &str, v: i64) {
    let g: Gauge = Gauge::default();
    g.set(v);
    r.register(name, help, g);
}

fn seconds(r: &mut Registry, name: &str, help: &str, v: f64) {
    let g: Gauge<f64, AtomicU64> = Gauge::default();
    g.set(v);
    r.register_with_unit(name, help, Unit::Seconds, g);
}

fn by_state(r: &mut Registry, name: &str, help: &str, rows: &[(String, i64)], all: &[&str]) {
    let f = Family::<StateLabel, Gauge>::default();
    // Every state is present (0 when none), so a series doesn't vanish when it empties.
    for s in all {
        f.get_or_create(&StateLabel {
            state: (*s).to_string(),
        })
        .set(0);
    }
    for (s, n) in rows {
        f.get_or_create(&StateLabel { state: s.clone() }).set(*n);
    }
    r.register(name, help, f);
}

fn state_gauges(r: &mut Registry, g: &control_plane::ops::OpsGauges) {
    gauge(
        r,
        "gpuaas_outbox_pending",
        "Outbox rows not yet dispatched",
        g.outbox_pending,
    );
    seconds(
        r,
        "gpuaas_outbox_oldest_age",
        "How long the oldest undispatched outbox row has waited",
        g.outbox_oldest_s,
    );
    gauge(
        r,
        "gpuaas_agent_tasks_queued",
        "Agent tasks waiting for their agent to claim them",
        g.tasks_queued,
    );
    seconds(
        r,
        "gpuaas_agent_tasks_queued_oldest_age",
        "How long the oldest queued agent task has waited",
        g.tasks_queued_oldest_s,
    );
    gauge(
        r,
        "gpuaas_agent_tasks_running",
        "Agent tasks claimed and not finished",
        g.tasks_running,
    );
    gauge(
        r,
        "gpuaas_agent_tasks_stuck",
        "Agent tasks claimed more than 30 minutes ago and not finished",
        g.tasks_stuck,
    );
    by_state(
        r,
        "gpuaas_allocations",
        "Allocations not yet released, by lifecycle state",
        &g.allocations,
        &[
            "requested",
            "placed",
            "provisioning",
            "running",
            "releasing",
            "cleaning",
        ],
    );
    let findings = Family::<KindLabel, Gauge>::default();
    for kind in control_plane::reconcile::FINDING_KINDS {
        findings
            .get_or_create(&KindLabel { kind: kind.into() })
            .set(0);
    }
    for (kind, n) in &g.reconciliation_open {
        findings
            .get_or_create(&KindLabel { kind: kind.clone() })
            .set(*n);
    }
    r.register(
        "gpuaas_reconciliation_findings",
        "Open reconciliation findings (differences the control plane could not explain), by kind",
        findings,
    );
    by_state(
        r,
        "gpuaas_slots",
        "Approved slots, by state",
        &g.slots,
        &[
            "free",
            "claimed",
            "cleaning",
            "blocked",
            "out_of_service",
            "drifted",
        ],
    );
    let beats = Family::<NodeLabel, Gauge<f64, AtomicU64>>::default();
    for (node, age) in &g.heartbeat_age_s {
        beats
            .get_or_create(&NodeLabel { node: node.clone() })
            .set(*age);
    }
    r.register_with_unit(
        "gpuaas_agent_heartbeat_age",
        "Time since each node's agent was last heard from",
        Unit::Seconds,
        beats,
    );
    seconds(
        r,
        "gpuaas_rating_lag",
        "How long the oldest usage period that is over has waited to be rated",
        g.rating_lag_s,
    );
    gauge(
        r,
        "gpuaas_stripe_sync_pending",
        "Invoices and credit notes waiting to be synced to Stripe",
        g.stripe_pending,
    );
    gauge(
        r,
        "gpuaas_stripe_sync_failing",
        "Stripe syncs whose last attempt failed",
        g.stripe_failing,
    );
    seconds(
        r,
        "gpuaas_stripe_sync_oldest_age",
        "How long the oldest pending Stripe sync has waited",
        g.stripe_oldest_s,
    );
    gauge(
        r,
        "gpuaas_stripe_webhook_backlog",
        "Stripe webhook events received and not yet applied",
        g.webhook_backlog,
    );
}

/// A request's method and route template as labels and span names: a bounded set (the
/// methods HTTP names, `_OTHER` for the rest; the router's templates, `unmatched` for the
/// rest), never the path a client typed.
pub fn method_and_route<B>(req: &Request<B>) -> (&'static str, String) {
    let method = match req.method().as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "_OTHER",
    };
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    (method, route)
}

/// The middleware that times every request of the public router.
pub async fn record(State(m): State<ServerMetrics>, req: Request<Body>, next: Next) -> Response {
    let started = Instant::now();
    let (method, route) = method_and_route(&req);
    let res = next.run(req).await;
    m.http
        .get_or_create(&HttpLabels {
            method,
            route,
            status: res.status().as_u16(),
        })
        .observe(started.elapsed().as_secs_f64());
    res
}

async fn exposition(m: &ServerMetrics) -> Response {
    match m.render().await {
        Ok(body) => (
            [(
                header::CONTENT_TYPE,
                prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            )],
            body,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error.cause = %e, "metrics: reading the database failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the database is not answering\n",
            )
                .into_response()
        }
    }
}

/// `/metrics` on the public listener: only with the scrape token; a 404 otherwise.
pub async fn public(State(m): State<ServerMetrics>, headers: HeaderMap) -> Response {
    if !m.has_token(&headers) {
        return StatusCode::NOT_FOUND.into_response();
    }
    exposition(&m).await
}

async fn private(
    State(m): State<ServerMetrics>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if !peer.ip().is_loopback() && !m.has_token(&headers) {
        return (
            StatusCode::FORBIDDEN,
            "metrics answer loopback, or a caller with the scrape token\n",
        )
            .into_response();
    }
    exposition(&m).await
}

/// The metrics listener's router (serve it with connect info).
pub fn listener_router(m: ServerMetrics) -> Router {
    Router::new().route("/metrics", get(private)).with_state(m)
}
