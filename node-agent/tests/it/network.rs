//! The slot network with real packets. A "host" network namespace gets the bridge, the
//! nftables ruleset and dnsmasq exactly as the agent renders and applies them while it
//! provisions and releases (a simulated driver stands in for the hypervisor only); "guest"
//! namespaces hang off the bridge on veth pairs named like the VMs' taps, with the slots'
//! MACs, and take their addresses by DHCP (busybox `udhcpc`); an "outside" namespace is the
//! tenant's laptop and the internet. Every namespace is deleted at the end, also on failure.
//!
//! Needs root, `ip`, `nft`, `dnsmasq` and `busybox`; without them the test says SKIPPED and
//! why.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_protocol::{NetworkPlan, PlannedSlot, PublishedPort, ReleasePlan, identity};
use node_agent::agent::Agent;
use node_agent::network::{
    Attachment, DEFAULT_BLOCKED_EGRESS, HostNetwork, NetConfig, NetState, SlotNetwork,
    render_dhcp_hosts, render_dnsmasq_conf, render_nftables,
};

use crate::support;
use support::*;

const PUBLIC: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const OUTSIDE: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
/// An address outside that guests must not reach (standing in for the control plane).
const FORBIDDEN: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 200);
const BASE: u16 = 22000;

/// Why this machine can't run the test, if it can't.
pub(crate) fn missing() -> Option<String> {
    if sh(&["id", "-u"]).trim() != "0" {
        return Some("network namespaces and nftables need root".into());
    }
    for tool in ["ip", "nft", "dnsmasq", "busybox"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!(
                "{tool} is not installed (apt-get install iproute2 nftables dnsmasq-base busybox)"
            ));
        }
    }
    None
}

pub(crate) fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether a command exits 0.
pub(crate) fn ok(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The namespaces of one run, deleted (with the dnsmasq started in them) when dropped.
pub(crate) struct Lab {
    pub(crate) prefix: String,
    pub(crate) names: Vec<String>,
    pub(crate) state_dir: std::path::PathBuf,
    pub(crate) stop: Arc<AtomicBool>,
}

impl Lab {
    pub(crate) fn ns(&self, role: &str) -> String {
        format!("{}-{role}", self.prefix)
    }
    pub(crate) fn add(&mut self, role: &str) -> String {
        let name = self.ns(role);
        sh(&["ip", "netns", "add", &name]);
        self.names.push(name.clone());
        sh(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        name
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Ok(pid) = std::fs::read_to_string(self.state_dir.join("network/dnsmasq.pid")) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

/// Runs `f` on a thread inside namespace `ns` (sockets it opens and processes it starts live
/// there).
pub(crate) fn in_ns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(ns);
            f()
        })
        .join()
        .unwrap()
    })
}

/// Moves this thread into namespace `ns` (`setns(2)`: the one unsafe call of the tests, as
/// no safe wrapper is in the dependency set).
#[allow(unsafe_code)]
pub(crate) fn enter(ns: &str) {
    let file = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
    // SAFETY: a valid namespace fd; this thread alone moves.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {ns}: {}", std::io::Error::last_os_error());
}

/// A TCP listener in `ns` that answers every connection with `{name}:{port} from {peer}`.
pub(crate) fn listen(ns: &str, addr: Ipv4Addr, port: u16, name: &str, stop: &Arc<AtomicBool>) {
    let (ns, name, stop) = (ns.to_string(), name.to_string(), stop.clone());
    let (ready_tx, ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        enter(&ns);
        let l = TcpListener::bind((addr, port)).unwrap();
        l.set_nonblocking(true).unwrap();
        ready_tx.send(()).unwrap();
        while !stop.load(Ordering::SeqCst) {
            match l.accept() {
                Ok((mut c, peer)) => {
                    let _ = writeln!(c, "{name}:{port} from {}", peer.ip());
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    ready.recv().unwrap();
}

/// What a connection from `ns` (bound to `from`, if given) to `to:port` reads, or `None` if
/// nothing answers within a second.
pub(crate) fn reach(ns: &str, from: Option<Ipv4Addr>, to: Ipv4Addr, port: u16) -> Option<String> {
    in_ns(ns, || {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
        if let Some(from) = from {
            sock.bind(&SocketAddr::V4(SocketAddrV4::new(from, 0)).into())
                .unwrap();
        }
        sock.connect_timeout(
            &SocketAddr::V4(SocketAddrV4::new(to, port)).into(),
            Duration::from_millis(1000),
        )
        .ok()?;
        let mut c: TcpStream = sock.into();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).ok()?;
        Some(s.trim().to_string())
    })
}

/// Whether a UDP datagram sent from `from_ns` to `to:5353` arrives in `to_ns` (one-way:
/// a packet that gets in even though no answer could get back).
fn udp_arrives(from_ns: &str, to_ns: &str, to: Ipv4Addr) -> bool {
    udp_arrives_from(from_ns, Ipv4Addr::UNSPECIFIED, to_ns, to)
}

/// [`udp_arrives`], sent from address `from`.
pub(crate) fn udp_arrives_from(from_ns: &str, from: Ipv4Addr, to_ns: &str, to: Ipv4Addr) -> bool {
    let (tx, rx) = std::sync::mpsc::channel();
    let to_ns = to_ns.to_string();
    let receiver = std::thread::spawn(move || {
        enter(&to_ns);
        let sock = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 5353)).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(1500)))
            .unwrap();
        tx.send(()).unwrap();
        let mut buf = [0u8; 64];
        sock.recv(&mut buf).is_ok()
    });
    rx.recv().unwrap();
    in_ns(from_ns, || {
        let sock = std::net::UdpSocket::bind((from, 0)).unwrap();
        for _ in 0..3 {
            let _ = sock.send_to(b"hello", (to, 5353));
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    receiver.join().unwrap()
}

pub(crate) fn guest_network(
    alloc_group: Option<&str>,
    slot: u32,
    published: &[(u16, u16)],
) -> NetworkPlan {
    NetworkPlan {
        public_host: Some("gpu-host-3.example".into()),
        ssh_port: identity::public_port(BASE, slot, 0),
        published: published
            .iter()
            .map(|&(k, guest_port)| PublishedPort {
                public_port: identity::public_port(BASE, slot, k as usize).unwrap(),
                guest_port,
            })
            .collect(),
        east_west_group: alloc_group.map(String::from),
        private: None,
    }
}

pub(crate) fn alloc_id(n: u32) -> String {
    format!("00000000-0000-4000-a000-{n:012}")
}

pub(crate) fn provision(
    agent: &Agent,
    host_ns: &str,
    n: u32,
    slot: &PlannedSlot,
    net: NetworkPlan,
    approved: &[PlannedSlot],
) {
    let mut p = plan(&alloc_id(n), vec![slot.clone()]);
    p.network = net;
    let done = in_ns(host_ns, || {
        agent.provision(&format!("task-{n}"), &p, false, approved, &mut |_| {})
    })
    .unwrap_or_else(|e| panic!("provision {n}: {e:?}"));
    assert_eq!(
        (done.ssh_host.as_str(), Some(done.ssh_port)),
        ("gpu-host-3.example", p.network.ssh_port),
        "the answer is the public SSH address"
    );
}

pub(crate) fn release(
    agent: &Agent,
    host_ns: &str,
    n: u32,
    slot: &PlannedSlot,
    approved: &[PlannedSlot],
) {
    let plan = ReleasePlan {
        allocation_id: alloc_id(n),
        slots: vec![slot.clone()],
        save_root: None,
    };
    in_ns(host_ns, || {
        agent.release(&format!("release-{n}"), &plan, false, approved, &mut |_| {})
    })
    .unwrap_or_else(|e| panic!("release {n}: {e:?}"));
}

/// Plugs a guest namespace into the host's bridge on slot `i`'s port, with `mac`.
fn plug(lab: &mut Lab, host: &str, i: u32, mac: &str) -> String {
    let g = lab.add(&format!("g{i}"));
    let port = identity::slot_interface(i);
    sh(&[
        "ip", "-n", host, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &g,
    ]);
    sh(&[
        "ip", "-n", host, "link", "set", &port, "master", "gpuaas0", "up",
    ]);
    sh(&["ip", "-n", &g, "link", "set", "eth0", "address", mac, "up"]);
    g
}

/// DHCP in `ns` with busybox's client; the address it got on eth0, if any.
fn dhcp(ns: &str, script: &Path) -> Option<Ipv4Addr> {
    let s = script.to_str().unwrap();
    let got = ok(&[
        "ip", "netns", "exec", ns, "busybox", "udhcpc", "-i", "eth0", "-n", "-q", "-f", "-t", "4",
        "-T", "1", "-s", s,
    ]);
    let addrs = sh(&["ip", "-n", ns, "-4", "-o", "addr", "show", "dev", "eth0"]);
    got.then(|| {
        addrs
            .split_whitespace()
            .skip_while(|w| *w != "inet")
            .nth(1)?
            .split('/')
            .next()?
            .parse()
            .ok()
    })
    .flatten()
}

pub(crate) fn ping(ns: &str, to: Ipv4Addr) -> bool {
    ok(&[
        "ip",
        "netns",
        "exec",
        ns,
        "busybox",
        "ping",
        "-c",
        "1",
        "-W",
        "1",
        &to.to_string(),
    ])
}

fn arping(ns: &str, to: Ipv4Addr) -> bool {
    arping_on(ns, "eth0", to)
}

/// Whether `to` answers ARP on `ns`'s interface `dev`.
pub(crate) fn arping_on(ns: &str, dev: &str, to: Ipv4Addr) -> bool {
    ok(&[
        "ip",
        "netns",
        "exec",
        ns,
        "busybox",
        "arping",
        "-f",
        "-c",
        "2",
        "-w",
        "2",
        "-I",
        dev,
        &to.to_string(),
    ])
}

#[test]
fn guests_are_reachable_only_as_published_and_never_from_each_other() {
    if let Some(why) = missing() {
        println!("SKIPPED: {why}");
        return;
    }
    let state_dir = tempdir("netlab");
    let mut lab = Lab {
        prefix: format!("gpn{}", std::process::id()),
        names: Vec::new(),
        state_dir: state_dir.clone(),
        stop: Arc::new(AtomicBool::new(false)),
    };
    let stop = lab.stop.clone();
    let host = lab.add("host");
    let outside = lab.add("out");

    // The uplink: the host at PUBLIC, the outside world at OUTSIDE and FORBIDDEN. The outside
    // has no route into 10.100.0.0/24: guests reach it only through NAT.
    sh(&[
        "ip", "-n", &host, "link", "add", "uplink0", "type", "veth", "peer", "name", "eth0",
        "netns", &outside,
    ]);
    sh(&[
        "ip",
        "-n",
        &host,
        "addr",
        "add",
        "198.51.100.1/24",
        "dev",
        "uplink0",
    ]);
    sh(&["ip", "-n", &host, "link", "set", "uplink0", "up"]);
    sh(&[
        "ip",
        "-n",
        &outside,
        "addr",
        "add",
        "198.51.100.2/24",
        "dev",
        "eth0",
    ]);
    sh(&[
        "ip",
        "-n",
        &outside,
        "addr",
        "add",
        "198.51.100.200/24",
        "dev",
        "eth0",
    ]);
    sh(&["ip", "-n", &outside, "link", "set", "eth0", "up"]);

    // The agent, on the L40S fixture, with the real network applied in the host namespace.
    let mut cfg = NetConfig::new("uplink0", PUBLIC, 9400);
    cfg.blocked_egress = DEFAULT_BLOCKED_EGRESS.map(String::from).to_vec();
    cfg.blocked_egress.push("198.51.100.192/26".into());
    let mut agent = simulated_agent(&state_dir, "pcie-l40s-4x");
    let network = HostNetwork::new(&state_dir, cfg).unwrap();
    in_ns(&host, || network.prepare()).unwrap();
    agent.network = Arc::new(network);
    let approved = approved("pcie-l40s-4x", "overwrite-verify");
    assert!(approved.len() >= 4, "the fixture has four slots");

    // Guests on slots 0–2 with their slots' MACs; a rogue on slot 3's port with another MAC.
    let guests: Vec<String> = (0..3)
        .map(|i| plug(&mut lab, &host, i, &approved[i as usize].mac_address))
        .collect();
    let rogue = plug(&mut lab, &host, 3, "52:54:00:12:34:56");

    // Tenant A's project (east-west on): allocation 1 on slot 0 publishing 8888, allocation 2
    // on slot 1. Tenant B: allocation 3 on slot 2, isolated.
    provision(
        &agent,
        &host,
        1,
        &approved[0],
        guest_network(Some("project-a"), 0, &[(1, 8888)]),
        &approved,
    );
    provision(
        &agent,
        &host,
        2,
        &approved[1],
        guest_network(Some("project-a"), 1, &[]),
        &approved,
    );
    provision(
        &agent,
        &host,
        3,
        &approved[2],
        guest_network(None, 2, &[]),
        &approved,
    );
    let ruleset = sh(&["ip", "netns", "exec", &host, "nft", "list", "ruleset"]);
    assert!(ruleset.contains("dnat to 10.100.0.10:8888"), "{ruleset}");

    // DHCP: each guest gets exactly its slot's address; the rogue MAC gets nothing.
    let script = state_dir.join("udhcpc.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\ncase \"$1\" in bound|renew)\n  ip addr flush dev \"$interface\"\n  ip addr add \"$ip/$mask\" dev \"$interface\"\n  ip route replace default via \"$router\"\n;; esac\n",
    )
    .unwrap();
    sh(&["chmod", "755", script.to_str().unwrap()]);
    let ip = |i: u32| -> Ipv4Addr { identity::ip_address(i).parse().unwrap() };
    for (i, g) in guests.iter().enumerate() {
        assert_eq!(
            dhcp(g, &script),
            Some(ip(i as u32)),
            "guest {i}'s DHCP address"
        );
    }
    assert_eq!(
        dhcp(&rogue, &script),
        None,
        "a MAC that is no slot's gets no address"
    );

    // Each guest runs an "sshd" and a notebook; the host runs its telemetry sink and an agent
    // API; the outside runs a web server that says who connected.
    for (i, g) in guests.iter().enumerate() {
        listen(g, Ipv4Addr::UNSPECIFIED, 22, &format!("slot{i}"), &stop);
        listen(g, Ipv4Addr::UNSPECIFIED, 8888, &format!("slot{i}"), &stop);
    }
    let gw: Ipv4Addr = identity::GATEWAY.parse().unwrap();
    listen(&host, gw, 9400, "telemetry", &stop);
    listen(&host, Ipv4Addr::UNSPECIFIED, 7000, "agent", &stop);
    listen(&outside, Ipv4Addr::UNSPECIFIED, 80, "web", &stop);

    // From outside: SSH and the published port through their public ports, nothing else.
    let (g0, g1, g2) = (&guests[0], &guests[1], &guests[2]);
    let from_outside = |port| reach(&outside, None, PUBLIC, port);
    assert_eq!(
        from_outside(22000).as_deref(),
        Some("slot0:22 from 198.51.100.2")
    );
    assert_eq!(
        from_outside(22001).as_deref(),
        Some("slot0:8888 from 198.51.100.2")
    );
    assert_eq!(
        from_outside(22008).as_deref(),
        Some("slot1:22 from 198.51.100.2")
    );
    assert_eq!(
        from_outside(22016).as_deref(),
        Some("slot2:22 from 198.51.100.2")
    );
    assert_eq!(from_outside(22009), None, "slot 1 published nothing else");
    assert_eq!(from_outside(22002), None, "slot 0 published one port");
    sh(&[
        "ip",
        "-n",
        &outside,
        "route",
        "add",
        "10.100.0.0/24",
        "via",
        "198.51.100.1",
    ]);
    assert_eq!(
        reach(&outside, None, ip(1), 8888),
        None,
        "a guest is not reachable by its slot address from outside, even with a route"
    );

    // East-west: one project's guests reach each other; other tenants' do not, by TCP, ICMP
    // or ARP, nor by routing through the host.
    assert_eq!(
        reach(g0, None, ip(1), 22).as_deref(),
        Some("slot1:22 from 10.100.0.10")
    );
    assert!(ping(g1, ip(0)), "same project, east-west on: ping");
    assert!(arping(g1, ip(0)), "same project: ARP");
    assert_eq!(reach(g0, None, ip(2), 22), None, "tenant A → tenant B");
    assert_eq!(reach(g2, None, ip(0), 22), None, "tenant B → tenant A");
    // A published port answers a guest on the same host as it answers the outside (through
    // the public address, seen as coming from the host), while the slot address stays shut.
    assert_eq!(
        reach(g2, None, PUBLIC, 22001).as_deref(),
        Some("slot0:8888 from 10.100.0.1"),
        "tenant B → tenant A's published port, through the public address"
    );
    assert_eq!(
        reach(g0, None, PUBLIC, 22016).as_deref(),
        Some("slot2:22 from 10.100.0.1"),
        "tenant A → tenant B's SSH, through the public address"
    );
    assert_eq!(
        reach(g2, None, ip(0), 8888),
        None,
        "but not by its slot address"
    );
    assert_eq!(
        reach(g2, None, PUBLIC, 22009),
        None,
        "nor what it did not publish"
    );
    assert!(!ping(g2, ip(1)), "tenant B pings tenant A");
    assert!(
        !arping(g2, ip(0)),
        "tenant B's ARP for tenant A's guest is answered"
    );
    assert!(udp_arrives(g1, g0, ip(0)), "same project: UDP");
    assert!(!udp_arrives(g2, g0, ip(0)), "tenant B's UDP to tenant A");
    sh(&[
        "ip",
        "-n",
        g2,
        "route",
        "add",
        "10.100.0.10/32",
        "via",
        "10.100.0.1",
    ]);
    assert!(
        !udp_arrives(g2, g0, ip(0)),
        "tenant B's UDP to tenant A, routed through the host"
    );

    // The host: only DHCP, DNS, telemetry and ping at the gateway.
    assert_eq!(
        reach(g0, None, gw, 9400).as_deref(),
        Some("telemetry:9400 from 10.100.0.10")
    );
    assert!(ping(g0, gw), "the gateway answers ping");
    assert_eq!(
        reach(g0, None, gw, 7000),
        None,
        "the agent's port at the gateway"
    );
    assert_eq!(
        reach(g0, None, PUBLIC, 7000),
        None,
        "the host's public address"
    );

    // Egress through NAT, but not to the blocked range; nothing with a spoofed source.
    assert_eq!(
        reach(g0, None, OUTSIDE, 80).as_deref(),
        Some("web:80 from 198.51.100.1"),
        "egress leaves masqueraded as the host"
    );
    assert_eq!(
        reach(g0, None, FORBIDDEN, 80),
        None,
        "a blocked destination"
    );
    sh(&[
        "ip",
        "-n",
        g2,
        "addr",
        "add",
        "10.100.0.99/32",
        "dev",
        "eth0",
    ]);
    assert_eq!(
        reach(g2, Some("10.100.0.99".parse().unwrap()), OUTSIDE, 80),
        None,
        "a spoofed source"
    );
    let spoofed: Ipv4Addr = "10.100.0.99".parse().unwrap();
    assert!(
        !udp_arrives_from(g2, spoofed, &outside, OUTSIDE),
        "a spoofed source, one way"
    );
    assert!(
        udp_arrives_from(g2, ip(2), &outside, OUTSIDE),
        "its own source, one way"
    );
    assert_eq!(
        reach(g2, None, OUTSIDE, 80).as_deref(),
        Some("web:80 from 198.51.100.1")
    );

    // Publishing later: allocation 3 opens its notebook port; a plan for a slot that runs no
    // such allocation is refused.
    assert_eq!(from_outside(22017), None);
    let update = |n: u32, slot: usize, net: NetworkPlan| {
        let plan = agent_protocol::NetworkUpdatePlan {
            allocation_id: alloc_id(n),
            slots: vec![approved[slot].clone()],
            network: net,
        };
        in_ns(&host, || {
            agent.update_network(&plan, &approved, &mut |_| {})
        })
    };
    update(3, 2, guest_network(None, 2, &[(1, 8888)])).unwrap();
    assert_eq!(
        from_outside(22017).as_deref(),
        Some("slot2:8888 from 198.51.100.2")
    );
    assert!(matches!(
        update(9, 3, guest_network(None, 3, &[(1, 8888)])),
        Err(node_agent::agent::Stop::Failed(e)) if e.contains("is not running allocation")
    ));

    // Release allocation 2: its forwarding goes; tenant C's guest on slot 1 (the same
    // namespace, a new tenant) reaches nothing of tenant A's.
    release(&agent, &host, 2, &approved[1], &approved);
    assert_eq!(
        from_outside(22008),
        None,
        "a released allocation's port is closed"
    );
    assert_eq!(
        from_outside(22000).as_deref(),
        Some("slot0:22 from 198.51.100.2"),
        "the others stay"
    );
    provision(
        &agent,
        &host,
        4,
        &approved[1],
        guest_network(Some("project-c"), 1, &[]),
        &approved,
    );
    assert_eq!(
        reach(g1, None, ip(0), 22),
        None,
        "the new tenant → the old tenant's neighbour"
    );
    assert_eq!(
        reach(g0, None, ip(1), 22),
        None,
        "the old tenant's neighbour → the new tenant"
    );
    assert_eq!(
        from_outside(22008).as_deref(),
        Some("slot1:22 from 198.51.100.2")
    );

    // Applying again changes nothing.
    let before = sh(&["ip", "netns", "exec", &host, "nft", "list", "ruleset"]);
    in_ns(&host, || agent.apply_network(&approved)).unwrap();
    assert_eq!(
        sh(&["ip", "netns", "exec", &host, "nft", "list", "ruleset"]),
        before
    );
}

/// What the agent renders for the HGX and L40S fixtures, kept beside each fixture as
/// `expected-network.txt` for review by eye (rewrite with `UPDATE_FIXTURES=1` and read the
/// diff): a project with east-west on across two allocations, one isolated allocation, a
/// published port.
#[test]
fn the_rendered_network_of_each_fixture_is_the_reviewed_one() {
    for (name, attached) in [
        (
            "hgx-h100-8x",
            vec![
                (1, 0, Some("project-a"), vec![(1, 8888)]),
                (2, 4, Some("project-a"), vec![]),
                (3, 6, None, vec![(1, 443), (2, 8000)]),
            ],
        ),
        (
            "pcie-l40s-4x",
            vec![
                (1, 0, None, vec![]),
                (2, 2, Some("project-b"), vec![(1, 8888)]),
                (3, 3, Some("project-b"), vec![]),
            ],
        ),
    ] {
        let approved = approved(name, "overwrite-verify");
        let mut state = NetState::from_approved(&approved).unwrap();
        for (n, slot, group, published) in attached {
            let mut net = guest_network(group, slot, &published);
            // Project A's members are on its private segment too.
            if group == Some("project-a") {
                let number = 10 + n as u16;
                net.private = Some(agent_protocol::PrivateNic {
                    vni: 4096,
                    address: identity::private_address(number),
                    mac: identity::private_mac(number),
                });
            }
            state.attached.push(Attachment {
                allocation_id: alloc_id(n),
                slot_index: slot,
                ssh_port: net.ssh_port,
                published: net.published,
                east_west_group: net.east_west_group,
                private: net.private,
            });
        }
        let mut cfg = NetConfig::new("eth0", "203.0.113.7".parse().unwrap(), 9400);
        // The HGX host meets other hosts on eth1, where project A has a member on one other.
        if name.starts_with("hgx") {
            cfg.vtep = Some(node_agent::overlay::Vtep {
                device: "eth1".into(),
                address: "192.0.2.7".parse().unwrap(),
            });
            let member = |number: u16, vtep: &str| agent_protocol::OverlayMember {
                address: identity::private_address(number),
                mac: identity::private_mac(number),
                vtep: vtep.into(),
            };
            state.overlay.networks.push(agent_protocol::OverlayNetwork {
                vni: 4096,
                members: vec![
                    member(11, "192.0.2.7"),
                    member(12, "192.0.2.7"),
                    member(20, "192.0.2.8"),
                ],
            });
        }
        let text = format!(
            "# nft -f ruleset.nft\n{}\n# dnsmasq.conf\n{}\n# dhcp-hosts\n{}",
            render_nftables(&cfg, &state).unwrap(),
            render_dnsmasq_conf(Path::new("/var/lib/gpu-node-agent/network")).unwrap(),
            render_dhcp_hosts(&state),
        );
        // The IB partitions for the same allocations: each in its tenant's partition key
        // (allocations 1 and 2 one tenant's, 3 another's).
        let mut members = node_agent::fabric::Membership::new();
        for a in &state.attached {
            let pkey = if a.allocation_id == alloc_id(3) {
                0x0003
            } else {
                0x0002
            };
            members
                .entry(pkey)
                .or_default()
                .insert(node_agent::fabric::port_guid(NODE, a.slot_index));
        }
        let partitions = node_agent::fabric::render_partitions(&members).unwrap();
        let golden_ib = fixture(name).join("expected-partitions.conf");
        if std::env::var_os("UPDATE_FIXTURES").is_some() {
            std::fs::write(&golden_ib, &partitions).unwrap();
        }
        assert_eq!(
            partitions,
            std::fs::read_to_string(&golden_ib).unwrap_or_default(),
            "{name}: partitions.conf differs from {} (UPDATE_FIXTURES=1 rewrites it)",
            golden_ib.display()
        );
        let golden = fixture(name).join("expected-network.txt");
        if std::env::var_os("UPDATE_FIXTURES").is_some() {
            std::fs::write(&golden, &text).unwrap();
        }
        let expected = std::fs::read_to_string(&golden)
            .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_FIXTURES=1)", golden.display()));
        assert_eq!(
            text,
            expected,
            "{name}: the rendered network differs from {}",
            golden.display()
        );
        // What the review looks for, spelled out.
        let published: usize = if name.starts_with("hgx") { 3 } else { 1 };
        assert_eq!(
            text.matches("dnat to").count(),
            3 + published,
            "{name}: three SSH ports and what was published"
        );
        assert!(
            text.contains("dhcp-range=10.100.0.0,static"),
            "no dynamic range"
        );
        assert_eq!(
            render_dhcp_hosts(&state).lines().count(),
            approved.len(),
            "{name}: one DHCP entry per approved slot"
        );
    }
}
