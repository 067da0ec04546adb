//! The storage worker's side: claiming the next backend step, recording its outcome (which
//! moves the volume on), and the host's side: which volumes a running VM is to have plugged in,
//! and what its agent reported plugged.

use serde_json::json;
use sqlx::PgConnection;

use agent_protocol::VolumeTarget;
use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{AllocationId, NodeId, SnapshotId, VolumeId};

use crate::allocations::lifecycle::queue_now;
use crate::allocations::lifecycle::volumes::queue_job;

/// A backend step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    Create,
    Grow,
    Export,
    Withdraw,
    Erase,
    /// Take [`VolumeJob::snapshot`] of the volume.
    Snapshot,
    /// Erase [`VolumeJob::snapshot`].
    EraseSnapshot,
}

impl JobKind {
    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "create" => JobKind::Create,
            "grow" => JobKind::Grow,
            "export" => JobKind::Export,
            "withdraw" => JobKind::Withdraw,
            "erase" => JobKind::Erase,
            "snapshot" => JobKind::Snapshot,
            "erase_snapshot" => JobKind::EraseSnapshot,
            other => return Err(Error::Corrupt(format!("volume job kind {other}"))),
        })
    }
}

/// One claimed step: the worker holds it for [`JOB_LEASE`], then another may take it.
#[derive(Clone, Debug)]
pub struct VolumeJob {
    pub id: i64,
    pub volume: VolumeId,
    pub kind: JobKind,
    pub key: storage::VolumeKey,
    /// The size the volume is to have.
    pub size: storage::Gib,
    /// Tries so far, this one included.
    pub attempts: i32,
    /// The snapshot a snapshot step takes or erases.
    pub snapshot: Option<(SnapshotId, storage::SnapshotKey)>,
    /// What a volume made from a snapshot is made from: the snapshot's volume, and it.
    pub source: Option<(storage::VolumeKey, storage::SnapshotKey)>,
    /// The volume is a stopped instance's root disk.
    pub root: bool,
}

/// How long a claimed job is the claimer's before another worker may take it.
pub const JOB_LEASE: time::Duration = time::Duration::minutes(2);

/// What the backend did with a job.
#[derive(Clone, Debug)]
pub enum Outcome {
    Done,
    Exported(VolumeTarget),
    Erased {
        backend: String,
        erasure: storage::Erasure,
    },
    /// It may work later (the backend was unreachable, say): tried again with backoff.
    Retry(String),
    /// It cannot work as asked: the volume records why.
    Failed(String),
}

/// The exact words an erasure record seals: one line per fact, in order.
pub fn erasure_record(
    volume: VolumeId,
    backend: &str,
    method: &str,
    bytes: u64,
    at: time::OffsetDateTime,
) -> String {
    format!(
        "gpuaas-volume-erasure/v1\nvolume {volume}\nbackend {backend}\nmethod {method}\nbytes_overwritten {bytes}\nerased_at {}\n",
        at.unix_timestamp()
    )
}

#[allow(async_fn_in_trait)]
pub trait VolumeJobs {
    /// The oldest due step of any volume whose earlier steps are done, held for
    /// [`JOB_LEASE`]; none when nothing is due.
    async fn claim_volume_job(&self) -> Result<Option<VolumeJob>>;

    /// The volumes an instance has (attaching, in use or detaching, or a stopped one's root
    /// disk) that the backend served: what a restarted storage daemon must serve again.
    async fn served_volumes(&self) -> Result<Vec<storage::VolumeKey>>;

    /// Records what the backend did and moves the volume on. A job finished already is
    /// left alone, so a worker that lost its lease can't undo another's outcome.
    async fn finish_volume_job(&self, job: &VolumeJob, outcome: Outcome) -> Result<()>;
}

impl VolumeJobs for ControlPlane {
    async fn claim_volume_job(&self) -> Result<Option<VolumeJob>> {
        let row = sqlx::query!(
            r#"UPDATE volume_jobs j SET available_at = now() + $1::interval,
                      attempts = attempts + 1
               FROM volumes v
               WHERE j.id = (SELECT id FROM volume_jobs p
                             WHERE p.done_at IS NULL AND p.available_at <= now()
                               AND NOT EXISTS (SELECT 1 FROM volume_jobs e
                                               WHERE e.volume_id = p.volume_id
                                                 AND e.done_at IS NULL AND e.id < p.id)
                             ORDER BY p.available_at, p.id
                             FOR UPDATE SKIP LOCKED LIMIT 1)
                 AND v.id = j.volume_id
               RETURNING j.id, j.volume_id AS "volume: VolumeId", j.kind, j.attempts,
                         v.size_gib, j.snapshot_id AS "snapshot?: SnapshotId",
                         v.source_snapshot AS "source_snapshot?: SnapshotId",
                         (SELECT s.volume_id FROM volume_snapshots s WHERE s.id = v.source_snapshot)
                             AS "source_volume?: VolumeId",
                         v.root_of IS NOT NULL AS "root!""#,
            sqlx::postgres::types::PgInterval::try_from(JOB_LEASE)
                .map_err(|e| Error::Corrupt(e.to_string()))?
        )
        .fetch_optional(self.pool())
        .await?;
        let Some(r) = row else { return Ok(None) };
        let key = storage::VolumeKey::of(r.volume.0);
        let source = match (r.source_volume, r.source_snapshot) {
            (Some(v), Some(s)) => {
                let from = storage::VolumeKey::of(v.0);
                let snap = from.snapshot(s.0);
                Some((from, snap))
            }
            _ => None,
        };
        Ok(Some(VolumeJob {
            id: r.id,
            kind: JobKind::parse(&r.kind)?,
            snapshot: r.snapshot.map(|s| (s, key.snapshot(s.0))),
            source,
            key,
            size: storage::Gib::new(r.size_gib as u32).map_err(Error::Corrupt)?,
            volume: r.volume,
            attempts: r.attempts,
            root: r.root,
        }))
    }

    async fn served_volumes(&self) -> Result<Vec<storage::VolumeKey>> {
        Ok(sqlx::query_scalar!(
            r#"SELECT id AS "id: VolumeId" FROM volumes
               WHERE (state IN ('attaching', 'in_use', 'detaching')
                      OR (root_of IS NOT NULL AND state = 'available'))
                 AND target IS NOT NULL"#
        )
        .fetch_all(self.pool())
        .await?
        .into_iter()
        .map(|id| storage::VolumeKey::of(id.0))
        .collect())
    }

    #[tracing::instrument(skip_all, fields(volume.id = %job.volume, job.kind = ?job.kind))]
    async fn finish_volume_job(&self, job: &VolumeJob, outcome: Outcome) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let v = sqlx::query!(
            r#"SELECT v.state, v.attached_to AS "attached_to: AllocationId",
                      a.state AS "instance_state?"
               FROM volumes v LEFT JOIN allocations a ON a.id = v.attached_to
               WHERE v.id = $1 FOR NO KEY UPDATE OF v"#,
            job.volume as VolumeId
        )
        .fetch_one(&mut *tx)
        .await?;
        let open = sqlx::query_scalar!(
            "SELECT done_at IS NULL AS \"open!\" FROM volume_jobs WHERE id = $1 FOR UPDATE",
            job.id
        )
        .fetch_one(&mut *tx)
        .await?;
        if !open {
            return Ok(());
        }
        let mut node = None;
        match outcome {
            Outcome::Retry(reason) => {
                // 2 s, 4 s, 8 s … at most 5 minutes between tries.
                let backoff = 2i64
                    .saturating_pow(job.attempts.clamp(1, 8) as u32)
                    .min(300);
                sqlx::query!(
                    "UPDATE volume_jobs SET last_error = left($2, 2000),
                            available_at = now() + make_interval(secs => $3)
                     WHERE id = $1",
                    job.id,
                    reason,
                    backoff as f64
                )
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                return Ok(());
            }
            Outcome::Failed(reason) => {
                failed(&mut tx, job, &v.state, &reason).await?;
                if job.root && matches!(job.kind, JobKind::Create | JobKind::Export) {
                    crate::allocations::stop_start::root_failed(&mut tx, job.volume, &reason)
                        .await?;
                }
            }
            Outcome::Done | Outcome::Exported(_) | Outcome::Erased { .. } => {
                node = succeeded(
                    self,
                    &mut tx,
                    job,
                    &v.state,
                    v.attached_to,
                    v.instance_state.as_deref(),
                    outcome,
                )
                .await?;
            }
        }
        sqlx::query!(
            "UPDATE volume_jobs SET done_at = now() WHERE id = $1",
            job.id
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        if let Some(node) = node {
            self.wakeups().task_queued(node);
        }
        Ok(())
    }
}

/// A step that cannot work: a volume being made, attached, detached or deleted records why;
/// so does a snapshot being taken or erased (its volume is untouched).
async fn failed(conn: &mut PgConnection, job: &VolumeJob, state: &str, reason: &str) -> Result<()> {
    let reason = format!("{:?} failed: {reason}", job.kind).to_lowercase();
    sqlx::query!(
        "UPDATE volume_jobs SET last_error = left($2, 2000) WHERE id = $1",
        job.id,
        reason
    )
    .execute(&mut *conn)
    .await?;
    if let Some((snapshot, _)) = &job.snapshot {
        sqlx::query!(
            "UPDATE volume_snapshots SET state = 'error', error_reason = left($2, 2000)
             WHERE id = $1 AND state IN ('creating', 'deleting')",
            *snapshot as SnapshotId,
            reason
        )
        .execute(&mut *conn)
        .await?;
        return Ok(());
    }
    if matches!(state, "creating" | "attaching" | "detaching" | "deleting") {
        sqlx::query!(
            "UPDATE volumes SET state = 'error', error_reason = left($2, 2000),
                    attached_to = NULL
             WHERE id = $1",
            job.volume as VolumeId,
            reason
        )
        .execute(&mut *conn)
        .await?;
        if state != "creating" && state != "deleting" {
            // Nothing should reach a volume whose attachment failed.
            queue_job(conn, job.volume, "withdraw").await?;
        }
    }
    Ok(())
}

async fn succeeded(
    cp: &ControlPlane,
    conn: &mut PgConnection,
    job: &VolumeJob,
    state: &str,
    attached_to: Option<AllocationId>,
    instance_state: Option<&str>,
    outcome: Outcome,
) -> Result<Option<NodeId>> {
    let id = job.volume;
    match (job.kind, outcome) {
        (JobKind::Create, _) => {
            sqlx::query!(
                "UPDATE volumes SET backend_size_gib = $2,
                        state = CASE state WHEN 'creating' THEN 'available' ELSE state END
                 WHERE id = $1",
                id as VolumeId,
                job.size.get() as i32
            )
            .execute(&mut *conn)
            .await?;
        }
        (JobKind::Grow, _) => {
            sqlx::query!(
                "UPDATE volumes SET backend_size_gib = greatest(backend_size_gib, $2) WHERE id = $1",
                id as VolumeId,
                job.size.get() as i32
            )
            .execute(&mut *conn)
            .await?;
        }
        (JobKind::Export, Outcome::Exported(target)) => {
            sqlx::query!(
                "UPDATE volumes SET target = $2 WHERE id = $1",
                id as VolumeId,
                serde_json::to_value(&target).expect("a target serializes")
            )
            .execute(&mut *conn)
            .await?;
            // A stopped instance's root disk: the run waiting for it is released into it.
            if job.root {
                return crate::allocations::stop_start::root_served(conn, id).await;
            }
            // Served now: the host plugs it in once the instance runs (or at once if it does).
            if state == "attaching"
                && let Some(alloc) = attached_to
                && instance_state == Some("running")
            {
                return queue_now(conn, "allocation.volumes_update", alloc).await;
            }
        }
        (JobKind::Withdraw, _) => {
            sqlx::query!(
                "UPDATE volumes SET target = NULL,
                        state = CASE state WHEN 'detaching' THEN 'available' ELSE state END,
                        attached_to = CASE state WHEN 'detaching' THEN NULL ELSE attached_to END
                 WHERE id = $1",
                id as VolumeId
            )
            .execute(&mut *conn)
            .await?;
        }
        (JobKind::Erase, Outcome::Erased { backend, erasure }) => {
            let at = time::OffsetDateTime::now_utc();
            let record =
                erasure_record(id, &backend, &erasure.method, erasure.bytes_overwritten, at);
            let seal = cp
                .secrets()
                .seal(&record, &format!("volume_erasures:seal:{id}"));
            sqlx::query!(
                "INSERT INTO volume_erasures (volume_id, backend, method, bytes_overwritten,
                                              erased_at, seal)
                 VALUES ($1, left($2, 500), left($3, 500), $4, $5, $6)
                 ON CONFLICT (volume_id) DO NOTHING",
                id as VolumeId,
                backend,
                erasure.method,
                erasure.bytes_overwritten as i64,
                at,
                seal
            )
            .execute(&mut *conn)
            .await?;
            sqlx::query!(
                "UPDATE volumes SET state = 'deleted', deleted_at = now(), target = NULL
                 WHERE id = $1 AND state = 'deleting'",
                id as VolumeId
            )
            .execute(&mut *conn)
            .await?;
            let resource = volume_name(cp, conn, id).await?;
            audit::record(
                conn,
                AuditEntry {
                    actor: Actor::System,
                    action: "volume.erase",
                    resource: &resource,
                    before: Some(json!({"state": "deleting"})),
                    after: Some(
                        json!({"state": "deleted", "bytes_overwritten": erasure.bytes_overwritten}),
                    ),
                    request_id: None,
                },
            )
            .await?;
        }
        (JobKind::Snapshot, _) => {
            if let Some((snapshot, _)) = &job.snapshot {
                sqlx::query!(
                    "UPDATE volume_snapshots SET state = 'available'
                     WHERE id = $1 AND state = 'creating'",
                    *snapshot as SnapshotId
                )
                .execute(&mut *conn)
                .await?;
            }
        }
        (JobKind::EraseSnapshot, Outcome::Erased { erasure, .. }) => {
            if let Some((snapshot, _)) = &job.snapshot {
                let r = sqlx::query!(
                    r#"UPDATE volume_snapshots SET state = 'deleted', deleted_at = now()
                       WHERE id = $1 AND state = 'deleting'
                       RETURNING tenant_id AS "tenant: cp_base::ids::TenantId",
                                 project_id AS "project: cp_base::ids::ProjectId", region"#,
                    *snapshot as SnapshotId
                )
                .fetch_optional(&mut *conn)
                .await?;
                if let Some(r) = r {
                    let resource = cp
                        .naming()
                        .snapshot(&r.region, r.tenant, r.project, *snapshot)?;
                    audit::record(
                        conn,
                        AuditEntry {
                            actor: Actor::System,
                            action: "snapshot.erase",
                            resource: &resource,
                            before: Some(json!({"state": "deleting"})),
                            after: Some(json!({
                                "state": "deleted",
                                "method": erasure.method,
                                "bytes_overwritten": erasure.bytes_overwritten,
                            })),
                            request_id: None,
                        },
                    )
                    .await?;
                }
            }
        }
        (kind, outcome) => {
            return Err(Error::Corrupt(format!(
                "a {kind:?} job cannot end with {outcome:?}"
            )));
        }
    }
    Ok(None)
}

async fn volume_name(
    cp: &ControlPlane,
    conn: &mut PgConnection,
    id: VolumeId,
) -> Result<cp_base::ResourceName> {
    let r = sqlx::query!(
        r#"SELECT tenant_id AS "tenant: cp_base::ids::TenantId",
                  project_id AS "project: cp_base::ids::ProjectId", region
           FROM volumes WHERE id = $1"#,
        id as VolumeId
    )
    .fetch_one(conn)
    .await?;
    Ok(cp.naming().volume(&r.region, r.tenant, r.project, id)?)
}
