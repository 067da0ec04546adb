//! The fleet: enrolling nodes, what their agents report, slot-map proposals and their approval,
//! drift, admin states, and the fleet and node read models. Posture is derived by the
//! `node_postures` view (migration 0006), never stored.
//!
//! What a node agent may do (with the `NodeAgent` proof) is above this, in `agent_api`: it
//! drives both the fleet and the allocations' lifecycle.
//!
//! - [`validate`]: the rules a slot must meet before an operator may approve it.
//! - [`enrolment`]: enrolling a node and its one-time bootstrap token.
//! - [`slot_map`]: discovery, slot-map proposals and the operator's decision.
//! - [`fabric`], [`fabric_places`]: where each node hangs off the InfiniBand fabric, read from
//!   `ibnetdiscover` or a Slurm `topology.conf`, and its approval.

use crate::internal::AuditLogInternal;

pub mod enrolment;
pub mod fabric;
pub mod fabric_places;
pub mod gpu_health;
pub mod slot_map;
pub mod validate;

pub use enrolment::{EnrolmentApi, NewNode};
pub use fabric_places::{
    FabricApi, FabricDrift, FabricImport, FabricTree, PlaceInput, TopologyFormat,
};
pub use slot_map::{SlotMapApi, SlotMapDecision, differences, queue_discovery};

use std::collections::BTreeMap;

use agent_protocol::Discovery;
use serde::{Deserialize, Serialize};
use serde_json::json;

use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{NodeId, SlotId};
use cp_identity::auth::{Platform, PlatformOperators, PlatformStaff};
pub use portal_types::fleet::{
    Enrolment, FleetView, NodeDetail, NodeFabricPlace, NodeSummary, POSTURES, ProposalSlot,
    ProposalView, SlotRow, TaskRow,
};
use slot_map::{proposal_view, wipe_policy_of};
pub use validate::{SlotProblem, validate_slots};

/// How long a bootstrap token may wait to be used.
pub const BOOTSTRAP_TOKEN_TTL: time::Duration = time::Duration::hours(24);

/// Seconds between heartbeats an agent is asked for; the posture view calls a node
/// unavailable after 60 s without one.
pub const HEARTBEAT_INTERVAL_S: u32 = 15;

pub const CAPACITY_SHAPES: [&str; 2] = ["gpu_slice", "baremetal"];

/// What an operator may set a node's admin state to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdminState {
    Active,
    Draining,
    Cordoned,
}

impl AdminState {
    pub fn as_str(self) -> &'static str {
        match self {
            AdminState::Active => "active",
            AdminState::Draining => "draining",
            AdminState::Cordoned => "cordoned",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "active" => Ok(AdminState::Active),
            "draining" => Ok(AdminState::Draining),
            "cordoned" => Ok(AdminState::Cordoned),
            other => Err(Error::Invalid {
                field: "admin state",
                reason: format!("{other:?} is not one of active, draining, cordoned"),
            }),
        }
    }

    /// The audited verb.
    fn action(self) -> &'static str {
        match self {
            AdminState::Active => "node.undrain",
            AdminState::Draining => "node.drain",
            AdminState::Cordoned => "node.cordon",
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct FleetFilter {
    pub region: Option<String>,
    pub posture: Option<String>,
    pub gpu_model: Option<String>,
}

pub use cp_base::secrets::{new_secret, secret_hash};

/// How read models still written as text show a time (the allocation's carry times).
pub use portal_types::utc;

/// What the control plane offers for the fleet: its read models and each node's admin state and network.
#[allow(async_fn_in_trait)]
pub trait FleetApi {
    /// Drain, un-drain (back to active) or cordon a node. Audited.
    async fn set_admin_state(
        &self,
        who: &Platform<PlatformOperators>,
        node: NodeId,
        state: AdminState,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// Sets where tenants reach the node's guests: its public address (empty: its hostname)
    /// and the first of its public ports. The port base can't move while allocations hold
    /// slots on the node (their forwarded ports would change under them). Audited.
    async fn set_node_network(
        &self,
        who: &Platform<PlatformOperators>,
        node: NodeId,
        public_host: &str,
        port_base: u16,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// The fleet page: every node with its derived posture, filtered, with counts.
    async fn fleet(
        &self,
        _who: &Platform<PlatformStaff>,
        filter: &FleetFilter,
    ) -> Result<FleetView>;

    /// The node page: facts, posture, slots, the latest proposal beside the current map,
    /// recent tasks with their phases, and the node's audit trail.
    async fn node_detail(&self, _who: &Platform<PlatformStaff>, node: NodeId)
    -> Result<NodeDetail>;
}

impl FleetApi for ControlPlane {
    #[tracing::instrument(skip_all, fields(node.id = %node, node.admin_state = state.as_str()))]
    async fn set_admin_state(
        &self,
        who: &Platform<PlatformOperators>,
        node: NodeId,
        state: AdminState,
        request_id: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let row = lock_node(&mut tx, node).await?;
        if row.admin_state == state.as_str() {
            return Err(Error::Conflict(format!(
                "the node is already {}",
                state.as_str()
            )));
        }
        sqlx::query!(
            "UPDATE nodes SET admin_state = $2 WHERE id = $1",
            node as NodeId,
            state.as_str()
        )
        .execute(&mut *tx)
        .await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.principal().user_id),
                action: state.action(),
                resource: &self.naming().node(&row.region, node)?,
                before: Some(json!({ "admin_state": row.admin_state })),
                after: Some(json!({ "admin_state": state.as_str() })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(node.id = %node))]
    async fn set_node_network(
        &self,
        who: &Platform<PlatformOperators>,
        node: NodeId,
        public_host: &str,
        port_base: u16,
        request_id: Option<&str>,
    ) -> Result<()> {
        let host = validate::public_host(public_host)?;
        if !(1024..=64511).contains(&port_base) {
            return Err(Error::Invalid {
                field: "public_port_base",
                reason: format!(
                    "{port_base}: give a port from 1024 to 64511 (128 slots of 8 ports must fit below 65536)"
                ),
            });
        }
        let mut tx = self.pool().begin().await?;
        let row = lock_node(&mut tx, node).await?;
        let before = sqlx::query!(
            r#"SELECT public_host, public_port_base,
                      (SELECT count(*) FROM allocations a
                       WHERE a.node_id = n.id AND a.state <> 'released') AS "live!"
               FROM nodes n WHERE id = $1"#,
            node as NodeId
        )
        .fetch_one(&mut *tx)
        .await?;
        if before.public_port_base != i32::from(port_base) && before.live > 0 {
            return Err(Error::Conflict(format!(
                "{} allocations hold slots on this node; move the port range once they are released (drain the node first)",
                before.live
            )));
        }
        sqlx::query!(
            "UPDATE nodes SET public_host = $2, public_port_base = $3 WHERE id = $1",
            node as NodeId,
            host.as_deref(),
            i32::from(port_base)
        )
        .execute(&mut *tx)
        .await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.principal().user_id),
                action: "node.network",
                resource: &self.naming().node(&row.region, node)?,
                before: Some(json!({
                    "public_host": before.public_host, "public_port_base": before.public_port_base,
                })),
                after: Some(json!({ "public_host": host, "public_port_base": port_base })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn fleet(
        &self,
        _who: &Platform<PlatformStaff>,
        filter: &FleetFilter,
    ) -> Result<FleetView> {
        let all = self.node_summaries(None).await?;
        let set = |s: &Option<String>| {
            s.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
        };
        let (region, posture, model) = (
            set(&filter.region),
            set(&filter.posture),
            set(&filter.gpu_model),
        );
        let mut regions: Vec<String> = all.iter().map(|n| n.region.clone()).collect();
        regions.sort();
        regions.dedup();
        let mut models: Vec<String> = all.iter().filter_map(|n| n.gpu_model.clone()).collect();
        models.sort();
        models.dedup();
        let nodes: Vec<NodeSummary> = all
            .into_iter()
            .filter(|n| region.as_ref().is_none_or(|r| &n.region == r))
            .filter(|n| posture.as_ref().is_none_or(|p| &n.posture == p))
            .filter(|n| {
                model
                    .as_ref()
                    .is_none_or(|m| n.gpu_model.as_ref() == Some(m))
            })
            .collect();
        let count = |f: &dyn Fn(&NodeSummary) -> bool| nodes.iter().filter(|n| f(n)).count() as i64;
        let by_posture = POSTURES
            .iter()
            .map(|(p, label)| {
                (
                    p.to_string(),
                    label.to_string(),
                    count(&|n| n.posture == *p),
                )
            })
            .collect();
        let mut by_region: BTreeMap<String, i64> = BTreeMap::new();
        let mut by_model: BTreeMap<String, i64> = BTreeMap::new();
        for n in &nodes {
            *by_region.entry(n.region.clone()).or_default() += 1;
            *by_model
                .entry(
                    n.gpu_model
                        .clone()
                        .unwrap_or_else(|| "not discovered yet".into()),
                )
                .or_default() += 1;
        }
        Ok(FleetView {
            nodes,
            by_posture,
            by_region: by_region.into_iter().collect(),
            by_model: by_model.into_iter().collect(),
            regions,
            models,
        })
    }

    async fn node_detail(
        &self,
        _who: &Platform<PlatformStaff>,
        node: NodeId,
    ) -> Result<NodeDetail> {
        let summary = self
            .node_summaries(Some(node))
            .await?
            .pop()
            .ok_or(Error::NotFound { what: "node" })?;
        let facts = sqlx::query!(
            r#"SELECT health, health_detail, created_at, agent_enrolled_at, public_host,
                      public_port_base,
                      (SELECT expires_at FROM node_bootstrap_tokens t
                       WHERE t.node_id = n.id AND t.used_at IS NULL AND t.revoked_at IS NULL
                         AND t.expires_at > now()) AS open_token_expires,
                      p.fabric AS "fabric?", p.spine_group AS "spine_group?", p.leaf AS "leaf?",
                      p.source AS "fabric_source?",
                      p.drift_fabric || '/' || p.drift_spine_group || '/' || p.drift_leaf AS fabric_drift
               FROM nodes n LEFT JOIN node_fabric_places p ON p.node_id = n.id
               WHERE n.id = $1"#,
            node as NodeId
        )
        .fetch_one(self.pool())
        .await?;
        let slots = live_slots(&mut *self.pool().acquire().await?, node).await?;
        let proposal = sqlx::query!(
            r#"SELECT p.generation, p.discovery, p.status, p.decision_reason,
                      p.discovered_at, u.email AS "decided_by?"
               FROM slot_map_proposals p LEFT JOIN users u ON u.id = p.decided_by
               WHERE p.node_id = $1 ORDER BY p.generation DESC LIMIT 1"#,
            node as NodeId
        )
        .fetch_optional(self.pool())
        .await?;
        let proposal = match proposal {
            None => None,
            Some(p) => {
                let discovery: Discovery = serde_json::from_value(p.discovery)
                    .map_err(|e| Error::Corrupt(format!("stored discovery: {e}")))?;
                Some(proposal_view(
                    &discovery,
                    &slots,
                    p.generation,
                    p.discovered_at,
                    p.status,
                    p.decided_by,
                    p.decision_reason,
                ))
            }
        };
        let task_rows = sqlx::query!(
            r#"SELECT t.id, t.kind, t.state, t.error, t.created_at,
                      coalesce(json_agg(json_build_array(ph.phase, ph.status, ph.elapsed_ms) ORDER BY ph.id)
                               FILTER (WHERE ph.id IS NOT NULL), '[]') AS "phases!"
               FROM agent_tasks t LEFT JOIN agent_task_phases ph ON ph.task_id = t.id
               WHERE t.node_id = $1
               GROUP BY t.id ORDER BY t.created_at DESC LIMIT 10"#,
            node as NodeId
        )
        .fetch_all(self.pool())
        .await?;
        let tasks = task_rows
            .into_iter()
            .map(|t| TaskRow {
                id: t.id.to_string(),
                kind: t.kind,
                state: t.state,
                created_at: t.created_at,
                error: t.error,
                phases: serde_json::from_value(t.phases).unwrap_or_default(),
            })
            .collect();
        let gpu_events = sqlx::query!(
            r#"SELECT e.gpu_pci_address, s.slot_index AS "slot_index?", e.kind, e.xid, e.detail,
                      e.observed_at, e.took_out_of_service
               FROM gpu_health_events e LEFT JOIN node_resource_slots s ON s.id = e.slot_id
               WHERE e.node_id = $1 ORDER BY e.recorded_at DESC, e.observed_at DESC LIMIT 20"#,
            node as NodeId
        )
        .fetch_all(self.pool())
        .await?
        .into_iter()
        .map(|e| gpu_health::GpuHealthEvent {
            gpu_pci_address: e.gpu_pci_address,
            slot_index: e.slot_index,
            kind: e.kind,
            xid: e.xid,
            detail: e.detail,
            observed_at: e.observed_at,
            took_out_of_service: e.took_out_of_service,
        })
        .collect();
        let name = self.naming().node(&summary.region, node)?;
        let audit = self.platform_trail(name.to_string()).await?;
        let base = u16::try_from(facts.public_port_base)
            .map_err(|_| Error::Corrupt(format!("public_port_base {}", facts.public_port_base)))?;
        let last_slot = slots.iter().map(|s| s.slot_index).max();
        let fabric_place = match (
            facts.fabric,
            facts.spine_group,
            facts.leaf,
            facts.fabric_source,
        ) {
            (Some(fabric), Some(spine_group), Some(leaf), Some(source)) => Some(NodeFabricPlace {
                fabric,
                spine_group,
                leaf,
                source,
                drift: facts.fabric_drift,
            }),
            _ => None,
        };
        Ok(NodeDetail {
            fabric_place,
            public_host: facts.public_host,
            public_port_base: base,
            public_ports: match last_slot.and_then(|i| {
                agent_protocol::identity::public_port(base, u32::try_from(i).ok()?, 7)
            }) {
                Some(last) => format!("{base}–{last}"),
                None => "none yet (no approved slots)".into(),
            },
            canonical_name: name.to_string(),
            health: facts.health,
            health_detail: facts.health_detail,
            enrolled_at: facts.created_at,
            agent_enrolled_at: facts.agent_enrolled_at,
            open_token_expires: facts.open_token_expires,
            node: summary,
            slots,
            proposal,
            tasks,
            gpu_events,
            audit,
        })
    }
}

/// What the other areas of this crate use of it, behind no proof: never for the pages or the API.
#[allow(async_fn_in_trait)]
pub(crate) trait FleetInternal {
    async fn node_summaries(&self, only: Option<NodeId>) -> Result<Vec<NodeSummary>>;
}

impl FleetInternal for ControlPlane {
    async fn node_summaries(&self, only: Option<NodeId>) -> Result<Vec<NodeSummary>> {
        let rows = sqlx::query!(
            r#"SELECT n.id AS "id: NodeId", n.hostname, n.region, n.rack, n.family,
                      n.capacity_shapes, n.admin_state, n.agent_version,
                      n.last_heartbeat_at,
                      p.posture AS "posture!", p.reason AS "reason!",
                      p.live_slots AS "live_slots!", p.schedulable_slots AS "schedulable_slots!",
                      p.drifted_slots AS "drifted_slots!", p.slice_claims AS "slice_claims!",
                      coalesce(
                          (SELECT s.gpu_model FROM node_resource_slots s
                           WHERE s.node_id = n.id AND s.retired_at IS NULL
                           ORDER BY s.slot_index LIMIT 1),
                          (SELECT d.discovery -> 'host' -> 'gpus' -> 0 ->> 'model' FROM slot_map_proposals d
                           WHERE d.node_id = n.id ORDER BY d.generation DESC LIMIT 1)
                      ) AS gpu_model,
                      (SELECT d.generation FROM slot_map_proposals d
                       WHERE d.node_id = n.id AND d.status = 'pending') AS pending_generation
               FROM nodes n JOIN node_postures p ON p.node_id = n.id
               WHERE NOT n.ledger_only AND ($1::uuid IS NULL OR n.id = $1)
               ORDER BY n.region, n.hostname"#,
            only as Option<NodeId>,
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| NodeSummary {
                id: r.id,
                hostname: r.hostname,
                region: r.region,
                rack: r.rack,
                family: r.family,
                capacity_shapes: r.capacity_shapes,
                admin_state: r.admin_state,
                posture: r.posture,
                posture_reason: r.reason,
                gpu_model: r.gpu_model,
                live_slots: r.live_slots,
                schedulable_slots: r.schedulable_slots,
                drifted_slots: r.drifted_slots,
                claimed_slots: r.slice_claims,
                agent_version: r.agent_version,
                last_heartbeat: r.last_heartbeat_at,
                pending_generation: r.pending_generation,
            })
            .collect())
    }
}

/// The node's approved (not retired) slots, with their state, in index order.
pub async fn live_slots(conn: &mut sqlx::PgConnection, node: NodeId) -> Result<Vec<SlotRow>> {
    let rows = sqlx::query!(
        r#"SELECT s.id AS "id: SlotId", s.slot_index, s.gpu_pci_address, s.gpu_model, s.gpu_uuid,
                      s.numa_node, s.nvme_pci_address, s.nvme_serial, s.nvme_namespace,
                      s.ib_vf_pci_address, s.cpu_set, s.memory_mib, s.capacity_metadata,
                      s.approved_generation, s.drift, s.cleanup_state, s.cleanup_detail,
                      (SELECT e.detail || ' (since ' || to_char(s.out_of_service_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') || ' UTC)'
                       FROM gpu_health_events e WHERE e.id = s.out_of_service_event) AS out_of_service,
                      EXISTS (SELECT 1 FROM resource_claims c
                              WHERE c.slot_id = s.id AND c.released_at IS NULL) AS "claimed!"
               FROM node_resource_slots s
               WHERE s.node_id = $1 AND s.retired_at IS NULL
               ORDER BY s.slot_index"#,
        node as NodeId
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| SlotRow {
            state: if r.out_of_service.is_some() {
                "out of service".into()
            } else if r.cleanup_state == "blocked" {
                "cleanup blocked".into()
            } else if r.cleanup_state == "cleaning" {
                "cleaning".into()
            } else if r.claimed {
                "claimed".into()
            } else if r.drift.is_some() {
                "drifted".into()
            } else {
                "schedulable".into()
            },
            id: r.id,
            slot_index: r.slot_index,
            gpu_pci_address: r.gpu_pci_address,
            gpu_model: r.gpu_model,
            gpu_uuid: r.gpu_uuid,
            numa_node: r.numa_node,
            nvme_pci_address: r.nvme_pci_address,
            nvme_serial: r.nvme_serial,
            nvme_namespace: r.nvme_namespace,
            ib_vf_pci_address: r.ib_vf_pci_address,
            cpu_set: r.cpu_set,
            memory_mib: r.memory_mib,
            wipe_policy: wipe_policy_of(&r.capacity_metadata),
            approved_generation: r.approved_generation,
            drift: r.drift,
            cleanup_detail: r.cleanup_detail,
            out_of_service: r.out_of_service,
        })
        .collect())
}

/// What an operator says they checked before putting a slot back (a blocked slot marked clean,
/// a slot returned to service): 1–1000 characters.
pub fn checked_reason(reason: &str) -> Result<&str> {
    let reason = reason.trim();
    if reason.is_empty() || reason.chars().count() > 1000 {
        return Err(Error::Invalid {
            field: "reason",
            reason: "say what you checked (up to 1000 characters)".into(),
        });
    }
    Ok(reason)
}

/// A node's row, locked for the rest of the transaction: every change to a node, its
/// proposals or its slots takes this lock first, so they serialise per node. The lock is
/// `FOR NO KEY UPDATE`: it excludes every other holder (and placement's `SKIP LOCKED`), but
/// not the share lock a foreign-key check takes on the node, so a transaction that holds an
/// allocation and queues a task naming its node never waits for a transaction that holds the
/// node and waits for that allocation (the deadlock of
/// `an_agents_result_and_a_dispatch_of_the_same_allocation_never_deadlock`).
pub struct LockedNode {
    pub hostname: String,
    pub region: String,
    pub admin_state: String,
}

pub async fn lock_node(tx: &mut sqlx::PgConnection, node: NodeId) -> Result<LockedNode> {
    sqlx::query_as!(
        LockedNode,
        // A ledger-only node is no host: nothing an operator does to a node applies to it.
        "SELECT hostname, region, admin_state FROM nodes
         WHERE id = $1 AND NOT ledger_only FOR NO KEY UPDATE",
        node as NodeId
    )
    .fetch_optional(tx)
    .await?
    .ok_or(Error::NotFound { what: "node" })
}
