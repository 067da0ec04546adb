//! Rating: running time → charges → balanced ledger entries.
//!
//! Time is rated by the UTC hour. An hour of an interval is rated once it is over for that
//! interval (the hour has passed, or the allocation stopped running inside it), and only up
//! to a horizon a little behind the clock, so a lifecycle transaction that commits late can't
//! end an interval inside time already rated. A charge covers the consecutive hours of one
//! allocation that are ready inside one UTC day (migration 0034): in steady state that is one
//! hour, and when rating catches up it is up to a day in one row.
//!
//! Each batch is one statement: candidate (allocation, span) rows in allocation order, one
//! `usage` entry per tenant and currency (receivable debited; revenue credited, and each
//! publisher's payable with its share of the marketplace fees), the charges that make it up
//! (SKU usage, and a fee charge beside it when the listing has a fee, telescoped the same
//! way), the per-project daily and monthly totals (fees included in the monthly), and each
//! interval's progress. Batches are serialised by an advisory lock; the primary key on
//! (allocation, first hour) and `usage_charges_disjoint` make a second rating of an hour
//! impossible.
//!
//! Storage is rated the same way in its own statement (`rate_storage_batch.sql`): a volume's
//! storage interval at one size and price becomes storage charges, posted as usage.

use serde::Serialize;

use cp_base::error::Result;

/// How far behind the clock rating stays (see the module docs).
pub const HORIZON: time::Duration = time::Duration::minutes(2);

/// Advisory lock key for rating batches ("rating" in ASCII).
const RATING_LOCK: i64 = 0x72_61_74_69_6e_67;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Rated {
    /// Charges written: one per allocation and UTC day at most, each a span of whole hours.
    pub charges: i64,
    /// Allocation-hours those charges cover (an hour the allocation ran in for any part).
    pub hours: i64,
    /// Journal entries posted (one per tenant and currency per batch).
    pub entries: i64,
    /// Intervals whose rating moved forward (zero: nothing was left to rate).
    pub intervals: i64,
    /// Storage charges written (one per volume interval and UTC day at most).
    pub storage_charges: i64,
    /// Volume-hours those storage charges cover.
    pub volume_hours: i64,
    /// Allocations left unrated because their price or fee is out of bounds (rows written
    /// before the schema bounded them): reported by [`rate_until`], to be corrected by hand.
    pub held: Vec<cp_base::AllocationId>,
}

/// A transaction for one batch: under the rating lock (batches are serialised), without JIT.
async fn rating_tx(pool: &cp_base::pool::Db) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    let mut tx = pool.begin().await?;
    sqlx::query!("SELECT pg_advisory_xact_lock($1)", RATING_LOCK)
        .execute(&mut *tx)
        .await?;
    // A batch's cost estimate is over the JIT threshold, and compiling it took ~60 ms of
    // every ~280 ms batch for nothing: the plan runs once.
    sqlx::query!("SET LOCAL jit = off")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// Rates at most `batch` (allocation, span) charges' worth of time that is over by `until`.
#[tracing::instrument(skip(pool), fields(rating.until = %until, rating.batch = batch))]
pub async fn rate_batch(
    pool: &cp_base::pool::Db,
    until: time::OffsetDateTime,
    batch: i64,
) -> Result<Rated> {
    let mut tx = rating_tx(pool).await?;
    let row = sqlx::query_file!(
        "queries/rate_batch.sql",
        until,
        batch,
        portal_types::Money::MAX_PER_HOUR_MINOR
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Rated {
        charges: row.charges,
        hours: row.hours,
        entries: row.entries,
        intervals: row.progress,
        ..Rated::default()
    })
}

/// Rates at most `batch` (volume interval, span) charges' worth of storage over by `until`.
#[tracing::instrument(skip(pool), fields(rating.until = %until, rating.batch = batch))]
pub async fn rate_storage_batch(
    pool: &cp_base::pool::Db,
    until: time::OffsetDateTime,
    batch: i64,
) -> Result<Rated> {
    let mut tx = rating_tx(pool).await?;
    let row = sqlx::query_file!("queries/rate_storage_batch.sql", until, batch)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Rated {
        storage_charges: row.charges,
        volume_hours: row.hours,
        entries: row.entries,
        intervals: row.progress,
        ..Rated::default()
    })
}

/// Rates everything that is over by `until`, usage then storage, batch by batch, until a
/// batch of each finds nothing.
pub async fn rate_until(
    pool: &cp_base::pool::Db,
    until: time::OffsetDateTime,
    batch: i64,
) -> Result<Rated> {
    let mut total = Rated::default();
    loop {
        let r = rate_batch(pool, until, batch).await?;
        total.add(&r);
        if r.intervals == 0 {
            break;
        }
    }
    loop {
        let r = rate_storage_batch(pool, until, batch).await?;
        total.add(&r);
        if r.intervals == 0 {
            break;
        }
    }
    total.held = held(pool).await?;
    Ok(total)
}

impl Rated {
    fn add(&mut self, r: &Rated) {
        self.charges += r.charges;
        self.hours += r.hours;
        self.storage_charges += r.storage_charges;
        self.volume_hours += r.volume_hours;
        self.entries += r.entries;
        self.intervals += r.intervals;
    }
}

/// Allocations whose usage rating leaves alone because their price or fee is out of bounds;
/// logged as an error each time, since their tenants are not being billed.
async fn held(pool: &cp_base::pool::Db) -> Result<Vec<cp_base::AllocationId>> {
    let held = sqlx::query_scalar!(
        r#"SELECT allocation_id AS "id: cp_base::AllocationId" FROM usage_intervals
           WHERE NOT fully_rated AND (price_per_hour_minor > $1 OR fee_per_hour_minor > $1)
           ORDER BY allocation_id LIMIT 100"#,
        portal_types::Money::MAX_PER_HOUR_MINOR
    )
    .fetch_all(pool)
    .await?;
    if !held.is_empty() {
        tracing::error!(
            billing.held = held.len(),
            allocations = ?held,
            "usage left unrated: price or fee above {} minor units per hour (written before the schema bounded it); correct the rows",
            portal_types::Money::MAX_PER_HOUR_MINOR
        );
    }
    Ok(held)
}

/// Rates what is over by the horizon behind the clock: what the worker calls each round.
pub async fn rate_now(pool: &cp_base::pool::Db, batch: i64) -> Result<Rated> {
    rate_until(pool, time::OffsetDateTime::now_utc() - HORIZON, batch).await
}
