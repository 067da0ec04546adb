//! What the server's test binaries share: calling a server function the way the hydrated
//! page does.
// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use axum::body::Body;
use http::{Request, StatusCode};
use tower::ServiceExt;

/// The public origin the tests' portals are configured with.
pub const ORIGIN: &str = "http://127.0.0.1:3000";

/// A fetch-style call of a server function (what the hydrated page sends): the status, the
/// headers and the body (the JSON-encoded error when refused).
pub async fn call(
    app: &axum::Router,
    path: &str,
    cookie: Option<&str>,
    form: &str,
) -> (StatusCode, http::HeaderMap, String) {
    let mut req = Request::post(path)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .header("origin", ORIGIN);
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    let res = app
        .clone()
        .oneshot(req.body(Body::from(form.to_string())).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let body = axum::body::to_bytes(res.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

/// `pairs` as a form body.
pub fn form(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", urlencode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
