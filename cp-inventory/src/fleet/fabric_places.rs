//! Fabric places: each node's leaf switch and spine group, imported from a topology (see
//! [`super::fabric`]) and kept like a slot map (migration 0054). An import places the nodes
//! that have no place yet; for a node already placed, a different place is kept beside the
//! approved one as drift, which leaves the node out of clusters until an operator approves it.

use std::collections::HashMap;

use serde_json::json;

use super::fabric::{
    FabricPlace, checked_fabric_name, checked_place_name, parse_ibnetdiscover, parse_slurm_topology,
};
use super::lock_node;
use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{NodeId, UserId};
use cp_identity::auth::{Platform, PlatformOperators, PlatformStaff};
pub use portal_types::fleet::{
    FabricBranch, FabricDriftRow, FabricNodeRow, FabricTree, LeafBranch, SpineBranch,
};

/// Which tool's output an import is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopologyFormat {
    /// `ibnetdiscover`'s default output.
    Ibnetdiscover,
    /// A Slurm `topology.conf` for `topology/tree`.
    SlurmTopology,
}

impl TopologyFormat {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "ibnetdiscover" => Ok(TopologyFormat::Ibnetdiscover),
            "slurm_topology" => Ok(TopologyFormat::SlurmTopology),
            other => Err(Error::Invalid {
                field: "format",
                reason: format!("{other:?} is not one of ibnetdiscover, slurm_topology"),
            }),
        }
    }

    /// The `source` a place from this format is stored with.
    fn source(self) -> &'static str {
        match self {
            TopologyFormat::Ibnetdiscover => "ibnetdiscover",
            TopologyFormat::SlurmTopology => "slurm_topology",
        }
    }
}

/// A node whose import put it somewhere else than its approved place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FabricDrift {
    pub hostname: String,
    /// `fabric/spine group/leaf`, as approved.
    pub approved: String,
    /// `fabric/spine group/leaf`, as the import saw it.
    pub seen: String,
}

/// What an import did, for the operator to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FabricImport {
    /// Nodes placed for the first time.
    pub placed: Vec<String>,
    /// Nodes the import found where they were approved (any drift they had is cleared).
    pub unchanged: usize,
    /// Nodes the import found elsewhere: kept where they were, out of clusters until approved.
    pub drifted: Vec<FabricDrift>,
    /// Hosts in the topology that are not nodes of this fleet (not enrolled yet, or not ours).
    pub unknown_hosts: Vec<String>,
}

/// What the control plane offers for fabric places.
#[allow(async_fn_in_trait)]
pub trait FabricApi {
    /// Reads a topology of `fabric` and places the fleet's nodes it names (matched by
    /// hostname, case-insensitively). One import at a time: a second waits for the first.
    async fn import_fabric(
        &self,
        who: &Platform<PlatformOperators>,
        fabric: &str,
        format: TopologyFormat,
        topology: &str,
        request_id: Option<&str>,
    ) -> Result<FabricImport>;

    /// Makes a node's drift its approved place, so that clusters may use it again.
    async fn approve_fabric_drift(
        &self,
        who: &Platform<PlatformOperators>,
        node: NodeId,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// Sets a node's place by hand (its node page): approved as it is given, any drift an
    /// import saw is dropped, and the change is audited. Setting the place it has is nothing.
    async fn set_fabric_place(
        &self,
        who: &Platform<PlatformOperators>,
        node: NodeId,
        place: &PlaceInput,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// Every placed node as a tree, with the free GPUs of each leaf, and the drifting nodes.
    async fn fabric_tree(&self, who: &Platform<PlatformStaff>) -> Result<FabricTree>;
}

/// A place as an operator types it on a node's page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlaceInput {
    pub fabric: String,
    pub spine_group: String,
    pub leaf: String,
}

/// A fleet node named by the topology, with its approved place if it has one.
struct Known {
    id: NodeId,
    region: String,
    approved: Option<(String, String, String)>,
    /// Whether an earlier import saw it elsewhere.
    drifting: bool,
}

fn path(fabric: &str, spine_group: &str, leaf: &str) -> String {
    format!("{fabric}/{spine_group}/{leaf}")
}

impl FabricApi for ControlPlane {
    #[tracing::instrument(skip_all, fields(fabric = fabric))]
    async fn import_fabric(
        &self,
        who: &Platform<PlatformOperators>,
        fabric: &str,
        format: TopologyFormat,
        topology: &str,
        request_id: Option<&str>,
    ) -> Result<FabricImport> {
        let fabric = checked_fabric_name(fabric)?;
        let map = match format {
            TopologyFormat::Ibnetdiscover => parse_ibnetdiscover(topology)?,
            TopologyFormat::SlurmTopology => parse_slurm_topology(topology)?,
        };
        let actor = who.principal().user_id;
        let mut tx = self.pool().begin().await?;
        // Two imports naming the same nodes must not both decide from what they read before
        // the other wrote; imports are rare, so they simply take turns.
        sqlx::query!("LOCK TABLE node_fabric_places IN SHARE ROW EXCLUSIVE MODE")
            .execute(&mut *tx)
            .await?;
        let known = fleet_nodes_named(&mut tx, &map.places).await?;
        let mut done = FabricImport::default();
        for place in &map.places {
            let Some(node) = known.get(&place.node.to_ascii_lowercase()) else {
                done.unknown_hosts.push(place.node.clone());
                continue;
            };
            let step = Step {
                tx: &mut tx,
                cp: self,
                actor,
                request_id,
                fabric: &fabric,
                source: format.source(),
            };
            match &node.approved {
                None => {
                    step.place(node, place).await?;
                    done.placed.push(place.node.clone());
                }
                Some((f, s, l)) if (f, s, l) == (&fabric, &place.spine_group, &place.leaf) => {
                    if node.drifting {
                        step.clear_drift(node).await?;
                    }
                    done.unchanged += 1;
                }
                Some((f, s, l)) => {
                    step.note_drift(node, place).await?;
                    done.drifted.push(FabricDrift {
                        hostname: place.node.clone(),
                        approved: path(f, s, l),
                        seen: path(&fabric, &place.spine_group, &place.leaf),
                    });
                }
            }
        }
        tx.commit().await?;
        Ok(done)
    }

    #[tracing::instrument(skip_all, fields(node.id = %node))]
    async fn approve_fabric_drift(
        &self,
        who: &Platform<PlatformOperators>,
        node: NodeId,
        request_id: Option<&str>,
    ) -> Result<()> {
        let actor = who.principal().user_id;
        let mut tx = self.pool().begin().await?;
        let locked = lock_node(&mut tx, node).await?;
        let moved = sqlx::query!(
            r#"UPDATE node_fabric_places p
               SET fabric = p.drift_fabric, spine_group = p.drift_spine_group, leaf = p.drift_leaf,
                   source = p.drift_source, approved_by = $2, approved_at = now(),
                   drift_fabric = NULL, drift_spine_group = NULL, drift_leaf = NULL,
                   drift_source = NULL, drift_seen_at = NULL
               FROM node_fabric_places old
               WHERE p.node_id = $1 AND old.node_id = p.node_id AND p.drift_fabric IS NOT NULL
               RETURNING old.fabric, old.spine_group, old.leaf,
                         p.fabric AS "new_fabric!", p.spine_group AS "new_spine_group!",
                         p.leaf AS "new_leaf!""#,
            node as NodeId,
            actor as UserId,
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| {
            Error::Conflict(format!(
                "{} has no fabric drift to approve",
                locked.hostname
            ))
        })?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(actor),
                action: "node.fabric.approve",
                resource: &self.naming().node(&locked.region, node)?,
                before: Some(
                    json!({ "place": path(&moved.fabric, &moved.spine_group, &moved.leaf) }),
                ),
                after: Some(json!({
                    "place": path(&moved.new_fabric, &moved.new_spine_group, &moved.new_leaf)
                })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(node.id = %node))]
    async fn set_fabric_place(
        &self,
        who: &Platform<PlatformOperators>,
        node: NodeId,
        place: &PlaceInput,
        request_id: Option<&str>,
    ) -> Result<()> {
        let fabric = checked_place_name("fabric", &place.fabric)?;
        let spine_group = checked_place_name("spine_group", &place.spine_group)?;
        let leaf = checked_place_name("leaf", &place.leaf)?;
        let actor = who.principal().user_id;
        let mut tx = self.pool().begin().await?;
        let locked = lock_node(&mut tx, node).await?;
        let before = sqlx::query!(
            "SELECT fabric, spine_group, leaf, drift_fabric IS NOT NULL AS drifting
             FROM node_fabric_places WHERE node_id = $1",
            node as NodeId
        )
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(b) = &before
            && (&b.fabric, &b.spine_group, &b.leaf) == (&fabric, &spine_group, &leaf)
            && b.drifting != Some(true)
        {
            return Ok(());
        }
        sqlx::query!(
            "INSERT INTO node_fabric_places (node_id, fabric, spine_group, leaf, source, approved_by)
             VALUES ($1, $2, $3, $4, 'operator', $5)
             ON CONFLICT (node_id) DO UPDATE
             SET fabric = EXCLUDED.fabric, spine_group = EXCLUDED.spine_group, leaf = EXCLUDED.leaf,
                 source = 'operator', approved_by = EXCLUDED.approved_by, approved_at = now(),
                 drift_fabric = NULL, drift_spine_group = NULL, drift_leaf = NULL,
                 drift_source = NULL, drift_seen_at = NULL",
            node as NodeId,
            fabric,
            spine_group,
            leaf,
            actor as UserId,
        )
        .execute(&mut *tx)
        .await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(actor),
                action: "node.fabric.set",
                resource: &self.naming().node(&locked.region, node)?,
                before: before
                    .map(|b| json!({ "place": path(&b.fabric, &b.spine_group, &b.leaf) })),
                after: Some(json!({ "place": path(&fabric, &spine_group, &leaf) })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn fabric_tree(&self, _who: &Platform<PlatformStaff>) -> Result<FabricTree> {
        let rows = sqlx::query!(
            r#"SELECT n.id AS "id: NodeId", n.hostname, p.fabric, p.spine_group, p.leaf,
                      p.drift_fabric || '/' || p.drift_spine_group || '/' || p.drift_leaf AS seen,
                      (node_sells(n, 'gpu_slice') OR node_sells(n, 'baremetal')) AS "selling!",
                      (SELECT count(*) FROM node_resource_slots s
                        WHERE s.node_id = n.id AND s.retired_at IS NULL) AS "gpus!",
                      (SELECT count(*) FROM node_resource_slots s
                        WHERE s.node_id = n.id AND s.retired_at IS NULL AND s.drift IS NULL
                          AND s.cleanup_state = 'clean' AND s.out_of_service_event IS NULL
                          AND NOT EXISTS (SELECT 1 FROM resource_claims c
                                          WHERE c.node_id = n.id AND c.released_at IS NULL
                                            AND (c.slot_id = s.id OR c.kind = 'baremetal')))
                          AS "free!"
               FROM node_fabric_places p JOIN nodes n ON n.id = p.node_id
               ORDER BY p.fabric, p.spine_group, p.leaf, n.hostname"#
        )
        .fetch_all(self.pool())
        .await?;
        let mut drifting = Vec::new();
        let mut tree = Vec::with_capacity(rows.len());
        for r in rows {
            let drifts = r.seen.is_some();
            if let Some(seen) = r.seen {
                drifting.push(FabricDriftRow {
                    id: r.id,
                    hostname: r.hostname.clone(),
                    approved: path(&r.fabric, &r.spine_group, &r.leaf),
                    seen,
                });
            }
            tree.push((
                r.fabric,
                r.spine_group,
                r.leaf,
                FabricNodeRow {
                    id: r.id,
                    hostname: r.hostname,
                    free_gpus: r.free,
                    gpus: r.gpus,
                    selling: r.selling,
                    drifting: drifts,
                },
            ));
        }
        Ok(FabricTree {
            fabrics: fold_tree(tree),
            drifting,
        })
    }
}

/// The rows of [`FabricApi::fabric_tree`], in tree order, folded into the tree.
fn fold_tree(rows: Vec<(String, String, String, FabricNodeRow)>) -> Vec<FabricBranch> {
    let mut fabrics: Vec<FabricBranch> = Vec::new();
    for (fabric, spine, leaf, node) in rows {
        if fabrics.last().is_none_or(|f| f.name != fabric) {
            fabrics.push(FabricBranch {
                name: fabric,
                spines: Vec::new(),
            });
        }
        let spines = &mut fabrics.last_mut().expect("pushed above").spines;
        if spines.last().is_none_or(|s| s.name != spine) {
            spines.push(SpineBranch {
                name: spine,
                leaves: Vec::new(),
            });
        }
        let leaves = &mut spines.last_mut().expect("pushed above").leaves;
        if leaves.last().is_none_or(|l| l.name != leaf) {
            leaves.push(LeafBranch {
                name: leaf,
                free_gpus: 0,
                gpus: 0,
                nodes: Vec::new(),
            });
        }
        let branch = leaves.last_mut().expect("pushed above");
        branch.gpus += node.gpus;
        if node.selling {
            branch.free_gpus += node.free_gpus;
        }
        branch.nodes.push(node);
    }
    fabrics
}

/// The fleet's nodes among the topology's hosts, by lowercase hostname.
async fn fleet_nodes_named(
    tx: &mut sqlx::PgConnection,
    places: &[FabricPlace],
) -> Result<HashMap<String, Known>> {
    let hosts: Vec<String> = places.iter().map(|p| p.node.to_ascii_lowercase()).collect();
    let rows = sqlx::query!(
        r#"SELECT n.id AS "id: NodeId", n.hostname, n.region,
                  p.fabric AS "fabric?", p.spine_group AS "spine_group?", p.leaf AS "leaf?",
                  p.drift_fabric IS NOT NULL AS "drifting!"
           FROM nodes n LEFT JOIN node_fabric_places p ON p.node_id = n.id
           WHERE n.hostname = ANY($1) AND NOT n.ledger_only"#,
        &hosts
    )
    .fetch_all(tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let approved = match (r.fabric, r.spine_group, r.leaf) {
                (Some(f), Some(s), Some(l)) => Some((f, s, l)),
                _ => None,
            };
            (
                r.hostname,
                Known {
                    id: r.id,
                    region: r.region,
                    approved,
                    drifting: r.drifting,
                },
            )
        })
        .collect())
}

/// One node's part of an import: what it writes and the audit entry that says so.
struct Step<'a, 'c> {
    tx: &'a mut sqlx::Transaction<'c, sqlx::Postgres>,
    cp: &'a ControlPlane,
    actor: UserId,
    request_id: Option<&'a str>,
    fabric: &'a str,
    source: &'static str,
}

impl Step<'_, '_> {
    async fn audit(self, node: &Known, action: &str, after: serde_json::Value) -> Result<()> {
        audit::record(
            self.tx,
            AuditEntry {
                actor: Actor::User(self.actor),
                action,
                resource: &self.cp.naming().node(&node.region, node.id)?,
                before: None,
                after: Some(after),
                request_id: self.request_id,
            },
        )
        .await
        .map(|_| ())
    }

    /// A node's first place: the import is the operator's approval.
    async fn place(self, node: &Known, place: &FabricPlace) -> Result<()> {
        sqlx::query!(
            "INSERT INTO node_fabric_places (node_id, fabric, spine_group, leaf, source, approved_by)
             VALUES ($1, $2, $3, $4, $5, $6)",
            node.id as NodeId,
            self.fabric,
            place.spine_group,
            place.leaf,
            self.source,
            self.actor as UserId,
        )
        .execute(&mut **self.tx)
        .await?;
        let after = json!({
            "place": path(self.fabric, &place.spine_group, &place.leaf),
            "source": self.source,
        });
        self.audit(node, "node.fabric.place", after).await
    }

    /// The import agrees with the approved place: drift an earlier import saw is gone.
    async fn clear_drift(self, node: &Known) -> Result<()> {
        sqlx::query!(
            "UPDATE node_fabric_places
             SET drift_fabric = NULL, drift_spine_group = NULL, drift_leaf = NULL,
                 drift_source = NULL, drift_seen_at = NULL
             WHERE node_id = $1 AND drift_fabric IS NOT NULL",
            node.id as NodeId,
        )
        .execute(&mut **self.tx)
        .await?;
        let after = json!({ "source": self.source });
        self.audit(node, "node.fabric.drift_cleared", after).await
    }

    /// The import puts an approved node elsewhere: kept beside the approved place.
    async fn note_drift(self, node: &Known, place: &FabricPlace) -> Result<()> {
        sqlx::query!(
            "UPDATE node_fabric_places
             SET drift_fabric = $2, drift_spine_group = $3, drift_leaf = $4, drift_source = $5,
                 drift_seen_at = now()
             WHERE node_id = $1",
            node.id as NodeId,
            self.fabric,
            place.spine_group,
            place.leaf,
            self.source,
        )
        .execute(&mut **self.tx)
        .await?;
        let after = json!({
            "seen": path(self.fabric, &place.spine_group, &place.leaf),
            "source": self.source,
        });
        self.audit(node, "node.fabric.drift", after).await
    }
}
