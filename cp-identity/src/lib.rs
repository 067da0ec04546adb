//! Identity: users and sessions, tenants, projects and members, SSO providers and email-domain proofs, SSH keys, the policy chain, and reading the audit log.
//!
//! Part of the control plane (see ARCHITECTURE.md); no web code.

pub mod account;
pub mod audit_log;
pub mod auth;
pub mod policy;
pub mod sso;
pub mod tenancy;

/// Every area's trait up to this crate, for `use crate::prelude::*`.
pub mod prelude {
    pub use crate::account::AccountApi;
    pub use crate::audit_log::AuditLogApi;
    pub use crate::auth::AuthApi;
    pub use crate::policy::PolicyApi;
    pub use crate::sso::SsoApi;
    pub use crate::tenancy::TenancyApi;
}

/// What the areas above use of these without a proof: never re-exported to the pages or
/// the API (the `control-plane` facade leaves it out, and they depend only on the facade).
#[doc(hidden)]
pub mod internal {
    pub use crate::audit_log::hidden::AuditLogInternal;
}

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
