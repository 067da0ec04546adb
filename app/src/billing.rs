//! Finance screens. `/billing` for an organization's owners, admins and finance people:
//! month-to-date and forecast, budget alerts, spend by project and by SKU over the month
//! (charts), prepaid credit, invoices with their Stripe status and hosted link, CSV export.
//! `/billing/invoices/{id}`: one invoice. `/admin/billing` for platform finance: every
//! tenant's invoices with filters, revenue, failed payments, credit grants and credit notes.
//!
//! Charts are ECharts option JSON built on the server with `charming`; `public/charts.js`
//! draws every `.chart[data-option]` with ECharts served from `/vendor/` (never a CDN).

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};
use portal_types::billing::{InvoiceDetail, InvoiceLine, InvoiceSummary, Overview, RevenuePoint};
use portal_types::{IdArg, InvoiceId};
use portal_types::{TenantId, utc};
use serde::{Deserialize, Serialize};

use crate::components::{ErrorNotice, action_outcome as outcome};
use crate::error::AppError;

/// The billing page: the control plane's month so far and the invoices, with the two charts
/// built on the server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BillingView {
    pub organization: String,
    /// The month so far, without its daily series: the page shows that only as the charts,
    /// and it was most of the page's hydration data.
    pub overview: Overview,
    pub invoices: Vec<InvoiceSummary>,
    /// ECharts options (JSON): daily spend stacked by project, and by SKU; `None` while
    /// nothing is rated this month.
    pub charts: Option<(String, String)>,
    pub platform_finance: bool,
}

/// One invoice, and whether the viewer may issue credit notes on it (platform finance).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceView {
    pub detail: InvoiceDetail,
    pub can_credit: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlatformBillingView {
    pub invoices: Vec<InvoiceSummary>,
    pub failed: Vec<InvoiceSummary>,
    pub revenue_chart: String,
    /// Newest month first.
    pub revenue: Vec<RevenuePoint>,
    pub tenants: Vec<(TenantId, String)>,
}

#[cfg(feature = "ssr")]
mod ssr {
    use charming::Chart;
    use charming::component::{Axis, Grid, Legend};
    use charming::element::{AxisType, Tooltip, Trigger};
    use charming::series::Bar;
    use control_plane::billing::reports::SpendPoint;

    /// Stacked bars: one bar per day, one series per `key` (project or SKU), in currency units.
    pub fn stacked(points: &[SpendPoint], key: fn(&SpendPoint) -> &str, currency: &str) -> String {
        let mut days: Vec<&str> = points.iter().map(|p| p.day.as_str()).collect();
        days.sort_unstable();
        days.dedup();
        let mut keys: Vec<&str> = points.iter().map(key).collect();
        keys.sort_unstable();
        keys.dedup();
        // One pass: each point added to its series' day.
        let mut sums = vec![vec![0i64; days.len()]; keys.len()];
        for p in points {
            if let (Ok(k), Ok(d)) = (
                keys.binary_search(&key(p)),
                days.binary_search(&p.day.as_str()),
            ) {
                sums[k][d] += p.amount_minor;
            }
        }
        let mut chart = Chart::new()
            .tooltip(Tooltip::new().trigger(Trigger::Axis))
            .legend(Legend::new().top("bottom"))
            .grid(
                Grid::new()
                    .left("3%")
                    .right("3%")
                    .top("8%")
                    .bottom("18%")
                    .contain_label(true),
            )
            .x_axis(
                Axis::new().type_(AxisType::Category).data(
                    days.iter()
                        .map(|d| d.get(5..).unwrap_or(d).to_string())
                        .collect::<Vec<_>>(),
                ),
            )
            .y_axis(Axis::new().type_(AxisType::Value).name(currency));
        for (k, series) in keys.into_iter().zip(sums) {
            let data: Vec<f64> = series
                .into_iter()
                .map(|minor| minor as f64 / 100.0)
                .collect();
            chart = chart.series(Bar::new().name(k).stack("spend").data(data));
        }
        crate::components::chart_option(&chart)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn point(day: &str, project: &str, sku: &str, amount_minor: i64) -> SpendPoint {
            SpendPoint {
                day: day.into(),
                project: project.into(),
                sku: sku.into(),
                amount_minor,
            }
        }

        #[test]
        fn each_series_sums_its_days_in_order() {
            let points = [
                point("2026-11-01", "research", "h100.1x", 150),
                point("2026-11-01", "inference", "h100.8x", 1_000),
                point("2026-11-01", "research", "h100.8x", 50),
                point("2026-11-03", "research", "h100.1x", 25),
            ];
            let option: serde_json::Value =
                serde_json::from_str(&stacked(&points, |p| p.project.as_str(), "USD")).unwrap();
            assert_eq!(
                option["xAxis"]["data"],
                serde_json::json!(["11-01", "11-03"])
            );
            assert_eq!(option["yAxis"]["name"], "USD");
            let series: Vec<(String, Vec<f64>)> = option["series"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    (
                        s["name"].as_str().unwrap().to_string(),
                        serde_json::from_value(s["data"].clone()).unwrap(),
                    )
                })
                .collect();
            assert_eq!(
                series,
                [
                    ("inference".to_string(), vec![10.0, 0.0]),
                    ("research".to_string(), vec![2.0, 0.25]),
                ]
            );
        }
    }
}

#[server]
pub async fn get_billing() -> Result<BillingView, AppError> {
    use control_plane::billing::invoices::PlatformFinance;
    use control_plane::billing::reports::TenantFinance;
    let (cp, principal) = crate::server::signed_in().await?;
    let (who, organization) = crate::server::home_tenant::<TenantFinance>(&cp, &principal).await?;
    let mut overview = cp.billing_overview(&who).await?;
    let daily = std::mem::take(&mut overview.daily);
    Ok(BillingView {
        organization,
        charts: (!daily.is_empty()).then(|| {
            (
                ssr::stacked(&daily, |p| p.project.as_str(), &overview.currency),
                ssr::stacked(&daily, |p| p.sku.as_str(), &overview.currency),
            )
        }),
        overview,
        invoices: cp.tenant_invoices(&who).await?,
        platform_finance: principal.platform::<PlatformFinance>().is_ok(),
    })
}

#[server]
pub async fn get_invoice(id: IdArg<InvoiceId>) -> Result<InvoiceView, AppError> {
    use control_plane::billing::invoices::PlatformFinance;
    use control_plane::billing::reports::TenantFinance;
    let (cp, principal) = crate::server::signed_in().await?;
    let id = crate::server::id(id)?;
    // Platform finance sees any invoice; everyone else only their organization's.
    let (d, can_credit) = match principal.platform::<PlatformFinance>() {
        Ok(fin) => (cp.any_invoice(&fin, id).await?, true),
        Err(_) => {
            let (who, _) = crate::server::home_tenant::<TenantFinance>(&cp, &principal).await?;
            (cp.tenant_invoice(&who, id).await?, false)
        }
    };
    Ok(InvoiceView {
        detail: d,
        can_credit,
    })
}

#[server]
pub async fn get_platform_billing(
    status: Option<String>,
    tenant: Option<String>,
    month: Option<String>,
) -> Result<PlatformBillingView, AppError> {
    use charming::Chart;
    use charming::component::{Axis, Legend};
    use charming::element::{AxisType, Tooltip, Trigger};
    use charming::series::Bar;
    use control_plane::billing::invoices::PlatformFinance;
    use control_plane::billing::reports::InvoiceFilter;
    let (cp, principal) = crate::server::signed_in().await?;
    let fin = principal.platform::<PlatformFinance>()?;
    let filter = InvoiceFilter {
        status,
        tenant,
        month,
    };
    let invoices = cp.all_invoices(&fin, &filter).await?;
    let failed = cp
        .all_invoices(
            &fin,
            &InvoiceFilter {
                status: Some("failed".into()),
                ..Default::default()
            },
        )
        .await?;
    let revenue = cp.revenue_by_month(&fin).await?;
    // Oldest first, for the chart.
    let months: Vec<String> = revenue
        .iter()
        .rev()
        .map(|r| format!("{} {}", r.month, r.currency))
        .collect();
    let units = |f: fn(&control_plane::billing::reports::RevenuePoint) -> i64| -> Vec<f64> {
        revenue.iter().rev().map(|r| f(r) as f64 / 100.0).collect()
    };
    let chart = Chart::new()
        .tooltip(Tooltip::new().trigger(Trigger::Axis))
        .legend(Legend::new().top("bottom"))
        .x_axis(Axis::new().type_(AxisType::Category).data(months))
        .y_axis(Axis::new().type_(AxisType::Value))
        .series(
            Bar::new()
                .name("rated usage")
                .data(units(|r| r.rated.amount_minor)),
        )
        .series(
            Bar::new()
                .name("invoiced")
                .data(units(|r| r.invoiced.amount_minor)),
        )
        .series(Bar::new().name("paid").data(units(|r| r.paid.amount_minor)));
    Ok(PlatformBillingView {
        invoices,
        failed,
        revenue_chart: crate::components::chart_option(&chart),
        revenue,
        tenants: cp.tenant_slugs().await?,
    })
}

#[server]
pub async fn grant_credit(
    tenant: IdArg<TenantId>,
    amount: String,
    reason: String,
) -> Result<String, AppError> {
    use control_plane::billing::invoices::PlatformFinance;
    let (cp, principal) = crate::server::signed_in().await?;
    let fin = principal.platform::<PlatformFinance>()?;
    let tenant = crate::server::id(tenant)?;
    let granted = cp
        .grant_credit(
            &fin,
            tenant,
            &amount,
            &reason,
            Some(&crate::error::request_id()),
        )
        .await?;
    Ok(granted.to_string())
}

#[server]
pub async fn issue_credit_note(
    invoice: IdArg<InvoiceId>,
    amount: String,
    reason: String,
) -> Result<String, AppError> {
    use control_plane::billing::invoices::PlatformFinance;
    let (cp, principal) = crate::server::signed_in().await?;
    let fin = principal.platform::<PlatformFinance>()?;
    let invoice = crate::server::id(invoice)?;
    let noted = cp
        .issue_credit_note(
            &fin,
            invoice,
            &amount,
            &reason,
            Some(&crate::error::request_id()),
        )
        .await?;
    Ok(noted.to_string())
}

/// An ECharts chart; `public/charts.js` draws it (and redraws on theme or size changes).
#[component]
fn Chart(option: String, label: &'static str, testid: &'static str) -> impl IntoView {
    view! { <div class="chart" role="img" aria-label=label data-testid=testid data-option=option></div> }
}

fn status_badge(i: &InvoiceSummary) -> impl IntoView + use<> {
    let (class, text) = match (i.status.as_str(), i.payment_failed) {
        ("open", true) => ("pill danger", "payment failed".to_string()),
        ("paid", _) => ("pill ok", "paid".to_string()),
        ("open", false) => ("pill", "open".to_string()),
        (s, _) => ("pill muted", s.to_string()),
    };
    view! { <span class=class data-testid="invoice-status">{text}</span> }
}

fn stripe_cell(i: &InvoiceSummary) -> impl IntoView + use<> {
    let status = i.stripe_status.clone().unwrap_or_else(|| "syncing…".into());
    let link = i.hosted_invoice_url.clone().map(|u| {
        view! { " " <a href=u rel="external noopener" target="_blank" data-testid="hosted-link">"Stripe invoice ↗"</a> }
    });
    view! { <span data-testid="stripe-status">{status}</span> {link} }
}

#[component]
fn InvoiceTable(
    invoices: Vec<InvoiceSummary>,
    show_tenant: bool,
    id: &'static str,
) -> impl IntoView {
    if invoices.is_empty() {
        return view! { <p class="hint">"No invoices yet. A month is invoiced once it is over and all its usage is rated."</p> }.into_any();
    }
    view! {
        <div class="table-scroll">
        <table class="data" id=id>
            <thead><tr>
                {show_tenant.then(|| view! { <th>"Organization"</th> })}
                <th>"Invoice"</th><th>"Month"</th><th>"Total"</th><th>"Status"</th><th>"Stripe"</th>
            </tr></thead>
            <tbody>
                {invoices.into_iter().map(|i| {
                    let badge = status_badge(&i);
                    let stripe = stripe_cell(&i);
                    view! {
                        <tr data-invoice=i.number.clone()>
                            {show_tenant.then(|| view! { <td>{i.tenant_name.clone()}</td> })}
                            <td><a href=format!("/billing/invoices/{}", i.id)>{i.number.clone()}</a></td>
                            <td>{i.month.clone()}</td>
                            <td class="amount">{i.total.grouped()}</td>
                            <td>{badge} {i.payment_error.clone().filter(|_| i.payment_failed).map(|e| view! { <br/><small>{e}</small> })}</td>
                            <td>{stripe}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
        </div>
    }
    .into_any()
}

#[component]
pub fn BillingPage() -> impl IntoView {
    let page = Resource::new(|| (), |_| get_billing());
    view! {
        <Title text="Billing" />
        <h1>"Billing"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(b) => view! { <BillingBody b /> }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn BillingBody(b: BillingView) -> impl IntoView {
    let BillingView {
        organization,
        overview: o,
        invoices,
        charts,
        platform_finance,
    } = b;
    let month = o.month.clone();
    view! {
        <p class="lede">{format!("{organization} · {month}")}
            {platform_finance.then(|| view! { " · " <a href="/admin/billing">"All organizations →"</a> })}
        </p>
        {o.budgets.iter().filter(|x| x.alert != "ok").map(|x| view! {
            <section class=format!("card notice budget-{}", x.alert) role="alert" data-testid="budget-alert">
                <p><strong>{if x.alert == "exceeded" { "Budget exceeded" } else { "Budget at 80 %" }}</strong>
                   {format!(": {} has spent {} of its {} monthly budget ({} %). ", x.scope, x.spent.grouped(), x.limit.grouped(), x.percent)}
                   {if x.alert == "exceeded" { "New launches in this scope are refused until next month or a higher budget." } else { "Launches that would pass the budget are refused." }}
                </p>
            </section>
        }).collect_view()}
        <div class="stats">
            <div class="stat"><span class="label">"Month to date"</span><span class="value" data-testid="mtd">{o.month_to_date.grouped()}</span></div>
            <div class="stat"><span class="label">"Forecast for the month"</span><span class="value" data-testid="forecast">{o.forecast.grouped()}</span>
                <span class="hint">{format!("{}/h running now", o.running_per_hour.grouped())}</span></div>
            <div class="stat"><span class="label">"Storage this month"</span><span class="value" data-testid="storage-mtd">{o.storage.month_to_date.grouped()}</span>
                <span class="hint" data-testid="storage-now">{format!("{} GiB stored now, {} a month", o.storage.provisioned_gib, o.storage.per_month.grouped())}</span></div>
            <div class="stat"><span class="label">"Prepaid credit"</span><span class="value" data-testid="credit">{o.credit_balance.grouped()}</span></div>
        </div>
        {(!o.budgets.is_empty()).then(|| view! {
            <section class="card" aria-labelledby="budgets">
                <h2 id="budgets">"Budgets"</h2>
                <ul>{o.budgets.into_iter().map(|x| view! {
                    <li>{format!("{}: {} of {} ({} %)", x.scope, x.spent.grouped(), x.limit.grouped(), x.percent)}</li>
                }).collect_view()}</ul>
            </section>
        })}
        <section class="card" aria-labelledby="spend">
            <h2 id="spend">"Spend this month"</h2>
            {if let Some((by_project_chart, by_sku_chart)) = charts {
                view! {
                    <h3>"By project"</h3>
                    <Chart option=by_project_chart label="Daily spend this month, stacked by project" testid="chart-project" />
                    <h3>"By SKU"</h3>
                    <Chart option=by_sku_chart label="Daily spend this month, stacked by SKU" testid="chart-sku" />
                }.into_any()
            } else {
                view! { <p class="hint">"No rated usage this month yet. Usage is rated hourly."</p> }.into_any()
            }}
            <p><a class="button" href=format!("/billing/export/usage.csv?month={month}") download data-testid="export-usage">"Export usage (CSV)"</a></p>
        </section>
        {(!o.clusters.is_empty()).then(|| view! {
            <section class="card" aria-labelledby="clusters-h">
                <h2 id="clusters-h">"Clusters this month"</h2>
                <p class="hint">"Members are billed as instances; here is what each cluster's members cost together. It is part of the month to date."</p>
                <div class="table-scroll">
                <table class="data cards" id="cluster-spend">
                    <thead><tr><th>"Cluster"</th><th>"Project"</th><th>"Nodes"</th><th>"State"</th><th>"Month to date"</th></tr></thead>
                    <tbody>{o.clusters.into_iter().map(|c| view! {
                        <tr data-testid="cluster-spend">
                            <td>{c.name}</td>
                            <td data-label="Project">{c.project}</td>
                            <td data-label="Nodes">{c.nodes}</td>
                            <td data-label="State">{if c.released { "released" } else { "running" }}</td>
                            <td data-label="Month to date" class="amount">{c.month_to_date.grouped()}</td>
                        </tr>
                    }).collect_view()}</tbody>
                </table>
                </div>
            </section>
        })}
        <section class="card" aria-labelledby="invoices-h">
            <h2 id="invoices-h">"Invoices"</h2>
            <InvoiceTable invoices=invoices show_tenant=false id="invoices" />
        </section>
    }
}

#[component]
pub fn InvoicePage() -> impl IntoView {
    let params = use_params_map();
    let note = ServerAction::<IssueCreditNote>::new();
    let page = Resource::new(
        move || {
            (
                params.with(|p| p.get("id").unwrap_or_default()),
                note.version().get(),
            )
        },
        |(id, _)| get_invoice(id.into()),
    );
    view! {
        <Title text="Invoice" />
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(v) => view! { <InvoiceBody v note /> }.into_any(),
                    Err(e) => view! { <h1>"Invoice"</h1> <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// A line's quantity with its unit: GPU-hours, hours of a listing's fee, GiB-hours.
fn quantity(kind: &str, q: &str) -> String {
    match kind {
        "usage" if !q.is_empty() => format!("{} GPU-h", portal_types::readable_decimal(q, 2)),
        _ => portal_types::readable_decimal(q, 2),
    }
}

/// A line's unit price as people read it (`6.48 USD / GPU-hour`), per the unit its kind is
/// sold by; empty for lines without one (credit).
fn unit_price(kind: &str, price: &str, currency: &str) -> String {
    let unit = match kind {
        "usage" => "GPU-hour",
        "storage" => "GiB-month",
        _ => "hour",
    };
    match price {
        "" => String::new(),
        // Storage prices are often below a cent: all the decimals that matter.
        p if kind == "storage" => {
            let p = p.trim_end_matches('0');
            let p = match p.split_once('.') {
                Some((w, f)) if f.len() < 2 => format!("{w}.{f:0<2}"),
                _ => p.to_owned(),
            };
            format!("{p} {currency} / {unit}")
        }
        p => format!(
            "{} {currency} / {unit}",
            portal_types::readable_decimal(p, 2)
        ),
    }
}

/// Each line with the heading to show above it: a cluster's name before the first of its lines
/// (they are consecutive, as an invoice is drafted).
fn cluster_groups(lines: Vec<InvoiceLine>) -> Vec<(Option<String>, InvoiceLine)> {
    let mut last: Option<String> = None;
    lines
        .into_iter()
        .map(|l| {
            let heading = l.cluster.clone().filter(|c| last.as_ref() != Some(c));
            last = l.cluster.clone();
            (heading, l)
        })
        .collect()
}

#[component]
fn InvoiceBody(v: InvoiceView, note: ServerAction<IssueCreditNote>) -> impl IntoView {
    let InvoiceView {
        detail: v,
        can_credit,
    } = v;
    let i = v.summary.clone();
    let badge = status_badge(&i);
    let stripe = stripe_cell(&i);
    let id = i.id.to_string();
    view! {
        <h1>"Invoice " {i.number.clone()}</h1>
        <p class="lede">{format!("{} · {}", i.tenant_name, i.month)} " · " {badge} " · Stripe: " {stripe}</p>
        {i.payment_error.clone().filter(|_| i.payment_failed).map(|e| view! {
            <section class="card notice" role="alert"><p>"The last payment attempt failed: " {e} ". Stripe retries; the customer can also pay on the hosted invoice page."</p></section>
        })}
        <div class="table-scroll">
        <table class="data cards" id="invoice-lines">
            <thead><tr><th>"#"</th><th>"Description"</th><th>"Quantity"</th><th>"Unit price"</th><th>"Amount"</th></tr></thead>
            <tbody>
                {cluster_groups(v.lines).into_iter().map(|(heading, l)| view! {
                    {heading.map(|name| view! {
                        <tr class="group" data-testid="invoice-cluster"><th colspan="5">{format!("Cluster {name}")}</th></tr>
                    })}
                    <tr data-kind=l.kind.clone()>
                        <td class="line-no">{l.line_no}</td>
                        <td>{l.description}</td>
                        <td data-label="Quantity">{quantity(&l.kind, &l.gpu_hours)}</td>
                        <td data-label="Unit price">{unit_price(&l.kind, &l.unit_price, &l.amount.currency)}</td>
                        <td data-label="Amount" class="amount">{l.amount.grouped()}</td>
                    </tr>
                }).collect_view()}
            </tbody>
            <tfoot>
                <tr><th colspan="4">"Subtotal"</th><td>{v.subtotal.grouped()}</td></tr>
                <tr><th colspan="4">"Prepaid credit applied"</th><td>{v.credit_applied.grouped()}</td></tr>
                <tr><th colspan="4">"Total"</th><td data-testid="invoice-total">{i.total.grouped()}</td></tr>
                {v.credit_notes.iter().map(|n| view! {
                    <tr><th colspan="4">{format!("Credit note ({}, {})", n.reason, utc(n.created_at))}</th><td>{format!("-{}", n.amount.grouped())}</td></tr>
                }).collect_view()}
                {v.paid.clone().map(|amount| view! {
                    <tr data-testid="invoice-paid"><th colspan="4">{match v.paid_at { Some(at) => format!("Paid {}", utc(at)), None => "Paid".to_string() }}</th><td>{format!("-{}", amount.grouped())}</td></tr>
                })}
                <tr><th colspan="4">{if i.status == "void" { "Balance (void)" } else { "Balance" }}</th><td data-testid="invoice-balance">{v.balance.grouped()}</td></tr>
            </tfoot>
        </table>
        </div>
        <p class="hint">"Amounts are rated per second at the price in force at launch, and rounded to the cent once per line (halves away from zero)."
            {v.finalized_at.map(|t| format!(" Finalised {}.", utc(t)))}{v.paid_at.map(|t| format!(" Paid {}.", utc(t)))}</p>
        {(!can_credit).then(|| view! {
            <p><a class="button" href=format!("/billing/export/invoices/{id}/lines.csv") download data-testid="export-lines">"Export lines (CSV)"</a></p>
        })}
        {can_credit.then(|| view! {
            <section class="card" aria-labelledby="credit-note">
                <h2 id="credit-note">"Issue a credit note"</h2>
                <ActionForm action=note>
                    <input type="hidden" name="invoice" value=i.id.to_string() />
                    <div class="form-grid">
                        <label>"Amount" <input name="amount" required placeholder="12.50 USD" /></label>
                        <label>"Reason" <input name="reason" required placeholder="SLA credit for the 3 Nov outage" /></label>
                    </div>
                    <button type="submit">"Issue credit note"</button>
                </ActionForm>
                {outcome(note.value(), |m: String| Some(format!("Credit note of {m} issued.")))}
            </section>
        })}
        <p><a href="/billing">"← Billing"</a></p>
    }
}

#[component]
pub fn PlatformBillingPage() -> impl IntoView {
    let query = use_query_map();
    let grant = ServerAction::<GrantCredit>::new();
    let filters = move || {
        query.with(|q| {
            (
                q.get("status").filter(|s| !s.is_empty()),
                q.get("tenant").filter(|s| !s.is_empty()),
                q.get("month").filter(|s| !s.is_empty()),
            )
        })
    };
    let page = Resource::new(
        move || (filters(), grant.version().get()),
        |((status, tenant, month), _)| get_platform_billing(status, tenant, month),
    );
    view! {
        <Title text="Platform billing" />
        <h1>"Platform billing"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let (status, tenant, month) = filters();
                match page.await {
                    Ok(p) => view! { <PlatformBody p grant status tenant month /> }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn PlatformBody(
    p: PlatformBillingView,
    grant: ServerAction<GrantCredit>,
    status: Option<String>,
    tenant: Option<String>,
    month: Option<String>,
) -> impl IntoView {
    let tenants = p.tenants.clone();
    view! {
        <section class="card" aria-labelledby="failed">
            <h2 id="failed">"Failed payments needing action"</h2>
            {if p.failed.is_empty() {
                view! { <p class="hint" data-testid="no-failed">"None."</p> }.into_any()
            } else {
                view! { <InvoiceTable invoices=p.failed show_tenant=true id="failed-invoices" /> }.into_any()
            }}
        </section>
        <section class="card" aria-labelledby="revenue">
            <h2 id="revenue">"Revenue"</h2>
            <Chart option=p.revenue_chart label="Rated usage, invoiced and paid, per month" testid="chart-revenue" />
            <div class="table-scroll">
            <table class="data"><thead><tr><th>"Month"</th><th>"Rated usage"</th><th>"Invoiced"</th><th>"Paid"</th></tr></thead>
                <tbody>{p.revenue.into_iter().map(|r| view! { <tr><td>{r.month}</td><td>{r.rated.grouped()}</td><td>{r.invoiced.grouped()}</td><td>{r.paid.grouped()}</td></tr> }).collect_view()}</tbody>
            </table>
            </div>
        </section>
        <section class="card" aria-labelledby="all-invoices">
            <h2 id="all-invoices">"Invoices"</h2>
            <form method="get" action="/admin/billing" class="filters">
                <label>"Status "
                    <select name="status">
                        {["", "open", "paid", "failed", "void", "uncollectible"].into_iter().map(|s| view! {
                            <option value=s selected=status.as_deref() == Some(s)>{if s.is_empty() { "any" } else { s }}</option>
                        }).collect_view()}
                    </select>
                </label>
                <label>" Organization "
                    <select name="tenant">
                        <option value="">"any"</option>
                        {tenants.iter().map(|(_, slug)| view! {
                            <option value=slug.clone() selected=tenant.as_deref() == Some(slug.as_str())>{slug.clone()}</option>
                        }).collect_view()}
                    </select>
                </label>
                <label>" Month " <input name="month" placeholder="2026-10" value=month.unwrap_or_default() /></label>
                <button type="submit">"Filter"</button>
            </form>
            <InvoiceTable invoices=p.invoices show_tenant=true id="all-invoices" />
        </section>
        <section class="card" aria-labelledby="grant">
            <h2 id="grant">"Grant prepaid credit"</h2>
            <p class="hint">"Applied to the organization's next invoices before anything is charged. Audited."</p>
            <ActionForm action=grant>
                <div class="form-grid">
                    <label>"Organization" <select name="tenant">{p.tenants.into_iter().map(|(id, slug)| view! { <option value=id.to_string()>{slug}</option> }).collect_view()}</select></label>
                    <label>"Amount" <input name="amount" required placeholder="500.00 USD" /></label>
                    <label>"Reason" <input name="reason" required placeholder="pilot agreement" /></label>
                </div>
                <button type="submit">"Grant credit"</button>
            </ActionForm>
            {outcome(grant.value(), |m: String| Some(format!("Granted {m}.")))}
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(line_no: i32, cluster: Option<&str>) -> InvoiceLine {
        InvoiceLine {
            line_no,
            kind: "usage".into(),
            description: String::new(),
            project: Some("research".into()),
            cluster: cluster.map(Into::into),
            sku: Some("h100.8x".into()),
            gpu_hours: "1.000000".into(),
            unit_price: "2.990000".into(),
            amount: portal_types::Money {
                amount_minor: 299,
                currency: "USD".into(),
            },
        }
    }

    #[test]
    fn a_clusters_heading_comes_once_before_its_first_line() {
        let lines = vec![
            line(1, None),
            line(2, Some("train")),
            line(3, Some("train")),
            line(4, Some("eval")),
            line(5, None),
        ];
        let headings: Vec<Option<String>> =
            cluster_groups(lines).into_iter().map(|(h, _)| h).collect();
        assert_eq!(
            headings,
            [None, Some("train".into()), None, Some("eval".into()), None]
        );
    }
}
