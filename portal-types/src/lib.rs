//! The portal's shared vocabulary: the types the control plane, the pages in the browser, the
//! REST API and the tests all speak. Nothing here touches a database, the network or the
//! clock, so it compiles to wasm; database derives are behind the `sqlx` feature, as in
//! `agent-protocol`.
//!
//! Invariant: a value of these types is valid. Constructors that read people's input
//! (`Money::parse_as`, `PolicyKey::parse`, `Shape::parse`) return [`Invalid`] naming the field
//! and the rule; `From<String>` on [`Currency`] is for values read back from storage, whose
//! schema holds the same rule.

pub mod account;
pub mod allocations;
pub mod billing;
pub mod catalog;
pub mod clusters;
pub mod fleet;
mod forms;
mod ids;
pub mod marketplace;
mod money;
pub mod ops;
mod policy;
mod problem;
pub mod projects;
mod roles;
mod shape;
pub mod tokens;
pub mod volumes;

pub use allocations::{day, utc};
pub use forms::{
    EnrolmentInput, GpuHealthPolicyInput, LaunchInput, SkuInput, SsoSettingsInput, TokenInput,
    VersionDraft,
};
pub use ids::{
    AgentTaskId, AllocationId, ApiTokenId, ClusterId, IdArg, InvoiceId, ListingId,
    ListingVersionId, NodeId, ProjectId, PublisherId, SkuId, SlotId, SnapshotId, SshKeyId,
    TenantId, UserId, VolumeId,
};
pub use money::{BUDGET_CURRENCIES, Currency, Micros, Money, readable_decimal};
pub use policy::{Level, PolicyKey};
pub use problem::Problem;
pub use roles::{ProjectRole, TenantRole};
pub use shape::Shape;

/// Input that breaks a rule: which field, and the rule in a sentence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    pub field: &'static str,
    pub reason: String,
}

impl Invalid {
    pub fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            field,
            reason: reason.into(),
        }
    }
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid {}: {}", self.field, self.reason)
    }
}

impl std::error::Error for Invalid {}
