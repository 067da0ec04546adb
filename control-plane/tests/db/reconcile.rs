//! Continuous reconciliation: each kind of finding is recorded with its evidence, shown to
//! operators and counted, quarantines a slot where the host still holds one, clears when it
//! is no longer seen, and never changes money.

use control_plane::prelude::*;

use crate::allocations::{BOB, PROVISION, hgx, launch, member, setup};
use crate::support::{answer, provisioned, staff};
use agent_protocol::{HeldLease, Holding};
use control_plane::billing::rating::rate_until;
use control_plane::demo::{ACME, ACME_RESEARCH};
use control_plane::{ControlPlane, NodeId};
use sqlx::Row;

/// Open findings: (kind, subject, quarantined, summary).
async fn open(cp: &ControlPlane) -> Vec<(String, String, bool, String)> {
    sqlx::query(
        "SELECT kind, subject, quarantined, evidence ->> 'summary' AS summary
         FROM reconciliation_findings WHERE cleared_at IS NULL ORDER BY kind, subject",
    )
    .fetch_all(cp.pool())
    .await
    .unwrap()
    .into_iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

async fn slot(cp: &ControlPlane, node: NodeId, index: i32) -> (uuid::Uuid, String, Option<String>) {
    sqlx::query_as(
        "SELECT id, cleanup_state, cleanup_detail FROM node_resource_slots
         WHERE node_id = $1 AND slot_index = $2 AND retired_at IS NULL",
    )
    .bind(node.0)
    .bind(index)
    .fetch_one(cp.pool())
    .await
    .unwrap()
}

/// What the operators' panel lists for `kind`.
async fn attention(
    cp: &ControlPlane,
    ops: &control_plane::auth::Platform<control_plane::auth::PlatformOperators>,
    kind: &str,
) -> Vec<String> {
    let who = staff(cp, ops).await;
    cp.ops_overview(&who)
        .await
        .unwrap()
        .attention
        .into_iter()
        .filter(|a| a.kind == kind)
        .map(|a| a.detail)
        .collect()
}

async fn open_gauge(cp: &ControlPlane, kind: &str) -> i64 {
    cp.ops_gauges()
        .await
        .unwrap()
        .reconciliation_open
        .into_iter()
        .find(|(k, _)| k == kind)
        .map_or(0, |(_, n)| n)
}

#[tokio::test]
async fn a_host_holding_what_no_allocation_owns_is_found_and_its_slot_quarantined() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, _) = hgx(&cp, &ops, "gpu-orphan").await;
    let (slot3, state, _) = slot(&cp, node, 3).await;
    assert_eq!(state, "clean");
    let stranger = uuid::Uuid::new_v4();

    // An id that isn't one is refused, and nothing is recorded.
    let bad = Holding {
        leases: vec![],
        vms: vec!["gpuaas-../../etc".into()],
    };
    let e = cp.record_holding(&agent, &bad).await.unwrap_err();
    assert!(
        matches!(
            e,
            control_plane::Error::Invalid {
                field: "holding",
                ..
            }
        ),
        "{e:?}"
    );
    let none: Option<serde_json::Value> =
        sqlx::query_scalar("SELECT holding FROM nodes WHERE id = $1")
            .bind(node.0)
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(none, None);

    // The host holds slot 3 and a VM for an allocation this control plane never made (and,
    // a hostile or broken agent, a lease on a slot that isn't this node's: evidence only).
    let holds = Holding {
        leases: vec![
            HeldLease {
                slot_id: slot3.to_string(),
                allocation_id: stranger.to_string(),
            },
            HeldLease {
                slot_id: uuid::Uuid::new_v4().to_string(),
                allocation_id: stranger.to_string(),
            },
        ],
        vms: vec![stranger.to_string()],
    };
    cp.record_holding(&agent, &holds).await.unwrap();
    let free_before = free_blocks(&cp, node).await;
    let run = cp.reconcile_once().await.unwrap();
    assert!(run.ran);
    assert_eq!((run.new, run.quarantined), (1, 1), "{run:?}");
    let found = open(&cp).await;
    assert_eq!(found.len(), 1, "{found:?}");
    let (kind, subject, quarantined, summary) = &found[0];
    assert_eq!(kind, "orphan_vm");
    assert_eq!(subject, &format!("{node}:{stranger}"));
    assert!(quarantined);
    assert_eq!(
        summary,
        &format!(
            "the host holds a VM and 2 slot lease(s) for allocation {stranger}; no such allocation"
        )
    );
    // Out of placement, with the reason, audited; shown and counted.
    let (_, state, detail) = slot(&cp, node, 3).await;
    assert_eq!(state, "blocked");
    assert!(
        detail
            .unwrap()
            .starts_with("reconciliation: the host holds")
    );
    assert_eq!(free_blocks(&cp, node).await, free_before - 1);
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'node.slot.quarantine' AND actor_kind = 'system'",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(audited, 1);
    assert_eq!(
        attention(&cp, &ops, "orphan_vm").await,
        std::slice::from_ref(summary)
    );
    assert_eq!(open_gauge(&cp, "orphan_vm").await, 1);

    // Seen again: still one finding, nothing new, nothing blocked twice.
    let run = cp.reconcile_once().await.unwrap();
    assert_eq!((run.seen, run.new, run.quarantined), (1, 0, 0));

    // A stale report is not evidence.
    sqlx::query("UPDATE nodes SET holding_at = now() - interval '10 minutes' WHERE id = $1")
        .bind(node.0)
        .execute(cp.pool())
        .await
        .unwrap();
    let run = cp.reconcile_once().await.unwrap();
    assert_eq!((run.seen, run.cleared), (0, 1));

    // The host lets go: the finding is cleared, the slot stays blocked until an operator looks.
    cp.record_holding(&agent, &Holding::default())
        .await
        .unwrap();
    cp.reconcile_once().await.unwrap();
    assert!(open(&cp).await.is_empty());
    assert_eq!(open_gauge(&cp, "orphan_vm").await, 0);
    assert_eq!(slot(&cp, node, 3).await.1, "blocked");
    cp.clear_blocked_slot(
        &ops,
        control_plane::SlotId(slot3),
        "checked the host: no VM",
        None,
    )
    .await
    .unwrap();
    assert_eq!(slot(&cp, node, 3).await.1, "clean");
    assert_eq!(free_blocks(&cp, node).await, free_before);

    // A finding's facts can't be rewritten, nor findings deleted.
    crate::support::assert_db_refuses(
        &cp,
        "UPDATE reconciliation_findings SET subject = 'x'",
        "can't change what was found",
    )
    .await;
    crate::support::assert_db_refuses(&cp, "DELETE FROM reconciliation_findings", "never deleted")
        .await;
}

async fn free_blocks(cp: &ControlPlane, node: NodeId) -> i64 {
    sqlx::query_scalar(
        "SELECT coalesce(sum(free_slots), 0)::bigint FROM node_free_blocks
         WHERE node_id = $1 AND block_size = 1",
    )
    .bind(node.0)
    .fetch_one(cp.pool())
    .await
    .unwrap()
}

#[tokio::test]
async fn a_running_allocation_whose_vm_is_gone_is_found() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, _) = hgx(&cp, &ops, "gpu-missing").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let id = launch(&cp, &bob, "h100.1x", "vanishing").await.unwrap();
    answer(&cp, &agent, PROVISION, provisioned).await;
    let slot_id: uuid::Uuid =
        sqlx::query_scalar("SELECT slot_id FROM resource_claims WHERE allocation_id = $1")
            .bind(id.0)
            .fetch_one(cp.pool())
            .await
            .unwrap();
    let held = |vm: bool| Holding {
        leases: vec![HeldLease {
            slot_id: slot_id.to_string(),
            allocation_id: id.to_string(),
        }],
        vms: if vm { vec![id.to_string()] } else { vec![] },
    };
    // Reports are read only once the allocation has settled (30 s after its last change):
    // these are dated 31 s on.
    let settle = || async {
        sqlx::query("UPDATE nodes SET holding_at = now() + interval '31 seconds' WHERE id = $1")
            .bind(node.0)
            .execute(cp.pool())
            .await
            .unwrap();
    };
    // Just after it started, a report without it proves nothing.
    cp.record_holding(&agent, &held(false)).await.unwrap();
    assert_eq!(cp.reconcile_once().await.unwrap().seen, 0);
    // Settled and whole: nothing.
    cp.record_holding(&agent, &held(true)).await.unwrap();
    settle().await;
    assert_eq!(cp.reconcile_once().await.unwrap().seen, 0);
    // Settled, and the host has its lease but no VM.
    cp.record_holding(&agent, &held(false)).await.unwrap();
    settle().await;
    let run = cp.reconcile_once().await.unwrap();
    assert_eq!(
        (run.new, run.quarantined),
        (1, 0),
        "no slot of a live allocation is blocked"
    );
    assert_eq!(
        open(&cp).await,
        [(
            "missing_vm".to_string(),
            id.to_string(),
            false,
            format!("allocation {id} is running, and its host holds no VM for it")
        )]
    );
    assert_eq!(open_gauge(&cp, "missing_vm").await, 1);
    assert_eq!(attention(&cp, &ops, "missing_vm").await.len(), 1);
    // It comes back: cleared.
    cp.record_holding(&agent, &held(true)).await.unwrap();
    settle().await;
    assert_eq!(cp.reconcile_once().await.unwrap().cleared, 1);
    assert!(open(&cp).await.is_empty());
}

#[tokio::test]
async fn a_ledger_that_does_not_cover_the_metered_time_is_found_and_no_money_moves() {
    let (_db, cp, ops) = setup().await;
    let start = time::OffsetDateTime::now_utc() - time::Duration::hours(5);
    let id = crate::billing::run(
        &cp,
        ACME,
        ACME_RESEARCH,
        "h100.1x",
        "gap",
        start,
        start + time::Duration::days(3),
    )
    .await;
    rate_until(cp.pool(), time::OffsetDateTime::now_utc(), 1000)
        .await
        .unwrap();
    // The demo's whole ledger (seeded history included) agrees with its metering.
    let run = cp.reconcile_once().await.unwrap();
    assert_eq!(run.seen, 0, "{:?}", open(&cp).await);

    let money = || async {
        sqlx::query_as::<_, (i64, i64)>(
            "SELECT (SELECT count(*) FROM postings), (SELECT coalesce(sum(amount_micro), 0)::bigint FROM usage_charges)",
        )
        .fetch_one(cp.pool())
        .await
        .unwrap()
    };
    let before = money().await;
    // Rating's progress moves an hour on with no charge for it (what a bug in rating would
    // leave behind).
    sqlx::query(
        "UPDATE usage_intervals SET rated_until = rated_until + interval '1 hour' WHERE allocation_id = $1",
    )
    .bind(id.0)
    .execute(cp.pool())
    .await
    .unwrap();
    let run = cp.reconcile_once().await.unwrap();
    assert_eq!(run.new, 1);
    let found = open(&cp).await;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, "ledger_gap");
    assert_eq!(found[0].1, id.to_string());
    assert!(found[0].3.ends_with("(-3600.000000 s)"), "{}", found[0].3);
    let evidence: serde_json::Value =
        sqlx::query_scalar("SELECT evidence FROM reconciliation_findings WHERE subject = $1")
            .bind(id.to_string())
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(
        evidence["metered_us"].as_i64().unwrap() - evidence["charged_us"].as_i64().unwrap(),
        3_600_000_000
    );
    assert_eq!(money().await, before, "reconciliation never moves money");
    assert_eq!(open_gauge(&cp, "ledger_gap").await, 1);
    assert_eq!(attention(&cp, &ops, "ledger_gap").await.len(), 1);
}
