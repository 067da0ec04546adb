//! A project's private network across hosts: on each host, one bridge per project segment
//! (`gpb{vni}`) with the second NIC of each of the project's guests on it (`gpriv{slot}`) and
//! one VXLAN device (`gpx{vni}`) that carries the segment to the other hosts.
//!
//! Nothing is learnt from the wire. The VXLAN device has no default destination, so a frame
//! for an address the control plane did not list goes nowhere (no flooding); its forwarding
//! entries (MAC → the member's host) and neighbour entries (address → MAC, answered locally
//! by the device's ARP proxy) are exactly the members of the segment on other hosts, from the
//! list the control plane sends with each heartbeat's answer. A released guest drops out of
//! that list, and out of every host's entries at its next heartbeat.
//!
//! What the rules add to [`crate::network`]'s, by where a packet meets them:
//! - `bridge gpuaas` / `prerouting`: a private NIC sends only as its own MAC and address (IPv4
//!   and ARP); a frame from another host enters only with a listed member's MAC and address.
//! - `bridge gpuaas` / `forward`: within one segment only, between its ports.
//! - `inet gpuaas` / `input`: the host is not reachable from a segment at all (its bridges
//!   have no address, answer no ARP and have IPv6 off); VXLAN reaches the tunnel endpoint only
//!   for a segment this host carries, and only from the hosts of that segment's members.
//! - `inet gpuaas` / `forward`: nothing is routed into or out of a segment.
//!
//! A host without a tunnel endpoint still gives its guests their segment, among themselves.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::net::Ipv4Addr;

use agent_protocol::{PrivateNic, identity};

use crate::network::{NetState, link_exists};

/// The MTU of a private NIC: a 1500-byte underlay less VXLAN's 50 bytes of headers.
pub const PRIVATE_MTU: u32 = 1450;

/// The host's tunnel endpoint: the interface to the other hosts and its address there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vtep {
    pub device: String,
    pub address: Ipv4Addr,
}

/// A guest of this host on a segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Local {
    pub slot_index: u32,
    pub mac: String,
    pub address: Ipv4Addr,
}

/// A member of a segment on another host.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Remote {
    pub mac: String,
    pub address: Ipv4Addr,
    pub vtep: Ipv4Addr,
}

/// One segment as this host carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub vni: u32,
    pub local: Vec<Local>,
    pub remote: Vec<Remote>,
}

impl Segment {
    pub fn bridge(&self) -> String {
        identity::overlay_bridge(self.vni)
    }
    pub fn vxlan(&self) -> String {
        identity::overlay_vxlan(self.vni)
    }
    /// The bridge's ports: each local guest's private NIC, and the VXLAN device.
    fn ports(&self, tunnel: bool) -> Vec<String> {
        let mut p: Vec<String> = self
            .local
            .iter()
            .map(|l| identity::private_interface(l.slot_index))
            .collect();
        if tunnel {
            p.push(self.vxlan());
        }
        p
    }
}

/// Refuses a private NIC whose segment, address or MAC breaks the identity rule.
pub fn check_nic(nic: &PrivateNic) -> Result<Ipv4Addr, String> {
    if !identity::VNIS.contains(&nic.vni) {
        return Err(format!("{} is not a segment (VNI) of a project", nic.vni));
    }
    let host = identity::private_host(&nic.address).ok_or_else(|| {
        format!(
            "{:?} is not an address of {}",
            nic.address,
            identity::PRIVATE_NETWORK
        )
    })?;
    if nic.mac != identity::private_mac(host) {
        return Err(format!(
            "the private NIC's MAC {:?} is not {}'s",
            nic.mac, nic.address
        ));
    }
    nic.address
        .parse()
        .map_err(|_| format!("{:?} is not an IPv4 address", nic.address))
}

/// The segments this host carries: those of its own guests, each with its members elsewhere
/// (none without a tunnel endpoint). A listed member at one of this host's own addresses, on
/// this host's endpoint, or that breaks the identity rule is left out.
pub fn segments(state: &NetState, vtep: Option<&Vtep>) -> Result<Vec<Segment>, String> {
    let mut by_vni: BTreeMap<u32, Segment> = BTreeMap::new();
    for a in &state.attached {
        let Some(nic) = &a.private else { continue };
        let address = check_nic(nic)?;
        let seg = by_vni.entry(nic.vni).or_insert_with(|| Segment {
            vni: nic.vni,
            local: Vec::new(),
            remote: Vec::new(),
        });
        if seg.local.iter().any(|l| l.address == address) {
            return Err(format!(
                "two guests have the private address {address} on segment {}",
                nic.vni
            ));
        }
        seg.local.push(Local {
            slot_index: a.slot_index,
            mac: nic.mac.clone(),
            address,
        });
    }
    let Some(vtep) = vtep else {
        return Ok(by_vni.into_values().collect());
    };
    for net in &state.overlay.networks {
        let Some(seg) = by_vni.get_mut(&net.vni) else {
            continue;
        };
        let mut seen = BTreeSet::new();
        for m in &net.members {
            let nic = PrivateNic {
                vni: net.vni,
                address: m.address.clone(),
                mac: m.mac.clone(),
            };
            let (Ok(address), Ok(at)) = (check_nic(&nic), m.vtep.parse::<Ipv4Addr>()) else {
                continue;
            };
            if at == vtep.address
                || !at_ok(at)
                || seg.local.iter().any(|l| l.address == address)
                || !seen.insert(address)
            {
                continue;
            }
            seg.remote.push(Remote {
                mac: nic.mac,
                address,
                vtep: at,
            });
        }
        seg.remote.sort();
    }
    Ok(by_vni.into_values().collect())
}

/// Whether another host's endpoint can be one: a unicast address, not this host's loopback.
fn at_ok(a: Ipv4Addr) -> bool {
    !(a.is_unspecified() || a.is_loopback() || a.is_multicast() || a.is_broadcast())
}

/// Every interface name the segments add to the bridge table's ports.
pub fn ports(segments: &[Segment], tunnel: bool) -> Vec<String> {
    segments.iter().flat_map(|s| s.ports(tunnel)).collect()
}

/// `bridge gpuaas` / `prerouting`: each private NIC sends as itself; another host's frames
/// come only from the segment's listed members.
pub fn bridge_prerouting(w: &mut String, segments: &[Segment], tunnel: bool) {
    for s in segments {
        for l in &s.local {
            let port = identity::private_interface(l.slot_index);
            let (mac, ip) = (&l.mac, l.address);
            let _ = writeln!(
                w,
                "    # slot {}'s private NIC on segment {}",
                l.slot_index, s.vni
            );
            let _ = writeln!(w, "    iifname \"{port}\" ether saddr != {mac} drop");
            let _ = writeln!(w, "    iifname \"{port}\" ether type != {{ ip, arp }} drop");
            let _ = writeln!(
                w,
                "    iifname \"{port}\" arp saddr ether != {mac} drop\n    iifname \"{port}\" arp saddr ip != {ip} drop"
            );
            let _ = writeln!(w, "    iifname \"{port}\" ip saddr != {ip} drop");
        }
        if !tunnel {
            continue;
        }
        let vx = s.vxlan();
        let _ = writeln!(w, "    # segment {}'s members on other hosts", s.vni);
        if s.remote.is_empty() {
            let _ = writeln!(w, "    iifname \"{vx}\" drop");
            continue;
        }
        let pairs = s
            .remote
            .iter()
            .map(|r| format!("{} . {}", r.mac, r.address))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(w, "    iifname \"{vx}\" ether type != {{ ip, arp }} drop");
        let _ = writeln!(
            w,
            "    iifname \"{vx}\" ether type ip ether saddr . ip saddr != {{ {pairs} }} drop"
        );
        let _ = writeln!(
            w,
            "    iifname \"{vx}\" ether type arp ether saddr . arp saddr ip != {{ {pairs} }} drop"
        );
    }
}

/// `bridge gpuaas` / `forward`: a segment's ports reach each other, and nothing else.
pub fn bridge_forward(w: &mut String, segments: &[Segment], tunnel: bool) {
    for s in segments {
        let ports = s
            .ports(tunnel)
            .iter()
            .map(|p| format!("\"{p}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(w, "    iifname {{ {ports} }} oifname {{ {ports} }} accept");
    }
}

/// `inet gpuaas` / `input`: nothing of the host from a segment; VXLAN only for a carried
/// segment, from its members' hosts.
pub fn inet_input(w: &mut String, segments: &[Segment], vtep: Option<&Vtep>) {
    let _ = writeln!(w, "    iifname \"gpb*\" drop");
    let Some(vtep) = vtep else { return };
    let (at, port) = (vtep.address, identity::VXLAN_PORT);
    // The VNI is bits 32–55 of the VXLAN header, which follows UDP's 8 bytes.
    for s in segments {
        let hosts: BTreeSet<Ipv4Addr> = s.remote.iter().map(|r| r.vtep).collect();
        if hosts.is_empty() {
            let _ = writeln!(
                w,
                "    ip daddr {at} udp dport {port} @th,96,24 {} drop",
                s.vni
            );
        } else {
            let hosts = hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>();
            let _ = writeln!(
                w,
                "    ip daddr {at} udp dport {port} @th,96,24 {} ip saddr != {{ {} }} drop",
                s.vni,
                hosts.join(", ")
            );
        }
    }
    let carried: Vec<String> = segments.iter().map(|s| s.vni.to_string()).collect();
    if carried.is_empty() {
        let _ = writeln!(w, "    udp dport {port} drop");
    } else {
        let _ = writeln!(
            w,
            "    ip daddr {at} udp dport {port} @th,96,24 != {{ {} }} drop",
            carried.join(", ")
        );
    }
}

/// `inet gpuaas` / `forward`: a segment's bridged frames (under br_netfilter) were judged by
/// the bridge table; nothing is routed into or out of a segment.
pub fn inet_forward(w: &mut String, segments: &[Segment]) {
    for s in segments {
        let b = s.bridge();
        let _ = writeln!(w, "    iifname \"{b}\" oifname \"{b}\" accept");
    }
    let _ = writeln!(w, "    iifname \"gpb*\" drop\n    oifname \"gpb*\" drop");
}

/// Makes the host's segment devices what `segments` say: each bridge and VXLAN device exists
/// and is up, each VXLAN device forwards to exactly its remote members, and the devices of
/// segments no longer carried are gone.
pub fn apply(segments: &[Segment], vtep: Option<&Vtep>) -> Result<(), String> {
    for s in segments {
        ensure_bridge(&s.bridge())?;
        if let Some(vtep) = vtep {
            ensure_vxlan(s, vtep)?;
            sync_entries(s)?;
        }
    }
    remove_stale(segments, vtep.is_some())
}

fn ensure_bridge(b: &str) -> Result<(), String> {
    if !link_exists(b) {
        run("ip", &["link", "add", b, "type", "bridge"])?;
    }
    // No address, no ARP and no IPv6: the host is nobody on a tenant's segment.
    let v6 = format!("/proc/sys/net/ipv6/conf/{b}/disable_ipv6");
    if std::path::Path::new(&v6).exists() {
        std::fs::write(&v6, "1").map_err(|e| format!("{v6}: {e}"))?;
    }
    run(
        "ip",
        &[
            "link",
            "set",
            "dev",
            b,
            "arp",
            "off",
            "mtu",
            &PRIVATE_MTU.to_string(),
            "up",
        ],
    )
}

fn ensure_vxlan(s: &Segment, vtep: &Vtep) -> Result<(), String> {
    let (vx, b) = (s.vxlan(), s.bridge());
    if !link_exists(&vx) {
        let (vni, local, port) = (
            s.vni.to_string(),
            vtep.address.to_string(),
            identity::VXLAN_PORT.to_string(),
        );
        run(
            "ip",
            &[
                "link",
                "add",
                &vx,
                "type",
                "vxlan",
                "id",
                &vni,
                "local",
                &local,
                "dstport",
                &port,
                "dev",
                &vtep.device,
                "nolearning",
                "proxy",
            ],
        )?;
    }
    let mtu = PRIVATE_MTU.to_string();
    run(
        "ip",
        &["link", "set", "dev", &vx, "mtu", &mtu, "master", &b, "up"],
    )
}

/// The VXLAN device's forwarding and neighbour entries: exactly the segment's remote members.
fn sync_entries(s: &Segment) -> Result<(), String> {
    let vx = s.vxlan();
    let fdb = s.remote.iter().map(|r| (r.mac.clone(), r.vtep.to_string()));
    sync(fdb_entries(&vx)?, fdb.collect(), |(mac, dst), add| {
        let verb = if add { "replace" } else { "del" };
        let mut args = vec!["fdb", verb, mac, "dev", &vx, "dst", dst, "self"];
        if add {
            args.push("permanent");
        }
        run("bridge", &args)
    })?;
    let neigh = s
        .remote
        .iter()
        .map(|r| (r.address.to_string(), r.mac.clone()));
    sync(neigh_entries(&vx)?, neigh.collect(), |(ip, mac), add| {
        if add {
            run(
                "ip",
                &[
                    "neigh",
                    "replace",
                    ip,
                    "lladdr",
                    mac,
                    "dev",
                    &vx,
                    "nud",
                    "permanent",
                ],
            )
        } else {
            run("ip", &["neigh", "del", ip, "dev", &vx])
        }
    })
}

/// Removes what `have` has and `want` has not, then adds what `want` adds (`apply(entry,
/// add)`), so that a device's entries become exactly `want`.
fn sync(
    have: BTreeSet<(String, String)>,
    want: BTreeSet<(String, String)>,
    apply: impl Fn((&str, &str), bool) -> Result<(), String>,
) -> Result<(), String> {
    for (a, b) in have.difference(&want) {
        apply((a, b), false)?;
    }
    for (a, b) in want.difference(&have) {
        apply((a, b), true)?;
    }
    Ok(())
}

/// The device's own (`self`) forwarding entries with a destination: (MAC, endpoint).
fn fdb_entries(vx: &str) -> Result<BTreeSet<(String, String)>, String> {
    Ok(first_and_after(
        &crate::image::run("bridge", &["fdb", "show", "dev", vx])?,
        "dst",
    ))
}

/// The device's neighbour entries: (address, MAC).
fn neigh_entries(vx: &str) -> Result<BTreeSet<(String, String)>, String> {
    Ok(first_and_after(
        &crate::image::run("ip", &["-4", "neigh", "show", "dev", vx])?,
        "lladdr",
    ))
}

/// Of each line of `ip`'s or `bridge`'s listing that has the word `key`: its first word and
/// the word after `key`.
fn first_and_after(listing: &str, key: &str) -> BTreeSet<(String, String)> {
    listing
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = w.iter().position(|x| *x == key)?;
            Some((w.first()?.to_string(), w.get(at + 1)?.to_string()))
        })
        .collect()
}

/// Deletes the segment devices of segments no longer carried (and every VXLAN device when the
/// host has no endpoint).
fn remove_stale(segments: &[Segment], tunnel: bool) -> Result<(), String> {
    let mut keep: BTreeSet<String> = segments.iter().map(Segment::bridge).collect();
    if tunnel {
        keep.extend(segments.iter().map(Segment::vxlan));
    }
    let out = crate::image::run("ip", &["-o", "link", "show"])?;
    for line in out.lines() {
        // `7: gpb4096: <BROADCAST,…>` or `8: gpx4096@eth1: …`
        let Some(name) = line.split(": ").nth(1) else {
            continue;
        };
        let name = name.split('@').next().unwrap_or(name);
        let ours = ["gpb", "gpx"].iter().any(|p| {
            name.strip_prefix(p)
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        });
        if ours && !keep.contains(name) {
            run("ip", &["link", "del", "dev", name])?;
        }
    }
    Ok(())
}

/// A fixed command line whose output nobody reads.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    crate::image::run(program, args).map(drop)
}
