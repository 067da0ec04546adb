//! `bench peer-placement`: OpenStack Placement, the scheduler database behind Nova, given the
//! placement benchmark's fleet and request mix, so the two can be compared on one machine.
//!
//! The fleet is the one `bench placement` builds, as Placement models it: a resource provider
//! per node with `PGPU`, `VCPU`, `MEMORY_MB` and `DISK_GB` inventory (8 GPUs and their share of
//! the rest), a trait for the GPU model (`CUSTOM_GPU_H100`, `CUSTOM_GPU_L40S`) and for NVLink,
//! `COMPUTE_STATUS_DISABLED` on the draining nodes (what Nova sets on a disabled compute
//! service), and 2 GPUs already used on a quarter of the nodes. It is written in bulk into
//! Placement's own tables (through its API it would take minutes at 10,000 nodes); the custom
//! traits are made through the API first, as a deployment would.
//!
//! Each client then launches as Nova's scheduler does: `GET /allocation_candidates` for the
//! SKU's resources and traits (at most `--limit` candidates, Nova's `max_placement_results`,
//! default 1000, shuffled by Placement's `randomize_allocation_candidates`), then
//! `PUT /allocations/{consumer}` with a consumer generation of null, moving to the next
//! candidate on a 409 conflict, and asking again once if every candidate conflicted. It
//! releases every other allocation with `DELETE /allocations/{consumer}`, with the same random
//! stream as `bench placement`, so both see the same sequence of requests.
//!
//! Needs `PLACEMENT_URL` (a Placement API with `auth_strategy = noauth2`) and `DATABASE_URL`
//! (Placement's database, for the bulk load and the audit). `PEER_PIDS` (comma-separated pids
//! of the API server's processes) and `PG_POSTMASTER_PID` (a `postmaster.pid` file) say whose
//! CPU time a committed allocation costs. Flags: `--clients N`, `--seconds S`, `--nodes N`,
//! `--limit N`. Prints `RESULT peer-placement …`; exits non-zero when the audit finds usage
//! above inventory or a request failed.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uuid::Uuid;

use crate::common::{ClientStream, flag, ms, pct, postmaster_pid, tree_cpu_seconds};
use crate::placement::MIX;

const MICROVERSION: &str = "placement 1.39";

/// Per GPU, what a slice SKU asks for besides the GPU (the demo SKUs' shares): vCPUs, MiB of
/// memory, GB of disk. A node has 8 GPUs and 8 slots' worth of the rest.
const VCPUS_PER_GPU: u32 = 22;
const MEMORY_MB_PER_GPU: u32 = 240 * 1024;
const DISK_GB_PER_GPU: u32 = 3500;
const NODE_VCPUS: u32 = 192;
const NODE_MEMORY_MB: u32 = 8 * 254_976;
const NODE_DISK_GB: u32 = 8 * 3840;

/// What a SKU of [`MIX`] asks Placement for: its resources and required traits, as the query
/// of `GET /allocation_candidates` and `GET /resource_providers`.
fn request_of(sku: &str) -> String {
    let gpus: u32 = sku
        .strip_prefix("h100.")
        .and_then(|s| s.split('x').next())
        .and_then(|n| n.parse().ok())
        .expect("a SKU of the mix names its GPU count");
    // A bare-metal node is the whole node: asking for all of its inventory is how a flat
    // provider says "nothing else on it".
    let (vcpus, memory, disk) = if sku.ends_with(".metal") {
        (NODE_VCPUS, NODE_MEMORY_MB, NODE_DISK_GB)
    } else {
        (
            gpus * VCPUS_PER_GPU,
            gpus * MEMORY_MB_PER_GPU,
            gpus * DISK_GB_PER_GPU,
        )
    };
    let nvlink = if gpus > 1 { ",CUSTOM_NVLINK" } else { "" };
    format!(
        "resources=PGPU:{gpus},VCPU:{vcpus},MEMORY_MB:{memory},DISK_GB:{disk}&required=CUSTOM_GPU_H100{nvlink},!COMPUTE_STATUS_DISABLED"
    )
}

#[derive(Clone)]
struct Placement {
    http: reqwest::Client,
    base: String,
}

enum Claim {
    Claimed,
    Conflict,
}

impl Placement {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", MICROVERSION)
            .header("content-type", "application/json")
    }

    async fn send(&self, rb: reqwest::RequestBuilder) -> Result<(u16, Vec<u8>), String> {
        let r = rb.send().await.map_err(|e| e.to_string())?;
        let status = r.status().as_u16();
        let body = r.bytes().await.map_err(|e| e.to_string())?;
        Ok((status, body.to_vec()))
    }

    async fn get(&self, path: &str) -> Result<Value, String> {
        let (status, body) = self.send(self.request(reqwest::Method::GET, path)).await?;
        if status != 200 {
            return Err(format!(
                "GET {path}: {status} {}",
                String::from_utf8_lossy(&body)
            ));
        }
        serde_json::from_slice(&body).map_err(|e| format!("GET {path}: {e}"))
    }

    /// The allocation requests Placement offers for `query`, in its (shuffled) order.
    async fn candidates(&self, query: &str, limit: u32) -> Result<Vec<Value>, String> {
        let v = self
            .get(&format!("/allocation_candidates?{query}&limit={limit}"))
            .await?;
        match v.get("allocation_requests") {
            Some(Value::Array(a)) => Ok(a.clone()),
            _ => Err("allocation_candidates without allocation_requests".into()),
        }
    }

    /// Claims one candidate for `consumer`, as Nova's scheduler does.
    async fn claim(&self, consumer: Uuid, candidate: &Value) -> Result<Claim, String> {
        let body = json!({
            "allocations": candidate["allocations"],
            "project_id": "bench-project",
            "user_id": "bench-user",
            "consumer_generation": null,
            "consumer_type": "INSTANCE",
        });
        let (status, text) = self
            .send(
                self.request(reqwest::Method::PUT, &format!("/allocations/{consumer}"))
                    .body(body.to_string()),
            )
            .await?;
        match status {
            204 => Ok(Claim::Claimed),
            409 => Ok(Claim::Conflict),
            _ => Err(format!(
                "PUT /allocations: {status} {}",
                String::from_utf8_lossy(&text)
            )),
        }
    }

    async fn release(&self, consumer: Uuid) -> Result<(), String> {
        let (status, text) = self
            .send(self.request(reqwest::Method::DELETE, &format!("/allocations/{consumer}")))
            .await?;
        if status == 204 {
            Ok(())
        } else {
            Err(format!(
                "DELETE /allocations: {status} {}",
                String::from_utf8_lossy(&text)
            ))
        }
    }

    /// A launch: candidates, then a claim on each in turn until one holds; asked again once
    /// if every candidate conflicted. `None` when nothing fits.
    async fn launch(
        &self,
        query: &str,
        limit: u32,
        conflicts: &mut usize,
    ) -> Result<Option<Uuid>, String> {
        let consumer = Uuid::new_v4();
        for _ in 0..2 {
            let candidates = self.candidates(query, limit).await?;
            if candidates.is_empty() {
                return Ok(None);
            }
            for c in &candidates {
                match self.claim(consumer, c).await? {
                    Claim::Claimed => return Ok(Some(consumer)),
                    Claim::Conflict => *conflicts += 1,
                }
            }
        }
        Ok(None)
    }
}

#[derive(Default)]
struct Tally {
    placed: Vec<Duration>,
    unavailable: Vec<Duration>,
    conflicts: usize,
    released: usize,
    errors: Vec<String>,
}

/// One client: the same weighted SKU choice and release coin as `bench placement`'s clients.
async fn client(p: Placement, me: usize, limit: u32, until: Instant) -> Tally {
    let mut t = Tally::default();
    let weights: Vec<u32> = MIX.iter().map(|m| m.1).collect();
    let mut stream = ClientStream::for_client(me);
    let queries: Vec<String> = MIX.iter().map(|m| request_of(m.0)).collect();
    let mut mine: Vec<Uuid> = Vec::new();
    while Instant::now() < until {
        let which = stream.pick(&weights);
        let started = Instant::now();
        match p.launch(&queries[which], limit, &mut t.conflicts).await {
            Ok(Some(consumer)) => {
                t.placed.push(started.elapsed());
                mine.push(consumer);
            }
            Ok(None) => t.unavailable.push(started.elapsed()),
            Err(e) => t.errors.push(e),
        }
        if stream.release_now()
            && let Some(consumer) = mine.pop()
        {
            match p.release(consumer).await {
                Ok(()) => t.released += 1,
                Err(e) => t.errors.push(e),
            }
        }
    }
    t
}

/// The fleet of `bench placement::build_fleet`, in Placement's tables.
async fn build_fleet(p: &Placement, pool: &sqlx::PgPool, nodes: i64) -> Result<(), String> {
    for t in ["CUSTOM_GPU_H100", "CUSTOM_GPU_L40S", "CUSTOM_NVLINK"] {
        let (status, body) = p
            .send(p.request(reqwest::Method::PUT, &format!("/traits/{t}")))
            .await?;
        if status != 201 && status != 204 {
            return Err(format!(
                "PUT /traits/{t}: {status} {}",
                String::from_utf8_lossy(&body)
            ));
        }
    }
    let statements = [
        // Node i's provider has the uuid bench placement gives node i.
        "INSERT INTO resource_providers (uuid, name, generation, created_at)
         SELECT lpad(to_hex(i), 8, '0') || '-0000-4000-8000-' || lpad(to_hex(i), 12, '0'),
                'bench-' || i, 1, now()
         FROM generate_series(1, $1::bigint) AS i",
        "UPDATE resource_providers SET root_provider_id = id WHERE root_provider_id IS NULL",
        "INSERT INTO inventories (resource_provider_id, resource_class_id, total, reserved, min_unit,
                                  max_unit, step_size, allocation_ratio, created_at)
         SELECT rp.id, rc.id, inv.total, 0, 1, inv.total, 1, 1.0, now()
         FROM resource_providers rp
         CROSS JOIN (VALUES ('PGPU', 8), ('VCPU', $2::int), ('MEMORY_MB', $3::int), ('DISK_GB', $4::int))
                    AS inv (class, total)
         JOIN resource_classes rc ON rc.name = inv.class
         WHERE rp.name LIKE 'bench-%'",
        "INSERT INTO resource_provider_traits (trait_id, resource_provider_id, created_at)
         SELECT t.id, rp.id, now()
         FROM resource_providers rp
         CROSS JOIN LATERAL (SELECT substr(rp.name, 7)::bigint AS i) n
         JOIN traits t ON t.name = ANY(
             CASE WHEN n.i % 10 < 7 THEN ARRAY['CUSTOM_GPU_H100', 'CUSTOM_NVLINK'] ELSE ARRAY['CUSTOM_GPU_L40S'] END
             || CASE WHEN n.i % 33 = 0 THEN ARRAY['COMPUTE_STATUS_DISABLED'] ELSE ARRAY[]::text[] END)
         WHERE rp.name LIKE 'bench-%'",
        // A quarter of the nodes (names ending in 0, 4 or 8) have 2 slots' worth used.
        "INSERT INTO projects (external_id, created_at) VALUES ('bench-fill', now())",
        "INSERT INTO users (external_id, created_at) VALUES ('bench-fill', now())",
        "INSERT INTO consumers (uuid, project_id, user_id, generation, created_at)
         SELECT 'f' || substr(rp.uuid, 2), (SELECT id FROM projects WHERE external_id = 'bench-fill'),
                (SELECT id FROM users WHERE external_id = 'bench-fill'), 1, now()
         FROM resource_providers rp WHERE rp.name ~ '^bench-[0-9]*[048]$'",
        "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used, created_at)
         SELECT rp.id, 'f' || substr(rp.uuid, 2), rc.id, u.used, now()
         FROM resource_providers rp
         CROSS JOIN (VALUES ('PGPU', 2), ('VCPU', $2::int / 4), ('MEMORY_MB', $3::int / 4), ('DISK_GB', $4::int / 4))
                    AS u (class, used)
         JOIN resource_classes rc ON rc.name = u.class
         WHERE rp.name ~ '^bench-[0-9]*[048]$'",
        "ANALYZE",
    ];
    let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
    for sql in statements {
        let q = sqlx::query(sql);
        let q = match sql.matches('$').count() {
            0 => q,
            1 => q.bind(nodes),
            _ => q
                .bind(nodes)
                .bind(NODE_VCPUS as i32)
                .bind(NODE_MEMORY_MB as i32)
                .bind(NODE_DISK_GB as i32),
        };
        q.execute(&mut *tx)
            .await
            .map_err(|e| format!("{e}: {sql}"))?;
    }
    tx.commit().await.map_err(|e| e.to_string())
}

/// The "what is free" question as Placement answers it: the providers that can take one of
/// the SKU, `rounds` times per SKU of the mix, sorted.
async fn what_is_free_latency(p: &Placement, rounds: usize) -> Result<Vec<Duration>, String> {
    let mut lat = Vec::new();
    for _ in 0..rounds {
        for m in MIX {
            let t = Instant::now();
            p.get(&format!("/resource_providers?{}", request_of(m.0)))
                .await?;
            lat.push(t.elapsed());
        }
    }
    lat.sort();
    Ok(lat)
}

/// Usage above what a provider has, per provider and resource class: must be none.
async fn overcommitted(pool: &sqlx::PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT resource_provider_id, resource_class_id, sum(used) AS used
                               FROM allocations GROUP BY 1, 2) u
         JOIN inventories i USING (resource_provider_id, resource_class_id)
         WHERE u.used > (i.total - i.reserved) * i.allocation_ratio",
    )
    .fetch_one(pool)
    .await
}

/// The peer's server processes and the database, in CPU seconds so far.
fn peer_cpu_seconds(pids: &[u32]) -> f64 {
    pids.iter().map(|p| tree_cpu_seconds(*p)).sum::<f64>()
        + postmaster_pid().map_or(0.0, tree_cpu_seconds)
}

#[tokio::main(flavor = "multi_thread")]
pub async fn main() {
    let clients: usize = flag("--clients", 32);
    let seconds: u64 = flag("--seconds", 10);
    let nodes: i64 = flag("--nodes", 10_000);
    let limit: u32 = flag("--limit", 1000);
    let base = std::env::var("PLACEMENT_URL").expect("PLACEMENT_URL names a Placement API");
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL names Placement's database");
    let pids: Vec<u32> = std::env::var("PEER_PIDS")
        .unwrap_or_default()
        .split(',')
        .filter_map(|p| p.trim().parse().ok())
        .collect();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .expect("connects to Placement's database");
    let p = Placement {
        http: reqwest::Client::builder()
            .pool_max_idle_per_host(clients)
            .build()
            .expect("an HTTP client"),
        base: base.trim_end_matches('/').to_string(),
    };

    let t = Instant::now();
    build_fleet(&p, &pool, nodes)
        .await
        .expect("builds the fleet in Placement");
    println!(
        "Placement fleet: {nodes} providers (8 GPUs each, 2 used on a quarter, every 33rd disabled) built in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let cpu_before = peer_cpu_seconds(&pids);
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|i| tokio::spawn(client(p.clone(), i, limit, until)))
        .collect();
    let mut all = Tally::default();
    for task in tasks {
        let t = task.await.expect("a client panicked");
        all.placed.extend(t.placed);
        all.unavailable.extend(t.unavailable);
        all.conflicts += t.conflicts;
        all.released += t.released;
        all.errors.extend(t.errors);
    }
    let took = started.elapsed();
    let cpu = peer_cpu_seconds(&pids) - cpu_before;
    all.placed.sort();
    let per_s = all.placed.len() as f64 / took.as_secs_f64();
    println!(
        "Placement, empty fleet: {} committed in {:.1} s ({per_s:.2}/s), {} unavailable, {} conflicts retried, {} released; p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        all.placed.len(),
        took.as_secs_f64(),
        all.unavailable.len(),
        all.conflicts,
        all.released,
        pct(&all.placed, 0.5),
        pct(&all.placed, 0.99),
        all.placed.last().map(|d| ms(*d)).unwrap_or(f64::NAN),
    );
    let free = what_is_free_latency(&p, 3)
        .await
        .expect("lists the providers with room");
    println!(
        "Placement's providers with room (GET /resource_providers?resources=…): {} calls, p50 {:.1} ms, p99 {:.1} ms",
        free.len(),
        pct(&free, 0.5),
        pct(&free, 0.99)
    );
    let over = overcommitted(&pool).await.expect("audits usage");
    if let Some(e) = all.errors.first() {
        println!("errors ({}): first: {e}", all.errors.len());
    }
    println!(
        "RESULT peer-placement placements_per_s={per_s:.2} p99_ms={:.1} what_free_p99_ms={:.1} cpu_ms_per_placement={:.2} conflicts={} overcommitted={over} errors={} clients={clients} nodes={nodes} limit={limit}",
        pct(&all.placed, 0.99),
        pct(&free, 0.99),
        cpu * 1000.0 / all.placed.len().max(1) as f64,
        all.conflicts,
        all.errors.len(),
    );
    if over != 0 || !all.errors.is_empty() || all.placed.is_empty() {
        std::process::exit(1);
    }
}
