//! The marketplace: what runs on the capacity. Publishers (the platform, or organizations
//! operators approved) draft listings and versions and submit them; operators approve, reject
//! with a reason, publish, deprecate and withdraw versions. A version is a reviewed snapshot
//! of everything a launch uses (image, cloud-init, compatibility, fee); the database's guard
//! holds the state machine and fixes a version's content once it left its publisher, and the
//! allocation trigger lets only published versions that fit the SKU launch. Browsing needs no
//! sign-in and shows only published versions.
//!
//! Part of the control plane (see ARCHITECTURE.md); no web code.

pub mod browse;
pub mod cloud_init;
pub mod curation;
pub mod publishers;
pub mod versions;

pub use curation::Curation;
pub use portal_types::marketplace::{
    Browse, BrowseFilter, Category, Compatibility, FittingSku, Image, LaunchableListing, Listing,
    ListingCard, ListingPage, Payable, Publisher, Version, VersionRow, VersionState,
};
pub use publishers::{PLATFORM_PUBLISHER, PublisherActor};
pub use versions::{
    FieldChange, LaunchVersion, VersionDraft, VersionReview, changes, content_digest,
    launch_version, review_fields,
};

use cp_base::error::Error;

pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::Invalid {
        field,
        reason: reason.into(),
    }
}

/// A refusal from one of the marketplace's triggers, shown as a conflict with its sentence.
pub(crate) use cp_base::db::trigger_refusal as refused;

/// Every area's trait up to this crate (the facade's prelude is built from the top one).
pub mod prelude {
    pub use crate::browse::MarketplaceApi;
    pub use crate::curation::ListingsApi;
    pub use crate::publishers::PublishersApi;
    pub use cp_inventory::prelude::*;
}

/// What the areas above use of these without a proof: never re-exported to the pages or
/// the API (the `control-plane` facade leaves it out, and they depend only on the facade).
#[doc(hidden)]
pub mod internal {
    pub use cp_inventory::internal::*;
}
