//! An allocation's volumes on its host: which a running VM is to have plugged in (the volumes
//! update task's plan), what its agent reported plugged, and the storage steps that follow.
//! The volumes themselves (their state machine and the storage worker's side) are
//! `crate::volumes`, which queues its steps through [`queue_job`].

use sqlx::PgConnection;

use agent_protocol::VolumeDisk;
use cp_base::error::{Error, Result};
use cp_base::ids::{AllocationId, NodeId, VolumeId};

use super::{queue_later, queue_now};

/// Queues one backend step for the storage worker, in the caller's transaction.
pub(crate) async fn queue_job(conn: &mut PgConnection, id: VolumeId, kind: &str) -> Result<()> {
    sqlx::query!(
        "INSERT INTO volume_jobs (volume_id, kind) VALUES ($1, $2)",
        id as VolumeId,
        kind
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// After a volume moved to `detaching`: a running instance's host unplugs it first (then it
/// is withdrawn, [`plugged`]); one attached to anything else is withdrawn now.
pub(crate) async fn unplug(
    conn: &mut PgConnection,
    id: VolumeId,
    attached_to: Option<AllocationId>,
) -> Result<Option<NodeId>> {
    if let Some(alloc) = attached_to {
        let running = sqlx::query_scalar!(
            "SELECT state = 'running' AS \"running!\" FROM allocations WHERE id = $1",
            alloc as AllocationId
        )
        .fetch_one(&mut *conn)
        .await?;
        if running {
            return queue_now(conn, "allocation.volumes_update", alloc).await;
        }
    }
    queue_job(conn, id, "withdraw").await?;
    Ok(None)
}

/// What a running allocation's VM is to have plugged in: its volumes attaching or in use that
/// the backend serves.
pub(crate) async fn volumes_plan(
    conn: &mut PgConnection,
    alloc: AllocationId,
) -> Result<Vec<VolumeDisk>> {
    let rows = sqlx::query!(
        r#"SELECT id AS "id: VolumeId", target AS "target!" FROM volumes
           WHERE attached_to = $1 AND state IN ('attaching', 'in_use') AND target IS NOT NULL
           ORDER BY created_at, id"#,
        alloc as AllocationId
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(VolumeDisk {
                volume_id: r.id.to_string(),
                serial: r.id.0.simple().to_string()[..20].to_string(),
                target: serde_json::from_value(r.target)
                    .map_err(|e| Error::Corrupt(format!("volume target: {e}")))?,
            })
        })
        .collect()
}

/// What the host reported plugged in after a volumes update: those attaching become in use;
/// those detaching that it unplugged are withdrawn.
pub(crate) async fn plugged(
    conn: &mut PgConnection,
    alloc: AllocationId,
    attached: &[String],
) -> Result<()> {
    let attached: Vec<uuid::Uuid> = attached.iter().filter_map(|a| a.parse().ok()).collect();
    sqlx::query!(
        "UPDATE volumes SET state = 'in_use'
         WHERE attached_to = $1 AND state = 'attaching' AND id = ANY ($2)",
        alloc as AllocationId,
        &attached
    )
    .execute(&mut *conn)
    .await?;
    let unplugged = sqlx::query_scalar!(
        r#"SELECT id AS "id: VolumeId" FROM volumes v
           WHERE attached_to = $1 AND state = 'detaching' AND NOT (id = ANY ($2))
             AND NOT EXISTS (SELECT 1 FROM volume_jobs j
                             WHERE j.volume_id = v.id AND j.kind = 'withdraw' AND j.done_at IS NULL)"#,
        alloc as AllocationId,
        &attached
    )
    .fetch_all(&mut *conn)
    .await?;
    for id in unplugged {
        queue_job(conn, id, "withdraw").await?;
    }
    Ok(())
}

/// A volumes update the host could not do: the volumes it was to plug in record why.
pub(crate) async fn plug_failed(
    conn: &mut PgConnection,
    alloc: AllocationId,
    reason: &str,
) -> Result<()> {
    let failed = sqlx::query_scalar!(
        r#"UPDATE volumes SET state = 'error', attached_to = NULL,
                  error_reason = left('the host could not plug it in: ' || $2, 2000)
           WHERE attached_to = $1 AND state = 'attaching'
           RETURNING id AS "id: VolumeId""#,
        alloc as AllocationId,
        reason
    )
    .fetch_all(&mut *conn)
    .await?;
    for id in failed {
        queue_job(conn, id, "withdraw").await?;
    }
    Ok(())
}

/// Once an allocation runs: the volumes attached while it started, served already, are
/// plugged in (by the dispatcher, after the agent's report is filed).
pub(crate) async fn after_running(conn: &mut PgConnection, alloc: AllocationId) -> Result<()> {
    let waiting = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM volumes WHERE attached_to = $1 AND state = 'attaching'
                          AND target IS NOT NULL) AS "waiting!""#,
        alloc as AllocationId
    )
    .fetch_one(&mut *conn)
    .await?;
    if waiting {
        queue_later(conn, "allocation.volumes_update", alloc).await?;
    }
    Ok(())
}

/// Where a launch with `volumes` may go: the region they are all in, if the launch may use it.
/// Locks them, so they are still available when [`attach_at_launch`] takes them. Each must be
/// the project's and available.
pub(crate) async fn region_of_volumes(
    conn: &mut PgConnection,
    project: cp_base::ids::ProjectId,
    volumes: &[VolumeId],
    regions: Vec<String>,
) -> Result<Vec<String>> {
    if volumes.is_empty() {
        return Ok(regions);
    }
    let rows = sqlx::query!(
        r#"SELECT id AS "id: VolumeId", name, region, state FROM volumes
           WHERE id = ANY ($1) AND project_id = $2 AND state <> 'deleted' AND root_of IS NULL
           ORDER BY id FOR NO KEY UPDATE"#,
        &volumes.iter().map(|v| v.0).collect::<Vec<_>>(),
        project as cp_base::ids::ProjectId
    )
    .fetch_all(&mut *conn)
    .await?;
    if let Some(missing) = volumes.iter().find(|v| !rows.iter().any(|r| r.id == **v)) {
        return Err(Error::Invalid {
            field: "volumes",
            reason: format!("the project has no volume {missing}"),
        });
    }
    if let Some(busy) = rows.iter().find(|r| r.state != "available") {
        return Err(Error::Conflict(format!(
            "volume {} is {}; a launch attaches available volumes",
            busy.name,
            busy.state.replace('_', " ")
        )));
    }
    let region = &rows[0].region;
    if let Some(other) = rows.iter().find(|r| r.region != *region) {
        return Err(Error::Conflict(format!(
            "volume {} is in {} and volume {} in {}; an instance attaches volumes of one region",
            rows[0].name, region, other.name, other.region
        )));
    }
    if !regions.contains(region) {
        return Err(Error::Conflict(format!(
            "the volumes are in {region}, where this launch can't go (it may use {})",
            regions.join(", ")
        )));
    }
    Ok(vec![region.clone()])
}

/// Attaches the launch's volumes to its new allocation, in the launch's transaction: the
/// backend serves them, and the host plugs them in once the VM runs ([`after_running`]).
pub(crate) async fn attach_at_launch(
    conn: &mut PgConnection,
    alloc: AllocationId,
    volumes: &[VolumeId],
) -> Result<()> {
    for &v in volumes {
        sqlx::query!(
            "UPDATE volumes SET state = 'attaching', attached_to = $2 WHERE id = $1",
            v as VolumeId,
            alloc as AllocationId
        )
        .execute(&mut *conn)
        .await
        .map_err(cp_base::db::trigger_refusal)?;
        queue_job(conn, v, "export").await?;
    }
    Ok(())
}
