//! Billing's plain HTTP routes: Stripe's webhook (a machine with a signature, no session) and
//! the CSV exports (a download for the signed-in finance user; not a server function because
//! the browser saves the response as a file).

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use control_plane::Error;
use control_plane::billing::reports::TenantFinance;
use serde::Deserialize;
use tower_sessions::Session;

use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/stripe/webhook", post(webhook))
        .route("/billing/export/usage.csv", get(usage_csv))
        .route("/billing/export/invoices/{id}/lines.csv", get(invoice_csv))
}

/// 200 once the event is stored (a duplicate too: Stripe must stop retrying); 400 for a bad
/// signature or an old timestamp; 503 when Stripe isn't configured; 500 (logged) otherwise,
/// so Stripe retries.
#[tracing::instrument(skip_all)]
async fn webhook(State(app): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(signature) = headers
        .get("stripe-signature")
        .and_then(|v| v.to_str().ok())
    else {
        return (StatusCode::BAD_REQUEST, "missing Stripe-Signature header").into_response();
    };
    let Ok(payload) = std::str::from_utf8(&body) else {
        return (StatusCode::BAD_REQUEST, "the body is not UTF-8").into_response();
    };
    match app.cp.stripe_webhook(payload, signature).await {
        Ok(outcome) => axum::Json(outcome).into_response(),
        Err(Error::Invalid { field, reason }) => {
            tracing::warn!(webhook.field = field, webhook.reason = %reason, "Stripe webhook refused");
            (
                StatusCode::BAD_REQUEST,
                format!("invalid {field}: {reason}"),
            )
                .into_response()
        }
        Err(e) => {
            tracing::error!(error.cause = %e, "Stripe webhook failed; Stripe will retry");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

async fn finance(
    app: &AppState,
    session: &Session,
) -> Result<control_plane::tenancy::Tenant<TenantFinance>, Response> {
    let refuse = |s: StatusCode, m: &str| (s, m.to_string()).into_response();
    let principal = app::server::principal_of(session, &app.cp, &app.web.session)
        .await
        .map_err(|_| refuse(StatusCode::INTERNAL_SERVER_ERROR, "internal error"))?
        .ok_or_else(|| refuse(StatusCode::UNAUTHORIZED, "sign in to export billing data"))?;
    let tenant = app
        .cp
        .tenants_of(&principal)
        .await
        .map_err(|_| refuse(StatusCode::INTERNAL_SERVER_ERROR, "internal error"))?
        .into_iter()
        .next()
        .ok_or_else(|| refuse(StatusCode::FORBIDDEN, "you don't belong to an organization"))?;
    app.cp
        .tenant_access::<TenantFinance>(&principal, tenant.0)
        .await
        .map_err(|e| refuse(StatusCode::FORBIDDEN, &e.to_string()))
}

fn csv(name: &str, body: Result<String, Error>) -> Response {
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
        Err(Error::NotFound { what }) => {
            (StatusCode::NOT_FOUND, format!("{what} not found")).into_response()
        }
        Err(Error::Invalid { field, reason }) => (
            StatusCode::BAD_REQUEST,
            format!("invalid {field}: {reason}"),
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error.cause = %e, "CSV export failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
        }
    }
}

#[derive(Deserialize)]
struct MonthQuery {
    month: String,
}

#[tracing::instrument(skip_all, fields(billing.month = %q.month))]
async fn usage_csv(
    State(app): State<AppState>,
    session: Session,
    Query(q): Query<MonthQuery>,
) -> Response {
    let who = match finance(&app, &session).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let name = format!(
        "usage-{}.csv",
        q.month
            .chars()
            .filter(|c| c.is_ascii_digit() || *c == '-')
            .collect::<String>()
    );
    csv(&name, app.cp.usage_csv(&who, &q.month).await)
}

#[tracing::instrument(skip_all, fields(invoice.id = %id))]
async fn invoice_csv(
    State(app): State<AppState>,
    session: Session,
    Path(id): Path<uuid::Uuid>,
) -> Response {
    let who = match finance(&app, &session).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    csv(
        &format!("invoice-{id}.csv"),
        app.cp.invoice_csv(&who, id).await,
    )
}
