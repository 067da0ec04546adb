//! An allocation's page: its phases and timings (refreshed every second while it changes),
//! SSH details and published ports, GPU utilisation, release, and the cleanup certificate.
#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos::reactive::computed::ScopedFuture;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;
use portal_types::allocations::{
    AllocationDetail, Certificate, StoppedDisk, Transition, tags_label,
};
use portal_types::utc;
use portal_types::{AllocationId, IdArg};

use crate::components::{
    CopyButton, ErrorNotice, action_outcome as outcome, duration_words, field_error, field_invalid,
    plural,
};
use crate::error::AppError;

#[cfg(feature = "ssr")]
use super::launch::parse_ports;

#[server]
pub async fn get_allocation(id: IdArg<AllocationId>) -> Result<AllocationDetail, AppError> {
    let (cp, principal) = crate::server::signed_in().await?;
    let id = crate::server::id(id)?;
    let who = crate::server::allocation_viewer(&cp, &principal, id).await?;
    Ok(cp.allocation_in(&who, id).await?)
}

/// The guest's GPU utilisation over the last day as an ECharts line (5-minute means), or
/// `None` before its first report.
#[server]
pub async fn get_gpu_history(id: IdArg<AllocationId>) -> Result<Option<String>, AppError> {
    use charming::Chart;
    use charming::component::{Axis, Grid};
    use charming::element::{AxisType, Tooltip, Trigger};
    use charming::series::Line;
    let (cp, principal) = crate::server::signed_in().await?;
    let id = crate::server::id(id)?;
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
pub async fn release_allocation(id: IdArg<AllocationId>) -> Result<(), AppError> {
    use control_plane::tenancy::ProjectOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let id: control_plane::AllocationId = crate::server::id(id)?;
    // Another tenant's id is "not found", a viewer is "forbidden".
    let who = cp
        .allocation_access::<ProjectOperators>(&principal, id)
        .await?;
    cp.release_allocation(&who, id, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

/// Stops a running instance: its disk is kept as storage, its GPUs are released.
#[server]
pub async fn stop_instance(id: IdArg<AllocationId>) -> Result<(), AppError> {
    use control_plane::tenancy::ProjectOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let id: control_plane::AllocationId = crate::server::id(id)?;
    let who = cp
        .allocation_access::<ProjectOperators>(&principal, id)
        .await?;
    cp.stop_instance(&who, id, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

/// Starts a stopped instance on its saved disk, wherever its region has its SKU free.
#[server]
pub async fn start_instance(id: IdArg<AllocationId>) -> Result<(), AppError> {
    use control_plane::tenancy::ProjectOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let id: control_plane::AllocationId = crate::server::id(id)?;
    let who = cp
        .allocation_access::<ProjectOperators>(&principal, id)
        .await?;
    cp.start_instance(&who, id, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

/// Changes the guest ports a running allocation publishes ("8888, 6006"; empty: none).
#[server]
pub async fn publish_ports(
    id: IdArg<AllocationId>,
    published_ports: String,
) -> Result<(), AppError> {
    use control_plane::tenancy::ProjectOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ports = parse_ports(&published_ports)?;
    let id: control_plane::AllocationId = crate::server::id(id)?;
    let who = cp
        .allocation_access::<ProjectOperators>(&principal, id)
        .await?;
    cp.publish_ports(&who, id, &ports, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

/// How long it has run and what that cost: "Running for 2 h 5 min · 12.34 USD so far", or,
/// once released, "Ran for 2 h 5 min · cost 12.34 USD in all". Nothing before it ran.
fn cost_line(a: &AllocationDetail) -> Option<impl IntoView + use<>> {
    let (ran, cost) = (a.ran_for_s?, a.cost_so_far.as_ref()?.grouped());
    let ran = duration_words(ran as f64);
    let text = if a.ran_until.is_some() {
        format!("Ran for {ran} · cost {cost} in all")
    } else {
        format!("Running for {ran} · {cost} so far")
    };
    Some(view! { <p data-testid="cost">{text}</p> })
}

#[component]
pub fn AllocationPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").unwrap_or_default());
    let release = ServerAction::<ReleaseAllocation>::new();
    let stop = ServerAction::<StopInstance>::new();
    let start = ServerAction::<StartInstance>::new();
    let tick = RwSignal::new(0u32);
    // Until it is released, for a change after that would be a new allocation.
    let live = RwSignal::new(true);
    // Live: refetch every second in the browser (the page is also complete without it).
    Effect::new(move |_| {
        let handle = set_interval_with_handle(
            move || {
                if live.get_untracked() {
                    tick.update(|t| *t = t.wrapping_add(1));
                }
            },
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
                stop.version().get(),
                start.version().get(),
                publish.version().get(),
                tick.get(),
            )
        },
        |(id, ..)| get_allocation(id.into()),
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
    // Nothing changes once it is released: stop asking (a page opened on another
    // allocation starts again).
    Effect::new(move |_| {
        id();
        live.set(true);
    });
    Effect::new(move |_| {
        if let Some(Ok(a)) = page.get()
            && a.state == "released"
        {
            live.set(false);
        }
    });
    let history = Resource::new(id, |id| get_gpu_history(id.into()));
    view! {
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(a) => view! { <AllocationBody a release stop start /> }.into_any(),
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
fn AllocationBody(
    a: AllocationDetail,
    release: ServerAction<ReleaseAllocation>,
    stop: ServerAction<StopInstance>,
    start: ServerAction<StartInstance>,
) -> impl IntoView {
    let id = a.id.to_string();
    let (stop_id, start_id) = (id.clone(), id.clone());
    let stopped_disk = a.stopped_disk.as_ref().map(StoppedDisk::label);
    let stop_keeps = a
        .stop_keeps
        .as_ref()
        .filter(|_| a.can_stop)
        .map(StoppedDisk::label);
    let differs = a.desired_state != a.observed_state && a.state != "released";
    let price = a.price_label();
    let running = a.state == "running";
    let released = a.state == "released";
    let cost = cost_line(&a);
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
            {a.ssh.map(|s| view! { <p>"Connect: " <code data-testid="ssh">{s.clone()}</code> <CopyButton text=s label="Copy the SSH command" /></p> })}
            {(!a.published.is_empty()).then(|| view! {
                <p>"Published ports:"</p>
                <ul class="published" data-testid="published">
                    {a.published.iter().map(|p| view! {
                        <li>{format!("guest port {} at ", p.guest_port)}<code>{p.address.clone()}</code></li>
                    }).collect_view()}
                </ul>
            })}
            {cost}
            {a.gpu_utilisation.filter(|_| running).map(|u| view! { <p>"GPU utilisation: " <span data-testid="gpu-utilisation">{format!("{}% (reported by the guest, {})", u.percent, utc(u.at))}</span></p> })}
            {stopped_disk.map(|label| view! {
                <p data-testid="stopped-disk">{format!(
                    "Its disk is kept on the region's storage: {label}. Its GPUs are free for others."
                )}</p>
            })}
            {stop_keeps.map(|label| view! {
                <ActionForm action=stop attr:id="stop" attr:class="inline-form">
                    <input type="hidden" name="id" value=stop_id />
                    <button type="submit">"Stop"</button>
                    <span class="hint" data-testid="stop-keeps">{format!(
                        " Shuts the guest down and keeps its disk ({label}); the GPUs are released. Start it again later, on any host of its region."
                    )}</span>
                </ActionForm>
            })}
            {outcome(stop.value(), |_: ()| Some("Stop requested.".to_string()))}
            {a.can_start.then(|| view! {
                <ActionForm action=start attr:id="start" attr:class="inline-form">
                    <input type="hidden" name="id" value=start_id />
                    <button type="submit">"Start"</button>
                    <span class="hint">" Places it again in its region and boots its saved disk; the SSH port may change."</span>
                </ActionForm>
            })}
            {outcome(start.value(), |_: ()| Some("Start requested.".to_string()))}
            {a.can_release.then(|| view! {
                <ActionForm action=release attr:id="release">
                    <input type="hidden" name="id" value=id.clone() />
                    <label class="check"><input type="checkbox" required name="confirm" value="yes" /> " I understand the VM and its disk are destroyed"</label>
                    <button type="submit" class="danger">"Release"</button>
                </ActionForm>
            })}
            {(!released).then(|| outcome(release.value(), |_: ()| Some("Release requested.".to_string())))}
        </section>
        <section class="card" aria-labelledby="what">
            <h2 id="what">"What and where"</h2>
            <dl class="facts">
                <dt>"SKU"</dt><dd>{a.sku} " (" {plural(a.gpu_count, "GPU", "GPUs")} ")"</dd>
                <dt>"Price"</dt><dd data-testid="price">{price}</dd>
                {(!a.tags.is_empty()).then(|| view! { <dt>"Tags"</dt><dd data-testid="tags">{tags_label(&a.tags)}</dd> })}
                <dt>"Software"</dt><dd><a data-testid="software" href=format!("/marketplace/{}", a.listing)>{a.image}</a></dd>
                <dt>"Region / node"</dt><dd data-testid="node">{a.region} " / " {a.node}</dd>
                <dt>{if a.slot_indexes.len() == 1 { "GPU slot" } else { "GPU slots" }}</dt><dd data-testid="slots">{a.slot_indexes.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")}</dd>
                <dt>"Why there"</dt><dd data-testid="why-there" title=a.placement_why.clone()>{portal_types::allocations::placement_in_words(&a.placement_why)}</dd>
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
