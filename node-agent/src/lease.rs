//! Per-slot leases: the host-local mutex between allocations, and the record that lets a
//! restarted agent pick up where it stopped. A lease is `{state_dir}/leases/{slot_id}.json`,
//! written atomically (temporary file, fsync, rename, fsync of the directory), so that after a
//! crash each lease is either the old one or the new one, never a torn mix.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What a lease is held for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseKind {
    Provision,
    Release,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub slot_id: String,
    pub slot_index: u32,
    pub allocation_id: String,
    pub task_id: String,
    pub kind: LeaseKind,
    /// The last phase started under this lease (`running` once a VM is up).
    pub phase: String,
    /// The allocation's guest telemetry token (delivered through cloud-init).
    pub telemetry_token: String,
    /// Seconds since the Unix epoch.
    pub updated_at: u64,
    /// On the lease of the slot whose NIC the guest has (a provision's first slot): how the
    /// guest is reached and whom it may reach. Release leases have none, so their forwarding
    /// is gone from the next ruleset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<agent_protocol::NetworkPlan>,
    /// On the same lease: the fabric partitions the allocation's slots are in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<agent_protocol::FabricPlan>,
    /// On the same lease: the volumes plugged into the VM, each at its guest device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<PluggedVolume>,
}

/// A volume plugged into a VM, and where.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PluggedVolume {
    pub disk: agent_protocol::VolumeDisk,
    pub dev: String,
}

pub struct LeaseStore {
    dir: PathBuf,
}

impl LeaseStore {
    pub fn new(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.join("leases"),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, slot_id: &str) -> Result<PathBuf, String> {
        // Slot ids are UUIDs; anything else must not become a path.
        if slot_id.is_empty() || !slot_id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Err(format!("{slot_id:?} is not a slot id"));
        }
        Ok(self.dir.join(format!("{slot_id}.json")))
    }

    pub fn get(&self, slot_id: &str) -> Result<Option<Lease>, String> {
        let path = self.path(slot_id)?;
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// Every lease, by slot index.
    pub fn all(&self) -> Result<Vec<Lease>, String> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("{}: {e}", self.dir.display())),
        };
        let mut leases = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| format!("{}: {e}", self.dir.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // Temporary files of an interrupted write are not leases.
            if let Some(slot) = name.strip_suffix(".json")
                && let Some(lease) = self.get(slot)?
            {
                leases.push(lease);
            }
        }
        leases.sort_by_key(|l| l.slot_index);
        Ok(leases)
    }

    /// Writes (or replaces) a lease atomically.
    pub fn put(&self, lease: &Lease) -> Result<(), String> {
        let path = self.path(&lease.slot_id)?;
        fs::create_dir_all(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let tmp = self.dir.join(format!(".{}.tmp", lease.slot_id));
        let json = serde_json::to_vec_pretty(lease).expect("a lease serializes");
        let mut f = fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        f.write_all(&json)
            .and_then(|()| f.sync_all())
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
        drop(f);
        fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
        self.sync_dir()
    }

    /// Removes a lease (the slot is free on this host); removing one that is gone is fine.
    pub fn remove(&self, slot_id: &str) -> Result<(), String> {
        let path = self.path(slot_id)?;
        match fs::remove_file(&path) {
            Ok(()) => self.sync_dir(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    fn sync_dir(&self) -> Result<(), String> {
        fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("syncing {}: {e}", self.dir.display()))
    }
}

pub fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(slot: &str, phase: &str) -> Lease {
        Lease {
            slot_id: slot.into(),
            slot_index: 1,
            allocation_id: "a1".into(),
            task_id: "t1".into(),
            kind: LeaseKind::Provision,
            phase: phase.into(),
            telemetry_token: "tok".into(),
            updated_at: 1,
            network: None,
            fabric: None,
            volumes: Vec::new(),
        }
    }

    #[test]
    fn leases_replace_atomically_and_ignore_torn_temporaries() {
        let dir = tempdir("atomic");
        let store = LeaseStore::new(&dir);
        let slot = "0c8e6a7e-0000-4000-8000-000000000001";
        assert_eq!(store.get(slot).unwrap(), None);
        store.put(&lease(slot, "take_leases")).unwrap();
        store.put(&lease(slot, "write_image")).unwrap();
        assert_eq!(store.get(slot).unwrap().unwrap().phase, "write_image");
        // A crash between create and rename leaves a temporary: it is not a lease, and the
        // previous lease is intact.
        fs::write(store.dir().join(format!(".{slot}.tmp")), b"{\"slot_id\":").unwrap();
        let all = store.all().unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].phase, "write_image");
        // The next write replaces the temporary.
        store.put(&lease(slot, "define_domain")).unwrap();
        assert_eq!(store.all().unwrap()[0].phase, "define_domain");
        store.remove(slot).unwrap();
        store.remove(slot).unwrap();
        assert!(store.all().unwrap().is_empty());
        // No leftovers but the (rewritten, then renamed) temporary is gone too.
        let names: Vec<_> = fs::read_dir(store.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(names.is_empty(), "{names:?}");
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn a_slot_id_never_becomes_a_path() {
        let dir = tempdir("paths");
        let store = LeaseStore::new(&dir);
        let e = store.put(&lease("../../etc/passwd", "x")).unwrap_err();
        assert_eq!(e, "\"../../etc/passwd\" is not a slot id");
        let _ = fs::remove_dir_all(dir);
    }

    pub(crate) fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "node-agent-{name}-{}-{}",
            std::process::id(),
            now_s()
        ));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }
}
