//! Everything above the driver, the same for a real and a simulated host: checking each plan
//! against the approved slots and the leases, the provision and release phases, the leases
//! they move through, the cleanup proof, fault injection, and recovery after a crash.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_protocol::{
    FabricPlan, NetworkPlan, Overlay, PhaseReport, PlannedSlot, ProvisionPlan, Provisioned,
    ReconcileResponse, ReleasePlan, SlotCleanup, TaskOutput, TaskSpec, identity,
};

use crate::domain::{self, DomainSpec};
use crate::driver::{DomainState, Driver, phase};
use crate::fabric::{self, IbFabric, Membership, NvlinkFabric, SimulatedIb, SimulatedNvlink};
use crate::image;
use crate::lease::{Lease, LeaseKind, LeaseStore, PluggedVolume, now_s};
use crate::network::{Attachment, NetState, SimulatedNetwork, SlotNetwork};
use crate::wipe;

/// Test knobs: make a phase fail, or make the process die the moment a phase starts.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    pub fail_at: Option<String>,
    pub crash_at: Option<String>,
}

/// Why a task did not finish.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    /// It failed; the control plane is told why.
    Failed(String),
    /// The agent is shutting down; the task is left to the next start's recovery.
    Interrupted,
}

impl From<String> for Stop {
    fn from(e: String) -> Self {
        Stop::Failed(e)
    }
}

pub struct Agent {
    pub node_id: String,
    pub credential: String,
    pub driver: Arc<dyn Driver>,
    /// The slot network: bridge, DHCP, NAT, forwarded ports and east-west rules.
    pub network: Arc<dyn SlotNetwork>,
    /// InfiniBand partitions (OpenSM, or simulated).
    pub ib: Arc<dyn IbFabric>,
    /// NVLink fabric partitions (Fabric Manager, or simulated).
    pub nvlink: Arc<dyn NvlinkFabric>,
    pub state_dir: PathBuf,
    pub leases: LeaseStore,
    pub faults: Faults,
    /// The port of the telemetry sink on the slot network, written into each guest's seed.
    pub telemetry_port: u16,
    pub guest_timeout: Duration,
    pub shutdown_timeout: Duration,
    pub wipe_timeout: Duration,
    /// Set on SIGTERM: the current phase finishes, the next does not start.
    pub stopping: AtomicBool,
    /// The members of this host's private segments on every host, as the last heartbeat's
    /// answer listed them.
    overlay: Mutex<Overlay>,
    /// The approved slots the network was last applied with, to apply it again when only the
    /// overlay changed.
    approved: Mutex<Option<Vec<PlannedSlot>>>,
}

type Report<'a> = &'a mut dyn FnMut(PhaseReport);

impl Agent {
    pub fn new(
        node_id: String,
        credential: String,
        driver: Arc<dyn Driver>,
        state_dir: PathBuf,
    ) -> Self {
        Self {
            leases: LeaseStore::new(&state_dir),
            network: Arc::new(SimulatedNetwork::new(&state_dir)),
            ib: Arc::new(SimulatedIb::new(&state_dir)),
            nvlink: Arc::new(SimulatedNvlink::new(&state_dir, Vec::new())),
            node_id,
            credential,
            driver,
            state_dir,
            faults: Faults::default(),
            telemetry_port: 9400,
            guest_timeout: Duration::from_secs(600),
            shutdown_timeout: Duration::from_secs(60),
            wipe_timeout: Duration::from_secs(6 * 3600),
            stopping: AtomicBool::new(false),
            overlay: Mutex::new(Overlay::default()),
            approved: Mutex::new(None),
        }
    }

    /// One phase: reported, timed, recorded in the leases, subject to the fault knobs.
    fn step<T>(
        &self,
        name: &str,
        leases: Option<(&[PlannedSlot], &str)>,
        report: Report<'_>,
        work: impl FnOnce() -> Result<T, String>,
    ) -> Result<T, Stop> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err(Stop::Interrupted);
        }
        if let Some((slots, allocation)) = leases {
            self.mark(slots, allocation, name)?;
        }
        if self.faults.crash_at.as_deref() == Some(name) {
            eprintln!("node-agent: crash injected at phase {name}");
            std::process::exit(86);
        }
        let fail = self.faults.fail_at.as_deref() == Some(name);
        phase(name, self.driver.pause(name), report, || {
            if fail {
                return Err(format!("fault injected at phase {name}"));
            }
            work()
        })
        .map_err(Stop::Failed)
    }

    /// Records the phase reached in each slot's lease.
    fn mark(&self, slots: &[PlannedSlot], allocation: &str, phase: &str) -> Result<(), String> {
        for s in slots {
            if let Some(mut l) = self.leases.get(&s.slot_id)?
                && l.allocation_id == allocation
            {
                l.phase = phase.to_string();
                l.updated_at = now_s();
                self.leases.put(&l)?;
            }
        }
        Ok(())
    }

    /// Runs a task to its output.
    pub fn execute(
        &self,
        task_id: &str,
        spec: &TaskSpec,
        view: &ReconcileResponse,
        report: Report<'_>,
    ) -> Result<TaskOutput, Stop> {
        match spec {
            TaskSpec::TopologyDiscover {} => self
                .driver
                .topology_discover(report)
                .map(|d| TaskOutput::TopologyDiscovered(Box::new(d)))
                .map_err(Stop::Failed),
            TaskSpec::VmProvision(plan) => self
                .provision(task_id, plan, false, &view.approved_slots, report)
                .map(TaskOutput::Provisioned),
            TaskSpec::BaremetalProvision(plan) => self
                .provision(task_id, plan, true, &view.approved_slots, report)
                .map(TaskOutput::Provisioned),
            TaskSpec::NetworkUpdate(plan) => self
                .update_network(plan, &view.approved_slots, report)
                .map(|()| TaskOutput::NetworkUpdated {}),
            TaskSpec::VolumesUpdate(plan) => self
                .update_volumes(plan, &view.approved_slots, report)
                .map(|attached| TaskOutput::VolumesUpdated { attached }),
            TaskSpec::VmRelease(plan) | TaskSpec::BaremetalRelease(plan) => {
                let whole = matches!(spec, TaskSpec::BaremetalRelease(_));
                self.release(task_id, plan, whole, &view.approved_slots, report)
                    .map(|slots| {
                        TaskOutput::Cleaned(crate::proof::sign(
                            &self.credential,
                            &self.node_id,
                            &plan.allocation_id,
                            slots,
                        ))
                    })
            }
        }
    }

    /// Refuses a plan unless every slot is one of this node's approved slots exactly as
    /// approved (and as the identity rule names it), the hardware is present, and no other
    /// allocation holds a lease on it.
    pub fn check_plan(
        &self,
        allocation: &str,
        slots: &[PlannedSlot],
        whole_node: bool,
        approved: &[PlannedSlot],
    ) -> Result<(), String> {
        domain::allocation_id_ok(allocation)?;
        if slots.is_empty() {
            return Err("the plan names no slots".into());
        }
        let present = self.driver.pci_addresses()?;
        for s in slots {
            let Some(a) = approved.iter().find(|a| a.slot_id == s.slot_id) else {
                return Err(format!(
                    "slot {} ({}) is not an approved slot of this node; refusing the plan",
                    s.slot_index, s.slot_id
                ));
            };
            let differs = differences(a, s);
            if !differs.is_empty() {
                return Err(format!(
                    "slot {}: the plan's {} differ from the approved slot; refusing the plan",
                    s.slot_index,
                    differs.join(", ")
                ));
            }
            if s.mac_address != identity::mac_address(&self.node_id, s.slot_index)
                || s.ip_address != identity::ip_address(s.slot_index)
            {
                return Err(format!(
                    "slot {}: MAC {} / IP {} is not this node's identity for the slot; refusing the plan",
                    s.slot_index, s.mac_address, s.ip_address
                ));
            }
            for (what, addr) in [
                ("GPU", &s.gpu_pci_address),
                ("NVMe", &s.nvme_pci_address),
                ("IB VF", &s.ib_vf_pci_address),
            ] {
                if !present.contains(addr) {
                    return Err(format!(
                        "slot {}: this host has no {what} at {addr}; refusing the plan",
                        s.slot_index
                    ));
                }
            }
            if let Some(l) = self.leases.get(&s.slot_id)?
                && l.allocation_id != allocation
            {
                return Err(format!(
                    "slot {} is leased to allocation {} (phase {}); refusing the plan",
                    s.slot_index, l.allocation_id, l.phase
                ));
            }
        }
        if whole_node
            && let Some(missing) = approved
                .iter()
                .find(|a| !slots.iter().any(|s| s.slot_id == a.slot_id))
        {
            return Err(format!(
                "a whole-node plan must name every approved slot; slot {} is missing",
                missing.slot_index
            ));
        }
        Ok(())
    }

    fn paths(&self, allocation: &str) -> (PathBuf, PathBuf, PathBuf) {
        let dir = self.state_dir.join("allocations").join(allocation);
        (
            dir.join("seed"),
            dir.join("seed.iso"),
            dir.join("domain.xml"),
        )
    }

    pub fn provision(
        &self,
        task_id: &str,
        plan: &ProvisionPlan,
        whole_node: bool,
        approved: &[PlannedSlot],
        report: Report<'_>,
    ) -> Result<Provisioned, Stop> {
        let alloc = plan.allocation_id.as_str();
        let slots = plan.slots.as_slice();
        self.step("validate_plan", None, report, || {
            if plan.image.ssh_user.trim().is_empty() {
                return Err("the plan's image names no SSH user".into());
            }
            self.check_plan(alloc, slots, whole_node, approved)?;
            self.check_network(alloc, &plan.network)?;
            if let Some(c) = &plan.cluster {
                crate::cluster_boot::check(c, &plan.image.ssh_user)?;
            }
            self.check_fabric(slots, &plan.fabric)
        })?;
        let token = self.step("take_leases", None, report, || {
            // The firmware every later check compares with, recorded (where this host has
            // none yet) before any tenant has the GPU.
            for s in slots {
                self.firmware_baseline(&s.gpu_pci_address, true)?;
            }
            self.take_leases(
                task_id,
                alloc,
                slots,
                LeaseKind::Provision,
                "take_leases",
                Some((&plan.network, &plan.fabric)),
            )
        })?;
        let leased = Some((slots, alloc));
        let name = domain::domain_name(alloc);
        let running = self.driver.domain_state(&name)? == Some(DomainState::Running);
        let (seed_dir, seed_iso, xml_path) = self.paths(alloc);
        let disks: Vec<PathBuf> = slots
            .iter()
            .map(|s| self.driver.slot_disk(s))
            .collect::<Result<_, _>>()?;
        self.step("write_image", leased, report, || {
            if running {
                return Ok(()); // A restarted agent: the VM is up on this disk already.
            }
            if let Some(root) = &plan.restore_from {
                // A started instance boots the disk it was stopped with, not the image.
                self.driver.open_disk(&slots[0]).map(drop)?;
                image::restore_root(root, &disks[0])?;
                return slots[1..]
                    .iter()
                    .try_for_each(|s| self.driver.open_disk(s).map(drop));
            }
            let source = self.driver.image_path(&plan.image)?;
            if let Some(expected) = &plan.image.sha256 {
                image::verify_sha256(&source, expected)?;
            }
            image::write_image(&source, &disks[0], self.driver.disk_size(&slots[0]))?;
            // The other slots' namespaces are the guest's data disks (wiped at their last
            // release); file-backed ones are created at their size.
            slots[1..]
                .iter()
                .try_for_each(|s| self.driver.open_disk(s).map(drop))
        })?;
        self.step("cloud_init", leased, report, || {
            if running {
                return Ok(());
            }
            image::build_seed(plan, &token, self.telemetry_port, &seed_dir, &seed_iso)
        })?;
        self.step("define_domain", leased, report, || {
            let xml = domain::render(&DomainSpec {
                allocation_id: alloc,
                slots,
                disks: &disks,
                seed_iso: &seed_iso,
                private: plan.network.private.as_ref(),
            })?;
            std::fs::write(&xml_path, xml).map_err(|e| format!("{}: {e}", xml_path.display()))?;
            if running {
                return Ok(());
            }
            self.driver.define(&xml_path)
        })?;
        self.step("connect_network", leased, report, || {
            self.apply_network(approved)
        })?;
        // The VM is not started (nor handed over) until the fabric confirms membership.
        self.step("join_ib_partition", leased, report, || self.apply_ib())?;
        self.step("activate_nvlink", leased, report, || {
            let Some(id) = plan.fabric.nvlink_partition else {
                return Ok(());
            };
            // A smaller partition left active inside these GPUs (Fabric Manager's single-GPU
            // ones, or one a crash left behind) serves nobody: these GPUs are leased to this
            // allocation. One reaching beyond them is another tenant's, and activation fails.
            let ours: Vec<&String> = slots.iter().map(|s| &s.gpu_pci_address).collect();
            for p in self.nvlink.partitions()? {
                if p.active && p.id != id && p.gpus.iter().all(|g| ours.contains(&g)) {
                    self.nvlink.deactivate(p.id)?;
                }
            }
            self.nvlink.activate(id)
        })?;
        self.step("start_vm", leased, report, || {
            match self.driver.domain_state(&name)? {
                Some(DomainState::Running) => Ok(()),
                Some(_) => self.driver.start(&name),
                None => Err(format!("{name} is not defined")),
            }
        })?;
        self.step("wait_ssh", leased, report, || {
            self.driver
                .wait_guest(&name, &slots[0].ip_address, self.guest_timeout)
        })?;
        self.mark(slots, alloc, "running")?;
        // Bare metal too is a domain here (the whole node's devices), reached on the first
        // slot's NIC: through the host's public address where the plan publishes it.
        let net = &plan.network;
        Ok(match (&net.public_host, net.ssh_port) {
            (Some(host), Some(port)) => Provisioned {
                ssh_host: host.clone(),
                ssh_port: port,
                ssh_user: plan.image.ssh_user.clone(),
            },
            _ => Provisioned {
                ssh_host: slots[0].ip_address.clone(),
                ssh_port: 22,
                ssh_user: plan.image.ssh_user.clone(),
            },
        })
    }

    /// Publishes what a running allocation's new network plan says: its slots must be leased to
    /// it and running; the plan replaces the one in its first slot's lease, and the network is
    /// applied again. Idempotent.
    pub fn update_network(
        &self,
        plan: &agent_protocol::NetworkUpdatePlan,
        approved: &[PlannedSlot],
        report: Report<'_>,
    ) -> Result<(), Stop> {
        let alloc = plan.allocation_id.as_str();
        let slots = plan.slots.as_slice();
        self.step("validate_plan", None, report, || {
            self.check_plan(alloc, slots, false, approved)?;
            self.check_running(alloc, slots)?;
            self.check_network(alloc, &plan.network)
        })?;
        self.step("publish_ports", None, report, || {
            let mut first = self
                .leases
                .get(&slots[0].slot_id)?
                .ok_or("the allocation's first slot has no lease")?;
            first.network = Some(plan.network.clone());
            first.updated_at = now_s();
            self.leases.put(&first)?;
            self.apply_network(approved)
        })?;
        Ok(())
    }

    /// Makes the running VM's plugged-in volumes exactly the plan's: unplugs what the plan no
    /// longer names, plugs in what it adds, and returns the ids plugged in. Each change is
    /// written to the first slot's lease before it is made, so a task resumed after a crash
    /// converges on the same devices. Idempotent.
    pub fn update_volumes(
        &self,
        plan: &agent_protocol::VolumesPlan,
        approved: &[PlannedSlot],
        report: Report<'_>,
    ) -> Result<Vec<String>, Stop> {
        let alloc = plan.allocation_id.as_str();
        let slots = plan.slots.as_slice();
        self.step("validate_plan", None, report, || {
            self.check_plan(alloc, slots, false, approved)?;
            self.check_running(alloc, slots)?;
            if plan.volumes.len() > domain::MAX_VOLUMES {
                return Err(format!(
                    "{} volumes: a VM has at most {}",
                    plan.volumes.len(),
                    domain::MAX_VOLUMES
                ));
            }
            for v in &plan.volumes {
                domain::volume_disk(v, "vdq")?;
            }
            Ok(())
        })?;
        self.step("plug_volumes", None, report, || {
            let name = domain::domain_name(alloc);
            let mut first = self
                .leases
                .get(&slots[0].slot_id)?
                .ok_or("the allocation's first slot has no lease")?;
            let wanted = |p: &PluggedVolume| plan.volumes.contains(&p.disk);
            for gone in first.volumes.clone().iter().filter(|p| !wanted(p)) {
                let xml = self.device_file(alloc, gone)?;
                self.driver.detach_device(&name, &xml)?;
                first.volumes.retain(|p| p != gone);
                self.leases.put(&first)?;
            }
            for v in &plan.volumes {
                if first.volumes.iter().any(|p| p.disk == *v) {
                    // Plugged in already, or by a try that crashed before it said so.
                    let p = first.volumes.iter().find(|p| p.disk == *v).expect("found");
                    self.driver
                        .attach_device(&name, &self.device_file(alloc, p)?)?;
                    continue;
                }
                let taken: Vec<&str> = first.volumes.iter().map(|p| p.dev.as_str()).collect();
                let dev = (0..domain::MAX_VOLUMES)
                    .map(domain::volume_dev)
                    .find(|d| d.as_ref().is_ok_and(|d| !taken.contains(&d.as_str())))
                    .ok_or("no free volume device")??;
                let plugged = PluggedVolume {
                    disk: v.clone(),
                    dev,
                };
                first.volumes.push(plugged.clone());
                first.updated_at = now_s();
                self.leases.put(&first)?;
                self.driver
                    .attach_device(&name, &self.device_file(alloc, &plugged)?)?;
            }
            Ok(())
        })?;
        Ok(plan.volumes.iter().map(|v| v.volume_id.clone()).collect())
    }

    /// Refuses an update for slots that are not running this allocation on this host.
    fn check_running(&self, alloc: &str, slots: &[PlannedSlot]) -> Result<(), String> {
        for s in slots {
            match self.leases.get(&s.slot_id)? {
                Some(l)
                    if l.allocation_id == alloc
                        && l.kind == LeaseKind::Provision
                        && l.phase == "running" => {}
                _ => {
                    return Err(format!(
                        "slot {} is not running allocation {alloc} on this host; refusing the update",
                        s.slot_index
                    ));
                }
            }
        }
        Ok(())
    }

    /// Writes a plugged volume's device definition under the state directory.
    fn device_file(&self, alloc: &str, p: &PluggedVolume) -> Result<std::path::PathBuf, String> {
        let xml = domain::volume_disk(&p.disk, &p.dev)?;
        let dir = self.state_dir.join("devices");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join(format!("{alloc}-{}.xml", p.dev));
        std::fs::write(&path, xml).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }

    /// Takes (or, for a resumed task, keeps) each slot's lease; returns the allocation's
    /// telemetry token.
    fn take_leases(
        &self,
        task_id: &str,
        alloc: &str,
        slots: &[PlannedSlot],
        kind: LeaseKind,
        phase: &str,
        network: Option<(&NetworkPlan, &FabricPlan)>,
    ) -> Result<String, String> {
        let mut token = None;
        for s in slots {
            if let Some(l) = self.leases.get(&s.slot_id)?
                && l.allocation_id == alloc
            {
                token = Some(l.telemetry_token);
                break;
            }
        }
        let token = token.unwrap_or_else(new_token);
        for (i, s) in slots.iter().enumerate() {
            self.leases.put(&Lease {
                slot_id: s.slot_id.clone(),
                slot_index: s.slot_index,
                allocation_id: alloc.to_string(),
                task_id: task_id.to_string(),
                kind,
                phase: phase.to_string(),
                telemetry_token: token.clone(),
                updated_at: now_s(),
                network: network.filter(|_| i == 0).map(|n| n.0.clone()),
                fabric: network.filter(|_| i == 0).map(|n| n.1.clone()),
                volumes: Vec::new(),
            })?;
        }
        Ok(token)
    }

    /// The firmware this host recorded for a GPU before any tenant had it, in
    /// `{state_dir}/gpu-firmware/`; with `record`, what the GPU reports now becomes it when
    /// none was recorded (only ever while no tenant has had the GPU). An operator who
    /// upgrades firmware removes the entry.
    fn firmware_baseline(&self, pci: &str, record: bool) -> Result<String, String> {
        let dir = self.state_dir.join("gpu-firmware");
        let path = dir.join(pci.replace(':', "_"));
        if let Ok(v) = std::fs::read_to_string(&path) {
            return Ok(v.trim().to_string());
        }
        if !record {
            return Err(format!(
                "GPU {pci} has no recorded firmware baseline (was {} lost?); an operator must check its firmware",
                dir.display()
            ));
        }
        let seen = self.driver.gpu_firmware(pci)?;
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // Whole or not at all: an empty baseline after a crash would block the slot.
        let tmp = dir.join(format!(".{}.tmp", pci.replace(':', "_")));
        std::fs::write(&tmp, &seen)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(seen)
    }

    pub fn release(
        &self,
        task_id: &str,
        plan: &ReleasePlan,
        whole_node: bool,
        approved: &[PlannedSlot],
        report: Report<'_>,
    ) -> Result<Vec<SlotCleanup>, Stop> {
        let alloc = plan.allocation_id.as_str();
        let slots = plan.slots.as_slice();
        self.step("validate_plan", None, report, || {
            self.check_release_plan(alloc, slots, whole_node, approved)
        })?;
        // A slot with no lease before this release never reached a tenant on this host (a
        // provision that failed its checks, or a release resumed after its leases went):
        // what its GPU reports now may serve as the baseline if none was recorded.
        let untouched: Vec<bool> = slots
            .iter()
            .map(|s| self.leases.get(&s.slot_id).map(|l| l.is_none()))
            .collect::<Result<_, _>>()?;
        // Read before this release's leases replace the phase the last try reached.
        let save_root = match &plan.save_root {
            Some(target) if self.may_save_root(alloc, &slots[0])? => Some(target),
            _ => None,
        };
        // That baseline is recorded now, before this release's leases: once they exist, a
        // restarted agent can no longer tell that no tenant had the GPU (the chaos run found
        // a release killed at `check_firmware` that then blocked a never-used slot).
        for (s, untouched) in slots.iter().zip(&untouched) {
            if *untouched {
                self.firmware_baseline(&s.gpu_pci_address, true)?;
            }
        }
        self.take_leases(
            task_id,
            alloc,
            slots,
            LeaseKind::Release,
            "disconnect_network",
            None,
        )?;
        let leased = Some((slots, alloc));
        let name = domain::domain_name(alloc);
        // Nobody reaches the guest from here on: its forwarding and east-west rules are gone
        // (release leases carry no network) before it stops and long before the wipe.
        self.step("disconnect_network", leased, report, || {
            self.apply_network(approved)
        })?;
        self.step("stop_vm", leased, report, || self.stop_vm(&name))?;
        self.step("destroy_domain", leased, report, || {
            self.destroy_domain(&name, alloc)
        })?;
        // A stop keeps the boot disk: copied to the instance's root volume while the disk is
        // still the tenant's and nothing runs on it, before anything is wiped.
        if plan.save_root.is_some() {
            self.step("save_root_disk", leased, report, || match save_root {
                Some(target) => image::save_root(&self.driver.slot_disk(&slots[0])?, target),
                None => Ok(()),
            })?;
        }
        // Out of the tenant's fabric partitions before the wipe: the VFs leave its IB partition
        // (release leases hold no fabric), and every NVLink partition over these GPUs is
        // deactivated, whatever the lease remembers.
        self.step("leave_ib_partition", leased, report, || self.apply_ib())?;
        self.step("deactivate_nvlink", leased, report, || {
            self.deactivate_nvlink(slots)
        })?;
        // Per slot: (how it is verified, the offsets, how long the wipe took).
        let wiped = self.step("wipe_nvme", leased, report, || {
            slots
                .iter()
                .map(|s| self.wipe_slot(s))
                .collect::<Result<Vec<_>, String>>()
        })?;
        let samples = self.step("verify_wipe", leased, report, || {
            self.verify_wipes(slots, &wiped)
        })?;
        self.step("reset_gpu", leased, report, || {
            slots
                .iter()
                .try_for_each(|s| self.driver.reset_gpu(&s.gpu_pci_address))
        })?;
        let firmware = self.step("check_firmware", leased, report, || {
            self.check_firmware(slots, &untouched)
        })?;
        self.step("release_leases", None, report, || {
            slots
                .iter()
                .try_for_each(|s| self.leases.remove(&s.slot_id))
        })?;
        Ok(slots
            .iter()
            .zip(wiped)
            .zip(samples)
            .zip(firmware)
            .map(|(((s, w), n), fw)| SlotCleanup {
                slot_id: s.slot_id.clone(),
                nvme_serial: s.nvme_serial.clone(),
                wipe_method: s.wipe_policy.clone(),
                wipe_ms: w.ms,
                wipe_verified: true,
                verified_samples: n,
                gpu_reset: true,
                gpu_firmware: fw,
                firmware_ok: true,
            })
            .collect())
    }

    /// Whether a stop may still copy the boot disk: the first slot's lease is this
    /// allocation's, and no earlier try of its release went past the copy. A lease that says
    /// the wipe began, or none (the release finished), means the disk may already be zeros:
    /// the copy that try made is the one to keep.
    fn may_save_root(&self, alloc: &str, first: &PlannedSlot) -> Result<bool, String> {
        const UNTIL_SAVED: [&str; 4] = [
            "disconnect_network",
            "stop_vm",
            "destroy_domain",
            "save_root_disk",
        ];
        Ok(match self.leases.get(&first.slot_id)? {
            Some(l) if l.allocation_id == alloc => {
                l.kind == LeaseKind::Provision || UNTIL_SAVED.contains(&l.phase.as_str())
            }
            _ => false,
        })
    }

    /// A release's plan: the provision's checks, and a wipe method this agent has.
    fn check_release_plan(
        &self,
        alloc: &str,
        slots: &[PlannedSlot],
        whole_node: bool,
        approved: &[PlannedSlot],
    ) -> Result<(), String> {
        self.check_plan(alloc, slots, whole_node, approved)?;
        if let Some(s) = slots
            .iter()
            .find(|s| !crate::discover::WIPE_METHODS.contains(&s.wipe_policy.as_str()))
        {
            return Err(format!(
                "slot {}: this agent can't wipe with {:?} (it supports {})",
                s.slot_index,
                s.wipe_policy,
                crate::discover::WIPE_METHODS.join(", ")
            ));
        }
        Ok(())
    }

    /// Asks a running guest to shut down, and waits up to the shutdown timeout.
    fn stop_vm(&self, name: &str) -> Result<(), String> {
        if self.driver.domain_state(name)? != Some(DomainState::Running) {
            return Ok(());
        }
        self.driver.shutdown(name)?;
        let deadline = Instant::now() + self.shutdown_timeout;
        while self.driver.domain_state(name)? == Some(DomainState::Running)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    /// Destroys (if still up) and undefines the domain, and removes the allocation's files.
    fn destroy_domain(&self, name: &str, alloc: &str) -> Result<(), String> {
        match self.driver.domain_state(name)? {
            Some(DomainState::Running) | Some(DomainState::Other) => {
                let _ = self.driver.destroy(name);
                self.driver.undefine(name)
            }
            Some(DomainState::ShutOff) => self.driver.undefine(name),
            None => Ok(()),
        }?;
        let dir = self.state_dir.join("allocations").join(alloc);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("{}: {e}", dir.display()))
            }
            _ => Ok(()),
        }
    }

    /// Deactivates every NVLink partition over these slots' GPUs, whatever a lease remembers.
    fn deactivate_nvlink(&self, slots: &[PlannedSlot]) -> Result<(), String> {
        let gpus: Vec<&String> = slots.iter().map(|s| &s.gpu_pci_address).collect();
        for p in self.nvlink.partitions()? {
            if p.active && p.gpus.iter().any(|g| gpus.contains(&g)) {
                self.nvlink.deactivate(p.id)?;
            }
        }
        Ok(())
    }

    /// Reads back each wiped drive where it was sampled; the number of samples checked.
    fn verify_wipes(&self, slots: &[PlannedSlot], wiped: &[Wiped]) -> Result<Vec<u32>, String> {
        slots
            .iter()
            .zip(wiped)
            .map(|(s, w)| {
                let dev = self.driver.open_disk(s)?;
                let expect = match &w.check {
                    Check::Pattern(seed) => wipe::Expect::Pattern(*seed),
                    Check::Changed(before) => wipe::Expect::Changed(before),
                };
                wipe::verify(&dev, &w.offsets, expect)
                    .map_err(|e| format!("slot {}: {e}", s.slot_index))
            })
            .collect()
    }

    /// Each GPU's firmware against its baseline: a changed one keeps the slot blocked.
    fn check_firmware(
        &self,
        slots: &[PlannedSlot],
        untouched: &[bool],
    ) -> Result<Vec<String>, String> {
        slots
            .iter()
            .zip(untouched)
            .map(|(s, untouched)| {
                let expected = self.firmware_baseline(&s.gpu_pci_address, *untouched)?;
                let seen = self.driver.gpu_firmware(&s.gpu_pci_address)?;
                if seen != expected {
                    return Err(format!(
                        "slot {}: GPU {} firmware is {seen}, expected {expected}; the slot stays blocked until an operator reflashes it",
                        s.slot_index, s.gpu_pci_address
                    ));
                }
                Ok(seen)
            })
            .collect()
    }

    fn wipe_slot(&self, s: &PlannedSlot) -> Result<Wiped, String> {
        let started = Instant::now();
        let dev = self.driver.open_disk(s)?;
        let len = wipe::BlockDev::size_bytes(&dev)?;
        let seed = wipe::fresh_seed();
        let offsets = wipe::sample_offsets(len, seed);
        let check = match s.wipe_policy.as_str() {
            "overwrite-verify" => {
                wipe::overwrite(&dev, seed, self.wipe_timeout)?;
                Check::Pattern(seed)
            }
            method => {
                let before = wipe::take_samples(&dev, &offsets)?;
                drop(dev);
                self.driver.controller_wipe(method, s, self.wipe_timeout)?;
                Check::Changed(before)
            }
        };
        Ok(Wiped {
            check,
            offsets,
            ms: started.elapsed().as_millis() as u64,
        })
    }

    /// What this host holds now (every slot lease, every VM the agent made), for the control
    /// plane's reconciliation.
    pub fn holding(&self) -> Result<agent_protocol::Holding, String> {
        let leases = self
            .leases
            .all()?
            .into_iter()
            .map(|l| agent_protocol::HeldLease {
                slot_id: l.slot_id,
                allocation_id: l.allocation_id,
            })
            .take(agent_protocol::MAX_HOLDING)
            .collect();
        let vms = self
            .driver
            .domains()?
            .iter()
            .filter_map(|d| d.strip_prefix("gpuaas-").map(String::from))
            .take(agent_protocol::MAX_HOLDING)
            .collect();
        Ok(agent_protocol::Holding { leases, vms })
    }

    /// After a (re)start: leases whose allocation the control plane no longer runs and that
    /// no unfinished task covers are stale. Their domains are stopped and removed and the
    /// leases dropped (the control plane keeps such slots blocked until an operator clears
    /// them; nothing here marks a slot clean). Domains of this agent with no lease at all
    /// are removed too. Returns what it did, for the log.
    pub fn reconcile(&self, view: &ReconcileResponse) -> Result<Vec<String>, String> {
        let mut done = Vec::new();
        let in_flight: Vec<&str> = view
            .running_tasks
            .iter()
            .filter_map(|t| match &t.spec {
                TaskSpec::VmProvision(p) | TaskSpec::BaremetalProvision(p) => {
                    Some(p.allocation_id.as_str())
                }
                TaskSpec::VmRelease(p) | TaskSpec::BaremetalRelease(p) => {
                    Some(p.allocation_id.as_str())
                }
                TaskSpec::NetworkUpdate(p) => Some(p.allocation_id.as_str()),
                TaskSpec::VolumesUpdate(p) => Some(p.allocation_id.as_str()),
                TaskSpec::TopologyDiscover {} => None,
            })
            .collect();
        let live =
            |a: &str| view.active_allocations.iter().any(|x| x == a) || in_flight.contains(&a);
        let leases = self.leases.all()?;
        for l in &leases {
            if !live(&l.allocation_id) {
                self.remove_domain(&domain::domain_name(&l.allocation_id))?;
                self.leases.remove(&l.slot_id)?;
                done.push(format!(
                    "dropped the stale lease on slot {} (allocation {}, phase {})",
                    l.slot_index, l.allocation_id, l.phase
                ));
            }
        }
        for name in self.driver.domains()? {
            let Some(alloc) = name.strip_prefix("gpuaas-") else {
                continue;
            };
            if !live(alloc) {
                self.remove_domain(&name)?;
                done.push(format!("removed domain {name}, which no allocation owns"));
            }
        }
        self.apply_network(&view.approved_slots)?;
        done.push(format!(
            "applied the slot network ({})",
            self.network.describe()
        ));
        self.apply_ib()?;
        done.push(format!(
            "applied the InfiniBand partitions ({})",
            self.ib.describe()
        ));
        Ok(done)
    }

    /// Makes the slot network what the approved slots and the leases say.
    pub fn apply_network(&self, approved: &[PlannedSlot]) -> Result<(), String> {
        let mut state = NetState::from_approved(approved)?;
        state.overlay = lock(&self.overlay).clone();
        for l in self.leases.all()? {
            if l.kind == LeaseKind::Provision
                && let Some(n) = l.network
            {
                state.attached.push(Attachment {
                    allocation_id: l.allocation_id,
                    slot_index: l.slot_index,
                    ssh_port: n.ssh_port,
                    published: n.published,
                    east_west_group: n.east_west_group,
                    private: n.private,
                });
            }
        }
        self.network.apply(&state)?;
        *lock(&self.approved) = Some(approved.to_vec());
        Ok(())
    }

    /// Takes the control plane's list of the segments' members; when it changed, applies the
    /// network again (once the approved slots are known). Whether it changed.
    pub fn set_overlay(&self, overlay: Overlay) -> Result<bool, String> {
        {
            let mut current = lock(&self.overlay);
            if *current == overlay {
                return Ok(false);
            }
            *current = overlay;
        }
        let approved = lock(&self.approved).clone();
        if let Some(approved) = approved
            && let Err(e) = self.apply_network(&approved)
        {
            // Not in force: forgotten, so that the next heartbeat's list is applied again.
            *lock(&self.overlay) = Overlay::default();
            return Err(e);
        }
        Ok(true)
    }

    /// Every provision lease's slots in its allocation's partition: the membership the IB
    /// fabric must hold.
    pub fn ib_membership(&self) -> Result<Membership, String> {
        let leases = self.leases.all()?;
        let mut m = Membership::new();
        for l in &leases {
            let Some(pkey) = l.fabric.as_ref().and_then(|f| f.ib_pkey) else {
                continue;
            };
            if l.kind != LeaseKind::Provision {
                continue;
            }
            let guids = m.entry(pkey).or_default();
            for s in leases
                .iter()
                .filter(|s| s.allocation_id == l.allocation_id && s.kind == LeaseKind::Provision)
            {
                guids.insert(fabric::port_guid(&self.node_id, s.slot_index));
            }
        }
        Ok(m)
    }

    /// Makes the IB partitions what the leases say, and confirms it.
    pub fn apply_ib(&self) -> Result<(), String> {
        self.ib.apply(&self.ib_membership()?)
    }

    /// Refuses a fabric plan whose partition key is not a tenant's, or whose NVLink partition
    /// is not exactly the plan's GPUs.
    fn check_fabric(&self, slots: &[PlannedSlot], f: &FabricPlan) -> Result<(), String> {
        if let Some(k) = f.ib_pkey {
            fabric::pkey_ok(k)?;
        }
        if let Some(id) = f.nvlink_partition {
            let partitions = self.nvlink.partitions()?;
            let p = partitions
                .iter()
                .find(|p| p.id == id)
                .ok_or_else(|| format!("this host's fabric has no NVLink partition {id}"))?;
            let mut want: Vec<&String> = slots.iter().map(|s| &s.gpu_pci_address).collect();
            let mut have: Vec<&String> = p.gpus.iter().collect();
            want.sort();
            have.sort();
            if want != have {
                return Err(format!(
                    "NVLink partition {id} holds GPUs {}, not the plan's {}; refusing the plan",
                    p.gpus.join(", "),
                    want.iter()
                        .map(|g| g.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        Ok(())
    }

    /// Refuses a network plan with nonsense in it, or one whose public ports another
    /// allocation on this host holds.
    fn check_network(&self, alloc: &str, net: &NetworkPlan) -> Result<(), String> {
        if net.published.len() > identity::PUBLISHED_PORTS_MAX {
            return Err(format!(
                "the plan publishes {} ports; at most {} may be",
                net.published.len(),
                identity::PUBLISHED_PORTS_MAX
            ));
        }
        let mut guest = std::collections::BTreeSet::from([22]);
        for p in &net.published {
            if p.guest_port == 0 || p.public_port == 0 || !guest.insert(p.guest_port) {
                return Err(format!(
                    "the plan publishes guest port {} twice or as 0 (SSH is published already)",
                    p.guest_port
                ));
            }
        }
        if let Some(g) = &net.east_west_group
            && (g.is_empty()
                || g.len() > 64
                || !g.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        {
            return Err(format!("{g:?} is not an east-west group"));
        }
        if let Some(nic) = &net.private {
            crate::overlay::check_nic(nic)?;
            let taken = self.leases.all()?.into_iter().any(|l| {
                l.allocation_id != alloc
                    && l.kind == LeaseKind::Provision
                    && l.network
                        .and_then(|n| n.private)
                        .is_some_and(|p| p.vni == nic.vni && p.address == nic.address)
            });
            if taken {
                return Err(format!(
                    "{} on segment {} is another allocation's on this host; refusing the plan",
                    nic.address, nic.vni
                ));
            }
        }
        let public: Vec<u16> = net
            .ssh_port
            .into_iter()
            .chain(net.published.iter().map(|p| p.public_port))
            .collect();
        for l in self.leases.all()? {
            if l.allocation_id == alloc {
                continue;
            }
            let Some(other) = l.network else { continue };
            if let Some(p) = other
                .ssh_port
                .into_iter()
                .chain(other.published.iter().map(|p| p.public_port))
                .find(|p| public.contains(p))
            {
                return Err(format!(
                    "public port {p} is forwarded to allocation {} on this host; refusing the plan",
                    l.allocation_id
                ));
            }
        }
        Ok(())
    }

    fn remove_domain(&self, name: &str) -> Result<(), String> {
        match self.driver.domain_state(name)? {
            None => Ok(()),
            Some(DomainState::ShutOff) => self.driver.undefine(name),
            Some(_) => {
                let _ = self.driver.destroy(name);
                self.driver.undefine(name)
            }
        }
    }

    /// Each running allocation's telemetry token, and the allocation (read from the leases).
    pub fn telemetry_tokens(&self) -> Vec<(String, String)> {
        self.leases
            .all()
            .unwrap_or_default()
            .into_iter()
            .filter(|l| l.kind == LeaseKind::Provision && l.phase == "running")
            .map(|l| (l.telemetry_token, l.allocation_id))
            .collect()
    }
}

enum Check {
    Pattern(u64),
    Changed(Vec<wipe::Sample>),
}

struct Wiped {
    check: Check,
    offsets: Vec<u64>,
    ms: u64,
}

fn new_token() -> String {
    crate::random_bytes::<24>()
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// Equality that takes as long whichever byte differs (tokens arrive from guests).
/// The allocation whose telemetry token `token` is, among `known` (token, allocation) pairs;
/// tokens are compared in constant time, and a short one is nobody's.
pub fn find_token(known: &[(String, String)], token: &str) -> Option<String> {
    if token.len() < 32 {
        return None;
    }
    known
        .iter()
        .find(|(t, _)| same_secret(t, token))
        .map(|(_, allocation)| allocation.clone())
}

fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The names of the fields where a plan's slot and the approved slot disagree.
fn differences(a: &PlannedSlot, p: &PlannedSlot) -> Vec<&'static str> {
    let mut d = Vec::new();
    let mut check = |name, same: bool| {
        if !same {
            d.push(name);
        }
    };
    check("slot index", a.slot_index == p.slot_index);
    check("GPU address", a.gpu_pci_address == p.gpu_pci_address);
    check("NVMe address", a.nvme_pci_address == p.nvme_pci_address);
    check("NVMe serial", a.nvme_serial == p.nvme_serial);
    check("NVMe namespace", a.nvme_namespace == p.nvme_namespace);
    check("NVMe size", a.nvme_size_bytes == p.nvme_size_bytes);
    check("IB VF address", a.ib_vf_pci_address == p.ib_vf_pci_address);
    check("CPU set", a.cpu_set == p.cpu_set);
    check("NUMA node", a.numa_node == p.numa_node);
    check("memory", a.memory_mib == p.memory_mib);
    check("wipe policy", a.wipe_policy == p.wipe_policy);
    check("MAC address", a.mac_address == p.mac_address);
    check("IP address", a.ip_address == p.ip_address);
    d
}

/// A lock whose holder can't leave its value half-written (each is replaced whole).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
