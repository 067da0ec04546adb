//! Storage billing against a real database: what a volume is metered at (its region's price
//! when it was made, its size from each grow), rating by the GiB-second, the month's totals
//! that budgets read, and the invoice's storage lines.

use control_plane::prelude::*;

use control_plane::billing::invoices::close_months;
use control_plane::billing::rating::{rate_storage_batch, rate_until};
use control_plane::demo::{ACME, ACME_INFERENCE, ACME_RESEARCH, GLOBEX, GLOBEX_DEFAULT};
use control_plane::volumes::jobs::{JobKind, Outcome};
use control_plane::{ControlPlane, Error, ProjectId, TenantId, VolumeId};
use rand::{Rng, SeedableRng};
use time::macros::datetime;

use control_plane::tenancy::ProjectViewers;

use crate::allocations::{BOB, member, setup};
use crate::support::in_project;
use crate::volumes::{available, request, work};

/// GiB-month in microseconds: 730 hours.
const MONTH_US: i128 = 730 * 3_600_000_000;

/// What `gib` GiB at `per_month` micro-units cost for `us` microseconds, floored: the rule
/// rating must follow, written independently of its SQL.
fn cost(per_month: i64, gib: i32, us: i64) -> i64 {
    (per_month as i128 * gib as i128 * us as i128 / MONTH_US) as i64
}

/// The storage intervals of a volume: (size, price, open).
async fn intervals(cp: &ControlPlane, id: VolumeId) -> Vec<(i32, i64, bool)> {
    sqlx::query!(
        "SELECT size_gib, price_per_gib_month_micro, ended_at IS NULL AS open
         FROM storage_intervals WHERE volume_id = $1 ORDER BY id",
        id.0
    )
    .fetch_all(cp.pool())
    .await
    .unwrap()
    .into_iter()
    .map(|r| {
        (
            r.size_gib,
            r.price_per_gib_month_micro,
            r.open.unwrap_or(false),
        )
    })
    .collect()
}

/// A volume of `gib` GiB from `start` to `end` (or still there), metered as the trigger
/// meters one: written straight into the meter, since its times are the point.
#[allow(clippy::too_many_arguments)]
async fn metered(
    cp: &ControlPlane,
    tenant: TenantId,
    project: ProjectId,
    gib: i32,
    per_month: i64,
    start: time::OffsetDateTime,
    end: Option<time::OffsetDateTime>,
) -> i64 {
    let volume = VolumeId::new_random();
    sqlx::query!(
        "INSERT INTO volumes (id, tenant_id, project_id, region, name, size_gib, state,
                              idempotency_key, request_fingerprint, created_by,
                              price_per_gib_month_micro, currency)
         VALUES ($1, $2, $3, 'eu-west-1', $7, $4, 'creating', $8, 'f', $5, $6, 'USD')",
        volume.0,
        tenant.0,
        project.0,
        gib,
        BOB.0,
        per_month,
        format!("v-{}", &volume.0.simple().to_string()[..12]),
        format!("meter-{}", volume.0)
    )
    .execute(cp.pool())
    .await
    .unwrap();
    sqlx::query_scalar!(
        "INSERT INTO storage_intervals (volume_id, tenant_id, project_id, region, size_gib,
                                        price_per_gib_month_micro, currency, started_at, ended_at)
         VALUES ($1, $2, $3, 'eu-west-1', $4, $5, 'USD', $6, $7) RETURNING id",
        volume.0,
        tenant.0,
        project.0,
        gib,
        per_month,
        start,
        end
    )
    .fetch_one(cp.pool())
    .await
    .unwrap()
}

/// A volume is metered from when it is available, at the price its region had then, at each
/// size it is grown to, until it is deleted; a region without a price sells no volumes.
#[tokio::test]
async fn a_volume_is_metered_at_its_price_and_each_size_until_it_is_deleted() {
    let (_db, cp, ops) = setup().await;
    let bob = member(&cp, BOB, ACME_RESEARCH).await;

    // The demo prices eu-west-1 at 0.10 USD per GiB-month; the operator raises it.
    let prices = cp.storage_prices().await.unwrap();
    assert!(
        prices
            .iter()
            .any(|p| p.region == "eu-west-1" && p.per_gib_month() == "0.10 USD")
    );
    let made = cp
        .create_volume(&bob, &request("before", 10), None)
        .await
        .unwrap();
    assert!(
        intervals(&cp, made.id).await.is_empty(),
        "not metered while being made"
    );
    work(&cp, made.id, JobKind::Create, Outcome::Done).await;
    assert_eq!(intervals(&cp, made.id).await, [(10, 100_000, true)]);

    let set = cp
        .set_storage_price(&ops, "eu-west-1", "0.125 usd", None)
        .await
        .unwrap();
    assert_eq!(set.per_gib_month(), "0.125 USD");
    for (region, price, field) in [
        ("eu-west-1", "0.10", "price"),
        ("eu-west-1", "0 USD", "price"),
        ("eu-west-1", "2000 USD", "price"),
        ("EU west", "0.10 USD", "region"),
    ] {
        match cp.set_storage_price(&ops, region, price, None).await {
            Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field, "{region} {price}"),
            other => panic!("{region} {price}: expected invalid {field}, got {other:?}"),
        }
    }

    // The volume made before keeps its price when it grows; a new one takes the new price.
    cp.grow_volume(&bob, made.id, 30, None).await.unwrap();
    assert_eq!(
        intervals(&cp, made.id).await,
        [(10, 100_000, false), (30, 100_000, true)]
    );
    work(&cp, made.id, JobKind::Grow, Outcome::Done).await;
    let newer = available(&cp, &bob, "after").await;
    assert_eq!(intervals(&cp, newer).await, [(10, 125_000, true)]);
    let bob_views = {
        let p = cp.principal(BOB).await.unwrap().unwrap();
        in_project::<ProjectViewers>(&cp, &p, ACME_RESEARCH).await
    };
    let shown = cp.volume(&bob_views, newer).await.unwrap();
    assert_eq!(shown.monthly_cost.unwrap().to_string(), "1.25 USD");

    // Deleting closes the meter; nothing opens again.
    cp.delete_volume(&bob, made.id, None).await.unwrap();
    assert_eq!(
        intervals(&cp, made.id).await,
        [(10, 100_000, false), (30, 100_000, false)]
    );

    // The price is the volume's for life: the database refuses to change it.
    let changed = sqlx::query!(
        "UPDATE volumes SET price_per_gib_month_micro = 1 WHERE id = $1",
        newer.0
    )
    .execute(cp.pool())
    .await;
    assert!(changed.is_err(), "a volume's price never changes");

    // A region with no storage price sells no volumes, and says so on the region.
    sqlx::query!("DELETE FROM storage_prices WHERE region = 'us-east-1'")
        .execute(cp.pool())
        .await
        .unwrap();
    let mut far = request("far", 10);
    far.region = "us-east-1".into();
    match cp.create_volume(&bob, &far, None).await {
        Err(Error::Invalid { field, reason }) => {
            assert_eq!(field, "region");
            assert!(reason.contains("no price"), "{reason}");
        }
        other => panic!("expected the region refused, got {other:?}"),
    }
}

/// Random volume histories rated in random batches at random moments: every storage charge
/// is its interval's exact cost floored once, rated time is provisioned time, the receivable
/// grows by what was charged, the month totals budgets read hold storage, and rating again
/// changes nothing.
#[tokio::test]
async fn storage_is_rated_by_the_gib_second_exactly_once() {
    let (_db, cp, _ops) = setup().await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let base = datetime!(2026-09-28 00:00 UTC);
    let projects = [
        (ACME, ACME_RESEARCH),
        (ACME, ACME_INFERENCE),
        (GLOBEX, GLOBEX_DEFAULT),
    ];
    let mut meters = Vec::new();
    for i in 0..40 {
        let (tenant, project) = projects[rng.gen_range(0..projects.len())];
        let start = base + time::Duration::microseconds(rng.gen_range(0..8 * 86_400_000_000i64));
        let len = match i % 3 {
            0 => rng.gen_range(1..2_000_000i64),
            1 => rng.gen_range(1..7_200_000_000i64),
            _ => rng.gen_range(1..6 * 86_400_000_000i64),
        };
        let gib = rng.gen_range(1..=16_384);
        let per_month = rng.gen_range(1..=2_000_000);
        let id = metered(
            &cp,
            tenant,
            project,
            gib,
            per_month,
            start,
            Some(start + time::Duration::microseconds(len)),
        )
        .await;
        meters.push((id, gib, per_month, len));
    }
    let mut until = base;
    while until < base + time::Duration::days(15) {
        until += time::Duration::minutes(rng.gen_range(10..3000));
        rate_until(cp.pool(), until, rng.gen_range(1..300))
            .await
            .unwrap();
    }
    for (id, gib, per_month, len) in &meters {
        let r = sqlx::query!(
            r#"SELECT coalesce(sum(rated_us), 0)::bigint AS "us!",
                      coalesce(sum(amount_micro), 0)::bigint AS "micro!",
                      (SELECT fully_rated FROM storage_intervals WHERE id = $1) AS "done!"
               FROM storage_charges WHERE interval_id = $1"#,
            id
        )
        .fetch_one(cp.pool())
        .await
        .unwrap();
        assert_eq!(r.us, *len, "rated time of interval {id}");
        assert_eq!(
            r.micro,
            cost(*per_month, *gib, *len),
            "charges of interval {id}"
        );
        assert!(r.done, "interval {id} fully rated");
    }
    let r = sqlx::query!(
        r#"SELECT (SELECT sum(amount_micro) FROM storage_charges)::bigint AS "charged!",
                  (SELECT sum(p.amount_micro) FROM postings p JOIN ledger_accounts a ON a.id = p.account_id
                   WHERE a.kind = 'tenant_receivable')::bigint AS "receivable!",
                  (SELECT sum(amount_micro) FROM usage_month_totals
                   WHERE month >= '2026-09-01')::bigint AS "totals!",
                  (SELECT count(*) FROM journal_entries e LEFT JOIN postings p ON p.entry_id = e.id
                   WHERE e.memo LIKE 'storage:%' GROUP BY e.id HAVING sum(p.amount_micro) <> 0
                   LIMIT 1) AS "unbalanced?""#
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(
        r.charged, r.receivable,
        "the receivable is what was charged"
    );
    assert_eq!(r.charged, r.totals, "the month totals hold storage");
    assert_eq!(r.unbalanced, None);
    let again = rate_storage_batch(cp.pool(), until, 1000).await.unwrap();
    assert_eq!((again.storage_charges, again.entries), (0, 0));
}

/// An open volume's unrated storage counts for the month as it is stored (budgets see it
/// before rating), then as rated, to the micro-unit; the month's invoice has a storage line
/// per project and region at the price, beside compute.
#[tokio::test]
async fn storage_counts_for_the_month_and_is_invoiced_beside_compute() {
    let (_db, cp, _ops) = setup().await;
    let month = datetime!(2026-10-01 00:00 UTC);
    // 500 GiB at 0.10 for all of October (744 hours), and 3 GiB at 0.085 for ten hours.
    metered(
        &cp,
        GLOBEX,
        GLOBEX_DEFAULT,
        500,
        100_000,
        month,
        Some(datetime!(2026-11-01 00:00 UTC)),
    )
    .await;
    metered(
        &cp,
        GLOBEX,
        GLOBEX_DEFAULT,
        3,
        85_000,
        month + time::Duration::hours(5),
        Some(month + time::Duration::hours(15)),
    )
    .await;
    let big = cost(100_000, 500, 744 * 3_600_000_000);
    let small = cost(85_000, 3, 10 * 3_600_000_000);
    let spend = |upto: time::OffsetDateTime| {
        let cp = cp.clone();
        async move {
            sqlx::query_scalar!(
                r#"SELECT coalesce(sum(micro), 0)::bigint AS "m!" FROM month_spend($1, $2, $3)"#,
                GLOBEX.0,
                month,
                upto
            )
            .fetch_one(cp.pool())
            .await
            .unwrap()
        }
    };
    // Unrated, the month counts what is stored up to now.
    let mid = datetime!(2026-10-11 00:00 UTC);
    assert_eq!(
        spend(mid).await,
        cost(100_000, 500, 240 * 3_600_000_000) + small
    );
    // Rated, the same money.
    rate_until(cp.pool(), datetime!(2026-11-02 00:00 UTC), 500)
        .await
        .unwrap();
    assert_eq!(spend(datetime!(2026-11-01 00:00 UTC)).await, big + small);

    let closed = close_months(cp.pool(), datetime!(2026-11-03 00:00 UTC))
        .await
        .unwrap();
    let invoice = closed
        .iter()
        .find(|c| c.tenant == GLOBEX)
        .expect("Globex's October is invoiced");
    let lines = sqlx::query!(
        "SELECT kind, region, gib_us, unit_price_micro, rated_micro, amount_minor, description,
                storage_of
         FROM invoice_lines WHERE invoice_id = $1 ORDER BY line_no",
        invoice.invoice.0
    )
    .fetch_all(cp.pool())
    .await
    .unwrap();
    let storage: Vec<_> = lines.iter().filter(|l| l.kind == "storage").collect();
    assert_eq!(storage.len(), 2, "a line per price: {lines:?}");
    assert_eq!(storage[0].region.as_deref(), Some("eu-west-1"));
    // Each says what it stores (the invoice's SKU column reads it).
    assert!(
        storage
            .iter()
            .all(|l| l.storage_of.as_deref() == Some("volumes")),
        "{storage:?}"
    );
    assert_eq!(
        (storage[0].unit_price_micro, storage[0].rated_micro),
        (85_000, small)
    );
    assert_eq!(
        (
            storage[1].unit_price_micro,
            storage[1].rated_micro,
            storage[1].amount_minor
        ),
        (100_000, big, 5_096)
    );
    assert_eq!(storage[1].gib_us, 500 * 744 * 3_600_000_000);
    assert!(
        storage[1]
            .description
            .contains("block storage in eu-west-1 · 372000.000000 GiB-hours at 0.10 USD/GiB-month"),
        "{}",
        storage[1].description
    );
    assert_eq!(
        invoice.total_minor,
        lines.iter().map(|l| l.amount_minor).sum::<i64>(),
        "the total is the lines"
    );
}
