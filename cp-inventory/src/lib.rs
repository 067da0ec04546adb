//! Inventory: hosts and their approved slot maps, SKUs, placement (the one decision of which slot), and the public catalog with live availability.
//!
//! Part of the control plane (see ARCHITECTURE.md); no web code.

pub mod catalog;
pub mod fleet;
pub mod placement;
pub mod skus;

/// Every area's trait up to this crate (the facade's prelude is built from the top one).
pub mod prelude {
    pub use crate::catalog::CatalogApi;
    pub use crate::fleet::FleetApi;
    pub use crate::fleet::enrolment::EnrolmentApi;
    pub use crate::fleet::fabric_places::FabricApi;
    pub use crate::fleet::gpu_health::GpuHealthApi;
    pub use crate::fleet::slot_map::SlotMapApi;
    pub use crate::placement::PlacementApi;
    pub use crate::skus::SkusApi;
    pub use cp_identity::prelude::*;
}

/// What the areas above use of these without a proof: never re-exported to the pages or
/// the API (the `control-plane` facade leaves it out, and they depend only on the facade).
#[doc(hidden)]
pub mod internal {
    pub use crate::fleet::gpu_health::hidden::GpuHealthInternal;
    pub use crate::skus::hidden::SkusInternal;
    pub use cp_identity::internal::*;
}
