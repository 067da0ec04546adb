//! What is for sale: SKUs and the public catalog with live availability, as the catalog
//! pages and the API's offers show them.

use serde::{Deserialize, Serialize};

use crate::{Money, Shape, SkuId};

/// A SKU: one shape of machine at one hourly price, sold in some regions.
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
    /// The SKU's resources per GPU, rounded up.
    pub fn per_gpu(&self) -> PerGpu {
        let n = self.gpu_count.max(1) as i64;
        PerGpu {
            vcpus: ((self.vcpus as i64 + n - 1) / n) as i32,
            memory_mib: (self.memory_gib as i64 * 1024 + n - 1) / n,
            nvme_bytes: (self.nvme_gib as i64 * (1 << 30) + n - 1) / n,
        }
    }
}

/// How many of a SKU could launch in one region right now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionAvailability {
    pub region: String,
    /// The number placement would honour now.
    pub launchable: i64,
}

/// One SKU for sale, with what could launch now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogEntry {
    pub sku: Sku,
    /// Every region of the SKU, in order, with what could launch now.
    pub availability: Vec<RegionAvailability>,
    /// When nothing could launch anywhere: why (placement's explanation).
    pub unavailable_because: Option<String>,
}

/// One SKU in one region, as other GPU clouds list their offers: what it is, what it costs per
/// hour, and how many could launch there now (the number placement would honour).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Offer {
    /// The SKU's name, what a launch asks for: `h100.1x`.
    pub sku: String,
    pub display_name: String,
    pub shape: Shape,
    pub gpu_model: String,
    pub gpu_count: i32,
    pub vcpus: i32,
    pub memory_gib: i32,
    /// Local NVMe.
    pub disk_gib: i32,
    pub region: String,
    pub price_per_hour: Money,
    pub launchable: i64,
}

/// Every (SKU, region) of the catalog as an offer, in the catalog's order, keeping those in
/// `region` and with `gpu_model` when given.
pub fn offers(
    catalog: &[CatalogEntry],
    region: Option<&str>,
    gpu_model: Option<&str>,
) -> Vec<Offer> {
    catalog
        .iter()
        .filter(|e| gpu_model.is_none_or(|m| e.sku.gpu_model == m))
        .flat_map(|e| {
            e.availability
                .iter()
                .filter(|a| region.is_none_or(|r| a.region == r))
                .map(|a| Offer {
                    sku: e.sku.name.clone(),
                    display_name: e.sku.display_name.clone(),
                    shape: e.sku.shape,
                    gpu_model: e.sku.gpu_model.clone(),
                    gpu_count: e.sku.gpu_count,
                    vcpus: e.sku.vcpus,
                    memory_gib: e.sku.memory_gib,
                    disk_gib: e.sku.nvme_gib,
                    region: a.region.clone(),
                    price_per_hour: e.sku.price.clone(),
                    launchable: a.launchable,
                })
        })
        .collect()
}
