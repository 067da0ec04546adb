//! Volumes through the public API with the real storage worker: a qemu-storage-daemon serving
//! qcow2 files over NBD on loopback, driven by the server's worker as in production; the host
//! side answered through the agent API as the node agent answers. Data written through the
//! export while attached to one instance is read back after attaching it to another, and a
//! snapshot of it is made into a new volume holding the bytes of its moment.
//!
//! Needs `qemu-img`, `qemu-io` and `qemu-storage-daemon`; without them it says SKIPPED.

use std::process::Command;
use std::time::Duration;

use agent_protocol::{TaskOutcome, TaskOutput, TaskSpec};
use axum::body::Body;
use control_plane::demo::ACME_RESEARCH;
use http::{Request, StatusCode};
use serde_json::{Value, json};
use test_db::fixtures::answer;

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
        .header("authorization", format!("Bearer {token}"))
        .header("idempotency-key", "vol-key-0001");
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

/// Polls the volume until it is in `state` (10 s at most).
async fn until(app: &axum::Router, token: &str, id: &str, state: &str) -> Value {
    until_at(app, token, &format!("/api/v1/volumes/{id}"), state).await
}

/// Polls `path` until what it answers is in `state` (10 s at most).
async fn until_at(app: &axum::Router, token: &str, path: &str, state: &str) -> Value {
    for _ in 0..200 {
        let (status, v) = call(app, "GET", path, token, None).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        if v["state"] == state {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{path} never became {state}");
}

/// A POST with its own idempotency key.
async fn post_keyed(
    app: &axum::Router,
    path: &str,
    token: &str,
    body: Value,
    key: &str,
) -> (StatusCode, Value) {
    let req = Request::post(path)
        .header("authorization", format!("Bearer {token}"))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let (status, _, text) = support::send(app, req).await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The host answers the volumes update it is handed (10 s at most for the worker to queue
/// it) with what the plan names; the plan.
async fn plug(
    cp: &control_plane::ControlPlane,
    agent: &control_plane::agent_api::NodeAgent,
) -> agent_protocol::VolumesPlan {
    for _ in 0..200 {
        let queued: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM agent_tasks WHERE kind = 'allocation.volumes_update' AND state = 'queued'",
        )
        .fetch_one(cp.pool())
        .await
        .unwrap();
        if queued > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
    match spec {
        TaskSpec::VolumesUpdate(p) => p,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_volume_keeps_its_data_from_one_instance_to_the_next_through_the_api() {
    if let Some(why) = support::missing_qemu_tools() {
        println!("SKIPPED: {why}");
        return;
    }
    let (_db, state, agent) = support::demo_with_node("gpu-vol-1").await;
    let cp = state.cp.clone();
    let app = server::router(state);
    let support::Storage {
        dir,
        backend,
        port,
        worker,
    } = support::storage_worker(&cp, "volumes-api");
    let (alice, reader, carol) = support::acme_and_globex_tokens(&cp).await;

    // Created once per key; bad input names its field and makes nothing.
    let new = json!({"project": ACME_RESEARCH.to_string(), "name": "checkpoints", "region": "eu-west-1", "size_gib": 1});
    let (status, v) = call(&app, "POST", "/api/v1/volumes", &alice, Some(new.clone())).await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let (status, again) = call(&app, "POST", "/api/v1/volumes", &alice, Some(new.clone())).await;
    assert_eq!(
        (status, again["id"].as_str()),
        (StatusCode::CREATED, Some(id.as_str()))
    );
    for (body, field) in [
        (
            json!({"project": ACME_RESEARCH.to_string(), "name": "x", "region": "eu-west-1", "size_gib": 0}),
            "size_gib",
        ),
        (
            json!({"project": ACME_RESEARCH.to_string(), "name": "bad name", "region": "eu-west-1", "size_gib": 1}),
            "name",
        ),
        (
            json!({"project": ACME_RESEARCH.to_string(), "name": "x", "region": "mars", "size_gib": 1}),
            "region",
        ),
    ] {
        let req = Request::post("/api/v1/volumes")
            .header("authorization", format!("Bearer {alice}"))
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let (status, _, text) = support::send(&app, req).await;
        let problem: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (status, problem["field"].as_str()),
            (StatusCode::BAD_REQUEST, Some(field)),
            "{text}"
        );
    }
    until(&app, &alice, &id, "available").await;
    // It costs its size at its region's price, and the prices are public.
    let (_, v) = call(&app, "GET", &format!("/api/v1/volumes/{id}"), &alice, None).await;
    assert_eq!(
        v["monthly_cost"],
        json!({"amount_minor": 10, "currency": "USD"}),
        "1 GiB at 0.10 USD per GiB-month: {v}"
    );
    let req = Request::get("/api/v1/storage-prices")
        .body(Body::empty())
        .unwrap();
    let (status, _, text) = support::send(&app, req).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let prices: Value = serde_json::from_str(&text).unwrap();
    assert!(
        prices["storage_prices"].as_array().unwrap().contains(
            &json!({"region": "eu-west-1", "currency": "USD", "per_gib_month_micro": 100000})
        ),
        "{prices}"
    );

    // Another organization doesn't see it; a read-only token can't change it.
    let (status, _) = call(&app, "GET", &format!("/api/v1/volumes/{id}"), &carol, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(
        &app,
        "DELETE",
        &format!("/api/v1/volumes/{id}"),
        &carol,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(
        &app,
        "POST",
        &format!("/api/v1/volumes/{id}/detach"),
        &reader,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // An instance that is not the project's is refused on the field, not as a missing volume.
    let (status, problem) = call(
        &app,
        "POST",
        &format!("/api/v1/volumes/{id}/attach"),
        &alice,
        Some(json!({"instance": uuid::Uuid::new_v4()})),
    )
    .await;
    assert_eq!(
        (status, problem["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("instance")),
        "{problem}"
    );

    // Attached to a first instance; the host plugs in what the backend serves.
    let first = launch(&app, &cp, &agent, &alice, "first").await;
    let (status, v) = call(
        &app,
        "POST",
        &format!("/api/v1/volumes/{id}/attach"),
        &alice,
        Some(json!({"instance": first})),
    )
    .await;
    assert_eq!(
        (status, v["state"].as_str()),
        (StatusCode::ACCEPTED, Some("attaching")),
        "{v}"
    );
    let plan = plug(&cp, &agent).await;
    let uri = plan.volumes[0].target.uri();
    assert_eq!(
        uri,
        format!(
            "nbd://127.0.0.1:{port}/{}",
            storage::VolumeKey::of(id.parse().unwrap())
        )
    );
    let v = until(&app, &alice, &id, "in_use").await;
    assert_eq!(v["attached_to"], first);
    let (ok, out) = support::qemu_io(&uri, "write -P 0x3c 0 2M");
    assert!(ok, "the guest writes: {out}");

    // Not deleted while attached.
    let (status, problem) = call(
        &app,
        "DELETE",
        &format!("/api/v1/volumes/{id}"),
        &alice,
        None,
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::CONFLICT, Some("volume_in_use")),
        "{problem}"
    );

    // Detached, attached to a second instance: what the first wrote is there.
    let (status, _) = call(
        &app,
        "POST",
        &format!("/api/v1/volumes/{id}/detach"),
        &alice,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert!(plug(&cp, &agent).await.volumes.is_empty());
    until(&app, &alice, &id, "available").await;
    assert!(
        !support::qemu_io(&uri, "read 0 512").0,
        "not served while detached"
    );
    let second = launch(&app, &cp, &agent, &alice, "second").await;
    call(
        &app,
        "POST",
        &format!("/api/v1/volumes/{id}/attach"),
        &alice,
        Some(json!({"instance": second})),
    )
    .await;
    let plan = plug(&cp, &agent).await;
    until(&app, &alice, &id, "in_use").await;
    let (ok, out) = support::qemu_io(&plan.volumes[0].target.uri(), "read -P 0x3c 0 2M");
    assert!(ok, "the second instance reads what the first wrote: {out}");

    // Grown while attached; listed; then detached and deleted: erased, with its record.
    let (status, v) = call(
        &app,
        "PATCH",
        &format!("/api/v1/volumes/{id}"),
        &alice,
        Some(json!({"size_gib": 2})),
    )
    .await;
    assert_eq!(
        (status, v["size_gib"].as_u64()),
        (StatusCode::OK, Some(2)),
        "{v}"
    );
    let (_, list) = call(
        &app,
        "GET",
        &format!("/api/v1/volumes?project={ACME_RESEARCH}"),
        &alice,
        None,
    )
    .await;
    assert_eq!(list["volumes"].as_array().unwrap().len(), 1);

    // A snapshot while attached keeps the bytes of its moment; a new volume made from it
    // (its region and size left to the snapshot) holds them, whatever was written after.
    let (status, s) = post_keyed(
        &app,
        &format!("/api/v1/volumes/{id}/snapshots"),
        &alice,
        json!({"name": "after-first"}),
        "snap-key-0001",
    )
    .await;
    assert_eq!(
        (status, s["state"].as_str(), s["volume_name"].as_str()),
        (StatusCode::CREATED, Some("creating"), Some("checkpoints")),
        "{s}"
    );
    let snap = s["id"].as_str().unwrap().to_owned();
    let s = until_at(
        &app,
        &alice,
        &format!("/api/v1/snapshots/{snap}"),
        "available",
    )
    .await;
    assert_eq!(
        s["monthly_cost"],
        json!({"amount_minor": 20, "currency": "USD"}),
        "2 GiB at 0.10 USD per GiB-month: {s}"
    );
    let (ok, out) = support::qemu_io(&plan.volumes[0].target.uri(), "write -P 0x99 0 2M");
    assert!(ok, "the guest writes on: {out}");
    let (status, r) = post_keyed(
        &app,
        "/api/v1/volumes",
        &alice,
        json!({"project": ACME_RESEARCH.to_string(), "name": "restored", "snapshot": snap}),
        "restore-key-0001",
    )
    .await;
    assert_eq!(
        (status, r["region"].as_str(), r["size_gib"].as_u64()),
        (StatusCode::CREATED, Some("eu-west-1"), Some(2)),
        "{r}"
    );
    let restored = r["id"].as_str().unwrap().to_owned();
    until(&app, &alice, &restored, "available").await;
    let file = dir.join(format!(
        "{}.qcow2",
        storage::VolumeKey::of(restored.parse().unwrap())
    ));
    let out = Command::new("qemu-io")
        .args(["-f", "qcow2", "-r"])
        .arg(&file)
        .args(["-c", "read -P 0x3c 0 2M"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && !text.contains("failed"),
        "the new volume holds the snapshot's bytes: {text}"
    );
    // Another organization sees none of it.
    let (status, _) = call(
        &app,
        "GET",
        &format!("/api/v1/snapshots/{snap}"),
        &carol,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    call(
        &app,
        "POST",
        &format!("/api/v1/volumes/{id}/detach"),
        &alice,
        None,
    )
    .await;
    plug(&cp, &agent).await;
    until(&app, &alice, &id, "available").await;
    assert_eq!(backend_size(&backend, &id), Some(2));
    // Not deleted while it has a snapshot; the snapshot is deleted first.
    let (status, problem) = call(
        &app,
        "DELETE",
        &format!("/api/v1/volumes/{id}"),
        &alice,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("snapshot"),
        "{problem}"
    );
    let (status, _) = call(
        &app,
        "DELETE",
        &format!("/api/v1/snapshots/{snap}"),
        &alice,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    for _ in 0..200 {
        let (status, _) = call(
            &app,
            "GET",
            &format!("/api/v1/snapshots/{snap}"),
            &alice,
            None,
        )
        .await;
        if status == StatusCode::NOT_FOUND {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, _) = call(
        &app,
        "DELETE",
        &format!("/api/v1/volumes/{id}"),
        &alice,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    for _ in 0..200 {
        let (status, _) = call(&app, "GET", &format!("/api/v1/volumes/{id}"), &alice, None).await;
        if status == StatusCode::NOT_FOUND {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let bytes: i64 = sqlx::query_scalar(
        "SELECT bytes_overwritten FROM volume_erasures WHERE volume_id = $1::uuid",
    )
    .bind(&id)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert!(
        bytes >= 2 << 20,
        "what was written was overwritten: {bytes}"
    );
    assert_eq!(backend_size(&backend, &id), None);
    worker.abort();
    backend.stop_daemon().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

fn backend_size(backend: &storage::QemuNbd, id: &str) -> Option<u32> {
    use storage::StorageBackend;
    backend
        .size(&storage::VolumeKey::of(id.parse().unwrap()))
        .unwrap()
        .map(|g| g.get())
}

/// A running instance launched through the API, its provision answered as the agent would.
async fn launch(
    app: &axum::Router,
    cp: &control_plane::ControlPlane,
    agent: &control_plane::agent_api::NodeAgent,
    token: &str,
    name: &str,
) -> String {
    let body = json!({"project": ACME_RESEARCH.to_string(), "sku": "h100.1x", "region": "eu-west-1",
        "image": "ubuntu-24.04-cuda", "name": name, "ssh_public_keys": [KEY]});
    let req = Request::post("/api/v1/instances")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let (status, _, text) = support::send(app, req).await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    answer(
        cp,
        agent,
        &["validate_plan", "write_image", "start_vm"],
        test_db::fixtures::provisioned,
    )
    .await;
    v["id"].as_str().unwrap().to_owned()
}
