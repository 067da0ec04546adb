//! The HTTP surface against a real, private PostgreSQL that the test stops and starts.

use axum::body::Body;
use clap::Parser;
use http::{Request, StatusCode};
use pgcluster::{Durability, PgCluster, StopOnDrop};
use server::config::Config;
use server::{AppState, control_plane, leptos_options, router};
use tower::ServiceExt;

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    config: Config,
}

fn config(database_url: &str) -> Config {
    Flags::parse_from([
        "server",
        "--database-url",
        database_url,
        "--db-acquire-timeout-secs",
        "2",
    ])
    .config
}

async fn get(app: &axum::Router, path: &str) -> (StatusCode, http::HeaderMap, String) {
    let res = app
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let body = axum::body::to_bytes(res.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
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
    let cp = control_plane(&cfg).unwrap();
    let app = router(AppState {
        leptos: leptos_options(&cfg),
        cp: cp.clone(),
    });

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

    // It comes back: the same pool recovers without a restart.
    pg.start().unwrap();
    let (status, _, body) = get(&app, "/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn every_response_carries_a_request_id_and_unknown_pages_are_404() {
    let c = cluster("reqid");
    let pg = c.pg.as_ref().unwrap();
    pg.start().unwrap();
    pg.ensure_database("portal").unwrap();
    let cfg = config(&pg.url("portal"));
    let cp = control_plane(&cfg).unwrap();
    cp.migrate().await.unwrap();
    let app = router(AppState {
        leptos: leptos_options(&cfg),
        cp,
    });

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

    let (status, _, body) = get(&app, "/no/such/page").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("Page not found"), "{body}");

    // A page renders server-side with the live status (no wasm needed).
    let (status, _, body) = get(&app, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#"data-status="ready""#), "{body}");
    let (status, _, body) = get(&app, "/catalog").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("Not built yet"), "{body}");
}
