//! What platform staff see of the fleet: the fleet page's rows and counts, a node's page (its
//! slots, the latest slot-map proposal beside them, its tasks), and an enrolment's one-time
//! answer. Times are times; the small sentences a page shows of several fields are methods here,
//! so the server and the browser say them the same way.

use agent_protocol::SlotSpec;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::projects::AuditLine;
use crate::{NodeId, SlotId, utc};

/// The seven postures, in the order the fleet page lists them, with their labels.
pub const POSTURES: [(&str, &str); 7] = [
    ("fully_available", "Fully available"),
    ("partially_allocated", "Partially allocated"),
    ("fully_allocated_slices", "Fully allocated by slices"),
    (
        "exclusively_allocated_baremetal",
        "Exclusively allocated (bare metal)",
    ),
    ("draining", "Draining"),
    ("cleanup_blocked", "Cleanup blocked"),
    ("unavailable", "Unavailable"),
];

/// One row of the fleet page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSummary {
    pub id: NodeId,
    pub hostname: String,
    pub region: String,
    pub rack: String,
    pub family: String,
    pub capacity_shapes: Vec<String>,
    pub admin_state: String,
    pub posture: String,
    pub posture_reason: String,
    pub gpu_model: Option<String>,
    pub live_slots: i32,
    pub schedulable_slots: i32,
    pub drifted_slots: i32,
    pub claimed_slots: i32,
    pub agent_version: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_heartbeat: Option<OffsetDateTime>,
    /// The generation of a proposal waiting for a decision.
    pub pending_generation: Option<i32>,
}

impl NodeSummary {
    /// "Partially allocated", for `partially_allocated`.
    pub fn posture_label(&self) -> &str {
        POSTURES
            .iter()
            .find(|(p, _)| *p == self.posture)
            .map_or(self.posture.as_str(), |(_, label)| label)
    }

    /// When the agent was last heard from, or "never".
    pub fn heartbeat(&self) -> String {
        self.last_heartbeat.map_or_else(|| "never".into(), utc)
    }
}

/// The fleet page: the nodes a filter matched, with counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetView {
    /// The nodes matching the filter.
    pub nodes: Vec<NodeSummary>,
    /// (posture, label, count) for all seven postures, over the filtered nodes.
    pub by_posture: Vec<(String, String, i64)>,
    pub by_region: Vec<(String, i64)>,
    pub by_model: Vec<(String, i64)>,
    /// Every region and model in the fleet, for the filter choices.
    pub regions: Vec<String>,
    pub models: Vec<String>,
}

/// An approved slot, as the node page shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRow {
    pub id: SlotId,
    pub slot_index: i32,
    pub gpu_pci_address: String,
    pub gpu_model: String,
    pub gpu_uuid: Option<String>,
    pub numa_node: i32,
    pub nvme_pci_address: String,
    pub nvme_serial: String,
    pub nvme_namespace: String,
    pub ib_vf_pci_address: String,
    pub cpu_set: String,
    pub memory_mib: i64,
    pub wipe_policy: String,
    pub approved_generation: i32,
    /// `schedulable`, `drifted`, `claimed`, `cleaning` or `cleanup blocked`.
    pub state: String,
    pub drift: Option<String>,
    /// Why the slot waits for cleaning or is blocked.
    pub cleanup_detail: Option<String>,
    /// The GPU health event that took the slot out of service, while it is out.
    pub out_of_service: Option<String>,
}

impl SlotRow {
    /// "0000:3b:00.0 (nvme0n1)"
    pub fn nvme(&self) -> String {
        format!("{} ({})", self.nvme_pci_address, self.nvme_namespace)
    }
}

/// One proposed slot beside the approved slot with the same GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProposalSlot {
    pub proposed: SlotSpec,
    pub current: Option<SlotRow>,
    /// `new`, `unchanged`, or what differs.
    pub change: String,
    pub problems: Vec<String>,
}

/// A node's latest slot-map proposal: what its agent discovered, and the decision on it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProposalView {
    pub generation: i32,
    #[serde(with = "time::serde::rfc3339")]
    pub discovered_at: OffsetDateTime,
    /// `pending`, `approved`, `partially_approved`, `rejected` or `superseded`.
    pub status: String,
    pub decided_by: Option<String>,
    pub decision_reason: Option<String>,
    pub slots: Vec<ProposalSlot>,
    /// Approved slots whose GPU the proposal no longer has.
    pub gone: Vec<SlotRow>,
    pub wipe_methods: Vec<String>,
    pub warnings: Vec<String>,
    /// Sizes of the NVLink partitions the host offers, e.g. `[8, 4, 4, 2, …]`.
    pub fabric_partition_sizes: Vec<usize>,
    pub nvswitches: usize,
}

impl ProposalView {
    pub fn is_pending(&self) -> bool {
        self.status == "pending"
    }

    /// "6 NVSwitches; NVLink partitions of 8, 4, 4", or that none were reported.
    pub fn fabric(&self) -> String {
        if self.fabric_partition_sizes.is_empty() {
            return "no NVLink fabric partitions reported".into();
        }
        let sizes: Vec<String> = self
            .fabric_partition_sizes
            .iter()
            .map(ToString::to_string)
            .collect();
        format!(
            "{} NVSwitches; NVLink partitions of {}",
            self.nvswitches,
            sizes.join(", ")
        )
    }
}

/// One of a node's recent agent tasks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRow {
    pub id: String,
    pub kind: String,
    pub state: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    pub error: Option<String>,
    /// (phase, status, elapsed ms)
    pub phases: Vec<(String, String, i64)>,
}

impl TaskRow {
    /// The finished phases: "create_vm ok in 120 ms · boot ok in 900 ms".
    pub fn finished_phases(&self) -> String {
        self.phases
            .iter()
            .filter(|(_, status, _)| status != "started")
            .map(|(phase, status, ms)| format!("{phase} {status} in {ms} ms"))
            .collect::<Vec<_>>()
            .join(" · ")
    }
}

/// A node's page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeDetail {
    pub node: NodeSummary,
    pub canonical_name: String,
    pub health: Option<String>,
    pub health_detail: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub enrolled_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub agent_enrolled_at: Option<OffsetDateTime>,
    /// When the open bootstrap token expires, if one waits to be used.
    #[serde(with = "time::serde::rfc3339::option")]
    pub open_token_expires: Option<OffsetDateTime>,
    /// Where tenants reach this node's guests: the address set by an operator (`None`: the
    /// hostname is used).
    pub public_host: Option<String>,
    /// The first public port; slot `i` owns the 8 from `public_port_base + 8 i`.
    pub public_port_base: u16,
    /// The range of public ports its approved slots use, e.g. "22000–22063".
    pub public_ports: String,
    pub slots: Vec<SlotRow>,
    /// The latest proposal (pending or decided).
    pub proposal: Option<ProposalView>,
    pub tasks: Vec<TaskRow>,
    /// The latest GPU health events of the node, newest first.
    pub gpu_events: Vec<GpuHealthEvent>,
    pub audit: Vec<AuditLine>,
    /// Where it hangs off the fabric, as approved; none until imported or set.
    #[serde(default)]
    pub fabric_place: Option<NodeFabricPlace>,
}

/// A node's approved place in the fabric, and the place an import saw instead, if one did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFabricPlace {
    pub fabric: String,
    pub spine_group: String,
    pub leaf: String,
    /// `ibnetdiscover`, `slurm_topology` or `operator`.
    pub source: String,
    /// `fabric/spine group/leaf` as an import saw it: the node is out of clusters until an
    /// operator approves that or sets a place.
    pub drift: Option<String>,
}

/// A GPU health event an agent reported, as operators see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuHealthEvent {
    pub gpu_pci_address: String,
    /// The live slot of that GPU when the event arrived.
    pub slot_index: Option<i32>,
    /// `xid`, `ecc_uncorrectable` or `thermal`.
    pub kind: String,
    pub xid: Option<i32>,
    pub detail: String,
    #[serde(with = "time::serde::rfc3339")]
    pub observed_at: OffsetDateTime,
    pub took_out_of_service: bool,
}

/// The fleet's GPU health policy: which events take a GPU's slot out of service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuHealthPolicy {
    pub xid_codes: Vec<u32>,
    pub ecc_uncorrectable: bool,
    pub thermal: bool,
    /// Who changed it last (none: the defaults).
    pub updated_by: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

impl GpuHealthPolicy {
    /// "48, 63, 64, 74, 79"
    pub fn xid_list(&self) -> String {
        self.xid_codes
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl NodeDetail {
    /// "healthy", "degraded: GPU 3 missing", or that no heartbeat came yet.
    pub fn health_line(&self) -> String {
        match (&self.health, &self.health_detail) {
            (Some(h), Some(detail)) => format!("{h}: {detail}"),
            (Some(h), None) => h.clone(),
            (None, _) => "no heartbeat yet".into(),
        }
    }
}

/// The answer to an enrolment: the token is shown once and never stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enrolment {
    pub node_id: NodeId,
    pub hostname: String,
    pub bootstrap_token: String,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proposal(sizes: Vec<usize>) -> ProposalView {
        ProposalView {
            generation: 1,
            discovered_at: OffsetDateTime::UNIX_EPOCH,
            status: "pending".into(),
            decided_by: None,
            decision_reason: None,
            slots: Vec::new(),
            gone: Vec::new(),
            wipe_methods: Vec::new(),
            warnings: Vec::new(),
            fabric_partition_sizes: sizes,
            nvswitches: 6,
        }
    }

    #[test]
    fn the_fabric_sentence_lists_partition_sizes_or_says_there_are_none() {
        assert_eq!(
            proposal(vec![8, 4, 4]).fabric(),
            "6 NVSwitches; NVLink partitions of 8, 4, 4"
        );
        assert_eq!(
            proposal(Vec::new()).fabric(),
            "no NVLink fabric partitions reported"
        );
    }

    #[test]
    fn task_phases_leave_out_the_ones_still_running() {
        let t = TaskRow {
            id: "t".into(),
            kind: "allocation.provision".into(),
            state: "running".into(),
            created_at: OffsetDateTime::UNIX_EPOCH,
            error: None,
            phases: vec![
                ("create_vm".into(), "ok".into(), 120),
                ("boot".into(), "started".into(), 0),
            ],
        };
        assert_eq!(t.finished_phases(), "create_vm ok in 120 ms");
    }
}

/// The fleet's approved fabric places as a tree, for the fleet page: fabric → spine group →
/// leaf → nodes, with what each leaf has free now, and the nodes whose last import saw them
/// elsewhere.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FabricTree {
    pub fabrics: Vec<FabricBranch>,
    pub drifting: Vec<FabricDriftRow>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FabricBranch {
    pub name: String,
    pub spines: Vec<SpineBranch>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpineBranch {
    pub name: String,
    pub leaves: Vec<LeafBranch>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeafBranch {
    pub name: String,
    /// Free GPUs on the leaf's nodes that sell now.
    pub free_gpus: i64,
    pub gpus: i64,
    pub nodes: Vec<FabricNodeRow>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FabricNodeRow {
    pub id: NodeId,
    pub hostname: String,
    pub free_gpus: i64,
    pub gpus: i64,
    /// False while draining, unhealthy, silent or unapproved: not counted as free.
    pub selling: bool,
    /// Out of clusters until an operator approves the place an import saw.
    pub drifting: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FabricDriftRow {
    pub id: NodeId,
    pub hostname: String,
    /// `fabric/spine group/leaf`.
    pub approved: String,
    pub seen: String,
}
