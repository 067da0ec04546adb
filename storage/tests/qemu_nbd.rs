//! The qemu backend's data path, with real tools: volumes made with `qemu-img`, served by
//! `qemu-storage-daemon` in a storage network namespace, written through NBD from one host
//! namespace and read back from another, grown while served, snapshotted while served (and a
//! new volume made from the snapshot), and
//! erased so that nothing it held can be read again.
//!
//! Needs root, `ip`, `qemu-img`, `qemu-io` and `qemu-storage-daemon`; without them it says
//! SKIPPED and why.

use std::fs::File;
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;

use storage::{Gib, NetnsName, QemuNbd, StorageBackend, StorageError, Target, VolumeKey};

fn missing() -> Option<String> {
    if !Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n")
    {
        return Some("network namespaces need root".into());
    }
    for tool in ["ip", "qemu-img", "qemu-io", "qemu-storage-daemon"] {
        if !Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A storage namespace with a bridge, and two host namespaces on it; all deleted on drop.
struct Lab {
    prefix: String,
    dir: PathBuf,
}

impl Lab {
    fn new() -> Lab {
        let prefix = format!("stv{}", std::process::id());
        let dir = std::env::temp_dir().join(format!("{prefix}-volumes"));
        let _ = std::fs::remove_dir_all(&dir);
        let lab = Lab { prefix, dir };
        let storage = lab.ns("s");
        sh(&["ip", "netns", "add", &storage]);
        sh(&["ip", "-n", &storage, "link", "add", "br0", "type", "bridge"]);
        sh(&[
            "ip",
            "-n",
            &storage,
            "addr",
            "add",
            "10.231.0.1/24",
            "dev",
            "br0",
        ]);
        sh(&["ip", "-n", &storage, "link", "set", "br0", "up"]);
        sh(&["ip", "-n", &storage, "link", "set", "lo", "up"]);
        for (host, addr) in [("a", "10.231.0.2/24"), ("b", "10.231.0.3/24")] {
            let ns = lab.ns(host);
            sh(&["ip", "netns", "add", &ns]);
            let veth = format!("{}{host}", lab.prefix);
            sh(&[
                "ip", "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            sh(&["ip", "link", "set", &veth, "netns", &storage]);
            sh(&[
                "ip", "-n", &storage, "link", "set", &veth, "master", "br0", "up",
            ]);
            sh(&["ip", "-n", &ns, "addr", "add", addr, "dev", "eth0"]);
            sh(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
            sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        }
        lab
    }

    fn ns(&self, which: &str) -> String {
        format!("{}{which}", self.prefix)
    }

    /// `qemu-io` on `target` from host namespace `host`: whether it succeeded, and its output.
    fn qemu_io(&self, host: &str, target: &Target, command: &str) -> (bool, String) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns(host), "qemu-io", "-f", "raw"])
            .arg(target.uri())
            .args(["-c", command])
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (
            out.status.success() && !text.contains("failed") && !text.contains("error"),
            text,
        )
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // A daemon left by a failed assertion goes with its namespace.
        if let Ok(out) = Command::new("ip")
            .args(["netns", "pids", &self.ns("s")])
            .output()
        {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").arg(pid).status();
            }
        }
        for ns in ["a", "b", "s"] {
            let _ = Command::new("ip")
                .args(["netns", "delete", &self.ns(ns)])
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_volume_written_from_one_host_is_read_from_another_then_erased() {
    if let Some(why) = missing() {
        println!("SKIPPED: {why}");
        return;
    }
    let lab = Lab::new();
    let listen: SocketAddr = "10.231.0.1:10809".parse().unwrap();
    let backend = QemuNbd::new(
        &lab.dir,
        listen,
        Some(NetnsName::new(&lab.ns("s")).unwrap()),
    );
    let key = VolumeKey::of(uuid::Uuid::new_v4());
    let one = Gib::new(1).unwrap();

    // Made once, however often asked.
    backend.create(&key, one).unwrap();
    backend.create(&key, one).unwrap();
    assert_eq!(backend.size(&key).unwrap(), Some(one));
    assert!(matches!(
        backend.create(&key, Gib::new(2).unwrap()),
        Err(StorageError::Refused(_))
    ));

    // Host A writes a pattern; host B reads the same bytes.
    let target = backend.export(&key).unwrap();
    assert_eq!(
        backend.export(&key).unwrap(),
        target,
        "exporting twice is one export"
    );
    assert_eq!(target.uri(), format!("nbd://10.231.0.1:10809/{key}"));
    let (ok, out) = lab.qemu_io("a", &target, "write -P 0x5a 0 4M");
    assert!(ok, "{out}");
    let (ok, out) = lab.qemu_io("b", &target, "read -P 0x5a 0 4M");
    assert!(ok, "host B reads what host A wrote: {out}");
    let (ok, _) = lab.qemu_io("b", &target, "read -P 0x00 0 4M");
    assert!(!ok, "the check would see other bytes");

    // Grown while served; what was written stays, and it only grows.
    let two = Gib::new(2).unwrap();
    backend.grow(&key, two).unwrap();
    assert_eq!(backend.size(&key).unwrap(), Some(two));
    let (ok, out) = lab.qemu_io("b", &target, "read -P 0x5a 0 4M");
    assert!(ok, "{out}");
    let (ok, out) = lab.qemu_io("a", &target, "write -P 0x11 1536M 1M");
    assert!(ok, "the new space is usable: {out}");
    assert!(matches!(
        backend.grow(&key, one),
        Err(StorageError::Refused(_))
    ));

    // A snapshot while served keeps the bytes of its moment.
    let snap = key.snapshot(uuid::Uuid::new_v4());
    backend.snapshot(&key, &snap).unwrap();
    backend.snapshot(&key, &snap).unwrap();
    let (ok, out) = lab.qemu_io("a", &target, "write -P 0x77 0 4M");
    assert!(ok, "{out}");
    let snap_file = lab.dir.join(format!("{key}.{}.qcow2", snap.as_str()));
    let out = Command::new("qemu-io")
        .args(["-f", "qcow2", "-r"])
        .arg(&snap_file)
        .args(["-c", "read -P 0x5a 0 4M"])
        .output()
        .unwrap();
    assert!(
        out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("failed"),
        "the snapshot holds the bytes from before: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    // A new volume made from the snapshot holds its bytes, served to any host, and may be
    // bigger; never smaller than what the snapshot holds.
    let restored = VolumeKey::of(uuid::Uuid::new_v4());
    let three = Gib::new(3).unwrap();
    assert!(matches!(
        backend.create_from(&restored, &key, &snap, one),
        Err(StorageError::Refused(_))
    ));
    backend.create_from(&restored, &key, &snap, three).unwrap();
    backend.create_from(&restored, &key, &snap, three).unwrap();
    assert_eq!(backend.size(&restored).unwrap(), Some(three));
    let t = backend.export(&restored).unwrap();
    let (ok, out) = lab.qemu_io("b", &t, "read -P 0x5a 0 4M");
    assert!(ok, "the new volume holds the snapshot's bytes: {out}");
    let (ok, out) = lab.qemu_io("b", &t, "read -P 0x11 1536M 1M");
    assert!(ok, "and what was written after the grow: {out}");
    let (ok, out) = lab.qemu_io("a", &t, "write -P 0x33 2560M 1M");
    assert!(ok, "its extra space is usable: {out}");
    backend.erase(&restored).unwrap();

    // Erased: no host reaches it, and the bytes it held are zeros before the file goes.
    let mut held = File::open(lab.dir.join(format!("{key}.qcow2"))).unwrap();
    let erasure = backend.erase(&key).unwrap();
    assert!(
        erasure.bytes_overwritten > 5 << 20,
        "4 MiB and 1 MiB were written: {erasure:?}"
    );
    let (ok, _) = lab.qemu_io("b", &target, "read 0 512");
    assert!(!ok, "an erased volume is no longer served");
    let mut left = Vec::new();
    held.read_to_end(&mut left).unwrap();
    assert_eq!(left.len() as u64, erasure.bytes_overwritten);
    assert!(left.iter().all(|&b| b == 0), "every byte was overwritten");
    assert_eq!(backend.size(&key).unwrap(), None);
    assert_eq!(
        backend.erase(&key).unwrap().bytes_overwritten,
        0,
        "erasing twice is once"
    );
    let snap_erased = backend.erase_snapshot(&key, &snap).unwrap();
    assert!(snap_erased.bytes_overwritten > 4 << 20);
    assert!(!snap_file.exists());

    // A daemon that restarted serves a volume again on the next export.
    let other = VolumeKey::of(uuid::Uuid::new_v4());
    backend.create(&other, one).unwrap();
    let t = backend.export(&other).unwrap();
    let (ok, out) = lab.qemu_io("a", &t, "write -P 0x42 0 64k");
    assert!(ok, "{out}");
    backend.stop_daemon().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        !lab.qemu_io("b", &t, "read 0 512").0,
        "nothing is served after the stop"
    );
    backend.export(&other).unwrap();
    let (ok, out) = lab.qemu_io("b", &t, "read -P 0x42 0 64k");
    assert!(ok, "served again after a restart: {out}");
    backend.erase(&other).unwrap();
    backend.stop_daemon().unwrap();
}
