//! Invoices, prepaid credit and credit notes.
//!
//! A month is closed once it is over and every interval that ran in it is rated through its
//! end: per tenant and currency, one invoice with a line per project × SKU × price (GPU-hours,
//! the unit price per GPU-hour, the amount), prepaid credit applied first as its own line, the
//! amounts rounded to cents per line (half away from zero), then numbered and finalised in the
//! same transaction, which also posts the rounding difference and the credit applied and
//! queues the Stripe sync. From then on the database refuses any change to its number, amounts
//! or lines, and any charge rated into its month.

use serde_json::json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::Micros;
use crate::ControlPlane;
use crate::audit::{self, Actor, AuditEntry};
use crate::auth::{Platform, PlatformRequirement};
use crate::error::{Error, Result};
use crate::ids::{TenantId, UserId};
use crate::policy::Money;

/// Platform admins and platform finance: who grants credit and issues credit notes.
pub struct PlatformFinance;
impl PlatformRequirement for PlatformFinance {
    const ROLES: &'static [crate::auth::PlatformRole] = &[
        crate::auth::PlatformRole::Admin,
        crate::auth::PlatformRole::Finance,
    ];
    const WHO: &'static str = "platform finance";
}

/// One invoice the close produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Closed {
    pub invoice: Uuid,
    pub tenant: TenantId,
    pub number: String,
    pub total_minor: i64,
}

/// Closes every month that ended before `now` (looking back three months) and is fully
/// rated: builds, finalises and queues each (tenant, month, currency) invoice that doesn't
/// exist yet. Idempotent. An older month left open (the worker was down for a quarter) is
/// closed with [`close_month`] by hand.
#[tracing::instrument(skip(pool))]
pub async fn close_months(pool: &PgPool, now: time::OffsetDateTime) -> Result<Vec<Closed>> {
    // One index probe per (tenant, currency, month): tenants with rated usage have a
    // receivable account in its currency; a month is due when it has charges and no invoice.
    let due = sqlx::query!(
        r#"SELECT a.tenant_id AS "tenant!: TenantId", a.currency,
                  (m.month AT TIME ZONE 'UTC')::date AS "month!"
           FROM ledger_accounts a
           CROSS JOIN generate_series(date_trunc('month', $1::timestamptz, 'UTC') - interval '3 months',
                                      date_trunc('month', $1::timestamptz, 'UTC') - interval '1 month',
                                      interval '1 month') AS m(month)
           WHERE a.kind = 'tenant_receivable'
             AND EXISTS (SELECT 1 FROM usage_charges c
                         WHERE c.tenant_id = a.tenant_id AND c.currency = a.currency
                           AND c.period_start >= m.month AND c.period_start < m.month + interval '1 month')
             AND NOT EXISTS (SELECT 1 FROM invoices i
                             WHERE i.tenant_id = a.tenant_id AND i.currency = a.currency
                               AND i.month = (m.month AT TIME ZONE 'UTC')::date)
           ORDER BY 3, 1"#,
        now
    )
    .fetch_all(pool)
    .await?;
    let mut closed = Vec::new();
    for d in due {
        if let Some(c) = close_month(pool, d.tenant, d.month, &d.currency).await? {
            closed.push(c);
        }
    }
    Ok(closed)
}

/// Builds and finalises one tenant's invoice for `month` (its first day) in `currency`.
/// `None` when the month is already invoiced, or not fully rated yet.
#[tracing::instrument(skip(pool), fields(tenant.id = %tenant, invoice.month = %month))]
pub async fn close_month(
    pool: &PgPool,
    tenant: TenantId,
    month: time::Date,
    currency: &str,
) -> Result<Option<Closed>> {
    let mut tx = pool.begin().await?;
    // One closer per tenant at a time; the unique (tenant, month, currency) is the backstop.
    sqlx::query!(
        "SELECT 1 AS one FROM tenants WHERE id = $1 FOR UPDATE",
        tenant as TenantId
    )
    .fetch_one(&mut *tx)
    .await?;
    let exists = sqlx::query_scalar!(
        "SELECT id FROM invoices WHERE tenant_id = $1 AND month = $2 AND currency = $3",
        tenant as TenantId,
        month,
        currency
    )
    .fetch_optional(&mut *tx)
    .await?;
    if exists.is_some() {
        return Ok(None);
    }
    let unrated = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM usage_intervals
           WHERE tenant_id = $1 AND currency = $3 AND NOT fully_rated
             AND started_at < ($2::date + interval '1 month')::date::timestamp AT TIME ZONE 'UTC'
             AND coalesce(rated_until, started_at)
                 < least(coalesce(ended_at, 'infinity'),
                         ($2::date + interval '1 month')::date::timestamp AT TIME ZONE 'UTC')"#,
        tenant as TenantId,
        month,
        currency
    )
    .fetch_one(&mut *tx)
    .await?;
    if unrated > 0 {
        tracing::info!(
            intervals = unrated,
            "month not fully rated yet; invoice waits"
        );
        return Ok(None);
    }

    let lines = sqlx::query!(
        r#"SELECT c.project_id, p.slug AS project, c.sku_id, s.name AS sku,
                  c.gpu_count, c.price_per_hour_minor,
                  sum(c.rated_us * c.gpu_count)::bigint AS "gpu_us!",
                  sum(c.amount_micro)::bigint AS "rated_micro!"
           FROM usage_charges c
           JOIN projects p ON p.id = c.project_id
           JOIN skus s ON s.id = c.sku_id
           WHERE c.tenant_id = $1 AND c.currency = $3
             AND c.period_start >= $2::date::timestamp AT TIME ZONE 'UTC'
             AND c.period_start < ($2::date + interval '1 month')::date::timestamp AT TIME ZONE 'UTC'
           GROUP BY c.project_id, p.slug, c.sku_id, s.name, c.gpu_count, c.price_per_hour_minor
           ORDER BY p.slug, s.name, c.price_per_hour_minor"#,
        tenant as TenantId,
        month,
        currency
    )
    .fetch_all(&mut *tx)
    .await?;
    let fees = sqlx::query!(
        r#"SELECT f.project_id, p.slug AS project, f.listing_version_id, l.name AS listing,
                  v.version, f.fee_per_hour_minor,
                  sum(f.rated_us)::bigint AS "run_us!",
                  sum(f.amount_micro)::bigint AS "rated_micro!"
           FROM fee_charges f
           JOIN projects p ON p.id = f.project_id
           JOIN listing_versions v ON v.id = f.listing_version_id
           JOIN listings l ON l.id = v.listing_id
           WHERE f.tenant_id = $1 AND f.currency = $3
             AND f.period_start >= $2::date::timestamp AT TIME ZONE 'UTC'
             AND f.period_start < ($2::date + interval '1 month')::date::timestamp AT TIME ZONE 'UTC'
           GROUP BY f.project_id, p.slug, f.listing_version_id, l.name, v.version, f.fee_per_hour_minor
           ORDER BY p.slug, l.name, v.version, f.fee_per_hour_minor"#,
        tenant as TenantId,
        month,
        currency
    )
    .fetch_all(&mut *tx)
    .await?;
    if lines.is_empty() && fees.is_empty() {
        return Ok(None);
    }

    let invoice = Uuid::new_v4();
    let mut subtotal = 0i64;
    let mut rated = 0i64;
    let mut rows = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let amount = Micros(l.rated_micro).round_to_minor();
        subtotal += amount;
        rated += l.rated_micro;
        let unit_micro = l.price_per_hour_minor * Micros::PER_MINOR / l.gpu_count as i64;
        let description = format!(
            "{} · {} · {} GPU-hours at {} {currency}/GPU-hour",
            l.project,
            l.sku,
            super::gpu_hours(l.gpu_us),
            unit_price(unit_micro),
        );
        rows.push((i as i32 + 1, l, description, unit_micro, amount));
    }
    // Marketplace fees: their own lines, per project, listing version and fee.
    let mut fee_rows = Vec::new();
    for (i, f) in fees.iter().enumerate() {
        let amount = Micros(f.rated_micro).round_to_minor();
        subtotal += amount;
        rated += f.rated_micro;
        let unit_micro = f.fee_per_hour_minor * Micros::PER_MINOR;
        let description = format!(
            "{} · {} {} marketplace fee · {} hours at {} {currency}/hour",
            f.project,
            f.listing,
            f.version,
            super::gpu_hours(f.run_us),
            unit_price(unit_micro),
        );
        fee_rows.push((
            (rows.len() + i) as i32 + 1,
            f,
            description,
            unit_micro,
            amount,
        ));
    }
    // Prepaid credit first: what the tenant holds, up to the subtotal.
    let credit = credit_balance_on(&mut tx, tenant, currency).await?;
    let applied = credit.min(subtotal).max(0);

    sqlx::query!(
        "INSERT INTO invoices (id, tenant_id, month, currency, subtotal_minor, credit_applied_minor, total_minor)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        invoice,
        tenant as TenantId,
        month,
        currency,
        subtotal,
        applied,
        subtotal - applied
    )
    .execute(&mut *tx)
    .await?;
    for (no, l, description, unit_micro, amount) in &rows {
        sqlx::query!(
            "INSERT INTO invoice_lines (invoice_id, line_no, kind, project_id, sku_id, description,
                                        gpu_us, unit_price_micro, rated_micro, amount_minor)
             VALUES ($1, $2, 'usage', $3, $4, $5, $6, $7, $8, $9)",
            invoice,
            no,
            l.project_id,
            l.sku_id,
            description,
            l.gpu_us,
            unit_micro,
            l.rated_micro,
            amount
        )
        .execute(&mut *tx)
        .await?;
    }
    for (no, f, description, unit_micro, amount) in &fee_rows {
        sqlx::query!(
            "INSERT INTO invoice_lines (invoice_id, line_no, kind, project_id, listing_version_id,
                                        description, run_us, unit_price_micro, rated_micro, amount_minor)
             VALUES ($1, $2, 'fee', $3, $4, $5, $6, $7, $8, $9)",
            invoice,
            no,
            f.project_id,
            f.listing_version_id,
            description,
            f.run_us,
            unit_micro,
            f.rated_micro,
            amount
        )
        .execute(&mut *tx)
        .await?;
    }
    if applied > 0 {
        sqlx::query!(
            "INSERT INTO invoice_lines (invoice_id, line_no, kind, description, amount_minor)
             VALUES ($1, $2, 'credit', 'Prepaid credit applied', $3)",
            invoice,
            (rows.len() + fee_rows.len()) as i32 + 1,
            -applied
        )
        .execute(&mut *tx)
        .await?;
    }

    // Finalise: number, status, and the ledger entries that make it agree to the cent.
    let number = sqlx::query_scalar!(
        r#"UPDATE invoices
           SET status = 'open', finalized_at = now(),
               number = 'GPU-' || to_char(month, 'YYYYMM') || '-' || lpad(nextval('invoice_numbers')::text, 4, '0')
           WHERE id = $1 RETURNING number AS "number!""#,
        invoice
    )
    .fetch_one(&mut *tx)
    .await?;
    let rounding = Micros::from_minor(subtotal).0 - rated;
    if rounding != 0 {
        post(
            &mut tx,
            Entry {
                kind: "invoice_rounding",
                tenant: Some(tenant),
                currency,
                invoice: Some(invoice),
                memo: format!("{number}: rounding rated usage to cents, per line"),
                by: None,
            },
            &[
                (Account::Receivable(tenant), rounding),
                (Account::Revenue, -rounding),
            ],
        )
        .await?;
    }
    if applied > 0 {
        let m = Micros::from_minor(applied).0;
        post(
            &mut tx,
            Entry {
                kind: "credit_applied",
                tenant: Some(tenant),
                currency,
                invoice: Some(invoice),
                memo: format!("{number}: prepaid credit applied"),
                by: None,
            },
            &[
                (Account::Prepaid(tenant), m),
                (Account::Receivable(tenant), -m),
            ],
        )
        .await?;
    }
    sqlx::query!(
        "INSERT INTO billing_outbox (kind, invoice_id) VALUES ('stripe.invoice', $1)",
        invoice
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    tracing::info!(invoice.number = %number, invoice.total = subtotal - applied, "invoice finalised");
    Ok(Some(Closed {
        invoice,
        tenant,
        number,
        total_minor: subtotal - applied,
    }))
}

/// `2.500000` from micro-units.
fn unit_price(micro: i64) -> String {
    let m = Micros(micro).to_string();
    // Two decimals when exact (the usual case), all six otherwise.
    match m.strip_suffix("0000") {
        Some(short) => short.to_string(),
        None => m,
    }
}

/// A ledger account, by role.
#[derive(Clone, Copy, Debug)]
pub enum Account {
    Receivable(TenantId),
    Prepaid(TenantId),
    Revenue,
    CreditsGranted,
    Cash,
    BadDebt,
}

impl Account {
    fn kind_owner(self) -> (&'static str, Option<Uuid>) {
        match self {
            Account::Receivable(t) => ("tenant_receivable", Some(t.0)),
            Account::Prepaid(t) => ("prepaid_credit", Some(t.0)),
            Account::Revenue => ("platform_revenue", None),
            Account::CreditsGranted => ("credits_granted", None),
            Account::Cash => ("cash", None),
            Account::BadDebt => ("bad_debt", None),
        }
    }
}

pub struct Entry<'a> {
    pub kind: &'static str,
    pub tenant: Option<TenantId>,
    pub currency: &'a str,
    pub invoice: Option<Uuid>,
    pub memo: String,
    pub by: Option<UserId>,
}

/// Posts one journal entry. Its postings (micro-units, debits positive) must balance; the
/// database checks at commit.
pub async fn post(
    conn: &mut PgConnection,
    entry: Entry<'_>,
    postings: &[(Account, i64)],
) -> Result<i64> {
    let id = sqlx::query_scalar!(
        "INSERT INTO journal_entries (kind, tenant_id, currency, invoice_id, memo, created_by)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        entry.kind,
        entry.tenant.map(|t| t.0),
        entry.currency,
        entry.invoice,
        entry.memo,
        entry.by.map(|u| u.0)
    )
    .fetch_one(&mut *conn)
    .await?;
    for (account, amount) in postings {
        let (kind, owner) = account.kind_owner();
        sqlx::query!(
            "INSERT INTO postings (entry_id, account_id, amount_micro)
             VALUES ($1, ledger_account($2, $3, $4), $5)",
            id,
            kind,
            owner,
            entry.currency,
            amount
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(id)
}

/// Prepaid credit the tenant holds, in whole cents.
pub async fn credit_balance_on(
    conn: &mut PgConnection,
    tenant: TenantId,
    currency: &str,
) -> Result<i64> {
    let micro = sqlx::query_scalar!(
        r#"SELECT coalesce(-sum(p.amount_micro), 0)::bigint AS "balance!"
           FROM postings p JOIN ledger_accounts a ON a.id = p.account_id
           WHERE a.kind = 'prepaid_credit' AND a.tenant_id = $1 AND a.currency = $2"#,
        tenant as TenantId,
        currency
    )
    .fetch_one(conn)
    .await?;
    Ok(micro.div_euclid(Micros::PER_MINOR))
}

impl ControlPlane {
    /// Grants prepaid credit to a tenant (audited). Applied to its next invoices first.
    #[tracing::instrument(skip_all, fields(tenant.id = %tenant))]
    pub async fn grant_credit(
        &self,
        who: &Platform<PlatformFinance>,
        tenant: TenantId,
        amount: &str,
        reason: &str,
        request_id: Option<&str>,
    ) -> Result<Money> {
        let amount = Money::parse_as("amount", amount)?;
        if amount.amount_minor <= 0 {
            return Err(Error::Invalid {
                field: "amount",
                reason: "a credit grant must be more than zero".into(),
            });
        }
        let reason = reason.trim();
        if reason.is_empty() || reason.len() > 500 {
            return Err(Error::Invalid {
                field: "reason",
                reason: "say why the credit is granted (1 to 500 characters)".into(),
            });
        }
        let mut tx = self.pool().begin().await?;
        let slug =
            sqlx::query_scalar!("SELECT slug FROM tenants WHERE id = $1", tenant as TenantId)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or(Error::NotFound {
                    what: "organization",
                })?;
        let by = who.principal().user_id;
        let m = Micros::from_minor(amount.amount_minor).0;
        let entry = post(
            &mut tx,
            Entry {
                kind: "credit_grant",
                tenant: Some(tenant),
                currency: &amount.currency,
                invoice: None,
                memo: format!("credit granted: {reason}"),
                by: Some(by),
            },
            &[(Account::CreditsGranted, m), (Account::Prepaid(tenant), -m)],
        )
        .await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(by),
                action: "billing.credit_grant",
                resource: &self.naming().tenant(tenant),
                before: None,
                after: Some(json!({
                    "tenant": slug, "amount": amount.to_string(), "reason": reason, "entry": entry,
                })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(amount)
    }

    /// Issues a credit note against a finalised invoice (audited): revenue is reversed for
    /// `amount`, and the tenant owes that much less. Never more than the invoice's total.
    #[tracing::instrument(skip_all, fields(invoice.id = %invoice))]
    pub async fn issue_credit_note(
        &self,
        who: &Platform<PlatformFinance>,
        invoice: Uuid,
        amount: &str,
        reason: &str,
        request_id: Option<&str>,
    ) -> Result<Money> {
        let mut tx = self.pool().begin().await?;
        let inv = sqlx::query!(
            r#"SELECT tenant_id AS "tenant: TenantId", currency, number, status, total_minor,
                      (SELECT coalesce(sum(amount_minor), 0) FROM credit_notes n WHERE n.invoice_id = i.id)::bigint AS "noted!"
               FROM invoices i WHERE id = $1 FOR UPDATE"#,
            invoice
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "invoice" })?;
        let amount = Money::parse_as("amount", amount)?;
        if amount.currency != inv.currency {
            return Err(Error::Invalid {
                field: "amount",
                reason: format!(
                    "the invoice is in {}, not {}",
                    inv.currency, amount.currency
                ),
            });
        }
        let room = inv.total_minor - inv.noted;
        if amount.amount_minor <= 0 || amount.amount_minor > room {
            return Err(Error::Invalid {
                field: "amount",
                reason: format!(
                    "a credit note on {} can be between 0.01 and {} (its total less earlier credit notes)",
                    inv.number.as_deref().unwrap_or("this invoice"),
                    Money {
                        amount_minor: room,
                        currency: inv.currency.clone()
                    }
                ),
            });
        }
        if !matches!(inv.status.as_str(), "open" | "paid") {
            return Err(Error::Conflict(format!(
                "invoice {} is {}; credit notes are for open or paid invoices",
                inv.number.as_deref().unwrap_or("(draft)"),
                inv.status
            )));
        }
        let reason = reason.trim();
        if reason.is_empty() || reason.len() > 500 {
            return Err(Error::Invalid {
                field: "reason",
                reason: "say why (1 to 500 characters)".into(),
            });
        }
        let by = who.principal().user_id;
        let number = inv.number.clone().unwrap_or_default();
        let m = Micros::from_minor(amount.amount_minor).0;
        let entry = post(
            &mut tx,
            Entry {
                kind: "credit_note",
                tenant: Some(inv.tenant),
                currency: &inv.currency,
                invoice: Some(invoice),
                memo: format!("{number}: credit note: {reason}"),
                by: Some(by),
            },
            &[(Account::Revenue, m), (Account::Receivable(inv.tenant), -m)],
        )
        .await?;
        let note = Uuid::new_v4();
        sqlx::query!(
            "INSERT INTO credit_notes (id, invoice_id, amount_minor, reason, entry_id, created_by)
             VALUES ($1, $2, $3, $4, $5, $6)",
            note,
            invoice,
            amount.amount_minor,
            reason,
            entry,
            by.0
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!(
            "INSERT INTO billing_outbox (kind, invoice_id, credit_note_id) VALUES ('stripe.credit_note', $1, $2)",
            invoice,
            note
        )
        .execute(&mut *tx)
        .await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(by),
                action: "billing.credit_note",
                resource: &self.naming().tenant(inv.tenant),
                before: None,
                after: Some(
                    json!({ "invoice": number, "amount": amount.to_string(), "reason": reason }),
                ),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(amount)
    }
}
