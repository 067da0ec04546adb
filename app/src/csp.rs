//! Content-Security-Policy: what may run in the portal's pages.
//!
//! A page runs only the scripts that carry its response's nonce (Leptos's hydration module
//! script and its streaming resource scripts, and `/charts.js`) and what those load
//! (`'strict-dynamic'`: the wasm bundle's JavaScript, ECharts). Injected markup can't run a
//! script: it has no nonce, inline handlers and `javascript:` URLs are refused, and there are
//! no plugins or `<base>` tricks. Any other answer (JSON, files, errors) runs no script at all.
//!
//! The server's header layer makes each request's nonce, hands it to the render (the render's
//! scripts carry it, through `leptos::nonce`), and puts [`page_policy`] on an HTML answer and
//! [`NO_SCRIPTS`] on any other. The render used to set the page's header itself, through
//! `leptos_axum`'s response options; about one page in 300, rendered while other requests ran,
//! came back without it, so the browser applied `NO_SCRIPTS` and the page never hydrated.

/// Directives every answer carries: never framed, no plugins, no `<base>` elsewhere.
macro_rules! common {
    () => {
        "object-src 'none'; base-uri 'self'; frame-ancestors 'none'"
    };
}

/// The policy of an answer that is not a page.
pub const NO_SCRIPTS: &str = concat!("script-src 'none'; ", common!());

/// The policy of a page whose scripts carry `nonce`. `'wasm-unsafe-eval'` lets the bundle
/// compile its WebAssembly; it allows no JavaScript `eval`.
pub fn page_policy(nonce: &str) -> String {
    format!(
        "script-src 'nonce-{nonce}' 'strict-dynamic' 'wasm-unsafe-eval'; {}",
        common!()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_allow_only_their_nonce_and_other_answers_no_script() {
        let p = page_policy("abc_-123");
        assert!(
            p.starts_with("script-src 'nonce-abc_-123' 'strict-dynamic'"),
            "{p}"
        );
        assert!(
            !p.contains("unsafe-inline") && !p.contains("'unsafe-eval'"),
            "{p}"
        );
        for policy in [p.as_str(), NO_SCRIPTS] {
            for d in [
                "object-src 'none'",
                "frame-ancestors 'none'",
                "base-uri 'self'",
            ] {
                assert!(policy.contains(d), "{policy} lacks {d}");
            }
        }
        assert!(NO_SCRIPTS.starts_with("script-src 'none'"));
    }
}
