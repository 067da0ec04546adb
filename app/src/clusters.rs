//! Clusters in the portal: the list above the instances (each cluster with its members'
//! progress), and a cluster's page with every member's leaf, spine, state and SSH command,
//! the topology for the tenant's own Slurm, and the release of the whole cluster. A cluster is
//! launched from the launch form with more than one node.

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;
use portal_types::clusters::Cluster;
use portal_types::{ClusterId, IdArg, utc};
use serde::{Deserialize, Serialize};

use crate::components::{DangerButton, ErrorNotice, action_outcome as outcome};
use crate::error::AppError;

/// A cluster's page: the cluster, whether the viewer may release it, its topology.conf.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterView {
    pub cluster: Cluster,
    pub can_release: bool,
    pub topology: String,
}

/// The clusters of every project the viewer sees, newest first.
#[server]
pub async fn list_clusters() -> Result<Vec<Cluster>, AppError> {
    use control_plane::tenancy::TenantMembers;
    let (cp, principal) = crate::server::signed_in().await?;
    let (member, _) = crate::server::home_tenant::<TenantMembers>(&cp, &principal).await?;
    let mut all = Vec::new();
    for (_, who) in cp.visible_projects(&member).await? {
        all.extend(cp.clusters(&who).await?);
    }
    all.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.0.cmp(&b.id.0)));
    Ok(all)
}

#[server]
pub async fn get_cluster(id: IdArg<ClusterId>) -> Result<ClusterView, AppError> {
    use control_plane::tenancy::{ProjectOperators, ProjectRequirement, ProjectViewers};
    let (cp, principal) = crate::server::signed_in().await?;
    let id = crate::server::id(id)?;
    let who = cp.cluster_access::<ProjectViewers>(&principal, id).await?;
    let cluster = cp.cluster(&who, id).await?;
    Ok(ClusterView {
        topology: control_plane::allocations::clusters::slurm_topology(&cluster),
        can_release: ProjectOperators::ROLES.contains(&who.role()),
        cluster,
    })
}

#[server]
pub async fn release_cluster(id: IdArg<ClusterId>) -> Result<(), AppError> {
    use control_plane::tenancy::ProjectOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let id = crate::server::id(id)?;
    let who = cp
        .cluster_access::<ProjectOperators>(&principal, id)
        .await?;
    cp.release_cluster(&who, id, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

/// States a cluster leaves by itself, soon: its page refreshes itself while in one.
const MOVING: &[&str] = &["provisioning", "releasing"];

/// "3 of 4 running".
fn progress(c: &Cluster) -> String {
    let running = c.members.iter().filter(|m| m.state == "running").count();
    format!("{running} of {} running", c.size)
}

/// The clusters above the instance list; nothing when there are none.
#[component]
pub fn ClustersSection() -> impl IntoView {
    let clusters = Resource::new(|| (), |_| list_clusters());
    view! {
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                match clusters.await {
                    Ok(list) if list.is_empty() => ().into_any(),
                    Ok(list) => view! {
                        <section class="card" aria-labelledby="clusters">
                            <h2 id="clusters">"Clusters"</h2>
                            <div class="table-scroll">
                            <table class="data" id="cluster-list">
                                <thead><tr><th>"Name"</th><th>"State"</th><th>"Members"</th><th>"Region"</th><th>"Within"</th></tr></thead>
                                <tbody>
                                    {list.into_iter().map(|c| view! {
                                        <tr data-cluster=c.name.clone()>
                                            <td><a href=format!("/clusters/{}", c.id)>{c.name.clone()}</a></td>
                                            <td><span class=format!("state state-{}", c.state)>{c.state.clone()}</span></td>
                                            <td>{format!("{} × {} · {}", c.size, c.sku, progress(&c))}</td>
                                            <td>{c.region.clone()}</td>
                                            <td>{format!("{} of fabric {}", c.placed_within, c.fabric)}</td>
                                        </tr>
                                    }).collect_view()}
                                </tbody>
                            </table>
                            </div>
                        </section>
                    }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
pub fn ClusterPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").unwrap_or_default());
    let release = ServerAction::<ReleaseCluster>::new();
    let tick = RwSignal::new(0u32);
    let page = Resource::new(
        move || (id(), release.version().get(), tick.get()),
        |(id, ..)| get_cluster(id.into()),
    );
    Effect::new(move |_| {
        let handle = set_interval_with_handle(
            move || {
                let moving = page
                    .get_untracked()
                    .is_some_and(|r| r.is_ok_and(|v| MOVING.contains(&v.cluster.state.as_str())));
                if moving {
                    tick.update(|t| *t = t.wrapping_add(1));
                }
            },
            std::time::Duration::from_secs(2),
        );
        on_cleanup(move || {
            if let Ok(h) = handle {
                h.clear();
            }
        });
    });
    view! {
        <Title text="Cluster" />
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(v) => view! { <ClusterBody v release /> }.into_any(),
                    Err(e) => view! { <h1>"Cluster"</h1><ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn ClusterBody(v: ClusterView, release: ServerAction<ReleaseCluster>) -> impl IntoView {
    let ClusterView {
        cluster: c,
        can_release,
        topology,
    } = v;
    let releasable =
        can_release && !matches!(c.state.as_str(), "releasing" | "released" | "failed");
    let id = c.id.to_string();
    let within = if c.locality_required {
        format!("{} (required)", c.locality)
    } else {
        format!("{} (preferred)", c.locality)
    };
    view! {
        <h1>{c.name.clone()} " " <span class=format!("state state-{}", c.state) data-testid="cluster-state">{c.state.clone()}</span></h1>
        <section class="card" aria-labelledby="cluster-facts">
            <h2 id="cluster-facts">"Placement"</h2>
            <dl class="facts">
                <dt>"Members"</dt><dd data-testid="cluster-size">{format!("{} × {} · {}", c.size, c.sku, progress(&c))}</dd>
                <dt>"Region"</dt><dd>{c.region.clone()}</dd>
                <dt>"Asked"</dt><dd>{within}</dd>
                <dt>"Placed"</dt><dd data-testid="cluster-why">{c.why.clone()}</dd>
                <dt>"Spans"</dt><dd>{format!("{} leaf switch{}, {} spine group{}", c.leaves, if c.leaves == 1 { "" } else { "es" }, c.spines, if c.spines == 1 { "" } else { "s" })}</dd>
                <dt>"Launched"</dt><dd>{utc(c.created_at)}</dd>
            </dl>
            {c.failure.clone().map(|f| view! { <p class="form-error" role="alert" data-testid="cluster-failure">{f}</p> })}
        </section>
        <section class="card" aria-labelledby="cluster-members">
            <h2 id="cluster-members">"Members"</h2>
            <div class="table-scroll">
            <table class="data" id="cluster-members-table">
                <thead><tr><th>"#"</th><th>"Instance"</th><th>"State"</th><th>"Spine"</th><th>"Leaf"</th><th>"Private address"</th><th>"Connect"</th></tr></thead>
                <tbody>
                    {c.members.iter().map(|m| view! {
                        <tr data-member=m.index.to_string()>
                            <td>{m.index}</td>
                            <td><a href=format!("/allocations/{}", m.id)>{m.name.clone()}</a></td>
                            <td><span class=format!("state state-{}", m.state) data-testid="member-state">{m.state.clone()}</span></td>
                            <td>{m.spine.clone()}</td>
                            <td data-testid="member-leaf">{m.leaf.clone()}</td>
                            <td data-testid="member-private"><code>{m.private_address.clone().unwrap_or_else(|| "—".into())}</code></td>
                            <td><code data-testid="member-ssh">{m.ssh.clone().unwrap_or_else(|| "—".into())}</code></td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
            </div>
            {c.members.iter().all(|m| m.private_address.is_none()).then(|| view! {
                <p class="hint" data-testid="no-private-network">"No private network: this project keeps east-west traffic off, so members reach each other only through their public ports. A project admin can turn it on in the project's settings; instances launched after that get an address on it."</p>
            })}
        </section>
        <section class="card" aria-labelledby="cluster-topology">
            <h2 id="cluster-topology">"Topology for Slurm"</h2>
            <p class="hint">"A topology.conf for the tree plugin, with the members' names: give it to your own Slurm so jobs are placed on as few switches as they can."</p>
            <pre class="wide" data-testid="topology">{topology}</pre>
        </section>
        {releasable.then(|| view! {
            <section class="card" aria-labelledby="cluster-release">
                <h2 id="cluster-release">"Release"</h2>
                <p class="hint">"Every member is stopped, its disks wiped and verified, and billing stops for each as it goes."</p>
                <ActionForm action=release>
                    <input type="hidden" name="id" value=id />
                    <DangerButton question=format!("Release every member of {}?", c.name)>"Release cluster"</DangerButton>
                </ActionForm>
            </section>
        })}
        {outcome(release.value(), |_| Some("Releasing every member.".into()))}
    }
}
