//! Where host primitives meet the machine. Two drivers behind one trait: [`HostDriver`] reads
//! the real host (`/`, and NVIDIA's tools when installed); [`SimulatedDriver`] is a host
//! described by a topology fixture, with realistic phase timings, so that everything above it
//! runs for real on machines without GPUs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent_protocol::{
    Discovery, PhaseReport, PhaseStatus, ProvisionPlan, Provisioned, ReleasePlan, SlotCleanup,
};

use crate::discover;
use crate::tools::{FixtureTools, HostTools, Tools};

pub trait Driver: Send + Sync {
    /// For logs: `host` or `simulated (hgx-h100-8x)`.
    fn describe(&self) -> String;
    /// What the next heartbeat reports.
    fn health(&self) -> agent_protocol::Health;
    /// `slice.topology_discover`; every phase is passed to `report` as it starts and ends.
    fn topology_discover(&self, report: &mut dyn FnMut(PhaseReport)) -> Result<Discovery, String>;
    /// `slice.vm_provision` (or `baremetal.provision` with `whole_node`).
    fn provision(
        &self,
        plan: &ProvisionPlan,
        whole_node: bool,
        report: &mut dyn FnMut(PhaseReport),
    ) -> Result<Provisioned, String>;
    /// `slice.vm_release` / `baremetal.release`: stop, destroy, wipe, verify, reset. The
    /// caller signs what this returns.
    fn release(
        &self,
        plan: &ReleasePlan,
        report: &mut dyn FnMut(PhaseReport),
    ) -> Result<Vec<SlotCleanup>, String>;
}

/// What the host driver answers until the libvirt driver exists: a clear refusal, so that a
/// real host never pretends to run a VM.
const NO_LIBVIRT: &str = "this agent's host driver can't provision yet: the libvirt driver is not built; run a simulated node for now";

/// The real host.
pub struct HostDriver {
    pub root: PathBuf,
    pub tools: HostTools,
}

impl Driver for HostDriver {
    fn describe(&self) -> String {
        format!("host ({})", self.root.display())
    }
    fn health(&self) -> agent_protocol::Health {
        discover::host_health(&self.root)
    }
    fn topology_discover(&self, report: &mut dyn FnMut(PhaseReport)) -> Result<Discovery, String> {
        discover_with_phases(&self.root, &self.tools, Duration::ZERO, report)
    }
    fn provision(
        &self,
        _plan: &ProvisionPlan,
        _whole_node: bool,
        _report: &mut dyn FnMut(PhaseReport),
    ) -> Result<Provisioned, String> {
        Err(NO_LIBVIRT.into())
    }
    fn release(
        &self,
        _plan: &ReleasePlan,
        _report: &mut dyn FnMut(PhaseReport),
    ) -> Result<Vec<SlotCleanup>, String> {
        Err(NO_LIBVIRT.into())
    }
}

/// A host described by a fixture directory (`sys/`, `proc/`, `tools/`).
pub struct SimulatedDriver {
    pub fixture: PathBuf,
    /// Added to each phase, so the portal shows phases as a real host would produce them.
    pub phase_time: Duration,
}

impl SimulatedDriver {
    pub fn new(fixture: PathBuf) -> Self {
        Self {
            fixture,
            phase_time: Duration::from_millis(300),
        }
    }
}

impl Driver for SimulatedDriver {
    fn describe(&self) -> String {
        format!("simulated ({})", self.fixture.display())
    }
    fn health(&self) -> agent_protocol::Health {
        discover::host_health(&self.fixture)
    }
    fn topology_discover(&self, report: &mut dyn FnMut(PhaseReport)) -> Result<Discovery, String> {
        let tools = FixtureTools {
            dir: self.fixture.join("tools"),
        };
        discover_with_phases(&self.fixture, &tools, self.phase_time, report)
    }

    fn provision(
        &self,
        plan: &ProvisionPlan,
        whole_node: bool,
        report: &mut dyn FnMut(PhaseReport),
    ) -> Result<Provisioned, String> {
        let pause = self.phase_time;
        phase("validate_plan", pause / 3, report, || {
            self.check_plan(&plan.slots)
        })?;
        if plan.image.source.trim().is_empty() {
            return Err("the plan names no image source".into());
        }
        for name in [
            "write_image",
            "cloud_init",
            "define_domain",
            "start_vm",
            "wait_ssh",
        ] {
            phase(name, pause, report, || Ok(()))?;
        }
        let first = plan.slots.first().ok_or("the plan names no slots")?;
        Ok(Provisioned {
            ssh_host: if whole_node {
                self.hostname()?
            } else {
                first.ip_address.clone()
            },
            ssh_port: 22,
            ssh_user: plan.image.ssh_user.clone(),
        })
    }

    fn release(
        &self,
        plan: &ReleasePlan,
        report: &mut dyn FnMut(PhaseReport),
    ) -> Result<Vec<SlotCleanup>, String> {
        let pause = self.phase_time;
        phase("validate_plan", pause / 3, report, || {
            self.check_plan(&plan.slots)
        })?;
        phase("stop_vm", pause, report, || Ok(()))?;
        phase("destroy_domain", pause / 2, report, || Ok(()))?;
        phase("wipe_nvme", pause, report, || {
            match plan
                .slots
                .iter()
                .find(|s| !discover::WIPE_METHODS.contains(&s.wipe_policy.as_str()))
            {
                Some(s) => Err(format!(
                    "slot {}: this agent can't wipe with {:?} (it supports {})",
                    s.slot_index,
                    s.wipe_policy,
                    discover::WIPE_METHODS.join(", ")
                )),
                None => Ok(()),
            }
        })?;
        for name in ["verify_wipe", "reset_gpu", "check_firmware"] {
            phase(name, pause / 2, report, || Ok(()))?;
        }
        Ok(plan
            .slots
            .iter()
            .map(|s| SlotCleanup {
                slot_id: s.slot_id.clone(),
                nvme_serial: s.nvme_serial.clone(),
                wipe_method: s.wipe_policy.clone(),
                wipe_verified: true,
                gpu_reset: true,
                firmware_ok: true,
            })
            .collect())
    }
}

impl SimulatedDriver {
    fn hostname(&self) -> Result<String, String> {
        std::fs::read_to_string(self.fixture.join("proc/sys/kernel/hostname"))
            .map(|h| h.trim().to_string())
            .map_err(|e| format!("reading the fixture's hostname: {e}"))
    }

    /// Every planned slot must be hardware this host has: its GPU, NVMe and IB VF.
    fn check_plan(&self, slots: &[agent_protocol::PlannedSlot]) -> Result<(), String> {
        if slots.is_empty() {
            return Err("the plan names no slots".into());
        }
        let tools = FixtureTools {
            dir: self.fixture.join("tools"),
        };
        let host = discover::read_host(&self.fixture, &tools, &mut Vec::new())
            .map_err(|e| e.to_string())?;
        let has = |addr: &str| host.pci_devices.iter().any(|d| d.address == addr);
        for s in slots {
            for (what, addr) in [
                ("GPU", &s.gpu_pci_address),
                ("NVMe", &s.nvme_pci_address),
                ("IB VF", &s.ib_vf_pci_address),
            ] {
                if !has(addr) {
                    return Err(format!(
                        "slot {}: this host has no {what} at {addr}; refusing the plan",
                        s.slot_index
                    ));
                }
            }
        }
        Ok(())
    }
}

fn discover_with_phases(
    root: &Path,
    tools: &dyn Tools,
    pause: Duration,
    report: &mut dyn FnMut(PhaseReport),
) -> Result<Discovery, String> {
    let mut warnings = Vec::new();
    let host = phase("read_host", pause, report, || {
        discover::read_host(root, tools, &mut warnings).map_err(|e| e.to_string())
    })?;
    let slots = phase("propose_slots", pause / 3, report, || {
        Ok(discover::propose_slots(&host, &mut warnings))
    })?;
    Ok(Discovery {
        approval_required: true,
        host,
        proposed_slots: slots,
        wipe_methods: discover::WIPE_METHODS
            .iter()
            .map(|m| m.to_string())
            .collect(),
        warnings,
    })
}

fn phase<T>(
    name: &str,
    pause: Duration,
    report: &mut dyn FnMut(PhaseReport),
    work: impl FnOnce() -> Result<T, String>,
) -> Result<T, String> {
    let started = Instant::now();
    report(PhaseReport {
        phase: name.into(),
        status: PhaseStatus::Started,
        elapsed_ms: 0,
        detail: None,
    });
    std::thread::sleep(pause);
    let result = work();
    let elapsed_ms = started.elapsed().as_millis() as u64;
    report(PhaseReport {
        phase: name.into(),
        status: if result.is_ok() {
            PhaseStatus::Succeeded
        } else {
            PhaseStatus::Failed
        },
        elapsed_ms,
        detail: result.as_ref().err().cloned(),
    });
    result
}
