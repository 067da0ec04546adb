//! Billing: rating usage into the ledger, monthly invoices, Stripe sync and webhooks, finance reports.
//!
//! Part of the control plane (see ARCHITECTURE.md); no web code.

pub mod billing;

/// Every area's trait up to this crate, for `use crate::prelude::*`.
pub mod prelude {
    pub use crate::billing::invoices::InvoicesApi;
    pub use crate::billing::reports::BillingReportsApi;
    pub use crate::billing::stripe::StripeApi;
    pub use cp_marketplace::prelude::*;
}

/// What the areas above use of these without a proof: never re-exported to the pages or
/// the API (the `control-plane` facade leaves it out, and they depend only on the facade).
#[doc(hidden)]
pub mod internal {
    pub use cp_marketplace::internal::*;
}

// The areas below, under the paths they always had.
pub use cp_marketplace::{
    account, audit_log, auth, catalog, fleet, marketplace, placement, policy, skus, sso, tenancy,
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
