//! What people type into forms (and API clients send), before the control plane checks it:
//! plain strings, so a form posts them as typed and every refusal can name its field.

use serde::{Deserialize, Serialize};

use crate::{IdArg, Invalid, ProjectId, SshKeyId};

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

/// What a publisher (or an operator, for the platform's listings) types for a new version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionDraft {
    pub version: String,
    pub summary: String,
    pub description_md: String,
    pub release_notes: String,
    pub image_source: String,
    /// The image file's SHA-256 as `sha256sum` prints it; required to submit a third-party
    /// version for review.
    #[serde(default)]
    pub image_sha256: String,
    pub ssh_user: String,
    /// A cloud-config fragment as a JSON object (JSON is YAML); empty for none.
    pub cloud_init: String,
    /// `yes` (a ticked checkbox) when a launch may carry its own cloud-init user data.
    #[serde(default)]
    pub accepts_user_data: String,
    /// The guest ports the software listens on, which a launch publishes unless the tenant
    /// changes them: "8000" or "8888, 6006"; empty for none.
    #[serde(default)]
    pub published_ports: String,
    /// Comma-separated: `gpu_slice`, `baremetal`.
    pub shapes: String,
    /// Comma-separated GPU models; empty for any.
    pub gpu_models: String,
    pub min_gpus: String,
    /// "0.25 USD", or empty for no fee.
    pub fee: String,
}

/// What a tenant chooses on the launch form. SSH keys: the saved keys `ssh_key_ids` (the
/// user's own) and a pasted one, which is also saved under `save_key_as` when that is given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchInput {
    pub project: IdArg<ProjectId>,
    pub sku: String,
    /// Empty for any region.
    pub region: String,
    /// The listing's slug (an OS image is a listing too).
    pub image: String,
    /// Empty (or absent) for the newest published version.
    #[serde(default)]
    pub version: Option<String>,
    pub name: String,
    #[serde(default)]
    pub ssh_key_ids: Vec<IdArg<SshKeyId>>,
    /// Key lines typed in, one per line.
    #[serde(default)]
    pub ssh_public_keys: String,
    /// Also save the typed key under this name; empty: don't.
    #[serde(default)]
    pub save_key_as: String,
    /// Whole hours; empty for no end.
    #[serde(default)]
    pub lifetime_hours: String,
    /// "8888, 6006": commas or spaces.
    #[serde(default)]
    pub published_ports: String,
    /// The form's own key, so a double submit launches once.
    pub idempotency_key: String,
    /// "team=vision, stage=dev": commas or new lines; a tag without `=` has an empty value.
    #[serde(default)]
    pub tags: String,
    /// cloud-init user data, for listings that accept it; empty: none.
    #[serde(default)]
    pub user_data: String,
    /// Available volumes of the project to attach.
    #[serde(default)]
    pub volume_ids: Vec<IdArg<crate::ids::VolumeId>>,
    /// How many nodes: empty or 1 for one instance, more for a cluster of them.
    #[serde(default)]
    pub nodes: String,
    /// A cluster's locality: `leaf`, `spine` or `fabric`.
    #[serde(default)]
    pub locality: String,
    /// Present (a ticked box): the locality or nothing.
    #[serde(default)]
    pub locality_required: Option<String>,
}

/// What a tenant admin types for the organization's identity provider.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SsoSettingsInput {
    pub issuer_url: String,
    pub client_id: String,
    /// Empty keeps the stored secret.
    pub client_secret: String,
    /// Comma-separated email domains.
    pub domains: String,
    pub role_claim: String,
    pub default_role: String,
    /// One "group = role" per line.
    pub mappings: String,
    /// Days after its maker's last sign-in at which an API token lapses; empty: 30.
    #[serde(default)]
    pub token_idle_days: String,
}

/// What an operator types to enrol a host. The shape boxes are present when ticked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnrolmentInput {
    pub hostname: String,
    pub region: String,
    pub rack: String,
    pub family: String,
    #[serde(default)]
    pub shape_gpu_slice: Option<String>,
    #[serde(default)]
    pub shape_baremetal: Option<String>,
}

/// What a person types to make an API token. `project` is a project's id, or empty for the
/// whole organization; a scope's box is present when ticked; `days` as typed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInput {
    pub name: String,
    #[serde(default)]
    pub project: String,
    #[serde(default)]
    pub scope_read: Option<String>,
    #[serde(default)]
    pub scope_launch: Option<String>,
    #[serde(default)]
    pub scope_billing: Option<String>,
    #[serde(default)]
    pub scope_admin: Option<String>,
    #[serde(default)]
    pub scope_keys: Option<String>,
    pub days: String,
}

impl TokenInput {
    /// The ticked scopes, in their order.
    pub fn scopes(&self) -> Vec<crate::tokens::TokenScope> {
        use crate::tokens::TokenScope as S;
        [
            (&self.scope_read, S::Read),
            (&self.scope_launch, S::Launch),
            (&self.scope_billing, S::Billing),
            (&self.scope_admin, S::Admin),
            (&self.scope_keys, S::Keys),
        ]
        .into_iter()
        .filter_map(|(ticked, s)| ticked.is_some().then_some(s))
        .collect()
    }

    /// The lifetime in days as typed (a whole number; the control plane checks the range).
    pub fn days(&self) -> Result<u32, Invalid> {
        self.days.trim().parse::<u32>().map_err(|_| {
            Invalid::new(
                "days",
                format!("{:?} is not a whole number of days", self.days.trim()),
            )
        })
    }
}

/// The fleet's GPU health policy form. Plain strings like every form here (a flattened form
/// arrives as strings): a ticked box sends `true`, an unticked one nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuHealthPolicyInput {
    /// XID numbers that take a slot out of service, separated by commas or spaces.
    pub xid_codes: String,
    #[serde(default)]
    pub ecc_uncorrectable: Option<String>,
    #[serde(default)]
    pub thermal: Option<String>,
}

impl GpuHealthPolicyInput {
    /// Whether a box was ticked.
    pub fn ticked(value: &Option<String>) -> bool {
        matches!(value.as_deref(), Some("true" | "on"))
    }
}
