//! The fleet against a real database: enrolment and credentials, discovery proposals,
//! validation, approval (stale, concurrent, partial, rejected), drift, admin states and the
//! seven postures. Discoveries are the node agent's own answers on the host fixtures
//! (`node-agent/fixtures/*/expected-discovery.json`).

use control_plane::prelude::*;

use std::time::Duration;

use agent_protocol::{Discovery, HealthStatus, TaskOutcome, TaskOutput};
use control_plane::agent_api::NodeAgent;
use control_plane::auth::{Platform, PlatformOperators};
use control_plane::fleet::{AdminState, NewNode, SlotMapDecision, validate_slots};
use control_plane::{ControlPlane, Error, Naming, NodeId};

use crate::support::{
    approve_all, assert_db_refuses, discover, discovery, enrolled, operator, refusal, staff,
};

fn with_wipe(mut d: Discovery, policy: &str) -> Discovery {
    for s in &mut d.proposed_slots {
        s.capacity_metadata
            .insert("destructive_wipe_policy".into(), policy.into());
    }
    d
}

fn problems(d: &Discovery) -> Vec<String> {
    validate_slots(d, &d.proposed_slots)
        .into_iter()
        .map(|p| p.to_string())
        .collect()
}

const WIPE_EMPTY: &str = "destructive_wipe_policy is empty; choose one of nvme-format-crypto, nvme-format, nvme-sanitize-block, overwrite-verify";

// --- validation (no database) --------------------------------------------------------------

#[test]
fn hgx_proposal_lacks_only_the_wipe_policy() {
    let d = discovery("hgx-h100-8x");
    let expected: Vec<String> = (0..8).map(|i| format!("slot {i}: {WIPE_EMPTY}")).collect();
    assert_eq!(problems(&d), expected);
    assert_eq!(
        problems(&with_wipe(d, "nvme-format-crypto")),
        Vec::<String>::new()
    );
}

#[test]
fn l40s_host_is_valid_once_a_wipe_policy_is_chosen() {
    let d = with_wipe(discovery("pcie-l40s-4x"), "overwrite-verify");
    assert_eq!(problems(&d), Vec::<String>::new());
}

#[test]
fn missing_ib_vf_is_named_on_its_slot() {
    let d = with_wipe(discovery("l40s-missing-ib-vf"), "overwrite-verify");
    assert_eq!(
        problems(&d),
        ["slot 3: fabric_vf_pci_address is empty: no InfiniBand virtual function for this slot"]
    );
}

#[test]
fn shared_iommu_group_is_named_on_its_slot() {
    let d = with_wipe(discovery("l40s-shared-iommu"), "overwrite-verify");
    assert_eq!(
        problems(&d),
        ["slot 1: IOMMU group 31 also holds 0000:62:00.0, which is not part of GPU 0000:61:00.0"]
    );
}

/// The real capture of an H200 passed through to a VM: approval refuses its one slot and
/// says every reason, so an operator who enrols such a machine learns why it sells nothing.
#[test]
fn a_real_h200_vm_guest_is_refused_for_every_reason_it_has() {
    let d = with_wipe(discovery("h200-vm-guest"), "overwrite-verify");
    assert_eq!(
        problems(&d),
        [
            "slot 0: fabric_vf_pci_address is empty: no InfiniBand virtual function for this slot",
            "slot 0: no dedicated NVMe drive",
            "slot 0: the GPU has no IOMMU group: is the IOMMU enabled?",
            "slot 0: no memory is left for this slot on its NUMA node",
        ]
    );
}

#[test]
fn numa_mismatch_duplicates_and_bad_metadata_are_each_named() {
    let mut d = with_wipe(discovery("hgx-h100-8x"), "nvme-format-crypto");
    // Slot 0 takes slot 4's NVMe (NUMA 1) and slot 1's VF (a duplicate).
    let far_nvme = d.proposed_slots[4].nvme.clone();
    d.proposed_slots[0].nvme = far_nvme;
    let vf1 = d.proposed_slots[1].ib_vf_pci_address.clone().unwrap();
    d.proposed_slots[0].ib_vf_pci_address = Some(vf1.clone());
    let meta = &mut d.proposed_slots[0].capacity_metadata;
    meta.insert("fabric_vf_pci_address".into(), vf1);
    meta.insert("storage_ownership".into(), "shared".into());
    d.proposed_slots[2]
        .capacity_metadata
        .insert("destructive_wipe_policy".into(), "rm -rf".into());
    d.proposed_slots[3]
        .capacity_metadata
        .remove("fabric_claim_mode");
    assert_eq!(
        problems(&d),
        [
            "slot 0: storage_ownership is \"shared\"; it must be \"slice\"",
            "slot 0: NVMe 0000:9e:00.0 is on NUMA node 1, the GPU on NUMA node 0",
            "slot 1: PCI address 0000:2c:00.1 (InfiniBand VF) is already used by slot 0 (InfiniBand VF)",
            "slot 2: destructive_wipe_policy \"rm -rf\" is not a method this agent supports (nvme-format-crypto, nvme-format, nvme-sanitize-block, overwrite-verify)",
            "slot 3: fabric_claim_mode is missing; it must be \"per_slot_vf\"",
            "slot 4: PCI address 0000:9e:00.0 (NVMe) is already used by slot 0 (NVMe)",
        ]
    );
}

#[test]
fn what_the_database_would_refuse_is_named_before_approval() {
    let mut d = with_wipe(discovery("pcie-l40s-4x"), "overwrite-verify");
    d.proposed_slots[0].cpu_set = String::new();
    d.proposed_slots[1].memory_mib = 0;
    d.proposed_slots[2].nvme.as_mut().unwrap().size_bytes = 0;
    d.proposed_slots[3].cpu_set = "1-x".into();
    assert_eq!(
        problems(&d),
        [
            "slot 0: no CPUs are left for this slot on its NUMA node",
            "slot 1: no memory is left for this slot on its NUMA node",
            "slot 2: NVMe namespace nvme2n1 reports an impossible size",
            "slot 3: CPU set has \"1-x\", which is not a CPU or a range",
        ]
    );
    let mut d = with_wipe(discovery("pcie-l40s-4x"), "overwrite-verify");
    d.proposed_slots[0].gpu.model = String::new();
    d.proposed_slots[0].nvme.as_mut().unwrap().namespace = "sda".into();
    // A GPU address the host doesn't list is named twice: malformed and not on the bus.
    d.proposed_slots[1].gpu.pci_address = "0000:61:00".into();
    let got = problems(&d);
    assert!(
        got.contains(
            &"slot 0: the GPU model name is empty or longer than 100 characters".to_string()
        ),
        "{got:?}"
    );
    assert!(
        got.contains(&"slot 0: \"sda\" is not an NVMe namespace name (nvmeXnY)".to_string()),
        "{got:?}"
    );
    assert!(
        got.contains(
            &"slot 1: GPU address \"0000:61:00\" is not a PCI address (dddd:bb:dd.f)".to_string()
        ),
        "{got:?}"
    );
}

// --- helpers --------------------------------------------------------------------------------

fn hgx_node(hostname: &str) -> NewNode {
    NewNode {
        hostname: hostname.into(),
        region: "eu-west-1".into(),
        rack: "r12".into(),
        family: "hgx-h100-8x".into(),
        capacity_shapes: vec!["gpu_slice".into(), "baremetal".into()],
    }
}

/// Enrols `hostname`, exchanges the token, heartbeats and returns the agent.
/// An empty database with one operator and one approved HGX node, `gpu-hgx-01`.
async fn one_hgx() -> (
    test_db::TestDb,
    ControlPlane,
    Platform<PlatformOperators>,
    NodeId,
) {
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let ops = operator(&cp, "o@platform.example").await;
    let (node, _) = approved_hgx(&cp, &ops, "gpu-hgx-01").await;
    (db, cp, ops, node)
}

async fn approved_hgx(
    cp: &ControlPlane,
    ops: &Platform<PlatformOperators>,
    host: &str,
) -> (NodeId, NodeAgent) {
    let (node, agent) = enrolled(cp, ops, hgx_node(host)).await;
    let generation = discover(cp, ops, node, &agent, &discovery("hgx-h100-8x")).await;
    cp.decide_slot_map(
        ops,
        node,
        generation,
        &approve_all("nvme-format-crypto"),
        None,
    )
    .await
    .unwrap();
    (node, agent)
}

async fn posture(cp: &ControlPlane, node: NodeId) -> (String, String) {
    sqlx::query_as("SELECT posture, reason FROM node_postures WHERE node_id = $1")
        .bind(node.0)
        .fetch_one(cp.pool())
        .await
        .unwrap()
}

async fn slot_ids(cp: &ControlPlane, node: NodeId) -> Vec<uuid::Uuid> {
    sqlx::query_scalar("SELECT id FROM node_resource_slots WHERE node_id = $1 AND retired_at IS NULL ORDER BY slot_index")
        .bind(node.0)
        .fetch_all(cp.pool())
        .await
        .unwrap()
}

async fn claim(
    cp: &ControlPlane,
    node: NodeId,
    slot: Option<uuid::Uuid>,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO resource_claims (id, node_id, slot_id, kind, allocation_id) VALUES ($1, $2, $3, $4, $5)")
        .bind(uuid::Uuid::new_v4())
        .bind(node.0)
        .bind(slot)
        .bind(if slot.is_some() { "gpu_slice" } else { "baremetal" })
        .bind(crate::support::bare_allocation(cp, node).await)
        .execute(cp.pool())
        .await
        .map(|_| ())
}

async fn actions(cp: &ControlPlane) -> Vec<String> {
    sqlx::query_scalar("SELECT action FROM audit_log WHERE action LIKE 'node.%' ORDER BY id")
        .fetch_all(cp.pool())
        .await
        .unwrap()
}

// --- enrolment ------------------------------------------------------------------------------

#[tokio::test]
async fn a_bootstrap_token_works_once_for_its_host_and_is_stored_hashed() {
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let ops = operator(&cp, "olga@platform.example").await;
    let e = cp
        .enrol_node(&ops, &hgx_node("GPU-HGX-01"), None)
        .await
        .unwrap();
    assert_eq!(e.hostname, "gpu-hgx-01");
    assert!(e.bootstrap_token.starts_with("gpb_"));
    let stored: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM node_bootstrap_tokens WHERE token_hash = convert_to($1, 'UTF8')",
    )
    .bind(&e.bootstrap_token)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(stored, 0, "the token itself is never stored");

    assert_eq!(
        refusal(cp.exchange_bootstrap_token(&e.bootstrap_token, "gpu-hgx-02", "0.1.0")).await,
        "this bootstrap token enrols gpu-hgx-01, not gpu-hgx-02"
    );
    let cred = cp
        .exchange_bootstrap_token(&e.bootstrap_token, "gpu-hgx-01", "0.1.0")
        .await
        .unwrap();
    assert_eq!(cred.node_id, e.node_id);
    assert!(cred.credential.starts_with("gpn_"));
    assert_eq!(
        refusal(cp.exchange_bootstrap_token(&e.bootstrap_token, "gpu-hgx-01", "0.1.0")).await,
        "this bootstrap token was already used; ask an operator for a new one"
    );
    assert_eq!(
        refusal(cp.exchange_bootstrap_token("gpb_nonsense", "gpu-hgx-01", "0.1.0")).await,
        "this bootstrap token is not known"
    );

    let agent = cp.authenticate_node(&cred.credential).await.unwrap();
    assert_eq!(agent.node_id(), e.node_id);
    assert!(matches!(
        cp.authenticate_node("gpn_forged").await,
        Err(Error::AgentRefused(_))
    ));

    // Re-enrolling (a reinstalled host) revokes the old credential.
    let again = cp
        .reissue_bootstrap_token(&ops, e.node_id, None)
        .await
        .unwrap();
    let cred2 = cp
        .exchange_bootstrap_token(&again.bootstrap_token, "gpu-hgx-01", "0.1.1")
        .await
        .unwrap();
    assert!(cp.authenticate_node(&cred.credential).await.is_err());
    cp.authenticate_node(&cred2.credential).await.unwrap();

    // Enrolment queued exactly one discovery (the second exchange found one queued).
    let queued: i64 = sqlx::query_scalar("SELECT count(*) FROM agent_tasks WHERE node_id = $1")
        .bind(e.node_id.0)
        .fetch_one(cp.pool())
        .await
        .unwrap();
    assert_eq!(queued, 1);
    assert_eq!(
        actions(&cp).await,
        [
            "node.enrol",
            "node.agent.enrol",
            "node.bootstrap_token.issue",
            "node.agent.enrol"
        ]
    );
}

#[tokio::test]
async fn expired_and_replaced_tokens_are_refused_with_reasons() {
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let ops = operator(&cp, "olga@platform.example").await;
    let first = cp
        .enrol_node(&ops, &hgx_node("gpu-hgx-01"), None)
        .await
        .unwrap();
    let second = cp
        .reissue_bootstrap_token(&ops, first.node_id, None)
        .await
        .unwrap();
    assert_eq!(
        refusal(cp.exchange_bootstrap_token(&first.bootstrap_token, "gpu-hgx-01", "0.1.0")).await,
        "this bootstrap token was replaced by a newer one"
    );
    sqlx::query("UPDATE node_bootstrap_tokens SET created_at = now() - interval '2 days', expires_at = now() - interval '1 day' WHERE revoked_at IS NULL")
        .execute(cp.pool())
        .await
        .unwrap();
    let expired = cp
        .exchange_bootstrap_token(&second.bootstrap_token, "gpu-hgx-01", "0.1.0")
        .await
        .unwrap_err();
    assert!(
        expired
            .to_string()
            .starts_with("this bootstrap token expired at "),
        "{expired}"
    );
}

#[tokio::test]
async fn enrolment_input_is_checked_and_hostnames_are_unique() {
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let ops = operator(&cp, "olga@platform.example").await;
    let cases = [
        (
            NewNode {
                hostname: "bad host".into(),
                ..hgx_node("x")
            },
            "invalid hostname: use letters, digits and hyphens in dot-separated labels (e.g. gpu-hgx-01)",
        ),
        (
            NewNode {
                region: "EU".into(),
                ..hgx_node("a")
            },
            "invalid region: use 2–32 lowercase letters, digits and hyphens, starting with a letter (e.g. eu-west-1)",
        ),
        (
            NewNode {
                rack: " ".into(),
                ..hgx_node("a")
            },
            "invalid rack: give the rack, up to 64 characters (e.g. r12)",
        ),
        (
            NewNode {
                family: "HGX H100".into(),
                ..hgx_node("a")
            },
            "invalid node family: use lowercase letters, digits and hyphens (e.g. hgx-h100-8x)",
        ),
        (
            NewNode {
                capacity_shapes: vec![],
                ..hgx_node("a")
            },
            "invalid capacity shapes: choose at least one shape the node may serve (gpu_slice, baremetal)",
        ),
        (
            NewNode {
                capacity_shapes: vec!["vgpu".into()],
                ..hgx_node("a")
            },
            "invalid capacity shapes: \"vgpu\" is not one of gpu_slice, baremetal",
        ),
    ];
    for (node, message) in cases {
        assert_eq!(
            cp.enrol_node(&ops, &node, None)
                .await
                .unwrap_err()
                .to_string(),
            message
        );
    }
    cp.enrol_node(&ops, &hgx_node("gpu-hgx-01"), None)
        .await
        .unwrap();
    assert_eq!(
        refusal(cp.enrol_node(&ops, &hgx_node("gpu-hgx-01"), None)).await,
        "a node named gpu-hgx-01 is already enrolled"
    );
    let nodes: i64 = sqlx::query_scalar("SELECT count(*) FROM nodes")
        .fetch_one(cp.pool())
        .await
        .unwrap();
    assert_eq!(nodes, 1, "nothing half-written");
}

// --- approval -------------------------------------------------------------------------------

#[tokio::test]
async fn approval_refuses_problems_then_creates_eight_schedulable_slots() {
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let ops = operator(&cp, "olga@platform.example").await;
    let (node, agent) = enrolled(&cp, &ops, hgx_node("gpu-hgx-01")).await;
    assert_eq!(
        posture(&cp, node).await.0,
        "unavailable",
        "nothing approved yet"
    );

    // The agent can't skip approval.
    let mut sneaky = discovery("hgx-h100-8x");
    sneaky.approval_required = false;
    let control_plane::agent_api::ClaimedTask { id: task, .. } = cp
        .claim_task(&agent, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        refusal(cp.finish_task(
            &agent,
            task,
            &TaskOutcome::Succeeded {
                output: TaskOutput::TopologyDiscovered(Box::new(sneaky)),
            },
        ))
        .await,
        "invalid discovery: approval_required must be true: discovery never creates slots"
    );

    let generation = discover(&cp, &ops, node, &agent, &discovery("hgx-h100-8x")).await;
    assert_eq!(generation, 1);
    let err = cp
        .decide_slot_map(
            &ops,
            node,
            generation,
            &SlotMapDecision::Approve {
                only: None,
                wipe_policy: None,
            },
            None,
        )
        .await
        .unwrap_err();
    let expected: Vec<String> = (0..8).map(|i| format!("slot {i}: {WIPE_EMPTY}")).collect();
    assert_eq!(
        err.to_string(),
        format!("invalid slot map: {}", expected.join("; "))
    );
    assert!(slot_ids(&cp, node).await.is_empty(), "nothing half-written");

    let approved = cp
        .decide_slot_map(
            &ops,
            node,
            generation,
            &approve_all("nvme-format-crypto"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(approved, 8);
    let detail = cp.node_detail(&staff(&cp, &ops).await, node).await.unwrap();
    assert_eq!(detail.slots.len(), 8);
    assert!(
        detail
            .slots
            .iter()
            .all(|s| s.state == "schedulable" && s.wipe_policy == "nvme-format-crypto")
    );
    assert_eq!(detail.node.schedulable_slots, 8);
    assert_eq!(detail.proposal.as_ref().unwrap().status, "approved");
    assert_eq!(
        posture(&cp, node).await,
        ("fully_available".into(), "ready".into())
    );
    assert!(actions(&cp).await.ends_with(&[
        "node.discovery.record".into(),
        "node.slot_map.approve".into()
    ]));

    // The database itself refuses a slot without its isolation metadata.
    assert_db_refuses(&cp, "UPDATE node_resource_slots SET capacity_metadata = capacity_metadata - 'destructive_wipe_policy'", "slot_capacity_metadata_complete").await;
}

#[tokio::test]
async fn a_stale_generation_or_a_decided_one_fails_with_a_message() {
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let ops = operator(&cp, "olga@platform.example").await;
    let (node, agent) = enrolled(&cp, &ops, hgx_node("gpu-hgx-01")).await;
    let g1 = discover(&cp, &ops, node, &agent, &discovery("hgx-h100-8x")).await;
    let g2 = discover(&cp, &ops, node, &agent, &discovery("hgx-h100-8x")).await;
    assert_eq!((g1, g2), (1, 2));
    assert_eq!(
        refusal(cp.decide_slot_map(&ops, node, g1, &approve_all("overwrite-verify"), None)).await,
        "slot map generation 1 is stale: generation 2 is the latest. Reload and review it."
    );
    cp.decide_slot_map(&ops, node, g2, &approve_all("overwrite-verify"), None)
        .await
        .unwrap();
    assert_eq!(
        refusal(cp.decide_slot_map(&ops, node, g2, &approve_all("overwrite-verify"), None)).await,
        "slot map generation 2 was already approved by someone else. Reload to see the decision."
    );
    // The trigger holds even if code forgets to check.
    assert_db_refuses(&cp, "UPDATE slot_map_proposals SET status = 'rejected', decision_reason = 'x' WHERE generation = 2", "slot map generation 2 of node").await;
}

#[tokio::test]
async fn of_two_concurrent_decisions_exactly_one_wins() {
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let ops = operator(&cp, "olga@platform.example").await;
    let other = operator(&cp, "omar@platform.example").await;
    let (node, agent) = enrolled(&cp, &ops, hgx_node("gpu-hgx-01")).await;
    let g = discover(&cp, &ops, node, &agent, &discovery("hgx-h100-8x")).await;
    let approve = approve_all("nvme-sanitize-block");
    let reject = SlotMapDecision::Reject {
        reason: "wrong rack".into(),
    };
    let (a, b) = tokio::join!(
        cp.decide_slot_map(&ops, node, g, &approve, None),
        cp.decide_slot_map(&other, node, g, &reject, None),
    );
    assert_eq!(a.is_ok() as u8 + b.is_ok() as u8, 1, "{a:?} / {b:?}");
    let loser = a.err().or(b.err()).unwrap();
    assert!(matches!(loser, Error::Conflict(_)), "{loser}");
    let decisions: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action LIKE 'node.slot_map.%'")
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(decisions, 1);
}

#[tokio::test]
async fn reject_needs_a_reason_and_selected_slots_approve_alone() {
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let ops = operator(&cp, "olga@platform.example").await;
    let (node, agent) = enrolled(&cp, &ops, hgx_node("gpu-hgx-01")).await;
    let g1 = discover(&cp, &ops, node, &agent, &discovery("hgx-h100-8x")).await;
    assert_eq!(
        refusal(cp.decide_slot_map(
            &ops,
            node,
            g1,
            &SlotMapDecision::Reject {
                reason: "  ".into(),
            },
            None,
        ))
        .await,
        "invalid reason: say why the proposal is rejected"
    );
    cp.decide_slot_map(
        &ops,
        node,
        g1,
        &SlotMapDecision::Reject {
            reason: "firmware not qualified".into(),
        },
        None,
    )
    .await
    .unwrap();
    let reason: String =
        sqlx::query_scalar("SELECT decision_reason FROM slot_map_proposals WHERE generation = 1")
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(reason, "firmware not qualified");
    assert!(slot_ids(&cp, node).await.is_empty());

    // A missing-VF host: approving the broken slot is refused; the good ones pass alone.
    let g2 = discover(&cp, &ops, node, &agent, &discovery("l40s-missing-ib-vf")).await;
    assert_eq!(
        refusal(cp.decide_slot_map(
            &ops,
            node,
            g2,
            &SlotMapDecision::Approve {
                only: Some(vec![2, 3]),
                wipe_policy: Some("overwrite-verify".into()),
            },
            None,
        ))
        .await,
        "invalid slot map: slot 3: fabric_vf_pci_address is empty: no InfiniBand virtual function for this slot"
    );
    let n = cp
        .decide_slot_map(
            &ops,
            node,
            g2,
            &SlotMapDecision::Approve {
                only: Some(vec![0, 1, 2]),
                wipe_policy: Some("overwrite-verify".into()),
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(n, 3);
    let status: String =
        sqlx::query_scalar("SELECT status FROM slot_map_proposals WHERE generation = 2")
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(status, "partially_approved");
    assert_eq!(slot_ids(&cp, node).await.len(), 3);
    assert_eq!(
        actions(&cp)
            .await
            .iter()
            .filter(|a| a.starts_with("node.slot_map."))
            .count(),
        2
    );
}

// --- drift ----------------------------------------------------------------------------------

#[tokio::test]
async fn drift_blocks_only_the_changed_slots_until_reapproved() {
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let ops = operator(&cp, "olga@platform.example").await;
    let (node, agent) = approved_hgx(&cp, &ops, "gpu-hgx-01").await;
    let before = slot_ids(&cp, node).await;

    // GPU 7 falls off the bus; slot 2's NVMe shows up at another address.
    let mut d = discovery("hgx-h100-8x");
    d.proposed_slots.pop();
    d.host.gpus.pop();
    d.proposed_slots[2].nvme.as_mut().unwrap().pci_address = "0000:3f:00.0".into();
    let g = discover(&cp, &ops, node, &agent, &d).await;

    let staff = staff(&cp, &ops).await;
    let detail = cp.node_detail(&staff, node).await.unwrap();
    let drift: Vec<(i32, Option<String>, String)> = detail
        .slots
        .iter()
        .map(|s| (s.slot_index, s.drift.clone(), s.state.clone()))
        .filter(|s| s.1.is_some())
        .collect();
    assert_eq!(
        drift,
        [
            (
                2,
                Some("NVMe moved from 0000:3e:00.0 to 0000:3f:00.0".into()),
                "drifted".into()
            ),
            (7, Some("GPU 0000:db:00.0 is gone".into()), "drifted".into()),
        ]
    );
    assert_eq!(
        detail.node.schedulable_slots, 6,
        "unchanged slots stay schedulable"
    );
    assert_eq!(detail.node.drifted_slots, 2);
    let p = detail.proposal.unwrap();
    assert_eq!(p.gone.len(), 1);
    assert_eq!(
        p.slots[2].change,
        "NVMe moved from 0000:3e:00.0 to 0000:3f:00.0"
    );
    assert_eq!(p.slots[0].change, "unchanged");
    assert!(
        actions(&cp)
            .await
            .contains(&"node.drift.detect".to_string())
    );

    // Re-approval: slot 7 retired, slot 2 takes the new address and keeps its id.
    cp.decide_slot_map(&ops, node, g, &approve_all("nvme-format-crypto"), None)
        .await
        .unwrap();
    let after = slot_ids(&cp, node).await;
    assert_eq!(after, before[..7]);
    let detail = cp.node_detail(&staff, node).await.unwrap();
    assert_eq!(detail.node.schedulable_slots, 7);
    assert_eq!(detail.slots[2].nvme_pci_address, "0000:3f:00.0");
    assert!(detail.slots.iter().all(|s| s.drift.is_none()));
}

// --- admin state and postures ---------------------------------------------------------------

#[tokio::test]
async fn drain_undrain_and_cordon_are_audited() {
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let ops = operator(&cp, "olga@platform.example").await;
    let (node, _) = approved_hgx(&cp, &ops, "gpu-hgx-01").await;
    cp.set_admin_state(&ops, node, AdminState::Draining, Some("req-1"))
        .await
        .unwrap();
    assert_eq!(
        refusal(cp.set_admin_state(&ops, node, AdminState::Draining, None)).await,
        "the node is already draining"
    );
    cp.set_admin_state(&ops, node, AdminState::Active, None)
        .await
        .unwrap();
    cp.set_admin_state(&ops, node, AdminState::Cordoned, None)
        .await
        .unwrap();
    let tail: Vec<String> = actions(&cp).await.into_iter().rev().take(3).collect();
    assert_eq!(tail, ["node.cordon", "node.undrain", "node.drain"]);
}

#[tokio::test]
async fn posture_fully_available() {
    let (_db, cp, _, node) = one_hgx().await;
    assert_eq!(
        posture(&cp, node).await,
        ("fully_available".into(), "ready".into())
    );
}

#[tokio::test]
async fn posture_partially_allocated() {
    let (_db, cp, _, node) = one_hgx().await;
    let slots = slot_ids(&cp, node).await;
    claim(&cp, node, Some(slots[0])).await.unwrap();
    claim(&cp, node, Some(slots[1])).await.unwrap();
    assert_eq!(
        posture(&cp, node).await,
        ("partially_allocated".into(), "2 of 8 slots claimed".into())
    );
    // One active claim per slot, whatever the code does.
    assert!(claim(&cp, node, Some(slots[0])).await.is_err());
}

#[tokio::test]
async fn posture_fully_allocated_by_slices() {
    let (_db, cp, _, node) = one_hgx().await;
    for slot in slot_ids(&cp, node).await {
        claim(&cp, node, Some(slot)).await.unwrap();
    }
    assert_eq!(posture(&cp, node).await.0, "fully_allocated_slices");
}

#[tokio::test]
async fn posture_exclusively_allocated_by_baremetal() {
    let (_db, cp, _, node) = one_hgx().await;
    claim(&cp, node, None).await.unwrap();
    assert_eq!(
        posture(&cp, node).await,
        (
            "exclusively_allocated_baremetal".into(),
            "leased whole".into()
        )
    );
    // A whole-node claim excludes slice claims (trigger), and vice versa.
    let slots = slot_ids(&cp, node).await;
    let err = claim(&cp, node, Some(slots[0])).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("a bare-metal claim excludes every other claim"),
        "{err}"
    );
}

#[tokio::test]
async fn posture_draining() {
    let (_db, cp, ops, node) = one_hgx().await;
    claim(&cp, node, Some(slot_ids(&cp, node).await[0]))
        .await
        .unwrap();
    cp.set_admin_state(&ops, node, AdminState::Draining, None)
        .await
        .unwrap();
    assert_eq!(posture(&cp, node).await.0, "draining");
}

#[tokio::test]
async fn posture_cleanup_blocked() {
    let (_db, cp, _, node) = one_hgx().await;
    sqlx::query("UPDATE node_resource_slots SET cleanup_state = 'blocked' WHERE slot_index = 3")
        .execute(cp.pool())
        .await
        .unwrap();
    assert_eq!(
        posture(&cp, node).await,
        (
            "cleanup_blocked".into(),
            "1 slot(s) wait for a cleanup proof".into()
        )
    );
}

#[tokio::test]
async fn posture_unavailable_for_stale_heartbeat_cordon_or_degraded_health() {
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let ops = operator(&cp, "o@platform.example").await;
    let (node, agent) = approved_hgx(&cp, &ops, "gpu-hgx-01").await;
    sqlx::query("UPDATE nodes SET last_heartbeat_at = now() - interval '5 minutes'")
        .execute(cp.pool())
        .await
        .unwrap();
    let (p, reason) = posture(&cp, node).await;
    assert_eq!(p, "unavailable");
    assert!(reason.starts_with("no heartbeat since "), "{reason}");
    cp.heartbeat(
        &agent,
        "0.1.0",
        HealthStatus::Degraded,
        Some("GPU 3 XID 79"),
        &[],
    )
    .await
    .unwrap();
    assert_eq!(
        posture(&cp, node).await,
        (
            "unavailable".into(),
            "the agent reports degraded health: GPU 3 XID 79".into()
        )
    );
    cp.heartbeat(&agent, "0.1.0", HealthStatus::Healthy, None, &[])
        .await
        .unwrap();
    assert_eq!(posture(&cp, node).await.0, "fully_available");
    cp.set_admin_state(&ops, node, AdminState::Cordoned, None)
        .await
        .unwrap();
    assert_eq!(
        posture(&cp, node).await,
        ("unavailable".into(), "cordoned by an operator".into())
    );
}

#[tokio::test]
async fn fleet_counts_and_filters() {
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let ops = operator(&cp, "o@platform.example").await;
    let staff = staff(&cp, &ops).await;
    approved_hgx(&cp, &ops, "gpu-hgx-01").await;
    let (n2, _) = approved_hgx(&cp, &ops, "gpu-hgx-02").await;
    cp.set_admin_state(&ops, n2, AdminState::Draining, None)
        .await
        .unwrap();
    let mut l40s = hgx_node("gpu-pcie-01");
    l40s.region = "us-east-2".into();
    l40s.family = "pcie-l40s-4x".into();
    let (n3, a3) = enrolled(&cp, &ops, l40s).await;
    discover(&cp, &ops, n3, &a3, &discovery("pcie-l40s-4x")).await;

    let all = cp.fleet(&staff, &Default::default()).await.unwrap();
    assert_eq!(all.nodes.len(), 3);
    let count = |v: &control_plane::fleet::FleetView, p: &str| {
        v.by_posture.iter().find(|x| x.0 == p).unwrap().2
    };
    assert_eq!(all.by_posture.len(), 7);
    assert_eq!(
        (
            count(&all, "fully_available"),
            count(&all, "draining"),
            count(&all, "unavailable")
        ),
        (1, 1, 1)
    );
    assert_eq!(
        all.by_region,
        [("eu-west-1".into(), 2), ("us-east-2".into(), 1)]
    );
    assert_eq!(
        all.by_model,
        [
            ("NVIDIA H100 80GB HBM3".into(), 2),
            ("NVIDIA L40S".into(), 1)
        ]
    );
    assert_eq!(
        all.nodes
            .iter()
            .find(|n| n.id == n3)
            .unwrap()
            .pending_generation,
        Some(1)
    );

    let draining = cp
        .fleet(
            &staff,
            &control_plane::fleet::FleetFilter {
                posture: Some("draining".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        draining
            .nodes
            .iter()
            .map(|n| n.hostname.as_str())
            .collect::<Vec<_>>(),
        ["gpu-hgx-02"]
    );
    let l40s = cp
        .fleet(
            &staff,
            &control_plane::fleet::FleetFilter {
                gpu_model: Some("NVIDIA L40S".into()),
                region: Some("us-east-2".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(l40s.nodes.len(), 1);
    assert_eq!(
        l40s.regions,
        ["eu-west-1", "us-east-2"],
        "filter choices cover the whole fleet"
    );
}

#[tokio::test]
async fn the_demo_fleet_is_enrolled_by_token_and_approved_by_the_operator() {
    let db = crate::support::demo_db().await;
    let pool = db.pool().clone();
    use control_plane::demo::{DEMO_FLEET, DEMO_WIPE_POLICY};
    let cp = ControlPlane::new(pool, Naming::default());
    let ops = operator(&cp, "ops@platform.example").await;
    // Only a platform operator may set it up; the email is matched without case.
    assert!(cp.demo_operator("alice@acme.example").await.is_err());
    let who = cp.demo_operator("OPS@Platform.example").await.unwrap();
    let hosts: Vec<&str> = DEMO_FLEET.iter().map(|h| h.hostname).collect();
    let tokens = cp.demo_fleet_tokens(&who, &hosts[..3]).await.unwrap();
    assert_eq!(tokens.len(), 3, "only the hosts asked for");
    assert_eq!(cp.demo_node_id(hosts[3]).await.unwrap(), None);
    // Nothing discovered yet: nothing to approve.
    assert_eq!(cp.demo_fleet_approve(&who).await.unwrap(), 0);
    for (h, token) in &tokens {
        let cred = cp
            .exchange_bootstrap_token(token, h.hostname, "0.1.0")
            .await
            .unwrap();
        let agent = cp.authenticate_node(&cred.credential).await.unwrap();
        discover(&cp, &ops, cred.node_id, &agent, &discovery(h.fixture)).await;
    }
    assert_eq!(cp.demo_fleet_approve(&who).await.unwrap(), 3);
    // Every approved slot carries the demo wipe policy; each approval is audited.
    let (slots, policies, approvals): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM node_resource_slots WHERE retired_at IS NULL),
                (SELECT count(DISTINCT capacity_metadata ->> 'destructive_wipe_policy')
                 FROM node_resource_slots),
                (SELECT count(*) FROM audit_log WHERE action = 'node.slot_map.approve')",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!((slots, policies, approvals), (8 + 8 + 4, 1, 3));
    let policy: String = sqlx::query_scalar(
        "SELECT DISTINCT capacity_metadata ->> 'destructive_wipe_policy' FROM node_resource_slots",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(policy, DEMO_WIPE_POLICY);
    // An enrolled host asked for again gets a fresh token for the same node.
    let again = cp.demo_fleet_tokens(&who, &hosts[..1]).await.unwrap();
    assert_ne!(again[0].1, tokens[0].1);
    let node = cp.demo_node_id(hosts[0]).await.unwrap().unwrap();
    let cred = cp
        .exchange_bootstrap_token(&again[0].1, hosts[0], "0.1.0")
        .await
        .unwrap();
    assert_eq!(cred.node_id, node);

    // No fabric until the whole fleet is approved; then eu-west-1's two slice hosts are
    // placed on two leaves under one spine, once.
    let places = || async {
        sqlx::query_as::<_, (String, String, String, String)>(
            "SELECT n.hostname, p.fabric, p.spine_group, p.leaf FROM node_fabric_places p
             JOIN nodes n ON n.id = p.node_id ORDER BY n.hostname",
        )
        .fetch_all(cp.pool())
        .await
        .unwrap()
    };
    assert_eq!(places().await, []);
    let last = cp.demo_fleet_tokens(&who, &hosts[3..]).await.unwrap();
    let cred = cp
        .exchange_bootstrap_token(&last[0].1, hosts[3], "0.1.0")
        .await
        .unwrap();
    let agent = cp.authenticate_node(&cred.credential).await.unwrap();
    discover(
        &cp,
        &ops,
        cred.node_id,
        &agent,
        &discovery(DEMO_FLEET[3].fixture),
    )
    .await;
    assert_eq!(cp.demo_fleet_approve(&who).await.unwrap(), 4);
    let placed = |h: &str, leaf: &str| {
        (
            h.to_string(),
            "ib-demo".to_string(),
            "s1".to_string(),
            leaf.to_string(),
        )
    };
    assert_eq!(
        places().await,
        [placed("hgx-demo-01", "l1"), placed("hgx-demo-02", "l2")]
    );
    assert_eq!(cp.demo_fleet_approve(&who).await.unwrap(), 4);
    let imports: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action LIKE 'node.fabric.%'")
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(imports, 2, "each host placed once");
}

fn gpu_event(
    id: &str,
    gpu: &str,
    kind: agent_protocol::GpuEventKind,
    xid: Option<u32>,
    detail: &str,
) -> agent_protocol::GpuEvent {
    agent_protocol::GpuEvent {
        id: id.into(),
        gpu_pci_address: gpu.into(),
        kind,
        xid,
        detail: detail.into(),
        observed_at: time::OffsetDateTime::now_utc().unix_timestamp(),
    }
}

async fn free_slots(cp: &ControlPlane, node: NodeId) -> i32 {
    sqlx::query_scalar(
        "SELECT free_slots FROM node_free_blocks WHERE node_id = $1 AND block_size = 1",
    )
    .bind(node.0)
    .fetch_one(cp.pool())
    .await
    .unwrap()
}

#[tokio::test]
async fn a_gpu_that_falls_off_the_bus_leaves_placement_until_an_operator_returns_it() {
    use agent_protocol::GpuEventKind::{Thermal, Xid};
    use control_plane::fleet::gpu_health::GpuHealthPolicyInput;
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let ops = operator(&cp, "o@platform.example").await;
    let staff = staff(&cp, &ops).await;
    let (node, agent) = approved_hgx(&cp, &ops, "gpu-hgx-01").await;
    assert_eq!(free_slots(&cp, node).await, 8);
    let slot3 = cp.node_detail(&staff, node).await.unwrap().slots[3].clone();
    let gpu = slot3.gpu_pci_address.clone();

    // The defaults: XID 79 takes the slot out; thermal slowdown is recorded only.
    let xid = gpu_event(
        "xid-b00t-77",
        &gpu,
        Xid,
        Some(79),
        "XID 79: GPU has fallen off the bus.",
    );
    let hot = gpu_event(
        "ev-1",
        &gpu,
        Thermal,
        None,
        "hardware thermal slowdown at 91 °C",
    );
    assert_eq!(cp.gpu_events(&agent, &[xid.clone(), hot]).await.unwrap(), 2);
    // A heartbeat resent after a lost answer records nothing twice.
    assert_eq!(
        cp.gpu_events(&agent, std::slice::from_ref(&xid))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        free_slots(&cp, node).await,
        7,
        "placement no longer sees it"
    );
    let detail = cp.node_detail(&staff, node).await.unwrap();
    assert_eq!(detail.node.schedulable_slots, 7);
    assert_eq!(detail.slots[3].state, "out of service");
    let why = detail.slots[3].out_of_service.clone().unwrap();
    assert!(
        why.starts_with("XID 79: GPU has fallen off the bus. (since "),
        "{why}"
    );
    let mut events: Vec<_> = detail
        .gpu_events
        .iter()
        .map(|e| (e.kind.as_str(), e.xid, e.slot_index, e.took_out_of_service))
        .collect();
    events.sort();
    assert_eq!(
        events,
        [
            ("thermal", None, Some(3), false),
            ("xid", Some(79), Some(3), true)
        ]
    );
    let audited: Vec<_> = detail
        .audit
        .iter()
        .map(|a| (a.actor.as_str(), a.action.as_str()))
        .collect();
    assert!(
        audited
            .iter()
            .any(|(_, a)| *a == "node.slot.out_of_service"),
        "{audited:?}"
    );

    // A bad event refuses the heartbeat's events whole, naming the field; nothing is written.
    let bad = gpu_event("ev-2", "../../etc", Xid, Some(79), "x");
    let ok = gpu_event("ev-3", &gpu, Xid, Some(13), "XID 13");
    assert!(
        refusal(cp.gpu_events(&agent, &[ok, bad]))
            .await
            .contains("gpu_pci_address")
    );
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM gpu_health_events")
        .fetch_one(cp.pool())
        .await
        .unwrap();
    assert_eq!(stored, 2);

    // The database keeps the evidence and the link between a slot and its own event.
    assert_db_refuses(
        &cp,
        "UPDATE gpu_health_events SET detail = 'nothing happened'",
        "append-only",
    )
    .await;
    assert_db_refuses(
        &cp,
        "UPDATE node_resource_slots SET out_of_service_event = (SELECT id FROM gpu_health_events WHERE kind = 'xid'),
                                        out_of_service_at = now()
         WHERE slot_index = 0",
        "slot_out_of_service_event",
    )
    .await;

    // An operator returns it, saying what was checked; audited, and placement has it again.
    assert!(
        refusal(cp.return_slot_to_service(&ops, slot3.id, " ", None))
            .await
            .contains("say what you checked")
    );
    cp.return_slot_to_service(
        &ops,
        slot3.id,
        "reseated the GPU; dcgmi diag -r 3 passed",
        None,
    )
    .await
    .unwrap();
    assert_eq!(free_slots(&cp, node).await, 8);
    assert_eq!(
        refusal(cp.return_slot_to_service(&ops, slot3.id, "again", None)).await,
        "slot 3 is in service"
    );
    let detail = cp.node_detail(&staff, node).await.unwrap();
    assert_eq!(detail.slots[3].state, "schedulable");
    assert!(
        detail
            .audit
            .iter()
            .any(|a| a.action == "node.slot.return_to_service")
    );

    // The policy is the operators' to change (audited): now thermal slowdown takes slots out too,
    // and XID 79 no longer does.
    let input = |codes: &str| GpuHealthPolicyInput {
        xid_codes: codes.into(),
        ecc_uncorrectable: Some("true".into()),
        thermal: Some("true".into()),
    };
    assert!(
        refusal(cp.set_gpu_health_policy(&ops, &input("48, x"), None))
            .await
            .contains("\"x\" is not an XID number")
    );
    cp.set_gpu_health_policy(&ops, &input("48 63"), None)
        .await
        .unwrap();
    let policy = cp.gpu_health_policy(&staff).await.unwrap();
    assert_eq!(
        (policy.xid_codes.as_slice(), policy.thermal),
        (&[48, 63][..], true)
    );
    assert_eq!(policy.updated_by.as_deref(), Some("o@platform.example"));
    let slot5 = detail.slots[5].gpu_pci_address.clone();
    let events = [
        gpu_event("xid-b00t-90", &gpu, Xid, Some(79), "XID 79"),
        gpu_event(
            "ev-4",
            &slot5,
            Thermal,
            None,
            "hardware thermal slowdown at 95 °C",
        ),
    ];
    assert_eq!(cp.gpu_events(&agent, &events).await.unwrap(), 2);
    let detail = cp.node_detail(&staff, node).await.unwrap();
    assert_eq!(detail.slots[3].state, "schedulable");
    assert_eq!(detail.slots[5].state, "out of service");
    let changed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'fleet.gpu_health_policy.update'",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(changed, 1);
}
