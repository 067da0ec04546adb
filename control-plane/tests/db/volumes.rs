//! Volumes against a real database: the state machine as the API drives it and as the
//! database holds it, the storage worker's side of each step (the backend's answers given as
//! the real backends give them; `storage`'s own tests run the real qemu tools), the host's side
//! through the agent API, quotas through the policy chain, and races.

use control_plane::prelude::*;

use agent_protocol::{TaskOutcome, TaskOutput, TaskSpec, VolumeTarget};
use control_plane::allocations::LaunchRequest;
use control_plane::demo::{ACME_INFERENCE, ACME_RESEARCH};
use control_plane::error::Denied;
use control_plane::policy::{Level, PolicyKey, PolicyValue};
use control_plane::tenancy::{Project, ProjectOperators, ProjectViewers};
use control_plane::volumes::jobs::{JobKind, Outcome, VolumeJobs, erasure_record};
use control_plane::volumes::{Made, VolumeRequest, VolumeState, VolumesApi};
use control_plane::{ControlPlane, Error, VolumeId};

use crate::allocations::{BOB, RELEASE, hgx, member, proof, research_policy, running, setup};
use crate::support::{answer, assert_db_refuses, in_project};

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bob@laptop";

fn denial<T: std::fmt::Debug>(r: Result<T, Error>) -> control_plane::error::Denial {
    match r {
        Err(Error::PolicyDenied(d)) => *d,
        other => panic!("expected a policy refusal, got {other:?}"),
    }
}

/// Bob's view of the research project.
async fn viewer(cp: &ControlPlane) -> Project<ProjectViewers> {
    let bob = cp.principal(BOB).await.unwrap().unwrap();
    in_project::<ProjectViewers>(cp, &bob, ACME_RESEARCH).await
}

pub(crate) fn request(name: &str, size_gib: u32) -> VolumeRequest {
    VolumeRequest {
        name: name.into(),
        region: "eu-west-1".into(),
        size_gib,
        idempotency_key: uuid::Uuid::new_v4().to_string(),
        snapshot: None,
    }
}

async fn state_of(cp: &ControlPlane, id: VolumeId) -> String {
    sqlx::query_scalar("SELECT state FROM volumes WHERE id = $1")
        .bind(id.0)
        .fetch_one(cp.pool())
        .await
        .unwrap()
}

/// The storage worker's next step, which must be `kind` for `volume`, answered `outcome`.
pub(crate) async fn work(cp: &ControlPlane, volume: VolumeId, kind: JobKind, outcome: Outcome) {
    let job = cp.claim_volume_job().await.unwrap().expect("a job is due");
    assert_eq!((job.volume, job.kind), (volume, kind));
    cp.finish_volume_job(&job, outcome).await.unwrap();
}

fn nbd(id: VolumeId) -> VolumeTarget {
    VolumeTarget::Nbd {
        host: "10.0.0.5".into(),
        port: 10809,
        export: storage::VolumeKey::of(id.0).to_string(),
    }
}

/// A volume made and available.
pub(crate) async fn available(
    cp: &ControlPlane,
    bob: &Project<ProjectOperators>,
    name: &str,
) -> VolumeId {
    let Made { id, .. } = cp
        .create_volume(bob, &request(name, 10), None)
        .await
        .unwrap();
    work(cp, id, JobKind::Create, Outcome::Done).await;
    id
}

/// The host answers the queued volumes update with what it has plugged in; what it was asked.
async fn plug(
    cp: &ControlPlane,
    agent: &control_plane::agent_api::NodeAgent,
) -> agent_protocol::VolumesPlan {
    let spec = answer(cp, agent, &["validate_plan", "plug_volumes"], |spec| {
        let TaskSpec::VolumesUpdate(plan) = spec else {
            panic!("not a volumes update: {spec:?}")
        };
        TaskOutcome::Succeeded {
            output: TaskOutput::VolumesUpdated {
                attached: plan.volumes.iter().map(|v| v.volume_id.clone()).collect(),
            },
        }
    })
    .await;
    match spec {
        TaskSpec::VolumesUpdate(plan) => plan,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_volume_is_made_attached_plugged_in_detached_and_erased_with_a_record() {
    let (_db, cp, ops) = setup().await;
    let (_node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;

    // Made once per idempotency key; the same key with another request is refused.
    let req = request("datasets", 10);
    let made = cp.create_volume(&bob, &req, None).await.unwrap();
    assert!(made.created);
    let again = cp.create_volume(&bob, &req, None).await.unwrap();
    assert_eq!((again.id, again.created), (made.id, false));
    let other = VolumeRequest {
        size_gib: 20,
        ..req.clone()
    };
    assert!(matches!(
        cp.create_volume(&bob, &other, None).await,
        Err(Error::Conflict(m)) if m.contains("idempotency key")
    ));
    let id = made.id;
    let seen = cp.volume(&viewer(&cp).await, id).await.unwrap();
    assert_eq!(
        (seen.state, seen.size_gib, seen.region.as_str()),
        (VolumeState::Creating, 10, "eu-west-1")
    );
    // Names are unique among a project's live volumes.
    assert!(matches!(
        cp.create_volume(&bob, &request("datasets", 5), None).await,
        Err(Error::Conflict(m)) if m.contains("named datasets already")
    ));
    work(&cp, id, JobKind::Create, Outcome::Done).await;
    assert_eq!(state_of(&cp, id).await, "available");

    // Attached to a running instance: served by the backend, then plugged in by its host.
    let vm = running(&cp, &bob, &agent, "trainer").await;
    cp.attach_volume(&bob, id, vm, None).await.unwrap();
    cp.attach_volume(&bob, id, vm, None).await.unwrap();
    assert_eq!(state_of(&cp, id).await, "attaching");
    work(&cp, id, JobKind::Export, Outcome::Exported(nbd(id))).await;
    let plan = plug(&cp, &agent).await;
    assert_eq!(plan.allocation_id, vm.to_string());
    assert_eq!(plan.volumes.len(), 1);
    assert_eq!(plan.volumes[0].target, nbd(id));
    assert_eq!(plan.volumes[0].serial.len(), 20);
    let v = cp.volume(&viewer(&cp).await, id).await.unwrap();
    assert_eq!(
        (v.state, v.attached_to, v.attached_name.as_deref()),
        (VolumeState::InUse, Some(vm), Some("trainer"))
    );

    // While attached it can't be deleted or attached elsewhere.
    let other_vm = running(&cp, &bob, &agent, "other").await;
    assert!(matches!(
        cp.delete_volume(&bob, id, None).await,
        Err(Error::VolumeInUse(m)) if m.contains("detach it first")
    ));
    assert!(matches!(
        cp.attach_volume(&bob, id, other_vm, None).await,
        Err(Error::Conflict(m)) if m.contains("attached to another instance")
    ));
    // It grows while attached, and never shrinks.
    cp.grow_volume(&bob, id, 20, None).await.unwrap();
    assert!(matches!(
        cp.grow_volume(&bob, id, 5, None).await,
        Err(Error::Invalid {
            field: "size_gib",
            ..
        })
    ));
    work(&cp, id, JobKind::Grow, Outcome::Done).await;

    // Detached: the host unplugs it, then the backend stops serving it.
    cp.detach_volume(&bob, id, None).await.unwrap();
    assert_eq!(state_of(&cp, id).await, "detaching");
    let plan = plug(&cp, &agent).await;
    assert!(plan.volumes.is_empty(), "the host is to unplug it");
    work(&cp, id, JobKind::Withdraw, Outcome::Done).await;
    let v = cp.volume(&viewer(&cp).await, id).await.unwrap();
    assert_eq!(
        (v.state, v.attached_to, v.size_gib),
        (VolumeState::Available, None, 20)
    );

    // Deleted: erased on the backend, with a sealed record of how.
    cp.delete_volume(&bob, id, None).await.unwrap();
    cp.delete_volume(&bob, id, None).await.unwrap();
    work(
        &cp,
        id,
        JobKind::Erase,
        Outcome::Erased {
            backend: "qemu-storage-daemon".into(),
            erasure: storage::Erasure {
                method: "overwritten with zeros".into(),
                bytes_overwritten: 5 << 20,
            },
        },
    )
    .await;
    assert_eq!(state_of(&cp, id).await, "deleted");
    assert!(matches!(
        cp.volume(&viewer(&cp).await, id).await,
        Err(Error::NotFound { what: "volume" })
    ));
    let (bytes, at, seal): (i64, time::OffsetDateTime, String) = sqlx::query_as(
        "SELECT bytes_overwritten, erased_at, seal FROM volume_erasures WHERE volume_id = $1",
    )
    .bind(id.0)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(bytes, 5 << 20);
    assert_eq!(
        cp.secrets()
            .open(&seal, &format!("volume_erasures:seal:{id}"))
            .unwrap(),
        erasure_record(
            id,
            "qemu-storage-daemon",
            "overwritten with zeros",
            5 << 20,
            at
        ),
        "the record opens as written, and only bound to its row"
    );
    assert!(
        cp.secrets()
            .open(
                &seal,
                &format!("volume_erasures:seal:{}", VolumeId::new_random())
            )
            .is_err()
    );
    // The name is free again, and every change is in the audit log.
    available(&cp, &bob, "datasets").await;
    let actions: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_log WHERE resource LIKE '%:volume:' || $1 ORDER BY id",
    )
    .bind(id.to_string())
    .fetch_all(cp.pool())
    .await
    .unwrap();
    assert_eq!(
        actions,
        [
            "volume.create",
            "volume.attach",
            "volume.grow",
            "volume.detach",
            "volume.delete",
            "volume.erase"
        ]
    );
}

#[tokio::test]
async fn attachments_stay_in_the_project_and_region_and_end_with_the_instance() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, credential) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let id = available(&cp, &bob, "scratch").await;
    let vm = running(&cp, &bob, &agent, "trainer").await;

    // Another project's instance is not found; an instance elsewhere is refused by region.
    let alice_inference = member(
        &cp,
        control_plane::UserId(uuid::uuid!("0a0e0000-0000-4000-8002-000000000001")),
        ACME_INFERENCE,
    )
    .await;
    assert!(matches!(
        cp.attach_volume(&alice_inference, id, vm, None).await,
        Err(Error::NotFound { what: "volume" })
    ));
    let us = VolumeRequest {
        region: "us-east-1".into(),
        ..request("far", 10)
    };
    let far = cp.create_volume(&bob, &us, None).await.unwrap().id;
    work(&cp, far, JobKind::Create, Outcome::Done).await;
    assert!(matches!(
        cp.attach_volume(&bob, far, vm, None).await,
        Err(Error::Conflict(m)) if m.contains("attaches only in its region")
    ));
    assert_eq!(state_of(&cp, far).await, "available", "nothing half-done");

    // Attached while the instance runs, then the instance is released: once its VM is gone
    // the volume is detaching, withdrawn, and available again with what it held.
    cp.attach_volume(&bob, id, vm, None).await.unwrap();
    work(&cp, id, JobKind::Export, Outcome::Exported(nbd(id))).await;
    plug(&cp, &agent).await;
    cp.release_allocation(&bob, vm, None).await.unwrap();
    assert_eq!(
        state_of(&cp, id).await,
        "in_use",
        "still plugged in until the VM is gone"
    );
    answer(&cp, &agent, RELEASE, |spec| proof(node, &credential, spec)).await;
    assert_eq!(state_of(&cp, id).await, "detaching");
    work(&cp, id, JobKind::Withdraw, Outcome::Done).await;
    assert_eq!(state_of(&cp, id).await, "available");

    // A released instance takes no new volume.
    assert!(matches!(
        cp.attach_volume(&bob, id, vm, None).await,
        Err(Error::Conflict(m)) if m.contains("volumes attach to instances that run")
    ));
}

#[tokio::test]
async fn the_database_holds_the_volume_invariants() {
    let (_db, cp, ops) = setup().await;
    let (_node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let id = available(&cp, &bob, "held").await;
    let vm = running(&cp, &bob, &agent, "trainer").await;

    // The same table of moves in Rust and in the database.
    let moves: Vec<(String, String)> =
        sqlx::query_as("SELECT from_state, to_state FROM volume_transitions")
            .fetch_all(cp.pool())
            .await
            .unwrap();
    for from in VolumeState::ALL {
        for to in VolumeState::ALL {
            assert_eq!(
                from.can_become(to),
                moves.contains(&(from.as_str().into(), to.as_str().into())),
                "{from} → {to}"
            );
        }
    }
    // Whatever writes to the table: skipping a step, shrinking, deleting rows, attaching
    // across regions, or an available volume that says it is attached.
    let sql = |s: &str| {
        s.replace("$ID", &id.to_string())
            .replace("$VM", &vm.to_string())
    };
    assert_db_refuses(
        &cp,
        &sql("UPDATE volumes SET state = 'deleted', deleted_at = now() WHERE id = '$ID'"),
        "it cannot become deleted",
    )
    .await;
    assert_db_refuses(
        &cp,
        &sql("UPDATE volumes SET size_gib = 1 WHERE id = '$ID'"),
        "volumes only grow",
    )
    .await;
    assert_db_refuses(
        &cp,
        &sql("DELETE FROM volumes WHERE id = '$ID'"),
        "never by DELETE",
    )
    .await;
    assert_db_refuses(
        &cp,
        &sql("UPDATE volumes SET attached_to = '$VM' WHERE id = '$ID'"),
        "volumes_attached_only_while_attached",
    )
    .await;
    assert_db_refuses(
        &cp,
        &sql("UPDATE volumes SET state = 'attaching', attached_to = '$VM', region = 'us-east-1' WHERE id = '$ID'"),
        "project, region and kind are fixed",
    )
    .await;
    assert_db_refuses(
        &cp,
        &sql("INSERT INTO volumes (id, tenant_id, project_id, region, name, size_gib, state, idempotency_key, request_fingerprint, created_by)
              SELECT gen_random_uuid(), tenant_id, project_id, region, 'x', 1, 'available', 'k-12345678', 'f', created_by FROM volumes WHERE id = '$ID'"),
        "starts as creating",
    )
    .await;
    // A volume attached to another project's or region's instance can't exist at all.
    assert_db_refuses(
        &cp,
        &sql(
            "UPDATE volumes SET state = 'attaching', attached_to = '$VM',
                     project_id = '0a0e0000-0000-4000-8001-000000000002' WHERE id = '$ID'",
        ),
        "fixed",
    )
    .await;
    let inference_volume = {
        let alice = member(
            &cp,
            control_plane::UserId(uuid::uuid!("0a0e0000-0000-4000-8002-000000000001")),
            ACME_INFERENCE,
        )
        .await;
        available(&cp, &alice, "theirs").await
    };
    assert_db_refuses(
        &cp,
        &format!("UPDATE volumes SET state = 'attaching', attached_to = '{vm}' WHERE id = '{inference_volume}'"),
        "volumes_attached_in_project_and_region",
    )
    .await;
}

#[tokio::test]
async fn racing_requests_end_in_one_consistent_state() {
    let (_db, cp, ops) = setup().await;
    let (_node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let vm = running(&cp, &bob, &agent, "trainer").await;
    for round in 0..6 {
        let id = available(&cp, &bob, &format!("race-{round}")).await;
        let (attached, deleted) = tokio::join!(
            cp.attach_volume(&bob, id, vm, None),
            cp.delete_volume(&bob, id, None)
        );
        let state = state_of(&cp, id).await;
        match (attached.is_ok(), deleted.is_ok()) {
            (true, false) => assert_eq!(state, "attaching"),
            (false, true) => assert_eq!(state, "deleting"),
            other => panic!("exactly one wins, not {other:?} ({state})"),
        }
        // Detach and delete of an attached volume: the delete is refused either way.
        if state == "attaching" {
            let (detached, deleted) = tokio::join!(
                cp.detach_volume(&bob, id, None),
                cp.delete_volume(&bob, id, None)
            );
            detached.unwrap();
            assert!(matches!(deleted, Err(Error::VolumeInUse(m)) if m.contains("detach it first")));
            assert_eq!(state_of(&cp, id).await, "detaching");
        }
        // Drain what the race queued.
        while let Some(job) = cp.claim_volume_job().await.unwrap() {
            let outcome = match job.kind {
                JobKind::Export => Outcome::Exported(nbd(job.volume)),
                JobKind::Erase => Outcome::Erased {
                    backend: "b".into(),
                    erasure: storage::Erasure {
                        method: "m".into(),
                        bytes_overwritten: 0,
                    },
                },
                _ => Outcome::Done,
            };
            cp.finish_volume_job(&job, outcome).await.unwrap();
        }
    }
}

#[tokio::test]
async fn quotas_count_volumes_and_gib_in_the_scope_that_set_them() {
    let (_db, cp, _ops) = setup().await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    research_policy(&cp, PolicyValue::MaxVolumes(1)).await;
    research_policy(&cp, PolicyValue::MaxVolumeGib(25)).await;
    let first = available(&cp, &bob, "one").await;
    let d = denial(cp.create_volume(&bob, &request("two", 5), None).await);
    assert_eq!(
        (d.key, d.level),
        (PolicyKey::MaxVolumes, Some(Level::Project))
    );
    assert_eq!(
        d.to_string(),
        "policy max_volumes (set at project level) allows 1 volumes in this project; 1 are taken and this asks for 1 more"
    );
    let d = denial(cp.grow_volume(&bob, first, 30, None).await);
    assert_eq!(
        (d.key, d.why),
        (
            PolicyKey::MaxVolumeGib,
            Denied::VolumeQuota {
                unit: "GiB of volumes",
                max: 25,
                scope: "project",
                in_use: 10,
                asked: 20
            }
        )
    );
    cp.grow_volume(&bob, first, 25, None).await.unwrap();
    // Nothing half-done: the refused requests left no volume and no job.
    let volumes: i64 = sqlx::query_scalar("SELECT count(*) FROM volumes WHERE project_id = $1")
        .bind(ACME_RESEARCH.0)
        .fetch_one(cp.pool())
        .await
        .unwrap();
    assert_eq!(volumes, 1);
    // Bad input names its field.
    for (req, field) in [
        (request("Bad Name", 5), "name"),
        (request("ok", 0), "size_gib"),
        (request("ok", 16385), "size_gib"),
        (
            VolumeRequest {
                region: "mars-1".into(),
                ..request("ok", 5)
            },
            "region",
        ),
        (
            VolumeRequest {
                idempotency_key: "short".into(),
                ..request("ok", 5)
            },
            "idempotency_key",
        ),
    ] {
        match cp.create_volume(&bob, &req, None).await {
            Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
}

/// Volumes named at launch decide the region and are attached in the launch's transaction:
/// plugged in once the VM runs, or, when one can't be attached, no instance at all.
#[tokio::test]
async fn a_launch_attaches_its_volumes_or_launches_nothing() {
    let (_db, cp, ops) = setup().await;
    let (_node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let data = available(&cp, &bob, "data").await;
    let far = {
        let us = VolumeRequest {
            region: "us-east-1".into(),
            ..request("far", 10)
        };
        let id = cp.create_volume(&bob, &us, None).await.unwrap().id;
        work(&cp, id, JobKind::Create, Outcome::Done).await;
        id
    };
    let launch = |name: &str, region: &str, volumes: Vec<VolumeId>| LaunchRequest {
        sku: "h100.1x".into(),
        region: region.into(),
        listing: "ubuntu-24.04-cuda".into(),
        ssh_public_key: KEY.into(),
        name: name.into(),
        idempotency_key: uuid::Uuid::new_v4().to_string(),
        volumes,
        ..Default::default()
    };
    let allocations = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM allocations")
            .fetch_one(cp.pool())
            .await
            .unwrap()
    };
    let before = allocations().await;

    // Volumes of two regions, or one the launch's region rules out: refused, nothing made.
    assert!(matches!(
        cp.launch(&bob, &launch("two-regions", "", vec![data, far]), None).await,
        Err(Error::Conflict(m)) if m.contains("volumes of one region")
    ));
    assert!(matches!(
        cp.launch(&bob, &launch("wrong-region", "eu-west-1", vec![far]), None).await,
        Err(Error::Conflict(m)) if m.contains("the volumes are in us-east-1")
    ));
    assert!(matches!(
        cp.launch(
            &bob,
            &launch("unknown", "", vec![VolumeId::new_random()]),
            None
        )
        .await,
        Err(Error::Invalid {
            field: "volumes",
            ..
        })
    ));
    assert_eq!(allocations().await, before, "no instance was made");
    assert_eq!(state_of(&cp, far).await, "available");

    // With its volume: placed in the volume's region, the volume attaching with it.
    let id = cp
        .launch(&bob, &launch("with-data", "", vec![data]), None)
        .await
        .unwrap()
        .id;
    let region: String = sqlx::query_scalar("SELECT region FROM allocations WHERE id = $1")
        .bind(id.0)
        .fetch_one(cp.pool())
        .await
        .unwrap();
    assert_eq!(region, "eu-west-1");
    let v = cp.volume(&viewer(&cp).await, data).await.unwrap();
    assert_eq!((v.state, v.attached_to), (VolumeState::Attaching, Some(id)));
    // A second launch can't take it.
    assert!(matches!(
        cp.launch(&bob, &launch("again", "", vec![data]), None).await,
        Err(Error::Conflict(m)) if m.contains("is attaching")
    ));
    // Served, then the VM runs, then its host plugs it in.
    work(&cp, data, JobKind::Export, Outcome::Exported(nbd(data))).await;
    answer(
        &cp,
        &agent,
        crate::allocations::PROVISION,
        crate::support::provisioned,
    )
    .await;
    cp.dispatch_outbox(10).await.unwrap();
    let plan = plug(&cp, &agent).await;
    assert_eq!(plan.volumes[0].volume_id, data.to_string());
    assert_eq!(state_of(&cp, data).await, "in_use");
}

/// A queued storage step is announced to the storage workers when, and only when, the
/// transaction that queued it commits: a woken worker always finds its step.
#[tokio::test]
async fn a_queued_step_is_announced_to_the_storage_workers_when_it_commits() {
    use control_plane::volumes::worker::CHANNEL;
    let (_db, cp, _ops) = setup().await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let mut listener = sqlx::postgres::PgListener::connect_with(cp.pool().sqlx())
        .await
        .unwrap();
    listener.listen(CHANNEL).await.unwrap();

    let id = cp
        .create_volume(&bob, &request("announced", 1), None)
        .await
        .unwrap()
        .id;
    assert!(heard(&mut listener).await, "the create step was announced");
    assert!(!heard(&mut listener).await, "once");

    // A step queued in a transaction that rolls back is never announced.
    let mut tx = cp.pool().sqlx().begin().await.unwrap();
    sqlx::query("INSERT INTO volume_jobs (volume_id, kind) VALUES ($1, 'export')")
        .bind(id.0)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(!heard(&mut listener).await, "nothing was committed");
}

/// Whether `l` hears an announcement within half a second.
async fn heard(l: &mut sqlx::postgres::PgListener) -> bool {
    tokio::time::timeout(std::time::Duration::from_millis(500), l.recv())
        .await
        .is_ok()
}
