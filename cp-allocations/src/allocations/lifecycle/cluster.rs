//! A cluster's members leave together: when its owner releases it, and when one member fails
//! to come up (a cluster with a member missing is not what was ordered, and the others would
//! be billed for waiting on it).

use sqlx::PgConnection;

use super::{begin_release, queue_later};
use cp_base::error::Result;
use cp_base::ids::{AllocationId, ClusterId};

/// Marks the cluster released (once; `false` if it already was) and starts the release of
/// every member still placed, provisioning or running, in id order. `failure` is recorded on
/// the cluster and on each member. Returns the members whose provision no agent had started,
/// for [`super::end_unstarted_or_log`] once the caller commits. The caller queues each
/// member's release task (they are the returned `releasing`).
pub(crate) async fn release_members(
    conn: &mut PgConnection,
    cluster: ClusterId,
    failure: Option<&str>,
) -> Result<Option<Released>> {
    let marked = sqlx::query_scalar!(
        "UPDATE clusters SET release_requested_at = now(), failure = $2,
                             ssh_private_key_sealed = NULL
         WHERE id = $1 AND release_requested_at IS NULL RETURNING id",
        cluster as ClusterId,
        failure
    )
    .fetch_optional(&mut *conn)
    .await?;
    if marked.is_none() {
        return Ok(None);
    }
    let live = sqlx::query_scalar!(
        r#"SELECT id AS "id: AllocationId" FROM allocations
           WHERE cluster_id = $1 AND state IN ('placed', 'provisioning', 'running')
           ORDER BY id FOR NO KEY UPDATE"#,
        cluster as ClusterId
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut released = Released::default();
    for id in live {
        if begin_release(&mut *conn, id, failure).await? {
            released.unstarted.push(id);
        }
        released.releasing.push(id);
    }
    Ok(Some(released))
}

/// What [`release_members`] started.
#[derive(Debug, Default)]
pub(crate) struct Released {
    pub releasing: Vec<AllocationId>,
    pub unstarted: Vec<AllocationId>,
}

/// After member `id` failed to come up (its own release already begun): releases the rest of
/// its cluster, if it is in one that is not already on its way out, through the outbox.
pub(crate) async fn member_failed(
    conn: &mut PgConnection,
    id: AllocationId,
    why: &str,
) -> Result<()> {
    let member = sqlx::query!(
        r#"SELECT cluster_id AS "cluster: ClusterId", cluster_index AS "index!"
           FROM allocations WHERE id = $1 AND cluster_id IS NOT NULL"#,
        id as AllocationId
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(member) = member else {
        return Ok(());
    };
    let Some(cluster) = member.cluster else {
        return Ok(());
    };
    let failure = format!("member {} failed to come up: {why}", member.index);
    if let Some(released) = release_members(&mut *conn, cluster, Some(&failure)).await? {
        // Queued through the outbox: this runs inside an agent's report, whose answer should
        // not wait on other nodes' plans. A member whose provision never started is wiped
        // like the rest: slower than ending it at once, and never wrong.
        for other in released.releasing {
            queue_later(&mut *conn, "allocation.release", other).await?;
        }
    }
    Ok(())
}
