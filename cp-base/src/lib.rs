//! What every area of the control plane stands on. Nothing here knows tenants' rules, the
//! fleet, placement, allocations or billing: those are the area crates above it, which name
//! what they use of it by its path here (`cp_base::error`, `cp_base::ids::ProjectId`).
//!
//! Invariants: [`error::Error`] is the one error of the domain, and [`db`] the one way a
//! database refusal becomes one of its variants; an audit row is written only inside the
//! transaction of the change it describes ([`audit::record`] takes that connection).

pub mod audit;
pub mod csv;
pub mod db;
pub mod dns;
pub mod egress;
pub mod error;
mod handle;
pub mod health;
pub mod metrics;
pub mod migrations;
pub mod naming;
pub mod pool;
pub mod ratelimit;
pub mod reasons;
pub mod resource_name;
pub mod secrets;
pub mod ssh_key;
pub mod stripe_link;
pub mod trace_context;

pub use error::{Error, Result};
pub use handle::{CONTENTION_DEADLINE, ControlPlane, TOKEN_CAP, WATCH_INTERVAL, Waiting, Wakeups};
pub use ids::*;
pub use naming::Naming;
pub use portal_types as types;
pub use resource_name::{ResourceName, ResourceNameError};

/// Every migration in `migrations/`, embedded at compile time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// The id newtypes.
pub mod ids {
    pub use portal_types::{
        AgentTaskId, AllocationId, ApiTokenId, ClusterId, InvoiceId, ListingId, ListingVersionId,
        NodeId, ProjectId, PublisherId, SkuId, SlotId, SnapshotId, SshKeyId, TenantId, UserId,
        VolumeId,
    };
}
