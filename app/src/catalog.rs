//! The catalog, public: every active SKU with its price, a cost estimate for a chosen
//! duration, what could launch right now per region (or why nothing could), and what storage
//! costs. For platform staff, `/catalog/manage`: SKUs (create, edit, activate, retire), each
//! region's storage price, and a placement dry run.

// A SKU form has twelve fields; its server function takes them as arguments, and the
// `#[server]` macro copies that signature into code an item-level allow does not reach.
#![allow(clippy::too_many_arguments)]
#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;
use portal_types::Shape;
use portal_types::catalog::{CatalogEntry, Sku};
use portal_types::volumes::StoragePrice;
use portal_types::{IdArg, SkuId};
use serde::{Deserialize, Serialize};

use crate::components::{
    DangerButton, ErrorNotice, action_outcome as outcome, field_error, field_invalid,
};
use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogRow {
    pub entry: CatalogEntry,
    /// The price for the hours asked.
    pub estimate: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogView {
    pub hours: u32,
    pub rows: Vec<CatalogRow>,
    pub storage: Vec<StoragePrice>,
}

/// A region the platform sells in, and its storage price if it has one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageRegion {
    pub region: String,
    pub price: Option<StoragePrice>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkuAdminView {
    pub can_operate: bool,
    pub skus: Vec<Sku>,
    /// Every region a SKU names or storage is priced in, by name.
    pub storage: Vec<StorageRegion>,
}

/// Public: no sign-in needed.
#[server]
pub async fn get_catalog(hours: Option<u32>) -> Result<CatalogView, AppError> {
    let cp = crate::server::control_plane()?;
    let hours = hours.unwrap_or(24).clamp(1, 8760);
    let mut rows = Vec::new();
    for e in cp.catalog().await? {
        let estimate = control_plane::catalog::estimate(&e.sku.price, hours)?.to_string();
        rows.push(CatalogRow { estimate, entry: e });
    }
    Ok(CatalogView {
        hours,
        rows,
        storage: cp.storage_prices().await?,
    })
}

#[server]
pub async fn get_sku_admin() -> Result<SkuAdminView, AppError> {
    use control_plane::auth::{PlatformOperators, PlatformStaff};
    let (cp, principal) = crate::server::signed_in().await?;
    let staff = principal.platform::<PlatformStaff>()?;
    let skus = cp.skus(&staff).await?;
    let prices = cp.storage_prices().await?;
    let mut regions: Vec<String> = skus
        .iter()
        .flat_map(|s| s.regions.iter().cloned())
        .chain(prices.iter().map(|p| p.region.clone()))
        .collect();
    regions.sort();
    regions.dedup();
    let storage = regions
        .into_iter()
        .map(|region| StorageRegion {
            price: prices.iter().find(|p| p.region == region).cloned(),
            region,
        })
        .collect();
    Ok(SkuAdminView {
        can_operate: principal.platform::<PlatformOperators>().is_ok(),
        skus,
        storage,
    })
}

/// Sets a region's storage price per GiB-month (`0.10 USD`).
#[server]
pub async fn set_storage_price(region: String, price: String) -> Result<String, AppError> {
    use control_plane::auth::PlatformOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    let p = cp
        .set_storage_price(&ops, &region, &price, Some(&crate::error::request_id()))
        .await?;
    Ok(format!(
        "Storage in {} now costs {} per GiB-month.",
        p.region,
        p.per_gib_month()
    ))
}

#[server]
pub async fn save_sku(
    id: Option<IdArg<SkuId>>,
    sku: portal_types::SkuInput,
) -> Result<String, AppError> {
    use control_plane::auth::PlatformOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    // A new SKU's form sends an empty id.
    let id = match id.filter(|id| !id.is_empty()) {
        Some(id) => Some(crate::server::id(id)?),
        None => None,
    };
    let input = sku;
    cp.save_sku(&ops, id, &input, Some(&crate::error::request_id()))
        .await?;
    Ok(input.name.trim().to_ascii_lowercase())
}

#[server]
pub async fn set_sku_state(id: IdArg<SkuId>, state: String) -> Result<(), AppError> {
    use control_plane::auth::PlatformOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    let id = crate::server::id(id)?;
    cp.set_sku_state(&ops, id, &state, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

/// "Where would this go, and why", without reserving.
#[server]
pub async fn dry_run_placement(sku: String, region: String) -> Result<String, AppError> {
    use control_plane::auth::PlatformOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    let region = Some(region.as_str()).filter(|r| !r.trim().is_empty());
    let p = cp.placement_dry_run(&ops, &sku, region).await?;
    Ok(format!("{} ({}): {}", p.hostname, p.region, p.why))
}

#[component]
pub fn CatalogPage() -> impl IntoView {
    let query = use_query_map();
    let hours = move || query.with(|q| q.get("hours").and_then(|h| h.parse::<u32>().ok()));
    let catalog = Resource::new(hours, get_catalog);
    view! {
        <Title text="Catalog" />
        <h1>"Catalog"</h1>
        <p class="lede">"GPU slices and whole bare-metal nodes. Prices are per hour; availability is live."</p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match catalog.await {
                    Ok(c) => view! { <CatalogBody c /> }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn CatalogBody(c: CatalogView) -> impl IntoView {
    let hours = c.hours;
    let storage = c.storage;
    view! {
        <form method="get" action="/catalog" class="filters">
            <label>"Estimate for "
                <input type="number" name="hours" min="1" max="8760" value=hours.to_string() /> " hours"
            </label>
            <button type="submit">"Estimate"</button>
        </form>
        <div class="table-scroll">
        <table class="data" id="catalog">
            <thead><tr>
                <th>"SKU"</th><th>"Shape"</th><th>"GPUs"</th><th>"vCPU / memory / NVMe"</th>
                <th>"Per hour"</th><th>{format!("{hours} h")}</th><th>"Launchable now"</th><th></th>
            </tr></thead>
            <tbody>
                {c.rows.into_iter().map(|r| {
                    let CatalogRow { entry: CatalogEntry { sku, availability, unavailable_because }, estimate } = r;
                    let name = sku.name.clone();
                    let total: i64 = availability.iter().map(|a| a.launchable).sum();
                    view! {
                        <tr data-sku=name.clone()>
                            <td><strong>{sku.display_name}</strong><br/><code>{name.clone()}</code></td>
                            <td>{if sku.shape == Shape::Baremetal { "bare metal" } else { "GPU slice" }}</td>
                            <td>{sku.gpu_count} " × " {sku.gpu_model}</td>
                            <td>{sku.vcpus} " vCPU / " {sku.memory_gib} " GiB / " {sku.nvme_gib} " GiB"</td>
                            <td>{sku.price.to_string()}</td>
                            <td data-testid="estimate">{estimate}</td>
                            <td data-testid="availability">
                                {availability.into_iter().map(|a| { let label = a.region.clone(); view! {
                                    <span class="pill" data-region=a.region>{label} ": " {a.launchable}</span> " "
                                } }).collect_view()}
                                {unavailable_because.map(|why| view! { <p class="hint" data-testid="why-unavailable">{why}</p> })}
                            </td>
                            <td>{(total > 0).then(|| view! { <a class="button" href=format!("/launch?sku={name}")>"Launch"</a> })}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
        </div>
        {(!storage.is_empty()).then(|| view! {
            <section class="card" aria-labelledby="storage">
                <h2 id="storage">"Block storage"</h2>
                <p class="hint">"Volumes outlive instances and attach to any instance in their region. Billed per second by provisioned size; a GiB-month is 730 hours."</p>
                <ul class="plain" id="storage-prices">
                    {storage.into_iter().map(|p| view! {
                        <li data-region=p.region.clone()><code>{p.region.clone()}</code> ": " {p.per_gib_month()} " per GiB-month"</li>
                    }).collect_view()}
                </ul>
            </section>
        })}
    }
}

#[component]
pub fn SkuAdminPage() -> impl IntoView {
    let save = ServerAction::<SaveSku>::new();
    let state = ServerAction::<SetSkuState>::new();
    let dry = ServerAction::<DryRunPlacement>::new();
    let storage = ServerAction::<SetStoragePrice>::new();
    let page = Resource::new(
        move || {
            (
                save.version().get(),
                state.version().get(),
                storage.version().get(),
            )
        },
        |_| get_sku_admin(),
    );
    view! {
        <Title text="SKUs" />
        <h1>"SKUs"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(p) => view! { <SkuAdminBody p save state dry storage /> }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn SkuAdminBody(
    p: SkuAdminView,
    save: ServerAction<SaveSku>,
    state: ServerAction<SetSkuState>,
    dry: ServerAction<DryRunPlacement>,
    storage: ServerAction<SetStoragePrice>,
) -> impl IntoView {
    let can = p.can_operate;
    let regions = p.storage.clone();
    let sku_names: Vec<String> = p
        .skus
        .iter()
        .filter(|s| s.state == "active")
        .map(|s| s.name.clone())
        .collect();
    view! {
        <section class="card" aria-labelledby="skus">
            <h2 id="skus">"SKUs"</h2>
            {outcome(state.value(), |_: ()| Some("Saved.".to_string()))}
            <div class="table-scroll">
            <table class="data" id="sku-table">
                <thead><tr><th>"SKU"</th><th>"Shape"</th><th>"GPUs"</th><th>"Regions"</th><th>"Families"</th><th>"Per hour"</th><th>"State"</th><th></th></tr></thead>
                <tbody>
                    {p.skus.into_iter().map(|s| {
                        let id = s.id.to_string();
                        let next = match s.state.as_str() { "draft" => Some(("active", "Activate")), "active" => Some(("retired", "Retire")), _ => None };
                        let name = s.name.clone();
                        let retire = format!("Retire {}? It can no longer be launched; what runs keeps running.", s.name);
                        view! {
                            <tr data-sku=name>
                                <td>{s.display_name}<br/><code>{s.name}</code></td>
                                <td>{s.shape.as_str()}</td>
                                <td>{s.gpu_count} " × " {s.gpu_model}</td>
                                <td>{s.regions.join(", ")}</td>
                                <td>{s.families.join(", ")}</td>
                                <td>{s.price.to_string()}</td>
                                <td>{s.state.clone()}</td>
                                <td>{(can && next.is_some()).then(|| { let (to, label) = next.unwrap_or(("", "")); view! {
                                    <ActionForm action=state attr:class="inline">
                                        <input type="hidden" name="id" value=id.clone() />
                                        <input type="hidden" name="state" value=to />
                                        {if to == "retired" {
                                            view! { <DangerButton question=retire.clone()>{label}</DangerButton> }.into_any()
                                        } else {
                                            view! { <button type="submit">{label}</button> }.into_any()
                                        }}
                                    </ActionForm>
                                } })}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
            </div>
        </section>
        {can.then(|| view! {
            <section class="card" aria-labelledby="new-sku">
                <h2 id="new-sku">"Create or edit a SKU"</h2>
                <p class="hint">"A new SKU starts as a draft; activate it to sell it. Saving an existing name edits it (new launches pay the new price; running allocations keep theirs)."</p>
                <ActionForm action=save>
                    <div class="form-grid">
                        <label>"Name" <input name="sku[name]" required placeholder="h100.2x" aria-describedby="sku-name-error" aria-invalid=field_invalid(save.value(), "name") />{field_error(save.value(), "name", "sku-name-error")}</label>
                        <label>"Display name" <input name="sku[display_name]" required placeholder="2× H100 80GB" aria-describedby="sku-display-name-error" aria-invalid=field_invalid(save.value(), "display_name") />{field_error(save.value(), "display_name", "sku-display-name-error")}</label>
                        <label>"Shape" <select name="sku[shape]"><option value="gpu_slice">"GPU slice"</option><option value="baremetal">"Bare metal"</option></select></label>
                        <label>"GPU model" <input name="sku[gpu_model]" required placeholder="NVIDIA H100 80GB HBM3" aria-describedby="sku-gpu-model-error" aria-invalid=field_invalid(save.value(), "gpu_model") />{field_error(save.value(), "gpu_model", "sku-gpu-model-error")}</label>
                        <label>"GPUs" <input name="sku[gpu_count]" required placeholder="1, 2, 4 or 8" aria-describedby="sku-gpu-count-error" aria-invalid=field_invalid(save.value(), "gpu_count") />{field_error(save.value(), "gpu_count", "sku-gpu-count-error")}</label>
                        <label>"vCPUs" <input name="sku[vcpus]" required /></label>
                        <label>"Memory (GiB)" <input name="sku[memory_gib]" required /></label>
                        <label>"NVMe (GiB)" <input name="sku[nvme_gib]" required /></label>
                        <label>"Regions" <input name="sku[regions]" required placeholder="eu-west-1, us-east-1" /></label>
                        <label>"Node families" <input name="sku[families]" required placeholder="hgx-h100-8x" /></label>
                        <label>"Price per hour" <input name="sku[price_per_hour]" required placeholder="5.98 USD" aria-describedby="sku-price-per-hour-error" aria-invalid=field_invalid(save.value(), "price_per_hour") />{field_error(save.value(), "price_per_hour", "sku-price-per-hour-error")}</label>
                    </div>
                    <button type="submit">"Save SKU"</button>
                </ActionForm>
                {outcome(save.value(), |n: String| Some(format!("Saved {n}.")))}
            </section>
        })}
        <section class="card" aria-labelledby="storage-prices">
            <h2 id="storage-prices">"Storage prices"</h2>
            <p class="hint">"Volumes are billed per second by their provisioned size, at their region's price per GiB-month (730 hours) when they were made; changing a price changes what new volumes pay. A region without a price sells no volumes."</p>
            {outcome(storage.value(), Some)}
            <div class="table-scroll">
            <table class="data cards" id="storage-prices-table">
                <thead><tr><th>"Region"</th><th>"Per GiB-month"</th>{can.then(|| view! { <th>"New price"</th> })}</tr></thead>
                <tbody>
                    {regions.into_iter().map(|r| {
                        let region = r.region.clone();
                        let label = format!("New storage price for {}", r.region);
                        view! {
                            <tr data-region=r.region.clone()>
                                <td><code>{r.region.clone()}</code></td>
                                <td data-label="Per GiB-month" data-testid="storage-price">{match r.price {
                                    Some(p) => p.per_gib_month(),
                                    None => "not sold: no price".to_string(),
                                }}</td>
                                {can.then(|| view! {
                                    <td data-label="New price">
                                        <ActionForm action=storage attr:class="inline">
                                            <input type="hidden" name="region" value=region.clone() />
                                            <input name="price" required placeholder="0.10 USD" aria-label=label aria-invalid=field_invalid(storage.value(), "price") />
                                            <button type="submit">"Set price"</button>
                                        </ActionForm>
                                    </td>
                                })}
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
            </div>
        </section>
        {can.then(|| view! {
            <section class="card" aria-labelledby="dry-run">
                <h2 id="dry-run">"Placement dry run"</h2>
                <p class="hint">"Where would a launch go right now, and why. Nothing is reserved."</p>
                <ActionForm action=dry attr:class="inline">
                    <label>"SKU " <select name="sku">{sku_names.clone().into_iter().map(|n| { let label = n.clone(); view! { <option value=n>{label}</option> } }).collect_view()}</select></label>
                    <label>" Region " <input name="region" placeholder="any" /></label>
                    <button type="submit">"Where would it go?"</button>
                </ActionForm>
                {outcome(dry.value(), Some)}
            </section>
        })}
        <section class="card" aria-labelledby="images">
            <h2 id="images">"Images"</h2>
            <p>"OS images are the platform's own listings in the marketplace: add, review, publish and deprecate them under "
                <a href="/admin/marketplace">"Marketplace review"</a> "."</p>
        </section>
    }
}
