//! Where a project's volumes live: off the GPU hosts, on a storage backend that every host in
//! the region reaches over the network, so an instance on any host can attach them and what
//! one host wrote another reads back.
//!
//! [`StorageBackend`] is what the control plane's storage worker drives, outside any
//! transaction, for the jobs the volume state machine queued. Two implementations:
//! - [`QemuNbd`]: qcow2 files on a storage node, served over NBD by one
//!   `qemu-storage-daemon` that it drives through QMP (Debian's `qemu-system-common`/`qemu-utils`).
//!   Real on any Linux machine; the storage worker runs on the storage node.
//! - [`Rbd`]: Ceph RBD images, through the `rbd` command line with the worker's own keyring.
//!   What a production region uses; the [`Ceph`] trait is the edge a test fakes.
//!
//! Every name that reaches a command or a QMP message is built from typed fields
//! ([`VolumeKey`] from a UUID, [`Gib`] bounded), never from text a tenant typed.

mod qemu;
mod rbd;

pub use qemu::{NetnsName, QemuNbd};
pub use rbd::{Ceph, Rbd, RbdCli};

use std::fmt;

/// The most a volume may hold, in GiB (16 TiB).
pub const MAX_GIB: u32 = 16 * 1024;

/// A volume's name on the backend: `vol-` and its id's 32 hex digits.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeKey(String);

impl VolumeKey {
    pub fn of(id: uuid::Uuid) -> Self {
        VolumeKey(format!("vol-{}", id.simple()))
    }

    /// A snapshot of this volume, named by the snapshot's id.
    pub fn snapshot(&self, id: uuid::Uuid) -> SnapshotKey {
        SnapshotKey(format!("snap-{}", id.simple()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for VolumeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A snapshot's name on the backend: `snap-` and its id's 32 hex digits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotKey(String);

impl SnapshotKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A size in whole GiB, 1 to [`MAX_GIB`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Gib(u32);

impl Gib {
    pub fn new(n: u32) -> Result<Self, String> {
        if (1..=MAX_GIB).contains(&n) {
            Ok(Gib(n))
        } else {
            Err(format!("{n} GiB: a volume holds 1 to {MAX_GIB} GiB"))
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }

    pub fn bytes(self) -> u64 {
        u64::from(self.0) << 30
    }
}

/// How a GPU host reaches a volume: the node protocol's own type, since the agent reads it.
pub use agent_protocol::VolumeTarget as Target;

/// What erasing a volume did, for its cleanup record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Erasure {
    /// How: "allocated extents overwritten with zeros, then the file removed".
    pub method: String,
    /// The bytes of the backing store overwritten (0 for a volume nothing was written to).
    pub bytes_overwritten: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The backend refused or failed; the job is retried.
    #[error("{0}")]
    Backend(String),
    /// The request cannot succeed as asked (shrinking, say); the job fails for good.
    #[error("{0}")]
    Refused(String),
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// A storage backend. Every operation is idempotent: the worker retries a job whose outcome
/// it did not record, so doing it twice ends where doing it once did.
pub trait StorageBackend: Send + Sync {
    /// "qemu-storage-daemon at 10.0.0.5:10809, files under /var/lib/gpuaas/volumes".
    fn describe(&self) -> String;

    /// Makes an empty volume of `size`. A volume that exists with that size is left alone.
    fn create(&self, key: &VolumeKey, size: Gib) -> Result<()>;

    /// Makes a volume of `size` holding what `snapshot` of volume `source` held (and zeros
    /// beyond it). A volume that exists with that size is left alone.
    fn create_from(
        &self,
        key: &VolumeKey,
        source: &VolumeKey,
        snapshot: &SnapshotKey,
        size: Gib,
    ) -> Result<()>;

    /// Grows a volume to `size`, exported or not; never shrinks (refused).
    fn grow(&self, key: &VolumeKey, size: Gib) -> Result<()>;

    /// The volume's size, or none if the backend has no such volume.
    fn size(&self, key: &VolumeKey) -> Result<Option<Gib>>;

    /// Makes the volume reachable by the region's hosts and says where.
    fn export(&self, key: &VolumeKey) -> Result<Target>;

    /// Stops serving the volume; hosts can no longer reach it.
    fn withdraw(&self, key: &VolumeKey) -> Result<()>;

    /// A point-in-time copy of the volume, kept until [`StorageBackend::erase_snapshot`].
    fn snapshot(&self, key: &VolumeKey, snapshot: &SnapshotKey) -> Result<()>;

    fn erase_snapshot(&self, key: &VolumeKey, snapshot: &SnapshotKey) -> Result<Erasure>;

    /// Withdraws the volume, destroys what it held so no later volume can read it, and
    /// removes it. A volume already gone erases to nothing.
    fn erase(&self, key: &VolumeKey) -> Result<Erasure>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_sizes_are_built_only_from_typed_values() {
        let id = uuid::Uuid::parse_str("0a0e0000-0000-4000-8000-00000000abcd").unwrap();
        assert_eq!(
            VolumeKey::of(id).as_str(),
            "vol-0a0e000000004000800000000000abcd"
        );
        assert_eq!(Gib::new(10).unwrap().bytes(), 10 << 30);
        assert!(Gib::new(0).is_err());
        assert!(
            Gib::new(MAX_GIB + 1)
                .unwrap_err()
                .contains("1 to 16384 GiB")
        );
        let nbd = Target::Nbd {
            host: "10.0.0.5".into(),
            port: 10809,
            export: VolumeKey::of(id).as_str().into(),
        };
        assert_eq!(
            nbd.uri(),
            "nbd://10.0.0.5:10809/vol-0a0e000000004000800000000000abcd"
        );
        assert_eq!(
            serde_json::to_value(&nbd).unwrap()["protocol"],
            serde_json::json!("nbd")
        );
    }
}
