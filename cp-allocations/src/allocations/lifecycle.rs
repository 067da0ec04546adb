//! After launch: the outbox dispatcher turns outbox rows into node tasks; agent results move
//! the allocation on (running, or released once the cleanup proof verifies); the reaper
//! handles nodes lost during provisioning and expired allocations. Every failure branch ends
//! with the claims released and the slots either cleaned (proof) or `blocked` for an operator,
//! never leaked.

use agent_protocol::{
    CleanupProof, FabricPlan, ImageRef, NetworkPlan, PhaseReport, PhaseStatus, PlannedSlot,
    ProvisionPlan, PublishedPort, ReleasePlan, TaskOutcome, TaskOutput, TaskSpec, TraceParent,
    identity,
};
use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;
use sqlx::{Connection, PgConnection};
use tracing::Instrument;

use super::projected;
use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{AgentTaskId, AllocationId, NodeId, ProjectId, SlotId, TenantId};
use cp_identity::auth::{Platform, PlatformOperators};
use cp_identity::tenancy::{Project, ProjectViewers};
use cp_inventory::fleet::{lock_node, utc};
use portal_types::Money;

/// The phase of a release during which the allocation counts as `cleaning`.
pub const WIPE_PHASE: &str = "wipe_nvme";

/// Queues the agent task `kind` for the allocation in the caller's transaction, so the agent
/// can claim it the moment that transaction commits (no dispatcher round, no second commit):
/// wake the returned node after the commit. When the task can't be written now (its plan is
/// refused), the savepoint is rolled back and an outbox row makes the dispatcher retry it, as
/// [`queue_later`] does.
pub(crate) async fn queue_now(
    conn: &mut PgConnection,
    kind: &str,
    id: AllocationId,
) -> Result<Option<NodeId>> {
    let mut sp = conn.begin().await?;
    match dispatch_one(&mut sp, kind, id).await {
        Ok(node) => {
            sp.commit().await?;
            Ok(node)
        }
        Err(e) => {
            sp.rollback().await?;
            tracing::warn!(allocation.id = %id, outbox.kind = kind, error.cause = %e, "task not queued with the change; the dispatcher will retry");
            queue_later(conn, kind, id).await?;
            Ok(None)
        }
    }
}

/// Queues the agent task `kind` for the allocation through the outbox: the dispatcher writes
/// it after the caller's transaction commits (for changes made where no one waits on them).
pub(crate) async fn queue_later(
    conn: &mut PgConnection,
    kind: &str,
    id: AllocationId,
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO outbox (kind, allocation_id, traceparent) VALUES ($1, $2, $3)",
        kind,
        id as AllocationId,
        cp_base::trace_context::current().map(String::from),
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Marks an allocation for release and cancels a provision the agent hasn't started; the
/// caller queues the release ([`queue_now`] or [`queue_later`]). `failure` records why, when
/// the release is a failure branch. Returns whether a provision was cancelled: then no host
/// may ever have had the allocation, and once the release commits [`end_unstarted`] can end
/// it without a wipe.
pub(crate) async fn begin_release(
    conn: &mut PgConnection,
    id: AllocationId,
    failure: Option<&str>,
) -> Result<bool> {
    sqlx::query!(
        "UPDATE allocations SET desired_state = 'released', state = 'releasing',
                failure = coalesce($2, failure)
         WHERE id = $1 AND state IN ('placed', 'provisioning', 'running')",
        id as AllocationId,
        failure
    )
    .execute(&mut *conn)
    .await?;
    // Cancelled before any agent claimed it: `claimed_at` stays empty (migration 0033).
    let cancelled = sqlx::query!(
        "UPDATE agent_tasks SET state = 'failed', finished_at = now(),
                error = 'cancelled: the allocation was released before the agent started it'
         WHERE allocation_id = $1 AND state = 'queued'
           AND kind IN ('slice.vm_provision', 'baremetal.provision')",
        id as AllocationId
    )
    .execute(&mut *conn)
    .await?
    .rows_affected();
    Ok(cancelled > 0)
}

/// [`end_unstarted`] after a release has committed: a failure leaves the ordinary release
/// (the wipe) and is logged, since the release itself succeeded.
pub(crate) async fn end_unstarted_or_log(pool: &cp_base::pool::Db, ids: &[AllocationId]) {
    if let Err(e) = end_unstarted(pool, ids).await {
        tracing::warn!(error.cause = %e, allocations = ids.len(),
                       "releases no host saw wait for their wipe: ending them at once failed");
    }
}

/// Ends, without a wipe, the releasing allocations among `ids` that no agent ever had a task
/// of (their provision was cancelled before any agent claimed it), and returns them. Called
/// right after a release commits, in a transaction of its own: the release queued its release
/// task as any other, and this cancels it if it is still queued, ends the claims (the
/// database leaves the slots clean only for such an allocation: `resource_claims_release_cleans`)
/// and marks the allocation released. An allocation whose release an agent already claimed, or
/// that an agent had any task of, is left to its wipe; so is everything, if this never runs.
/// Locks nodes, then allocations, then tasks, the order every lifecycle change takes.
pub(crate) async fn end_unstarted(
    pool: &cp_base::pool::Db,
    ids: &[AllocationId],
) -> Result<Vec<AllocationId>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let wanted: Vec<uuid::Uuid> = ids.iter().map(|id| id.0).collect();
    let mut tx = pool.begin().await?;
    sqlx::query!(
        "SELECT 1 AS one FROM nodes
         WHERE id IN (SELECT node_id FROM allocations WHERE id = ANY($1))
         ORDER BY id FOR NO KEY UPDATE",
        &wanted
    )
    .fetch_all(&mut *tx)
    .await?;
    let releasing: Vec<uuid::Uuid> = sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM allocations WHERE id = ANY($1) AND state = 'releasing'
           ORDER BY id FOR NO KEY UPDATE"#,
        &wanted
    )
    .fetch_all(&mut *tx)
    .await?;
    // An agent that claims the release first keeps it (its claim skips a row locked here, and
    // this skips a task that is no longer queued).
    sqlx::query!(
        "UPDATE agent_tasks SET state = 'failed', finished_at = now(),
                error = 'cancelled: the allocation ended before the agent started its release'
         WHERE allocation_id = ANY($1) AND state = 'queued'
           AND kind IN ('slice.vm_release', 'baremetal.release')",
        &releasing
    )
    .execute(&mut *tx)
    .await?;
    let unstarted: Vec<uuid::Uuid> = sqlx::query_scalar!(
        r#"SELECT a AS "id!" FROM unnest($1::uuid[]) AS a
           WHERE NOT EXISTS (SELECT 1 FROM agent_tasks t
                             WHERE t.allocation_id = a AND t.claimed_at IS NOT NULL)"#,
        &releasing
    )
    .fetch_all(&mut *tx)
    .await?;
    if unstarted.is_empty() {
        tx.rollback().await?;
        return Ok(Vec::new());
    }
    sqlx::query!(
        "UPDATE resource_claims SET released_at = now()
         WHERE allocation_id = ANY($1) AND released_at IS NULL",
        &unstarted
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE allocations SET state = 'released', released_at = now(), observed_state = 'absent'
         WHERE id = ANY($1) AND state = 'releasing'",
        &unstarted
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(unstarted.into_iter().map(AllocationId).collect())
}

/// A slot as a plan names it, as [`planned_slots`] and [`planned_slots_of`] read it.
struct SlotRow {
    allocation_id: Option<AllocationId>,
    id: SlotId,
    node_id: NodeId,
    slot_index: i32,
    gpu_pci_address: String,
    nvme_pci_address: String,
    nvme_serial: String,
    nvme_namespace: String,
    nvme_size_bytes: i64,
    ib_vf_pci_address: String,
    cpu_set: String,
    numa_node: i32,
    memory_mib: i64,
    wipe: String,
}

impl SlotRow {
    fn planned(self) -> PlannedSlot {
        let node = self.node_id.to_string();
        PlannedSlot {
            slot_id: self.id.to_string(),
            slot_index: self.slot_index as u32,
            gpu_pci_address: self.gpu_pci_address,
            nvme_pci_address: self.nvme_pci_address,
            nvme_serial: self.nvme_serial,
            nvme_namespace: self.nvme_namespace,
            ib_vf_pci_address: self.ib_vf_pci_address,
            cpu_set: self.cpu_set,
            numa_node: self.numa_node as u32,
            memory_mib: self.memory_mib as u64,
            nvme_size_bytes: self.nvme_size_bytes as u64,
            wipe_policy: self.wipe,
            mac_address: identity::mac_address(&node, self.slot_index as u32),
            ip_address: identity::ip_address(self.slot_index as u32),
        }
    }
}

/// Every live approved slot of the node, as a plan names it (what the agent checks plans
/// against).
pub(crate) async fn planned_slots(
    conn: &mut PgConnection,
    node: NodeId,
) -> Result<Vec<PlannedSlot>> {
    let rows = sqlx::query_as!(
        SlotRow,
        r#"SELECT NULL::uuid AS "allocation_id: AllocationId", s.id AS "id: SlotId",
                  s.node_id AS "node_id: NodeId", s.slot_index, s.gpu_pci_address,
                  s.nvme_pci_address, s.nvme_serial, s.nvme_namespace, s.nvme_size_bytes,
                  s.ib_vf_pci_address, s.cpu_set, s.numa_node, s.memory_mib,
                  s.capacity_metadata ->> 'destructive_wipe_policy' AS "wipe!"
           FROM node_resource_slots s
           WHERE s.node_id = $1 AND s.retired_at IS NULL
           ORDER BY s.slot_index"#,
        node as NodeId
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(SlotRow::planned).collect())
}

/// Where the allocation is reached: the node's public address, its first slot's block of
/// public ports (SSH, then each published port in order), and its project as the east-west
/// group when the project allows east-west traffic.
pub(crate) fn network_plan(
    slots: &[PlannedSlot],
    public_host: String,
    port_base: i32,
    published: &[Option<i32>],
    east_west: Option<ProjectId>,
) -> Result<NetworkPlan> {
    let first = slots
        .first()
        .ok_or_else(|| Error::Corrupt("an allocation with no slots".into()))?;
    let base = u16::try_from(port_base)
        .map_err(|_| Error::Corrupt(format!("public_port_base {port_base}")))?;
    let port = |k: usize| {
        identity::public_port(base, first.slot_index, k).ok_or_else(|| {
            Error::Corrupt(format!(
                "slot {} has no public port {k} from base {base}",
                first.slot_index
            ))
        })
    };
    Ok(NetworkPlan {
        public_host: Some(public_host),
        ssh_port: Some(port(0)?),
        published: published
            .iter()
            .enumerate()
            .filter_map(|(k, guest)| guest.map(|g| (k, g)))
            .map(|(k, guest)| {
                Ok(PublishedPort {
                    public_port: port(k + 1)?,
                    guest_port: u16::try_from(guest)
                        .map_err(|_| Error::Corrupt(format!("published port {guest}")))?,
                })
            })
            .collect::<Result<_>>()?,
        east_west_group: east_west.map(|p| p.to_string()),
    })
}

/// How the allocations handed to [`queue_provisions`] stand.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// `placed`: queuing their provisions moves them to `provisioning`.
    Placed,
    /// Written as `provisioning` by the transaction that queues their provisions now (group
    /// placement, migration 0035): no update follows.
    AsProvisioning,
}

/// Queues the provision task of each allocation in `ids` (with the trace context its
/// launch ran in) and, for [`Written::Placed`] ones, moves it to `provisioning`, with a
/// statement per step for all of them: the allocations (locked), their slots, their tenants'
/// InfiniBand partition keys (assigned on first use and kept), the nodes' NVLink partitions
/// (the one holding exactly an allocation's slots, for a 2-, 4- or 8-GPU slice on an NVSwitch
/// host or the whole node), the tasks, the state. An allocation no longer in the state
/// `written` says, or no longer wanted, is skipped. Returns the nodes to wake, one per task
/// queued.
pub(crate) async fn queue_provisions(
    conn: &mut PgConnection,
    ids: &[(AllocationId, Option<String>)],
    written: Written,
) -> Result<Vec<NodeId>> {
    let wanted: Vec<uuid::Uuid> = ids.iter().map(|(id, _)| id.0).collect();
    let expected = match written {
        Written::Placed => "placed",
        Written::AsProvisioning => "provisioning",
    };
    let rows = sqlx::query!(
        r#"SELECT a.id AS "id: AllocationId", a.shape, a.node_id AS "node_id: NodeId", a.name,
                  a.ssh_public_key, l.slug || ' ' || v.version AS "image!", v.image_source,
                  v.image_sha256, v.ssh_user, v.cloud_init, a.user_data, a.user_data_sealed,
                  a.published_ports AS "published_ports: Vec<Option<i32>>",
                  coalesce(n.public_host, lower(n.hostname)) AS "public_host!",
                  n.public_port_base, a.tenant_id AS "tenant_id: TenantId",
                  CASE WHEN p.east_west THEN a.project_id END AS "east_west_group: ProjectId"
           FROM allocations a JOIN listing_versions v ON v.id = a.listing_version_id
                JOIN listings l ON l.id = v.listing_id
                JOIN nodes n ON n.id = a.node_id
                JOIN projects p ON p.id = a.project_id
           WHERE a.id = ANY($1) AND a.state = $2 AND a.desired_state = 'running'
           ORDER BY a.id
           FOR NO KEY UPDATE OF a"#,
        &wanted,
        expected
    )
    .fetch_all(&mut *conn)
    .await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let ids_found: Vec<AllocationId> = rows.iter().map(|r| r.id).collect();
    let slots = planned_slots_of(&mut *conn, &ids_found).await?;
    let mut tenants: Vec<uuid::Uuid> = rows.iter().map(|r| r.tenant_id.0).collect();
    tenants.sort_unstable();
    tenants.dedup();
    sqlx::query!(
        "INSERT INTO tenant_ib_partitions (tenant_id) SELECT unnest($1::uuid[]) ORDER BY 1
         ON CONFLICT (tenant_id) DO NOTHING",
        &tenants
    )
    .execute(&mut *conn)
    .await?;
    let pkeys = sqlx::query!(
        r#"SELECT tenant_id AS "tenant_id: TenantId", pkey FROM tenant_ib_partitions
           WHERE tenant_id = ANY($1)"#,
        &tenants
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut nodes: Vec<uuid::Uuid> = rows.iter().map(|r| r.node_id.0).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let partitions = sqlx::query!(
        r#"SELECT node_id AS "node_id: NodeId", partition_id,
                  slot_ids AS "slot_ids: Vec<uuid::Uuid>"
           FROM node_fabric_partitions WHERE node_id = ANY($1)"#,
        &nodes
    )
    .fetch_all(&mut *conn)
    .await?;

    let mut task_ids = Vec::with_capacity(rows.len());
    let mut task_nodes = Vec::with_capacity(rows.len());
    let mut kinds = Vec::with_capacity(rows.len());
    let mut specs = Vec::with_capacity(rows.len());
    let mut allocations = Vec::with_capacity(rows.len());
    let mut traces = Vec::with_capacity(rows.len());
    for a in rows {
        let planned: Vec<PlannedSlot> = slots
            .iter()
            .filter(|(id, _)| *id == a.id)
            .map(|(_, s)| s.clone())
            .collect();
        let network = network_plan(
            &planned,
            a.public_host,
            a.public_port_base,
            &a.published_ports,
            a.east_west_group,
        )?;
        let pkey = pkeys
            .iter()
            .find(|p| p.tenant_id == a.tenant_id)
            .map(|p| p.pkey)
            .ok_or_else(|| Error::Corrupt(format!("no IB partition key for {}", a.tenant_id)))?;
        let mine: Vec<uuid::Uuid> = planned
            .iter()
            .map(|s| {
                s.slot_id
                    .parse()
                    .map_err(|_| Error::Corrupt(format!("slot id {}", s.slot_id)))
            })
            .collect::<Result<_>>()?;
        let nvlink_partition = if mine.len() >= 2 {
            partitions
                .iter()
                .find(|p| {
                    p.node_id == a.node_id
                        && p.slot_ids.len() == mine.len()
                        && mine.iter().all(|s| p.slot_ids.contains(s))
                })
                .map(|p| {
                    u32::try_from(p.partition_id)
                        .map_err(|_| Error::Corrupt(format!("partition {}", p.partition_id)))
                })
                .transpose()?
        } else {
            None
        };
        let fabric = FabricPlan {
            ib_pkey: Some(
                u16::try_from(pkey)
                    .map_err(|_| Error::Corrupt(format!("IB partition key {pkey}")))?,
            ),
            nvlink_partition,
        };
        let plan = ProvisionPlan {
            allocation_id: a.id.to_string(),
            name: a.name,
            image: ImageRef {
                name: a.image,
                source: a.image_source,
                sha256: a.image_sha256,
                ssh_user: a.ssh_user,
                cloud_init: if a.cloud_init.as_object().is_some_and(|m| m.is_empty()) {
                    String::new()
                } else {
                    a.cloud_init.to_string()
                },
            },
            ssh_public_key: a.ssh_public_key,
            user_data: a.user_data,
            slots: planned,
            network,
            fabric,
        };
        let spec = if a.shape == "baremetal" {
            TaskSpec::BaremetalProvision(plan)
        } else {
            TaskSpec::VmProvision(plan)
        };
        task_ids.push(AgentTaskId::new_random().0);
        task_nodes.push(a.node_id.0);
        kinds.push(spec.kind().to_string());
        let mut spec = serde_json::to_value(&spec).expect("a task spec serializes");
        // Sealed at rest here too: the claim opens it for the agent (`open_user_data`).
        if let (Some(sealed), Some(spec)) = (a.user_data_sealed, spec.as_object_mut()) {
            spec.insert(SEALED_USER_DATA.into(), sealed.into());
        }
        specs.push(spec);
        traces.push(
            ids.iter()
                .find(|(id, _)| *id == a.id)
                .and_then(|(_, t)| t.clone()),
        );
        allocations.push(a.id.0);
    }
    insert_tasks(
        &mut *conn,
        &task_ids,
        &task_nodes,
        &kinds,
        &specs,
        &allocations,
        &traces,
    )
    .await?;
    if written == Written::Placed {
        sqlx::query!(
            "UPDATE allocations SET state = 'provisioning', observed_state = 'provisioning'
             WHERE id = ANY($1)",
            &allocations
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(task_nodes.into_iter().map(NodeId).collect())
}

/// The planned slots of each allocation in `ids` (every live slot of the node for bare
/// metal), in slot order, with one statement.
///
/// A slice's claim names its slot and a bare-metal claim its node, so the two are joined
/// apart: one join with `slot_id = s.id OR kind = 'baremetal'` cannot use either index, and
/// the planner hashed every live slot of the fleet for each call (1.85 ms a call with 320
/// slots under the dispatch benchmark, the most expensive statement of a launch).
async fn planned_slots_of(
    conn: &mut PgConnection,
    ids: &[AllocationId],
) -> Result<Vec<(AllocationId, PlannedSlot)>> {
    let ids: Vec<uuid::Uuid> = ids.iter().map(|id| id.0).collect();
    let rows = sqlx::query_as!(
        SlotRow,
        r#"SELECT c.allocation_id AS "allocation_id: AllocationId", s.id AS "id!: SlotId",
                  s.node_id AS "node_id!: NodeId", s.slot_index AS "slot_index!",
                  s.gpu_pci_address AS "gpu_pci_address!",
                  s.nvme_pci_address AS "nvme_pci_address!", s.nvme_serial AS "nvme_serial!",
                  s.nvme_namespace AS "nvme_namespace!",
                  s.nvme_size_bytes AS "nvme_size_bytes!",
                  s.ib_vf_pci_address AS "ib_vf_pci_address!", s.cpu_set AS "cpu_set!",
                  s.numa_node AS "numa_node!", s.memory_mib AS "memory_mib!",
                  s.capacity_metadata ->> 'destructive_wipe_policy' AS "wipe!"
           FROM resource_claims c JOIN node_resource_slots s ON s.id = c.slot_id
           WHERE c.allocation_id = ANY($1) AND s.retired_at IS NULL
           UNION ALL
           SELECT c.allocation_id, s.id, s.node_id, s.slot_index, s.gpu_pci_address,
                  s.nvme_pci_address, s.nvme_serial, s.nvme_namespace, s.nvme_size_bytes,
                  s.ib_vf_pci_address, s.cpu_set, s.numa_node, s.memory_mib,
                  s.capacity_metadata ->> 'destructive_wipe_policy'
           FROM resource_claims c JOIN node_resource_slots s ON s.node_id = c.node_id
           WHERE c.allocation_id = ANY($1) AND c.kind = 'baremetal' AND s.retired_at IS NULL
           ORDER BY 1, 4"#,
        &ids
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| Some((r.allocation_id?, r.planned())))
        .collect())
}

/// Writes agent tasks, one per allocation (the arrays side by side), with one statement; a
/// task the allocation already has (not failed) is left as it is.
async fn insert_tasks(
    conn: &mut PgConnection,
    ids: &[uuid::Uuid],
    nodes: &[uuid::Uuid],
    kinds: &[String],
    specs: &[serde_json::Value],
    allocations: &[uuid::Uuid],
    traces: &[Option<String>],
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO agent_tasks (id, node_id, kind, spec, allocation_id, traceparent)
         SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::jsonb[], $5::uuid[], $6::text[])
         ON CONFLICT (allocation_id, kind)
             WHERE allocation_id IS NOT NULL AND state <> 'failed'
               AND kind <> 'allocation.network_update'
         DO NOTHING",
        ids,
        nodes,
        kinds,
        specs,
        allocations,
        traces as &[Option<String>],
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Queues the release task of each allocation in `ids` that is releasing or cleaning (with
/// the trace context its release ran in), a statement per step for all of them. Returns the
/// nodes to wake, one per allocation.
pub(crate) async fn queue_releases(
    conn: &mut PgConnection,
    ids: &[(AllocationId, Option<String>)],
) -> Result<Vec<NodeId>> {
    let wanted: Vec<uuid::Uuid> = ids.iter().map(|(id, _)| id.0).collect();
    let rows = sqlx::query!(
        r#"SELECT id AS "id: AllocationId", shape, node_id AS "node_id: NodeId", state
           FROM allocations
           WHERE id = ANY($1)
           ORDER BY id
           FOR NO KEY UPDATE"#,
        &wanted
    )
    .fetch_all(&mut *conn)
    .await?;
    // The state is checked here, not in the query: with it there, the planner intersects the
    // primary key with the index of live allocations, thousands of entries, for a few rows.
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|r| matches!(r.state.as_str(), "releasing" | "cleaning"))
        .collect();
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let found: Vec<AllocationId> = rows.iter().map(|r| r.id).collect();
    let slots = planned_slots_of(&mut *conn, &found).await?;
    let (mut task_ids, mut nodes, mut kinds, mut specs, mut allocations, mut traces) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for a in rows {
        let plan = ReleasePlan {
            allocation_id: a.id.to_string(),
            slots: slots
                .iter()
                .filter(|(id, _)| *id == a.id)
                .map(|(_, s)| s.clone())
                .collect(),
        };
        let spec = if a.shape == "baremetal" {
            TaskSpec::BaremetalRelease(plan)
        } else {
            TaskSpec::VmRelease(plan)
        };
        task_ids.push(AgentTaskId::new_random().0);
        nodes.push(a.node_id.0);
        kinds.push(spec.kind().to_string());
        specs.push(serde_json::to_value(&spec).expect("a task spec serializes"));
        allocations.push(a.id.0);
        traces.push(
            ids.iter()
                .find(|(id, _)| *id == a.id)
                .and_then(|(_, t)| t.clone()),
        );
    }
    insert_tasks(
        &mut *conn,
        &task_ids,
        &nodes,
        &kinds,
        &specs,
        &allocations,
        &traces,
    )
    .await?;
    Ok(nodes.into_iter().map(NodeId).collect())
}

/// Turns one outbox row into a node task. Idempotent: a row seen twice queues one task (the
/// unique index), and an allocation that moved on is left alone.
/// Returns the node a task was queued for, if one was.
async fn dispatch_one(
    conn: &mut PgConnection,
    kind: &str,
    id: AllocationId,
) -> Result<Option<NodeId>> {
    let a = sqlx::query!(
        r#"SELECT a.state, a.desired_state, a.node_id AS "node_id: NodeId",
                  a.published_ports AS "published_ports: Vec<Option<i32>>",
                  coalesce(n.public_host, lower(n.hostname)) AS "public_host!",
                  n.public_port_base,
                  CASE WHEN p.east_west THEN a.project_id END AS "east_west_group: ProjectId"
           FROM allocations a JOIN nodes n ON n.id = a.node_id
                JOIN projects p ON p.id = a.project_id
           WHERE a.id = $1 FOR NO KEY UPDATE OF a"#,
        id as AllocationId
    )
    .fetch_one(&mut *conn)
    .await?;
    match kind {
        "allocation.provision" => {
            if a.state != "placed" || a.desired_state != "running" {
                return Ok(None);
            }
            let trace = cp_base::trace_context::current().map(String::from);
            return Ok(
                queue_provisions(&mut *conn, &[(id, trace)], Written::Placed)
                    .await?
                    .pop(),
            );
        }
        "allocation.release" => {
            if !matches!(a.state.as_str(), "releasing" | "cleaning") {
                return Ok(None);
            }
            let trace = cp_base::trace_context::current().map(String::from);
            return Ok(queue_releases(&mut *conn, &[(id, trace)]).await?.pop());
        }
        "allocation.network_update" => {
            if a.state != "running" {
                return Ok(None);
            }
            let slots: Vec<PlannedSlot> = planned_slots_of(&mut *conn, &[id])
                .await?
                .into_iter()
                .map(|(_, s)| s)
                .collect();
            let network = network_plan(
                &slots,
                a.public_host,
                a.public_port_base,
                &a.published_ports,
                a.east_west_group,
            )?;
            let spec = TaskSpec::NetworkUpdate(agent_protocol::NetworkUpdatePlan {
                allocation_id: id.to_string(),
                slots,
                network,
            });
            // One waiting update per allocation: a newer plan replaces a queued one's.
            let replaced = sqlx::query!(
                "UPDATE agent_tasks SET spec = $2
                 WHERE allocation_id = $1 AND kind = 'allocation.network_update' AND state = 'queued'",
                id as AllocationId,
                serde_json::to_value(&spec).expect("a task spec serializes"),
            )
            .execute(&mut *conn)
            .await?;
            if replaced.rows_affected() == 0 {
                sqlx::query!(
                    "INSERT INTO agent_tasks (id, node_id, kind, spec, allocation_id, traceparent)
                     VALUES ($1, $2, $3, $4, $5, $6)",
                    AgentTaskId::new_random() as AgentTaskId,
                    a.node_id as NodeId,
                    spec.kind(),
                    serde_json::to_value(&spec).expect("a task spec serializes"),
                    id as AllocationId,
                    cp_base::trace_context::current().map(String::from),
                )
                .execute(&mut *conn)
                .await?;
            }
        }
        other => return Err(Error::Corrupt(format!("outbox kind {other}"))),
    }
    Ok(Some(a.node_id))
}

/// Verifies a cleanup proof against the release plan and the node's current credential.
fn verify_proof(
    proof: &CleanupProof,
    allocation: AllocationId,
    node: NodeId,
    plan: &ReleasePlan,
    credential_hash: &[u8],
) -> std::result::Result<(), String> {
    if proof.allocation_id != allocation.to_string() || proof.node_id != node.to_string() {
        return Err("the proof is for another allocation or node".into());
    }
    let mut expected: Vec<&str> = plan.slots.iter().map(|s| s.slot_id.as_str()).collect();
    let mut got: Vec<&str> = proof.slots.iter().map(|s| s.slot_id.as_str()).collect();
    expected.sort();
    got.sort();
    if expected != got {
        return Err(format!(
            "the proof covers slots {got:?}, the release was for {expected:?}"
        ));
    }
    for s in &proof.slots {
        let planned = plan
            .slots
            .iter()
            .find(|p| p.slot_id == s.slot_id)
            .expect("same slot sets");
        if s.nvme_serial != planned.nvme_serial {
            return Err(format!(
                "slot {}: wiped NVMe {} but the slot's is {}",
                planned.slot_index, s.nvme_serial, planned.nvme_serial
            ));
        }
        if s.wipe_method != planned.wipe_policy {
            return Err(format!(
                "slot {}: wiped with {} but the policy is {}",
                planned.slot_index, s.wipe_method, planned.wipe_policy
            ));
        }
        if !(s.wipe_verified && s.gpu_reset && s.firmware_ok) {
            return Err(format!(
                "slot {}: wipe verified {}, GPU reset {}, firmware ok {}",
                planned.slot_index, s.wipe_verified, s.gpu_reset, s.firmware_ok
            ));
        }
        if s.verified_samples == 0 || s.gpu_firmware.trim().is_empty() {
            return Err(format!(
                "slot {}: the proof names no read-back samples or no GPU firmware",
                planned.slot_index
            ));
        }
    }
    let signature = (0..proof.signature.len())
        .step_by(2)
        .map(|i| {
            proof
                .signature
                .get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or("the signature is not hex")?;
    let mut mac = Hmac::<Sha256>::new_from_slice(credential_hash).expect("any key length");
    mac.update(proof.signing_message().as_bytes());
    mac.verify_slice(&signature)
        .map_err(|_| "the signature does not verify with the node's credential".to_string())
}

/// Ends the allocation's active claims; the trigger `resource_claims_release_cleans` sends
/// their slots to `cleaning`.
async fn end_claims(conn: &mut PgConnection, id: AllocationId) -> Result<()> {
    sqlx::query!(
        "UPDATE resource_claims SET released_at = now() WHERE allocation_id = $1 AND released_at IS NULL",
        id as AllocationId
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The allocation's state, locked, if nobody else holds it (a replica's reaper skips it).
async fn lock_state(conn: &mut PgConnection, id: AllocationId) -> Result<Option<String>> {
    Ok(sqlx::query_scalar!(
        "SELECT state FROM allocations WHERE id = $1 FOR NO KEY UPDATE SKIP LOCKED",
        id as AllocationId
    )
    .fetch_optional(conn)
    .await?)
}

/// Releases the allocation's claims and ends it; its slots are blocked with `reason`.
async fn end_blocked(
    conn: &mut PgConnection,
    id: AllocationId,
    failure: &str,
    observed: &str,
) -> Result<()> {
    end_claims(&mut *conn, id).await?;
    sqlx::query!(
        "UPDATE node_resource_slots s SET cleanup_state = 'blocked', cleanup_detail = $2
         FROM resource_claims c
         WHERE c.allocation_id = $1 AND c.node_id = s.node_id AND s.retired_at IS NULL
           AND (c.slot_id = s.id OR c.kind = 'baremetal') AND s.cleanup_state <> 'clean'",
        id as AllocationId,
        format!("allocation {id}: {failure}. Check the host, then clear the slot."),
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "UPDATE allocations SET desired_state = 'released', state = 'released',
                released_at = now(), observed_state = $3, failure = coalesce(failure || '; ', '') || $2
         WHERE id = $1",
        id as AllocationId,
        failure,
        observed
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Whether an agent's result for a task of this kind may change its node's claims or slots,
/// so that the result must hold the node's row first. Only the kinds known not to are named:
/// a kind added later locks the node until it is listed here.
pub(crate) fn result_changes_claims(kind: &str) -> bool {
    !matches!(
        kind,
        "slice.vm_provision" | "baremetal.provision" | "allocation.network_update"
    )
}

/// The state of the allocation a node's task belongs to, its row locked; `None` for a task of
/// no allocation (or no such task). An agent's result takes its node, then this, then the
/// task: the order a release keeps too (the allocation, then its queued tasks).
pub(crate) async fn lock_allocation_of(
    conn: &mut PgConnection,
    node: NodeId,
    task: AgentTaskId,
) -> Result<Option<String>> {
    Ok(sqlx::query_scalar!(
        "SELECT a.state FROM allocations a
         WHERE a.id = (SELECT allocation_id FROM agent_tasks WHERE id = $1 AND node_id = $2)
         FOR NO KEY UPDATE OF a",
        task as AgentTaskId,
        node as NodeId
    )
    .fetch_optional(conn)
    .await?)
}

/// A provision answered, either way: the tenant's user data has served (it runs at the guest's
/// first boot, and a failed provision is released), so neither the task nor the allocation
/// keeps it.
async fn forget_user_data(
    conn: &mut PgConnection,
    task: AgentTaskId,
    id: AllocationId,
) -> Result<()> {
    sqlx::query!(
        "UPDATE agent_tasks SET spec = spec - 'user_data' - 'user_data_sealed'
         WHERE id = $1 AND (spec ? 'user_data' OR spec ? 'user_data_sealed')",
        task as AgentTaskId
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "UPDATE allocations SET user_data = NULL, user_data_sealed = NULL
         WHERE id = $1 AND (user_data IS NOT NULL OR user_data_sealed IS NOT NULL)",
        id as AllocationId
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Records an allocation task's result (called by `finish_task` in its transaction, which
/// holds the allocation's row: `state` is its state, from [`lock_allocation_of`]).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn task_finished(
    conn: &mut PgConnection,
    node: NodeId,
    task: AgentTaskId,
    kind: &str,
    id: AllocationId,
    state: &str,
    spec: serde_json::Value,
    outcome: &TaskOutcome,
) -> Result<()> {
    // Only a provision that carried user data has any to forget: the others (most) cost
    // no statement here.
    let carried_user_data = [SEALED_USER_DATA, "user_data"]
        .iter()
        .any(|k| spec.get(k).is_some_and(|v| !v.is_null()));
    if matches!(kind, "slice.vm_provision" | "baremetal.provision") && carried_user_data {
        forget_user_data(&mut *conn, task, id).await?;
    }
    let (task_state, task_error) = match (kind, outcome) {
        ("slice.vm_provision" | "baremetal.provision", TaskOutcome::Succeeded { output }) => {
            let TaskOutput::Provisioned(p) = output else {
                return Err(Error::Invalid {
                    field: "result",
                    reason: format!("a {kind} task answers with where to connect"),
                });
            };
            let planned = planned_endpoint(spec)?;
            if (p.ssh_host.as_str(), p.ssh_port, p.ssh_user.as_str())
                != (planned.host.as_str(), planned.port, planned.user.as_str())
            {
                tracing::warn!(
                    node.id = %node, allocation.id = %id,
                    reported.host = %p.ssh_host.escape_debug(), reported.port = p.ssh_port,
                    reported.user = %p.ssh_user.escape_debug(),
                    "a host reported another SSH endpoint than the one planned; the planned one stands"
                );
            }
            // A release may have been asked for meanwhile: then only the observation counts.
            sqlx::query!(
                "UPDATE allocations SET observed_state = 'running', ssh_host = $2, ssh_port = $3,
                        ssh_user = $4,
                        state = CASE WHEN state = 'provisioning' THEN 'running' ELSE state END
                 WHERE id = $1",
                id as AllocationId,
                planned.host,
                i32::from(planned.port),
                planned.user
            )
            .execute(&mut *conn)
            .await?;
            ("succeeded", None)
        }
        ("slice.vm_provision" | "baremetal.provision", TaskOutcome::Failed { error }) => {
            if state == "provisioning" {
                // The host may have written to the slot: clean it like any release.
                // The provision was claimed (this is its answer): nothing to cancel.
                begin_release(&mut *conn, id, Some(&format!("provision failed: {error}"))).await?;
                queue_later(&mut *conn, "allocation.release", id).await?;
            }
            ("failed", Some(error.clone()))
        }
        ("slice.vm_release" | "baremetal.release", outcome) => {
            let stage = if state == "cleaning" {
                "cleanup failed"
            } else {
                "release failed"
            };
            let verdict = match outcome {
                TaskOutcome::Failed { error } => Err(format!("{stage}: {error}")),
                TaskOutcome::Succeeded {
                    output: TaskOutput::Cleaned(proof),
                } => {
                    let plan: TaskSpec = serde_json::from_value(spec)
                        .map_err(|e| Error::Corrupt(format!("task {task} spec: {e}")))?;
                    let (TaskSpec::VmRelease(plan) | TaskSpec::BaremetalRelease(plan)) = plan
                    else {
                        return Err(Error::Corrupt(format!("task {task} is not a release")));
                    };
                    let hash = sqlx::query_scalar!(
                        "SELECT credential_hash FROM node_credentials
                         WHERE node_id = $1 AND revoked_at IS NULL",
                        node as NodeId
                    )
                    .fetch_optional(&mut *conn)
                    .await?
                    .unwrap_or_default();
                    verify_proof(proof, id, node, &plan, &hash)
                        .map(|()| proof)
                        .map_err(|e| format!("cleanup proof refused: {e}"))
                }
                TaskOutcome::Succeeded { .. } => Err(format!(
                    "{stage}: the agent answered without a cleanup proof"
                )),
            };
            match verdict {
                Ok(proof) => {
                    for s in &proof.slots {
                        sqlx::query!(
                            "INSERT INTO cleanup_certificates
                                 (id, allocation_id, node_id, slot_id, task_id, nvme_serial,
                                  wipe_method, wipe_verified, gpu_reset, firmware_ok, signature,
                                  wipe_ms, verified_samples, gpu_firmware)
                             VALUES (gen_random_uuid(), $1, $2, $3::text::uuid, $4, $5, $6, $7, $8, $9, $10,
                                     $11, $12, $13)",
                            id as AllocationId,
                            node as NodeId,
                            s.slot_id,
                            task as AgentTaskId,
                            s.nvme_serial,
                            s.wipe_method,
                            s.wipe_verified,
                            s.gpu_reset,
                            s.firmware_ok,
                            proof.signature,
                            s.wipe_ms.min(i64::MAX as u64) as i64,
                            s.verified_samples.min(i32::MAX as u32) as i32,
                            s.gpu_firmware.chars().take(200).collect::<String>(),
                        )
                        .execute(&mut *conn)
                        .await?;
                    }
                    if state != "cleaning" {
                        // A wipe that started ended the claims with the move to `cleaning`
                        // ([`wipe_started`]); one reported without that phase ends them now.
                        end_claims(&mut *conn, id).await?;
                    }
                    sqlx::query!(
                        "UPDATE node_resource_slots SET cleanup_state = 'clean', cleanup_detail = NULL
                         WHERE id = ANY(SELECT (s ->> 'slot_id')::uuid
                                        FROM jsonb_array_elements($1::jsonb) AS s)",
                        serde_json::to_value(&proof.slots).expect("serializes"),
                    )
                    .execute(&mut *conn)
                    .await?;
                    sqlx::query!(
                        "UPDATE allocations SET state = 'released', released_at = now(),
                                observed_state = 'absent'
                         WHERE id = $1 AND state IN ('releasing', 'cleaning')",
                        id as AllocationId
                    )
                    .execute(&mut *conn)
                    .await?;
                    ("succeeded", None)
                }
                Err(reason) => {
                    end_blocked(&mut *conn, id, &reason, "absent").await?;
                    ("failed", Some(reason))
                }
            }
        }
        ("allocation.network_update", TaskOutcome::Succeeded { output }) => {
            if !matches!(output, TaskOutput::NetworkUpdated {}) {
                return Err(Error::Invalid {
                    field: "result",
                    reason: format!("a {kind} task answers that the network is updated"),
                });
            }
            ("succeeded", None)
        }
        // The allocation keeps running; the failed task (with its reason) is what the page shows.
        ("allocation.network_update", TaskOutcome::Failed { error }) => {
            ("failed", Some(error.clone()))
        }
        _ => {
            return Err(Error::Corrupt(format!(
                "task {task} of kind {kind} belongs to an allocation"
            )));
        }
    };
    sqlx::query!(
        "UPDATE agent_tasks SET state = $2, finished_at = now(), error = $3 WHERE id = $1",
        task as AgentTaskId,
        task_state,
        task_error.map(|e| if e.trim().is_empty() {
            "the agent gave no reason".to_string()
        } else {
            e
        }),
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Whether a phase report changes the node's claims: the start of a release's wipe does
/// ([`wipe_started`]); the caller then holds the node's row before anything else.
pub(crate) fn phase_changes_claims(report: &PhaseReport) -> bool {
    report.status == PhaseStatus::Started && report.phase.trim() == WIPE_PHASE
}

/// A release task's wipe has started: the VM is gone, so the allocation is now `cleaning`
/// and its claims end; the slots wait in `cleaning` until the proof verifies. Called in the
/// phase report's transaction, which holds the node's row.
pub(crate) async fn wipe_started(conn: &mut PgConnection, task: AgentTaskId) -> Result<()> {
    let moved = sqlx::query_scalar!(
        r#"UPDATE allocations SET state = 'cleaning', observed_state = 'absent'
           WHERE state = 'releasing'
             AND id = (SELECT allocation_id FROM agent_tasks
                       WHERE id = $1 AND kind IN ('slice.vm_release', 'baremetal.release'))
           RETURNING id AS "id: AllocationId""#,
        task as AgentTaskId
    )
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(id) = moved {
        end_claims(&mut *conn, id).await?;
    }
    Ok(())
}

/// What the control plane offers for the lifecycle after launch: dispatch, agent results, the reaper.
#[allow(async_fn_in_trait)]
pub trait LifecycleApi {
    /// Turns up to `max` due outbox rows into node tasks, one transaction each
    /// (`FOR UPDATE SKIP LOCKED`, so any number of replicas may run this). A row that fails
    /// is retried with exponential backoff (2 s, 4 s, … up to 5 minutes). Returns how many
    /// rows it handled.
    async fn dispatch_outbox(&self, max: usize) -> Result<usize>;

    /// One dispatcher, until aborted: every 250 ms, drains what launches and releases did not
    /// dispatch themselves (a failed attempt, a reaper's release, another replica's crash).
    /// Run several (`FOR UPDATE SKIP LOCKED` keeps them apart); errors are logged.
    async fn dispatcher(&self);

    /// Failure branches that no agent reports: a node lost (no heartbeat for 60 s) while
    /// provisioning (its claims end; the slots are blocked until an operator looks), and
    /// allocations past their policy lifetime (released). Returns how many it handled.
    async fn reap_allocations(&self) -> Result<usize>;

    /// An operator declares a `blocked` slot clean after looking at the host. Audited, with
    /// the reason; the database accepts it only with this override row.
    async fn clear_blocked_slot(
        &self,
        who: &Platform<PlatformOperators>,
        slot: SlotId,
        reason: &str,
        request_id: Option<&str>,
    ) -> Result<()>;
}

impl LifecycleApi for ControlPlane {
    #[tracing::instrument(skip_all)]
    async fn dispatch_outbox(&self, max: usize) -> Result<usize> {
        let mut handled = 0;
        while handled < max && self.dispatch_row().await? {
            handled += 1;
        }
        Ok(handled)
    }

    async fn dispatcher(&self) {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(250));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = self.dispatch_outbox(100).await {
                tracing::error!(error.cause = %e, "outbox dispatch failed");
            }
        }
    }

    #[tracing::instrument(skip_all)]
    async fn reap_allocations(&self) -> Result<usize> {
        let mut handled = 0;
        let lost = sqlx::query!(
            r#"SELECT a.id AS "id: AllocationId", a.region, a.tenant_id AS "tenant: TenantId",
                      a.project_id AS "project: ProjectId", n.last_heartbeat_at
               FROM allocations a JOIN nodes n ON n.id = a.node_id
               WHERE a.state = 'provisioning'
                 AND (n.last_heartbeat_at IS NULL OR n.last_heartbeat_at < now() - interval '60 seconds')"#
        )
        .fetch_all(self.pool())
        .await?;
        for a in lost {
            let mut tx = self.pool().begin().await?;
            if lock_state(&mut tx, a.id).await?.as_deref() != Some("provisioning") {
                continue;
            }
            let failure = format!(
                "node lost during provisioning (no heartbeat since {})",
                a.last_heartbeat_at
                    .map(utc)
                    .unwrap_or_else(|| "ever".into())
            );
            sqlx::query!(
                "UPDATE agent_tasks SET state = 'failed', claimed_at = coalesce(claimed_at, now()),
                        finished_at = now(), error = $2
                 WHERE allocation_id = $1 AND state IN ('queued', 'running')",
                a.id as AllocationId,
                failure
            )
            .execute(&mut *tx)
            .await?;
            end_blocked(&mut tx, a.id, &failure, "lost").await?;
            audit::record(
                &mut tx,
                AuditEntry {
                    actor: Actor::System,
                    action: "allocation.node_lost",
                    resource: &self
                        .naming()
                        .allocation(&a.region, a.tenant, a.project, a.id)?,
                    before: Some(json!({ "state": "provisioning" })),
                    after: Some(json!({ "state": "released", "failure": failure })),
                    request_id: None,
                },
            )
            .await?;
            tx.commit().await?;
            handled += 1;
        }
        let expired = sqlx::query!(
            r#"SELECT id AS "id: AllocationId", region, tenant_id AS "tenant: TenantId",
                      project_id AS "project: ProjectId"
               FROM allocations
               WHERE state IN ('placed', 'provisioning', 'running') AND expires_at < now()"#
        )
        .fetch_all(self.pool())
        .await?;
        for a in expired {
            let mut tx = self.pool().begin().await?;
            let still = lock_state(&mut tx, a.id).await?;
            if !matches!(
                still.as_deref(),
                Some("placed" | "provisioning" | "running")
            ) {
                continue;
            }
            let unstarted = begin_release(&mut tx, a.id, None).await?;
            queue_later(&mut tx, "allocation.release", a.id).await?;
            audit::record(
                &mut tx,
                AuditEntry {
                    actor: Actor::System,
                    action: "allocation.expire",
                    resource: &self
                        .naming()
                        .allocation(&a.region, a.tenant, a.project, a.id)?,
                    before: Some(json!({ "state": still })),
                    after: Some(
                        json!({ "state": "releasing", "why": "max_allocation_lifetime_hours" }),
                    ),
                    request_id: None,
                },
            )
            .await?;
            tx.commit().await?;
            if unstarted {
                end_unstarted_or_log(self.pool(), &[a.id]).await;
            }
            handled += 1;
        }
        Ok(handled)
    }

    #[tracing::instrument(skip_all, fields(slot.id = %slot))]
    async fn clear_blocked_slot(
        &self,
        who: &Platform<PlatformOperators>,
        slot: SlotId,
        reason: &str,
        request_id: Option<&str>,
    ) -> Result<()> {
        let reason = cp_inventory::fleet::checked_reason(reason)?;
        let mut tx = self.pool().begin().await?;
        let row = sqlx::query!(
            r#"SELECT node_id AS "node: NodeId", slot_index, cleanup_state, cleanup_detail
               FROM node_resource_slots WHERE id = $1 AND retired_at IS NULL"#,
            slot as SlotId
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "slot" })?;
        let region = lock_node(&mut tx, row.node).await?.region;
        if row.cleanup_state != "blocked" {
            return Err(Error::Conflict(format!(
                "slot {} is {}, not blocked",
                row.slot_index, row.cleanup_state
            )));
        }
        sqlx::query!(
            "INSERT INTO slot_cleanup_overrides (slot_id, cleared_by, reason) VALUES ($1, $2, $3)",
            slot as SlotId,
            who.principal().user_id as cp_base::ids::UserId,
            reason
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!(
            "UPDATE node_resource_slots SET cleanup_state = 'clean', cleanup_detail = NULL WHERE id = $1",
            slot as SlotId
        )
        .execute(&mut *tx)
        .await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.principal().user_id),
                action: "node.slot.clear_cleanup",
                resource: &self.naming().node(&region, row.node)?,
                before: Some(json!({ "slot": row.slot_index, "cleanup_state": "blocked", "detail": row.cleanup_detail })),
                after: Some(json!({ "slot": row.slot_index, "cleanup_state": "clean", "reason": reason })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// What the other areas of this crate use of it, behind no proof: never for the pages or the API.
#[allow(async_fn_in_trait)]
pub(crate) trait LifecycleInternal {
    /// Handles one due outbox row; false when none.
    async fn dispatch_row(&self) -> Result<bool>;
}

impl LifecycleInternal for ControlPlane {
    async fn dispatch_row(&self) -> Result<bool> {
        let mut tx = self.pool().begin().await?;
        let Some(row) = sqlx::query!(
            r#"SELECT id, kind, allocation_id AS "allocation_id: AllocationId", traceparent
               FROM outbox WHERE done_at IS NULL AND available_at <= now()
               ORDER BY available_at, id LIMIT 1 FOR UPDATE SKIP LOCKED"#
        )
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(false);
        };
        // The row continues the trace of the change that wrote it (a stored context that no
        // longer parses is only a lost trace, never a stuck row).
        let parent = row.traceparent.and_then(|t| TraceParent::parse(&t).ok());
        let span = cp_base::trace_context::follow(
            tracing::info_span!(
                "outbox.dispatch",
                outbox.id = row.id,
                outbox.kind = %row.kind,
                allocation.id = %row.allocation_id,
            ),
            parent.as_ref(),
        );
        let dispatched = dispatch_one(&mut tx, &row.kind, row.allocation_id)
            .instrument(span)
            .await;
        match dispatched {
            Ok(node) => {
                sqlx::query!(
                    "UPDATE outbox SET done_at = now(), attempts = attempts + 1, last_error = NULL
                     WHERE id = $1",
                    row.id
                )
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                if let Some(node) = node {
                    self.wakeups().task_queued(node);
                }
            }
            Err(e) => {
                drop(tx);
                tracing::warn!(outbox.id = row.id, outbox.kind = %row.kind, error.cause = %e, "outbox row failed; retrying later");
                sqlx::query!(
                    "UPDATE outbox SET attempts = attempts + 1, last_error = $2,
                            available_at = now() + make_interval(secs => least(300, 2 ^ least(attempts + 1, 9)))
                     WHERE id = $1",
                    row.id,
                    e.to_string()
                )
                .execute(self.pool())
                .await?;
            }
        }
        Ok(true)
    }
}

pub use portal_types::allocations::{
    AllocationDetail, Certificate, GpuHealthNotice, GpuUtilisation, Phase, PortAddress,
    SshEndpoint, Transition,
};

/// The key of a provision task's spec that holds the tenant's user data, sealed; the agent
/// is handed it open, as the plan's `user_data`.
pub(crate) const SEALED_USER_DATA: &str = "user_data_sealed";

/// Where a tenant's user data is sealed to: this allocation's, and nothing else's.
fn user_data_place(id: AllocationId) -> String {
    format!("allocations.user_data:{id}")
}

/// Seals a tenant's user data as stored: it may carry their secrets, so it is kept like
/// identity providers' client secrets, readable only with the deployment's keys.
pub(crate) fn seal_user_data(
    keys: &cp_base::secrets::Keyring,
    id: AllocationId,
    plain: &str,
) -> String {
    keys.seal(plain, &user_data_place(id))
}

/// A claimed provision's spec as the agent needs it: the sealed user data opened into the
/// plan's `user_data`. Other specs are returned as they are.
pub(crate) fn open_user_data(
    keys: &cp_base::secrets::Keyring,
    mut spec: serde_json::Value,
) -> Result<serde_json::Value> {
    let Some(sealed) = spec
        .as_object_mut()
        .and_then(|s| s.remove(SEALED_USER_DATA))
    else {
        return Ok(spec);
    };
    let (Some(sealed), Some(id)) = (
        sealed.as_str(),
        spec.get("allocation_id").and_then(|i| i.as_str()),
    ) else {
        return Err(Error::Corrupt("a provision's sealed user data".into()));
    };
    let id: AllocationId = id
        .parse()
        .map_err(|_| Error::Corrupt(format!("a provision for allocation {id:?}")))?;
    let plain = keys
        .open(sealed, &user_data_place(id))
        .map_err(|e| Error::Corrupt(format!("allocation {id}'s user data: {e}")))?;
    spec["user_data"] = plain.into();
    Ok(spec)
}

/// Where a running allocation is reached, from its stored fields (checked by the database).
pub(crate) fn ssh_endpoint(
    state: &str,
    host: Option<&str>,
    port: Option<i32>,
    user: Option<&str>,
) -> Option<SshEndpoint> {
    match (host, port.and_then(|p| u16::try_from(p).ok()), user) {
        (Some(host), Some(port), Some(user)) if state == "running" => Some(SshEndpoint {
            host: host.to_owned(),
            port,
            user: user.to_owned(),
        }),
        _ => None,
    }
}

/// Where the platform planned a provision to be reached: the node's public address and the
/// first slot's SSH port (or, in a plan with no public address, the first slot's own address on
/// port 22), and the listing's SSH user. The host's answer only confirms it: a compromised host
/// must not choose the text a tenant's `ssh` runs.
fn planned_endpoint(spec: serde_json::Value) -> Result<SshEndpoint> {
    let plan = match serde_json::from_value::<TaskSpec>(spec) {
        Ok(TaskSpec::VmProvision(plan) | TaskSpec::BaremetalProvision(plan)) => plan,
        Ok(other) => {
            return Err(Error::Corrupt(format!(
                "a provision's task holds a {}",
                other.kind()
            )));
        }
        Err(e) => return Err(Error::Corrupt(format!("a provision's spec: {e}"))),
    };
    let first = plan
        .slots
        .first()
        .ok_or_else(|| Error::Corrupt("a provision plan with no slots".into()))?;
    let (host, port) = match (plan.network.public_host, plan.network.ssh_port) {
        (Some(host), Some(port)) => (host, port),
        _ => (first.ip_address.clone(), 22),
    };
    Ok(SshEndpoint {
        host,
        port,
        user: plan.image.ssh_user,
    })
}

/// Each published guest port with the `host:port` it is reached at: the port at position `k`
/// of the stored list (holes are ports withdrawn since) is the first slot's public port `k + 1`.
pub(crate) fn published_at(
    host: &str,
    base: i32,
    first_slot: i32,
    ports: &[Option<i32>],
) -> Vec<PortAddress> {
    let mut out: Vec<PortAddress> = ports
        .iter()
        .enumerate()
        .filter_map(|(k, &guest)| {
            let public = identity::public_port(
                u16::try_from(base).ok()?,
                u32::try_from(first_slot).ok()?,
                k + 1,
            )?;
            Some(PortAddress {
                guest_port: u16::try_from(guest?).ok()?,
                address: format!("{host}:{public}"),
            })
        })
        .collect();
    out.sort();
    out
}

pub(crate) async fn detail(
    cp: &ControlPlane,
    who: &Project<ProjectViewers>,
    id: AllocationId,
    can_release: bool,
) -> Result<AllocationDetail> {
    use sqlx::types::Json;
    /// The allocation's latest agent task, for the one-line summary.
    #[derive(Debug, serde::Deserialize)]
    struct Execution {
        kind: String,
        state: String,
        error: Option<String>,
        last_phase: Option<String>,
    }
    // One statement: the allocation with its history, phases, latest task, certificates and
    // GPU reports as JSON beside it (a page shows all of them; each was a round trip).
    let a = sqlx::query!(
        r#"SELECT a.name, s.name AS sku, a.shape, a.gpu_count, a.region, n.hostname,
                  l.name || ' ' || v.version AS "image!", l.slug AS listing, a.fee_per_hour_minor,
                  a.price_per_hour_minor, a.currency, a.desired_state,
                  a.observed_state, a.state, a.failure, a.placement, a.ssh_host, a.ssh_port,
                  a.ssh_user, a.created_at, a.expires_at, n.public_port_base, a.tags,
                  a.published_ports AS "published_ports: Vec<Option<i32>>",
                  (SELECT coalesce(json_agg(json_build_object(
                              'from', t.from_state, 'to', t.to_state, 'at', t.at,
                              'after_ms', t.after_ms, 'detail', t.detail) ORDER BY t.id), '[]')
                   FROM (SELECT id, from_state, to_state, at, detail,
                                coalesce((extract(epoch FROM at - lag(at) OVER (ORDER BY id))
                                          * 1000)::bigint, 0) AS after_ms
                         FROM allocation_transitions WHERE allocation_id = a.id) t
                  ) AS "transitions!: Json<Vec<Transition>>",
                  (SELECT coalesce(json_agg(json_build_object(
                              'task', t.kind, 'phase', p.phase, 'status', p.status,
                              'elapsed_ms', p.elapsed_ms, 'detail', p.detail) ORDER BY p.id), '[]')
                   FROM agent_task_phases p JOIN agent_tasks t ON t.id = p.task_id
                   WHERE t.allocation_id = a.id AND p.status <> 'started'
                  ) AS "phases!: Json<Vec<Phase>>",
                  (SELECT json_build_object(
                              'kind', t.kind, 'state', t.state, 'error', t.error,
                              'last_phase', (SELECT p.phase || ' ' || p.status
                                             FROM agent_task_phases p
                                             WHERE p.task_id = t.id ORDER BY p.id DESC LIMIT 1))
                   FROM agent_tasks t WHERE t.allocation_id = a.id
                   ORDER BY t.created_at DESC LIMIT 1
                  ) AS "execution: Json<Execution>",
                  (SELECT coalesce(json_agg(json_build_object(
                              'slot_index', s.slot_index, 'nvme_serial', c.nvme_serial,
                              'wipe_method', c.wipe_method, 'wipe_verified', c.wipe_verified,
                              'gpu_reset', c.gpu_reset, 'firmware_ok', c.firmware_ok,
                              'wipe_ms', c.wipe_ms, 'verified_samples', c.verified_samples,
                              'gpu_firmware', c.gpu_firmware, 'signature', c.signature,
                              'received_at', c.received_at) ORDER BY s.slot_index), '[]')
                   FROM cleanup_certificates c JOIN node_resource_slots s ON s.id = c.slot_id
                   WHERE c.allocation_id = a.id
                  ) AS "certificates!: Json<Vec<Certificate>>",
                  (SELECT json_build_object('percent', u.gpu_util_pct, 'at', u.at)
                   FROM allocation_gpu_utilisation u
                   WHERE u.allocation_id = a.id ORDER BY u.at DESC LIMIT 1
                  ) AS "gpu_utilisation: Json<GpuUtilisation>",
                  (SELECT coalesce(json_agg(json_build_object(
                              'slot_index', h.slot_index, 'detail', h.detail,
                              'observed_at', h.observed_at,
                              'out_of_service', h.took_out_of_service)
                              ORDER BY h.recorded_at DESC, h.observed_at DESC), '[]')
                   FROM (SELECT s.slot_index, e.detail, e.observed_at, e.took_out_of_service,
                                e.recorded_at
                         FROM resource_claims c
                         JOIN gpu_health_events e
                           ON e.node_id = c.node_id
                          AND (c.slot_id IS NULL OR e.slot_id = c.slot_id)
                          AND e.recorded_at >= c.claimed_at
                          AND (c.released_at IS NULL OR e.recorded_at <= c.released_at)
                         JOIN node_resource_slots s ON s.id = e.slot_id
                         WHERE c.allocation_id = a.id
                         ORDER BY e.recorded_at DESC, e.observed_at DESC LIMIT 20) h
                  ) AS "gpu_health!: Json<Vec<GpuHealthNotice>>"
           FROM allocations a JOIN skus s ON s.id = a.sku_id JOIN nodes n ON n.id = a.node_id
                JOIN listing_versions v ON v.id = a.listing_version_id
                JOIN listings l ON l.id = v.listing_id
           WHERE a.id = $1 AND a.project_id = $2"#,
        id as AllocationId,
        who.id() as ProjectId
    )
    .fetch_optional(cp.pool())
    .await?
    .ok_or(Error::NotFound { what: "allocation" })?;
    let transitions = a.transitions.0;
    let phases = a.phases.0;
    let certificates = a.certificates.0;
    let gpu_utilisation = a.gpu_utilisation.map(|u| u.0);
    let gpu_health = a.gpu_health.0;
    let execution = a.execution.map(|Json(t)| {
        let mut s = format!("{} {}", t.kind, t.state);
        if let Some(p) = t.last_phase {
            s.push_str(&format!(" (last phase: {p})"));
        }
        if let Some(e) = t.error {
            s.push_str(&format!(": {e}"));
        }
        s
    });
    let slot_indexes: Vec<i32> = a
        .placement
        .get("slot_indexes")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let ssh = ssh_endpoint(
        &a.state,
        a.ssh_host.as_deref(),
        a.ssh_port,
        a.ssh_user.as_deref(),
    );
    Ok(AllocationDetail {
        id,
        canonical_name: cp
            .naming()
            .allocation(&a.region, who.tenant(), who.id(), id)?
            .to_string(),
        project_id: who.id(),
        gpu_utilisation,
        gpu_health,
        projected: projected(&a.state, &a.desired_state, a.failure.as_deref()),
        ssh: ssh.as_ref().map(SshEndpoint::command),
        ssh_endpoint: ssh,
        published: match (&a.ssh_host, slot_indexes.iter().min()) {
            (Some(host), Some(&first)) if a.state == "running" => {
                published_at(host, a.public_port_base, first, &a.published_ports)
            }
            _ => Vec::new(),
        },
        name: a.name,
        sku: a.sku,
        shape: a.shape,
        gpu_count: a.gpu_count,
        region: a.region,
        node: a.hostname,
        slot_indexes,
        image: a.image,
        listing: a.listing,
        price_per_hour: Money {
            amount_minor: a.price_per_hour_minor,
            currency: a.currency.clone().into(),
        },
        fee_per_hour: Money {
            amount_minor: a.fee_per_hour_minor,
            currency: a.currency.into(),
        },
        tags: serde_json::from_value(a.tags).unwrap_or_default(),
        desired_state: a.desired_state,
        observed_state: a.observed_state,
        can_release: can_release
            && matches!(a.state.as_str(), "placed" | "provisioning" | "running"),
        state: a.state,
        execution,
        failure: a.failure,
        placement_why: a
            .placement
            .get("why")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string(),
        created_at: a.created_at,
        expires_at: a.expires_at,
        transitions,
        phases,
        certificates,
    })
}
