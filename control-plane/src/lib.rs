//! The control plane: every rule of the product and its SQL. No axum, no leptos.
//!
//! The portal's server functions and the server's HTTP handlers call into this crate
//! in-process. Postgres is the single source of truth; invariants live in the schema
//! (`migrations/`), and the Rust here checks them again to give better errors.

pub mod account;
pub mod agent_api;
pub mod allocations;
pub mod audit_log;
pub mod auth;
pub mod billing;
pub mod catalog;
pub mod demo;
pub mod fleet;
pub mod ids;
pub mod marketplace;
pub mod placement;
pub mod policy;
pub mod skus;
pub mod sso;
pub mod tenancy;

/// Every area's trait, for `use control_plane::prelude::*`: the methods of [`ControlPlane`]
/// come from these, one per area, so call sites read `cp.launch(…)` as ever.
pub mod prelude {
    pub use crate::account::AccountApi;
    pub use crate::agent_api::AgentApi;
    pub use crate::allocations::AllocationsApi;
    pub use crate::allocations::lifecycle::LifecycleApi;
    pub use crate::audit_log::AuditLogApi;
    pub use crate::auth::AuthApi;
    pub use crate::billing::invoices::InvoicesApi;
    pub use crate::billing::reports::BillingReportsApi;
    pub use crate::billing::stripe::StripeApi;
    pub use crate::catalog::CatalogApi;
    pub use crate::demo::DemoApi;
    pub use crate::fleet::FleetApi;
    pub use crate::marketplace::MarketplaceApi;
    pub use crate::placement::PlacementApi;
    pub use crate::policy::PolicyApi;
    pub use crate::skus::SkusApi;
    pub use crate::sso::SsoApi;
    pub use crate::tenancy::TenancyApi;

    // Crate-private: what areas use of each other without a proof.
    pub(crate) use crate::allocations::lifecycle::LifecycleInternal;
    pub(crate) use crate::audit_log::AuditLogInternal;
    pub(crate) use crate::skus::SkusInternal;
    pub(crate) use crate::sso::SsoInternal;
}

// The base every area stands on, under the paths it always had.
use cp_base::db;
pub use cp_base::{
    ControlPlane, MIGRATOR, Wakeups, audit, dns, egress, error, health, naming, ratelimit,
    resource_name, secrets,
};

pub use error::{Error, Result};
pub use ids::{
    AgentTaskId, AllocationId, ListingId, ListingVersionId, NodeId, ProjectId, PublisherId, SkuId,
    SlotId, TenantId, UserId,
};
pub use naming::Naming;
pub use resource_name::{ResourceName, ResourceNameError};
