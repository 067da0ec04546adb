//! Gives a server function's error response the status its error means.
//!
//! `server_fn` answers every error with 500 and a `serverfnerror` header, whatever the error
//! was; a refusal would then read as "the server is broken" to monitoring, proxies and API
//! clients. This layer decodes the error (our `AppError`, JSON-encoded) and sets the status
//! from [`AppError::status`], the one mapping. The body, and so the sentence a form shows, is
//! unchanged. Refusals are logged at info; our own faults were already logged with their
//! cause where they happened, and keep their 500.

use app::AppError;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// An encoded `AppError` is a sentence or two; anything longer is passed on untouched.
const MAX_ERROR_BODY: usize = 64 * 1024;

pub async fn status_from_app_error(req: Request, next: Next) -> Response {
    let res = next.run(req).await;
    // Plain form posts are answered with a redirect back to the form (the error in its URL);
    // only the fetch-style answer carries the error with a 500.
    if res.status() != StatusCode::INTERNAL_SERVER_ERROR
        || !res.headers().contains_key("serverfnerror")
    {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_ERROR_BODY).await else {
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::empty());
    };
    if let Ok(error) = serde_json::from_slice::<AppError>(&bytes) {
        let status = StatusCode::from_u16(error.status()).unwrap_or(parts.status);
        parts.status = status;
        if let Some(secs) = error.retry_after_secs() {
            parts
                .headers
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if error.is_refusal() {
            tracing::info!(http.status = status.as_u16(), refusal = %error, "refused");
        }
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// A control-plane error as a plain-text answer for a route that is neither a server function
/// nor the API (Stripe's webhook, logos, CSV downloads), through the one mapping; a fault is
/// logged under the request's `x-request-id`.
pub fn domain_response(e: control_plane::Error, headers: &axum::http::HeaderMap) -> Response {
    let request_id = || {
        headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("unknown")
            .to_owned()
    };
    plain_response(&AppError::from_domain(e, request_id))
}

/// An `AppError` as a plain-text answer for the few routes that are not server functions (CSV
/// downloads): the same status, the same sentence.
pub fn plain_response(error: &AppError) -> Response {
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut res = (status, error.to_string()).into_response();
    if let Some(secs) = error.retry_after_secs() {
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    res
}
