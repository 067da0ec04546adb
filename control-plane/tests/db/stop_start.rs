//! Stop and start against a real database: a stop waits for its root disk before the host may
//! destroy the VM, a release before then saves nothing, a start that never runs leaves the
//! instance stopped on the same disk, and one run of an instance is current. The storage
//! worker's answers are given as the backends give them; the agent's through the agent API.

use control_plane::prelude::*;

use agent_protocol::{TaskOutcome, TaskSpec, VolumeTarget};
use control_plane::demo::ACME_RESEARCH;
use control_plane::volumes::jobs::{JobKind, Outcome};
use control_plane::{AllocationId, ControlPlane, VolumeId};

use crate::allocations::{BOB, PROVISION, RELEASE, hgx, member, proof, running, setup};
use crate::support::{answer, assert_db_refuses, in_project, provisioned};
use crate::volumes::work;

fn target() -> Outcome {
    Outcome::Exported(VolumeTarget::Nbd {
        host: "10.0.0.5".into(),
        port: 10809,
        export: "vol-root".into(),
    })
}

/// The instance's current run, its state and its root volume, as the database holds them.
async fn current(
    cp: &ControlPlane,
    instance: AllocationId,
) -> (AllocationId, String, Option<VolumeId>) {
    let (id, state, root): (uuid::Uuid, String, Option<uuid::Uuid>) = sqlx::query_as(
        "SELECT id, state, stop_root_volume FROM allocations
         WHERE (id = $1 OR instance_id = $1) AND superseded_by IS NULL",
    )
    .bind(instance.0)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    (AllocationId(id), state, root.map(VolumeId))
}

async fn viewer(
    cp: &ControlPlane,
) -> control_plane::tenancy::Project<control_plane::tenancy::ProjectViewers> {
    let bob = cp.principal(BOB).await.unwrap().unwrap();
    in_project(cp, &bob, ACME_RESEARCH).await
}

async fn volume_state(cp: &ControlPlane, id: VolumeId) -> String {
    sqlx::query_scalar("SELECT state FROM volumes WHERE id = $1")
        .bind(id.0)
        .fetch_one(cp.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_stop_waits_for_its_disk_and_a_release_before_then_saves_nothing() {
    let (_db, cp, ops) = setup().await;
    let (_node, agent, _credential) = hgx(&cp, &ops, "gpu-stop-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let id = running(&cp, &bob, &agent, "waits").await;

    cp.stop_instance(&bob, id, None).await.unwrap();
    let (run, state, root) = current(&cp, id).await;
    let root = root.expect("a root volume is made");
    assert_eq!(
        (run, state.as_str()),
        (id, "running"),
        "the GPUs run until the disk exists"
    );
    assert_eq!(
        cp.allocation_in(&viewer(&cp).await, id)
            .await
            .unwrap()
            .state,
        "stopping"
    );
    // Released meanwhile: an ordinary release, saving nothing.
    cp.release_allocation(&bob, id, None).await.unwrap();
    let (_, state, kept) = current(&cp, id).await;
    assert_eq!((state.as_str(), kept), ("releasing", None));
    cp.dispatch_outbox(10).await.unwrap();
    let spec = answer(&cp, &agent, RELEASE, |_| TaskOutcome::Failed {
        error: "not answered here".into(),
    })
    .await;
    let TaskSpec::VmRelease(plan) = spec else {
        panic!("{spec:?}")
    };
    assert_eq!(plan.save_root, None, "no disk to copy into");
    // The volume, made and served after all, is erased: nothing waits for it.
    work(&cp, root, JobKind::Create, Outcome::Done).await;
    work(&cp, root, JobKind::Export, target()).await;
    assert_eq!(volume_state(&cp, root).await, "deleting");
}

#[tokio::test]
async fn a_start_that_never_runs_leaves_the_instance_stopped_on_the_same_disk() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, credential) = hgx(&cp, &ops, "gpu-stop-b").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let id = running(&cp, &bob, &agent, "keeps").await;

    cp.stop_instance(&bob, id, None).await.unwrap();
    let root = current(&cp, id).await.2.unwrap();
    work(&cp, root, JobKind::Create, Outcome::Done).await;
    work(&cp, root, JobKind::Export, target()).await;
    let spec = answer(&cp, &agent, RELEASE, |spec| proof(node, &credential, spec)).await;
    let TaskSpec::VmRelease(plan) = &spec else {
        panic!("{spec:?}")
    };
    assert_eq!(
        plan.save_root.as_ref().map(|t| t.uri()),
        Some("nbd://10.0.0.5:10809/vol-root".into())
    );
    assert_eq!(
        cp.allocation_in(&viewer(&cp).await, id)
            .await
            .unwrap()
            .state,
        "stopped"
    );

    // The start's host fails to boot it: the instance is stopped again, on the same disk.
    cp.start_instance(&bob, id, None).await.unwrap();
    let (first_start, state, _) = current(&cp, id).await;
    assert_ne!(first_start, id);
    assert_eq!(state, "provisioning");
    answer(&cp, &agent, PROVISION, |_| TaskOutcome::Failed {
        error: "the restored disk did not boot".into(),
    })
    .await;
    cp.dispatch_outbox(10).await.unwrap();
    answer(&cp, &agent, RELEASE, |spec| proof(node, &credential, spec)).await;
    let (run, state, kept) = current(&cp, id).await;
    assert_eq!(
        (run, state.as_str(), kept),
        (first_start, "released", Some(root))
    );
    let detail = cp.allocation_in(&viewer(&cp).await, id).await.unwrap();
    assert_eq!((detail.state.as_str(), detail.can_start), ("stopped", true));
    assert_eq!(volume_state(&cp, root).await, "available");

    // Started again, it runs, and its disk is erased.
    cp.start_instance(&bob, id, None).await.unwrap();
    let (second_start, _, _) = current(&cp, id).await;
    assert_ne!(second_start, first_start);
    let spec = answer(&cp, &agent, PROVISION, provisioned).await;
    let (TaskSpec::VmProvision(plan) | TaskSpec::BaremetalProvision(plan)) = &spec else {
        panic!("{spec:?}")
    };
    assert!(plan.restore_from.is_some());
    assert_eq!(current(&cp, id).await.1, "running");
    assert_eq!(volume_state(&cp, root).await, "deleting");

    // One run of an instance is current.
    assert_db_refuses(
        &cp,
        &format!("UPDATE allocations SET superseded_by = NULL WHERE id = '{first_start}'"),
        "allocations_current_run",
    )
    .await;
}
