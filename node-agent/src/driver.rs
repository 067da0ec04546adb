//! Where host primitives meet the machine: the hypervisor, block devices and GPUs. Two
//! drivers behind one trait. [`LibvirtDriver`] is a real host: libvirt through `virsh`, NVMe
//! through nvme-cli, GPUs through sysfs. [`SimulatedDriver`] is a host described by a topology
//! fixture: its "hypervisor" keeps domains as files under the state directory (so that, like
//! real VMs, they outlive an agent crash), its NVMe namespaces are files, and every phase
//! takes a realistic, configurable time.
//!
//! Everything above this trait (plans, leases, phases, reports, proofs, recovery) is
//! [`crate::agent`], the same code for both.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent_protocol::{Discovery, ImageRef, PhaseReport, PhaseStatus, PlannedSlot};
use sha2::{Digest, Sha256};

use crate::discover;
use crate::gpu_health::{GpuSample, SMI_HEALTH_QUERY, parse_health_csv};
use crate::image;
use crate::tools::{FixtureTools, HostTools, Tools};
pub use crate::virsh::DomainState;
use crate::virsh::Virsh;
use crate::wipe;

pub trait Driver: Send + Sync {
    /// For logs: `libvirt (qemu:///system)` or `simulated (hgx-h100-8x)`.
    fn describe(&self) -> String;
    /// What the next heartbeat reports.
    fn health(&self) -> agent_protocol::Health;
    /// Each GPU's health figures now (`nvidia-smi`); empty where there is no tool.
    fn gpu_samples(&self, warnings: &mut Vec<String>) -> Vec<GpuSample>;
    /// Kernel log records written since the last call (the first call: what the log holds).
    fn kernel_log(&self) -> Vec<String>;
    /// This boot's id, so event ids made from the kernel log's sequence numbers don't repeat.
    fn boot_id(&self) -> String;
    /// `slice.topology_discover`; every phase is passed to `report` as it starts and ends.
    fn topology_discover(&self, report: &mut dyn FnMut(PhaseReport)) -> Result<Discovery, String>;
    /// Every PCI function on the host (a plan naming another is refused).
    fn pci_addresses(&self) -> Result<Vec<String>, String>;
    /// Extra time a phase takes (the simulated host's timings; zero on a real one).
    fn pause(&self, phase: &str) -> Duration;

    /// The image file for `image` on this host.
    fn image_path(&self, image: &ImageRef) -> Result<PathBuf, String>;
    /// The block device (or file) backing a slot's NVMe namespace.
    fn slot_disk(&self, slot: &PlannedSlot) -> Result<PathBuf, String>;
    /// For file-backed disks: the size to grow the written image to.
    fn disk_size(&self, slot: &PlannedSlot) -> Option<u64>;
    /// Opens a slot's disk for wiping (a file-backed one is created if it never was written).
    fn open_disk(&self, slot: &PlannedSlot) -> Result<fs::File, String>;

    fn define(&self, xml: &Path) -> Result<(), String>;
    fn domain_state(&self, name: &str) -> Result<Option<DomainState>, String>;
    fn domains(&self) -> Result<Vec<String>, String>;
    fn start(&self, name: &str) -> Result<(), String>;
    fn shutdown(&self, name: &str) -> Result<(), String>;
    fn destroy(&self, name: &str) -> Result<(), String>;
    fn undefine(&self, name: &str) -> Result<(), String>;
    /// Plugs the device `xml` describes into the running domain (and its definition).
    fn attach_device(&self, name: &str, xml: &Path) -> Result<(), String>;
    /// Unplugs it; a device that is not plugged in is no error.
    fn detach_device(&self, name: &str, xml: &Path) -> Result<(), String>;
    /// Until the guest is reachable at `ip` (or `timeout`).
    fn wait_guest(&self, name: &str, ip: &str, timeout: Duration) -> Result<(), String>;

    /// A controller wipe (`nvme-format-crypto`, `nvme-format`, `nvme-sanitize-block`).
    fn controller_wipe(
        &self,
        method: &str,
        slot: &PlannedSlot,
        timeout: Duration,
    ) -> Result<(), String>;
    fn reset_gpu(&self, pci: &str) -> Result<(), String>;
    /// The GPU's firmware identity (its option ROM's digest on a real host).
    fn gpu_firmware(&self, pci: &str) -> Result<String, String>;
}

/// The guest device a disk definition plugs in at (`<target dev='vdq' …/>`).
fn device_target(xml: &str) -> Result<String, String> {
    xml.split_once("<target dev='")
        .and_then(|(_, r)| r.split_once('\''))
        .map(|(dev, _)| dev.to_string())
        .filter(|d| d.chars().all(|c| c.is_ascii_lowercase()))
        .ok_or_else(|| "the device definition has no target".to_string())
}

// ---------------------------------------------------------------------------------------------
// libvirt

/// How the libvirt driver decides a guest is up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestReady {
    /// Its SSH port answers on the slot IP (real hosts).
    Ssh,
    /// The domain is running (libvirt's test hypervisor, whose guests have no network).
    DomainRunning,
}

/// A real host.
pub struct LibvirtDriver {
    pub root: PathBuf,
    pub tools: HostTools,
    pub virsh: Virsh,
    /// Where namespaces are files instead of `/dev/nvme…` (hosts without NVMe, tests).
    pub disk_dir: Option<PathBuf>,
    pub file_disk_bytes: u64,
    pub guest_ready: GuestReady,
    /// Where this host keeps images ([`agent_protocol::IMAGE_DIR`] unless configured); an
    /// image source names a file directly in it.
    pub image_dir: PathBuf,
    /// `/dev/kmsg`, opened on first use and read without blocking from then on.
    kmsg: std::sync::Mutex<Option<fs::File>>,
}

impl LibvirtDriver {
    pub fn new(root: PathBuf, tools: HostTools, uri: &str) -> Self {
        Self {
            root,
            tools,
            virsh: Virsh::new(uri),
            disk_dir: None,
            file_disk_bytes: 64 << 20,
            guest_ready: GuestReady::Ssh,
            image_dir: PathBuf::from(agent_protocol::IMAGE_DIR),
            kmsg: Default::default(),
        }
    }

    fn pci_dir(&self, pci: &str) -> Result<PathBuf, String> {
        if !pci
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        {
            return Err(format!("{pci:?} is not a PCI address"));
        }
        Ok(self.root.join("sys/bus/pci/devices").join(pci))
    }
}

impl Driver for LibvirtDriver {
    fn describe(&self) -> String {
        format!(
            "libvirt ({}, root {})",
            self.virsh.uri(),
            self.root.display()
        )
    }
    fn health(&self) -> agent_protocol::Health {
        discover::host_health(&self.root)
    }
    fn gpu_samples(&self, warnings: &mut Vec<String>) -> Vec<GpuSample> {
        match std::process::Command::new("nvidia-smi")
            .args([SMI_HEALTH_QUERY, "--format=csv,noheader,nounits"])
            .output()
        {
            Ok(o) if o.status.success() => {
                parse_health_csv(&String::from_utf8_lossy(&o.stdout), warnings)
            }
            Ok(o) => {
                warnings.push(format!("nvidia-smi failed ({})", o.status));
                Vec::new()
            }
            Err(_) => Vec::new(),
        }
    }
    fn kernel_log(&self) -> Vec<String> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let mut kmsg = self.kmsg.lock().unwrap_or_else(|p| p.into_inner());
        if kmsg.is_none() {
            // O_NONBLOCK (the same value on every Linux architecture the agent runs on).
            *kmsg = fs::OpenOptions::new()
                .read(true)
                .custom_flags(0o4000)
                .open("/dev/kmsg")
                .ok();
        }
        let Some(f) = kmsg.as_mut() else {
            return Vec::new();
        };
        // One record per read; EAGAIN when there is none left.
        let mut out = Vec::new();
        let mut buf = vec![0u8; 8192];
        for _ in 0..10_000 {
            match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.push(String::from_utf8_lossy(&buf[..n]).trim_end().to_string()),
                // EPIPE: records were overwritten before we read them; go on with the rest.
                Err(e) if e.raw_os_error() == Some(32) => continue,
                Err(_) => break,
            }
        }
        out
    }
    fn boot_id(&self) -> String {
        fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    }
    fn topology_discover(&self, report: &mut dyn FnMut(PhaseReport)) -> Result<Discovery, String> {
        discover_with_phases(&self.root, &self.tools, Duration::ZERO, report)
    }
    fn pci_addresses(&self) -> Result<Vec<String>, String> {
        pci_addresses(&self.root, &self.tools)
    }
    fn pause(&self, _phase: &str) -> Duration {
        Duration::ZERO
    }
    fn image_path(&self, image: &ImageRef) -> Result<PathBuf, String> {
        let (file, _) = agent_protocol::image_file(&image.source)
            .map_err(|e| format!("image {}: {e}", image.name))?;
        let path = self.image_dir.join(file);
        // A symlink in the image directory must not lead out of it.
        let (real, dir) = (
            path.canonicalize()
                .map_err(|_| format!("the image {} does not exist on this host", path.display()))?,
            self.image_dir
                .canonicalize()
                .map_err(|e| format!("{}: {e}", self.image_dir.display()))?,
        );
        if !real.starts_with(&dir) {
            return Err(format!(
                "image {}: {} leads out of {}",
                image.name,
                path.display(),
                self.image_dir.display()
            ));
        }
        Ok(real)
    }
    fn slot_disk(&self, slot: &PlannedSlot) -> Result<PathBuf, String> {
        namespace_ok(&slot.nvme_namespace)?;
        Ok(match &self.disk_dir {
            Some(dir) => dir.join(format!("{}.raw", slot.nvme_namespace)),
            None => PathBuf::from("/dev").join(&slot.nvme_namespace),
        })
    }
    fn disk_size(&self, slot: &PlannedSlot) -> Option<u64> {
        self.disk_dir
            .as_ref()
            .map(|_| self.file_disk_bytes.min(slot.nvme_size_bytes))
    }
    fn open_disk(&self, slot: &PlannedSlot) -> Result<fs::File, String> {
        open_disk(&self.slot_disk(slot)?, self.disk_size(slot))
    }
    fn define(&self, xml: &Path) -> Result<(), String> {
        self.virsh.define(xml)
    }
    fn domain_state(&self, name: &str) -> Result<Option<DomainState>, String> {
        self.virsh.state(name)
    }
    fn domains(&self) -> Result<Vec<String>, String> {
        self.virsh.list()
    }
    fn start(&self, name: &str) -> Result<(), String> {
        self.virsh.start(name)
    }
    fn shutdown(&self, name: &str) -> Result<(), String> {
        self.virsh.shutdown(name)
    }
    fn destroy(&self, name: &str) -> Result<(), String> {
        self.virsh.destroy(name)
    }
    fn undefine(&self, name: &str) -> Result<(), String> {
        self.virsh.undefine(name)
    }
    fn attach_device(&self, name: &str, xml: &Path) -> Result<(), String> {
        self.virsh.attach_device(name, xml)
    }
    fn detach_device(&self, name: &str, xml: &Path) -> Result<(), String> {
        self.virsh.detach_device(name, xml)
    }
    fn wait_guest(&self, name: &str, ip: &str, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.virsh.state(name)? != Some(DomainState::Running) {
                return Err(format!("{name} stopped while booting"));
            }
            let up = match self.guest_ready {
                GuestReady::DomainRunning => true,
                GuestReady::Ssh => {
                    let addr: std::net::SocketAddr = format!("{ip}:22")
                        .parse()
                        .map_err(|_| format!("{ip:?} is not an IP address"))?;
                    std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
                }
            };
            if up {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the guest did not answer on {ip}:22 within {} s",
                    timeout.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    }
    fn controller_wipe(
        &self,
        method: &str,
        slot: &PlannedSlot,
        timeout: Duration,
    ) -> Result<(), String> {
        if self.disk_dir.is_some() {
            return Err(format!(
                "{method} needs an NVMe controller; this host's namespaces are files (use overwrite-verify)"
            ));
        }
        let argv = wipe::nvme_argv(method, &slot.nvme_namespace)?;
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        image::run("nvme", &args)?;
        if method == "nvme-sanitize-block" {
            let log = wipe::sanitize_log_argv(&slot.nvme_namespace)?;
            let log: Vec<&str> = log.iter().map(String::as_str).collect();
            let deadline = Instant::now() + timeout;
            while !wipe::sanitize_done(&image::run("nvme", &log)?)? {
                if Instant::now() >= deadline {
                    return Err(format!(
                        "sanitize of {} did not finish within {} s",
                        slot.nvme_namespace,
                        timeout.as_secs()
                    ));
                }
                std::thread::sleep(Duration::from_secs(5));
            }
        }
        Ok(())
    }
    fn reset_gpu(&self, pci: &str) -> Result<(), String> {
        let reset = self.pci_dir(pci)?.join("reset");
        fs::write(&reset, b"1").map_err(|e| format!("resetting GPU {pci}: {e}"))
    }
    fn gpu_firmware(&self, pci: &str) -> Result<String, String> {
        // The option ROM is readable once enabled (works while vfio-pci owns the device).
        // sysfs refuses to read a ROM until "1" is written to it; a copied tree just reads.
        let rom = self.pci_dir(pci)?.join("rom");
        let bytes = match fs::read(&rom) {
            Ok(b) if !b.is_empty() => b,
            _ => {
                fs::write(&rom, b"1").map_err(|e| format!("GPU {pci}: enabling its ROM: {e}"))?;
                let bytes = fs::read(&rom);
                let _ = fs::write(&rom, b"0");
                bytes.map_err(|e| format!("GPU {pci}: reading its ROM: {e}"))?
            }
        };
        if bytes.len() < 512 {
            return Err(format!(
                "GPU {pci}: its ROM is unreadable ({} bytes)",
                bytes.len()
            ));
        }
        let digest = Sha256::digest(&bytes);
        Ok(format!(
            "rom-sha256:{}",
            digest[..8]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// simulated

/// A host described by a fixture directory (`sys/`, `proc/`, `tools/`).
pub struct SimulatedDriver {
    pub fixture: PathBuf,
    /// Where the simulated hypervisor, disks and GPUs keep their state.
    pub sim_dir: PathBuf,
    /// How long a simulated phase takes (image writes and wipes take longer).
    pub phase_time: Duration,
    pub disk_bytes: u64,
    /// How far `sim/kmsg` has been read.
    kmsg_read: std::sync::Mutex<u64>,
}

impl SimulatedDriver {
    pub fn new(fixture: PathBuf, state_dir: &Path) -> Self {
        Self {
            fixture,
            sim_dir: state_dir.join("sim"),
            phase_time: Duration::from_millis(300),
            disk_bytes: 16 << 20,
            kmsg_read: Default::default(),
        }
    }

    fn domain_file(&self, name: &str, ext: &str) -> Result<PathBuf, String> {
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(format!("{name:?} is not a domain name"));
        }
        Ok(self.sim_dir.join("domains").join(format!("{name}.{ext}")))
    }

    fn no_domain(name: &str) -> String {
        format!("failed to get domain '{name}'")
    }
}

impl Driver for SimulatedDriver {
    fn describe(&self) -> String {
        format!("simulated ({})", self.fixture.display())
    }
    fn health(&self) -> agent_protocol::Health {
        discover::host_health(&self.fixture)
    }
    /// `sim/nvidia-smi-health.csv` when a test wrote one; otherwise every GPU of the fixture
    /// idle and cool, with no ECC errors.
    fn gpu_samples(&self, warnings: &mut Vec<String>) -> Vec<GpuSample> {
        if let Ok(text) = fs::read_to_string(self.sim_dir.join("nvidia-smi-health.csv")) {
            return parse_health_csv(&text, warnings);
        }
        let tools = FixtureTools {
            dir: self.fixture.join("tools"),
        };
        tools
            .nvidia_smi_gpus(warnings)
            .into_iter()
            .map(|g| GpuSample {
                pci_address: g.pci_address,
                utilization_pct: Some(0.0),
                memory_used_mib: Some(0.0),
                temperature_c: Some(34.0),
                power_w: Some(68.0),
                ecc_corrected: Some(0),
                ecc_uncorrected: Some(0),
                thermal_slowdown: Some(false),
            })
            .collect()
    }
    /// The lines appended to `sim/kmsg` since the last call (records in `/dev/kmsg`'s form).
    fn kernel_log(&self) -> Vec<String> {
        use std::io::{Read, Seek, SeekFrom};
        let mut read = self.kmsg_read.lock().unwrap_or_else(|p| p.into_inner());
        let Ok(mut f) = fs::File::open(self.sim_dir.join("kmsg")) else {
            return Vec::new();
        };
        let mut text = String::new();
        if f.seek(SeekFrom::Start(*read)).is_err() || f.read_to_string(&mut text).is_err() {
            return Vec::new();
        }
        // Only whole lines; a line still being written is read next time.
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        *read += whole as u64;
        text[..whole].lines().map(String::from).collect()
    }
    fn boot_id(&self) -> String {
        "sim".into()
    }
    fn topology_discover(&self, report: &mut dyn FnMut(PhaseReport)) -> Result<Discovery, String> {
        let tools = FixtureTools {
            dir: self.fixture.join("tools"),
        };
        discover_with_phases(&self.fixture, &tools, self.phase_time, report)
    }
    fn pci_addresses(&self) -> Result<Vec<String>, String> {
        let tools = FixtureTools {
            dir: self.fixture.join("tools"),
        };
        pci_addresses(&self.fixture, &tools)
    }
    fn pause(&self, phase: &str) -> Duration {
        match phase {
            "validate_plan" | "take_leases" | "release_leases" => self.phase_time / 4,
            "write_image" | "wipe_nvme" | "wait_ssh" => self.phase_time * 2,
            _ => self.phase_time,
        }
    }
    fn image_path(&self, image: &ImageRef) -> Result<PathBuf, String> {
        let (base, _) = agent_protocol::image_file(&image.source)
            .map_err(|e| format!("image {}: {e}", image.name))?;
        let path = self.sim_dir.join("images").join(base);
        if !path.exists() {
            // The simulated host's copy of the image: a small real qcow2.
            image::create_qcow2(&path, "8M")?;
        }
        Ok(path)
    }
    fn slot_disk(&self, slot: &PlannedSlot) -> Result<PathBuf, String> {
        namespace_ok(&slot.nvme_namespace)?;
        Ok(self
            .sim_dir
            .join("nvme")
            .join(format!("{}.raw", slot.nvme_namespace)))
    }
    fn disk_size(&self, slot: &PlannedSlot) -> Option<u64> {
        Some(self.disk_bytes.min(slot.nvme_size_bytes))
    }
    fn open_disk(&self, slot: &PlannedSlot) -> Result<fs::File, String> {
        open_disk(&self.slot_disk(slot)?, self.disk_size(slot))
    }
    fn define(&self, xml: &Path) -> Result<(), String> {
        let text = fs::read_to_string(xml).map_err(|e| format!("{}: {e}", xml.display()))?;
        let name = text
            .split_once("<name>")
            .and_then(|(_, r)| r.split_once("</name>"))
            .map(|(n, _)| n.to_string())
            .ok_or("the domain XML has no <name>")?;
        let path = self.domain_file(&name, "xml")?;
        fs::create_dir_all(path.parent().expect("has a parent"))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    }
    fn domain_state(&self, name: &str) -> Result<Option<DomainState>, String> {
        if !self.domain_file(name, "xml")?.exists() {
            return Ok(None);
        }
        Ok(Some(if self.domain_file(name, "running")?.exists() {
            DomainState::Running
        } else {
            DomainState::ShutOff
        }))
    }
    fn domains(&self) -> Result<Vec<String>, String> {
        let dir = self.sim_dir.join("domains");
        let mut names: Vec<String> = match fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.strip_suffix(".xml"))
                        .map(String::from)
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        names.sort();
        Ok(names)
    }
    fn start(&self, name: &str) -> Result<(), String> {
        match self.domain_state(name)? {
            None => Err(Self::no_domain(name)),
            Some(DomainState::Running) => {
                Err("Requested operation is not valid: domain is already running".into())
            }
            Some(_) => fs::write(self.domain_file(name, "running")?, b"")
                .map_err(|e| format!("starting {name}: {e}")),
        }
    }
    fn shutdown(&self, name: &str) -> Result<(), String> {
        self.destroy(name)
    }
    fn destroy(&self, name: &str) -> Result<(), String> {
        match self.domain_state(name)? {
            None => Err(Self::no_domain(name)),
            Some(DomainState::Running) => fs::remove_file(self.domain_file(name, "running")?)
                .map_err(|e| format!("stopping {name}: {e}")),
            Some(_) => Err("Requested operation is not valid: domain is not running".into()),
        }
    }
    fn undefine(&self, name: &str) -> Result<(), String> {
        match self.domain_state(name)? {
            None => Err(Self::no_domain(name)),
            Some(DomainState::Running) => Err("Requested operation is not valid: cannot undefine a running domain here; destroy it first".into()),
            Some(_) => {
                for i in 0..crate::domain::MAX_VOLUMES {
                    let dev = crate::domain::volume_dev(i)?;
                    let _ = fs::remove_file(self.domain_file(name, &format!("dev-{dev}"))?);
                }
                fs::remove_file(self.domain_file(name, "xml")?)
                    .map_err(|e| format!("undefining {name}: {e}"))
            }
        }
    }
    fn attach_device(&self, name: &str, xml: &Path) -> Result<(), String> {
        if self.domain_state(name)? != Some(DomainState::Running) {
            return Err(format!(
                "Requested operation is not valid: domain '{name}' is not running"
            ));
        }
        let text = fs::read_to_string(xml).map_err(|e| format!("{}: {e}", xml.display()))?;
        let at = self.domain_file(name, &format!("dev-{}", device_target(&text)?))?;
        match fs::read_to_string(&at) {
            Ok(plugged) if plugged == text => Ok(()),
            Ok(_) => Err(format!(
                "Requested operation is not valid: target {} already exists",
                device_target(&text)?
            )),
            Err(_) => fs::write(&at, text).map_err(|e| format!("{}: {e}", at.display())),
        }
    }
    fn detach_device(&self, name: &str, xml: &Path) -> Result<(), String> {
        let text = fs::read_to_string(xml).map_err(|e| format!("{}: {e}", xml.display()))?;
        let at = self.domain_file(name, &format!("dev-{}", device_target(&text)?))?;
        match fs::remove_file(&at) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("{}: {e}", at.display()))
            }
            _ => Ok(()),
        }
    }
    fn wait_guest(&self, name: &str, _ip: &str, _timeout: Duration) -> Result<(), String> {
        match self.domain_state(name)? {
            Some(DomainState::Running) => Ok(()),
            _ => Err(format!("{name} is not running")),
        }
    }
    fn controller_wipe(
        &self,
        method: &str,
        slot: &PlannedSlot,
        timeout: Duration,
    ) -> Result<(), String> {
        // What the controller would do to the namespace: a crypto erase leaves unreadable
        // noise (a new key), a format or block-erase sanitize leaves zeros.
        let dev = self.open_disk(slot)?;
        wipe::nvme_argv(method, &slot.nvme_namespace)?;
        match method {
            "nvme-format-crypto" => wipe::overwrite(&dev, wipe::fresh_seed(), timeout),
            _ => {
                let len = wipe::BlockDev::size_bytes(&dev)?;
                dev.set_len(0)
                    .and_then(|()| dev.set_len(len))
                    .and_then(|()| dev.sync_all())
                    .map_err(|e| format!("erasing {}: {e}", slot.nvme_namespace))
            }
        }
    }
    fn reset_gpu(&self, pci: &str) -> Result<(), String> {
        if !self.pci_addresses()?.iter().any(|a| a == pci) {
            return Err(format!("resetting GPU {pci}: no such device"));
        }
        Ok(())
    }
    fn gpu_firmware(&self, pci: &str) -> Result<String, String> {
        if !self.pci_addresses()?.iter().any(|a| a == pci) {
            return Err(format!("GPU {pci}: no such device"));
        }
        // A file per GPU, so that a test can play a tenant who flashed it.
        let path = self
            .sim_dir
            .join("gpu-firmware")
            .join(pci.replace(':', "_"));
        match fs::read_to_string(&path) {
            Ok(v) => Ok(v.trim().to_string()),
            Err(_) => Ok("96.00.99.00.01".into()),
        }
    }
}

// ---------------------------------------------------------------------------------------------

fn namespace_ok(ns: &str) -> Result<(), String> {
    let ok = ns
        .strip_prefix("nvme")
        .and_then(|r| r.split_once('n'))
        .is_some_and(|(c, n)| {
            !c.is_empty()
                && !n.is_empty()
                && c.chars().all(|x| x.is_ascii_digit())
                && n.chars().all(|x| x.is_ascii_digit())
        });
    if ok {
        Ok(())
    } else {
        Err(format!("{ns:?} is not an NVMe namespace name"))
    }
}

fn open_disk(path: &Path, size: Option<u64>) -> Result<fs::File, String> {
    let file_backed = !path.starts_with("/dev");
    if file_backed && let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let f = fs::File::options()
        .read(true)
        .write(true)
        .create(file_backed)
        .truncate(false)
        .open(path)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    if let (true, Some(size)) = (file_backed, size) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len < size {
            f.set_len(size)
                .map_err(|e| format!("sizing {}: {e}", path.display()))?;
        }
    }
    Ok(f)
}

fn pci_addresses(root: &Path, tools: &dyn Tools) -> Result<Vec<String>, String> {
    let host = discover::read_host(root, tools, &mut Vec::new()).map_err(|e| e.to_string())?;
    Ok(host.pci_devices.into_iter().map(|d| d.address).collect())
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

/// Reports `name` started, waits `pause`, runs `work`, reports how it ended.
pub fn phase<T>(
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
