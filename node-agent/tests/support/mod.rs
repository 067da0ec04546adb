//! What the agent's host tests share: the fixtures, a scratch directory, the fixture's slots
//! as the control plane approves them, a plan, and an agent on a simulated host.
#![allow(dead_code)]

pub mod cluster;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_protocol::{Discovery, ImageRef, PlannedSlot, ProvisionPlan, identity};
use node_agent::agent::Agent;
use node_agent::driver::SimulatedDriver;

/// The phases of a provision and of a release, in the order the agent runs them.
pub const PROVISION: [&str; 10] = [
    "validate_plan",
    "take_leases",
    "write_image",
    "cloud_init",
    "define_domain",
    "connect_network",
    "join_ib_partition",
    "activate_nvlink",
    "start_vm",
    "wait_ssh",
];
pub const RELEASE: [&str; 11] = [
    "validate_plan",
    "disconnect_network",
    "stop_vm",
    "destroy_domain",
    "leave_ib_partition",
    "deactivate_nvlink",
    "wipe_nvme",
    "verify_wipe",
    "reset_gpu",
    "check_firmware",
    "release_leases",
];

pub const NODE: &str = "6f1c2d3e-0000-4000-8000-00000000abcd";

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

pub fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("agent-host-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The fixture's proposed slots, approved as the control plane would name them in plans.
pub fn approved(name: &str, wipe: &str) -> Vec<PlannedSlot> {
    let d: Discovery = serde_json::from_str(
        &std::fs::read_to_string(fixture(name).join("expected-discovery.json")).unwrap(),
    )
    .unwrap();
    d.proposed_slots
        .iter()
        .filter(|s| s.nvme.is_some() && s.ib_vf_pci_address.is_some())
        .map(|s| {
            let nvme = s.nvme.clone().unwrap();
            PlannedSlot {
                slot_id: format!("00000000-0000-4000-8000-{:012}", s.slot_index),
                slot_index: s.slot_index,
                gpu_pci_address: s.gpu.pci_address.clone(),
                nvme_pci_address: nvme.pci_address,
                nvme_serial: nvme.serial,
                nvme_namespace: nvme.namespace,
                ib_vf_pci_address: s.ib_vf_pci_address.clone().unwrap(),
                cpu_set: s.cpu_set.clone(),
                numa_node: s.numa_node.unwrap_or(0),
                memory_mib: s.memory_mib,
                nvme_size_bytes: nvme.size_bytes,
                wipe_policy: wipe.into(),
                mac_address: identity::mac_address(NODE, s.slot_index),
                ip_address: identity::ip_address(s.slot_index),
            }
        })
        .collect()
}

pub fn plan(alloc: &str, slots: Vec<PlannedSlot>) -> ProvisionPlan {
    ProvisionPlan {
        allocation_id: alloc.into(),
        name: "Train run #1".into(),
        image: ImageRef {
            name: "ubuntu-24.04-cuda".into(),
            source: "/var/lib/gpuaas/images/ubuntu-24.04-cuda-12.6.qcow2".into(),
            sha256: None,
            ssh_user: "ubuntu".into(),
            cloud_init: String::new(),
        },
        ssh_public_key:
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGv1cYB4mWc3JqVqXfTb0nq0mQwWbYQ3Xb2P0x2vB1bq test"
                .into(),
        user_data: None,
        slots,
        network: Default::default(),
        fabric: Default::default(),
        cluster: None,
        restore_from: None,
    }
}

pub fn simulated_agent(dir: &Path, fixture_name: &str) -> Agent {
    let mut d = SimulatedDriver::new(fixture(fixture_name), dir);
    d.phase_time = std::time::Duration::ZERO;
    d.disk_bytes = 1 << 20;
    Agent::new(
        NODE.into(),
        "gpn_test".into(),
        Arc::new(d),
        dir.to_path_buf(),
    )
}
