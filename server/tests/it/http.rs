//! The HTTP surface against a real, private PostgreSQL that the test stops and starts.

use control_plane::prelude::*;

use axum::body::Body;
use http::{Request, StatusCode};
use pgcluster::{Durability, PgCluster, StopOnDrop};
use server::config::Config;
use server::{app_state, router};
use tower::ServiceExt;

use crate::support;

use support::{ORIGIN, call, get};

fn config_with(database_url: &str, extra: &[&str]) -> Config {
    support::config(database_url, extra)
}

fn config(database_url: &str) -> Config {
    support::config(database_url, &[])
}

struct Cluster {
    pg: Option<StopOnDrop>,
    dir: std::path::PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        drop(self.pg.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn cluster(label: &str) -> Cluster {
    let dir = std::env::temp_dir().join(format!("portal-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let pg = PgCluster::init(&dir, Durability::Throwaway).expect("initdb");
    Cluster {
        pg: Some(StopOnDrop(pg)),
        dir,
    }
}

#[tokio::test]
async fn readyz_follows_the_database_down_and_back() {
    let c = cluster("readyz");
    let pg = c.pg.as_ref().unwrap();
    let cfg = config(&pg.url("portal"));
    let state = app_state(&cfg).unwrap();
    let cp = state.cp.clone();
    let draining = state.draining.clone();
    let app = router(state);

    // Not started yet: the server is alive but not ready.
    let (status, _, body) = get(&app, "/healthz").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, r#"{"status":"alive"}"#)
    );
    let (status, _, body) = get(&app, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, r#"{"status":"database_unavailable"}"#);

    // Up, but the schema is empty: still not ready.
    pg.start().unwrap();
    pg.ensure_database("portal").unwrap();
    let (status, _, body) = get(&app, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains(r#""status":"migrations_pending""#), "{body}");

    cp.migrate().await.unwrap();
    let (status, _, body) = get(&app, "/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains(r#""status":"ready""#), "{body}");

    // The database goes away: 503, while liveness stays 200.
    pg.stop().unwrap();
    let (status, _, body) = get(&app, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, r#"{"status":"database_unavailable"}"#);
    assert_eq!(get(&app, "/healthz").await.0, StatusCode::OK);
    // A request that needs it is told the truth: briefly unavailable, try again (503 with
    // Retry-After), not an internal error.
    let (status, headers, body) = get(&app, "/api/v1/offers").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(headers["retry-after"], "2");
    let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(problem["code"], "unavailable", "{body}");
    assert!(problem["request_id"].is_string(), "{body}");

    // It comes back: the same pool recovers without a restart.
    pg.start().unwrap();
    let (status, _, body) = get(&app, "/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // A shutdown begins (what SIGTERM does first): not ready, while everything is served.
    draining.start();
    let (status, _, body) = get(&app, "/readyz").await;
    assert_eq!(
        (status, body.as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"status":"shutting_down"}"#
        )
    );
    assert_eq!(get(&app, "/healthz").await.0, StatusCode::OK);
    assert_eq!(get(&app, "/api/v1/offers").await.0, StatusCode::OK);
}

#[tokio::test]
async fn every_response_carries_a_request_id_and_unknown_pages_are_404() {
    let db = test_db::migrated().await;
    let cfg = config(&db.url());
    let state = app_state(&cfg).unwrap();
    state.cp.migrate().await.unwrap();
    let app = router(state);

    let (status, headers, _) = get(&app, "/healthz").await;
    assert_eq!(status, StatusCode::OK);
    let id = headers.get("x-request-id").expect("x-request-id set");
    assert!(uuid::Uuid::parse_str(id.to_str().unwrap()).is_ok());

    // An id from the load balancer is kept.
    let res = app
        .clone()
        .oneshot(
            Request::get("/healthz")
                .header("x-request-id", "lb-1234")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.headers().get("x-request-id").unwrap(), "lb-1234");
    // A malformed one (it would reach the logs and the audit log as written) is replaced.
    let long = "a".repeat(65);
    for bad in [
        "has spaces".as_bytes(),
        b"<script>alert(1)</script>",
        b"tab\there",
        "caf\u{e9}".as_bytes(),
        long.as_bytes(),
    ] {
        let res = app
            .clone()
            .oneshot(
                Request::get("/healthz")
                    .header("x-request-id", http::HeaderValue::from_bytes(bad).unwrap())
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let id = res.headers().get("x-request-id").unwrap().to_str().unwrap();
        assert!(uuid::Uuid::parse_str(id).is_ok(), "{bad:?} → {id}");
    }

    let (status, _, body) = get(&app, "/no/such/page").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("Page not found"), "{body}");

    // A page renders server-side with the live status (no wasm needed).
    let (status, _, body) = get(&app, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#"data-status="ready""#), "{body}");
    // The marketplace is public: browsing needs no session.
    let (status, _, body) = get(&app, "/marketplace").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#"role="search""#), "{body}");
    assert!(!body.contains("Please sign in"), "{body}");
    // Without Stripe keys the webhook says so, so Stripe retries once it is configured.
    let res = app
        .clone()
        .oneshot(
            Request::post("/stripe/webhook")
                .header("stripe-signature", "t=1,v1=00")
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    // Billing needs a session; signed out, it says so (and shows no numbers).
    let (status, _, body) = get(&app, "/billing").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.contains("Please sign in to see this page."), "{body}");
    // The catalog is public: it renders without a session.
    let (status, _, body) = get(&app, "/catalog").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#"id="catalog""#), "{body}");
}

const ADMIN_PW: &str = "correct horse battery staple";

/// A portal on a fresh migrated database with the platform admin's break-glass password set.
async fn signed_in_fixture(extra: &[&str]) -> (test_db::TestDb, axum::Router) {
    let db = test_db::migrated().await;
    let state = app_state(&config_with(&db.url(), extra)).unwrap();
    state.cp.migrate().await.unwrap();
    state
        .cp
        .set_break_glass_password("ada@platform.example", "Ada Admin", ADMIN_PW)
        .await
        .unwrap();
    let app = router(state);
    (db, app)
}

fn sign_in_request(password: &str, origin: Option<&str>, cookie: Option<&str>) -> Request<Body> {
    use leptos::server_fn::ServerFn;
    let path = <app::auth::BreakGlassSignIn as ServerFn>::PATH;
    let mut req = Request::post(path)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "text/html")
        .header("referer", format!("{ORIGIN}/login"));
    if let Some(o) = origin {
        req = req.header("origin", o);
    }
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    let body = format!(
        "email=ada%40platform.example&password={}",
        password.replace(' ', "+")
    );
    req.body(Body::from(body)).unwrap()
}

fn session_cookie(res: &http::Response<Body>) -> Option<String> {
    res.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("portal_session="))
        .map(str::to_owned)
}

/// Signs in as the break-glass admin: the session's `Set-Cookie` header.
async fn signed_in_cookie(app: &axum::Router) -> String {
    let res = app
        .clone()
        .oneshot(sign_in_request(ADMIN_PW, Some(ORIGIN), None))
        .await
        .unwrap();
    session_cookie(&res).unwrap()
}

/// Signs in as the break-glass admin: the `portal_session=…` pair to send back.
async fn signed_in_pair(app: &axum::Router) -> String {
    let cookie = signed_in_cookie(app).await;
    cookie.split(';').next().unwrap().to_string()
}

async fn admin_page(app: &axum::Router, cookie: &str) -> String {
    let res = app
        .clone()
        .oneshot(
            Request::get("/admin")
                .header("cookie", cookie)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let body = axum::body::to_bytes(res.into_body(), 1 << 20)
        .await
        .unwrap();
    String::from_utf8_lossy(&body).into_owned()
}

#[tokio::test]
async fn sign_in_replaces_a_planted_session_id_and_sets_safe_cookie_flags() {
    let (_c, app) = signed_in_fixture(&["--cookie-secure", "false"]).await;
    let planted = "portal_session=AAAAAAAAAAAAAAAAAAAAAA";

    let res = app
        .clone()
        .oneshot(sign_in_request(ADMIN_PW, Some(ORIGIN), Some(planted)))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FOUND);
    assert_eq!(res.headers().get("location").unwrap(), "/admin");
    let cookie = session_cookie(&res).expect("a session cookie is set at sign-in");
    let pair = cookie.split(';').next().unwrap().to_string();
    assert_ne!(pair, planted, "the planted id must not survive sign-in");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Lax"), "{cookie}");
    assert!(!cookie.contains("Secure"), "{cookie}");

    assert!(admin_page(&app, &pair).await.contains("Signed in as"));
    let planted_view = admin_page(&app, planted).await;
    assert!(planted_view.contains("Please sign in"), "{planted_view}");
}

/// Finding 6 of the security review: no security headers at all.
#[tokio::test]
async fn every_answer_carries_the_security_headers() {
    let (_c, app) = signed_in_fixture(&[]).await;
    for path in ["/login", "/no-such-page", "/healthz", "/admin"] {
        let (_, h, _) = get(&app, path).await;
        let header = |n: &str| {
            h.get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(header("x-frame-options"), "DENY", "{path}");
        assert_eq!(
            header("referrer-policy"),
            "strict-origin-when-cross-origin",
            "{path}"
        );
        assert!(
            header("content-security-policy").contains("frame-ancestors 'none'"),
            "{path}"
        );
        assert_eq!(
            header("strict-transport-security"),
            "",
            "{path}: no HSTS over http"
        );
    }
}

/// Over https the browser is told to stay on https for a year (not over plain http: see
/// `every_answer_carries_the_security_headers`).
#[tokio::test]
async fn a_portal_served_over_https_sends_hsts() {
    let (_c, app) = signed_in_fixture(&["--public-url", "https://portal.example"]).await;
    for path in ["/healthz", "/login"] {
        let (_, h, _) = get(&app, path).await;
        assert_eq!(
            h.get("strict-transport-security")
                .map(|v| v.to_str().unwrap()),
            Some("max-age=31536000"),
            "{path}"
        );
    }
}

/// Finding 6: a page runs only the scripts that carry its response's nonce, fresh for every
/// response; an answer that is not a page runs none.
#[tokio::test]
async fn pages_run_only_scripts_that_carry_their_own_nonce() {
    let (_c, app) = signed_in_fixture(&[]).await;
    let nonce_of = |h: &http::HeaderMap| -> String {
        let csp = h.get("content-security-policy").unwrap().to_str().unwrap();
        assert!(
            csp.starts_with("script-src 'nonce-") && csp.contains("'strict-dynamic'"),
            "{csp}"
        );
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        csp["script-src 'nonce-".len()..]
            .split('\'')
            .next()
            .unwrap()
            .to_string()
    };
    let mut seen = Vec::new();
    for path in ["/login", "/login", "/no-such-page"] {
        let (_, h, body) = get(&app, path).await;
        let nonce = nonce_of(&h);
        assert!(nonce.len() >= 16, "{path}: nonce {nonce:?}");
        let scripts: Vec<&str> = body.split("<script").skip(1).collect();
        assert!(
            scripts.len() >= 2,
            "{path}: hydration and charts.js: {body}"
        );
        for s in scripts {
            let tag = &s[..s.find('>').unwrap()];
            assert!(
                tag.contains(&format!("nonce=\"{nonce}\"")),
                "{path}: a script without this response's nonce: <script{tag}>"
            );
        }
        seen.push(nonce);
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 3, "every response has its own nonce");
    let (_, h, _) = get(&app, "/healthz").await;
    assert_eq!(
        h.get("content-security-policy").unwrap(),
        app::csp::NO_SCRIPTS
    );
}

/// Static files served while pages render never take a page's headers, and every page keeps
/// its own: its script policy with the nonce its scripts carry, a redirect its `Location`.
/// (`leptos_axum`'s file handler served a found file inside `Owner::new()`, a child of the
/// worker thread's current owner, often a page rendering; it then moved that page's response
/// options onto the file, and the page came back with `NO_SCRIPTS` or a redirect without
/// `Location`.)
#[tokio::test]
async fn pages_rendered_beside_static_files_keep_their_own_headers() {
    let site = std::env::temp_dir().join(format!("portal-site-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(site.join("pkg")).unwrap();
    std::fs::write(site.join("pkg/portal.js"), "export default 1;\n").unwrap();
    std::fs::write(
        site.join("favicon.svg"),
        "<svg xmlns=\"http://www.w3.org/2000/svg\"/>",
    )
    .unwrap();
    let (_c, app) = signed_in_fixture(&["--site-root", site.to_str().unwrap()]).await;
    let mut answers = tokio::task::JoinSet::new();
    for i in 0..400 {
        let app = app.clone();
        let path = [
            "/login",
            "/pkg/portal.js",
            "/marketplace",
            "/favicon.svg",
            "/billing",
            "/pkg/portal.js",
            "/no-such-page",
            "/favicon.svg",
        ][i % 8];
        answers.spawn(async move { (path, get_as(&app, path, None, "text/html").await) });
    }
    let mut seen = 0;
    while let Some(done) = answers.join_next().await {
        let (path, (status, h, body)) = done.unwrap();
        let csp = h
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        match path {
            "/pkg/portal.js" | "/favicon.svg" => {
                assert_eq!(status, StatusCode::OK, "{path}");
                assert_eq!(csp, app::csp::NO_SCRIPTS, "{path} took a page's policy");
                assert!(h.get("location").is_none(), "{path} took a redirect: {h:?}");
                assert!(!body.contains("<html"), "{path}: {body}");
            }
            "/billing" => {
                assert_eq!(status, StatusCode::FOUND, "{path}");
                assert_eq!(
                    h.get("location").and_then(|v| v.to_str().ok()),
                    Some("/login?next=/billing"),
                    "{path} lost its redirect"
                );
            }
            _ => {
                let nonce = csp
                    .strip_prefix("script-src 'nonce-")
                    .and_then(|rest| rest.split('\'').next())
                    .unwrap_or_else(|| panic!("{path}: not a page's policy: {csp:?}"));
                assert!(
                    nonce.len() >= 16 && csp.contains("'strict-dynamic'"),
                    "{path}: {csp}"
                );
                let scripts: Vec<&str> = body.split("<script").skip(1).collect();
                assert!(!scripts.is_empty(), "{path}: no scripts: {body}");
                for s in scripts {
                    let tag = &s[..s.find('>').unwrap()];
                    assert!(
                        tag.contains(&format!("nonce=\"{nonce}\"")),
                        "{path}: a script without this response's nonce: <script{tag}>"
                    );
                }
            }
        }
        seen += 1;
    }
    assert_eq!(seen, 400);
    std::fs::remove_dir_all(&site).unwrap();
}

#[tokio::test]
async fn a_wrong_password_gives_no_session() {
    let (_c, app) = signed_in_fixture(&[]).await;
    let res = app
        .clone()
        .oneshot(sign_in_request(
            "not the password at all",
            Some(ORIGIN),
            None,
        ))
        .await
        .unwrap();
    // Back to the form, with the error in the URL for the no-JS page to show.
    assert_eq!(res.status(), StatusCode::FOUND);
    let location = res.headers().get("location").unwrap().to_str().unwrap();
    assert!(
        location.starts_with(&format!("{ORIGIN}/login?")),
        "{location}"
    );
    assert_eq!(session_cookie(&res), None);
}

/// Finding 6 of the security review: the cookie was not `Secure` unless configured.
#[tokio::test]
async fn the_session_cookie_is_secure_unless_turned_off() {
    let (_c, app) = signed_in_fixture(&[]).await;
    let cookie = signed_in_cookie(&app).await;
    assert!(cookie.contains("Secure"), "{cookie}");
}

#[tokio::test]
async fn cross_origin_posts_are_refused_before_any_server_function_runs() {
    let (_c, app) = signed_in_fixture(&[]).await;
    for origin in [
        Some("http://evil.example"),
        Some("null"),
        Some("http://127.0.0.1:3001"),
    ] {
        let res = app
            .clone()
            .oneshot(sign_in_request(ADMIN_PW, origin, None))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::FORBIDDEN, "{origin:?}");
        assert_eq!(session_cookie(&res), None, "{origin:?}");
        let body = axum::body::to_bytes(res.into_body(), 1 << 16)
            .await
            .unwrap();
        assert!(String::from_utf8_lossy(&body).contains("Origin check"));
    }
    // No Origin header: the Referer decides (ours here), as for some older clients.
    let res = app
        .clone()
        .oneshot(sign_in_request(ADMIN_PW, None, None))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FOUND);
    // Neither header: refused.
    let res = app
        .clone()
        .oneshot(Request::post("/api/anything").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
}

/// The session's user is read with the session, in one statement (#22): what the page shows
/// is the user as they are now, and a deleted user's sessions go with them.
#[tokio::test]
async fn a_session_reads_its_user_as_they_are_now_and_ends_with_them() {
    let (db, app) = signed_in_fixture(&[]).await;
    let pair = signed_in_pair(&app).await;
    assert!(admin_page(&app, &pair).await.contains("Ada Admin"));

    sqlx::query(
        "UPDATE users SET display_name = 'Ada Lovelace' WHERE email = 'ada@platform.example'",
    )
    .execute(db.pool())
    .await
    .unwrap();
    let page = admin_page(&app, &pair).await;
    assert!(page.contains("Ada Lovelace") && !page.contains("Ada Admin"));

    let sessions = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM sessions s JOIN users u ON u.id = s.user_id
              WHERE u.email = 'ada@platform.example'",
        )
        .fetch_one(db.pool())
        .await
        .unwrap()
    };
    assert_eq!(sessions().await, 1);
    sqlx::raw_sql(
        "DELETE FROM break_glass_credentials WHERE user_id = (SELECT id FROM users WHERE email = 'ada@platform.example');
         DELETE FROM users WHERE email = 'ada@platform.example'",
    )
    .execute(db.pool())
    .await
    .unwrap();
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM sessions WHERE user_id IS NOT NULL")
            .fetch_one(db.pool())
            .await
            .unwrap(),
        0,
        "the user's session went with the user"
    );
    assert!(admin_page(&app, &pair).await.contains("Please sign in"));
}

#[tokio::test]
async fn a_session_ends_at_its_absolute_timeout_however_active() {
    // 0 hours: any session older than the current second is over.
    let (_c, app) = signed_in_fixture(&["--session-absolute-hours", "0"]).await;
    // Signed in and asked within the same second, the session is valid. On a loaded machine
    // the two may straddle a second: then sign in again (a few tries).
    let mut pair = None;
    for _ in 0..5 {
        let this = signed_in_pair(&app).await;
        if admin_page(&app, &this).await.contains("Signed in as") {
            pair = Some(this);
            break;
        }
    }
    let pair = pair.expect("a session is valid within the second it was made");
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    assert!(admin_page(&app, &pair).await.contains("Please sign in"));
}

/// Finding 7 of the security review: the idle timeout counted from sign-in however active the
/// session was, because an unchanged session is never written back to the store.
#[tokio::test]
async fn an_active_session_slides_its_idle_expiry_at_most_once_a_tenth_of_the_timeout() {
    // 1 minute idle: an active session is rewritten at most every 6 seconds.
    let (db, app) = signed_in_fixture(&["--session-idle-minutes", "1"]).await;
    let pair = signed_in_pair(&app).await;
    let expiry = || async {
        sqlx::query_scalar::<_, time::OffsetDateTime>("SELECT max(expires_at) FROM sessions")
            .fetch_one(db.pool())
            .await
            .unwrap()
    };
    let signed_in = expiry().await;
    // Within a tenth of the timeout: served, nothing written.
    assert!(admin_page(&app, &pair).await.contains("Signed in as"));
    assert_eq!(expiry().await, signed_in, "no write within 6 s");
    tokio::time::sleep(std::time::Duration::from_millis(6500)).await;
    assert!(admin_page(&app, &pair).await.contains("Signed in as"));
    let slid = expiry().await;
    assert!(
        slid - signed_in >= time::Duration::seconds(6),
        "expiry moved from {signed_in} to {slid}"
    );
}

async fn agent_post(
    app: &axum::Router,
    path: &str,
    version: Option<&str>,
    credential: Option<&str>,
    body: serde_json::Value,
) -> (StatusCode, serde_json::Value) {
    let mut req = Request::post(path).header("content-type", "application/json");
    if let Some(v) = version {
        req = req.header("x-agent-protocol", v);
    }
    if let Some(c) = credential {
        req = req.header("authorization", format!("Bearer {c}"));
    }
    let res = app
        .clone()
        .oneshot(req.body(Body::from(body.to_string())).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 20)
        .await
        .unwrap();
    let json = if bytes.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (status, json)
}

#[tokio::test]
async fn the_agent_api_enrols_with_a_token_and_refuses_other_versions_and_strangers() {
    use control_plane::auth::PlatformOperators;
    let db = test_db::migrated().await;
    let state = app_state(&config(&db.url())).unwrap();
    let cp = state.cp.clone();
    cp.migrate().await.unwrap();
    let admin = cp
        .set_break_glass_password("ada@platform.example", "Ada Admin", ADMIN_PW)
        .await
        .unwrap();
    let ops = cp
        .principal(admin)
        .await
        .unwrap()
        .unwrap()
        .platform::<PlatformOperators>()
        .unwrap();
    let enrolment = cp
        .enrol_node(
            &ops,
            &control_plane::fleet::NewNode {
                hostname: "gpu-hgx-01".into(),
                region: "eu-west-1".into(),
                rack: "r1".into(),
                family: "hgx-h100-8x".into(),
                capacity_shapes: vec!["gpu_slice".into()],
            },
            None,
        )
        .await
        .unwrap();
    let app = router(state);
    let hello = serde_json::json!({"protocol_version": 3, "agent_version": "0.1.0"});
    let beat = serde_json::json!({"hello": hello, "health": {"status": "healthy"}});

    let (s, e) = agent_post(&app, "/agent/v3/heartbeat", None, None, beat.clone()).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(e["code"], "unsupported_protocol");
    assert_eq!(
        e["message"],
        "this control plane speaks agent protocol 3 (/agent/v3); the agent speaks no version \
         (missing x-agent-protocol header). Install an agent release for protocol 3."
    );
    let (s, e) = agent_post(&app, "/agent/v1/heartbeat", Some("1"), None, beat.clone()).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("unsupported_protocol"))
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("the agent speaks v1 (path /agent/v1/)")
    );
    let (s, e) = agent_post(&app, "/agent/v3/heartbeat", Some("3"), None, beat.clone()).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthenticated"))
    );
    let (s, _) = agent_post(
        &app,
        "/agent/v3/heartbeat",
        Some("3"),
        Some("gpn_forged"),
        beat.clone(),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    // Enrolment needs no Origin (machine caller) and no session.
    let enroll = serde_json::json!({
        "hello": hello, "bootstrap_token": enrolment.bootstrap_token, "hostname": "gpu-hgx-01"
    });
    let (s, answer) = agent_post(&app, "/agent/v3/enroll", Some("3"), None, enroll.clone()).await;
    assert_eq!(s, StatusCode::OK, "{answer}");
    assert_eq!(answer["node_id"], enrolment.node_id.to_string());
    let credential = answer["node_credential"].as_str().unwrap().to_string();
    let (s, e) = agent_post(&app, "/agent/v3/enroll", Some("3"), None, enroll).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(
        e["message"],
        "This bootstrap token was already used; ask an operator for a new one."
    );

    let cred = Some(credential.as_str());
    let (s, ack) = agent_post(&app, "/agent/v3/heartbeat", Some("3"), cred, beat.clone()).await;
    assert_eq!(
        (s, ack["heartbeat_interval_s"].as_u64()),
        (StatusCode::OK, Some(15))
    );
    // What the host holds rides on the heartbeat; a report reconciliation can't read is
    // dropped (and logged) without costing the node its heartbeat.
    let mut holding = beat.clone();
    holding["holding"] = serde_json::json!({"leases": [], "vms": ["not-an-id"]});
    let (s, _) = agent_post(
        &app,
        "/agent/v3/heartbeat",
        Some("3"),
        cred,
        holding.clone(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let recorded: Option<serde_json::Value> =
        sqlx::query_scalar("SELECT holding FROM nodes WHERE id = $1")
            .bind(enrolment.node_id.0)
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(recorded, None);
    let vm = uuid::Uuid::new_v4().to_string();
    holding["holding"] = serde_json::json!({"leases": [], "vms": [vm]});
    let (s, _) = agent_post(&app, "/agent/v3/heartbeat", Some("3"), cred, holding).await;
    assert_eq!(s, StatusCode::OK);
    let recorded: Option<serde_json::Value> =
        sqlx::query_scalar("SELECT holding FROM nodes WHERE id = $1")
            .bind(enrolment.node_id.0)
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(
        recorded,
        Some(serde_json::json!({"leases": [], "vms": [vm]}))
    );
    // A tunnel endpoint is answered with the host's segments (none yet); one that is no
    // address costs the host its segments' list, not its heartbeat.
    let mut tunnel = beat.clone();
    tunnel["vtep"] = serde_json::json!("192.0.2.41");
    let (s, ack) = agent_post(&app, "/agent/v3/heartbeat", Some("3"), cred, tunnel.clone()).await;
    assert_eq!(
        (s, &ack["overlay"]),
        (StatusCode::OK, &serde_json::json!({"networks": []}))
    );
    tunnel["vtep"] = serde_json::json!("localhost");
    let (s, ack) = agent_post(&app, "/agent/v3/heartbeat", Some("3"), cred, tunnel).await;
    assert_eq!((s, ack.get("overlay")), (StatusCode::OK, None));
    let vtep: Option<String> = sqlx::query_scalar("SELECT host(vtep) FROM nodes WHERE id = $1")
        .bind(enrolment.node_id.0)
        .fetch_one(cp.pool())
        .await
        .unwrap();
    assert_eq!(vtep.as_deref(), Some("192.0.2.41"), "the valid one stays");
    let (s, claim) = agent_post(
        &app,
        "/agent/v3/tasks/claim",
        Some("3"),
        cred,
        serde_json::json!({"wait_s": 0}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(claim["task"]["spec"]["kind"], "slice.topology_discover");
    let task = claim["task"]["task_id"].as_str().unwrap();
    let (s, e) = agent_post(
        &app,
        "/agent/v3/tasks/claim",
        Some("3"),
        cred,
        serde_json::json!({"wait": 0}),
    )
    .await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid"))
    );
    // Suppose that answer never arrived: the task is running and no agent runs it. A claim
    // that doesn't say the agent is idle can't tell and gets nothing; an idle agent's claim
    // gets the same task again, to resume.
    let (s, again) = agent_post(
        &app,
        "/agent/v3/tasks/claim",
        Some("3"),
        cred,
        serde_json::json!({"wait_s": 0}),
    )
    .await;
    assert_eq!(
        (s, &again["task"]),
        (StatusCode::OK, &serde_json::Value::Null)
    );
    let (s, again) = agent_post(
        &app,
        "/agent/v3/tasks/claim",
        Some("3"),
        cred,
        serde_json::json!({"wait_s": 0, "idle": true}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(again["task"]["task_id"], task, "the lost task, sent again");

    let phase = serde_json::json!({"phase": "read_host", "status": "succeeded", "elapsed_ms": 412});
    let (s, _) = agent_post(
        &app,
        &format!("/agent/v3/tasks/{task}/phases"),
        Some("3"),
        cred,
        phase.clone(),
    )
    .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let discovery: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../node-agent/fixtures/hgx-h100-8x/expected-discovery.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let mut output = discovery;
    output["kind"] = "slice.topology_discover".into();
    let result = serde_json::json!({"outcome": {"status": "succeeded", "output": output}});
    let (s, e) = agent_post(
        &app,
        &format!("/agent/v3/tasks/{task}/result"),
        Some("3"),
        cred,
        result.clone(),
    )
    .await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{e}");
    let (s, e) = agent_post(
        &app,
        &format!("/agent/v3/tasks/{task}/result"),
        Some("3"),
        cred,
        result,
    )
    .await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::CONFLICT, Some("conflict"))
    );
    let (s, _) = agent_post(
        &app,
        "/agent/v3/tasks/not-a-task/phases",
        Some("3"),
        cred,
        phase,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    let generation: i32 = sqlx::query_scalar(
        "SELECT generation FROM slot_map_proposals WHERE node_id = $1 AND status = 'pending'",
    )
    .bind(enrolment.node_id.0)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(generation, 1);
}

/// Building a router (as each replica and test does) while another renders pages leaves those
/// pages rendering: generating the route list once switches resource loading off process-wide,
/// and a page whose resource first ran in that window waited for ever (leptos#4773).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_built_while_pages_render_leaves_them_rendering() {
    let db = test_db::migrated().await;
    let state = app_state(&config(&db.url())).unwrap();
    state.cp.migrate().await.unwrap();
    let app = router(state.clone());
    let building = tokio::task::spawn_blocking(move || {
        for _ in 0..40 {
            drop(router(state.clone()));
        }
    });
    let mut renders = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let app = app.clone();
        renders.spawn(async move { get_as(&app, "/marketplace", None, "text/html").await });
    }
    let all = async {
        while let Some(done) = renders.join_next().await {
            let (status, _, body) = done.unwrap();
            assert_eq!(status, StatusCode::OK, "{body}");
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), all)
        .await
        .expect("a page waited for ever on a resource that never started");
    building.await.unwrap();
}

async fn get_as(
    app: &axum::Router,
    path: &str,
    cookie: Option<&str>,
    accept: &str,
) -> (StatusCode, http::HeaderMap, String) {
    let mut req = Request::get(path).header("accept", accept);
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    support::send(app, req.body(Body::empty()).unwrap()).await
}

#[tokio::test]
async fn every_refusal_answers_with_the_status_it_means_and_never_500() {
    use app::account::{AddSshKey, DeleteSshKey, ListSshKeys};
    use leptos::server_fn::ServerFn;
    let (_c, app) = signed_in_fixture(&[]).await;
    let cookie = signed_in_pair(&app).await;
    let cookie = cookie.as_str();
    let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEorqTlXDEue8uPXrBC/J2mGhCVSlB9xbL3JVhwex5yy";
    let form = |name: &str, k: &str| {
        format!(
            "name={}&public_key={}",
            name,
            k.replace('+', "%2B").replace('/', "%2F").replace(' ', "+")
        )
    };

    // Server functions: each error kind, its status, and the sentence the form shows.
    let (status, _, body) = call(&app, ListSshKeys::PATH, None, "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.contains("Unauthenticated"), "{body}");

    let (status, _, body) = call(
        &app,
        AddSshKey::PATH,
        Some(cookie),
        &form("laptop", "ssh-ed25519 !!!"),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // The field it is about, for the form to show the reason under that field.
    assert!(
        body.contains(r#""field":"ssh_public_key","reason":"the key data is not valid base64"#),
        "{body}"
    );

    let (status, _, body) = call(&app, AddSshKey::PATH, Some(cookie), &form("laptop", key)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, body) = call(&app, AddSshKey::PATH, Some(cookie), &form("again", key)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body.contains("This key is already saved, as \\\"laptop\\\"."),
        "{body}"
    );

    let (status, _, body) = call(
        &app,
        DeleteSshKey::PATH,
        Some(cookie),
        "id=00000000-0000-4000-8000-000000000001",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _, body) = call(&app, DeleteSshKey::PATH, Some(cookie), "id=not-a-uuid").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // Typed as it is, a malformed id is read after the sign-in check: signed out, it is 401.
    let (status, _, body) = call(&app, DeleteSshKey::PATH, None, "id=not-a-uuid").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");

    // Arguments the function can't read are the caller's mistake.
    let (status, _, body) = call(&app, AddSshKey::PATH, Some(cookie), "name=x").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // A wrong password is a refused sign-in, not a server fault.
    let (status, _, body) = call(
        &app,
        <app::auth::BreakGlassSignIn as ServerFn>::PATH,
        None,
        "email=ada%40platform.example&password=wrong",
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.contains("Email or password is wrong."), "{body}");

    // Pages. A browser that is not signed in is sent to sign in, and comes back after.
    let (status, headers, _) = get_as(&app, "/billing?month=2026-10", None, "text/html").await;
    assert_eq!(status, StatusCode::FOUND);
    assert_eq!(
        headers.get("location").unwrap(),
        "/login?next=/billing%3Fmonth%3D2026-10"
    );
    // Another client gets 401 with the same page.
    let (status, _, body) = get_as(&app, "/billing", None, "*/*").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.contains("Please sign in to see this page."), "{body}");
    // A resource the user may not see, or that doesn't exist: 404.
    let (status, _, body) = get_as(
        &app,
        "/projects/00000000-0000-4000-8000-000000000001",
        Some(cookie),
        "text/html",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _, _) = get_as(&app, "/no/such/page", Some(cookie), "text/html").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Signed in, and allowed: 200.
    let (status, _, body) = get_as(&app, "/account", Some(cookie), "text/html").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body.contains("SHA256:PkWeU4s/wEXKkVZfEiNTf04tZrBbB/fELrKhI2lIpKc"),
        "{body}"
    );
}

/// Five wrong break-glass passwords for the platform admin, each refused with 401.
async fn five_wrong_passwords(app: &axum::Router) {
    use leptos::server_fn::ServerFn;
    let path = <app::auth::BreakGlassSignIn as ServerFn>::PATH;
    for n in 1..=5 {
        let (status, _, body) = call(
            app,
            path,
            None,
            &format!("email=ada%40platform.example&password=guess{n}"),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "attempt {n}: {body}");
    }
}

#[tokio::test]
async fn break_glass_sign_in_is_rate_limited_per_email_with_retry_after() {
    use leptos::server_fn::ServerFn;
    let (_c, app) = signed_in_fixture(&[]).await;
    let path = <app::auth::BreakGlassSignIn as ServerFn>::PATH;
    five_wrong_passwords(&app).await;
    // The sixth, even with the right password, waits: one attempt a minute from now on.
    let right = format!(
        "email=ada%40platform.example&password={}",
        ADMIN_PW.replace(' ', "+")
    );
    let (status, headers, body) = call(&app, path, None, &right).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    let wait: u64 = headers
        .get("retry-after")
        .expect("a 429 says when to come back")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // One attempt a minute; less if the five took a while (their hashes refill the bucket).
    assert!((1..=60).contains(&wait), "retry after {wait} s");
    assert!(body.contains("RateLimited"), "{body}");
    assert!(
        !headers.contains_key("set-cookie"),
        "no session while limited"
    );
    // Case and spaces don't make a fresh account to guess at.
    let (status, _, _) = call(
        &app,
        path,
        None,
        "email=+ADA%40Platform.example+&password=x",
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // Another email (known or not) still has its own attempts.
    let (status, _, body) = call(&app, path, None, "email=bo%40platform.example&password=x").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    // Without JavaScript the form post goes back to the form with the message.
    let res = app
        .clone()
        .oneshot(sign_in_request(ADMIN_PW, Some(ORIGIN), None))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FOUND);
    assert_eq!(session_cookie(&res), None);
}

/// Finding 4: the lock is in the database (it outlives a restart and spans replicas), and
/// another platform admin clears it, audited.
#[tokio::test]
async fn five_failures_lock_a_break_glass_account_until_another_admin_unlocks_it() {
    use leptos::server_fn::ServerFn;
    let (db, app) = signed_in_fixture(&[]).await;
    let path = <app::auth::BreakGlassSignIn as ServerFn>::PATH;
    five_wrong_passwords(&app).await;
    // A restarted portal (its in-process limits empty) still refuses the right password,
    // for the rest of the 15 minutes, and computes no hash for it.
    let state = app_state(&config(&db.url())).unwrap();
    let cp = state.cp.clone();
    let restarted = router(state);
    let right = format!(
        "email=ada%40platform.example&password={}",
        ADMIN_PW.replace(' ', "+")
    );
    let (status, headers, body) = call(&restarted, path, None, &right).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    let wait: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((840..=900).contains(&wait), "retry after {wait} s");

    // Another platform admin sees the lock and clears it.
    cp.set_break_glass_password("bo@platform.example", "Bo Backup", ADMIN_PW)
        .await
        .unwrap();
    let (status, headers, body) = call(
        &restarted,
        path,
        None,
        &format!(
            "email=bo%40platform.example&password={}",
            ADMIN_PW.replace(' ', "+")
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let bo = headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let ada: String =
        sqlx::query_scalar("SELECT id::text FROM users WHERE email = 'ada@platform.example'")
            .fetch_one(cp.pool())
            .await
            .unwrap();
    let page = admin_page(&restarted, &bo).await;
    assert!(
        page.contains("ada@platform.example") && page.contains(">5<"),
        "{page}"
    );
    let unlock = <app::pages::admin::UnlockBreakGlass as ServerFn>::PATH;
    let (status, _, body) = call(&restarted, unlock, Some(&bo), &format!("user={ada}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, body) = call(&restarted, path, None, &right).await;
    assert_eq!(status, StatusCode::OK, "unlocked: {body}");
    let actions: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_log WHERE action LIKE 'platform_admin.%lock%' ORDER BY id",
    )
    .fetch_all(cp.pool())
    .await
    .unwrap();
    assert_eq!(actions, ["platform_admin.locked", "platform_admin.unlock"]);
    // An unknown account has nothing to unlock.
    let (status, _, _) = call(
        &restarted,
        unlock,
        Some(&bo),
        "user=00000000-0000-4000-8000-000000000000",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn single_sign_on_starts_are_rate_limited_per_client_address() {
    use leptos::server_fn::ServerFn;
    let (_db, app) = signed_in_fixture(&[]).await;
    let path = <app::auth::SsoStart as ServerFn>::PATH;
    for n in 1..=30 {
        let (status, _, body) = call(&app, path, None, "email=someone%40nowhere.example").await;
        assert_ne!(status, StatusCode::TOO_MANY_REQUESTS, "start {n}: {body}");
        assert!(status.is_client_error(), "start {n}: {status} {body}");
    }
    // The bucket refills one start every 2 s, so on a slow machine a start or two more may
    // get through; within ten more, one must be refused.
    let mut limited = None;
    for _ in 0..10 {
        let (status, headers, _) = call(&app, path, None, "email=someone%40nowhere.example").await;
        if status == StatusCode::TOO_MANY_REQUESTS {
            limited = Some(headers);
            break;
        }
    }
    let headers = limited.expect("a 31st start in quick succession is refused with 429");
    let wait: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&wait), "retry after {wait} s");
}

#[tokio::test]
async fn sign_in_returns_to_the_page_that_asked_for_it_and_only_to_this_site() {
    let (_c, app) = signed_in_fixture(&[]).await;
    use leptos::server_fn::ServerFn;
    let path = <app::auth::BreakGlassSignIn as ServerFn>::PATH;
    for (next, expected) in [
        ("%2Fbilling%3Fmonth%3D2026-10", "/billing?month=2026-10"),
        ("%2F%2Fevil.example%2F", "/admin"),
        ("https%3A%2F%2Fevil.example%2F", "/admin"),
        ("%2F%5Cevil.example", "/admin"),
    ] {
        let res = app
            .clone()
            .oneshot(
                Request::post(path)
                    .header("content-type", "application/x-www-form-urlencoded")
                    .header("accept", "text/html")
                    .header("origin", ORIGIN)
                    .body(Body::from(format!(
                        "email=ada%40platform.example&password={}&next={next}",
                        ADMIN_PW.replace(' ', "+")
                    )))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::FOUND, "{next}");
        assert_eq!(res.headers().get("location").unwrap(), expected, "{next}");
    }
}
