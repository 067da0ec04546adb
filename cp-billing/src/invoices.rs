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
use sqlx::PgConnection;
use uuid::Uuid;

use super::Micros;
use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{InvoiceId, TenantId, UserId};
use cp_identity::auth::{Platform, PlatformRequirement};
use portal_types::Money;

/// Platform admins and platform finance: who grants credit and issues credit notes.
pub struct PlatformFinance;
impl PlatformRequirement for PlatformFinance {
    const ROLES: &'static [cp_identity::auth::PlatformRole] = &[
        cp_identity::auth::PlatformRole::Admin,
        cp_identity::auth::PlatformRole::Finance,
    ];
    const WHO: &'static str = "platform finance";
}

/// One invoice the close produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Closed {
    pub invoice: InvoiceId,
    pub tenant: TenantId,
    pub number: String,
    pub total_minor: i64,
}

/// Closes every month that ended before `now` (looking back three months) and is fully
/// rated: builds, finalises and queues each (tenant, month, currency) invoice that doesn't
/// exist yet. Idempotent. An older month left open (the worker was down for a quarter) is
/// closed with [`close_month`] by hand.
#[tracing::instrument(skip(pool))]
pub async fn close_months(
    pool: &cp_base::pool::Db,
    now: time::OffsetDateTime,
) -> Result<Vec<Closed>> {
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
             AND (EXISTS (SELECT 1 FROM usage_charges c
                          WHERE c.tenant_id = a.tenant_id AND c.currency = a.currency
                            AND c.period_start >= m.month AND c.period_start < m.month + interval '1 month')
                  OR EXISTS (SELECT 1 FROM storage_charges c
                             WHERE c.tenant_id = a.tenant_id AND c.currency = a.currency
                               AND c.period_start >= m.month AND c.period_start < m.month + interval '1 month'))
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
    pool: &cp_base::pool::Db,
    tenant: TenantId,
    month: time::Date,
    currency: &str,
) -> Result<Option<Closed>> {
    let mut tx = pool.begin().await?;
    if !ready_to_close(&mut tx, tenant, month, currency).await? {
        return Ok(None);
    }
    let charges = month_charges(&mut tx, tenant, month, currency).await?;
    if charges.is_empty() {
        return Ok(None);
    }
    // Prepaid credit first: what the tenant holds, up to the subtotal.
    let credit = credit_balance_on(&mut tx, tenant, currency).await?;
    let draft = draft(&charges, credit, currency);
    let invoice = write_invoice(&mut tx, tenant, month, currency, &draft, &charges).await?;
    let number = finalise(&mut tx, tenant, currency, invoice, &draft).await?;
    tx.commit().await?;
    let total_minor = draft.subtotal_minor - draft.credit_applied_minor;
    tracing::info!(invoice.number = %number, invoice.total = total_minor, "invoice finalised");
    Ok(Some(Closed {
        invoice: InvoiceId(invoice),
        tenant,
        number,
        total_minor,
    }))
}

/// Takes the tenant's closing lock (one closer per tenant at a time; the unique (tenant,
/// month, currency) is the backstop), then says whether the month may close: not invoiced
/// yet, and every interval in it rated.
async fn ready_to_close(
    conn: &mut PgConnection,
    tenant: TenantId,
    month: time::Date,
    currency: &str,
) -> Result<bool> {
    sqlx::query!(
        "SELECT 1 AS one FROM tenants WHERE id = $1 FOR UPDATE",
        tenant as TenantId
    )
    .fetch_one(&mut *conn)
    .await?;
    let exists = sqlx::query_scalar!(
        "SELECT id FROM invoices WHERE tenant_id = $1 AND month = $2 AND currency = $3",
        tenant as TenantId,
        month,
        currency
    )
    .fetch_optional(&mut *conn)
    .await?;
    if exists.is_some() {
        return Ok(false);
    }
    // Compute and storage both: a month closes once every meter that ran in it is rated.
    let unrated = sqlx::query!(
        r#"WITH bounds AS (
               SELECT ($2::date + interval '1 month')::date::timestamp AT TIME ZONE 'UTC' AS month_end
           )
           SELECT (SELECT count(*) FROM usage_intervals, bounds
                   WHERE tenant_id = $1 AND currency = $3 AND NOT fully_rated
                     AND started_at < month_end
                     AND coalesce(rated_until, started_at) < least(coalesce(ended_at, 'infinity'), month_end))
                  AS "usage!",
                  (SELECT count(*) FROM storage_intervals, bounds
                   WHERE tenant_id = $1 AND currency = $3 AND NOT fully_rated
                     AND started_at < month_end
                     AND coalesce(rated_until, started_at) < least(coalesce(ended_at, 'infinity'), month_end))
                  AS "storage!""#,
        tenant as TenantId,
        month,
        currency
    )
    .fetch_one(&mut *conn)
    .await?;
    if unrated.usage + unrated.storage > 0 {
        tracing::info!(
            intervals = unrated.usage,
            storage_intervals = unrated.storage,
            "month not fully rated yet; invoice waits"
        );
        return Ok(false);
    }
    Ok(true)
}

/// The month's usage charges per project × SKU × price, its listing fees per project ×
/// version × fee, and its storage per project × region × price, summed.
async fn month_charges(
    conn: &mut PgConnection,
    tenant: TenantId,
    month: time::Date,
    currency: &str,
) -> Result<MonthCharges> {
    let lines = sqlx::query!(
        r#"SELECT c.project_id, p.slug AS project, a.cluster_id AS "cluster_id?",
                  k.name AS "cluster?", k.size AS "cluster_size?", c.sku_id, s.name AS sku,
                  c.gpu_count, c.price_per_hour_minor,
                  sum(c.rated_us * c.gpu_count)::bigint AS "gpu_us!",
                  sum(c.amount_micro)::bigint AS "rated_micro!"
           FROM usage_charges c
           JOIN projects p ON p.id = c.project_id
           JOIN skus s ON s.id = c.sku_id
           JOIN allocations a ON a.id = c.allocation_id
           LEFT JOIN clusters k ON k.id = a.cluster_id
           WHERE c.tenant_id = $1 AND c.currency = $3
             AND c.period_start >= $2::date::timestamp AT TIME ZONE 'UTC'
             AND c.period_start < ($2::date + interval '1 month')::date::timestamp AT TIME ZONE 'UTC'
           GROUP BY c.project_id, p.slug, a.cluster_id, k.name, k.size, k.created_at, c.sku_id,
                    s.name, c.gpu_count, c.price_per_hour_minor
           ORDER BY p.slug, k.created_at NULLS FIRST, a.cluster_id, s.name, c.price_per_hour_minor"#,
        tenant as TenantId,
        month,
        currency
    )
    .fetch_all(&mut *conn)
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
    .fetch_all(&mut *conn)
    .await?;
    let usage: Vec<UsageSum> = lines
        .into_iter()
        .map(|l| UsageSum {
            project_id: l.project_id,
            project: l.project,
            cluster: l
                .cluster_id
                .zip(l.cluster)
                .zip(l.cluster_size)
                .map(|((id, name), size)| ClusterOf { id, name, size }),
            sku_id: l.sku_id,
            sku: l.sku,
            gpu_count: l.gpu_count,
            price_per_hour_minor: l.price_per_hour_minor,
            gpu_us: l.gpu_us,
            rated_micro: l.rated_micro,
        })
        .collect();
    let fees = fees
        .into_iter()
        .map(|f| FeeSum {
            project_id: f.project_id,
            project: f.project,
            listing_version_id: f.listing_version_id,
            listing: f.listing,
            version: f.version,
            fee_per_hour_minor: f.fee_per_hour_minor,
            run_us: f.run_us,
            rated_micro: f.rated_micro,
        })
        .collect();
    let storage = sqlx::query_as!(
        StorageSum,
        r#"SELECT c.project_id, p.slug AS project, c.region, c.price_per_gib_month_micro,
                  c.snapshot_id IS NOT NULL AS "snapshots!",
                  sum(c.rated_us * c.size_gib)::bigint AS "gib_us!",
                  sum(c.amount_micro)::bigint AS "rated_micro!"
           FROM storage_charges c
           JOIN projects p ON p.id = c.project_id
           WHERE c.tenant_id = $1 AND c.currency = $3
             AND c.period_start >= $2::date::timestamp AT TIME ZONE 'UTC'
             AND c.period_start < ($2::date + interval '1 month')::date::timestamp AT TIME ZONE 'UTC'
           GROUP BY c.project_id, p.slug, c.region, c.price_per_gib_month_micro, 5
           ORDER BY p.slug, c.region, 5, c.price_per_gib_month_micro"#,
        tenant as TenantId,
        month,
        currency
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(MonthCharges {
        usage,
        fees,
        storage,
    })
}

/// The invoice and its lines, as drafted; returns its id.
async fn write_invoice(
    conn: &mut PgConnection,
    tenant: TenantId,
    month: time::Date,
    currency: &str,
    draft: &Draft,
    charges: &MonthCharges,
) -> Result<Uuid> {
    let invoice = Uuid::new_v4();
    sqlx::query!(
        "INSERT INTO invoices (id, tenant_id, month, currency, subtotal_minor, credit_applied_minor, total_minor)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        invoice,
        tenant as TenantId,
        month,
        currency,
        draft.subtotal_minor,
        draft.credit_applied_minor,
        draft.total_minor()
    )
    .execute(&mut *conn)
    .await?;
    for line in &draft.lines {
        let (usage, fee, storage) = match line.charge {
            Charge::Usage(i) => (Some(&charges.usage[i]), None, None),
            Charge::Fee(i) => (None, Some(&charges.fees[i]), None),
            Charge::Storage(i) => (None, None, Some(&charges.storage[i])),
            Charge::Credit => (None, None, None),
        };
        sqlx::query!(
            "INSERT INTO invoice_lines (invoice_id, line_no, kind, project_id, sku_id, listing_version_id,
                                        region, description, gpu_us, run_us, gib_us,
                                        unit_price_micro, rated_micro, amount_minor, storage_of,
                                        cluster_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
            invoice,
            line.line_no,
            line.charge.kind(),
            usage
                .map(|u| u.project_id)
                .or(fee.map(|f| f.project_id))
                .or(storage.map(|s| s.project_id)),
            usage.map(|u| u.sku_id),
            fee.map(|f| f.listing_version_id),
            storage.map(|s| s.region.as_str()),
            line.description,
            // What a line is not about is 0, as the columns' defaults say.
            usage.map_or(0, |u| u.gpu_us),
            fee.map_or(0, |f| f.run_us),
            storage.map_or(0, |s| s.gib_us),
            line.unit_price_micro.unwrap_or(0),
            usage
                .map(|u| u.rated_micro)
                .or(fee.map(|f| f.rated_micro))
                .or(storage.map(|s| s.rated_micro))
                .unwrap_or(0),
            line.amount_minor,
            storage.map(|s| if s.snapshots { "snapshots" } else { "volumes" }),
            usage.and_then(|u| u.cluster.as_ref()).map(|c| c.id),
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(invoice)
}

/// Finalises the invoice: its number and status, the ledger entries that make it agree to
/// the cent (rounding, credit applied), and the outbox row that syncs it to Stripe. Returns
/// its number.
async fn finalise(
    conn: &mut PgConnection,
    tenant: TenantId,
    currency: &str,
    invoice: Uuid,
    draft: &Draft,
) -> Result<String> {
    let number = sqlx::query_scalar!(
        r#"UPDATE invoices
           SET status = 'open', finalized_at = now(),
               number = 'GPU-' || to_char(month, 'YYYYMM') || '-' || lpad(nextval('invoice_numbers')::text, 4, '0')
           WHERE id = $1 RETURNING number AS "number!""#,
        invoice
    )
    .fetch_one(&mut *conn)
    .await?;
    let entry = |kind, memo: String| Entry {
        kind,
        tenant: Some(tenant),
        currency,
        invoice: Some(invoice),
        memo,
        by: None,
    };
    let rounding = draft.rounding_micro;
    if rounding != 0 {
        post(
            &mut *conn,
            entry(
                "invoice_rounding",
                format!("{number}: rounding rated usage to cents, per line"),
            ),
            &[
                (Account::Receivable(tenant), rounding),
                (Account::Revenue, -rounding),
            ],
        )
        .await?;
    }
    let applied = draft.credit_applied_minor;
    if applied > 0 {
        let m = Micros::from_minor(applied).0;
        post(
            &mut *conn,
            entry(
                "credit_applied",
                format!("{number}: prepaid credit applied"),
            ),
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
    .execute(&mut *conn)
    .await?;
    Ok(number)
}

/// One project × cluster × SKU × price of a month's usage charges, summed.
#[derive(Clone, Debug)]
pub(crate) struct UsageSum {
    pub project_id: uuid::Uuid,
    pub project: String,
    /// The cluster whose members ran it; none for lone instances.
    pub cluster: Option<ClusterOf>,
    pub sku_id: uuid::Uuid,
    pub sku: String,
    pub gpu_count: i32,
    pub price_per_hour_minor: i64,
    pub gpu_us: i64,
    pub rated_micro: i64,
}

/// The cluster a usage line is for, as the invoice names it.
#[derive(Clone, Debug)]
pub(crate) struct ClusterOf {
    pub id: uuid::Uuid,
    pub name: String,
    pub size: i32,
}

/// One project × listing version × fee of a month's marketplace fees, summed.
#[derive(Clone, Debug)]
pub(crate) struct FeeSum {
    pub project_id: uuid::Uuid,
    pub project: String,
    pub listing_version_id: uuid::Uuid,
    pub listing: String,
    pub version: String,
    pub fee_per_hour_minor: i64,
    pub run_us: i64,
    pub rated_micro: i64,
}

/// One project × region × price of a month's storage charges (volumes' or snapshots'), summed.
#[derive(Clone, Debug)]
pub(crate) struct StorageSum {
    pub project_id: uuid::Uuid,
    pub project: String,
    pub region: String,
    pub price_per_gib_month_micro: i64,
    /// Snapshots' storage, not volumes'.
    pub snapshots: bool,
    /// GiB × provisioned microseconds.
    pub gib_us: i64,
    pub rated_micro: i64,
}

/// A month's charges of one tenant in one currency, summed per line.
#[derive(Clone, Debug, Default)]
pub(crate) struct MonthCharges {
    pub usage: Vec<UsageSum>,
    pub fees: Vec<FeeSum>,
    pub storage: Vec<StorageSum>,
}

impl MonthCharges {
    fn is_empty(&self) -> bool {
        self.usage.is_empty() && self.fees.is_empty() && self.storage.is_empty()
    }
}

/// What an invoice line charges for: the index of its usage, fee or storage sum, or prepaid
/// credit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Charge {
    Usage(usize),
    Fee(usize),
    Storage(usize),
    Credit,
}

impl Charge {
    fn kind(self) -> &'static str {
        match self {
            Charge::Usage(_) => "usage",
            Charge::Fee(_) => "fee",
            Charge::Storage(_) => "storage",
            Charge::Credit => "credit",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DraftLine {
    pub line_no: i32,
    pub charge: Charge,
    pub description: String,
    pub unit_price_micro: Option<i64>,
    pub amount_minor: i64,
}

/// A month's invoice before it is written: its lines in order, the subtotal, the credit
/// applied, and the rounding the ledger posts so it agrees with the rated amounts to the cent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Draft {
    pub lines: Vec<DraftLine>,
    pub subtotal_minor: i64,
    pub credit_applied_minor: i64,
    /// Subtotal minus what was rated, in micro-units (each line rounded once).
    pub rounding_micro: i64,
}

impl Draft {
    pub fn total_minor(&self) -> i64 {
        self.subtotal_minor - self.credit_applied_minor
    }
}

/// Builds a month's invoice from its summed charges, as a pure function: a usage line per
/// project × cluster × SKU × price (a cluster's lines follow the project's lone instances') (GPU-hours at the price per GPU-hour), then a fee line per project ×
/// listing version × fee, then a storage line per project × region × price (GiB-hours at the
/// price per GiB-month), each amount rounded to cents once (halves away from zero), then
/// prepaid `credit` applied up to the subtotal as its own negative line.
pub(crate) fn draft(charges: &MonthCharges, credit: i64, currency: &str) -> Draft {
    let MonthCharges {
        usage,
        fees,
        storage,
    } = charges;
    let mut lines = Vec::with_capacity(usage.len() + fees.len() + storage.len() + 1);
    let mut rated = 0i64;
    for (i, l) in usage.iter().enumerate() {
        let unit_micro = l.price_per_hour_minor * Micros::PER_MINOR / l.gpu_count as i64;
        rated += l.rated_micro;
        lines.push(DraftLine {
            line_no: lines.len() as i32 + 1,
            charge: Charge::Usage(i),
            description: format!(
                "{} · {}{} · {} GPU-hours at {} {currency}/GPU-hour",
                l.project,
                l.cluster.as_ref().map_or(String::new(), |c| format!(
                    "cluster {} ({} nodes) · ",
                    c.name, c.size
                )),
                l.sku,
                super::gpu_hours(l.gpu_us),
                unit_price(unit_micro),
            ),
            unit_price_micro: Some(unit_micro),
            amount_minor: Micros(l.rated_micro).round_to_minor(),
        });
    }
    for (i, f) in fees.iter().enumerate() {
        let unit_micro = f.fee_per_hour_minor * Micros::PER_MINOR;
        rated += f.rated_micro;
        lines.push(DraftLine {
            line_no: lines.len() as i32 + 1,
            charge: Charge::Fee(i),
            description: format!(
                "{} · {} {} marketplace fee · {} hours at {} {currency}/hour",
                f.project,
                f.listing,
                f.version,
                super::gpu_hours(f.run_us),
                unit_price(unit_micro),
            ),
            unit_price_micro: Some(unit_micro),
            amount_minor: Micros(f.rated_micro).round_to_minor(),
        });
    }
    for (i, st) in storage.iter().enumerate() {
        rated += st.rated_micro;
        lines.push(DraftLine {
            line_no: lines.len() as i32 + 1,
            charge: Charge::Storage(i),
            description: format!(
                "{} · {} in {} · {} GiB-hours at {} {currency}/GiB-month",
                st.project,
                if st.snapshots {
                    "volume snapshots"
                } else {
                    "block storage"
                },
                st.region,
                super::gpu_hours(st.gib_us),
                unit_price(st.price_per_gib_month_micro),
            ),
            unit_price_micro: Some(st.price_per_gib_month_micro),
            amount_minor: Micros(st.rated_micro).round_to_minor(),
        });
    }
    let subtotal: i64 = lines.iter().map(|l| l.amount_minor).sum();
    let applied = credit.min(subtotal).max(0);
    if applied > 0 {
        lines.push(DraftLine {
            line_no: lines.len() as i32 + 1,
            charge: Charge::Credit,
            description: "Prepaid credit applied".into(),
            unit_price_micro: None,
            amount_minor: -applied,
        });
    }
    Draft {
        lines,
        subtotal_minor: subtotal,
        credit_applied_minor: applied,
        rounding_micro: Micros::from_minor(subtotal).0 - rated,
    }
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
        r#"SELECT micro AS "balance!" FROM credit_balance($1, $2)"#,
        tenant as TenantId,
        currency
    )
    .fetch_one(conn)
    .await?;
    Ok(micro.div_euclid(Micros::PER_MINOR))
}

/// What the control plane offers for invoices, credit and credit notes.
#[allow(async_fn_in_trait)]
pub trait InvoicesApi {
    /// Grants prepaid credit to a tenant (audited). Applied to its next invoices first.
    async fn grant_credit(
        &self,
        who: &Platform<PlatformFinance>,
        tenant: TenantId,
        amount: &str,
        reason: &str,
        request_id: Option<&str>,
    ) -> Result<Money>;

    /// Issues a credit note against a finalised invoice (audited): revenue is reversed for
    /// `amount`, and the tenant owes that much less. Never more than the invoice's total.
    async fn issue_credit_note(
        &self,
        who: &Platform<PlatformFinance>,
        invoice: InvoiceId,
        amount: &str,
        reason: &str,
        request_id: Option<&str>,
    ) -> Result<Money>;
}

impl InvoicesApi for ControlPlane {
    #[tracing::instrument(skip_all, fields(tenant.id = %tenant))]
    async fn grant_credit(
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

    #[tracing::instrument(skip_all, fields(invoice.id = %invoice))]
    async fn issue_credit_note(
        &self,
        who: &Platform<PlatformFinance>,
        invoice: InvoiceId,
        amount: &str,
        reason: &str,
        request_id: Option<&str>,
    ) -> Result<Money> {
        let invoice = invoice.0;
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
                        currency: inv.currency.clone().into()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(project: &str, sku: &str, gpus: i32, price: i64, hours_us: i64) -> UsageSum {
        let gpu_us = hours_us * gpus as i64;
        UsageSum {
            project_id: Uuid::nil(),
            project: project.into(),
            cluster: None,
            sku_id: Uuid::nil(),
            sku: sku.into(),
            gpu_count: gpus,
            price_per_hour_minor: price,
            gpu_us,
            rated_micro: super::super::cost_micros(price, hours_us).0,
        }
    }

    const HOUR: i64 = 3_600_000_000;

    fn only(usage: &[UsageSum]) -> MonthCharges {
        MonthCharges {
            usage: usage.to_vec(),
            ..MonthCharges::default()
        }
    }

    #[test]
    fn storage_is_a_line_per_project_region_and_price_in_gib_hours() {
        // 500 GiB for 730 hours at 0.10/GiB-month: exactly 50.00; 3 GiB for an hour at 0.085:
        // 0.000349… rounds to nothing on its own line, and the ledger gets the difference.
        let rated = |micro: i64, gib: i64, us: i64| {
            (micro as i128 * gib as i128 * us as i128 / 2_628_000_000_000) as i64
        };
        let c = MonthCharges {
            storage: vec![
                StorageSum {
                    project_id: Uuid::nil(),
                    project: "research".into(),
                    region: "eu-west-1".into(),
                    price_per_gib_month_micro: 100_000,
                    snapshots: false,
                    gib_us: 500 * 730 * HOUR,
                    rated_micro: rated(100_000, 500, 730 * HOUR),
                },
                StorageSum {
                    project_id: Uuid::nil(),
                    project: "research".into(),
                    region: "us-east-1".into(),
                    price_per_gib_month_micro: 85_000,
                    snapshots: false,
                    gib_us: 3 * HOUR,
                    rated_micro: rated(85_000, 3, HOUR),
                },
            ],
            ..only(&[usage("research", "h100.1x", 1, 298, HOUR)])
        };
        let d = draft(&c, 0, "USD");
        let amounts: Vec<i64> = d.lines.iter().map(|l| l.amount_minor).collect();
        assert_eq!(amounts, [298, 5_000, 0]);
        assert_eq!(d.lines[1].charge, Charge::Storage(0));
        assert_eq!(
            d.lines[1].description,
            "research · block storage in eu-west-1 · 365000.000000 GiB-hours at 0.10 USD/GiB-month"
        );
        assert_eq!(d.lines[2].unit_price_micro, Some(85_000));
        assert_eq!(d.rounding_micro, -rated(85_000, 3, HOUR));
    }

    #[test]
    fn each_line_is_rounded_once_and_the_ledger_gets_the_difference() {
        // 2 GPUs at 5.96/h for 1 h 0 min 0.5 s: 5.960828 rated, 5.96 billed.
        let u = [
            usage("research", "h100.2x", 2, 596, HOUR + 500_000),
            // 1 GPU at 2.98/h for 90 min: exactly 4.47.
            usage("research", "h100.1x", 1, 298, HOUR * 3 / 2),
        ];
        let f = [FeeSum {
            project_id: Uuid::nil(),
            project: "research".into(),
            listing_version_id: Uuid::nil(),
            listing: "PyTorch".into(),
            version: "2.5".into(),
            fee_per_hour_minor: 25,
            run_us: HOUR / 2,
            rated_micro: super::super::cost_micros(25, HOUR / 2).0,
        }];
        let d = draft(
            &MonthCharges {
                usage: u.to_vec(),
                fees: f.to_vec(),
                storage: Vec::new(),
            },
            0,
            "USD",
        );
        let amounts: Vec<i64> = d.lines.iter().map(|l| l.amount_minor).collect();
        // 0.125 for the fee rounds half away from zero: 0.13.
        assert_eq!(amounts, [596, 447, 13]);
        assert_eq!(
            d.lines.iter().map(|l| l.line_no).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(d.subtotal_minor, 1056);
        assert_eq!((d.credit_applied_minor, d.total_minor()), (0, 1056));
        let rated: i64 = u.iter().map(|l| l.rated_micro).sum::<i64>() + f[0].rated_micro;
        assert_eq!(d.rounding_micro, 1056 * Micros::PER_MINOR - rated);
        assert_eq!(
            d.lines[0].description,
            "research · h100.2x · 2.000277 GPU-hours at 2.98 USD/GPU-hour"
        );
        assert_eq!(
            d.lines[2].description,
            "research · PyTorch 2.5 marketplace fee · 0.500000 hours at 0.25 USD/hour"
        );
        assert_eq!(d.lines[2].charge, Charge::Fee(0));
    }

    #[test]
    fn a_clusters_members_are_a_line_of_their_own_that_names_it() {
        let lone = usage("research", "h100.8x", 8, 2384, HOUR);
        let members = UsageSum {
            cluster: Some(ClusterOf {
                id: Uuid::nil(),
                name: "train".into(),
                size: 4,
            }),
            ..usage("research", "h100.8x", 8, 2384, 4 * HOUR)
        };
        let d = draft(&only(&[lone, members]), 0, "USD");
        let text: Vec<&str> = d.lines.iter().map(|l| l.description.as_str()).collect();
        assert_eq!(
            text,
            [
                "research · h100.8x · 8.000000 GPU-hours at 2.98 USD/GPU-hour",
                "research · cluster train (4 nodes) · h100.8x · 32.000000 GPU-hours at 2.98 USD/GPU-hour",
            ]
        );
        assert_eq!(
            d.lines.iter().map(|l| l.amount_minor).collect::<Vec<_>>(),
            [2384, 4 * 2384]
        );
    }

    #[test]
    fn credit_is_applied_up_to_the_subtotal_as_its_own_line() {
        let u = [usage("research", "h100.1x", 1, 298, HOUR)];
        let d = draft(&only(&u), 100, "USD");
        assert_eq!(d.total_minor(), 198);
        let last = d.lines.last().unwrap();
        assert_eq!((last.line_no, last.charge), (2, Charge::Credit));
        assert_eq!(last.amount_minor, -100);
        // More credit than the month: the month is covered, the rest stays prepaid.
        let d = draft(&only(&u), 10_000, "USD");
        assert_eq!((d.credit_applied_minor, d.total_minor()), (298, 0));
        // No credit (or a negative balance): no credit line.
        for credit in [0, -50] {
            let d = draft(&only(&u), credit, "USD");
            assert_eq!(d.lines.len(), 1);
            assert_eq!(d.total_minor(), 298);
        }
    }
}
