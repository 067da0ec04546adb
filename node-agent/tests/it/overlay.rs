//! A project's private network across hosts, with real packets. Three "hosts" (network
//! namespaces on one underlay switch) each run the agent's own ruleset, bridges, VXLAN devices
//! and dnsmasq, applied as the agent applies them when it provisions, releases and takes the
//! control plane's list of members; guests are namespaces on the private ports the VMs' second
//! NICs would be. Two tenants' projects have members on the same hosts, with the same
//! addresses, so that any crosstalk shows.
//!
//! Needs root, `ip`, `bridge`, `nft`, `dnsmasq` and `busybox`; without them the test says
//! SKIPPED and why.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use agent_protocol::{Overlay, OverlayMember, OverlayNetwork, PlannedSlot, PrivateNic, identity};
use node_agent::agent::Agent;
use node_agent::network::{HostNetwork, NetConfig, SlotNetwork};
use node_agent::overlay::Vtep;

use super::network::{
    Lab, arping_on, guest_network, in_ns, listen, missing, ok, ping, provision, reach, release, sh,
    udp_arrives_from,
};
use crate::support::*;

const A: u32 = 5001;
const B: u32 = 5002;

fn underlay(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, n)
}

fn private(host: u16) -> Ipv4Addr {
    identity::private_address(host).parse().unwrap()
}

/// Plugs namespace `ns` into the underlay switch on port `port`, as `under0` at `addr`.
fn on_underlay(switch: &str, ns: &str, port: &str, addr: Ipv4Addr) {
    sh(&[
        "ip", "-n", switch, "link", "add", port, "type", "veth", "peer", "name", "under0", "netns",
        ns,
    ]);
    sh(&[
        "ip", "-n", switch, "link", "set", port, "master", "sw0", "up",
    ]);
    let cidr = format!("{addr}/24");
    sh(&["ip", "-n", ns, "addr", "add", &cidr, "dev", "under0"]);
    sh(&["ip", "-n", ns, "link", "set", "under0", "up"]);
}

/// One "host": its namespace, its agent with the real network applied there, its approved
/// slots.
struct Host {
    ns: String,
    agent: Agent,
    approved: Vec<PlannedSlot>,
    _lab: Lab,
}

fn host(prefix: &str, n: u8, switch: &str) -> Host {
    let state_dir = tempdir(&format!("overlay-h{n}"));
    let mut lab = Lab {
        prefix: format!("{prefix}h{n}"),
        names: Vec::new(),
        state_dir: state_dir.clone(),
        stop: Arc::new(AtomicBool::new(false)),
    };
    let ns = lab.add("host");
    on_underlay(switch, &ns, &format!("{prefix}p{n}"), underlay(n));

    let mut cfg = NetConfig::new("under0", underlay(n), 9400);
    cfg.vtep = Some(Vtep {
        device: "under0".into(),
        address: underlay(n),
    });
    let mut agent = simulated_agent(&state_dir, "pcie-l40s-4x");
    let network = HostNetwork::new(&state_dir, cfg).unwrap();
    in_ns(&ns, || network.prepare()).unwrap();
    agent.network = Arc::new(network);
    Host {
        ns,
        agent,
        approved: approved("pcie-l40s-4x", "overwrite-verify"),
        _lab: lab,
    }
}

/// A guest of project `vni`, allocation `n`, on `slot` of `h`, at host number `number` of its
/// project's segment: provisioned by the agent, then a namespace on the slot's private port
/// (as the VM's second NIC), answering TCP 22 with its name.
fn guest(
    lab: &mut Lab,
    h: &Host,
    (vni, n, slot, number): (u32, u32, u32, u16),
    name: &str,
) -> String {
    let nic = PrivateNic {
        vni,
        address: identity::private_address(number),
        mac: identity::private_mac(number),
    };
    let mut net = guest_network(Some(&format!("project-{vni}")), slot, &[]);
    net.private = Some(nic.clone());
    provision(
        &h.agent,
        &h.ns,
        n,
        &h.approved[slot as usize],
        net,
        &h.approved,
    );
    let g = lab.add(name);
    let port = identity::private_interface(slot);
    sh(&[
        "ip", "-n", &h.ns, "link", "add", &port, "type", "veth", "peer", "name", "eth1", "netns",
        &g,
    ]);
    let bridge = identity::overlay_bridge(vni);
    sh(&[
        "ip", "-n", &h.ns, "link", "set", &port, "master", &bridge, "up",
    ]);
    sh(&[
        "ip", "-n", &g, "link", "set", "eth1", "address", &nic.mac, "mtu", "1450", "up",
    ]);
    let cidr = format!("{}/16", nic.address);
    sh(&["ip", "-n", &g, "addr", "add", &cidr, "dev", "eth1"]);
    listen(&g, Ipv4Addr::UNSPECIFIED, 22, name, &lab.stop);
    g
}

/// The control plane's list: every (segment, host number, host) given.
fn overlay(members: &[(u32, u16, u8)]) -> Overlay {
    let mut o = Overlay::default();
    for &(vni, number, at) in members {
        if o.networks.last().is_none_or(|n| n.vni != vni) {
            o.networks.push(OverlayNetwork {
                vni,
                members: Vec::new(),
            });
        }
        o.networks.last_mut().unwrap().members.push(OverlayMember {
            address: identity::private_address(number),
            mac: identity::private_mac(number),
            vtep: underlay(at).to_string(),
        });
    }
    o
}

fn arping(ns: &str, to: Ipv4Addr) -> bool {
    arping_on(ns, "eth1", to)
}

fn link_exists(ns: &str, dev: &str) -> bool {
    ok(&["ip", "-n", ns, "link", "show", "dev", dev])
}

#[test]
fn a_projects_guests_reach_each_other_across_hosts_and_nobody_else_does() {
    if let Some(why) = missing() {
        println!("SKIPPED: {why}");
        return;
    }
    if !ok(&["sh", "-c", "command -v bridge"]) {
        println!("SKIPPED: bridge is not installed (apt-get install iproute2)");
        return;
    }
    let prefix = format!("gpo{}", std::process::id() % 100_000);
    let mut lab = Lab {
        prefix: prefix.clone(),
        names: Vec::new(),
        state_dir: tempdir("overlay-guests"),
        stop: Arc::new(AtomicBool::new(false)),
    };
    let switch = lab.add("sw");
    sh(&["ip", "-n", &switch, "link", "add", "sw0", "type", "bridge"]);
    sh(&["ip", "-n", &switch, "link", "set", "sw0", "up"]);
    let hosts: Vec<Host> = (1..=3).map(|n| host(&prefix, n, &switch)).collect();
    let (h1, h2, h3) = (&hosts[0], &hosts[1], &hosts[2]);

    // Tenant A's project: a1 and a4 on host 1, a2 on host 2, a3 on host 3. Tenant B's
    // project: b1 on host 2 and b2 on host 3, at the very addresses a1 and a2 have.
    let a1 = guest(&mut lab, h1, (A, 1, 0, 11), "a1");
    let a4 = guest(&mut lab, h1, (A, 4, 1, 14), "a4");
    let a2 = guest(&mut lab, h2, (A, 2, 0, 12), "a2");
    let b1 = guest(&mut lab, h2, (B, 5, 1, 11), "b1");
    let a3 = guest(&mut lab, h3, (A, 3, 1, 13), "a3");
    let b2 = guest(&mut lab, h3, (B, 6, 0, 12), "b2");
    let every = [
        (A, 11, 1),
        (A, 12, 2),
        (A, 13, 3),
        (A, 14, 1),
        (B, 11, 2),
        (B, 12, 3),
    ];
    for h in &hosts {
        let changed = in_ns(&h.ns, || h.agent.set_overlay(overlay(&every))).unwrap();
        assert!(changed, "the first list is new");
    }
    assert!(
        !link_exists(&h1.ns, &identity::overlay_bridge(B)),
        "a host carries only its own guests' segments"
    );

    // Within a project, across hosts and on one: TCP, ICMP, ARP, UDP.
    assert_eq!(
        reach(&a1, None, private(12), 22).as_deref(),
        Some("a2:22 from 10.128.0.11"),
        "host 1 → host 2"
    );
    assert_eq!(
        reach(&a2, None, private(13), 22).as_deref(),
        Some("a3:22 from 10.128.0.12"),
        "host 2 → host 3"
    );
    assert_eq!(
        reach(&a1, None, private(14), 22).as_deref(),
        Some("a4:22 from 10.128.0.11"),
        "two members on one host"
    );
    assert!(ping(&a3, private(11)), "host 3 pings host 1");
    assert!(arping(&a1, private(13)), "ARP across hosts");
    assert!(
        udp_arrives_from(&a3, private(13), &a1, private(11)),
        "UDP across hosts"
    );

    // Another tenant's project, at the same addresses, on the same hosts: each reaches its
    // own and nothing of the other's.
    assert_eq!(
        reach(&b1, None, private(12), 22).as_deref(),
        Some("b2:22 from 10.128.0.11"),
        "tenant B's .12 is its own guest"
    );
    assert_eq!(
        reach(&a2, None, private(11), 22).as_deref(),
        Some("a1:22 from 10.128.0.12"),
        "tenant A's .11 is its own guest, though tenant B's .11 shares its host"
    );
    assert_eq!(reach(&b1, None, private(13), 22), None, "B → A's a3 (TCP)");
    assert!(!ping(&b2, private(14)), "B → A's a4 (ICMP)");
    assert!(!arping(&b1, private(13)), "B → A's a3 (ARP)");
    assert!(
        !udp_arrives_from(&b1, private(11), &a3, private(13)),
        "B → A's a3 (UDP)"
    );

    // Nobody sends as another member: a spoofed source, on one host or across.
    sh(&[
        "ip",
        "-n",
        &a4,
        "addr",
        "add",
        "10.128.0.12/32",
        "dev",
        "eth1",
    ]);
    assert!(
        !udp_arrives_from(&a4, private(12), &a3, private(13)),
        "a4 sending as a2"
    );
    assert!(
        udp_arrives_from(&a4, private(14), &a3, private(13)),
        "a4 sending as itself"
    );

    // The host is nobody on a segment: no address, no ARP, no routing.
    listen(&h1.ns, Ipv4Addr::UNSPECIFIED, 7000, "agent", &lab.stop);
    sh(&[
        "ip",
        "-n",
        &a1,
        "route",
        "add",
        "192.0.2.0/24",
        "dev",
        "eth1",
    ]);
    assert_eq!(
        reach(&a1, None, underlay(1), 7000),
        None,
        "the host's own address, from its segment"
    );
    assert_eq!(
        reach(&a1, None, underlay(2), 7000),
        None,
        "another host's address, through the segment"
    );

    // A host that is no member's hears nothing of a segment: a rogue on the underlay sends
    // tenant A's frames as a2 (its MAC and address) straight to host 1's endpoint.
    let rogue = lab.add("rogue");
    on_underlay(&switch, &rogue, &format!("{prefix}p9"), underlay(9));
    for cmd in [
        "ip link add vx type vxlan id 5001 local 192.0.2.9 dstport 4789 dev under0 nolearning",
        "ip link set vx address 52:56:0a:80:00:0c mtu 1450 up",
        "ip addr add 10.128.0.12/16 dev vx",
        "bridge fdb append 52:56:0a:80:00:0b dev vx dst 192.0.2.1",
        "ip neigh replace 10.128.0.11 lladdr 52:56:0a:80:00:0b dev vx nud permanent",
    ] {
        let mut args = vec!["ip", "netns", "exec", rogue.as_str()];
        args.extend(cmd.split(' '));
        sh(&args);
    }
    assert!(
        !udp_arrives_from(&rogue, private(12), &a1, private(11)),
        "a2's frames from a host that is not a2's"
    );

    // Releasing a2: once each host has the control plane's new list, a2's address answers
    // nowhere, even with its guest still plugged in (a VM slow to die).
    release(&h2.agent, &h2.ns, 2, &h2.approved[0], &h2.approved);
    let after: Vec<_> = every.iter().copied().filter(|m| *m != (A, 12, 2)).collect();
    for h in &hosts {
        in_ns(&h.ns, || h.agent.set_overlay(overlay(&after))).unwrap();
    }
    assert_eq!(
        reach(&a1, None, private(12), 22),
        None,
        "host 1 → released a2"
    );
    assert_eq!(
        reach(&a3, None, private(12), 22),
        None,
        "host 3 → released a2"
    );
    assert!(!arping(&a1, private(12)), "released a2's ARP");
    assert!(
        !udp_arrives_from(&a2, private(12), &a1, private(11)),
        "released a2 → a1"
    );
    assert!(
        !link_exists(&h2.ns, &identity::overlay_bridge(A)),
        "host 2 has no member of tenant A's project left"
    );
    assert_eq!(
        reach(&a1, None, private(13), 22).as_deref(),
        Some("a3:22 from 10.128.0.11"),
        "the others stay"
    );
    assert_eq!(
        reach(&b2, None, private(11), 22).as_deref(),
        Some("b1:22 from 10.128.0.12"),
        "and tenant B's"
    );

    // Applying the same list again changes nothing.
    let before = sh(&["ip", "netns", "exec", &h1.ns, "nft", "list", "ruleset"]);
    let fdb = sh(&[
        "ip", "netns", "exec", &h1.ns, "bridge", "fdb", "show", "dev", "gpx5001",
    ]);
    assert!(!in_ns(&h1.ns, || h1.agent.set_overlay(overlay(&after))).unwrap());
    in_ns(&h1.ns, || h1.agent.apply_network(&h1.approved)).unwrap();
    assert_eq!(
        sh(&["ip", "netns", "exec", &h1.ns, "nft", "list", "ruleset"]),
        before
    );
    assert_eq!(
        sh(&[
            "ip", "netns", "exec", &h1.ns, "bridge", "fdb", "show", "dev", "gpx5001"
        ]),
        fdb
    );
    assert!(
        fdb.contains("52:56:0a:80:00:0d dst 192.0.2.3") && !fdb.contains("00:0c dst"),
        "host 1 forwards to a3's host and no longer to a2's: {fdb}"
    );
    drop(hosts);
}

/// A network that refuses its next apply when told to, and counts the others.
#[derive(Default)]
struct FailNext(AtomicBool);

impl SlotNetwork for FailNext {
    fn describe(&self) -> String {
        "fails when told".into()
    }
    fn apply(&self, _: &node_agent::network::NetState) -> Result<(), String> {
        if self.0.swap(false, std::sync::atomic::Ordering::SeqCst) {
            Err("the host's network is busy".into())
        } else {
            Ok(())
        }
    }
}

/// A members' list the host failed to put in force is not taken as in force: the next
/// heartbeat's list, though the same, is applied again.
#[test]
fn a_list_that_failed_to_apply_is_applied_again_with_the_next_heartbeat() {
    let dir = tempdir("overlay-retry");
    let mut agent = simulated_agent(&dir, "pcie-l40s-4x");
    let network = Arc::new(FailNext::default());
    agent.network = network.clone();
    let approved = approved("pcie-l40s-4x", "overwrite-verify");
    agent.apply_network(&approved).unwrap();
    let list = overlay(&[(A, 11, 1), (A, 12, 2)]);
    network.0.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(agent.set_overlay(list.clone()).is_err());
    assert_eq!(agent.set_overlay(list.clone()), Ok(true), "applied again");
    assert_eq!(agent.set_overlay(list), Ok(false), "then in force");
    let _ = std::fs::remove_dir_all(&dir);
}
