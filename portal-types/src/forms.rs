//! What people type into forms (and API clients send), before the control plane checks it:
//! plain strings, so a form posts them as typed and every refusal can name its field.

use serde::{Deserialize, Serialize};

/// What an operator types into the SKU form.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkuInput {
    pub name: String,
    pub display_name: String,
    pub shape: String,
    pub gpu_model: String,
    pub gpu_count: String,
    pub vcpus: String,
    pub memory_gib: String,
    pub nvme_gib: String,
    /// Comma-separated.
    pub regions: String,
    /// Comma-separated.
    pub families: String,
    /// `12.50 USD`.
    pub price_per_hour: String,
}
