//! `slice.topology_discover`: read a host from a sysfs root (plus NVIDIA tool output when
//! present) and propose a slot map. The reader takes the root as a path, so the same code reads
//! `/` on a real host and a directory-tree fixture in tests and in the simulated driver.
//!
//! What is read:
//! - `sys/bus/pci/devices/*/{class,vendor,device,numa_node}`, the `iommu_group` and `driver`
//!   links, `virtfn*` and `physfn` links (SR-IOV);
//! - `sys/class/nvme/*/{serial,model,address}` and namespaces `*/nvme*n*/size` (512-byte
//!   sectors; `nvmeXcYnZ` multipath paths are reported under their `nvmeXnZ` name);
//! - `sys/class/infiniband/*/device` (the PCI function behind each HCA, PF or VF);
//! - `sys/devices/system/node/node*/{cpulist,meminfo}`;
//! - `proc/sys/kernel/hostname`;
//! - [`Tools`]: `nvidia-smi` (names and UUIDs) and the fabric manager's partition list.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use agent_protocol::metadata;
use agent_protocol::{
    Gpu, HostTopology, IbDevice, NumaNode, NvmeController, NvmeNamespace, PciDevice, SlotGpu,
    SlotNvme, SlotSpec,
};

use crate::tools::Tools;

const NVIDIA: &str = "0x10de";

/// The wipe methods this agent can carry out (`destructive_wipe_policy` values).
pub const WIPE_METHODS: &[&str] = &[
    "nvme-format-crypto",
    "nvme-format",
    "nvme-sanitize-block",
    "overwrite-verify",
];

/// CPUs per NUMA node kept for the host (housekeeping, the agent, interrupts).
pub const HOST_RESERVED_CPUS_PER_NUMA: usize = 2;
/// Memory per NUMA node kept for the host.
pub const HOST_RESERVED_MIB_PER_NUMA: u64 = 8 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error("reading {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: {reason}")]
    Parse { path: PathBuf, reason: String },
}

type Result<T> = std::result::Result<T, DiscoverError>;

/// What the agent reports with each heartbeat: degraded when the host can't do what slots
/// need, i.e. sysfs is unreadable or there is no IOMMU (no VFIO passthrough without one).
pub fn host_health(root: &Path) -> agent_protocol::Health {
    use agent_protocol::{Health, HealthStatus};
    let groups = root.join("sys/kernel/iommu_groups");
    let degraded = |detail: String| Health {
        status: HealthStatus::Degraded,
        detail: Some(detail),
    };
    if let Err(e) = fs::read_dir(root.join("sys/bus/pci/devices")) {
        return degraded(format!(
            "cannot read PCI devices under {}: {e}",
            root.display()
        ));
    }
    let has_groups = fs::read_dir(&groups).is_ok_and(|mut e| e.next().is_some());
    match has_groups {
        true => Health {
            status: HealthStatus::Healthy,
            detail: None,
        },
        false => degraded(format!(
            "no IOMMU groups under {}: enable the IOMMU (intel_iommu=on or amd_iommu=on) for GPU passthrough",
            groups.display()
        )),
    }
}

/// The host as sysfs and the tools describe it.
pub fn read_host(
    root: &Path,
    tools: &dyn Tools,
    warnings: &mut Vec<String>,
) -> Result<HostTopology> {
    let hostname = read_trimmed(&root.join("proc/sys/kernel/hostname"))?;
    let numa_nodes = read_numa(root)?;
    let pci_devices = read_pci(root)?;
    let by_addr: BTreeMap<&str, &PciDevice> = pci_devices
        .iter()
        .map(|d| (d.address.as_str(), d))
        .collect();

    let smi = tools.nvidia_smi_gpus(warnings);
    let gpus: Vec<Gpu> = pci_devices
        .iter()
        .filter(|d| is_gpu(d))
        .map(|d| {
            let from_smi = smi.iter().find(|g| g.pci_address == d.address);
            Gpu {
                pci_address: d.address.clone(),
                model: from_smi
                    .map(|g| g.name.clone())
                    .unwrap_or_else(|| model_name(&d.device_id)),
                uuid: from_smi.map(|g| g.uuid.clone()),
                numa_node: d.numa_node,
                iommu_group: d.iommu_group,
            }
        })
        .collect();
    let nvswitches = pci_devices
        .iter()
        .filter(|d| is_nvswitch(d))
        .map(|d| d.address.clone())
        .collect();

    let nvme = read_nvme(root, &by_addr)?;
    let infiniband = read_infiniband(root, &by_addr)?;

    let gpu_addrs: Vec<String> = gpus.iter().map(|g| g.pci_address.clone()).collect();
    let fabric_partitions = tools.fabric_partitions(&gpu_addrs, warnings);

    Ok(HostTopology {
        hostname,
        numa_nodes,
        pci_devices,
        gpus,
        nvswitches,
        nvme,
        infiniband,
        fabric_partitions,
    })
}

fn is_gpu(d: &PciDevice) -> bool {
    // 0x0300xx VGA, 0x0302xx 3D controller (every datacenter GPU).
    d.vendor_id == NVIDIA && (d.class.starts_with("0x0300") || d.class.starts_with("0x0302"))
}

fn is_nvswitch(d: &PciDevice) -> bool {
    // NVSwitches show up as "bridge, other" (0x0680) NVIDIA functions.
    d.vendor_id == NVIDIA && d.class.starts_with("0x0680")
}

/// A readable name for NVIDIA device ids we know; `nvidia-smi`'s name wins when present.
pub fn model_name(device_id: &str) -> String {
    match device_id {
        "0x2330" => "NVIDIA H100 80GB HBM3",
        "0x2331" => "NVIDIA H100 PCIe",
        "0x2335" => "NVIDIA H200",
        "0x233b" => "NVIDIA H200 NVL",
        "0x26b9" => "NVIDIA L40S",
        "0x20b2" => "NVIDIA A100-SXM4-80GB",
        "0x20b5" => "NVIDIA A100 80GB PCIe",
        other => return format!("NVIDIA GPU {other}"),
    }
    .to_string()
}

fn read_numa(root: &Path) -> Result<Vec<NumaNode>> {
    let dir = root.join("sys/devices/system/node");
    let mut nodes = Vec::new();
    for name in list_dir(&dir)? {
        let Some(id) = name
            .strip_prefix("node")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let path = dir.join(&name);
        let cpus = read_trimmed(&path.join("cpulist"))?;
        let cpu_count = parse_cpulist(&cpus).map_err(|reason| DiscoverError::Parse {
            path: path.join("cpulist"),
            reason,
        })?;
        let meminfo_path = path.join("meminfo");
        let meminfo = read_string(&meminfo_path)?;
        let memory_kib = meminfo
            .lines()
            .find_map(|l| {
                let rest = l.split_once("MemTotal:")?.1;
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .ok_or_else(|| DiscoverError::Parse {
                path: meminfo_path.clone(),
                reason: "no MemTotal line".into(),
            })?;
        nodes.push(NumaNode {
            id,
            cpus,
            cpu_count: cpu_count.len() as u32,
            memory_mib: memory_kib / 1024,
        });
    }
    nodes.sort_by_key(|n| n.id);
    Ok(nodes)
}

fn read_pci(root: &Path) -> Result<Vec<PciDevice>> {
    let dir = root.join("sys/bus/pci/devices");
    let mut devices = Vec::new();
    for address in list_dir(&dir)? {
        let path = dir.join(&address);
        let numa = read_trimmed(&path.join("numa_node")).unwrap_or_else(|_| "-1".into());
        let numa_node = match numa.parse::<i64>() {
            Ok(n) if n >= 0 => Some(n as u32),
            Ok(_) => None,
            Err(_) => {
                return Err(DiscoverError::Parse {
                    path: path.join("numa_node"),
                    reason: format!("{numa:?} is not a number"),
                });
            }
        };
        let iommu_group = match link_name(&path.join("iommu_group")) {
            Some(g) => Some(g.parse::<u32>().map_err(|_| DiscoverError::Parse {
                path: path.join("iommu_group"),
                reason: format!("{g:?} is not a group number"),
            })?),
            None => None,
        };
        let mut virtfns: Vec<(u32, String)> = list_dir(&path)?
            .into_iter()
            .filter_map(|n| {
                let i = n.strip_prefix("virtfn")?.parse::<u32>().ok()?;
                Some((i, link_name(&path.join(&n))?))
            })
            .collect();
        virtfns.sort();
        devices.push(PciDevice {
            class: read_trimmed(&path.join("class"))?,
            vendor_id: read_trimmed(&path.join("vendor"))?,
            device_id: read_trimmed(&path.join("device"))?,
            numa_node,
            iommu_group,
            driver: link_name(&path.join("driver")),
            physfn: link_name(&path.join("physfn")),
            virtfns: virtfns.into_iter().map(|(_, a)| a).collect(),
            address,
        });
    }
    devices.sort_by(|a, b| a.address.cmp(&b.address));
    Ok(devices)
}

fn read_nvme(root: &Path, pci: &BTreeMap<&str, &PciDevice>) -> Result<Vec<NvmeController>> {
    let dir = root.join("sys/class/nvme");
    let mut out = Vec::new();
    for name in list_dir(&dir)? {
        let path = dir.join(&name);
        let pci_address = match read_trimmed(&path.join("address")) {
            Ok(a) => a,
            // Fabrics controllers (NVMe-oF) have no PCI address; they are not slot storage.
            Err(_) => continue,
        };
        let mut namespaces = Vec::new();
        for entry in list_dir(&path)? {
            let Some(ns_name) = namespace_name(&name, &entry) else {
                continue;
            };
            let size_path = path.join(&entry).join("size");
            let sectors = read_trimmed(&size_path)?;
            let sectors: u64 = sectors.parse().map_err(|_| DiscoverError::Parse {
                path: size_path,
                reason: format!("{sectors:?} is not a sector count"),
            })?;
            namespaces.push(NvmeNamespace {
                name: ns_name,
                size_bytes: sectors * 512,
            });
        }
        namespaces.sort_by_key(|n| natural(&n.name));
        out.push(NvmeController {
            serial: read_trimmed(&path.join("serial"))?,
            model: read_trimmed(&path.join("model"))?,
            numa_node: pci.get(pci_address.as_str()).and_then(|d| d.numa_node),
            pci_address,
            name,
            namespaces,
        });
    }
    out.sort_by(|a, b| a.pci_address.cmp(&b.pci_address));
    Ok(out)
}

/// `nvme0n1` or `nvme0c0n1` under controller `nvme0` → `nvme0n1`.
fn namespace_name(controller: &str, entry: &str) -> Option<String> {
    let rest = entry.strip_prefix("nvme")?;
    let (ctrl, ns) = rest.split_once('n')?;
    let ctrl = ctrl.split_once('c').map_or(ctrl, |(c, _)| c);
    if !ctrl.chars().all(|c| c.is_ascii_digit()) || !ns.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if ns.is_empty() || format!("nvme{ctrl}") != controller {
        return None;
    }
    Some(format!("nvme{ctrl}n{ns}"))
}

fn read_infiniband(root: &Path, pci: &BTreeMap<&str, &PciDevice>) -> Result<Vec<IbDevice>> {
    let dir = root.join("sys/class/infiniband");
    let mut out = Vec::new();
    for name in list_dir(&dir)? {
        let Some(pci_address) = link_name(&dir.join(&name).join("device")) else {
            continue;
        };
        let dev = pci.get(pci_address.as_str());
        out.push(IbDevice {
            numa_node: dev.and_then(|d| d.numa_node),
            physfn: dev.and_then(|d| d.physfn.clone()),
            pci_address,
            name,
        });
    }
    out.sort_by(|a, b| a.pci_address.cmp(&b.pci_address));
    Ok(out)
}

/// Proposes one slot per GPU: an NVMe namespace and an IB virtual function from the GPU's
/// NUMA node (or, failing that, any free one, with a warning that validation will repeat),
/// and an even share of the node's CPUs and memory after the host's reserve.
pub fn propose_slots(host: &HostTopology, warnings: &mut Vec<String>) -> Vec<SlotSpec> {
    let mut used_nvme = BTreeSet::new();
    let mut used_vf = BTreeSet::new();
    let vfs: Vec<&IbDevice> = host
        .infiniband
        .iter()
        .filter(|d| d.physfn.is_some())
        .collect();
    let mut slots = Vec::new();
    let mut share_index: BTreeMap<Option<u32>, usize> = BTreeMap::new();

    for (index, gpu) in host.gpus.iter().enumerate() {
        let numa = host.numa_of(gpu.numa_node);
        if gpu.numa_node.is_none() && numa.is_none() {
            warnings.push(format!(
                "GPU {} reports no NUMA node on a host with {} NUMA nodes: its slot gets no CPUs or memory",
                gpu.pci_address,
                host.numa_nodes.len()
            ));
        }
        if gpu.iommu_group.is_none() {
            warnings.push(format!(
                "GPU {} has no IOMMU group, so it can't be passed through to a VM: enable the IOMMU (intel_iommu=on or amd_iommu=on) and VT-d/AMD-Vi in the firmware",
                gpu.pci_address
            ));
        }

        let nvme = pick(&host.nvme, &mut used_nvme, numa, |c| {
            (&c.pci_address, host.numa_of(c.numa_node))
        });
        if nvme.is_none() {
            warnings.push(format!(
                "GPU {} has no free NVMe controller",
                gpu.pci_address
            ));
        } else if nvme.is_some_and(|c| host.numa_of(c.numa_node) != numa) {
            warnings.push(format!(
                "GPU {} got an NVMe from another NUMA node: none left on its own",
                gpu.pci_address
            ));
        }
        let slot_nvme = nvme.and_then(|c| {
            let ns = c.namespaces.first()?;
            Some(SlotNvme {
                pci_address: c.pci_address.clone(),
                serial: c.serial.clone(),
                namespace: ns.name.clone(),
                size_bytes: ns.size_bytes,
            })
        });

        let vf = pick(&vfs, &mut used_vf, numa, |d| {
            (&d.pci_address, host.numa_of(d.numa_node))
        });
        if vf.is_none() {
            warnings.push(format!(
                "GPU {} has no free InfiniBand virtual function",
                gpu.pci_address
            ));
        }

        let peers = host
            .gpus
            .iter()
            .filter(|g| host.numa_of(g.numa_node) == numa)
            .count();
        let share = share_index.entry(numa).or_default();
        let (cpu_set, memory_mib) = host_share(host, numa, peers, *share);
        *share += 1;
        if numa.is_some() && memory_mib == 0 {
            warnings.push(format!(
                "GPU {}: NUMA node {} has no memory left after the host's {} MiB reserve",
                gpu.pci_address,
                numa.unwrap_or_default(),
                HOST_RESERVED_MIB_PER_NUMA
            ));
        }

        let mut capacity_metadata = BTreeMap::new();
        capacity_metadata.insert(metadata::STORAGE_OWNERSHIP.to_string(), "slice".to_string());
        capacity_metadata.insert(
            metadata::FABRIC_CLAIM_MODE.to_string(),
            "per_slot_vf".to_string(),
        );
        capacity_metadata.insert(
            metadata::FABRIC_VF_PCI_ADDRESS.to_string(),
            vf.map(|d| d.pci_address.clone()).unwrap_or_default(),
        );

        slots.push(SlotSpec {
            slot_index: index as u32,
            gpu: SlotGpu {
                pci_address: gpu.pci_address.clone(),
                model: gpu.model.clone(),
                uuid: gpu.uuid.clone(),
            },
            numa_node: numa,
            nvme: slot_nvme,
            ib_vf_pci_address: vf.map(|d| d.pci_address.clone()),
            cpu_set,
            memory_mib,
            capacity_metadata,
        });
    }
    slots
}

/// The first unused item on `numa`, else the first unused one anywhere.
fn pick<'a, T>(
    items: &'a [T],
    used: &mut BTreeSet<String>,
    numa: Option<u32>,
    key: impl Fn(&T) -> (&String, Option<u32>),
) -> Option<&'a T> {
    let free = |t: &&T| !used.contains(key(t).0);
    let chosen = items
        .iter()
        .filter(free)
        .find(|t| key(t).1 == numa)
        .or_else(|| items.iter().find(|t| !used.contains(key(t).0)))?;
    used.insert(key(chosen).0.clone());
    Some(chosen)
}

/// The `share`-th of `peers` equal shares of a NUMA node's CPUs and memory, after the host's
/// reserve. Memory is rounded down to whole GiB.
fn host_share(host: &HostTopology, numa: Option<u32>, peers: usize, share: usize) -> (String, u64) {
    let Some(node) = numa.and_then(|n| host.numa_nodes.iter().find(|x| x.id == n)) else {
        return (String::new(), 0);
    };
    let cpus = parse_cpulist(&node.cpus).unwrap_or_default();
    let usable: Vec<u32> = cpus.into_iter().skip(HOST_RESERVED_CPUS_PER_NUMA).collect();
    let per = usable.len() / peers.max(1);
    let mine = &usable[share * per..(share + 1) * per];
    let memory = node.memory_mib.saturating_sub(HOST_RESERVED_MIB_PER_NUMA) / peers.max(1) as u64;
    (format_cpulist(mine), memory / 1024 * 1024)
}

/// `0-3,8,10-11` → [0,1,2,3,8,10,11].
pub fn parse_cpulist(s: &str) -> std::result::Result<Vec<u32>, String> {
    agent_protocol::ranges::parse_ranges(s)
        .map_err(|part| format!("{part:?} is not a CPU or a range"))
}

pub use agent_protocol::ranges::format_ranges as format_cpulist;

fn natural(s: &str) -> (usize, String) {
    (s.len(), s.to_string())
}

fn list_dir(dir: &Path) -> Result<Vec<String>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        // A host without NVMe or InfiniBand has no such class directory.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(DiscoverError::Io {
                path: dir.into(),
                source,
            });
        }
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| DiscoverError::Io {
            path: dir.into(),
            source,
        })?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

/// The last component of a symlink's target (`iommu_group` → `17`, `driver` → `nvidia`).
fn link_name(path: &Path) -> Option<String> {
    let target = fs::read_link(path).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

fn read_string(path: &Path) -> Result<String> {
    fs::read_to_string(path).map_err(|source| DiscoverError::Io {
        path: path.into(),
        source,
    })
}

fn read_trimmed(path: &Path) -> Result<String> {
    Ok(read_string(path)?.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_round_trip() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(format_cpulist(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(parse_cpulist("").unwrap(), Vec::<u32>::new());
        assert_eq!(
            parse_cpulist("3-1").unwrap_err(),
            "\"3-1\" is not a CPU or a range"
        );
    }

    #[test]
    fn health_needs_readable_sysfs_and_an_iommu() {
        use agent_protocol::HealthStatus;
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/hgx-h100-8x");
        assert_eq!(host_health(&fixture).status, HealthStatus::Healthy);

        let bare = std::env::temp_dir().join(format!("no-iommu-{}", std::process::id()));
        fs::create_dir_all(bare.join("sys/bus/pci/devices")).unwrap();
        let h = host_health(&bare);
        assert_eq!(h.status, HealthStatus::Degraded);
        assert!(h.detail.unwrap().starts_with("no IOMMU groups under "));
        let gone = host_health(&bare.join("missing"));
        assert!(
            gone.detail
                .unwrap()
                .starts_with("cannot read PCI devices under ")
        );
        fs::remove_dir_all(&bare).unwrap();
    }

    #[test]
    fn namespace_names_follow_the_block_device() {
        assert_eq!(
            namespace_name("nvme0", "nvme0n1").as_deref(),
            Some("nvme0n1")
        );
        assert_eq!(
            namespace_name("nvme0", "nvme0c0n2").as_deref(),
            Some("nvme0n2")
        );
        assert_eq!(namespace_name("nvme1", "nvme0n1"), None);
        assert_eq!(namespace_name("nvme0", "power"), None);
        assert_eq!(namespace_name("nvme0", "nvme0n"), None);
    }
}
