//! The ledger, rating, invoices and budgets against a real database.

use control_plane::prelude::*;

use crate::support::{in_tenant, principal};

use control_plane::billing::history::{ImportedRun, import_run};
use control_plane::billing::invoices::{PlatformFinance, close_months};
use control_plane::billing::rating::{rate_batch, rate_until};
use control_plane::billing::reports::TenantFinance;
use control_plane::billing::{Micros, cost_micros};
use control_plane::demo::{ACME, ACME_INFERENCE, ACME_RESEARCH, GLOBEX, GLOBEX_DEFAULT};
use control_plane::{ControlPlane, ProjectId, TenantId, UserId};
use rand::{Rng, SeedableRng};
use time::macros::datetime;
use uuid::uuid;

const BOB: UserId = UserId(uuid!("0a0e0000-0000-4000-8002-000000000002"));

/// A copy of the demo database (kept alive by the returned handle) and a control plane on it.
async fn setup() -> (test_db::TestDb, ControlPlane) {
    let db = crate::support::demo_db().await;
    let cp = db.control_plane();
    (db, cp)
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    cp: &ControlPlane,
    tenant: TenantId,
    project: ProjectId,
    sku: &str,
    key: &str,
    start: time::OffsetDateTime,
    end: time::OffsetDateTime,
) -> control_plane::AllocationId {
    run_listing(
        cp,
        tenant,
        project,
        sku,
        "ubuntu-24.04-cuda",
        key,
        start,
        end,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn run_listing(
    cp: &ControlPlane,
    tenant: TenantId,
    project: ProjectId,
    sku: &str,
    listing: &str,
    key: &str,
    start: time::OffsetDateTime,
    end: time::OffsetDateTime,
) -> control_plane::AllocationId {
    let mut conn = cp.pool().acquire().await.unwrap();
    import_run(
        &mut conn,
        &ImportedRun {
            tenant,
            project,
            sku,
            listing,
            name: key,
            started_at: start,
            ended_at: end,
            price_per_hour_minor: None,
            by: BOB,
            key,
        },
    )
    .await
    .unwrap()
}

async fn finance(cp: &ControlPlane) -> control_plane::auth::Platform<PlatformFinance> {
    let user = sqlx::query_scalar!(
        "INSERT INTO users (id, email, display_name, platform_role)
         VALUES (gen_random_uuid(), 'finance@platform.example', 'Platform finance', 'finance') RETURNING id"
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    cp.principal(UserId(user))
        .await
        .unwrap()
        .unwrap()
        .platform::<PlatformFinance>()
        .unwrap()
}

async fn unbalanced_entries(cp: &ControlPlane) -> i64 {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM (
             SELECT e.id FROM journal_entries e LEFT JOIN postings p ON p.entry_id = e.id
             GROUP BY e.id HAVING coalesce(sum(p.amount_micro), 0) <> 0 OR count(p.id) < 2) x"#
    )
    .fetch_one(cp.pool())
    .await
    .unwrap()
}

/// Entries, postings, charges, and the monthly totals' sum.
async fn ledger_rows(cp: &ControlPlane) -> (i64, i64, i64, i64) {
    let r = sqlx::query!(
        r#"SELECT (SELECT count(*) FROM journal_entries) AS "e!", (SELECT count(*) FROM postings) AS "p!",
                  (SELECT count(*) FROM usage_charges) AS "c!",
                  (SELECT coalesce(sum(amount_micro), 0)::bigint FROM usage_month_totals) AS "t!""#
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    (r.e, r.p, r.c, r.t)
}

/// Random allocation histories (microsecond starts and ends, some spanning days and month
/// ends, some shorter than a second), rated in random batch sizes at random moments: every
/// entry balances, rated time equals running time exactly per allocation, each allocation's
/// charges are its exact cost floored once, and rating again changes nothing.
#[tokio::test]
async fn rating_is_exact_balanced_and_idempotent() {
    let (_db, cp) = setup().await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let base = datetime!(2026-09-28 00:00 UTC);
    let skus = ["h100.1x", "h100.2x", "h100.8x", "l40s.1x"];
    let projects = [
        (ACME, ACME_RESEARCH),
        (ACME, ACME_INFERENCE),
        (GLOBEX, GLOBEX_DEFAULT),
    ];
    let mut runs = Vec::new();
    for i in 0..60 {
        let (tenant, project) = projects[rng.gen_range(0..projects.len())];
        let start = base + time::Duration::microseconds(rng.gen_range(0..10 * 86_400_000_000i64));
        let len = match i % 3 {
            0 => rng.gen_range(1..2_000_000i64),     // under two seconds
            1 => rng.gen_range(1..7_200_000_000i64), // up to two hours
            _ => rng.gen_range(1..5 * 86_400_000_000i64), // up to five days
        };
        let sku = skus[rng.gen_range(0..skus.len())];
        let id = run(
            &cp,
            tenant,
            project,
            sku,
            &format!("r{i}"),
            start,
            start + time::Duration::microseconds(len),
        )
        .await;
        runs.push((id, len));
    }
    // Rate in steps: random batch sizes, the clock moving forward in uneven jumps.
    let mut until = base;
    while until < base + time::Duration::days(16) {
        until += time::Duration::minutes(rng.gen_range(10..3000));
        rate_until(cp.pool(), until, rng.gen_range(1..400))
            .await
            .unwrap();
    }
    assert_eq!(unbalanced_entries(&cp).await, 0);
    for (id, len) in &runs {
        let r = sqlx::query!(
            r#"SELECT coalesce(sum(c.rated_us), 0)::bigint AS "us!", coalesce(sum(c.amount_micro), 0)::bigint AS "micro!",
                      (SELECT price_per_hour_minor FROM usage_intervals WHERE allocation_id = $1) AS "price!",
                      (SELECT fully_rated FROM usage_intervals WHERE allocation_id = $1) AS "done!"
               FROM usage_charges c WHERE c.allocation_id = $1"#,
            id.0
        )
        .fetch_one(cp.pool())
        .await
        .unwrap();
        assert_eq!(r.us, *len, "rated time of {id}");
        assert_eq!(
            Micros(r.micro),
            cost_micros(r.price, *len),
            "charges of {id}"
        );
        assert!(r.done, "{id} fully rated");
    }
    // Postings agree with the charges: receivable debited by exactly what was rated.
    let r = sqlx::query!(
        r#"SELECT (SELECT sum(amount_micro) FROM usage_charges)::bigint AS "charged!",
                  (SELECT sum(p.amount_micro) FROM postings p JOIN ledger_accounts a ON a.id = p.account_id
                   WHERE a.kind = 'tenant_receivable')::bigint AS "receivable!""#
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(r.charged, r.receivable);
    // The monthly totals that budgets read agree with the charges, project by project.
    let mismatched: i64 = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM (
             SELECT tenant_id, project_id, (date_trunc('month', period_start, 'UTC') AT TIME ZONE 'UTC')::date AS month,
                    currency, sum(amount_micro)::bigint AS micro
             FROM usage_charges GROUP BY 1, 2, 3, 4) c
           FULL JOIN usage_month_totals t USING (tenant_id, project_id, month, currency)
           WHERE c.micro IS DISTINCT FROM t.amount_micro"#
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(mismatched, 0);
    // So do the daily totals the billing page's chart reads, per project, SKU and UTC day.
    let (days, mismatched) = sqlx::query_as::<_, (i64, i64)>(
        "SELECT (SELECT count(*) FROM usage_day_totals), count(*) FROM (
             SELECT tenant_id, (period_start AT TIME ZONE 'UTC')::date AS day, project_id, sku_id,
                    currency, sum(amount_micro)::bigint AS micro
             FROM usage_charges GROUP BY 1, 2, 3, 4, 5) c
           FULL JOIN usage_day_totals t USING (tenant_id, day, project_id, sku_id, currency)
           WHERE c.micro IS DISTINCT FROM t.amount_micro",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert!(days > 10, "the histories span days: {days} day totals");
    assert_eq!(mismatched, 0);

    let before = ledger_rows(&cp).await;
    let again = rate_until(cp.pool(), until, 1000).await.unwrap();
    assert_eq!((again.charges, again.entries), (0, 0));
    assert_eq!(rate_batch(cp.pool(), until, 5).await.unwrap().charges, 0);
    assert_eq!(
        ledger_rows(&cp).await,
        before,
        "a second rating changes nothing"
    );
}

/// Rating as it happens (the clock an hour at a time: one-hour charges) and rating after the
/// fact (one charge per allocation and UTC day) give the same money to the micro-unit: the
/// same totals, the same publisher share, and the same hourly lines in the usage export.
#[tokio::test]
async fn the_charges_grain_never_changes_the_money_or_the_export() {
    let (_db, cp) = setup().await;
    // vLLM (0.40 USD/h, 70 % to its publisher) on h100.1x from a start mid-hour, across two
    // midnights, to an end mid-hour.
    let start = datetime!(2026-10-01 07:20:00.5 UTC);
    let end = datetime!(2026-10-03 05:10:00.25 UTC);
    let (vllm, h100) = ("vllm", "h100.1x");
    let hourly = run_listing(
        &cp,
        ACME,
        ACME_RESEARCH,
        h100,
        vllm,
        "as-it-ran",
        start,
        end,
    )
    .await;
    let mut clock = datetime!(2026-10-01 08:00 UTC);
    while clock <= end + time::Duration::HOUR {
        rate_until(cp.pool(), clock, 1000).await.unwrap();
        clock += time::Duration::HOUR;
    }
    let later = run_listing(&cp, ACME, ACME_RESEARCH, h100, vllm, "after", start, end).await;
    // And one that ran for no time at all, on the hour (left `running` in the transaction
    // that entered it; the import refuses such a run, the schema does not): nothing to
    // charge, but done.
    let empty: uuid::Uuid = sqlx::query_scalar(
        "WITH a AS (
             INSERT INTO allocations (id, tenant_id, project_id, name, sku_id, shape, gpu_count,
                                      region, node_id, listing_version_id, ssh_public_key,
                                      price_per_hour_minor, currency, idempotency_key,
                                      request_fingerprint, requested_by, placement, state,
                                      requested_at)
             SELECT gen_random_uuid(), tenant_id, project_id, 'empty', sku_id, shape, gpu_count,
                    region, node_id, listing_version_id, ssh_public_key, price_per_hour_minor,
                    currency, 'import-empty-run', request_fingerprint, requested_by, placement, 'placed',
                    requested_at
             FROM allocations WHERE id = $1
             RETURNING id
         )
         INSERT INTO usage_intervals (allocation_id, tenant_id, project_id, sku_id, gpu_count,
                                      price_per_hour_minor, currency, started_at, ended_at)
         SELECT a.id, u.tenant_id, u.project_id, u.sku_id, u.gpu_count, u.price_per_hour_minor,
                u.currency, '2026-10-04 00:00Z', '2026-10-04 00:00Z'
         FROM a, usage_intervals u WHERE u.allocation_id = $1
         RETURNING allocation_id",
    )
    .bind(later.0)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    let rated = rate_until(cp.pool(), datetime!(2026-10-05 00:00 UTC), 1000)
        .await
        .unwrap();
    // 07:00–24:00, the whole 2nd, 00:00–06:00: 17 + 24 + 6 hours in three charges.
    assert_eq!((rated.charges, rated.hours), (3, 47));
    let done: bool =
        sqlx::query_scalar("SELECT fully_rated FROM usage_intervals WHERE allocation_id = $1")
            .bind(empty)
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert!(done, "an interval of no time is rated (to nothing)");

    let money = |id: control_plane::AllocationId| {
        let pool = cp.pool().clone();
        async move {
            sqlx::query_as::<_, (i64, i64, i64, i64, i64, i64)>(
                "SELECT count(*), sum(c.hours)::bigint, sum(c.rated_us)::bigint,
                        sum(c.amount_micro)::bigint, sum(f.amount_micro)::bigint,
                        sum(f.publisher_micro)::bigint
                 FROM usage_charges c JOIN fee_charges f USING (allocation_id, period_start)
                 WHERE c.allocation_id = $1",
            )
            .bind(id.0)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let (as_it_ran, after) = (money(hourly).await, money(later).await);
    assert_eq!((as_it_ran.0, as_it_ran.1), (47, 47), "one charge per hour");
    assert_eq!(after.0, 3);
    assert_eq!(
        (
            as_it_ran.1,
            as_it_ran.2,
            as_it_ran.3,
            as_it_ran.4,
            as_it_ran.5
        ),
        (after.1, after.2, after.3, after.4, after.5),
        "hours, running time, usage, fee and the publisher's share"
    );
    let us = (end - start).whole_microseconds() as i64;
    assert_eq!(after.2, us);
    let price: i64 = sqlx::query_scalar(
        "SELECT price_per_hour_minor FROM usage_intervals WHERE allocation_id = $1",
    )
    .bind(later.0)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(Micros(after.3), cost_micros(price, us));
    assert_eq!(unbalanced_entries(&cp).await, 0);

    // The export lists the same 47 hourly lines for both, but for their names and ids.
    let fiona = principal(&cp, "fiona@acme.example").await;
    let fin = in_tenant::<TenantFinance>(&cp, &fiona, ACME).await;
    let csv = cp.usage_csv(&fin, "2026-10").await.unwrap();
    let lines_of = |id: control_plane::AllocationId| -> Vec<String> {
        csv.lines()
            .filter(|l| l.contains(&id.to_string()))
            .map(|l| {
                let mut f: Vec<&str> = l.split(',').collect();
                f.drain(3..5); // allocation name and id
                f.join(",")
            })
            .collect()
    };
    let (a, b) = (lines_of(hourly), lines_of(later));
    assert_eq!(a.len(), 47, "{csv}");
    assert_eq!(a, b);
    assert!(
        a[0].starts_with("2026-10-01T07:00:00Z,research,h100.1x,1,2399.500000,"),
        "the first hour from 07:20:00.5: {}",
        a[0]
    );
}

/// Finding 8: prices are bounded in the schema, and a row from before the bound (an hourly
/// price whose charge overflows a bigint) is held back and reported while everyone else is
/// rated. On the old code the whole batch failed, for every tenant, every round.
#[tokio::test]
async fn money_is_bounded_and_one_bad_price_never_stops_rating_for_everyone() {
    let (_db, cp) = setup().await;
    let pool = cp.pool().clone();
    for sql in [
        "UPDATE skus SET price_per_hour_minor = 10000001 WHERE name = 'h100.1x'",
        "INSERT INTO policies (tenant_id, key, value) VALUES ('0a0e0000-0000-4000-8000-000000000001', \
         'monthly_budget', '{\"amount_minor\": 100000000001, \"currency\": \"USD\"}')",
    ] {
        let err = sqlx::query(sql).execute(&pool).await.unwrap_err();
        assert!(err.to_string().contains("_bounded"), "{sql}: {err}");
    }

    // A row written before the bound existed.
    sqlx::raw_sql(
        "ALTER TABLE allocations DROP CONSTRAINT allocations_price_bounded;
         ALTER TABLE usage_intervals DROP CONSTRAINT usage_intervals_price_bounded;",
    )
    .execute(&pool)
    .await
    .unwrap();
    let start = datetime!(2026-10-01 00:00 UTC);
    let end = datetime!(2026-10-01 05:00 UTC);
    let mut conn = pool.acquire().await.unwrap();
    let bad = import_run(
        &mut conn,
        &ImportedRun {
            tenant: ACME,
            project: ACME_RESEARCH,
            sku: "h100.1x",
            listing: "ubuntu-24.04-cuda",
            name: "huge",
            started_at: start,
            ended_at: end,
            price_per_hour_minor: Some(1_000_000_000_000_000),
            by: BOB,
            key: "huge",
        },
    )
    .await
    .unwrap();
    drop(conn);
    sqlx::raw_sql(
        "ALTER TABLE allocations ADD CONSTRAINT allocations_price_bounded
           CHECK (price_per_hour_minor <= 10000000 AND fee_per_hour_minor <= 10000000) NOT VALID;
         ALTER TABLE usage_intervals ADD CONSTRAINT usage_intervals_price_bounded
           CHECK (price_per_hour_minor <= 10000000 AND fee_per_hour_minor <= 10000000) NOT VALID;",
    )
    .execute(&pool)
    .await
    .unwrap();
    let acme = run(
        &cp,
        ACME,
        ACME_INFERENCE,
        "h100.1x",
        "fine-acme",
        start,
        end,
    )
    .await;
    let globex = run(
        &cp,
        GLOBEX,
        GLOBEX_DEFAULT,
        "h100.8x",
        "fine-globex",
        start,
        end,
    )
    .await;

    let rated = rate_until(cp.pool(), datetime!(2026-10-02 00:00 UTC), 2)
        .await
        .unwrap();
    assert_eq!(rated.held, vec![bad]);
    assert_eq!(
        (rated.hours, rated.charges),
        (10, 2),
        "five hours each of the two good allocations, one charge each"
    );
    for (id, done) in [(acme, true), (globex, true), (bad, false)] {
        let fully: bool =
            sqlx::query_scalar("SELECT fully_rated FROM usage_intervals WHERE allocation_id = $1")
                .bind(id.0)
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(fully, done, "{id}");
    }
    assert_eq!(unbalanced_entries(&cp).await, 0);
    // Nothing left to do for the others; the held one stays held and reported.
    let again = rate_until(cp.pool(), datetime!(2026-10-02 00:00 UTC), 2)
        .await
        .unwrap();
    assert_eq!((again.charges, again.held), (0, vec![bad]));
}

#[tokio::test]
async fn the_ledger_is_append_only_and_every_entry_balances() {
    let (_db, cp) = setup().await;
    // With a listing fee, so fee charges exist too.
    run_listing(
        &cp,
        ACME,
        ACME_RESEARCH,
        "h100.1x",
        "pytorch",
        "a",
        datetime!(2026-10-01 00:00 UTC),
        datetime!(2026-10-01 03:00 UTC),
    )
    .await;
    rate_until(cp.pool(), datetime!(2026-10-02 00:00 UTC), 100)
        .await
        .unwrap();
    for sql in [
        "UPDATE journal_entries SET memo = 'edited'",
        "DELETE FROM journal_entries",
        "UPDATE postings SET amount_micro = amount_micro + 1",
        "DELETE FROM postings",
        "UPDATE usage_charges SET amount_micro = 0",
        "DELETE FROM usage_charges",
        "TRUNCATE postings",
        "TRUNCATE journal_entries CASCADE",
        "TRUNCATE usage_charges CASCADE",
        "UPDATE fee_charges SET amount_micro = 0",
        "DELETE FROM fee_charges",
        "TRUNCATE fee_charges",
        "DELETE FROM usage_intervals",
        "TRUNCATE usage_intervals CASCADE",
        "UPDATE usage_intervals SET started_at = started_at - interval '1 hour'",
    ] {
        let err = sqlx::query(sql)
            .execute(cp.pool())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("append-only")
                || err.contains("never deleted")
                || err.contains("can't change what was metered"),
            "{sql}: {err}"
        );
    }
    // An unbalanced entry is refused at commit, with the numbers; so are postings that sum
    // to zero across currencies.
    let err = commit_usd_entry(
        &cp,
        "VALUES ($1, ledger_account('platform_revenue', NULL, 'USD'), 5)",
    )
    .await
    .unwrap_err();
    assert!(
        err.contains("does not balance: 1 postings summing to 5"),
        "{err}"
    );
    let err = commit_usd_entry(
        &cp,
        "VALUES ($1, ledger_account('platform_revenue', NULL, 'USD'), 5),
                ($1, ledger_account('platform_revenue', NULL, 'EUR'), -5)",
    )
    .await
    .unwrap_err();
    assert!(
        err.contains(
            "does not balance: 2 postings summing to 0 micro-units (1 in another currency)"
        ),
        "{err}"
    );
    // A reversing entry is how a mistake is corrected: it balances and is accepted.
    let mut tx = cp.pool().begin().await.unwrap();
    let original: i64 = sqlx::query_scalar("SELECT min(id) FROM journal_entries")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    let rev: i64 = sqlx::query_scalar(
        "INSERT INTO journal_entries (kind, tenant_id, currency, memo, reverses) VALUES ('reversal', $1, 'USD', 'reverse', $2) RETURNING id",
    )
    .bind(ACME.0)
    .bind(original)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    sqlx::query("INSERT INTO postings (entry_id, account_id, amount_micro) SELECT $1, account_id, -amount_micro FROM postings WHERE entry_id = $2")
        .bind(rev)
        .bind(original)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(unbalanced_entries(&cp).await, 0);

    // A charge or posting must name rows that exist (checked once per statement, over its
    // new rows, rather than by a per-row key), and the refusal says which.
    let orphans = [
        (
            "INSERT INTO usage_charges (allocation_id, period_start, tenant_id, project_id, sku_id,
                 gpu_count, price_per_hour_minor, currency, hours, rated_us, amount_micro, entry_id)
             SELECT gen_random_uuid(), period_start + interval '1 day', tenant_id, project_id,
                    sku_id, gpu_count, price_per_hour_minor, currency, hours, rated_us, amount_micro,
                    entry_id
             FROM usage_charges LIMIT 1",
            "which has no usage interval",
        ),
        (
            "INSERT INTO usage_charges (allocation_id, period_start, tenant_id, project_id, sku_id,
                 gpu_count, price_per_hour_minor, currency, hours, rated_us, amount_micro, entry_id)
             SELECT allocation_id, period_start + interval '1 day', tenant_id, project_id,
                    sku_id, gpu_count, price_per_hour_minor, currency, hours, rated_us, amount_micro,
                    -1
             FROM usage_charges LIMIT 1",
            "names journal entry -1, which does not exist",
        ),
        (
            "INSERT INTO postings (entry_id, account_id, amount_micro)
             VALUES (-1, ledger_account('platform_revenue', NULL, 'USD'), 0)",
            "a posting names journal entry -1, which does not exist",
        ),
    ];
    for (sql, refusal) in orphans {
        let err = sqlx::query(sql).execute(cp.pool()).await.unwrap_err();
        let db = err.as_database_error().expect("refused by the database");
        assert_eq!(db.code().as_deref(), Some("23503"), "{sql}: {db}");
        assert!(db.message().contains(refusal), "{sql}: {db}");
    }

    // The run was rated as one charge of three hours (midnight to 03:00). An hour is rated
    // once: a charge that starts inside that span is refused, though its first hour is not
    // the key; and a span never leaves its UTC day.
    let (hours, charges): (i32, i64) =
        sqlx::query_as("SELECT max(hours), count(*) FROM usage_charges")
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!((hours, charges), (3, 1));
    let copy = |start: &str, hours: &str| {
        format!(
            "INSERT INTO usage_charges (allocation_id, period_start, tenant_id, project_id, sku_id,
                 gpu_count, price_per_hour_minor, currency, hours, rated_us, amount_micro, entry_id)
             SELECT allocation_id, {start}, tenant_id, project_id, sku_id, gpu_count,
                    price_per_hour_minor, currency, {hours}, 1, 0, entry_id
             FROM usage_charges LIMIT 1"
        )
    };
    let refused = [
        (
            copy("period_start + interval '2 hours'", "1"),
            "23P01",
            "overlaps time already rated",
        ),
        (
            copy("period_start + interval '1 hour'", "5"),
            "23P01",
            "overlaps time already rated",
        ),
        (
            copy("period_start + interval '23 hours'", "2"),
            "23514",
            "usage_charges_span_in_one_day",
        ),
        (
            copy("period_start + interval '1 day'", "25"),
            "23514",
            "usage_charges_span_in_one_day",
        ),
    ];
    for (sql, code, refusal) in refused {
        let err = sqlx::query(&sql).execute(cp.pool()).await.unwrap_err();
        let db = err.as_database_error().expect("refused by the database");
        assert_eq!(db.code().as_deref(), Some(code), "{sql}: {db}");
        assert!(db.message().contains(refusal), "{sql}: {db}");
    }
    // Right after the span is free, and a fee charge must cover its usage charge's span.
    let mut tx = cp.pool().begin().await.unwrap();
    sqlx::query(&copy("period_start + interval '3 hours'", "1"))
        .execute(&mut *tx)
        .await
        .expect("the hour after the span is not rated yet");
    let err = sqlx::query(
        "INSERT INTO fee_charges (allocation_id, period_start, tenant_id, project_id,
             listing_version_id, publisher_id, fee_per_hour_minor, currency, hours, rated_us,
             amount_micro, publisher_micro, entry_id)
         SELECT allocation_id, period_start + interval '3 hours', tenant_id, project_id,
                listing_version_id, publisher_id, fee_per_hour_minor, currency, 2, 1, 0, 0, entry_id
         FROM fee_charges LIMIT 1",
    )
    .execute(&mut *tx)
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("does not cover its usage charge's span"),
        "{err}"
    );
}

/// Posts a USD journal entry for Acme with the postings `rows` gives (`$1` is the entry) and
/// commits it: the error is what the deferred balance check said.
async fn commit_usd_entry(cp: &ControlPlane, rows: &str) -> Result<(), String> {
    let mut tx = cp.pool().begin().await.unwrap();
    let entry: i64 = sqlx::query_scalar(
        "INSERT INTO journal_entries (kind, tenant_id, currency, memo) VALUES ('reversal', $1, 'USD', 'x') RETURNING id",
    )
    .bind(ACME.0)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO postings (entry_id, account_id, amount_micro) {rows}"
    ))
    .bind(entry)
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.map_err(|e| e.to_string())
}

/// One month, one tenant: the exact lines, rounding, credit and totals, and the ledger
/// agreeing with the invoice to the cent.
#[tokio::test]
async fn golden_invoice_for_one_month() {
    let (_db, cp) = setup().await;
    let fin = finance(&cp).await;
    let us = time::Duration::microseconds;
    run(
        &cp,
        ACME,
        ACME_RESEARCH,
        "h100.1x",
        "a",
        datetime!(2026-10-01 00:00 UTC),
        datetime!(2026-10-01 10:30 UTC),
    )
    .await;
    // Crosses into November: only its October part is on this invoice.
    run(
        &cp,
        ACME,
        ACME_RESEARCH,
        "h100.1x",
        "b",
        datetime!(2026-10-31 23:00 UTC) + us(500_000),
        datetime!(2026-11-01 01:00 UTC),
    )
    .await;
    run(
        &cp,
        ACME,
        ACME_INFERENCE,
        "l40s.1x",
        "c",
        datetime!(2026-10-15 12:00 UTC) + us(250_000),
        datetime!(2026-10-15 12:00:07 UTC) + us(750_000),
    )
    .await;
    run(
        &cp,
        ACME,
        ACME_RESEARCH,
        "h100.2x",
        "d",
        datetime!(2026-10-10 08:00 UTC),
        datetime!(2026-10-10 08:20 UTC) + us(1),
    )
    .await;
    // Another tenant's usage is on its own invoice.
    run(
        &cp,
        GLOBEX,
        GLOBEX_DEFAULT,
        "h100.1x",
        "g",
        datetime!(2026-10-05 00:00 UTC),
        datetime!(2026-10-05 01:00 UTC),
    )
    .await;
    cp.grant_credit(&fin, ACME, "10.00 USD", "launch promotion", None)
        .await
        .unwrap();

    // Acme's October isn't fully rated yet (run b is not): only Globex's invoice is made.
    rate_until(cp.pool(), datetime!(2026-10-31 12:00 UTC), 1000)
        .await
        .unwrap();
    let early = close_months(cp.pool(), datetime!(2026-11-01 00:10 UTC))
        .await
        .unwrap();
    assert_eq!(
        early.iter().map(|c| c.tenant).collect::<Vec<_>>(),
        vec![GLOBEX]
    );
    rate_until(cp.pool(), datetime!(2026-11-02 00:00 UTC), 1000)
        .await
        .unwrap();
    let closed = close_months(cp.pool(), datetime!(2026-11-02 00:00 UTC))
        .await
        .unwrap();
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert!(
        close_months(cp.pool(), datetime!(2026-11-02 00:00 UTC))
            .await
            .unwrap()
            .is_empty(),
        "closing again does nothing"
    );
    let acme = closed.iter().find(|c| c.tenant == ACME).unwrap();

    let lines = sqlx::query!(
        "SELECT line_no, kind, description, gpu_us, unit_price_micro, rated_micro, amount_minor
         FROM invoice_lines WHERE invoice_id = $1 ORDER BY line_no",
        acme.invoice.0
    )
    .fetch_all(cp.pool())
    .await
    .unwrap();
    let got: Vec<(i32, &str, &str, i64, i64, i64, i64)> = lines
        .iter()
        .map(|l| {
            (
                l.line_no,
                l.kind.as_str(),
                l.description.as_str(),
                l.gpu_us,
                l.unit_price_micro,
                l.rated_micro,
                l.amount_minor,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                1,
                "usage",
                "inference · l40s.1x · 0.002083 GPU-hours at 1.19 USD/GPU-hour",
                7_500_000,
                1_190_000,
                2_479,
                0
            ),
            (
                2,
                "usage",
                "research · h100.1x · 11.499861 GPU-hours at 2.99 USD/GPU-hour",
                41_399_500_000,
                2_990_000,
                34_384_584,
                3_438
            ),
            (
                3,
                "usage",
                "research · h100.2x · 0.666666 GPU-hours at 2.99 USD/GPU-hour",
                2_400_000_002,
                2_990_000,
                1_993_333,
                199
            ),
            (4, "credit", "Prepaid credit applied", 0, 0, 0, -1_000),
        ]
    );
    let inv = sqlx::query!(
        "SELECT number, status, subtotal_minor, credit_applied_minor, total_minor FROM invoices WHERE id = $1",
        acme.invoice.0
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(
        (
            inv.status.as_str(),
            inv.subtotal_minor,
            inv.credit_applied_minor,
            inv.total_minor
        ),
        ("open", 3_637, 1_000, 2_637)
    );
    assert!(inv.number.unwrap().starts_with("GPU-202610-"));

    // The ledger: the tenant owes exactly the invoice total; the rounding is its own entry.
    let ledger = sqlx::query!(
        r#"SELECT a.kind, sum(p.amount_micro)::bigint AS "sum!" FROM postings p
           JOIN ledger_accounts a ON a.id = p.account_id JOIN journal_entries e ON e.id = p.entry_id
           WHERE (a.tenant_id = $1 OR a.tenant_id IS NULL) AND (e.tenant_id = $1)
             AND (e.kind <> 'usage' OR EXISTS (SELECT 1 FROM usage_charges c WHERE c.entry_id = e.id
                  AND c.period_start < '2026-11-01T00:00:00Z'))
           GROUP BY a.kind ORDER BY a.kind"#,
        ACME.0
    )
    .fetch_all(cp.pool())
    .await
    .unwrap();
    let by_kind: std::collections::HashMap<String, i64> =
        ledger.into_iter().map(|r| (r.kind, r.sum)).collect();
    let rounding: i64 = sqlx::query_scalar!(
        r#"SELECT sum(p.amount_micro)::bigint AS "s!" FROM postings p JOIN journal_entries e ON e.id = p.entry_id
           JOIN ledger_accounts a ON a.id = p.account_id
           WHERE e.kind = 'invoice_rounding' AND e.invoice_id = $1 AND a.kind = 'tenant_receivable'"#,
        acme.invoice.0
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(rounding, 36_370_000 - 36_380_396);
    // Entries mix months (the November hour of run b shares a rating entry), so check the
    // receivable through October's charges: rated + rounding − credit = total.
    let oct_rated: i64 = sqlx::query_scalar!(
        r#"SELECT sum(amount_micro)::bigint AS "s!" FROM usage_charges WHERE tenant_id = $1 AND period_start < '2026-11-01T00:00:00Z'"#,
        ACME.0
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(
        oct_rated + rounding - 10_000_000,
        Micros::from_minor(2_637).0
    );
    assert_eq!(
        by_kind.get("prepaid_credit").copied(),
        Some(0),
        "the credit is used up: {by_kind:?}"
    );

    // Final means final: amounts, lines and the month's charges can't change.
    for sql in [
        "UPDATE invoices SET subtotal_minor = 1, total_minor = 1 - credit_applied_minor WHERE id = $1",
        "UPDATE invoice_lines SET amount_minor = 1 WHERE invoice_id = $1 AND line_no = 2",
        "DELETE FROM invoice_lines WHERE invoice_id = $1",
        "DELETE FROM invoices WHERE id = $1",
        "UPDATE invoices SET status = 'draft', number = NULL, finalized_at = NULL WHERE id = $1",
    ] {
        let err = sqlx::query(sql)
            .bind(acme.invoice)
            .execute(cp.pool())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("finalised") || err.contains("can't go from"),
            "{sql}: {err}"
        );
    }
    run(
        &cp,
        ACME,
        ACME_RESEARCH,
        "h100.1x",
        "late",
        datetime!(2026-10-20 00:00 UTC),
        datetime!(2026-10-20 01:00 UTC),
    )
    .await;
    let err = rate_until(cp.pool(), datetime!(2026-11-03 00:00 UTC), 100)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("after that month was invoiced"), "{err}");

    // Acme's finance person sees it; Globex's admin gets "not found", and bob (a member) is refused.
    let fiona = principal(&cp, "fiona@acme.example").await;
    let fin_acme = in_tenant::<TenantFinance>(&cp, &fiona, ACME).await;
    assert_eq!(
        cp.tenant_invoice(&fin_acme, acme.invoice)
            .await
            .unwrap()
            .summary
            .total
            .to_string(),
        "26.37 USD"
    );
    let carol = principal(&cp, "carol@globex.example").await;
    let globex = in_tenant::<TenantFinance>(&cp, &carol, GLOBEX).await;
    let err = cp.tenant_invoice(&globex, acme.invoice).await.unwrap_err();
    assert!(
        matches!(err, control_plane::Error::NotFound { what: "invoice" }),
        "{err}"
    );
    let bob = cp.principal(BOB).await.unwrap().unwrap();
    let err = cp
        .tenant_access::<TenantFinance>(&bob, ACME)
        .await
        .err()
        .unwrap()
        .to_string();
    assert_eq!(err, "only organization admins and finance may do this");

    // A credit note reverses part of it, never more than what is left.
    let err = cp
        .issue_credit_note(&fin, acme.invoice, "30.00 USD", "too much", None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("between 0.01 and 26.37 USD"), "{err}");
    cp.issue_credit_note(
        &fin,
        acme.invoice,
        "6.37 USD",
        "SLA credit for an outage",
        None,
    )
    .await
    .unwrap();
    let detail = cp.any_invoice(&fin, acme.invoice).await.unwrap();
    assert_eq!(detail.balance.to_string(), "20.00 USD");
    assert_eq!(detail.paid, None);
    assert_eq!(unbalanced_entries(&cp).await, 0);

    // Once paid, nothing is due: the payment was what was left after the credit note, and a
    // credit note issued after the payment does not make the invoice owe again.
    sqlx::query("UPDATE invoices SET status = 'paid', paid_at = clock_timestamp() WHERE id = $1")
        .bind(acme.invoice)
        .execute(cp.pool())
        .await
        .unwrap();
    cp.issue_credit_note(&fin, acme.invoice, "1.00 USD", "goodwill", None)
        .await
        .unwrap();
    let detail = cp.any_invoice(&fin, acme.invoice).await.unwrap();
    assert_eq!(detail.balance.to_string(), "0.00 USD");
    assert_eq!(detail.paid.unwrap().to_string(), "20.00 USD");
    assert!(detail.paid_at.is_some());
}

#[tokio::test]
async fn the_budget_counts_the_ledger_and_refuses_with_the_numbers() {
    let (_db, cp) = setup().await;
    let now = time::OffsetDateTime::now_utc();
    let (month, _) = control_plane::billing::month_bounds(now);
    if now - month < time::Duration::minutes(130) {
        eprintln!(
            "skipped: the month began less than 130 minutes ago; this test needs two past hours in it"
        );
        return;
    }
    // Spent this month: two hours of h100.8x (47.84 USD), rated or not.
    let start = (now - time::Duration::hours(3)).max(month);
    run(
        &cp,
        ACME,
        ACME_RESEARCH,
        "h100.8x",
        "big",
        start,
        start + time::Duration::hours(2),
    )
    .await;
    let alice = principal(&cp, "alice@acme.example").await;
    let scope = cp
        .policy_scope(&alice, control_plane::policy::Target::Tenant(ACME))
        .await
        .unwrap();
    cp.set_policy(
        &scope,
        control_plane::policy::PolicyKey::MonthlyBudget,
        Some(control_plane::policy::PolicyValue::MonthlyBudget(
            control_plane::policy::Money {
                amount_minor: 5_000,
                currency: "USD".into(),
            },
        )),
        None,
    )
    .await
    .unwrap();
    let bob = cp.principal(BOB).await.unwrap().unwrap();
    let who = cp
        .project_access::<control_plane::tenancy::ProjectOperators>(&bob, ACME_RESEARCH)
        .await
        .unwrap();
    let req = control_plane::allocations::LaunchRequest {
        sku: "h100.1x".into(),
        region: String::new(),
        listing: "ubuntu-24.04-cuda".into(),
        version: String::new(),
        ssh_public_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bob@laptop".into(),
        name: "one-more".into(),
        idempotency_key: uuid::Uuid::new_v4().to_string(),
        lifetime_hours: None,
        published_ports: Vec::new(),
        tags: Default::default(),
        user_data: None,
        volumes: Vec::new(),
    };
    let err = cp.launch(&who, &req, None).await.unwrap_err().to_string();
    assert_eq!(
        err,
        "policy monthly_budget (set at organization level) is 50.00 USD; 47.84 USD is spent this month, and 2.99 USD for the first hour of h100.1x would make 50.83 USD, 0.83 USD over"
    );
    // The same figure, rated: nothing changes.
    rate_until(cp.pool(), now, 1000).await.unwrap();
    let err2 = cp.launch(&who, &req, None).await.unwrap_err().to_string();
    assert_eq!(err, err2);
    // Alerts: 95 % of the budget is spent.
    let fiona = principal(&cp, "fiona@acme.example").await;
    let fin = in_tenant::<TenantFinance>(&cp, &fiona, ACME).await;
    let o = cp.billing_overview(&fin).await.unwrap();
    let b = o
        .budgets
        .iter()
        .find(|b| b.scope == "organization")
        .unwrap();
    assert_eq!(
        (b.percent, b.alert.as_str(), b.spent.to_string()),
        (95, "warning", "47.84 USD".into())
    );
    assert_eq!(o.month_to_date.to_string(), "47.84 USD");
    // A project that sets its own budget gets its own row, counting only its spend; one that
    // doesn't (inference) gets none. The tenant's policies are read once for every scope.
    crate::allocations::research_policy(
        &cp,
        control_plane::policy::PolicyValue::MonthlyBudget(control_plane::policy::Money {
            amount_minor: 20_000,
            currency: "USD".into(),
        }),
    )
    .await;
    let o = cp.billing_overview(&fin).await.unwrap();
    let rows: Vec<_> = o
        .budgets
        .iter()
        .map(|b| {
            (
                b.scope.as_str(),
                b.limit.amount_minor,
                b.percent,
                b.alert.as_str(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("organization", 5_000, 95, "warning"),
            ("research", 20_000, 23, "ok")
        ]
    );
    // The daily chart: the same two hours, under the UTC day(s) they ran in.
    assert!(
        o.daily
            .iter()
            .all(|d| d.project == "research" && d.sku == "h100.8x"),
        "{:?}",
        o.daily
    );
    assert_eq!(o.daily.iter().map(|d| d.amount_minor).sum::<i64>(), 4784);
    assert_eq!(o.daily[0].day, start.date().to_string());
    // The last day is the one the run's last instant fell in (between 01:00 and 02:00 UTC the
    // run crosses midnight in its second hour).
    assert_eq!(
        o.daily.last().unwrap().day,
        (start + time::Duration::hours(2) - time::Duration::nanoseconds(1))
            .date()
            .to_string()
    );
}

/// The overview's figures besides spend: the credit the tenant holds, what runs now per hour,
/// and the forecast (month to date plus that rate until the month ends), each in the
/// tenant's currency, read in the statement that reads the month's spend.
#[tokio::test]
async fn the_overview_shows_the_credit_held_what_runs_now_and_the_forecast() {
    let (_db, cp, ops) = crate::allocations::setup().await;
    let fiona = principal(&cp, "fiona@acme.example").await;
    let fin = in_tenant::<TenantFinance>(&cp, &fiona, ACME).await;
    let figures = |o: &control_plane::billing::reports::Overview| {
        [
            o.credit_balance.to_string(),
            o.running_per_hour.to_string(),
            o.month_to_date.to_string(),
            o.forecast.to_string(),
        ]
    };
    let o = cp.billing_overview(&fin).await.unwrap();
    assert_eq!(
        figures(&o),
        ["0.00 USD", "0.00 USD", "0.00 USD", "0.00 USD"]
    );

    let platform = finance(&cp).await;
    cp.grant_credit(&platform, ACME, "10.00 USD", "promotion", None)
        .await
        .unwrap();
    // Globex's credit is Globex's.
    cp.grant_credit(&platform, GLOBEX, "7.00 USD", "promotion", None)
        .await
        .unwrap();
    let (_, agent, _) = crate::allocations::hgx(&cp, &ops, "gpu-1").await;
    let bob = crate::allocations::member(&cp, BOB, ACME_RESEARCH).await;
    crate::allocations::running(&cp, &bob, &agent, "now").await;
    let price = sqlx::query_scalar!("SELECT price_per_hour_minor FROM skus WHERE name = 'h100.2x'")
        .fetch_one(cp.pool())
        .await
        .unwrap();

    let before = time::OffsetDateTime::now_utc();
    let o = cp.billing_overview(&fin).await.unwrap();
    let after = time::OffsetDateTime::now_utc();
    assert_eq!(o.credit_balance.to_string(), "10.00 USD");
    assert_eq!(o.running_per_hour.amount_minor, price);
    assert_eq!(o.running_per_hour.currency, "USD");
    // What ran so far is a fraction of a cent; the rest of the month at the running price.
    assert!(o.month_to_date.amount_minor <= 1, "{}", o.month_to_date);
    let (_, end) = control_plane::billing::month_bounds(before);
    let left = |at: time::OffsetDateTime| (end - at).whole_microseconds() as i64;
    let (lo, hi) = (
        price * left(after) / 3_600_000_000,
        price * left(before) / 3_600_000_000,
    );
    let ahead = o.forecast.amount_minor - o.month_to_date.amount_minor;
    assert!(
        (lo - 1..=hi + 1).contains(&ahead),
        "forecast {} beyond month to date {}: expected {lo}..={hi} minor units",
        o.forecast,
        o.month_to_date
    );
}

#[tokio::test]
async fn golden_invoice_with_marketplace_fees_and_the_publishers_payable() {
    let (_db, cp) = setup().await;
    // vLLM (Globex Labs, 0.40 USD/h, 70 % to the publisher) on h100.1x for 2 h 30 min, and
    // PyTorch (the platform's, 0.25 USD/h) on l40s.1x for 45 min.
    run_listing(
        &cp,
        ACME,
        ACME_RESEARCH,
        "h100.1x",
        "vllm",
        "serve",
        datetime!(2026-10-01 00:00 UTC),
        datetime!(2026-10-01 02:30 UTC),
    )
    .await;
    run_listing(
        &cp,
        ACME,
        ACME_RESEARCH,
        "l40s.1x",
        "pytorch",
        "train",
        datetime!(2026-10-01 10:00 UTC),
        datetime!(2026-10-01 10:45 UTC),
    )
    .await;
    rate_until(cp.pool(), datetime!(2026-11-02 00:00 UTC), 1000)
        .await
        .unwrap();
    // 2.5 h at 0.40 = 1.00, 0.70 of it to Globex (one charge: rated after the fact).
    let shares: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT amount_micro, publisher_micro FROM fee_charges ORDER BY allocation_id, period_start",
    )
    .fetch_all(cp.pool())
    .await
    .unwrap();
    assert!(shares.contains(&(1_000_000, 700_000)), "{shares:?}");
    assert!(
        shares.contains(&(187_500, 0)),
        "the platform's own fee is all revenue"
    );

    let closed = close_months(cp.pool(), datetime!(2026-11-02 00:00 UTC))
        .await
        .unwrap();
    let acme = closed.iter().find(|c| c.tenant == ACME).unwrap();
    let lines: Vec<(i32, String, String, i64, i64, i64)> = sqlx::query_as(
        "SELECT line_no, kind, description, unit_price_micro, rated_micro, amount_minor
         FROM invoice_lines WHERE invoice_id = $1 ORDER BY line_no",
    )
    .bind(acme.invoice)
    .fetch_all(cp.pool())
    .await
    .unwrap();
    let got: Vec<(i32, &str, &str, i64, i64, i64)> = lines
        .iter()
        .map(|l| (l.0, l.1.as_str(), l.2.as_str(), l.3, l.4, l.5))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                1,
                "usage",
                "research · h100.1x · 2.500000 GPU-hours at 2.99 USD/GPU-hour",
                2_990_000,
                7_475_000,
                748
            ),
            (
                2,
                "usage",
                "research · l40s.1x · 0.750000 GPU-hours at 1.19 USD/GPU-hour",
                1_190_000,
                892_500,
                89
            ),
            (
                3,
                "fee",
                "research · PyTorch 2.5 marketplace fee · 0.750000 hours at 0.25 USD/hour",
                250_000,
                187_500,
                19
            ),
            (
                4,
                "fee",
                "research · vLLM inference server 0.6.4 marketplace fee · 2.500000 hours at 0.40 USD/hour",
                400_000,
                1_000_000,
                100
            ),
        ]
    );
    assert_eq!(acme.total_minor, 748 + 89 + 19 + 100);
    // The invoice page shows fee lines with their listing and hours.
    let fiona = principal(&cp, "fiona@acme.example").await;
    let fin = in_tenant::<TenantFinance>(&cp, &fiona, ACME).await;
    let detail = cp.tenant_invoice(&fin, acme.invoice).await.unwrap();
    let fee = &detail.lines[3];
    assert_eq!(
        (
            fee.sku.as_deref(),
            fee.gpu_hours.as_str(),
            fee.unit_price.as_str()
        ),
        (Some("vllm 0.6.4"), "2.500000 h", "0.400000")
    );

    // The receivable equals the total to the cent; Globex Labs is owed 70 % of its fees,
    // and every entry balances.
    let balance = |kind: &'static str, owner: Option<uuid::Uuid>| {
        let pool = cp.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT coalesce(sum(p.amount_micro), 0)::bigint FROM postings p
                 JOIN ledger_accounts a ON a.id = p.account_id
                 WHERE a.kind = $1 AND coalesce(a.tenant_id, a.publisher_id) IS NOT DISTINCT FROM $2",
            )
            .bind(kind)
            .bind(owner)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(
        balance("tenant_receivable", Some(ACME.0)).await,
        Micros::from_minor(acme.total_minor).0
    );
    let globex_labs: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM publishers WHERE tenant_id = $1")
            .bind(GLOBEX.0)
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(
        balance("publisher_payable", Some(globex_labs)).await,
        -700_000
    );
    assert_eq!(
        balance("platform_revenue", None).await,
        -(Micros::from_minor(acme.total_minor).0 - 700_000)
    );
    let unbalanced: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT entry_id FROM postings GROUP BY entry_id HAVING sum(amount_micro) <> 0) x",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(unbalanced, 0);
    // Operators see what is owed to each publisher.
    let ops = crate::support::operator(&cp, "ops@platform.example").await;
    let payables = cp.publisher_payables(&ops).await.unwrap();
    let globex = payables
        .iter()
        .find(|p| p.publisher == "Globex Labs")
        .unwrap();
    assert_eq!(
        (
            globex.fees_micro,
            globex.owed_micro,
            globex.revenue_share_bps
        ),
        (1_000_000, 700_000, 7000)
    );
    let platform = payables
        .iter()
        .find(|p| p.publisher == "GPU Cloud")
        .unwrap();
    assert_eq!((platform.fees_micro, platform.owed_micro), (187_500, 0));
}

/// The daily chart names each day's amount by project and SKU, in day, project and SKU order,
/// and shows nothing of another tenant's (#22: the names are joined from the tenant's
/// projects and the SKUs read once, not looked up row by row).
#[tokio::test]
async fn the_daily_chart_is_by_day_project_and_sku_and_only_the_tenants_own() {
    let db = crate::support::demo_db().await;
    let cp = ControlPlane::new(db.pool().clone(), control_plane::Naming::default());
    let now = time::OffsetDateTime::now_utc();
    let first = now.date().replace_day(1).unwrap();
    let second = first.next_day().unwrap();
    let rows: [(TenantId, time::Date, ProjectId, &str, i64); 6] = [
        (ACME, second, ACME_RESEARCH, "h100.1x", 3_000_000),
        (ACME, first, ACME_RESEARCH, "h100.8x", 2_000_000),
        (ACME, first, ACME_INFERENCE, "h100.1x", 1_000_000),
        (ACME, first, ACME_RESEARCH, "h100.1x", 4_000_000),
        (GLOBEX, first, GLOBEX_DEFAULT, "h100.1x", 9_000_000),
        (ACME, second, ACME_INFERENCE, "h100.8x", 5_000_000),
    ];
    for (tenant, day, project, sku, micro) in rows {
        sqlx::query(
            "INSERT INTO usage_day_totals (tenant_id, day, project_id, sku_id, currency, amount_micro)
             SELECT $1, $2, $3, id, 'USD', $5 FROM skus WHERE name = $4",
        )
        .bind(tenant.0)
        .bind(day)
        .bind(project.0)
        .bind(sku)
        .bind(micro)
        .execute(cp.pool())
        .await
        .unwrap();
    }
    let fiona = principal(&cp, "fiona@acme.example").await;
    let fin = in_tenant::<TenantFinance>(&cp, &fiona, ACME).await;
    let daily: Vec<(String, String, String, i64)> = cp
        .billing_overview(&fin)
        .await
        .unwrap()
        .daily
        .into_iter()
        .map(|d| (d.day, d.project, d.sku, d.amount_minor))
        .collect();
    let (d1, d2) = (first.to_string(), second.to_string());
    let row =
        |d: &String, p: &str, s: &str, minor| (d.clone(), p.to_string(), s.to_string(), minor);
    assert_eq!(
        daily,
        [
            row(&d1, "inference", "h100.1x", 100),
            row(&d1, "research", "h100.1x", 400),
            row(&d1, "research", "h100.8x", 200),
            row(&d2, "inference", "h100.8x", 500),
            row(&d2, "research", "h100.1x", 300),
        ]
    );
}

/// What the billing page shows as spent before rating (`month_spend`, which measures the
/// unrated time in float seconds since 0043) is what rating charges, to the micro-unit, and is
/// what the exact `numeric` measure of 0041 gave: runs whose ends fall on odd microseconds, at
/// an odd price near the bound, rated not at all, up to a moment between, and to the end.
#[tokio::test]
async fn the_unrated_spend_is_what_rating_charges_to_the_micro_unit() {
    let (_db, cp) = setup().await;
    let now = time::OffsetDateTime::now_utc();
    let (month, _) = control_plane::billing::month_bounds(now);
    if now - month < time::Duration::hours(13) {
        eprintln!(
            "SKIPPED: the month began less than 13 hours ago; this test needs twelve past hours in it"
        );
        return;
    }
    let spent = || async {
        sqlx::query_scalar!(
            r#"SELECT coalesce(sum(micro), 0)::bigint AS "micro!" FROM month_spend($1, $2, $3)"#,
            ACME as TenantId,
            month,
            now
        )
        .fetch_one(cp.pool())
        .await
        .unwrap()
    };
    // What the demo's Acme has spent already, rated or not.
    let base = spent().await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(43);
    let mut conn = cp.pool().acquire().await.unwrap();
    for i in 0..24 {
        let start = month + time::Duration::microseconds(rng.gen_range(0..36_000_000_000));
        let end = (start + time::Duration::microseconds(rng.gen_range(1..7_200_000_000)))
            .min(now - time::Duration::seconds(1));
        import_run(
            &mut conn,
            &ImportedRun {
                tenant: ACME,
                project: if i % 2 == 0 {
                    ACME_RESEARCH
                } else {
                    ACME_INFERENCE
                },
                sku: "h100.8x",
                listing: "ubuntu-24.04-cuda",
                name: &format!("odd-{i}"),
                started_at: start,
                ended_at: end,
                price_per_hour_minor: Some(rng.gen_range(9_000_001..9_999_999)),
                by: BOB,
                key: &format!("odd-{i}"),
            },
        )
        .await
        .unwrap();
    }
    drop(conn);
    // 0041's measure, in `numeric` throughout, of the runs imported here.
    let exact = sqlx::query_scalar!(
        r#"SELECT coalesce(sum(
                  div((u.price_per_hour_minor + u.fee_per_hour_minor)::numeric
                      * (extract(epoch FROM least(u.ended_at, $3) - u.started_at) * 1000000)::bigint,
                      360000)
                - div((u.price_per_hour_minor + u.fee_per_hour_minor)::numeric
                      * (extract(epoch FROM greatest(u.started_at, $2) - u.started_at) * 1000000)::bigint,
                      360000)), 0)::bigint AS "micro!"
           FROM usage_intervals u JOIN allocations a ON a.id = u.allocation_id
           WHERE u.tenant_id = $1 AND a.name LIKE 'odd-%'"#,
        ACME as TenantId,
        month,
        now
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    let before = spent().await;
    assert!(exact > 0, "the runs cost something");
    assert_eq!(before - base, exact, "the float measure is the numeric one");
    rate_until(cp.pool(), month + time::Duration::hours(6), 1000)
        .await
        .unwrap();
    assert_eq!(spent().await, before, "half rated");
    rate_until(cp.pool(), now, 1000).await.unwrap();
    assert_eq!(spent().await, before, "all rated");
}

/// Usage imported from before the portal ran on a ledger-only node: no host, so the fleet and
/// its counts leave it out and nothing an operator does to a node reaches it. A real host
/// enrolled under the node's name ("imported-usage") is a host like any other, and imports never
/// land on it.
#[tokio::test]
async fn imported_usage_sits_on_a_node_the_fleet_does_not_list() {
    use control_plane::fleet::{AdminState, FleetFilter, NewNode};
    use control_plane::{Error, NodeId};
    let (_db, cp) = setup().await;
    let ops = test_db::fixtures::operator(&cp, "ops@platform.example").await;
    let staff = test_db::fixtures::staff(&cp, &ops).await;
    let (host, _agent) = test_db::fixtures::enrolled(
        &cp,
        &ops,
        NewNode {
            hostname: "imported-usage".into(),
            region: "eu-west-1".into(),
            rack: "r12".into(),
            family: "hgx-h100-8x".into(),
            capacity_shapes: vec!["gpu_slice".into(), "baremetal".into()],
        },
    )
    .await;
    let start = datetime!(2026-10-01 00:00 UTC);
    let hour = time::Duration::hours(1);
    run(
        &cp,
        ACME,
        ACME_RESEARCH,
        "h100.1x",
        "imp-1",
        start,
        start + hour,
    )
    .await;
    let ledger: uuid::Uuid = sqlx::query_scalar!("SELECT id FROM nodes WHERE ledger_only")
        .fetch_one(cp.pool())
        .await
        .unwrap();

    let fleet = cp.fleet(&staff, &FleetFilter::default()).await.unwrap();
    assert_eq!(
        fleet.nodes.iter().map(|n| n.id).collect::<Vec<_>>(),
        vec![host],
        "only the enrolled host is listed"
    );
    let counted: i64 = fleet.by_posture.iter().map(|(_, _, n)| *n).sum();
    assert_eq!(
        counted, 1,
        "the counts are the listed nodes': {:?}",
        fleet.by_posture
    );
    assert!(matches!(
        cp.node_detail(&staff, NodeId(ledger)).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        cp.set_admin_state(&ops, NodeId(ledger), AdminState::Active, None)
            .await,
        Err(Error::NotFound { .. })
    ));

    // The next import lands on the ledger-only node, not on the host with its old name.
    let imported = run(
        &cp,
        ACME,
        ACME_RESEARCH,
        "h100.1x",
        "imp-2",
        start,
        start + hour,
    )
    .await;
    let on: uuid::Uuid =
        sqlx::query_scalar!("SELECT node_id FROM allocations WHERE id = $1", imported.0)
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(on, ledger);

    // The database holds it too: a ledger-only node stays cordoned, and there is one.
    let uncordon = sqlx::query("UPDATE nodes SET admin_state = 'active' WHERE ledger_only")
        .execute(cp.pool())
        .await;
    assert!(uncordon.is_err(), "a ledger-only node was made schedulable");
    let second = sqlx::query(
        "INSERT INTO nodes (id, hostname, region, rack, family, capacity_shapes, admin_state, ledger_only)
         SELECT gen_random_uuid(), 'imported-usage-2', region, rack, family, capacity_shapes, 'cordoned', true
         FROM nodes WHERE ledger_only",
    )
    .execute(cp.pool())
    .await;
    assert!(second.is_err(), "a second ledger-only node was written");
}

/// A project's page shows what its usage has cost this month, as rated: its own runs in this
/// month, not another project's nor last month's.
#[tokio::test]
async fn a_project_sees_its_month_spend_as_rated() {
    use control_plane::tenancy::ProjectViewers;
    let (_db, cp) = setup().await;
    let now = time::OffsetDateTime::now_utc();
    let month_start = now
        .replace_day(1)
        .unwrap()
        .replace_time(time::Time::MIDNIGHT);
    let bob = principal(&cp, "bob@acme.example").await;
    let viewer = crate::support::in_project::<ProjectViewers>(&cp, &bob, ACME_RESEARCH).await;
    let before = cp.project_month_spend(&viewer).await.unwrap();

    let hour = time::Duration::hours(1);
    // Up to two whole hours this month in the project (none in a month's first hour, which
    // has not ended yet); an hour last month, and as many in another project.
    let hours = (now - month_start).whole_hours().min(2);
    let this_month = month_start + time::Duration::hours(hours);
    if hours > 0 {
        run(
            &cp,
            ACME,
            ACME_RESEARCH,
            "h100.1x",
            "this-month",
            month_start,
            this_month,
        )
        .await;
        run(
            &cp,
            ACME,
            ACME_INFERENCE,
            "h100.1x",
            "elsewhere",
            month_start,
            this_month,
        )
        .await;
    }
    run(
        &cp,
        ACME,
        ACME_RESEARCH,
        "h100.1x",
        "last-month",
        month_start - 3 * hour,
        month_start - 2 * hour,
    )
    .await;
    rate_until(cp.pool(), now, 1000).await.unwrap();

    let price: i64 =
        sqlx::query_scalar!("SELECT price_per_hour_minor FROM skus WHERE name = 'h100.1x'")
            .fetch_one(cp.pool())
            .await
            .unwrap();
    let spent = cp.project_month_spend(&viewer).await.unwrap();
    if hours == 0 {
        assert_eq!(spent, before, "last month's hour is not this month's");
        return;
    }
    assert_eq!(spent.len(), 1, "{spent:?}");
    let was = before.first().map_or(0, |m| m.amount_minor);
    assert_eq!(
        spent[0].amount_minor - was,
        hours * price,
        "{before:?} → {spent:?}"
    );
    assert_eq!(spent[0].currency.as_str(), "USD");
}
