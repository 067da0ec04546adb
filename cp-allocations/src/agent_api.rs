//! What a node agent may do: exchange its bootstrap token, heartbeat, claim tasks, report
//! phases and results. Every call but the exchange needs a [`NodeAgent`], which only
//! [`ControlPlane::authenticate_node`] makes from a valid node credential.

use std::time::Duration;

use agent_protocol::{
    Discovery, GpuEvent, GpuUtilisation, HealthStatus, Holding, Overlay, OverlayMember,
    OverlayNetwork, PhaseReport, PhaseStatus, ReconcileResponse, Task, TaskOutcome, TaskOutput,
    TaskSpec, TraceParent,
};
use serde_json::json;

use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::db::OnConstraint;
use cp_base::error::{Error, Result};
use cp_base::ids::{AgentTaskId, AllocationId, NodeId, SlotId};
use cp_inventory::fleet::{
    differences, live_slots, lock_node, new_secret, queue_discovery, secret_hash, utc,
};

/// Proof that the caller holds node `id`'s current credential. Fields are private.
#[derive(Clone, Debug)]
pub struct NodeAgent {
    id: NodeId,
    region: String,
}

impl NodeAgent {
    pub fn node_id(&self) -> NodeId {
        self.id
    }
}

/// What enrolment hands the agent: its id and its credential (shown once).
#[derive(Clone, Debug)]
pub struct NodeCredential {
    pub node_id: NodeId,
    pub credential: String,
}

/// A task an agent has claimed: what to do, and the trace it continues.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimedTask {
    pub id: AgentTaskId,
    pub spec: TaskSpec,
    pub traceparent: Option<TraceParent>,
}

impl ClaimedTask {
    /// From a task row: its spec as stored (a spec that doesn't parse is corruption), and its
    /// stored trace context (one that doesn't parse is only a lost trace).
    /// A stored task as its agent is handed it (a provision's sealed user data opened, a
    /// cluster member's cluster filled in).
    async fn from_row(
        cp: &ControlPlane,
        id: AgentTaskId,
        spec: serde_json::Value,
        traceparent: Option<String>,
    ) -> Result<Self> {
        let spec = crate::allocations::lifecycle::open_user_data(cp.secrets(), spec)?;
        let spec = crate::allocations::clusters::with_cluster(cp, spec).await?;
        Ok(Self {
            spec: serde_json::from_value(spec)
                .map_err(|e| Error::Corrupt(format!("task {id} spec: {e}")))?,
            traceparent: traceparent.and_then(|t| TraceParent::parse(&t).ok()),
            id,
        })
    }
}

impl From<ClaimedTask> for Task {
    fn from(t: ClaimedTask) -> Task {
        Task {
            task_id: t.id.to_string(),
            spec: t.spec,
            traceparent: t.traceparent,
        }
    }
}

/// What the control plane offers for what node agents may do.
#[allow(async_fn_in_trait)]
pub trait AgentApi {
    /// Exchanges a one-time bootstrap token for the node's credential. The token must be
    /// unused, unexpired, not replaced, and issued for this hostname. A previous credential of
    /// the node stops working. Queues the first discovery.
    async fn exchange_bootstrap_token(
        &self,
        token: &str,
        hostname: &str,
        agent_version: &str,
    ) -> Result<NodeCredential>;

    /// The node a credential belongs to, if it is the node's current one.
    async fn authenticate_node(&self, credential: &str) -> Result<NodeAgent>;

    async fn heartbeat(
        &self,
        agent: &NodeAgent,
        agent_version: &str,
        health: HealthStatus,
        detail: Option<&str>,
        utilisation: &[GpuUtilisation],
    ) -> Result<()>;

    /// Records the GPU health events a heartbeat carried (each once) and takes slots out of
    /// service as the fleet's policy says; how many were new.
    async fn gpu_events(&self, agent: &NodeAgent, events: &[GpuEvent]) -> Result<usize>;

    /// Records what the host holds now (its leases and VMs), for reconciliation. Refused
    /// whole when it lists more than [`agent_protocol::MAX_HOLDING`] of either, or an id that
    /// isn't one.
    async fn record_holding(&self, agent: &NodeAgent, holding: &Holding) -> Result<()>;

    /// Records the host's VXLAN tunnel endpoint: a unicast IPv4 address no other node has.
    async fn record_vtep(&self, agent: &NodeAgent, vtep: &str) -> Result<()>;

    /// The members of the private segments of this node's guests, on every host with an
    /// endpoint: only the projects this node hosts a live member of, and only while they
    /// allow east-west traffic.
    async fn overlay(&self, agent: &NodeAgent) -> Result<Overlay>;

    /// What this node should hold, for an agent checking a plan or restarting: its live
    /// approved slots (as plans name them), its claimed and unfinished tasks, and the
    /// allocations that still hold or are cleaning its slots.
    async fn reconcile_view(&self, agent: &NodeAgent) -> Result<ReconcileResponse>;

    /// The oldest queued task for this node, marked running; waits up to `wait` for one
    /// (polling, so that any server replica may answer). The task carries on the trace of the
    /// change that queued it.
    async fn claim_task(&self, agent: &NodeAgent, wait: Duration) -> Result<Option<ClaimedTask>>;

    /// For an agent that says it runs no task: the oldest task this node has as running, whose
    /// claim answer never reached it. The task is not claimed again (it stays running, with
    /// its phases); the agent resumes it.
    async fn resend_running_task(&self, agent: &NodeAgent) -> Result<Option<ClaimedTask>>;

    async fn report_phase(
        &self,
        agent: &NodeAgent,
        task: AgentTaskId,
        report: &PhaseReport,
    ) -> Result<()>;

    /// Records a task's result. A discovery becomes the node's next slot-map proposal; where
    /// it disagrees with approved slots, those slots are marked drifted (unschedulable until
    /// re-approved) in the same transaction.
    async fn finish_task(
        &self,
        agent: &NodeAgent,
        task: AgentTaskId,
        outcome: &TaskOutcome,
    ) -> Result<Option<i32>>;
}

impl AgentApi for ControlPlane {
    #[tracing::instrument(skip_all, fields(node.hostname = %hostname))]
    async fn exchange_bootstrap_token(
        &self,
        token: &str,
        hostname: &str,
        agent_version: &str,
    ) -> Result<NodeCredential> {
        let mut tx = self.pool().begin().await?;
        let row = sqlx::query!(
            r#"SELECT t.id, t.node_id AS "node_id: NodeId", n.hostname, n.region,
                      t.used_at, t.revoked_at, t.expires_at, t.expires_at <= now() AS "expired!"
               FROM node_bootstrap_tokens t JOIN nodes n ON n.id = t.node_id
               WHERE t.token_hash = $1
               FOR UPDATE OF t"#,
            secret_hash(token)
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| Error::AgentRefused("this bootstrap token is not known".into()))?;
        if row.used_at.is_some() {
            return Err(Error::AgentRefused(
                "this bootstrap token was already used; ask an operator for a new one".into(),
            ));
        }
        if row.revoked_at.is_some() {
            return Err(Error::AgentRefused(
                "this bootstrap token was replaced by a newer one".into(),
            ));
        }
        if row.expired {
            return Err(Error::AgentRefused(format!(
                "this bootstrap token expired at {}; ask an operator for a new one",
                utc(row.expires_at)
            )));
        }
        let hostname = hostname.trim().to_ascii_lowercase();
        if hostname != row.hostname {
            return Err(Error::AgentRefused(format!(
                "this bootstrap token enrols {}, not {hostname}",
                row.hostname
            )));
        }
        sqlx::query!(
            "UPDATE node_bootstrap_tokens SET used_at = now() WHERE id = $1",
            row.id
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!(
            "UPDATE node_credentials SET revoked_at = now() WHERE node_id = $1 AND revoked_at IS NULL",
            row.node_id as NodeId
        )
        .execute(&mut *tx)
        .await?;
        let credential = new_secret("gpn_");
        sqlx::query!(
            "INSERT INTO node_credentials (id, node_id, credential_hash) VALUES ($1, $2, $3)",
            uuid::Uuid::new_v4(),
            row.node_id as NodeId,
            secret_hash(&credential),
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!(
            "UPDATE nodes SET agent_enrolled_at = now(), agent_version = $2 WHERE id = $1",
            row.node_id as NodeId,
            agent_version.chars().take(64).collect::<String>(),
        )
        .execute(&mut *tx)
        .await?;
        queue_discovery(&mut tx, row.node_id, None).await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::Agent,
                action: "node.agent.enrol",
                resource: &self.naming().node(&row.region, row.node_id)?,
                before: None,
                after: Some(json!({ "agent_version": agent_version })),
                request_id: None,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(NodeCredential {
            node_id: row.node_id,
            credential,
        })
    }

    async fn authenticate_node(&self, credential: &str) -> Result<NodeAgent> {
        let row = sqlx::query!(
            r#"SELECT n.id AS "id: NodeId", n.region
               FROM node_credentials c JOIN nodes n ON n.id = c.node_id
               WHERE c.credential_hash = $1 AND c.revoked_at IS NULL"#,
            secret_hash(credential)
        )
        .fetch_optional(self.pool())
        .await?
        .ok_or_else(|| {
            Error::AgentRefused("the node credential is not valid (revoked or unknown)".into())
        })?;
        Ok(NodeAgent {
            id: row.id,
            region: row.region,
        })
    }

    #[tracing::instrument(skip_all, fields(node.id = %agent.id))]
    async fn heartbeat(
        &self,
        agent: &NodeAgent,
        agent_version: &str,
        health: HealthStatus,
        detail: Option<&str>,
        utilisation: &[GpuUtilisation],
    ) -> Result<()> {
        let health = match health {
            HealthStatus::Healthy => "healthy",
            HealthStatus::Degraded => "degraded",
        };
        sqlx::query!(
            "UPDATE nodes SET last_heartbeat_at = now(), agent_version = $2, health = $3,
                              health_detail = $4, heartbeat_lapsed = false
             WHERE id = $1",
            agent.id as NodeId,
            printable(agent_version, 64),
            health,
            detail.map(|d| printable(d, 500)),
        )
        .execute(self.pool())
        .await?;
        self.record_utilisation(agent, utilisation).await
    }

    async fn gpu_events(&self, agent: &NodeAgent, events: &[GpuEvent]) -> Result<usize> {
        use crate::internal::GpuHealthInternal;
        self.record_gpu_events(agent.id, events).await
    }

    async fn record_holding(&self, agent: &NodeAgent, holding: &Holding) -> Result<()> {
        let invalid = |reason: String| Error::Invalid {
            field: "holding",
            reason,
        };
        if holding.leases.len() > agent_protocol::MAX_HOLDING
            || holding.vms.len() > agent_protocol::MAX_HOLDING
        {
            return Err(invalid(format!(
                "at most {} leases and {} VMs",
                agent_protocol::MAX_HOLDING,
                agent_protocol::MAX_HOLDING
            )));
        }
        let id = |s: &str| {
            s.parse::<uuid::Uuid>().map_err(|_| {
                invalid(format!(
                    "{:?} is not an id",
                    s.chars().take(64).collect::<String>()
                ))
            })
        };
        let leases = holding
            .leases
            .iter()
            .map(|l| {
                Ok(json!({ "slot_id": id(&l.slot_id)?, "allocation_id": id(&l.allocation_id)? }))
            })
            .collect::<Result<Vec<_>>>()?;
        let vms = holding
            .vms
            .iter()
            .map(|v| id(v))
            .collect::<Result<Vec<_>>>()?;
        sqlx::query!(
            "UPDATE nodes SET holding = $2, holding_at = now() WHERE id = $1",
            agent.id as NodeId,
            json!({ "leases": leases, "vms": vms }),
        )
        .execute(self.pool())
        .await?;
        Ok(())
    }

    async fn record_vtep(&self, agent: &NodeAgent, vtep: &str) -> Result<()> {
        let refuse = |reason: String| Error::Invalid {
            field: "vtep",
            reason,
        };
        let at: std::net::Ipv4Addr = vtep.parse().map_err(|_| {
            refuse(format!(
                "{:?} is not an IPv4 address",
                vtep.chars().take(64).collect::<String>()
            ))
        })?;
        if at.is_unspecified()
            || at.is_loopback()
            || at.is_multicast()
            || at.is_broadcast()
            || at.is_link_local()
        {
            return Err(refuse(format!("{at} can't be a tunnel endpoint")));
        }
        sqlx::query!(
            "UPDATE nodes SET vtep = $2::text::inet WHERE id = $1 AND vtep IS DISTINCT FROM $2::text::inet",
            agent.id as NodeId,
            at.to_string()
        )
        .execute(self.pool())
        .await
        .on_constraint("nodes_vtep", || {
            Error::Conflict(format!("another node's tunnel endpoint is {at}"))
        })?;
        Ok(())
    }

    async fn overlay(&self, agent: &NodeAgent) -> Result<Overlay> {
        let rows = sqlx::query!(
            r#"WITH mine AS (
                   SELECT DISTINCT a.project_id FROM allocations a
                   JOIN projects p ON p.id = a.project_id
                   WHERE a.node_id = $1 AND p.east_west AND a.private_host IS NOT NULL
                     AND a.state IN ('provisioning', 'running') AND a.desired_state = 'running')
               SELECT p.vni, a.private_host AS "host!", host(n.vtep) AS "vtep!"
               FROM mine JOIN allocations a ON a.project_id = mine.project_id
                    JOIN projects p ON p.id = a.project_id
                    JOIN nodes n ON n.id = a.node_id
               WHERE a.private_host IS NOT NULL AND n.vtep IS NOT NULL
                 AND a.state IN ('provisioning', 'running') AND a.desired_state = 'running'
               ORDER BY p.vni, a.private_host
               LIMIT $2"#,
            agent.id as NodeId,
            agent_protocol::MAX_OVERLAY_MEMBERS as i64
        )
        .fetch_all(self.pool())
        .await?;
        let mut overlay = Overlay::default();
        for r in rows {
            let nic = crate::allocations::lifecycle::private_nic(r.vni, r.host)?;
            if overlay.networks.last().is_none_or(|n| n.vni != nic.vni) {
                overlay.networks.push(OverlayNetwork {
                    vni: nic.vni,
                    members: Vec::new(),
                });
            }
            if let Some(n) = overlay.networks.last_mut() {
                n.members.push(OverlayMember {
                    address: nic.address,
                    mac: nic.mac,
                    vtep: r.vtep,
                });
            }
        }
        Ok(overlay)
    }

    #[tracing::instrument(skip_all, fields(node.id = %agent.id))]
    async fn reconcile_view(&self, agent: &NodeAgent) -> Result<ReconcileResponse> {
        let mut conn = self.pool().acquire().await?;
        let approved_slots =
            crate::allocations::lifecycle::planned_slots(&mut conn, agent.id).await?;
        let tasks = sqlx::query!(
            r#"SELECT id AS "id: AgentTaskId", spec, traceparent FROM agent_tasks
               WHERE node_id = $1 AND state = 'running' ORDER BY created_at"#,
            agent.id as NodeId
        )
        .fetch_all(&mut *conn)
        .await?;
        let mut running_tasks = Vec::with_capacity(tasks.len());
        for t in tasks {
            running_tasks.push(
                ClaimedTask::from_row(self, t.id, t.spec, t.traceparent)
                    .await?
                    .into(),
            );
        }
        let active_allocations = sqlx::query_scalar!(
            r#"SELECT id AS "id: AllocationId" FROM allocations
               WHERE node_id = $1 AND state IN ('placed', 'provisioning', 'running', 'releasing', 'cleaning')
               ORDER BY id"#,
            agent.id as NodeId
        )
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(|id| id.to_string())
        .collect();
        Ok(ReconcileResponse {
            approved_slots,
            running_tasks,
            active_allocations,
        })
    }

    #[tracing::instrument(skip_all, fields(node.id = %agent.id))]
    async fn claim_task(&self, agent: &NodeAgent, wait: Duration) -> Result<Option<ClaimedTask>> {
        let deadline = tokio::time::Instant::now() + wait;
        if !wait.is_zero() && self.wakeups().should_start_watcher() {
            tokio::spawn(watch_queued_tasks(
                self.pool().sqlx().clone(),
                self.wakeups_weak(),
            ));
        }
        let waiting = self.wakeups().wait_for(agent.id);
        loop {
            // Registered before looking, so that a task queued meanwhile still wakes us.
            let queued = waiting.notify().notified();
            tokio::pin!(queued);
            queued.as_mut().enable();
            self.metrics().claim_checked();
            // Launches first, then the rest in the order queued. An agent runs one task at a
            // time, and a tenant waits on a provision while a wipe only holds back capacity;
            // no provision depends on a queued task (placement takes only clean slots, and a
            // release cancels its allocation's queued provision), and at most a node's slots
            // can be provisioning, so the rest never starve.
            let row = sqlx::query!(
                r#"UPDATE agent_tasks SET state = 'running', claimed_at = now()
                   WHERE id = (SELECT id FROM agent_tasks
                               WHERE node_id = $1 AND state = 'queued'
                               ORDER BY kind NOT IN ('slice.vm_provision', 'baremetal.provision'),
                                        created_at
                               LIMIT 1 FOR UPDATE SKIP LOCKED)
                   RETURNING id AS "id: AgentTaskId", kind, spec, traceparent,
                             (extract(epoch FROM claimed_at - created_at))::float8 AS "waited_s!""#,
                agent.id as NodeId
            )
            .fetch_optional(self.pool())
            .await?;
            if let Some(row) = row {
                self.metrics()
                    .task_claimed(Duration::from_secs_f64(row.waited_s.max(0.0)));
                let mut task =
                    ClaimedTask::from_row(self, row.id, row.spec, row.traceparent).await?;
                // The hand-over is a span of the launch's trace; the agent's spans are its
                // children. (No stored context, or no exporter here: the agent gets whatever
                // was stored.)
                let handed = cp_base::trace_context::follow(
                    tracing::info_span!(
                        "agent_task.dispatch",
                        otel.kind = "producer",
                        task.id = %row.id,
                        task.kind = %row.kind,
                        node.id = %agent.id,
                        dispatch.wait_s = row.waited_s,
                    ),
                    task.traceparent.as_ref(),
                );
                if let Some(t) = cp_base::trace_context::of(&handed) {
                    task.traceparent = Some(t);
                }
                return Ok(Some(task));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
            // Nudged at once when this replica queues a task for the node, and by the watcher
            // within its interval when another replica does; otherwise waits out the claim.
            if tokio::time::timeout_at(deadline, queued).await.is_err() {
                return Ok(None);
            }
        }
    }

    #[tracing::instrument(skip_all, fields(node.id = %agent.id))]
    async fn resend_running_task(&self, agent: &NodeAgent) -> Result<Option<ClaimedTask>> {
        let Some(row) = sqlx::query!(
            r#"SELECT id AS "id: AgentTaskId", kind, spec, traceparent FROM agent_tasks
               WHERE node_id = $1 AND state = 'running' ORDER BY claimed_at, created_at LIMIT 1"#,
            agent.id as NodeId
        )
        .fetch_optional(self.pool())
        .await?
        else {
            return Ok(None);
        };
        tracing::warn!(task.id = %row.id, task.kind = %row.kind,
                       "sending a running task again: its agent is idle, so the claim's answer was lost");
        ClaimedTask::from_row(self, row.id, row.spec, row.traceparent)
            .await
            .map(Some)
    }

    #[tracing::instrument(skip_all, fields(node.id = %agent.id, task.id = %task))]
    async fn report_phase(
        &self,
        agent: &NodeAgent,
        task: AgentTaskId,
        report: &PhaseReport,
    ) -> Result<()> {
        let phase = report.phase.trim();
        if phase.is_empty()
            || phase.len() > 63
            || !phase.starts_with(|c: char| c.is_ascii_lowercase())
            || !phase
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(Error::Invalid {
                field: "phase",
                reason: format!("{phase:?} is not a lowercase identifier"),
            });
        }
        let status = match report.status {
            PhaseStatus::Started => "started",
            PhaseStatus::Succeeded => "succeeded",
            PhaseStatus::Failed => "failed",
        };
        let wipe_starts = crate::allocations::lifecycle::phase_changes_claims(report);
        // One transaction: the phase is recorded together with what it does, or not at all.
        let mut tx = self.pool().begin().await?;
        if wipe_starts {
            // Every change to a node's claims holds its row first (placement, results, this),
            // so that the free-block summaries of two releases on one node never interleave.
            lock_node(&mut tx, agent.id).await?;
        }
        let state = sqlx::query_scalar!(
            "SELECT state FROM agent_tasks WHERE id = $1 AND node_id = $2",
            task as AgentTaskId,
            agent.id as NodeId
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "task" })?;
        if state != "running" {
            return Err(Error::Conflict(format!(
                "task {task} is {state}, not running"
            )));
        }
        sqlx::query!(
            "INSERT INTO agent_task_phases (task_id, phase, status, elapsed_ms, detail)
             VALUES ($1, $2, $3, $4, $5)",
            task as AgentTaskId,
            phase,
            status,
            report.elapsed_ms.min(i64::MAX as u64) as i64,
            report
                .detail
                .as_deref()
                .map(|d| d.chars().take(2000).collect::<String>()),
        )
        .execute(&mut *tx)
        .await?;
        if wipe_starts {
            crate::allocations::lifecycle::wipe_started(&mut tx, task).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(node.id = %agent.id, task.id = %task))]
    async fn finish_task(
        &self,
        agent: &NodeAgent,
        task: AgentTaskId,
        outcome: &TaskOutcome,
    ) -> Result<Option<i32>> {
        let mut tx = self.pool().begin().await?;
        // A task's kind never changes, so it is read before anything is locked.
        let kind = sqlx::query_scalar!(
            "SELECT kind FROM agent_tasks WHERE id = $1 AND node_id = $2",
            task as AgentTaskId,
            agent.id as NodeId
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "task" })?;
        if crate::allocations::lifecycle::result_changes_claims(&kind) {
            // Every change to a node's claims or slots holds the node's row first. A
            // provision's result changes neither, and so does not queue behind a release's
            // result on the same node.
            lock_node(&mut tx, agent.id).await?;
        }
        // Then the task's allocation, before the task: a release holds the allocation and then
        // cancels its queued tasks, so taking the task first would deadlock with it.
        let allocation_state =
            crate::allocations::lifecycle::lock_allocation_of(&mut tx, agent.id, task).await?;
        let row = sqlx::query!(
            r#"SELECT state, kind, spec, allocation_id AS "allocation_id: AllocationId"
               FROM agent_tasks WHERE id = $1 AND node_id = $2 FOR NO KEY UPDATE"#,
            task as AgentTaskId,
            agent.id as NodeId
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "task" })?;
        if row.state != "running" {
            return Err(Error::Conflict(format!(
                "task {task} is already {}",
                row.state
            )));
        }
        self.metrics()
            .task_finished(&row.kind, matches!(outcome, TaskOutcome::Succeeded { .. }));
        if let Some(allocation) = row.allocation_id {
            let state = allocation_state.ok_or_else(|| {
                Error::Corrupt(format!("task {task}'s allocation {allocation} has no row"))
            })?;
            crate::allocations::lifecycle::task_finished(
                &mut tx, agent.id, task, &row.kind, allocation, &state, row.spec, outcome,
            )
            .await?;
            tx.commit().await?;
            return Ok(None);
        }
        let mut generation = None;
        match outcome {
            TaskOutcome::Failed { error } => {
                let error = error.trim();
                sqlx::query!(
                    "UPDATE agent_tasks SET state = 'failed', finished_at = now(), error = $2 WHERE id = $1",
                    task as AgentTaskId,
                    if error.is_empty() { "the agent gave no reason" } else { error },
                )
                .execute(&mut *tx)
                .await?;
            }
            TaskOutcome::Succeeded { output } => {
                let TaskOutput::TopologyDiscovered(discovery) = output else {
                    return Err(Error::Invalid {
                        field: "result",
                        reason: "a discovery task answers with a discovery".into(),
                    });
                };
                if row.kind != "slice.topology_discover" {
                    return Err(Error::Invalid {
                        field: "result",
                        reason: format!("a {} task can't return a discovery", row.kind),
                    });
                }
                match self.record_discovery(&mut tx, agent, task, discovery).await {
                    Ok(g) => generation = Some(g),
                    Err(e @ Error::Invalid { .. }) => {
                        // A malformed answer fails the task (the operator sees why) and
                        // changes nothing else.
                        drop(tx);
                        sqlx::query!(
                            "UPDATE agent_tasks SET state = 'failed', finished_at = now(), error = $2
                             WHERE id = $1 AND state = 'running'",
                            task as AgentTaskId,
                            format!("the control plane refused the result: {e}"),
                        )
                        .execute(self.pool())
                        .await?;
                        return Err(e);
                    }
                    Err(e) => return Err(e),
                }
                sqlx::query!(
                    "UPDATE agent_tasks SET state = 'succeeded', finished_at = now() WHERE id = $1",
                    task as AgentTaskId
                )
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        Ok(generation)
    }
}

/// This process's watcher for tasks other replicas queue (see `Wakeups`): every
/// `WATCH_INTERVAL`, while any claim waits here, one read of which nodes have queued tasks,
/// and a nudge for the waiting claimers of those. Stops when its handle is gone.
async fn watch_queued_tasks(pool: sqlx::PgPool, wakeups: std::sync::Weak<cp_base::Wakeups>) {
    let mut tick = tokio::time::interval(cp_base::WATCH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(w) = wakeups.upgrade() else {
            return;
        };
        let waiting = w.waiting_nodes();
        if waiting.is_empty() {
            continue;
        }
        // The partial index of queued tasks holds only what agents have not claimed yet.
        match sqlx::query_scalar!(
            r#"SELECT DISTINCT node_id AS "node_id!: NodeId" FROM agent_tasks
               WHERE state = 'queued'"#
        )
        .fetch_all(&pool)
        .await
        {
            Ok(nodes) => {
                for node in nodes.into_iter().filter(|n| waiting.contains(n)) {
                    w.task_queued(node);
                }
            }
            Err(e) => tracing::warn!(error = %e, "looking for queued agent tasks failed"),
        }
    }
}

/// What the other areas of this crate use of it, behind no proof: never for the pages or the API.
#[allow(async_fn_in_trait)]
pub(crate) trait AgentInternal {
    /// Stores what the node's guests reported, for allocations on this node only (others
    /// are ignored and logged: a node can't write another node's figures).
    async fn record_utilisation(
        &self,
        agent: &NodeAgent,
        utilisation: &[GpuUtilisation],
    ) -> Result<()>;

    async fn record_discovery(
        &self,
        tx: &mut sqlx::PgConnection,
        agent: &NodeAgent,
        task: AgentTaskId,
        discovery: &Discovery,
    ) -> Result<i32>;
}

impl AgentInternal for ControlPlane {
    async fn record_utilisation(
        &self,
        agent: &NodeAgent,
        utilisation: &[GpuUtilisation],
    ) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for u in utilisation {
            let Ok(id) = u.allocation_id.parse::<AllocationId>() else {
                tracing::warn!(node.id = %agent.id, "utilisation for a malformed allocation id");
                continue;
            };
            if u.samples == 0 || u.gpu_util_pct > 100 || !seen.insert(id) {
                continue;
            }
            let stored = sqlx::query!(
                "INSERT INTO allocation_gpu_utilisation (allocation_id, node_id, gpu_util_pct, samples)
                 SELECT id, node_id, $3, $4 FROM allocations WHERE id = $1 AND node_id = $2",
                id as AllocationId,
                agent.id as NodeId,
                i16::from(u.gpu_util_pct),
                u.samples.min(i32::MAX as u32) as i32,
            )
            .execute(self.pool())
            .await?
            .rows_affected();
            if stored == 0 {
                tracing::warn!(node.id = %agent.id, allocation.id = %id, "utilisation for an allocation not on this node; ignored");
            }
        }
        Ok(())
    }

    async fn record_discovery(
        &self,
        tx: &mut sqlx::PgConnection,
        agent: &NodeAgent,
        task: AgentTaskId,
        discovery: &Discovery,
    ) -> Result<i32> {
        if !discovery.approval_required {
            return Err(Error::Invalid {
                field: "discovery",
                reason: "approval_required must be true: discovery never creates slots".into(),
            });
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(dup) = discovery
            .proposed_slots
            .iter()
            .find(|s| !seen.insert(s.slot_index))
        {
            return Err(Error::Invalid {
                field: "discovery",
                reason: format!("slot index {} is proposed twice", dup.slot_index),
            });
        }
        sqlx::query!(
            "UPDATE slot_map_proposals SET status = 'superseded' WHERE node_id = $1 AND status = 'pending'",
            agent.id as NodeId
        )
        .execute(&mut *tx)
        .await?;
        let generation = sqlx::query_scalar!(
            r#"INSERT INTO slot_map_proposals (node_id, generation, task_id, discovery)
               VALUES ($1, (SELECT coalesce(max(generation), 0) + 1 FROM slot_map_proposals WHERE node_id = $1), $2, $3)
               RETURNING generation"#,
            agent.id as NodeId,
            task as AgentTaskId,
            serde_json::to_value(discovery).expect("serializes"),
        )
        .fetch_one(&mut *tx)
        .await?;

        // Drift: approved slots the new discovery disagrees with.
        let mut drifted = Vec::new();
        for current in live_slots(&mut *tx, agent.id).await? {
            let now = discovery
                .proposed_slots
                .iter()
                .find(|p| p.gpu.pci_address == current.gpu_pci_address);
            let reason = match now {
                None => Some(format!("GPU {} is gone", current.gpu_pci_address)),
                Some(p) => {
                    let d = differences(&current, p);
                    (!d.is_empty()).then(|| d.join("; "))
                }
            };
            // Drift sticks until an operator re-approves: a GPU that comes back is not
            // trusted by itself.
            if let Some(reason) = reason
                && current.drift.is_none()
            {
                sqlx::query!(
                    "UPDATE node_resource_slots SET drift = $2, drift_generation = $3 WHERE id = $1",
                    current.id as SlotId,
                    reason,
                    generation
                )
                .execute(&mut *tx)
                .await?;
                drifted.push(json!({ "slot": current.slot_index, "drift": reason }));
            }
        }
        let name = self.naming().node(&agent.region, agent.id)?;
        audit::record(
            &mut *tx,
            AuditEntry {
                actor: Actor::Agent,
                action: "node.discovery.record",
                resource: &name,
                before: None,
                after: Some(json!({
                    "generation": generation,
                    "proposed_slots": discovery.proposed_slots.len(),
                    "warnings": discovery.warnings,
                })),
                request_id: None,
            },
        )
        .await?;
        if !drifted.is_empty() {
            audit::record(
                &mut *tx,
                AuditEntry {
                    actor: Actor::Agent,
                    action: "node.drift.detect",
                    resource: &name,
                    before: None,
                    after: Some(json!({ "generation": generation, "slots": drifted })),
                    request_id: None,
                },
            )
            .await?;
        }
        Ok(generation)
    }
}

/// What an agent says for people, kept to `max` characters with control characters dropped:
/// a driver's odd message never costs the node its heartbeat.
fn printable(s: &str, max: usize) -> String {
    s.chars().filter(|c| !c.is_control()).take(max).collect()
}
