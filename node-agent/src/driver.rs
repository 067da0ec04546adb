//! Where host primitives meet the machine. Two drivers behind one trait: [`HostDriver`] reads
//! the real host (`/`, and NVIDIA's tools when installed); [`SimulatedDriver`] is a host
//! described by a topology fixture, with realistic phase timings, so that everything above it
//! runs for real on machines without GPUs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent_protocol::{Discovery, PhaseReport, PhaseStatus};

use crate::discover;
use crate::tools::{FixtureTools, HostTools, Tools};

pub trait Driver: Send + Sync {
    /// For logs: `host` or `simulated (hgx-h100-8x)`.
    fn describe(&self) -> String;
    /// What the next heartbeat reports.
    fn health(&self) -> agent_protocol::Health;
    /// `slice.topology_discover`; every phase is passed to `report` as it starts and ends.
    fn topology_discover(&self, report: &mut dyn FnMut(PhaseReport)) -> Result<Discovery, String>;
}

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
