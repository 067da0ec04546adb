//! `cargo xtask bench clusters`: placing clusters of 8-GPU slices on the placement
//! benchmark's fleet, in the real database, through the control plane's own `launch_cluster`.
//!
//! Builds the synthetic fleet of `bench placement` (default 10,000 nodes: 70% HGX H100, a
//! quarter with two slots taken, every 33rd draining), gives every node a fabric place (one
//! fabric per region, leaves of 18 nodes, spine groups of 8 leaves), then runs N concurrent
//! clients (default 4) that each launch clusters of `--members` (default 16) × `h100.8x`,
//! locality leaf preferred, until `--clusters` (default 200) have been asked for. Each cluster is
//! kept (the fleet fills, as it does in production until releases come back).
//!
//! Prints the rate and latency of committed cluster launches and of refusals, how the clusters
//! were placed (within one leaf, one spine, one fabric), and the audit: no partial cluster, no
//! slot claimed twice, every cluster within one fabric. `RESULT clusters …` is the line to
//! compare. Needs `DATABASE_URL` (an empty database).

use control_plane::prelude::*;

use std::sync::Arc;
use std::time::{Duration, Instant};

use control_plane::Error;
use control_plane::allocations::LaunchOrder;
use control_plane::allocations::OrderKeys;
use control_plane::allocations::clusters::ClusterOrder;
use control_plane::auth::Principal;
use control_plane::demo::ACME_RESEARCH;
use control_plane::tenancy::{Project, ProjectOperators};

use crate::common::{ALICE, KEY, flag, ms, pct};

#[derive(Default)]
struct Tally {
    placed: Vec<Duration>,
    refused: Vec<Duration>,
    errors: Vec<String>,
}

/// Every node on a fabric place: `ib-<region>`, spine group `s<k>` of 8 leaves, leaf `l<k>` of
/// 18 nodes, in hostname order within each region.
async fn place_fleet(pool: &sqlx::PgPool) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(
        "WITH n AS (
             SELECT id, region, row_number() OVER (PARTITION BY region ORDER BY hostname) - 1 AS i
             FROM nodes WHERE hostname LIKE 'bench-%')
         INSERT INTO node_fabric_places (node_id, fabric, spine_group, leaf, source, approved_by)
         SELECT id, 'ib-' || region, 's' || (i / 144), 'l' || (i / 18), 'operator', $1 FROM n",
    )
    .bind(ALICE.0)
    .execute(pool)
    .await?
    .rows_affected())
}

fn order(name: String, members: u32) -> ClusterOrder {
    ClusterOrder {
        launch: LaunchOrder {
            sku: "h100.8x".into(),
            image: "ubuntu-24.04-cuda".into(),
            idempotency_key: format!("bench-{name}"),
            name,
            keys: OrderKeys {
                typed: vec![KEY.into()],
                ..Default::default()
            },
            ..Default::default()
        },
        members,
        locality: "leaf".into(),
        locality_required: false,
    }
}

async fn client(
    cp: control_plane::ControlPlane,
    principal: Arc<Principal>,
    who: Arc<Project<ProjectOperators>>,
    me: usize,
    asks: usize,
    members: u32,
) -> Tally {
    let mut t = Tally::default();
    for n in 0..asks {
        let started = Instant::now();
        match cp
            .launch_cluster(&principal, &who, order(format!("c{me}-{n}"), members), None)
            .await
        {
            Ok(_) => t.placed.push(started.elapsed()),
            Err(Error::SkuUnavailable(_)) => t.refused.push(started.elapsed()),
            Err(e) => t.errors.push(e.to_string()),
        }
    }
    t
}

#[tokio::main(flavor = "multi_thread")]
pub async fn main() {
    let clients: usize = flag("--clients", 4);
    let nodes: usize = flag("--nodes", 10_000);
    let members: u32 = flag("--members", 16);
    let clusters: usize = flag("--clusters", 200);
    let (pool, cp) = crate::common::seeded(clients as u32 + 4).await;
    let t = Instant::now();
    crate::placement::build_fleet(&pool, nodes)
        .await
        .expect("builds the fleet");
    let placed = place_fleet(&pool).await.expect("places the fleet");
    // Partly used, as in `bench placement`: a quarter of the nodes have slots 0 and 1 taken,
    // so they can't take an 8-GPU member.
    crate::placement::occupy(&pool, "n.hostname ~ '[048]$' AND s.slot_index < 2")
        .await
        .expect("occupies");
    sqlx::query("ANALYZE")
        .execute(&pool)
        .await
        .expect("analyze");
    println!(
        "fleet: {nodes} nodes, {placed} on fabric places (leaves of 18, spine groups of 8 leaves), built in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let principal = Arc::new(cp.principal(ALICE).await.unwrap().unwrap());
    let who = Arc::new(
        cp.project_access::<ProjectOperators>(&principal, ACME_RESEARCH)
            .await
            .unwrap(),
    );
    let per_client = clusters.div_ceil(clients);
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            tokio::spawn(client(
                cp.clone(),
                principal.clone(),
                who.clone(),
                i,
                per_client,
                members,
            ))
        })
        .collect();
    let mut all = Tally::default();
    for task in tasks {
        let t = task.await.expect("a client panicked");
        all.placed.extend(t.placed);
        all.refused.extend(t.refused);
        all.errors.extend(t.errors);
    }
    let took = started.elapsed();
    all.placed.sort();
    all.refused.sort();
    let partial: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM clusters c
         WHERE (SELECT count(*) FROM allocations a WHERE a.cluster_id = c.id) <> c.size",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let doubles: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT slot_id FROM resource_claims
                               WHERE released_at IS NULL AND slot_id IS NOT NULL
                               GROUP BY slot_id HAVING count(*) > 1) d",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let outside: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM clusters c
         WHERE (SELECT count(DISTINCT p.fabric) FROM allocations a
                JOIN node_fabric_places p ON p.node_id = a.node_id WHERE a.cluster_id = c.id) <> 1
            OR (c.placed_within = 'leaf' AND (SELECT count(DISTINCT (p.spine_group, p.leaf))
                FROM allocations a JOIN node_fabric_places p ON p.node_id = a.node_id
                WHERE a.cluster_id = c.id) <> 1)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    // How many were placed within a leaf, a spine group, a fabric: read once, after the run.
    let within: Vec<i64> = sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE placed_within = w) FROM clusters,
                unnest(ARRAY['leaf', 'spine', 'fabric']) AS w GROUP BY w
         ORDER BY array_position(ARRAY['leaf', 'spine', 'fabric'], w)",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let rate = all.placed.len() as f64 / took.as_secs_f64().max(1e-9);
    println!(
        "{} clusters of {members} × h100.8x asked by {clients} clients in {:.1} s: {} placed ({} within a leaf, {} a spine, {} the fabric), {} refused",
        per_client * clients,
        took.as_secs_f64(),
        all.placed.len(),
        within[0],
        within[1],
        within[2],
        all.refused.len()
    );
    println!(
        "placed: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; refused: p99 {:.1} ms",
        pct(&all.placed, 0.5),
        pct(&all.placed, 0.99),
        all.placed.last().map(|d| ms(*d)).unwrap_or(f64::NAN),
        pct(&all.refused, 0.99),
    );
    if let Some(e) = all.errors.first() {
        println!("errors ({}): first: {e}", all.errors.len());
    }
    println!(
        "RESULT clusters clusters_per_s={rate:.1} p99_ms={:.1} p50_ms={:.1} refused_p99_ms={:.1} placed={} leaf={} spine={} fabric={} refused={} partial={partial} double_bookings={doubles} outside_locality={outside} errors={} members={members} clients={clients} nodes={nodes}",
        pct(&all.placed, 0.99),
        pct(&all.placed, 0.5),
        pct(&all.refused, 0.99),
        all.placed.len(),
        within[0],
        within[1],
        within[2],
        all.refused.len(),
        all.errors.len(),
    );
    if partial != 0 || doubles != 0 || outside != 0 || !all.errors.is_empty() {
        std::process::exit(1);
    }
}
