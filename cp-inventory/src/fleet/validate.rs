//! What makes a proposed slot approvable. Pure functions over the discovery the agent sent and
//! the slots an operator is about to approve; every problem is named, slot by slot.

use std::collections::BTreeMap;

use agent_protocol::{Discovery, SlotSpec, metadata};
use serde::{Deserialize, Serialize};

/// One reason a slot cannot be approved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotProblem {
    pub slot_index: u32,
    pub problem: String,
}

impl std::fmt::Display for SlotProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "slot {}: {}", self.slot_index, self.problem)
    }
}

/// A node's public address as an operator typed it: a DNS name or IPv4 address, lower case;
/// empty means "its hostname" (`None`). The same form the `nodes_public_host_form` constraint
/// holds.
pub fn public_host(input: &str) -> cp_base::error::Result<Option<String>> {
    let host = input.trim().trim_end_matches('.').to_ascii_lowercase();
    if host.is_empty() {
        return Ok(None);
    }
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if host.len() <= 253 && host.split('.').all(label_ok) {
        Ok(Some(host))
    } else {
        Err(cp_base::error::Error::Invalid {
            field: "public_host",
            reason: format!(
                "{:?} is not a host name or IPv4 address (e.g. gpu-host-3.example.com)",
                input.trim()
            ),
        })
    }
}

/// `dddd:bb:dd.f` → `dddd:bb:dd` (the device, whose functions may share an IOMMU group).
fn device_of(address: &str) -> &str {
    address.rsplit_once('.').map_or(address, |(d, _)| d)
}

/// `dddd:bb:dd.f`, lowercase hex, as sysfs writes it.
fn is_pci_address(a: &str) -> bool {
    let b = a.as_bytes();
    let hex = |r: std::ops::Range<usize>| {
        b[r].iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
    };
    b.len() == 12
        && hex(0..4)
        && b[4] == b':'
        && hex(5..7)
        && b[7] == b':'
        && hex(8..10)
        && b[10] == b'.'
        && (b'0'..=b'7').contains(&b[11])
}

/// `nvme0n1`, …
fn is_namespace(n: &str) -> bool {
    n.strip_prefix("nvme")
        .and_then(|r| r.split_once('n'))
        .is_some_and(|(c, ns)| {
            !c.is_empty()
                && !ns.is_empty()
                && c.bytes().all(|x| x.is_ascii_digit())
                && ns.bytes().all(|x| x.is_ascii_digit())
        })
}

/// Every problem with `slots` (which may be a subset of the proposal) on the host `discovery`
/// describes. Empty means approvable.
pub fn validate_slots(discovery: &Discovery, slots: &[SlotSpec]) -> Vec<SlotProblem> {
    let host = &discovery.host;
    let pci: Pci = host
        .pci_devices
        .iter()
        .map(|d| (d.address.as_str(), d))
        .collect();
    let mut problems = Vec::new();
    let mut seen: BTreeMap<String, (u32, &'static str)> = BTreeMap::new();
    for slot in slots {
        let vf = metadata_of(slot, metadata::FABRIC_VF_PCI_ADDRESS);
        let mut found = Vec::new();
        capacity_metadata(discovery, slot, vf, &mut found);
        one_numa_node(host, &pci, slot, vf, &mut found);
        gpu_isolated(host, &pci, slot, &mut found);
        what_the_database_refuses(slot, vf, &mut found);
        each_address_once(slot, vf, &mut seen, &mut found);
        problems.extend(found.into_iter().map(|problem| SlotProblem {
            slot_index: slot.slot_index,
            problem,
        }));
    }
    problems
}

/// The host's PCI devices by address.
type Pci<'h> = BTreeMap<&'h str, &'h agent_protocol::PciDevice>;

/// A capacity metadata value, trimmed; empty when absent.
fn metadata_of<'s>(slot: &'s SlotSpec, key: &str) -> &'s str {
    slot.capacity_metadata
        .get(key)
        .map(|v| v.trim())
        .unwrap_or("")
}

/// The capacity metadata every slot must carry: storage and fabric modes, its InfiniBand VF,
/// and a wipe policy this agent supports.
fn capacity_metadata(discovery: &Discovery, slot: &SlotSpec, vf: &str, found: &mut Vec<String>) {
    let host = &discovery.host;
    match metadata_of(slot, metadata::STORAGE_OWNERSHIP) {
        "slice" => {}
        "" => found.push("storage_ownership is missing; it must be \"slice\"".into()),
        other => found.push(format!(
            "storage_ownership is {other:?}; it must be \"slice\""
        )),
    }
    match metadata_of(slot, metadata::FABRIC_CLAIM_MODE) {
        "per_slot_vf" => {}
        "" => found.push("fabric_claim_mode is missing; it must be \"per_slot_vf\"".into()),
        other => found.push(format!(
            "fabric_claim_mode is {other:?}; it must be \"per_slot_vf\""
        )),
    }
    if vf.is_empty() {
        found.push(
            "fabric_vf_pci_address is empty: no InfiniBand virtual function for this slot".into(),
        );
    } else if !host
        .infiniband
        .iter()
        .any(|d| d.pci_address == vf && d.physfn.is_some())
    {
        found.push(format!(
            "fabric_vf_pci_address {vf} is not an InfiniBand virtual function on this host"
        ));
    }
    match metadata_of(slot, metadata::DESTRUCTIVE_WIPE_POLICY) {
        "" => found.push(format!(
            "destructive_wipe_policy is empty; choose one of {}",
            discovery.wipe_methods.join(", ")
        )),
        policy if !discovery.wipe_methods.iter().any(|m| m == policy) => found.push(format!(
            "destructive_wipe_policy {policy:?} is not a method this agent supports ({})",
            discovery.wipe_methods.join(", ")
        )),
        _ => {}
    }
}

/// GPU, NVMe and VF on one NUMA node, and a dedicated NVMe drive.
fn one_numa_node(
    host: &agent_protocol::HostTopology,
    pci: &Pci<'_>,
    slot: &SlotSpec,
    vf: &str,
    found: &mut Vec<String>,
) {
    let numa_of = |address: &str| host.numa_of(pci.get(address).and_then(|d| d.numa_node));
    let gpu_numa = numa_of(&slot.gpu.pci_address);
    match gpu_numa {
        None => found.push(format!(
            "GPU {} has no NUMA node in sysfs, so locality can't be checked",
            slot.gpu.pci_address
        )),
        Some(n) => {
            let mut check = |what: &str, address: &str| {
                if let Some(other) = numa_of(address)
                    && other != n
                {
                    found.push(format!(
                        "{what} {address} is on NUMA node {other}, the GPU on NUMA node {n}"
                    ));
                }
            };
            if let Some(nvme) = &slot.nvme {
                check("NVMe", &nvme.pci_address);
            }
            if !vf.is_empty() {
                check("InfiniBand VF", vf);
            }
        }
    }
    if slot.nvme.is_none() {
        found.push("no dedicated NVMe drive".into());
    }
}

/// The GPU's IOMMU group holds only the GPU's own functions.
fn gpu_isolated(
    host: &agent_protocol::HostTopology,
    pci: &Pci<'_>,
    slot: &SlotSpec,
    found: &mut Vec<String>,
) {
    match pci.get(slot.gpu.pci_address.as_str()) {
        None => found.push(format!(
            "GPU {} is not on this host's PCI bus",
            slot.gpu.pci_address
        )),
        Some(gpu) => match gpu.iommu_group {
            None => found.push("the GPU has no IOMMU group: is the IOMMU enabled?".into()),
            Some(group) => {
                for other in host.pci_devices.iter().filter(|d| {
                    d.iommu_group == Some(group) && device_of(&d.address) != device_of(&gpu.address)
                }) {
                    found.push(format!(
                        "IOMMU group {group} also holds {}, which is not part of GPU {}",
                        other.address, gpu.address
                    ));
                }
            }
        },
    }
}

/// What the database would refuse, named here instead of failing on approval.
fn what_the_database_refuses(slot: &SlotSpec, vf: &str, found: &mut Vec<String>) {
    for (what, address) in [
        Some(("GPU", slot.gpu.pci_address.as_str())),
        slot.nvme.as_ref().map(|n| ("NVMe", n.pci_address.as_str())),
        (!vf.is_empty()).then_some(("InfiniBand VF", vf)),
    ]
    .into_iter()
    .flatten()
    {
        if !is_pci_address(address) {
            found.push(format!(
                "{what} address {address:?} is not a PCI address (dddd:bb:dd.f)"
            ));
        }
    }
    let model = slot.gpu.model.trim();
    if model.is_empty() || model.chars().count() > 100 {
        found.push("the GPU model name is empty or longer than 100 characters".into());
    }
    match agent_protocol::ranges::parse_ranges(&slot.cpu_set) {
        Ok(cpus) if !cpus.is_empty() => {}
        Ok(_) => found.push("no CPUs are left for this slot on its NUMA node".into()),
        Err(part) => found.push(format!(
            "CPU set has {part:?}, which is not a CPU or a range"
        )),
    }
    if slot.memory_mib == 0 {
        found.push("no memory is left for this slot on its NUMA node".into());
    }
    if let Some(nvme) = &slot.nvme {
        if nvme.size_bytes == 0 || nvme.size_bytes > i64::MAX as u64 {
            found.push(format!(
                "NVMe namespace {} reports an impossible size",
                nvme.namespace
            ));
        }
        if !is_namespace(&nvme.namespace) {
            found.push(format!(
                "{:?} is not an NVMe namespace name (nvmeXnY)",
                nvme.namespace
            ));
        }
    }
}

/// No PCI address twice, across the slots.
fn each_address_once(
    slot: &SlotSpec,
    vf: &str,
    seen: &mut BTreeMap<String, (u32, &'static str)>,
    found: &mut Vec<String>,
) {
    let mut addresses: Vec<(String, &'static str)> = vec![(slot.gpu.pci_address.clone(), "GPU")];
    if let Some(nvme) = &slot.nvme {
        addresses.push((nvme.pci_address.clone(), "NVMe"));
    }
    if !vf.is_empty() {
        addresses.push((vf.to_string(), "InfiniBand VF"));
    }
    for (address, what) in addresses {
        match seen.get(&address) {
            Some((other, other_what)) => found.push(format!(
                "PCI address {address} ({what}) is already used by slot {other} ({other_what})"
            )),
            None => {
                seen.insert(address, (slot.slot_index, what));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::public_host;

    #[test]
    fn public_hosts_are_names_or_addresses_and_empty_means_the_hostname() {
        assert_eq!(public_host("").unwrap(), None);
        assert_eq!(
            public_host(" GPU-Host-3.Example.com. ").unwrap().as_deref(),
            Some("gpu-host-3.example.com")
        );
        assert_eq!(
            public_host("203.0.113.7").unwrap().as_deref(),
            Some("203.0.113.7")
        );
        for bad in [
            "gpu host",
            "-a.example",
            "a..b",
            "a_b.example",
            "x\"; rm",
            &"a".repeat(64),
        ] {
            assert!(public_host(bad).is_err(), "{bad}");
        }
    }
}
