//! Discovery on every host fixture: the exact slots proposed, and what the reader warns about.
//! Each fixture's full answer is kept in `expected-discovery.json` beside it (rewrite with
//! `UPDATE_FIXTURES=1` and review the diff); the assertions below spell out what matters.

use std::path::{Path, PathBuf};

use agent_protocol::Discovery;
use node_agent::driver::{Driver, SimulatedDriver};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

fn discover(name: &str) -> Discovery {
    let mut driver = SimulatedDriver::new(fixture(name), &std::env::temp_dir());
    driver.phase_time = std::time::Duration::ZERO;
    let mut phases = Vec::new();
    let d = driver
        .topology_discover(&mut |p| phases.push((p.phase, p.status)))
        .expect("fixture reads");
    assert_eq!(phases.len(), 4, "two phases, each started and finished");
    let golden = fixture(name).join("expected-discovery.json");
    let json = serde_json::to_string_pretty(&d).unwrap() + "\n";
    if std::env::var_os("UPDATE_FIXTURES").is_some() {
        std::fs::write(&golden, &json).unwrap();
    }
    let expected = std::fs::read_to_string(&golden)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_FIXTURES=1)", golden.display()));
    assert_eq!(
        json,
        expected,
        "{name}: discovery differs from {}",
        golden.display()
    );
    assert!(
        d.approval_required,
        "discovery never creates schedulable slots"
    );
    d
}

/// (gpu, numa, nvme, vf, cpus, memory MiB) of one slot.
type Row = (
    String,
    Option<u32>,
    Option<String>,
    Option<String>,
    String,
    u64,
);

fn summary(d: &Discovery) -> Vec<Row> {
    d.proposed_slots
        .iter()
        .map(|s| {
            (
                s.gpu.pci_address.clone(),
                s.numa_node,
                s.nvme.as_ref().map(|n| n.pci_address.clone()),
                s.ib_vf_pci_address.clone(),
                s.cpu_set.clone(),
                s.memory_mib,
            )
        })
        .collect()
}

fn row(gpu: &str, numa: u32, nvme: &str, vf: Option<&str>, cpus: &str, mib: u64) -> Row {
    (
        gpu.into(),
        Some(numa),
        Some(nvme.into()),
        vf.map(String::from),
        cpus.into(),
        mib,
    )
}

#[test]
fn hgx_h100_proposes_eight_numa_local_slots_and_reads_the_fabric() {
    let d = discover("hgx-h100-8x");
    assert_eq!(d.host.hostname, "gpu-hgx-01");
    assert_eq!(d.host.numa_nodes.len(), 2);
    assert_eq!(d.host.gpus.len(), 8);
    assert!(
        d.host
            .gpus
            .iter()
            .all(|g| g.model == "NVIDIA H100 80GB HBM3" && g.uuid.is_some())
    );
    assert_eq!(
        d.host.nvswitches,
        [
            "0000:05:00.0",
            "0000:06:00.0",
            "0000:07:00.0",
            "0000:08:00.0"
        ]
    );
    assert_eq!(d.host.nvme.len(), 8);
    assert_eq!(d.host.nvme[0].namespaces[0].size_bytes, 7_501_476_528 * 512);
    assert_eq!(
        d.host
            .infiniband
            .iter()
            .filter(|i| i.physfn.is_some())
            .count(),
        8
    );
    // Partitions of 8, 4+4, pairs and singles, resolved to PCI addresses.
    let sizes: Vec<usize> = d
        .host
        .fabric_partitions
        .iter()
        .map(|p| p.gpus.len())
        .collect();
    assert_eq!(sizes, [8, 4, 4, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1]);
    assert_eq!(
        d.host.fabric_partitions[3].gpus,
        ["0000:18:00.0", "0000:3a:00.0"]
    );
    assert!(d.host.fabric_partitions[7].active);
    assert_eq!(
        summary(&d),
        vec![
            row(
                "0000:18:00.0",
                0,
                "0000:1c:00.0",
                Some("0000:1a:00.1"),
                "2-24",
                254976
            ),
            row(
                "0000:2a:00.0",
                0,
                "0000:2e:00.0",
                Some("0000:2c:00.1"),
                "25-47",
                254976
            ),
            row(
                "0000:3a:00.0",
                0,
                "0000:3e:00.0",
                Some("0000:3c:00.1"),
                "96-118",
                254976
            ),
            row(
                "0000:5d:00.0",
                0,
                "0000:61:00.0",
                Some("0000:5f:00.1"),
                "119-141",
                254976
            ),
            row(
                "0000:9a:00.0",
                1,
                "0000:9e:00.0",
                Some("0000:9c:00.1"),
                "50-72",
                254976
            ),
            row(
                "0000:ab:00.0",
                1,
                "0000:af:00.0",
                Some("0000:ad:00.1"),
                "73-95",
                254976
            ),
            row(
                "0000:ba:00.0",
                1,
                "0000:be:00.0",
                Some("0000:bc:00.1"),
                "144-166",
                254976
            ),
            row(
                "0000:db:00.0",
                1,
                "0000:df:00.0",
                Some("0000:dd:00.1"),
                "167-189",
                254976
            ),
        ]
    );
    let meta = &d.proposed_slots[0].capacity_metadata;
    assert_eq!(meta["storage_ownership"], "slice");
    assert_eq!(meta["fabric_claim_mode"], "per_slot_vf");
    assert_eq!(meta["fabric_vf_pci_address"], "0000:1a:00.1");
    assert!(
        !meta.contains_key("destructive_wipe_policy"),
        "the wipe policy is the operator's choice, not the agent's"
    );
    assert_eq!(
        d.wipe_methods,
        [
            "nvme-format-crypto",
            "nvme-format",
            "nvme-sanitize-block",
            "overwrite-verify"
        ]
    );
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn pcie_l40s_host_has_no_fabric_and_two_slots_per_socket() {
    let d = discover("pcie-l40s-4x");
    assert!(d.host.nvswitches.is_empty());
    assert!(d.host.fabric_partitions.is_empty());
    assert_eq!(
        summary(&d),
        vec![
            row(
                "0000:4a:00.0",
                0,
                "0000:01:00.0",
                Some("0000:17:00.2"),
                "2-31,64",
                252928
            ),
            row(
                "0000:61:00.0",
                0,
                "0000:02:00.0",
                Some("0000:17:00.3"),
                "65-95",
                252928
            ),
            row(
                "0000:ca:00.0",
                1,
                "0000:81:00.0",
                Some("0000:97:00.2"),
                "34-63,96",
                252928
            ),
            row(
                "0000:e1:00.0",
                1,
                "0000:82:00.0",
                Some("0000:97:00.3"),
                "97-127",
                252928
            ),
        ]
    );
    assert!(
        d.proposed_slots
            .iter()
            .all(|s| s.gpu.model == "NVIDIA L40S")
    );
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn a_missing_ib_vf_leaves_that_slot_without_a_fabric_address() {
    let d = discover("l40s-missing-ib-vf");
    assert_eq!(d.proposed_slots.len(), 4);
    let last = &d.proposed_slots[3];
    assert_eq!(last.gpu.pci_address, "0000:e1:00.0");
    assert_eq!(last.ib_vf_pci_address, None);
    assert_eq!(last.capacity_metadata["fabric_vf_pci_address"], "");
    assert_eq!(
        d.warnings,
        ["GPU 0000:e1:00.0 has no free InfiniBand virtual function"]
    );
}

#[test]
fn a_shared_iommu_group_is_reported_as_read() {
    let d = discover("l40s-shared-iommu");
    let gpu = d
        .host
        .gpus
        .iter()
        .find(|g| g.pci_address == "0000:61:00.0")
        .unwrap();
    let peers: Vec<&str> = d
        .host
        .pci_devices
        .iter()
        .filter(|p| p.iommu_group == gpu.iommu_group)
        .map(|p| p.address.as_str())
        .collect();
    assert_eq!(peers, ["0000:61:00.0", "0000:62:00.0"]);
    // The reader proposes; the control plane's validation refuses (control-plane tests).
    assert_eq!(d.proposed_slots.len(), 4);
}

#[test]
fn a_missing_sysfs_root_is_an_error_that_names_the_path() {
    let driver = SimulatedDriver::new(PathBuf::from("/nonexistent/host"), &std::env::temp_dir());
    let err = driver.topology_discover(&mut |_| {}).unwrap_err();
    assert_eq!(
        err,
        "reading /nonexistent/host/proc/sys/kernel/hostname: No such file or directory (os error 2)"
    );
}

/// A real capture (`fixtures/capture.sh` on a lent GPU machine, 2026-11-27): an H200 passed
/// through to a Firecracker VM, driver 580.159.04. What such a guest shows a host agent: the
/// GPU bound to `nvidia`, no IOMMU (so no VFIO for a guest of its own), NUMA affinity -1, no
/// NVMe or InfiniBand. Discovery reads it and names every reason it can't be sold; the
/// control plane's validation refuses the slot (control-plane tests).
#[test]
fn a_real_h200_vm_guest_is_read_and_every_gap_is_named() {
    let d = discover("h200-vm-guest");
    assert_eq!(d.host.hostname, "device-h200");
    assert_eq!(d.host.pci_devices.len(), 7);
    let gpu = &d.host.gpus[..];
    assert_eq!(gpu.len(), 1);
    assert_eq!(gpu[0].pci_address, "0000:00:06.0");
    assert_eq!(gpu[0].model, "NVIDIA H200", "nvidia-smi's name");
    assert_eq!(
        gpu[0].uuid.as_deref(),
        Some("GPU-dbece784-0e04-dbd7-4404-08010393a1aa")
    );
    assert_eq!((gpu[0].numa_node, gpu[0].iommu_group), (None, None));
    let pci = d
        .host
        .pci_devices
        .iter()
        .find(|p| p.address == "0000:00:06.0")
        .unwrap();
    assert_eq!(
        (pci.device_id.as_str(), pci.driver.as_deref()),
        ("0x2335", Some("nvidia"))
    );
    assert!(d.host.nvme.is_empty() && d.host.infiniband.is_empty());
    // One NUMA node, so the GPU's -1 means node 0: the slot gets node 0's CPUs after the
    // host's two. The node's memory (5,979 MiB at capture; the VM's is hot-plugged later) is
    // under the host's reserve, which is said rather than silently proposing nothing.
    assert_eq!(
        summary(&d),
        [(
            "0000:00:06.0".to_string(),
            Some(0),
            None,
            None,
            "2-15".to_string(),
            0
        )]
    );
    assert_eq!(
        d.warnings,
        [
            "GPU 0000:00:06.0 has no IOMMU group, so it can't be passed through to a VM: enable the IOMMU (intel_iommu=on or amd_iommu=on) and VT-d/AMD-Vi in the firmware",
            "GPU 0000:00:06.0 has no free NVMe controller",
            "GPU 0000:00:06.0 has no free InfiniBand virtual function",
            "GPU 0000:00:06.0: NUMA node 0 has no memory left after the host's 8192 MiB reserve",
        ]
    );
    let health = node_agent::discover::host_health(&fixture("h200-vm-guest"));
    assert_eq!(health.status, agent_protocol::HealthStatus::Degraded);
    assert!(
        health.detail.unwrap().starts_with("no IOMMU groups under"),
        "the heartbeat says why this host can't run slots"
    );
}
