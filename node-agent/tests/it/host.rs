//! The host side of provisioning with real tools: domain XML checked by libvirt's own schema
//! (`virt-xml-validate`), the whole libvirt driver lifecycle against libvirt's `test:///default`
//! hypervisor, `qemu-img` on a generated image, and the plans an agent must refuse.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use agent_protocol::{PlannedSlot, ReleasePlan, identity};
use node_agent::agent::{Agent, Stop};
use node_agent::domain::{DomainSpec, domain_name, render};
use node_agent::driver::{DomainState, Driver, GuestReady, LibvirtDriver};
use node_agent::tools::HostTools;

use crate::support;
use support::*;

fn validate(xml: &str, dir: &Path, name: &str) {
    let path = dir.join(format!("{name}.xml"));
    std::fs::write(&path, xml).unwrap();
    let out = Command::new("virt-xml-validate")
        .arg(&path)
        .arg("domain")
        .output()
        .expect("virt-xml-validate (libvirt-clients, libxml2-utils) is installed");
    assert!(
        out.status.success(),
        "{name}: {}\n{}\n{xml}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn domain_xml_validates_against_libvirts_schema_for_every_slot_and_size() {
    let dir = tempdir("xml");
    let alloc = "11111111-2222-4333-8444-555555555555";
    for name in ["hgx-h100-8x", "pcie-l40s-4x"] {
        let slots = approved(name, "overwrite-verify");
        assert!(slots.len() >= 4, "{name}");
        let mut plans: Vec<Vec<PlannedSlot>> = slots.iter().map(|s| vec![s.clone()]).collect();
        for size in [2, 4, 8] {
            if slots.len() >= size {
                plans.push(slots[..size].to_vec());
            }
        }
        let private = agent_protocol::PrivateNic {
            vni: 4096,
            address: agent_protocol::identity::private_address(11),
            mac: agent_protocol::identity::private_mac(11),
        };
        for (i, plan) in plans.iter().enumerate() {
            let disks: Vec<PathBuf> = plan
                .iter()
                .map(|s| PathBuf::from("/dev").join(&s.nvme_namespace))
                .collect();
            let xml = render(&DomainSpec {
                allocation_id: alloc,
                slots: plan,
                disks: &disks,
                seed_iso: Path::new("/var/lib/gpu-node-agent/allocations/a/seed.iso"),
                private: (i % 2 == 0).then_some(&private),
            })
            .unwrap();
            validate(&xml, &dir, &format!("{name}-{i}"));
            assert_eq!(
                xml.contains("<source bridge='gpb4096'/>"),
                i % 2 == 0,
                "the private NIC is on its segment's bridge, when the plan has one"
            );
            // What the XML must say, beyond being valid.
            let cpus: usize = plan
                .iter()
                .map(|s| {
                    agent_protocol::ranges::parse_ranges(&s.cpu_set)
                        .unwrap()
                        .len()
                })
                .sum();
            assert!(xml.contains(&format!("<vcpu placement='static'>{cpus}</vcpu>")));
            assert_eq!(xml.matches("<vcpupin ").count(), cpus);
            assert_eq!(xml.matches("<hostdev ").count(), 2 * plan.len());
            assert!(xml.contains("<hugepages/>"));
            assert!(xml.contains(&format!("<mac address='{}'/>", plan[0].mac_address)));
            let memory: u64 = plan.iter().map(|s| s.memory_mib).sum();
            assert!(xml.contains(&format!("<memory unit='MiB'>{memory}</memory>")));
            let mut numa: Vec<String> = plan.iter().map(|s| s.numa_node.to_string()).collect();
            numa.dedup();
            assert!(
                xml.contains(&format!(
                    "<memory mode='strict' nodeset='{}'/>",
                    numa.join(",")
                )),
                "{xml}"
            );
            assert!(xml.contains(&format!("<source dev='/dev/{}'/>", plan[0].nvme_namespace)));
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Finding 3 of the security review: `qemu-img` guessed the format from the content, so a
/// "raw" image that was really a qcow2 naming a backing file read a file of the host's.
#[test]
fn an_image_never_reads_another_file_of_the_host() {
    let dir = tempdir("qemu-backing");
    let secret = dir.join("host-secret.raw");
    let mut bytes = vec![0u8; 1 << 16];
    bytes[..14].copy_from_slice(b"HOST-SECRET-42");
    std::fs::write(&secret, &bytes).unwrap();
    let sneaky = dir.join("sneaky.qcow2");
    node_agent::image::run(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-F",
            "raw",
            "-b",
            secret.to_str().unwrap(),
            sneaky.to_str().unwrap(),
        ],
    )
    .unwrap();
    let disk = dir.join("disk.raw");
    let e = node_agent::image::write_image(&sneaky, &disk, None).unwrap_err();
    assert!(e.contains("refers to another file"), "{e}");
    assert!(!disk.exists(), "nothing written");

    // The same bytes published as a raw image are read as raw: the guest gets the qcow2's own
    // bytes, never the backing file's.
    let disguised = dir.join("disguised.raw");
    std::fs::copy(&sneaky, &disguised).unwrap();
    node_agent::image::write_image(&disguised, &disk, None).unwrap();
    let written = std::fs::read(&disk).unwrap();
    assert_eq!(&written[..4], b"QFI\xfb", "copied as bytes");
    assert!(
        !written.windows(14).any(|w| w == b"HOST-SECRET-42"),
        "the backing file was read"
    );
    // And an extension that names no format is refused before qemu-img runs.
    let vmdk = secret.with_extension("vmdk");
    std::fs::copy(&sneaky, &vmdk).unwrap();
    let e = node_agent::image::write_image(&vmdk, &disk, None).unwrap_err();
    assert!(e.contains("an image is a .qcow2, .raw or .img file"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn qemu_img_writes_a_generated_image_raw_and_grows_it() {
    let dir = tempdir("qemu");
    // A raw image with recognisable bytes, converted to qcow2 (what sites ship).
    let raw = dir.join("src.raw");
    let mut bytes = vec![0u8; 1 << 20];
    bytes[..16].copy_from_slice(b"GPUAAS-TEST-IMG!");
    bytes[(1 << 20) - 4..].copy_from_slice(b"END!");
    std::fs::write(&raw, &bytes).unwrap();
    let qcow = dir.join("image.qcow2");
    node_agent::image::run(
        "qemu-img",
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "qcow2",
            raw.to_str().unwrap(),
            qcow.to_str().unwrap(),
        ],
    )
    .unwrap();
    assert_eq!(node_agent::image::virtual_size(&qcow).unwrap(), 1 << 20);
    let disk = dir.join("nvme0n1.raw");
    node_agent::image::write_image(&qcow, &disk, Some(8 << 20)).unwrap();
    let written = std::fs::read(&disk).unwrap();
    assert_eq!(written.len(), 8 << 20, "grown to the slot's size");
    assert_eq!(&written[..16], b"GPUAAS-TEST-IMG!");
    assert_eq!(&written[(1 << 20) - 4..1 << 20], b"END!");
    assert!(written[1 << 20..].iter().all(|&b| b == 0));
    // A missing image is named.
    let e = node_agent::image::write_image(&dir.join("nope.qcow2"), &disk, None).unwrap_err();
    assert!(e.contains("nope.qcow2 does not exist on this host"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

fn refused(r: Result<impl std::fmt::Debug, Stop>) -> String {
    match r {
        Err(Stop::Failed(e)) => e,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn plans_that_do_not_match_the_approved_slots_or_leases_are_refused() {
    let dir = tempdir("refuse");
    let agent = simulated_agent(&dir, "pcie-l40s-4x");
    let ok = approved("pcie-l40s-4x", "overwrite-verify");
    let approved_two = &ok[..2];
    let a1 = "aaaaaaaa-0000-4000-8000-000000000001";
    let mut quiet = |_| {};

    // A slot the node never approved.
    let e = refused(agent.provision(
        "t",
        &plan(a1, vec![ok[3].clone()]),
        false,
        approved_two,
        &mut quiet,
    ));
    assert_eq!(
        e,
        format!(
            "slot 3 ({}) is not an approved slot of this node; refusing the plan",
            ok[3].slot_id
        )
    );
    // The right slot id with the wrong hardware.
    let mut wrong = ok[0].clone();
    wrong.gpu_pci_address = ok[1].gpu_pci_address.clone();
    wrong.cpu_set = "0-3".into();
    let e = refused(agent.provision("t", &plan(a1, vec![wrong]), false, approved_two, &mut quiet));
    assert_eq!(
        e,
        "slot 0: the plan's GPU address, CPU set differ from the approved slot; refusing the plan"
    );
    // Another node's slot: its identity is another node's.
    let mut other = ok[0].clone();
    other.mac_address = identity::mac_address("another-node", 0);
    let mut approved_other = approved_two.to_vec();
    approved_other[0] = other.clone();
    let e = refused(agent.provision(
        "t",
        &plan(a1, vec![other.clone()]),
        false,
        &approved_other,
        &mut quiet,
    ));
    assert_eq!(
        e,
        format!(
            "slot 0: MAC {} / IP 10.100.0.10 is not this node's identity for the slot; refusing the plan",
            other.mac_address
        )
    );
    // A slot leased to another allocation.
    let p1 = plan(a1, vec![ok[0].clone()]);
    agent
        .provision("t1", &p1, false, approved_two, &mut quiet)
        .unwrap();
    let a2 = "aaaaaaaa-0000-4000-8000-000000000002";
    let e = refused(agent.provision(
        "t2",
        &plan(a2, vec![ok[0].clone()]),
        false,
        approved_two,
        &mut quiet,
    ));
    assert_eq!(
        e,
        format!("slot 0 is leased to allocation {a1} (phase running); refusing the plan")
    );
    // Nothing was touched by the refusals: one domain, one lease.
    assert_eq!(agent.driver.domains().unwrap(), [domain_name(a1)]);
    assert_eq!(agent.leases.all().unwrap().len(), 1);
    // An allocation id that is not one never becomes a path or a domain name.
    let e = refused(agent.provision(
        "t4",
        &plan("../../etc", vec![ok[1].clone()]),
        false,
        approved_two,
        &mut quiet,
    ));
    assert_eq!(e, "\"../../etc\" is not an allocation id");
    assert_eq!(agent.leases.all().unwrap().len(), 1);
    // A whole-node plan must name every approved slot.
    let e = refused(agent.provision(
        "t3",
        &plan(a2, vec![ok[1].clone()]),
        true,
        approved_two,
        &mut quiet,
    ));
    assert_eq!(
        e,
        "a whole-node plan must name every approved slot; slot 0 is missing"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_image_that_is_not_the_reviewed_file_is_never_written() {
    let dir = tempdir("checksum");
    let agent = simulated_agent(&dir, "pcie-l40s-4x");
    let ok = approved("pcie-l40s-4x", "overwrite-verify");
    let a = "cccccccc-0000-4000-8000-000000000001";
    let mut quiet = |_| {};
    let mut p = plan(a, vec![ok[0].clone()]);
    p.image.sha256 = Some("0".repeat(64));
    let e = refused(agent.provision("t1", &p, false, &ok[..1], &mut quiet));
    assert!(
        e.contains("not the one that was reviewed, so nothing was written"),
        "{e}"
    );
    let disk = agent.driver.slot_disk(&ok[0]).unwrap();
    assert!(
        !disk.exists() || std::fs::read(&disk).unwrap().iter().all(|&b| b == 0),
        "no image bytes on the slot's disk"
    );
    assert!(agent.driver.domains().unwrap().is_empty(), "no VM");

    // With the file's real checksum (as `sha256sum` prints it), the retried plan provisions.
    let source = agent.driver.image_path(&p.image).unwrap();
    let out = Command::new("sha256sum").arg(&source).output().unwrap();
    let sum = String::from_utf8(out.stdout).unwrap();
    p.image.sha256 = Some(sum.split_whitespace().next().unwrap().to_string());
    agent
        .provision("t2", &p, false, &ok[..1], &mut quiet)
        .unwrap();
    assert_eq!(agent.driver.domains().unwrap(), [domain_name(a)]);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_flashed_gpu_or_an_unknown_wipe_fails_the_release_and_keeps_the_lease() {
    let dir = tempdir("firmware");
    let agent = simulated_agent(&dir, "pcie-l40s-4x");
    let slots = approved("pcie-l40s-4x", "overwrite-verify");
    let a = "bbbbbbbb-0000-4000-8000-000000000001";
    let mut quiet = |_| {};
    agent
        .provision(
            "t1",
            &plan(a, vec![slots[1].clone()]),
            false,
            &slots,
            &mut quiet,
        )
        .unwrap();
    // The tenant flashed the GPU's firmware.
    let fw = dir.join("sim/gpu-firmware");
    std::fs::create_dir_all(&fw).unwrap();
    std::fs::write(
        fw.join(slots[1].gpu_pci_address.replace(':', "_")),
        "97.00.00.00.66",
    )
    .unwrap();
    let release = ReleasePlan {
        allocation_id: a.into(),
        slots: vec![slots[1].clone()],
        save_root: None,
    };
    let e = refused(agent.release("t2", &release, false, &slots, &mut quiet));
    assert_eq!(
        e,
        format!(
            "slot 1: GPU {} firmware is 97.00.00.00.66, expected 96.00.99.00.01; the slot stays blocked until an operator reflashes it",
            slots[1].gpu_pci_address
        )
    );
    // No proof, and the lease stays: the slot is not free on this host either.
    let lease = agent.leases.get(&slots[1].slot_id).unwrap().unwrap();
    assert_eq!(lease.phase, "check_firmware");
    // Without the baseline recorded before the tenant had the GPU, nothing vouches for it:
    // what the GPU reports now is not taken as the baseline.
    std::fs::remove_dir_all(dir.join("gpu-firmware")).unwrap();
    let e = refused(agent.release("t3", &release, false, &slots, &mut quiet));
    assert!(
        e.starts_with(&format!(
            "GPU {} has no recorded firmware baseline",
            slots[1].gpu_pci_address
        )),
        "{e}"
    );
    assert!(agent.leases.get(&slots[1].slot_id).unwrap().is_some());
    let _ = std::fs::remove_dir_all(dir);
}

/// The libvirt driver for real, against libvirt's own test hypervisor: define, start,
/// shutdown, destroy and undefine are libvirt's. NVMe namespaces are files (this machine has
/// none) and the GPUs' sysfs is a copy of the fixture with ROMs added.
#[test]
fn the_libvirt_driver_runs_a_whole_lifecycle_against_test_default() {
    let dir = tempdir("libvirt");
    let root = dir.join("root");
    assert!(
        Command::new("cp")
            .args([
                "-r",
                fixture("pcie-l40s-4x").to_str().unwrap(),
                root.to_str().unwrap()
            ])
            .status()
            .unwrap()
            .success()
    );
    let slots = approved("pcie-l40s-4x", "overwrite-verify");
    for s in &slots {
        let dev = root.join("sys/bus/pci/devices").join(&s.gpu_pci_address);
        std::fs::write(dev.join("rom"), vec![0x55u8; 4096]).unwrap();
    }
    // The image, in this host's image directory (under this test's directory).
    let image = dir.join("images/ubuntu.qcow2");
    node_agent::image::create_qcow2(&image, "4M").unwrap();
    let mut driver = LibvirtDriver::new(
        root.clone(),
        HostTools {
            fabric_partitions_cmd: None,
        },
        "test:///default",
    );
    driver.disk_dir = Some(dir.join("disks"));
    driver.file_disk_bytes = 8 << 20;
    driver.guest_ready = GuestReady::DomainRunning;
    driver.image_dir = dir.join("images");
    let driver = Arc::new(driver);
    let agent = Agent::new(
        NODE.into(),
        "gpn_test".into(),
        driver.clone(),
        dir.join("state"),
    );
    let a = "cccccccc-0000-4000-8000-000000000001";
    let mut p = plan(a, slots[..2].to_vec());
    p.image.source = "/var/lib/gpuaas/images/ubuntu.qcow2".into();
    let mut phases = Vec::new();
    let done = agent
        .provision("t1", &p, false, &slots, &mut |r| {
            phases.push((r.phase, r.status))
        })
        .unwrap();
    assert_eq!(done.ssh_host, "10.100.0.10");
    let name = domain_name(a);
    assert_eq!(
        driver.domain_state(&name).unwrap(),
        Some(DomainState::Running)
    );
    assert!(driver.domains().unwrap().contains(&name));
    let started: Vec<&str> = phases
        .iter()
        .filter(|(_, s)| *s == agent_protocol::PhaseStatus::Started)
        .map(|(p, _)| p.as_str())
        .collect();
    assert_eq!(started, PROVISION);
    // Leases record the allocation and that it runs; the seed is a real ISO.
    let leases = agent.leases.all().unwrap();
    assert_eq!(leases.len(), 2);
    assert!(
        leases
            .iter()
            .all(|l| l.allocation_id == a && l.phase == "running")
    );
    let iso = dir.join(format!("state/allocations/{a}/seed.iso"));
    let label =
        node_agent::image::run("xorriso", &["-indev", iso.to_str().unwrap(), "-pvd_info"]).unwrap();
    assert!(label.contains("cidata"), "{label}");
    // A second provision of the same allocation (a resumed task) starts no second VM.
    agent
        .provision("t1", &p, false, &slots, &mut |_| {})
        .unwrap();
    assert_eq!(
        driver
            .domains()
            .unwrap()
            .iter()
            .filter(|d| **d == name)
            .count(),
        1
    );

    // The tenant writes to both disks.
    let secret = b"TENANT-SECRET-DATA";
    for s in &slots[..2] {
        let path = dir.join(format!("disks/{}.raw", s.nvme_namespace));
        let mut bytes = std::fs::read(&path).unwrap();
        let end = bytes.len() - 4096;
        for at in [0, 4096 * 100, end] {
            bytes[at..at + secret.len()].copy_from_slice(secret);
        }
        std::fs::write(&path, bytes).unwrap();
    }
    let release = ReleasePlan {
        allocation_id: a.into(),
        slots: slots[..2].to_vec(),
        save_root: None,
    };
    let cleaned = agent
        .release("t2", &release, false, &slots, &mut |_| {})
        .unwrap();
    assert_eq!(
        driver.domain_state(&name).unwrap(),
        None,
        "destroyed and undefined"
    );
    assert!(agent.leases.all().unwrap().is_empty());
    assert_eq!(cleaned.len(), 2);
    for c in &cleaned {
        assert!(c.wipe_verified && c.gpu_reset && c.firmware_ok);
        assert_eq!(c.wipe_method, "overwrite-verify");
        assert_eq!(c.verified_samples, 64);
        assert!(
            c.gpu_firmware.starts_with("rom-sha256:"),
            "{}",
            c.gpu_firmware
        );
    }
    // Nothing the tenant wrote is left anywhere on either disk.
    for s in &slots[..2] {
        let disk = std::fs::read(dir.join(format!("disks/{}.raw", s.nvme_namespace))).unwrap();
        assert_eq!(disk.len(), 8 << 20);
        assert!(
            !disk.windows(secret.len()).any(|w| w == secret),
            "{}",
            s.nvme_namespace
        );
    }
    // A controller wipe on a file-backed namespace is refused by name.
    let e = driver
        .controller_wipe(
            "nvme-format-crypto",
            &slots[0],
            std::time::Duration::from_secs(1),
        )
        .unwrap_err();
    assert!(e.contains("needs an NVMe controller"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

/// NVLink and InfiniBand partitions on the HGX fixture: a 2-GPU slice's partition is checked
/// against the plan's GPUs, activated before the VM starts (single-GPU partitions left active
/// inside it are deactivated first), an overlapping one is refused while it is active, and the
/// release deactivates it and takes the VFs out of the tenant's IB partition before the wipe.
#[test]
fn fabric_partitions_follow_the_allocation_from_plan_to_release() {
    use agent_protocol::{Discovery, FabricPlan};
    use node_agent::fabric::{NvlinkFabric, SimulatedIb, SimulatedNvlink, port_guid};
    let dir = tempdir("fabric");
    let mut agent = simulated_agent(&dir, "hgx-h100-8x");
    let d: Discovery = serde_json::from_str(
        &std::fs::read_to_string(fixture("hgx-h100-8x").join("expected-discovery.json")).unwrap(),
    )
    .unwrap();
    let nvlink = Arc::new(SimulatedNvlink::new(&dir, d.host.fabric_partitions.clone()));
    agent.nvlink = nvlink.clone();
    let all = approved("hgx-h100-8x", "overwrite-verify");
    let pair = d
        .host
        .fabric_partitions
        .iter()
        .find(|p| p.gpus.len() == 2)
        .unwrap()
        .clone();
    let slots: Vec<PlannedSlot> = all
        .iter()
        .filter(|s| pair.gpus.contains(&s.gpu_pci_address))
        .cloned()
        .collect();
    assert_eq!(slots.len(), 2);
    let a = "00000000-0000-4000-a000-00000000f001";
    let mut p = plan(a, slots.clone());

    // A partition that is not exactly the plan's GPUs is refused before anything happens.
    let eight = d
        .host
        .fabric_partitions
        .iter()
        .find(|p| p.gpus.len() == 8)
        .unwrap();
    p.fabric = FabricPlan {
        ib_pkey: Some(0x0002),
        nvlink_partition: Some(eight.id),
    };
    let e = refused(agent.provision("t1", &p, false, &all, &mut |_| {}));
    assert!(e.contains("not the plan's"), "{e}");
    p.fabric.ib_pkey = Some(0x7fff);
    p.fabric.nvlink_partition = Some(pair.id);
    let e = refused(agent.provision("t1", &p, false, &all, &mut |_| {}));
    assert!(e.contains("not a tenant partition key"), "{e}");
    assert!(
        agent.leases.all().unwrap().is_empty(),
        "refused before any lease"
    );

    // A single-GPU partition left active on one of the pair's GPUs.
    let single = d
        .host
        .fabric_partitions
        .iter()
        .find(|p| p.gpus.len() == 1 && p.gpus[0] == pair.gpus[0])
        .unwrap();
    nvlink.activate(single.id).unwrap();
    p.fabric.ib_pkey = Some(0x0002);
    agent.provision("t1", &p, false, &all, &mut |_| {}).unwrap();
    assert_eq!(
        nvlink.active().unwrap(),
        std::collections::BTreeSet::from([pair.id])
    );
    let e = nvlink.activate(eight.id).unwrap_err();
    assert!(e.contains("overlaps active partition"), "{e}");
    let ib = SimulatedIb::new(&dir).membership().unwrap();
    assert_eq!(
        ib.get(&0x0002).cloned().unwrap_or_default(),
        slots
            .iter()
            .map(|s| port_guid(NODE, s.slot_index))
            .collect(),
        "both VFs are full members of the tenant's partition"
    );

    agent
        .release(
            "t2",
            &ReleasePlan {
                allocation_id: a.into(),
                slots: slots.clone(),
                save_root: None,
            },
            false,
            &all,
            &mut |_| {},
        )
        .unwrap();
    assert!(
        nvlink.active().unwrap().is_empty(),
        "deactivated at release"
    );
    assert!(SimulatedIb::new(&dir).membership().unwrap().is_empty());
    let _ = std::fs::remove_dir_all(dir);
}

/// The seed's user-data merged by cloud-init's own code (Debian's `cloud-init`: its
/// `UserDataProcessor` reads the multipart, its `CloudConfigPartHandler` merges each
/// cloud-config part with the part's merge rules), as a guest would at first boot. `None`,
/// with SKIPPED, where cloud-init's Python modules are not installed.
fn merged_by_cloud_init(user_data: &str, dir: &Path) -> Option<serde_json::Value> {
    let script = r#"
import json, sys
from cloudinit import handlers, helpers, user_data
from cloudinit.handlers.cloud_config import CloudConfigPartHandler
paths = helpers.Paths({"cloud_dir": sys.argv[1]})
message = user_data.UserDataProcessor(paths).process(sys.stdin.read())
handler = CloudConfigPartHandler(paths)
handler.handle_part(None, handlers.CONTENT_START, None, None, None, None)
for part in message.walk():
    if part.is_multipart() or part.get_content_type() != "text/cloud-config":
        continue
    handler.handle_part(None, part.get_content_type(), part.get_filename() or "",
                        part.get_payload(decode=True).decode(), 0, dict(part))
print(json.dumps(handler.cloud_buf))
"#;
    let python = "/usr/bin/python3";
    let has_cloud_init = Command::new(python)
        .args(["-c", "import cloudinit"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_cloud_init {
        eprintln!(
            "SKIPPED: cloud-init's merge not run: {python} has no cloudinit module (apt-get install cloud-init)"
        );
        return None;
    }
    let mut child = Command::new(python)
        .args(["-c", script, dir.to_str().unwrap()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(user_data.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

/// A tenant's cloud-config adds to the platform's part and never replaces it: the user and its
/// keys, password logins off, and the telemetry file stay as the platform wrote them. Only a
/// document naming its own merge rules could undo that, and cloud-init obeys such a document
/// over the part's header: which is why the control plane refuses `merge_how` and
/// `merge_type` in user data. The seed, carrying the tenant's data, is the agent's alone.
#[test]
fn a_tenants_cloud_config_never_replaces_the_platforms_part() {
    let dir = tempdir("cloud-init-merge");
    let slots = approved("hgx-h100-8x", "nvme-format-crypto");
    let mut plan = plan("alloc-merge", slots[..1].to_vec());
    let user = |merged: &serde_json::Value| merged["users"][0].clone();
    let tenant = "#cloud-config\nssh_pwauth: true\nusers: [{name: mallory}]\npackages: [htop]\n";
    plan.user_data = Some(tenant.into());
    let [(_, user_data), ..] = node_agent::image::seed_files(&plan, "tok", 9400);
    let Some(merged) = merged_by_cloud_init(&user_data, &dir) else {
        return;
    };
    assert_eq!(user(&merged)["name"], "ubuntu");
    assert_eq!(
        user(&merged)["ssh_authorized_keys"][0],
        plan.ssh_public_key.trim()
    );
    assert_eq!(merged["ssh_pwauth"], false);
    assert_eq!(merged["users"][1]["name"], "mallory", "lists are appended");
    assert_eq!(merged["packages"], serde_json::json!(["htop"]));
    assert_eq!(
        merged["write_files"][0]["path"],
        "/etc/gpuaas/telemetry.json"
    );

    // What the refusal prevents: the same document with its own merge rules wins.
    plan.user_data = Some(format!(
        "#cloud-config\nmerge_how: dict(replace)+list(replace)\n{}",
        &tenant["#cloud-config\n".len()..]
    ));
    let [(_, user_data), ..] = node_agent::image::seed_files(&plan, "tok", 9400);
    let merged = merged_by_cloud_init(&user_data, &dir).unwrap();
    assert_eq!(user(&merged)["name"], "mallory");
    assert_eq!(merged["ssh_pwauth"], true);

    // The seed's files and the image built from them are readable by the agent alone.
    let iso = dir.join("seed.iso");
    node_agent::image::build_seed(&plan, "tok", 9400, &dir.join("seed"), &iso).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for path in [
        iso.clone(),
        dir.join("seed/user-data"),
        dir.join("seed/meta-data"),
    ] {
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", path.display());
    }
}

/// A running VM's volumes follow the plan: each is a network disk libvirt's schema accepts,
/// plugged in once however often the plan comes, unplugged when the plan drops it, and a
/// plan with a target that could break out of the disk definition is refused before anything
/// changes.
#[test]
fn volumes_plug_in_and_out_of_a_running_vm_as_the_plan_says() {
    use agent_protocol::{VolumeDisk, VolumeTarget, VolumesPlan};
    let dir = tempdir("volumes");
    let agent = simulated_agent(&dir, "hgx-h100-8x");
    let slots = approved("hgx-h100-8x", "overwrite-verify");
    let a = "00000000-0000-4000-a000-00000000b001";
    let mut p = plan(a, slots[..1].to_vec());
    p.image.source = "/var/lib/gpuaas/images/ubuntu-24.04-cuda-12.6.qcow2".into();
    agent
        .provision("t1", &p, false, &slots, &mut |_| {})
        .unwrap();
    let nbd = VolumeDisk {
        volume_id: "0a0e0000-0000-4000-8000-0000000000a1".into(),
        serial: "0a0e0000000040008000".into(),
        target: VolumeTarget::Nbd {
            host: "10.20.0.5".into(),
            port: 10809,
            export: "vol-0a0e0000000040008000000000000a1".into(),
        },
    };
    let rbd = VolumeDisk {
        volume_id: "0a0e0000-0000-4000-8000-0000000000a2".into(),
        serial: "0a0e0000000040008001".into(),
        target: VolumeTarget::Rbd {
            pool: "volumes".into(),
            image: "vol-0a0e0000000040008000000000000a2".into(),
            monitors: vec!["10.20.0.11:6789".into(), "10.20.0.12:6789".into()],
            user: "gpu-host".into(),
        },
    };
    let update = |volumes: Vec<VolumeDisk>| VolumesPlan {
        allocation_id: a.into(),
        slots: slots[..1].to_vec(),
        volumes,
    };
    let name = domain_name(a);
    let domains = dir.join("sim/domains");
    let plugged = |dev: &str| domains.join(format!("{name}.dev-{dev}"));

    let attached = agent
        .update_volumes(&update(vec![nbd.clone(), rbd.clone()]), &slots, &mut |_| {})
        .unwrap();
    assert_eq!(attached, [nbd.volume_id.clone(), rbd.volume_id.clone()]);
    let vdq = std::fs::read_to_string(plugged("vdq")).unwrap();
    let vdr = std::fs::read_to_string(plugged("vdr")).unwrap();
    assert!(vdq.contains("<source protocol='nbd' name='vol-0a0e0000000040008000000000000a1'>"));
    assert!(vdr.contains("<secret type='ceph' usage='client.gpu-host secret'/>"));
    assert!(vdr.contains("<host name='10.20.0.12' port='6789'/>"));
    // Each, plugged into the domain, is what libvirt's schema accepts.
    let domain = std::fs::read_to_string(domains.join(format!("{name}.xml"))).unwrap();
    let with_volumes = domain.replace("</devices>", &format!("{vdq}{vdr}</devices>"));
    validate(&with_volumes, &dir, "with-volumes");

    // The same plan again (a retried task) changes nothing.
    agent
        .update_volumes(&update(vec![nbd.clone(), rbd.clone()]), &slots, &mut |_| {})
        .unwrap();
    assert_eq!(std::fs::read_to_string(plugged("vdq")).unwrap(), vdq);

    // Dropped from the plan: unplugged; the other keeps its device.
    let attached = agent
        .update_volumes(&update(vec![rbd.clone()]), &slots, &mut |_| {})
        .unwrap();
    assert_eq!(attached, std::slice::from_ref(&rbd.volume_id));
    assert!(!plugged("vdq").exists());
    assert_eq!(std::fs::read_to_string(plugged("vdr")).unwrap(), vdr);

    // A target that would write its own XML is refused, and nothing changes.
    let mut evil = nbd.clone();
    evil.target = VolumeTarget::Nbd {
        host: "10.20.0.5'/><source file='/etc/shadow".into(),
        port: 10809,
        export: "vol-x".into(),
    };
    let refusal = agent
        .update_volumes(&update(vec![evil, rbd.clone()]), &slots, &mut |_| {})
        .unwrap_err();
    assert!(
        format!("{refusal:?}").contains("characters a disk definition can't take"),
        "{refusal:?}"
    );
    assert!(!plugged("vdq").exists());
    assert!(plugged("vdr").exists());

    // A plan for an allocation this host doesn't run is refused.
    let other = VolumesPlan {
        allocation_id: "00000000-0000-4000-a000-00000000b002".into(),
        ..update(vec![nbd])
    };
    assert!(agent.update_volumes(&other, &slots, &mut |_| {}).is_err());
    let _ = std::fs::remove_dir_all(dir);
}
