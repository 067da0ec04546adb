//! The home page: what each person opens the portal for.
//!
//! - A visitor: what the product is, and the public catalog with what could launch now.
//! - A member of an organization: their running instances (state, SSH command, cost so far),
//!   what needs them (a failed launch, one about to expire, a budget near its limit, a failed
//!   payment), and for its admins and finance the month's spend and forecast.
//! - Platform staff: what needs attention in the fleet (nodes awaiting approval, drift,
//!   GPUs out of service, reconciliation findings, failing syncs and payments), the fleet in
//!   numbers, and what could launch now by SKU and region.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::allocations::AllocationRow;
use crate::components::{CopyButton, ErrorNotice};
use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Home {
    Visitor(VisitorHome),
    Tenant(Box<TenantHome>),
    Platform(Box<PlatformHome>),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VisitorHome {
    /// The control plane reaches its database and its schema is current.
    pub ready: bool,
    pub offers: Vec<Offer>,
}

/// One SKU for sale, as the home page lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    pub sku: String,
    pub name: String,
    /// "8 × H100".
    pub gpus: String,
    pub per_hour: String,
    /// How many could launch now, over its regions.
    pub available: i64,
    pub regions: String,
}

/// Something that needs the person, with where to act on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// `bad` (broken, or costing money for nothing) or `warn` (soon, or waiting on them).
    pub level: String,
    pub text: String,
    pub href: String,
}

#[cfg(feature = "ssr")]
impl Notice {
    fn bad(text: String, href: String) -> Self {
        Self {
            level: "bad".into(),
            text,
            href,
        }
    }
    fn warn(text: String, href: String) -> Self {
        Self {
            level: "warn".into(),
            text,
            href,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantHome {
    pub display_name: String,
    pub organization: String,
    /// Operator or admin of at least one project.
    pub can_launch: bool,
    /// Not released yet, newest first (at most [`RUNNING_SHOWN`]).
    pub running: Vec<AllocationRow>,
    /// There are more than those.
    pub more_running: bool,
    /// The latest launches, released ones included.
    pub recent: Vec<AllocationRow>,
    pub attention: Vec<Notice>,
    /// For the organization's admins and finance.
    pub spend: Option<Spend>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spend {
    pub month: String,
    pub month_to_date: String,
    pub forecast: String,
    pub per_hour: String,
    /// "research: 412.16 USD of 500.00 USD (82 %)".
    pub budgets: Vec<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlatformHome {
    /// "platform admin".
    pub role: String,
    pub attention: Vec<Notice>,
    /// (label, count) of the nodes by posture, the ones with any.
    pub nodes: Vec<(String, i64)>,
    /// (state, count) of the approved slots.
    pub slots: Vec<(String, i64)>,
    /// (state, count) of the allocations not released.
    pub allocations: Vec<(String, i64)>,
    pub capacity: Capacity,
}

/// What could launch now of each SKU in each region: a row per SKU, a column per region
/// (`None` where the SKU is not sold).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    pub regions: Vec<String>,
    pub skus: Vec<(String, Vec<Option<i64>>)>,
}

impl Capacity {
    #[cfg(feature = "ssr")]
    fn of(catalog: Vec<portal_types::catalog::CatalogEntry>) -> Self {
        let mut regions: Vec<String> = catalog
            .iter()
            .flat_map(|e| e.availability.iter().map(|r| r.region.clone()))
            .collect();
        regions.sort();
        regions.dedup();
        let skus = catalog
            .into_iter()
            .map(|e| {
                let row = regions
                    .iter()
                    .map(|region| {
                        e.availability
                            .iter()
                            .find(|r| &r.region == region)
                            .map(|r| r.launchable)
                    })
                    .collect();
                (e.sku.name, row)
            })
            .collect();
        Self { regions, skus }
    }
}

/// How many running instances the home page lists.
pub const RUNNING_SHOWN: u32 = 8;

#[server]
pub async fn get_home() -> Result<Home, AppError> {
    let cp = crate::server::control_plane()?;
    let Some(principal) = crate::server::current_principal().await? else {
        return Ok(Home::Visitor(ssr::visitor(&cp).await?));
    };
    if principal.platform_role.is_some() {
        return Ok(Home::Platform(Box::new(
            ssr::platform(&cp, &principal).await?,
        )));
    }
    match principal.home {
        Some(_) => Ok(Home::Tenant(Box::new(ssr::tenant(&cp, &principal).await?))),
        // Signed in, in no organization and not staff: what a visitor sees.
        None => Ok(Home::Visitor(ssr::visitor(&cp).await?)),
    }
}

#[cfg(feature = "ssr")]
mod ssr {
    use control_plane::allocations::{AllocationFilter, AllocationPage};
    use control_plane::auth::{PlatformStaff, Principal};
    use control_plane::billing::invoices::PlatformFinance;
    use control_plane::billing::reports::TenantFinance;
    use control_plane::health::Readiness;
    use control_plane::prelude::*;
    use control_plane::tenancy::{ProjectOperators, ProjectRequirement, TenantMembers};
    use portal_types::allocations::AllocationSummary;
    use portal_types::billing::{BudgetStatus, InvoiceFilter, InvoiceSummary};
    use portal_types::fleet::NodeSummary;
    use portal_types::ops::OpsOverview;

    use super::*;
    use crate::components::plural;

    const RECENT_SHOWN: u32 = 5;
    /// An instance that expires within this many hours needs its owner.
    const EXPIRY_WARNING_HOURS: i64 = 24;

    pub async fn visitor(cp: &control_plane::ControlPlane) -> Result<VisitorHome, AppError> {
        let ready = matches!(cp.readiness().await, Readiness::Ready { .. });
        // Unready, the page still says what the product is, and that launches will resume.
        if !ready {
            return Ok(VisitorHome {
                ready,
                offers: vec![],
            });
        }
        let offers = cp
            .catalog()
            .await?
            .into_iter()
            .map(|e| Offer {
                gpus: format!("{} × {}", e.sku.gpu_count, e.sku.gpu_model),
                available: e.availability.iter().map(|r| r.launchable).sum(),
                regions: e.sku.regions.join(", "),
                per_hour: e.sku.price.grouped(),
                name: e.sku.display_name,
                sku: e.sku.name,
            })
            .collect();
        Ok(VisitorHome { ready, offers })
    }

    pub async fn tenant(
        cp: &control_plane::ControlPlane,
        principal: &Principal,
    ) -> Result<TenantHome, AppError> {
        let (member, organization) =
            crate::server::home_tenant::<TenantMembers>(cp, principal).await?;
        let visible = cp.visible_projects(&member).await?;
        let can_launch = visible
            .iter()
            .any(|(p, _)| ProjectOperators::ROLES.contains(&p.my_role));
        let projects: Vec<_> = visible.into_iter().map(|(_, who)| who).collect();
        let page = |state: &str, limit: u32| AllocationFilter {
            state: Some(state.into()),
            tag: None,
            after: None,
            limit,
        };
        let (running, recent) = if projects.is_empty() {
            let none = || AllocationPage {
                items: vec![],
                next: None,
            };
            (none(), none())
        } else {
            (
                cp.allocation_page(&projects, &page("active", RUNNING_SHOWN))
                    .await?,
                cp.allocation_page(&projects, &page("all", RECENT_SHOWN))
                    .await?,
            )
        };
        // A launch that failed shows among the recent ones even once it is released.
        let mut seen = std::collections::HashSet::new();
        let launches: Vec<AllocationSummary> = running
            .items
            .iter()
            .chain(&recent.items)
            .filter(|a| seen.insert(a.id))
            .cloned()
            .collect();
        let mut attention = instances_needing_attention(&launches, now());
        // Their organization's spend, for those who may see it (others are refused: no card).
        let finance = match cp.home_tenant_access::<TenantFinance>(principal).await {
            Ok(access) => access,
            Err(control_plane::Error::Forbidden { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let spend = match finance {
            Some((finance, _)) => {
                let overview = cp.billing_overview(&finance).await?;
                let invoices = cp.tenant_invoices(&finance).await?;
                attention.extend(budgets_needing_attention(&overview.budgets));
                attention.extend(invoices_needing_attention(&invoices));
                Some(Spend {
                    month: overview.month,
                    month_to_date: overview.month_to_date.grouped(),
                    forecast: overview.forecast.grouped(),
                    per_hour: overview.running_per_hour.grouped(),
                    budgets: overview
                        .budgets
                        .iter()
                        .map(|b| {
                            (
                                b.scope.clone(),
                                format!(
                                    "{} of {} ({} %)",
                                    b.spent.grouped(),
                                    b.limit.grouped(),
                                    b.percent
                                ),
                            )
                        })
                        .collect(),
                })
            }
            None => None,
        };
        Ok(TenantHome {
            display_name: principal.display_name.clone(),
            organization,
            can_launch,
            more_running: running.next.is_some(),
            running: running.items.into_iter().map(AllocationRow::from).collect(),
            recent: recent.items.into_iter().map(AllocationRow::from).collect(),
            attention,
            spend,
        })
    }

    pub async fn platform(
        cp: &control_plane::ControlPlane,
        principal: &Principal,
    ) -> Result<PlatformHome, AppError> {
        let staff = principal.platform::<PlatformStaff>()?;
        let ops = cp.ops_overview(&staff).await?;
        let fleet = cp
            .fleet(&staff, &control_plane::fleet::FleetFilter::default())
            .await?;
        let mut attention = fleet_needing_attention(&fleet.nodes, &ops);
        if let Ok(finance) = principal.platform::<PlatformFinance>() {
            let failed = cp
                .all_invoices(
                    &finance,
                    &InvoiceFilter {
                        status: Some("failed".into()),
                        ..Default::default()
                    },
                )
                .await?;
            if !failed.is_empty() {
                attention.push(Notice::bad(
                    format!(
                        "{} with a failed payment",
                        plural(failed.len() as i64, "invoice", "invoices")
                    ),
                    "/admin/billing?status=failed".into(),
                ));
            }
        }
        let capacity = Capacity::of(cp.catalog().await?);
        Ok(PlatformHome {
            role: format!("platform {}", staff.role().as_str()),
            attention,
            nodes: fleet
                .by_posture
                .into_iter()
                .filter(|(_, _, n)| *n > 0)
                .map(|(_, label, n)| (label, n))
                .collect(),
            slots: ops.gauges.slots,
            allocations: ops.gauges.allocations,
            capacity,
        })
    }

    fn now() -> time::OffsetDateTime {
        time::OffsetDateTime::now_utc()
    }

    /// A launch of the last day that failed, or an instance that releases itself within a
    /// day.
    pub(super) fn instances_needing_attention(
        launches: &[AllocationSummary],
        now: time::OffsetDateTime,
    ) -> Vec<Notice> {
        let window = time::Duration::hours(EXPIRY_WARNING_HOURS);
        launches
            .iter()
            .filter_map(|a| {
                let href = format!("/allocations/{}", a.id);
                match (a.projected.as_str(), a.expires_at) {
                    ("failed" | "failing", _) if a.created_at >= now - window => {
                        Some(Notice::bad(format!("{} failed to launch", a.name), href))
                    }
                    ("failed" | "failing" | "released", _) => None,
                    (_, Some(at)) if at <= now + window => Some(Notice::warn(
                        format!(
                            "{} is released by itself at {}",
                            a.name,
                            portal_types::utc(at)
                        ),
                        href,
                    )),
                    _ => None,
                }
            })
            .collect()
    }

    /// Budgets at 80 % or more.
    pub(super) fn budgets_needing_attention(budgets: &[BudgetStatus]) -> Vec<Notice> {
        budgets
            .iter()
            .filter(|b| b.alert != "ok")
            .map(|b| {
                let what = if b.alert == "exceeded" {
                    "is over its monthly budget"
                } else {
                    "is near its monthly budget"
                };
                let text = format!(
                    "{} {what}: {} of {} ({} %)",
                    if b.scope == "organization" {
                        "The organization"
                    } else {
                        b.scope.as_str()
                    },
                    b.spent.grouped(),
                    b.limit.grouped(),
                    b.percent
                );
                if b.alert == "exceeded" {
                    Notice::bad(text, "/billing".into())
                } else {
                    Notice::warn(text, "/billing".into())
                }
            })
            .collect()
    }

    /// Invoices whose payment failed.
    pub(super) fn invoices_needing_attention(invoices: &[InvoiceSummary]) -> Vec<Notice> {
        invoices
            .iter()
            .filter(|i| i.payment_failed)
            .map(|i| {
                Notice::bad(
                    format!(
                        "Payment of invoice {} ({}) failed",
                        i.number,
                        i.total.grouped()
                    ),
                    format!("/billing/invoices/{}", i.id),
                )
            })
            .collect()
    }

    /// Nodes waiting for an operator's decision or drifted from what was approved, and
    /// everything the operations panel lists as needing attention.
    pub(super) fn fleet_needing_attention(nodes: &[NodeSummary], ops: &OpsOverview) -> Vec<Notice> {
        let mut out = Vec::new();
        for n in nodes {
            let href = format!("/fleet/{}", n.id);
            if n.pending_generation.is_some() {
                out.push(Notice::warn(
                    format!("{} awaits approval of what it may sell", n.hostname),
                    href.clone(),
                ));
            }
            if n.drifted_slots > 0 {
                out.push(Notice::warn(
                    format!(
                        "{} has {} that differ from what was approved",
                        n.hostname,
                        plural(n.drifted_slots, "slot", "slots")
                    ),
                    href,
                ));
            }
        }
        for a in &ops.attention {
            out.push(Notice::bad(
                format!("{}: {} — {}", a.hostname, a.label(), a.detail),
                format!("/fleet/{}", a.node_id),
            ));
        }
        for a in ops.gauges.needing_attention() {
            out.push(Notice::bad(a.what, a.href));
        }
        out
    }
}

#[component]
pub fn HomePage() -> impl IntoView {
    let crate::auth::AuthEpoch(epoch) = expect_context::<crate::auth::AuthEpoch>();
    let home = Resource::new(move || epoch.get(), |_| get_home());
    view! {
        <leptos_meta::Title text="Home" />
        <Suspense fallback=|| view! { <h1>"GPU cloud"</h1><p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match home.await {
                    Ok(Home::Visitor(v)) => view! { <VisitorView v /> }.into_any(),
                    Ok(Home::Tenant(t)) => view! { <TenantView t=*t /> }.into_any(),
                    Ok(Home::Platform(p)) => view! { <PlatformView p=*p /> }.into_any(),
                    Err(e) => view! { <h1>"GPU cloud"</h1><ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn VisitorView(v: VisitorHome) -> impl IntoView {
    view! {
        <h1>"GPU cloud"</h1>
        <p class="lede">
            "Launch GPU slices and whole bare-metal nodes in seconds, reach them over SSH, and pay by the second for what runs."
        </p>
        {if v.ready {
            view! { <p class="status ok" data-status="ready">"Control plane ready: launches are open."</p> }.into_any()
        } else {
            view! { <p class="status bad" data-status="unavailable">"The control plane is unavailable just now; launches will resume shortly."</p> }.into_any()
        }}
        <section class="card" aria-labelledby="offers-h">
            <h2 id="offers-h">"What you can run"</h2>
            {if v.offers.is_empty() {
                view! { <p>"Nothing is for sale just now."</p> }.into_any()
            } else {
                view! {
                    <table class="data cards" id="offers">
                        <thead><tr><th scope="col">"Offer"</th><th scope="col">"GPUs"</th><th scope="col">"Per hour"</th><th scope="col">"Could launch now"</th><th scope="col">"Regions"</th></tr></thead>
                        <tbody>
                            {v.offers.into_iter().map(|o| view! {
                                <tr data-sku=o.sku.clone()>
                                    <th scope="row">{o.name}</th>
                                    <td data-label="GPUs">{o.gpus}</td>
                                    <td data-label="Per hour" class="amount">{o.per_hour}</td>
                                    <td data-label="Could launch now">{o.available}</td>
                                    <td data-label="Regions">{o.regions}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }}
            <p><a class="button" href="/login">"Sign in to launch"</a> " " <a href="/catalog">"The whole catalog, with estimates"</a> " · " <a href="/marketplace">"Software in the marketplace"</a></p>
        </section>
    }
}

/// What needs the person now; nothing at all when nothing does.
#[component]
fn Attention(notices: Vec<Notice>) -> impl IntoView {
    view! {
        <section class="card attention" aria-labelledby="attention-h" data-testid="attention">
            <h2 id="attention-h">"Needs your attention"</h2>
            {if notices.is_empty() {
                view! { <p class="status ok">"Nothing needs your attention."</p> }.into_any()
            } else {
                view! {
                    <ul class="plain">
                        {notices.into_iter().map(|n| view! {
                            <li class=format!("status {}", n.level)><a href=n.href>{n.text}</a></li>
                        }).collect_view()}
                    </ul>
                }.into_any()
            }}
        </section>
    }
}

#[component]
fn TenantView(t: TenantHome) -> impl IntoView {
    let launch = t.can_launch.then(|| {
        view! {
            <p class="quick-launch">
                <a class="button" href="/catalog">"Launch an instance"</a>
                " " <a class="button secondary" href="/marketplace">"Launch from the marketplace"</a>
            </p>
        }
    });
    let spend = t.spend.map(|s| {
        view! {
            <section class="card" aria-labelledby="spend-h">
                <h2 id="spend-h">{format!("Spend in {}", s.month)}</h2>
                <div class="stats">
                    <div class="stat"><span class="label">"Month to date"</span><span class="value" data-testid="home-mtd">{s.month_to_date}</span></div>
                    <div class="stat"><span class="label">"Forecast for the month"</span><span class="value" data-testid="home-forecast">{s.forecast}</span>
                        <span class="hint">{format!("{}/h running now", s.per_hour)}</span></div>
                </div>
                {(!s.budgets.is_empty()).then(|| view! {
                    <dl class="facts">
                        {s.budgets.into_iter().map(|(scope, text)| view! { <dt>{format!("Budget, {scope}")}</dt><dd>{text}</dd> }).collect_view()}
                    </dl>
                })}
                <p><a href="/billing">"Billing and invoices"</a></p>
            </section>
        }
    });
    let more = t.more_running.then(|| {
        view! { <p><a href="/allocations">"All running instances →"</a></p> }
    });
    view! {
        <h1>{format!("Welcome, {}", t.display_name)}</h1>
        <p class="lede">{t.organization}</p>
        {launch}
        <Attention notices=t.attention />
        <section class="card" aria-labelledby="running-h">
            <h2 id="running-h">"Running now"</h2>
            {if t.running.is_empty() {
                view! { <p data-testid="none-running">"Nothing is running."</p> }.into_any()
            } else {
                view! { <InstanceTable rows=t.running id="running" /> }.into_any()
            }}
            {more}
        </section>
        {spend}
        {(!t.recent.is_empty()).then(|| view! {
            <section class="card" aria-labelledby="recent-h">
                <h2 id="recent-h">"Recent launches"</h2>
                <ul class="plain" id="recent">
                    {t.recent.into_iter().map(|a| view! {
                        <li>
                            <a href=format!("/allocations/{}", a.id)>{a.name}</a>
                            " " <span class=format!("state state-{}", a.projected)>{a.projected.clone()}</span>
                            <span class="hint">{format!(" · {} · {}", a.sku, a.created)}</span>
                        </li>
                    }).collect_view()}
                </ul>
                <p><a href="/allocations?state=all">"Every instance →"</a></p>
            </section>
        })}
    }
}

/// Instances with what a person acts on: where to connect and what it has cost.
#[component]
pub fn InstanceTable(rows: Vec<AllocationRow>, id: &'static str) -> impl IntoView {
    view! {
        <div class="table-scroll">
            <table class="data cards" id=id>
                <thead><tr><th scope="col">"Name"</th><th scope="col">"State"</th><th scope="col">"Connect"</th><th scope="col">"Cost so far"</th><th scope="col">"Per hour"</th></tr></thead>
                <tbody>
                    {rows.into_iter().map(|a| view! {
                        <tr data-allocation=a.name.clone()>
                            <th scope="row"><a href=format!("/allocations/{}", a.id)>{a.name.clone()}</a>
                                <span class="hint">{format!(" {} · {}", a.sku, a.region)}</span></th>
                            <td data-label="State"><span class=format!("state state-{}", a.projected)>{a.projected.clone()}</span></td>
                            <td data-label="Connect" class="connect">
                                {match a.ssh {
                                    Some(ssh) => view! {
                                        <code data-testid="home-ssh">{ssh.clone()}</code>
                                        <CopyButton text=ssh label=format!("Copy the SSH command for {}", a.name) />
                                    }.into_any(),
                                    None => view! { <span class="hint">"not yet"</span> }.into_any(),
                                }}
                            </td>
                            <td data-label="Cost so far" class="amount" data-testid="home-cost">{a.cost.unwrap_or_else(|| "—".into())}</td>
                            <td data-label="Per hour" class="amount">{a.per_hour}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}

#[component]
fn PlatformView(p: PlatformHome) -> impl IntoView {
    let counts = |rows: Vec<(String, i64)>| {
        rows.into_iter()
            .map(|(what, n)| view! { <dt>{what.replace('_', " ")}</dt><dd>{n}</dd> })
            .collect_view()
    };
    view! {
        <h1>"Platform"</h1>
        <p class="lede">{format!("What needs you, the fleet, and what could launch now; you are signed in as {}.", p.role)}</p>
        <Attention notices=p.attention />
        <div class="grid-2">
            <section class="card" aria-labelledby="nodes-h">
                <h2 id="nodes-h">"Nodes"</h2>
                {if p.nodes.is_empty() {
                    view! { <p>"No nodes enrolled yet."</p> }.into_any()
                } else {
                    view! { <dl class="facts" data-testid="home-nodes">{counts(p.nodes)}</dl> }.into_any()
                }}
                <p><a href="/fleet">"The fleet →"</a></p>
            </section>
            <section class="card" aria-labelledby="slots-h">
                <h2 id="slots-h">"Slots and instances"</h2>
                <dl class="facts" data-testid="home-slots">{counts(p.slots)}</dl>
                <h3>"Instances not released"</h3>
                <dl class="facts">{counts(p.allocations)}</dl>
                <p><a href="/admin/ops">"Operations →"</a></p>
            </section>
        </div>
        <section class="card" aria-labelledby="capacity-h">
            <h2 id="capacity-h">"Capacity by SKU and region"</h2>
            <p class="hint">"How many of each could launch now, as placement would honour them."</p>
            <div class="table-scroll">
                <table class="data" id="capacity">
                    <thead><tr>
                        <th scope="col">"SKU"</th>
                        {p.capacity.regions.into_iter().map(|r| view! { <th scope="col">{r}</th> }).collect_view()}
                    </tr></thead>
                    <tbody>
                        {p.capacity.skus.into_iter().map(|(sku, row)| view! {
                            <tr data-sku=sku.clone()>
                                <th scope="row">{sku.clone()}</th>
                                {row.into_iter().map(|n| match n {
                                    Some(n) => view! { <td class=(n == 0).then_some("none-free")>{n}</td> }.into_any(),
                                    None => view! { <td class="hint">"not sold"</td> }.into_any(),
                                }).collect_view()}
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
        </section>
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::ssr::*;
    use portal_types::Money;
    use portal_types::allocations::AllocationSummary;
    use portal_types::billing::BudgetStatus;
    use time::macros::datetime;

    fn summary(
        name: &str,
        projected: &str,
        expires: Option<time::OffsetDateTime>,
    ) -> AllocationSummary {
        AllocationSummary {
            id: "3583c5c9-2fce-4c53-8f8e-058355b44594".parse().unwrap(),
            project_id: "0a0e0000-0000-4000-8001-000000000001".parse().unwrap(),
            name: name.into(),
            sku: "h100.1x".into(),
            gpu_count: 1,
            region: "us-east-1".into(),
            state: projected.into(),
            projected: projected.into(),
            price_per_hour: Money::new(299, "USD"),
            cost_so_far: None,
            tags: Default::default(),
            created_at: datetime!(2026-12-06 08:00 UTC),
            expires_at: expires,
            ssh: None,
            ssh_endpoint: None,
            published: vec![],
        }
    }

    fn levels_and_texts(notices: &[super::Notice]) -> Vec<(&str, &str)> {
        notices
            .iter()
            .map(|n| (n.level.as_str(), n.text.as_str()))
            .collect()
    }

    #[test]
    fn a_failed_launch_and_an_instance_about_to_expire_need_their_owner() {
        let now = datetime!(2026-12-06 10:00 UTC);
        let notices = instances_needing_attention(
            &[
                summary("ok", "running", None),
                summary("later", "running", Some(datetime!(2026-12-08 10:00 UTC))),
                summary("soon", "running", Some(datetime!(2026-12-06 18:00 UTC))),
                summary("broken", "failed", None),
                AllocationSummary {
                    created_at: datetime!(2026-12-04 08:00 UTC),
                    ..summary("long-ago", "failed", None)
                },
                summary("done", "released", Some(datetime!(2026-12-06 09:00 UTC))),
            ],
            now,
        );
        let texts = levels_and_texts(&notices);
        assert_eq!(
            texts,
            [
                (
                    "warn",
                    "soon is released by itself at 2026-12-06 18:00:00 UTC"
                ),
                ("bad", "broken failed to launch"),
            ]
        );
        assert!(notices[1].href.starts_with("/allocations/"));
    }

    #[test]
    fn budgets_need_attention_from_eighty_percent() {
        let budget = |scope: &str, spent, alert: &str| BudgetStatus {
            scope: scope.into(),
            limit: Money::new(500_000, "USD"),
            spent: Money::new(spent, "USD"),
            percent: spent * 100 / 500_000,
            alert: alert.into(),
        };
        let notices = budgets_needing_attention(&[
            budget("organization", 100_000, "ok"),
            budget("research", 410_000, "warning"),
            budget("organization", 510_000, "exceeded"),
        ]);
        let texts = levels_and_texts(&notices);
        assert_eq!(
            texts,
            [
                (
                    "warn",
                    "research is near its monthly budget: 4,100.00 USD of 5,000.00 USD (82 %)"
                ),
                (
                    "bad",
                    "The organization is over its monthly budget: 5,100.00 USD of 5,000.00 USD (102 %)"
                ),
            ]
        );
    }
}
