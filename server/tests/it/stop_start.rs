//! Stop and start through the public API with the real storage worker: a qemu-storage-daemon
//! serving qcow2 files over NBD on loopback, driven by the server's worker as in production;
//! the host's side answered through the agent API as the node agent answers (the agent's own
//! copy of the disk is `node-agent/tests/it/stop_start.rs`). What the host saved at the stop is
//! what the start's host is told to restore, under the same instance id; the saved disk is
//! billed as storage while stopped and erased once the instance runs again.
//!
//! Needs `qemu-img`, `qemu-io` and `qemu-storage-daemon`; without them it says SKIPPED.

use std::time::Duration;

use agent_protocol::{TaskOutcome, TaskOutput, TaskSpec};
use axum::body::Body;
use control_plane::demo::ACME_RESEARCH;
use control_plane::prelude::*;
use http::{Request, StatusCode};
use serde_json::{Value, json};
use test_db::fixtures::{answer, approved, node, operator, provisioned, signed_proof};

use crate::support;

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice@laptop";

async fn call(
    app: &axum::Router,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
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
    let v = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: {e}: {text}"))
    };
    (status, v)
}

/// Polls the instance until it reads `state` (10 s at most).
async fn until(app: &axum::Router, token: &str, id: &str, state: &str) -> Value {
    for _ in 0..200 {
        let (status, v) = call(app, "GET", &format!("/api/v1/instances/{id}"), token, None).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        if v["state"] == state {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{id} never became {state}");
}

/// Waits for a queued task of `kind` (10 s at most: the storage worker queues a stop's).
async fn queued(cp: &control_plane::ControlPlane, kind: &str) {
    for _ in 0..200 {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM agent_tasks WHERE kind = $1 AND state = 'queued'",
        )
        .bind(kind)
        .fetch_one(cp.pool())
        .await
        .unwrap();
        if n > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no {kind} task was queued");
}

async fn launch(app: &axum::Router, token: &str, sku: &str, name: &str) -> (StatusCode, Value) {
    let body = json!({"project": ACME_RESEARCH.to_string(), "sku": sku, "region": "eu-west-1",
        "image": "ubuntu-24.04-cuda", "name": name, "ssh_public_keys": [KEY],
        "tags": {"team": "vision"}, "published_ports": [8888]});
    call(app, "POST", "/api/v1/instances", token, Some(body)).await
}

/// Polls the volume until it is in `state` (10 s at most).
async fn volume_until(app: &axum::Router, token: &str, id: &str, state: &str) -> Value {
    for _ in 0..200 {
        let (_, v) = call(app, "GET", &format!("/api/v1/volumes/{id}"), token, None).await;
        if v["state"] == state {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("volume {id} never became {state}");
}

/// The host answers the volumes update it is handed (once the worker queued it), plugging in
/// what the plan names; the plan, which must name `n` volumes.
async fn plug(
    cp: &control_plane::ControlPlane,
    agent: &control_plane::agent_api::NodeAgent,
    n: usize,
) -> agent_protocol::VolumesPlan {
    queued(cp, "allocation.volumes_update").await;
    let spec = answer(cp, agent, &["validate_plan", "plug_volumes"], |spec| {
        let TaskSpec::VolumesUpdate(plan) = spec else {
            panic!("{spec:?}")
        };
        TaskOutcome::Succeeded {
            output: TaskOutput::VolumesUpdated {
                attached: plan.volumes.iter().map(|v| v.volume_id.clone()).collect(),
            },
        }
    })
    .await;
    let TaskSpec::VolumesUpdate(plan) = spec else {
        panic!("{spec:?}")
    };
    assert_eq!(plan.volumes.len(), n, "{plan:?}");
    plan
}

async fn root_volume(cp: &control_plane::ControlPlane, instance: &str) -> (uuid::Uuid, String) {
    sqlx::query_as(
        "SELECT id, state FROM volumes WHERE root_of = $1::uuid ORDER BY created_at DESC LIMIT 1",
    )
    .bind(instance)
    .fetch_one(cp.pool())
    .await
    .unwrap()
}

#[tokio::test]
async fn an_instance_stops_onto_a_saved_disk_and_starts_again_under_the_same_id() {
    if let Some(why) = support::missing_qemu_tools() {
        println!("SKIPPED: {why}");
        return;
    }
    let db = test_db::demo().await;
    let state = server::app_state(&support::config(&db.url(), &[])).unwrap();
    let cp = state.cp.clone();
    let ops = operator(&cp, "ops@platform.example").await;
    let (node_id, agent, credential) = approved(
        &cp,
        &ops,
        node(
            "gpu-stop-1",
            "eu-west-1",
            "hgx-h100-8x",
            &["gpu_slice", "baremetal"],
        ),
        "hgx-h100-8x",
        "nvme-format-crypto",
    )
    .await;
    let app = server::router(state);
    let support::Storage {
        backend,
        port,
        worker,
        ..
    } = support::storage_worker(&cp, "stop-start-api");
    let (alice, reader, carol) = support::acme_and_globex_tokens(&cp).await;

    let (status, v) = launch(&app, &alice, "h100.1x", "trainer").await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    answer(
        &cp,
        &agent,
        &["validate_plan", "write_image", "start_vm"],
        provisioned,
    )
    .await;
    let running = until(&app, &alice, &id, "running").await;
    assert_eq!(running["can_stop"], true, "{running}");
    // A data volume attached to it, plugged in by its host.
    let (status, v) = call(
        &app,
        "POST",
        "/api/v1/volumes",
        &alice,
        Some(json!({"project": ACME_RESEARCH.to_string(), "name": "datasets", "region": "eu-west-1", "size_gib": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let data = v["id"].as_str().unwrap().to_owned();
    volume_until(&app, &alice, &data, "available").await;
    let (status, v) = call(
        &app,
        "POST",
        &format!("/api/v1/volumes/{data}/attach"),
        &alice,
        Some(json!({"instance": id})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{v}");
    plug(&cp, &agent, 1).await;
    volume_until(&app, &alice, &data, "in_use").await;
    let stop = format!("/api/v1/instances/{id}/stop");
    let start = format!("/api/v1/instances/{id}/start");

    // Another organization doesn't find it; a read-only token can't stop it; nothing that
    // isn't stopped can be started.
    assert_eq!(
        call(&app, "POST", &stop, &carol, None).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        call(&app, "POST", &stop, &reader, None).await.0,
        StatusCode::FORBIDDEN
    );
    let (status, problem) = call(&app, "POST", &start, &alice, None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("Only a stopped instance can be started; trainer is running."),
        "{problem}"
    );

    // The stop: stopping at once (and again, idempotently); the release waits for the root
    // volume, then carries where to copy the disk.
    let (status, v) = call(&app, "POST", &stop, &alice, None).await;
    assert_eq!(
        (status, v["state"].as_str()),
        (StatusCode::ACCEPTED, Some("stopping")),
        "{v}"
    );
    assert_eq!(v["can_stop"], false);
    let (status, v) = call(&app, "POST", &stop, &alice, None).await;
    assert_eq!(
        (status, v["state"].as_str()),
        (StatusCode::ACCEPTED, Some("stopping")),
        "{v}"
    );
    queued(&cp, "slice.vm_release").await;
    let (root, _) = root_volume(&cp, &id).await;
    let expected = format!("nbd://127.0.0.1:{port}/{}", storage::VolumeKey::of(root));
    let spec = answer(
        &cp,
        &agent,
        &[
            "validate_plan",
            "stop_vm",
            "destroy_domain",
            "save_root_disk",
            "wipe_nvme",
        ],
        |spec| {
            let TaskSpec::VmRelease(plan) = spec else {
                panic!("{spec:?}")
            };
            let target = plan.save_root.as_ref().expect("a stop saves the disk");
            assert_eq!(target.uri(), expected);
            // The host copies the boot disk there.
            let (ok, out) = support::qemu_io(&target.uri(), "write -P 0x5a 0 1M");
            assert!(ok, "{out}");
            TaskOutcome::Succeeded {
                output: TaskOutput::Cleaned(signed_proof(node_id, &credential, plan)),
            }
        },
    )
    .await;
    assert!(matches!(spec, TaskSpec::VmRelease(_)));
    let stopped = until(&app, &alice, &id, "stopped").await;
    assert_eq!(stopped["ssh"], Value::Null, "{stopped}");
    assert_eq!(stopped["can_start"], true);
    let disk = &stopped["stopped_disk"];
    let gib = disk["size_gib"].as_u64().unwrap();
    assert!(gib >= 1, "{stopped}");
    // Billed as storage while stopped, at the region's 0.10 USD per GiB-month.
    assert_eq!(
        disk["monthly_cost"]["amount_minor"].as_u64(),
        Some(gib * 10),
        "{stopped}"
    );
    let metered: i64 =
        sqlx::query_scalar("SELECT count(*) FROM storage_intervals WHERE volume_id = $1")
            .bind(root)
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(metered, 1, "the saved disk is metered as storage");
    // The instance is still listed among the active ones, as stopped; its disk is not one of
    // the project's volumes, and can't be reached as one.
    let (_, list) = call(&app, "GET", "/api/v1/instances?state=stopped", &alice, None).await;
    let listed: Vec<&Value> = list["instances"].as_array().unwrap().iter().collect();
    assert_eq!(listed.len(), 1, "{list}");
    assert_eq!(
        (listed[0]["id"].as_str(), listed[0]["state"].as_str()),
        (Some(id.as_str()), Some("stopped"))
    );
    let (_, active) = call(&app, "GET", "/api/v1/instances", &alice, None).await;
    assert!(
        active["instances"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["id"] == id.as_str())
    );
    let (_, volumes) = call(
        &app,
        "GET",
        &format!("/api/v1/volumes?project={ACME_RESEARCH}"),
        &alice,
        None,
    )
    .await;
    let names: Vec<&str> = volumes["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["datasets"],
        "the root disk is no volume of the project's"
    );
    let (status, _) = call(
        &app,
        "GET",
        &format!("/api/v1/volumes/{root}"),
        &alice,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // The data volume stays attached to the stopped instance.
    let (_, v) = call(
        &app,
        "GET",
        &format!("/api/v1/volumes/{data}"),
        &alice,
        None,
    )
    .await;
    assert_eq!(
        (v["state"].as_str(), v["attached_to"].as_str()),
        (Some("in_use"), Some(id.as_str())),
        "{v}"
    );

    // While it is stopped, something else takes the whole node: starting it is refused with
    // placement's reason, and it stays stopped.
    let (status, v) = launch(&app, &alice, "h100.8x", "filler").await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let filler = v["id"].as_str().unwrap().to_owned();
    let (status, problem) = call(&app, "POST", &start, &alice, None).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::CONFLICT, Some("sku_unavailable")),
        "{problem}"
    );
    until(&app, &alice, &id, "stopped").await;
    let (status, _) = call(
        &app,
        "DELETE",
        &format!("/api/v1/instances/{filler}"),
        &alice,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // The filler's provision was never claimed, so it ends without a wipe.
    until(&app, &alice, &filler, "released").await;

    // The start: the same id, name, tags and ports; the host restores the saved disk.
    let (status, v) = call(&app, "POST", &start, &alice, None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{v}");
    assert_eq!(
        (v["id"].as_str(), v["name"].as_str()),
        (Some(id.as_str()), Some("trainer"))
    );
    assert_eq!(
        call(&app, "POST", &start, &alice, None).await.0,
        StatusCode::ACCEPTED
    );
    let spec = answer(
        &cp,
        &agent,
        &["validate_plan", "write_image", "start_vm"],
        |spec| {
            let TaskSpec::VmProvision(plan) = spec else {
                panic!("{spec:?}")
            };
            let target = plan
                .restore_from
                .as_ref()
                .expect("a start restores the disk");
            assert_eq!(target.uri(), expected);
            let (ok, out) = support::qemu_io(&target.uri(), "read -P 0x5a 0 1M");
            assert!(ok, "the start's host reads what the stop saved: {out}");
            provisioned(spec)
        },
    )
    .await;
    let TaskSpec::VmProvision(plan) = spec else {
        panic!()
    };
    assert_eq!(plan.name, "trainer");
    assert_eq!(plan.network.published.len(), 1, "{:?}", plan.network);
    let again = until(&app, &alice, &id, "running").await;
    // Its volume is plugged into the new run's VM, and still reads as attached to it.
    cp.dispatch_outbox(10).await.unwrap();
    let plan = plug(&cp, &agent, 1).await;
    assert_eq!(plan.volumes[0].volume_id, data);
    let v = volume_until(&app, &alice, &data, "in_use").await;
    assert_eq!(v["attached_to"].as_str(), Some(id.as_str()), "{v}");
    assert_eq!(again["tags"], json!({"team": "vision"}));
    assert!(again["ssh"].as_str().is_some(), "{again}");
    assert_eq!(again["stopped_disk"], Value::Null);
    // Running again, its saved disk is erased (with the signed record every volume gets).
    for _ in 0..200 {
        if root_volume(&cp, &id).await.1 == "deleted" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(root_volume(&cp, &id).await.1, "deleted");
    let erased: i64 =
        sqlx::query_scalar("SELECT count(*) FROM volume_erasures WHERE volume_id = $1")
            .bind(root)
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(erased, 1);
    let (_, list) = call(&app, "GET", "/api/v1/instances?state=all", &alice, None).await;
    let trainers = list["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["name"] == "trainer")
        .count();
    assert_eq!(trainers, 1, "one instance, however many runs: {list}");

    // Stopped again, then released while stopped: the saved disk goes with it.
    call(&app, "POST", &stop, &alice, None).await;
    queued(&cp, "slice.vm_release").await;
    answer(
        &cp,
        &agent,
        &["validate_plan", "save_root_disk", "wipe_nvme"],
        |spec| {
            let TaskSpec::VmRelease(plan) = spec else {
                panic!("{spec:?}")
            };
            TaskOutcome::Succeeded {
                output: TaskOutput::Cleaned(signed_proof(node_id, &credential, plan)),
            }
        },
    )
    .await;
    until(&app, &alice, &id, "stopped").await;
    let (second_root, _) = root_volume(&cp, &id).await;
    assert_ne!(
        second_root, root,
        "each stop saves into a volume of its own"
    );
    let (status, v) = call(
        &app,
        "DELETE",
        &format!("/api/v1/instances/{id}"),
        &alice,
        None,
    )
    .await;
    assert_eq!(
        (status, v["state"].as_str()),
        (StatusCode::ACCEPTED, Some("released")),
        "{v}"
    );
    for _ in 0..200 {
        if root_volume(&cp, &id).await.1 == "deleted" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(root_volume(&cp, &id).await.1, "deleted");
    // Its volume is free again.
    volume_until(&app, &alice, &data, "available").await;
    let actions: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_log WHERE action LIKE 'instance.%' ORDER BY id",
    )
    .fetch_all(cp.pool())
    .await
    .unwrap();
    assert_eq!(
        actions,
        ["instance.stop", "instance.start", "instance.stop"]
    );
    worker.abort();
    backend.stop_daemon().unwrap();
}
