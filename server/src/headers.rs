//! Headers every response carries, whatever produced it (pages, server functions, the agent
//! and Stripe endpoints, static files, errors): no MIME sniffing, never framed (clickjacking),
//! no full URL in the `Referer` sent elsewhere, no plugins or `<base>` tricks, and HSTS when the
//! portal is served over HTTPS. A handler that sets one of these itself (the marketplace logos'
//! sandboxing CSP) keeps its own.
//!
//! Not yet a script policy (`script-src`): hydration's inline module script needs a nonce
//! threaded through Leptos first; see ARCHITECTURE.md.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http::HeaderValue;
use http::header::{
    CONTENT_SECURITY_POLICY, REFERRER_POLICY, STRICT_TRANSPORT_SECURITY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};

/// `frame-ancestors` replaces X-Frame-Options in browsers that know CSP; both are sent.
pub const CSP: &str = "frame-ancestors 'none'; base-uri 'self'; object-src 'none'";

/// Whether the public URL is HTTPS (HSTS is sent only then: over plain HTTP it means nothing,
/// and on a loopback dev server it would pin the browser to HTTPS for a year).
#[derive(Clone, Copy, Debug)]
pub struct Https(pub bool);

pub async fn security_headers(
    State(Https(https)): State<Https>,
    req: Request,
    next: Next,
) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.entry(X_CONTENT_TYPE_OPTIONS)
        .or_insert(HeaderValue::from_static("nosniff"));
    h.entry(X_FRAME_OPTIONS)
        .or_insert(HeaderValue::from_static("DENY"));
    h.entry(REFERRER_POLICY)
        .or_insert(HeaderValue::from_static("strict-origin-when-cross-origin"));
    h.entry(CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(CSP));
    if https {
        h.entry(STRICT_TRANSPORT_SECURITY)
            .or_insert(HeaderValue::from_static("max-age=31536000"));
    }
    res
}
