//! `cargo xtask bench placement`: placement and reservation under load, in the real database.
//!
//! Builds a synthetic fleet (default 10,000 nodes × 8 slots: HGX H100 nodes with NVLink
//! partitions and PCIe L40S nodes, two regions, some drained, some partly used), then runs
//! N concurrent clients (default 32) that launch and release through the control plane's own
//! `launch` and `release_allocation`, first on the (nearly) empty fleet, then with the fleet
//! 99% full. Prints a table, the catalog-availability query's latency, and, last, the audit
//! line `double_bookings=N`.
//!
//! Flags: `--clients N`, `--seconds S` (per phase), `--nodes N`, `--servers N` (handles with pools of their own, as server processes would be; clients take turns). Needs `DATABASE_URL`
//! (an empty database; `cargo xtask bench placement` starts a durable cluster for it).

use control_plane::prelude::*;

use std::sync::Arc;
use std::time::{Duration, Instant};

use control_plane::catalog::Shape;
use control_plane::demo::ACME_RESEARCH;
use control_plane::tenancy::{Project, ProjectOperators};
use control_plane::{AllocationId, ControlPlane, Error};

use crate::common::{ALICE, ClientStream, flag, launch_request, ms, pct};

/// `(SKU, weight, label)`. `bench peer-placement` asks OpenStack Placement for the same mix.
pub const MIX: &[(&str, u32, &str)] = &[
    ("h100.1x", 40, "1 GPU"),
    ("h100.2x", 25, "2 GPUs"),
    ("h100.4x", 15, "4 GPUs"),
    ("h100.8x", 10, "8 GPUs"),
    ("h100.8x.metal", 10, "baremetal"),
];

#[derive(Default)]
struct Tally {
    /// Per MIX entry: latencies of committed placements.
    placed: Vec<Vec<Duration>>,
    /// Per MIX entry: latencies of `sku_unavailable` answers.
    unavailable: Vec<Vec<Duration>>,
    released: usize,
    errors: Vec<String>,
}

impl Tally {
    fn new() -> Self {
        Tally {
            placed: vec![vec![]; MIX.len()],
            unavailable: vec![vec![]; MIX.len()],
            ..Tally::default()
        }
    }
    fn merge(&mut self, o: Tally) {
        for (i, v) in o.placed.into_iter().enumerate() {
            self.placed[i].extend(v);
        }
        for (i, v) in o.unavailable.into_iter().enumerate() {
            self.unavailable[i].extend(v);
        }
        self.released += o.released;
        self.errors.extend(o.errors);
    }
    fn committed(&self) -> usize {
        self.placed.iter().map(Vec::len).sum()
    }
    fn refused(&self) -> usize {
        self.unavailable.iter().map(Vec::len).sum()
    }
}

async fn client(
    cp: ControlPlane,
    who: Arc<Project<ProjectOperators>>,
    me: usize,
    phase: &'static str,
    until: Instant,
) -> Tally {
    let mut t = Tally::new();
    let weights: Vec<u32> = MIX.iter().map(|m| m.1).collect();
    let mut stream = ClientStream::for_client(me);
    let mut mine: Vec<AllocationId> = Vec::new();
    let mut n = 0;
    while Instant::now() < until {
        let which = stream.pick(&weights);
        n += 1;
        let req = launch_request(
            MIX[which].0,
            format!("{phase}-{me}-{n}"),
            format!("bench-{phase}-{me}-{n}"),
        );
        let started = Instant::now();
        match cp.launch(&who, &req, None).await {
            Ok(l) => {
                t.placed[which].push(started.elapsed());
                mine.push(l.id);
            }
            Err(Error::SkuUnavailable(_)) => t.unavailable[which].push(started.elapsed()),
            Err(e) => t.errors.push(e.to_string()),
        }
        // Release every other allocation (the slots return once their cleanup proof does).
        if stream.release_now()
            && let Some(id) = mine.pop()
        {
            match cp.release_allocation(&who, id, None).await {
                Ok(()) => t.released += 1,
                Err(e) => t.errors.push(e.to_string()),
            }
        }
    }
    t
}

/// Client `i` launches through server `i % servers.len()`.
async fn phase(
    servers: &[ControlPlane],
    who: &Arc<Project<ProjectOperators>>,
    name: &'static str,
    clients: usize,
    seconds: u64,
) -> (Tally, Duration) {
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let cp = servers[i % servers.len()].clone();
            tokio::spawn(client(cp, who.clone(), i, name, until))
        })
        .collect();
    let mut all = Tally::new();
    for task in tasks {
        all.merge(task.await.expect("a client panicked"));
    }
    (all, started.elapsed())
}

/// The synthetic fleet, in bulk SQL: nodes with a fresh heartbeat, an approved generation,
/// 8 approved slots each, and NVLink partitions on the HGX nodes.
pub async fn build_fleet(pool: &sqlx::PgPool, nodes: usize) -> Result<(), sqlx::Error> {
    // In transactions of 10,000 nodes, each analyzed before the next: the free-block refresh
    // plans its lookups once per session, and planned against tables the statistics still
    // call empty, one transaction for 100,000 nodes scanned ever larger tables per node.
    let nodes = nodes as i64;
    let mut lo = 1;
    while lo <= nodes {
        let hi = (lo + 9_999).min(nodes);
        build_nodes(pool, lo, hi).await?;
        lo = hi + 1;
    }
    Ok(())
}

/// Nodes `bench-{lo}` to `bench-{hi}`, with their slots and partitions, in one transaction.
async fn build_nodes(pool: &sqlx::PgPool, lo: i64, hi: i64) -> Result<(), sqlx::Error> {
    sqlx::query(
        "CREATE OR REPLACE FUNCTION uuid_generate_v5_like(i bigint) RETURNS uuid LANGUAGE sql IMMUTABLE AS
         $$ SELECT (lpad(to_hex(i), 8, '0') || '-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid $$",
    )
    .execute(pool)
    .await?;
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO nodes (id, hostname, region, rack, family, capacity_shapes, admin_state,
                            enrolled_by, agent_enrolled_at, agent_version, last_heartbeat_at, health)
         SELECT uuid_generate_v5_like(i), 'bench-' || i,
                CASE WHEN i % 2 = 0 THEN 'eu-west-1' ELSE 'us-east-1' END, 'r' || (i % 40),
                CASE WHEN i % 10 < 7 THEN 'hgx-h100-8x' ELSE 'pcie-l40s-8x' END,
                ARRAY['gpu_slice', 'baremetal'],
                CASE WHEN i % 33 = 0 THEN 'draining' ELSE 'active' END,
                $2, now(), 'bench', now() + interval '1 day', 'healthy'
         FROM generate_series($1::bigint, $3::bigint) AS i",
    )
    .bind(lo)
    .bind(ALICE.0)
    .bind(hi)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO slot_map_proposals (node_id, generation, discovery, status, decided_by, decided_at)
         SELECT id, 1, '{}', 'approved', $1, now() FROM nodes
         WHERE id IN (SELECT uuid_generate_v5_like(i) FROM generate_series($2::bigint, $3::bigint) AS i)",
    )
    .bind(ALICE.0)
    .bind(lo)
    .bind(hi)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO node_resource_slots
             (id, node_id, slot_index, gpu_pci_address, gpu_model, numa_node, nvme_pci_address,
              nvme_serial, nvme_namespace, nvme_size_bytes, ib_vf_pci_address, cpu_set, memory_mib,
              capacity_metadata, approved_generation, approved_by)
         SELECT gen_random_uuid(), n.id, s,
                format('0000:%s:00.0', lpad(to_hex(16 + s * 16), 2, '0')),
                CASE WHEN n.family = 'hgx-h100-8x' THEN 'NVIDIA H100 80GB HBM3' ELSE 'NVIDIA L40S' END,
                s / 4,
                format('0000:%s:00.0', lpad(to_hex(17 + s * 16), 2, '0')),
                'SN' || s, 'nvme' || s || 'n1', 3840000000000,
                format('0000:%s:00.1', lpad(to_hex(18 + s * 16), 2, '0')),
                format('%s-%s', 2 + s * 24, 25 + s * 24), 254976,
                jsonb_build_object('storage_ownership', 'slice', 'fabric_claim_mode', 'per_slot_vf',
                                   'fabric_vf_pci_address', format('0000:%s:00.1', lpad(to_hex(18 + s * 16), 2, '0')),
                                   'destructive_wipe_policy', 'nvme-format-crypto'),
                1, $1
         FROM nodes n CROSS JOIN generate_series(0, 7) AS s
         WHERE n.id IN (SELECT uuid_generate_v5_like(i) FROM generate_series($2::bigint, $3::bigint) AS i)",
    )
    .bind(ALICE.0)
    .bind(lo)
    .bind(hi)
    .execute(&mut *tx)
    .await?;
    sqlx::query("ANALYZE nodes, node_resource_slots")
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO node_fabric_partitions (node_id, partition_id, slot_ids)
         SELECT n.id, p.id, (SELECT array_agg(s.id ORDER BY s.slot_index) FROM node_resource_slots s
                             WHERE s.node_id = n.id AND s.retired_at IS NULL
                               AND s.slot_index = ANY(p.members))
         FROM nodes n CROSS JOIN (VALUES (0, ARRAY[0,1,2,3,4,5,6,7]), (1, ARRAY[0,1,2,3]), (2, ARRAY[4,5,6,7]),
                                         (3, ARRAY[0,2]), (4, ARRAY[1,3]), (5, ARRAY[4,6]), (6, ARRAY[5,7])) AS p (id, members)
         WHERE n.id IN (SELECT uuid_generate_v5_like(i) FROM generate_series($1::bigint, $2::bigint) AS i)
           AND n.family = 'hgx-h100-8x'",
    )
    .bind(lo)
    .bind(hi)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "ANALYZE node_fabric_partitions, node_free_blocks, availability_changes, resource_claims",
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Claims free slots in bulk (one allocation per node): `fraction` of the free ones, or of
/// the nodes' first `first_k` slots.
pub async fn occupy(pool: &sqlx::PgPool, condition: &str) -> Result<u64, sqlx::Error> {
    let sql = format!(
        "WITH pick AS (
             SELECT s.node_id, s.id AS slot_id FROM node_resource_slots s JOIN nodes n ON n.id = s.node_id
             WHERE n.hostname LIKE 'bench-%' AND s.retired_at IS NULL AND s.cleanup_state = 'clean'
               AND NOT EXISTS (SELECT 1 FROM resource_claims c WHERE c.node_id = s.node_id
                               AND c.released_at IS NULL AND (c.slot_id = s.id OR c.kind = 'baremetal'))
               AND ({condition})
         ), per_node AS (
             SELECT node_id, gen_random_uuid() AS alloc, count(*)::int AS n FROM pick GROUP BY node_id
         ), a AS (
             INSERT INTO allocations (id, tenant_id, project_id, name, sku_id, shape, gpu_count, region,
                                      node_id, listing_version_id, ssh_public_key, price_per_hour_minor, currency,
                                      idempotency_key, request_fingerprint, requested_by, placement,
                                      state, requested_at)
             SELECT pn.alloc, p.tenant_id, p.id, 'fill-' || pn.alloc, s.id,
                    'gpu_slice', pn.n, nd.region, pn.node_id, i.id, 'k', 299, 'USD',
                    'fill-' || pn.alloc, 'f', $1, '{{}}', 'placed', now()
             FROM per_node pn JOIN nodes nd ON nd.id = pn.node_id, projects p, skus s,
                  listing_versions i JOIN listings l ON l.id = i.listing_id
             WHERE p.id = $2 AND s.name = 'h100.1x' AND l.slug = 'ubuntu-24.04-cuda'
               AND i.state = 'published'
             RETURNING id
         )
         INSERT INTO resource_claims (id, node_id, slot_id, kind, allocation_id)
         SELECT gen_random_uuid(), pk.node_id, pk.slot_id, 'gpu_slice', pn.alloc
         FROM pick pk JOIN per_node pn USING (node_id)
         WHERE EXISTS (SELECT 1 FROM a)"
    );
    Ok(sqlx::query(&sql)
        .bind(ALICE.0)
        .bind(ACME_RESEARCH.0)
        .execute(pool)
        .await?
        .rows_affected())
}

fn report(name: &str, t: &Tally, took: Duration, clients: usize) {
    let secs = took.as_secs_f64();
    println!(
        "{name:<18} {clients:>7} {secs:>8.1} {:>10} {:>13.0} {:>12} {:>9}",
        t.committed(),
        t.committed() as f64 / secs,
        t.refused(),
        t.released
    );
}

/// The catalog's availability query as the catalog runs it, 200 times per active SKU, sorted.
async fn availability_latency(cp: &ControlPlane) -> Vec<Duration> {
    let skus = cp.active_skus().await.expect("skus");
    let mut lat = Vec::with_capacity(200 * skus.len());
    for _ in 0..200 {
        for sku in &skus {
            let t = Instant::now();
            cp.availability_of(sku).await.expect("availability");
            lat.push(t.elapsed());
        }
    }
    lat.sort();
    lat
}

/// A recount of availability from the nodes (waiting out a compaction that holds the count):
/// by how many launches the kept count was off.
async fn recount(cp: &ControlPlane) -> i64 {
    loop {
        if let Some(off) = cp.rebase_availability().await.expect("recount") {
            return off;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// For comparison: what the catalog ran before migration 0029, summing every node's free
/// blocks per SKU (O(nodes)), 20 times per active GPU-slice SKU, sorted.
async fn fleet_sum_latency(cp: &ControlPlane) -> Vec<Duration> {
    let skus = cp.active_skus().await.expect("skus");
    let mut lat = Vec::new();
    for _ in 0..20 {
        for sku in skus.iter().filter(|s| s.shape == Shape::GpuSlice) {
            let per = sku.per_gpu();
            let t = Instant::now();
            sqlx::query(
                "SELECT n.region, sum(b.free_blocks)::bigint
                 FROM node_free_blocks b JOIN nodes n ON n.id = b.node_id
                 WHERE b.gpu_model = $1 AND b.block_size = $2 AND b.free_blocks > 0
                   AND b.min_vcpus >= $3 AND b.min_memory_mib >= $4 AND b.min_nvme_bytes >= $5
                   AND n.region = ANY($6) AND n.family = ANY($7) AND node_sells(n, 'gpu_slice')
                 GROUP BY n.region",
            )
            .bind(&sku.gpu_model)
            .bind(sku.gpu_count)
            .bind(per.vcpus)
            .bind(per.memory_mib)
            .bind(per.nvme_bytes)
            .bind(&sku.regions)
            .bind(&sku.families)
            .fetch_all(cp.pool())
            .await
            .expect("the fleet's sum");
            lat.push(t.elapsed());
        }
    }
    lat.sort();
    lat
}

#[tokio::main(flavor = "multi_thread")]
pub async fn main() {
    let clients: usize = flag("--clients", 32);
    let seconds: u64 = flag("--seconds", 10);
    let nodes: usize = flag("--nodes", 10_000);
    let replicas: usize = flag("--servers", 1);
    let (pool, cp) = crate::common::seeded(clients as u32 + 4).await;
    // Each further server is a handle of its own (its own pool and group placement), as a
    // second server process would be.
    let mut servers = vec![cp.clone()];
    for _ in 1..replicas {
        let pool = control_plane::pool::sized(clients as u32 + 4)
            .connect_with(pool.connect_options().as_ref().clone())
            .await
            .expect("a second pool");
        servers.push(ControlPlane::new(pool, control_plane::Naming::default()));
    }
    let groups = |servers: &[ControlPlane]| {
        servers
            .iter()
            .map(|s| s.metrics().launch_groups())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    let sync: String = sqlx::query_scalar(
        "SELECT current_setting('fsync') || '/' || current_setting('synchronous_commit')",
    )
    .fetch_one(&pool)
    .await
    .expect("settings");
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);

    let t = Instant::now();
    build_fleet(&pool, nodes).await.expect("builds the fleet");
    // Partly used: a quarter of the nodes have slots 0 and 1 taken.
    let partial = occupy(&pool, "n.hostname ~ '[048]$' AND s.slot_index < 2")
        .await
        .expect("occupies");
    sqlx::query("ANALYZE")
        .execute(&pool)
        .await
        .expect("analyze");
    println!(
        "fleet: {nodes} nodes x 8 slots ({} slots claimed up front, every 33rd node draining) built in {:.1} s; {cores} cores; fsync/synchronous_commit = {sync}",
        partial,
        t.elapsed().as_secs_f64()
    );

    // What every server replica does in the background for the catalog's count: lapsed
    // heartbeats and compaction every second.
    let upkeep = {
        let cp = cp.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                cp.keep_availability().await.expect("availability upkeep");
            }
        })
    };

    let principal = cp.principal(ALICE).await.unwrap().unwrap();
    let who = Arc::new(
        cp.project_access::<ProjectOperators>(&principal, ACME_RESEARCH)
            .await
            .unwrap(),
    );

    println!();
    println!("phase              clients  seconds  committed  committed/s  unavailable  released");
    let cpu_before = crate::common::ours_and_database_cpu_seconds();
    let (empty, empty_took) = phase(&servers, &who, "empty", clients, seconds).await;
    let cpu_empty = crate::common::ours_and_database_cpu_seconds() - cpu_before;
    report("empty fleet", &empty, empty_took, clients);
    let (group_count, grouped) = groups(&servers);
    let mean_group = grouped as f64 / group_count.max(1) as f64;
    let free: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM node_resource_slots s WHERE s.cleanup_state = 'clean'
           AND NOT EXISTS (SELECT 1 FROM resource_claims c WHERE c.node_id = s.node_id AND c.released_at IS NULL
                           AND (c.slot_id = s.id OR c.kind = 'baremetal'))",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    // The catalog's availability query on the (nearly) empty fleet: every node has free
    // blocks, the most there is to add up.
    let lat_empty = availability_latency(&cp).await;
    let lat_sum = fleet_sum_latency(&cp).await;
    let t = Instant::now();
    let recount_off = recount(&cp).await;
    let recount_took = t.elapsed();
    let total = (nodes * 8) as f64;
    // Leave 1% of all slots free, scattered.
    let keep = (total * 0.01) as i64;
    let fraction = 1.0 - keep as f64 / free.max(1) as f64;
    occupy(&pool, &format!("random() < {fraction}"))
        .await
        .expect("fills");
    sqlx::query("ANALYZE")
        .execute(&pool)
        .await
        .expect("analyze");
    let (full, full_took) = phase(&servers, &who, "full", clients, seconds).await;
    report("99% full fleet", &full, full_took, clients);

    println!();
    println!("placement latency, committed placements on the empty fleet (ms)");
    println!("shape          count     p50     p99     max   unavailable(p99)");
    for (i, (_, _, label)) in MIX.iter().enumerate() {
        let mut v = empty.placed[i].clone();
        v.sort();
        let mut u = empty.unavailable[i].clone();
        u.sort();
        println!(
            "{label:<12} {:>7} {:>7.1} {:>7.1} {:>7.1}   {:>5} ({:.1})",
            v.len(),
            pct(&v, 0.50),
            pct(&v, 0.99),
            v.last().map(|d| ms(*d)).unwrap_or(f64::NAN),
            u.len(),
            pct(&u, 0.99),
        );
    }
    let mut all: Vec<Duration> = empty.placed.iter().flatten().copied().collect();
    all.sort();
    println!(
        "all          {:>7} {:>7.1} {:>7.1} {:>7.1}",
        all.len(),
        pct(&all, 0.5),
        pct(&all, 0.99),
        all.last().map(|d| ms(*d)).unwrap_or(f64::NAN)
    );

    // The catalog's availability query on the 99% full fleet (few free blocks to add up).
    let lat_full = availability_latency(&cp).await;
    println!();
    for (what, lat) in [
        ("catalog availability query, empty fleet", &lat_empty),
        ("catalog availability query, 99% full fleet", &lat_full),
        (
            "for comparison, the fleet's free blocks summed (before 0029), empty fleet",
            &lat_sum,
        ),
    ] {
        println!(
            "{what}: {} calls, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            lat.len(),
            pct(lat, 0.5),
            pct(lat, 0.99),
            lat.last().map(|d| ms(*d)).unwrap_or(f64::NAN)
        );
    }
    println!(
        "the minute's recount of the whole fleet, empty fleet: {:.1} ms, off by {recount_off}",
        ms(recount_took)
    );
    println!(
        "group placement, empty fleet: {grouped} of {} placed in {group_count} group transactions (mean {mean_group:.1}, largest {}) on {replicas} server(s); the rest alone",
        empty.committed(),
        servers
            .iter()
            .map(|s| s.metrics().largest_launch_group())
            .max()
            .unwrap_or(0),
    );
    let errors: Vec<&String> = empty.errors.iter().chain(&full.errors).collect();
    if !errors.is_empty() {
        println!("errors ({}): first: {}", errors.len(), errors[0]);
    }
    println!(
        "targets: >= 1000 committed/s, p99 <= 20 ms, 8-GPU p99 <= 2 x 1-GPU p99, availability p99 <= 10 ms"
    );
    let doubles: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM (SELECT slot_id FROM resource_claims
                                       WHERE released_at IS NULL AND slot_id IS NOT NULL
                                       GROUP BY slot_id HAVING count(*) > 1) d)
              + (SELECT count(*) FROM resource_claims b JOIN resource_claims o
                   ON o.node_id = b.node_id AND o.id <> b.id
                 WHERE b.kind = 'baremetal' AND b.released_at IS NULL AND o.released_at IS NULL)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    println!("double_bookings={doubles}");
    upkeep.abort();
    // The count the catalog read, against a recount of the nodes.
    let availability_off = recount(&cp).await;
    println!("availability count off by {availability_off} launches (a recount of the nodes)");
    // On the 99% full fleet most launches can't fit (and the benchmark's releases never come
    // back: no agent cleans their slots), so its rate is of answers, placed or refused with
    // the reason, and its latency includes the refusals.
    let per_s = |n: usize, took: Duration| n as f64 / took.as_secs_f64().max(1e-9);
    let empty_rate = per_s(empty.committed(), empty_took);
    let full_answers = per_s(full.committed() + full.refused(), full_took);
    let mut full_all: Vec<Duration> = full
        .placed
        .iter()
        .chain(&full.unavailable)
        .flatten()
        .copied()
        .collect();
    full_all.sort();
    println!(
        "99% full fleet: {:.0} answers/s ({:.0} placed/s), p99 {:.1} ms including refusals",
        full_answers,
        per_s(full.committed(), full_took),
        pct(&full_all, 0.99)
    );
    println!(
        "RESULT placement placements_per_s={empty_rate:.0} p99_ms={:.1} full_ratio={:.2} full_p99_ms={:.1} availability_p99_ms={:.2} availability_full_p99_ms={:.2} fleet_sum_p99_ms={:.2} cpu_ms_per_placement={:.2} availability_off={availability_off} double_bookings={doubles} errors={} clients={clients} nodes={nodes} servers={replicas} mean_group={mean_group:.1}",
        pct(&all, 0.99),
        full_answers / empty_rate.max(1e-9),
        pct(&full_all, 0.99),
        pct(&lat_empty, 0.99),
        pct(&lat_full, 0.99),
        pct(&lat_sum, 0.99),
        cpu_empty * 1000.0 / empty.committed().max(1) as f64,
        errors.len(),
    );
    if doubles != 0 || availability_off != 0 || recount_off != 0 || !errors.is_empty() {
        std::process::exit(1);
    }
}
