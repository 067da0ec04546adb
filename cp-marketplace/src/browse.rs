//! Browsing the marketplace (no sign-in: published versions only), listing pages, logos,
//! and what a project may launch.

use cp_base::ControlPlane;
use cp_base::error::{Error, Result};
use cp_base::ids::{ProjectId, TenantId};
use cp_inventory::skus::{Sku, SkusApi};

use crate::versions::load_listings;
use portal_types::marketplace::{
    Browse, BrowseFilter, Category, FittingSku, Image, LaunchableListing, ListingCard, ListingPage,
};

/// What the control plane offers for browsing the marketplace and launching from it.
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
            let each = cp_inventory::placement::availability_of_each(&mut *conn, &skus).await?;
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
                // An OS image's name says what it is ("Ubuntu 24.04 + CUDA 12.6"); its version
                // is a revision ("1") that means nothing to whoever launches it. A stack's
                // version is part of what they choose ("vLLM 0.6.5").
                let name = match l.category {
                    Category::OsImage => l.name.clone(),
                    _ => format!("{} {}", l.name, v.version),
                };
                let label = match &fee {
                    Some(f) => format!("{name} (+{f} per hour)"),
                    None => name,
                };
                Some(LaunchableListing {
                    slug: l.slug.clone(),
                    label,
                    category: l.category,
                    fee,
                    published_ports: v.published_ports.clone(),
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
        use cp_identity::policy::{PolicyKey, PolicyValue, resolve_policies_on};
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
                    published_ports: v.published_ports.clone(),
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
}
