//! Snapshots against a real database: taken of a live volume, a new volume made from one
//! (the storage worker told what to copy), what may not be deleted while something depends
//! on it, failures kept to the snapshot, quota and metering. The backend's side runs with
//! real qemu tools in `storage`'s own test.

use control_plane::prelude::*;

use control_plane::demo::{ACME_INFERENCE, ACME_RESEARCH};
use control_plane::policy::PolicyValue;
use control_plane::volumes::VolumeRequest;
use control_plane::volumes::jobs::{JobKind, Outcome, VolumeJob, VolumeJobs};
use control_plane::volumes::snapshots::{SnapshotRequest, SnapshotState, SnapshotsApi};
use control_plane::{ControlPlane, Error, SnapshotId, VolumeId};

use crate::allocations::{BOB, member, research_policy, setup};
use crate::support::in_project;
use crate::volumes::{available, request};
use control_plane::tenancy::{Project, ProjectViewers};

fn snap(name: &str) -> SnapshotRequest {
    SnapshotRequest {
        name: name.into(),
        idempotency_key: uuid::Uuid::new_v4().to_string(),
    }
}

async fn viewer(cp: &ControlPlane) -> Project<ProjectViewers> {
    let p = cp.principal(BOB).await.unwrap().unwrap();
    in_project::<ProjectViewers>(cp, &p, ACME_RESEARCH).await
}

async fn next_job(cp: &ControlPlane) -> VolumeJob {
    cp.claim_volume_job().await.unwrap().expect("a job is due")
}

async fn snapshot_state(cp: &ControlPlane, id: SnapshotId) -> String {
    sqlx::query_scalar("SELECT state FROM volume_snapshots WHERE id = $1")
        .bind(id.0)
        .fetch_one(cp.pool())
        .await
        .unwrap()
}

async fn volume_state(cp: &ControlPlane, id: VolumeId) -> String {
    sqlx::query_scalar("SELECT state FROM volumes WHERE id = $1")
        .bind(id.0)
        .fetch_one(cp.pool())
        .await
        .unwrap()
}

/// Taken, a new volume made from it, deleted, then its volume deleted: each step in order,
/// each refusal on the way naming why.
#[tokio::test]
async fn a_snapshot_is_taken_restored_into_a_new_volume_and_erased() {
    let (_db, cp, _ops) = setup().await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let volume = available(&cp, &bob, "datasets").await;

    // Taken once per key; the worker is told which snapshot of which volume.
    let req = snap("before-upgrade");
    let made = cp.create_snapshot(&bob, volume, &req, None).await.unwrap();
    let again = cp.create_snapshot(&bob, volume, &req, None).await.unwrap();
    assert_eq!((made.id, again.created), (again.id, false));
    assert!(matches!(
        cp.create_snapshot(&bob, volume, &snap("before-upgrade"), None).await,
        Err(Error::Conflict(m)) if m.contains("named before-upgrade already")
    ));
    assert!(matches!(
        cp.create_snapshot(&bob, volume, &snap("Bad Name"), None)
            .await,
        Err(Error::Invalid { field: "name", .. })
    ));
    let job = next_job(&cp).await;
    assert_eq!((job.volume, job.kind), (volume, JobKind::Snapshot));
    let (id, key) = job.snapshot.clone().expect("the step names its snapshot");
    assert_eq!(id, made.id);
    assert_eq!(key, storage::VolumeKey::of(volume.0).snapshot(made.id.0));
    cp.finish_volume_job(&job, Outcome::Done).await.unwrap();
    let shown = cp.snapshot(&viewer(&cp).await, made.id).await.unwrap();
    assert_eq!(
        (shown.state, shown.size_gib, shown.volume_name.as_str()),
        (SnapshotState::Available, 10, "datasets")
    );
    assert_eq!(shown.monthly_cost.to_string(), "1.00 USD");

    // Its volume can't be deleted while it exists.
    assert!(matches!(
        cp.delete_volume(&bob, volume, None).await,
        Err(Error::Conflict(m)) if m.contains("has 1 snapshot; delete it first")
    ));
    assert_eq!(volume_state(&cp, volume).await, "available");

    // A new volume from it: the region and size are the snapshot's unless given; smaller or
    // elsewhere is refused on the field.
    let from = |name: &str, region: &str, size: u32| VolumeRequest {
        region: region.into(),
        snapshot: Some(made.id),
        ..request(name, size)
    };
    assert!(matches!(
        cp.create_volume(&bob, &from("small", "", 5), None).await,
        Err(Error::Invalid {
            field: "size_gib",
            ..
        })
    ));
    assert!(matches!(
        cp.create_volume(&bob, &from("far", "us-east-1", 0), None)
            .await,
        Err(Error::Invalid {
            field: "region",
            ..
        })
    ));
    let copy = cp
        .create_volume(&bob, &from("restored", "", 0), None)
        .await
        .unwrap()
        .id;
    let job = next_job(&cp).await;
    assert_eq!(
        (job.volume, job.kind, job.size.get()),
        (copy, JobKind::Create, 10)
    );
    assert_eq!(
        job.source,
        Some((
            storage::VolumeKey::of(volume.0),
            storage::VolumeKey::of(volume.0).snapshot(made.id.0)
        )),
        "the worker copies the snapshot"
    );
    // While it is being copied, the snapshot stays.
    assert!(matches!(
        cp.delete_snapshot(&bob, made.id, None).await,
        Err(Error::Conflict(m)) if m.contains("being copied into a new volume")
    ));
    cp.finish_volume_job(&job, Outcome::Done).await.unwrap();
    assert_eq!(volume_state(&cp, copy).await, "available");

    // Another project's snapshot is not found.
    let alice_inference = member(
        &cp,
        control_plane::UserId(uuid::uuid!("0a0e0000-0000-4000-8002-000000000001")),
        ACME_INFERENCE,
    )
    .await;
    let stolen = VolumeRequest {
        snapshot: Some(made.id),
        ..request("stolen", 10)
    };
    assert!(matches!(
        cp.create_volume(&alice_inference, &stolen, None).await,
        Err(Error::NotFound { what: "snapshot" })
    ));

    // Deleted: erased by the worker, then gone; then its volume may go.
    cp.delete_snapshot(&bob, made.id, None).await.unwrap();
    cp.delete_snapshot(&bob, made.id, None).await.unwrap();
    let job = next_job(&cp).await;
    assert_eq!(job.kind, JobKind::EraseSnapshot);
    cp.finish_volume_job(
        &job,
        Outcome::Erased {
            backend: "qemu-storage-daemon".into(),
            erasure: storage::Erasure {
                method: "overwritten with zeros".into(),
                bytes_overwritten: 1 << 20,
            },
        },
    )
    .await
    .unwrap();
    assert_eq!(snapshot_state(&cp, made.id).await, "deleted");
    assert!(cp.snapshots(&viewer(&cp).await).await.unwrap().is_empty());
    cp.delete_volume(&bob, volume, None).await.unwrap();
    assert_eq!(volume_state(&cp, volume).await, "deleting");

    // Metered from available to deleting, at its size and price.
    let meter: (i32, i64, bool) = sqlx::query_as(
        "SELECT size_gib, price_per_gib_month_micro, ended_at IS NOT NULL
         FROM storage_intervals WHERE snapshot_id = $1",
    )
    .bind(made.id.0)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(meter, (10, 100_000, true));
}

/// A snapshot that fails is the snapshot's error; its volume is untouched. Snapshots count
/// for the GiB quota; a volume being made can't be snapshotted.
#[tokio::test]
async fn a_failed_snapshot_leaves_its_volume_alone_and_snapshots_count_for_quota() {
    let (_db, cp, _ops) = setup().await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let volume = available(&cp, &bob, "work").await;
    let made = cp
        .create_snapshot(&bob, volume, &snap("nightly"), None)
        .await
        .unwrap();
    let job = next_job(&cp).await;
    cp.finish_volume_job(&job, Outcome::Failed("the backend ran out of space".into()))
        .await
        .unwrap();
    assert_eq!(snapshot_state(&cp, made.id).await, "error");
    assert_eq!(volume_state(&cp, volume).await, "available");
    let shown = cp.snapshot(&viewer(&cp).await, made.id).await.unwrap();
    assert!(shown.error.unwrap().contains("ran out of space"));
    // An errored snapshot can be deleted.
    cp.delete_snapshot(&bob, made.id, None).await.unwrap();
    assert_eq!(snapshot_state(&cp, made.id).await, "deleting");

    // 10 GiB volume + 10 GiB snapshot being erased = 20; a second snapshot would make 30.
    research_policy(&cp, PolicyValue::MaxVolumeGib(25)).await;
    assert!(matches!(
        cp.create_snapshot(&bob, volume, &snap("weekly"), None)
            .await,
        Err(Error::PolicyDenied(_))
    ));

    let fresh = cp
        .create_volume(&bob, &request("fresh", 1), None)
        .await
        .unwrap()
        .id;
    assert!(matches!(
        cp.create_snapshot(&bob, fresh, &snap("too-soon"), None).await,
        Err(Error::Conflict(m)) if m.contains("is creating")
    ));
    // The database refuses a snapshot of a volume that is not live, whatever the caller.
    let direct = sqlx::query(
        "INSERT INTO volume_snapshots (id, volume_id, tenant_id, project_id, region, name, size_gib,
                                       price_per_gib_month_micro, currency, idempotency_key,
                                       request_fingerprint, created_by)
         SELECT gen_random_uuid(), id, tenant_id, project_id, region, 'direct', 1, 1, 'USD',
                'direct-key', 'f', created_by FROM volumes WHERE id = $1",
    )
    .bind(fresh.0)
    .execute(cp.pool())
    .await;
    assert!(
        direct.is_err(),
        "a snapshot of a volume being made is refused"
    );
}
