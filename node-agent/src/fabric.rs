//! The fabrics a slot is isolated on besides Ethernet: InfiniBand partitions (one partition
//! key per tenant, which a slot's IB virtual function joins before the VM starts and leaves at
//! release) and NVLink fabric partitions (on NVSwitch hosts, the partition placement chose for
//! a 2-, 4- or 8-GPU slice is activated before the VM starts and deactivated at release).
//!
//! Each sits behind a trait with a real implementation and a simulated one for hosts without
//! the hardware; the agent's phases are the same above both.
//! - [`OpenSmPartitions`] renders OpenSM's `partitions.conf` from the whole membership and has
//!   the subnet manager reread it (a command, `kill -HUP` of opensm by default).
//! - [`FabricManager`] drives NVIDIA Fabric Manager's partition tool (`fmpm -a/-d/-l`) with
//!   validated numeric arguments only.
//! - [`SimulatedIb`] and [`SimulatedNvlink`] keep their state in files under the agent's state
//!   directory, so that, like the real fabric, it outlives an agent crash; the simulated
//!   NVLink fabric refuses to activate a partition that overlaps an active one, as Fabric
//!   Manager does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use agent_protocol::FabricPartition;
use sha2::{Digest, Sha256};

/// The partition key every port is a limited member of (OpenSM's default partition).
pub const DEFAULT_PKEY: u16 = 0x7fff;

/// Whether `pkey` may be a tenant's partition key: 15 bits, not 0 (invalid) and not the
/// default partition.
pub fn pkey_ok(pkey: u16) -> Result<u16, String> {
    if (0x0001..DEFAULT_PKEY).contains(&pkey) {
        Ok(pkey)
    } else {
        Err(format!(
            "0x{pkey:04x} is not a tenant partition key (0x0001 to 0x7ffe)"
        ))
    }
}

/// A slot's IB virtual function's port GUID: `0x02` (locally administered) and 7 bytes of
/// sha256(`ib:{node_id}:{slot_index}`). The agent gives the VF this GUID on a real host, so
/// the partition configuration can name it before the VM exists.
pub fn port_guid(node_id: &str, slot_index: u32) -> String {
    let h = Sha256::digest(format!("ib:{node_id}:{slot_index}").as_bytes());
    let mut s = String::from("0x02");
    for b in &h[..7] {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Partition key → the port GUIDs that are full members of it.
pub type Membership = BTreeMap<u16, BTreeSet<String>>;

/// Puts each slot's IB VF into its tenant's partition, and nothing else in any.
pub trait IbFabric: Send + Sync {
    fn describe(&self) -> String;
    /// Makes the membership exactly `members`, and returns only once the fabric confirms it.
    fn apply(&self, members: &Membership) -> Result<(), String>;
}

/// `partitions.conf` for `members`: the default partition with every port a limited member
/// (so ports can reach the subnet manager but not each other through it), then one partition
/// per tenant key with its VFs as full members.
pub fn render_partitions(members: &Membership) -> Result<String, String> {
    let mut o = String::from(
        "# Rendered by gpu-node-agent: one partition per tenant, its slots' IB VFs as full members.\n\
         Default=0x7fff, ipoib : ALL=limited, SELF=full ;\n",
    );
    for (pkey, guids) in members {
        pkey_ok(*pkey)?;
        if guids.is_empty() {
            continue;
        }
        for g in guids {
            guid_ok(g)?;
        }
        let list: Vec<String> = guids.iter().map(|g| format!("{g}=full")).collect();
        o.push_str(&format!(
            "tenant_{pkey:04x}=0x{pkey:04x}, ipoib : {} ;\n",
            list.join(", ")
        ));
    }
    Ok(o)
}

fn guid_ok(g: &str) -> Result<&str, String> {
    match g.strip_prefix("0x") {
        Some(hex) if hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(g),
        _ => Err(format!("{g:?} is not a port GUID")),
    }
}

/// The membership a `partitions.conf` written by [`render_partitions`] holds (what a
/// restarted agent, or a check after writing, reads back).
pub fn parse_partitions(text: &str) -> Result<Membership, String> {
    let mut m = Membership::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with("Default=") {
            continue;
        }
        let (def, props) = line
            .trim_end_matches(';')
            .split_once(':')
            .ok_or_else(|| format!("partitions.conf: {line:?} has no ':'"))?;
        let pkey = def
            .split(',')
            .next()
            .and_then(|d| d.split_once('='))
            .and_then(|(_, k)| u16::from_str_radix(k.trim().trim_start_matches("0x"), 16).ok())
            .ok_or_else(|| format!("partitions.conf: {line:?} names no P_Key"))?;
        let guids = props
            .split(',')
            .map(|p| p.trim().trim_end_matches("=full").to_string())
            .filter(|p| !p.is_empty())
            .collect();
        m.insert(pkey, guids);
    }
    Ok(m)
}

/// OpenSM on this host: the partition file it reads, and how to make it reread it.
pub struct OpenSmPartitions {
    pub path: PathBuf,
    /// The command that makes the subnet manager reread the file, e.g. `pkill -HUP opensm`.
    pub reload: Vec<String>,
}

impl IbFabric for OpenSmPartitions {
    fn describe(&self) -> String {
        format!(
            "OpenSM ({}, reloaded by `{}`)",
            self.path.display(),
            self.reload.join(" ")
        )
    }
    fn apply(&self, members: &Membership) -> Result<(), String> {
        let text = render_partitions(members)?;
        if std::fs::read_to_string(&self.path).ok().as_deref() != Some(&text) {
            let tmp = self.path.with_extension("tmp");
            std::fs::write(&tmp, &text).map_err(|e| format!("{}: {e}", tmp.display()))?;
            std::fs::rename(&tmp, &self.path)
                .map_err(|e| format!("{}: {e}", self.path.display()))?;
        }
        let (program, args) = self
            .reload
            .split_first()
            .ok_or("no reload command for the subnet manager")?;
        let out = Command::new(program)
            .args(args)
            .output()
            .map_err(|e| format!("{program}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "the subnet manager did not reload its partitions: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        // Confirmed when the file the subnet manager reads says exactly this.
        let back = parse_partitions(
            &std::fs::read_to_string(&self.path)
                .map_err(|e| format!("{}: {e}", self.path.display()))?,
        )?;
        if &back != members {
            return Err("the partition file does not hold the membership just written".into());
        }
        Ok(())
    }
}

/// A host without InfiniBand: the membership in `{dir}/ib-partitions.conf`, rendered the same
/// way, and confirmed by reading it back.
pub struct SimulatedIb {
    pub dir: PathBuf,
}

impl SimulatedIb {
    pub fn new(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.join("fabric"),
        }
    }
    fn path(&self) -> PathBuf {
        self.dir.join("ib-partitions.conf")
    }
    /// What the simulated fabric holds now.
    pub fn membership(&self) -> Result<Membership, String> {
        match std::fs::read_to_string(self.path()) {
            Ok(t) => parse_partitions(&t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Membership::new()),
            Err(e) => Err(format!("{}: {e}", self.path().display())),
        }
    }
}

impl IbFabric for SimulatedIb {
    fn describe(&self) -> String {
        format!("simulated InfiniBand ({})", self.path().display())
    }
    fn apply(&self, members: &Membership) -> Result<(), String> {
        let text = render_partitions(members)?;
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let tmp = self.path().with_extension("tmp");
        std::fs::write(&tmp, &text).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, self.path()).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let mut expect = members.clone();
        expect.retain(|_, g| !g.is_empty());
        if self.membership()? != expect {
            return Err("the simulated fabric does not hold the membership just written".into());
        }
        Ok(())
    }
}

/// NVLink fabric partitions on an NVSwitch host.
pub trait NvlinkFabric: Send + Sync {
    fn describe(&self) -> String;
    /// Every partition the fabric defines, with whether it is active.
    fn partitions(&self) -> Result<Vec<FabricPartition>, String>;
    /// Activates partition `id` (already active: nothing to do).
    fn activate(&self, id: u32) -> Result<(), String>;
    /// Deactivates partition `id` (already inactive: nothing to do).
    fn deactivate(&self, id: u32) -> Result<(), String>;
}

/// Fabric Manager through its partition tool: `{program} {args…} -l | -a ID | -d ID`.
pub struct FabricManager {
    pub program: String,
    /// Connection options, e.g. `--unix-domain-socket /var/run/nvidia-fabricmanager/fm.sock`.
    pub args: Vec<String>,
    /// The host's GPUs in PCI address order (module `n` of the partition table is the `n`-th).
    pub gpus: Vec<String>,
}

impl FabricManager {
    fn run(&self, extra: &[&str]) -> Result<String, String> {
        let out = Command::new(&self.program)
            .args(&self.args)
            .args(extra)
            .output()
            .map_err(|e| format!("{}: {e}", self.program))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "{} {}: {}",
                self.program,
                extra.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

impl NvlinkFabric for FabricManager {
    fn describe(&self) -> String {
        format!("Fabric Manager ({})", self.program)
    }
    fn partitions(&self) -> Result<Vec<FabricPartition>, String> {
        let text = self.run(&["-l"])?;
        let mut warnings = Vec::new();
        Ok(crate::tools::parse_partition_table(
            &text,
            &self.gpus,
            &mut warnings,
        ))
    }
    fn activate(&self, id: u32) -> Result<(), String> {
        if self.partitions()?.iter().any(|p| p.id == id && p.active) {
            return Ok(());
        }
        self.run(&["-a", &id.to_string()]).map(drop)
    }
    fn deactivate(&self, id: u32) -> Result<(), String> {
        if !self.partitions()?.iter().any(|p| p.id == id && p.active) {
            return Ok(());
        }
        self.run(&["-d", &id.to_string()]).map(drop)
    }
}

/// A simulated NVSwitch fabric: the partitions a fixture defines, the active ones in
/// `{dir}/nvlink-active`.
pub struct SimulatedNvlink {
    pub dir: PathBuf,
    pub defined: Vec<FabricPartition>,
}

impl SimulatedNvlink {
    pub fn new(state_dir: &Path, defined: Vec<FabricPartition>) -> Self {
        Self {
            dir: state_dir.join("fabric"),
            defined,
        }
    }
    fn path(&self) -> PathBuf {
        self.dir.join("nvlink-active")
    }
    /// The active partitions' ids.
    pub fn active(&self) -> Result<BTreeSet<u32>, String> {
        match std::fs::read_to_string(self.path()) {
            Ok(t) => t
                .split_whitespace()
                .map(|w| {
                    w.parse()
                        .map_err(|_| format!("{}: {w:?}", self.path().display()))
                })
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeSet::new()),
            Err(e) => Err(format!("{}: {e}", self.path().display())),
        }
    }
    fn save(&self, active: &BTreeSet<u32>) -> Result<(), String> {
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let text: Vec<String> = active.iter().map(u32::to_string).collect();
        let tmp = self.path().with_extension("tmp");
        std::fs::write(&tmp, text.join(" ")).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, self.path()).map_err(|e| format!("{}: {e}", self.dir.display()))
    }
    fn defined(&self, id: u32) -> Result<&FabricPartition, String> {
        self.defined
            .iter()
            .find(|p| p.id == id)
            .ok_or_else(|| format!("the fabric has no partition {id}"))
    }
}

impl NvlinkFabric for SimulatedNvlink {
    fn describe(&self) -> String {
        format!(
            "simulated NVLink fabric ({} partitions)",
            self.defined.len()
        )
    }
    fn partitions(&self) -> Result<Vec<FabricPartition>, String> {
        let active = self.active()?;
        Ok(self
            .defined
            .iter()
            .map(|p| FabricPartition {
                active: active.contains(&p.id),
                ..p.clone()
            })
            .collect())
    }
    fn activate(&self, id: u32) -> Result<(), String> {
        let wanted = self.defined(id)?;
        let mut active = self.active()?;
        if active.contains(&id) {
            return Ok(());
        }
        for other in &active {
            let o = self.defined(*other)?;
            if o.gpus.iter().any(|g| wanted.gpus.contains(g)) {
                return Err(format!(
                    "partition {id} overlaps active partition {other} (GPUs {}); Fabric Manager refuses it",
                    o.gpus
                        .iter()
                        .filter(|g| wanted.gpus.contains(g))
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        active.insert(id);
        self.save(&active)
    }
    fn deactivate(&self, id: u32) -> Result<(), String> {
        self.defined(id)?;
        let mut active = self.active()?;
        if active.remove(&id) {
            self.save(&active)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_keys_and_guids_are_checked_before_they_are_written() {
        assert!(pkey_ok(0).is_err());
        assert!(pkey_ok(0x7fff).is_err());
        assert!(pkey_ok(0x8001).is_err());
        assert_eq!(pkey_ok(0x0102), Ok(0x0102));
        let g = port_guid("n", 3);
        assert!(guid_ok(&g).is_ok(), "{g}");
        assert_ne!(g, port_guid("n", 4));
        let mut m = Membership::new();
        m.insert(0x0102, BTreeSet::from(["0x02aa; ALL=full".to_string()]));
        assert!(
            render_partitions(&m)
                .unwrap_err()
                .contains("not a port GUID")
        );
    }

    #[test]
    fn rendered_partitions_read_back_as_the_same_membership() {
        let mut m = Membership::new();
        m.insert(
            0x0002,
            BTreeSet::from([port_guid("n", 0), port_guid("n", 1)]),
        );
        m.insert(0x0003, BTreeSet::from([port_guid("n", 2)]));
        let text = render_partitions(&m).unwrap();
        assert!(text.contains("Default=0x7fff, ipoib : ALL=limited, SELF=full ;"));
        assert_eq!(parse_partitions(&text).unwrap(), m);
    }

    #[test]
    fn the_simulated_nvlink_fabric_refuses_overlapping_partitions() {
        let dir = std::env::temp_dir().join(format!("nvlink-{}", std::process::id()));
        let p = |id, gpus: &[&str]| FabricPartition {
            id,
            active: false,
            gpus: gpus.iter().map(|g| g.to_string()).collect(),
        };
        let f = SimulatedNvlink::new(
            &dir,
            vec![
                p(0, &["a", "b", "c", "d"]),
                p(1, &["a", "b"]),
                p(2, &["c", "d"]),
            ],
        );
        f.activate(1).unwrap();
        f.activate(1).unwrap();
        let e = f.activate(0).unwrap_err();
        assert!(e.contains("overlaps active partition 1"), "{e}");
        f.activate(2).unwrap();
        assert_eq!(f.active().unwrap(), BTreeSet::from([1, 2]));
        f.deactivate(1).unwrap();
        f.deactivate(2).unwrap();
        f.activate(0).unwrap();
        assert!(f.activate(9).unwrap_err().contains("no partition 9"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
