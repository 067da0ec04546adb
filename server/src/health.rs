//! `/healthz` (the process is alive) and `/readyz` (it can do useful work: the database
//! answers and every migration this build knows is applied).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use control_plane::ControlPlane;
use control_plane::health::Readiness;
use serde_json::{Value, json};

pub async fn healthz() -> (StatusCode, Json<Value>) {
    (StatusCode::OK, Json(json!({ "status": "alive" })))
}

#[tracing::instrument(skip_all)]
pub async fn readyz(State(cp): State<ControlPlane>) -> (StatusCode, Json<Value>) {
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
