//! The fleet: enrolling nodes, what their agents report, slot-map proposals and their approval,
//! drift, admin states, and the fleet and node read models. Posture is derived by the
//! `node_postures` view (migration 0006), never stored.
//!
//! What a node agent may do (with the `NodeAgent` proof) is above this, in `agent_api`: it
//! drives both the fleet and the allocations' lifecycle.
//!
//! - [`validate`]: the rules a slot must meet before an operator may approve it.

use crate::internal::AuditLogInternal;

pub mod gpu_health;
pub mod validate;

use std::collections::BTreeMap;

use agent_protocol::{Discovery, SlotSpec, TaskSpec, metadata};
use serde::{Deserialize, Serialize};
use serde_json::json;
use time::OffsetDateTime;

use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{AgentTaskId, NodeId, SlotId, UserId};
use cp_identity::auth::{Platform, PlatformOperators, PlatformStaff};
pub use portal_types::fleet::{
    Enrolment, FleetView, NodeDetail, NodeSummary, POSTURES, ProposalSlot, ProposalView, SlotRow,
    TaskRow,
};
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

/// What an operator types to enrol a node.
#[derive(Clone, Debug, Default)]
pub struct NewNode {
    pub hostname: String,
    pub region: String,
    pub rack: String,
    pub family: String,
    pub capacity_shapes: Vec<String>,
}

#[derive(Clone, Debug, Default)]
pub struct FleetFilter {
    pub region: Option<String>,
    pub posture: Option<String>,
    pub gpu_model: Option<String>,
}

/// An operator's decision on one proposal generation.
#[derive(Clone, Debug)]
pub enum SlotMapDecision {
    /// Approve the slots (`None`: all of them), with the wipe policy set on each when given.
    Approve {
        only: Option<Vec<u32>>,
        wipe_policy: Option<String>,
    },
    Reject {
        reason: String,
    },
}

pub use cp_base::secrets::{new_secret, secret_hash};

fn check_new_node(n: &NewNode) -> Result<NewNode> {
    let invalid = |field: &'static str, reason: &str| Error::Invalid {
        field,
        reason: reason.to_string(),
    };
    let hostname = n.hostname.trim().to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if hostname.is_empty() || hostname.len() > 253 || !hostname.split('.').all(label_ok) {
        return Err(invalid(
            "hostname",
            "use letters, digits and hyphens in dot-separated labels (e.g. gpu-hgx-01)",
        ));
    }
    let region = n.region.trim().to_string();
    let region_ok = region.len() >= 2
        && region.len() <= 32
        && region.starts_with(|c: char| c.is_ascii_lowercase())
        && !region.ends_with('-')
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !region_ok {
        return Err(invalid(
            "region",
            "use 2–32 lowercase letters, digits and hyphens, starting with a letter (e.g. eu-west-1)",
        ));
    }
    let rack = n.rack.trim().to_string();
    if rack.is_empty() || rack.chars().count() > 64 || rack.chars().any(char::is_control) {
        return Err(invalid(
            "rack",
            "give the rack, up to 64 characters (e.g. r12)",
        ));
    }
    let family = n.family.trim().to_string();
    let family_ok = family.len() >= 2
        && family.len() <= 64
        && family
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !family.starts_with('-')
        && !family.ends_with('-');
    if !family_ok {
        return Err(invalid(
            "node family",
            "use lowercase letters, digits and hyphens (e.g. hgx-h100-8x)",
        ));
    }
    let mut shapes: Vec<String> = Vec::new();
    for s in &n.capacity_shapes {
        let s = s.trim();
        if !CAPACITY_SHAPES.contains(&s) {
            return Err(invalid(
                "capacity shapes",
                &format!("{s:?} is not one of gpu_slice, baremetal"),
            ));
        }
        if !shapes.iter().any(|x| x == s) {
            shapes.push(s.to_string());
        }
    }
    if shapes.is_empty() {
        return Err(invalid(
            "capacity shapes",
            "choose at least one shape the node may serve (gpu_slice, baremetal)",
        ));
    }
    Ok(NewNode {
        hostname,
        region,
        rack,
        family,
        capacity_shapes: shapes,
    })
}

/// How read models still written as text show a time (the allocation's carry times).
pub use portal_types::utc;

fn wipe_policy_of(meta: &serde_json::Value) -> String {
    meta.get(metadata::DESTRUCTIVE_WIPE_POLICY)
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string()
}

/// How an approved slot and a proposed slot with the same GPU differ; empty when they agree.
pub fn differences(current: &SlotRow, proposed: &SlotSpec) -> Vec<String> {
    let mut out = Vec::new();
    let nvme = proposed.nvme.as_ref();
    let cmp = |what: &str, was: &str, now: &str, out: &mut Vec<String>| {
        if was != now {
            out.push(format!("{what} moved from {was} to {now}"));
        }
    };
    cmp(
        "NVMe",
        &current.nvme_pci_address,
        nvme.map_or("nothing", |n| n.pci_address.as_str()),
        &mut out,
    );
    if let Some(n) = nvme
        && n.pci_address == current.nvme_pci_address
        && n.serial != current.nvme_serial
    {
        out.push(format!(
            "NVMe serial changed from {} to {} (drive replaced)",
            current.nvme_serial, n.serial
        ));
    }
    cmp(
        "InfiniBand VF",
        &current.ib_vf_pci_address,
        proposed.ib_vf_pci_address.as_deref().unwrap_or("nothing"),
        &mut out,
    );
    if proposed.numa_node != Some(current.numa_node as u32) {
        out.push(format!(
            "NUMA node changed from {} to {}",
            current.numa_node,
            proposed
                .numa_node
                .map_or("none".to_string(), |n| n.to_string())
        ));
    }
    if proposed.gpu.uuid.is_some() && proposed.gpu.uuid != current.gpu_uuid {
        out.push("GPU UUID changed (board replaced)".into());
    }
    if proposed.cpu_set != current.cpu_set {
        out.push(format!(
            "CPU set changed from {} to {}",
            current.cpu_set, proposed.cpu_set
        ));
    }
    if proposed.memory_mib as i64 != current.memory_mib {
        out.push(format!(
            "memory changed from {} MiB to {} MiB",
            current.memory_mib, proposed.memory_mib
        ));
    }
    out
}

/// What the control plane offers for the fleet.
#[allow(async_fn_in_trait)]
pub trait FleetApi {
    /// Enrols a node and returns its one-time bootstrap token.
    async fn enrol_node(
        &self,
        who: &Platform<PlatformOperators>,
        node: &NewNode,
        request_id: Option<&str>,
    ) -> Result<Enrolment>;

    /// A fresh bootstrap token for a node (the old one, if unused, stops working). Used to
    /// enrol a reinstalled host again: its old credential is revoked when the new token is used.
    async fn reissue_bootstrap_token(
        &self,
        who: &Platform<PlatformOperators>,
        node: NodeId,
        request_id: Option<&str>,
    ) -> Result<Enrolment>;

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

    /// Queues a fresh `slice.topology_discover` for the node's agent.
    async fn request_discovery(
        &self,
        who: &Platform<PlatformOperators>,
        node: NodeId,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// Approves or rejects proposal `generation` of a node. The generation must be the node's
    /// open proposal: approving a stale or already decided one fails and says so, and of two
    /// operators deciding at once exactly one wins (row lock, then the `pending` check; the
    /// table's trigger refuses a second decision whatever the code does).
    async fn decide_slot_map(
        &self,
        who: &Platform<PlatformOperators>,
        node: NodeId,
        generation: i32,
        decision: &SlotMapDecision,
        request_id: Option<&str>,
    ) -> Result<usize>;

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
    #[tracing::instrument(skip_all, fields(node.hostname = %node.hostname))]
    async fn enrol_node(
        &self,
        who: &Platform<PlatformOperators>,
        node: &NewNode,
        request_id: Option<&str>,
    ) -> Result<Enrolment> {
        let node = check_new_node(node)?;
        let id = NodeId::new_random();
        let name = self.naming().node(&node.region, id)?;
        let actor = who.principal().user_id;
        let mut tx = self.pool().begin().await?;
        let inserted = sqlx::query!(
            r#"INSERT INTO nodes (id, hostname, region, rack, family, capacity_shapes, enrolled_by)
               VALUES ($1, $2, $3, $4, $5, $6, $7)
               ON CONFLICT (hostname) DO NOTHING"#,
            id as NodeId,
            node.hostname,
            node.region,
            node.rack,
            node.family,
            &node.capacity_shapes,
            actor as UserId,
        )
        .execute(&mut *tx)
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(Error::Conflict(format!(
                "a node named {} is already enrolled",
                node.hostname
            )));
        }
        let (token, expires) = issue_token(&mut tx, id, actor).await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(actor),
                action: "node.enrol",
                resource: &name,
                before: None,
                after: Some(json!({
                    "hostname": node.hostname, "region": node.region, "rack": node.rack,
                    "family": node.family, "capacity_shapes": node.capacity_shapes,
                    "bootstrap_token_expires": utc(expires),
                })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(Enrolment {
            node_id: id,
            hostname: node.hostname,
            bootstrap_token: token,
            expires_at: expires,
        })
    }

    #[tracing::instrument(skip_all, fields(node.id = %node))]
    async fn reissue_bootstrap_token(
        &self,
        who: &Platform<PlatformOperators>,
        node: NodeId,
        request_id: Option<&str>,
    ) -> Result<Enrolment> {
        let actor = who.principal().user_id;
        let mut tx = self.pool().begin().await?;
        let row = lock_node(&mut tx, node).await?;
        sqlx::query!(
            "UPDATE node_bootstrap_tokens SET revoked_at = now()
             WHERE node_id = $1 AND used_at IS NULL AND revoked_at IS NULL",
            node as NodeId
        )
        .execute(&mut *tx)
        .await?;
        let (token, expires) = issue_token(&mut tx, node, actor).await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(actor),
                action: "node.bootstrap_token.issue",
                resource: &self.naming().node(&row.region, node)?,
                before: None,
                after: Some(json!({ "expires": utc(expires) })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(Enrolment {
            node_id: node,
            hostname: row.hostname,
            bootstrap_token: token,
            expires_at: expires,
        })
    }

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

    #[tracing::instrument(skip_all, fields(node.id = %node))]
    async fn request_discovery(
        &self,
        who: &Platform<PlatformOperators>,
        node: NodeId,
        request_id: Option<&str>,
    ) -> Result<()> {
        let actor = who.principal().user_id;
        let mut tx = self.pool().begin().await?;
        let region = lock_node(&mut tx, node).await?.region;
        if !queue_discovery(&mut tx, node, Some(actor)).await? {
            return Err(Error::Conflict(
                "a discovery is already queued or running on this node".into(),
            ));
        }
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(actor),
                action: "node.discovery.request",
                resource: &self.naming().node(&region, node)?,
                before: None,
                after: None,
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(node.id = %node, slot_map.generation = generation))]
    async fn decide_slot_map(
        &self,
        who: &Platform<PlatformOperators>,
        node: NodeId,
        generation: i32,
        decision: &SlotMapDecision,
        request_id: Option<&str>,
    ) -> Result<usize> {
        let actor = who.principal().user_id;
        let mut tx = self.pool().begin().await?;
        let region = lock_node(&mut tx, node).await?.region;
        let proposal = sqlx::query!(
            r#"SELECT generation, status, discovery,
                      (SELECT max(generation) FROM slot_map_proposals WHERE node_id = $1) AS "latest!"
               FROM slot_map_proposals WHERE node_id = $1 AND generation = $2"#,
            node as NodeId,
            generation
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound {
            what: "slot map proposal",
        })?;
        if proposal.status != "pending" {
            return Err(Error::Conflict(if proposal.latest > generation {
                format!(
                    "slot map generation {generation} is stale: generation {} is the latest. Reload and review it.",
                    proposal.latest
                )
            } else {
                format!(
                    "slot map generation {generation} was already {} by someone else. Reload to see the decision.",
                    proposal.status.replace('_', " ")
                )
            }));
        }
        let name = self.naming().node(&region, node)?;

        let (status, reason, approved) = match decision {
            SlotMapDecision::Reject { reason } => {
                let reason = reason.trim();
                if reason.is_empty() {
                    return Err(Error::Invalid {
                        field: "reason",
                        reason: "say why the proposal is rejected".into(),
                    });
                }
                if reason.chars().count() > 1000 {
                    return Err(Error::Invalid {
                        field: "reason",
                        reason: "keep it under 1000 characters".into(),
                    });
                }
                ("rejected", Some(reason.to_string()), 0)
            }
            SlotMapDecision::Approve { only, wipe_policy } => {
                let discovery: Discovery = serde_json::from_value(proposal.discovery.clone())
                    .map_err(|e| Error::Corrupt(format!("stored discovery: {e}")))?;
                let selected = select_slots(&discovery, only.as_deref(), wipe_policy.as_deref())?;
                let problems = validate_slots(&discovery, &selected);
                if !problems.is_empty() {
                    return Err(Error::Invalid {
                        field: "slot map",
                        reason: problems
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; "),
                    });
                }
                let all = selected.len() == discovery.proposed_slots.len();
                apply_slots(&mut tx, node, generation, actor, &discovery, &selected, all).await?;
                (
                    if all {
                        "approved"
                    } else {
                        "partially_approved"
                    },
                    None,
                    selected.len(),
                )
            }
        };
        let decided = sqlx::query!(
            "UPDATE slot_map_proposals
             SET status = $3, decided_by = $4, decided_at = now(), decision_reason = $5
             WHERE node_id = $1 AND generation = $2 AND status = 'pending'",
            node as NodeId,
            generation,
            status,
            actor as UserId,
            reason,
        )
        .execute(&mut *tx)
        .await?;
        if decided.rows_affected() != 1 {
            return Err(Error::Conflict(format!(
                "slot map generation {generation} was decided by someone else meanwhile"
            )));
        }
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(actor),
                action: if status == "rejected" {
                    "node.slot_map.reject"
                } else {
                    "node.slot_map.approve"
                },
                resource: &name,
                before: Some(json!({ "generation": generation, "status": "pending" })),
                after: Some(json!({
                    "generation": generation, "status": status,
                    "slots": approved, "reason": reason,
                    "wipe_policy": match decision {
                        SlotMapDecision::Approve { wipe_policy, .. } => wipe_policy.clone(),
                        SlotMapDecision::Reject { .. } => None,
                    },
                })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(approved)
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
                         AND t.expires_at > now()) AS open_token_expires
               FROM nodes n WHERE id = $1"#,
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
        Ok(NodeDetail {
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
               WHERE ($1::uuid IS NULL OR n.id = $1)
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
        "SELECT hostname, region, admin_state FROM nodes WHERE id = $1 FOR NO KEY UPDATE",
        node as NodeId
    )
    .fetch_optional(tx)
    .await?
    .ok_or(Error::NotFound { what: "node" })
}

/// The slots an approval covers, with the operator's wipe policy applied.
fn select_slots(
    discovery: &Discovery,
    only: Option<&[u32]>,
    wipe_policy: Option<&str>,
) -> Result<Vec<SlotSpec>> {
    let mut selected: Vec<SlotSpec> = match only {
        None => discovery.proposed_slots.clone(),
        Some(indexes) => {
            if indexes.is_empty() {
                return Err(Error::Invalid {
                    field: "slots",
                    reason: "select at least one slot to approve".into(),
                });
            }
            let mut out = Vec::new();
            for i in indexes {
                let slot = discovery
                    .proposed_slots
                    .iter()
                    .find(|s| s.slot_index == *i)
                    .ok_or_else(|| Error::Invalid {
                        field: "slots",
                        reason: format!("the proposal has no slot {i}"),
                    })?;
                if !out.iter().any(|s: &SlotSpec| s.slot_index == *i) {
                    out.push(slot.clone());
                }
            }
            out
        }
    };
    if let Some(policy) = wipe_policy.map(str::trim).filter(|p| !p.is_empty()) {
        for slot in &mut selected {
            slot.capacity_metadata.insert(
                metadata::DESTRUCTIVE_WIPE_POLICY.to_string(),
                policy.to_string(),
            );
        }
    }
    Ok(selected)
}

/// Writes approved slots: a slot whose GPU is already approved keeps its id and index and
/// takes the new facts (its drift cleared); a new GPU gets a new slot; with a full approval,
/// approved slots whose GPU is gone are retired. A claimed slot may not change under its
/// allocation.
async fn apply_slots(
    tx: &mut sqlx::PgConnection,
    node: NodeId,
    generation: i32,
    actor: UserId,
    discovery: &Discovery,
    selected: &[SlotSpec],
    full: bool,
) -> Result<()> {
    let live = sqlx::query!(
        r#"SELECT s.id AS "id: SlotId", s.slot_index, s.gpu_pci_address,
                  EXISTS (SELECT 1 FROM resource_claims c
                          WHERE c.slot_id = s.id AND c.released_at IS NULL) AS "claimed!"
           FROM node_resource_slots s WHERE s.node_id = $1 AND s.retired_at IS NULL"#,
        node as NodeId
    )
    .fetch_all(&mut *tx)
    .await?;
    if full {
        for old in &live {
            let still_there = discovery
                .proposed_slots
                .iter()
                .any(|s| s.gpu.pci_address == old.gpu_pci_address);
            if still_there {
                continue;
            }
            if old.claimed {
                return Err(Error::Conflict(format!(
                    "slot {} ({}) is claimed by an allocation; it can be retired once released",
                    old.slot_index, old.gpu_pci_address
                )));
            }
            sqlx::query!(
                "UPDATE node_resource_slots SET retired_at = now() WHERE id = $1",
                old.id as SlotId
            )
            .execute(&mut *tx)
            .await?;
        }
    }
    let mut used: Vec<i32> = live
        .iter()
        .filter(|o| {
            !full
                || discovery
                    .proposed_slots
                    .iter()
                    .any(|s| s.gpu.pci_address == o.gpu_pci_address)
        })
        .map(|o| o.slot_index)
        .collect();
    for slot in selected {
        let nvme = slot
            .nvme
            .as_ref()
            .expect("validated: every slot has an NVMe");
        let vf = slot.ib_vf_pci_address.clone().unwrap_or_default();
        let meta = serde_json::to_value(&slot.capacity_metadata).expect("a map serializes");
        let numa = slot
            .numa_node
            .expect("validated: every GPU has a NUMA node") as i32;
        // A slot whose GPU is already approved keeps its id and index; a new one gets the
        // proposal's index, or the lowest free one.
        let (id, index) = match live
            .iter()
            .find(|o| o.gpu_pci_address == slot.gpu.pci_address)
        {
            Some(old) if old.claimed => {
                return Err(Error::Conflict(format!(
                    "slot {} ({}) is claimed by an allocation; approve it again once released",
                    old.slot_index, old.gpu_pci_address
                )));
            }
            Some(old) => (old.id, old.slot_index),
            None => {
                let wanted = slot.slot_index as i32;
                let index = if used.contains(&wanted) {
                    (0..)
                        .find(|i| !used.contains(i))
                        .expect("a free index exists")
                } else {
                    wanted
                };
                used.push(index);
                (SlotId::new_random(), index)
            }
        };
        sqlx::query!(
            r#"INSERT INTO node_resource_slots
                   (id, node_id, slot_index, gpu_pci_address, gpu_model, gpu_uuid, numa_node,
                    nvme_pci_address, nvme_serial, nvme_namespace, nvme_size_bytes,
                    ib_vf_pci_address, cpu_set, memory_mib, capacity_metadata,
                    approved_generation, approved_by)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
               ON CONFLICT (id) DO UPDATE SET
                   gpu_model = EXCLUDED.gpu_model, gpu_uuid = EXCLUDED.gpu_uuid,
                   numa_node = EXCLUDED.numa_node, nvme_pci_address = EXCLUDED.nvme_pci_address,
                   nvme_serial = EXCLUDED.nvme_serial, nvme_namespace = EXCLUDED.nvme_namespace,
                   nvme_size_bytes = EXCLUDED.nvme_size_bytes,
                   ib_vf_pci_address = EXCLUDED.ib_vf_pci_address, cpu_set = EXCLUDED.cpu_set,
                   memory_mib = EXCLUDED.memory_mib, capacity_metadata = EXCLUDED.capacity_metadata,
                   approved_generation = EXCLUDED.approved_generation,
                   approved_by = EXCLUDED.approved_by, approved_at = now(),
                   drift = NULL, drift_generation = NULL"#,
            id as SlotId,
            node as NodeId,
            index,
            slot.gpu.pci_address,
            slot.gpu.model,
            slot.gpu.uuid,
            numa,
            nvme.pci_address,
            nvme.serial,
            nvme.namespace,
            nvme.size_bytes as i64,
            vf,
            slot.cpu_set,
            slot.memory_mib as i64,
            meta,
            generation,
            actor as UserId,
        )
        .execute(&mut *tx)
        .await?;
    }
    store_partitions(tx, node, discovery).await
}

/// The node's NVLink fabric partitions, by slot, from the approved discovery: placement
/// gives a 2-, 4- or 8-GPU slice exactly one of them. Only partitions whose every GPU is an
/// approved slot are kept, and of one size only a disjoint set (in partition id order), so
/// that counting free partitions counts placements.
async fn store_partitions(
    tx: &mut sqlx::PgConnection,
    node: NodeId,
    discovery: &Discovery,
) -> Result<()> {
    let slots = live_slots(&mut *tx, node).await?;
    sqlx::query!(
        "DELETE FROM node_fabric_partitions WHERE node_id = $1",
        node as NodeId
    )
    .execute(&mut *tx)
    .await?;
    let mut kept: Vec<Vec<uuid::Uuid>> = Vec::new();
    let mut partitions = discovery.host.fabric_partitions.clone();
    partitions.sort_by_key(|p| p.id);
    for p in partitions {
        if ![2, 4, 8].contains(&p.gpus.len()) {
            continue;
        }
        let ids: Option<Vec<uuid::Uuid>> = p
            .gpus
            .iter()
            .map(|g| {
                slots
                    .iter()
                    .find(|s| &s.gpu_pci_address == g)
                    .map(|s| s.id.0)
            })
            .collect();
        let Some(ids) = ids else { continue };
        let overlaps = kept
            .iter()
            .any(|k| k.len() == ids.len() && k.iter().any(|i| ids.contains(i)));
        if overlaps {
            continue;
        }
        sqlx::query!(
            "INSERT INTO node_fabric_partitions (node_id, partition_id, slot_ids) VALUES ($1, $2, $3)",
            node as NodeId,
            p.id as i32,
            &ids
        )
        .execute(&mut *tx)
        .await?;
        kept.push(ids);
    }
    Ok(())
}

fn proposal_view(
    discovery: &Discovery,
    current: &[SlotRow],
    generation: i32,
    discovered_at: OffsetDateTime,
    status: String,
    decided_by: Option<String>,
    decision_reason: Option<String>,
) -> ProposalView {
    let problems = validate_slots(discovery, &discovery.proposed_slots);
    let slots = discovery
        .proposed_slots
        .iter()
        .map(|p| {
            let cur = current
                .iter()
                .find(|c| c.gpu_pci_address == p.gpu.pci_address)
                .cloned();
            let change = match &cur {
                None => "new".to_string(),
                Some(c) => {
                    let d = differences(c, p);
                    if d.is_empty() {
                        "unchanged".to_string()
                    } else {
                        d.join("; ")
                    }
                }
            };
            ProposalSlot {
                problems: problems
                    .iter()
                    .filter(|x| x.slot_index == p.slot_index)
                    .map(|x| x.problem.clone())
                    .collect(),
                proposed: p.clone(),
                current: cur,
                change,
            }
        })
        .collect();
    let gone = current
        .iter()
        .filter(|c| {
            !discovery
                .proposed_slots
                .iter()
                .any(|p| p.gpu.pci_address == c.gpu_pci_address)
        })
        .cloned()
        .collect();
    ProposalView {
        generation,
        discovered_at,
        status,
        decided_by,
        decision_reason,
        slots,
        gone,
        wipe_methods: discovery.wipe_methods.clone(),
        warnings: discovery.warnings.clone(),
        fabric_partition_sizes: discovery
            .host
            .fabric_partitions
            .iter()
            .map(|p| p.gpus.len())
            .collect(),
        nvswitches: discovery.host.nvswitches.len(),
    }
}

async fn issue_token(
    tx: &mut sqlx::PgConnection,
    node: NodeId,
    actor: UserId,
) -> Result<(String, OffsetDateTime)> {
    let token = new_secret("gpb_");
    let expires = sqlx::query_scalar!(
        r#"INSERT INTO node_bootstrap_tokens (id, node_id, token_hash, created_by, expires_at)
           VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
           RETURNING expires_at"#,
        uuid::Uuid::new_v4(),
        node as NodeId,
        secret_hash(&token),
        actor as UserId,
        BOOTSTRAP_TOKEN_TTL.whole_seconds() as f64,
    )
    .fetch_one(&mut *tx)
    .await?;
    Ok((token, expires))
}

/// Queues a discovery unless one is already queued or running; says whether it queued one.
pub async fn queue_discovery(
    tx: &mut sqlx::PgConnection,
    node: NodeId,
    requested_by: Option<UserId>,
) -> Result<bool> {
    let spec = serde_json::to_value(TaskSpec::TopologyDiscover {}).expect("serializes");
    let queued = sqlx::query!(
        r#"INSERT INTO agent_tasks (id, node_id, kind, spec, requested_by, traceparent)
           VALUES ($1, $2, 'slice.topology_discover', $3, $4, $5)
           ON CONFLICT DO NOTHING"#,
        AgentTaskId::new_random() as AgentTaskId,
        node as NodeId,
        spec,
        requested_by as Option<UserId>,
        cp_base::trace_context::current().map(String::from),
    )
    .execute(&mut *tx)
    .await?;
    Ok(queued.rows_affected() == 1)
}
