//! The libvirt domain for an allocation: VFIO passthrough of each slot's GPU and IB VF, vCPUs
//! pinned one-to-one onto the slots' CPU sets, memory bound (`numatune`) to their NUMA nodes
//! and backed by hugepages, each slot's NVMe namespace as a raw virtio disk, the cloud-init
//! seed as a CD-ROM, and one NIC with the first slot's deterministic MAC.

use std::fmt::Write;
use std::path::Path;

use agent_protocol::PlannedSlot;
use agent_protocol::ranges::parse_ranges;

/// The bridge every slot NIC joins (the host-only slot network, 10.100.0.0/24).
pub const BRIDGE: &str = "gpuaas0";

/// The domain name for an allocation: one allocation, one name, so that a restarted agent
/// can never start a second VM for it.
pub fn domain_name(allocation_id: &str) -> String {
    format!("gpuaas-{allocation_id}")
}

pub struct DomainSpec<'a> {
    pub allocation_id: &'a str,
    pub slots: &'a [PlannedSlot],
    /// One per slot, in the same order: a block device or a raw file.
    pub disks: &'a [std::path::PathBuf],
    pub seed_iso: &'a Path,
    /// The guest's NIC on its project's segment, if it has one.
    pub private: Option<&'a agent_protocol::PrivateNic>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\'', "&apos;")
        .replace('"', "&quot;")
}

/// `0000:18:00.0` → the four attributes of a libvirt PCI `<address>`.
fn pci_address(addr: &str) -> Result<String, String> {
    let bad = || format!("{addr:?} is not a PCI address");
    let (domain, rest) = addr.split_once(':').ok_or_else(bad)?;
    let (bus, rest) = rest.split_once(':').ok_or_else(bad)?;
    let (slot, function) = rest.split_once('.').ok_or_else(bad)?;
    let hex = |s: &str, len: usize| s.len() == len && s.chars().all(|c| c.is_ascii_hexdigit());
    if !(hex(domain, 4) && hex(bus, 2) && hex(slot, 2) && hex(function, 1)) {
        return Err(bad());
    }
    Ok(format!(
        "<address domain='0x{domain}' bus='0x{bus}' slot='0x{slot}' function='0x{function}'/>"
    ))
}

pub fn render(spec: &DomainSpec<'_>) -> Result<String, String> {
    let slots = spec.slots;
    if slots.is_empty() {
        return Err("the plan names no slots".into());
    }
    if spec.disks.len() != slots.len() {
        return Err("one disk per slot".into());
    }
    allocation_id_ok(spec.allocation_id)?;
    let mut cpus = Vec::new();
    for s in slots {
        let set = parse_ranges(&s.cpu_set)
            .map_err(|e| format!("slot {}: CPU set {:?}: {e}", s.slot_index, s.cpu_set))?;
        cpus.extend(set);
    }
    if cpus.is_empty() {
        return Err("the slots have no CPUs".into());
    }
    let mut numa: Vec<u32> = slots.iter().map(|s| s.numa_node).collect();
    numa.sort_unstable();
    numa.dedup();
    let nodeset = numa
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let memory_mib: u64 = slots.iter().map(|s| s.memory_mib).sum();

    let mut x = String::new();
    let w = &mut x;
    let _ = writeln!(w, "<domain type='kvm'>");
    let _ = writeln!(w, "  <name>{}</name>", domain_name(spec.allocation_id));
    let _ = writeln!(w, "  <uuid>{}</uuid>", spec.allocation_id);
    let _ = writeln!(w, "  <memory unit='MiB'>{memory_mib}</memory>");
    let _ = writeln!(w, "  <memoryBacking><hugepages/><locked/></memoryBacking>");
    let _ = writeln!(w, "  <vcpu placement='static'>{}</vcpu>", cpus.len());
    let _ = writeln!(w, "  <cputune>");
    for (vcpu, host) in cpus.iter().enumerate() {
        let _ = writeln!(w, "    <vcpupin vcpu='{vcpu}' cpuset='{host}'/>");
    }
    let _ = writeln!(w, "  </cputune>");
    let _ = writeln!(
        w,
        "  <numatune><memory mode='strict' nodeset='{nodeset}'/></numatune>"
    );
    let _ = writeln!(
        w,
        "  <os><type arch='x86_64' machine='q35'>hvm</type><boot dev='hd'/></os>"
    );
    let _ = writeln!(w, "  <features><acpi/><apic/></features>");
    let _ = writeln!(w, "  <cpu mode='host-passthrough'/>");
    let _ = writeln!(w, "  <on_poweroff>destroy</on_poweroff>");
    let _ = writeln!(w, "  <on_reboot>restart</on_reboot>");
    let _ = writeln!(w, "  <on_crash>destroy</on_crash>");
    let _ = writeln!(w, "  <devices>");
    for (i, disk) in spec.disks.iter().enumerate() {
        let path = disk
            .to_str()
            .ok_or_else(|| format!("{} is not a UTF-8 path", disk.display()))?;
        let target = format!("vd{}", (b'a' + i as u8) as char);
        let block = disk.starts_with("/dev");
        let (kind, attr) = if block {
            ("block", "dev")
        } else {
            ("file", "file")
        };
        let _ = writeln!(w, "    <disk type='{kind}' device='disk'>");
        let _ = writeln!(
            w,
            "      <driver name='qemu' type='raw' cache='none' io='native'/>"
        );
        let _ = writeln!(w, "      <source {attr}='{}'/>", esc(path));
        let _ = writeln!(w, "      <target dev='{target}' bus='virtio'/>");
        let _ = writeln!(w, "    </disk>");
    }
    let seed = spec.seed_iso.to_str().ok_or("the seed path is not UTF-8")?;
    let _ = writeln!(w, "    <disk type='file' device='cdrom'>");
    let _ = writeln!(w, "      <driver name='qemu' type='raw'/>");
    let _ = writeln!(w, "      <source file='{}'/>", esc(seed));
    let _ = writeln!(w, "      <target dev='sda' bus='sata'/>");
    let _ = writeln!(w, "      <readonly/>");
    let _ = writeln!(w, "    </disk>");
    let _ = writeln!(w, "    <interface type='bridge'>");
    let _ = writeln!(w, "      <mac address='{}'/>", esc(&slots[0].mac_address));
    let _ = writeln!(w, "      <source bridge='{BRIDGE}'/>");
    let _ = writeln!(
        w,
        "      <target dev='{}'/>",
        agent_protocol::identity::slot_interface(slots[0].slot_index)
    );
    let _ = writeln!(w, "      <model type='virtio'/>");
    let _ = writeln!(w, "    </interface>");
    if let Some(nic) = spec.private {
        let _ = writeln!(w, "    <interface type='bridge'>");
        let _ = writeln!(w, "      <mac address='{}'/>", esc(&nic.mac));
        let _ = writeln!(
            w,
            "      <source bridge='{}'/>",
            agent_protocol::identity::overlay_bridge(nic.vni)
        );
        let _ = writeln!(
            w,
            "      <target dev='{}'/>",
            agent_protocol::identity::private_interface(slots[0].slot_index)
        );
        let _ = writeln!(w, "      <model type='virtio'/>");
        let _ = writeln!(w, "      <mtu size='{}'/>", crate::overlay::PRIVATE_MTU);
        let _ = writeln!(w, "    </interface>");
    }
    for s in slots {
        for addr in [&s.gpu_pci_address, &s.ib_vf_pci_address] {
            let _ = writeln!(w, "    <hostdev mode='subsystem' type='pci' managed='yes'>");
            let _ = writeln!(w, "      <source>{}</source>", pci_address(addr)?);
            let _ = writeln!(w, "    </hostdev>");
        }
    }
    let _ = writeln!(w, "    <serial type='pty'/>");
    let _ = writeln!(w, "    <console type='pty'/>");
    let _ = writeln!(w, "  </devices>");
    let _ = writeln!(w, "</domain>");
    Ok(x)
}

/// Allocation ids are UUIDs; anything else must never become a domain name or a path.
pub fn allocation_id_ok(id: &str) -> Result<(), String> {
    let groups: Vec<&str> = id.split('-').collect();
    let lens = [8, 4, 4, 4, 12];
    if groups.len() == 5
        && groups
            .iter()
            .zip(lens)
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
    {
        Ok(())
    } else {
        Err(format!("{id:?} is not an allocation id"))
    }
}

/// The most volumes one VM has plugged in; they take the virtio names `vdq` to `vdx`, clear
/// of the slots' disks.
pub const MAX_VOLUMES: usize = agent_protocol::MAX_VOLUMES_PER_INSTANCE;

/// The guest device name of the `i`-th volume place.
pub fn volume_dev(i: usize) -> Result<String, String> {
    if i >= MAX_VOLUMES {
        return Err(format!("a VM has at most {MAX_VOLUMES} volumes"));
    }
    Ok(format!("vd{}", (b'q' + i as u8) as char))
}

fn plain(what: &str, s: &str, extra: &[char]) -> Result<(), String> {
    if !s.is_empty()
        && s.len() <= 253
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || extra.contains(&c))
    {
        Ok(())
    } else {
        Err(format!(
            "{what} {s:?} has characters a disk definition can't take"
        ))
    }
}

/// Refuses a volume target with a field a disk definition or a `qemu-img` filename can't
/// take.
pub fn check_target(target: &agent_protocol::VolumeTarget) -> Result<(), String> {
    match target {
        agent_protocol::VolumeTarget::Nbd { host, export, .. } => {
            plain("host", host, &['.', ':'])?;
            plain("export", export, &['_', '.'])
        }
        agent_protocol::VolumeTarget::Rbd {
            pool, image, user, ..
        } => {
            plain("pool", pool, &['_', '.'])?;
            plain("image", image, &['_', '.'])?;
            plain("user", user, &['_', '.'])
        }
    }
}

/// A volume as a hot-pluggable network disk on guest device `dev`: NBD, or RBD with the
/// host's Ceph secret for its user (defined on the host, never sent in a plan).
pub fn volume_disk(disk: &agent_protocol::VolumeDisk, dev: &str) -> Result<String, String> {
    allocation_id_ok(&disk.volume_id)?;
    if disk.serial.len() != 20 || !disk.serial.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("{:?} is not a volume serial", disk.serial));
    }
    plain("device", dev, &[])?;
    let mut x = String::new();
    let w = &mut x;
    let _ = writeln!(w, "<disk type='network' device='disk'>");
    let _ = writeln!(w, "  <driver name='qemu' type='raw' cache='none'/>");
    check_target(&disk.target)?;
    match &disk.target {
        agent_protocol::VolumeTarget::Nbd { host, port, export } => {
            plain("host", host, &['.', ':'])?;
            plain("export", export, &['_', '.'])?;
            let _ = writeln!(w, "  <source protocol='nbd' name='{export}'>");
            let _ = writeln!(w, "    <host name='{host}' port='{port}'/>");
            let _ = writeln!(w, "  </source>");
        }
        agent_protocol::VolumeTarget::Rbd {
            pool,
            image,
            monitors,
            user,
        } => {
            plain("pool", pool, &['_', '.'])?;
            plain("image", image, &['_', '.'])?;
            plain("user", user, &['_', '.'])?;
            let _ = writeln!(w, "  <auth username='{user}'>");
            let _ = writeln!(w, "    <secret type='ceph' usage='client.{user} secret'/>");
            let _ = writeln!(w, "  </auth>");
            let _ = writeln!(w, "  <source protocol='rbd' name='{pool}/{image}'>");
            for m in monitors {
                let addr: std::net::SocketAddr = m
                    .parse()
                    .map_err(|_| format!("monitor {m:?} is not an address and port"))?;
                let _ = writeln!(w, "    <host name='{}' port='{}'/>", addr.ip(), addr.port());
            }
            let _ = writeln!(w, "  </source>");
        }
    }
    let _ = writeln!(w, "  <target dev='{dev}' bus='virtio'/>");
    let _ = writeln!(w, "  <serial>{}</serial>", disk.serial);
    let _ = writeln!(w, "</disk>");
    Ok(x)
}
