//! Fabric places against a real database: an import places the nodes it names, a later import
//! that moves a placed node is kept as drift until an operator approves it, hosts that are not
//! ours are listed, bad input is refused whole, and the table refuses a half-written drift.

use control_plane::prelude::*;

use control_plane::fleet::{FabricDrift, NewNode, TopologyFormat};
use control_plane::{ControlPlane, Error, NodeId};

use crate::support::{assert_db_refuses, operator, refusal};

fn node(hostname: &str) -> NewNode {
    NewNode {
        hostname: hostname.into(),
        region: "eu-west-1".into(),
        rack: "r1".into(),
        family: "hgx-h100-8x".into(),
        capacity_shapes: vec!["gpu_slice".into(), "baremetal".into()],
    }
}

/// An empty database with an operator and three enrolled nodes, gpu001 to gpu003.
async fn three_nodes() -> (
    test_db::TestDb,
    ControlPlane,
    control_plane::auth::Platform<control_plane::auth::PlatformOperators>,
    Vec<NodeId>,
) {
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let ops = operator(&cp, "olga@platform.example").await;
    let mut ids: Vec<NodeId> = Vec::new();
    for h in ["gpu001", "gpu002", "gpu003"] {
        ids.push(cp.enrol_node(&ops, &node(h), None).await.unwrap().node_id);
    }
    (db, cp, ops, ids)
}

/// `(hostname, fabric/spine group/leaf, drift)` for every placed node.
async fn places(cp: &ControlPlane) -> Vec<(String, String, Option<String>)> {
    sqlx::query_as(
        "SELECT n.hostname, p.fabric || '/' || p.spine_group || '/' || p.leaf,
                p.drift_fabric || '/' || p.drift_spine_group || '/' || p.drift_leaf
         FROM node_fabric_places p JOIN nodes n ON n.id = p.node_id ORDER BY n.hostname",
    )
    .fetch_all(cp.pool())
    .await
    .unwrap()
}

async fn fabric_actions(cp: &ControlPlane) -> Vec<String> {
    sqlx::query_scalar("SELECT action FROM audit_log WHERE action LIKE 'node.fabric.%' ORDER BY id")
        .fetch_all(cp.pool())
        .await
        .unwrap()
}

const FIRST: &str = "SwitchName=leaf1 Nodes=gpu[001-002]\nSwitchName=leaf2 Nodes=gpu003,login1\n\
                     SwitchName=spine1 Switches=leaf[1-2]\n";
/// gpu002 recabled to leaf2; the rest where they were.
const RECABLED: &str = "SwitchName=leaf1 Nodes=gpu001\nSwitchName=leaf2 Nodes=gpu[002-003]\n\
                        SwitchName=spine1 Switches=leaf[1-2]\n";

#[tokio::test]
async fn an_import_places_new_nodes_and_keeps_a_move_as_drift_until_approved() {
    let (_db, cp, ops, ids) = three_nodes().await;

    let first = cp
        .import_fabric(&ops, "ib-a", TopologyFormat::SlurmTopology, FIRST, None)
        .await
        .unwrap();
    assert_eq!(first.placed, ["gpu001", "gpu002", "gpu003"]);
    assert_eq!(
        first.unknown_hosts,
        ["login1"],
        "a host not enrolled here is named, not placed"
    );
    assert!(first.drifted.is_empty());
    assert_eq!(
        places(&cp).await,
        [
            ("gpu001".into(), "ib-a/spine1/leaf1".into(), None),
            ("gpu002".into(), "ib-a/spine1/leaf1".into(), None),
            ("gpu003".into(), "ib-a/spine1/leaf2".into(), None),
        ]
    );

    // A recabled node is not moved by the import: it is kept where it was approved, with
    // what the import saw beside it.
    let second = cp
        .import_fabric(&ops, "ib-a", TopologyFormat::SlurmTopology, RECABLED, None)
        .await
        .unwrap();
    assert!(second.placed.is_empty());
    assert_eq!(second.unchanged, 2);
    assert_eq!(
        second.drifted,
        [FabricDrift {
            hostname: "gpu002".into(),
            approved: "ib-a/spine1/leaf1".into(),
            seen: "ib-a/spine1/leaf2".into(),
        }]
    );
    assert_eq!(
        places(&cp).await[1],
        (
            "gpu002".into(),
            "ib-a/spine1/leaf1".into(),
            Some("ib-a/spine1/leaf2".into())
        )
    );

    // Approving makes the drift the place; approving again has nothing to approve.
    cp.approve_fabric_drift(&ops, ids[1], None).await.unwrap();
    assert_eq!(
        places(&cp).await[1],
        ("gpu002".into(), "ib-a/spine1/leaf2".into(), None)
    );
    assert_eq!(
        refusal(cp.approve_fabric_drift(&ops, ids[1], None)).await,
        "gpu002 has no fabric drift to approve"
    );

    // Drift that a later import no longer sees is cleared without an approval.
    cp.import_fabric(&ops, "ib-a", TopologyFormat::SlurmTopology, FIRST, None)
        .await
        .unwrap();
    assert_eq!(places(&cp).await[1].2.as_deref(), Some("ib-a/spine1/leaf1"));
    let back = "SwitchName=leaf2 Nodes=gpu002\nSwitchName=spine1 Switches=leaf2\n";
    let cleared = cp
        .import_fabric(&ops, "ib-a", TopologyFormat::SlurmTopology, back, None)
        .await
        .unwrap();
    assert_eq!(cleared.unchanged, 1);
    assert_eq!(places(&cp).await[1].2, None);

    assert_eq!(
        fabric_actions(&cp).await,
        [
            "node.fabric.place",
            "node.fabric.place",
            "node.fabric.place",
            "node.fabric.drift",
            "node.fabric.approve",
            "node.fabric.drift",
            "node.fabric.drift_cleared",
        ]
    );
}

#[tokio::test]
async fn bad_input_is_refused_whole_and_the_table_refuses_half_a_drift() {
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let ops = operator(&cp, "olga@platform.example").await;
    let id = cp
        .enrol_node(&ops, &node("gpu001"), None)
        .await
        .unwrap()
        .node_id;

    // A topology with one bad line places nothing, not the lines before it.
    let bad = "SwitchName=leaf1 Nodes=gpu001\nSwitchName=leaf2 Nodes=gpu[9-1]\n";
    match cp
        .import_fabric(&ops, "ib-a", TopologyFormat::SlurmTopology, bad, None)
        .await
    {
        Err(Error::Invalid { field, reason }) => {
            assert_eq!(field, "topology");
            assert_eq!(
                reason,
                "line 2: \"gpu[9-1]\": \"9-1\" is not a range of numbers"
            );
        }
        other => panic!("expected the topology refused, got {other:?}"),
    }
    match cp
        .import_fabric(
            &ops,
            "ib a; drop",
            TopologyFormat::SlurmTopology,
            FIRST,
            None,
        )
        .await
    {
        Err(Error::Invalid { field, .. }) => assert_eq!(field, "fabric"),
        other => panic!("expected the fabric's name refused, got {other:?}"),
    }
    assert!(matches!(
        TopologyFormat::parse("lldp"),
        Err(Error::Invalid {
            field: "format",
            ..
        })
    ));
    assert!(places(&cp).await.is_empty());
    assert_eq!(
        refusal(cp.approve_fabric_drift(&ops, id, None)).await,
        "gpu001 has no fabric drift to approve"
    );

    cp.import_fabric(
        &ops,
        "ib-a",
        TopologyFormat::Ibnetdiscover,
        "Switch\t36 \"S-01\"\t\t# \"leaf-01\" enhanced port 0 lid 3\n\
         [1]\t\"H-02\"[1](3)\t\t# \"GPU001 mlx5_0\" lid 5 4xNDR\n",
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        places(&cp).await,
        [("gpu001".into(), "ib-a/leaf-01/leaf-01".into(), None)],
        "matched case-insensitively; a leaf with no spines is its own group"
    );
    assert_db_refuses(
        &cp,
        "UPDATE node_fabric_places SET drift_leaf = 'leaf-02'",
        "check constraint",
    )
    .await;
    assert_db_refuses(
        &cp,
        "UPDATE node_fabric_places SET drift_fabric = fabric, drift_spine_group = spine_group,
             drift_leaf = leaf, drift_source = 'operator', drift_seen_at = now()",
        "check constraint",
    )
    .await;
}

/// An operator sets a place on the node's page: an unplaced node is placed, a drifting node is
/// put where the operator says (its drift dropped, so clusters use it again), setting the same
/// place twice is one change, each change is audited with before and after, and a bad name is
/// refused on its field with nothing written.
#[tokio::test]
async fn an_operator_sets_a_place_by_hand_and_it_replaces_any_drift() {
    use control_plane::fleet::PlaceInput;
    let (_db, cp, ops, ids) = three_nodes().await;
    let place = |f: &str, s: &str, l: &str| PlaceInput {
        fabric: f.into(),
        spine_group: s.into(),
        leaf: l.into(),
    };

    // Not placed yet: set by hand, twice, is one change.
    for _ in 0..2 {
        cp.set_fabric_place(&ops, ids[0], &place("ib-a", "spine1", "leaf9"), None)
            .await
            .unwrap();
    }
    assert_eq!(
        places(&cp).await,
        [("gpu001".into(), "ib-a/spine1/leaf9".into(), None)]
    );
    assert_eq!(fabric_actions(&cp).await, ["node.fabric.set"]);

    // gpu002 imported on leaf1, then seen on leaf2: drifting, out of clusters.
    cp.import_fabric(&ops, "ib-a", TopologyFormat::SlurmTopology, FIRST, None)
        .await
        .unwrap();
    cp.import_fabric(&ops, "ib-a", TopologyFormat::SlurmTopology, RECABLED, None)
        .await
        .unwrap();
    assert_eq!(
        places(&cp).await[1],
        (
            "gpu002".into(),
            "ib-a/spine1/leaf1".into(),
            Some("ib-a/spine1/leaf2".into())
        )
    );
    // The operator knows better than both: leaf3. The drift is gone with the decision.
    cp.set_fabric_place(&ops, ids[1], &place("ib-a", "spine1", " leaf3 "), None)
        .await
        .unwrap();
    assert_eq!(
        places(&cp).await[1],
        ("gpu002".into(), "ib-a/spine1/leaf3".into(), None)
    );
    let (source, before, after): (String, serde_json::Value, serde_json::Value) = sqlx::query_as(
        "SELECT p.source, a.before, a.after FROM node_fabric_places p, audit_log a
         WHERE p.node_id = $1 AND a.action = 'node.fabric.set' ORDER BY a.id DESC LIMIT 1",
    )
    .bind(ids[1].0)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(source, "operator");
    assert_eq!(before["place"], "ib-a/spine1/leaf1");
    assert_eq!(after["place"], "ib-a/spine1/leaf3");

    // A bad name is refused on its own field; nothing changes.
    for (input, field) in [
        (place("ib a", "spine1", "leaf1"), "fabric"),
        (place("ib-a", "", "leaf1"), "spine_group"),
        (place("ib-a", "spine1", &"l".repeat(65)), "leaf"),
    ] {
        match cp.set_fabric_place(&ops, ids[2], &input, None).await {
            Err(Error::Invalid { field: got, .. }) => assert_eq!(got, field),
            other => panic!("expected {field} refused, got {other:?}"),
        }
    }
    assert_eq!(places(&cp).await[2].1, "ib-a/spine1/leaf2");
}
