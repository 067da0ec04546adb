//! Listings and versions: publishers draft and submit them, operators approve, reject,
//! publish, deprecate and withdraw; the database's guard holds the state machine.

use serde::{Deserialize, Serialize};
use serde_json::json;

use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{ListingId, ListingVersionId, PublisherId, UserId};
use cp_identity::auth::{Platform, PlatformOperators};

use crate::publishers::{PLATFORM_PUBLISHER, PublisherActor};
use crate::versions::{
    CheckedDraft, VersionDraft, VersionReview, bounded, content_digest, fee_of, load_listings,
    versions_of,
};
use crate::{invalid, refused};
use portal_types::marketplace::{Category, Listing, Version, VersionRow, VersionState};
use sqlx::PgConnection;

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

/// What the control plane offers for drafting listings and versions and curating them.
#[allow(async_fn_in_trait)]
pub trait ListingsApi {
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
}

impl ListingsApi for ControlPlane {
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
                                       created_by, image_sha256, accepts_user_data,
                                       published_ports)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
                 $18)",
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
        d.accepts_user_data,
        &d.published_ports
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
