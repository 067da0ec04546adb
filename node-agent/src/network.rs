//! The slot network of a host: one bridge with the host at the gateway address, DHCP with one
//! static entry per approved slot and no dynamic range, NAT out of the uplink, each running
//! allocation's SSH and published ports forwarded from the host's public address, and
//! east-west traffic between guests denied unless both are in one group (a project that
//! allows it).
//!
//! Everything is *rendered* from one [`NetState`] (the approved slots and the leases' network
//! plans) by pure functions, and applied whole: the nftables ruleset replaces the agent's
//! tables in one `nft -f` transaction, dnsmasq rereads its host file. What is in force is
//! therefore always exactly what the state says, and applying twice changes nothing, so a
//! restarted agent converges by applying again.
//!
//! The rules, by where a packet meets them:
//! - `bridge gpuaas` / `prerouting`: a frame enters the bridge only from an approved slot's
//!   port, only with that slot's MAC, IPv4 or ARP only, from that slot's IP (or `0.0.0.0` to
//!   DHCP), and never addressed to the host's MAC but to another guest's IP (no routing around
//!   the bridge's own rules).
//! - `bridge gpuaas` / `forward`: guest to guest, dropped unless both ports belong to one
//!   group, or the host DNAT'd it (a published port reached through the public address).
//!   Broadcasts and ARP are forwarded port by port, so they are dropped the same way.
//! - `inet gpuaas` / `input`: from the bridge, the host answers DHCP, DNS, the telemetry sink
//!   and ping at the gateway address; nothing else of the host is reachable (its other
//!   addresses, the agent, management services).
//! - `inet gpuaas` / `forward`: into the slot network only what a published port's DNAT or an
//!   existing connection let in; out of it only through the uplink, never to the blocked
//!   destinations (private and link-local ranges by default: the host's management network,
//!   the control plane).
//! - `ip gpuaas_nat`: DNAT of each public port to its guest, masquerade out of the uplink;
//!   and a guest reaching a published port of another guest on this host through the public
//!   address (a hairpin) is masqueraded as the gateway, so the answer comes back through the
//!   host like any other published port's, rather than straight across the bridge, where
//!   guests of different groups are kept apart. Published ports answer every source alike.
//!
//! Two implementations of [`SlotNetwork`]: [`HostNetwork`] applies with `ip`, `nft` and
//! `dnsmasq`; [`SimulatedNetwork`] (simulated hosts) only writes what it would apply.

use std::collections::BTreeSet;
use std::fmt::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use agent_protocol::{Overlay, PlannedSlot, PrivateNic, PublishedPort, identity};

use crate::overlay::{self, Segment, Vtep};

/// The bridge every slot NIC joins.
pub use crate::domain::BRIDGE;

/// The MAC the agent gives the bridge (the guests' gateway MAC). Locally administered, and the
/// same on every host: each host's slot network is its own L2 segment.
pub const BRIDGE_MAC: &str = "52:54:00:00:00:01";

/// Destinations guests never reach through the uplink unless the operator says otherwise:
/// private, shared, loopback and link-local ranges, where the host's management network and
/// the control plane live.
pub const DEFAULT_BLOCKED_EGRESS: [&str; 6] = [
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
];

/// The host's side of the slot network (from the agent's settings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetConfig {
    /// The interface guests' traffic leaves by (NAT) and public ports arrive on.
    pub uplink: String,
    /// The host's address on the uplink, where public ports are forwarded from.
    pub public_address: Ipv4Addr,
    /// The telemetry sink's port at the gateway address.
    pub telemetry_port: u16,
    /// CIDRs guests may not reach through the uplink.
    pub blocked_egress: Vec<String>,
    /// Where this host's private segments meet other hosts' ([`crate::overlay`]); without
    /// one, a segment stays on this host.
    pub vtep: Option<Vtep>,
}

impl NetConfig {
    pub fn new(uplink: &str, public_address: Ipv4Addr, telemetry_port: u16) -> Self {
        Self {
            uplink: uplink.into(),
            public_address,
            telemetry_port,
            blocked_egress: DEFAULT_BLOCKED_EGRESS.map(String::from).to_vec(),
            vtep: None,
        }
    }

    /// Refuses names and ranges that must never reach a ruleset.
    pub fn check(&self) -> Result<(), String> {
        interface_ok(&self.uplink)?;
        if self.uplink == BRIDGE {
            return Err(format!("the uplink can't be the slot bridge {BRIDGE}"));
        }
        for c in &self.blocked_egress {
            cidr_ok(c)?;
        }
        if let Some(v) = &self.vtep {
            interface_ok(&v.device)?;
            if v.device == BRIDGE || v.address.is_loopback() || v.address.is_unspecified() {
                return Err(format!(
                    "{} on {} can't be the tunnel endpoint",
                    v.address, v.device
                ));
            }
        }
        Ok(())
    }
}

/// One approved slot's NIC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotNic {
    pub slot_index: u32,
    pub mac: String,
    pub ip: Ipv4Addr,
}

/// One allocation on the network: the NIC it is reached on (its first slot's), and its plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    pub allocation_id: String,
    pub slot_index: u32,
    pub ssh_port: Option<u16>,
    pub published: Vec<PublishedPort>,
    pub east_west_group: Option<String>,
    /// Its NIC on its project's segment across hosts.
    pub private: Option<PrivateNic>,
}

/// Everything the rendered configuration follows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetState {
    /// Every approved slot, by index.
    pub slots: Vec<SlotNic>,
    /// Every allocation holding slots for a provision (not one being released).
    pub attached: Vec<Attachment>,
    /// The members of the segments of this host's guests, on every host (the control
    /// plane's last list).
    pub overlay: Overlay,
}

impl NetState {
    pub fn from_approved(approved: &[PlannedSlot]) -> Result<Self, String> {
        let mut slots = approved
            .iter()
            .map(|s| {
                Ok(SlotNic {
                    slot_index: s.slot_index,
                    mac: mac_ok(&s.mac_address)?.to_string(),
                    ip: s
                        .ip_address
                        .parse()
                        .map_err(|_| format!("{:?} is not an IPv4 address", s.ip_address))?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        slots.sort_by_key(|s| s.slot_index);
        Ok(Self {
            slots,
            attached: Vec::new(),
            overlay: Overlay::default(),
        })
    }

    /// Refuses a state whose forwarding would be ambiguous: a public port forwarded twice, a
    /// port 0, an attachment on a slot that is not approved.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for a in &self.attached {
            if !self.slots.iter().any(|s| s.slot_index == a.slot_index) {
                return Err(format!(
                    "allocation {} is attached to slot {}, which is not approved",
                    a.allocation_id, a.slot_index
                ));
            }
            if a.published.iter().any(|p| p.guest_port == 0) {
                return Err(format!("allocation {}: guest port 0", a.allocation_id));
            }
            let ports = a
                .ssh_port
                .into_iter()
                .chain(a.published.iter().map(|p| p.public_port));
            for port in ports {
                if port == 0 {
                    return Err(format!("allocation {}: port 0", a.allocation_id));
                }
                if !seen.insert(port) {
                    return Err(format!(
                        "public port {port} is forwarded twice (allocation {})",
                        a.allocation_id
                    ));
                }
            }
        }
        Ok(())
    }
}

fn interface_ok(name: &str) -> Result<&str, String> {
    if (1..=15).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        Ok(name)
    } else {
        Err(format!("{name:?} is not an interface name"))
    }
}

fn mac_ok(mac: &str) -> Result<&str, String> {
    let parts: Vec<&str> = mac.split(':').collect();
    if parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
    {
        Ok(mac)
    } else {
        Err(format!("{mac:?} is not a MAC address"))
    }
}

fn cidr_ok(cidr: &str) -> Result<(), String> {
    let refuse = || format!("{cidr:?} is not an IPv4 network (a.b.c.d/len)");
    let (addr, len) = cidr.split_once('/').ok_or_else(refuse)?;
    addr.parse::<Ipv4Addr>().map_err(|_| refuse())?;
    match len.parse::<u8>() {
        Ok(0..=32) => Ok(()),
        _ => Err(refuse()),
    }
}

/// The nftables ruleset for `state`: a file `nft -f` applies in one transaction, replacing
/// the agent's three tables (and touching nothing else of the host's).
pub fn render_nftables(cfg: &NetConfig, state: &NetState) -> Result<String, String> {
    cfg.check()?;
    state.check()?;
    let mut o = String::new();
    let w = &mut o;
    let _ = writeln!(
        w,
        "# Rendered by gpu-node-agent from the approved slots and leases; applied whole with `nft -f`."
    );
    for t in ["bridge gpuaas", "inet gpuaas", "ip gpuaas_nat"] {
        // Declaring, then deleting, makes the deletion valid on a host without the table.
        let _ = writeln!(w, "table {t}\ndelete table {t}");
    }
    let segments = overlay::segments(state, cfg.vtep.as_ref())?;
    bridge_table(w, state, &segments, cfg.vtep.is_some());
    inet_table(w, cfg, &segments);
    nat_table(w, cfg, state);
    Ok(o)
}

/// `bridge gpuaas`: each slot's port sends only as its own MAC and IP; guests reach each
/// other only as east-west pairs or through a published port.
fn bridge_table(w: &mut String, state: &NetState, segments: &[Segment], tunnel: bool) {
    let gw = identity::GATEWAY;
    let net = identity::SLOT_NETWORK;
    let ports: Vec<String> = state
        .slots
        .iter()
        .map(|s| identity::slot_interface(s.slot_index))
        .chain(overlay::ports(segments, tunnel))
        .map(|p| format!("\"{p}\""))
        .collect();

    let _ = writeln!(w, "\ntable bridge gpuaas {{");
    let _ = writeln!(w, "  chain prerouting {{");
    let _ = writeln!(
        w,
        "    type filter hook prerouting priority filter; policy accept;"
    );
    if ports.is_empty() {
        let _ = writeln!(w, "    # no approved slots: nothing enters the bridge");
        let _ = writeln!(w, "    drop");
    } else {
        let _ = writeln!(w, "    iifname != {{ {} }} drop", ports.join(", "));
    }
    for s in &state.slots {
        let port = identity::slot_interface(s.slot_index);
        let (mac, ip) = (&s.mac, s.ip);
        let _ = writeln!(w, "    # slot {}: {mac}, {ip}", s.slot_index);
        let _ = writeln!(w, "    iifname \"{port}\" ether saddr != {mac} drop");
        let _ = writeln!(w, "    iifname \"{port}\" ether type != {{ ip, arp }} drop");
        let _ = writeln!(
            w,
            "    iifname \"{port}\" arp saddr ether != {mac} drop\n    iifname \"{port}\" arp saddr ip != {ip} drop"
        );
        let _ = writeln!(
            w,
            "    iifname \"{port}\" ip saddr 0.0.0.0 udp sport 68 udp dport 67 accept"
        );
        let _ = writeln!(w, "    iifname \"{port}\" ip saddr != {ip} drop");
    }
    overlay::bridge_prerouting(w, segments, tunnel);
    let _ = writeln!(
        w,
        "    ether daddr {BRIDGE_MAC} ip daddr {net} ip daddr != {gw} drop"
    );
    let _ = writeln!(w, "  }}");
    let _ = writeln!(w, "  chain forward {{");
    let _ = writeln!(
        w,
        "    type filter hook forward priority filter; policy drop;"
    );
    // Under br_netfilter, a guest's connection to another guest's published port through the
    // public address is DNAT'd before the bridge decides, and then bridged port to port: it
    // is let through here as it is from outside. The bridge family has no conntrack of its
    // own, so the mark the DNAT put on the connection is copied to its packets
    // (`inet gpuaas` / `prerouting`). Only the host's DNAT marks a connection so.
    let _ = writeln!(w, "    meta mark {PUBLISHED_MARK:#x} accept");
    for (a, b) in east_west_pairs(state) {
        let _ = writeln!(
            w,
            "    iifname \"{}\" oifname \"{}\" accept",
            identity::slot_interface(a),
            identity::slot_interface(b)
        );
    }
    overlay::bridge_forward(w, segments, tunnel);
    let _ = writeln!(w, "  }}\n}}");
}

/// `inet gpuaas`: what guests may reach on the host (DHCP, DNS, telemetry, ping), and where
/// their traffic may go (the uplink, never a blocked range).
fn inet_table(w: &mut String, cfg: &NetConfig, segments: &[Segment]) {
    let gw = identity::GATEWAY;
    let blocked = cfg.blocked_egress.join(", ");
    let up = &cfg.uplink;
    let _ = writeln!(w, "\ntable inet gpuaas {{");
    if !blocked.is_empty() {
        let _ = writeln!(
            w,
            "  set blocked_egress {{\n    type ipv4_addr; flags interval;\n    elements = {{ {blocked} }}\n  }}"
        );
    }
    let _ = writeln!(w, "  chain prerouting {{");
    let _ = writeln!(
        w,
        "    type filter hook prerouting priority filter; policy accept;"
    );
    let _ = writeln!(w, "    ct mark {PUBLISHED_MARK:#x} meta mark set ct mark");
    let _ = writeln!(w, "  }}");
    let _ = writeln!(w, "  chain input {{");
    let _ = writeln!(
        w,
        "    type filter hook input priority filter; policy accept;"
    );
    let _ = writeln!(w, "    iifname \"{BRIDGE}\" jump from_guests");
    overlay::inet_input(w, segments, cfg.vtep.as_ref());
    let _ = writeln!(w, "  }}");
    let _ = writeln!(w, "  chain from_guests {{");
    let _ = writeln!(w, "    ct state established,related accept");
    let _ = writeln!(w, "    udp sport 68 udp dport 67 accept");
    let _ = writeln!(w, "    ip daddr {gw} udp dport 53 accept");
    let _ = writeln!(w, "    ip daddr {gw} tcp dport 53 accept");
    let _ = writeln!(
        w,
        "    ip daddr {gw} tcp dport {} accept",
        cfg.telemetry_port
    );
    let _ = writeln!(w, "    ip daddr {gw} icmp type echo-request accept");
    let _ = writeln!(w, "    drop");
    let _ = writeln!(w, "  }}");
    let _ = writeln!(w, "  chain forward {{");
    let _ = writeln!(
        w,
        "    type filter hook forward priority filter; policy accept;"
    );
    let _ = writeln!(
        w,
        "    # bridged frames (under br_netfilter) were judged by table bridge gpuaas"
    );
    let _ = writeln!(w, "    iifname \"{BRIDGE}\" oifname \"{BRIDGE}\" accept");
    overlay::inet_forward(w, segments);
    let _ = writeln!(
        w,
        "    oifname \"{BRIDGE}\" ct state established,related accept"
    );
    let _ = writeln!(w, "    oifname \"{BRIDGE}\" ct status dnat accept");
    let _ = writeln!(w, "    oifname \"{BRIDGE}\" drop");
    let _ = writeln!(w, "    iifname \"{BRIDGE}\" oifname != \"{up}\" drop");
    if !blocked.is_empty() {
        let _ = writeln!(w, "    iifname \"{BRIDGE}\" ip daddr @blocked_egress drop");
    }
    let _ = writeln!(w, "    iifname \"{BRIDGE}\" meta nfproto ipv4 accept");
    let _ = writeln!(w, "    iifname \"{BRIDGE}\" drop");
    let _ = writeln!(w, "  }}\n}}");
}

/// `ip gpuaas_nat`: published ports forwarded to their guests (marked), guests masqueraded out.
fn nat_table(w: &mut String, cfg: &NetConfig, state: &NetState) {
    let net = identity::SLOT_NETWORK;
    let up = &cfg.uplink;
    let _ = writeln!(w, "\ntable ip gpuaas_nat {{");
    let _ = writeln!(w, "  chain prerouting {{");
    let _ = writeln!(
        w,
        "    type nat hook prerouting priority dstnat; policy accept;"
    );
    let public = cfg.public_address;
    for (public_port, ip, guest_port) in forwards(state) {
        let _ = writeln!(
            w,
            "    ip daddr {public} tcp dport {public_port} ct mark set {PUBLISHED_MARK:#x} dnat to {ip}:{guest_port}"
        );
    }
    let _ = writeln!(w, "  }}");
    let _ = writeln!(w, "  chain postrouting {{");
    let _ = writeln!(
        w,
        "    type nat hook postrouting priority srcnat; policy accept;"
    );
    let _ = writeln!(w, "    ip saddr {net} oifname \"{up}\" masquerade");
    let _ = writeln!(
        w,
        "    ip saddr {net} oifname \"{BRIDGE}\" ct status dnat masquerade"
    );
    let _ = writeln!(w, "  }}\n}}");
}

/// The connection mark of a published port's connections (set with their DNAT), and the packet
/// mark their packets carry to the bridge's rules: "gpua".
pub const PUBLISHED_MARK: u32 = 0x6770_7561;

/// Every (public port, guest IP, guest port) forwarded, by public port.
pub fn forwards(state: &NetState) -> Vec<(u16, Ipv4Addr, u16)> {
    let mut f: Vec<(u16, Ipv4Addr, u16)> = state
        .attached
        .iter()
        .filter_map(|a| {
            let ip = state
                .slots
                .iter()
                .find(|s| s.slot_index == a.slot_index)?
                .ip;
            Some(
                a.ssh_port
                    .map(|p| (p, ip, 22))
                    .into_iter()
                    .chain(
                        a.published
                            .iter()
                            .map(move |p| (p.public_port, ip, p.guest_port)),
                    )
                    .collect::<Vec<_>>(),
            )
        })
        .flatten()
        .collect();
    f.sort();
    f
}

/// The ordered pairs of slot ports that may exchange frames: both attached, in one group.
pub fn east_west_pairs(state: &NetState) -> Vec<(u32, u32)> {
    let mut pairs = Vec::new();
    for a in &state.attached {
        for b in &state.attached {
            if a.allocation_id != b.allocation_id
                && a.east_west_group.is_some()
                && a.east_west_group == b.east_west_group
            {
                pairs.push((a.slot_index, b.slot_index));
            }
        }
    }
    pairs.sort();
    pairs.dedup();
    pairs
}

/// dnsmasq's settings (`dnsmasq.conf`) for a host whose files live in `dir`: DHCP only for the
/// static entries of `dhcp-hosts` (no dynamic range), DNS forwarded for guests, listening
/// only at the gateway.
pub fn render_dnsmasq_conf(dir: &Path) -> Result<String, String> {
    let d = dir
        .to_str()
        .filter(|d| !d.contains(['\n', '\r']))
        .ok_or("the network state directory is not a plain UTF-8 path")?;
    let gw = identity::GATEWAY;
    Ok(format!(
        "# Rendered by gpu-node-agent.\n\
         interface={BRIDGE}\n\
         except-interface=lo\n\
         bind-interfaces\n\
         listen-address={gw}\n\
         dhcp-range=10.100.0.0,static,255.255.255.0,12h\n\
         dhcp-hostsfile={d}/dhcp-hosts\n\
         dhcp-authoritative\n\
         dhcp-option=option:router,{gw}\n\
         dhcp-option=option:dns-server,{gw}\n\
         dhcp-leasefile={d}/dnsmasq.leases\n\
         pid-file={d}/dnsmasq.pid\n\
         no-hosts\n\
         domain-needed\n\
         bogus-priv\n"
    ))
}

/// One static DHCP entry per approved slot: its MAC gets its IP, and nothing else gets any.
pub fn render_dhcp_hosts(state: &NetState) -> String {
    state
        .slots
        .iter()
        .map(|s| format!("{},{},slot-{}\n", s.mac, s.ip, s.slot_index))
        .collect()
}

/// Makes the host's slot network what `state` says.
pub trait SlotNetwork: Send + Sync {
    /// For logs.
    fn describe(&self) -> String;
    /// What must exist before the agent listens on the slot network (the bridge, at the
    /// gateway address).
    fn prepare(&self) -> Result<(), String> {
        Ok(())
    }
    fn apply(&self, state: &NetState) -> Result<(), String>;
}

/// Writes `text` to `path` through a temporary file and a rename; whether it changed.
fn write_file(path: &Path, text: &str) -> Result<bool, String> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(text) {
        return Ok(false);
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(true)
}

/// A simulated host's network: renders and keeps what a real host would apply
/// (`{dir}/ruleset.nft`, `dnsmasq.conf`, `dhcp-hosts`), and applies nothing.
pub struct SimulatedNetwork {
    pub dir: PathBuf,
    pub config: NetConfig,
}

impl SimulatedNetwork {
    pub fn new(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.join("network"),
            config: NetConfig::new("uplink0", Ipv4Addr::new(192, 0, 2, 1), 9400),
        }
    }
}

impl SlotNetwork for SimulatedNetwork {
    fn describe(&self) -> String {
        format!("simulated (rendered into {})", self.dir.display())
    }
    fn apply(&self, state: &NetState) -> Result<(), String> {
        let ruleset = render_nftables(&self.config, state)?;
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        write_file(&self.dir.join("ruleset.nft"), &ruleset)?;
        write_file(
            &self.dir.join("dnsmasq.conf"),
            &render_dnsmasq_conf(&self.dir)?,
        )?;
        write_file(&self.dir.join("dhcp-hosts"), &render_dhcp_hosts(state))?;
        Ok(())
    }
}

/// A real host's network, applied with `ip`, `nft` and `dnsmasq` in the agent's network
/// namespace.
pub struct HostNetwork {
    /// Where the ruleset, dnsmasq's files and its pid live.
    pub dir: PathBuf,
    pub config: NetConfig,
}

impl HostNetwork {
    pub fn new(state_dir: &Path, config: NetConfig) -> Result<Self, String> {
        config.check()?;
        Ok(Self {
            dir: state_dir.join("network"),
            config,
        })
    }

    fn bridge(&self) -> Result<(), String> {
        if !link_exists(BRIDGE) {
            run("ip", &["link", "add", BRIDGE, "type", "bridge"])?;
        }
        run("ip", &["link", "set", "dev", BRIDGE, "address", BRIDGE_MAC])?;
        let cidr = format!("{}/24", identity::GATEWAY);
        run("ip", &["address", "replace", &cidr, "dev", BRIDGE])?;
        run("ip", &["link", "set", "dev", BRIDGE, "up"])?;
        // Routing for NAT and the forwarded ports; no redirects that would tell a guest
        // about another guest.
        for (key, value) in [
            ("net/ipv4/ip_forward", "1"),
            ("net/ipv4/conf/gpuaas0/send_redirects", "0"),
        ] {
            let path = Path::new("/proc/sys").join(key);
            std::fs::write(&path, value).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(())
    }

    fn dnsmasq(&self, hosts_changed: bool, conf_changed: bool) -> Result<(), String> {
        let pid_file = self.dir.join("dnsmasq.pid");
        let running = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
            .filter(|pid| is_dnsmasq(*pid));
        match running {
            Some(pid) if conf_changed => {
                run("kill", &["-TERM", &pid.to_string()])?;
                wait_gone(pid);
            }
            Some(pid) => {
                if hosts_changed {
                    // dnsmasq rereads dhcp-hostsfile on SIGHUP.
                    run("kill", &["-HUP", &pid.to_string()])?;
                }
                return Ok(());
            }
            None => {}
        }
        let conf = self.dir.join("dnsmasq.conf");
        run("dnsmasq", &[&format!("--conf-file={}", conf.display())])
    }
}

impl SlotNetwork for HostNetwork {
    fn describe(&self) -> String {
        format!(
            "host (bridge {BRIDGE}, uplink {}, public {})",
            self.config.uplink, self.config.public_address
        )
    }
    fn prepare(&self) -> Result<(), String> {
        self.bridge()
    }
    fn apply(&self, state: &NetState) -> Result<(), String> {
        let ruleset = render_nftables(&self.config, state)?;
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        self.bridge()?;
        // The segments' devices before the rules that name them; a port the rules do not name
        // yet sends nothing (the bridge table drops every port it does not know).
        let vtep = self.config.vtep.as_ref();
        overlay::apply(&overlay::segments(state, vtep)?, vtep)?;
        let path = self.dir.join("ruleset.nft");
        write_file(&path, &ruleset)?;
        run(
            "nft",
            &["-f", path.to_str().ok_or("state dir is not UTF-8")?],
        )?;
        let conf_changed = write_file(
            &self.dir.join("dnsmasq.conf"),
            &render_dnsmasq_conf(&self.dir)?,
        )?;
        let hosts_changed = write_file(&self.dir.join("dhcp-hosts"), &render_dhcp_hosts(state))?;
        self.dnsmasq(hosts_changed, conf_changed)
    }
}

/// Whether the host has an interface named `dev` (when `ip` can't say, it is created, and
/// that step names the problem).
pub(crate) fn link_exists(dev: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", "dev", dev])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn is_dnsmasq(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "dnsmasq")
}

fn wait_gone(pid: u32) {
    for _ in 0..50 {
        if !is_dnsmasq(pid) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> NetState {
        let slot = |i: u32| SlotNic {
            slot_index: i,
            mac: identity::mac_address("n", i),
            ip: identity::ip_address(i).parse().unwrap(),
        };
        let attach = |a: &str, i: u32, group: Option<&str>| Attachment {
            allocation_id: a.into(),
            slot_index: i,
            ssh_port: identity::public_port(22000, i, 0),
            published: vec![],
            east_west_group: group.map(String::from),
            private: None,
        };
        NetState {
            overlay: Overlay::default(),
            slots: (0..4).map(slot).collect(),
            attached: vec![
                attach("a", 0, Some("p1")),
                attach("b", 1, Some("p1")),
                attach("c", 2, None),
                attach("d", 3, Some("p2")),
            ],
        }
    }

    #[test]
    fn only_guests_of_one_group_are_paired() {
        assert_eq!(east_west_pairs(&state()), vec![(0, 1), (1, 0)]);
    }

    #[test]
    fn a_public_port_is_forwarded_once_or_the_state_is_refused() {
        let mut s = state();
        s.attached[1].published.push(PublishedPort {
            public_port: 22000,
            guest_port: 8888,
        });
        let e =
            render_nftables(&NetConfig::new("eth0", Ipv4Addr::LOCALHOST, 9400), &s).unwrap_err();
        assert!(e.contains("public port 22000 is forwarded twice"), "{e}");
        let mut s = state();
        s.attached[0].slot_index = 9;
        assert!(s.check().unwrap_err().contains("not approved"));
    }

    #[test]
    fn hostile_names_never_reach_the_ruleset() {
        let mut cfg = NetConfig::new("eth0\"; flush ruleset", Ipv4Addr::LOCALHOST, 9400);
        assert!(cfg.check().unwrap_err().contains("not an interface name"));
        cfg.uplink = "eth0".into();
        cfg.blocked_egress.push("10.0.0.0/8 } drop".into());
        assert!(cfg.check().unwrap_err().contains("not an IPv4 network"));
        cfg.blocked_egress.pop();
        cfg.uplink = BRIDGE.into();
        assert!(cfg.check().is_err());
        assert!(mac_ok("52:54:00:00:00:zz").is_err());
    }
}
