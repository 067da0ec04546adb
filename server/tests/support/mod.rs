//! What the server's test binaries share: calling a server function the way the hydrated
//! page does.
// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use axum::body::Body;
use clap::Parser;
use http::{Request, StatusCode};
use server::config::Config;
use tower::ServiceExt;

/// The public origin the tests' portals are configured with.
pub const ORIGIN: &str = "http://127.0.0.1:3000";

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    config: Config,
}

/// The server's configuration as its flags would give it: the database, a 2 s pool acquire
/// timeout, [`ORIGIN`] as the public URL unless `extra` names another, then `extra`.
pub fn config(database_url: &str, extra: &[&str]) -> Config {
    let mut args = vec![
        "server",
        "--database-url",
        database_url,
        "--db-acquire-timeout-secs",
        "2",
    ];
    if !extra.contains(&"--public-url") {
        args.extend(["--public-url", ORIGIN]);
    }
    args.extend_from_slice(extra);
    Flags::parse_from(args).config
}

/// One request through the whole router: the status, the headers and the body (up to 1 MiB).
pub async fn send(app: &axum::Router, req: Request<Body>) -> (StatusCode, http::HeaderMap, String) {
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let body = axum::body::to_bytes(res.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

/// A plain GET through the whole router.
pub async fn get(app: &axum::Router, path: &str) -> (StatusCode, http::HeaderMap, String) {
    send(app, Request::get(path).body(Body::empty()).unwrap()).await
}

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
    send(app, req.body(Body::from(form.to_string())).unwrap()).await
}

/// `pairs` as a form body.
pub fn form(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", gpuctl::encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A copy of the demo database with one approved 8-GPU HGX node `hostname` in eu-west-1, the
/// server's state on it, and that node's agent (for answering its tasks).
pub async fn demo_with_node(
    hostname: &str,
) -> (
    test_db::TestDb,
    server::AppState,
    control_plane::agent_api::NodeAgent,
) {
    use test_db::fixtures::{approved, node, operator};
    let db = test_db::demo().await;
    let state = server::app_state(&config(&db.url(), &[])).unwrap();
    let ops = operator(&state.cp, "ops@platform.example").await;
    let (_, agent, _) = approved(
        &state.cp,
        &ops,
        node(
            hostname,
            "eu-west-1",
            "hgx-h100-8x",
            &["gpu_slice", "baremetal"],
        ),
        "hgx-h100-8x",
        "nvme-format-crypto",
    )
    .await;
    (db, state, agent)
}

/// An API token made by `maker` in `tenant`, for `project` or the whole organization; its
/// secret and id.
#[allow(unused_imports)]
pub use test_db::fixtures::api_token;

/// Why the tests of volumes on the real qemu backend can't run here, if they can't: a tool of
/// theirs that is not installed.
pub fn missing_qemu_tools() -> Option<String> {
    ["qemu-img", "qemu-io", "qemu-storage-daemon"]
        .into_iter()
        .find_map(|tool| {
            let found = std::process::Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success());
            (!found).then(|| format!("{tool} is not installed"))
        })
}

/// `qemu-io` on a volume's address as a guest (or a host) would read or write it: whether the
/// command worked, and what it said.
pub fn qemu_io(uri: &str, command: &str) -> (bool, String) {
    let out = std::process::Command::new("qemu-io")
        .args(["-f", "raw", uri, "-c", command])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (
        out.status.success() && !text.contains("failed") && !text.contains("error"),
        text,
    )
}

/// A storage backend as the server runs it in tests: qcow2 files under a directory of its own,
/// served over NBD on a loopback port by `qemu-storage-daemon`, with the server's storage
/// worker driving it.
pub struct Storage {
    pub dir: std::path::PathBuf,
    pub backend: std::sync::Arc<storage::QemuNbd>,
    pub port: u16,
    pub worker: tokio::task::JoinHandle<()>,
}

pub fn storage_worker(cp: &control_plane::ControlPlane, name: &str) -> Storage {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let backend = std::sync::Arc::new(storage::QemuNbd::new(
        &dir,
        format!("127.0.0.1:{port}").parse().unwrap(),
        None,
    ));
    let worker = tokio::spawn(server::workers::storage(cp.clone(), backend.clone()));
    Storage {
        dir,
        backend,
        port,
        worker,
    }
}

/// Alice's token to read and launch in Acme, her read-only one, and Carol's to read and launch
/// in Globex.
pub async fn acme_and_globex_tokens(cp: &control_plane::ControlPlane) -> (String, String, String) {
    use control_plane::api_tokens::TokenScope;
    use control_plane::demo::{ACME, GLOBEX};
    let (alice, _) = api_token(
        cp,
        "alice@acme.example",
        ACME,
        None,
        &[TokenScope::Read, TokenScope::Launch],
    )
    .await;
    let (reader, _) = api_token(cp, "alice@acme.example", ACME, None, &[TokenScope::Read]).await;
    let (carol, _) = api_token(
        cp,
        "carol@globex.example",
        GLOBEX,
        None,
        &[TokenScope::Read, TokenScope::Launch],
    )
    .await;
    (alice, reader, carol)
}
