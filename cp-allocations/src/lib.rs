//! Allocations: launch (validate, decide, reserve), the lifecycle and its outbox, and the API the node agents call.
//!
//! Part of the control plane (see ARCHITECTURE.md); no web code.

pub mod agent_api;
pub mod allocations;
pub mod ops;
pub mod reconcile;
pub mod volumes;

/// Every area's trait up to this crate (the facade's prelude is built from the top one).
pub mod prelude {
    pub use crate::agent_api::AgentApi;
    pub use crate::allocations::AllocationsApi;
    pub use crate::allocations::clusters::ClustersApi;
    pub use crate::allocations::lifecycle::LifecycleApi;
    pub use crate::ops::OpsApi;
    pub use crate::reconcile::ReconcileApi;
    pub use crate::volumes::VolumesApi;
    pub use crate::volumes::snapshots::SnapshotsApi;
    pub use cp_billing::prelude::*;
}

/// What the areas above use of these without a proof: never re-exported to the pages or
/// the API (the `control-plane` facade leaves it out, and they depend only on the facade).
#[doc(hidden)]
pub mod internal {
    pub use cp_billing::internal::*;
}
