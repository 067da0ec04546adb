//! `/healthz` (the process is alive) and `/readyz` (it can do useful work: the database
//! answers, every migration this build knows is applied, and it is not shutting down).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use control_plane::ControlPlane;
use control_plane::health::Readiness;
use serde_json::{Value, json};

pub async fn healthz() -> (StatusCode, Json<Value>) {
    (StatusCode::OK, Json(json!({ "status": "alive" })))
}

/// Set once a shutdown has begun: `/readyz` turns false while requests are still served.
#[derive(Clone, Debug, Default)]
pub struct Draining(Arc<AtomicBool>);

impl Draining {
    pub fn start(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

#[tracing::instrument(skip_all)]
pub async fn readyz(
    State(cp): State<ControlPlane>,
    State(draining): State<Draining>,
) -> (StatusCode, Json<Value>) {
    if draining.is_draining() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "shutting_down" })),
        );
    }
    match cp.readiness().await {
        Readiness::Ready { migrations } => (
            StatusCode::OK,
            Json(json!({ "status": "ready", "migrations": migrations })),
        ),
        Readiness::DatabaseUnavailable(cause) => {
            // The cause (host names, auth errors) is for the log, not for the prober.
            tracing::warn!(error.cause = %cause, "not ready: database unavailable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({ "status": "database_unavailable" })),
            )
        }
        Readiness::MigrationsPending { applied, expected } => {
            tracing::warn!(
                migrations.applied = applied,
                migrations.expected = expected,
                "not ready: migrations pending"
            );
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({
                    "status": "migrations_pending",
                    "applied": applied,
                    "expected": expected,
                })),
            )
        }
    }
}
