//! Files the browser saves (CSV exports): plain HTTP routes, not server functions, because the
//! browser keeps the response as a file. Each answers for the signed-in session, through the
//! same proofs as the page it is exported from.

use app::AppError;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use control_plane::prelude::*;
use tower_sessions::Session;

use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route("/audit/export.csv", get(audit_csv))
}

/// A refusal as plain text, with the status of the one mapping (`AppError::status`).
pub(crate) fn refusal(e: AppError) -> Response {
    crate::error_status::plain_response(&e)
}

/// `body` as a CSV attachment named `name`, or its refusal.
pub(crate) fn csv<E: Into<AppError>>(name: &str, body: Result<String, E>) -> Response {
    match body {
        Ok(text) => (
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
                (
                    header::CONTENT_DISPOSITION,
                    format!("attachment; filename=\"{name}\""),
                ),
            ],
            text,
        )
            .into_response(),
        Err(e) => refusal(e.into()),
    }
}

/// The signed-in person, or the refusal a page would give.
pub(crate) async fn signed_in(
    app: &AppState,
    session: &Session,
) -> Result<control_plane::auth::Principal, Response> {
    app::server::principal_of(session, &app.cp, &app.web.session)
        .await
        .map_err(refusal)?
        .ok_or_else(|| refusal(AppError::Unauthenticated))
}

/// The audit log's records the page would show for the same filter (one page of them), as
/// CSV: a line per changed field.
#[tracing::instrument(skip_all)]
async fn audit_csv(
    State(app): State<AppState>,
    session: Session,
    Query(q): Query<app::audit::AuditQuery>,
) -> Response {
    let principal = match signed_in(&app, &session).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let lines = async {
        let (scope, _) = app::audit::scope_of(&app.cp, &principal).await?;
        let filter = app::audit::filter_of(q)?;
        Ok::<_, AppError>(app.cp.audit_search(&scope, &filter).await?)
    }
    .await;
    csv(
        "audit.csv",
        lines.map(|l| control_plane::audit_log::audit_csv(&l)),
    )
}
