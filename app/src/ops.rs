//! The operations panel (`/admin/ops`) for platform staff: what needs attention now (GPUs out
//! of service, cleanup-blocked slots, silent agents, stuck tasks), the fleet's slots and
//! allocations by state, the queues, billing's health, and the latest failures, with links to
//! the nodes. The same numbers `/metrics` serves (`OpsApi`), read when the page loads.

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use portal_types::ops::OpsOverview;
use portal_types::utc;
use serde::{Deserialize, Serialize};

use crate::components::ErrorNotice;
use crate::error::AppError;

/// The panel: the control plane's overview and its two charts (ECharts options).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpsPage {
    pub overview: OpsOverview,
    pub slots_chart: String,
    pub allocations_chart: String,
}

#[cfg(feature = "ssr")]
fn bars(rows: &[(String, i64)], name: &str) -> String {
    use charming::Chart;
    use charming::component::{Axis, Grid};
    use charming::element::{AxisType, Tooltip, Trigger};
    use charming::series::Bar;
    let chart = Chart::new()
        .tooltip(Tooltip::new().trigger(Trigger::Axis))
        .grid(
            Grid::new()
                .left("3%")
                .right("3%")
                .top("8%")
                .bottom("8%")
                .contain_label(true),
        )
        .x_axis(
            Axis::new().type_(AxisType::Category).data(
                rows.iter()
                    .map(|(s, _)| s.replace('_', " "))
                    .collect::<Vec<_>>(),
            ),
        )
        .y_axis(Axis::new().type_(AxisType::Value).min_interval(1))
        .series(
            Bar::new()
                .name(name)
                .data(rows.iter().map(|(_, n)| *n).collect::<Vec<_>>()),
        );
    crate::components::chart_option(&chart)
}

/// Platform staff only.
#[server]
pub async fn get_ops() -> Result<OpsPage, AppError> {
    use control_plane::auth::PlatformStaff;
    let (cp, principal) = crate::server::signed_in().await?;
    let staff = principal.platform::<PlatformStaff>()?;
    let overview = cp.ops_overview(&staff).await?;
    Ok(OpsPage {
        slots_chart: bars(&overview.gauges.slots, "slots"),
        allocations_chart: bars(&overview.gauges.allocations, "allocations"),
        overview,
    })
}

fn count_of(rows: &[(String, i64)], state: &str) -> i64 {
    rows.iter().find(|(s, _)| s == state).map_or(0, |(_, n)| *n)
}

#[component]
pub fn OpsPanel() -> impl IntoView {
    let page = Resource::new(|| (), |_| get_ops());
    view! {
        <Title text="Operations" />
        <p class="breadcrumb"><a href="/admin">"Admin"</a> " / Operations"</p>
        <h1>"Operations"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(p) => view! { <OpsBody p /> }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn OpsBody(p: OpsPage) -> impl IntoView {
    let OpsPage {
        overview: o,
        slots_chart,
        allocations_chart,
    } = p;
    let g = o.gauges;
    // Billing's troubles are no node's: listed above the nodes'.
    let system = g.needing_attention();
    let nothing = system.is_empty() && o.attention.is_empty();
    let silent = o
        .attention
        .iter()
        .filter(|a| a.kind == "agent_silent")
        .count();
    let slot_states = [
        "free",
        "claimed",
        "cleaning",
        "blocked",
        "out_of_service",
        "drifted",
    ];
    let allocation_states = ["placed", "provisioning", "running", "releasing", "cleaning"];
    view! {
        <section class="card" aria-labelledby="attention">
            <h2 id="attention">"Needs attention"</h2>
            {(!system.is_empty()).then(|| view! {
                <ul class="plain" data-testid="system-attention">
                    {system.into_iter().map(|a| view! { <li class="status bad"><a href=a.href>{a.what}</a></li> }).collect_view()}
                </ul>
            })}
            {if o.attention.is_empty() {
                nothing.then(|| view! { <p data-testid="nothing-to-do">"Nothing needs attention."</p> }).into_any()
            } else {
                view! {
                    <div class="table-scroll">
                    <table class="data" data-testid="attention">
                        <thead><tr><th>"What"</th><th>"Node"</th><th>"Detail"</th><th>"Since"</th></tr></thead>
                        <tbody>
                            {o.attention.into_iter().map(|a| view! {
                                <tr data-kind=a.kind.clone()>
                                    <td>{a.label()}</td>
                                    <td><a href=format!("/fleet/{}", a.node_id)>{a.hostname.clone()}</a></td>
                                    <td>{a.detail.clone()}</td>
                                    <td>{utc(a.since)}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                    </div>
                }.into_any()
            }}
        </section>
        <div class="grid-2">
            <section class="card" aria-labelledby="ops-slots">
                <h2 id="ops-slots">"Slots"</h2>
                {if g.slots.iter().any(|(_, n)| *n > 0) {
                    view! { <div class="chart chart-small" role="img" aria-label="Approved slots by state" data-testid="slots-chart" data-option=slots_chart></div> }.into_any()
                } else {
                    view! { <p class="hint" data-testid="no-slots">"No slot is approved yet: approve a host's slot map on its fleet page."</p> }.into_any()
                }}
                <dl class="facts" data-testid="slot-counts">
                    {slot_states.into_iter().map(|s| view! {
                        <dt>{s.replace('_', " ")}</dt><dd data-state=s>{count_of(&g.slots, s)}</dd>
                    }).collect_view()}
                </dl>
                <p class="hint" data-testid="fleet-line">{format!("Agents reporting: {}, silent: {}. GPU health events in the last 24 hours: {}.", o.nodes_reporting, silent, o.gpu_events_24h)}</p>
            </section>
            <section class="card" aria-labelledby="ops-allocations">
                <h2 id="ops-allocations">"Allocations"</h2>
                {if g.allocations.iter().any(|(s, n)| *n > 0 && allocation_states.contains(&s.as_str())) {
                    view! { <div class="chart chart-small" role="img" aria-label="Allocations by state" data-testid="allocations-chart" data-option=allocations_chart></div> }.into_any()
                } else {
                    view! { <p class="hint" data-testid="no-allocations">"No allocation is in flight."</p> }.into_any()
                }}
                <dl class="facts" data-testid="allocation-counts">
                    {allocation_states.into_iter().map(|s| view! {
                        <dt>{s}</dt><dd data-state=s>{count_of(&g.allocations, s)}</dd>
                    }).collect_view()}
                </dl>
            </section>
        </div>
        <div class="grid-2">
            <section class="card" aria-labelledby="ops-queues">
                <h2 id="ops-queues">"Queues"</h2>
                <dl class="facts" data-testid="queues">
                    <dt>"Outbox"</dt><dd data-testid="outbox">{format!("{} pending", g.outbox_pending)}{(g.outbox_pending > 0).then(|| format!(", oldest {}", crate::components::duration_words(g.outbox_oldest_s)))}</dd>
                    <dt>"Agent tasks queued"</dt><dd data-testid="tasks-queued">{g.tasks_queued}{(g.tasks_queued > 0).then(|| format!(", oldest {}", crate::components::duration_words(g.tasks_queued_oldest_s)))}</dd>
                    <dt>"Agent tasks running"</dt><dd data-testid="tasks-running">{g.tasks_running}</dd>
                    <dt>"Stuck (over 30 min)"</dt><dd data-testid="tasks-stuck">{g.tasks_stuck}</dd>
                </dl>
            </section>
            <section class="card" aria-labelledby="ops-billing">
                <h2 id="ops-billing">"Billing"</h2>
                <dl class="facts" data-testid="billing-health">
                    <dt>"Rating lag"</dt><dd data-testid="rating-lag">{if g.rating_lag_s > 0.0 { crate::components::duration_words(g.rating_lag_s) } else { "none".into() }}</dd>
                    <dt>"Stripe syncs"</dt><dd data-testid="stripe">{format!("{} pending, {} failing", g.stripe_pending, g.stripe_failing)}{(g.stripe_pending > 0).then(|| format!(", oldest {}", crate::components::duration_words(g.stripe_oldest_s)))}</dd>
                    <dt>"Webhook events unapplied"</dt><dd data-testid="webhooks">{g.webhook_backlog}</dd>
                    <dt>"Invoices unlike Stripe's"</dt><dd data-testid="invoice-mismatches">{g.reconciliation_open.iter().find(|(k, _)| k == "invoice_mismatch").map_or(0, |(_, n)| *n)}</dd>
                </dl>
            </section>
        </div>
        <section class="card" aria-labelledby="failures">
            <h2 id="failures">"Latest failures"</h2>
            {if o.failures.is_empty() {
                view! { <p>"No failures."</p> }.into_any()
            } else {
                view! {
                    <div class="table-scroll">
                    <table class="data" data-testid="failures">
                        <thead><tr><th>"When"</th><th>"What"</th><th>"Where"</th><th>"Why"</th></tr></thead>
                        <tbody>
                            {o.failures.into_iter().map(|f| view! {
                                <tr>
                                    <td>{utc(f.at)}</td>
                                    <td><code>{f.what.clone()}</code></td>
                                    <td>{match (f.node_id, f.hostname.clone()) {
                                        (Some(id), Some(h)) => view! { <a href=format!("/fleet/{id}")>{h}</a> }.into_any(),
                                        _ => view! { "Stripe" }.into_any(),
                                    }}{f.allocation_id.map(|a| view! { <br/><small>{format!("allocation {a}")}</small> })}</td>
                                    <td>{f.detail.clone()}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                    </div>
                }.into_any()
            }}
        </section>
    }
}
