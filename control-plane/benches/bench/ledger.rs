//! `cargo xtask bench ledger`: rating throughput and month-close time, in the real database.
//!
//! Makes N tenants (default 1,000), each with R finished runs (default 3) of about H hours
//! (default 100) in October 2026 on the demo SKUs, then:
//! 1. rates everything, in batches of up to B (default 5,000) charges: prints usage rows
//!    ((allocation, hour) periods) rated per second (the target is ≥ 100,000/s) and charges
//!    written per second. Since migration 0034 a charge covers an allocation's hours inside
//!    one UTC day, so catching up on a month writes up to 24 times fewer rows than hours.
//!    `--step 1` moves the clock an hour at a time instead, as the worker does in steady
//!    state, where every charge is one hour (`--step H`: H hours at a time);
//! 2. closes October: one invoice per tenant with lines, credit, rounding entries and the
//!    Stripe outbox row: prints the total time and per invoice;
//! 3. checks every journal entry balances and the invoices agree with the charges.
//!
//! Flags: `--tenants N`, `--runs N`, `--hours N`, `--batch N`, `--step H`. Needs `DATABASE_URL` (an
//! empty database; `cargo xtask bench ledger` starts a durable cluster for it).

use control_plane::prelude::*;
use std::time::Instant;

use control_plane::billing::history::{ImportedRun, import_run};
use control_plane::billing::invoices::close_months;
use control_plane::billing::rating::rate_batch;
use control_plane::demo::{ACME, ACME_RESEARCH};
use control_plane::{ControlPlane, Naming, UserId};
use time::macros::datetime;

use crate::common::flag;

const BOB: UserId = UserId(uuid::uuid!("0a0e0000-0000-4000-8002-000000000002"));

#[tokio::main]
pub async fn main() {
    let tenants: i64 = flag("--tenants", 1000);
    let runs: i64 = flag("--runs", 3);
    let hours: i64 = flag("--hours", 100);
    let batch: i64 = flag("--batch", 5000);
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let pool = control_plane::pool::sized(4)
        .connect(&url)
        .await
        .expect("connect");
    let cp = ControlPlane::new(pool.clone(), Naming::default());
    cp.migrate().await.expect("migrate");
    cp.seed_demo().await.expect("seed");

    // One imported run makes the `imported-usage` node; the rest are inserted in bulk, the way
    // the import does it row by row.
    let mut conn = pool.acquire().await.unwrap();
    import_run(
        &mut conn,
        &ImportedRun {
            tenant: ACME,
            project: ACME_RESEARCH,
            sku: "h100.1x",
            listing: "ubuntu-24.04-cuda",
            name: "seed",
            started_at: datetime!(2026-10-01 00:00 UTC),
            ended_at: datetime!(2026-10-01 00:30 UTC),
            price_per_hour_minor: None,
            by: BOB,
            key: "bench-seed",
        },
    )
    .await
    .unwrap();
    drop(conn);
    let t = Instant::now();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO tenants (id, slug, display_name)
         SELECT gen_random_uuid(), 'bench-' || i, 'Bench ' || i FROM generate_series(1, $1) i",
    )
    .bind(tenants)
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO projects (id, tenant_id, slug, display_name)
         SELECT gen_random_uuid(), id, 'main', 'Main' FROM tenants WHERE slug LIKE 'bench-%'",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    // Runs: random starts in October's first three weeks, lengths around H hours (to the
    // microsecond), SKUs from the demo catalog.
    sqlx::query(
        "WITH runs AS (
             SELECT p.tenant_id, p.id AS project_id, r,
                    (ARRAY['h100.1x','h100.2x','h100.8x','l40s.1x'])[1 + (random() * 3)::int] AS sku,
                    timestamptz '2026-10-01 00:00Z' + random() * interval '21 days' AS started,
                    ($2::float8 * (0.5 + random())) * interval '1 hour' AS len
             FROM projects p JOIN tenants t ON t.id = p.tenant_id AND t.slug LIKE 'bench-%'
             CROSS JOIN generate_series(1, $1) r
         ), ins AS (
             INSERT INTO allocations (id, tenant_id, project_id, name, sku_id, shape, gpu_count, region,
                                      node_id, listing_version_id, ssh_public_key, price_per_hour_minor, currency,
                                      idempotency_key, request_fingerprint, requested_by, placement,
                                      state, requested_at)
             SELECT gen_random_uuid(), r.tenant_id, r.project_id, 'run-' || r.r, s.id, s.shape, s.gpu_count,
                    s.regions[1], (SELECT id FROM nodes WHERE ledger_only),
                    (SELECT v.id FROM listing_versions v JOIN listings l ON l.id = v.listing_id
                     WHERE l.slug = 'ubuntu-24.04-cuda' ORDER BY v.created_at LIMIT 1), 'imported', s.price_per_hour_minor,
                    s.currency, 'import-bench-' || r.project_id || '-' || r.r, 'imported', $3, '{}',
                    'placed', r.started
             FROM runs r JOIN skus s ON s.name = r.sku
             RETURNING id, tenant_id, project_id, sku_id, gpu_count, price_per_hour_minor, currency, requested_at
         )
         INSERT INTO usage_intervals (allocation_id, tenant_id, project_id, sku_id, gpu_count,
                                      price_per_hour_minor, currency, started_at, ended_at)
         SELECT i.id, i.tenant_id, i.project_id, i.sku_id, i.gpu_count, i.price_per_hour_minor, i.currency,
                i.requested_at, i.requested_at + r.len
         FROM ins i JOIN runs r ON r.started = i.requested_at AND r.project_id = i.project_id",
    )
    .bind(runs as i32)
    .bind(hours as f64)
    .bind(BOB.0)
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    // Planner statistics, as autovacuum keeps them on a live database.
    sqlx::query("ANALYZE").execute(&pool).await.unwrap();
    let (intervals, periods): (i64, i64) = sqlx::query_as(
        "SELECT count(*), coalesce(sum(ceil(extract(epoch FROM ended_at - date_trunc('hour', started_at, 'UTC')) / 3600)), 0)::bigint
         FROM usage_intervals",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    println!(
        "setup: {tenants} tenants, {intervals} runs, about {periods} (allocation, hour) rows to rate ({:.1} s)",
        t.elapsed().as_secs_f64()
    );

    // 1. Rating.
    let until = datetime!(2026-11-02 00:00 UTC);
    let step: i64 = flag("--step", 0);
    let t = Instant::now();
    let (mut rows, mut charges, mut entries, mut batches) = (0i64, 0i64, 0i64, 0);
    let mut clock = if step > 0 {
        datetime!(2026-10-01 00:00 UTC) + time::Duration::hours(step)
    } else {
        until
    };
    while clock <= until {
        loop {
            let r = rate_batch(cp.pool(), clock, batch).await.expect("rating");
            if r.intervals == 0 {
                break;
            }
            rows += r.hours;
            charges += r.charges;
            entries += r.entries;
            batches += 1;
        }
        if clock == until {
            break;
        }
        clock = (clock + time::Duration::hours(step.max(1))).min(until);
    }
    let secs = t.elapsed().as_secs_f64();
    let rows_per_s = rows as f64 / secs;
    assert_eq!(rows, periods, "every (allocation, hour) rated once");
    println!(
        "rating: {rows} usage rows (allocation-hours) as {charges} charges in {batches} batches of up to {batch} charges ({entries} balanced journal entries) in {secs:.2} s = {rows_per_s:.0} rows/s, {:.0} charges/s (target ≥ 100,000 rows/s)",
        charges as f64 / secs
    );

    // 2. Month close.
    let t = Instant::now();
    let closed = close_months(cp.pool(), until).await.expect("close");
    let secs = t.elapsed().as_secs_f64();
    println!(
        "invoices: {} built and finalised for October in {secs:.2} s ({:.1} ms per invoice)",
        closed.len(),
        secs * 1000.0 / closed.len().max(1) as f64
    );

    // 3. Checks.
    let (unbalanced,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM (SELECT e.id FROM journal_entries e JOIN postings p ON p.entry_id = e.id
                               GROUP BY e.id HAVING sum(p.amount_micro) <> 0) x",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let (invoiced, rated): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT sum(subtotal_minor) FROM invoices)::bigint,
                (SELECT sum(floor((sub.m + 5000) / 10000)) FROM (
                    SELECT sum(amount_micro) AS m FROM usage_charges
                    WHERE period_start < '2026-11-01T00:00:00Z'
                    GROUP BY tenant_id, project_id, sku_id, gpu_count, price_per_hour_minor) sub)::bigint",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    println!(
        "checks: unbalanced_entries={unbalanced} invoiced_cents={invoiced} rated_cents_rounded_per_line={rated}"
    );
    println!(
        "RESULT ledger rows_per_s={rows_per_s:.0} rows={rows} charges={charges} invoices={} unbalanced_entries={unbalanced} invoiced_minus_rated_minor={}",
        closed.len(),
        invoiced - rated
    );
    assert_eq!(unbalanced, 0);
    assert_eq!(invoiced, rated);
}
