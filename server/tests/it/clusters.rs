//! Clusters through the public API and `gpuctl`, on a served portal: a refusal that says what
//! would fit, a launch that waits until every member runs (the agents answering as the node
//! agent does), the members' leaves and SSH commands, the topology as Slurm reads it, another
//! organization's token seeing nothing, and the release of every member.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use control_plane::api_tokens::TokenScope;
use control_plane::demo::{ACME, ACME_RESEARCH, GLOBEX};
use control_plane::fleet::TopologyFormat;
use control_plane::prelude::*;
use gpuctl::{Cli, Done, exit};
use http::{Request, StatusCode};
use serde_json::{Value, json};
use test_db::fixtures::{answer, approved, node, operator, provisioned};

use crate::support;

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice@laptop";

/// Two leaves of two nodes under one spine.
const FABRIC: &str = "SwitchName=l1 Nodes=k[01-02]\nSwitchName=l2 Nodes=k[03-04]\n\
                      SwitchName=s1 Switches=l[1-2]\n";

async fn gpuctl(api: &str, token_file: &str, args: &[&str]) -> (Done, String, String) {
    let mut argv = vec!["gpuctl", "--api", api, "--token-file", token_file];
    argv.extend_from_slice(args);
    let cli = <Cli as clap::Parser>::try_parse_from(&argv).unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let done = gpuctl::run(cli, &mut out, &mut err).await;
    (
        done,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

async fn rest(
    app: &axum::Router,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, String) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {token}"));
    let req = match body {
        Some(b) => req
            .header("content-type", "application/json")
            .body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    }
    .unwrap();
    let (status, _, text) = support::send(app, req).await;
    (status, text)
}

#[tokio::test]
async fn a_cluster_launches_whole_through_gpuctl_and_the_api_and_is_released_as_one() {
    let db = test_db::demo().await;
    let state = server::app_state(&support::config(&db.url(), &[])).unwrap();
    let cp = state.cp.clone();
    let ops = operator(&cp, "ops@platform.example").await;
    let mut agents = Vec::new();
    for h in ["k01", "k02", "k03", "k04"] {
        let n = node(h, "eu-west-1", "hgx-h100-8x", &["gpu_slice", "baremetal"]);
        agents.push(
            approved(&cp, &ops, n, "hgx-h100-8x", "nvme-format-crypto")
                .await
                .1,
        );
    }
    cp.import_fabric(&ops, "ib0", TopologyFormat::SlurmTopology, FABRIC, None)
        .await
        .unwrap();
    let app = server::router(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = server::router(state).into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, served).await });
    let api = format!("http://{addr}/api/v1");
    let dir = std::env::temp_dir().join(format!("clusters-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let (alice, _) = support::api_token(
        &cp,
        "alice@acme.example",
        ACME,
        Some(ACME_RESEARCH),
        &[TokenScope::Read, TokenScope::Launch],
    )
    .await;
    let token_file = dir.join("token");
    std::fs::write(&token_file, &alice).unwrap();
    let token_file = token_file.to_str().unwrap();
    let key_file = dir.join("id.pub");
    std::fs::write(&key_file, KEY).unwrap();
    let key_file = key_file.to_str().unwrap();

    // Three on one leaf, required: no leaf has three; the refusal says what fits.
    let (done, _, err) = gpuctl(
        &api,
        token_file,
        &[
            "cluster",
            "launch",
            "--sku",
            "h100.8x",
            "--image",
            "ubuntu-24.04-cuda",
            "--name",
            "tri",
            "--members",
            "3",
            "--locality",
            "leaf",
            "--required",
            "--ssh-key",
            key_file,
        ],
    )
    .await;
    assert_eq!(done, Done::Exit(exit::REFUSED), "{err}");
    assert!(
        err.contains("3 members don't fit on one leaf now: one leaf holds at most 2"),
        "{err}"
    );
    assert!(err.contains("(sku_unavailable)"), "{err}");

    // Bad input names its field.
    let (status, text) = rest(
        &app,
        "POST",
        "/api/v1/clusters",
        &alice,
        Some(json!({
        "sku": "h100.8x", "members": 1, "locality": "leaf", "image": "ubuntu-24.04-cuda",
        "name": "x", "ssh_public_keys": [KEY]})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["field"],
        "members"
    );

    // Four preferred on one leaf: placed across the spine's two leaves, then followed by
    // --wait while the agents bring each member up.
    let ring_args = [
        "cluster",
        "launch",
        "--sku",
        "h100.8x",
        "--image",
        "ubuntu-24.04-cuda",
        "--name",
        "ring",
        "--members",
        "4",
        "--locality",
        "leaf",
        "--ssh-key",
        key_file,
        "--wait",
        "--timeout",
        "60",
    ];
    let launch = gpuctl(&api, token_file, &ring_args);
    let agents_answer = async {
        for _ in 0..400 {
            let queued: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM agent_tasks WHERE kind = 'slice.vm_provision' AND state = 'queued'",
            )
            .fetch_one(cp.pool())
            .await
            .unwrap();
            if queued == 4 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        for agent in &agents {
            answer(
                &cp,
                agent,
                &["validate_plan", "write_image", "start_vm"],
                provisioned,
            )
            .await;
        }
    };
    let ((done, out, err), ()) = tokio::join!(launch, agents_answer);
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    assert!(
        err.contains("4 members on 2 leaf switches of spine s1 (fabric ib0)"),
        "{err}"
    );
    assert_eq!(
        out.lines()
            .filter(|l| l.contains("running") && l.contains("ssh "))
            .count(),
        4,
        "{out}"
    );
    let id = out.split_whitespace().next().unwrap().to_owned();

    let (status, text) = rest(&app, "GET", &format!("/api/v1/clusters/{id}"), &alice, None).await;
    assert_eq!(status, StatusCode::OK);
    let c: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (
            c["state"].as_str(),
            c["placed_within"].as_str(),
            c["leaves"].as_u64()
        ),
        (Some("running"), Some("spine"), Some(2))
    );
    let leaves: Vec<&str> = c["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["leaf"].as_str().unwrap())
        .collect();
    assert_eq!(leaves, ["l1", "l1", "l2", "l2"]);

    // The topology as Slurm's tree plugin reads it.
    let (done, topo, err) = gpuctl(&api, token_file, &["cluster", "topology", &id]).await;
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    assert!(topo.contains("SwitchName=l1 Nodes=ring-1,ring-2\nSwitchName=l2 Nodes=ring-3,ring-4\nSwitchName=s1 Switches=l1,l2\n"), "{topo}");
    // Its hosts file: the project keeps east-west traffic off, so no member has an address.
    let (done, hosts, err) = gpuctl(
        &api,
        token_file,
        &["cluster", "topology", &id, "--format", "hosts"],
    )
    .await;
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    assert!(hosts.contains("# ring-1: no private address\n"), "{hosts}");
    let (status, _) = rest(
        &app,
        "GET",
        &format!("/api/v1/clusters/{id}/topology?format=xml"),
        &alice,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Another organization sees nothing of it.
    let (carol, _) = support::api_token(
        &cp,
        "carol@globex.example",
        GLOBEX,
        None,
        &[TokenScope::Read, TokenScope::Launch],
    )
    .await;
    for (method, path) in [
        ("GET", format!("/api/v1/clusters/{id}")),
        ("GET", format!("/api/v1/clusters/{id}/topology")),
        ("DELETE", format!("/api/v1/clusters/{id}")),
    ] {
        let (status, _) = rest(&app, method, &path, &carol, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}");
    }
    let (status, text) = rest(&app, "GET", "/api/v1/clusters", &carol, None).await;
    assert_eq!((status, text.contains(&id)), (StatusCode::OK, false));

    // Released as one.
    let (done, out, err) = gpuctl(&api, token_file, &["cluster", "release", &id]).await;
    assert_eq!(done, Done::Exit(exit::OK), "{err}");
    assert!(out.contains("releasing"), "{out}");
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM allocations WHERE cluster_id = $1 AND desired_state = 'running'",
    )
    .bind(uuid::Uuid::parse_str(&id).unwrap())
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(live, 0);
    let (done, out, _) = gpuctl(&api, token_file, &["cluster", "ls"]).await;
    assert_eq!(done, Done::Exit(exit::OK));
    assert!(out.contains("ring") && out.contains("releasing"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
