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
//! | `POST /agent/v1/reconcile` | `{}` | [`ReconcileResponse`] |
//!
//! A task's reports may carry its [`TraceParent`] as the `traceparent` header (W3C trace
//! context): the server files them in the launch's trace.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub mod identity;
pub mod ranges;
pub mod scrape;
pub mod topology;
pub mod trace;

pub use topology::{
    Discovery, FabricPartition, Gpu, HostTopology, IbDevice, NumaNode, NvmeController,
    NvmeNamespace, PciDevice, SlotGpu, SlotNvme, SlotSpec,
};
pub use trace::{TRACEPARENT, TraceParent};

/// The protocol version this build speaks. The server refuses any other. Version 2 added
/// the volumes update task, which an agent of version 1 could not read; version 3 added stop
/// and start ([`ReleasePlan::save_root`], [`ProvisionPlan::restore_from`]), which an older agent
/// would ignore, wiping a disk it was to save or booting an image instead of the saved disk.
pub const PROTOCOL_VERSION: u32 = 3;

/// The URL prefix of the node API for [`PROTOCOL_VERSION`].
pub const API_PREFIX: &str = "/agent/v3";

/// The header every agent request carries: its protocol version, as a decimal number.
pub const PROTOCOL_HEADER: &str = "x-agent-protocol";

/// The longest a claim may wait for a task, in seconds; the server caps longer waits.
pub const MAX_CLAIM_WAIT_S: u32 = 25;

/// Where every host keeps the images listings may launch (the operator's image directory). A
/// listing's image source is a file directly in it; the agent maps it onto its configured
/// directory and never reads an image from anywhere else.
pub const IMAGE_DIR: &str = "/var/lib/gpuaas/images";

/// The file name an image source names in [`IMAGE_DIR`], and its disk format (from the
/// extension; always given to `qemu-img`, which must never guess it from the content), or why
/// it is refused.
pub fn image_file(source: &str) -> Result<(&str, &'static str), String> {
    let refuse = || {
        format!(
            "{source:?} is not an image in {IMAGE_DIR}: give {IMAGE_DIR}/<name>.qcow2 (or .raw, .img), \
             a file name of letters, digits, '.', '_', '+' and '-'"
        )
    };
    let name = source
        .strip_prefix(IMAGE_DIR)
        .and_then(|rest| rest.strip_prefix('/'))
        .ok_or_else(refuse)?;
    let plain = (1..=200).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'));
    let format = match name.rsplit_once('.') {
        Some((_, "qcow2")) => "qcow2",
        Some((_, "raw" | "img")) => "raw",
        _ => return Err(refuse()),
    };
    if plain {
        Ok((name, format))
    } else {
        Err(refuse())
    }
}

/// A SHA-256 as `sha256sum` prints it (an optional `sha256:` prefix, any case), as 64 lowercase
/// hex digits; or why it is not one.
pub fn parse_sha256(s: &str) -> Result<String, String> {
    let hex = s.trim();
    let hex = hex.strip_prefix("sha256:").unwrap_or(hex);
    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(hex.to_ascii_lowercase())
    } else {
        Err(
            "not a SHA-256: give the 64 hexadecimal digits `sha256sum` prints for the image file"
                .into(),
        )
    }
}

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
    /// The control plane is briefly unavailable (its database restarting): retry.
    pub const UNAVAILABLE: &str = "unavailable";
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
    /// What guests reported to the node's telemetry sink since the last heartbeat.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub utilisation: Vec<GpuUtilisation>,
    /// GPU health events the control plane has not acknowledged yet (each is resent with every
    /// heartbeat until one is answered; the control plane records an event id once). Added
    /// without a version bump: an older agent sends none, and the field is optional.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_events: Vec<GpuEvent>,
    /// What the host holds now, for the control plane's reconciliation (a VM with no
    /// allocation, an allocation whose VM is gone). Optional, without a version bump: an older
    /// agent sends none and is not reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holding: Option<Holding>,
    /// The host's VXLAN tunnel endpoint: its address on the network between hosts, where
    /// other hosts send its guests' private traffic. Optional, without a version bump: a host
    /// without one carries no private network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vtep: Option<String>,
}

/// The leases and VMs on a host, as its agent reads them at a heartbeat.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holding {
    /// Every slot lease: (slot, allocation).
    pub leases: Vec<HeldLease>,
    /// The allocation of every VM (domain) defined on the host.
    pub vms: Vec<String>,
}

/// The most a [`Holding`] may list of each (a host has at most a few dozen slots).
pub const MAX_HOLDING: usize = 256;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldLease {
    pub slot_id: String,
    pub allocation_id: String,
}

/// What went wrong with one GPU, as the agent saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuEvent {
    /// The agent's id for the event, stable across resends: `[A-Za-z0-9_-]{1,64}`.
    pub id: String,
    /// The GPU's PCI address in sysfs form (`0000:3b:00.0`).
    pub gpu_pci_address: String,
    pub kind: GpuEventKind,
    /// The XID number, for [`GpuEventKind::Xid`] only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<u32>,
    /// What the driver said, for people (at most 500 characters, no control characters).
    pub detail: String,
    /// When the agent saw it (Unix seconds).
    pub observed_at: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuEventKind {
    /// An XID error from the NVIDIA driver (the kernel log's `NVRM: Xid`).
    Xid,
    /// The GPU's uncorrectable ECC error count went up.
    EccUncorrectable,
    /// Hardware thermal slowdown began.
    Thermal,
}

impl GpuEventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            GpuEventKind::Xid => "xid",
            GpuEventKind::EccUncorrectable => "ecc_uncorrectable",
            GpuEventKind::Thermal => "thermal",
        }
    }
}

/// One allocation's GPU utilisation, aggregated by the agent from its guest's reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuUtilisation {
    pub allocation_id: String,
    /// The mean over the window and over the allocation's GPUs, 0–100.
    pub gpu_util_pct: u8,
    /// How many guest reports the mean covers.
    pub samples: u32,
}

/// What the control plane believes about this node, for an agent that (re)starts or checks a
/// plan: the approved slots exactly as plans name them, the tasks it claimed and has not
/// finished, and the allocations that still hold (or are cleaning) its slots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileResponse {
    pub approved_slots: Vec<PlannedSlot>,
    pub running_tasks: Vec<Task>,
    pub active_allocations: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatAck {
    pub heartbeat_interval_s: u32,
    /// The private networks of this host's guests, with every member (when the heartbeat
    /// named a tunnel endpoint). Optional: an older server sends none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlay: Option<Overlay>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRequest {
    /// How long to hold the request open when no task is queued (capped at
    /// [`MAX_CLAIM_WAIT_S`]).
    pub wait_s: u32,
    /// The agent runs no task now. A task the control plane has as running on this node is
    /// then one whose claim answer was lost on the way (a dropped connection, a server killed
    /// after its commit): it is sent again, and the agent resumes it as after a restart.
    /// Optional: an older agent sends none and gets only queued tasks.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idle: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimResponse {
    pub task: Option<Task>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub task_id: String,
    pub spec: TaskSpec,
    /// The trace the task belongs to (the launch or release that queued it), when the control
    /// plane exports traces; the agent parents its task and phase spans on it and sends it
    /// back as the `traceparent` header of the task's reports. Older agents ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<TraceParent>,
}

/// The bounded host primitives an agent executes. Never a shell.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum TaskSpec {
    /// Read the host and propose a slot map (always `approval_required`).
    #[serde(rename = "slice.topology_discover")]
    TopologyDiscover {},
    /// Start a VM on the plan's slots (VFIO passthrough of each GPU and IB VF).
    #[serde(rename = "slice.vm_provision")]
    VmProvision(ProvisionPlan),
    /// Stop and destroy the VM, wipe, verify, reset the GPUs, prove it.
    #[serde(rename = "slice.vm_release")]
    VmRelease(ReleasePlan),
    /// Hand the whole node to the tenant (every slot in the plan).
    #[serde(rename = "baremetal.provision")]
    BaremetalProvision(ProvisionPlan),
    #[serde(rename = "baremetal.release")]
    BaremetalRelease(ReleasePlan),
    /// Re-render a running allocation's forwarding (the tenant published or withdrew ports).
    #[serde(rename = "allocation.network_update")]
    NetworkUpdate(NetworkUpdatePlan),
    /// Plug in and unplug a running allocation's volumes until it has exactly the plan's.
    #[serde(rename = "allocation.volumes_update")]
    VolumesUpdate(VolumesPlan),
}

impl TaskSpec {
    pub fn kind(&self) -> &'static str {
        match self {
            TaskSpec::TopologyDiscover {} => "slice.topology_discover",
            TaskSpec::VmProvision(_) => "slice.vm_provision",
            TaskSpec::VmRelease(_) => "slice.vm_release",
            TaskSpec::BaremetalProvision(_) => "baremetal.provision",
            TaskSpec::BaremetalRelease(_) => "baremetal.release",
            TaskSpec::NetworkUpdate(_) => "allocation.network_update",
            TaskSpec::VolumesUpdate(_) => "allocation.volumes_update",
        }
    }
}

/// One approved slot as a plan names it; the agent checks it against its own approved map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedSlot {
    pub slot_id: String,
    pub slot_index: u32,
    pub gpu_pci_address: String,
    pub nvme_pci_address: String,
    pub nvme_serial: String,
    pub nvme_namespace: String,
    pub ib_vf_pci_address: String,
    pub cpu_set: String,
    /// The NUMA node the slot's GPU, CPUs and memory sit on.
    pub numa_node: u32,
    pub memory_mib: u64,
    pub nvme_size_bytes: u64,
    pub wipe_policy: String,
    /// `52:54:` + the first 4 bytes of sha256(`{node_id}:{slot_index}`).
    pub mac_address: String,
    /// `10.100.0.{10 + slot_index}`.
    pub ip_address: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRef {
    /// The marketplace listing and version, e.g. `pytorch 2.5`.
    pub name: String,
    pub source: String,
    /// The SHA-256 the file must have (lowercase hex; see [`parse_sha256`]), when the version
    /// names one: the agent checks it before converting the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    pub ssh_user: String,
    /// The version's cloud-config fragment as a JSON object (empty: none), merged after the
    /// platform's own keys: lists are appended, other keys the platform doesn't set are added.
    #[serde(default)]
    pub cloud_init: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvisionPlan {
    pub allocation_id: String,
    /// The allocation's name, for the VM's hostname.
    pub name: String,
    pub image: ImageRef,
    /// One or more OpenSSH public keys, one per line.
    pub ssh_public_key: String,
    /// The tenant's own cloud-init user data (`#cloud-config…` or `#!…`), where the image
    /// accepts it: the seed carries it after the platform's cloud-config, as a second part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    pub slots: Vec<PlannedSlot>,
    /// How the guest is reached and whom it may reach (absent from older control planes:
    /// then nothing is published and the guest is isolated).
    #[serde(default)]
    pub network: NetworkPlan,
    /// The fabric partitions the slots join before the VM starts (absent: none).
    #[serde(default)]
    pub fabric: FabricPlan,
    /// For a cluster's member: what a multi-node job needs at boot. Optional, without a
    /// version bump: an older agent boots the member as a lone instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterBoot>,
    /// A started instance: its boot disk is this saved root disk, copied onto the first
    /// slot's disk instead of the image (the image still names the SSH user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_from: Option<VolumeTarget>,
}

/// A cluster member's view of its cluster: every member by name and private address (for
/// `/etc/hosts` and a hostfile), and the cluster's own SSH key pair, so that members reach
/// each other without the tenant copying a key around.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterBoot {
    pub cluster_id: String,
    pub name: String,
    /// This member's place, 1 to the cluster's size.
    pub index: u32,
    /// Every member, this one included, by index. Filled in when the task is handed over.
    #[serde(default)]
    pub members: Vec<ClusterPeer>,
    /// The cluster's key pair: an OpenSSH public key line, and its private key. The private
    /// key is never stored with the task; the control plane adds it when handing the task
    /// over, and the agent writes it into the guest only.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ssh_public_key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ssh_private_key: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterPeer {
    pub index: u32,
    /// The member's instance name (its hostname, as the agent derives one from a name).
    pub name: String,
    /// Its address on the project's private network, if its project allows east-west.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// The most members a cluster has (the control plane's limit too).
pub const MAX_CLUSTER_MEMBERS: usize = 128;

/// An allocation's fabric isolation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FabricPlan {
    /// The tenant's InfiniBand partition key (0x0001–0x7ffe): each slot's IB VF becomes a
    /// full member of it, and of no other tenant's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ib_pkey: Option<u16>,
    /// On NVSwitch hosts, the NVLink fabric partition that holds exactly the plan's GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_partition: Option<u32>,
}

/// How a host reaches a volume on its region's storage backend: what the agent writes into the
/// guest's disk definition. Names no secret: a host authenticates to the storage network with
/// its own configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "protocol", rename_all = "snake_case")]
pub enum VolumeTarget {
    /// `nbd://host:port/export`.
    Nbd {
        host: String,
        port: u16,
        export: String,
    },
    /// `rbd:pool/image`, through the cluster's monitors as `user`.
    Rbd {
        pool: String,
        image: String,
        monitors: Vec<String>,
        user: String,
    },
}

impl VolumeTarget {
    /// The target as an address a person (or `qemu-io`) reads: `nbd://10.0.0.5:10809/vol-…`.
    pub fn uri(&self) -> String {
        match self {
            VolumeTarget::Nbd { host, port, export } => format!("nbd://{host}:{port}/{export}"),
            VolumeTarget::Rbd { pool, image, .. } => format!("rbd:{pool}/{image}"),
        }
    }
}

/// The most volumes one instance has attached.
pub const MAX_VOLUMES_PER_INSTANCE: usize = 8;

/// One volume a running allocation's VM is to have plugged in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeDisk {
    pub volume_id: String,
    /// The serial the guest sees (`/dev/disk/by-id/virtio-<serial>`): the volume's id without
    /// dashes, cut to virtio's 20 characters.
    pub serial: String,
    pub target: VolumeTarget,
}

/// The volumes a running allocation's VM is to have plugged in: exactly these. The agent plugs
/// in what is missing and unplugs what is not listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumesPlan {
    pub allocation_id: String,
    pub slots: Vec<PlannedSlot>,
    pub volumes: Vec<VolumeDisk>,
}

/// A running allocation's new network plan; its slots must be leased to it and running.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkUpdatePlan {
    pub allocation_id: String,
    pub slots: Vec<PlannedSlot>,
    pub network: NetworkPlan,
}

/// An allocation's place on its host's slot network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkPlan {
    /// The name or address tenants connect to (the host's public address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_host: Option<String>,
    /// The public port that forwards to the guest's port 22
    /// ([`identity::public_port`]`(base, first slot, 0)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_port: Option<u16>,
    /// The other guest ports published, each on its own public port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub published: Vec<PublishedPort>,
    /// Guests whose allocations name the same group on this host may reach each other (a
    /// project that allows east-west traffic); `None`: this guest reaches no other guest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub east_west_group: Option<String>,
    /// The guest's NIC on its project's private network across hosts, when its project allows
    /// east-west traffic. Optional, without a version bump: an older agent gives the guest
    /// none, and the guest keeps its slot network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private: Option<PrivateNic>,
}

/// A guest's second NIC, on its project's segment ([`identity::PRIVATE_NETWORK`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrivateNic {
    /// The project's segment ([`identity::VNIS`]).
    pub vni: u32,
    /// [`identity::private_address`] of the member's host number.
    pub address: String,
    /// [`identity::private_mac`] of the same host number.
    pub mac: String,
}

/// The members of the private networks a host carries: what its VXLAN forwarding entries
/// are made of. Sent with each heartbeat's answer; the host keeps the entries of other hosts'
/// members, so that a packet for any other address goes nowhere (no flooding).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overlay {
    pub networks: Vec<OverlayNetwork>,
}

/// One project's segment: every member, on every host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverlayNetwork {
    pub vni: u32,
    pub members: Vec<OverlayMember>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverlayMember {
    pub address: String,
    pub mac: String,
    /// The member's host's tunnel endpoint (its [`Heartbeat::vtep`]).
    pub vtep: String,
}

/// The most members an [`Overlay`] lists in all, so that one answer stays small.
pub const MAX_OVERLAY_MEMBERS: usize = 8192;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedPort {
    pub public_port: u16,
    pub guest_port: u16,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasePlan {
    pub allocation_id: String,
    pub slots: Vec<PlannedSlot>,
    /// A stop: the first slot's disk (the boot disk) is copied here after the VM is gone and
    /// before the wipe. A release resumed once its wipe began never copies again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub save_root: Option<VolumeTarget>,
}

/// What a successful provision reports: where the tenant connects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provisioned {
    pub ssh_host: String,
    pub ssh_port: u16,
    pub ssh_user: String,
}

/// One slot's cleaning, as the agent proves it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotCleanup {
    pub slot_id: String,
    pub nvme_serial: String,
    pub wipe_method: String,
    /// How long the wipe itself took.
    pub wipe_ms: u64,
    pub wipe_verified: bool,
    /// How many blocks the verification read back.
    pub verified_samples: u32,
    pub gpu_reset: bool,
    /// The GPU firmware identity seen after the reset (a version, or a digest of its ROM).
    pub gpu_firmware: String,
    /// Whether that firmware is the one this host recorded before any tenant had the GPU.
    pub firmware_ok: bool,
}

/// The proof a release ends with, signed with the node credential: HMAC-SHA-256 keyed with
/// SHA-256(credential) over [`CleanupProof::signing_message`], as lowercase hex.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupProof {
    pub allocation_id: String,
    pub node_id: String,
    pub slots: Vec<SlotCleanup>,
    pub signature: String,
}

impl CleanupProof {
    /// The exact bytes the signature covers: one line per fact, in order.
    pub fn signing_message(&self) -> String {
        let mut m = format!(
            "gpuaas-cleanup-proof/v2\nallocation {}\nnode {}\n",
            self.allocation_id, self.node_id
        );
        for s in &self.slots {
            m.push_str(&format!(
                "slot {} nvme {} wipe {} wipe_ms {} verified {} samples {} gpu_reset {} firmware {} firmware_ok {}\n",
                s.slot_id,
                s.nvme_serial,
                s.wipe_method,
                s.wipe_ms,
                s.wipe_verified,
                s.verified_samples,
                s.gpu_reset,
                s.gpu_firmware,
                s.firmware_ok
            ));
        }
        m
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
    /// The answer to a provision (slice or bare metal).
    #[serde(rename = "allocation.provisioned")]
    Provisioned(Provisioned),
    /// The answer to a release: the cleanup proof.
    #[serde(rename = "allocation.cleaned")]
    Cleaned(CleanupProof),
    /// The answer to a network update: the host forwards what the plan says.
    #[serde(rename = "allocation.network_updated")]
    NetworkUpdated {},
    /// The answer to a volumes update: the ids of the volumes plugged in now.
    #[serde(rename = "allocation.volumes_updated")]
    VolumesUpdated { attached: Vec<String> },
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
        assert_eq!(json, r#"{"protocol_version":3,"agent_version":"0.1.0"}"#);
        let back: AgentHello = serde_json::from_str(&json).unwrap();
        assert!(back.is_supported());
        let future = AgentHello {
            protocol_version: 4,
            ..back
        };
        assert!(!future.is_supported());
    }

    #[test]
    fn tasks_and_outcomes_are_tagged_by_kind_and_status() {
        let task = Task {
            task_id: "t1".into(),
            spec: TaskSpec::TopologyDiscover {},
            traceparent: None,
        };
        assert_eq!(
            serde_json::to_string(&task).unwrap(),
            r#"{"task_id":"t1","spec":{"kind":"slice.topology_discover"}}"#
        );
        // The trace context is optional both ways, and checked when present.
        let traced = r#"{"task_id":"t1","spec":{"kind":"slice.topology_discover"},"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}"#;
        let back: Task = serde_json::from_str(traced).unwrap();
        assert_eq!(back.traceparent.unwrap().span_id(), "00f067aa0ba902b7");
        assert!(
            serde_json::from_str::<Task>(
                r#"{"task_id":"t1","spec":{"kind":"slice.topology_discover"},"traceparent":"junk"}"#
            )
            .is_err()
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

#[cfg(test)]
mod image_file_tests {
    use super::*;

    #[test]
    fn only_plain_files_in_the_image_directory_are_images() {
        assert_eq!(
            image_file("/var/lib/gpuaas/images/pytorch-2.5.qcow2"),
            Ok(("pytorch-2.5.qcow2", "qcow2"))
        );
        assert_eq!(
            image_file("/var/lib/gpuaas/images/disk.img").unwrap().1,
            "raw"
        );
        for bad in [
            "/etc/shadow",
            "/var/lib/gpuaas/images/../../../etc/shadow.qcow2",
            "/var/lib/gpuaas/images/sub/dir.qcow2",
            "/var/lib/gpuaas/images/.hidden.qcow2",
            "/var/lib/gpuaas/imagesX/a.qcow2",
            "/var/lib/gpuaas/images/a.vmdk",
            "/var/lib/gpuaas/images/",
            "https://example.com/a.qcow2",
            "a.qcow2",
        ] {
            assert!(image_file(bad).is_err(), "{bad}");
        }
    }
}
