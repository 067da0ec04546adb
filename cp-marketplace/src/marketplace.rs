//! The marketplace: what runs on the capacity. Publishers (the platform, or organizations
//! operators approved) draft listings and versions and submit them; operators approve, reject
//! with a reason, publish, deprecate and withdraw versions. A version is a reviewed snapshot
//! of everything a launch uses (image, cloud-init, compatibility, fee); the database's guard
//! holds the state machine and fixes a version's content once it left its publisher, and the
//! allocation trigger lets only published versions that fit the SKU launch. Browsing needs no
//! sign-in and shows only published versions.
use crate::skus::SkusApi;

pub mod cloud_init;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sqlx::PgConnection;

use crate::ControlPlane;
use crate::audit::{self, Actor, AuditEntry};
use crate::auth::{Platform, PlatformOperators, PlatformRequirement};
use crate::error::{Error, Result};
use crate::ids::{ListingId, ListingVersionId, ProjectId, PublisherId, TenantId, UserId};
use crate::skus::{Shape, Sku};
use crate::tenancy::{Tenant, TenantAdmins};
use portal_types::Money;

/// The platform's own publisher (created by the migration).
pub const PLATFORM_PUBLISHER: PublisherId =
    PublisherId(uuid::uuid!("00000000-0000-4000-8000-0000000000f1"));

fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::Invalid {
        field,
        reason: reason.into(),
    }
}

/// A refusal from one of the marketplace's triggers, shown as a conflict with its sentence.
use crate::db::trigger_refusal as refused;

pub use portal_types::marketplace::{
    Browse, BrowseFilter, Category, Compatibility, FittingSku, Image, LaunchableListing, Listing,
    ListingCard, ListingPage, Payable, Publisher, Version, VersionRow, VersionState,
};

/// What an operator does to a version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Curation {
    Approve,
    Reject,
    Publish,
    Deprecate,
    Withdraw,
}

impl Curation {
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "approve" => Curation::Approve,
            "reject" => Curation::Reject,
            "publish" => Curation::Publish,
            "deprecate" => Curation::Deprecate,
            "withdraw" => Curation::Withdraw,
            other => {
                return Err(invalid(
                    "action",
                    format!("{other:?}: use approve, reject, publish, deprecate or withdraw"),
                ));
            }
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            Curation::Approve => "approve",
            Curation::Reject => "reject",
            Curation::Publish => "publish",
            Curation::Deprecate => "deprecate",
            Curation::Withdraw => "withdraw",
        }
    }

    fn target(self) -> VersionState {
        match self {
            Curation::Approve => VersionState::Approved,
            Curation::Reject => VersionState::Rejected,
            Curation::Publish => VersionState::Published,
            Curation::Deprecate => VersionState::Deprecated,
            Curation::Withdraw => VersionState::Withdrawn,
        }
    }

    /// The moves the database allows, for forms (the guard is the authority).
    pub fn available(from: VersionState) -> &'static [Curation] {
        match from {
            VersionState::InReview => &[Curation::Approve, Curation::Reject],
            VersionState::Approved => &[Curation::Publish, Curation::Reject, Curation::Withdraw],
            VersionState::Published => &[Curation::Deprecate, Curation::Withdraw],
            VersionState::Deprecated => &[Curation::Withdraw],
            _ => &[],
        }
    }
}

/// What a publisher types for a new version (shared with the pages and the API).
pub use portal_types::VersionDraft;

/// Cloud-config keys the platform writes itself; a fragment may not set them.
const RESERVED_CLOUD_INIT: &[&str] = &[
    "users",
    "hostname",
    "fqdn",
    "ssh_pwauth",
    "ssh_authorized_keys",
    "network",
    "disable_root",
];

struct CheckedDraft {
    version: String,
    summary: String,
    description_md: String,
    release_notes: String,
    image_source: String,
    image_sha256: Option<String>,
    ssh_user: String,
    cloud_init: Value,
    accepts_user_data: bool,
    shapes: Vec<String>,
    gpu_models: Vec<String>,
    min_gpus: i32,
    fee: Option<Money>,
}

fn bounded(field: &'static str, s: &str, min: usize, max: usize) -> Result<String> {
    let s = s.trim();
    let n = s.chars().count();
    if n < min || n > max {
        return Err(invalid(field, format!("use {min} to {max} characters")));
    }
    Ok(s.to_string())
}

impl CheckedDraft {
    /// The draft checked field by field; the first refusal names its field.
    fn check(d: &VersionDraft) -> Result<Self> {
        let version = d.version.trim();
        if version.is_empty()
            || version.len() > 32
            || !version.starts_with(|c: char| c.is_ascii_alphanumeric())
            || !version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'))
        {
            return Err(invalid(
                "version",
                format!("{version:?}: use letters, digits, '.', '_', '+' and '-', e.g. 2.5.1"),
            ));
        }
        let image_source = d.image_source.trim();
        agent_protocol::image_file(image_source).map_err(|e| invalid("image_source", e))?;
        let image_sha256 = match d.image_sha256.trim() {
            "" => None,
            s => Some(agent_protocol::parse_sha256(s).map_err(|e| invalid("image_sha256", e))?),
        };
        let ssh_user = d.ssh_user.trim();
        if ssh_user.is_empty()
            || ssh_user.len() > 32
            || !ssh_user.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            || !ssh_user
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-'))
        {
            return Err(invalid(
                "ssh_user",
                "a Unix user name: lowercase letters, digits, '_' and '-'",
            ));
        }
        let cloud_init = if d.cloud_init.trim().is_empty() {
            json!({})
        } else {
            let v: Value = serde_json::from_str(d.cloud_init.trim()).map_err(|e| {
                invalid(
                    "cloud_init",
                    format!("write the cloud-config fragment as a JSON object: {e}"),
                )
            })?;
            let Some(map) = v.as_object() else {
                return Err(invalid(
                    "cloud_init",
                    "write the cloud-config fragment as a JSON object, e.g. {\"runcmd\": [[\"nvidia-smi\"]]}",
                ));
            };
            if let Some(k) = map
                .keys()
                .find(|k| RESERVED_CLOUD_INIT.contains(&k.as_str()))
            {
                return Err(invalid(
                    "cloud_init",
                    format!("{k:?} is set by the platform (users, hostname, SSH and network are)"),
                ));
            }
            cloud_init::check(map).map_err(|reason| invalid("cloud_init", reason))?;
            if d.cloud_init.len() > 32 * 1024 {
                return Err(invalid("cloud_init", "keep the fragment under 32 KiB"));
            }
            v
        };
        let accepts_user_data = match d.accepts_user_data.trim() {
            "" | "no" => false,
            "yes" | "on" => true,
            other => {
                return Err(invalid(
                    "accepts_user_data",
                    format!("{other:?}: yes or no"),
                ));
            }
        };
        let mut shapes = Vec::new();
        for s in d.shapes.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let shape = Shape::parse(s).map_err(|_| {
                invalid(
                    "shapes",
                    format!("{s:?}: use gpu_slice, baremetal or both, comma-separated"),
                )
            })?;
            if !shapes.contains(&shape.as_str().to_string()) {
                shapes.push(shape.as_str().to_string());
            }
        }
        if shapes.is_empty() {
            return Err(invalid(
                "shapes",
                "name at least one of gpu_slice, baremetal",
            ));
        }
        let gpu_models: Vec<String> = d
            .gpu_models
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        if gpu_models.iter().any(|m| m.len() > 100) {
            return Err(invalid(
                "gpu_models",
                "a GPU model is at most 100 characters",
            ));
        }
        let min_gpus = match d.min_gpus.trim() {
            "" => 1,
            s => s
                .parse::<i32>()
                .ok()
                .filter(|n| (1..=16).contains(n))
                .ok_or_else(|| {
                    invalid(
                        "min_gpus",
                        format!("{s:?}: use a whole number from 1 to 16"),
                    )
                })?,
        };
        let fee = match d.fee.trim() {
            "" | "0" => None,
            s => {
                let m = Money::parse_hourly("fee", s)?;
                (m.amount_minor > 0).then_some(m)
            }
        };
        Ok(CheckedDraft {
            version: version.to_string(),
            summary: bounded("summary", &d.summary, 1, 200)?,
            description_md: bounded("description", &d.description_md, 0, 20000)?,
            release_notes: bounded("release_notes", &d.release_notes, 0, 5000)?,
            image_source: image_source.to_string(),
            image_sha256,
            ssh_user: ssh_user.to_string(),
            cloud_init,
            accepts_user_data,
            shapes,
            gpu_models,
            min_gpus,
            fee,
        })
    }
}

/// Who may draft and submit a publisher's listings: the admins of its organization, or
/// platform operators for the platform's own.
pub struct PublisherActor {
    user: UserId,
    publisher: PublisherId,
}

impl PublisherActor {
    pub fn platform(who: &Platform<PlatformOperators>) -> Self {
        PublisherActor {
            user: who.principal().user_id,
            publisher: PLATFORM_PUBLISHER,
        }
    }

    pub fn publisher(&self) -> PublisherId {
        self.publisher
    }
}

struct VersionDbRow {
    id: ListingVersionId,
    listing_id: ListingId,
    version: String,
    state: String,
    summary: String,
    description_md: String,
    release_notes: String,
    image_source: String,
    image_sha256: Option<String>,
    ssh_user: String,
    cloud_init: Value,
    accepts_user_data: bool,
    shapes: Vec<String>,
    gpu_models: Vec<String>,
    min_gpus: i32,
    fee_per_hour_minor: i64,
    fee_currency: Option<String>,
    review_reason: Option<String>,
    state_changed_at: time::OffsetDateTime,
    published_at: Option<time::OffsetDateTime>,
}

fn fee_of(minor: i64, currency: Option<String>) -> Option<Money> {
    match currency {
        Some(currency) if minor > 0 => Some(Money {
            amount_minor: minor,
            currency: currency.into(),
        }),
        _ => None,
    }
}

impl TryFrom<VersionDbRow> for Version {
    type Error = Error;
    fn try_from(r: VersionDbRow) -> Result<Version> {
        Ok(Version {
            id: r.id,
            version: r.version,
            state: VersionState::parse(&r.state).map_err(|e| Error::Corrupt(e.to_string()))?,
            summary: r.summary,
            description_md: r.description_md,
            release_notes: r.release_notes,
            image_source: r.image_source,
            image_sha256: r.image_sha256,
            ssh_user: r.ssh_user,
            cloud_init: if r.cloud_init.as_object().is_some_and(|m| m.is_empty()) {
                String::new()
            } else {
                format!("{:#}", r.cloud_init)
            },
            accepts_user_data: r.accepts_user_data,
            compatibility: Compatibility {
                shapes: r
                    .shapes
                    .iter()
                    .map(|s| Shape::parse(s).map_err(Error::from))
                    .collect::<Result<_>>()?,
                gpu_models: r.gpu_models,
                min_gpus: r.min_gpus,
                fee: fee_of(r.fee_per_hour_minor, r.fee_currency),
            },
            review_reason: r.review_reason,
            state_changed_at: r.state_changed_at,
            published_at: r.published_at,
        })
    }
}

/// One version as the operator reviewing it sees it: every field a launch uses or a tenant
/// reads, and what changed since the version in force.
#[derive(Clone, Debug)]
pub struct VersionReview {
    pub slug: String,
    pub listing: String,
    pub publisher: String,
    pub version: Version,
    /// The newest published version of the same listing (not this one), if any.
    pub in_force: Option<Version>,
}

/// One field that differs between the version in force and the one under review.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldChange {
    pub field: &'static str,
    pub before: String,
    pub after: String,
}

/// Every reviewed field of a version, by label, in reading order.
pub fn review_fields(v: &Version) -> Vec<(&'static str, String)> {
    let c = &v.compatibility;
    let or = |s: &str, none: &str| {
        if s.trim().is_empty() {
            none.to_string()
        } else {
            s.to_string()
        }
    };
    vec![
        ("Summary", v.summary.clone()),
        ("Description (Markdown)", or(&v.description_md, "(none)")),
        ("Release notes", or(&v.release_notes, "(none)")),
        ("Image source", v.image_source.clone()),
        (
            "Image SHA-256",
            v.image_sha256.clone().unwrap_or_else(|| "(none)".into()),
        ),
        ("SSH user", v.ssh_user.clone()),
        ("Cloud-init", or(&v.cloud_init, "(none)")),
        (
            "Tenant user data",
            if v.accepts_user_data {
                "accepted"
            } else {
                "not accepted"
            }
            .into(),
        ),
        (
            "Shapes",
            c.shapes
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        ("GPU models", or(&c.gpu_models.join(", "), "any")),
        ("Minimum GPUs", c.min_gpus.to_string()),
        (
            "Hourly fee",
            c.fee
                .as_ref()
                .map_or_else(|| "none".to_string(), |f| f.to_string()),
        ),
    ]
}

/// A digest of everything a review shows ([`review_fields`]). An approval names the digest
/// its reviewer was shown, so nothing is approved unseen (or other than what was seen), and the
/// audit log keeps it. A version's content is fixed once submitted, so the digest is stable
/// for as long as a decision is pending.
pub fn content_digest(v: &Version) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for (label, value) in review_fields(v) {
        for part in [label, value.as_str()] {
            ctx.update(&(part.len() as u64).to_be_bytes());
            ctx.update(part.as_bytes());
        }
    }
    let hex: String = ctx
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// The fields of `new` that differ from `old`.
pub fn changes(old: &Version, new: &Version) -> Vec<FieldChange> {
    review_fields(old)
        .into_iter()
        .zip(review_fields(new))
        .filter(|((_, before), (_, after))| before != after)
        .map(|((field, before), (_, after))| FieldChange {
            field,
            before,
            after,
        })
        .collect()
}

/// Versions of `listings` (all of them, or only published ones), newest first.
async fn versions_of(
    conn: &mut PgConnection,
    listings: &[ListingId],
    published_only: bool,
) -> Result<Vec<(ListingId, Version)>> {
    let rows = sqlx::query_as!(
        VersionDbRow,
        r#"SELECT id AS "id: ListingVersionId", listing_id AS "listing_id: ListingId", version,
                  state, summary, description_md, release_notes, image_source, image_sha256,
                  ssh_user, cloud_init, accepts_user_data, shapes, gpu_models, min_gpus,
                  fee_per_hour_minor, fee_currency, review_reason, state_changed_at, published_at
           FROM listing_versions
           WHERE listing_id = ANY($1) AND (state = 'published' OR NOT $2)
           ORDER BY created_at DESC"#,
        &listings.iter().map(|l| l.0).collect::<Vec<_>>(),
        published_only
    )
    .fetch_all(&mut *conn)
    .await?;
    rows.into_iter()
        .map(|r| Ok((r.listing_id, Version::try_from(r)?)))
        .collect()
}

/// Listings with their versions; `published_only` hides the rest and listings left empty.
async fn load_listings(
    conn: &mut PgConnection,
    slug: Option<&str>,
    publisher: Option<PublisherId>,
    published_only: bool,
) -> Result<Vec<Listing>> {
    let rows = sqlx::query!(
        r#"SELECT l.id AS "id: ListingId", l.slug, l.name, l.category,
                  p.id AS "publisher_id: PublisherId", p.display_name AS publisher,
                  l.logo IS NOT NULL AS "has_logo!"
           FROM listings l JOIN publishers p ON p.id = l.publisher_id
           WHERE ($1::text IS NULL OR l.slug = $1) AND ($2::uuid IS NULL OR l.publisher_id = $2)
           ORDER BY l.name"#,
        slug,
        publisher.map(|p| p.0)
    )
    .fetch_all(&mut *conn)
    .await?;
    let ids: Vec<ListingId> = rows.iter().map(|r| r.id).collect();
    let mut versions = versions_of(conn, &ids, published_only).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let mine: Vec<Version> = versions
            .extract_if(.., |(l, _)| *l == r.id)
            .map(|(_, v)| v)
            .collect();
        if published_only && mine.is_empty() {
            continue;
        }
        out.push(Listing {
            id: r.id,
            slug: r.slug,
            name: r.name,
            category: Category::parse(&r.category).map_err(|e| Error::Corrupt(e.to_string()))?,
            publisher: r.publisher,
            publisher_id: r.publisher_id,
            has_logo: r.has_logo,
            versions: mine,
        });
    }
    Ok(out)
}

/// What a launch resolves a listing (and optional version) to.
pub struct LaunchVersion {
    pub id: ListingVersionId,
    pub slug: String,
    pub label: String,
    pub compatibility: Compatibility,
    /// Whether a launch may carry its own user data.
    pub accepts_user_data: bool,
}

/// The version `slug` + `version` names (empty version: the newest published), refused in
/// words unless it is published.
pub async fn launch_version(
    conn: &mut PgConnection,
    slug: &str,
    version: &str,
) -> Result<LaunchVersion> {
    let slug = slug.trim().to_ascii_lowercase();
    let version = version.trim();
    let mut listings = load_listings(conn, Some(&slug), None, false).await?;
    let listing = listings
        .pop()
        .ok_or_else(|| invalid("listing", format!("there is no listing {slug:?}")))?;
    let v = if version.is_empty() {
        listing.current().ok_or_else(|| {
            invalid(
                "listing",
                format!("{} has no published version to launch", listing.name),
            )
        })?
    } else {
        let v = listing
            .versions
            .iter()
            .find(|v| v.version == version)
            .ok_or_else(|| {
                invalid(
                    "version",
                    format!("{} has no version {version:?}", listing.name),
                )
            })?;
        if v.state != VersionState::Published {
            return Err(invalid(
                "version",
                format!(
                    "{} {} is {}; only published versions can be launched{}",
                    listing.name,
                    v.version,
                    v.state,
                    listing
                        .current()
                        .map(|c| format!(" (the current one is {})", c.version))
                        .unwrap_or_default()
                ),
            ));
        }
        v
    };
    // Versions made before images had to live in the image directory (the platform's own
    // are kept by migration 0013) would be accepted here and then refused by the host's
    // agent: say so now, before anything is claimed.
    if agent_protocol::image_file(&v.image_source).is_err() {
        return Err(invalid(
            "version",
            format!(
                "{} {} can't be launched: its image {:?} is not a file in the operator's image \
                 directory ({}); a new version with an image there must be published",
                listing.name,
                v.version,
                v.image_source,
                agent_protocol::IMAGE_DIR
            ),
        ));
    }
    // A concurrent deprecation waits for this launch (and a launch after it sees it).
    sqlx::query!(
        "SELECT 1 AS one FROM listing_versions WHERE id = $1 FOR SHARE",
        v.id as ListingVersionId
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(LaunchVersion {
        id: v.id,
        label: format!("{} {}", listing.name, v.version),
        slug: listing.slug.clone(),
        compatibility: v.compatibility.clone(),
        accepts_user_data: v.accepts_user_data,
    })
}

/// What the control plane offers for the marketplace.
#[allow(async_fn_in_trait)]
pub trait MarketplaceApi {
    /// The public marketplace: listings with a published version, filtered.
    async fn browse_marketplace(&self, filter: &BrowseFilter) -> Result<Browse>;

    /// The public listing page: published versions, the SKUs the current one fits with
    /// what could launch now, and SKU + fee.
    async fn listing_page(&self, slug: &str) -> Result<ListingPage>;

    /// Published listings for the launch form: `(slug, label)`.
    async fn launchable_listings(&self) -> Result<Vec<LaunchableListing>>;

    /// What a launch in `project` (or, with none, anywhere in `tenant`) may name: the current
    /// version of each published listing the `allowed_listings` policy lets it use, with the
    /// SKUs it fits that `allowed_skus` allows; OS images first. Listings are public and
    /// policies are visible to the organization's members, so the caller holds the proof that
    /// the reader is one.
    async fn launchable_images(
        &self,
        tenant: TenantId,
        project: Option<ProjectId>,
    ) -> Result<Vec<Image>>;

    /// A listing's logo: `(bytes, content type)`.
    async fn listing_logo(&self, slug: &str) -> Result<(Vec<u8>, String)>;

    /// The publisher an organization's admins act for, if it has one.
    async fn publisher_of_tenant(&self, tenant: TenantId) -> Result<Option<Publisher>>;

    /// Acting for an organization's publisher: its admins, once it applied.
    async fn tenant_publisher(&self, who: &Tenant<TenantAdmins>) -> Result<PublisherActor>;

    /// An organization asks to publish; operators approve it. Idempotent.
    async fn apply_to_publish(
        &self,
        who: &Tenant<TenantAdmins>,
        display_name: &str,
        request_id: Option<&str>,
    ) -> Result<PublisherId>;

    /// Operators approve or suspend a publisher and set its revenue share.
    async fn decide_publisher(
        &self,
        who: &Platform<PlatformOperators>,
        publisher: PublisherId,
        approve: bool,
        revenue_share_percent: &str,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// Every publisher (operators' list).
    async fn publishers<R: PlatformRequirement>(
        &self,
        _who: &Platform<R>,
    ) -> Result<Vec<Publisher>>;

    /// Drafts a new listing with its first version.
    async fn create_listing(
        &self,
        who: &PublisherActor,
        slug: &str,
        name: &str,
        category: &str,
        first: &VersionDraft,
        request_id: Option<&str>,
    ) -> Result<ListingVersionId>;

    /// Drafts a new version of one of the publisher's listings.
    async fn create_version(
        &self,
        who: &PublisherActor,
        slug: &str,
        draft: &VersionDraft,
        request_id: Option<&str>,
    ) -> Result<ListingVersionId>;

    /// The publisher submits a draft (or a rejected version it fixed) for review.
    async fn submit_version(
        &self,
        who: &PublisherActor,
        version: ListingVersionId,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// An operator's step on a version. Rejecting needs a reason; approving needs the
    /// [`content_digest`] of the review the operator read ([`ControlPlane::version_review`]).
    async fn curate_version(
        &self,
        who: &Platform<PlatformOperators>,
        version: ListingVersionId,
        action: Curation,
        reason: &str,
        reviewed: Option<&str>,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// A publisher's listings, every version and its state.
    async fn publisher_listings(&self, who: &PublisherActor) -> Result<Vec<Listing>>;

    /// Everything about one version an operator must see before deciding on it, beside the
    /// version in force.
    async fn version_review(
        &self,
        _who: &Platform<PlatformOperators>,
        id: ListingVersionId,
    ) -> Result<VersionReview>;

    /// Every version of every listing, those waiting on operators first.
    async fn review_queue(&self, _who: &Platform<PlatformOperators>) -> Result<Vec<VersionRow>>;

    /// What the platform owes each publisher: its payable balance per currency, beside the
    /// fees rated for its listings.
    async fn publisher_payables<R: PlatformRequirement>(
        &self,
        _who: &Platform<R>,
    ) -> Result<Vec<Payable>>;
}

impl MarketplaceApi for ControlPlane {
    #[tracing::instrument(skip_all, fields(marketplace.q = %filter.q))]
    async fn browse_marketplace(&self, filter: &BrowseFilter) -> Result<Browse> {
        let mut conn = self.pool().acquire().await?;
        let listings = load_listings(&mut conn, None, None, true).await?;
        let skus = self.active_skus().await?;
        let mut gpu_models: Vec<String> = skus.iter().map(|s| s.gpu_model.clone()).collect();
        gpu_models.sort();
        gpu_models.dedup();
        let words: Vec<String> = filter.q.split_whitespace().map(str::to_lowercase).collect();
        let category = match filter.category.trim() {
            "" => None,
            c => Some(Category::parse(c)?),
        };
        let gpu_model = filter.gpu_model.trim();
        let mut cards = Vec::new();
        for l in listings {
            let Some(v) = l.current() else { continue };
            let c = &v.compatibility;
            let haystack =
                format!("{} {} {} {}", l.name, l.slug, v.summary, v.description_md).to_lowercase();
            if !words.iter().all(|w| haystack.contains(w.as_str())) {
                continue;
            }
            if category.is_some_and(|cat| cat != l.category) {
                continue;
            }
            let fitting: Vec<&Sku> = skus
                .iter()
                .filter(|s| c.fits(s) && (gpu_model.is_empty() || s.gpu_model == gpu_model))
                .collect();
            if !gpu_model.is_empty() && fitting.is_empty() {
                continue;
            }
            let from_price = fitting
                .iter()
                .map(|s| c.total_price(s))
                .min_by_key(|m| m.amount_minor);
            if let Some(max) = filter.max_price_minor
                && from_price.as_ref().is_none_or(|p| p.amount_minor > max)
            {
                continue;
            }
            cards.push(ListingCard {
                slug: l.slug.clone(),
                name: l.name.clone(),
                category: l.category,
                publisher: l.publisher.clone(),
                has_logo: l.has_logo,
                version: v.version.clone(),
                summary: v.summary.clone(),
                fee: c.fee.clone(),
                gpu_models: c.gpu_models.clone(),
                from_price,
            });
        }
        Ok(Browse { cards, gpu_models })
    }

    #[tracing::instrument(skip_all, fields(listing.slug = %slug))]
    async fn listing_page(&self, slug: &str) -> Result<ListingPage> {
        let mut conn = self.pool().acquire().await?;
        let listing = load_listings(&mut conn, Some(slug.trim()), None, true)
            .await?
            .pop()
            .ok_or(Error::NotFound { what: "listing" })?;
        let mut fitting = Vec::new();
        if let Some(v) = listing.current() {
            let skus: Vec<_> = self
                .active_skus()
                .await?
                .into_iter()
                .filter(|sku| v.compatibility.fits(sku))
                .collect();
            let each = crate::placement::availability_of_each(&mut *conn, &skus).await?;
            for (sku, found) in skus.into_iter().zip(each) {
                let launchable = found.iter().map(|(_, n)| n).sum();
                fitting.push(FittingSku {
                    total_price: v.compatibility.total_price(&sku),
                    sku,
                    launchable,
                });
            }
        }
        fitting.sort_by_key(|f| (f.total_price.amount_minor, f.sku.name.clone()));
        Ok(ListingPage { listing, fitting })
    }

    async fn launchable_listings(&self) -> Result<Vec<LaunchableListing>> {
        let mut conn = self.pool().acquire().await?;
        Ok(load_listings(&mut conn, None, None, true)
            .await?
            .into_iter()
            .filter_map(|l| {
                let v = l.current()?;
                let fee = v.compatibility.fee.clone();
                let label = match &fee {
                    Some(f) => format!("{} {} (+{f} per hour)", l.name, v.version),
                    None => format!("{} {}", l.name, v.version),
                };
                Some(LaunchableListing {
                    slug: l.slug.clone(),
                    label,
                    category: l.category,
                    fee,
                })
            })
            .collect())
    }

    #[tracing::instrument(skip_all, fields(tenant.id = %tenant))]
    async fn launchable_images(
        &self,
        tenant: TenantId,
        project: Option<ProjectId>,
    ) -> Result<Vec<Image>> {
        use crate::policy::{PolicyKey, PolicyValue, resolve_policies_on};
        let mut conn = self.pool().acquire().await?;
        let policies = resolve_policies_on(&mut conn, Some(tenant), project).await?;
        let allowed = |key: PolicyKey| {
            policies
                .iter()
                .find(|p| p.key == key)
                .and_then(|p| match &p.value {
                    Some(PolicyValue::AllowedListings(l) | PolicyValue::AllowedSkus(l)) => {
                        Some(l.clone())
                    }
                    _ => None,
                })
        };
        let (listings_allowed, skus_allowed) = (
            allowed(PolicyKey::AllowedListings),
            allowed(PolicyKey::AllowedSkus),
        );
        let skus: Vec<Sku> = self
            .active_skus()
            .await?
            .into_iter()
            .filter(|s| skus_allowed.as_ref().is_none_or(|a| a.contains(&s.name)))
            .collect();
        let mut images: Vec<Image> = load_listings(&mut conn, None, None, true)
            .await?
            .into_iter()
            .filter(|l| {
                listings_allowed
                    .as_ref()
                    .is_none_or(|a| a.contains(&l.slug))
            })
            .filter_map(|l| {
                let v = l.current()?;
                Some(Image {
                    skus: skus
                        .iter()
                        .filter(|s| v.compatibility.fits(s))
                        .map(|s| s.name.clone())
                        .collect(),
                    version: v.version.clone(),
                    summary: v.summary.clone(),
                    ssh_user: v.ssh_user.clone(),
                    fee_per_hour: v.compatibility.fee.clone(),
                    accepts_user_data: v.accepts_user_data,
                    slug: l.slug,
                    name: l.name,
                    category: l.category,
                    publisher: l.publisher,
                })
            })
            .collect();
        images.sort_by_key(|i| (i.category != Category::OsImage, i.name.clone()));
        Ok(images)
    }

    async fn listing_logo(&self, slug: &str) -> Result<(Vec<u8>, String)> {
        let r = sqlx::query!(
            r#"SELECT l.logo AS "logo!", l.logo_type AS "logo_type!" FROM listings l
               WHERE l.slug = $1 AND l.logo IS NOT NULL
                 AND EXISTS (SELECT 1 FROM listing_versions v
                             WHERE v.listing_id = l.id AND v.state = 'published')"#,
            slug
        )
        .fetch_optional(self.pool())
        .await?
        .ok_or(Error::NotFound { what: "logo" })?;
        Ok((r.logo, r.logo_type))
    }

    async fn publisher_of_tenant(&self, tenant: TenantId) -> Result<Option<Publisher>> {
        Ok(sqlx::query_as!(
            Publisher,
            r#"SELECT id AS "id: PublisherId", tenant_id AS "tenant_id: TenantId", display_name,
                      status, revenue_share_bps
               FROM publishers WHERE tenant_id = $1"#,
            tenant as TenantId
        )
        .fetch_optional(self.pool())
        .await?)
    }

    async fn tenant_publisher(&self, who: &Tenant<TenantAdmins>) -> Result<PublisherActor> {
        let p = self
            .publisher_of_tenant(who.id())
            .await?
            .ok_or(Error::NotFound { what: "publisher" })?;
        Ok(PublisherActor {
            user: who.user(),
            publisher: p.id,
        })
    }

    #[tracing::instrument(skip_all, fields(tenant.id = %who.id()))]
    async fn apply_to_publish(
        &self,
        who: &Tenant<TenantAdmins>,
        display_name: &str,
        request_id: Option<&str>,
    ) -> Result<PublisherId> {
        let display_name = bounded("display_name", display_name, 1, 100)?;
        let mut tx = self.pool().begin().await?;
        let id = sqlx::query_scalar!(
            r#"INSERT INTO publishers (id, tenant_id, display_name) VALUES (gen_random_uuid(), $1, $2)
               ON CONFLICT (tenant_id) DO UPDATE SET tenant_id = EXCLUDED.tenant_id
               RETURNING id AS "id: PublisherId""#,
            who.id() as TenantId,
            display_name
        )
        .fetch_one(&mut *tx)
        .await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.user()),
                action: "publisher.apply",
                resource: &self.naming().tenant(who.id()),
                before: None,
                after: Some(json!({ "publisher": display_name })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(id)
    }

    #[tracing::instrument(skip_all, fields(publisher.id = %publisher))]
    async fn decide_publisher(
        &self,
        who: &Platform<PlatformOperators>,
        publisher: PublisherId,
        approve: bool,
        revenue_share_percent: &str,
        request_id: Option<&str>,
    ) -> Result<()> {
        if publisher == PLATFORM_PUBLISHER {
            return Err(invalid("publisher", "the platform publishes as itself"));
        }
        let share = revenue_share_percent.trim().trim_end_matches('%').trim();
        let bps = percent_to_bps(share).ok_or_else(|| {
            invalid(
                "revenue_share",
                format!("{share:?}: a percentage from 0 to 100, at most two decimals"),
            )
        })?;
        let status = if approve { "approved" } else { "suspended" };
        let mut tx = self.pool().begin().await?;
        let before = sqlx::query!(
            "SELECT status, revenue_share_bps, display_name FROM publishers WHERE id = $1 FOR UPDATE",
            publisher as PublisherId
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "publisher" })?;
        sqlx::query!(
            "UPDATE publishers SET status = $2, revenue_share_bps = $3, decided_by = $4, decided_at = now()
             WHERE id = $1",
            publisher as PublisherId,
            status,
            bps,
            who.principal().user_id as UserId
        )
        .execute(&mut *tx)
        .await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.principal().user_id),
                action: if approve {
                    "publisher.approve"
                } else {
                    "publisher.suspend"
                },
                resource: &self.naming().publisher(publisher),
                before: Some(json!({ "status": before.status, "revenue_share_bps": before.revenue_share_bps })),
                after: Some(json!({ "publisher": before.display_name, "status": status, "revenue_share_bps": bps })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn publishers<R: PlatformRequirement>(
        &self,
        _who: &Platform<R>,
    ) -> Result<Vec<Publisher>> {
        Ok(sqlx::query_as!(
            Publisher,
            r#"SELECT id AS "id: PublisherId", tenant_id AS "tenant_id: TenantId", display_name,
                      status, revenue_share_bps
               FROM publishers ORDER BY tenant_id IS NOT NULL, display_name"#
        )
        .fetch_all(self.pool())
        .await?)
    }

    #[tracing::instrument(skip_all, fields(listing.slug = %slug))]
    async fn create_listing(
        &self,
        who: &PublisherActor,
        slug: &str,
        name: &str,
        category: &str,
        first: &VersionDraft,
        request_id: Option<&str>,
    ) -> Result<ListingVersionId> {
        let slug = slug.trim().to_ascii_lowercase();
        if slug.is_empty()
            || slug.len() > 63
            || !slug.starts_with(|c: char| c.is_ascii_alphanumeric())
            || !slug.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-')
            })
        {
            return Err(invalid(
                "slug",
                format!("{slug:?}: use lowercase letters, digits, '.', '_' and '-' (e.g. pytorch)"),
            ));
        }
        let name = bounded("name", name, 1, 100)?;
        let category = Category::parse(category)?;
        let draft = CheckedDraft::check(first)?;
        let mut tx = self.pool().begin().await?;
        let listing = ListingId::new_random();
        let inserted = sqlx::query!(
            "INSERT INTO listings (id, publisher_id, slug, name, category, created_by)
             VALUES ($1, $2, $3, $4, $5, $6)",
            listing as ListingId,
            who.publisher as PublisherId,
            slug,
            name,
            category.as_str(),
            who.user as UserId
        )
        .execute(&mut *tx)
        .await;
        match inserted {
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                return Err(invalid("slug", format!("a listing {slug} exists already")));
            }
            other => other?,
        };
        let id = insert_version(&mut tx, who, listing, &draft).await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.user),
                action: "listing.create",
                resource: &self.naming().listing(&slug),
                before: None,
                after: Some(json!({ "name": name, "category": category.as_str(), "version": draft.version })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(id)
    }

    #[tracing::instrument(skip_all, fields(listing.slug = %slug))]
    async fn create_version(
        &self,
        who: &PublisherActor,
        slug: &str,
        draft: &VersionDraft,
        request_id: Option<&str>,
    ) -> Result<ListingVersionId> {
        let draft = CheckedDraft::check(draft)?;
        let mut tx = self.pool().begin().await?;
        let listing = sqlx::query_scalar!(
            r#"SELECT id AS "id: ListingId" FROM listings WHERE slug = $1 AND publisher_id = $2"#,
            slug.trim(),
            who.publisher as PublisherId
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "listing" })?;
        let id = insert_version(&mut tx, who, listing, &draft).await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.user),
                action: "listing.version.create",
                resource: &self.naming().listing(slug.trim()),
                before: None,
                after: Some(json!({
                    "version": draft.version, "summary": draft.summary,
                    "fee": draft.fee.map(|f| f.to_string()),
                })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(id)
    }

    async fn submit_version(
        &self,
        who: &PublisherActor,
        version: ListingVersionId,
        request_id: Option<&str>,
    ) -> Result<()> {
        // A third-party image is launched only if it is the file that was reviewed, so its
        // checksum comes with the version. (Content is the publisher's only while a draft or
        // rejected, and no product path edits it: this can't race a change.)
        if who.publisher != PLATFORM_PUBLISHER {
            let checksum = sqlx::query_scalar!(
                "SELECT v.image_sha256 FROM listing_versions v JOIN listings l ON l.id = v.listing_id
                 WHERE v.id = $1 AND l.publisher_id = $2 AND v.state IN ('draft', 'rejected')",
                version as ListingVersionId,
                who.publisher as PublisherId
            )
            .fetch_optional(self.pool())
            .await?;
            if let Some(None) = checksum {
                return Err(invalid(
                    "image_sha256",
                    "give the SHA-256 of the version's image file (as `sha256sum` prints it) \
                     before submitting: hosts launch the image only if the file matches it",
                ));
            }
        }
        self.move_version(
            Actor::User(who.user),
            Some(who.publisher),
            version,
            VersionState::InReview,
            "listing.version.submit",
            None,
            None,
            request_id,
        )
        .await
    }

    async fn curate_version(
        &self,
        who: &Platform<PlatformOperators>,
        version: ListingVersionId,
        action: Curation,
        reason: &str,
        reviewed: Option<&str>,
        request_id: Option<&str>,
    ) -> Result<()> {
        let reviewed = match action {
            Curation::Approve => {
                let shown = reviewed.map(str::trim).unwrap_or_default();
                if shown.is_empty() {
                    return Err(invalid(
                        "reviewed",
                        "approve from the version's review page, which shows everything you approve",
                    ));
                }
                let review = self.version_review(who, version).await?;
                if shown != content_digest(&review.version) {
                    return Err(Error::Conflict(format!(
                        "can't approve: version {} is not the content you reviewed; open its review again",
                        review.version.version
                    )));
                }
                Some(shown)
            }
            _ => None,
        };
        let reason = reason.trim();
        let reason = match action {
            Curation::Reject if reason.is_empty() => {
                return Err(invalid("reason", "say why, so the publisher can fix it"));
            }
            Curation::Reject => Some(bounded("reason", reason, 1, 1000)?),
            _ => None,
        };
        self.move_version(
            Actor::User(who.principal().user_id),
            None,
            version,
            action.target(),
            match action {
                Curation::Approve => "listing.version.approve",
                Curation::Reject => "listing.version.reject",
                Curation::Publish => "listing.version.publish",
                Curation::Deprecate => "listing.version.deprecate",
                Curation::Withdraw => "listing.version.withdraw",
            },
            reason.as_deref(),
            reviewed,
            request_id,
        )
        .await
        .map_err(|e| match e {
            Error::Conflict(m) => Error::Conflict(format!("can't {}: {m}", action.as_str())),
            other => other,
        })
    }

    async fn publisher_listings(&self, who: &PublisherActor) -> Result<Vec<Listing>> {
        let mut conn = self.pool().acquire().await?;
        load_listings(&mut conn, None, Some(who.publisher), false).await
    }

    #[tracing::instrument(skip(self, _who))]
    async fn version_review(
        &self,
        _who: &Platform<PlatformOperators>,
        id: ListingVersionId,
    ) -> Result<VersionReview> {
        let mut conn = self.pool().acquire().await?;
        let l = sqlx::query!(
            r#"SELECT l.id AS "id: ListingId", l.slug, l.name, p.display_name AS publisher
               FROM listing_versions v JOIN listings l ON l.id = v.listing_id
               JOIN publishers p ON p.id = l.publisher_id WHERE v.id = $1"#,
            id as ListingVersionId
        )
        .fetch_optional(&mut *conn)
        .await?
        .ok_or(Error::NotFound {
            what: "listing version",
        })?;
        let versions: Vec<Version> = versions_of(&mut conn, &[l.id], false)
            .await?
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        let in_force = versions
            .iter()
            .find(|v| v.id != id && v.state == VersionState::Published)
            .cloned();
        let version = versions
            .into_iter()
            .find(|v| v.id == id)
            .ok_or(Error::Corrupt(format!("version {id} vanished")))?;
        Ok(VersionReview {
            slug: l.slug,
            listing: l.name,
            publisher: l.publisher,
            version,
            in_force,
        })
    }

    async fn review_queue(&self, _who: &Platform<PlatformOperators>) -> Result<Vec<VersionRow>> {
        let rows = sqlx::query!(
            r#"SELECT v.id AS "id: ListingVersionId", l.slug, l.name, p.display_name AS publisher,
                      v.version, v.state, v.fee_per_hour_minor, v.fee_currency, v.review_reason,
                      v.state_changed_at
               FROM listing_versions v JOIN listings l ON l.id = v.listing_id
               JOIN publishers p ON p.id = l.publisher_id
               ORDER BY v.state NOT IN ('in_review', 'approved'), v.state_changed_at DESC"#
        )
        .fetch_all(self.pool())
        .await?;
        rows.into_iter()
            .map(|r| {
                Ok(VersionRow {
                    id: r.id,
                    slug: r.slug,
                    name: r.name,
                    publisher: r.publisher,
                    version: r.version,
                    state: VersionState::parse(&r.state)
                        .map_err(|e| Error::Corrupt(e.to_string()))?,
                    fee: fee_of(r.fee_per_hour_minor, r.fee_currency),
                    review_reason: r.review_reason,
                    state_changed_at: r.state_changed_at,
                })
            })
            .collect()
    }

    async fn publisher_payables<R: PlatformRequirement>(
        &self,
        _who: &Platform<R>,
    ) -> Result<Vec<Payable>> {
        Ok(sqlx::query_as!(
            Payable,
            r#"SELECT p.id AS "publisher_id: PublisherId", p.display_name AS publisher, p.status,
                      p.revenue_share_bps, f.currency AS "currency!",
                      f.fees AS "fees_micro!",
                      coalesce((SELECT -sum(po.amount_micro) FROM postings po
                                JOIN ledger_accounts a ON a.id = po.account_id
                                WHERE a.kind = 'publisher_payable' AND a.publisher_id = p.id
                                  AND a.currency = f.currency), 0)::bigint AS "owed_micro!"
               FROM publishers p
               JOIN (SELECT publisher_id, currency, sum(amount_micro)::bigint AS fees
                     FROM fee_charges GROUP BY publisher_id, currency) f ON f.publisher_id = p.id
               ORDER BY p.display_name, f.currency"#
        )
        .fetch_all(self.pool())
        .await?)
    }
}

/// What the other areas of this crate use of it, behind no proof: never for the pages or the API.
#[allow(async_fn_in_trait)]
pub(crate) trait MarketplaceInternal {
    #[allow(clippy::too_many_arguments)]
    async fn move_version(
        &self,
        actor: Actor,
        publisher: Option<PublisherId>,
        version: ListingVersionId,
        to: VersionState,
        action: &'static str,
        reason: Option<&str>,
        reviewed: Option<&str>,
        request_id: Option<&str>,
    ) -> Result<()>;
}

impl MarketplaceInternal for ControlPlane {
    #[allow(clippy::too_many_arguments)]
    #[tracing::instrument(skip_all, fields(listing.version = %version, listing.to = to.as_str()))]
    async fn move_version(
        &self,
        actor: Actor,
        publisher: Option<PublisherId>,
        version: ListingVersionId,
        to: VersionState,
        action: &'static str,
        reason: Option<&str>,
        reviewed: Option<&str>,
        request_id: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let row = sqlx::query!(
            r#"SELECT v.state, v.version, l.slug FROM listing_versions v
               JOIN listings l ON l.id = v.listing_id
               WHERE v.id = $1 AND ($2::uuid IS NULL OR l.publisher_id = $2)
               FOR UPDATE OF v"#,
            version as ListingVersionId,
            publisher.map(|p| p.0)
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound {
            what: "listing version",
        })?;
        if row.state == to.as_str() {
            return Err(Error::Conflict(format!(
                "version {} is already {}",
                row.version,
                to.as_str().replace('_', " ")
            )));
        }
        sqlx::query!(
            "UPDATE listing_versions SET state = $2, review_reason = $3 WHERE id = $1",
            version as ListingVersionId,
            to.as_str(),
            reason
        )
        .execute(&mut *tx)
        .await
        .map_err(refused)?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor,
                action,
                resource: &self.naming().listing(&row.slug),
                before: Some(json!({ "version": row.version, "state": row.state })),
                after: Some({
                    let mut after = json!({
                        "version": row.version,
                        "state": to.as_str(),
                        "reason": reason,
                    });
                    if let Some(digest) = reviewed {
                        after["reviewed_content"] = json!(digest);
                    }
                    after
                }),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// "70", "12.5" or "33.33" (percent) → basis points; `None` unless 0–100 with at most two
/// decimals. Decimal arithmetic: no float rounding.
fn percent_to_bps(s: &str) -> Option<i32> {
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |t: &str| t.chars().all(|c| c.is_ascii_digit());
    if whole.is_empty() || whole.len() > 3 || !digits(whole) || frac.len() > 2 || !digits(frac) {
        return None;
    }
    let bps = whole.parse::<i32>().ok()? * 100 + format!("{frac:0<2}").parse::<i32>().ok()?;
    (bps <= 10_000).then_some(bps)
}

async fn insert_version(
    conn: &mut PgConnection,
    who: &PublisherActor,
    listing: ListingId,
    d: &CheckedDraft,
) -> Result<ListingVersionId> {
    if who.publisher != PLATFORM_PUBLISHER && d.image_sha256.is_none() {
        return Err(invalid(
            "image_sha256",
            "give the SHA-256 of the image file (as `sha256sum` prints it): hosts launch a \
             publisher's image only if the file matches the reviewed checksum",
        ));
    }
    let id = ListingVersionId::new_random();
    let inserted = sqlx::query!(
        "INSERT INTO listing_versions (id, listing_id, version, summary, description_md,
                                       release_notes, image_source, ssh_user, cloud_init, shapes,
                                       gpu_models, min_gpus, fee_per_hour_minor, fee_currency,
                                       created_by, image_sha256, accepts_user_data)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
        id as ListingVersionId,
        listing as ListingId,
        d.version,
        d.summary,
        d.description_md,
        d.release_notes,
        d.image_source,
        d.ssh_user,
        d.cloud_init,
        &d.shapes,
        &d.gpu_models,
        d.min_gpus,
        d.fee.as_ref().map_or(0, |f| f.amount_minor),
        d.fee.as_ref().map(|f| f.currency.as_str()),
        who.user as UserId,
        d.image_sha256,
        d.accepts_user_data
    )
    .execute(&mut *conn)
    .await;
    match inserted {
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Err(invalid(
            "version",
            format!(
                "version {} exists already; versions are never reused",
                d.version
            ),
        )),
        other => {
            other.map_err(refused)?;
            Ok(id)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revenue_shares_are_exact_percentages() {
        assert_eq!(percent_to_bps("70"), Some(7000));
        assert_eq!(percent_to_bps("12.34"), Some(1234));
        assert_eq!(percent_to_bps("12.5"), Some(1250));
        assert_eq!(percent_to_bps("100"), Some(10_000));
        for bad in ["100.01", "-5", "1.234", "", ".5", "7o", "1000"] {
            assert_eq!(percent_to_bps(bad), None, "{bad}");
        }
    }

    #[test]
    fn drafts_are_checked_field_by_field() {
        let good = VersionDraft {
            version: "2.5.1".into(),
            summary: "PyTorch".into(),
            image_source: "/var/lib/gpuaas/images/pytorch.qcow2".into(),
            ssh_user: "ubuntu".into(),
            cloud_init: r#"{"packages": ["nvtop"]}"#.into(),
            shapes: "gpu_slice, baremetal".into(),
            fee: "0.25 USD".into(),
            ..Default::default()
        };
        let c = CheckedDraft::check(&good).unwrap();
        assert_eq!(c.shapes, vec!["gpu_slice", "baremetal"]);
        assert_eq!(c.fee.unwrap().amount_minor, 25);
        let field = |d: VersionDraft| match CheckedDraft::check(&d) {
            Err(Error::Invalid { field, .. }) => field,
            other => panic!("expected a refusal, got {:?}", other.map(|c| c.version)),
        };
        for (d, f) in [
            (
                VersionDraft {
                    version: "two words".into(),
                    ..good.clone()
                },
                "version",
            ),
            (
                VersionDraft {
                    cloud_init: "[1]".into(),
                    ..good.clone()
                },
                "cloud_init",
            ),
            (
                VersionDraft {
                    cloud_init: r#"{"users": []}"#.into(),
                    ..good.clone()
                },
                "cloud_init",
            ),
            (
                VersionDraft {
                    cloud_init: "runcmd: [ls]".into(),
                    ..good.clone()
                },
                "cloud_init",
            ),
            (
                VersionDraft {
                    cloud_init: r#"{"runcmd": [["nvidia-smi"]]}"#.into(),
                    ..good.clone()
                },
                "cloud_init",
            ),
            (
                VersionDraft {
                    image_source: "/etc/shadow".into(),
                    ..good.clone()
                },
                "image_source",
            ),
            (
                VersionDraft {
                    image_source: "/var/lib/gpuaas/images/../../../root/disk.qcow2".into(),
                    ..good.clone()
                },
                "image_source",
            ),
            (
                VersionDraft {
                    shapes: "vm".into(),
                    ..good.clone()
                },
                "shapes",
            ),
            (
                VersionDraft {
                    shapes: "".into(),
                    ..good.clone()
                },
                "shapes",
            ),
            (
                VersionDraft {
                    min_gpus: "0".into(),
                    ..good.clone()
                },
                "min_gpus",
            ),
            (
                VersionDraft {
                    fee: "a lot".into(),
                    ..good.clone()
                },
                "fee",
            ),
            (
                VersionDraft {
                    ssh_user: "Root".into(),
                    ..good.clone()
                },
                "ssh_user",
            ),
            (
                VersionDraft {
                    image_source: "a b".into(),
                    ..good.clone()
                },
                "image_source",
            ),
            (
                VersionDraft {
                    summary: " ".into(),
                    ..good.clone()
                },
                "summary",
            ),
        ] {
            assert_eq!(field(d), f);
        }
    }
}
