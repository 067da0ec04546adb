//! Billing: rating usage into the ledger, monthly invoices, Stripe sync and webhooks, finance reports.
//!
//! Part of the control plane (see ARCHITECTURE.md); no web code.

pub mod billing;

/// Every area's trait up to this crate (the facade's prelude is built from the top one).
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

// Everything below (the base, and the areas under this one) at the paths it always had:
// `crate::error`, `crate::tenancy`, `crate::ProjectId`. This crate's own `prelude` and
// `internal` shadow the ones the glob brings.
pub use cp_marketplace::*;
