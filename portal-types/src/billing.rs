//! What finance screens and the API read of billing: a tenant's month so far, budgets, the
//! daily spend series, invoices with their lines and credit notes, and platform revenue.
//! Amounts are `Money`; times are times.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::{ClusterId, InvoiceId, Money};

/// A budget and how much of it this month has used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BudgetStatus {
    /// "organization" or the project's slug.
    pub scope: String,
    pub limit: Money,
    pub spent: Money,
    pub percent: i64,
    /// `ok`, `warning` (≥ 80 %) or `exceeded` (≥ 100 %).
    pub alert: String,
}

/// Rated spend of one project on one SKU on one day.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SpendPoint {
    /// `2026-11-03`.
    pub day: String,
    pub project: String,
    pub sku: String,
    pub amount_minor: i64,
}

/// A tenant's month so far.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Overview {
    /// `2026-11`.
    pub month: String,
    pub currency: String,
    pub month_to_date: Money,
    /// Month-to-date plus what is running now, at its price, until the month ends.
    pub forecast: Money,
    pub running_per_hour: Money,
    /// Storage's part: volumes provisioned now and what they cost.
    pub storage: StorageSpend,
    pub credit_balance: Money,
    pub budgets: Vec<BudgetStatus>,
    /// Rated spend per day, project and SKU this month.
    pub daily: Vec<SpendPoint>,
    /// Each cluster that ran this month and what its members cost: part of the month to date,
    /// newest first.
    #[serde(default)]
    pub clusters: Vec<ClusterSpend>,
}

/// What one cluster's members have cost this month: their usage and fees, rated or running.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClusterSpend {
    pub id: ClusterId,
    pub name: String,
    /// The project's slug.
    pub project: String,
    /// How many members it has (or had).
    pub nodes: i32,
    /// Its release was asked for: it costs nothing more once its members are gone.
    pub released: bool,
    pub month_to_date: Money,
}

/// A tenant's storage this month, beside compute.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StorageSpend {
    /// Storage's part of the month-to-date.
    pub month_to_date: Money,
    /// GiB provisioned now, across the tenant's volumes.
    pub provisioned_gib: i64,
    /// What the storage provisioned now costs for a whole month.
    pub per_month: Money,
}

/// One invoice in a list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InvoiceSummary {
    pub id: InvoiceId,
    /// The organization's slug.
    pub tenant: String,
    /// The organization's name, as people read it.
    #[serde(default)]
    pub tenant_name: String,
    /// `(draft)` until finalised.
    pub number: String,
    pub month: String,
    pub status: String,
    /// Stripe's view; `None` until the invoice is synced.
    pub stripe_status: Option<String>,
    pub total: Money,
    pub hosted_invoice_url: Option<String>,
    /// A payment attempt failed and the invoice is still open: someone must act.
    pub payment_failed: bool,
    pub payment_error: Option<String>,
}

/// One line of an invoice: usage of a SKU in a project, a marketplace fee, or credit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceLine {
    pub line_no: i32,
    /// `usage`, `fee`, `storage` or `credit`.
    pub kind: String,
    pub description: String,
    pub project: Option<String>,
    /// The cluster whose members ran a usage line; none for lone instances and other lines.
    #[serde(default)]
    pub cluster: Option<String>,
    pub sku: Option<String>,
    /// GPU-hours for usage, hours ("12.5 h") for fees, GiB-hours ("730 GiB-h") for storage,
    /// empty for credit.
    pub gpu_hours: String,
    /// Per GPU-hour (per hour for fees, per GiB-month for storage), in currency units; empty
    /// for credit.
    pub unit_price: String,
    pub amount: Money,
}

/// Money given back on a finalised invoice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreditNote {
    pub amount: Money,
    pub reason: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// One invoice, whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceDetail {
    pub summary: InvoiceSummary,
    pub lines: Vec<InvoiceLine>,
    pub subtotal: Money,
    pub credit_applied: Money,
    pub credit_notes: Vec<CreditNote>,
    /// What the customer paid: the total less the credit notes issued before the payment
    /// (a credit note after it goes to the customer's credit balance in Stripe).
    pub paid: Option<Money>,
    /// What is still due: nothing once paid or void; otherwise the total less credit notes.
    pub balance: Money,
    #[serde(with = "time::serde::rfc3339::option")]
    pub finalized_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub paid_at: Option<OffsetDateTime>,
}

/// Which invoices platform finance lists; empty fields do not filter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceFilter {
    /// `draft`, `open`, `paid`, `void`, `uncollectible`, or `failed` (open with a failed
    /// payment).
    pub status: Option<String>,
    /// An organization's slug.
    pub tenant: Option<String>,
    /// `2026-11`.
    pub month: Option<String>,
}

/// Revenue in one month and currency.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevenuePoint {
    pub month: String,
    pub currency: String,
    /// Usage rated in the month (before rounding, credits and credit notes).
    pub rated: Money,
    /// Invoiced totals for the month, and what of that is paid.
    pub invoiced: Money,
    pub paid: Money,
}
