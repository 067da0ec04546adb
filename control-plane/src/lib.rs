//! The control plane: every rule of the product and its SQL. No axum, no leptos.
//!
//! This crate is the facade the portal's server functions and the server's HTTP handlers
//! call in-process: it re-exports each area crate's modules (`cp-identity`, `cp-inventory`,
//! `cp-marketplace`, `cp-billing`, `cp-allocations`) by name, and
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

// Every area's modules, by name (never their `internal` ones).
pub use cp_allocations::{agent_api, allocations, ops, reconcile, volumes};
/// Billing ([`cp_billing`] without what it shares with the areas above only).
pub mod billing {
    pub use cp_billing::storage_prices::{StoragePrice, StoragePricesApi};
    pub use cp_billing::{
        Micros, cost_micros, gpu_hours, history, invoices, month_bounds, month_label, parse_month,
        rating, reports, stripe,
    };
}
pub use cp_identity::{account, api_tokens, audit_log, auth, policy, sessions, sso, tenancy};
pub use cp_inventory::{catalog, fleet, placement, skus};
/// The marketplace ([`cp_marketplace`] without what it shares with the areas above only).
pub mod marketplace {
    pub use cp_marketplace::{
        Browse, BrowseFilter, Category, Compatibility, Curation, FieldChange, FittingSku, Image,
        LaunchVersion, LaunchableListing, Listing, ListingCard, ListingPage, PLATFORM_PUBLISHER,
        Payable, Publisher, PublisherActor, Version, VersionDraft, VersionReview, VersionRow,
        VersionState, browse, changes, cloud_init, content_digest, curation, launch_version,
        publishers, review_fields, versions,
    };
}
// The base: its modules, the error, the handle and the ids.
pub use cp_base::ids::*;
pub use cp_base::{
    CONTENTION_DEADLINE, ControlPlane, Error, MIGRATOR, Naming, ResourceName, ResourceNameError,
    Result, TOKEN_CAP, WATCH_INTERVAL, Waiting, Wakeups, audit, db, dns, egress, error, health,
    ids, metrics, naming, pool, ratelimit, reasons, resource_name, secrets, stripe_link,
    trace_context, types,
};
