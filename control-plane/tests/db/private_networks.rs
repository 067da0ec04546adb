//! A project's private network against a real database: each member of a project that allows
//! east-west traffic gets its own address on the project's segment (concurrent launches
//! never share one, a releasing member's is not given again), the plan names it, and a host
//! learns the segment's members only while it hosts one of them; a tunnel endpoint is an
//! address no other host has.

use control_plane::prelude::*;

use agent_protocol::{Overlay, PrivateNic, TaskSpec, identity};
use control_plane::agent_api::NodeAgent;
use control_plane::demo::ACME_RESEARCH;
use control_plane::tenancy::ProjectAdmins;
use control_plane::{AllocationId, ControlPlane, Error, NodeId};

use crate::allocations::{ALICE, BOB, PROVISION, hgx, launch, member, setup};
use crate::support::{answer, in_project, provisioned};

type Nodes = Vec<(NodeId, NodeAgent, String)>;

/// The agent of the node `id` was placed on.
async fn agent_of<'a>(cp: &ControlPlane, nodes: &'a Nodes, id: AllocationId) -> &'a NodeAgent {
    let node: uuid::Uuid = sqlx::query_scalar("SELECT node_id FROM allocations WHERE id = $1")
        .bind(id.0)
        .fetch_one(cp.pool())
        .await
        .unwrap();
    &nodes.iter().find(|n| n.0.0 == node).expect("a test node").1
}

/// Provisions `id` as its node's agent would; the private NIC its plan names.
async fn provision(cp: &ControlPlane, nodes: &Nodes, id: AllocationId) -> Option<PrivateNic> {
    let agent = agent_of(cp, nodes, id).await;
    match answer(cp, agent, PROVISION, provisioned).await {
        TaskSpec::VmProvision(plan) | TaskSpec::BaremetalProvision(plan) => plan.network.private,
        other => panic!("{other:?}"),
    }
}

/// (address, host) of each member an overlay lists.
fn listed(o: &Overlay) -> Vec<(String, String)> {
    o.networks
        .iter()
        .flat_map(|n| {
            n.members
                .iter()
                .map(|m| (m.address.clone(), m.vtep.clone()))
        })
        .collect()
}

#[tokio::test]
async fn members_get_their_own_addresses_and_only_their_hosts_learn_of_each_other() {
    let (_db, cp, ops) = setup().await;
    let mut nodes = Nodes::new();
    for h in ["gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e"] {
        nodes.push(hgx(&cp, &ops, h).await);
    }
    let bob = member(&cp, BOB, ACME_RESEARCH).await;

    // East-west off: no segment.
    let solo = launch(&cp, &bob, "h100.1x", "solo").await.unwrap();
    assert_eq!(provision(&cp, &nodes, solo).await, None);

    // On: three whole nodes launched at once get three addresses, the lowest free.
    let alice = cp.principal(ALICE).await.unwrap().unwrap();
    let admin = in_project::<ProjectAdmins>(&cp, &alice, ACME_RESEARCH).await;
    cp.set_east_west(&admin, true, None).await.unwrap();
    let (m1, m2, m3) = tokio::join!(
        launch(&cp, &bob, "h100.8x", "m1"),
        launch(&cp, &bob, "h100.8x", "m2"),
        launch(&cp, &bob, "h100.8x", "m3"),
    );
    let members = [m1.unwrap(), m2.unwrap(), m3.unwrap()];
    let vni: i32 = sqlx::query_scalar("SELECT vni FROM projects WHERE id = $1")
        .bind(ACME_RESEARCH.0)
        .fetch_one(cp.pool())
        .await
        .unwrap();
    let mut nics = Vec::new();
    for id in members {
        let nic = provision(&cp, &nodes, id).await.expect("a private NIC");
        assert_eq!(nic.vni, vni as u32, "the project's segment");
        let number = identity::private_host(&nic.address).expect("an address of the segment");
        assert_eq!(nic.mac, identity::private_mac(number));
        nics.push(nic);
    }
    let mut addresses: Vec<&str> = nics.iter().map(|n| n.address.as_str()).collect();
    addresses.sort();
    assert_eq!(addresses, ["10.128.0.10", "10.128.0.11", "10.128.0.12"]);

    // Each host reports its endpoint; one another host has, or that is none, is refused.
    for (i, (_, agent, _)) in nodes.iter().enumerate() {
        cp.record_vtep(agent, &format!("192.0.2.{}", i + 1))
            .await
            .unwrap();
    }
    let (_, spare, _) = &nodes[4];
    for (bad, says) in [
        ("192.0.2.1", "another node's tunnel endpoint is 192.0.2.1"),
        ("127.0.0.1", "can't be a tunnel endpoint"),
        ("10.0.0.1; drop", "is not an IPv4 address"),
    ] {
        match cp.record_vtep(spare, bad).await {
            Err(Error::Conflict(m)) | Err(Error::Invalid { reason: m, .. }) => {
                assert!(m.contains(says), "{bad}: {m}")
            }
            other => panic!("{bad}: {other:?}"),
        }
    }

    // A member's host learns every member, at its host's endpoint; a host of none learns
    // nothing (the solo allocation's host, whose guest has no segment).
    let endpoint = |i: usize| format!("192.0.2.{}", i + 1);
    let mut expected = Vec::new();
    for (id, nic) in members.iter().zip(&nics) {
        let agent = agent_of(&cp, &nodes, *id).await;
        let i = nodes
            .iter()
            .position(|n| std::ptr::eq(&n.1, agent))
            .unwrap();
        expected.push((nic.address.clone(), endpoint(i)));
    }
    expected.sort();
    let first = agent_of(&cp, &nodes, members[0]).await;
    let overlay = cp.overlay(first).await.unwrap();
    assert_eq!(overlay.networks.len(), 1);
    assert_eq!(overlay.networks[0].vni, vni as u32);
    assert_eq!(listed(&overlay), expected);
    let solo_host = agent_of(&cp, &nodes, solo).await;
    assert_eq!(cp.overlay(solo_host).await.unwrap(), Overlay::default());

    // A released member leaves every host's list at once; its address is not given again
    // while its guest may still be up.
    cp.release_allocation(&bob, members[1], None).await.unwrap();
    let left: Vec<_> = expected
        .iter()
        .filter(|(a, _)| *a != nics[1].address)
        .cloned()
        .collect();
    assert_eq!(listed(&cp.overlay(first).await.unwrap()), left);
    cp.release_allocation(&bob, solo, None).await.unwrap();
    let m4 = launch(&cp, &bob, "h100.8x", "m4").await.unwrap();
    let nic4 = provision(&cp, &nodes, m4).await.expect("a private NIC");
    assert_eq!(nic4.address, "10.128.0.13", "not the releasing member's");

    // East-west off: no host learns the segment any more.
    cp.set_east_west(&admin, false, None).await.unwrap();
    assert_eq!(cp.overlay(first).await.unwrap(), Overlay::default());
}
