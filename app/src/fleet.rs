//! The fleet, for platform staff: posture counts and filters, enrolment (the bootstrap token is
//! shown once), and a node page with its slots, the slot-map proposal beside the approved map,
//! approval and rejection, drift, admin states, tasks and the node's audit trail.

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use agent_protocol::SlotSpec;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};
use portal_types::fleet::{
    Enrolment, FleetView, GpuHealthEvent, GpuHealthPolicy, NodeDetail, ProposalView, SlotRow,
};
use portal_types::utc;
use portal_types::{IdArg, NodeId, SlotId};
use serde::{Deserialize, Serialize};

use crate::components::{
    DangerButton, ErrorNotice, action_outcome as outcome, field_error, field_invalid,
};
use crate::error::AppError;

/// The fleet page: the control plane's view, and whether the viewer may change it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fleet {
    pub can_operate: bool,
    pub fleet: FleetView,
    /// Which GPU health events take a slot out of service.
    pub health_policy: GpuHealthPolicy,
}

/// An enrolment's one-time answer, with the address the agent should connect to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enrolled {
    pub enrolment: Enrolment,
    pub server: String,
}

/// A node's page: the control plane's detail, and whether the viewer may change it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    pub can_operate: bool,
    pub detail: NodeDetail,
}

#[cfg(feature = "ssr")]
mod ssr {

    use crate::AppError;

    /// What the operator is shown once: the token and where the agent should connect.
    pub fn enrolled(
        enrolment: control_plane::fleet::Enrolment,
    ) -> Result<super::Enrolled, AppError> {
        Ok(super::Enrolled {
            enrolment,
            server: crate::server::public_origin()?.0.to_string(),
        })
    }

    /// `0-2,5` → [0, 1, 2, 5]; empty → None (all slots).
    pub fn slot_list(s: &str) -> Result<Option<Vec<u32>>, AppError> {
        if s.trim().is_empty() {
            return Ok(None);
        }
        agent_protocol::ranges::parse_ranges(s)
            .map(Some)
            .map_err(|p| {
                AppError::BadRequest(format!(
                    "\"{p}\" is not a slot number or range; write e.g. 0,1,4-6."
                ))
            })
    }
}

#[server]
pub async fn fleet_overview(
    region: Option<String>,
    posture: Option<String>,
    model: Option<String>,
) -> Result<Fleet, AppError> {
    use control_plane::auth::{PlatformOperators, PlatformStaff};
    let (cp, principal) = crate::server::signed_in().await?;
    let staff = principal.platform::<PlatformStaff>()?;
    let filter = control_plane::fleet::FleetFilter {
        region,
        posture,
        gpu_model: model,
    };
    Ok(Fleet {
        can_operate: principal.platform::<PlatformOperators>().is_ok(),
        fleet: cp.fleet(&staff, &filter).await?,
        health_policy: cp.gpu_health_policy(&staff).await?,
    })
}

#[server]
pub async fn enrol_node(
    #[server(flatten)] node: portal_types::EnrolmentInput,
) -> Result<Enrolled, AppError> {
    let portal_types::EnrolmentInput {
        hostname,
        region,
        rack,
        family,
        shape_gpu_slice,
        shape_baremetal,
    } = node;
    use control_plane::auth::PlatformOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    let mut shapes = Vec::new();
    if shape_gpu_slice.is_some() {
        shapes.push("gpu_slice".to_string());
    }
    if shape_baremetal.is_some() {
        shapes.push("baremetal".to_string());
    }
    let node = control_plane::fleet::NewNode {
        hostname,
        region,
        rack,
        family,
        capacity_shapes: shapes,
    };
    let e = cp
        .enrol_node(&ops, &node, Some(&crate::error::request_id()))
        .await?;
    ssr::enrolled(e)
}

#[server]
pub async fn reissue_node_token(id: IdArg<NodeId>) -> Result<Enrolled, AppError> {
    use control_plane::auth::PlatformOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    let e = cp
        .reissue_bootstrap_token(
            &ops,
            crate::server::id(id)?,
            Some(&crate::error::request_id()),
        )
        .await?;
    ssr::enrolled(e)
}

#[server]
pub async fn get_node(id: IdArg<NodeId>) -> Result<NodeView, AppError> {
    use control_plane::auth::{PlatformOperators, PlatformStaff};
    let (cp, principal) = crate::server::signed_in().await?;
    let staff = principal.platform::<PlatformStaff>()?;
    Ok(NodeView {
        can_operate: principal.platform::<PlatformOperators>().is_ok(),
        detail: cp.node_detail(&staff, crate::server::id(id)?).await?,
    })
}

#[server]
pub async fn set_node_state(id: IdArg<NodeId>, state: String) -> Result<(), AppError> {
    use control_plane::auth::PlatformOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    let state = control_plane::fleet::AdminState::parse(&state)?;
    cp.set_admin_state(
        &ops,
        crate::server::id(id)?,
        state,
        Some(&crate::error::request_id()),
    )
    .await?;
    Ok(())
}

/// Where tenants reach the node's guests: `public_host` (empty: the hostname) and the first
/// public port.
#[server]
pub async fn set_node_network(
    id: IdArg<NodeId>,
    public_host: String,
    public_port_base: String,
) -> Result<(), AppError> {
    use control_plane::auth::PlatformOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    let base = public_port_base
        .trim()
        .parse::<u16>()
        .map_err(|_| AppError::Invalid {
            field: "public_port_base".into(),
            reason: format!("{:?} is not a port number.", public_port_base.trim()),
        })?;
    cp.set_node_network(
        &ops,
        crate::server::id(id)?,
        &public_host,
        base,
        Some(&crate::error::request_id()),
    )
    .await?;
    Ok(())
}

#[server]
pub async fn rediscover_node(id: IdArg<NodeId>) -> Result<(), AppError> {
    use control_plane::auth::PlatformOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    cp.request_discovery(
        &ops,
        crate::server::id(id)?,
        Some(&crate::error::request_id()),
    )
    .await?;
    Ok(())
}

#[server]
pub async fn approve_slot_map(
    id: IdArg<NodeId>,
    generation: i32,
    wipe_policy: Option<String>,
    only: Option<String>,
) -> Result<usize, AppError> {
    use control_plane::auth::PlatformOperators;
    use control_plane::fleet::SlotMapDecision;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    let decision = SlotMapDecision::Approve {
        only: ssr::slot_list(only.as_deref().unwrap_or_default())?,
        wipe_policy,
    };
    Ok(cp
        .decide_slot_map(
            &ops,
            crate::server::id(id)?,
            generation,
            &decision,
            Some(&crate::error::request_id()),
        )
        .await?)
}

#[server]
pub async fn reject_slot_map(
    id: IdArg<NodeId>,
    generation: i32,
    reason: String,
) -> Result<(), AppError> {
    use control_plane::auth::PlatformOperators;
    use control_plane::fleet::SlotMapDecision;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    cp.decide_slot_map(
        &ops,
        crate::server::id(id)?,
        generation,
        &SlotMapDecision::Reject { reason },
        Some(&crate::error::request_id()),
    )
    .await?;
    Ok(())
}

/// An operator declares a blocked slot clean, saying what they checked.
#[server]
pub async fn clear_blocked_slot(slot: IdArg<SlotId>, reason: String) -> Result<(), AppError> {
    use control_plane::auth::PlatformOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    let slot = crate::server::id(slot)?;
    cp.clear_blocked_slot(&ops, slot, &reason, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

/// An operator puts a slot a GPU health event took out of service back into placement.
#[server]
pub async fn return_slot_to_service(slot: IdArg<SlotId>, reason: String) -> Result<(), AppError> {
    use control_plane::auth::PlatformOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    let slot = crate::server::id(slot)?;
    cp.return_slot_to_service(&ops, slot, &reason, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

#[server]
pub async fn set_gpu_health_policy(
    #[server(flatten)] policy: portal_types::GpuHealthPolicyInput,
) -> Result<(), AppError> {
    use control_plane::auth::PlatformOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    cp.set_gpu_health_policy(&ops, &policy, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

#[component]
pub fn FleetPage() -> impl IntoView {
    let query = use_query_map();
    let enrol = ServerAction::<EnrolNode>::new();
    let save_policy = ServerAction::<SetGpuHealthPolicy>::new();
    let filter = move || query.with(|q| (q.get("region"), q.get("posture"), q.get("model")));
    let fleet = Resource::new(
        move || (filter(), enrol.version().get(), save_policy.version().get()),
        |((region, posture, model), ..)| fleet_overview(region, posture, model),
    );
    view! {
        <Title text="Fleet" />
        <h1>"Fleet"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match fleet.await {
                    Ok(f) => view! { <FleetBody fleet=f filter=filter() enrol save_policy /> }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn FleetBody(
    fleet: Fleet,
    filter: (Option<String>, Option<String>, Option<String>),
    enrol: ServerAction<EnrolNode>,
    save_policy: ServerAction<SetGpuHealthPolicy>,
) -> impl IntoView {
    let (region, posture, model) = filter;
    let selected = |current: &Option<String>, value: &str| current.as_deref() == Some(value);
    let Fleet {
        can_operate,
        fleet,
        health_policy,
    } = fleet;
    // The filter offers every posture, in the control plane's order and words.
    let postures: Vec<(String, String)> = fleet
        .by_posture
        .iter()
        .map(|(p, l, _)| (p.clone(), l.clone()))
        .collect();
    view! {
        <section class="card" aria-labelledby="postures">
            <h2 id="postures">"Postures"</h2>
            <ul class="tally" data-testid="posture-counts">
                {fleet.by_posture.into_iter().map(|(p, label, n)| view! {
                    <li data-posture=p.clone()>
                        <a href=format!("/fleet?posture={p}")>
                            <strong>{n}</strong> " " {label}
                        </a>
                    </li>
                }).collect_view()}
            </ul>
            <p class="hint">
                "By region: "
                {fleet.by_region.iter().map(|(r, n)| format!("{r} {n}")).collect::<Vec<_>>().join(" · ")}
                " — by GPU model: "
                {fleet.by_model.iter().map(|(m, n)| format!("{m} {n}")).collect::<Vec<_>>().join(" · ")}
            </p>
            <form method="get" action="/fleet" class="filters">
                <label>"Region "
                    <select name="region">
                        <option value="">"All"</option>
                        {fleet.regions.into_iter().map(|r| { let s = selected(&region, &r); let label = r.clone(); view! { <option value=r selected=s>{label}</option> } }).collect_view()}
                    </select>
                </label>
                <label>"Posture "
                    <select name="posture">
                        <option value="">"All"</option>
                        {postures.into_iter().map(|(p, l)| { let s = selected(&posture, &p); view! { <option value=p selected=s>{l}</option> } }).collect_view()}
                    </select>
                </label>
                <label>"GPU model "
                    <select name="model">
                        <option value="">"All"</option>
                        {fleet.models.into_iter().map(|m| { let s = selected(&model, &m); let label = m.clone(); view! { <option value=m selected=s>{label}</option> } }).collect_view()}
                    </select>
                </label>
                <button type="submit">"Filter"</button>
            </form>
        </section>
        <section class="card" aria-labelledby="nodes">
            <h2 id="nodes">"Nodes"</h2>
            {if fleet.nodes.is_empty() {
                view! { <p>"No nodes match."</p> }.into_any()
            } else {
                view! {
                    <div class="table-scroll">
                    <table class="data">
                        <thead><tr>
                            <th>"Host"</th><th>"Region / rack"</th><th>"Family"</th><th>"GPU"</th>
                            <th>"Slots"</th><th>"Posture"</th><th>"Heartbeat"</th><th>"Proposal"</th>
                        </tr></thead>
                        <tbody>
                            {fleet.nodes.into_iter().map(|n| view! {
                                <tr data-node=n.hostname.clone()>
                                    <td><a href=format!("/fleet/{}", n.id)>{n.hostname.clone()}</a></td>
                                    <td>{n.region.clone()} " / " {n.rack.clone()}</td>
                                    <td>{n.family.clone()}</td>
                                    <td>{n.gpu_model.clone().unwrap_or_else(|| "—".into())}</td>
                                    <td>{n.schedulable_slots} " of " {n.live_slots} " schedulable"
                                        {(n.drifted_slots > 0).then(|| format!(", {} drifted", n.drifted_slots))}</td>
                                    <td><span class=format!("posture posture-{}", n.posture)>{n.posture_label().to_string()}</span>
                                        <br/><small>{n.posture_reason.clone()}</small></td>
                                    <td>{n.heartbeat()}</td>
                                    <td>{n.pending_generation.map(|g| format!("generation {g} waits for approval"))}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                    </div>
                }.into_any()
            }}
        </section>
        <crate::fabric::FabricSection can_operate />
        <HealthPolicy policy=health_policy can_operate save=save_policy />
        {can_operate.then(|| view! { <EnrolForm enrol /> })}
    }
}

/// Which GPU health events take a slot out of service: shown to staff, edited by operators.
#[component]
fn HealthPolicy(
    policy: GpuHealthPolicy,
    can_operate: bool,
    save: ServerAction<SetGpuHealthPolicy>,
) -> impl IntoView {
    let changed = match &policy.updated_by {
        Some(who) => format!("Changed by {who} at {}.", utc(policy.updated_at)),
        None => "The defaults: the XIDs NVIDIA says need a reset or worse (48, 63, 64, 74, 79), and uncorrectable ECC errors.".into(),
    };
    view! {
        <section class="card" aria-labelledby="gpu-health-policy">
            <h2 id="gpu-health-policy">"GPU health policy"</h2>
            <p class="hint">"Agents report XID errors, uncorrectable ECC errors and thermal slowdown with their heartbeats. The events chosen here take the GPU's slot out of service: nothing new is placed on it until an operator returns it on the node's page. The tenant using it is told on their allocation's page."</p>
            {if can_operate {
                view! {
                    <ActionForm action=save attr:class="form-grid" attr:id="health-policy">
                        <label>"XID errors that take a slot out of service"
                            <input name="xid_codes" value=policy.xid_list() autocomplete="off" aria-describedby="xid-hint xid-error" aria-invalid=field_invalid(save.value(), "xid_codes") />
                            <span class="hint" id="xid-hint">"XID numbers, separated by commas; empty: none."</span>
                            {field_error(save.value(), "xid_codes", "xid-error")}
                        </label>
                        <label class="check"><input type="checkbox" name="ecc_uncorrectable" value="true" checked=policy.ecc_uncorrectable />
                            " Uncorrectable ECC errors"</label>
                        <label class="check"><input type="checkbox" name="thermal" value="true" checked=policy.thermal />
                            " Hardware thermal slowdown"</label>
                        <div class="form-actions"><button type="submit">"Save policy"</button></div>
                    </ActionForm>
                    {outcome(save.value(), |_| Some("Saved; it applies to events from now on.".into()))}
                }.into_any()
            } else {
                view! {
                    <dl class="facts" data-testid="health-policy">
                        <dt>"XID errors"</dt><dd>{Some(policy.xid_list()).filter(|l| !l.is_empty()).unwrap_or_else(|| "none".into())}</dd>
                        <dt>"Uncorrectable ECC"</dt><dd>{if policy.ecc_uncorrectable { "out of service" } else { "recorded only" }}</dd>
                        <dt>"Thermal slowdown"</dt><dd>{if policy.thermal { "out of service" } else { "recorded only" }}</dd>
                    </dl>
                }.into_any()
            }}
            <p class="hint" data-testid="policy-changed">{changed}</p>
        </section>
    }
}

#[component]
fn EnrolForm(enrol: ServerAction<EnrolNode>) -> impl IntoView {
    view! {
        <section class="card" aria-labelledby="enrol">
            <h2 id="enrol">"Enrol a node"</h2>
            <ActionForm action=enrol>
                <div class="form-grid">
                    <label>"Hostname" <input name="hostname" required placeholder="gpu-hgx-01" /></label>
                    <label>"Region" <input name="region" required placeholder="eu-west-1" /></label>
                    <label>"Rack" <input name="rack" required placeholder="r12" /></label>
                    <label>"Node family" <input name="family" required placeholder="hgx-h100-8x" /></label>
                </div>
                <fieldset>
                    <legend>"May serve"</legend>
                    <label><input type="checkbox" name="shape_gpu_slice" value="on" checked /> " GPU slices"</label>
                    <label><input type="checkbox" name="shape_baremetal" value="on" /> " Bare metal (whole node)"</label>
                </fieldset>
                <button type="submit">"Enrol"</button>
            </ActionForm>
            {outcome(enrol.value(), |_: Enrolled| None)}
            {move || enrol.value().get().and_then(Result::ok).map(|e| view! { <TokenOnce e /> })}
        </section>
    }
}

/// The bootstrap token, shown once, with the command that uses it.
#[component]
fn TokenOnce(e: Enrolled) -> impl IntoView {
    let Enrolled {
        enrolment: e,
        server,
    } = e;
    view! {
        <div class="token-once" role="status">
            <p>
                "Enrolled " <a href=format!("/fleet/{}", e.node_id)>{e.hostname.clone()}</a>
                ". This bootstrap token is shown once and expires at " {utc(e.expires_at)} ":"
            </p>
            <pre data-testid="bootstrap-token">{e.bootstrap_token.clone()}</pre>
            <p>"On the host, run:"</p>
            <pre>{format!(
                "NODE_AGENT_BOOTSTRAP_TOKEN='{}' node-agent enroll --server {}\nnode-agent run",
                e.bootstrap_token, server
            )}</pre>
        </div>
    }
}

#[component]
pub fn NodePage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").unwrap_or_default());
    let set_state = ServerAction::<SetNodeState>::new();
    let rediscover = ServerAction::<RediscoverNode>::new();
    let approve = ServerAction::<ApproveSlotMap>::new();
    let reject = ServerAction::<RejectSlotMap>::new();
    let reissue = ServerAction::<ReissueNodeToken>::new();
    let clear = ServerAction::<ClearBlockedSlot>::new();
    let restore = ServerAction::<ReturnSlotToService>::new();
    let network = ServerAction::<SetNodeNetwork>::new();
    let place = ServerAction::<crate::fabric::SetFabricPlace>::new();
    let page = Resource::new(
        move || {
            (
                id(),
                set_state.version().get(),
                rediscover.version().get(),
                approve.version().get(),
                reject.version().get(),
                reissue.version().get(),
                clear.version().get(),
                restore.version().get(),
                network.version().get(),
                place.version().get(),
            )
        },
        |(id, ..)| get_node(id.into()),
    );
    let actions = NodeActions {
        set_state,
        rediscover,
        approve,
        reject,
        reissue,
        clear,
        restore,
        network,
        place,
    };
    view! {
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(p) => view! { <NodeBody page=p actions /> }.into_any(),
                    Err(e) => view! { <Title text="Node" /><ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[derive(Clone, Copy)]
struct NodeActions {
    set_state: ServerAction<SetNodeState>,
    rediscover: ServerAction<RediscoverNode>,
    approve: ServerAction<ApproveSlotMap>,
    reject: ServerAction<RejectSlotMap>,
    reissue: ServerAction<ReissueNodeToken>,
    clear: ServerAction<ClearBlockedSlot>,
    restore: ServerAction<ReturnSlotToService>,
    network: ServerAction<SetNodeNetwork>,
    place: ServerAction<crate::fabric::SetFabricPlace>,
}

#[component]
fn NodeBody(page: NodeView, actions: NodeActions) -> impl IntoView {
    let NodeView {
        can_operate: can,
        detail: page,
    } = page;
    let n = page.node.clone();
    let id = n.id.to_string();
    let hostname = n.hostname.clone();
    let state_button = move |state: &'static str, label: &'static str, id: String| {
        // Draining and cordoning take a node out of what can be sold: asked first.
        let question = match state {
            "draining" => Some(format!(
                "Drain {hostname}? Nothing new is placed on it; what runs keeps running."
            )),
            "cordoned" => Some(format!(
                "Cordon {hostname}? Nothing new is placed on it until it returns to service."
            )),
            _ => None,
        };
        let button = match question {
            Some(q) => view! { <DangerButton question=q>{label}</DangerButton> }.into_any(),
            None => view! { <button type="submit">{label}</button> }.into_any(),
        };
        view! {
            <ActionForm action=actions.set_state attr:class="inline">
                <input type="hidden" name="id" value=id />
                <input type="hidden" name="state" value=state />
                {button}
            </ActionForm>
        }
    };
    view! {
        <Title text=n.hostname.clone() />
        <p class="breadcrumb"><a href="/fleet">"Fleet"</a> " / " {n.hostname.clone()}</p>
        <h1>{n.hostname.clone()}</h1>
        <section class="card" aria-labelledby="facts">
            <h2 id="facts">"Node"</h2>
            <dl class="facts">
                <dt>"Posture"</dt>
                <dd><span class=format!("posture posture-{}", n.posture) data-testid="posture">{n.posture_label().to_string()}</span>
                    " — " {n.posture_reason.clone()}</dd>
                <dt>"Admin state"</dt><dd data-testid="admin-state">{n.admin_state.clone()}</dd>
                <dt>"Region / rack"</dt><dd>{n.region.clone()} " / " {n.rack.clone()}</dd>
                <dt>"Family"</dt><dd>{n.family.clone()}</dd>
                <dt>"May serve"</dt><dd>{n.capacity_shapes.join(", ")}</dd>
                <dt>"Agent"</dt><dd>{n.agent_version.clone().unwrap_or_else(|| "—".into())} ", enrolled " {page.agent_enrolled_at.map_or_else(|| "not yet".into(), utc)}</dd>
                <dt>"Last heartbeat"</dt><dd>{n.heartbeat()} " (" {page.health_line()} ")"</dd>
                <dt>"Schedulable slots"</dt><dd data-testid="schedulable">{n.schedulable_slots} " of " {n.live_slots}</dd>
                <dt>"Canonical name"</dt><dd><code>{page.canonical_name.clone()}</code></dd>
                {page.open_token_expires.map(|t| view! { <dt>"Bootstrap token"</dt><dd>"unused, expires " {utc(t)}</dd> })}
            </dl>
            {let (id, rid, tid) = (id.clone(), id.clone(), id.clone()); can.then(move || view! {
                <div class="actions">
                    {(n.admin_state != "draining").then(|| state_button("draining", "Drain", id.clone()))}
                    {(n.admin_state != "active").then(|| state_button("active", "Return to service", id.clone()))}
                    {(n.admin_state != "cordoned").then(|| state_button("cordoned", "Cordon", id.clone()))}
                    <ActionForm action=actions.rediscover attr:class="inline">
                        <input type="hidden" name="id" value=rid.clone() />
                        <button type="submit">"Discover again"</button>
                    </ActionForm>
                    <ActionForm action=actions.reissue attr:class="inline">
                        <input type="hidden" name="id" value=tid.clone() />
                        <button type="submit">"New bootstrap token"</button>
                    </ActionForm>
                </div>
                {outcome(actions.set_state.value(), |_| Some("Admin state changed.".into()))}
                {outcome(actions.rediscover.value(), |_| Some("Discovery queued; the agent picks it up on its next poll.".into()))}
                {outcome(actions.reissue.value(), |_: Enrolled| None)}
                {move || actions.reissue.value().get().and_then(Result::ok).map(|e| view! { <TokenOnce e /> })}
            }.into_any())}
        </section>
        <section class="card" aria-labelledby="network">
            <h2 id="network">"Tenant network"</h2>
            <dl class="facts">
                <dt>"Public address"</dt>
                <dd data-testid="public-host">{page.public_host.clone().unwrap_or_else(|| format!("{} (the hostname)", n.hostname))}</dd>
                <dt>"Public ports"</dt>
                <dd data-testid="public-ports">{page.public_ports.clone()}</dd>
            </dl>
            <p class="hint">"Each slot owns 8 public ports from the base: its guest's SSH, then up to 7 ports the tenant publishes. Nothing else of a guest is reachable from outside."</p>
            {let nid = id.clone(); let host = page.public_host.clone().unwrap_or_default(); let base = page.public_port_base.to_string(); can.then(move || view! {
                <ActionForm action=actions.network attr:class="form-grid" attr:id="node-network">
                    <input type="hidden" name="id" value=nid />
                    <label>"Public address"
                        <input name="public_host" value=host placeholder="gpu-host-3.example.com" autocomplete="off" aria-describedby="network-host-hint network-host-error" aria-invalid=field_invalid(actions.network.value(), "public_host") />
                        <span class="hint" id="network-host-hint">"A DNS name or IPv4 address tenants connect to; empty: the hostname."</span>
                        {field_error(actions.network.value(), "public_host", "network-host-error")}
                    </label>
                    <label>"First public port"
                        <input name="public_port_base" value=base inputmode="numeric" required aria-describedby="network-base-error" aria-invalid=field_invalid(actions.network.value(), "public_port_base") />
                        {field_error(actions.network.value(), "public_port_base", "network-base-error")}
                    </label>
                    <div class="form-actions"><button type="submit">"Save network"</button></div>
                </ActionForm>
                {outcome(actions.network.value(), |_| Some("Saved; new allocations are reached there.".into()))}
            })}
        </section>
        <crate::fabric::NodePlace node=n.id place=page.fabric_place.clone() set=can.then_some(actions.place) />
        {page.proposal.clone().map(|p| view! { <Proposal p id=id.clone() can actions /> }.into_any())}
        <section class="card" aria-labelledby="slots">
            <h2 id="slots">"Approved slots"</h2>
            {if page.slots.is_empty() {
                view! { <p>"No approved slots: nothing on this node can be scheduled yet."</p> }.into_any()
            } else {
                view! { <SlotTable slots=page.slots.clone() clear=can.then_some(actions.clear) restore=can.then_some(actions.restore) /> }.into_any()
            }}
            {outcome(actions.restore.value(), |_| Some("Back in service: placement may use the slot again.".into()))}
        </section>
        <GpuEvents events=page.gpu_events.clone() />
        <section class="card" aria-labelledby="tasks">
            <h2 id="tasks">"Agent tasks"</h2>
            <ul class="plain">
                {page.tasks.iter().map(|t| view! {
                    <li>{utc(t.created_at)} " — " <code>{t.kind.clone()}</code> " " <strong>{t.state.clone()}</strong>
                        {Some(t.finished_phases()).filter(|p| !p.is_empty()).map(|p| format!(" · {p}"))}
                        {t.error.clone().map(|e| view! { <span class="form-error">" " {e}</span> })}
                    </li>
                }).collect_view()}
            </ul>
        </section>
        <section class="card" aria-labelledby="node-audit">
            <h2 id="node-audit">"Audit trail"</h2>
            <div class="table-scroll">
            <table class="data">
                <thead><tr><th>"When"</th><th>"Who"</th><th>"What"</th><th>"Change"</th></tr></thead>
                <tbody>
                    {page.audit.iter().map(|a| view! {
                        <tr><td>{utc(a.at)}</td><td>{a.actor.clone()}</td><td><code>{a.action.clone()}</code></td><td><small>{a.change.clone()}</small></td></tr>
                    }).collect_view()}
                </tbody>
            </table>
            </div>
        </section>
    }
}

#[component]
fn SlotTable(
    slots: Vec<SlotRow>,
    clear: Option<ServerAction<ClearBlockedSlot>>,
    restore: Option<ServerAction<ReturnSlotToService>>,
) -> impl IntoView {
    view! {
        <div class="table-scroll">
        <table class="data" data-testid="slots">
            <thead><tr>
                <th>"#"</th><th>"GPU"</th><th>"NUMA"</th><th>"NVMe"</th><th>"IB VF"</th>
                <th>"CPUs"</th><th>"Memory"</th><th>"Wipe"</th><th>"State"</th>
            </tr></thead>
            <tbody>
                {slots.into_iter().map(|s| {
                    let state = s.state.clone();
                    let blocked = s.state == "cleanup blocked";
                    let out = s.out_of_service.is_some();
                    let id = s.id.to_string();
                    let rid = id.clone();
                    let nvme = s.nvme();
                    view! {
                    <tr data-slot-state=state>
                        <td>{s.slot_index}</td>
                        <td>{s.gpu_pci_address} <br/><small>{s.gpu_model}</small></td>
                        <td>{s.numa_node}</td>
                        <td>{nvme}</td>
                        <td>{s.ib_vf_pci_address}</td>
                        <td>{s.cpu_set}</td>
                        <td>{s.memory_mib / 1024} " GiB"</td>
                        <td>{s.wipe_policy}</td>
                        <td>{s.state}{s.drift.map(|d| view! { <br/><small class="form-error">{d}</small> })}
                            {s.cleanup_detail.map(|d| view! { <br/><small>{d}</small> })}
                            {s.out_of_service.map(|d| view! { <br/><small class="form-error" data-testid="out-of-service">{d}</small> })}
                            {restore.filter(|_| out).map(|restore| view! {
                                <ActionForm action=restore attr:class="inline">
                                    <input type="hidden" name="slot" value=rid.clone() />
                                    <input name="reason" required placeholder="what you checked" aria-label="What you checked on this GPU" />
                                    <button type="submit">"Return to service"</button>
                                </ActionForm>
                            })}
                            {clear.filter(|_| blocked).map(|clear| view! {
                                <ActionForm action=clear attr:class="inline">
                                    <input type="hidden" name="slot" value=id.clone() />
                                    <input name="reason" required placeholder="what you checked" aria-label="What you checked" />
                                    <button type="submit">"Mark clean"</button>
                                </ActionForm>
                            })}
                        </td>
                    </tr>
                }}).collect_view()}
            </tbody>
        </table>
        </div>
    }
}

/// The node's latest GPU health events.
#[component]
fn GpuEvents(events: Vec<GpuHealthEvent>) -> impl IntoView {
    view! {
        <section class="card" aria-labelledby="gpu-health">
            <h2 id="gpu-health">"GPU health"</h2>
            {if events.is_empty() {
                view! { <p>"No GPU health events reported."</p> }.into_any()
            } else {
                view! {
                    <div class="table-scroll">
                    <table class="data" data-testid="gpu-events">
                        <thead><tr><th>"Seen"</th><th>"GPU"</th><th>"Slot"</th><th>"Event"</th><th>"Action"</th></tr></thead>
                        <tbody>
                            {events.into_iter().map(|e| view! {
                                <tr data-kind=e.kind.clone()>
                                    <td>{utc(e.observed_at)}</td>
                                    <td>{e.gpu_pci_address}</td>
                                    <td>{e.slot_index.map_or_else(|| "—".to_string(), |i| i.to_string())}</td>
                                    <td>{e.detail}</td>
                                    <td>{if e.took_out_of_service { "took the slot out of service" } else { "recorded" }}</td>
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

fn describe(s: &SlotSpec) -> String {
    format!(
        "{} · NUMA {} · NVMe {} · VF {} · CPUs {} · {} GiB · wipe {}",
        s.gpu.pci_address,
        s.numa_node.map_or("?".to_string(), |n| n.to_string()),
        s.nvme.as_ref().map_or("none", |n| n.pci_address.as_str()),
        s.ib_vf_pci_address.as_deref().unwrap_or("none"),
        if s.cpu_set.is_empty() {
            "none"
        } else {
            s.cpu_set.as_str()
        },
        s.memory_mib / 1024,
        s.capacity_metadata
            .get("destructive_wipe_policy")
            .map(String::as_str)
            .filter(|w| !w.is_empty())
            .unwrap_or("not set"),
    )
}

#[component]
fn Proposal(p: ProposalView, id: String, can: bool, actions: NodeActions) -> impl IntoView {
    let pending = p.is_pending();
    let problems: usize = p.slots.iter().map(|s| s.problems.len()).sum();
    view! {
        <section class="card" aria-labelledby="proposal" data-testid="proposal">
            <h2 id="proposal">"Slot map proposal, generation " {p.generation}</h2>
            <p>
                "Discovered " {utc(p.discovered_at)} ". Status: " <strong data-testid="proposal-status">{p.status.replace('_', " ")}</strong>
                {p.decided_by.clone().map(|d| format!(" by {d}"))}
                {p.decision_reason.clone().map(|r| format!(" — {r}"))}
            </p>
            <p class="hint">{p.fabric()}</p>
            {(!p.warnings.is_empty()).then(|| view! {
                <ul class="warnings">{p.warnings.iter().map(|w| view! { <li>{w.clone()}</li> }).collect_view()}</ul>
            })}
            // Once decided, what the proposal lacked is history: the approval supplied it
            // (a wipe policy) or refused it.
            {(pending && problems > 0).then(|| view! {
                <p class="form-error">{crate::components::plural(problems as i64, "problem", "problems")} " as proposed; each is listed on its slot below."</p>
            })}
            <div class="table-scroll">
            <table class="data side-by-side">
                <thead><tr><th>"#"</th><th>"Proposed"</th><th>"Approved now"</th><th>"Change"</th><th>"Problems"</th></tr></thead>
                <tbody>
                    {p.slots.iter().map(|s| view! {
                        <tr data-proposed-slot=s.proposed.slot_index>
                            <td>{s.proposed.slot_index}</td>
                            <td><small>{describe(&s.proposed)}</small></td>
                            <td><small>{s.current.as_ref().map_or("—".to_string(), |c| format!("{} · NUMA {} · NVMe {} · VF {} · wipe {} · {}", c.gpu_pci_address, c.numa_node, c.nvme(), c.ib_vf_pci_address, c.wipe_policy, c.state))}</small></td>
                            <td>{s.change.clone()}</td>
                            <td>
                                {pending.then(|| view! { <ul class="problems">{s.problems.iter().map(|x| view! { <li>{x.clone()}</li> }).collect_view()}</ul> })}
                            </td>
                        </tr>
                    }).collect_view()}
                    {p.gone.iter().map(|g| view! {
                        <tr class="gone">
                            <td>{g.slot_index}</td><td>"— (not found by this discovery)"</td>
                            <td><small>{g.gpu_pci_address.clone()} " · " {g.state.clone()}</small></td>
                            <td>"gone: approving all retires this slot"</td><td></td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
            </div>
            {let (aid, xid) = (id.clone(), id.clone()); (pending && can).then(move || view! {
                <div class="decision">
                    <ActionForm action=actions.approve>
                        <input type="hidden" name="id" value=aid.clone() />
                        <input type="hidden" name="generation" value=p.generation />
                        <label>"Destructive wipe policy "
                            <select name="wipe_policy">
                                <option value="">"— as proposed —"</option>
                                {p.wipe_methods.iter().map(|m| view! { <option value=m.clone()>{m.clone()}</option> }).collect_view()}
                            </select>
                        </label>
                        <label>"Only these slots "
                            <input name="only" placeholder="all" inputmode="numeric" />
                        </label>
                        <button type="submit">"Approve"</button>
                        <p class="hint">"Leave the slots empty to approve all of them; or list some, e.g. 0,1,4-6."</p>
                    </ActionForm>
                    {outcome(actions.approve.value(), |n: usize| Some(format!("Approved {n} slot(s).")))}
                    <ActionForm action=actions.reject>
                        <input type="hidden" name="id" value=xid.clone() />
                        <input type="hidden" name="generation" value=p.generation />
                        <label>"Reason " <input name="reason" required placeholder="firmware not qualified" /></label>
                        <button type="submit" class="danger">"Reject"</button>
                    </ActionForm>
                    {outcome(actions.reject.value(), |_| Some("Proposal rejected.".into()))}
                </div>
            }.into_any())}
        </section>
    }
}
