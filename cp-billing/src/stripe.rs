//! Stripe, through async-stripe: the sync worker (outbox → customer, invoice, invoice items,
//! finalisation) and the webhook (signed events, stored by id, applied once, in order).
//!
//! No Stripe call is made inside a database transaction: each step reads what it needs,
//! calls Stripe with an idempotency key derived from our own ids (so a retry after a crash
//! can't create a second object), then records the answer in a short transaction. Calls are
//! retried with exponential backoff; an outbox row that still fails is retried later.

use sqlx::PgConnection;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use stripe::{IdempotencyKey, RequestStrategy, StripeError, StripeRequest};
use stripe_webhook::{EventObject, Webhook};
use uuid::Uuid;

use super::Micros;
use super::invoices::{Account, Entry, post};
use cp_base::ControlPlane;
use cp_base::error::{Error, Result};
use cp_base::ids::TenantId;

pub use cp_base::stripe_link::{StripeLink, StripeSettings};

/// Tries a Stripe call up to 4 times with backoff (0.25 s, 0.5 s, 1 s), with the same
/// idempotency key each time. Only transport errors, 409 (idempotent request in flight),
/// 429 and 5xx are retried; Stripe refusing the request is final.
async fn with_retries<T, F, Fut>(what: &str, mut call: F) -> std::result::Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, StripeError>>,
{
    let mut delay = Duration::from_millis(250);
    for attempt in 1..=4 {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                let retry = match &e {
                    StripeError::Stripe(_, status) => {
                        *status == 409 || *status == 429 || *status >= 500
                    }
                    StripeError::ClientError(_) | StripeError::Timeout => true,
                    StripeError::JSONDeserialize(_) | StripeError::ConfigError(_) => false,
                };
                tracing::warn!(stripe.call = what, stripe.attempt = attempt, error = %e, "Stripe call failed");
                if !retry || attempt == 4 {
                    return Err(format!("{what}: {}", short(&e)));
                }
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
        }
    }
    unreachable!("the loop returns on its last attempt")
}

fn short(e: &StripeError) -> String {
    match e {
        StripeError::Stripe(api, status) => format!(
            "Stripe answered {status}: {}",
            api.message.as_deref().unwrap_or("(no message)")
        ),
        other => other.to_string(),
    }
    .chars()
    .take(400)
    .collect()
}

fn key(k: String) -> RequestStrategy {
    RequestStrategy::Idempotent(IdempotencyKey::new(k).expect("our keys are short ASCII"))
}

fn metadata(pairs: &[(&str, String)]) -> std::collections::HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// What the control plane offers for the Stripe sync and its webhook.
#[allow(async_fn_in_trait)]
pub trait StripeApi {
    /// Works through due `billing_outbox` rows; returns how many were done.
    async fn sync_stripe(&self) -> Result<usize>;

    /// Brings one finalised invoice to Stripe, step by step; every step is skipped when its
    /// result is already recorded, and keyed so Stripe dedupes a repeat.
    async fn sync_invoice(&self, invoice: Uuid) -> Result<()>;

    /// Brings one credit note to Stripe, once its invoice is there: against an open invoice
    /// it lowers what is due; against a paid one it goes to the customer's credit balance
    /// (what our ledger's negative receivable means).
    async fn sync_credit_note(&self, note: Uuid) -> Result<()>;

    /// Verifies and records one webhook delivery, then applies what is pending for its
    /// invoice. A bad signature or a stale timestamp: `Invalid` naming `Stripe-Signature`.
    async fn stripe_webhook(&self, payload: &str, signature: &str) -> Result<WebhookOutcome>;

    /// Applies a linked invoice's unprocessed events, oldest first (by Stripe's `created`).
    /// Status only moves forward, so an event that arrives after a later one changes nothing.
    async fn apply_stripe_events(&self, stripe_invoice: &str) -> Result<usize>;

    /// What Stripe holds now for our `limit` latest finalised invoices, for reconciliation:
    /// one read per invoice, made outside any transaction; once a read fails the rest are left
    /// out this run (Stripe down is not a mismatch). Empty without Stripe.
    async fn stripe_invoice_views(&self, limit: i64) -> Result<Vec<StripeInvoiceView>>;
}

/// One invoice as Stripe holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripeInvoiceView {
    /// Ours.
    pub invoice: Uuid,
    pub stripe_invoice: String,
    pub total_minor: i64,
    /// `open`, `paid`, `void`, `uncollectible` (or `draft`).
    pub status: Option<String>,
    /// The latest of Stripe's status transitions (Unix seconds).
    pub changed_at: Option<i64>,
}

impl StripeApi for ControlPlane {
    #[tracing::instrument(skip_all)]
    async fn sync_stripe(&self) -> Result<usize> {
        let mut done = 0;
        loop {
            // Claim one row: pushing `available_at` out is the lease (and the backoff if we die).
            let Some(row) = sqlx::query!(
                r#"UPDATE billing_outbox SET attempts = attempts + 1,
                       available_at = now() + least(interval '5 minutes', interval '2 seconds' * power(2, attempts))
                   WHERE id = (SELECT id FROM billing_outbox
                               WHERE done_at IS NULL AND available_at <= now()
                               ORDER BY available_at LIMIT 1 FOR UPDATE SKIP LOCKED)
                   RETURNING id, invoice_id, credit_note_id, attempts"#
            )
            .fetch_optional(self.pool())
            .await?
            else {
                return Ok(done);
            };
            let synced = match row.credit_note_id {
                Some(note) => self.sync_credit_note(note).await,
                None => self.sync_invoice(row.invoice_id).await,
            };
            match synced {
                Ok(()) => {
                    sqlx::query!(
                        "UPDATE billing_outbox SET done_at = now(), last_error = NULL WHERE id = $1",
                        row.id
                    )
                    .execute(self.pool())
                    .await?;
                    done += 1;
                }
                Err(e) => {
                    self.metrics().stripe_call_failed();
                    tracing::warn!(invoice.id = %row.invoice_id, outbox.attempts = row.attempts, error = %e, "Stripe sync will be retried");
                    sqlx::query!(
                        "UPDATE billing_outbox SET last_error = $2 WHERE id = $1",
                        row.id,
                        e.to_string()
                    )
                    .execute(self.pool())
                    .await?;
                    // Leave the rest for the next round; Stripe is probably down.
                    return Ok(done);
                }
            }
        }
    }

    #[tracing::instrument(skip(self), fields(invoice.id = %invoice))]
    async fn sync_invoice(&self, invoice: Uuid) -> Result<()> {
        let link = self.stripe()?;
        let inv = sqlx::query!(
            r#"SELECT i.tenant_id AS "tenant: TenantId", i.number AS "number!", i.currency, i.month,
                      i.stripe_invoice_id, i.stripe_status, t.stripe_customer_id, t.display_name, t.slug
               FROM invoices i JOIN tenants t ON t.id = i.tenant_id
               WHERE i.id = $1 AND i.status <> 'draft'"#,
            invoice
        )
        .fetch_optional(self.pool())
        .await?
        .ok_or(Error::NotFound { what: "invoice" })?;

        let customer = match inv.stripe_customer_id {
            Some(c) => c,
            None => {
                let req = stripe_core::customer::CreateCustomer::new()
                    .name(inv.display_name.clone())
                    .description(format!("GPU cloud organization {}", inv.slug))
                    .metadata(metadata(&[
                        ("tenant_id", inv.tenant.to_string()),
                        ("tenant", inv.slug.clone()),
                    ]));
                let c = with_retries("create customer", || {
                    req.customize()
                        .request_strategy(key(format!("gpuaas-customer-{}", inv.tenant)))
                        .send(link.client())
                })
                .await
                .map_err(Error::Conflict)?;
                let id = c.id.to_string();
                sqlx::query!(
                    "UPDATE tenants SET stripe_customer_id = $2 WHERE id = $1 AND stripe_customer_id IS NULL",
                    inv.tenant as TenantId,
                    id
                )
                .execute(self.pool())
                .await?;
                id
            }
        };

        let currency = stripe_types::Currency::from_str(&inv.currency.to_ascii_lowercase())
            .map_err(|_| Error::Corrupt(format!("currency {} unknown to Stripe", inv.currency)))?;
        let stripe_invoice = match inv.stripe_invoice_id {
            Some(s) => s,
            None => {
                let req = stripe_billing::invoice::CreateInvoice::new()
                    .customer(customer.clone())
                    .currency(currency.clone())
                    .auto_advance(false)
                    .pending_invoice_items_behavior(
                        stripe_billing::invoice::CreateInvoicePendingInvoiceItemsBehavior::Exclude,
                    )
                    .description(format!(
                        "GPU cloud usage, {}",
                        super::month_label(inv.month)
                    ))
                    .metadata(metadata(&[
                        ("invoice_id", invoice.to_string()),
                        ("number", inv.number.clone()),
                    ]));
                let s = with_retries("create invoice", || {
                    req.customize()
                        .request_strategy(key(format!("gpuaas-invoice-{invoice}")))
                        .send(link.client())
                })
                .await
                .map_err(Error::Conflict)?;
                let id = s.id.map(|i| i.to_string()).ok_or_else(|| {
                    Error::Corrupt("Stripe returned an invoice without an id".into())
                })?;
                sqlx::query!(
                    "UPDATE invoices SET stripe_invoice_id = $2, stripe_status = 'draft' WHERE id = $1 AND stripe_invoice_id IS NULL",
                    invoice,
                    id
                )
                .execute(self.pool())
                .await?;
                id
            }
        };

        let lines = sqlx::query!(
            "SELECT line_no, description, amount_minor FROM invoice_lines
             WHERE invoice_id = $1 AND stripe_invoice_item_id IS NULL ORDER BY line_no",
            invoice
        )
        .fetch_all(self.pool())
        .await?;
        for l in lines {
            let req = stripe_billing::invoice_item::CreateInvoiceItem::new()
                .customer(customer.clone())
                .invoice(stripe_invoice.clone())
                .amount(l.amount_minor)
                .currency(currency.clone())
                .description(l.description.clone())
                .metadata(metadata(&[
                    ("invoice_id", invoice.to_string()),
                    ("line", l.line_no.to_string()),
                ]));
            let item = with_retries("create invoice item", || {
                req.customize()
                    .request_strategy(key(format!("gpuaas-line-{invoice}-{}", l.line_no)))
                    .send(link.client())
            })
            .await
            .map_err(Error::Conflict)?;
            sqlx::query!(
                "UPDATE invoice_lines SET stripe_invoice_item_id = $3 WHERE invoice_id = $1 AND line_no = $2",
                invoice,
                l.line_no,
                item.id.to_string()
            )
            .execute(self.pool())
            .await?;
        }

        if inv.stripe_status.as_deref().is_none_or(|s| s == "draft") {
            let req = stripe_billing::invoice::FinalizeInvoiceInvoice::new(stripe_invoice.clone())
                .auto_advance(true);
            let f = with_retries("finalize invoice", || {
                req.customize()
                    .request_strategy(key(format!("gpuaas-finalize-{invoice}")))
                    .send(link.client())
            })
            .await
            .map_err(Error::Conflict)?;
            sqlx::query!(
                "UPDATE invoices SET stripe_status = $2, hosted_invoice_url = $3 WHERE id = $1",
                invoice,
                f.status.as_ref().map(|s| s.as_str().to_string()),
                f.hosted_invoice_url
            )
            .execute(self.pool())
            .await?;
        }
        // Events that arrived before the invoice was linked wait for this.
        self.apply_stripe_events(&stripe_invoice).await?;
        Ok(())
    }

    #[tracing::instrument(skip(self), fields(credit_note.id = %note))]
    async fn sync_credit_note(&self, note: Uuid) -> Result<()> {
        let link = self.stripe()?;
        let n = sqlx::query!(
            r#"SELECT n.amount_minor, n.reason, n.invoice_id, i.number AS "number!", i.stripe_invoice_id,
                      i.stripe_status, (SELECT stripe_credit_note_id FROM stripe_credit_notes s WHERE s.credit_note_id = n.id) AS "synced?"
               FROM credit_notes n JOIN invoices i ON i.id = n.invoice_id WHERE n.id = $1"#,
            note
        )
        .fetch_optional(self.pool())
        .await?
        .ok_or(Error::NotFound { what: "credit note" })?;
        if n.synced.is_some() {
            return Ok(());
        }
        let (Some(stripe_invoice), Some(status)) = (
            n.stripe_invoice_id,
            n.stripe_status.filter(|s| s != "draft"),
        ) else {
            return Err(Error::Conflict(format!(
                "credit note waits: invoice {} is not finalised on Stripe yet",
                n.number
            )));
        };
        let mut req = stripe_billing::credit_note::CreateCreditNote::new(stripe_invoice)
            .amount(n.amount_minor)
            .memo(n.reason.clone())
            .metadata(metadata(&[
                ("credit_note_id", note.to_string()),
                ("invoice_id", n.invoice_id.to_string()),
            ]));
        if status == "paid" {
            req = req.credit_amount(n.amount_minor);
        }
        let created = with_retries("create credit note", || {
            req.customize()
                .request_strategy(key(format!("gpuaas-credit-note-{note}")))
                .send(link.client())
        })
        .await
        .map_err(Error::Conflict)?;
        sqlx::query!(
            "INSERT INTO stripe_credit_notes (credit_note_id, stripe_credit_note_id) VALUES ($1, $2)
             ON CONFLICT (credit_note_id) DO NOTHING",
            note,
            created.id.to_string()
        )
        .execute(self.pool())
        .await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn stripe_webhook(&self, payload: &str, signature: &str) -> Result<WebhookOutcome> {
        let link = self.stripe()?;
        // Read as JSON first: a body that is not an event object is refused saying so, in
        // serde_json's words, before async-stripe's reader sees it.
        let payload_json: serde_json::Value =
            serde_json::from_str(payload).map_err(|e| Error::Invalid {
                field: "payload",
                reason: e.to_string(),
            })?;
        if !payload_json.is_object() {
            return Err(Error::Invalid {
                field: "payload",
                reason: "an event is a JSON object".into(),
            });
        }
        let event =
            Webhook::construct_event(payload, signature, link.webhook_secret()).map_err(|e| {
                Error::Invalid {
                    field: "Stripe-Signature",
                    reason: e.to_string(),
                }
            })?;
        // Signed, so from Stripe (or whoever holds the secret); still checked as the table
        // checks it, so that an odd id is a refusal that names it rather than a failure.
        if !is_event_id(event.id.as_str()) {
            return Err(Error::Invalid {
                field: "id",
                reason: "a Stripe event id is `evt_` then up to 200 letters, digits or `_`".into(),
            });
        }
        let invoice = match &event.data.object {
            EventObject::InvoicePaid(i)
            | EventObject::InvoicePaymentFailed(i)
            | EventObject::InvoiceVoided(i)
            | EventObject::InvoiceMarkedUncollectible(i) => i.id.as_ref().map(|i| i.to_string()),
            _ => None,
        };
        let created = time::OffsetDateTime::from_unix_timestamp(event.created).map_err(|_| {
            Error::Invalid {
                field: "created",
                reason: "not a time".into(),
            }
        })?;
        let inserted = sqlx::query_scalar!(
            "INSERT INTO stripe_events (id, type, stripe_invoice_id, created, payload, processed_at, outcome)
             VALUES ($1, $2, $3, $4, $5, CASE WHEN $3::text IS NULL THEN now() END,
                     CASE WHEN $3::text IS NULL THEN 'ignored: not an event this platform handles' END)
             ON CONFLICT (id) DO NOTHING RETURNING id",
            event.id.as_str(),
            event.type_.as_str(),
            invoice,
            created,
            payload_json
        )
        .fetch_optional(self.pool())
        .await?;
        self.metrics().webhook_event(event.type_.as_str());
        if inserted.is_none() {
            tracing::info!(stripe.event = %event.id.as_str(), "duplicate delivery; nothing to do");
            return Ok(WebhookOutcome {
                event: event.id.to_string(),
                duplicate: true,
            });
        }
        if let Some(i) = invoice {
            self.apply_stripe_events(&i).await?;
        }
        Ok(WebhookOutcome {
            event: event.id.to_string(),
            duplicate: false,
        })
    }

    #[tracing::instrument(skip(self))]
    async fn stripe_invoice_views(&self, limit: i64) -> Result<Vec<StripeInvoiceView>> {
        let Some(link) = self.stripe_link() else {
            return Ok(Vec::new());
        };
        let ours = sqlx::query!(
            r#"SELECT id, stripe_invoice_id AS "stripe_invoice_id!" FROM invoices
               WHERE stripe_invoice_id IS NOT NULL AND status <> 'draft'
               ORDER BY finalized_at DESC, id LIMIT $1"#,
            limit
        )
        .fetch_all(self.pool())
        .await?;
        let mut views = Vec::with_capacity(ours.len());
        for row in ours {
            let req = stripe_billing::invoice::RetrieveInvoice::new(row.stripe_invoice_id.as_str());
            match with_retries("retrieve invoice", || req.send(link.client())).await {
                Ok(theirs) => {
                    let t = &theirs.status_transitions;
                    views.push(StripeInvoiceView {
                        invoice: row.id,
                        stripe_invoice: row.stripe_invoice_id,
                        total_minor: theirs.total,
                        status: theirs.status.as_ref().map(|s| s.as_str().to_string()),
                        changed_at: [
                            t.finalized_at,
                            t.paid_at,
                            t.voided_at,
                            t.marked_uncollectible_at,
                        ]
                        .into_iter()
                        .flatten()
                        .max(),
                    });
                }
                Err(e) => {
                    // Stripe is failing: the rest waits for the next run rather than holding
                    // the run (and its lock) through a timeout per invoice.
                    tracing::warn!(stripe.invoice = %row.stripe_invoice_id, error = %e, "reconciliation: Stripe not asked about invoices this run");
                    break;
                }
            }
        }
        Ok(views)
    }

    async fn apply_stripe_events(&self, stripe_invoice: &str) -> Result<usize> {
        let mut tx = self.pool().begin().await?;
        let Some(inv) = sqlx::query_as!(
            LinkedInvoice,
            r#"SELECT id, tenant_id AS "tenant: TenantId", number AS "number!", status, currency,
                      total_minor, credit_applied_minor,
                      (SELECT coalesce(sum(amount_minor), 0) FROM credit_notes n WHERE n.invoice_id = i.id)::bigint AS "noted!"
               FROM invoices i WHERE stripe_invoice_id = $1 FOR UPDATE"#,
            stripe_invoice
        )
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(0); // Not linked yet: the sync applies them once it is.
        };
        let events = sqlx::query!(
            "SELECT id, type, created, payload FROM stripe_events
             WHERE stripe_invoice_id = $1 AND processed_at IS NULL ORDER BY created, received_at FOR UPDATE",
            stripe_invoice
        )
        .fetch_all(&mut *tx)
        .await?;
        let mut status = inv.status.clone();
        let applied = events.len();
        for e in events {
            let obj = &e.payload["data"]["object"];
            let (moved, outcome) = match (e.r#type.as_str(), status.as_str()) {
                ("invoice.paid", "open" | "uncollectible") => {
                    paid(&mut tx, &inv, &status, obj, e.created).await?
                }
                ("invoice.payment_failed", "open") => {
                    payment_failed(&mut tx, &inv, obj, e.created).await?
                }
                ("invoice.voided", "open" | "uncollectible") => {
                    voided(&mut tx, &inv, &status).await?
                }
                ("invoice.marked_uncollectible", "open") => uncollectible(&mut tx, &inv).await?,
                (t, s) => (None, format!("ignored: {t} on an invoice that is {s}")),
            };
            if let Some(moved) = moved {
                status = moved.into();
            }
            sqlx::query!(
                "UPDATE stripe_events SET processed_at = now(), outcome = $2 WHERE id = $1",
                e.id,
                outcome
            )
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(applied)
    }
}

/// An invoice linked to Stripe, locked while its events apply; `noted` is what its credit
/// notes took off.
struct LinkedInvoice {
    id: uuid::Uuid,
    tenant: TenantId,
    number: String,
    status: String,
    currency: String,
    total_minor: i64,
    credit_applied_minor: i64,
    noted: i64,
}

/// What an event did: the invoice's new status, if it moved, and the line kept with the event.
type Applied = (Option<&'static str>, String);

impl LinkedInvoice {
    /// What is still owed on it, in micros.
    fn due(&self) -> i64 {
        Micros::from_minor(self.total_minor - self.noted).0
    }

    /// A ledger entry about this invoice.
    fn entry(&self, kind: &'static str, memo: String) -> Entry<'_> {
        Entry {
            kind,
            tenant: Some(self.tenant),
            currency: &self.currency,
            invoice: Some(self.id),
            memo,
            by: None,
        }
    }
}

/// Paid through Stripe: the cash comes from the receivable (or from bad debt, if it had been
/// written off).
async fn paid(
    conn: &mut PgConnection,
    inv: &LinkedInvoice,
    status: &str,
    obj: &serde_json::Value,
    at: time::OffsetDateTime,
) -> Result<Applied> {
    let paid = Micros::from_minor(obj["amount_paid"].as_i64().unwrap_or(inv.total_minor)).0;
    let from = if status == "open" {
        Account::Receivable(inv.tenant)
    } else {
        Account::BadDebt
    };
    if paid > 0 {
        post(
            &mut *conn,
            inv.entry("payment", format!("{}: paid through Stripe", inv.number)),
            &[(Account::Cash, paid), (from, -paid)],
        )
        .await?;
    }
    sqlx::query!(
        "UPDATE invoices SET status = 'paid', paid_at = $2, stripe_status = 'paid' WHERE id = $1",
        inv.id,
        at
    )
    .execute(&mut *conn)
    .await?;
    Ok((Some("paid"), "applied: paid".into()))
}

/// A payment attempt failed: the invoice stays open, and says why.
async fn payment_failed(
    conn: &mut PgConnection,
    inv: &LinkedInvoice,
    obj: &serde_json::Value,
    at: time::OffsetDateTime,
) -> Result<Applied> {
    let attempts = obj["attempt_count"].as_i64().unwrap_or(1);
    let why = obj["last_finalization_error"]["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("payment attempt {attempts} failed"));
    sqlx::query!(
        "UPDATE invoices SET payment_failed_at = $2, payment_error = left($3, 500) WHERE id = $1",
        inv.id,
        at,
        why
    )
    .execute(&mut *conn)
    .await?;
    Ok((None, "applied: payment failed".into()))
}

/// Voided: its charges reversed and the credit it used restored.
async fn voided(conn: &mut PgConnection, inv: &LinkedInvoice, status: &str) -> Result<Applied> {
    let due = inv.due();
    let applied_credit = Micros::from_minor(inv.credit_applied_minor).0;
    let from = if status == "open" {
        Account::Receivable(inv.tenant)
    } else {
        Account::BadDebt
    };
    let mut postings = vec![(Account::Revenue, due + applied_credit)];
    if due != 0 {
        postings.push((from, -due));
    }
    if applied_credit != 0 {
        postings.push((Account::Prepaid(inv.tenant), -applied_credit));
    }
    if postings.len() > 1 {
        post(
            &mut *conn,
            inv.entry(
                "void",
                format!("{}: voided; charges reversed, credit restored", inv.number),
            ),
            &postings,
        )
        .await?;
    }
    sqlx::query!(
        "UPDATE invoices SET status = 'void', stripe_status = 'void' WHERE id = $1",
        inv.id
    )
    .execute(&mut *conn)
    .await?;
    Ok((Some("void"), "applied: void".into()))
}

/// Marked uncollectible: what is owed moves to bad debt.
async fn uncollectible(conn: &mut PgConnection, inv: &LinkedInvoice) -> Result<Applied> {
    let due = inv.due();
    if due != 0 {
        post(
            &mut *conn,
            inv.entry(
                "uncollectible",
                format!("{}: marked uncollectible", inv.number),
            ),
            &[
                (Account::BadDebt, due),
                (Account::Receivable(inv.tenant), -due),
            ],
        )
        .await?;
    }
    sqlx::query!(
        "UPDATE invoices SET status = 'uncollectible', stripe_status = 'uncollectible' WHERE id = $1",
        inv.id
    )
    .execute(&mut *conn)
    .await?;
    Ok((Some("uncollectible"), "applied: uncollectible".into()))
}

/// What the other areas of this crate use of it, behind no proof: never for the pages or the API.
#[allow(async_fn_in_trait)]
pub(crate) trait StripeInternal {
    fn stripe(&self) -> Result<&StripeLink>;
}

impl StripeInternal for ControlPlane {
    fn stripe(&self) -> Result<&StripeLink> {
        self.stripe_link()
            .ok_or_else(|| Error::Corrupt("Stripe is not configured".into()))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WebhookOutcome {
    pub event: String,
    pub duplicate: bool,
}

/// `evt_…`, as `stripe_events.id`'s CHECK has it.
fn is_event_id(id: &str) -> bool {
    id.strip_prefix("evt_").is_some_and(|rest| {
        (1..=200).contains(&rest.len())
            && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
}
