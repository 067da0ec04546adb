//! `/volumes`: the block storage of every project the person sees. Operators and admins of a
//! project create volumes in it, attach them to its running instances in the same region,
//! detach, grow and delete them; everyone else reads. The list refreshes itself while a volume
//! is on its way somewhere (being made, attached, detached or erased).

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use portal_types::volumes::{MAX_VOLUME_GIB, SnapshotState, VolumeState};
use portal_types::{AllocationId, IdArg, ProjectId, SnapshotId, VolumeId};
use serde::{Deserialize, Serialize};

use crate::components::{
    DangerButton, ErrorNotice, action_outcome as outcome, field_error, field_invalid,
};
use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumesView {
    /// Projects the person may create volumes in: `(id, name)`.
    pub manageable: Vec<(ProjectId, String)>,
    /// Where volumes can be made: the regions the catalog sells in whose storage has a
    /// price, with it.
    pub regions: Vec<portal_types::volumes::StoragePrice>,
    pub volumes: Vec<VolumeRow>,
    pub snapshots: Vec<SnapshotRow>,
    /// Running instances of the manageable projects, to attach to.
    pub instances: Vec<Attachable>,
    /// A fresh idempotency key for the create form.
    pub idempotency_key: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeRow {
    pub id: VolumeId,
    pub name: String,
    pub project: String,
    pub project_id: ProjectId,
    pub region: String,
    pub size_gib: u32,
    pub state: VolumeState,
    pub error: Option<String>,
    pub attached_name: Option<String>,
    pub attached_to: Option<AllocationId>,
    pub created: String,
    /// The name of the snapshot it was made from.
    pub from_snapshot: Option<String>,
    /// What it costs for a month at its size (`10.00 USD`).
    pub monthly_cost: Option<String>,
    /// The person operates its project.
    pub manageable: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRow {
    pub id: SnapshotId,
    pub name: String,
    pub volume: String,
    pub project: String,
    pub project_id: ProjectId,
    pub region: String,
    pub size_gib: u32,
    pub state: SnapshotState,
    pub error: Option<String>,
    pub created: String,
    /// What keeping it costs a month (`1.00 USD`).
    pub monthly_cost: String,
    pub manageable: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachable {
    pub id: AllocationId,
    pub name: String,
    pub region: String,
    pub project_id: ProjectId,
}

#[server]
pub async fn list_volumes() -> Result<VolumesView, AppError> {
    use control_plane::allocations::AllocationFilter;
    use control_plane::tenancy::{ProjectOperators, ProjectRequirement, TenantMembers};
    use control_plane::volumes::VolumesApi;
    use control_plane::volumes::snapshots::SnapshotsApi;
    let (cp, principal) = crate::server::signed_in().await?;
    let (member, _) = crate::server::home_tenant::<TenantMembers>(&cp, &principal).await?;
    let visible = cp.visible_projects(&member).await?;
    let mut volumes = Vec::new();
    let mut snapshots = Vec::new();
    let mut manageable = Vec::new();
    let mut operated = Vec::new();
    for (p, who) in &visible {
        let manages = ProjectOperators::ROLES.contains(&p.my_role);
        if manages {
            manageable.push((p.id, p.display_name.clone()));
            operated.push(who.clone());
        }
        volumes.extend(cp.volumes(who).await?.into_iter().map(|v| VolumeRow {
            id: v.id,
            name: v.name,
            project: p.display_name.clone(),
            project_id: p.id,
            region: v.region,
            size_gib: v.size_gib,
            state: v.state,
            error: v.error,
            attached_name: v.attached_name,
            attached_to: v.attached_to,
            created: portal_types::utc(v.created_at),
            from_snapshot: v.source_snapshot.map(|id| {
                v.source_snapshot_name
                    .unwrap_or_else(|| format!("snapshot {id}"))
            }),
            monthly_cost: v.monthly_cost.map(|m| m.grouped()),
            manageable: manages,
        }));
        snapshots.extend(cp.snapshots(who).await?.into_iter().map(|s| SnapshotRow {
            id: s.id,
            name: s.name,
            volume: s.volume_name,
            project: p.display_name.clone(),
            project_id: p.id,
            region: s.region,
            size_gib: s.size_gib,
            state: s.state,
            error: s.error,
            created: portal_types::utc(s.created_at),
            monthly_cost: s.monthly_cost.grouped(),
            manageable: manages,
        }));
    }
    volumes.sort_by(|a, b| b.created.cmp(&a.created));
    snapshots.sort_by(|a, b| b.created.cmp(&a.created));
    let instances = if operated.is_empty() {
        Vec::new()
    } else {
        let filter = AllocationFilter {
            state: Some("running".into()),
            tag: None,
            after: None,
            limit: 200,
        };
        cp.allocation_page(&operated, &filter)
            .await?
            .items
            .into_iter()
            .map(|a| Attachable {
                id: a.id,
                name: a.name,
                region: a.region,
                project_id: a.project_id,
            })
            .collect()
    };
    let sold: Vec<String> = cp
        .catalog()
        .await?
        .into_iter()
        .flat_map(|e| e.sku.regions)
        .collect();
    let regions = cp
        .storage_prices()
        .await?
        .into_iter()
        .filter(|p| sold.contains(&p.region))
        .collect();
    Ok(VolumesView {
        manageable,
        regions,
        volumes,
        snapshots,
        instances,
        idempotency_key: uuid::Uuid::new_v4().to_string(),
    })
}

/// The proof that the caller operates the project of volume `id`.
#[cfg(feature = "ssr")]
async fn operating(
    id: IdArg<VolumeId>,
) -> Result<
    (
        control_plane::ControlPlane,
        control_plane::tenancy::Project<control_plane::tenancy::ProjectOperators>,
        VolumeId,
    ),
    AppError,
> {
    use control_plane::volumes::VolumesApi;
    let (cp, principal) = crate::server::signed_in().await?;
    let id = crate::server::id(id)?;
    let who = cp.volume_access(&principal, id).await?;
    Ok((cp, who, id))
}

#[cfg(feature = "ssr")]
fn gib(field: &str, text: &str) -> Result<u32, AppError> {
    text.trim().parse::<u32>().map_err(|_| AppError::Invalid {
        field: field.into(),
        reason: format!(
            "{:?} is not a whole number of GiB (1 to {MAX_VOLUME_GIB}).",
            text.chars().take(20).collect::<String>()
        ),
    })
}

#[server]
pub async fn create_volume(
    project: IdArg<ProjectId>,
    name: String,
    region: String,
    size_gib: String,
    idempotency_key: String,
    /// Made from this snapshot (its region; its size unless a bigger one is typed).
    #[server(default)]
    snapshot: Option<IdArg<SnapshotId>>,
) -> Result<VolumeId, AppError> {
    use control_plane::tenancy::ProjectOperators;
    use control_plane::volumes::{VolumeRequest, VolumesApi};
    let (cp, principal) = crate::server::signed_in().await?;
    let project = crate::server::id(project)?;
    let who = cp
        .project_access::<ProjectOperators>(&principal, project)
        .await?;
    let snapshot = match snapshot.filter(|s| !s.is_empty()) {
        Some(s) => Some(crate::server::id(s)?),
        None => None,
    };
    let size_gib = match (snapshot, size_gib.trim()) {
        (Some(_), "") => 0,
        _ => gib("size_gib", &size_gib)?,
    };
    let req = VolumeRequest {
        name,
        region,
        size_gib,
        idempotency_key,
        snapshot,
    };
    Ok(cp
        .create_volume(&who, &req, Some(&crate::error::request_id()))
        .await?
        .id)
}

#[server]
pub async fn attach_volume(
    id: IdArg<VolumeId>,
    instance: IdArg<AllocationId>,
) -> Result<(), AppError> {
    use control_plane::volumes::VolumesApi;
    let (cp, who, id) = operating(id).await?;
    let instance = crate::server::id(instance)?;
    Ok(cp
        .attach_volume(&who, id, instance, Some(&crate::error::request_id()))
        .await?)
}

#[server]
pub async fn detach_volume(id: IdArg<VolumeId>) -> Result<(), AppError> {
    use control_plane::volumes::VolumesApi;
    let (cp, who, id) = operating(id).await?;
    Ok(cp
        .detach_volume(&who, id, Some(&crate::error::request_id()))
        .await?)
}

#[server]
pub async fn grow_volume(id: IdArg<VolumeId>, size_gib: String) -> Result<(), AppError> {
    use control_plane::volumes::VolumesApi;
    let (cp, who, id) = operating(id).await?;
    let size = gib("size_gib", &size_gib)?;
    Ok(cp
        .grow_volume(&who, id, size, Some(&crate::error::request_id()))
        .await?)
}

#[server]
pub async fn delete_volume(id: IdArg<VolumeId>) -> Result<(), AppError> {
    use control_plane::volumes::VolumesApi;
    let (cp, who, id) = operating(id).await?;
    Ok(cp
        .delete_volume(&who, id, Some(&crate::error::request_id()))
        .await?)
}

#[server]
pub async fn snapshot_volume(
    id: IdArg<VolumeId>,
    name: String,
    idempotency_key: String,
) -> Result<SnapshotId, AppError> {
    use control_plane::volumes::snapshots::{SnapshotRequest, SnapshotsApi};
    let (cp, who, id) = operating(id).await?;
    let req = SnapshotRequest {
        name,
        idempotency_key,
    };
    Ok(cp
        .create_snapshot(&who, id, &req, Some(&crate::error::request_id()))
        .await?
        .id)
}

#[server]
pub async fn delete_snapshot(id: IdArg<SnapshotId>) -> Result<(), AppError> {
    use control_plane::volumes::snapshots::SnapshotsApi;
    let (cp, principal) = crate::server::signed_in().await?;
    let id = crate::server::id(id)?;
    let who = cp.snapshot_access(&principal, id).await?;
    Ok(cp
        .delete_snapshot(&who, id, Some(&crate::error::request_id()))
        .await?)
}

/// States that change by themselves, soon.
fn moving(s: VolumeState) -> bool {
    matches!(
        s,
        VolumeState::Creating
            | VolumeState::Attaching
            | VolumeState::Detaching
            | VolumeState::Deleting
    )
}

#[derive(Clone, Copy)]
struct Actions {
    create: ServerAction<CreateVolume>,
    attach: ServerAction<AttachVolume>,
    detach: ServerAction<DetachVolume>,
    grow: ServerAction<GrowVolume>,
    delete: ServerAction<DeleteVolume>,
    snapshot: ServerAction<SnapshotVolume>,
    delete_snapshot: ServerAction<DeleteSnapshot>,
}

#[component]
pub fn VolumesPage() -> impl IntoView {
    let actions = Actions {
        create: ServerAction::new(),
        attach: ServerAction::new(),
        detach: ServerAction::new(),
        grow: ServerAction::new(),
        delete: ServerAction::new(),
        snapshot: ServerAction::new(),
        delete_snapshot: ServerAction::new(),
    };
    let tick = RwSignal::new(0u32);
    let page = Resource::new(
        move || {
            (
                actions.create.version().get(),
                actions.attach.version().get(),
                actions.detach.version().get(),
                actions.grow.version().get(),
                actions.delete.version().get(),
                (
                    actions.snapshot.version().get(),
                    actions.delete_snapshot.version().get(),
                ),
                tick.get(),
            )
        },
        |_| list_volumes(),
    );
    // In the browser: every 2 seconds while a volume is on its way somewhere.
    Effect::new(move |_| {
        let handle = set_interval_with_handle(
            move || {
                let busy = page.get_untracked().is_some_and(|r| {
                    r.is_ok_and(|v| {
                        v.volumes.iter().any(|x| moving(x.state))
                            || v.snapshots.iter().any(|s| {
                                matches!(s.state, SnapshotState::Creating | SnapshotState::Deleting)
                            })
                    })
                });
                if busy {
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
        <Title text="Volumes" />
        <h1>"Volumes"</h1>
        <p class="lede">"Block storage that outlives an instance: keep datasets and checkpoints here, attach a volume to a running instance in its region, and attach it to the next one when that one is gone. A volume is attached to one instance at a time."</p>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(v) => view! { <VolumesBody v actions /> }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn VolumesBody(v: VolumesView, actions: Actions) -> impl IntoView {
    let instances = StoredValue::new(v.instances.clone());
    let snapshots = v.snapshots.clone();
    let snapshot_key = v.idempotency_key.clone();
    let page_key = v.idempotency_key.clone();
    let create_form = (!v.manageable.is_empty())
        .then(|| view! { <CreateForm v=v.clone() create=actions.create /> });
    let table = if v.volumes.is_empty() {
        view! { <p id="no-volumes">"No volumes yet."</p> }.into_any()
    } else {
        view! {
            <div class="table-scroll">
                <table class="data cards" id="volumes">
                    <thead><tr>
                        <th scope="col">"Name"</th><th scope="col">"Project"</th><th scope="col">"Region"</th>
                        <th scope="col">"Size"</th><th scope="col">"State"</th><th scope="col">"Attached to"</th>
                        <th scope="col"><span class="visually-hidden">"Actions"</span></th>
                    </tr></thead>
                    <tbody>
                        {v.volumes.into_iter().map(|row| {
                            let here: Vec<Attachable> = instances.with_value(|all| all.iter().filter(|i| i.region == row.region && i.project_id == row.project_id).cloned().collect());
                            let key = page_key.clone();
                            view! { <VolumeLine row here actions key /> }
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
        }.into_any()
    };
    view! {
        <section class="card" aria-labelledby="volumes-h">
            <h2 id="volumes-h">"Your volumes"</h2>
            {table}
            {outcome(actions.attach.value(), |_: ()| Some("Attaching: the instance sees it as a new disk in a few seconds.".to_string()))}
            {outcome(actions.detach.value(), |_: ()| Some("Detaching.".to_string()))}
            {outcome(actions.grow.value(), |_: ()| Some("Growing: grow the file system inside the instance to use the space.".to_string()))}
            {outcome(actions.delete.value(), |_: ()| Some("Deleting: it is erased, then gone.".to_string()))}
            {outcome(actions.snapshot.value(), |_: SnapshotId| Some("Taking the snapshot: it is available in a few seconds.".to_string()))}
        </section>
        <Snapshots rows=snapshots actions key=snapshot_key />
        {create_form}
    }
}

#[component]
fn VolumeLine(
    row: VolumeRow,
    here: Vec<Attachable>,
    actions: Actions,
    /// The page's fresh idempotency key, for the forms of this line.
    key: String,
) -> impl IntoView {
    let id = row.id.to_string();
    let state_text = match (&row.error, row.state) {
        (Some(why), _) => format!("error: {why}"),
        (None, s) => s.to_string(),
    };
    let attached = match (row.attached_name.clone(), row.attached_to) {
        (Some(name), Some(a)) => {
            view! { <a href=format!("/allocations/{a}")>{name}</a> }.into_any()
        }
        _ => "—".into_any(),
    };
    let manage = row.manageable.then(|| {
        let id = id.clone();
        let name = row.name.clone();
        match row.state {
            VolumeState::Available => {
                let attach = (!here.is_empty()).then(|| {
                    let id = id.clone();
                    let label = format!("Instance to attach {name} to");
                    view! {
                        <ActionForm action=actions.attach attr:class="inline">
                            <input type="hidden" name="id" value=id />
                            <select name="instance" aria-label=label>
                                {here.iter().map(|i| view! { <option value=i.id.to_string()>{i.name.clone()}</option> }).collect_view()}
                            </select>
                            <button type="submit">"Attach"</button>
                        </ActionForm>
                    }
                });
                let question = format!("Delete {name}? What it holds is erased and can't be recovered.");
                let label = format!("Delete {name}");
                let grow_label = format!("New size of {name} in GiB");
                let grow_id = id.clone();
                view! {
                    {attach}
                    <SnapshotForm id=id.clone() name=name.clone() key=format!("{key}-snap-{id}") snapshot=actions.snapshot />
                    <ActionForm action=actions.grow attr:class="inline">
                        <input type="hidden" name="id" value=grow_id />
                        <input name="size_gib" inputmode="numeric" size="6" aria-label=grow_label placeholder=format!("> {}", row.size_gib) />
                        <button type="submit">"Grow"</button>
                    </ActionForm>
                    <ActionForm action=actions.delete attr:class="inline">
                        <input type="hidden" name="id" value=id />
                        <DangerButton label=label question=question>"Delete"</DangerButton>
                    </ActionForm>
                }.into_any()
            }
            VolumeState::Attaching | VolumeState::InUse => {
                let question = format!("Detach {name}? Unmount it inside the instance first, or writes in flight are lost.");
                let label = format!("Detach {name}");
                view! {
                    <SnapshotForm id=id.clone() name=name.clone() key=format!("{key}-snap-{id}") snapshot=actions.snapshot />
                    <ActionForm action=actions.detach attr:class="inline">
                        <input type="hidden" name="id" value=id />
                        <DangerButton label=label question=question>"Detach"</DangerButton>
                    </ActionForm>
                }.into_any()
            }
            VolumeState::Error => {
                let question = format!("Delete {name}? What it holds is erased and can't be recovered.");
                let label = format!("Delete {name}");
                view! {
                    <ActionForm action=actions.delete attr:class="inline">
                        <input type="hidden" name="id" value=id />
                        <DangerButton label=label question=question>"Delete"</DangerButton>
                    </ActionForm>
                }.into_any()
            }
            _ => ().into_any(),
        }
    });
    view! {
        <tr data-volume=row.name.clone()>
            <td data-label="Name">{row.name.clone()}<br/><small>"created " {row.created.clone()}</small>
                {row.from_snapshot.clone().map(|s| view! { <br/><small data-testid="from-snapshot">"from snapshot " {s}</small> })}
            </td>
            <td data-label="Project">{row.project.clone()}</td>
            <td data-label="Region">{row.region.clone()}</td>
            <td data-label="Size" data-testid="size">{format!("{} GiB", row.size_gib)}
                {row.monthly_cost.clone().map(|m| view! { <br/><small data-testid="monthly-cost">{m} " a month"</small> })}
            </td>
            <td data-label="State" data-testid="state">{state_text}</td>
            <td data-label="Attached to" data-testid="attached">{attached}</td>
            <td class="row-actions">{manage}</td>
        </tr>
    }
}

/// Names and takes a snapshot of one volume.
#[component]
fn SnapshotForm(
    id: String,
    name: String,
    key: String,
    snapshot: ServerAction<SnapshotVolume>,
) -> impl IntoView {
    let label = format!("Snapshot name for {name}");
    let button = format!("Snapshot {name}");
    view! {
        <ActionForm action=snapshot attr:class="inline">
            <input type="hidden" name="id" value=id />
            <input type="hidden" name="idempotency_key" value=key />
            <input name="name" size="12" required maxlength="63" autocomplete="off" aria-label=label placeholder="snapshot name" />
            <button type="submit" aria-label=button>"Snapshot"</button>
        </ActionForm>
    }
}

/// The project's snapshots: what each holds and costs, a new volume from it, deleting it.
#[component]
fn Snapshots(rows: Vec<SnapshotRow>, actions: Actions, key: String) -> impl IntoView {
    if rows.is_empty() {
        return ().into_any();
    }
    view! {
        <section class="card" aria-labelledby="snapshots-h">
            <h2 id="snapshots-h">"Snapshots"</h2>
            <p class="hint">"A point-in-time copy of a volume, kept apart from it. Make a new volume from one to get its data back; a volume with snapshots can't be deleted until they are."</p>
            <div class="table-scroll">
                <table class="data cards" id="snapshots">
                    <thead><tr>
                        <th scope="col">"Name"</th><th scope="col">"Of volume"</th><th scope="col">"Region"</th>
                        <th scope="col">"Size"</th><th scope="col">"State"</th>
                        <th scope="col"><span class="visually-hidden">"Actions"</span></th>
                    </tr></thead>
                    <tbody>
                        {rows.into_iter().map(|row| {
                            let state_text = match (&row.error, row.state) {
                                (Some(why), _) => format!("error: {why}"),
                                (None, s) => s.to_string(),
                            };
                            let id = row.id.to_string();
                            let name = row.name.clone();
                            let restore = if row.manageable && row.state == SnapshotState::Available {
                                let label = format!("Name of the new volume from {name}");
                                let (snapshot, region, project) = (id.clone(), row.region.clone(), row.project_id.to_string());
                                let key = format!("{key}-{id}");
                                Some(view! {
                                    <ActionForm action=actions.create attr:class="inline">
                                        <input type="hidden" name="project" value=project />
                                        <input type="hidden" name="snapshot" value=snapshot />
                                        <input type="hidden" name="region" value=region />
                                        <input type="hidden" name="size_gib" value="" />
                                        <input type="hidden" name="idempotency_key" value=key />
                                        <input name="name" size="12" required maxlength="63" autocomplete="off" aria-label=label placeholder="new volume" />
                                        <button type="submit">"New volume"</button>
                                    </ActionForm>
                                })
                            } else {
                                None
                            };
                            let delete = if row.manageable && matches!(row.state, SnapshotState::Available | SnapshotState::Error) {
                                let question = format!("Delete snapshot {name}? What it holds is erased and can't be recovered.");
                                let label = format!("Delete snapshot {name}");
                                Some(view! {
                                    <ActionForm action=actions.delete_snapshot attr:class="inline">
                                        <input type="hidden" name="id" value=id />
                                        <DangerButton label=label question=question>"Delete"</DangerButton>
                                    </ActionForm>
                                })
                            } else {
                                None
                            };
                            view! {
                                <tr data-snapshot=row.name.clone()>
                                    <td data-label="Name">{row.name.clone()}<br/><small>"taken " {row.created.clone()}</small></td>
                                    <td data-label="Of volume">{row.volume.clone()}</td>
                                    <td data-label="Region">{row.region.clone()}</td>
                                    <td data-label="Size" data-testid="size">{format!("{} GiB", row.size_gib)}<br/><small>{row.monthly_cost.clone()} " a month"</small></td>
                                    <td data-label="State" data-testid="state">{state_text}</td>
                                    <td class="row-actions">{restore}{delete}</td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
            {outcome(actions.delete_snapshot.value(), |_: ()| Some("Deleting the snapshot: it is erased, then gone.".to_string()))}
        </section>
    }.into_any()
}

#[component]
fn CreateForm(v: VolumesView, create: ServerAction<CreateVolume>) -> impl IntoView {
    view! {
        <section class="card" aria-labelledby="new-volume-h">
            <h2 id="new-volume-h">"Create a volume"</h2>
            <ActionForm action=create attr:id="new-volume">
                <input type="hidden" name="idempotency_key" value=v.idempotency_key.clone() />
                <div class="form-grid">
                    <label>"Project"
                        <select name="project">
                            {v.manageable.iter().map(|(id, name)| view! { <option value=id.to_string()>{name.clone()}</option> }).collect_view()}
                        </select>
                    </label>
                    <label>"Name"
                        <input name="name" required maxlength="63" placeholder="datasets" autocomplete="off" aria-describedby="volume-name-error" aria-invalid=field_invalid(create.value(), "name") />
                        {field_error(create.value(), "name", "volume-name-error")}
                    </label>
                    <label>"Region"
                        <select name="region">
                            {v.regions.iter().map(|p| view! {
                                <option value=p.region.clone()>{format!("{} · {}/GiB-month", p.region, p.per_gib_month())}</option>
                            }).collect_view()}
                        </select>
                        {v.regions.is_empty().then(|| view! { <span class="hint">"No region sells volumes yet: storage there has no price. A platform operator sets one."</span> })}
                    </label>
                    <label>"Size (GiB)"
                        <input name="size_gib" required inputmode="numeric" value="100" aria-describedby="volume-size-hint volume-size-error" aria-invalid=field_invalid(create.value(), "size_gib") />
                        <span class="hint" id="volume-size-hint">{format!("1 to {MAX_VOLUME_GIB} GiB; it can grow later, never shrink.")}</span>
                        {field_error(create.value(), "size_gib", "volume-size-error")}
                    </label>
                </div>
                <div class="form-actions"><button type="submit">"Create volume"</button></div>
            </ActionForm>
            {outcome(create.value(), |_: VolumeId| Some("Created: it is available in a few seconds.".to_string()))}
        </section>
    }
}
