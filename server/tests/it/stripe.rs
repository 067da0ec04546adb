//! Stripe end to end: the portal (real router, real database) syncs invoices through
//! async-stripe to the local Stripe test server, which answers with Stripe's fixture objects
//! and sends signed webhooks back to `/stripe/webhook`.

use control_plane::prelude::*;

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use control_plane::billing::history::{ImportedRun, import_run};
use control_plane::billing::invoices::close_months;
use control_plane::billing::rating::rate_until;
use control_plane::billing::stripe::StripeSettings;
use control_plane::demo::{ACME, ACME_RESEARCH};
use control_plane::{ControlPlane, Naming, UserId};
use server::config::Config;
use server::{AppState, WebSettings, leptos_options, router};
use stripe_test_server::Faults;
use time::macros::datetime;

const SECRET: &str = "whsec_portal_test_secret";

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    config: Config,
}

struct Portal {
    cp: ControlPlane,
    addr: SocketAddr,
    stripe: stripe_test_server::Handle,
    invoice: control_plane::InvoiceId,
    /// Last: the server's connections go before the database.
    _db: test_db::TestDb,
}

fn fixtures() -> serde_json::Value {
    stripe_test_server::Config::bundled_fixtures()
}

/// A portal with Acme's October closed into one finalised invoice, not yet synced.
async fn portal() -> Portal {
    let db = test_db::demo().await;
    let url = db.url();
    let config = Flags::parse_from([
        "server",
        "--database-url",
        &url,
        "--public-url",
        "http://127.0.0.1:3000",
    ])
    .config;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stripe = stripe_test_server::start(
        stripe_test_server::Config {
            fixtures: fixtures(),
            webhook_url: Some(format!("http://{addr}/stripe/webhook")),
            webhook_secret: SECRET.into(),
            autopay_after: None,
            decline_tenants: Vec::new(),
        },
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let cp = ControlPlane::new(server::pool(&config).unwrap(), Naming::default())
        .with_stripe(&StripeSettings {
            api_base: stripe.base_url(),
            secret_key: "sk_test_portal".into(),
            webhook_secret: SECRET.into(),
            // Short, so that a Stripe that doesn't answer in time costs the tests little.
            timeout: Duration::from_secs(1),
        })
        .unwrap();
    cp.migrate().await.unwrap();
    let state = AppState {
        leptos: leptos_options(&config),
        cp: cp.clone(),
        web: WebSettings::from_config(&config).unwrap(),
        metrics: server::metrics::ServerMetrics::new(cp.clone(), None),
        draining: Default::default(),
    };
    tokio::spawn(async move { axum::serve(listener, router(state)).await.unwrap() });

    let mut conn = cp.pool().acquire().await.unwrap();
    for (key, sku, start, hours) in [
        ("a", "h100.1x", datetime!(2026-10-03 00:00 UTC), 10),
        ("b", "h100.2x", datetime!(2026-10-09 00:00 UTC), 3),
    ] {
        import_run(
            &mut conn,
            &ImportedRun {
                tenant: ACME,
                project: ACME_RESEARCH,
                sku,
                listing: "ubuntu-24.04-cuda",
                name: key,
                started_at: start,
                ended_at: start + time::Duration::hours(hours),
                price_per_hour_minor: None,
                by: UserId(uuid::uuid!("0a0e0000-0000-4000-8002-000000000002")),
                key,
            },
        )
        .await
        .unwrap();
    }
    drop(conn);
    rate_until(cp.pool(), datetime!(2026-11-01 01:00 UTC), 1000)
        .await
        .unwrap();
    let closed = close_months(cp.pool(), datetime!(2026-11-01 01:00 UTC))
        .await
        .unwrap();
    assert_eq!(closed.len(), 1);
    // 10 h × 2.99 + 3 h × 5.98 = 47.84 USD
    assert_eq!(closed[0].total_minor, 4_784);
    Portal {
        invoice: closed[0].invoice,
        cp,
        addr,
        stripe,
        _db: db,
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Local {
    status: String,
    stripe_status: Option<String>,
    stripe_invoice_id: Option<String>,
    hosted: Option<String>,
    failed: bool,
}

async fn local(p: &Portal) -> Local {
    let r = sqlx::query!(
        "SELECT status, stripe_status, stripe_invoice_id, hosted_invoice_url, payment_failed_at FROM invoices WHERE id = $1",
        p.invoice.0
    )
    .fetch_one(p.cp.pool())
    .await
    .unwrap();
    Local {
        failed: r.payment_failed_at.is_some() && r.status == "open",
        status: r.status,
        stripe_status: r.stripe_status,
        stripe_invoice_id: r.stripe_invoice_id,
        hosted: r.hosted_invoice_url,
    }
}

/// Waits (up to 10 s) for `check` on the local invoice.
async fn until(p: &Portal, what: &str, check: impl Fn(&Local) -> bool) -> Local {
    for _ in 0..200 {
        let l = local(p).await;
        if check(&l) {
            return l;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: still {:?}", local(p).await);
}

async fn events(p: &Portal) -> Vec<(String, String)> {
    sqlx::query!("SELECT type, coalesce(outcome, 'pending') AS \"outcome!\" FROM stripe_events ORDER BY created, received_at")
        .fetch_all(p.cp.pool())
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.r#type, r.outcome))
        .collect()
}

async fn cash_postings(p: &Portal) -> Vec<i64> {
    sqlx::query_scalar!(
        "SELECT p.amount_micro FROM postings p JOIN ledger_accounts a ON a.id = p.account_id
         JOIN journal_entries e ON e.id = p.entry_id WHERE a.kind = 'cash' AND e.invoice_id = $1",
        p.invoice.0
    )
    .fetch_all(p.cp.pool())
    .await
    .unwrap()
}

async fn sync(p: &Portal) -> usize {
    p.cp.sync_stripe().await.unwrap()
}

#[tokio::test]
async fn an_invoice_syncs_and_a_failed_payment_then_a_success_updates_it() {
    let p = portal().await;
    assert_eq!(sync(&p).await, 1);
    let l = local(&p).await;
    let sid = l.stripe_invoice_id.clone().expect("linked to Stripe");
    assert_eq!(
        (l.status.as_str(), l.stripe_status.as_deref()),
        ("open", Some("open"))
    );
    assert_eq!(
        l.hosted.as_deref(),
        Some(format!("http://{}/hosted/{sid}", p.stripe.addr).as_str())
    );
    // Stripe holds the same amounts: one item per line, the total to the cent.
    let s = p.stripe.invoice(&sid).unwrap();
    assert_eq!(s["amount_due"], 4_784);
    assert_eq!(p.stripe.created("invoiceitem"), 2);
    assert_eq!(s["metadata"]["invoice_id"], p.invoice.to_string());
    assert_eq!(sync(&p).await, 0, "nothing left to sync");

    p.stripe.set_faults(Faults {
        decline_payments: 1,
        ..Default::default()
    });
    assert!(p.stripe.pay(&sid).await.is_err());
    let l = until(&p, "payment failure recorded", |l| l.failed).await;
    assert_eq!(l.status, "open");
    let fin = finance(&p.cp).await;
    let failed =
        p.cp.all_invoices(
            &fin,
            &control_plane::billing::reports::InvoiceFilter {
                status: Some("failed".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(failed.len(), 1, "needs action");

    p.stripe.pay(&sid).await.unwrap();
    let l = until(&p, "paid", |l| l.status == "paid").await;
    assert!(!l.failed);
    assert_eq!(cash_postings(&p).await, vec![47_840_000]);
    let ev = events(&p).await;
    assert!(
        ev.contains(&(
            "invoice.payment_failed".into(),
            "applied: payment failed".into()
        )),
        "{ev:?}"
    );
    assert!(
        ev.contains(&("invoice.paid".into(), "applied: paid".into())),
        "{ev:?}"
    );
    assert!(
        ev.contains(&(
            "invoice.finalized".into(),
            "ignored: not an event this platform handles".into()
        )),
        "{ev:?}"
    );

    // A credit note after payment: in Stripe it credits the customer's balance.
    p.cp.issue_credit_note(&fin, p.invoice, "5.00 USD", "SLA credit", None)
        .await
        .unwrap();
    assert_eq!(sync(&p).await, 1);
    assert_eq!(sync(&p).await, 0);
    assert_eq!(p.stripe.created("credit_note"), 1);
    let s = p.stripe.invoice(&sid).unwrap();
    assert_eq!(s["post_payment_credit_notes_amount"], 500);
    let customer = p.stripe.customer(s["customer"].as_str().unwrap()).unwrap();
    assert_eq!(customer["balance"], -500, "the customer has 5.00 to spend");
}

#[tokio::test]
async fn a_credit_note_issued_before_the_sync_reaches_stripe_after_its_invoice_once() {
    let p = portal().await;
    let fin = finance(&p.cp).await;
    p.cp.issue_credit_note(&fin, p.invoice, "7.84 USD", "goodwill", None)
        .await
        .unwrap();
    // Make the credit note's row come first: it must wait for its invoice, not fail it.
    sqlx::query("UPDATE billing_outbox SET available_at = now() - interval '1 minute' WHERE kind = 'stripe.credit_note'")
        .execute(p.cp.pool())
        .await
        .unwrap();
    assert_eq!(sync(&p).await, 0);
    let err: Option<String> = sqlx::query_scalar(
        "SELECT last_error FROM billing_outbox WHERE kind = 'stripe.credit_note'",
    )
    .fetch_one(p.cp.pool())
    .await
    .unwrap();
    assert!(
        err.as_deref()
            .unwrap_or("")
            .contains("is not finalised on Stripe yet"),
        "{err:?}"
    );
    // A lost answer on the way: the retry replays it.
    p.stripe.set_faults(Faults {
        lose_responses: 1,
        ..Default::default()
    });
    assert_eq!(sync(&p).await, 1, "the invoice");
    sqlx::query("UPDATE billing_outbox SET available_at = now()")
        .execute(p.cp.pool())
        .await
        .unwrap();
    p.stripe.set_faults(Faults {
        lose_responses: 1,
        ..Default::default()
    });
    assert_eq!(sync(&p).await, 1, "the credit note");
    let sid = local(&p).await.stripe_invoice_id.unwrap();
    let s = p.stripe.invoice(&sid).unwrap();
    assert_eq!(
        (
            s["pre_payment_credit_notes_amount"].as_i64(),
            s["amount_due"].as_i64()
        ),
        (Some(784), Some(4_000))
    );
    assert_eq!(p.stripe.created("credit_note"), 1);
    let detail = p.cp.any_invoice(&fin, p.invoice).await.unwrap();
    assert_eq!(
        detail.balance.to_string(),
        "40.00 USD",
        "the portal and Stripe agree"
    );
}

async fn finance(
    cp: &ControlPlane,
) -> control_plane::auth::Platform<control_plane::billing::invoices::PlatformFinance> {
    let id: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO users (id, email, display_name, platform_role) VALUES (gen_random_uuid(), 'fin@platform.example', 'Fin', 'finance') RETURNING id",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    cp.principal(UserId(id))
        .await
        .unwrap()
        .unwrap()
        .platform()
        .unwrap()
}

async fn post_webhook(p: &Portal, body: &str, signature: &str) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(format!("http://{}/stripe/webhook", p.addr))
        .header("stripe-signature", signature)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

#[tokio::test]
async fn the_webhook_checks_signatures_and_timestamps_and_processes_an_event_once() {
    let p = portal().await;
    assert_eq!(sync(&p).await, 1);
    let sid = local(&p).await.stripe_invoice_id.unwrap();
    // An event as Stripe would send it: the fixture event around the invoice, marked paid.
    let mut invoice = p.stripe.invoice(&sid).unwrap();
    invoice["status"] = "paid".into();
    invoice["amount_paid"] = 4_784.into();
    let mut event = fixtures()["resources"]["event"].clone();
    event["id"] = "evt_portal_test_1".into();
    event["type"] = "invoice.paid".into();
    event["created"] = now().into();
    event["data"] = serde_json::json!({ "object": invoice });
    let body = event.to_string();

    let (status, text) = post_webhook(
        &p,
        &body,
        &stripe_test_server::sign("whsec_someone_else", now(), &body),
    )
    .await;
    assert_eq!(status, 400);
    assert!(text.contains("Invalid Stripe-Signature"), "{text}");
    let (status, text) = post_webhook(
        &p,
        &body,
        &stripe_test_server::sign(SECRET, now() - 301, &body),
    )
    .await;
    assert_eq!(status, 400);
    assert!(text.to_lowercase().contains("timestamp"), "{text}");
    let (status, text) = post_webhook(&p, &body, "t=1,v1=nothex").await;
    assert_eq!(status, 400, "{text}");
    // A body changed after signing.
    let (status, _) = post_webhook(
        &p,
        &body.replace("4784", "1"),
        &stripe_test_server::sign(SECRET, now(), &body),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        local(&p).await.status,
        "open",
        "nothing refused changed anything"
    );

    let sig = stripe_test_server::sign(SECRET, now(), &body);
    let (status, text) = post_webhook(&p, &body, &sig).await;
    assert_eq!(
        (status, text.contains("\"duplicate\":false")),
        (200, true),
        "{text}"
    );
    let (status, text) = post_webhook(&p, &body, &sig).await;
    assert_eq!(
        (status, text.contains("\"duplicate\":true")),
        (200, true),
        "{text}"
    );
    assert_eq!(local(&p).await.status, "paid");
    assert_eq!(cash_postings(&p).await, vec![47_840_000], "paid once");
}

#[tokio::test]
async fn events_out_of_order_and_twice_change_nothing() {
    let p = portal().await;
    assert_eq!(sync(&p).await, 1);
    let sid = local(&p).await.stripe_invoice_id.unwrap();
    // A declined attempt, then a successful one; Stripe holds both events and then delivers
    // them newest first, each twice.
    p.stripe.set_faults(Faults {
        decline_payments: 1,
        hold_events: true,
        duplicate_events: true,
        ..Default::default()
    });
    assert!(p.stripe.pay(&sid).await.is_err());
    p.stripe.pay(&sid).await.unwrap();
    p.stripe.flush().await;
    let l = until(&p, "paid", |l| l.status == "paid").await;
    assert!(
        !l.failed,
        "the older failure arrived late and changed nothing"
    );
    let ev = events(&p).await;
    assert_eq!(
        ev.iter()
            .filter(|(t, _)| t == "invoice.paid" || t == "invoice.payment_failed")
            .cloned()
            .collect::<Vec<_>>(),
        vec![
            (
                "invoice.payment_failed".to_string(),
                "ignored: invoice.payment_failed on an invoice that is paid".to_string()
            ),
            ("invoice.paid".to_string(), "applied: paid".to_string()),
        ],
        "stored once each, by id; the failure (older) was processed after the payment"
    );
    assert_eq!(cash_postings(&p).await, vec![47_840_000]);
}

#[tokio::test]
async fn a_stripe_outage_is_retried_and_nothing_is_duplicated() {
    let p = portal().await;
    // Down for every call of the first round (4 tries each), then two answers lost after
    // the objects were made: the retries must replay, not create again.
    p.stripe.set_faults(Faults {
        fail_requests: 4,
        ..Default::default()
    });
    assert_eq!(sync(&p).await, 0);
    let err: Option<String> = sqlx::query_scalar("SELECT last_error FROM billing_outbox")
        .fetch_one(p.cp.pool())
        .await
        .unwrap();
    assert!(err.as_deref().unwrap_or("").contains("503"), "{err:?}");
    assert_eq!(local(&p).await.stripe_invoice_id, None);
    p.stripe.set_faults(Faults {
        lose_responses: 2,
        ..Default::default()
    });
    // The outbox backs off; make the retry due now instead of waiting.
    sqlx::query("UPDATE billing_outbox SET available_at = now()")
        .execute(p.cp.pool())
        .await
        .unwrap();
    assert_eq!(sync(&p).await, 1);
    let l = local(&p).await;
    assert_eq!(l.stripe_status.as_deref(), Some("open"));
    assert_eq!(
        (
            p.stripe.created("customer"),
            p.stripe.created("invoice"),
            p.stripe.created("invoiceitem")
        ),
        (1, 1, 2),
        "one of each, whatever was retried"
    );
    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM billing_outbox")
        .fetch_one(p.cp.pool())
        .await
        .unwrap();
    assert_eq!(attempts, 2);
}

/// Reconciliation compares finalised invoices with what Stripe holds (read outside its
/// transaction): a difference is recorded with both sides, shown on the operations panel and
/// counted, and no money moves; an invoice Stripe can't be asked about keeps its finding; the
/// difference gone, the finding clears.
#[tokio::test]
async fn reconciliation_compares_invoices_with_stripe_and_moves_no_money() {
    use control_plane::ops::OpsApi;
    use control_plane::reconcile::ReconcileApi;
    let p = portal().await;
    assert_eq!(sync(&p).await, 1);
    let sid = local(&p).await.stripe_invoice_id.expect("linked to Stripe");
    let open_findings = || async {
        sqlx::query!(
            r#"SELECT subject, evidence ->> 'summary' AS "summary!" FROM reconciliation_findings
               WHERE kind = 'invoice_mismatch' AND cleared_at IS NULL"#
        )
        .fetch_all(p.cp.pool())
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.subject, r.summary))
        .collect::<Vec<_>>()
    };
    p.cp.reconcile_once().await.unwrap();
    assert!(open_findings().await.is_empty(), "Stripe agrees");

    // Someone voids it in Stripe's dashboard, and its total is changed, long ago: no event.
    let long_ago = now() - 3600;
    assert!(p.stripe.edit_invoice(&sid, |i| {
        i["total"] = serde_json::json!(4_000);
        i["status"] = serde_json::json!("void");
        i["status_transitions"]["voided_at"] = serde_json::json!(long_ago);
    }));
    let before = (local(&p).await, cash_postings(&p).await);
    let run = p.cp.reconcile_once().await.unwrap();
    assert!(run.ran && run.new >= 1, "{run:?}");
    let found = open_findings().await;
    let number: String = sqlx::query_scalar!(
        "SELECT number AS \"n!\" FROM invoices WHERE id = $1",
        p.invoice.0
    )
    .fetch_one(p.cp.pool())
    .await
    .unwrap();
    assert_eq!(
        found,
        [(
            p.invoice.to_string(),
            format!("invoice {number}: ours 47.84 USD open, Stripe's 40.00 USD void ({sid})")
        )]
    );
    assert_eq!(
        (local(&p).await, cash_postings(&p).await),
        before,
        "no money moves, our invoice is as it was"
    );
    let gauges = p.cp.ops_gauges().await.unwrap();
    assert!(
        gauges
            .reconciliation_open
            .contains(&("invoice_mismatch".to_string(), 1)),
        "{:?}",
        gauges.reconciliation_open
    );
    // The operations panel lists it among what failed (it is about money, not a host).
    let ops = test_db::fixtures::operator(&p.cp, "ops@platform.example").await;
    let staff = test_db::fixtures::staff(&p.cp, &ops).await;
    let overview = p.cp.ops_overview(&staff).await.unwrap();
    assert!(
        overview
            .failures
            .iter()
            .any(|f| f.what == "invoice_mismatch" && f.detail == found[0].1 && f.node_id.is_none()),
        "{:?}",
        overview.failures
    );

    // Stripe can't be asked now: the finding stands, neither seen again nor cleared.
    p.stripe.set_faults(Faults {
        fail_for_ms: 60_000,
        ..Default::default()
    });
    p.cp.reconcile_once().await.unwrap();
    assert_eq!(open_findings().await.len(), 1);

    // Put right in Stripe: the next run clears it.
    p.stripe.set_faults(Faults::default());
    assert!(p.stripe.edit_invoice(&sid, |i| {
        i["total"] = serde_json::json!(4_784);
        i["status"] = serde_json::json!("open");
        i["status_transitions"]["voided_at"] = serde_json::Value::Null;
    }));
    let run = p.cp.reconcile_once().await.unwrap();
    assert_eq!(run.cleared, 1, "{run:?}");
    assert!(open_findings().await.is_empty());
}

/// Stripe answering too slowly (it did the work, the answer is late): each call gives up at the
/// client's timeout and is retried with the same idempotency key, which Stripe answers from
/// what it did. One customer, one invoice, one item per line, and the sync finishes.
#[tokio::test]
async fn a_stripe_that_times_out_is_retried_and_nothing_is_duplicated() {
    let p = portal().await;
    p.stripe.set_faults(Faults {
        delay_requests: 3,
        delay_ms: 1_500,
        ..Default::default()
    });
    assert_eq!(sync(&p).await, 1, "done despite three calls that timed out");
    let sid = local(&p).await.stripe_invoice_id.expect("linked to Stripe");
    // The client gave up and retried: those retries were answered from what was done.
    assert!(p.stripe.replays() >= 3, "{} replays", p.stripe.replays());
    assert_eq!(p.stripe.created("customer"), 1);
    assert_eq!(p.stripe.created("invoice"), 1);
    assert_eq!(p.stripe.created("invoiceitem"), 2);
    assert_eq!(p.stripe.invoice(&sid).unwrap()["amount_due"], 4_784);
    assert_eq!(sync(&p).await, 0, "nothing left to sync");
}
