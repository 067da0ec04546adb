//! Identity: users and sessions, tenants, projects and members, SSO providers and email-domain proofs, SSH keys, API tokens, the policy chain, and reading the audit log.
//!
//! Part of the control plane (see ARCHITECTURE.md); no web code.

pub mod account;
pub mod api_tokens;
pub mod audit_log;
pub mod auth;
pub mod policy;
pub mod sessions;
pub mod sso;
pub mod tenancy;

/// Every area's trait up to this crate (the facade's prelude is built from the top one).
pub mod prelude {
    pub use crate::account::AccountApi;
    pub use crate::api_tokens::ApiTokensApi;
    pub use crate::audit_log::AuditLogApi;
    pub use crate::auth::AuthApi;
    pub use crate::policy::PolicyApi;
    pub use crate::sessions::SessionsApi;
    pub use crate::sso::SsoApi;
    pub use crate::sso::SsoSettingsApi;
    pub use crate::tenancy::TenancyApi;
}

/// What the areas above use of these without a proof: never re-exported to the pages or
/// the API (the `control-plane` facade leaves it out, and they depend only on the facade).
#[doc(hidden)]
pub mod internal {
    pub use crate::audit_log::hidden::AuditLogInternal;
}
