//! What finance screens read: month-to-date, forecast, budgets, spend series, invoices, CSV.

use sqlx::PgConnection;
use uuid::Uuid;

use super::{Micros, month_bounds, month_label};
use crate::invoices::PlatformFinance;
use cp_base::ControlPlane;
use cp_base::error::{Error, Result};
use cp_base::ids::{ClusterId, InvoiceId, ProjectId, TenantId};
use cp_identity::auth::Platform;
use cp_identity::policy::{Level, Money, PolicyKey, PolicyValue, resolve_tenant_policies_on};
use cp_identity::tenancy::{Project, ProjectViewers, Tenant, TenantRequirement, TenantRole};
pub use portal_types::billing::{
    BudgetStatus, ClusterSpend, CreditNote, InvoiceDetail, InvoiceFilter, InvoiceLine,
    InvoiceSummary, Overview, RevenuePoint, SpendPoint, StorageSpend,
};
use portal_types::volumes::StoragePrice;

/// Owners, admins and finance: who sees a tenant's spend and invoices.
pub struct TenantFinance;
impl TenantRequirement for TenantFinance {
    const ROLES: &'static [TenantRole] =
        &[TenantRole::Owner, TenantRole::Admin, TenantRole::Finance];
    const WHO: &'static str = "organization admins and finance";
}

/// Spent this month by a tenant (or one project) in `currency`, in micro-units: rated
/// total for the month (`usage_month_totals`, kept by rating) plus what is running and not
/// rated yet, up to `now` (`month_spend`, migration 0041).
pub async fn spent_this_month(
    conn: &mut PgConnection,
    tenant: TenantId,
    project: Option<ProjectId>,
    currency: &str,
    now: time::OffsetDateTime,
) -> Result<Micros> {
    let (start, _) = month_bounds(now);
    let micro = sqlx::query_scalar!(
        r#"SELECT coalesce(sum(micro), 0)::bigint AS "spent!" FROM month_spend($1, $4, $5)
           WHERE ($2::uuid IS NULL OR project_id = $2) AND currency = $3"#,
        tenant as TenantId,
        project.map(|p| p.0),
        currency,
        start,
        now
    )
    .fetch_one(conn)
    .await?;
    Ok(Micros(micro))
}

fn ts(t: time::OffsetDateTime) -> String {
    t.to_offset(time::UtcOffset::UTC)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

struct SummaryRow {
    id: Uuid,
    tenant: String,
    tenant_name: String,
    number: Option<String>,
    month: time::Date,
    status: String,
    stripe_status: Option<String>,
    total_minor: i64,
    currency: String,
    hosted_invoice_url: Option<String>,
    payment_failed_at: Option<time::OffsetDateTime>,
    payment_error: Option<String>,
}

impl From<SummaryRow> for InvoiceSummary {
    fn from(r: SummaryRow) -> Self {
        InvoiceSummary {
            id: InvoiceId(r.id),
            tenant: r.tenant,
            tenant_name: r.tenant_name,
            number: r.number.unwrap_or_else(|| "(draft)".into()),
            month: month_label(r.month),
            payment_failed: r.status == "open" && r.payment_failed_at.is_some(),
            status: r.status,
            stripe_status: r.stripe_status,
            total: Money {
                amount_minor: r.total_minor,
                currency: r.currency.into(),
            },
            hosted_invoice_url: r.hosted_invoice_url,
            payment_error: r.payment_error,
        }
    }
}

/// What the control plane offers for what finance and tenants read of billing.
#[allow(async_fn_in_trait)]
pub trait BillingReportsApi {
    /// The tenant's month so far: spend, forecast, credit, budgets and the daily series.
    async fn billing_overview(&self, who: &Tenant<TenantFinance>) -> Result<Overview>;

    /// What the project's usage has cost this month, per currency, as rated so far (hourly,
    /// as the billing page's figures). Its members see it: each of its instances' cost so far is
    /// already theirs to see.
    async fn project_month_spend(&self, who: &Project<ProjectViewers>) -> Result<Vec<Money>>;

    /// The tenant's invoices, newest month first.
    async fn tenant_invoices(&self, who: &Tenant<TenantFinance>) -> Result<Vec<InvoiceSummary>>;

    /// One invoice of the tenant's, with lines and credit notes. Another tenant's: not found.
    async fn tenant_invoice(
        &self,
        who: &Tenant<TenantFinance>,
        id: InvoiceId,
    ) -> Result<InvoiceDetail>;

    /// Every tenant's invoices, filtered (platform finance).
    async fn all_invoices(
        &self,
        _who: &Platform<PlatformFinance>,
        filter: &InvoiceFilter,
    ) -> Result<Vec<InvoiceSummary>>;

    async fn any_invoice(
        &self,
        _who: &Platform<PlatformFinance>,
        id: InvoiceId,
    ) -> Result<InvoiceDetail>;

    /// Every organization, for platform finance's pickers.
    async fn tenant_slugs(&self) -> Result<Vec<(TenantId, String)>>;

    /// Revenue per month and currency, newest first (platform finance).
    async fn revenue_by_month(&self, _who: &Platform<PlatformFinance>)
    -> Result<Vec<RevenuePoint>>;

    /// Usage (one row per allocation and hour) for a month as CSV.
    async fn usage_csv(&self, who: &Tenant<TenantFinance>, month: &str) -> Result<String>;

    /// An invoice's lines as CSV.
    async fn invoice_csv(&self, who: &Tenant<TenantFinance>, id: InvoiceId) -> Result<String>;
}

impl BillingReportsApi for ControlPlane {
    #[tracing::instrument(skip_all, fields(tenant.id = %who.id()))]
    async fn billing_overview(&self, who: &Tenant<TenantFinance>) -> Result<Overview> {
        let now = time::OffsetDateTime::now_utc();
        let (start, end) = month_bounds(now);
        let tenant = who.id();
        // The month's figures in one statement (the page asked nine before, #22): the tenant's
        // currency (that of its latest usage, else the SKUs': all are sold in one currency
        // today), what runs now per hour, the credit it holds, its projects, and the month's
        // spend per project and currency, from which the total and every budget are summed.
        let head = sqlx::query_file!(
            "queries/billing_overview.sql",
            tenant as TenantId,
            start,
            now
        )
        .fetch_one(self.pool())
        .await?;
        let currency = head.currency;
        let spend = MonthSpend(
            head.spend_projects
                .into_iter()
                .map(ProjectId)
                .zip(head.spend_currencies)
                .zip(head.spend_micros)
                .map(|((p, c), m)| (p, c, m))
                .collect(),
        );
        let spent = spend.spent_in(None, &currency);
        let rate = head.rate_minor * Micros::PER_MINOR;
        let remaining_us = (end - now).whole_microseconds().max(0);
        // What runs now, and what is stored now, until the month ends.
        let to_come = rate as i128 * remaining_us / 3_600_000_000
            + head.storage_per_month_micro as i128 * remaining_us
                / (StoragePrice::HOURS_PER_MONTH as i128 * 3_600_000_000);
        let forecast = Micros(spent.0 + to_come as i64);
        let credit = head.credit_micro.div_euclid(Micros::PER_MINOR);
        let projects: Vec<(ProjectId, String)> = head
            .project_ids
            .into_iter()
            .map(ProjectId)
            .zip(head.project_slugs)
            .collect();
        let budgets = budget_statuses(self.pool(), tenant, &projects, &spend).await?;
        let daily = daily_spend(self.pool(), tenant, &currency, start, end).await?;
        let clusters = cluster_spend(self.pool(), tenant, &currency, start, now).await?;
        Ok(Overview {
            month: month_label(start.date()),
            month_to_date: spent.money(&currency),
            forecast: forecast.money(&currency),
            running_per_hour: Micros(rate).money(&currency),
            storage: StorageSpend {
                month_to_date: Micros(head.storage_micro).money(&currency),
                provisioned_gib: head.storage_gib,
                per_month: Micros(head.storage_per_month_micro).money(&currency),
            },
            credit_balance: Money {
                amount_minor: credit,
                currency: currency.clone().into(),
            },
            currency,
            budgets,
            daily,
            clusters,
        })
    }

    async fn project_month_spend(&self, who: &Project<ProjectViewers>) -> Result<Vec<Money>> {
        let (start, _) = month_bounds(time::OffsetDateTime::now_utc());
        Ok(sqlx::query!(
            "SELECT currency, amount_micro FROM usage_month_totals
             WHERE tenant_id = $1 AND project_id = $2
               AND month = ($3::timestamptz AT TIME ZONE 'UTC')::date
             ORDER BY currency",
            who.tenant() as TenantId,
            who.id() as ProjectId,
            start
        )
        .fetch_all(self.pool())
        .await?
        .into_iter()
        .map(|r| Micros(r.amount_micro).money(&r.currency))
        .collect())
    }

    async fn tenant_invoices(&self, who: &Tenant<TenantFinance>) -> Result<Vec<InvoiceSummary>> {
        self.invoices_where(Some(who.id()), &InvoiceFilter::default())
            .await
    }

    async fn tenant_invoice(
        &self,
        who: &Tenant<TenantFinance>,
        id: InvoiceId,
    ) -> Result<InvoiceDetail> {
        self.invoice_detail(Some(who.id()), id).await
    }

    async fn all_invoices(
        &self,
        _who: &Platform<PlatformFinance>,
        filter: &InvoiceFilter,
    ) -> Result<Vec<InvoiceSummary>> {
        self.invoices_where(None, filter).await
    }

    async fn any_invoice(
        &self,
        _who: &Platform<PlatformFinance>,
        id: InvoiceId,
    ) -> Result<InvoiceDetail> {
        self.invoice_detail(None, id).await
    }

    async fn tenant_slugs(&self) -> Result<Vec<(TenantId, String)>> {
        Ok(
            sqlx::query!(r#"SELECT id AS "id: TenantId", slug FROM tenants ORDER BY slug"#)
                .fetch_all(self.pool())
                .await?
                .into_iter()
                .map(|r| (r.id, r.slug))
                .collect(),
        )
    }

    async fn revenue_by_month(
        &self,
        _who: &Platform<PlatformFinance>,
    ) -> Result<Vec<RevenuePoint>> {
        let rows = sqlx::query!(
            r#"WITH rated AS (
                   SELECT date_trunc('month', period_start, 'UTC')::date AS month, currency,
                          sum(amount_micro)::bigint AS micro
                   FROM (SELECT period_start, currency, amount_micro FROM usage_charges
                         UNION ALL
                         SELECT period_start, currency, amount_micro FROM storage_charges) c
                   GROUP BY 1, 2
               ), inv AS (
                   SELECT month, currency,
                          sum(total_minor) FILTER (WHERE status <> 'void')::bigint AS invoiced,
                          sum(total_minor) FILTER (WHERE status = 'paid')::bigint AS paid
                   FROM invoices WHERE status <> 'draft' GROUP BY 1, 2
               )
               SELECT coalesce(r.month, i.month) AS "month!", coalesce(r.currency, i.currency) AS "currency!",
                      coalesce(r.micro, 0) AS "micro!", coalesce(i.invoiced, 0) AS "invoiced!",
                      coalesce(i.paid, 0) AS "paid!"
               FROM rated r FULL JOIN inv i ON i.month = r.month AND i.currency = r.currency
               ORDER BY 1 DESC, 2 LIMIT 36"#
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| RevenuePoint {
                month: month_label(r.month),
                rated: Micros(r.micro).money(&r.currency),
                invoiced: Money {
                    amount_minor: r.invoiced,
                    currency: r.currency.clone().into(),
                },
                paid: Money {
                    amount_minor: r.paid,
                    currency: r.currency.clone().into(),
                },
                currency: r.currency,
            })
            .collect())
    }

    async fn usage_csv(&self, who: &Tenant<TenantFinance>, month: &str) -> Result<String> {
        let month = super::parse_month("month", month)?;
        let rows = sqlx::query!(
            // A charge may cover several hours of one day (migration 0034); the export lists
            // each hour, its running time and amounts by rating's own rule (`micro_until`),
            // exactly as a one-hour charge's are, so the lines don't depend on the grain.
            r#"SELECT h.hour AS "period_start!", p.slug AS project, s.name AS sku, a.name AS allocation,
                      c.allocation_id, c.gpu_count, (h.to_us - h.from_us) AS "rated_us!",
                      c.price_per_hour_minor, c.currency,
                      (micro_until(c.price_per_hour_minor, h.to_us)
                       - micro_until(c.price_per_hour_minor, h.from_us))::bigint AS "amount_micro!",
                      l.slug || ' ' || v.version AS "listing!", f.fee_per_hour_minor AS "fee_per_hour_minor?",
                      (micro_until(f.fee_per_hour_minor, h.to_us)
                       - micro_until(f.fee_per_hour_minor, h.from_us))::bigint AS "fee_micro?"
               FROM usage_charges c
               JOIN usage_intervals u ON u.allocation_id = c.allocation_id
               CROSS JOIN LATERAL (
                   SELECT (extract(epoch FROM greatest(c.period_start, u.started_at) - u.started_at)
                           * 1000000)::bigint AS from_us
               ) span
               CROSS JOIN LATERAL (
                   SELECT g.hour,
                          greatest(span.from_us,
                                   (extract(epoch FROM g.hour - u.started_at) * 1000000)::bigint) AS from_us,
                          least(span.from_us + c.rated_us,
                                (extract(epoch FROM g.hour + interval '1 hour' - u.started_at)
                                 * 1000000)::bigint) AS to_us
                   FROM generate_series(c.period_start, c.period_start + (c.hours - 1) * interval '1 hour',
                                        interval '1 hour') AS g(hour)
               ) h
               JOIN projects p ON p.id = c.project_id JOIN skus s ON s.id = c.sku_id
               JOIN allocations a ON a.id = c.allocation_id
               JOIN listing_versions v ON v.id = a.listing_version_id JOIN listings l ON l.id = v.listing_id
               LEFT JOIN fee_charges f ON f.allocation_id = c.allocation_id AND f.period_start = c.period_start
               WHERE c.tenant_id = $1
                 AND c.period_start >= $2::date::timestamp AT TIME ZONE 'UTC'
                 AND c.period_start < ($2::date + interval '1 month')::date::timestamp AT TIME ZONE 'UTC'
                 AND h.to_us > h.from_us
               ORDER BY h.hour, p.slug, a.name"#,
            who.id() as TenantId,
            month
        )
        .fetch_all(self.pool())
        .await?;
        let mut out = String::from(
            "period_start,project,sku,allocation,allocation_id,gpus,running_seconds,price_per_hour,currency,amount,listing,fee_per_hour,fee_amount\n",
        );
        for r in rows {
            out.push_str(&cp_base::csv::row(&[
                &ts(r.period_start),
                &r.project,
                &r.sku,
                &r.allocation,
                &r.allocation_id.to_string(),
                &r.gpu_count.to_string(),
                &format!("{}.{:06}", r.rated_us / 1_000_000, r.rated_us % 1_000_000),
                &decimal(r.price_per_hour_minor),
                &r.currency,
                &Micros(r.amount_micro).to_string(),
                &r.listing,
                &r.fee_per_hour_minor.map(decimal).unwrap_or_default(),
                &r.fee_micro
                    .map(|m| Micros(m).to_string())
                    .unwrap_or_default(),
            ]));
        }
        Ok(out)
    }

    async fn invoice_csv(&self, who: &Tenant<TenantFinance>, id: InvoiceId) -> Result<String> {
        let d = self.tenant_invoice(who, id).await?;
        let mut out = String::from(
            "invoice,month,line,kind,project,sku,gpu_hours,unit_price_per_gpu_hour,amount,currency,description,cluster\n",
        );
        for l in &d.lines {
            out.push_str(&cp_base::csv::row(&[
                &d.summary.number,
                &d.summary.month,
                &l.line_no.to_string(),
                &l.kind,
                l.project.as_deref().unwrap_or(""),
                l.sku.as_deref().unwrap_or(""),
                &l.gpu_hours,
                &l.unit_price,
                &decimal(l.amount.amount_minor),
                &l.amount.currency,
                &l.description,
                l.cluster.as_deref().unwrap_or(""),
            ]));
        }
        Ok(out)
    }
}

/// What the other areas of this crate use of it, behind no proof: never for the pages or the API.
#[allow(async_fn_in_trait)]
pub(crate) trait BillingReportsInternal {
    async fn invoices_where(
        &self,
        tenant: Option<TenantId>,
        f: &InvoiceFilter,
    ) -> Result<Vec<InvoiceSummary>>;

    async fn invoice_detail(
        &self,
        tenant: Option<TenantId>,
        id: InvoiceId,
    ) -> Result<InvoiceDetail>;
}

impl BillingReportsInternal for ControlPlane {
    async fn invoices_where(
        &self,
        tenant: Option<TenantId>,
        f: &InvoiceFilter,
    ) -> Result<Vec<InvoiceSummary>> {
        let status = f.status.as_deref().filter(|s| !s.is_empty());
        if let Some(s) = status
            && !["draft", "open", "paid", "void", "uncollectible", "failed"].contains(&s)
        {
            return Err(Error::Invalid {
                field: "status",
                reason: format!(
                    "{s:?} is not one of draft, open, paid, void, uncollectible, failed"
                ),
            });
        }
        let month = match f.month.as_deref().filter(|m| !m.is_empty()) {
            Some(m) => Some(super::parse_month("month", m)?),
            None => None,
        };
        let rows = sqlx::query_as!(
            SummaryRow,
            r#"SELECT i.id, t.slug AS tenant, t.display_name AS tenant_name, i.number, i.month, i.status, i.stripe_status,
                      i.total_minor, i.currency, i.hosted_invoice_url, i.payment_failed_at,
                      i.payment_error
               FROM invoices i JOIN tenants t ON t.id = i.tenant_id
               WHERE ($1::uuid IS NULL OR i.tenant_id = $1)
                 AND ($2::text IS NULL OR i.status = $2
                      OR ($2 = 'failed' AND i.status = 'open' AND i.payment_failed_at IS NOT NULL))
                 AND ($3::text IS NULL OR t.slug = $3)
                 AND ($4::date IS NULL OR i.month = $4)
               ORDER BY i.month DESC, t.slug, i.currency
               LIMIT 500"#,
            tenant.map(|t| t.0),
            status,
            f.tenant.as_deref().filter(|t| !t.is_empty()),
            month
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn invoice_detail(
        &self,
        tenant: Option<TenantId>,
        id: InvoiceId,
    ) -> Result<InvoiceDetail> {
        let i = sqlx::query!(
            r#"SELECT i.id, t.slug AS tenant, t.display_name AS tenant_name, i.number, i.month, i.status, i.stripe_status,
                      i.total_minor, i.currency, i.hosted_invoice_url, i.payment_failed_at,
                      i.payment_error, i.subtotal_minor, i.credit_applied_minor, i.finalized_at, i.paid_at
               FROM invoices i JOIN tenants t ON t.id = i.tenant_id
               WHERE i.id = $1 AND ($2::uuid IS NULL OR i.tenant_id = $2)"#,
            id.0,
            tenant.map(|t| t.0)
        )
        .fetch_optional(self.pool())
        .await?
        .ok_or(Error::NotFound { what: "invoice" })?;
        let money = |amount_minor| Money {
            amount_minor,
            currency: i.currency.clone().into(),
        };
        let lines = sqlx::query!(
            r#"SELECT l.line_no, l.kind, l.description, p.slug AS "project?", k.name AS "cluster?",
                      coalesce(s.name, ls.slug || ' ' || v.version,
                               CASE l.storage_of WHEN 'snapshots' THEN 'volume snapshots · '
                                                 ELSE 'block storage · ' END || l.region) AS "sku?",
                      l.gpu_us, l.run_us, l.gib_us, l.unit_price_micro, l.amount_minor
               FROM invoice_lines l
               LEFT JOIN projects p ON p.id = l.project_id
               LEFT JOIN skus s ON s.id = l.sku_id
               LEFT JOIN listing_versions v ON v.id = l.listing_version_id
               LEFT JOIN listings ls ON ls.id = v.listing_id
               LEFT JOIN clusters k ON k.id = l.cluster_id
               WHERE l.invoice_id = $1 ORDER BY l.line_no"#,
            id.0
        )
        .fetch_all(self.pool())
        .await?
        .into_iter()
        .map(|l| InvoiceLine {
            line_no: l.line_no,
            gpu_hours: match l.kind.as_str() {
                "usage" => super::gpu_hours(l.gpu_us),
                // Fees are per allocation-hour: the quantity is hours, marked as such.
                "fee" => format!("{} h", super::gpu_hours(l.run_us)),
                "storage" => format!("{} GiB-h", super::gpu_hours(l.gib_us)),
                _ => String::new(),
            },
            unit_price: if l.kind == "credit" {
                String::new()
            } else {
                Micros(l.unit_price_micro).to_string()
            },
            kind: l.kind,
            description: l.description,
            project: l.project,
            cluster: l.cluster,
            sku: l.sku,
            amount: money(l.amount_minor),
        })
        .collect();
        let notes = sqlx::query!(
            "SELECT amount_minor, reason, created_at FROM credit_notes WHERE invoice_id = $1 ORDER BY created_at",
            id.0
        )
        .fetch_all(self.pool())
        .await?;
        let noted: i64 = notes.iter().map(|n| n.amount_minor).sum();
        let noted_before_payment: i64 = notes
            .iter()
            .filter(|n| i.paid_at.is_none_or(|paid| n.created_at <= paid))
            .map(|n| n.amount_minor)
            .sum();
        let credit_notes: Vec<CreditNote> = notes
            .into_iter()
            .map(|n| CreditNote {
                amount: money(n.amount_minor),
                reason: n.reason,
                created_at: n.created_at,
            })
            .collect();
        let settled = matches!(i.status.as_str(), "paid" | "void");
        Ok(InvoiceDetail {
            subtotal: money(i.subtotal_minor),
            credit_applied: money(i.credit_applied_minor),
            paid: (i.status == "paid")
                .then(|| money((i.total_minor - noted_before_payment).max(0))),
            balance: money(if settled {
                0
            } else {
                (i.total_minor - noted).max(0)
            }),
            finalized_at: i.finalized_at,
            paid_at: i.paid_at,
            lines,
            credit_notes,
            summary: SummaryRow {
                id: i.id,
                tenant: i.tenant,
                tenant_name: i.tenant_name,
                number: i.number,
                month: i.month,
                status: i.status,
                stripe_status: i.stripe_status,
                total_minor: i.total_minor,
                currency: i.currency.clone(),
                hosted_invoice_url: i.hosted_invoice_url,
                payment_failed_at: i.payment_failed_at,
                payment_error: i.payment_error,
            }
            .into(),
        })
    }
}

/// `12.50` from 1250 minor units.
fn decimal(minor: i64) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let abs = minor.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// The month's spend by project and currency, in micros.
struct MonthSpend(Vec<(ProjectId, String, i64)>);

impl MonthSpend {
    /// Spent this month by the tenant (or one project) in `currency`.
    fn spent_in(&self, project: Option<ProjectId>, currency: &str) -> Micros {
        Micros(
            self.0
                .iter()
                .filter(|(p, c, _)| project.is_none_or(|x| x == *p) && c == currency)
                .map(|(_, _, m)| m)
                .sum(),
        )
    }
}

/// Each budget in force against what was spent under it: the organization's, and each
/// project's that sets its own.
async fn budget_statuses(
    pool: &cp_base::pool::Db,
    tenant: TenantId,
    projects: &[(ProjectId, String)],
    spend: &MonthSpend,
) -> Result<Vec<BudgetStatus>> {
    let ids: Vec<ProjectId> = projects.iter().map(|(id, _)| *id).collect();
    let (org, each) = resolve_tenant_policies_on(pool, tenant, &ids).await?;
    let mut scopes = vec![("organization".to_string(), None, org)];
    for ((id, slug), r) in projects.iter().zip(each) {
        scopes.push((slug.clone(), Some(*id), r));
    }
    let mut budgets = Vec::new();
    for (scope, project, resolved) in scopes {
        let Some(b) = resolved.iter().find(|r| r.key == PolicyKey::MonthlyBudget) else {
            continue;
        };
        let Some(PolicyValue::MonthlyBudget(limit)) = &b.value else {
            continue;
        };
        // A project's row only when the project sets its own budget.
        if project.is_some() && b.decided_by != Some(Level::Project) {
            continue;
        }
        let spent_minor = spend.spent_in(project, &limit.currency).ceil_to_minor();
        let percent = if limit.amount_minor > 0 {
            spent_minor * 100 / limit.amount_minor
        } else {
            100
        };
        budgets.push(BudgetStatus {
            scope,
            spent: Money {
                amount_minor: spent_minor,
                currency: limit.currency.clone(),
            },
            limit: limit.clone(),
            percent,
            alert: match percent {
                p if p >= 100 => "exceeded",
                p if p >= 80 => "warning",
                _ => "ok",
            }
            .into(),
        });
    }
    Ok(budgets)
}

/// The month's spend per day, project and SKU, for the chart.
/// The tenant's clusters that cost something this month, newest first, with what their
/// members cost in `currency` up to `now` (`cluster_month_spend`, migration 0058).
async fn cluster_spend(
    pool: &cp_base::pool::Db,
    tenant: TenantId,
    currency: &str,
    start: time::OffsetDateTime,
    now: time::OffsetDateTime,
) -> Result<Vec<ClusterSpend>> {
    Ok(sqlx::query!(
        r#"SELECT k.id, k.name, p.slug AS project, k.size, k.release_requested_at IS NOT NULL AS "released!",
                  s.micro::bigint AS "micro!"
           FROM cluster_month_spend($1, $3, $4) s
           JOIN clusters k ON k.id = s.cluster_id
           JOIN projects p ON p.id = k.project_id
           WHERE s.currency = $2
           ORDER BY k.created_at DESC, k.id"#,
        tenant as TenantId,
        currency,
        start,
        now
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| ClusterSpend {
        id: ClusterId(r.id),
        name: r.name,
        project: r.project,
        nodes: r.size,
        released: r.released,
        month_to_date: Micros(r.micro).money(currency),
    })
    .collect())
}

async fn daily_spend(
    pool: &cp_base::pool::Db,
    tenant: TenantId,
    currency: &str,
    start: time::OffsetDateTime,
    end: time::OffsetDateTime,
) -> Result<Vec<SpendPoint>> {
    // The tenant's projects and the SKUs are read once each and joined in memory. Joined
    // to the tables, the generic plan (sqlx prepares every statement) expects one day row
    // and looks up each row's project and SKU by index: ~180 rows, 840 buffers, 0.5 ms,
    // against 118 buffers and ~0.3 ms this way (docs/PERFORMANCE.md). The day comes back as a
    // date and the names sort bytewise (slugs and SKU names are ASCII): `to_char` on each
    // row and the locale's collation took 0.17 against 0.12 ms.
    Ok(sqlx::query!(
        r#"WITH p AS MATERIALIZED (SELECT id, slug FROM projects WHERE tenant_id = $1),
                s AS MATERIALIZED (SELECT id, name FROM skus)
           SELECT x.day AS "day!", x.project AS "project!", x.sku AS "sku!", x.micro AS "micro!"
           FROM (SELECT d.day, p.slug AS project, s.name AS sku, d.amount_micro AS micro
                 FROM usage_day_totals d JOIN p ON p.id = d.project_id JOIN s ON s.id = d.sku_id
                 WHERE d.tenant_id = $1 AND d.currency = $2
                   AND d.day >= ($3::timestamptz AT TIME ZONE 'UTC')::date
                   AND d.day < ($4::timestamptz AT TIME ZONE 'UTC')::date
                 UNION ALL
                 -- Storage, per day and project (a charge never crosses a UTC day).
                 SELECT (c.period_start AT TIME ZONE 'UTC')::date, p.slug, 'block storage',
                        sum(c.amount_micro)::bigint
                 FROM storage_charges c JOIN p ON p.id = c.project_id
                 WHERE c.tenant_id = $1 AND c.currency = $2
                   AND c.period_start >= $3 AND c.period_start < $4
                 GROUP BY 1, 2) x
           ORDER BY x.day, x.project COLLATE "C", x.sku COLLATE "C""#,
        tenant as TenantId,
        currency,
        start,
        end
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| SpendPoint {
        day: r.day.to_string(),
        project: r.project,
        sku: r.sku,
        amount_minor: Micros(r.micro).round_to_minor(),
    })
    .collect())
}
