//! The policy chain's vocabulary: which setting, and at which level of the chain.

use serde::{Deserialize, Serialize};

use crate::Invalid;

/// A setting of the policy chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PolicyKey {
    MaxGpusInUse,
    AllowedSkus,
    AllowedRegions,
    MaxAllocationLifetimeHours,
    MonthlyBudget,
    AllowedListings,
    MaxPublishedPorts,
    MaxVolumeGib,
    MaxVolumes,
}

impl PolicyKey {
    pub const ALL: [PolicyKey; 9] = [
        PolicyKey::MaxGpusInUse,
        PolicyKey::AllowedSkus,
        PolicyKey::AllowedRegions,
        PolicyKey::MaxAllocationLifetimeHours,
        PolicyKey::MonthlyBudget,
        PolicyKey::AllowedListings,
        PolicyKey::MaxPublishedPorts,
        PolicyKey::MaxVolumeGib,
        PolicyKey::MaxVolumes,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKey::MaxGpusInUse => "max_gpus_in_use",
            PolicyKey::AllowedSkus => "allowed_skus",
            PolicyKey::AllowedRegions => "allowed_regions",
            PolicyKey::MaxAllocationLifetimeHours => "max_allocation_lifetime_hours",
            PolicyKey::MonthlyBudget => "monthly_budget",
            PolicyKey::AllowedListings => "allowed_listings",
            PolicyKey::MaxPublishedPorts => "max_published_ports",
            PolicyKey::MaxVolumeGib => "max_volume_gib",
            PolicyKey::MaxVolumes => "max_volumes",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            PolicyKey::MaxGpusInUse => "Max GPUs in use",
            PolicyKey::AllowedSkus => "Allowed SKUs",
            PolicyKey::AllowedRegions => "Allowed regions",
            PolicyKey::MaxAllocationLifetimeHours => "Max allocation lifetime (hours)",
            PolicyKey::MonthlyBudget => "Monthly budget",
            PolicyKey::AllowedListings => "Allowed marketplace listings",
            PolicyKey::MaxPublishedPorts => "Max published ports per allocation",
            PolicyKey::MaxVolumeGib => "Max volume storage (GiB)",
            PolicyKey::MaxVolumes => "Max volumes",
        }
    }

    /// What to type, for forms.
    pub fn hint(self) -> &'static str {
        match self {
            PolicyKey::MaxGpusInUse => "a whole number, e.g. 16",
            PolicyKey::AllowedSkus => "comma-separated SKU names, e.g. h100.8x, l40s.1x",
            PolicyKey::AllowedRegions => "comma-separated regions, e.g. eu-west, us-east",
            PolicyKey::MaxAllocationLifetimeHours => "hours, 1 to 8760, e.g. 72",
            PolicyKey::MonthlyBudget => "amount and currency, e.g. 5000.00 USD",
            PolicyKey::AllowedListings => {
                "comma-separated listing names, e.g. ubuntu-24.04-cuda, pytorch"
            }
            PolicyKey::MaxPublishedPorts => "0 to 7 ports besides SSH, e.g. 2",
            PolicyKey::MaxVolumeGib => "GiB of volumes in all, e.g. 2048",
            PolicyKey::MaxVolumes => "a whole number of volumes, e.g. 20",
        }
    }

    pub fn parse(s: &str) -> Result<Self, Invalid> {
        PolicyKey::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| Invalid::new("key", format!("{s:?} is not a policy key")))
    }
}

/// A level of the policy chain, from the most general to the most specific.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Level {
    Global,
    Tenant,
    Project,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Global => "global",
            Level::Tenant => "organization",
            Level::Project => "project",
        }
    }
}
