//! Refuses state-changing requests that come from another origin (CSRF defence).
//!
//! Every method other than GET, HEAD and OPTIONS must carry an `Origin` (or, failing that, a
//! `Referer`) of the portal's own public origin. Browsers send `Origin` on every POST, form
//! posts included, so legitimate pages pass; a page on another site cannot forge it. The
//! machine endpoints (node agents, Stripe) and the public API (bearer tokens only, never the
//! session cookie) authenticate otherwise, so a forged cross-site request carries nothing.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Paths whose callers are machines with their own credentials. The public API is `/api/v1/`
/// exactly: server functions live under `/api/` too, and they are the browser's, so they keep
/// the check.
const MACHINE_PREFIXES: &[&str] = &["/agent/", "/stripe/", "/api/v1/"];

pub async fn same_origin_only(
    State(origin): State<Arc<str>>,
    req: Request,
    next: Next,
) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        || MACHINE_PREFIXES
            .iter()
            .any(|p| req.uri().path().starts_with(p))
    {
        return next.run(req).await;
    }
    let headers = req.headers();
    let allowed = match headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        Some(o) => o.eq_ignore_ascii_case(&origin),
        None => headers
            .get(header::REFERER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|r| {
                r.eq_ignore_ascii_case(&origin)
                    || r.to_ascii_lowercase().starts_with(&format!("{origin}/"))
            }),
    };
    if allowed {
        next.run(req).await
    } else {
        tracing::warn!(
            http.origin = headers
                .get(header::ORIGIN)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-"),
            "refused a cross-origin request"
        );
        (
            StatusCode::FORBIDDEN,
            "Refused: this request did not come from the portal's own pages (Origin check).",
        )
            .into_response()
    }
}
