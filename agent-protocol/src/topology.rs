//! What `slice.topology_discover` reports: the host as read from sysfs (and NVIDIA's tools when
//! present), and the slot map the agent proposes. PCI addresses are in sysfs form,
//! `dddd:bb:dd.f`, lowercase.

use serde::{Deserialize, Serialize};

use crate::CapacityMetadata;

/// The answer of `slice.topology_discover`. `approval_required` is always `true`: discovery
/// never creates schedulable slots; only an operator's approval does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Discovery {
    pub approval_required: bool,
    pub host: HostTopology,
    pub proposed_slots: Vec<SlotSpec>,
    /// The `destructive_wipe_policy` values this agent can carry out.
    pub wipe_methods: Vec<String>,
    /// What the reader noticed but could not use (a GPU with no NVMe on its NUMA node, …).
    pub warnings: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostTopology {
    pub hostname: String,
    pub numa_nodes: Vec<NumaNode>,
    /// Every PCI function under `/sys/bus/pci/devices`.
    pub pci_devices: Vec<PciDevice>,
    pub gpus: Vec<Gpu>,
    /// PCI addresses of NVSwitches (as bridges or as their own class).
    pub nvswitches: Vec<String>,
    pub nvme: Vec<NvmeController>,
    pub infiniband: Vec<IbDevice>,
    /// NVLink fabric partitions; empty when the host has no NVLink fabric or no tool to ask.
    pub fabric_partitions: Vec<FabricPartition>,
}

impl HostTopology {
    /// The NUMA node a device is local to. The kernel says -1 (read as `None`) when the
    /// firmware gives no affinity: on a host with one NUMA node that can only mean that node
    /// (single-socket servers and VMs report it so); on a larger host it stays unknown.
    pub fn numa_of(&self, reported: Option<u32>) -> Option<u32> {
        match (reported, self.numa_nodes.as_slice()) {
            (Some(n), _) => Some(n),
            (None, [only]) => Some(only.id),
            (None, _) => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaNode {
    pub id: u32,
    /// Kernel cpulist syntax, e.g. `0-47,96-143`.
    pub cpus: String,
    pub cpu_count: u32,
    pub memory_mib: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciDevice {
    pub address: String,
    /// 24-bit class code, e.g. `0x030200` (3D controller).
    pub class: String,
    pub vendor_id: String,
    pub device_id: String,
    /// `None` where sysfs says -1 (no affinity).
    pub numa_node: Option<u32>,
    pub iommu_group: Option<u32>,
    pub driver: Option<String>,
    /// For an SR-IOV virtual function: its physical function.
    pub physfn: Option<String>,
    /// For a physical function: its enabled virtual functions.
    pub virtfns: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    pub pci_address: String,
    pub model: String,
    pub uuid: Option<String>,
    pub numa_node: Option<u32>,
    pub iommu_group: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmeController {
    /// `nvme0`, …
    pub name: String,
    pub pci_address: String,
    pub serial: String,
    pub model: String,
    pub numa_node: Option<u32>,
    pub namespaces: Vec<NvmeNamespace>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmeNamespace {
    /// `nvme0n1`, …
    pub name: String,
    pub size_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IbDevice {
    /// `mlx5_0`, …
    pub name: String,
    pub pci_address: String,
    pub numa_node: Option<u32>,
    /// Set for a virtual function: the physical function's PCI address.
    pub physfn: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FabricPartition {
    pub id: u32,
    pub active: bool,
    /// The GPUs in the partition, by PCI address.
    pub gpus: Vec<String>,
}

/// One proposed (or approved) slot: a GPU with its dedicated NVMe and IB VF, CPUs and memory
/// on one NUMA node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotSpec {
    pub slot_index: u32,
    pub gpu: SlotGpu,
    pub numa_node: Option<u32>,
    pub nvme: Option<SlotNvme>,
    pub ib_vf_pci_address: Option<String>,
    /// Kernel cpulist syntax.
    pub cpu_set: String,
    pub memory_mib: u64,
    /// `storage_ownership`, `fabric_claim_mode`, `fabric_vf_pci_address`,
    /// `destructive_wipe_policy`, … (see [`crate::metadata`]).
    pub capacity_metadata: CapacityMetadata,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotGpu {
    pub pci_address: String,
    pub model: String,
    pub uuid: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotNvme {
    pub pci_address: String,
    pub serial: String,
    /// The namespace the slot owns, e.g. `nvme3n1`.
    pub namespace: String,
    pub size_bytes: u64,
}
