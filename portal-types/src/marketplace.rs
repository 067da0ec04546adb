//! What everyone reads of the marketplace: listings, their versions and what each needs of a
//! SKU (`Compatibility`, whose rule the allocation trigger checks too), the cards of the public
//! browse page, and the SKUs a listing fits with live availability. The publisher's and the
//! operators' own pages (drafts, the review queue, payables) stay in the control plane.

use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::catalog::Sku;
use crate::{Invalid, ListingId, ListingVersionId, Money, PublisherId, Shape, TenantId};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Category {
    OsImage,
    MlStack,
    App,
}

impl Category {
    pub const ALL: [Category; 3] = [Category::OsImage, Category::MlStack, Category::App];

    pub fn as_str(self) -> &'static str {
        match self {
            Category::OsImage => "os_image",
            Category::MlStack => "ml_stack",
            Category::App => "app",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Category::OsImage => "OS images with GPU drivers",
            Category::MlStack => "ML stacks",
            Category::App => "Apps with their own scheduler",
        }
    }

    pub fn parse(s: &str) -> Result<Self, Invalid> {
        Category::ALL
            .into_iter()
            .find(|c| c.as_str() == s.trim())
            .ok_or_else(|| {
                Invalid::new("category", format!("{s:?}: use os_image, ml_stack or app"))
            })
    }
}

/// What a version needs of a SKU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compatibility {
    pub shapes: Vec<Shape>,
    /// Empty: any GPU model.
    pub gpu_models: Vec<String>,
    pub min_gpus: i32,
    /// Per allocation-hour, on top of the SKU's price.
    pub fee: Option<Money>,
}

impl Compatibility {
    /// Whether a launch of this version on `sku` is possible (the allocation trigger checks
    /// the same rule). A fee in one currency fits only SKUs priced in it.
    pub fn fits(&self, sku: &Sku) -> bool {
        self.why_not(sku).is_none()
    }

    /// Why `sku` doesn't fit, in words; `None` when it does.
    pub fn why_not(&self, sku: &Sku) -> Option<String> {
        if !self.shapes.contains(&sku.shape) {
            let shapes: Vec<&str> = self.shapes.iter().map(|s| s.as_str()).collect();
            return Some(format!(
                "it runs on {}, and {} is {}",
                shapes.join(" or "),
                sku.name,
                sku.shape.as_str()
            ));
        }
        if sku.gpu_count < self.min_gpus {
            return Some(format!(
                "it needs at least {} GPUs, and {} has {}",
                self.min_gpus, sku.name, sku.gpu_count
            ));
        }
        if !self.gpu_models.is_empty() && !self.gpu_models.contains(&sku.gpu_model) {
            return Some(format!(
                "it supports {}, and {} has {}",
                self.gpu_models.join(", "),
                sku.name,
                sku.gpu_model
            ));
        }
        if let Some(fee) = &self.fee
            && fee.currency != sku.price.currency
        {
            return Some(format!(
                "its fee is in {}, and {} is priced in {}",
                fee.currency, sku.name, sku.price.currency
            ));
        }
        None
    }

    /// SKU plus fee, per hour.
    pub fn total_price(&self, sku: &Sku) -> Money {
        Money {
            amount_minor: sku.price.amount_minor + self.fee.as_ref().map_or(0, |f| f.amount_minor),
            currency: sku.price.currency.clone(),
        }
    }
}

/// A version's curation state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum VersionState {
    Draft,
    InReview,
    Approved,
    Rejected,
    Published,
    Deprecated,
    Withdrawn,
}

impl VersionState {
    pub fn as_str(self) -> &'static str {
        match self {
            VersionState::Draft => "draft",
            VersionState::InReview => "in_review",
            VersionState::Approved => "approved",
            VersionState::Rejected => "rejected",
            VersionState::Published => "published",
            VersionState::Deprecated => "deprecated",
            VersionState::Withdrawn => "withdrawn",
        }
    }

    pub fn parse(s: &str) -> Result<Self, Invalid> {
        use VersionState::*;
        [
            Draft, InReview, Approved, Rejected, Published, Deprecated, Withdrawn,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
        .ok_or_else(|| Invalid::new("state", format!("{s:?} is not a listing version state")))
    }
}

impl fmt::Display for VersionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str().replace('_', " "))
    }
}

/// One version, as its publisher, operators and (published only) tenants read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub id: ListingVersionId,
    pub version: String,
    pub state: VersionState,
    pub summary: String,
    pub description_md: String,
    pub release_notes: String,
    pub image_source: String,
    /// The image file's SHA-256 (lowercase hex), checked by the agent before it converts the
    /// file; none for versions from before checksums (and optional for the platform's own).
    pub image_sha256: Option<String>,
    pub ssh_user: String,
    /// The cloud-config fragment, as JSON.
    pub cloud_init: String,
    /// Whether a launch may carry its own cloud-init user data.
    #[serde(default)]
    pub accepts_user_data: bool,
    /// The guest ports the software listens on, sorted: the launch form publishes them
    /// unless the tenant changes the list.
    #[serde(default)]
    pub published_ports: Vec<u16>,
    pub compatibility: Compatibility,
    pub review_reason: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub state_changed_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub published_at: Option<OffsetDateTime>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    pub id: ListingId,
    pub slug: String,
    pub name: String,
    pub category: Category,
    pub publisher: String,
    pub publisher_id: PublisherId,
    pub has_logo: bool,
    /// Newest first. For tenants: published versions only.
    pub versions: Vec<Version>,
}

impl Listing {
    /// The newest published version: what a launch without a version gets.
    pub fn current(&self) -> Option<&Version> {
        self.versions
            .iter()
            .filter(|v| v.state == VersionState::Published)
            .max_by_key(|v| v.published_at)
    }
}

/// A listing's current version as the launch form offers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchableListing {
    pub slug: String,
    /// "PyTorch 2.5 (+0.25 USD per hour)".
    pub label: String,
    pub category: Category,
    /// Per allocation-hour, on top of the SKU.
    pub fee: Option<Money>,
    /// What the launch form publishes unless the tenant changes it.
    pub published_ports: Vec<u16>,
}

/// What a project may launch: a published listing's current version (an OS image, or a
/// marketplace stack or app), as the API lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Image {
    /// What a launch names as `listing`: `ubuntu-24.04-cuda`.
    pub slug: String,
    pub name: String,
    pub category: Category,
    pub publisher: String,
    /// The current version, what a launch without `version` gets.
    pub version: String,
    pub summary: String,
    /// The account the SSH keys are installed for.
    pub ssh_user: String,
    /// Per allocation-hour, on top of the SKU's price; none for free images.
    pub fee_per_hour: Option<Money>,
    /// Whether a launch may carry its own cloud-init user data.
    pub accepts_user_data: bool,
    /// The guest ports the software listens on (vLLM's 8000): worth publishing at launch.
    #[serde(default)]
    pub published_ports: Vec<u16>,
    /// The SKUs it runs on that the project may launch, by name.
    pub skus: Vec<String>,
}

/// A SKU a listing fits, with what could launch now and the combined price.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FittingSku {
    pub sku: Sku,
    pub launchable: i64,
    pub total_price: Money,
}

/// The public listing page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListingPage {
    pub listing: Listing,
    /// SKUs the current version fits, cheapest first.
    pub fitting: Vec<FittingSku>,
}

/// A card on `/marketplace`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListingCard {
    pub slug: String,
    pub name: String,
    pub category: Category,
    pub publisher: String,
    pub has_logo: bool,
    pub version: String,
    pub summary: String,
    pub fee: Option<Money>,
    pub gpu_models: Vec<String>,
    /// The cheapest SKU it fits, plus its fee: "from … per hour".
    pub from_price: Option<Money>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrowseFilter {
    /// Words to find in the name, summary or description.
    pub q: String,
    /// A category's `as_str`, or empty.
    pub category: String,
    /// A GPU model, or empty.
    pub gpu_model: String,
    /// Highest total hourly price (SKU + fee) on the cheapest fitting SKU, in minor units.
    pub max_price_minor: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Browse {
    pub cards: Vec<ListingCard>,
    /// GPU models of the SKUs for sale, for the filter.
    pub gpu_models: Vec<String>,
}

/// A publisher, for its own page and for operators.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Publisher {
    pub id: PublisherId,
    pub tenant_id: Option<TenantId>,
    pub display_name: String,
    pub status: String,
    pub revenue_share_bps: i32,
}

/// What the platform owes a publisher in one currency: its share of rated fees.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payable {
    pub publisher_id: PublisherId,
    pub publisher: String,
    pub status: String,
    pub revenue_share_bps: i32,
    pub currency: String,
    /// Fees rated for its listings, all time (micro-units).
    pub fees_micro: i64,
    /// The publisher's payable balance (micro-units; what is owed).
    pub owed_micro: i64,
}

/// One row of the review queue and of a publisher's own list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRow {
    pub id: ListingVersionId,
    pub slug: String,
    pub name: String,
    pub publisher: String,
    pub version: String,
    pub state: VersionState,
    pub fee: Option<Money>,
    pub review_reason: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub state_changed_at: OffsetDateTime,
}

/// A revenue share in basis points as people read it: 7000 → "70%".
pub fn share_percent(bps: i32) -> String {
    format!("{}%", f64::from(bps) / 100.0)
}

impl Compatibility {
    /// "GPU slices, bare metal".
    pub fn shapes_label(&self) -> String {
        let names: Vec<&str> = self
            .shapes
            .iter()
            .map(|s| match s {
                Shape::GpuSlice => "GPU slices",
                Shape::Baremetal => "bare metal",
            })
            .collect();
        names.join(", ")
    }

    /// "H100, A100", or "any" when the version runs on every model.
    pub fn gpu_models_label(&self) -> String {
        if self.gpu_models.is_empty() {
            "any".into()
        } else {
            self.gpu_models.join(", ")
        }
    }
}

impl Version {
    /// When it was published, or else when its state last changed: `2026-11-03`.
    pub fn date(&self) -> String {
        crate::day(self.published_at.unwrap_or(self.state_changed_at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SkuId;

    fn sku(name: &str, shape: Shape, model: &str, gpus: i32, currency: &str) -> Sku {
        Sku {
            id: SkuId(uuid::Uuid::nil()),
            name: name.into(),
            display_name: name.into(),
            shape,
            gpu_model: model.into(),
            gpu_count: gpus,
            vcpus: 8,
            memory_gib: 64,
            nvme_gib: 100,
            regions: vec!["eu-west-1".into()],
            families: vec!["f".into()],
            price: Money {
                amount_minor: 299,
                currency: currency.into(),
            },
            state: "active".into(),
        }
    }

    #[test]
    fn compatibility_checks_shape_gpus_model_and_fee_currency() {
        let c = Compatibility {
            shapes: vec![Shape::GpuSlice],
            gpu_models: vec!["H100".into()],
            min_gpus: 2,
            fee: Some(Money {
                amount_minor: 25,
                currency: "USD".into(),
            }),
        };
        assert!(c.fits(&sku("h.2x", Shape::GpuSlice, "H100", 2, "USD")));
        assert_eq!(
            c.why_not(&sku("h.1x", Shape::GpuSlice, "H100", 1, "USD"))
                .unwrap(),
            "it needs at least 2 GPUs, and h.1x has 1"
        );
        assert_eq!(
            c.why_not(&sku("l.2x", Shape::GpuSlice, "L40S", 2, "USD"))
                .unwrap(),
            "it supports H100, and l.2x has L40S"
        );
        assert_eq!(
            c.why_not(&sku("m", Shape::Baremetal, "H100", 8, "USD"))
                .unwrap(),
            "it runs on gpu_slice, and m is baremetal"
        );
        assert_eq!(
            c.why_not(&sku("e.2x", Shape::GpuSlice, "H100", 2, "EUR"))
                .unwrap(),
            "its fee is in USD, and e.2x is priced in EUR"
        );
        assert_eq!(
            c.total_price(&sku("h.2x", Shape::GpuSlice, "H100", 2, "USD"))
                .to_string(),
            "3.24 USD"
        );
        let any = Compatibility {
            shapes: vec![Shape::GpuSlice, Shape::Baremetal],
            gpu_models: vec![],
            min_gpus: 1,
            fee: None,
        };
        assert!(any.fits(&sku("e", Shape::Baremetal, "L40S", 1, "EUR")));
        assert_eq!(c.shapes_label(), "GPU slices");
        assert_eq!(c.gpu_models_label(), "H100");
        assert_eq!(any.shapes_label(), "GPU slices, bare metal");
        assert_eq!(any.gpu_models_label(), "any");
    }

    #[test]
    fn shares_read_as_percentages() {
        assert_eq!(share_percent(7000), "70%");
        assert_eq!(share_percent(1234), "12.34%");
    }
}
