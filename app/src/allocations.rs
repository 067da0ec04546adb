//! Launching and running allocations: the launch form (project, SKU, region, marketplace
//! listing (preselected from a listing page, with only the SKUs it fits), SSH key,
//! name; a fresh idempotency key per form, so a double submit makes one allocation), a
//! project's allocations with state filters (newest first, a page at a time), and the
//! allocation page with its phases and timings (refreshed every second while it changes), SSH
//! details, release, and the cleanup certificate.

// The launch form has ten fields; its server function takes them as arguments, and the
// `#[server]` macro copies that signature into code an item-level allow does not reach.
#![allow(clippy::too_many_arguments)]
#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos::reactive::computed::ScopedFuture;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};
use portal_types::allocations::{
    AllocationDetail, AllocationSummary, Certificate, PortAddress, Transition, tags_label,
};
use portal_types::{AllocationId, utc};
use serde::{Deserialize, Serialize};

use crate::components::{ErrorNotice, action_outcome as outcome, field_error, field_invalid};
use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchForm {
    /// The projects the user may launch in.
    pub projects: Vec<LaunchProject>,
    pub skus: Vec<LaunchSku>,
    /// Every launchable listing, plain OS images first, when none was preselected.
    pub images: Vec<LaunchImage>,
    /// The listing preselected from its marketplace page.
    pub software: Option<Software>,
    /// The user's saved SSH keys: `(id, "laptop (ssh-ed25519 SHA256:…)")`.
    pub ssh_keys: Vec<(String, String)>,
    /// What the form starts with (from the query string, or the defaults).
    pub project: String,
    pub sku: String,
    pub region: String,
    pub image: String,
    /// The chosen lifetime in hours; empty: until released (or the policy's limit).
    pub lifetime: String,
    pub idempotency_key: String,
}

/// The lifetimes the launch form offers, in hours.
pub const LIFETIMES: [u32; 7] = [1, 4, 8, 24, 72, 168, 720];

/// "8 hours", "3 days", "1 week".
pub fn hours_label(h: u32) -> String {
    match h {
        1 => "1 hour".into(),
        h if h % 168 == 0 && h > 168 => format!("{} weeks", h / 168),
        168 => "1 week".into(),
        h if h % 24 == 0 && h > 24 => format!("{} days", h / 24),
        24 => "1 day".into(),
        h => format!("{h} hours"),
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchProject {
    pub id: String,
    pub name: String,
    /// What the project may still spend this month, when a budget applies.
    pub budget_left_minor: Option<i64>,
    /// "412.16 USD left of 5000.00 USD this month (policy monthly_budget, set at project level)".
    pub budget: Option<String>,
    /// The longest an allocation may live here (policy `max_allocation_lifetime_hours`), and
    /// what says so.
    pub max_lifetime_hours: Option<u32>,
    pub lifetime_policy: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSku {
    pub name: String,
    pub label: String,
    /// The listing fee is added to this (per hour).
    pub price_minor: i64,
    pub currency: String,
    /// `(region, launchable now)`, in the SKU's order.
    pub regions: Vec<(String, i64)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchImage {
    pub slug: String,
    pub label: String,
    /// A plain operating system image (listed first), not a marketplace stack.
    pub os: bool,
    pub fee_minor: i64,
}

/// A listing preselected for the launch form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Software {
    pub slug: String,
    pub name: String,
    /// Published versions, newest first.
    pub versions: Vec<String>,
    /// "0.25 USD per hour", when it has a fee.
    pub fee: Option<String>,
    pub fee_minor: i64,
}

/// `12345` minor units → `123.45 USD`, as the control plane's `Money` prints.
pub fn money(minor: i64, currency: &str) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let abs = minor.unsigned_abs();
    format!("{sign}{}.{:02} {currency}", abs / 100, abs % 100)
}

/// The launch form's estimate for one hourly price (SKU + listing fee): per hour, per day
/// and per 30 days, for its lifetime when it has one, and, with a budget, how many hours it
/// leaves room for.
pub fn estimate(
    hourly_minor: i64,
    currency: &str,
    budget_left_minor: Option<i64>,
    lifetime_hours: Option<u32>,
) -> Vec<String> {
    let mut lines = vec![
        format!("{} per hour", money(hourly_minor, currency)),
        format!("{} per day", money(hourly_minor * 24, currency)),
        format!("{} per 30 days", money(hourly_minor * 24 * 30, currency)),
    ];
    if let Some(h) = lifetime_hours {
        lines.push(format!(
            "{} for its lifetime of {}, then it is released",
            money(hourly_minor * i64::from(h), currency),
            hours_label(h)
        ));
    }
    if let Some(left) = budget_left_minor
        && hourly_minor > 0
    {
        lines.push(if left < hourly_minor {
            "The budget left this month does not cover its first hour".to_string()
        } else {
            format!(
                "The budget left this month covers about {} hours",
                left / hourly_minor
            )
        });
    }
    lines
}

/// How long a launch will live: the lifetime chosen (an empty choice: the policy's limit, if
/// any), or why the policy refuses the choice.
pub fn lifetime(
    chosen: &str,
    max: Option<u32>,
    policy: Option<&str>,
) -> Result<Option<u32>, String> {
    let chosen = chosen.trim().parse::<u32>().ok();
    match (chosen, max) {
        (Some(c), Some(m)) if c > m => Err(format!(
            "{} allows at most {}",
            policy.unwrap_or("the lifetime policy"),
            hours_label(m)
        )),
        (Some(c), _) => Ok(Some(c)),
        (None, m) => Ok(m),
    }
}

/// Why the form can't launch this SKU in this region right now, if it can't.
pub fn nothing_free(sku: &LaunchSku, region: &str) -> Option<String> {
    let free: i64 = sku
        .regions
        .iter()
        .filter(|(r, _)| region.is_empty() || r == region)
        .map(|(_, n)| n)
        .sum();
    (free == 0).then(|| {
        if region.is_empty() {
            format!("Nothing free for {} right now", sku.name)
        } else {
            format!("Nothing free for {} in {region} right now", sku.name)
        }
    })
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationsView {
    pub projects: Vec<(String, String)>,
    pub project: Option<String>,
    pub state: String,
    pub rows: Vec<AllocationRow>,
    /// This page starts after an earlier one (the cursor it was asked with).
    pub after: Option<String>,
    /// Where the next (older) page starts; none after the last.
    pub next: Option<String>,
    /// The page size asked for in the address (`limit`, as the API's), if not the default.
    pub limit: Option<u32>,
}

/// One row of the allocation list, as the page shows it. Up to 50 of these are the list's
/// hydration data, so a row carries only what the table draws: not the project, the
/// lifecycle state or the tags of the API's [`AllocationSummary`], and the price and the time
/// already written out (the list's data 21 → 13 KB for 50 rows).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationRow {
    pub id: AllocationId,
    pub name: String,
    pub sku: String,
    pub gpu_count: i32,
    pub region: String,
    /// The state the UI shows ([`AllocationSummary::projected`]).
    pub projected: String,
    /// The SKU's price per hour, written out.
    pub per_hour: String,
    /// When it was created, in UTC, written out.
    pub created: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub published: Vec<PortAddress>,
}

impl From<AllocationSummary> for AllocationRow {
    fn from(a: AllocationSummary) -> Self {
        Self {
            id: a.id,
            name: a.name,
            sku: a.sku,
            gpu_count: a.gpu_count,
            region: a.region,
            projected: a.projected,
            per_hour: a.price_per_hour.to_string(),
            created: utc(a.created_at),
            ssh: a.ssh,
            published: a.published,
        }
    }
}

/// How many allocations the list shows at a time.
pub const LIST_PAGE: u32 = 50;

pub const STATE_FILTERS: &[&str] = &[
    "active",
    "all",
    "placed",
    "provisioning",
    "running",
    "releasing",
    "cleaning",
    "released",
];

#[cfg(feature = "ssr")]
async fn launchable_projects(
    cp: &control_plane::ControlPlane,
    principal: &control_plane::auth::Principal,
) -> Result<Vec<(String, String)>, AppError> {
    use control_plane::tenancy::{ProjectOperators, ProjectRequirement, TenantMembers};
    let (who, _) = crate::server::home_tenant::<TenantMembers>(cp, principal).await?;
    Ok(cp
        .list_projects(&who)
        .await?
        .into_iter()
        .filter(|p| ProjectOperators::ROLES.contains(&p.my_role))
        .map(|p| (p.id.to_string(), p.display_name))
        .collect())
}

/// The launch form. Every argument preselects a choice (from a listing page, or from the
/// no-JavaScript "Update estimate" submit).
#[server]
pub async fn get_launch_form(
    sku: Option<String>,
    listing: Option<String>,
    #[server(default)] project: Option<String>,
    #[server(default)] region: Option<String>,
    #[server(default)] lifetime_hours: Option<String>,
) -> Result<LaunchForm, AppError> {
    use control_plane::marketplace::Category;
    use control_plane::tenancy::ProjectOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let mut projects = Vec::new();
    for (id, name) in launchable_projects(&cp, &principal).await? {
        let parsed = crate::server::id(&id)?;
        let who = cp
            .project_access::<ProjectOperators>(&principal, parsed)
            .await?;
        let budget = cp.budget_left(&who).await?;
        let limit = cp.lifetime_limit(&who).await?;
        projects.push(LaunchProject {
            max_lifetime_hours: limit.as_ref().map(|l| l.0),
            lifetime_policy: limit.map(|l| l.1),
            id,
            name,
            budget_left_minor: budget.as_ref().map(|b| b.left.amount_minor),
            budget: budget
                .map(|b| format!("{} left of {} this month ({})", b.left, b.limit, b.decided)),
        });
    }
    let catalog = cp.catalog().await?;
    let available = |name: &str| -> Vec<(String, i64)> {
        catalog
            .iter()
            .find(|e| e.sku.name == name)
            .map(|e| {
                e.availability
                    .iter()
                    .map(|a| (a.region.clone(), a.launchable))
                    .collect()
            })
            .unwrap_or_default()
    };
    let label = |sku: &control_plane::catalog::Sku| {
        format!("{} — {} per hour", sku.display_name, sku.price)
    };
    let launch_sku = |sku: &control_plane::catalog::Sku, label: String| LaunchSku {
        name: sku.name.clone(),
        label,
        price_minor: sku.price.amount_minor,
        currency: sku.price.currency.to_string(),
        regions: available(&sku.name),
    };
    let (skus, images, software) = match listing.as_deref().filter(|l| !l.is_empty()) {
        // From a listing page: only the SKUs it fits, with SKU + fee.
        Some(slug) => {
            let page = cp.listing_page(slug).await?;
            let current = page.listing.current().cloned();
            let fee = current.as_ref().and_then(|v| v.compatibility.fee.clone());
            let skus: Vec<LaunchSku> = page
                .fitting
                .iter()
                .map(|f| {
                    let label = match &fee {
                        Some(fee) => format!(
                            "{} — {} + {} fee = {} per hour",
                            f.sku.display_name, f.sku.price, fee, f.total_price
                        ),
                        None => label(&f.sku),
                    };
                    launch_sku(&f.sku, label)
                })
                .collect();
            let software = Software {
                versions: page
                    .listing
                    .versions
                    .iter()
                    .map(|v| v.version.clone())
                    .collect(),
                slug: page.listing.slug,
                name: page.listing.name,
                fee_minor: fee.as_ref().map_or(0, |f| f.amount_minor),
                fee: fee.map(|f| format!("{f} per hour")),
            };
            (skus, Vec::new(), Some(software))
        }
        None => {
            let mut images: Vec<LaunchImage> = cp
                .launchable_listings()
                .await?
                .into_iter()
                .map(|l| LaunchImage {
                    os: l.category == Category::OsImage,
                    fee_minor: l.fee.as_ref().map_or(0, |f| f.amount_minor),
                    slug: l.slug,
                    label: l.label,
                })
                .collect();
            // Plain OS images first (Ubuntu LTS leading), then marketplace stacks.
            images.sort_by_key(|i| (!i.os, !i.slug.starts_with("ubuntu"), i.label.clone()));
            let skus: Vec<LaunchSku> = catalog
                .iter()
                .map(|e| launch_sku(&e.sku, label(&e.sku)))
                .collect();
            (skus, images, None)
        }
    };
    let ssh_keys = cp
        .ssh_keys(&principal)
        .await?
        .into_iter()
        .map(|k| {
            (
                k.id.to_string(),
                format!("{} ({} {})", k.name, k.kind, k.fingerprint),
            )
        })
        .collect();
    let pick = |wanted: Option<String>, offered: Vec<String>| {
        wanted
            .filter(|w| offered.contains(w))
            .or_else(|| offered.into_iter().next())
            .unwrap_or_default()
    };
    Ok(LaunchForm {
        project: pick(project, projects.iter().map(|p| p.id.clone()).collect()),
        sku: pick(
            sku,
            skus.iter().map(|s: &LaunchSku| s.name.clone()).collect(),
        ),
        region: region.unwrap_or_default(),
        lifetime: lifetime_hours
            .filter(|h| h.parse::<u32>().is_ok_and(|h| LIFETIMES.contains(&h)))
            .unwrap_or_default(),
        image: pick(listing, images.iter().map(|i| i.slug.clone()).collect()),
        projects,
        skus,
        images,
        software,
        ssh_keys,
        idempotency_key: uuid::Uuid::new_v4().to_string(),
    })
}

/// Launches what the form chose (see [`portal_types::LaunchInput`] for the SSH keys).
#[server]
pub async fn launch_allocation(
    #[server(flatten)] launch: portal_types::LaunchInput,
) -> Result<(), AppError> {
    use control_plane::allocations::{LaunchOrder, OrderKeys};
    use control_plane::tenancy::ProjectOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let lifetime_hours = match launch.lifetime_hours.trim() {
        "" => None,
        h => Some(h.parse::<u32>().map_err(|_| AppError::Invalid {
            field: "lifetime_hours".into(),
            reason: format!("{h:?} is not a number of hours."),
        })?),
    };
    let published_ports = parse_ports(&launch.published_ports)?;
    let project = crate::server::id(&launch.project)?;
    let who = cp
        .project_access::<ProjectOperators>(&principal, project)
        .await?;
    let saved = launch
        .ssh_key_ids
        .iter()
        .map(|id| crate::server::id(id))
        .collect::<Result<Vec<_>, _>>()?;
    let order = LaunchOrder {
        sku: launch.sku,
        region: Some(launch.region).filter(|r| !r.is_empty()),
        image: launch.image,
        version: launch.version.filter(|v| !v.is_empty()),
        name: launch.name,
        keys: OrderKeys {
            saved,
            typed: vec![launch.ssh_public_keys],
            save_as: Some(launch.save_key_as),
        },
        idempotency_key: launch.idempotency_key,
        lifetime_hours,
        published_ports,
        tags: Default::default(),
        user_data: None,
    };
    let request_id = crate::error::request_id();
    let launched = cp
        .launch_order(&principal, &who, order, Some(&request_id))
        .await?;
    leptos_axum::redirect(&format!("/allocations/{}", launched.id));
    Ok(())
}

/// "8888, 6006" (commas or spaces) as port numbers; the control plane checks the rest.
#[cfg(feature = "ssr")]
fn parse_ports(input: &str) -> Result<Vec<u16>, AppError> {
    input
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|p| !p.is_empty())
        .take(64)
        .map(|p| {
            p.parse::<u16>().map_err(|_| AppError::Invalid {
                field: "published_ports".into(),
                reason: format!("{p:?} is not a TCP port (1 to 65535)."),
            })
        })
        .collect()
}

#[server]
pub async fn list_allocations(
    project: Option<String>,
    state: Option<String>,
    after: Option<String>,
    limit: Option<String>,
) -> Result<AllocationsView, AppError> {
    use control_plane::allocations::AllocationFilter;
    use control_plane::tenancy::{ProjectViewers, TenantMembers};
    let (cp, principal) = crate::server::signed_in().await?;
    let (member, _) = crate::server::home_tenant::<TenantMembers>(&cp, &principal).await?;
    let visible = cp.visible_projects(&member).await?;
    let projects: Vec<(String, String)> = visible
        .iter()
        .map(|(p, _)| (p.id.to_string(), p.display_name.clone()))
        .collect();
    let project = project
        .filter(|p| !p.is_empty())
        .or_else(|| projects.first().map(|p| p.0.clone()));
    let state = state
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "active".into());
    let after = after.filter(|a| !a.is_empty());
    let limit = match limit.as_deref().map(str::trim).filter(|l| !l.is_empty()) {
        None => None,
        Some(l) => Some(l.parse::<u32>().map_err(|_| AppError::Invalid {
            field: "limit".into(),
            reason: format!(
                "{:?} is not a number of allocations",
                l.chars().take(20).collect::<String>()
            ),
        })?),
    };
    let (rows, next) = match &project {
        None => (vec![], None),
        Some(p) => {
            let id = crate::server::id(p)?;
            // A project of another organization they belong to is checked on its own.
            let who = match visible.iter().find(|(p, _)| p.id == id) {
                Some((_, who)) => who.clone(),
                None => cp.project_access::<ProjectViewers>(&principal, id).await?,
            };
            let filter = AllocationFilter {
                state: Some(state.clone()),
                tag: None,
                after: after.clone(),
                limit: limit.unwrap_or(LIST_PAGE),
            };
            let page = cp.allocation_page(&[who], &filter).await?;
            (
                page.items.into_iter().map(AllocationRow::from).collect(),
                page.next,
            )
        }
    };
    Ok(AllocationsView {
        projects,
        project,
        state,
        rows,
        after,
        next,
        limit,
    })
}

#[server]
pub async fn get_allocation(id: String) -> Result<AllocationDetail, AppError> {
    let (cp, principal) = crate::server::signed_in().await?;
    let id = crate::server::id(&id)?;
    let who = crate::server::allocation_viewer(&cp, &principal, id).await?;
    Ok(cp.allocation_in(&who, id).await?)
}

/// The guest's GPU utilisation over the last day as an ECharts line (5-minute means), or
/// `None` before its first report.
#[server]
pub async fn get_gpu_history(id: String) -> Result<Option<String>, AppError> {
    use charming::Chart;
    use charming::component::{Axis, Grid};
    use charming::element::{AxisType, Tooltip, Trigger};
    use charming::series::Line;
    let (cp, principal) = crate::server::signed_in().await?;
    let id = crate::server::id(&id)?;
    let who = crate::server::allocation_viewer(&cp, &principal, id).await?;
    let points = cp.gpu_utilisation_history(&who, id).await?;
    if points.is_empty() {
        return Ok(None);
    }
    let chart = Chart::new()
        .tooltip(Tooltip::new().trigger(Trigger::Axis))
        .grid(
            Grid::new()
                .left("3%")
                .right("3%")
                .top("10%")
                .bottom("8%")
                .contain_label(true),
        )
        .x_axis(
            Axis::new().type_(AxisType::Category).data(
                points
                    .iter()
                    .map(|p| format!("{:02}:{:02}", p.at.hour(), p.at.minute()))
                    .collect::<Vec<_>>(),
            ),
        )
        .y_axis(Axis::new().type_(AxisType::Value).min(0).max(100).name("%"))
        .series(
            Line::new().name("GPU utilisation").data(
                points
                    .iter()
                    .map(|p| i64::from(p.percent))
                    .collect::<Vec<_>>(),
            ),
        );
    Ok(Some(crate::components::chart_option(&chart)))
}

/// "placed → provisioning", or the first state alone.
fn transition_label(t: &Transition) -> String {
    match &t.from {
        Some(f) => format!("{f} → {}", t.to),
        None => t.to.clone(),
    }
}

/// What a cleanup certificate attests, in a line.
fn checks(c: &Certificate) -> String {
    let yes = |b: bool| if b { "yes" } else { "no" };
    let mut line = format!(
        "wipe verified: {}, GPU reset: {}, firmware: {}",
        yes(c.wipe_verified),
        yes(c.gpu_reset),
        if c.firmware_ok { "ok" } else { "NOT ok" }
    );
    if let (Some(ms), Some(n), Some(fw)) = (c.wipe_ms, c.verified_samples, &c.gpu_firmware) {
        line.push_str(&format!(" ({fw}); wiped in {ms} ms, {n} blocks read back"));
    }
    line
}

#[server]
pub async fn release_allocation(id: String) -> Result<(), AppError> {
    use control_plane::tenancy::ProjectOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let id: control_plane::AllocationId = crate::server::id(&id)?;
    // Another tenant's id is "not found", a viewer is "forbidden".
    let who = cp
        .allocation_access::<ProjectOperators>(&principal, id)
        .await?;
    cp.release_allocation(&who, id, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

/// Changes the guest ports a running allocation publishes ("8888, 6006"; empty: none).
#[server]
pub async fn publish_ports(id: String, published_ports: String) -> Result<(), AppError> {
    use control_plane::tenancy::ProjectOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ports = parse_ports(&published_ports)?;
    let id: control_plane::AllocationId = crate::server::id(&id)?;
    let who = cp
        .allocation_access::<ProjectOperators>(&principal, id)
        .await?;
    cp.publish_ports(&who, id, &ports, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

#[component]
pub fn LaunchPage() -> impl IntoView {
    let query = use_query_map();
    let params = move || {
        query.with(|q| {
            (
                q.get("sku"),
                q.get("listing"),
                q.get("project"),
                q.get("region"),
                q.get("lifetime_hours"),
            )
        })
    };
    let form = Resource::new(params, |(sku, listing, project, region, lifetime)| {
        get_launch_form(sku, listing, project, region, lifetime)
    });
    let launch = ServerAction::<LaunchAllocation>::new();
    view! {
        <Title text="Launch" />
        <h1>"Launch"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match form.await {
                    Ok(f) => view! { <LaunchBody f launch /> }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn LaunchBody(f: LaunchForm, launch: ServerAction<LaunchAllocation>) -> impl IntoView {
    if f.projects.is_empty() {
        return view! {
            <section class="card notice" role="alert">
                <p>"You can't launch in any project: ask a project admin to make you an operator."</p>
            </section>
        }
        .into_any();
    }
    if f.skus.is_empty() {
        return view! {
            <section class="card notice" role="alert">
                <p>"No SKU for sale fits this listing right now; its page says what it needs."</p>
            </section>
        }
        .into_any();
    }
    let project = RwSignal::new(f.project.clone());
    let sku = RwSignal::new(f.sku.clone());
    let region = RwSignal::new(f.region.clone());
    let image = RwSignal::new(f.image.clone());
    let chosen_lifetime = RwSignal::new(f.lifetime.clone());
    let projects = StoredValue::new(f.projects.clone());
    let skus = StoredValue::new(f.skus.clone());
    let images = StoredValue::new(f.images.clone());
    let software_fee = f.software.as_ref().map_or(0, |s| s.fee_minor);
    let chosen_sku =
        move || skus.with_value(|all| all.iter().find(|s| s.name == sku.get()).cloned());
    let fee = move || match software_fee {
        0 => images.with_value(|all| {
            all.iter()
                .find(|i| i.slug == image.get())
                .map_or(0, |i| i.fee_minor)
        }),
        fee => fee,
    };
    let budget =
        move || projects.with_value(|all| all.iter().find(|p| p.id == project.get()).cloned());
    let lives = move || {
        let p = budget();
        lifetime(
            &chosen_lifetime.get(),
            p.as_ref().and_then(|p| p.max_lifetime_hours),
            p.as_ref().and_then(|p| p.lifetime_policy.as_deref()),
        )
    };
    let estimate_lines = move || {
        chosen_sku().map(|s| {
            let left = budget().and_then(|b| b.budget_left_minor);
            estimate(
                s.price_minor + fee(),
                &s.currency,
                left,
                lives().ok().flatten(),
            )
        })
    };
    let blocked = move || {
        lives()
            .err()
            .or_else(|| chosen_sku().and_then(|s| nothing_free(&s, &region.get())))
    };
    let lifetime_hint =
        move || match budget().and_then(|p| p.max_lifetime_hours.zip(p.lifetime_policy)) {
            Some((h, policy)) => format!("At most {} here ({policy}).", hours_label(h)),
            None => "Billing stops when it is released.".to_string(),
        };
    let regions: Vec<String> = {
        let mut r: Vec<String> = f
            .skus
            .iter()
            .flat_map(|s| s.regions.iter().map(|(r, _)| r.clone()))
            .collect();
        r.sort();
        r.dedup();
        r
    };
    let region_label = move |r: &str| {
        let free =
            chosen_sku().and_then(|s| s.regions.iter().find(|(x, _)| x == r).map(|(_, n)| *n));
        match free {
            Some(0) => format!("{r} — none free now"),
            Some(n) => format!("{r} — {n} free now"),
            None => format!("{r} — not sold there"),
        }
    };
    let (os_images, stacks): (Vec<LaunchImage>, Vec<LaunchImage>) =
        f.images.clone().into_iter().partition(|i| i.os);
    let has_keys = !f.ssh_keys.is_empty();
    let initial = f.clone();
    view! {
        <section class="card" aria-labelledby="launch-form">
            <h2 id="launch-form">"What to launch"</h2>
            <ActionForm action=launch attr:id="launch">
                <input type="hidden" name="idempotency_key" value=f.idempotency_key />
                <div class="form-grid">
                    <label>"Project"
                        <select name="project" on:change=move |ev| project.set(event_target_value(&ev))>
                            {f.projects.iter().map(|p| {
                                let s = p.id == initial.project;
                                view! { <option value=p.id.clone() selected=s>{p.name.clone()}</option> }
                            }).collect_view()}
                        </select>
                        <span class="hint" id="launch-budget">{move || budget().and_then(|b| b.budget).unwrap_or_else(|| "No monthly budget applies to this project.".into())}</span>
                    </label>
                    <label>"SKU"
                        <select name="sku" on:change=move |ev| sku.set(event_target_value(&ev))>
                            {f.skus.iter().map(|s| {
                                let sel = s.name == initial.sku;
                                view! { <option value=s.name.clone() selected=sel>{s.label.clone()}</option> }
                            }).collect_view()}
                        </select>
                    </label>
                    <label>"Region"
                        <select name="region" id="launch-region" on:change=move |ev| region.set(event_target_value(&ev))>
                            <option value="" selected=initial.region.is_empty()>"Any region of the SKU"</option>
                            {regions.into_iter().map(|r| {
                                let sel = r == initial.region;
                                let value = r.clone();
                                view! { <option value=value selected=sel>{move || region_label(&r)}</option> }
                            }).collect_view()}
                        </select>
                    </label>
                    {match f.software {
                        Some(sw) => view! {
                            <label>"Software"
                                <input type="hidden" name="image" value=sw.slug.clone() />
                                <select name="version" id="launch-version">
                                    {sw.versions.into_iter().map(|v| { let l = format!("{} {v}", sw.name); view! { <option value=v>{l}</option> } }).collect_view()}
                                </select>
                                {sw.fee.map(|fee| view! { <span class="hint" id="launch-fee">"Listing fee: " {fee} ", on top of the SKU"</span> })}
                                <span class="hint"><a href="/launch">"Choose other software"</a></span>
                            </label>
                        }.into_any(),
                        None => view! {
                            <label>"Image"
                                <select name="image" id="launch-image" on:change=move |ev| image.set(event_target_value(&ev))>
                                    <optgroup label="Operating systems">
                                        {os_images.into_iter().map(|i| {
                                            let sel = i.slug == initial.image;
                                            view! { <option value=i.slug selected=sel>{i.label}</option> }
                                        }).collect_view()}
                                    </optgroup>
                                    <optgroup label="Marketplace stacks">
                                        {stacks.into_iter().map(|i| {
                                            let sel = i.slug == initial.image;
                                            view! { <option value=i.slug selected=sel>{i.label}</option> }
                                        }).collect_view()}
                                    </optgroup>
                                </select>
                                <span class="hint"><a href="/marketplace">"Browse the marketplace"</a></span>
                            </label>
                        }.into_any(),
                    }}
                    <label>"Release after"
                        <select name="lifetime_hours" id="launch-lifetime" on:change=move |ev| chosen_lifetime.set(event_target_value(&ev)) aria-describedby="launch-lifetime-error" aria-invalid=field_invalid(launch.value(), "lifetime_hours")>
                            <option value="" selected=initial.lifetime.is_empty()>{move || match budget().and_then(|p| p.max_lifetime_hours) {
                                Some(h) => format!("The longest allowed ({})", hours_label(h)),
                                None => "Keep it until I release it".to_string(),
                            }}</option>
                            {LIFETIMES.iter().map(|h| {
                                let sel = initial.lifetime == h.to_string();
                                view! { <option value=h.to_string() selected=sel>{hours_label(*h)}</option> }
                            }).collect_view()}
                        </select>
                        <span class="hint" id="launch-lifetime-hint">{lifetime_hint}</span>
                        {field_error(launch.value(), "lifetime_hours", "launch-lifetime-error")}
                    </label>
                    <label>"Publish ports"
                        <input name="published_ports" id="launch-ports" inputmode="numeric" placeholder="8888, 6006" autocomplete="off" aria-describedby="launch-ports-hint launch-ports-error" aria-invalid=field_invalid(launch.value(), "published_ports") />
                        <span class="hint" id="launch-ports-hint">"Optional: guest TCP ports to reach from the internet besides SSH (a notebook, an endpoint), each on its own public port."</span>
                        {field_error(launch.value(), "published_ports", "launch-ports-error")}
                    </label>
                    <label>"Name"
                        <input name="name" required placeholder="train-llama" autocomplete="off" aria-describedby="launch-name-error" aria-invalid=field_invalid(launch.value(), "name") />
                        <span class="hint">"Lowercase letters, digits and '-'; unique among the project's live allocations."</span>
                        {field_error(launch.value(), "name", "launch-name-error")}
                    </label>
                    <fieldset class="wide" id="launch-keys">
                        <legend>"SSH keys"</legend>
                        {if has_keys {
                            view! {
                                <div>
                                    {f.ssh_keys.iter().map(|(id, label)| view! {
                                        <label class="check">
                                            <input type="checkbox" name="ssh_key_ids[]" value=id.clone() />
                                            {label.clone()}
                                        </label>
                                    }).collect_view()}
                                </div>
                            }.into_any()
                        } else {
                            view! { <p class="hint">"You have no saved keys yet. Paste one below and give it a name to keep it for next time, or manage keys on " <a href="/account">"your account page"</a> "."</p> }.into_any()
                        }}
                        <div class="form-grid">
                            <label>{if has_keys { "Or paste another public key" } else { "Public key" }}
                                <textarea name="ssh_public_keys" rows="3" required=!has_keys placeholder="ssh-ed25519 AAAA… you@laptop" aria-describedby="launch-key-error" aria-invalid=field_invalid(launch.value(), "ssh_public_keys")></textarea>
                                {field_error(launch.value(), "ssh_public_keys", "launch-key-error")}
                            </label>
                            <label>"Save the pasted key as"
                                <input name="save_key_as" placeholder="laptop" autocomplete="off" aria-describedby="launch-save-error" aria-invalid=field_invalid(launch.value(), "save_key_as") />
                                <span class="hint">"Optional: keeps the pasted key on your account for next time."</span>
                                {field_error(launch.value(), "save_key_as", "launch-save-error")}
                            </label>
                        </div>
                    </fieldset>
                </div>
                <section class="estimate" aria-labelledby="estimate-h" aria-live="polite">
                    <h3 id="estimate-h">"Estimated cost"</h3>
                    <ul id="launch-estimate">
                        {move || estimate_lines().unwrap_or_default().into_iter().map(|l| view! { <li>{l}</li> }).collect_view()}
                    </ul>
                    <p class="hint">"Billed per second while it runs, at the price shown now."</p>
                </section>
                <div class="form-actions">
                    <button type="submit" id="launch-submit" disabled=move || blocked().is_some()>
                        {move || blocked().unwrap_or_else(|| "Launch".to_string())}
                    </button>
                    // Without JavaScript the estimate can't follow the choices: this reloads
                    // the form with them (a GET, so nothing launches). Hidden once hydrated.
                    <button type="submit" class="secondary no-js-only" formmethod="get" formaction="/launch" formnovalidate>
                        "Update estimate"
                    </button>
                </div>
            </ActionForm>
            {outcome(launch.value(), |_: ()| None)}
        </section>
    }
    .into_any()
}

#[component]
pub fn AllocationsPage() -> impl IntoView {
    let query = use_query_map();
    let filter = move || {
        query.with(|q| {
            (
                q.get("project"),
                q.get("state"),
                q.get("after"),
                q.get("limit"),
            )
        })
    };
    let list = Resource::new(filter, |(p, s, a, l)| list_allocations(p, s, a, l));
    view! {
        <Title text="Allocations" />
        <h1>"Allocations"</h1>
        <p><a class="button" href="/catalog">"Launch from the catalog"</a></p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match list.await {
                    Ok(v) => view! { <AllocationsBody v /> }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn AllocationsBody(v: AllocationsView) -> impl IntoView {
    let project = v.project.clone();
    let state = v.state.clone();
    let href = {
        let (project, state, limit) = (project.clone(), state.clone(), v.limit);
        move |after: Option<&str>| list_href(project.as_deref(), &state, after, limit)
    };
    let pager = (v.after.is_some() || v.next.is_some()).then(|| {
        let newest = v.after.is_some().then(|| href(None));
        let older = v.next.as_deref().map(|n| href(Some(n)));
        let shown = match (v.after.is_some(), v.rows.len()) {
            (true, 1) => "1 older allocation".to_owned(),
            (true, n) => format!("{n} older allocations"),
            (false, 1) => "The newest allocation".to_owned(),
            (false, n) => format!("The {n} newest allocations"),
        };
        view! {
            <nav class="pager" aria-label="Pages of allocations">
                <span class="hint" data-testid="page-shown">{shown}</span>
                {newest.map(|h| view! { <a class="button secondary" href=h rel="first">"← Newest"</a> })}
                {older.map(|h| view! { <a class="button secondary" href=h rel="next">"Older →"</a> })}
            </nav>
        }
    });
    view! {
        <form method="get" action="/allocations" class="filters">
            <label>"Project "
                <select name="project">
                    {v.projects.into_iter().map(|(id, name)| { let s = project.as_deref() == Some(id.as_str()); view! { <option value=id selected=s>{name}</option> } }).collect_view()}
                </select>
            </label>
            <label>"State "
                <select name="state">
                    {STATE_FILTERS.iter().map(|f| view! { <option value=*f selected=state == *f>{*f}</option> }).collect_view()}
                </select>
            </label>
            {v.limit.map(|l| view! { <input type="hidden" name="limit" value=l.to_string() /> })}
            <button type="submit">"Filter"</button>
        </form>
        {if v.rows.is_empty() {
            view! { <p>"No allocations match."</p> }.into_any()
        } else {
            view! {
                <div class="table-scroll">
                <table class="data cards" id="allocations">
                    <thead><tr><th>"Name"</th><th>"SKU"</th><th>"GPUs"</th><th>"Region"</th><th>"State"</th><th>"Connect"</th><th>"Per hour"</th><th>"Created"</th></tr></thead>
                    <tbody>
                        {v.rows.into_iter().map(|a| view! {
                            <tr data-allocation=a.name.clone()>
                                <td data-label="Name"><a href=format!("/allocations/{}", a.id)>{a.name.clone()}</a></td>
                                <td data-label="SKU">{a.sku}</td><td data-label="GPUs">{a.gpu_count}</td><td data-label="Region">{a.region}</td>
                                <td data-label="State"><span class=format!("state state-{}", a.projected)>{a.projected.clone()}</span></td>
                                <td class="connect" data-label="Connect">
                                    {a.ssh.map(|s| view! { <code data-testid="row-ssh">{s}</code> })}
                                    {a.published.into_iter().map(|p| view! {
                                        <br /><span class="hint">{format!("port {} → ", p.guest_port)}<code>{p.address}</code></span>
                                    }).collect_view()}
                                </td>
                                <td data-label="Per hour">{a.per_hour}</td><td data-label="Created">{a.created}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
                </div>
            }.into_any()
        }}
        {pager}
    }
}

/// The list's address for a filter, from its first page or after `after`. The values are
/// ids, a state from the list above and a cursor (digits, `_` and an id), so they need no
/// escaping beyond what the attribute gets.
fn list_href(
    project: Option<&str>,
    state: &str,
    after: Option<&str>,
    limit: Option<u32>,
) -> String {
    let mut q = vec![];
    if let Some(p) = project {
        q.push(format!("project={p}"));
    }
    q.push(format!("state={state}"));
    if let Some(a) = after {
        q.push(format!("after={a}"));
    }
    if let Some(l) = limit {
        q.push(format!("limit={l}"));
    }
    format!("/allocations?{}", q.join("&"))
}

#[component]
pub fn AllocationPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").unwrap_or_default());
    let release = ServerAction::<ReleaseAllocation>::new();
    let tick = RwSignal::new(0u32);
    // Live: refetch every second in the browser (the page is also complete without it).
    Effect::new(move |_| {
        let handle = set_interval_with_handle(
            move || tick.update(|t| *t = t.wrapping_add(1)),
            std::time::Duration::from_secs(1),
        );
        on_cleanup(move || {
            if let Ok(h) = handle {
                h.clear();
            }
        });
    });
    let publish = ServerAction::<PublishPorts>::new();
    let page = Resource::new(
        move || {
            (
                id(),
                release.version().get(),
                publish.version().get(),
                tick.get(),
            )
        },
        |(id, ..)| get_allocation(id),
    );
    // The ports form is outside the live part, so that what is being typed is not replaced
    // every second: it follows only what it shows (the ports, while the allocation runs and
    // may be released), so it appears when a page opened during provisioning sees the
    // allocation running, goes when it stops, and is rebuilt after a publish. It waits for the
    // page's first answer without following it (the same answer: no second fetch).
    let ports = Memo::new(move |_| {
        page.get().and_then(Result::ok).and_then(|a| {
            (a.can_release && a.state == "running").then(|| {
                let current = a
                    .published
                    .iter()
                    .map(|p| p.guest_port.to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                (a.id.to_string(), current)
            })
        })
    });
    let history = Resource::new(id, get_gpu_history);
    view! {
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(a) => view! { <AllocationBody a release /> }.into_any(),
                    Err(e) => view! { <Title text="Allocation" /><ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Transition>
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                match history.await {
                    Ok(Some(option)) => view! {
                        <section class="card" aria-labelledby="gpu-history">
                            <h2 id="gpu-history">"GPU utilisation, last 24 hours"</h2>
                            <div class="chart chart-small" role="img" aria-label="GPU utilisation reported by the guest, 5-minute means" data-testid="gpu-history" data-option=option></div>
                            <p class="hint">"Reported by the guest's agent through the node; 5-minute means, UTC. Reload the page for the latest."</p>
                        </section>
                    }.into_any(),
                    _ => ().into_any(),
                }
            })}
        </Suspense>
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                let _ = ScopedFuture::new_untracked(page.into_future()).await;
                move || ports.get().map(|(id, current)| view! { <PortsForm id current publish /> })
            })}
        </Suspense>
    }
}

/// Published ports of a running allocation, changed in place.
#[component]
fn PortsForm(id: String, current: String, publish: ServerAction<PublishPorts>) -> impl IntoView {
    view! {
        <section class="card" aria-labelledby="ports-h">
            <h2 id="ports-h">"Published ports"</h2>
            <ActionForm action=publish attr:id="publish-ports" attr:class="form-grid">
                <input type="hidden" name="id" value=id />
                <label>"Guest TCP ports"
                    <input name="published_ports" value=current inputmode="numeric" placeholder="8888, 6006" autocomplete="off" aria-describedby="ports-hint ports-error" aria-invalid=field_invalid(publish.value(), "published_ports") />
                    <span class="hint" id="ports-hint">"Reached from the internet besides SSH, each on its own public port of the node; empty: none."</span>
                    {field_error(publish.value(), "published_ports", "ports-error")}
                </label>
                <div class="form-actions"><button type="submit">"Update ports"</button></div>
            </ActionForm>
            {outcome(publish.value(), |_| Some("Saved; the node applies it in a moment.".into()))}
        </section>
    }
}

#[component]
fn AllocationBody(a: AllocationDetail, release: ServerAction<ReleaseAllocation>) -> impl IntoView {
    let id = a.id.to_string();
    let differs = a.desired_state != a.observed_state && a.state != "released";
    let price = a.price_label();
    view! {
        <Title text=a.name.clone() />
        <h1>{a.name.clone()} " " <span class=format!("state state-{}", a.projected) data-testid="projected-state">{a.projected.clone()}</span></h1>
        <p class="hint"><code>{a.canonical_name}</code></p>
        {(!a.gpu_health.is_empty()).then(|| {
            let out = a.gpu_health.iter().any(|n| n.out_of_service);
            view! {
                <section class=if out { "card notice budget-exceeded" } else { "card notice" } role="alert" aria-labelledby="gpu-health" data-testid="gpu-health">
                    <h2 id="gpu-health">{if out { "A GPU of this allocation is out of service" } else { "GPU health events" }}</h2>
                    <ul class="plain">
                        {a.gpu_health.iter().map(|n| view! { <li>{n.sentence()}</li> }).collect_view()}
                    </ul>
                </section>
            }
        })}
        <section class="card" aria-labelledby="state">
            <h2 id="state">"State"</h2>
            <dl class="facts">
                <dt>"Lifecycle"</dt><dd data-testid="state">{a.state.clone()}</dd>
                <dt>"Desired"</dt><dd data-testid="desired">{a.desired_state.clone()}</dd>
                <dt>"Observed on the node"</dt><dd data-testid="observed">{a.observed_state.clone()}</dd>
                <dt>"Execution"</dt><dd data-testid="execution">{a.execution.unwrap_or_else(|| "no task yet".into())}</dd>
            </dl>
            {differs.then(|| view! { <p class="hint">"Desired and observed differ: the control plane is working on it."</p> })}
            {a.failure.map(|f| view! { <p class="form-error" role="alert" data-testid="failure">{f}</p> })}
            {a.ssh.map(|s| view! { <p>"Connect: " <code data-testid="ssh">{s}</code></p> })}
            {(!a.published.is_empty()).then(|| view! {
                <p>"Published ports:"</p>
                <ul class="published" data-testid="published">
                    {a.published.iter().map(|p| view! {
                        <li>{format!("guest port {} at ", p.guest_port)}<code>{p.address.clone()}</code></li>
                    }).collect_view()}
                </ul>
            })}
            {a.gpu_utilisation.map(|u| view! { <p>"GPU utilisation: " <span data-testid="gpu-utilisation">{format!("{}% (reported by the guest, {})", u.percent, utc(u.at))}</span></p> })}
            {a.can_release.then(|| view! {
                <ActionForm action=release attr:id="release">
                    <input type="hidden" name="id" value=id.clone() />
                    <label class="check"><input type="checkbox" required name="confirm" value="yes" /> " I understand the VM and its disk are destroyed"</label>
                    <button type="submit" class="danger">"Release"</button>
                </ActionForm>
            })}
            {outcome(release.value(), |_: ()| Some("Release requested.".to_string()))}
        </section>
        <section class="card" aria-labelledby="what">
            <h2 id="what">"What and where"</h2>
            <dl class="facts">
                <dt>"SKU"</dt><dd>{a.sku} " (" {a.gpu_count} " GPUs)"</dd>
                <dt>"Price"</dt><dd data-testid="price">{price}</dd>
                {(!a.tags.is_empty()).then(|| view! { <dt>"Tags"</dt><dd data-testid="tags">{tags_label(&a.tags)}</dd> })}
                <dt>"Software"</dt><dd><a data-testid="software" href=format!("/marketplace/{}", a.listing)>{a.image}</a></dd>
                <dt>"Region / node"</dt><dd data-testid="node">{a.region} " / " {a.node}</dd>
                <dt>"Slots"</dt><dd data-testid="slots">{a.slot_indexes.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")}</dd>
                <dt>"Why there"</dt><dd>{a.placement_why}</dd>
                <dt>"Created"</dt><dd>{utc(a.created_at)}</dd>
                {a.expires_at.map(|e| view! { <dt>"Expires"</dt><dd>{utc(e)}</dd> })}
            </dl>
        </section>
        <section class="card" aria-labelledby="timeline">
            <h2 id="timeline">"Timeline"</h2>
            <ol class="timeline" data-testid="transitions">
                {a.transitions.into_iter().map(|t| view! { <li><strong>{transition_label(&t)}</strong> " at " {utc(t.at)} " (+" {format!("{:.1} s", t.after_ms as f64 / 1000.0)} ")"</li> }).collect_view()}
            </ol>
            {(!a.phases.is_empty()).then(|| view! {
                <table class="data" data-testid="phases">
                    <thead><tr><th>"Task"</th><th>"Phase"</th><th>"Result"</th><th>"Took"</th><th></th></tr></thead>
                    <tbody>
                        {a.phases.into_iter().map(|p| view! {
                            <tr><td>{p.task}</td><td>{p.phase}</td><td>{p.status}</td><td>{format!("{} ms", p.elapsed_ms)}</td><td>{p.detail.unwrap_or_default()}</td></tr>
                        }).collect_view()}
                    </tbody>
                </table>
            })}
        </section>
        {(!a.certificates.is_empty()).then(|| view! {
            <section class="card" aria-labelledby="certificate">
                <h2 id="certificate">"Cleanup certificate"</h2>
                <p class="hint">"Signed by the node with its credential and verified by the control plane before the slots were reused."</p>
                <table class="data" data-testid="certificate">
                    <thead><tr><th>"Slot"</th><th>"NVMe"</th><th>"Wipe"</th><th>"Checks"</th><th>"Signature"</th><th>"Received"</th></tr></thead>
                    <tbody>
                        {a.certificates.into_iter().map(|c| view! {
                            <tr><td>{c.slot_index}</td><td>{c.nvme_serial.clone()}</td><td>{c.wipe_method.clone()}</td><td>{checks(&c)}</td><td><code>{c.signature[..16.min(c.signature.len())].to_string()} "…"</code></td><td>{utc(c.received_at)}</td></tr>
                        }).collect_view()}
                    </tbody>
                </table>
            </section>
        })}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_covers_hour_day_month_lifetime_and_budget() {
        assert_eq!(
            estimate(238, "USD", None, None),
            [
                "2.38 USD per hour",
                "57.12 USD per day",
                "1713.60 USD per 30 days"
            ]
        );
        assert_eq!(
            estimate(238, "USD", Some(1000), Some(8))[3..],
            [
                "19.04 USD for its lifetime of 8 hours, then it is released",
                "The budget left this month covers about 4 hours"
            ]
        );
        assert_eq!(
            estimate(238, "USD", Some(100), None)[3],
            "The budget left this month does not cover its first hour"
        );
    }

    #[test]
    fn a_lifetime_is_the_choice_or_the_policy_limit_and_never_beyond_it() {
        let policy = Some("policy max_allocation_lifetime_hours (set at project level)");
        assert_eq!(lifetime("", None, None), Ok(None));
        assert_eq!(lifetime("8", None, None), Ok(Some(8)));
        assert_eq!(lifetime("", Some(72), policy), Ok(Some(72)));
        assert_eq!(lifetime("24", Some(72), policy), Ok(Some(24)));
        assert_eq!(
            lifetime("168", Some(72), policy),
            Err(
                "policy max_allocation_lifetime_hours (set at project level) allows at most 3 days"
                    .into()
            )
        );
    }

    #[cfg(feature = "ssr")]
    #[test]
    fn a_list_row_carries_what_the_table_shows_and_nothing_else() {
        let summary = AllocationSummary {
            id: "3583c5c9-2fce-4c53-8f8e-058355b44594".parse().unwrap(),
            project_id: "0a0e0000-0000-4000-8001-000000000001".parse().unwrap(),
            name: "train-7".into(),
            sku: "h100.2x".into(),
            gpu_count: 2,
            region: "eu-west-1".into(),
            state: "running".into(),
            projected: "releasing".into(),
            price_per_hour: portal_types::Money::new(598, "USD"),
            tags: [("team".to_owned(), "vision".to_owned())].into(),
            created_at: time::OffsetDateTime::from_unix_timestamp(1_764_640_104).unwrap(),
            ssh: None,
            ssh_endpoint: None,
            published: vec![],
        };
        let row = AllocationRow::from(summary.clone());
        assert_eq!(row.projected, "releasing");
        assert_eq!(row.per_hour, "5.98 USD");
        assert_eq!(row.created, "2025-12-02 01:48:24 UTC");
        let keys = |row: &AllocationRow| -> Vec<String> {
            let json = serde_json::to_value(row).unwrap();
            let mut keys: Vec<String> = json.as_object().unwrap().keys().cloned().collect();
            keys.sort();
            keys
        };
        // Neither the project, the lifecycle state nor the tags; no empty connection details.
        assert_eq!(
            keys(&row),
            [
                "created",
                "gpu_count",
                "id",
                "name",
                "per_hour",
                "projected",
                "region",
                "sku"
            ]
        );
        let running = AllocationRow::from(AllocationSummary {
            ssh: Some("ssh -p 22000 ubuntu@203.0.113.7".into()),
            published: vec![PortAddress {
                guest_port: 8888,
                address: "203.0.113.7:22001".into(),
            }],
            ..summary
        });
        let shown = keys(&running);
        assert!(shown.contains(&"ssh".to_owned()), "{shown:?}");
        assert!(shown.contains(&"published".to_owned()), "{shown:?}");
        // What the server writes, the browser reads back whole, with or without the details.
        for r in [row, running] {
            let back: AllocationRow =
                serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
            assert_eq!(back, r);
        }
    }

    #[test]
    fn hours_read_as_people_say_them() {
        let labels: Vec<String> = LIFETIMES.iter().map(|h| hours_label(*h)).collect();
        assert_eq!(
            labels,
            [
                "1 hour", "4 hours", "8 hours", "1 day", "3 days", "1 week", "30 days"
            ]
        );
        assert_eq!(hours_label(336), "2 weeks");
    }
}
