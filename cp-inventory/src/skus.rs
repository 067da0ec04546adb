//! SKUs: what is sold (a shape, a GPU model and count, the resources, the regions), at what
//! hourly price. The inventory's vocabulary: placement reads SKUs, and the catalog reads both.

use serde_json::json;

use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::db::OnConstraint;
use cp_base::error::{Error, Result};
use cp_base::ids::SkuId;
use cp_identity::auth::{Platform, PlatformOperators, PlatformStaff};
use portal_types::Money;

pub use portal_types::{Shape, SkuInput};

/// A SKU and what each of its GPUs brings (shared with the pages and the API).
pub use portal_types::catalog::{PerGpu, Sku};

/// The cost of `hours` at `price` per hour, rounded up to the minor unit.
pub fn estimate(price: &Money, hours: u32) -> Result<Money> {
    price
        .amount_minor
        .checked_mul(hours as i64)
        .map(|amount_minor| Money {
            amount_minor,
            currency: price.currency.clone(),
        })
        .ok_or_else(|| Error::Invalid {
            field: "hours",
            reason: format!("{hours} hours is too long to estimate"),
        })
}

fn number(field: &'static str, input: &str, min: i32, max: i32) -> Result<i32> {
    input
        .trim()
        .parse::<i32>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| Error::Invalid {
            field,
            reason: format!("{:?}: use a whole number from {min} to {max}", input.trim()),
        })
}

fn slug_list(field: &'static str, input: &str, what: &str) -> Result<Vec<String>> {
    let mut items: Vec<String> = input
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    if items.is_empty() {
        return Err(Error::Invalid {
            field,
            reason: format!("name at least one {what}"),
        });
    }
    if let Some(bad) = items.iter().find(|s| {
        s.len() < 2
            || s.len() > 64
            || !s.starts_with(|c: char| c.is_ascii_alphanumeric())
            || !s.ends_with(|c: char| c.is_ascii_alphanumeric())
            || !s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    }) {
        return Err(Error::Invalid {
            field,
            reason: format!("{bad:?} is not a {what}: use lowercase letters, digits and '-'"),
        });
    }
    items.sort();
    items.dedup();
    Ok(items)
}

/// A checked SKU, ready to store.
struct ValidSku {
    name: String,
    display_name: String,
    shape: Shape,
    gpu_model: String,
    gpu_count: i32,
    vcpus: i32,
    memory_gib: i32,
    nvme_gib: i32,
    regions: Vec<String>,
    families: Vec<String>,
    price: Money,
}

/// Checks what an operator typed, field by field.
fn validate(input: &SkuInput) -> Result<ValidSku> {
    let name = input.name.trim().to_ascii_lowercase();
    if name.is_empty()
        || name.len() > 63
        || !name.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(Error::Invalid {
            field: "name",
            reason: format!(
                "{name:?}: use lowercase letters, digits, '.', '_' and '-' (e.g. h100.2x)"
            ),
        });
    }
    let display_name = input.display_name.trim().to_string();
    if display_name.is_empty() || display_name.chars().count() > 100 {
        return Err(Error::Invalid {
            field: "display_name",
            reason: "use 1 to 100 characters".into(),
        });
    }
    let shape = Shape::parse(&input.shape)?;
    let gpu_model = input.gpu_model.trim().to_string();
    if gpu_model.is_empty() || gpu_model.len() > 100 {
        return Err(Error::Invalid {
            field: "gpu_model",
            reason: "name the GPU model as discovery reports it (e.g. NVIDIA H100 80GB HBM3)"
                .into(),
        });
    }
    let gpu_count = number("gpu_count", &input.gpu_count, 1, 16)?;
    if shape == Shape::GpuSlice && ![1, 2, 4, 8].contains(&gpu_count) {
        return Err(Error::Invalid {
            field: "gpu_count",
            reason: format!("a gpu_slice has 1, 2, 4 or 8 GPUs, not {gpu_count}"),
        });
    }
    let price = Money::parse_hourly("price_per_hour", &input.price_per_hour)?;
    if price.amount_minor <= 0 {
        return Err(Error::Invalid {
            field: "price_per_hour",
            reason: "a price must be above zero".into(),
        });
    }
    Ok(ValidSku {
        name,
        display_name,
        shape,
        gpu_model,
        gpu_count,
        vcpus: number("vcpus", &input.vcpus, 1, 1024)?,
        memory_gib: number("memory_gib", &input.memory_gib, 1, 65536)?,
        nvme_gib: number("nvme_gib", &input.nvme_gib, 0, 1_048_576)?,
        regions: slug_list("regions", &input.regions, "region")?,
        families: slug_list("families", &input.families, "node family")?,
        price,
    })
}

struct SkuRow {
    id: SkuId,
    name: String,
    display_name: String,
    shape: String,
    gpu_model: String,
    gpu_count: i32,
    vcpus: i32,
    memory_gib: i32,
    nvme_gib: i32,
    regions: Vec<String>,
    families: Vec<String>,
    price_per_hour_minor: i64,
    currency: String,
    state: String,
}

impl TryFrom<SkuRow> for Sku {
    type Error = Error;
    fn try_from(r: SkuRow) -> Result<Sku> {
        Ok(Sku {
            id: r.id,
            name: r.name,
            display_name: r.display_name,
            shape: Shape::parse(&r.shape)?,
            gpu_model: r.gpu_model,
            gpu_count: r.gpu_count,
            vcpus: r.vcpus,
            memory_gib: r.memory_gib,
            nvme_gib: r.nvme_gib,
            regions: r.regions,
            families: r.families,
            price: Money {
                amount_minor: r.price_per_hour_minor,
                currency: r.currency.into(),
            },
            state: r.state,
        })
    }
}

/// One SKU by name.
pub async fn sku_by_name(conn: &mut sqlx::PgConnection, name: &str) -> Result<Sku> {
    sqlx::query_as!(
        SkuRow,
        r#"SELECT id AS "id: SkuId", name, display_name, shape, gpu_model, gpu_count, vcpus,
                  memory_gib, nvme_gib, regions, families, price_per_hour_minor, currency, state
           FROM skus WHERE name = $1"#,
        name.trim().to_ascii_lowercase()
    )
    .fetch_optional(conn)
    .await?
    .ok_or(Error::NotFound { what: "SKU" })?
    .try_into()
}

/// What the control plane offers for the SKUs.
#[allow(async_fn_in_trait)]
pub trait SkusApi {
    /// Every SKU, drafts and retired ones included, for platform staff.
    async fn skus(&self, _who: &Platform<PlatformStaff>) -> Result<Vec<Sku>>;

    /// Creates a SKU (as a draft), or edits one that is not retired. Editing an active SKU's
    /// price changes what new launches pay; running allocations keep theirs.
    async fn save_sku(
        &self,
        who: &Platform<PlatformOperators>,
        id: Option<SkuId>,
        input: &SkuInput,
        request_id: Option<&str>,
    ) -> Result<SkuId>;

    /// `active` (sold) or `retired` (never again). Retiring keeps running allocations.
    async fn set_sku_state(
        &self,
        who: &Platform<PlatformOperators>,
        id: SkuId,
        state: &str,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// The SKUs for sale, for anyone (the launch form lists them).
    async fn active_skus(&self) -> Result<Vec<Sku>>;
}

impl SkusApi for ControlPlane {
    async fn skus(&self, _who: &Platform<PlatformStaff>) -> Result<Vec<Sku>> {
        self.all_skus(false).await
    }

    #[tracing::instrument(skip_all, fields(sku.name = %input.name))]
    async fn save_sku(
        &self,
        who: &Platform<PlatformOperators>,
        id: Option<SkuId>,
        input: &SkuInput,
        request_id: Option<&str>,
    ) -> Result<SkuId> {
        let v = validate(input)?;
        let mut tx = self.pool().begin().await?;
        let before = match id {
            Some(id) => {
                let state = sqlx::query_scalar!(
                    "SELECT state FROM skus WHERE id = $1 FOR UPDATE",
                    id as SkuId
                )
                .fetch_optional(&mut *tx)
                .await?
                .ok_or(Error::NotFound { what: "SKU" })?;
                if state == "retired" {
                    return Err(Error::Conflict(format!(
                        "SKU {} is retired and can't be edited; create a new one",
                        v.name
                    )));
                }
                Some(state)
            }
            None => None,
        };
        let id = id.unwrap_or_else(SkuId::new_random);
        sqlx::query!(
            r#"INSERT INTO skus (id, name, display_name, shape, gpu_model, gpu_count, vcpus,
                                 memory_gib, nvme_gib, regions, families, price_per_hour_minor,
                                 currency)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
               ON CONFLICT (id) DO UPDATE SET
                   name = EXCLUDED.name, display_name = EXCLUDED.display_name,
                   shape = EXCLUDED.shape, gpu_model = EXCLUDED.gpu_model,
                   gpu_count = EXCLUDED.gpu_count, vcpus = EXCLUDED.vcpus,
                   memory_gib = EXCLUDED.memory_gib, nvme_gib = EXCLUDED.nvme_gib,
                   regions = EXCLUDED.regions, families = EXCLUDED.families,
                   price_per_hour_minor = EXCLUDED.price_per_hour_minor,
                   currency = EXCLUDED.currency, updated_at = now()"#,
            id as SkuId,
            v.name,
            v.display_name,
            v.shape.as_str(),
            v.gpu_model,
            v.gpu_count,
            v.vcpus,
            v.memory_gib,
            v.nvme_gib,
            &v.regions,
            &v.families,
            v.price.amount_minor,
            v.price.currency.as_str(),
        )
        .execute(&mut *tx)
        .await
        .on_constraint("skus_name_key", || Error::Invalid {
            field: "name",
            reason: format!("a SKU named {} exists already", v.name),
        })?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.principal().user_id),
                action: if before.is_some() {
                    "sku.update"
                } else {
                    "sku.create"
                },
                resource: &self.naming().sku(&v.name),
                before: before.map(|s| json!({ "state": s })),
                after: Some(json!({
                    "shape": v.shape.as_str(), "gpu_model": v.gpu_model,
                    "gpu_count": v.gpu_count, "regions": v.regions, "families": v.families,
                    "price_per_hour": v.price.to_string(),
                })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(id)
    }

    #[tracing::instrument(skip_all, fields(sku.id = %id, sku.state = state))]
    async fn set_sku_state(
        &self,
        who: &Platform<PlatformOperators>,
        id: SkuId,
        state: &str,
        request_id: Option<&str>,
    ) -> Result<()> {
        if !matches!(state, "active" | "retired") {
            return Err(Error::Invalid {
                field: "state",
                reason: format!("{state:?} is not active or retired"),
            });
        }
        let mut tx = self.pool().begin().await?;
        let row = sqlx::query!(
            "SELECT name, state FROM skus WHERE id = $1 FOR UPDATE",
            id as SkuId
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "SKU" })?;
        if row.state == "retired" {
            return Err(Error::Conflict(format!(
                "SKU {} is retired; retiring is final",
                row.name
            )));
        }
        if row.state == state {
            return Ok(());
        }
        sqlx::query!(
            "UPDATE skus SET state = $2, updated_at = now() WHERE id = $1",
            id as SkuId,
            state
        )
        .execute(&mut *tx)
        .await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.principal().user_id),
                action: if state == "active" {
                    "sku.activate"
                } else {
                    "sku.retire"
                },
                resource: &self.naming().sku(&row.name),
                before: Some(json!({ "state": row.state })),
                after: Some(json!({ "state": state })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn active_skus(&self) -> Result<Vec<Sku>> {
        self.all_skus(true).await
    }
}

/// The trait is public for the area crates above (through `internal`), which the facade
/// does not re-export.
pub(crate) mod hidden {
    use super::*;

    /// What the other areas of this crate use of it, behind no proof: never for the pages or the API.
    #[allow(async_fn_in_trait)]
    pub trait SkusInternal {
        async fn all_skus(&self, active_only: bool) -> Result<Vec<Sku>>;
    }
}
pub(crate) use hidden::SkusInternal;

impl SkusInternal for ControlPlane {
    async fn all_skus(&self, active_only: bool) -> Result<Vec<Sku>> {
        sqlx::query_as!(
            SkuRow,
            r#"SELECT id AS "id: SkuId", name, display_name, shape, gpu_model, gpu_count, vcpus,
                      memory_gib, nvme_gib, regions, families, price_per_hour_minor, currency,
                      state
               FROM skus WHERE state = 'active' OR NOT $1
               ORDER BY state = 'retired', gpu_model, shape DESC, gpu_count, name"#,
            active_only
        )
        .fetch_all(self.pool())
        .await?
        .into_iter()
        .map(Sku::try_from)
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> SkuInput {
        SkuInput {
            name: "h100.2x".into(),
            display_name: "2× H100".into(),
            shape: "gpu_slice".into(),
            gpu_model: "NVIDIA H100 80GB HBM3".into(),
            gpu_count: "2".into(),
            vcpus: "26".into(),
            memory_gib: "400".into(),
            nvme_gib: "7000".into(),
            regions: "eu-west, us-east".into(),
            families: "hgx-h100-8x".into(),
            price_per_hour: "5.98 USD".into(),
        }
    }

    #[test]
    fn sku_input_is_checked_field_by_field() {
        let v = validate(&input()).unwrap();
        assert_eq!(v.regions, vec!["eu-west", "us-east"]);
        assert_eq!(v.price.amount_minor, 598);
        let bad = |f: fn(&mut SkuInput), field: &str| {
            let mut i = input();
            f(&mut i);
            match validate(&i) {
                Err(Error::Invalid { field: got, .. }) => assert_eq!(got, field),
                Err(e) => panic!("{e}"),
                Ok(_) => panic!("accepted a bad {field}"),
            }
        };
        bad(|i| i.gpu_count = "3".into(), "gpu_count");
        bad(|i| i.shape = "vm".into(), "shape");
        bad(|i| i.price_per_hour = "1.999 USD".into(), "price_per_hour");
        bad(|i| i.price_per_hour = "0 USD".into(), "price_per_hour");
        bad(|i| i.regions = " , ".into(), "regions");
        bad(|i| i.families = "HGX H100".into(), "families");
        bad(|i| i.name = "H100 two".into(), "name");
        let mut bm = input();
        bm.shape = "baremetal".into();
        bm.gpu_count = "8".into();
        assert!(validate(&bm).is_ok());
    }

    #[test]
    fn per_gpu_shares_round_up_and_estimates_are_exact() {
        let mut v = validate(&input()).unwrap();
        v.vcpus = 25;
        let sku = Sku {
            id: SkuId::new_random(),
            name: v.name,
            display_name: v.display_name,
            shape: v.shape,
            gpu_model: v.gpu_model,
            gpu_count: v.gpu_count,
            vcpus: v.vcpus,
            memory_gib: v.memory_gib,
            nvme_gib: v.nvme_gib,
            regions: v.regions,
            families: v.families,
            price: v.price,
            state: "active".into(),
        };
        let p = sku.per_gpu();
        assert_eq!(p.vcpus, 13);
        assert_eq!(p.memory_mib, 200 * 1024);
        let e = estimate(&sku.price, 24).unwrap();
        assert_eq!(e.to_string(), "143.52 USD");
    }
}
