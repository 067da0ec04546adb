//! The launch form: project, SKU, region, marketplace listing (preselected from a listing
//! page, with only the SKUs it fits), SSH keys, name, lifetime and ports, with a cost estimate
//! that follows the choices; a fresh idempotency key per form, so a double submit makes one
//! allocation.

// The launch form has ten fields; its server function takes them as arguments, and the
// `#[server]` macro copies that signature into code an item-level allow does not reach.
#![allow(clippy::too_many_arguments)]
#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;
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
    /// The launchable projects' available volumes.
    pub volumes: Vec<LaunchVolume>,
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
    /// The ports its software listens on, "8000": what the form publishes unless changed.
    pub published_ports: String,
}

/// A volume the form offers to attach.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchVolume {
    pub id: String,
    pub project: String,
    /// "datasets (500 GiB, eu-west-1)".
    pub label: String,
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
    /// The ports its current version listens on, "8000".
    pub published_ports: String,
}

/// `[8000, 8888]` → "8000, 8888", as the ports field reads.
#[cfg(feature = "ssr")]
pub fn ports_text(ports: &[u16]) -> String {
    ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `123456` minor units → `1,234.56 USD`, as money reads on every page.
pub fn money(minor: i64, currency: &str) -> String {
    portal_types::Money::new(minor, currency).grouped()
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

#[cfg(feature = "ssr")]
async fn launchable_projects(
    cp: &control_plane::ControlPlane,
    principal: &control_plane::auth::Principal,
) -> Result<Vec<(control_plane::ProjectId, String)>, AppError> {
    use control_plane::tenancy::{ProjectOperators, ProjectRequirement, TenantMembers};
    let (who, _) = crate::server::home_tenant::<TenantMembers>(cp, principal).await?;
    Ok(cp
        .list_projects(&who)
        .await?
        .into_iter()
        .filter(|p| ProjectOperators::ROLES.contains(&p.my_role))
        .map(|p| (p.id, p.display_name))
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
    let mut volumes = Vec::new();
    for (id, name) in launchable_projects(&cp, &principal).await? {
        let who = cp
            .project_access::<ProjectOperators>(&principal, id)
            .await?;
        volumes.extend(available_volumes(&cp, &principal, id).await?);
        let budget = cp.budget_left(&who).await?;
        let limit = cp.lifetime_limit(&who).await?;
        projects.push(LaunchProject {
            max_lifetime_hours: limit.as_ref().map(|l| l.0),
            lifetime_policy: limit.map(|l| l.1),
            id: id.to_string(),
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
                published_ports: current
                    .as_ref()
                    .map(|v| ports_text(&v.published_ports))
                    .unwrap_or_default(),
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
                    published_ports: ports_text(&l.published_ports),
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
        volumes,
        idempotency_key: uuid::Uuid::new_v4().to_string(),
    })
}

/// The project's available volumes, as the form offers them.
#[cfg(feature = "ssr")]
async fn available_volumes(
    cp: &control_plane::ControlPlane,
    principal: &control_plane::auth::Principal,
    project: control_plane::ProjectId,
) -> Result<Vec<LaunchVolume>, AppError> {
    use control_plane::tenancy::ProjectViewers;
    use control_plane::volumes::{VolumeState, VolumesApi};
    let who = cp
        .project_access::<ProjectViewers>(principal, project)
        .await?;
    Ok(cp
        .volumes(&who)
        .await?
        .into_iter()
        .filter(|v| v.state == VolumeState::Available)
        .map(|v| LaunchVolume {
            id: v.id.to_string(),
            project: project.to_string(),
            label: format!("{} ({} GiB, {})", v.name, v.size_gib, v.region),
        })
        .collect())
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
    let project = crate::server::id(launch.project.clone())?;
    let who = cp
        .project_access::<ProjectOperators>(&principal, project)
        .await?;
    let saved = launch
        .ssh_key_ids
        .iter()
        .map(|id| crate::server::id(id.clone()))
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
        tags: portal_types::allocations::parse_tags(&launch.tags),
        user_data: Some(launch.user_data).filter(|u| !u.trim().is_empty()),
        volumes: launch
            .volume_ids
            .iter()
            .map(|id| crate::server::id(id.clone()))
            .collect::<Result<Vec<_>, _>>()?,
    };
    let request_id = crate::error::request_id();
    let nodes = match launch.nodes.trim() {
        "" => 1,
        n => n.parse::<u32>().map_err(|_| AppError::Invalid {
            field: "nodes".into(),
            reason: format!(
                "{:?} is not a number of nodes.",
                n.chars().take(20).collect::<String>()
            ),
        })?,
    };
    if nodes > 1 {
        use control_plane::allocations::clusters::ClusterOrder;
        let order = ClusterOrder {
            launch: order,
            members: nodes,
            // A form without JavaScript never showed the choice: the narrowest, preferred.
            locality: Some(launch.locality)
                .filter(|l| !l.trim().is_empty())
                .unwrap_or_else(|| "leaf".into()),
            locality_required: launch.locality_required.is_some(),
        };
        let launched = cp
            .launch_cluster(&principal, &who, order, Some(&request_id))
            .await
            .map_err(|e| match e {
                control_plane::Error::Invalid {
                    field: "members",
                    reason,
                } => AppError::Invalid {
                    field: "nodes".into(),
                    reason,
                },
                e => e.into(),
            })?;
        leptos_axum::redirect(&format!("/clusters/{}", launched.id));
        return Ok(());
    }
    let launched = cp
        .launch_order(&principal, &who, order, Some(&request_id))
        .await?;
    leptos_axum::redirect(&format!("/allocations/{}", launched.id));
    Ok(())
}

/// "8888, 6006" (commas or spaces) as port numbers; the control plane checks the rest.
#[cfg(feature = "ssr")]
pub(super) fn parse_ports(input: &str) -> Result<Vec<u16>, AppError> {
    agent_protocol::identity::parse_ports(input).map_err(|reason| AppError::Invalid {
        field: "published_ports".into(),
        reason,
    })
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
    // The chosen listing's ports fill the field; choosing another listing refills it.
    let software_ports = StoredValue::new(f.software.as_ref().map(|s| s.published_ports.clone()));
    let listing_ports = move || match software_ports.get_value() {
        Some(p) => p,
        None => images.with_value(|all| {
            all.iter()
                .find(|i| i.slug == image.get())
                .map(|i| i.published_ports.clone())
                .unwrap_or_default()
        }),
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
    let nodes = RwSignal::new(1u32);
    let estimate_lines = move || {
        chosen_sku().map(|s| {
            let left = budget().and_then(|b| b.budget_left_minor);
            let n = nodes.get().max(1);
            let mut lines = estimate(
                (s.price_minor + fee()) * i64::from(n),
                &s.currency,
                left,
                lives().ok().flatten(),
            );
            if n > 1 {
                lines.insert(0, format!("For {n} nodes, each billed as an instance:"));
            }
            lines
        })
    };
    let blocked = move || {
        lives()
            .err()
            .or_else(|| chosen_sku().and_then(|s| nothing_free(&s, &region.get())))
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
                    <ImageField software=f.software.clone() images=f.images.clone() initial=initial.image.clone() image=image />
                    <LifetimeField initial=initial.lifetime.clone() chosen=chosen_lifetime project=Signal::derive(budget) launch=launch />
                    <label>"Publish ports"
                        <input name="published_ports" id="launch-ports" inputmode="numeric" placeholder="8888, 6006" autocomplete="off" aria-describedby="launch-ports-hint launch-ports-error" aria-invalid=field_invalid(launch.value(), "published_ports") value=listing_ports() prop:value=listing_ports />
                        <span class="hint" id="launch-ports-hint">{move || if listing_ports().is_empty() {
                            "Optional: guest TCP ports to reach from the internet besides SSH (a notebook, an endpoint), each on its own public port.".to_string()
                        } else {
                            format!("The image listens on {}, so those are published; change or clear them as you like. Each gets its own public port besides SSH.", listing_ports())
                        }}</span>
                        {field_error(launch.value(), "published_ports", "launch-ports-error")}
                    </label>
                    <NameField launch=launch />
                    <ClusterFields nodes launch=launch />
                    <KeysFieldset keys=f.ssh_keys.clone() launch=launch />
                    <VolumesFieldset volumes=f.volumes.clone() project=project launch=launch />
                </div>
                <MoreOptions launch=launch />
                <Estimate lines=Signal::derive(move || estimate_lines().unwrap_or_default()) />
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

/// How many nodes, and for more than one (a cluster) how close they must be.
#[component]
fn ClusterFields(nodes: RwSignal<u32>, launch: ServerAction<LaunchAllocation>) -> impl IntoView {
    view! {
        <label>"Nodes"
            <input type="number" name="nodes" id="launch-nodes" min="1" max="128" value="1" inputmode="numeric"
                aria-describedby="launch-nodes-hint launch-nodes-error" aria-invalid=field_invalid(launch.value(), "nodes")
                on:input=move |ev| nodes.set(event_target_value(&ev).trim().parse().unwrap_or(1)) />
            <span class="hint" id="launch-nodes-hint">"1 launches one instance. 2 to 128 launch a cluster: every node placed together on one InfiniBand fabric, or none. Members are numbered: train-1, train-2, …"</span>
            {field_error(launch.value(), "nodes", "launch-nodes-error")}
        </label>
        <fieldset id="launch-locality" hidden=move || nodes.get() <= 1>
            <legend>"Keep the nodes"</legend>
            <label>"Within"
                <select name="locality" aria-describedby="launch-locality-error" aria-invalid=field_invalid(launch.value(), "locality")>
                    <option value="leaf" selected>"one leaf switch (fastest)"</option>
                    <option value="spine">"one spine group"</option>
                    <option value="fabric">"one fabric"</option>
                </select>
            </label>
            <label class="check"><input type="checkbox" name="locality_required" value="on" />
                " Only there: refuse rather than spread wider"</label>
            {field_error(launch.value(), "locality", "launch-locality-error")}
        </fieldset>
    }
}

/// The instance's name, its rule checked as it is typed (the server checks it again).
#[component]
fn NameField(launch: ServerAction<LaunchAllocation>) -> impl IntoView {
    let name_problem = RwSignal::new(None::<String>);
    view! {
        <label>"Name"
            <input name="name" required placeholder="train-llama" autocomplete="off" aria-describedby="launch-name-live launch-name-error"
                aria-invalid={
                    let refused = field_invalid(launch.value(), "name");
                    move || if name_problem.get().is_some() { Some("true") } else { refused() }
                }
                on:input=move |ev| {
                    let typed = event_target_value(&ev);
                    name_problem.set((!typed.is_empty()).then(|| portal_types::allocations::check_instance_name(&typed).err()).flatten());
                } />
            <span class="hint">"Lowercase letters, digits and '-'; unique among the project's live instances."</span>
            <span class="form-error" id="launch-name-live" aria-live="polite">{move || name_problem.get().map(|p| crate::error::capitalised(&p))}</span>
            {field_error(launch.value(), "name", "launch-name-error")}
        </label>
    }
}

/// What most launches leave alone, folded: tags and cloud-init user data.
#[component]
fn MoreOptions(launch: ServerAction<LaunchAllocation>) -> impl IntoView {
    view! {
        <details class="more-options">
            <summary>"Tags and cloud-init user data"</summary>
            <div class="form-grid">
                <label>"Tags"
                    <input name="tags" placeholder="team=vision, stage=dev" autocomplete="off" aria-describedby="launch-tags-hint launch-tags-error" aria-invalid=field_invalid(launch.value(), "tags") />
                    <span class="hint" id="launch-tags-hint">"key=value, separated by commas; find instances by them in the list and the API."</span>
                    {field_error(launch.value(), "tags", "launch-tags-error")}
                </label>
                <label>"User data (cloud-init)"
                    <textarea name="user_data" rows="4" placeholder="#cloud-config" aria-describedby="launch-user-data-hint launch-user-data-error" aria-invalid=field_invalid(launch.value(), "user_data")></textarea>
                    <span class="hint" id="launch-user-data-hint">"Runs inside your VM at first boot, after the image's own; only for images that accept it."</span>
                    {field_error(launch.value(), "user_data", "launch-user-data-error")}
                </label>
            </div>
        </details>
    }
}

/// The software a listing page chose (its versions and fee), or the image to launch: operating
/// systems first, then marketplace stacks.
#[component]
fn ImageField(
    software: Option<Software>,
    images: Vec<LaunchImage>,
    initial: String,
    image: RwSignal<String>,
) -> impl IntoView {
    let (os_images, stacks): (Vec<LaunchImage>, Vec<LaunchImage>) =
        images.into_iter().partition(|i| i.os);
    match software {
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
                            let sel = i.slug == initial;
                            view! { <option value=i.slug selected=sel>{i.label}</option> }
                        }).collect_view()}
                    </optgroup>
                    <optgroup label="Marketplace stacks">
                        {stacks.into_iter().map(|i| {
                            let sel = i.slug == initial;
                            view! { <option value=i.slug selected=sel>{i.label}</option> }
                        }).collect_view()}
                    </optgroup>
                </select>
                <span class="hint"><a href="/marketplace">"Browse the marketplace"</a></span>
            </label>
        }.into_any(),
    }
}

/// The cost as chosen: per hour, day and 30 days, for its lifetime, and against the budget.
#[component]
fn Estimate(lines: Signal<Vec<String>>) -> impl IntoView {
    view! {
        <section class="estimate" aria-labelledby="estimate-h" aria-live="polite">
            <h3 id="estimate-h">"Estimated cost"</h3>
            <ul id="launch-estimate">
                {move || lines.get().into_iter().map(|l| view! { <li>{l}</li> }).collect_view()}
            </ul>
            <p class="hint">"Billed per second while it runs, at the price shown now."</p>
        </section>
    }
}

/// When it is released: never, or after a lifetime, within the project's policy.
#[component]
fn LifetimeField(
    initial: String,
    chosen: RwSignal<String>,
    project: Signal<Option<LaunchProject>>,
    launch: ServerAction<LaunchAllocation>,
) -> impl IntoView {
    let hint = move || match project
        .get()
        .and_then(|p| p.max_lifetime_hours.zip(p.lifetime_policy))
    {
        Some((h, policy)) => format!("At most {} here ({policy}).", hours_label(h)),
        None => "Billing stops when it is released.".to_string(),
    };
    view! {
        <label>"Release after"
            <select name="lifetime_hours" id="launch-lifetime" on:change=move |ev| chosen.set(event_target_value(&ev)) aria-describedby="launch-lifetime-error" aria-invalid=field_invalid(launch.value(), "lifetime_hours")>
                <option value="" selected=initial.is_empty()>{move || match project.get().and_then(|p| p.max_lifetime_hours) {
                    Some(h) => format!("The longest allowed ({})", hours_label(h)),
                    None => "Keep it until I release it".to_string(),
                }}</option>
                {LIFETIMES.iter().map(|h| {
                    let sel = initial == h.to_string();
                    view! { <option value=h.to_string() selected=sel>{hours_label(*h)}</option> }
                }).collect_view()}
            </select>
            <span class="hint" id="launch-lifetime-hint">{hint}</span>
            {field_error(launch.value(), "lifetime_hours", "launch-lifetime-error")}
        </label>
    }
}

/// The chosen project's available volumes, to attach at launch; the instance goes to their
/// region.
#[component]
fn VolumesFieldset(
    volumes: Vec<LaunchVolume>,
    project: RwSignal<String>,
    launch: ServerAction<LaunchAllocation>,
) -> impl IntoView {
    let volumes = StoredValue::new(volumes);
    let offered = move || {
        volumes.with_value(|all| {
            all.iter()
                .filter(|v| v.project == project.get())
                .cloned()
                .collect::<Vec<_>>()
        })
    };
    view! {
        <fieldset class="wide" id="launch-volumes">
            <legend>"Volumes"</legend>
            {move || {
                let here = offered();
                if here.is_empty() {
                    view! { <p class="hint">"No available volume in this project. Create one on the " <a href="/volumes">"Volumes page"</a> " to keep data beyond this instance."</p> }.into_any()
                } else {
                    view! {
                        <div aria-describedby="launch-volumes-error">
                            {here.into_iter().map(|v| view! {
                                <label class="check">
                                    <input type="checkbox" name="volume_ids[]" value=v.id.clone() />
                                    {v.label.clone()}
                                </label>
                            }).collect_view()}
                            <p class="hint">"The instance starts in the volumes' region and sees each as a new disk."</p>
                        </div>
                    }.into_any()
                }
            }}
            {field_error(launch.value(), "volumes", "launch-volumes-error")}
        </fieldset>
    }
}

/// The SSH keys to install: saved ones to tick, and one to paste (and perhaps save).
#[component]
fn KeysFieldset(
    keys: Vec<(String, String)>,
    launch: ServerAction<LaunchAllocation>,
) -> impl IntoView {
    let has_keys = !keys.is_empty();
    view! {
        <fieldset class="wide" id="launch-keys">
            <legend>"SSH keys"</legend>
            {if has_keys {
                view! {
                    <div>
                        {keys.iter().map(|(id, label)| view! {
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
                "1,713.60 USD per 30 days"
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
