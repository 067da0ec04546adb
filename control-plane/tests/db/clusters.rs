//! Clusters against a real database: members placed together within the asked locality on as
//! few leaves as can hold them, or nothing held and a refusal that says what would fit; the
//! key and the order's fields checked; concurrent launches never sharing a node or leaving a
//! partial cluster; a member that fails to come up taking the others with it; and the
//! database refusing a partial cluster written behind the code's back.

use control_plane::prelude::*;

use control_plane::allocations::LaunchOrder;
use control_plane::allocations::clusters::{ClusterLaunched, ClusterOrder};
use control_plane::auth::{Platform, PlatformOperators, Principal};
use control_plane::demo::ACME_RESEARCH;
use control_plane::fleet::TopologyFormat;
use control_plane::tenancy::{Project, ProjectOperators, ProjectViewers};
use control_plane::{ClusterId, ControlPlane, Error, NodeId};

use crate::allocations::{BOB, hgx, member, setup};
use crate::support::{answer, assert_db_refuses, in_project, provisioned, refusal};
use agent_protocol::{TaskOutcome, TaskSpec};

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bob@laptop";

/// Two leaves of four under spine s1, a leaf of two under spine s2, all on fabric ib0.
const FABRIC: &str = "SwitchName=l1 Nodes=c[01-04]\nSwitchName=l2 Nodes=c[05-08]\n\
                      SwitchName=l3 Nodes=c[09-10]\nSwitchName=s1 Switches=l[1-2]\n\
                      SwitchName=s2 Switches=l3\n";

struct Fleet {
    agents: Vec<(String, NodeId, control_plane::agent_api::NodeAgent)>,
}

async fn fleet(cp: &ControlPlane, ops: &Platform<PlatformOperators>) -> Fleet {
    let mut agents = Vec::new();
    for i in 1..=10 {
        let host = format!("c{i:02}");
        let (id, agent, _) = hgx(cp, ops, &host).await;
        agents.push((host, id, agent));
    }
    cp.import_fabric(ops, "ib0", TopologyFormat::SlurmTopology, FABRIC, None)
        .await
        .unwrap();
    Fleet { agents }
}

fn order(name: &str, sku: &str, members: u32, locality: &str, required: bool) -> ClusterOrder {
    ClusterOrder {
        launch: LaunchOrder {
            sku: sku.into(),
            image: "ubuntu-24.04-cuda".into(),
            name: name.into(),
            keys: control_plane::allocations::OrderKeys {
                typed: vec![KEY.into()],
                ..Default::default()
            },
            idempotency_key: uuid::Uuid::new_v4().to_string(),
            ..Default::default()
        },
        members,
        locality: locality.into(),
        locality_required: required,
    }
}

async fn bob(cp: &ControlPlane) -> (Principal, Project<ProjectOperators>) {
    let p = cp.principal(BOB).await.unwrap().unwrap();
    (p, member(cp, BOB, ACME_RESEARCH).await)
}

async fn launch(cp: &ControlPlane, o: ClusterOrder) -> Result<ClusterLaunched, Error> {
    let (p, who) = bob(cp).await;
    cp.launch_cluster(&p, &who, o, None).await
}

async fn read(cp: &ControlPlane, id: ClusterId) -> control_plane::allocations::clusters::Cluster {
    let p = cp.principal(BOB).await.unwrap().unwrap();
    let viewer = in_project::<ProjectViewers>(cp, &p, ACME_RESEARCH).await;
    cp.cluster(&viewer, id).await.unwrap()
}

/// The leaf of each member, in member order.
fn leaves(c: &control_plane::allocations::clusters::Cluster) -> Vec<String> {
    c.members.iter().map(|m| m.leaf.clone()).collect()
}

async fn clusters_written(cp: &ControlPlane) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM clusters")
        .fetch_one(cp.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn members_go_on_one_leaf_when_they_fit_and_a_refusal_says_what_would() {
    let (_db, cp, ops) = setup().await;
    let _fleet = fleet(&cp, &ops).await;

    let four = launch(&cp, order("train", "h100.8x", 4, "leaf", true))
        .await
        .unwrap();
    assert!(four.created);
    let c = read(&cp, four.id).await;
    assert_eq!((c.size, c.members.len(), c.leaves, c.spines), (4, 4, 1, 1));
    assert_eq!(c.placed_within, "leaf");
    assert_eq!(c.fabric, "ib0");
    assert_eq!(
        c.members
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>(),
        ["train-1", "train-2", "train-3", "train-4"]
    );
    assert!(
        c.members
            .iter()
            .all(|m| m.state == "provisioning" || m.state == "placed"),
        "{c:?}"
    );
    let provisions: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM agent_tasks t JOIN allocations a ON a.id = t.allocation_id
         WHERE a.cluster_id = $1 AND t.kind = 'slice.vm_provision'",
    )
    .bind(four.id.0)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(
        provisions, 4,
        "each member's provision is queued with the launch"
    );

    // Eight on one leaf: no leaf has eight, and nothing is held.
    let why = refusal(launch(&cp, order("big", "h100.8x", 8, "leaf", true))).await;
    assert!(why.contains("8 members don't fit on one leaf"), "{why}");
    assert!(why.contains("one leaf holds at most 4"), "{why}");
    assert!(
        why.contains("one spine holds at most 4"),
        "the first leaf is taken: {why}"
    );
    assert_eq!(clusters_written(&cp).await, 1);

    // Preferred: four more on the other leaf of s1, then two that need spine s2's leaf.
    let more = launch(&cp, order("more", "h100.8x", 4, "leaf", false))
        .await
        .unwrap();
    let m = read(&cp, more.id).await;
    assert_eq!(m.placed_within, "leaf");
    assert_ne!(leaves(&m)[0], leaves(&c)[0], "the other leaf");
    // Three preferred on one leaf: only l3 is left, with two; so across the fabric.
    let three = launch(&cp, order("three", "h100.8x", 3, "leaf", false)).await;
    let why = refusal(std::future::ready(three)).await;
    assert!(why.contains("one fabric holds at most 2"), "{why}");
    let two = launch(&cp, order("two", "h100.8x", 2, "leaf", true))
        .await
        .unwrap();
    assert_eq!(leaves(&read(&cp, two.id).await), ["l3", "l3"]);
}

#[tokio::test]
async fn a_preferred_locality_widens_to_a_spine_and_smaller_slices_share_nodes() {
    let (_db, cp, ops) = setup().await;
    let _fleet = fleet(&cp, &ops).await;

    // Eight 8-GPU members preferred on one leaf: they need both leaves of s1.
    let eight = launch(&cp, order("wide", "h100.8x", 8, "leaf", false))
        .await
        .unwrap();
    let c = read(&cp, eight.id).await;
    assert_eq!(
        (c.placed_within.as_str(), c.leaves, c.spines),
        ("spine", 2, 1)
    );
    // Required on one spine, another four 4-GPU members fit on l3's two nodes, two on each.
    let halves = launch(&cp, order("halves", "h100.4x", 4, "spine", true))
        .await
        .unwrap();
    let h = read(&cp, halves.id).await;
    assert_eq!(leaves(&h), ["l3", "l3", "l3", "l3"]);
    let hosts: i64 =
        sqlx::query_scalar("SELECT count(DISTINCT node_id) FROM allocations WHERE cluster_id = $1")
            .bind(halves.id.0)
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(hosts, 2);
}

#[tokio::test]
async fn the_order_is_checked_and_the_key_returns_the_first_cluster() {
    let (_db, cp, ops) = setup().await;
    let _fleet = fleet(&cp, &ops).await;

    let field = |e: Error| match e {
        Error::Invalid { field, reason } => format!("{field}: {reason}"),
        other => panic!("expected invalid input, got {other:?}"),
    };
    let one = launch(&cp, order("x", "h100.8x", 1, "leaf", true))
        .await
        .unwrap_err();
    assert!(field(one).starts_with("members: 1: a cluster has 2 to 128 members"));
    let rack = launch(&cp, order("x", "h100.8x", 2, "rack", true))
        .await
        .unwrap_err();
    assert!(field(rack).starts_with("locality: \"rack\": choose leaf"));
    let long = launch(&cp, order(&"x".repeat(57), "h100.8x", 2, "leaf", true))
        .await
        .unwrap_err();
    assert!(field(long).starts_with("name: 57 characters: a cluster's name is at most 56"));
    let mut with_volume = order("x", "h100.8x", 2, "leaf", true);
    with_volume.launch.volumes = vec![control_plane::VolumeId(uuid::Uuid::new_v4())];
    assert!(field(launch(&cp, with_volume).await.unwrap_err()).starts_with("volumes:"));
    let nosku = launch(&cp, order("x", "h999", 2, "leaf", true))
        .await
        .unwrap_err();
    assert!(field(nosku).starts_with("sku: there is no SKU"));
    assert_eq!(clusters_written(&cp).await, 0);

    let first = order("keyed", "h100.8x", 2, "leaf", true);
    let a = launch(&cp, first.clone()).await.unwrap();
    let again = launch(&cp, first.clone()).await.unwrap();
    assert_eq!((again.id, again.created), (a.id, false));
    let mut other = first.clone();
    other.members = 3;
    assert!(matches!(launch(&cp, other).await, Err(Error::Conflict(_))));
    // The name is the live cluster's now.
    let why = refusal(launch(&cp, order("keyed", "h100.8x", 2, "leaf", true))).await;
    assert!(why.contains("keyed is the name of a live cluster"), "{why}");
    assert_eq!(clusters_written(&cp).await, 1);
}

#[tokio::test]
async fn concurrent_cluster_and_single_launches_never_share_a_node_or_leave_a_partial_cluster() {
    let (_db, cp, ops) = setup().await;
    let _fleet = fleet(&cp, &ops).await;
    let (p, who) = bob(&cp).await;

    // Three clusters of four on one leaf, at once, with single launches racing for the same
    // nodes: two leaves of four exist, so at most two clusters can win.
    let c = |n: &str| cp.launch_cluster(&p, &who, order(n, "h100.8x", 4, "leaf", true), None);
    let (a, b, d, s1, s2) = tokio::join!(
        c("ca"),
        c("cb"),
        c("cc"),
        crate::allocations::launch(&cp, &who, "h100.8x", "single-1"),
        crate::allocations::launch(&cp, &who, "h100.8x", "single-2"),
    );
    let won = [&a, &b, &d].iter().filter(|r| r.is_ok()).count();
    assert!(won <= 2, "only two leaves of four");
    for r in [&a, &b, &d] {
        if let Err(e) = r {
            assert!(matches!(e, Error::SkuUnavailable(_)), "{e:?}");
        }
    }
    let _ = (s1, s2);
    // Every cluster in the database has all its members; no node holds two 8-GPU slices.
    let partial: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM clusters c
         WHERE (SELECT count(*) FROM allocations a WHERE a.cluster_id = c.id) <> c.size",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(partial, 0);
    let doubled: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT slot_id FROM resource_claims WHERE released_at IS NULL
                               GROUP BY slot_id HAVING count(*) > 1) d",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(doubled, 0);
    assert_eq!(clusters_written(&cp).await, won as i64);
}

#[tokio::test]
async fn a_member_that_fails_to_come_up_releases_the_others_and_release_takes_them_all() {
    let (_db, cp, ops) = setup().await;
    let fleet = fleet(&cp, &ops).await;

    let failing = launch(&cp, order("flaky", "h100.8x", 2, "leaf", true))
        .await
        .unwrap();
    let c = read(&cp, failing.id).await;
    let first_host: String = sqlx::query_scalar(
        "SELECT n.hostname FROM allocations a JOIN nodes n ON n.id = a.node_id
         WHERE a.cluster_id = $1 AND a.cluster_index = 1",
    )
    .bind(failing.id.0)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    let agent = &fleet
        .agents
        .iter()
        .find(|(h, ..)| *h == first_host)
        .unwrap()
        .2;
    answer(&cp, agent, &["validate_plan"], |_| TaskOutcome::Failed {
        error: "qemu exited 1".into(),
    })
    .await;
    let after = read(&cp, failing.id).await;
    assert_eq!(after.state, "releasing", "{after:?}");
    assert!(
        after
            .failure
            .as_deref()
            .unwrap()
            .starts_with("member 1 failed to come up: qemu exited 1")
    );
    let (desired,): (String,) = sqlx::query_as(
        "SELECT desired_state FROM allocations WHERE cluster_id = $1 AND cluster_index = 2",
    )
    .bind(failing.id.0)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(desired, "released", "the member that was fine goes too");
    assert_eq!(c.members[1].index, 2);

    // The owner's release takes every member, once.
    let ok = launch(&cp, order("done", "h100.8x", 2, "leaf", true))
        .await
        .unwrap();
    let (_, who) = bob(&cp).await;
    cp.release_cluster(&who, ok.id, None).await.unwrap();
    cp.release_cluster(&who, ok.id, None).await.unwrap();
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM allocations WHERE cluster_id = $1 AND desired_state <> 'released'",
    )
    .bind(ok.id.0)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(live, 0);
    let released: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = 'cluster.release'")
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(released, 1, "releasing twice is one release");
    // Its name is free again.
    launch(&cp, order("done", "h100.8x", 2, "leaf", true))
        .await
        .unwrap();

    // Another project can't see or release it.
    let stranger = crate::support::principal(&cp, "carol@globex.example").await;
    assert!(matches!(
        cp.cluster_access::<ProjectOperators>(&stranger, ok.id)
            .await,
        Err(Error::NotFound { .. })
    ));
}

#[tokio::test]
async fn the_database_refuses_a_partial_cluster_and_a_member_joining_later() {
    let (_db, cp, ops) = setup().await;
    let _fleet = fleet(&cp, &ops).await;
    let two = launch(&cp, order("whole", "h100.8x", 2, "leaf", true))
        .await
        .unwrap();

    // A copy of the cluster claiming three members, with only its row: refused at commit.
    assert_db_refuses(
        &cp,
        &format!(
            "INSERT INTO clusters (id, tenant_id, project_id, name, sku_id, region, size, locality,
                                   locality_required, fabric, placed_within, placement_why,
                                   idempotency_key, request_fingerprint, requested_by)
             SELECT gen_random_uuid(), tenant_id, project_id, 'ghost', sku_id, region, 3, locality,
                    locality_required, fabric, placed_within, '', 'ghost-key-1', '', requested_by
             FROM clusters WHERE id = '{}'",
            two.id
        ),
        "of its 3 members",
    )
    .await;
    // Moving an allocation into the cluster afterwards: refused.
    assert_db_refuses(
        &cp,
        &format!(
            "UPDATE allocations SET cluster_index = 3 WHERE cluster_id = '{}' AND cluster_index = 2",
            two.id
        ),
        "its cluster is fixed at launch",
    )
    .await;
}

/// In a project that allows east-west traffic, each member has its own address on the
/// project's private network from the launch on, and the cluster's hosts file names them.
#[tokio::test]
async fn members_have_private_addresses_and_a_hosts_file_names_them() {
    use control_plane::tenancy::ProjectAdmins;
    let (_db, cp, ops) = setup().await;
    let fleet = fleet(&cp, &ops).await;
    let alice = cp
        .principal(crate::allocations::ALICE)
        .await
        .unwrap()
        .unwrap();
    let admin = in_project::<ProjectAdmins>(&cp, &alice, ACME_RESEARCH).await;
    cp.set_east_west(&admin, true, None).await.unwrap();
    let launched = launch(&cp, order("ring", "h100.8x", 3, "leaf", true))
        .await
        .unwrap();
    let c = read(&cp, launched.id).await;
    let addresses: Vec<Option<&str>> = c
        .members
        .iter()
        .map(|m| m.private_address.as_deref())
        .collect();
    assert_eq!(
        addresses,
        [
            Some("10.128.0.10"),
            Some("10.128.0.11"),
            Some("10.128.0.12")
        ]
    );
    let p = cp.principal(BOB).await.unwrap().unwrap();
    let viewer = in_project::<ProjectViewers>(&cp, &p, ACME_RESEARCH).await;
    let hosts = cp.cluster_hosts(&viewer, c.id).await.unwrap();
    assert_eq!(
        hosts.lines().skip(1).collect::<Vec<_>>(),
        [
            "10.128.0.10\tring-1",
            "10.128.0.11\tring-2",
            "10.128.0.12\tring-3"
        ],
        "{hosts}"
    );
    // A member's agent is handed the cluster as it boots: every member, and the cluster's
    // own key pair, which no stored task holds.
    let second = &c.members[1];
    let node: uuid::Uuid = sqlx::query_scalar("SELECT node_id FROM allocations WHERE id = $1")
        .bind(second.id.0)
        .fetch_one(cp.pool())
        .await
        .unwrap();
    let (_, _, agent) = fleet.agents.iter().find(|a| a.1.0 == node).unwrap();
    let spec = answer(&cp, agent, crate::allocations::PROVISION, provisioned).await;
    let TaskSpec::VmProvision(plan) = spec else {
        panic!("{spec:?}")
    };
    let boot = plan.cluster.expect("a member boots with its cluster");
    assert_eq!((boot.index, boot.name.as_str()), (2, "ring"));
    assert_eq!(
        boot.members
            .iter()
            .map(|m| (m.name.as_str(), m.address.as_deref()))
            .collect::<Vec<_>>(),
        [
            ("ring-1", Some("10.128.0.10")),
            ("ring-2", Some("10.128.0.11")),
            ("ring-3", Some("10.128.0.12"))
        ]
    );
    assert!(boot.ssh_public_key.starts_with("ssh-ed25519 "));
    assert!(boot.ssh_public_key.ends_with(" ring@cluster"));
    assert!(
        boot.ssh_private_key
            .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    );
    let stored: Vec<String> =
        sqlx::query_scalar("SELECT spec::text FROM agent_tasks WHERE allocation_id = $1")
            .bind(second.id.0)
            .fetch_all(cp.pool())
            .await
            .unwrap();
    assert!(
        stored.iter().all(|s| !s.contains("PRIVATE KEY")),
        "no task keeps the key"
    );

    // A member is not released alone: the cluster is, with its key forgotten.
    let operator = in_project::<ProjectOperators>(&cp, &p, ACME_RESEARCH).await;
    match cp.release_allocation(&operator, second.id, None).await {
        Err(Error::Conflict(m)) => assert!(
            m.contains("member 2 of cluster ring") && m.contains("release the cluster"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    cp.release_cluster(&operator, c.id, None).await.unwrap();
    let sealed: Option<String> =
        sqlx::query_scalar("SELECT ssh_private_key_sealed FROM clusters WHERE id = $1")
            .bind(c.id.0)
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(sealed, None);
}

/// Members are billed as instances, under their cluster: the billing page's month so far per
/// cluster adds up to what the members cost, and a closed month's invoice has the cluster's
/// usage as a line of its own, apart from a lone instance of the same SKU and price.
#[tokio::test]
async fn a_clusters_members_are_billed_under_it() {
    use control_plane::billing::invoices::close_months;
    use control_plane::billing::rating::rate_until;
    use control_plane::billing::reports::TenantFinance;
    use control_plane::demo::ACME;
    use time::macros::datetime;

    let (_db, cp, ops) = setup().await;
    let fleet = fleet(&cp, &ops).await;
    let launched = launch(&cp, order("train", "h100.8x", 2, "leaf", true))
        .await
        .unwrap();
    for m in read(&cp, launched.id).await.members {
        let node: uuid::Uuid = sqlx::query_scalar("SELECT node_id FROM allocations WHERE id = $1")
            .bind(m.id.0)
            .fetch_one(cp.pool())
            .await
            .unwrap();
        let (_, _, agent) = fleet.agents.iter().find(|a| a.1.0 == node).unwrap();
        answer(&cp, agent, crate::allocations::PROVISION, provisioned).await;
    }
    // Two hours in: what the members cost so far is enough to see.
    let members = "SELECT id FROM allocations WHERE cluster_id = $1";
    let mut conn = cp.pool().acquire().await.unwrap();
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut *conn)
        .await
        .unwrap();
    let moved = sqlx::query(&format!(
        "UPDATE usage_intervals SET started_at = started_at - interval '2 hours'
         WHERE allocation_id IN ({members})"
    ))
    .bind(launched.id.0)
    .execute(&mut *conn)
    .await
    .unwrap();
    assert_eq!(moved.rows_affected(), 2, "both members are running");

    let fiona = crate::support::principal(&cp, "fiona@acme.example").await;
    let fin = crate::support::in_tenant::<TenantFinance>(&cp, &fiona, ACME).await;
    let o = cp.billing_overview(&fin).await.unwrap();
    let [c] = o.clusters.as_slice() else {
        panic!("{:?}", o.clusters)
    };
    assert_eq!(
        (
            c.id,
            c.name.as_str(),
            c.project.as_str(),
            c.nodes,
            c.released
        ),
        (launched.id, "train", "research", 2, false)
    );
    // The demo tenant runs nothing else: the cluster is the whole month so far, by the same
    // rule (each figure is taken at its own instant, a moment apart).
    let price: i64 =
        sqlx::query_scalar("SELECT price_per_hour_minor FROM skus WHERE name = 'h100.8x'")
            .fetch_one(cp.pool())
            .await
            .unwrap();
    let two_hours = 2 * 2 * price;
    assert!(
        (two_hours..=two_hours + 1).contains(&c.month_to_date.amount_minor),
        "{} for two members over two hours at {price}/h",
        c.month_to_date
    );
    assert!(
        (c.month_to_date.amount_minor..=c.month_to_date.amount_minor + 1)
            .contains(&o.month_to_date.amount_minor),
        "{} against {}",
        c.month_to_date,
        o.month_to_date
    );

    // Moved to October and ended there, beside a lone instance of the same SKU: October's
    // invoice has a line for each.
    sqlx::query(&format!(
        "UPDATE usage_intervals SET started_at = '2026-10-05 00:00Z', ended_at = '2026-10-05 02:00Z'
         WHERE allocation_id IN ({members})"
    ))
    .bind(launched.id.0)
    .execute(&mut *conn)
    .await
    .unwrap();
    drop(conn);
    crate::billing::run(
        &cp,
        ACME,
        ACME_RESEARCH,
        "h100.8x",
        "lone",
        datetime!(2026-10-06 00:00 UTC),
        datetime!(2026-10-06 01:00 UTC),
    )
    .await;
    rate_until(cp.pool(), datetime!(2026-11-02 00:00 UTC), 1000)
        .await
        .unwrap();
    let closed = close_months(cp.pool(), datetime!(2026-11-02 00:00 UTC))
        .await
        .unwrap();
    let acme = closed.iter().find(|c| c.tenant == ACME).unwrap();
    let invoice = cp.tenant_invoice(&fin, acme.invoice).await.unwrap();
    let lines: Vec<(&str, Option<&str>, i64)> = invoice
        .lines
        .iter()
        .map(|l| {
            (
                l.description.as_str(),
                l.cluster.as_deref(),
                l.amount.amount_minor,
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            (
                "research · h100.8x · 8.000000 GPU-hours at 2.99 USD/GPU-hour",
                None,
                price
            ),
            (
                "research · cluster train (2 nodes) · h100.8x · 32.000000 GPU-hours at 2.99 USD/GPU-hour",
                Some("train"),
                2 * 2 * price
            ),
        ]
    );
    let csv = cp.invoice_csv(&fin, acme.invoice).await.unwrap();
    assert!(csv.lines().nth(2).unwrap().ends_with(",train"), "{csv}");
    // The database keeps a cluster off every line that is not usage (its guard of final
    // invoices set aside, so the check is what refuses).
    let mut conn = cp.pool().acquire().await.unwrap();
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut *conn)
        .await
        .unwrap();
    let err = sqlx::query(
        "INSERT INTO invoice_lines (invoice_id, line_no, kind, description, amount_minor, cluster_id)
         VALUES ($1, 9, 'credit', 'Prepaid credit applied', -1, $2)",
    )
    .bind(acme.invoice.0)
    .bind(launched.id.0)
    .execute(&mut *conn)
    .await
    .expect_err("a credit line can't be a cluster's")
    .to_string();
    assert!(err.contains("invoice_lines_cluster_is_usage"), "{err}");
}
