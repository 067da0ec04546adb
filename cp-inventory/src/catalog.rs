//! The public catalog: every SKU for sale with live availability per region, from the same
//! query placement uses, and why nothing could launch when nothing could.

use crate::internal::SkusInternal;

pub use crate::skus::{PerGpu, Shape, Sku, SkuInput, estimate};
use cp_base::ControlPlane;
use cp_base::error::Result;

pub use crate::placement::AvailabilityUpkeep;
pub use portal_types::catalog::{CatalogEntry, RegionAvailability};

/// What the control plane offers for the public catalog.
#[allow(async_fn_in_trait)]
pub trait CatalogApi {
    /// What the catalog shows for one SKU: launchable count per region, from the same query
    /// placement uses.
    async fn availability_of(&self, sku: &Sku) -> Result<Vec<(String, i64)>>;

    /// The public catalog: every active SKU with what could launch now in each of its
    /// regions (the same query placement uses), and why not when nothing could.
    async fn catalog(&self) -> Result<Vec<CatalogEntry>>;

    /// Keeps the count the catalog reads current: marks nodes whose heartbeat lapsed and folds
    /// the log of availability changes. Every replica runs it every second.
    async fn keep_availability(&self) -> Result<AvailabilityUpkeep>;

    /// Recounts availability from the nodes themselves and returns by how many launches the
    /// kept count was off (`None`: another replica holds the count at the moment). O(fleet);
    /// every minute.
    async fn rebase_availability(&self) -> Result<Option<i64>>;
}

impl CatalogApi for ControlPlane {
    async fn availability_of(&self, sku: &Sku) -> Result<Vec<(String, i64)>> {
        crate::placement::availability(&mut *self.pool().acquire().await?, sku).await
    }

    #[tracing::instrument(skip_all)]
    async fn catalog(&self) -> Result<Vec<CatalogEntry>> {
        let skus = self.all_skus(true).await?;
        let each = crate::placement::availability_of_each(self.pool(), &skus).await?;
        let mut out = Vec::with_capacity(skus.len());
        for (sku, found) in skus.into_iter().zip(each) {
            let availability: Vec<RegionAvailability> = sku
                .regions
                .iter()
                .map(|r| RegionAvailability {
                    region: r.clone(),
                    launchable: found
                        .iter()
                        .find(|(region, _)| region == r)
                        .map(|(_, n)| *n)
                        .unwrap_or(0),
                })
                .collect();
            let unavailable_because = if availability.iter().all(|a| a.launchable == 0) {
                let reasons = self.refusal_reasons();
                Some(
                    match crate::placement::explain_kept(reasons, &sku, &sku.regions) {
                        Some(why) => why,
                        // A connection held only to count (sqlx checks each as it comes back).
                        None => {
                            let mut conn = self.pool().acquire().await?;
                            crate::placement::explain_now(&mut conn, reasons, &sku, &sku.regions)
                                .await?
                        }
                    },
                )
            } else {
                None
            };
            out.push(CatalogEntry {
                sku,
                availability,
                unavailable_because,
            });
        }
        Ok(out)
    }

    async fn keep_availability(&self) -> Result<AvailabilityUpkeep> {
        let owed = self.shared::<crate::placement::LogUpkeep>();
        crate::placement::sweep_and_compact(self.pool().sqlx(), &owed).await
    }

    async fn rebase_availability(&self) -> Result<Option<i64>> {
        let off = crate::placement::rebase(self.pool().sqlx()).await?;
        if let Some(off) = off {
            self.metrics().availability_recounted(off);
            if off != 0 {
                tracing::warn!(
                    availability.off_by = off,
                    "the kept availability count differed from a recount of the nodes; corrected"
                );
            }
        }
        Ok(off)
    }
}
