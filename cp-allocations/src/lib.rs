//! Allocations: launch (validate, decide, reserve), the lifecycle and its outbox, and the API the node agents call.
//!
//! Part of the control plane (see ARCHITECTURE.md); no web code.

pub mod agent_api;
pub mod allocations;

/// Every area's trait up to this crate, for `use crate::prelude::*`.
pub mod prelude {
    pub use crate::agent_api::AgentApi;
    pub use crate::allocations::AllocationsApi;
    pub use crate::allocations::lifecycle::LifecycleApi;
    pub use cp_billing::prelude::*;
}

/// What the areas above use of these without a proof: never re-exported to the pages or
/// the API (the `control-plane` facade leaves it out, and they depend only on the facade).
#[doc(hidden)]
pub mod internal {
    pub use cp_billing::internal::*;
}

// The areas below, under the paths they always had.
pub use cp_billing::{
    account, audit_log, auth, billing, catalog, fleet, marketplace, placement, policy, skus, sso,
    tenancy,
};

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
