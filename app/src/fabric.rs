//! The fleet page's fabric section, for platform staff: the approved places as a tree
//! (fabric → spine groups → leaves → nodes) with the free GPUs of each leaf, the nodes an
//! import saw elsewhere with an approve button, and for operators the import of an
//! `ibnetdiscover` output or a Slurm `topology.conf`.

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use portal_types::fleet::{FabricTree, LeafBranch, NodeFabricPlace};
use portal_types::{IdArg, NodeId};

use crate::components::{ErrorNotice, action_outcome as outcome, field_error, field_invalid};
use crate::error::AppError;

#[server]
pub async fn get_fabric_tree() -> Result<FabricTree, AppError> {
    use control_plane::auth::PlatformStaff;
    let (cp, principal) = crate::server::signed_in().await?;
    let staff = principal.platform::<PlatformStaff>()?;
    Ok(cp.fabric_tree(&staff).await?)
}

/// Imports a topology and says what it did, a sentence a line.
#[server]
pub async fn import_fabric(
    fabric: String,
    format: String,
    topology: String,
) -> Result<Vec<String>, AppError> {
    use control_plane::auth::PlatformOperators;
    use control_plane::fleet::TopologyFormat;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    // The control plane refuses more too; this answers before parsing anything.
    const MAX_TOPOLOGY: usize = 4 * 1024 * 1024;
    if topology.len() > MAX_TOPOLOGY {
        return Err(AppError::Invalid {
            field: "topology".into(),
            reason: format!("{} bytes: an import is at most 4 MiB", topology.len()),
        });
    }
    let format = TopologyFormat::parse(&format)?;
    let done = cp
        .import_fabric(
            &ops,
            &fabric,
            format,
            &topology,
            Some(&crate::error::request_id()),
        )
        .await?;
    let mut said = vec![format!(
        "Placed {} node(s){}; {} already where they were approved.",
        done.placed.len(),
        if done.placed.is_empty() {
            String::new()
        } else {
            format!(" ({})", done.placed.join(", "))
        },
        done.unchanged
    )];
    if !done.drifted.is_empty() {
        said.push(format!(
            "{} node(s) were seen elsewhere and stay out of clusters until approved below: {}.",
            done.drifted.len(),
            done.drifted
                .iter()
                .map(|d| format!("{} ({} → {})", d.hostname, d.approved, d.seen))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !done.unknown_hosts.is_empty() {
        said.push(format!(
            "Not nodes of this fleet (enrol them first): {}.",
            done.unknown_hosts.join(", ")
        ));
    }
    Ok(said)
}

#[server]
pub async fn approve_fabric_drift(id: IdArg<NodeId>) -> Result<(), AppError> {
    use control_plane::auth::PlatformOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    let node = crate::server::id(id)?;
    cp.approve_fabric_drift(&ops, node, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

/// Sets a node's place by hand, from its page.
#[server]
pub async fn set_fabric_place(
    id: IdArg<NodeId>,
    fabric: String,
    spine_group: String,
    leaf: String,
) -> Result<(), AppError> {
    use control_plane::auth::PlatformOperators;
    use control_plane::fleet::PlaceInput;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    let node = crate::server::id(id)?;
    let place = PlaceInput {
        fabric,
        spine_group,
        leaf,
    };
    cp.set_fabric_place(&ops, node, &place, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

/// A node's place on its page: what is approved (and what an import saw instead), and for
/// operators a form that sets it.
#[component]
pub fn NodePlace(
    node: NodeId,
    place: Option<NodeFabricPlace>,
    set: Option<ServerAction<SetFabricPlace>>,
) -> impl IntoView {
    let (fabric, spine, leaf) = place.as_ref().map_or_else(Default::default, |p| {
        (p.fabric.clone(), p.spine_group.clone(), p.leaf.clone())
    });
    view! {
        <section class="card" aria-labelledby="fabric-place">
            <h2 id="fabric-place">"Fabric place"</h2>
            {match &place {
                Some(p) => view! {
                    <p data-testid="fabric-place">{format!("Leaf {} of spine group {} on fabric {}", p.leaf, p.spine_group, p.fabric)}
                        <span class="hint">{format!(" (set by {})", match p.source.as_str() {
                            "operator" => "an operator",
                            "ibnetdiscover" => "an ibnetdiscover import",
                            _ => "a topology.conf import",
                        })}</span></p>
                    {p.drift.clone().map(|seen| view! {
                        <p class="form-error" data-testid="fabric-drift">{format!("An import saw it at {seen}: it stays out of clusters until that is approved on the fleet page or a place is set here.")}</p>
                    })}
                }.into_any(),
                None => view! { <p data-testid="fabric-place">"Not placed: clusters don't use this node until it has a place."</p> }.into_any(),
            }}
            {set.map(|set| view! {
                <ActionForm action=set attr:class="form-grid" attr:id="node-fabric-place">
                    <input type="hidden" name="id" value=node.to_string() />
                    <label>"Fabric"
                        <input name="fabric" value=fabric required autocomplete="off" aria-describedby="place-fabric-error" aria-invalid=field_invalid(set.value(), "fabric") />
                        {field_error(set.value(), "fabric", "place-fabric-error")}
                    </label>
                    <label>"Spine group"
                        <input name="spine_group" value=spine required autocomplete="off" aria-describedby="place-spine-error" aria-invalid=field_invalid(set.value(), "spine_group") />
                        {field_error(set.value(), "spine_group", "place-spine-error")}
                    </label>
                    <label>"Leaf switch"
                        <input name="leaf" value=leaf required autocomplete="off" aria-describedby="place-leaf-error" aria-invalid=field_invalid(set.value(), "leaf") />
                        {field_error(set.value(), "leaf", "place-leaf-error")}
                    </label>
                    <div class="form-actions"><button type="submit">"Set place"</button></div>
                </ActionForm>
                {outcome(set.value(), |_| Some("Place set; clusters use it from now on.".into()))}
            })}
        </section>
    }
}

/// The fabric section: the tree for staff, the import and approvals for operators.
#[component]
pub fn FabricSection(can_operate: bool) -> impl IntoView {
    let import = ServerAction::<ImportFabric>::new();
    let approve = ServerAction::<ApproveFabricDrift>::new();
    let tree = Resource::new(
        move || (import.version().get(), approve.version().get()),
        |_| get_fabric_tree(),
    );
    view! {
        <section class="card" aria-labelledby="fabric">
            <h2 id="fabric">"Fabric"</h2>
            <p class="hint">"Where each node hangs off the InfiniBand fabric. Clusters are placed within one leaf switch, spine group or fabric by these places; a node an import saw somewhere else stays out of clusters until it is approved here."</p>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match tree.await {
                        Ok(t) => view! { <Tree tree=t can_operate approve /> }.into_any(),
                        Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                    }
                })}
            </Suspense>
            {can_operate.then(|| view! { <ImportForm import /> })}
        </section>
    }
}

#[component]
fn Tree(
    tree: FabricTree,
    can_operate: bool,
    approve: ServerAction<ApproveFabricDrift>,
) -> impl IntoView {
    if tree.fabrics.is_empty() {
        return view! { <p data-testid="fabric-empty">"No node has a fabric place yet: import a topology below."</p> }.into_any();
    }
    let drifting = (!tree.drifting.is_empty()).then(|| {
        view! {
            <h3>"Seen elsewhere"</h3>
            <div class="table-scroll">
            <table class="data" id="fabric-drift">
                <thead><tr><th>"Node"</th><th>"Approved place"</th><th>"Seen at"</th><th></th></tr></thead>
                <tbody>
                    {tree.drifting.into_iter().map(|d| { let label = format!("Approve the new place of {}", d.hostname); let id = d.id.to_string(); view! {
                        <tr data-drift-node=d.hostname.clone()>
                            <td><a href=format!("/fleet/{}", d.id)>{d.hostname.clone()}</a></td>
                            <td>{d.approved}</td>
                            <td>{d.seen}</td>
                            <td>{can_operate.then(|| view! {
                                <ActionForm action=approve>
                                    <input type="hidden" name="id" value=id />
                                    <button type="submit" aria-label=label>"Approve"</button>
                                </ActionForm>
                            })}</td>
                        </tr>
                    }}).collect_view()}
                </tbody>
            </table>
            </div>
            {outcome(approve.value(), |_| Some("Approved: the node is placed there now.".into()))}
        }
    });
    view! {
        <ul class="fabric-tree" id="fabric-tree">
            {tree.fabrics.into_iter().map(|f| view! {
                <li data-fabric=f.name.clone()>
                    <strong>{format!("fabric {}", f.name)}</strong>
                    <ul>
                        {f.spines.into_iter().map(|s| view! {
                            <li data-spine=s.name.clone()>
                                {format!("spine {}", s.name)}
                                <ul>{s.leaves.into_iter().map(|l| view! { <Leaf leaf=l /> }).collect_view()}</ul>
                            </li>
                        }).collect_view()}
                    </ul>
                </li>
            }).collect_view()}
        </ul>
        {drifting}
    }
    .into_any()
}

#[component]
fn Leaf(leaf: LeafBranch) -> impl IntoView {
    let nodes = leaf.nodes.len();
    view! {
        <li data-leaf=leaf.name.clone()>
            <details>
                <summary>
                    {format!("leaf {} · {nodes} node{}", leaf.name, if nodes == 1 { "" } else { "s" })}
                    " · " <span data-testid="leaf-free">{format!("{} of {} GPUs free", leaf.free_gpus, leaf.gpus)}</span>
                </summary>
                <ul class="fabric-nodes">
                    {leaf.nodes.into_iter().map(|n| view! {
                        <li data-fabric-node=n.hostname.clone()>
                            <a href=format!("/fleet/{}", n.id)>{n.hostname.clone()}</a>
                            {format!(" · {} of {} GPUs free", n.free_gpus, n.gpus)}
                            {(!n.selling).then_some(" · not selling now")}
                            {n.drifting.then_some(" · seen elsewhere: out of clusters")}
                        </li>
                    }).collect_view()}
                </ul>
            </details>
        </li>
    }
}

#[component]
fn ImportForm(import: ServerAction<ImportFabric>) -> impl IntoView {
    view! {
        <h3>"Import a topology"</h3>
        <ActionForm action=import attr:id="fabric-import">
            <div class="form-grid">
                <label>"Fabric"
                    <input name="fabric" required placeholder="ib0" autocomplete="off" aria-describedby="fabric-name-error" aria-invalid=field_invalid(import.value(), "fabric") />
                    {field_error(import.value(), "fabric", "fabric-name-error")}
                </label>
                <label>"Format"
                    <select name="format">
                        <option value="slurm_topology">"Slurm topology.conf"</option>
                        <option value="ibnetdiscover">"ibnetdiscover output"</option>
                    </select>
                </label>
            </div>
            <label>"Topology"
                <textarea name="topology" rows="8" required spellcheck="false" aria-describedby="fabric-topology-hint fabric-topology-error" aria-invalid=field_invalid(import.value(), "topology")></textarea>
                <span class="hint" id="fabric-topology-hint">"Nodes are matched by hostname. Nodes without a place are placed; a placed node seen elsewhere is kept where it is until approved."</span>
                {field_error(import.value(), "topology", "fabric-topology-error")}
            </label>
            <div class="form-actions"><button type="submit">"Import"</button></div>
        </ActionForm>
        {move || import.value().get().and_then(Result::ok).map(|lines| view! {
            <div class="notice" role="status" id="fabric-import-result">
                {lines.into_iter().map(|l| view! { <p>{l}</p> }).collect_view()}
            </div>
        })}
        {outcome(import.value(), |_: Vec<String>| None)}
    }
}
