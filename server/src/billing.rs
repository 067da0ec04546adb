//! Billing's plain HTTP routes: Stripe's webhook (a machine with a signature, no session) and
//! the CSV exports (a download for the signed-in finance user; not a server function because
//! the browser saves the response as a file).

use control_plane::prelude::*;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use control_plane::Error;
use control_plane::billing::reports::TenantFinance;
use control_plane::tenancy::Tenant;
use serde::Deserialize;
use tower_sessions::Session;

use crate::AppState;
use crate::downloads::{csv, refusal};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/stripe/webhook", post(webhook))
        .route("/billing/export/usage.csv", get(usage_csv))
        .route("/billing/export/invoices/{id}/lines.csv", get(invoice_csv))
}

/// 200 once the event is stored (a duplicate too: Stripe must stop retrying); 400 for a bad
/// signature or an old timestamp; 503 when Stripe isn't configured here; otherwise what the
/// one mapping says (Stripe retries whatever is not a 2xx).
#[tracing::instrument(skip_all)]
async fn webhook(State(app): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if !app.cp.stripe_configured() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "Stripe is not configured on this portal (STRIPE_SECRET_KEY, STRIPE_WEBHOOK_SECRET)",
        )
            .into_response();
    }
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
        Err(e) => {
            if let Error::Invalid { field, reason } = &e {
                tracing::warn!(webhook.field = field, webhook.reason = %reason, "Stripe webhook refused");
            }
            crate::error_status::domain_response(e, &headers)
        }
    }
}

/// The signed-in user's organization, if they may see its money.
async fn finance(app: &AppState, session: &Session) -> Result<Tenant<TenantFinance>, Response> {
    let principal = crate::downloads::signed_in(app, session).await?;
    let (who, _) = app::server::home_tenant::<TenantFinance>(&app.cp, &principal)
        .await
        .map_err(refusal)?;
    Ok(who)
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
    Path(id): Path<control_plane::InvoiceId>,
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
