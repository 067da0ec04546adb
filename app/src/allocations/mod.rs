//! A project's allocations: the list with state filters, newest first, a page at a time.
//! The launch form is [`launch`]; an allocation's own page, with its phases and timings
//! (refreshed every second while it changes), SSH details, release and the cleanup
//! certificate, is [`detail`].

mod detail;
mod launch;

pub use detail::{
    AllocationPage, GetAllocation, GetGpuHistory, PublishPorts, ReleaseAllocation, StartInstance,
    StopInstance,
};
pub use launch::{
    GetLaunchForm, LaunchAllocation, LaunchForm, LaunchImage, LaunchPage, LaunchProject, LaunchSku,
    Software,
};

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;
use portal_types::allocations::{AllocationSummary, PortAddress};
use portal_types::{AllocationId, IdArg, ProjectId, utc};
use serde::{Deserialize, Serialize};

use crate::components::{ErrorNotice, Pager};
use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationsView {
    pub projects: Vec<(String, String)>,
    /// The project shown; none: all of them.
    pub project: Option<String>,
    /// May launch in at least one of them (operator or admin).
    pub can_launch: bool,
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
    /// What it has cost so far, written out; none before it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<String>,
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
            per_hour: a.price_per_hour.grouped(),
            cost: a.cost_so_far.map(|c| c.grouped()),
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
    "stopped",
    "releasing",
    "cleaning",
    "released",
];

#[server]
pub async fn list_allocations(
    project: Option<IdArg<ProjectId>>,
    state: Option<String>,
    after: Option<String>,
    limit: Option<String>,
) -> Result<AllocationsView, AppError> {
    use control_plane::allocations::AllocationFilter;
    use control_plane::tenancy::{
        ProjectOperators, ProjectRequirement, ProjectViewers, TenantMembers,
    };
    let (cp, principal) = crate::server::signed_in().await?;
    let (member, _) = crate::server::home_tenant::<TenantMembers>(&cp, &principal).await?;
    let visible = cp.visible_projects(&member).await?;
    let projects: Vec<(String, String)> = visible
        .iter()
        .map(|(p, _)| (p.id.to_string(), p.display_name.clone()))
        .collect();
    let can_launch = visible
        .iter()
        .any(|(p, _)| ProjectOperators::ROLES.contains(&p.my_role));
    let project = project.filter(|p| !p.is_empty());
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
    let shown = match &project {
        // Every project they see, as one list.
        None => visible.into_iter().map(|(_, who)| who).collect(),
        Some(p) => {
            let id = crate::server::id(p.clone())?;
            // A project of another organization they belong to is checked on its own.
            vec![match visible.into_iter().find(|(p, _)| p.id == id) {
                Some((_, who)) => who,
                None => cp.project_access::<ProjectViewers>(&principal, id).await?,
            }]
        }
    };
    let (rows, next) = if shown.is_empty() {
        (vec![], None)
    } else {
        let filter = AllocationFilter {
            state: Some(state.clone()),
            tag: None,
            after: after.clone(),
            limit: limit.unwrap_or(LIST_PAGE),
        };
        let page = cp.allocation_page(&shown, &filter).await?;
        (
            page.items.into_iter().map(AllocationRow::from).collect(),
            page.next,
        )
    };
    Ok(AllocationsView {
        projects,
        project: project.map(|p| p.to_string()),
        can_launch,
        state,
        rows,
        after,
        next,
        limit,
    })
}

/// States that change by themselves, soon: a list showing one refreshes itself.
const MOVING: &[&str] = &["placed", "provisioning", "releasing", "cleaning", "failing"];

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
    let tick = RwSignal::new(0u32);
    let list = Resource::new(
        move || (filter(), tick.get()),
        |((p, s, a, l), _)| list_allocations(p.map(Into::into), s, a, l),
    );
    // In the browser: every 3 seconds while a row is on its way somewhere (launching,
    // releasing), so its state and address appear without a reload; quiet otherwise.
    Effect::new(move |_| {
        let handle = set_interval_with_handle(
            move || {
                let moving = list.get_untracked().is_some_and(|r| {
                    r.is_ok_and(|v| {
                        v.rows
                            .iter()
                            .any(|a| MOVING.contains(&a.projected.as_str()))
                    })
                });
                if moving {
                    tick.update(|t| *t = t.wrapping_add(1));
                }
            },
            std::time::Duration::from_secs(3),
        );
        on_cleanup(move || {
            if let Ok(h) = handle {
                h.clear();
            }
        });
    });
    view! {
        <Title text="Instances" />
        <h1>"Instances"</h1>
        <crate::clusters::ClustersSection />
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match list.await {
                    Ok(v) => view! { <AllocationsBody v /> }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Transition>
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
    let newest = v.after.is_some().then(|| href(None));
    let older = v.next.as_deref().map(|n| href(Some(n)));
    let shown = match (v.after.is_some(), v.rows.len()) {
        (true, 1) => "1 older instance".to_owned(),
        (true, n) => format!("{n} older instances"),
        (false, 1) => "The newest instance".to_owned(),
        (false, n) => format!("The {n} newest instances"),
    };
    let empty = match (v.state.as_str(), v.can_launch) {
        ("active", true) => {
            "Nothing is running. Launch an instance from the catalog or the marketplace."
        }
        ("active", false) => "Nothing is running.",
        _ => "No instances match.",
    };
    view! {
        <form method="get" action="/allocations" class="filters">
            <label>"Project "
                <select name="project">
                    <option value="" selected=project.is_none()>"All projects"</option>
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
        {v.can_launch.then(|| view! { <p><a class="button" href="/catalog">"Launch an instance"</a></p> })}
        {if v.rows.is_empty() {
            view! { <p data-testid="empty">{empty}</p> }.into_any()
        } else {
            view! {
                <div class="table-scroll">
                <table class="data cards" id="allocations">
                    <thead><tr><th>"Name"</th><th>"SKU"</th><th>"GPUs"</th><th>"Region"</th><th>"State"</th><th>"Connect"</th><th>"Per hour"</th><th>"Cost so far"</th><th>"Created"</th></tr></thead>
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
                                <td data-label="Per hour">{a.per_hour}</td>
                                <td data-label="Cost so far" data-testid="row-cost">{a.cost.unwrap_or_else(|| "—".into())}</td>
                                <td data-label="Created">{a.created}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
                </div>
            }.into_any()
        }}
        <Pager label="Pages of instances" shown newest older />
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

#[cfg(test)]
mod tests {
    use super::*;

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
            cost_so_far: None,
            expires_at: None,
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
}
