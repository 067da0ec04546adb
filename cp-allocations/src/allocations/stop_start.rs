//! Stop and start (docs/decisions/2026-12-06-stop-and-start.md): an instance is a sequence of
//! runs, each an allocation. Its id is its first run's; exactly one run is current.
//!
//! - **Stop**: a root volume of the boot disk's size is made for the instance; once the storage
//!   backend serves it ([`root_served`]), the run is released with the copy in its plan, and
//!   the instance reads `stopping`, then `stopped` once the run is cleaned.
//! - **Start**: a new run, placed and provisioned as a launch is ([`super::launch_once`] with a
//!   [`Resume`]), whose host restores the boot disk from the root volume; once it runs, the
//!   root volume is erased ([`restored`]). A start that never runs leaves the instance stopped
//!   on the same disk (the `allocations_stop_and_start_end` trigger).
//! - **Release** of a stopped instance erases its root volume ([`release_stopped`]).

use serde_json::json;
use sqlx::PgConnection;

use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{AllocationId, NodeId, ProjectId, TenantId, UserId, VolumeId};
use cp_identity::tenancy::{Project, ProjectOperators};

use super::lifecycle::{self, volumes::queue_job};
use super::{LaunchRequest, Launched};

/// The largest root disk a stop saves, in GiB (a volume's limit).
const MAX_ROOT_GIB: i64 = 16384;

/// What the tenant sees of a run that ends in a stop: `stopping` until its release is
/// done, then `stopped`. `None`: the run's own state stands.
pub fn instance_state(run_state: &str, stops: bool) -> Option<&'static str> {
    match (stops, run_state) {
        (false, _) => None,
        (true, "released") => Some("stopped"),
        (true, _) => Some("stopping"),
    }
}

/// The root volume a boot disk of `bytes` is saved into: whole GiB, rounded up.
pub(crate) fn root_disk_gib(bytes: i64) -> i64 {
    (bytes + (1 << 30) - 1) >> 30
}

/// The current run of instance `id` in `project`: the instance itself until it was first
/// started again. An id of another project is not found.
pub(crate) async fn current_run(
    conn: &mut PgConnection,
    project: ProjectId,
    id: AllocationId,
) -> Result<AllocationId> {
    current_run_and_stopped(conn, project, id)
        .await
        .map(|(run, _)| run)
}

/// [`current_run`], and whether the instance is stopped (its run released into a saved disk).
pub(crate) async fn current_run_and_stopped(
    conn: &mut PgConnection,
    project: ProjectId,
    id: AllocationId,
) -> Result<(AllocationId, bool)> {
    let r = sqlx::query!(
        r#"SELECT id AS "id: AllocationId",
                  state = 'released' AND stop_root_volume IS NOT NULL AS "stopped!"
           FROM allocations
           WHERE (id = $1 OR instance_id = $1) AND superseded_by IS NULL AND project_id = $2"#,
        id as AllocationId,
        project as ProjectId
    )
    .fetch_optional(conn)
    .await?
    .ok_or(Error::NotFound { what: "allocation" })?;
    Ok((r.id, r.stopped))
}

/// A run, locked, with what a stop or start reads of it.
struct Run {
    id: AllocationId,
    instance: AllocationId,
    name: String,
    region: String,
    state: String,
    desired_state: String,
    in_cluster: bool,
    stop_root_volume: Option<VolumeId>,
    restore_from: Option<VolumeId>,
    boot_disk_bytes: Option<i64>,
}

async fn lock_current(
    conn: &mut PgConnection,
    project: ProjectId,
    instance: AllocationId,
) -> Result<Run> {
    let r = sqlx::query!(
        r#"SELECT a.id AS "id: AllocationId", a.name, a.region, a.state, a.desired_state,
                  a.cluster_id IS NOT NULL AS "in_cluster!",
                  a.stop_root_volume AS "stop_root_volume: VolumeId",
                  a.restore_from AS "restore_from: VolumeId",
                  coalesce(a.instance_id, a.id) AS "instance!: AllocationId",
                  (SELECT s.nvme_size_bytes FROM resource_claims c
                     JOIN node_resource_slots s
                       ON s.id = c.slot_id OR (c.kind = 'baremetal' AND s.node_id = c.node_id)
                   WHERE c.allocation_id = a.id
                   ORDER BY s.slot_index LIMIT 1) AS boot_disk_bytes
           FROM allocations a
           WHERE (a.id = $1 OR a.instance_id = $1) AND a.superseded_by IS NULL
             AND a.project_id = $2
           FOR NO KEY UPDATE OF a"#,
        instance as AllocationId,
        project as ProjectId
    )
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(Error::NotFound { what: "allocation" })?;
    Ok(Run {
        id: r.id,
        instance: r.instance,
        name: r.name,
        region: r.region,
        state: r.state,
        desired_state: r.desired_state,
        in_cluster: r.in_cluster,
        stop_root_volume: r.stop_root_volume,
        restore_from: r.restore_from,
        boot_disk_bytes: r.boot_disk_bytes,
    })
}

/// Stops instance `id`: makes its root volume and marks its run to be released into it once
/// the storage backend serves it. Idempotent: a stopping or stopped instance changes nothing.
pub(crate) async fn stop(
    cp: &ControlPlane,
    who: &Project<ProjectOperators>,
    id: AllocationId,
    request_id: Option<&str>,
) -> Result<()> {
    let mut tx = cp.pool().begin().await?;
    let run = lock_current(&mut tx, who.id(), id).await?;
    if run.stop_root_volume.is_some() {
        return Ok(());
    }
    if run.in_cluster {
        return Err(Error::Conflict(format!(
            "{} is a member of a cluster; a cluster's members are released together, not stopped one by one",
            run.name
        )));
    }
    if run.state != "running" || run.desired_state != "running" {
        let now = super::projected(&run.state, &run.desired_state, None);
        return Err(Error::Conflict(format!(
            "only a running instance can be stopped; {} is {now}",
            run.name
        )));
    }
    let bytes = run
        .boot_disk_bytes
        .ok_or_else(|| Error::Corrupt(format!("running allocation {} holds no slot", run.id)))?;
    let gib = root_disk_gib(bytes);
    if !(1..=MAX_ROOT_GIB).contains(&gib) {
        return Err(Error::Conflict(format!(
            "{}'s boot disk holds {gib} GiB; a stop keeps at most {MAX_ROOT_GIB} GiB",
            run.name
        )));
    }
    let price = cp_billing::internal::storage_price_in(&mut tx, &run.region)
        .await?
        .ok_or_else(|| {
            Error::Conflict(format!(
                "instances in {} can't be stopped yet: a stopped instance keeps its disk as storage, \
                 and storage there has no price",
                run.region
            ))
        })?;
    let volume = VolumeId::new_random();
    sqlx::query!(
        "INSERT INTO volumes (id, tenant_id, project_id, region, name, size_gib, idempotency_key,
                              request_fingerprint, created_by, price_per_gib_month_micro,
                              currency, root_of)
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'root disk', $8, $9, $10, $11)",
        volume as VolumeId,
        who.tenant() as TenantId,
        who.id() as ProjectId,
        run.region,
        run.name,
        gib as i32,
        format!("stop-{}", run.id),
        who.user() as UserId,
        price.per_gib_month_micro,
        price.currency.as_str(),
        run.instance as AllocationId,
    )
    .execute(&mut *tx)
    .await?;
    queue_job(&mut tx, volume, "create").await?;
    queue_job(&mut tx, volume, "export").await?;
    sqlx::query!(
        "UPDATE allocations SET stop_root_volume = $2 WHERE id = $1",
        run.id as AllocationId,
        volume as VolumeId
    )
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        AuditEntry {
            actor: Actor::User(who.user()),
            action: "instance.stop",
            resource: &cp
                .naming()
                .allocation(&run.region, who.tenant(), who.id(), run.instance)?,
            before: Some(json!({"state": "running"})),
            after: Some(json!({"state": "stopping", "root_disk_gib": gib, "run": run.id})),
            request_id,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// How a start writes its run: the instance it continues, the run before, and the root
/// volume its boot disk comes from.
pub(crate) struct Resume {
    pub instance: AllocationId,
    pub previous: AllocationId,
    pub root: VolumeId,
}

impl Resume {
    /// Makes the new run `run` the instance's current one, in the launch's transaction, if
    /// the run before is still the stopped current one.
    pub(crate) async fn continue_with(
        &self,
        conn: &mut PgConnection,
        run: AllocationId,
    ) -> Result<()> {
        let superseded = sqlx::query!(
            "UPDATE allocations SET superseded_by = $2
             WHERE id = $1 AND superseded_by IS NULL AND state = 'released'
               AND stop_root_volume = $3",
            self.previous as AllocationId,
            run as AllocationId,
            self.root as VolumeId
        )
        .execute(&mut *conn)
        .await?
        .rows_affected();
        if superseded != 1 {
            return Err(Error::Conflict(
                "the instance changed while it was being started; reload it".into(),
            ));
        }
        sqlx::query!(
            "UPDATE allocations SET instance_id = $2, restore_from = $3 WHERE id = $1",
            run as AllocationId,
            self.instance as AllocationId,
            self.root as VolumeId
        )
        .execute(&mut *conn)
        .await?;
        self.carry_volumes(conn, run).await
    }

    /// The volumes the stopped run kept move to the new run, by the state machine's own steps
    /// (detaching, available, attaching: no move skips the guard), still served by the
    /// backend; the new run's host plugs them in once it runs.
    async fn carry_volumes(&self, conn: &mut PgConnection, run: AllocationId) -> Result<()> {
        let kept: Vec<uuid::Uuid> = sqlx::query_scalar!(
            r#"UPDATE volumes SET state = 'detaching'
               WHERE attached_to = $1 AND state IN ('attaching', 'in_use')
               RETURNING id AS "id!""#,
            self.previous as AllocationId
        )
        .fetch_all(&mut *conn)
        .await?;
        if kept.is_empty() {
            return Ok(());
        }
        sqlx::query!(
            "UPDATE volumes SET state = 'available', attached_to = NULL WHERE id = ANY($1)",
            &kept
        )
        .execute(&mut *conn)
        .await?;
        sqlx::query!(
            "UPDATE volumes SET state = 'attaching', attached_to = $2 WHERE id = ANY($1)",
            &kept,
            run as AllocationId
        )
        .execute(&mut *conn)
        .await
        .map_err(cp_base::db::trigger_refusal)?;
        Ok(())
    }
}

/// Starts stopped instance `id`: a new run of the same SKU, image, name, keys, tags and ports
/// in its region, placed as a launch is (so quota, budget and capacity may refuse it; then it
/// stays stopped). Idempotent: starting one that is starting or running changes nothing.
pub(crate) async fn start(
    cp: &ControlPlane,
    who: &Project<ProjectOperators>,
    id: AllocationId,
    request_id: Option<&str>,
) -> Result<Launched> {
    let mut conn = cp.pool().acquire().await?;
    let run = lock_current(&mut conn, who.id(), id).await?;
    let Some(root) = run.stop_root_volume else {
        if run.restore_from.is_some() && run.state != "released" {
            return Ok(Launched {
                id: run.instance,
                created: false,
            });
        }
        let now = super::projected(&run.state, &run.desired_state, None);
        return Err(Error::Conflict(format!(
            "only a stopped instance can be started; {} is {now}",
            run.name
        )));
    };
    if run.state != "released" {
        return Err(Error::Conflict(format!(
            "{} is still stopping: its disk is being saved; start it once it is stopped",
            run.name
        )));
    }
    let r = sqlx::query!(
        r#"SELECT s.name AS sku, l.slug, v.version, a.ssh_public_key, a.tags,
                  a.published_ports AS "published_ports: Vec<Option<i32>>",
                  (SELECT target IS NOT NULL AND state = 'available' FROM volumes
                   WHERE id = $2) AS "root_ready!"
           FROM allocations a JOIN skus s ON s.id = a.sku_id
                JOIN listing_versions v ON v.id = a.listing_version_id
                JOIN listings l ON l.id = v.listing_id
           WHERE a.id = $1"#,
        run.id as AllocationId,
        root as VolumeId
    )
    .fetch_one(&mut *conn)
    .await?;
    if !r.root_ready {
        return Err(Error::Conflict(format!(
            "{}'s saved disk is not being served by the storage backend yet; try again shortly",
            run.name
        )));
    }
    drop(conn);
    let req = LaunchRequest {
        sku: r.sku,
        region: run.region.clone(),
        listing: r.slug,
        version: r.version,
        ssh_public_key: r.ssh_public_key,
        name: run.name.clone(),
        idempotency_key: format!("start-{}", run.id),
        lifetime_hours: None,
        published_ports: r
            .published_ports
            .iter()
            .flatten()
            .filter_map(|&p| u16::try_from(p).ok())
            .collect(),
        tags: serde_json::from_value(r.tags).unwrap_or_default(),
        user_data: None,
        volumes: Vec::new(),
    };
    let resume = Resume {
        instance: run.instance,
        previous: run.id,
        root,
    };
    let started = super::launch_once(cp, who, &req, Some(&resume), request_id).await?;
    Ok(Launched {
        id: run.instance,
        created: started.created,
    })
}

/// The start's audit record, in the launch's transaction.
pub(crate) async fn record_start(
    cp: &ControlPlane,
    conn: &mut PgConnection,
    who: &Project<ProjectOperators>,
    region: &str,
    resume: &Resume,
    run: AllocationId,
    request_id: Option<&str>,
) -> Result<()> {
    audit::record(
        conn,
        AuditEntry {
            actor: Actor::User(who.user()),
            action: "instance.start",
            resource: &cp
                .naming()
                .allocation(region, who.tenant(), who.id(), resume.instance)?,
            before: Some(json!({"state": "stopped", "run": resume.previous})),
            after: Some(json!({"state": "placed", "run": run, "root_volume": resume.root})),
            request_id,
        },
    )
    .await?;
    Ok(())
}

/// Releasing a stopped instance: its root volume is erased, and it reads `released`. Returns
/// whether `run` was a stopped instance's run (otherwise the ordinary release applies).
pub(crate) async fn release_stopped(
    cp: &ControlPlane,
    conn: &mut PgConnection,
    who: &Project<ProjectOperators>,
    run: AllocationId,
    request_id: Option<&str>,
) -> Result<bool> {
    let r = sqlx::query!(
        r#"SELECT a.stop_root_volume AS "root!: VolumeId", a.name, a.region,
                  coalesce(a.instance_id, a.id) AS "instance!: AllocationId"
           FROM allocations a
           WHERE a.id = $1 AND a.state = 'released' AND a.stop_root_volume IS NOT NULL
           FOR NO KEY UPDATE"#,
        run as AllocationId
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(r) = r else { return Ok(false) };
    erase_root(conn, r.root).await?;
    // The volumes it kept are detached now, as a release detaches them.
    let kept = sqlx::query_scalar!(
        r#"UPDATE volumes SET state = 'detaching'
           WHERE attached_to = $1 AND state IN ('attaching', 'in_use')
           RETURNING id AS "id: VolumeId""#,
        run as AllocationId
    )
    .fetch_all(&mut *conn)
    .await?;
    for v in kept {
        queue_job(conn, v, "withdraw").await?;
    }
    sqlx::query!(
        "UPDATE allocations SET stop_root_volume = NULL WHERE id = $1",
        run as AllocationId
    )
    .execute(&mut *conn)
    .await?;
    audit::record(
        conn,
        AuditEntry {
            actor: Actor::User(who.user()),
            action: "allocation.release",
            resource: &cp
                .naming()
                .allocation(&r.region, who.tenant(), who.id(), r.instance)?,
            before: Some(json!({"state": "stopped", "root_volume": r.root})),
            after: Some(json!({"state": "released"})),
            request_id,
        },
    )
    .await?;
    Ok(true)
}

/// A root volume goes: erased on the backend (which withdraws it first), then deleted.
async fn erase_root(conn: &mut PgConnection, volume: VolumeId) -> Result<()> {
    let moved = sqlx::query!(
        "UPDATE volumes SET state = 'deleting', error_reason = NULL
         WHERE id = $1 AND root_of IS NOT NULL AND state IN ('available', 'error')",
        volume as VolumeId
    )
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if moved == 1 {
        queue_job(conn, volume, "erase").await?;
    }
    Ok(())
}

/// The storage backend serves root volume `volume`: the run waiting to be stopped into it is
/// released now, with the copy in its plan. Returns the node to wake.
pub(crate) async fn root_served(
    conn: &mut PgConnection,
    volume: VolumeId,
) -> Result<Option<NodeId>> {
    let waiting = sqlx::query_scalar!(
        r#"SELECT id AS "id: AllocationId" FROM allocations
           WHERE stop_root_volume = $1 AND state = 'running' AND desired_state = 'running'
           FOR NO KEY UPDATE"#,
        volume as VolumeId
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(run) = waiting else {
        // Nothing waits for it (its run was released another way before it was served):
        // it never held a disk.
        let orphan = sqlx::query_scalar!(
            r#"SELECT NOT EXISTS (SELECT 1 FROM allocations
                                  WHERE stop_root_volume = $1 OR restore_from = $1) AS "o!""#,
            volume as VolumeId
        )
        .fetch_one(&mut *conn)
        .await?;
        if orphan {
            erase_root(conn, volume).await?;
        }
        return Ok(None);
    };
    lifecycle::begin_release(&mut *conn, run, None).await?;
    lifecycle::queue_now(conn, "allocation.release", run).await
}

/// A backend step for root volume `volume` failed: a run waiting to be stopped into it keeps
/// running (its stop failed, and says why in the audit log), and the volume is erased.
pub(crate) async fn root_failed(
    conn: &mut PgConnection,
    volume: VolumeId,
    reason: &str,
) -> Result<()> {
    let runs = sqlx::query_scalar!(
        r#"UPDATE allocations SET stop_root_volume = NULL
           WHERE stop_root_volume = $1 AND state = 'running'
           RETURNING id AS "id: AllocationId""#,
        volume as VolumeId
    )
    .fetch_all(&mut *conn)
    .await?;
    for run in runs {
        tracing::warn!(allocation.id = %run, volume.id = %volume, error.cause = reason,
                       "a stop failed: its root disk could not be made; the instance keeps running");
    }
    let unused = sqlx::query_scalar!(
        r#"SELECT NOT EXISTS (SELECT 1 FROM allocations
                              WHERE stop_root_volume = $1 OR (restore_from = $1 AND state <> 'released'))
           AS "u!""#,
        volume as VolumeId
    )
    .fetch_one(&mut *conn)
    .await?;
    if unused {
        erase_root(conn, volume).await?;
    }
    Ok(())
}

/// A started run is running on its restored disk: the root volume it came from is erased
/// (the boot disk is on the host again, billed with the run).
pub(crate) async fn restored(conn: &mut PgConnection, run: AllocationId) -> Result<()> {
    let root = sqlx::query_scalar!(
        r#"SELECT restore_from AS "root: VolumeId" FROM allocations
           WHERE id = $1 AND state = 'running'"#,
        run as AllocationId
    )
    .fetch_optional(&mut *conn)
    .await?
    .flatten();
    if let Some(root) = root {
        erase_root(conn, root).await?;
    }
    Ok(())
}
