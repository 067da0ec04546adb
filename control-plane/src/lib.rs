//! The control plane: every rule of the product and its SQL. No axum, no leptos.
//!
//! This crate is the facade the portal's server functions and the server's HTTP handlers
//! call in-process: it re-exports each area crate (`cp-identity`, `cp-inventory`,
//! `cp-marketplace`, `cp-billing`, `cp-allocations`) under the paths they always had, and
//! holds the demo data, which touches every area. Postgres is the single source of truth;
//! invariants live in the schema (`migrations/`), and the Rust here checks them again to give
//! better errors.

pub mod demo;

/// Every area's trait, for `use control_plane::prelude::*`: the methods of [`ControlPlane`]
/// come from these, one per area, so call sites read `cp.launch(…)` as ever.
pub mod prelude {
    pub use crate::demo::DemoApi;
    pub use cp_allocations::prelude::*;
}

// Every area, under the paths it always had.
pub use cp_allocations::{agent_api, allocations, ops, reconcile};
pub use cp_billing::billing;
pub use cp_identity::{account, api_tokens, audit_log, auth, policy, sessions, sso, tenancy};
pub use cp_inventory::{catalog, fleet, placement, skus};
pub use cp_marketplace::marketplace;
// The base, at the paths it always had (`control_plane::Error`, `control_plane::ProjectId`).
pub use cp_base::*;
