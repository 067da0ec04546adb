//! Slot maps: a node's discoveries become proposals; an operator approves all or some, or
//! rejects with a reason; approval carries the generation, so exactly one decision wins.

use agent_protocol::{Discovery, SlotSpec, TaskSpec, metadata};
use serde_json::json;
use time::OffsetDateTime;

use super::validate::validate_slots;
use super::{live_slots, lock_node};
use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{AgentTaskId, NodeId, SlotId, UserId};
use cp_identity::auth::{Platform, PlatformOperators};
pub use portal_types::fleet::{
    Enrolment, FleetView, NodeDetail, NodeSummary, POSTURES, ProposalSlot, ProposalView, SlotRow,
    TaskRow,
};

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

pub(super) fn wipe_policy_of(meta: &serde_json::Value) -> String {
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

/// What the control plane offers for slot maps: asking a node to discover again, and deciding a proposal.
#[allow(async_fn_in_trait)]
pub trait SlotMapApi {
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
}

impl SlotMapApi for ControlPlane {
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

pub(super) fn proposal_view(
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
