//! After launch: the outbox dispatcher turns outbox rows into node tasks; agent results move
//! the allocation on (running, or released once the cleanup proof verifies); the reaper
//! handles nodes lost during provisioning and expired allocations. Every failure branch ends
//! with the claims released and the slots either cleaned (proof) or `blocked` for an operator,
//! never leaked.

pub(crate) mod cluster;
mod detail;
mod plan;
mod results;
mod user_data;
pub(crate) mod volumes;

pub use detail::{
    AllocationDetail, Certificate, GpuHealthNotice, GpuUtilisation, Phase, PortAddress,
    SshEndpoint, Transition,
};
pub(crate) use detail::{detail, published_at, ssh_endpoint};
pub(crate) use plan::{Written, planned_slots, queue_provisions, queue_releases};

/// A member's NIC on its project's segment, from the stored VNI and host number.
pub(crate) fn private_nic(vni: i32, host: i32) -> Result<agent_protocol::PrivateNic> {
    plan::Private { vni, host }.nic()
}
pub(crate) use results::{
    lock_allocation_of, phase_changes_claims, result_changes_claims, task_finished, wipe_started,
};
pub(crate) use user_data::{open_user_data, seal_user_data};

use agent_protocol::{PlannedSlot, TaskSpec, TraceParent};
use serde_json::json;
use sqlx::{Connection, PgConnection};
use tracing::Instrument;

use super::projected;
use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{AgentTaskId, AllocationId, NodeId, ProjectId, SlotId, TenantId};
use cp_identity::auth::{Platform, PlatformOperators};
use cp_inventory::fleet::{lock_node, utc};
use plan::{network_plan, planned_slots_of};
use results::{end_blocked, lock_state};

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
                  CASE WHEN p.east_west THEN a.project_id END AS "east_west_group: ProjectId",
                  CASE WHEN p.east_west THEN p.vni END AS private_vni,
                  CASE WHEN p.east_west THEN a.private_host END AS private_host
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
                plan::Private::of(a.private_vni, a.private_host),
            )?;
            let spec = TaskSpec::NetworkUpdate(agent_protocol::NetworkUpdatePlan {
                allocation_id: id.to_string(),
                slots,
                network,
            });
            replace_or_queue(&mut *conn, a.node_id, id, &spec).await?;
        }
        "allocation.volumes_update" => {
            if a.state != "running" {
                return Ok(None);
            }
            let slots: Vec<PlannedSlot> = planned_slots_of(&mut *conn, &[id])
                .await?
                .into_iter()
                .map(|(_, s)| s)
                .collect();
            let spec = TaskSpec::VolumesUpdate(agent_protocol::VolumesPlan {
                allocation_id: id.to_string(),
                slots,
                volumes: volumes::volumes_plan(&mut *conn, id).await?,
            });
            replace_or_queue(&mut *conn, a.node_id, id, &spec).await?;
        }
        other => return Err(Error::Corrupt(format!("outbox kind {other}"))),
    }
    Ok(Some(a.node_id))
}

/// Queues an update task for a running allocation: one waiting update of a kind per
/// allocation, so a newer plan replaces a queued one's.
async fn replace_or_queue(
    conn: &mut PgConnection,
    node: NodeId,
    id: AllocationId,
    spec: &TaskSpec,
) -> Result<()> {
    let body = serde_json::to_value(spec).expect("a task spec serializes");
    let replaced = sqlx::query!(
        "UPDATE agent_tasks SET spec = $3
         WHERE allocation_id = $1 AND kind = $2 AND state = 'queued'",
        id as AllocationId,
        spec.kind(),
        body,
    )
    .execute(&mut *conn)
    .await?;
    if replaced.rows_affected() == 0 {
        sqlx::query!(
            "INSERT INTO agent_tasks (id, node_id, kind, spec, allocation_id, traceparent)
             VALUES ($1, $2, $3, $4, $5, $6)",
            AgentTaskId::new_random() as AgentTaskId,
            node as NodeId,
            spec.kind(),
            body,
            id as AllocationId,
            cp_base::trace_context::current().map(String::from),
        )
        .execute(&mut *conn)
        .await?;
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
            cluster::member_failed(&mut tx, a.id, &failure).await?;
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
