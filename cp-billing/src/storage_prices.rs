//! What storage costs: one price per region, per GiB-month of 730 hours, set by platform
//! operators beside the SKUs' prices. A volume takes the price in force when it is made and
//! keeps it (migration 0050), as an instance keeps its launch price; rating does the rest.

use serde_json::json;
use sqlx::PgConnection;

use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_identity::auth::{Platform, PlatformOperators};
pub use portal_types::volumes::StoragePrice;

/// The region names volumes and SKUs use.
fn region_ok(region: &str) -> bool {
    let b = region.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// What the control plane offers for storage prices.
#[allow(async_fn_in_trait)]
pub trait StoragePricesApi {
    /// Every region's storage price, by region: public, as SKU prices are.
    async fn storage_prices(&self) -> Result<Vec<StoragePrice>>;

    /// Sets (or changes) a region's price per GiB-month, typed as `0.10 USD`. Volumes made
    /// before keep theirs.
    async fn set_storage_price(
        &self,
        who: &Platform<PlatformOperators>,
        region: &str,
        price: &str,
        request_id: Option<&str>,
    ) -> Result<StoragePrice>;
}

impl StoragePricesApi for ControlPlane {
    async fn storage_prices(&self) -> Result<Vec<StoragePrice>> {
        Ok(sqlx::query!(
            "SELECT region, currency, price_per_gib_month_micro FROM storage_prices ORDER BY region"
        )
        .fetch_all(self.pool())
        .await?
        .into_iter()
        .map(|r| StoragePrice {
            region: r.region,
            currency: r.currency.into(),
            per_gib_month_micro: r.price_per_gib_month_micro,
        })
        .collect())
    }

    #[tracing::instrument(skip_all, fields(region = %region))]
    async fn set_storage_price(
        &self,
        who: &Platform<PlatformOperators>,
        region: &str,
        price: &str,
        request_id: Option<&str>,
    ) -> Result<StoragePrice> {
        let region = region.trim();
        if !region_ok(region) {
            return Err(Error::Invalid {
                field: "region",
                reason: format!(
                    "{region:?} is not a region name: lower-case letters, digits and dashes"
                ),
            });
        }
        let new = StoragePrice::parse("price", region, price)?;
        let mut tx = self.pool().begin().await?;
        let before = price_in(&mut tx, region).await?;
        sqlx::query!(
            "INSERT INTO storage_prices (region, currency, price_per_gib_month_micro, updated_by)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (region) DO UPDATE SET
                 currency = EXCLUDED.currency,
                 price_per_gib_month_micro = EXCLUDED.price_per_gib_month_micro,
                 updated_by = EXCLUDED.updated_by, updated_at = now()",
            region,
            new.currency.as_str(),
            new.per_gib_month_micro,
            who.principal().user_id.0
        )
        .execute(&mut *tx)
        .await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.principal().user_id),
                action: "storage_price.set",
                resource: &self.naming().platform(&format!("storage_price.{region}")),
                before: before.map(|p| json!({ "per_gib_month": p.per_gib_month() })),
                after: Some(json!({ "per_gib_month": new.per_gib_month() })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(new)
    }
}

/// The storage price in force in `region`, read in the caller's transaction and held until it
/// commits (a volume made under it is made at it).
pub async fn price_in(conn: &mut PgConnection, region: &str) -> Result<Option<StoragePrice>> {
    Ok(sqlx::query!(
        "SELECT currency, price_per_gib_month_micro FROM storage_prices
         WHERE region = $1 FOR SHARE",
        region
    )
    .fetch_optional(&mut *conn)
    .await?
    .map(|r| StoragePrice {
        region: region.to_owned(),
        currency: r.currency.into(),
        per_gib_month_micro: r.price_per_gib_month_micro,
    }))
}

#[cfg(test)]
mod tests {
    use super::region_ok;

    #[test]
    fn region_names_are_those_volumes_take() {
        for good in ["eu-west-1", "a", "us-east-2b"] {
            assert!(region_ok(good), "{good}");
        }
        for bad in [
            "",
            "-eu",
            "eu-",
            "EU-west",
            "eu west",
            "eu_west",
            &"a".repeat(64),
        ] {
            assert!(!region_ok(bad), "{bad}");
        }
    }
}
