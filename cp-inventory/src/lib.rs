//! Inventory: hosts and their approved slot maps, SKUs, placement (the one decision of which slot), and the public catalog with live availability.
//!
//! Part of the control plane (see ARCHITECTURE.md); no web code.

pub mod catalog;
pub mod fleet;
pub mod placement;
pub mod skus;

/// Every area's trait up to this crate, for `use crate::prelude::*`.
pub mod prelude {
    pub use crate::catalog::CatalogApi;
    pub use crate::fleet::FleetApi;
    pub use crate::placement::PlacementApi;
    pub use crate::skus::SkusApi;
    pub use cp_identity::prelude::*;
}

/// What the areas above use of these without a proof: never re-exported to the pages or
/// the API (the `control-plane` facade leaves it out, and they depend only on the facade).
#[doc(hidden)]
pub mod internal {
    pub use crate::skus::hidden::SkusInternal;
    pub use cp_identity::internal::*;
}

// The areas below, under the paths they always had.
pub use cp_identity::{account, audit_log, auth, policy, sso, tenancy};

// The base every area stands on, under the paths it always had.
#[allow(unused_imports)]
use cp_base::db;
pub use cp_base::{
    ControlPlane, MIGRATOR, Wakeups, audit, dns, egress, error, health, ids, naming, ratelimit,
    resource_name, secrets,
};

pub use error::{Error, Result};
pub use ids::{
    AgentTaskId, AllocationId, ListingId, ListingVersionId, NodeId, ProjectId, PublisherId, SkuId,
    SlotId, TenantId, UserId,
};
pub use naming::Naming;
pub use resource_name::{ResourceName, ResourceNameError};
