//! The wire contract between the control plane (`/agent/v1/*`) and the node agent.
//!
//! serde types only, so that both sides compile against one definition. Every request carries
//! the [`PROTOCOL_HEADER`]; a server that speaks another version refuses it with
//! [`ApiError`] code [`codes::UNSUPPORTED_PROTOCOL`]. Everything but enrolment is
//! authenticated with the node credential (`Authorization: Bearer …`).
//!
//! | request | body | answer |
//! | --- | --- | --- |
//! | `POST /agent/v1/enroll` | [`EnrollRequest`] (bootstrap token) | [`EnrollResponse`] |
//! | `POST /agent/v1/heartbeat` | [`Heartbeat`] | [`HeartbeatAck`] |
//! | `POST /agent/v1/tasks/claim` | [`ClaimRequest`] (long-poll) | [`ClaimResponse`] |
//! | `POST /agent/v1/tasks/{task_id}/phases` | [`PhaseReport`] | 204 |
//! | `POST /agent/v1/tasks/{task_id}/result` | [`TaskResult`] | 204 |

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub mod ranges;
pub mod topology;

pub use topology::{
    Discovery, FabricPartition, Gpu, HostTopology, IbDevice, NumaNode, NvmeController,
    NvmeNamespace, PciDevice, SlotGpu, SlotNvme, SlotSpec,
};

/// The protocol version this build speaks. The server refuses any other.
pub const PROTOCOL_VERSION: u32 = 1;

/// The URL prefix of the node API for [`PROTOCOL_VERSION`].
pub const API_PREFIX: &str = "/agent/v1";

/// The header every agent request carries: its protocol version, as a decimal number.
pub const PROTOCOL_HEADER: &str = "x-agent-protocol";

/// The longest a claim may wait for a task, in seconds; the server caps longer waits.
pub const MAX_CLAIM_WAIT_S: u32 = 25;

/// Sent by an agent with every request (as the `x-agent-protocol` header and in bodies).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentHello {
    pub protocol_version: u32,
    pub agent_version: String,
}

impl AgentHello {
    /// Whether a server speaking [`PROTOCOL_VERSION`] can talk to this agent.
    pub fn is_supported(&self) -> bool {
        self.protocol_version == PROTOCOL_VERSION
    }
}

/// Every non-2xx answer of the node API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    /// One of [`codes`].
    pub code: String,
    /// A sentence for the operator reading the agent's log.
    pub message: String,
}

/// The values of [`ApiError::code`].
pub mod codes {
    pub const UNSUPPORTED_PROTOCOL: &str = "unsupported_protocol";
    pub const UNAUTHENTICATED: &str = "unauthenticated";
    pub const INVALID: &str = "invalid";
    pub const NOT_FOUND: &str = "not_found";
    pub const CONFLICT: &str = "conflict";
    pub const INTERNAL: &str = "internal";
}

/// Exchanges a one-time bootstrap token for the node's own credential.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnrollRequest {
    pub hello: AgentHello,
    pub bootstrap_token: String,
    /// What the host calls itself; must match the hostname the operator enrolled.
    pub hostname: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnrollResponse {
    pub node_id: String,
    /// Shown once; the control plane keeps only its hash.
    pub node_credential: String,
    pub heartbeat_interval_s: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    Healthy,
    Degraded,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub status: HealthStatus,
    /// Why it is degraded, in a sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub hello: AgentHello,
    pub health: Health,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatAck {
    pub heartbeat_interval_s: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRequest {
    /// How long to hold the request open when no task is queued (capped at
    /// [`MAX_CLAIM_WAIT_S`]).
    pub wait_s: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimResponse {
    pub task: Option<Task>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub task_id: String,
    pub spec: TaskSpec,
}

/// The bounded host primitives an agent executes. Never a shell.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum TaskSpec {
    /// Read the host and propose a slot map (always `approval_required`).
    #[serde(rename = "slice.topology_discover")]
    TopologyDiscover {},
}

impl TaskSpec {
    pub fn kind(&self) -> &'static str {
        match self {
            TaskSpec::TopologyDiscover {} => "slice.topology_discover",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseStatus {
    Started,
    Succeeded,
    Failed,
}

/// One step of a task, with its timing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseReport {
    /// A lowercase identifier, e.g. `read_pci`.
    pub phase: String,
    pub status: PhaseStatus,
    /// Time spent in the phase so far.
    pub elapsed_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    pub outcome: TaskOutcome,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum TaskOutcome {
    Succeeded { output: TaskOutput },
    Failed { error: String },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum TaskOutput {
    #[serde(rename = "slice.topology_discover")]
    TopologyDiscovered(Box<Discovery>),
}

/// Capacity metadata keys a slot needs before it may be scheduled.
pub mod metadata {
    pub const STORAGE_OWNERSHIP: &str = "storage_ownership";
    pub const FABRIC_CLAIM_MODE: &str = "fabric_claim_mode";
    pub const FABRIC_VF_PCI_ADDRESS: &str = "fabric_vf_pci_address";
    pub const DESTRUCTIVE_WIPE_POLICY: &str = "destructive_wipe_policy";
}

/// Convenience for building capacity metadata.
pub type CapacityMetadata = BTreeMap<String, String>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips_and_checks_version() {
        let hello = AgentHello {
            protocol_version: PROTOCOL_VERSION,
            agent_version: "0.1.0".into(),
        };
        let json = serde_json::to_string(&hello).unwrap();
        assert_eq!(json, r#"{"protocol_version":1,"agent_version":"0.1.0"}"#);
        let back: AgentHello = serde_json::from_str(&json).unwrap();
        assert!(back.is_supported());
        let future = AgentHello {
            protocol_version: 2,
            ..back
        };
        assert!(!future.is_supported());
    }

    #[test]
    fn tasks_and_outcomes_are_tagged_by_kind_and_status() {
        let task = Task {
            task_id: "t1".into(),
            spec: TaskSpec::TopologyDiscover {},
        };
        assert_eq!(
            serde_json::to_string(&task).unwrap(),
            r#"{"task_id":"t1","spec":{"kind":"slice.topology_discover"}}"#
        );
        let failed = TaskResult {
            outcome: TaskOutcome::Failed {
                error: "sysfs unreadable".into(),
            },
        };
        assert_eq!(
            serde_json::to_string(&failed).unwrap(),
            r#"{"outcome":{"status":"failed","error":"sysfs unreadable"}}"#
        );
        // An unknown task kind is an error, not a silently ignored task.
        let unknown = serde_json::from_str::<Task>(r#"{"task_id":"t","spec":{"kind":"shell"}}"#);
        assert!(unknown.is_err());
    }
}
