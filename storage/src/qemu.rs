//! Volumes as qcow2 files on a storage node, served over NBD by one `qemu-storage-daemon`.
//!
//! The daemon holds every exported volume open and listens on one address of the storage
//! network; a host reaches a volume at `nbd://address/vol-…`. The backend drives the daemon
//! through its QMP socket (a Unix socket beside the files, so only the storage node's own
//! worker can reach it) and starts it if it is not running. What the daemon serves is not
//! persisted: after a restart a volume is served again by the next [`QemuNbd::export`], which
//! the worker calls for every attached volume when it reconciles.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{Erasure, Gib, Result, SnapshotKey, StorageBackend, StorageError, Target, VolumeKey};

/// A network namespace's name, for a daemon that serves a storage network of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetnsName(String);

impl NetnsName {
    pub fn new(name: &str) -> Result<Self, String> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if ok {
            Ok(NetnsName(name.to_string()))
        } else {
            Err(format!(
                "{name:?}: a namespace name is 1 to 64 lowercase letters, digits and '-'"
            ))
        }
    }
}

pub struct QemuNbd {
    dir: PathBuf,
    listen: SocketAddr,
    netns: Option<NetnsName>,
}

fn failed(what: &str, e: impl std::fmt::Display) -> StorageError {
    StorageError::Backend(format!("{what}: {e}"))
}

/// Runs a tool and returns its standard output, or says what it printed on failure.
fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .map_err(|e| failed(&format!("{:?}", cmd.get_program()), e))?;
    if !out.status.success() {
        return Err(StorageError::Backend(format!(
            "{:?} {:?} failed: {}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Overwrites `path` end to end with zeros, flushes it to disk and removes it; the bytes
/// overwritten (0 if it was gone).
fn zero_and_remove(path: &Path) -> Result<u64> {
    let file = match OpenOptions::new().write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(failed("opening for erasure", e)),
    };
    let len = file.metadata().map_err(|e| failed("erasure", e))?.len();
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], at)
            .map_err(|e| failed("erasure", e))?;
        at += n as u64;
    }
    file.sync_all().map_err(|e| failed("erasure", e))?;
    drop(file);
    fs::remove_file(path).map_err(|e| failed("removing the erased file", e))?;
    Ok(len)
}

/// One QMP session: the greeting read and capabilities negotiated.
struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    fn connect(socket: &Path) -> std::io::Result<Qmp> {
        let stream = UnixStream::connect(socket)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut qmp = Qmp {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        };
        let mut greeting = String::new();
        qmp.reader.read_line(&mut greeting)?;
        qmp.execute("qmp_capabilities", json!({}))
            .map_err(std::io::Error::other)?;
        Ok(qmp)
    }

    /// Runs one command: its `return`, or its error's description.
    fn execute(&mut self, command: &str, arguments: Value) -> Result<Value, String> {
        let msg = json!({"execute": command, "arguments": arguments});
        writeln!(self.writer, "{msg}").map_err(|e| e.to_string())?;
        loop {
            let mut line = String::new();
            if self
                .reader
                .read_line(&mut line)
                .map_err(|e| e.to_string())?
                == 0
            {
                return Err("the daemon closed its QMP socket".into());
            }
            let v: Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
            if v.get("event").is_some() {
                continue;
            }
            if let Some(r) = v.get("return") {
                return Ok(r.clone());
            }
            return Err(v["error"]["desc"]
                .as_str()
                .unwrap_or("an error without a description")
                .to_string());
        }
    }
}

impl QemuNbd {
    /// Volumes under `dir`, served on `listen` (the storage network's address), the daemon in
    /// `netns` if given.
    pub fn new(dir: impl Into<PathBuf>, listen: SocketAddr, netns: Option<NetnsName>) -> Self {
        QemuNbd {
            dir: dir.into(),
            listen,
            netns,
        }
    }

    fn file(&self, key: &VolumeKey) -> PathBuf {
        self.dir.join(format!("{}.qcow2", key.as_str()))
    }

    fn snapshot_file(&self, key: &VolumeKey, snapshot: &SnapshotKey) -> PathBuf {
        self.dir
            .join(format!("{}.{}.qcow2", key.as_str(), snapshot.as_str()))
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("qmp.sock")
    }

    /// QMP's block node name: at most 31 characters, so `v` and 30 of the id's hex digits.
    fn node(key: &VolumeKey) -> String {
        format!("v{}", &key.as_str()[4..34])
    }

    fn qmp(&self) -> Result<Qmp> {
        if let Ok(q) = Qmp::connect(&self.socket()) {
            return Ok(q);
        }
        self.start_daemon()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match Qmp::connect(&self.socket()) {
                Ok(q) => return Ok(q),
                Err(e) if Instant::now() > deadline => {
                    return Err(failed("qemu-storage-daemon's QMP socket", e));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn start_daemon(&self) -> Result<()> {
        fs::create_dir_all(&self.dir).map_err(|e| failed("the volume directory", e))?;
        let socket = self.socket();
        let _ = fs::remove_file(&socket);
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.0, "qemu-storage-daemon"]);
                c
            }
            None => Command::new("qemu-storage-daemon"),
        };
        cmd.arg("--chardev")
            .arg(format!(
                "socket,id=qmp,path={},server=on,wait=off",
                socket.display()
            ))
            .args(["--monitor", "chardev=qmp", "--nbd-server"])
            .arg(format!(
                "addr.type=inet,addr.host={},addr.port={}",
                self.listen.ip(),
                self.listen.port()
            ))
            .arg("--pidfile")
            .arg(self.dir.join("qemu-storage-daemon.pid"))
            .arg("--daemonize");
        run(&mut cmd).map(drop)
    }

    /// Stops the daemon (every export with it) and waits for it to be gone; the files stay.
    pub fn stop_daemon(&self) -> Result<()> {
        let pid = fs::read_to_string(self.dir.join("qemu-storage-daemon.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok());
        if let Ok(mut q) = Qmp::connect(&self.socket()) {
            // The daemon exits as it answers; a lost answer is no failure.
            let _ = q.execute("quit", json!({}));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Some(pid) = pid
            && Path::new(&format!("/proc/{pid}")).exists()
        {
            if Instant::now() > deadline {
                return Err(StorageError::Backend(format!(
                    "qemu-storage-daemon (pid {pid}) did not exit within 10 s"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn exported(q: &mut Qmp, key: &VolumeKey) -> Result<bool> {
        let exports = q
            .execute("query-block-exports", json!({}))
            .map_err(|e| failed("query-block-exports", e))?;
        Ok(exports
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["id"] == key.as_str())))
    }

    fn node_open(q: &mut Qmp, node: &str) -> Result<bool> {
        let nodes = q
            .execute("query-named-block-nodes", json!({"flat": true}))
            .map_err(|e| failed("query-named-block-nodes", e))?;
        Ok(nodes
            .as_array()
            .is_some_and(|a| a.iter().any(|n| n["node-name"] == node)))
    }

    /// Serves `key` on a session already open (the daemon takes one QMP client at a time).
    fn export_on(&self, q: &mut Qmp, key: &VolumeKey) -> Result<Target> {
        let path = self.file(key);
        if !path.exists() {
            return Err(StorageError::Backend(format!("{key} does not exist")));
        }
        let node = Self::node(key);
        if !Self::node_open(q, &node)? {
            q.execute(
                "blockdev-add",
                json!({"driver": "qcow2", "node-name": node,
                       "file": {"driver": "file", "filename": path}}),
            )
            .map_err(|e| failed("blockdev-add", e))?;
        }
        if !Self::exported(q, key)? {
            q.execute(
                "block-export-add",
                json!({"type": "nbd", "id": key.as_str(), "node-name": node,
                       "name": key.as_str(), "writable": true}),
            )
            .map_err(|e| failed("block-export-add", e))?;
        }
        Ok(Target::Nbd {
            host: self.listen.ip().to_string(),
            port: self.listen.port(),
            export: key.as_str().to_string(),
        })
    }

    /// Stops serving `key` and closes it, on a session already open.
    fn withdraw_on(q: &mut Qmp, key: &VolumeKey) -> Result<()> {
        if Self::exported(q, key)? {
            // `hard`: clients are disconnected rather than waited for.
            q.execute(
                "block-export-del",
                json!({"id": key.as_str(), "mode": "hard"}),
            )
            .map_err(|e| failed("block-export-del", e))?;
            // The export is gone once the daemon says so (deletion is asynchronous).
            let deadline = Instant::now() + Duration::from_secs(10);
            while Self::exported(q, key)? {
                if Instant::now() > deadline {
                    return Err(StorageError::Backend(format!(
                        "{key}'s export did not end within 10 s"
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let node = Self::node(key);
        if Self::node_open(q, &node)? {
            q.execute("blockdev-del", json!({"node-name": node}))
                .map_err(|e| failed("blockdev-del", e))?;
        }
        Ok(())
    }

    fn image_size(&self, path: &Path) -> Result<Option<u64>> {
        if !path.exists() {
            return Ok(None);
        }
        let info = run(Command::new("qemu-img")
            .args(["info", "-U", "--output=json", "-f", "qcow2"])
            .arg(path))?;
        let v: Value = serde_json::from_str(&info).map_err(|e| failed("qemu-img info", e))?;
        Ok(v["virtual-size"].as_u64())
    }
}

impl StorageBackend for QemuNbd {
    fn describe(&self) -> String {
        format!(
            "qemu-storage-daemon serving NBD on {}, volumes under {}",
            self.listen,
            self.dir.display()
        )
    }

    fn create(&self, key: &VolumeKey, size: Gib) -> Result<()> {
        let path = self.file(key);
        match self.image_size(&path)? {
            Some(bytes) if bytes == size.bytes() => return Ok(()),
            Some(bytes) => {
                return Err(StorageError::Refused(format!(
                    "{key} exists already with {bytes} bytes"
                )));
            }
            None => {}
        }
        fs::create_dir_all(&self.dir).map_err(|e| failed("the volume directory", e))?;
        // Created beside its name and renamed, so a crash never leaves a half-made volume
        // under the name a retry would accept.
        let partial = self.dir.join(format!("{}.partial", key.as_str()));
        run(Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2"])
            .arg(&partial)
            .arg(size.bytes().to_string()))?;
        fs::rename(&partial, &path).map_err(|e| failed("naming the new volume", e))
    }

    fn create_from(
        &self,
        key: &VolumeKey,
        source: &VolumeKey,
        snapshot: &SnapshotKey,
        size: Gib,
    ) -> Result<()> {
        let path = self.file(key);
        match self.image_size(&path)? {
            Some(bytes) if bytes == size.bytes() => return Ok(()),
            Some(bytes) => {
                return Err(StorageError::Refused(format!(
                    "{key} exists already with {bytes} bytes"
                )));
            }
            None => {}
        }
        let from = self.snapshot_file(source, snapshot);
        let Some(held) = self.image_size(&from)? else {
            return Err(StorageError::Refused(format!(
                "snapshot {} of {source} does not exist",
                snapshot.as_str()
            )));
        };
        if held > size.bytes() {
            return Err(StorageError::Refused(format!(
                "snapshot {} holds {held} bytes, more than {key}'s {}",
                snapshot.as_str(),
                size.bytes()
            )));
        }
        fs::create_dir_all(&self.dir).map_err(|e| failed("the volume directory", e))?;
        // A full copy, so the new volume never depends on the snapshot's file, then grown;
        // made beside its name and renamed, as `create` does.
        let partial = self.dir.join(format!("{}.partial", key.as_str()));
        run(Command::new("qemu-img")
            .args(["convert", "-f", "qcow2", "-O", "qcow2"])
            .arg(&from)
            .arg(&partial))?;
        if held < size.bytes() {
            run(Command::new("qemu-img")
                .args(["resize", "-q", "-f", "qcow2"])
                .arg(&partial)
                .arg(size.bytes().to_string()))?;
        }
        File::open(&partial)
            .and_then(|f| f.sync_all())
            .map_err(|e| failed("the new volume", e))?;
        fs::rename(&partial, &path).map_err(|e| failed("naming the new volume", e))
    }

    fn grow(&self, key: &VolumeKey, size: Gib) -> Result<()> {
        let path = self.file(key);
        let Some(now) = self.image_size(&path)? else {
            return Err(StorageError::Backend(format!("{key} does not exist")));
        };
        if now == size.bytes() {
            return Ok(());
        }
        if now > size.bytes() {
            return Err(StorageError::Refused(format!(
                "{key} holds {now} bytes; volumes only grow"
            )));
        }
        // An NBD export does not share the resize permission: the export is withdrawn for
        // the resize and served again, and the guest's NBD client reconnects.
        let mut q = self.qmp()?;
        let was_exported = Self::exported(&mut q, key)?;
        Self::withdraw_on(&mut q, key)?;
        run(Command::new("qemu-img")
            .args(["resize", "-q", "-f", "qcow2"])
            .arg(&path)
            .arg(size.bytes().to_string()))?;
        if was_exported {
            self.export_on(&mut q, key)?;
        }
        Ok(())
    }

    fn size(&self, key: &VolumeKey) -> Result<Option<Gib>> {
        Ok(self
            .image_size(&self.file(key))?
            .and_then(|b| Gib::new((b >> 30) as u32).ok()))
    }

    fn export(&self, key: &VolumeKey) -> Result<Target> {
        let mut q = self.qmp()?;
        self.export_on(&mut q, key)
    }

    fn withdraw(&self, key: &VolumeKey) -> Result<()> {
        let mut q = self.qmp()?;
        Self::withdraw_on(&mut q, key)
    }

    fn snapshot(&self, key: &VolumeKey, snapshot: &SnapshotKey) -> Result<()> {
        let target = self.snapshot_file(key, snapshot);
        if target.exists() {
            return Ok(());
        }
        let partial = target.with_extension("partial");
        let mut q = self.qmp()?;
        let node = Self::node(key);
        if Self::node_open(&mut q, &node)? {
            // Served, perhaps written to right now: an internal snapshot is taken atomically
            // by the daemon, copied out, and dropped.
            let _ = q.execute(
                "blockdev-snapshot-delete-internal-sync",
                json!({"device": node, "name": snapshot.as_str()}),
            );
            q.execute(
                "blockdev-snapshot-internal-sync",
                json!({"device": node, "name": snapshot.as_str()}),
            )
            .map_err(|e| failed("blockdev-snapshot-internal-sync", e))?;
            let copied = run(Command::new("qemu-img")
                .args(["convert", "-U", "-f", "qcow2", "-O", "qcow2", "-l"])
                .arg(format!("snapshot.name={}", snapshot.as_str()))
                .arg(self.file(key))
                .arg(&partial));
            let dropped = q.execute(
                "blockdev-snapshot-delete-internal-sync",
                json!({"device": node, "name": snapshot.as_str()}),
            );
            copied?;
            dropped.map_err(|e| failed("dropping the internal snapshot", e))?;
        } else {
            run(Command::new("qemu-img")
                .args(["convert", "-f", "qcow2", "-O", "qcow2"])
                .arg(self.file(key))
                .arg(&partial))?;
        }
        File::open(&partial)
            .and_then(|f| f.sync_all())
            .map_err(|e| failed("the snapshot", e))?;
        fs::rename(&partial, &target).map_err(|e| failed("naming the snapshot", e))
    }

    fn erase_snapshot(&self, key: &VolumeKey, snapshot: &SnapshotKey) -> Result<Erasure> {
        let bytes = zero_and_remove(&self.snapshot_file(key, snapshot))?;
        Ok(Erasure {
            method: "the snapshot file overwritten with zeros end to end, flushed, then removed"
                .into(),
            bytes_overwritten: bytes,
        })
    }

    fn erase(&self, key: &VolumeKey) -> Result<Erasure> {
        StorageBackend::withdraw(self, key)?;
        let _ = fs::remove_file(self.dir.join(format!("{}.partial", key.as_str())));
        let bytes = zero_and_remove(&self.file(key))?;
        Ok(Erasure {
            method: "the volume file overwritten with zeros end to end, flushed, then removed"
                .into(),
            bytes_overwritten: bytes,
        })
    }
}
