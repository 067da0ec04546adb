//! The catalog: SKUs (what is sold, at what hourly price), the images tenants may launch, and
//! the public catalog with live availability per region.

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::ControlPlane;
use crate::audit::{self, Actor, AuditEntry};
use crate::auth::{Platform, PlatformOperators, PlatformStaff};
use crate::db::OnConstraint;
use crate::error::{Error, Result};
use crate::ids::SkuId;
use crate::policy::Money;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Shape {
    /// One whole enrolled node.
    Baremetal,
    /// One or more approved slots on one node.
    GpuSlice,
}

impl Shape {
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::Baremetal => "baremetal",
            Shape::GpuSlice => "gpu_slice",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        match s.trim() {
            "baremetal" => Ok(Shape::Baremetal),
            "gpu_slice" => Ok(Shape::GpuSlice),
            other => Err(Error::Invalid {
                field: "shape",
                reason: format!("{other:?} is not baremetal or gpu_slice"),
            }),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sku {
    pub id: SkuId,
    pub name: String,
    pub display_name: String,
    pub shape: Shape,
    pub gpu_model: String,
    pub gpu_count: i32,
    pub vcpus: i32,
    pub memory_gib: i32,
    pub nvme_gib: i32,
    pub regions: Vec<String>,
    pub families: Vec<String>,
    /// Per hour.
    pub price: Money,
    /// `draft`, `active` or `retired`.
    pub state: String,
}

/// What each slot of a slice must at least have: the SKU's resources divided by its GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerGpu {
    pub vcpus: i32,
    pub memory_mib: i64,
    pub nvme_bytes: i64,
}

impl Sku {
    pub fn per_gpu(&self) -> PerGpu {
        let n = self.gpu_count.max(1) as i64;
        PerGpu {
            vcpus: ((self.vcpus as i64 + n - 1) / n) as i32,
            memory_mib: (self.memory_gib as i64 * 1024 + n - 1) / n,
            nvme_bytes: (self.nvme_gib as i64 * (1 << 30) + n - 1) / n,
        }
    }
}

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

/// What an operator types into the SKU form.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkuInput {
    pub name: String,
    pub display_name: String,
    pub shape: String,
    pub gpu_model: String,
    pub gpu_count: String,
    pub vcpus: String,
    pub memory_gib: String,
    pub nvme_gib: String,
    /// Comma-separated.
    pub regions: String,
    /// Comma-separated.
    pub families: String,
    /// `12.50 USD`.
    pub price_per_hour: String,
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

impl SkuInput {
    fn validate(&self) -> Result<ValidSku> {
        let name = self.name.trim().to_ascii_lowercase();
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
        let display_name = self.display_name.trim().to_string();
        if display_name.is_empty() || display_name.chars().count() > 100 {
            return Err(Error::Invalid {
                field: "display_name",
                reason: "use 1 to 100 characters".into(),
            });
        }
        let shape = Shape::parse(&self.shape)?;
        let gpu_model = self.gpu_model.trim().to_string();
        if gpu_model.is_empty() || gpu_model.len() > 100 {
            return Err(Error::Invalid {
                field: "gpu_model",
                reason: "name the GPU model as discovery reports it (e.g. NVIDIA H100 80GB HBM3)"
                    .into(),
            });
        }
        let gpu_count = number("gpu_count", &self.gpu_count, 1, 16)?;
        if shape == Shape::GpuSlice && ![1, 2, 4, 8].contains(&gpu_count) {
            return Err(Error::Invalid {
                field: "gpu_count",
                reason: format!("a gpu_slice has 1, 2, 4 or 8 GPUs, not {gpu_count}"),
            });
        }
        let price = Money::parse_hourly("price_per_hour", &self.price_per_hour)?;
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
            vcpus: number("vcpus", &self.vcpus, 1, 1024)?,
            memory_gib: number("memory_gib", &self.memory_gib, 1, 65536)?,
            nvme_gib: number("nvme_gib", &self.nvme_gib, 0, 1_048_576)?,
            regions: slug_list("regions", &self.regions, "region")?,
            families: slug_list("families", &self.families, "node family")?,
            price,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionAvailability {
    pub region: String,
    /// How many of this SKU could launch there right now.
    pub launchable: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogEntry {
    pub sku: Sku,
    /// Every region of the SKU, in order, with what could launch now.
    pub availability: Vec<RegionAvailability>,
    /// When nothing could launch anywhere: why (placement's explanation).
    pub unavailable_because: Option<String>,
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
                currency: r.currency,
            },
            state: r.state,
        })
    }
}

/// One SKU by name.
pub(crate) async fn sku_by_name(conn: &mut sqlx::PgConnection, name: &str) -> Result<Sku> {
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

impl ControlPlane {
    /// Every SKU, drafts and retired ones included, for platform staff.
    pub async fn skus(&self, _who: &Platform<PlatformStaff>) -> Result<Vec<Sku>> {
        self.all_skus(false).await
    }

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

    /// Creates a SKU (as a draft), or edits one that is not retired. Editing an active SKU's
    /// price changes what new launches pay; running allocations keep theirs.
    #[tracing::instrument(skip_all, fields(sku.name = %input.name))]
    pub async fn save_sku(
        &self,
        who: &Platform<PlatformOperators>,
        id: Option<SkuId>,
        input: &SkuInput,
        request_id: Option<&str>,
    ) -> Result<SkuId> {
        let v = input.validate()?;
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
            v.price.currency,
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

    /// `active` (sold) or `retired` (never again). Retiring keeps running allocations.
    #[tracing::instrument(skip_all, fields(sku.id = %id, sku.state = state))]
    pub async fn set_sku_state(
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

    /// The SKUs for sale, for anyone (the launch form lists them).
    pub async fn active_skus(&self) -> Result<Vec<Sku>> {
        self.all_skus(true).await
    }

    /// What the catalog shows for one SKU: launchable count per region, from the same query
    /// placement uses.
    pub async fn availability_of(&self, sku: &Sku) -> Result<Vec<(String, i64)>> {
        crate::placement::availability(&mut *self.pool().acquire().await?, sku).await
    }

    /// The public catalog: every active SKU with what could launch now in each of its
    /// regions (the same query placement uses), and why not when nothing could.
    #[tracing::instrument(skip_all)]
    pub async fn catalog(&self) -> Result<Vec<CatalogEntry>> {
        let skus = self.all_skus(true).await?;
        let mut conn = self.pool().acquire().await?;
        let mut out = Vec::with_capacity(skus.len());
        for sku in skus {
            let found = crate::placement::availability(&mut conn, &sku).await?;
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
                Some(crate::placement::explain(&mut conn, &sku, &sku.regions).await?)
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
        let v = input().validate().unwrap();
        assert_eq!(v.regions, vec!["eu-west", "us-east"]);
        assert_eq!(v.price.amount_minor, 598);
        let bad = |f: fn(&mut SkuInput), field: &str| {
            let mut i = input();
            f(&mut i);
            match i.validate() {
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
        assert!(bm.validate().is_ok());
    }

    #[test]
    fn per_gpu_shares_round_up_and_estimates_are_exact() {
        let mut v = input().validate().unwrap();
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
