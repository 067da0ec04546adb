//! Stop and start on the host with real tools: a stop copies the boot disk onto the
//! instance's root volume, a qcow2 file served over NBD by `qemu-storage-daemon` (the storage
//! backend the control plane drives), before the wipe; a start on another host restores it
//! onto its own slot's disk. Needs `qemu-img` and `qemu-storage-daemon`; without them it says
//! SKIPPED.

use std::path::Path;
use std::process::Command;

use agent_protocol::{PhaseStatus, ReleasePlan};
use storage::{Gib, QemuNbd, StorageBackend, VolumeKey};

use crate::support::*;

fn missing() -> Option<String> {
    ["qemu-img", "qemu-storage-daemon"]
        .into_iter()
        .find_map(|tool| {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success());
            (!found).then(|| format!("{tool} is not installed"))
        })
}

/// Where the simulated host keeps a slot's disk.
fn disk(host: &Path, namespace: &str) -> std::path::PathBuf {
    host.join("sim/nvme").join(format!("{namespace}.raw"))
}

fn holds(path: &Path, what: &[u8]) -> bool {
    let bytes = std::fs::read(path).unwrap();
    bytes.windows(what.len()).any(|w| w == what)
}

#[test]
fn a_stop_saves_the_boot_disk_before_the_wipe_and_a_start_elsewhere_boots_it() {
    if let Some(why) = missing() {
        println!("SKIPPED: {why}");
        return;
    }
    let dir = tempdir("stop-start");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let backend = QemuNbd::new(
        dir.join("storage"),
        format!("127.0.0.1:{port}").parse().unwrap(),
        None,
    );
    let root = VolumeKey::of(uuid::Uuid::new_v4());
    backend.create(&root, Gib::new(1).unwrap()).unwrap();
    let target = backend.export(&root).unwrap();

    // Host A runs the instance, whose guest wrote to its boot disk.
    let (a_dir, b_dir) = (dir.join("host-a"), dir.join("host-b"));
    let host_a = simulated_agent(&a_dir, "pcie-l40s-4x");
    let slots = approved("pcie-l40s-4x", "overwrite-verify");
    let first = "eeeeeeee-0000-4000-8000-000000000001";
    host_a
        .provision(
            "t1",
            &plan(first, slots[..1].to_vec()),
            false,
            &slots,
            &mut |_| {},
        )
        .unwrap();
    let boot = disk(&a_dir, &slots[0].nvme_namespace);
    let secret = b"CHECKPOINT-EPOCH-41";
    let mut bytes = std::fs::read(&boot).unwrap();
    bytes[8192..8192 + secret.len()].copy_from_slice(secret);
    // And at the end of the slot's disk (the simulated image may be larger than the disk).
    let end = (1 << 20) - secret.len();
    bytes[end..end + secret.len()].copy_from_slice(secret);
    std::fs::write(&boot, bytes).unwrap();

    // The stop: the copy is a phase of its own, after the VM is gone and before the wipe.
    let stop = ReleasePlan {
        allocation_id: first.into(),
        slots: slots[..1].to_vec(),
        save_root: Some(target.clone()),
    };
    let mut phases = Vec::new();
    host_a
        .release("t2", &stop, false, &slots, &mut |r| {
            if r.status == PhaseStatus::Started {
                phases.push(r.phase)
            }
        })
        .unwrap();
    let at = |p: &str| phases.iter().position(|x| x == p).unwrap();
    assert!(
        at("destroy_domain") < at("save_root_disk") && at("save_root_disk") < at("wipe_nvme"),
        "{phases:?}"
    );
    assert!(
        !holds(&boot, secret),
        "host A's disk is wiped after the copy"
    );

    // The release again (its task handed over twice): the disk is zeros now, and nothing is
    // copied over the saved one.
    host_a
        .release("t2", &stop, false, &slots, &mut |_| {})
        .unwrap();

    // Host B starts it: its slot's disk is the saved one, not the image.
    let host_b = simulated_agent(&b_dir, "pcie-l40s-4x");
    let second = "eeeeeeee-0000-4000-8000-000000000002";
    let mut start = plan(second, slots[1..2].to_vec());
    start.restore_from = Some(target.clone());
    host_b
        .provision("t3", &start, false, &slots, &mut |_| {})
        .unwrap();
    let restored = disk(&b_dir, &slots[1].nvme_namespace);
    let back = std::fs::read(&restored).unwrap();

    assert_eq!(&back[8192..8192 + secret.len()], secret);
    assert_eq!(back.len(), 1 << 20, "the slot's disk keeps its size");
    assert_eq!(&back[back.len() - secret.len()..], secret);

    // A target a plan can't name safely is refused before any command runs.
    let mut bad = target.clone();
    if let agent_protocol::VolumeTarget::Nbd { export, .. } = &mut bad {
        *export = "vol\",\"driver\":\"file".into();
    }
    let e = node_agent::image::save_root(&restored, &bad).unwrap_err();
    assert!(e.contains("export"), "{e}");
    backend.stop_daemon().unwrap();
}
