//! Headers every response carries, whatever produced it (pages, server functions, the agent
//! and Stripe endpoints, static files, errors): no MIME sniffing, never framed (clickjacking),
//! no full URL in the `Referer` sent elsewhere, no plugins or `<base>` tricks, and HSTS when the
//! portal is served over HTTPS. A handler that sets one of these itself keeps its own (the
//! marketplace logos their sandbox). The script policy is this layer's: it makes each request's
//! nonce ([`PageNonce`], which the render's scripts carry), and an HTML answer gets
//! [`app::csp::page_policy`] with it, every other answer [`app::csp::NO_SCRIPTS`].

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http::HeaderValue;
use http::header::{
    CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, STRICT_TRANSPORT_SECURITY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};

/// Whether the public URL is HTTPS (HSTS is sent only then: over plain HTTP it means nothing,
/// and on a loopback dev server it would pin the browser to HTTPS for a year).
#[derive(Clone, Copy, Debug)]
pub struct Https(pub bool);

/// This request's script nonce: a v4 UUID's 122 random bits, fresh for every request. The
/// render gets it from the request's extensions ([`crate::router`]'s context gives it to
/// `leptos::nonce`).
#[derive(Clone, Debug)]
pub struct PageNonce(pub Arc<str>);

pub async fn security_headers(
    State(Https(https)): State<Https>,
    mut req: Request,
    next: Next,
) -> Response {
    let nonce: Arc<str> = uuid::Uuid::new_v4().simple().to_string().into();
    req.extensions_mut().insert(PageNonce(nonce.clone()));
    let mut res = next.run(req).await;
    let page = res
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/html"));
    let scripts = if page {
        HeaderValue::from_str(&app::csp::page_policy(&nonce))
            .unwrap_or(HeaderValue::from_static(app::csp::NO_SCRIPTS))
    } else {
        HeaderValue::from_static(app::csp::NO_SCRIPTS)
    };
    let h = res.headers_mut();
    h.entry(X_CONTENT_TYPE_OPTIONS)
        .or_insert(HeaderValue::from_static("nosniff"));
    h.entry(X_FRAME_OPTIONS)
        .or_insert(HeaderValue::from_static("DENY"));
    h.entry(REFERRER_POLICY)
        .or_insert(HeaderValue::from_static("strict-origin-when-cross-origin"));
    h.entry(CONTENT_SECURITY_POLICY).or_insert(scripts);
    if https {
        h.entry(STRICT_TRANSPORT_SECURITY)
            .or_insert(HeaderValue::from_static("max-age=31536000"));
    }
    res
}

/// The longest `x-request-id` taken from a caller (a UUID is 36).
pub const MAX_REQUEST_ID: usize = 64;

/// Whether a caller's `x-request-id` may be kept: 1 to [`MAX_REQUEST_ID`] letters, digits,
/// `-`, `_`, `.` or `:` (what load balancers and tracing systems send). Anything else would
/// end up in logs and the audit log as the caller wrote it.
pub fn request_id_well_formed(id: &[u8]) -> bool {
    (1..=MAX_REQUEST_ID).contains(&id.len())
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// Drops a malformed `x-request-id`, so the next layer makes a new one.
pub async fn well_formed_request_id(mut req: Request, next: Next) -> Response {
    if req
        .headers()
        .get_all(X_REQUEST_ID)
        .iter()
        .any(|v| !request_id_well_formed(v.as_bytes()))
        || req.headers().get_all(X_REQUEST_ID).iter().count() > 1
    {
        req.headers_mut().remove(X_REQUEST_ID);
    }
    next.run(req).await
}

const X_REQUEST_ID: &str = "x-request-id";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_short_and_plain() {
        for ok in ["lb-1234", "0af7651916cd43dd8448eb211c80319c", "a.b:c_d"] {
            assert!(request_id_well_formed(ok.as_bytes()), "{ok}");
        }
        let long = "a".repeat(MAX_REQUEST_ID + 1);
        for bad in [
            "",
            "has space",
            "line\nbreak",
            "\u{1b}[31mred",
            "<script>",
            long.as_str(),
        ] {
            assert!(!request_id_well_formed(bad.as_bytes()), "{bad:?}");
        }
    }
}
