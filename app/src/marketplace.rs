//! The marketplace. `/marketplace` (public): search and filter by category, GPU model and
//! price. `/marketplace/{slug}` (public): published versions, the SKUs the current version
//! fits with live availability and SKU + fee, and Launch (sign-in needed) into the launch
//! form with the listing preselected. `/marketplace/publish`: a publisher's listings,
//! drafts and submissions (organization admins of a publisher; platform operators for the
//! platform's own listings). `/admin/marketplace`: the review queue, publishers and what is
//! owed to each.

// Version forms have a dozen fields; their server functions take them as arguments.
#![allow(clippy::too_many_arguments)]
#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};
use portal_types::Micros;
use portal_types::marketplace::{
    Category, FittingSku, Listing, ListingCard, Payable, Publisher, VersionRow, VersionState,
    share_percent,
};
use portal_types::{IdArg, ListingVersionId, PublisherId};
use serde::{Deserialize, Serialize};

use crate::components::{ErrorNotice, action_outcome as outcome, field_error, field_invalid};
use crate::error::AppError;

/// The public browse page: the cards a filter matched, and the filter as typed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrowseView {
    pub q: String,
    pub category: String,
    pub gpu_model: String,
    pub max_price: String,
    pub gpu_models: Vec<String>,
    pub cards: Vec<ListingCard>,
}

/// A listing with its versions (newest first; for tenants, published ones only), the SKUs its
/// current version fits, and that version's description rendered on the server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListingView {
    pub listing: Listing,
    pub fitting: Vec<FittingSku>,
    /// The newest version's Markdown as HTML: raw HTML is escaped and only http(s), mailto and
    /// relative links survive.
    pub description_html: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublisherArea {
    /// "GPU Cloud" for operators, the organization's publisher otherwise.
    pub publisher: Option<String>,
    /// `pending`, `approved` or `suspended`.
    pub status: Option<String>,
    pub revenue_share: Option<String>,
    /// Every version of each, newest first.
    pub listings: Vec<Listing>,
}

/// A version in the review queue, with the moves an operator may make on it from the queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueRow {
    pub version: VersionRow,
    /// `(action, label)`: approving and rejecting happen on the version's review page.
    pub actions: Vec<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminView {
    pub queue: Vec<QueueRow>,
    pub publishers: Vec<Publisher>,
    pub payables: Vec<Payable>,
}

/// One version under review: every field, and what changed since the version in force.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionReviewView {
    pub id: String,
    pub slug: String,
    pub listing: String,
    pub version: String,
    pub publisher: String,
    pub state: String,
    pub reason: Option<String>,
    /// (label, value) in reading order.
    pub fields: Vec<(String, String)>,
    /// The version in force (the newest published one), if any.
    pub in_force: Option<String>,
    /// (field, in force, this version) for each field that differs.
    pub changes: Vec<(String, String, String)>,
    /// (value, label) of what the operator may do now.
    pub actions: Vec<(String, String)>,
    /// The digest of what this page shows; an approval sends it back.
    pub digest: String,
}

#[cfg(feature = "ssr")]
fn curation_label(c: control_plane::marketplace::Curation) -> (&'static str, &'static str) {
    use control_plane::marketplace::Curation;
    match c {
        Curation::Approve => ("approve", "Approve"),
        Curation::Reject => ("reject", "Reject"),
        Curation::Publish => ("publish", "Publish"),
        Curation::Deprecate => ("deprecate", "Deprecate"),
        Curation::Withdraw => ("withdraw", "Withdraw"),
    }
}

#[cfg(feature = "ssr")]
mod render {
    use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd, html};

    /// Markdown → HTML, safely: raw HTML is shown as text, images become their alt text
    /// (nothing is fetched from elsewhere), and links keep only http(s), mailto, relative
    /// and fragment targets.
    pub fn markdown(md: &str) -> String {
        let safe_link = |url: &str| {
            let lower = url.trim().to_ascii_lowercase();
            lower.starts_with("https://")
                || lower.starts_with("http://")
                || lower.starts_with("mailto:")
                || (lower.starts_with('/') && !lower.starts_with("//"))
                || lower.starts_with('#')
        };
        let events = Parser::new_ext(md, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH)
            .filter_map(|e| match e {
                Event::Html(raw) | Event::InlineHtml(raw) => Some(Event::Text(raw)),
                Event::Start(Tag::Image { .. }) | Event::End(TagEnd::Image) => None,
                Event::Start(Tag::Link {
                    link_type,
                    dest_url,
                    title,
                    id,
                }) => Some(Event::Start(Tag::Link {
                    link_type,
                    dest_url: if safe_link(&dest_url) {
                        dest_url
                    } else {
                        CowStr::Borrowed("#")
                    },
                    title,
                    id,
                })),
                other => Some(other),
            });
        let mut out = String::new();
        html::push_html(&mut out, events);
        out
    }

    #[cfg(test)]
    mod tests {
        use super::markdown;

        #[test]
        fn markdown_is_rendered_without_raw_html_scripts_or_remote_images() {
            let html = markdown(
                "## Hi\n\n**bold** <script>alert(1)</script>\n\n<img src=x onerror=alert(1)>\n\n[ok](https://pytorch.org) [bad](javascript:alert(1)) ![logo](https://tracker.example/p.png)",
            );
            assert!(html.contains("<h2>Hi</h2>"), "{html}");
            assert!(html.contains("<strong>bold</strong>"), "{html}");
            assert!(!html.contains("<script"), "{html}");
            assert!(html.contains("&lt;script&gt;"), "{html}");
            assert!(!html.contains("<img"), "{html}");
            assert!(
                html.contains(r#"<a href="https://pytorch.org">ok</a>"#),
                "{html}"
            );
            assert!(html.contains(r##"<a href="#">bad</a>"##), "{html}");
            assert!(!html.contains("javascript:"), "{html}");
            assert!(html.contains("logo"), "{html}");
        }
    }
}

#[cfg(feature = "ssr")]
fn listing_view(listing: Listing, fitting: Vec<FittingSku>) -> ListingView {
    let description_html = listing
        .versions
        .first()
        .map(|v| render::markdown(&v.description_md))
        .unwrap_or_default();
    ListingView {
        listing,
        fitting,
        description_html,
    }
}

/// Public: no sign-in needed.
#[server]
pub async fn browse_listings(
    q: Option<String>,
    category: Option<String>,
    gpu_model: Option<String>,
    max_price: Option<String>,
) -> Result<BrowseView, AppError> {
    let cp = crate::server::control_plane()?;
    let max_price = max_price.unwrap_or_default();
    let max_price_minor = match max_price.trim() {
        "" => None,
        s => {
            let with_currency = if s.contains(' ') {
                s.to_string()
            } else {
                format!("{s} USD")
            };
            Some(control_plane::policy::Money::parse_as("max_price", &with_currency)?.amount_minor)
        }
    };
    let filter = control_plane::marketplace::BrowseFilter {
        q: q.unwrap_or_default(),
        category: category.unwrap_or_default(),
        gpu_model: gpu_model.unwrap_or_default(),
        max_price_minor,
    };
    let b = cp.browse_marketplace(&filter).await?;
    Ok(BrowseView {
        cards: b.cards,
        gpu_models: b.gpu_models,
        q: filter.q,
        category: filter.category,
        gpu_model: filter.gpu_model,
        max_price,
    })
}

/// Public: no sign-in needed.
#[server]
pub async fn get_listing(slug: String) -> Result<ListingView, AppError> {
    let cp = crate::server::control_plane()?;
    let page = cp.listing_page(&slug).await?;
    Ok(listing_view(page.listing, page.fitting))
}

/// Who the caller publishes as: platform operators for the platform, an organization's
/// admins for its publisher. `Ok(None)`: an organization admin whose organization hasn't
/// applied yet.
#[cfg(feature = "ssr")]
async fn publisher_actor(
    cp: &control_plane::ControlPlane,
    principal: &control_plane::auth::Principal,
) -> Result<Option<control_plane::marketplace::PublisherActor>, AppError> {
    use control_plane::auth::PlatformOperators;
    use control_plane::marketplace::PublisherActor;
    use control_plane::tenancy::TenantAdmins;
    if let Ok(ops) = principal.platform::<PlatformOperators>() {
        return Ok(Some(PublisherActor::platform(&ops)));
    }
    let (admins, _) = crate::server::home_tenant::<TenantAdmins>(cp, principal).await?;
    match cp.tenant_publisher(&admins).await {
        Ok(a) => Ok(Some(a)),
        Err(control_plane::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[server]
pub async fn get_publisher_area() -> Result<PublisherArea, AppError> {
    let (cp, principal) = crate::server::signed_in().await?;
    let Some(actor) = publisher_actor(&cp, &principal).await? else {
        return Ok(PublisherArea {
            publisher: None,
            status: None,
            revenue_share: None,
            listings: Vec::new(),
        });
    };
    let (name, status, share) = if actor.publisher()
        == control_plane::marketplace::PLATFORM_PUBLISHER
    {
        (
            "GPU Cloud (the platform)".to_string(),
            "approved".to_string(),
            None,
        )
    } else {
        let (member, _) =
            crate::server::home_tenant::<control_plane::tenancy::TenantMembers>(&cp, &principal)
                .await?;
        let p = cp
            .publisher_of_tenant(member.id())
            .await?
            .ok_or(AppError::NotFound)?;
        (
            p.display_name,
            p.status,
            Some(format!("{}%", p.revenue_share_bps as f64 / 100.0)),
        )
    };
    Ok(PublisherArea {
        publisher: Some(name),
        status: Some(status),
        revenue_share: share,
        listings: cp.publisher_listings(&actor).await?,
    })
}

#[server]
pub async fn apply_to_publish(display_name: String) -> Result<(), AppError> {
    use control_plane::tenancy::TenantAdmins;
    let (cp, principal) = crate::server::signed_in().await?;
    let (admins, _) = crate::server::home_tenant::<TenantAdmins>(&cp, &principal).await?;
    cp.apply_to_publish(&admins, &display_name, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

#[cfg(feature = "ssr")]
async fn acting_publisher() -> Result<
    (
        control_plane::ControlPlane,
        control_plane::marketplace::PublisherActor,
    ),
    AppError,
> {
    let (cp, principal) = crate::server::signed_in().await?;
    let actor = publisher_actor(&cp, &principal).await?.ok_or_else(|| {
        AppError::Forbidden("Apply to publish first; operators approve publishers.".into())
    })?;
    Ok((cp, actor))
}

#[server]
pub async fn create_listing(
    slug: String,
    name: String,
    category: String,
    #[server(flatten)] draft: portal_types::VersionDraft,
) -> Result<String, AppError> {
    let (cp, actor) = acting_publisher().await?;
    cp.create_listing(
        &actor,
        &slug,
        &name,
        &category,
        &draft,
        Some(&crate::error::request_id()),
    )
    .await?;
    Ok(slug.trim().to_ascii_lowercase())
}

#[server]
pub async fn create_version(
    slug: String,
    #[server(flatten)] draft: portal_types::VersionDraft,
) -> Result<String, AppError> {
    let (cp, actor) = acting_publisher().await?;
    cp.create_version(&actor, &slug, &draft, Some(&crate::error::request_id()))
        .await?;
    Ok(format!("{} {}", slug.trim(), draft.version.trim()))
}

#[server]
pub async fn submit_version(id: IdArg<ListingVersionId>) -> Result<(), AppError> {
    let (cp, actor) = acting_publisher().await?;
    let id = crate::server::id(id)?;
    cp.submit_version(&actor, id, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

#[server]
pub async fn get_marketplace_admin() -> Result<AdminView, AppError> {
    use control_plane::auth::PlatformOperators;
    use control_plane::marketplace::Curation;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    let queue = cp
        .review_queue(&ops)
        .await?
        .into_iter()
        .map(|version| QueueRow {
            // Approving or rejecting happens on the version's review page, where its content
            // and its changes are shown.
            actions: Curation::available(version.state)
                .iter()
                .filter(|c| !matches!(c, Curation::Approve | Curation::Reject))
                .map(|c| {
                    let (a, l) = curation_label(*c);
                    (a.to_string(), l.to_string())
                })
                .collect(),
            version,
        })
        .collect();
    Ok(AdminView {
        queue,
        publishers: cp.publishers(&ops).await?,
        payables: cp.publisher_payables(&ops).await?,
    })
}

#[server]
pub async fn get_version_review(
    id: IdArg<ListingVersionId>,
) -> Result<VersionReviewView, AppError> {
    use control_plane::auth::PlatformOperators;
    use control_plane::marketplace::{Curation, changes, content_digest, review_fields};
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    let id = crate::server::id(id)?;
    let r = cp.version_review(&ops, id).await?;
    let v = &r.version;
    Ok(VersionReviewView {
        id: v.id.to_string(),
        digest: content_digest(v),
        slug: r.slug.clone(),
        listing: r.listing.clone(),
        version: v.version.clone(),
        publisher: r.publisher.clone(),
        state: v.state.to_string().replace('_', " "),
        reason: v.review_reason.clone(),
        fields: review_fields(v)
            .into_iter()
            .map(|(k, val)| (k.to_string(), val))
            .collect(),
        in_force: r.in_force.as_ref().map(|f| f.version.clone()),
        changes: r
            .in_force
            .as_ref()
            .map(|f| changes(f, v))
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.field.to_string(), c.before, c.after))
            .collect(),
        actions: Curation::available(v.state)
            .iter()
            .map(|c| {
                let (a, l) = curation_label(*c);
                (a.to_string(), l.to_string())
            })
            .collect(),
    })
}

#[server]
pub async fn curate_version(
    id: IdArg<ListingVersionId>,
    action: String,
    // Rejecting needs one; the queue offers no rejection and sends none.
    #[server(default)] reason: String,
    // The review's digest: only the review page approves.
    #[server(default)] reviewed: Option<String>,
) -> Result<String, AppError> {
    use control_plane::auth::PlatformOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    let version = crate::server::id(id)?;
    let curation = control_plane::marketplace::Curation::parse(&action)?;
    cp.curate_version(
        &ops,
        version,
        curation,
        &reason,
        reviewed.as_deref(),
        Some(&crate::error::request_id()),
    )
    .await?;
    Ok(action)
}

#[server]
pub async fn decide_publisher(
    id: IdArg<PublisherId>,
    decision: String,
    share: String,
) -> Result<(), AppError> {
    use control_plane::auth::PlatformOperators;
    let (cp, principal) = crate::server::signed_in().await?;
    let ops = principal.platform::<PlatformOperators>()?;
    let id = crate::server::id(id)?;
    cp.decide_publisher(
        &ops,
        id,
        decision == "approve",
        &share,
        Some(&crate::error::request_id()),
    )
    .await?;
    Ok(())
}

#[component]
fn Logo(slug: String, name: String, has_logo: bool) -> impl IntoView {
    if has_logo {
        view! { <img class="listing-logo" src=format!("/marketplace/logos/{slug}") alt="" width="48" height="48" /> }.into_any()
    } else {
        let letters: String = name
            .chars()
            .filter(|c| c.is_alphanumeric())
            .take(2)
            .collect();
        view! { <span class="listing-logo monogram" aria-hidden="true">{letters}</span> }.into_any()
    }
}

#[component]
pub fn MarketplacePage() -> impl IntoView {
    let query = use_query_map();
    let params = move || {
        query.with(|q| {
            (
                q.get("q"),
                q.get("category"),
                q.get("gpu_model"),
                q.get("max_price"),
            )
        })
    };
    let page = Resource::new(params, |(q, c, g, p)| browse_listings(q, c, g, p));
    view! {
        <Title text="Marketplace" />
        <h1>"Marketplace"</h1>
        <p class="lede">"What runs on the capacity: OS images with GPU drivers, ML stacks, and apps that bring their own scheduler. Each launches onto a SKU it fits, at the SKU's price plus any listing fee."</p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(b) => view! { <BrowseBody b /> }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn BrowseBody(b: BrowseView) -> impl IntoView {
    let count = b.cards.len();
    view! {
        <form class="card filters" method="get" action="/marketplace" role="search" aria-label="Find listings">
            <div class="form-grid">
                <label>"Search" <input type="search" name="q" value=b.q.clone() placeholder="PyTorch, vLLM, Slurm…" /></label>
                <label>"Category"
                    <select name="category">
                        <option value="">"All categories"</option>
                        {Category::ALL.map(|c| view! { <option value=c.as_str() selected=b.category == c.as_str()>{c.label()}</option> }).collect_view()}
                    </select>
                </label>
                <label>"GPU model"
                    <select name="gpu_model">
                        <option value="">"Any GPU"</option>
                        {b.gpu_models.iter().map(|m| { let s = b.gpu_model == *m; let l = m.clone(); view! { <option value=m.clone() selected=s>{l}</option> } }).collect_view()}
                    </select>
                </label>
                <label>"Max price per hour" <input name="max_price" value=b.max_price.clone() placeholder="5.00 USD" inputmode="decimal" /></label>
            </div>
            <button type="submit">"Filter"</button>
            " " <a href="/marketplace">"Clear"</a>
        </form>
        <p role="status">{format!("{count} listing{}", if count == 1 { "" } else { "s" })}</p>
        <ul class="listing-grid" id="listings">
            {b.cards.into_iter().map(|c| view! {
                <li class="card listing-card" data-listing=c.slug.clone()>
                    <Logo slug=c.slug.clone() name=c.name.clone() has_logo=c.has_logo />
                    <h2><a href=format!("/marketplace/{}", c.slug)>{c.name}</a></h2>
                    <p class="hint">{c.category.label()} " · by " {c.publisher} " · v" {c.version}</p>
                    <p>{c.summary}</p>
                    <p class="hint">"Runs on " {if c.gpu_models.is_empty() { "any GPU".to_string() } else { c.gpu_models.join(", ") }}</p>
                    <p>{c.fee.map(|f| format!("Fee {f} per hour · ")).unwrap_or_else(|| "No fee · ".into())}
                       <strong>{c.from_price.map(|p| format!("from {p} per hour")).unwrap_or_else(|| "no SKU fits right now".into())}</strong></p>
                </li>
            }).collect_view()}
        </ul>
    }
}

#[component]
pub fn ListingPage() -> impl IntoView {
    let params = use_params_map();
    let slug = move || params.with(|p| p.get("slug").unwrap_or_default());
    let page = Resource::new(slug, get_listing);
    view! {
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(l) => view! { <ListingBody l /> }.into_any(),
                    Err(e) => view! { <Title text="Marketplace" /><ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn ListingBody(l: ListingView) -> impl IntoView {
    let ListingView {
        listing: l,
        fitting,
        description_html,
    } = l;
    let current = l.versions.first().cloned();
    let slug = l.slug.clone();
    view! {
        <Title text=l.name.clone() />
        <p><a href="/marketplace">"← Marketplace"</a></p>
        <header class="listing-head">
            <Logo slug=l.slug.clone() name=l.name.clone() has_logo=l.has_logo />
            <div>
                <h1>{l.name.clone()}</h1>
                <p class="hint">{l.category.label()} " · by " {l.publisher.clone()}</p>
            </div>
        </header>
        {current.map(|v| { let c = v.compatibility.clone(); view! {
            <section class="card" aria-labelledby="about">
                <h2 id="about">{format!("{} {}", l.name, v.version)}</h2>
                <p>{v.summary.clone()}</p>
                <div class="prose" inner_html=description_html></div>
                <dl class="facts">
                    <dt>"Runs on"</dt><dd>{c.shapes_label()}</dd>
                    <dt>"GPU models"</dt><dd>{c.gpu_models_label()}</dd>
                    <dt>"At least"</dt><dd>{format!("{} GPU{}", c.min_gpus, if c.min_gpus == 1 { "" } else { "s" })}</dd>
                    <dt>"Listing fee"</dt><dd id="listing-fee">{c.fee.map_or_else(|| "none".into(), |f| format!("{f} per hour"))}</dd>
                    <dt>"SSH user"</dt><dd><code>{v.ssh_user.clone()}</code></dd>
                </dl>
                <p><a class="button" id="launch-listing" href=format!("/launch?listing={slug}")>"Launch"</a>
                   <crate::auth::WhenSignedOut><span class="hint">" Signing in is needed to launch."</span></crate::auth::WhenSignedOut></p>
            </section>
        }})}
        <section class="card" aria-labelledby="fits">
            <h2 id="fits">"SKUs it fits"</h2>
            {if fitting.is_empty() {
                view! { <p>"No SKU for sale fits this listing right now."</p> }.into_any()
            } else {
                view! {
                    <div class="table-scroll">
                    <table class="data" id="fitting-skus">
                        <thead><tr><th>"SKU"</th><th>"GPUs"</th><th>"Launchable now"</th><th>"SKU per hour"</th><th>"Total per hour"</th><th></th></tr></thead>
                        <tbody>
                            {fitting.into_iter().map(|f| view! {
                                <tr data-sku=f.sku.name.clone()>
                                    <td>{f.sku.display_name.clone()}<br/><code>{f.sku.name.clone()}</code></td>
                                    <td>{format!("{} × {}", f.sku.gpu_count, f.sku.gpu_model)}</td>
                                    <td>{f.launchable}</td>
                                    <td>{f.sku.price.to_string()}</td>
                                    <td><strong>{f.total_price.to_string()}</strong></td>
                                    <td><a href=format!("/launch?listing={}&sku={}", l.slug, f.sku.name)>"Launch on this"</a></td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                    </div>
                }.into_any()
            }}
        </section>
        <section class="card" aria-labelledby="versions">
            <h2 id="versions">"Versions"</h2>
            <ul id="version-list">
                {l.versions.into_iter().map(|v| { let key = v.version.clone(); view! {
                    <li data-version=key><strong>{v.version.clone()}</strong> " · published " {v.date()}
                        {(!v.release_notes.is_empty()).then(|| view! { <br/><span class="hint">{v.release_notes}</span> })}</li>
                } }).collect_view()}
            </ul>
        </section>
    }
}

#[component]
pub fn PublishPage() -> impl IntoView {
    let apply = ServerAction::<ApplyToPublish>::new();
    let new_listing = ServerAction::<CreateListing>::new();
    let new_version = ServerAction::<CreateVersion>::new();
    let submit = ServerAction::<SubmitVersion>::new();
    let page = Resource::new(
        move || {
            (
                apply.version().get(),
                new_listing.version().get(),
                new_version.version().get(),
                submit.version().get(),
            )
        },
        |_| get_publisher_area(),
    );
    view! {
        <Title text="Publish" />
        <h1>"Publish in the marketplace"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(p) => view! { <PublishBody p apply new_listing new_version submit /> }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// The fields of a version draft; `prefix` keeps the error slots' ids unique on a page that
/// has two such forms.
#[component]
fn VersionFields(
    prefix: &'static str,
    value: Signal<Option<Result<String, AppError>>>,
) -> impl IntoView {
    let id = move |f: &str| format!("{prefix}-{f}-error");
    view! {
        <div class="form-grid">
            <label>"Version" <input name="version" aria-describedby=id("version") aria-invalid=field_invalid(value, "version") required placeholder="2.5.1" />{field_error(value, "version", id("version"))}</label>
            <label>"Summary" <input name="summary" required placeholder="One sentence tenants see on the card" /></label>
            <label>"Image source" <input name="image_source" aria-describedby=id("image_source") aria-invalid=field_invalid(value, "image_source") required placeholder="/var/lib/gpuaas/images/…qcow2" />{field_error(value, "image_source", id("image_source"))}</label>
            <label>"Image SHA-256" <input name="image_sha256" aria-describedby=id("image_sha256") aria-invalid=field_invalid(value, "image_sha256") placeholder="sha256sum of the file (needed for review)" autocomplete="off" spellcheck="false" />{field_error(value, "image_sha256", id("image_sha256"))}</label>
            <label>"SSH user" <input name="ssh_user" required value="ubuntu" /></label>
            <label>"Shapes" <input name="shapes" required value="gpu_slice" placeholder="gpu_slice, baremetal" /></label>
            <label>"GPU models" <input name="gpu_models" placeholder="empty: any" /></label>
            <label>"Minimum GPUs" <input name="min_gpus" aria-describedby=id("min_gpus") aria-invalid=field_invalid(value, "min_gpus") value="1" inputmode="numeric" />{field_error(value, "min_gpus", id("min_gpus"))}</label>
            <label>"Ports to publish" <input name="published_ports" aria-describedby=id("published_ports") aria-invalid=field_invalid(value, "published_ports") placeholder="8000 (empty: none)" inputmode="numeric" autocomplete="off" />{field_error(value, "published_ports", id("published_ports"))}</label>
            <label>"Hourly fee" <input name="fee" aria-describedby=id("fee") aria-invalid=field_invalid(value, "fee") placeholder="0.25 USD (empty: none)" />{field_error(value, "fee", id("fee"))}</label>
        </div>
        <label>"Description (Markdown)" <textarea name="description_md" rows="5"></textarea></label>
        <label>"Release notes" <textarea name="release_notes" rows="2"></textarea></label>
        <label>"Cloud-init fragment (a JSON object; JSON is YAML)" <textarea name="cloud_init" aria-describedby=id("cloud_init") aria-invalid=field_invalid(value, "cloud_init") rows="3" placeholder=r#"{"packages": ["nvtop"]}"#></textarea>{field_error(value, "cloud_init", id("cloud_init"))}</label>
        <label class="check"><input type="checkbox" name="accepts_user_data" value="yes" /> " Tenants may add their own cloud-init user data at launch (it runs inside their VM)"</label>
    }
}

#[component]
fn PublishBody(
    p: PublisherArea,
    apply: ServerAction<ApplyToPublish>,
    new_listing: ServerAction<CreateListing>,
    new_version: ServerAction<CreateVersion>,
    submit: ServerAction<SubmitVersion>,
) -> impl IntoView {
    let Some(publisher) = p.publisher else {
        return view! {
            <section class="card" aria-labelledby="apply">
                <h2 id="apply">"Become a publisher"</h2>
                <p>"Your organization doesn't publish yet. Apply, and platform operators review the application; once approved you submit listings for review."</p>
                <ActionForm action=apply attr:class="inline">
                    <label>"Publisher name " <input name="display_name" required /></label>
                    <button type="submit">"Apply"</button>
                </ActionForm>
                {outcome(apply.value(), |_: ()| Some("Applied.".to_string()))}
            </section>
        }
        .into_any();
    };
    let status = p.status.unwrap_or_default();
    let slugs: Vec<String> = p.listings.iter().map(|l| l.slug.clone()).collect();
    view! {
        <section class="card" aria-labelledby="publisher">
            <h2 id="publisher">{publisher}</h2>
            <p id="publisher-status">"Status: " <strong>{status.clone()}</strong>
                {p.revenue_share.map(|s| format!(" · your share of listing fees: {s}"))}</p>
            {(status == "pending").then(|| view! { <p class="hint">"Operators review your application; you can prepare drafts meanwhile and submit them once approved."</p> })}
            {outcome(submit.value(), |_: ()| Some("Submitted for review.".to_string()))}
            <div class="table-scroll">
            <table class="data" id="my-versions">
                <thead><tr><th>"Listing"</th><th>"Version"</th><th>"State"</th><th>"Fee"</th><th></th></tr></thead>
                <tbody>
                    {p.listings.into_iter().flat_map(|l| {
                        let (slug, name) = (l.slug.clone(), l.name.clone());
                        l.versions.into_iter().map(move |v| {
                            let can_submit = matches!(v.state, VersionState::Draft | VersionState::Rejected);
                            view! {
                                <tr data-version=format!("{slug} {}", v.version)>
                                    <td>{name.clone()}<br/><code>{slug.clone()}</code></td>
                                    <td>{v.version.clone()}</td>
                                    <td>{v.state.to_string()}{v.review_reason.clone().map(|r| view! { <br/><span class="hint">"Reason: " {r}</span> })}</td>
                                    <td>{v.compatibility.fee.as_ref().map_or_else(|| "none".into(), |f| format!("{f} per hour"))}</td>
                                    <td>{can_submit.then(|| view! {
                                        <ActionForm action=submit attr:class="inline">
                                            <input type="hidden" name="id" value=v.id.to_string() />
                                            <button type="submit">"Submit for review"</button>
                                        </ActionForm>
                                    })}</td>
                                </tr>
                            }
                        }).collect::<Vec<_>>()
                    }).collect_view()}
                </tbody>
            </table>
            </div>
        </section>
        <section class="card" aria-labelledby="new-version">
            <h2 id="new-version">"New version of a listing"</h2>
            <ActionForm action=new_version>
                <label>"Listing "
                    <select name="slug">{slugs.into_iter().map(|s| { let l = s.clone(); view! { <option value=s>{l}</option> } }).collect_view()}</select>
                </label>
                <VersionFields prefix="new-version" value=Signal::derive(move || new_version.value().get()) />
                <button type="submit">"Save draft"</button>
            </ActionForm>
            {outcome(new_version.value(), |v: String| Some(format!("Drafted {v}.")))}
        </section>
        <section class="card" aria-labelledby="new-listing">
            <h2 id="new-listing">"New listing"</h2>
            <ActionForm action=new_listing>
                <div class="form-grid">
                    <label>"Name" <input name="name" aria-describedby="new-listing-name-error" aria-invalid=crate::components::field_invalid(new_listing.value(), "name") required placeholder="vLLM inference server" />{crate::components::field_error(new_listing.value(), "name", "new-listing-name-error")}</label>
                    <label>"Slug" <input name="slug" aria-describedby="new-listing-slug-error" aria-invalid=crate::components::field_invalid(new_listing.value(), "slug") required placeholder="vllm" />{crate::components::field_error(new_listing.value(), "slug", "new-listing-slug-error")}</label>
                    <label>"Category"
                        <select name="category">{Category::ALL.map(|c| view! { <option value=c.as_str()>{c.label()}</option> }).collect_view()}</select>
                    </label>
                </div>
                <VersionFields prefix="new-listing" value=Signal::derive(move || new_listing.value().get()) />
                <button type="submit">"Save draft"</button>
            </ActionForm>
            {outcome(new_listing.value(), |s: String| Some(format!("Drafted {s}.")))}
        </section>
    }
    .into_any()
}

#[component]
pub fn MarketplaceAdminPage() -> impl IntoView {
    let curate = ServerAction::<CurateVersion>::new();
    let decide = ServerAction::<DecidePublisher>::new();
    let page = Resource::new(
        move || (curate.version().get(), decide.version().get()),
        |_| get_marketplace_admin(),
    );
    view! {
        <Title text="Marketplace review" />
        <h1>"Marketplace review"</h1>
        <p><a href="/marketplace/publish">"Add or update the platform's own listings"</a></p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(a) => view! { <AdminBody a curate decide /> }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// One version's review: every field, the change against the version in force, and the
/// decision.
#[component]
pub fn VersionReviewPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").unwrap_or_default());
    let curate = ServerAction::<CurateVersion>::new();
    let review = Resource::new(
        move || (id(), curate.version().get()),
        |(id, _)| get_version_review(id.into()),
    );
    view! {
        <Title text="Review a version" />
        <nav class="breadcrumb" aria-label="Breadcrumb"><a href="/admin/marketplace">"Marketplace review"</a></nav>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match review.await {
                    Err(e) => view! { <h1>"Review"</h1><ErrorNotice error=e /> }.into_any(),
                    Ok(r) => view! { <VersionReviewBody r curate /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn VersionReviewBody(r: VersionReviewView, curate: ServerAction<CurateVersion>) -> impl IntoView {
    let multiline = |s: &str| s.contains('\n') || s.len() > 80;
    let value = move |s: String| {
        if multiline(&s) {
            view! { <pre class="value">{s}</pre> }.into_any()
        } else {
            view! { <span class="value">{s}</span> }.into_any()
        }
    };
    view! {
        <h1>{format!("{} {}", r.listing, r.version)}</h1>
        <dl class="facts" id="version-facts">
            <dt>"Listing"</dt><dd><code>{r.slug.clone()}</code></dd>
            <dt>"Publisher"</dt><dd>{r.publisher.clone()}</dd>
            <dt>"State"</dt><dd><span class="pill">{r.state.replace('_', " ")}</span></dd>
            {r.reason.clone().map(|x| view! { <dt>"Reason"</dt><dd>{x}</dd> })}
        </dl>
        // Outside the decision form: a decision that leaves nothing more to decide (reject)
        // removes the form, and its outcome must still show.
        {outcome(curate.value(), |a: String| Some(format!("Done: {a}.")))}
        <section class="card" aria-labelledby="changes-title">
            <h2 id="changes-title">"What changed"</h2>
            {match (r.in_force.clone(), r.changes.is_empty()) {
                (None, _) => view! {
                    <p id="version-diff" class="hint">"The first version of this listing: nothing is in force to compare with, so read every field below."</p>
                }.into_any(),
                (Some(v), true) => view! {
                    <p id="version-diff">{format!("Nothing differs from version {v}, the one in force.")}</p>
                }.into_any(),
                (Some(v), false) => view! {
                    <p class="hint">{format!("Compared with version {v}, the one in force. Unchanged fields are not repeated.")}</p>
                    <div class="table-scroll">
                        <table class="data side-by-side" id="version-diff">
                            <thead><tr><th scope="col">"Field"</th><th scope="col">{format!("In force ({v})")}</th><th scope="col">{format!("This version ({})", r.version)}</th></tr></thead>
                            <tbody>
                                {r.changes.iter().cloned().map(|(field, before, after)| { let key = field.clone(); view! {
                                    <tr data-field=key>
                                        <th scope="row">{field}</th>
                                        <td class="before">{value(before)}</td>
                                        <td class="after">{value(after)}</td>
                                    </tr>
                                } }).collect_view()}
                            </tbody>
                        </table>
                    </div>
                }.into_any(),
            }}
        </section>
        <section class="card" aria-labelledby="fields-title">
            <h2 id="fields-title">"Every field"</h2>
            <p class="hint">"This is what tenants read and what every launch from this version runs; the cloud-init runs as root in their VMs."</p>
            <table class="data" id="version-fields">
                <tbody>
                    {r.fields.iter().cloned().map(|(k, v)| { let key = k.clone(); view! {
                        <tr data-field=key><th scope="row">{k}</th><td>{value(v)}</td></tr>
                    } }).collect_view()}
                </tbody>
            </table>
        </section>
        {(!r.actions.is_empty()).then(|| view! {
            <section class="card" aria-labelledby="decide-title">
                <h2 id="decide-title">"Decide"</h2>
                <ActionForm action=curate attr:class="inline" attr:id="curate">
                    <input type="hidden" name="id" value=r.id.clone() />
                    <input type="hidden" name="reviewed" value=r.digest.clone() />
                    <label>"Action"
                        <select name="action">
                            {r.actions.iter().cloned().map(|(v, l)| view! { <option value=v>{l}</option> }).collect_view()}
                        </select>
                    </label>
                    <label>"Reason" <input name="reason" placeholder="Required to reject" /></label>
                    <button type="submit">"Apply"</button>
                </ActionForm>
            </section>
        })}
    }
}

#[component]
fn AdminBody(
    a: AdminView,
    curate: ServerAction<CurateVersion>,
    decide: ServerAction<DecidePublisher>,
) -> impl IntoView {
    view! {
        <section class="card" aria-labelledby="queue">
            <h2 id="queue">"Versions"</h2>
            <p class="hint">"Waiting on you first. Deprecated versions keep running but can't be launched; withdrawn ones are gone from the marketplace."</p>
            {outcome(curate.value(), |a: String| Some(format!("Done: {a}.")))}
            <div class="table-scroll">
            <table class="data" id="review-queue">
                <thead><tr><th>"Listing"</th><th>"Publisher"</th><th>"Version"</th><th>"State"</th><th>"Fee"</th><th>"Since"</th><th>"Action"</th></tr></thead>
                <tbody>
                    {a.queue.into_iter().map(|QueueRow { version: r, actions }| {
                        let has_actions = !actions.is_empty();
                        let id = r.id.to_string();
                        view! {
                            <tr data-version=format!("{} {}", r.slug, r.version)>
                                <td>{r.name}<br/><code>{r.slug.clone()}</code><br/><a href=format!("/admin/marketplace/versions/{id}") aria-label=format!("Review {} {}", r.slug, r.version)>"Review"</a></td>
                                <td>{r.publisher}</td>
                                <td>{r.version.clone()}</td>
                                <td>{r.state.to_string()}{r.review_reason.map(|x| view! { <br/><span class="hint">{x}</span> })}</td>
                                <td>{r.fee.map_or_else(|| "none".into(), |f| format!("{f} per hour"))}</td>
                                <td>{portal_types::day(r.state_changed_at)}</td>
                                <td>{has_actions.then(|| view! {
                                    <ActionForm action=curate attr:class="inline">
                                        <input type="hidden" name="id" value=id.clone() />
                                        <select name="action" aria-label="Action">
                                            {actions.into_iter().map(|(v, l)| view! { <option value=v>{l}</option> }).collect_view()}
                                        </select>
                                        <button type="submit">"Apply"</button>
                                    </ActionForm>
                                })}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
            </div>
        </section>
        <section class="card" aria-labelledby="publishers">
            <h2 id="publishers">"Publishers"</h2>
            {outcome(decide.value(), |_: ()| Some("Saved.".to_string()))}
            <div class="table-scroll">
            <table class="data" id="publisher-table">
                <thead><tr><th>"Publisher"</th><th>"Status"</th><th>"Their share of fees"</th><th></th></tr></thead>
                <tbody>
                    {a.publishers.into_iter().map(|p| { let key = p.display_name.clone(); let share = share_percent(p.revenue_share_bps); view! {
                        <tr data-publisher=key>
                            <td>{p.display_name}</td><td>{p.status}</td><td>{share.clone()}</td>
                            <td>{p.tenant_id.is_some().then(|| view! {
                                <ActionForm action=decide attr:class="inline">
                                    <input type="hidden" name="id" value=p.id.to_string() />
                                    <select name="decision" aria-label="Decision"><option value="approve">"Approve"</option><option value="suspend">"Suspend"</option></select>
                                    <input name="share" value=share.trim_end_matches('%').to_string() size="5" aria-label="Revenue share (%)" />
                                    <button type="submit">"Save"</button>
                                </ActionForm>
                            })}</td>
                        </tr>
                    } }).collect_view()}
                </tbody>
            </table>
            </div>
        </section>
        <section class="card" aria-labelledby="payables">
            <h2 id="payables">"Owed to publishers"</h2>
            <p class="hint">"Each publisher's share of the listing fees rated so far, credited to its payable account in the ledger."</p>
            {if a.payables.is_empty() {
                view! { <p>"No fees rated yet."</p> }.into_any()
            } else {
                view! {
                    <table class="data" id="payable-table">
                        <thead><tr><th>"Publisher"</th><th>"Share"</th><th>"Fees rated"</th><th>"Owed"</th></tr></thead>
                        <tbody>
                            {a.payables.into_iter().map(|p| { let key = p.publisher.clone(); view! {
                                <tr data-publisher=key><td>{p.publisher}</td><td>{share_percent(p.revenue_share_bps)}</td><td>{format!("{} {}", Micros(p.fees_micro), p.currency)}</td><td>{format!("{} {}", Micros(p.owed_micro), p.currency)}</td></tr>
                            } }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }}
        </section>
    }
}
