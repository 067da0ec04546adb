//! Placement: where a SKU goes, done here and only here.
//!
//! Candidates come from `node_free_blocks` (kept by triggers, so it is what the catalog shows)
//! joined with `node_sells` (admin state, health, heartbeat, shape): best fit first, the node
//! with the fewest free slots that still has a block of the requested size. On each candidate
//! [`choose::NodeView::choose`] picks the slots (partitions, NUMA, packing); the chosen slots
//! are locked with `FOR NO KEY UPDATE SKIP LOCKED`, and if someone else has them, or the database
//! refuses the claim, the next candidate is tried. No fit is `sku_unavailable` with
//! [`explain`]'s answer.

pub mod choose;
pub mod cluster;

use serde::{Deserialize, Serialize};
use sqlx::{Connection, PgConnection};

use crate::skus::{Shape, Sku, sku_by_name};
use choose::{FreeSlot, NodeView, Partition};
use cp_base::ControlPlane;
use cp_base::error::{Error, Result};
use cp_base::ids::{NodeId, SlotId};
use cp_base::reasons::{Recent, RefusalReasons};
use cp_identity::auth::{Platform, PlatformOperators};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// How many candidates one placement looks at before giving up.
const CANDIDATES: i64 = 64;

/// A placement decision: the node, the slots (empty for bare metal) and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub node_id: NodeId,
    pub hostname: String,
    pub region: String,
    pub slots: Vec<SlotId>,
    pub slot_indexes: Vec<i32>,
    pub why: String,
}

struct Candidate {
    node_id: NodeId,
    hostname: String,
    region: String,
    free_slots: i32,
    /// How many launches of the size it could take (1 for a whole node).
    free_blocks: i32,
}

/// Live availability of `sku` per region: the number of launches that could succeed now.
///
/// Read from `availability_changes`, which the database keeps beside `node_free_blocks`
/// (migration 0029): a handful of rows per SKU however large the fleet. It follows what
/// placement would do, except that a node whose heartbeat lapsed is counted until
/// [`sweep_and_compact`] notices (at most a second in a running server); placement itself
/// never takes it.
pub async fn availability(conn: &mut PgConnection, sku: &Sku) -> Result<Vec<(String, i64)>> {
    Ok(availability_of_each(conn, std::slice::from_ref(sku))
        .await?
        .pop()
        .unwrap_or_default())
}

/// [`availability`] of each of `skus`, in their order, in one statement: a page that shows
/// several SKUs (the catalog, a listing's fitting SKUs) asks once rather than once a SKU.
///
/// A SKU's regions and families are passed flattened, each value beside its SKU's position.
pub async fn availability_of_each(
    conn: impl sqlx::PgExecutor<'_>,
    skus: &[Sku],
) -> Result<Vec<Vec<(String, i64)>>> {
    let mut shape = Vec::with_capacity(skus.len());
    let mut gpu_model = Vec::with_capacity(skus.len());
    let mut size = Vec::with_capacity(skus.len());
    let (mut vcpus, mut memory_mib, mut nvme_bytes) = (Vec::new(), Vec::new(), Vec::new());
    let (mut region_of, mut region) = (Vec::new(), Vec::new());
    let (mut family_of, mut family) = (Vec::new(), Vec::new());
    for (i, sku) in skus.iter().enumerate() {
        let per = sku.per_gpu();
        shape.push(sku.shape.as_str().to_string());
        gpu_model.push(sku.gpu_model.clone());
        size.push(sku.gpu_count);
        vcpus.push(per.vcpus);
        memory_mib.push(per.memory_mib);
        nvme_bytes.push(per.nvme_bytes);
        for r in &sku.regions {
            region_of.push(i as i64);
            region.push(r.clone());
        }
        for f in &sku.families {
            family_of.push(i as i64);
            family.push(f.clone());
        }
    }
    // A slice counts blocks of exactly its size whose every slot has its per-GPU share; a
    // whole node counts nodes with at least its GPUs.
    let rows = sqlx::query!(
        r#"WITH q AS (
               SELECT u.*, n - 1 AS i
               FROM unnest($1::text[], $2::text[], $3::int4[], $4::int4[], $5::int8[], $6::int8[])
                    WITH ORDINALITY AS u(shape, gpu_model, size, vcpus, memory_mib, nvme_bytes, n)),
             r AS (SELECT * FROM unnest($7::int8[], $8::text[]) AS r(i, region)),
             f AS (SELECT * FROM unnest($9::int8[], $10::text[]) AS f(i, family))
           SELECT q.i AS "i!", c.region, sum(c.launchable)::bigint AS "launchable!"
           FROM q JOIN availability_changes c
             ON c.shape = q.shape AND c.gpu_model = q.gpu_model
            AND CASE WHEN q.shape = 'gpu_slice'
                     THEN c.size = q.size AND c.min_vcpus >= q.vcpus
                          AND c.min_memory_mib >= q.memory_mib AND c.min_nvme_bytes >= q.nvme_bytes
                     ELSE c.size >= q.size END
            AND EXISTS (SELECT 1 FROM r WHERE r.i = q.i AND r.region = c.region)
            AND EXISTS (SELECT 1 FROM f WHERE f.i = q.i AND f.family = c.family)
           GROUP BY q.i, c.region HAVING sum(c.launchable) > 0
           ORDER BY q.i, c.region"#,
        &shape,
        &gpu_model,
        &size,
        &vcpus,
        &memory_mib,
        &nvme_bytes,
        &region_of,
        &region,
        &family_of,
        &family,
    )
    .fetch_all(conn)
    .await?;
    let mut each = vec![Vec::new(); skus.len()];
    for r in rows {
        if let Some(found) = usize::try_from(r.i).ok().and_then(|i| each.get_mut(i)) {
            found.push((r.region, r.launchable));
        }
    }
    Ok(each)
}

/// What one round of [`sweep_and_compact`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AvailabilityUpkeep {
    /// Nodes newly marked as having a lapsed heartbeat.
    pub lapsed: i64,
    /// Change rows folded away by compaction (0 when another replica was compacting).
    pub folded: i64,
    /// Whether the log was vacuumed after compactions that folded many rows.
    pub vacuumed: bool,
    /// `false` while the log's file is owed a rewrite that could not get its lock yet (it is
    /// tried again every round until it does).
    pub compact: bool,
}

/// What a handle owes the availability log, across rounds of [`sweep_and_compact`].
#[derive(Debug, Default)]
pub struct LogUpkeep {
    /// Rows folded since this handle last vacuumed the log.
    folded_since_vacuum: AtomicI64,
    /// A vacuum ran and the file may be far larger than its rows: rewrite it when possible.
    rewrite_owed: AtomicBool,
}

/// Marks nodes whose heartbeat lapsed (so the count stops offering them), then folds the log
/// of availability changes into one row per key. Cheap (the sweep reads `nodes` once; the
/// compaction only the rows since the last); every replica runs it every second.
///
/// The rows folded away are dead, and the catalog's query reads the whole (small) table: a
/// busy second leaves thousands of dead rows, and autovacuum looks at most once a minute (at
/// 100,000 nodes, a log bloated to 4,600 pages made the query 12 ms at p50 instead of 0.1 ms).
/// So once this handle has folded [`VACUUM_AFTER_FOLDING`] rows (in one busy second, or over
/// several quieter ones, which autovacuum's thresholds would leave for minutes), it vacuums the
/// table; a vacuum that gave way to another is still owed next round. After a vacuum, a file
/// still much larger than its rows is rewritten, and a rewrite that could not get its lock
/// under load is tried again every round until it does.
#[tracing::instrument(skip_all)]
pub async fn sweep_and_compact(
    pool: &sqlx::PgPool,
    owed: &LogUpkeep,
) -> Result<AvailabilityUpkeep> {
    let lapsed = sqlx::query_scalar!(r#"SELECT sweep_lapsed_heartbeats() AS "n!""#)
        .fetch_one(pool)
        .await?;
    let folded = sqlx::query_scalar!(r#"SELECT compact_availability_changes() AS "n!""#)
        .fetch_one(pool)
        .await?;
    let since = owed
        .folded_since_vacuum
        .fetch_add(folded, Ordering::Relaxed)
        + folded;
    let vacuum = since >= VACUUM_AFTER_FOLDING;
    let (vacuumed, compact) = if vacuum || owed.rewrite_owed.load(Ordering::Relaxed) {
        let mut conn = pool.acquire().await?;
        let tidied = tidy_log(&mut conn, vacuum, owed).await;
        if sqlx::query("RESET lock_timeout")
            .execute(&mut *conn)
            .await
            .is_err()
        {
            // Never hand back a connection whose lock timeout would surprise its next user.
            conn.detach();
        }
        tidied?
    } else {
        (false, true)
    };
    if vacuumed {
        owed.folded_since_vacuum.fetch_sub(since, Ordering::Relaxed);
    }
    Ok(AvailabilityUpkeep {
        lapsed,
        folded,
        vacuumed,
        compact,
    })
}

/// How many rows compaction folds (in one round or over several) before the log is vacuumed.
pub const VACUUM_AFTER_FOLDING: i64 = 1_000;

/// Vacuums the log if `vacuum` (waiting at most [`VACUUM_LOCK_WAIT`]; a vacuum that gave way
/// is still owed), then rewrites its file if a vacuum ever left it sparse (waiting at most
/// [`REWRITE_LOCK_WAIT`]; a rewrite that gave way is still owed). Returns whether it vacuumed
/// and whether the file is compact. Sets `lock_timeout` on `conn`; the caller resets it.
async fn tidy_log(
    conn: &mut PgConnection,
    vacuum: bool,
    owed: &LogUpkeep,
) -> sqlx::Result<(bool, bool)> {
    let mut vacuumed = false;
    if vacuum {
        sqlx::query(VACUUM_LOCK_WAIT).execute(&mut *conn).await?;
        vacuumed = lock_or_give_way(
            sqlx::query("VACUUM availability_changes")
                .execute(&mut *conn)
                .await,
        )?;
        if vacuumed {
            owed.rewrite_owed.store(true, Ordering::Relaxed);
        }
    }
    if !owed.rewrite_owed.load(Ordering::Relaxed) {
        return Ok((vacuumed, true));
    }
    sqlx::query(REWRITE_LOCK_WAIT).execute(&mut *conn).await?;
    let compact = rewrite_if_sparse(conn).await?;
    if compact {
        owed.rewrite_owed.store(false, Ordering::Relaxed);
    }
    Ok((vacuumed, compact))
}

/// Rewrites the log's file when it is far larger than its rows: a vacuum frees the dead rows
/// but only cuts empty pages off the end of the file, and compaction writes its folded rows
/// wherever the table ends, so after a big set-up the file kept ~6,000 pages (at 100,000
/// nodes) that the catalog's query read through. The rewrite takes the table's exclusive lock
/// for milliseconds and waits for it at most [`REWRITE_LOCK_WAIT`] (everyone queues behind a
/// waiting exclusive lock). `false`: it gave way, and is still owed.
async fn rewrite_if_sparse(conn: &mut PgConnection) -> sqlx::Result<bool> {
    let pages = sqlx::query_scalar!(
        r#"SELECT pg_relation_size('availability_changes') / 8192 AS "pages!""#
    )
    .fetch_one(&mut *conn)
    .await?;
    if pages <= REWRITE_ABOVE_PAGES {
        return Ok(true);
    }
    lock_or_give_way(
        sqlx::query("VACUUM FULL availability_changes")
            .execute(&mut *conn)
            .await,
    )
}

/// `false` when a statement gave up waiting for its lock (`lock_not_available`).
fn lock_or_give_way<T>(done: sqlx::Result<T>) -> sqlx::Result<bool> {
    match done {
        Ok(_) => Ok(true),
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") => Ok(false),
        Err(e) => Err(e),
    }
}

/// The log's live rows fit in a page or two; a file larger than this is mostly empty pages.
const REWRITE_ABOVE_PAGES: i64 = 8;

/// How long the rewrite waits for the table's exclusive lock before leaving it for next time.
const REWRITE_LOCK_WAIT: &str = "SET lock_timeout = '50ms'";

/// How long the vacuum waits for the table. Long enough for autovacuum to yield it (after
/// `deadlock_timeout`, 1 s by default, which it does for anyone its lock blocks), short enough
/// that a replica never waits on another's vacuum for long. Not `SKIP_LOCKED`: autovacuum
/// takes the same lock after a busy second's inserts, and a skip then left the dead rows for a
/// minute (CI saw 58 pages where 2 were expected).
const VACUUM_LOCK_WAIT: &str = "SET lock_timeout = '3s'";

/// Replaces the log of availability changes with a count made from the nodes themselves, and
/// returns by how many launches (summed over every key) the log was off: 0 unless a path that
/// changes capacity wrote no change, which is a bug worth an alarm. `None` when another
/// replica is compacting or rebasing at the moment. O(fleet): run it rarely (every minute).
///
/// Correct beside concurrent writers: the count and the deletion share one snapshot
/// (repeatable read), so a change committed after it keeps its own row on top of the count.
#[tracing::instrument(skip_all)]
pub async fn rebase(pool: &sqlx::PgPool) -> Result<Option<i64>> {
    let mut conn = pool.acquire().await?;
    // A session lock, taken before the snapshot (so a rebase never counts from a snapshot
    // older than one that just finished); compaction takes the same key per transaction.
    let locked = sqlx::query_scalar!(
        r#"SELECT pg_try_advisory_lock(hashtext('availability_changes')) AS "locked!""#
    )
    .fetch_one(&mut *conn)
    .await?;
    if !locked {
        return Ok(None);
    }
    let off = rebase_locked(&mut conn).await;
    let unlocked =
        sqlx::query_scalar!("SELECT pg_advisory_unlock(hashtext('availability_changes'))")
            .fetch_one(&mut *conn)
            .await;
    if unlocked.is_err() {
        // The lock lives as long as the session: never hand this connection back holding it.
        conn.detach();
    }
    off.map(Some)
}

async fn rebase_locked(conn: &mut PgConnection) -> Result<i64> {
    let mut tx = conn.begin().await?;
    sqlx::query!("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *tx)
        .await?;
    // One statement, one snapshot: the deletion sees neither the rows it inserts nor any
    // committed after the snapshot.
    let off = sqlx::query_scalar!(
        r#"WITH counted AS (
               SELECT a.shape, a.gpu_model, a.size, a.region, a.family, a.min_vcpus,
                      a.min_memory_mib, a.min_nvme_bytes, sum(a.launchable) AS launchable
               FROM nodes n CROSS JOIN LATERAL node_availability(n) a
               GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
           ), logged AS (
               SELECT shape, gpu_model, size, region, family, min_vcpus, min_memory_mib,
                      min_nvme_bytes, sum(launchable) AS launchable
               FROM availability_changes
               GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
           ), gone AS (
               DELETE FROM availability_changes
           ), fresh AS (
               INSERT INTO availability_changes
               SELECT * FROM counted WHERE launchable <> 0
           )
           SELECT coalesce(sum(abs(coalesce(c.launchable, 0) - coalesce(l.launchable, 0))), 0)::bigint
                  AS "off!"
           FROM counted c
           FULL JOIN logged l USING (shape, gpu_model, size, region, family, min_vcpus,
                                     min_memory_mib, min_nvme_bytes)"#
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(off)
}

/// Best fit first; among equally good nodes, a random rotation, so that concurrent launches
/// start on different nodes instead of queueing for the same one.
async fn candidates(
    conn: &mut PgConnection,
    sku: &Sku,
    regions: &[String],
) -> Result<Vec<Candidate>> {
    let mut found = best_fit(conn, sku, regions).await?;
    let mut start = 0;
    while start < found.len() {
        let tie = found[start..]
            .iter()
            .take_while(|c| c.free_slots == found[start].free_slots)
            .count();
        let turn = rand::random::<usize>() % tie;
        found[start..start + tie].rotate_left(turn);
        start += tie;
    }
    Ok(found)
}

async fn best_fit(
    conn: &mut PgConnection,
    sku: &Sku,
    regions: &[String],
) -> Result<Vec<Candidate>> {
    let per = sku.per_gpu();
    Ok(match sku.shape {
        Shape::GpuSlice => {
            sqlx::query_as!(
                Candidate,
                r#"SELECT b.node_id AS "node_id: NodeId", n.hostname, n.region, b.free_slots,
                          b.free_blocks
               FROM node_free_blocks b JOIN nodes n ON n.id = b.node_id
               WHERE b.gpu_model = $1 AND b.block_size = $2 AND b.free_blocks > 0
                 AND b.min_vcpus >= $3 AND b.min_memory_mib >= $4 AND b.min_nvme_bytes >= $5
                 AND n.region = ANY($6) AND n.family = ANY($7) AND node_sells(n, 'gpu_slice')
               ORDER BY b.free_slots, b.node_id
               LIMIT $8"#,
                sku.gpu_model,
                sku.gpu_count,
                per.vcpus,
                per.memory_mib,
                per.nvme_bytes,
                regions,
                &sku.families,
                CANDIDATES,
            )
            .fetch_all(&mut *conn)
            .await?
        }
        Shape::Baremetal => {
            sqlx::query_as!(
                Candidate,
                r#"SELECT b.node_id AS "node_id: NodeId", n.hostname, n.region, b.free_slots,
                          1 AS "free_blocks!"
               FROM node_free_blocks b JOIN nodes n ON n.id = b.node_id
               WHERE b.gpu_model = $1 AND b.block_size = 1 AND b.whole_node_free
                 AND b.live_slots >= $2
                 AND n.region = ANY($3) AND n.family = ANY($4) AND node_sells(n, 'baremetal')
               ORDER BY b.live_slots, b.node_id
               LIMIT $5"#,
                sku.gpu_model,
                sku.gpu_count,
                regions,
                &sku.families,
                CANDIDATES,
            )
            .fetch_all(&mut *conn)
            .await?
        }
    })
}

/// The node's free slots of `model` and its fabric partitions.
async fn node_view(conn: &mut PgConnection, node: NodeId, model: &str) -> Result<NodeView> {
    let free = sqlx::query!(
        r#"SELECT s.id AS "id: SlotId", s.slot_index, s.numa_node
           FROM node_resource_slots s
           WHERE s.node_id = $1 AND s.gpu_model = $2 AND s.retired_at IS NULL
             AND s.drift IS NULL AND s.cleanup_state = 'clean' AND s.out_of_service_event IS NULL
             AND NOT EXISTS (SELECT 1 FROM resource_claims c
                             WHERE c.node_id = $1 AND c.released_at IS NULL
                               AND (c.slot_id = s.id OR c.kind = 'baremetal'))"#,
        node as NodeId,
        model
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| FreeSlot {
        id: r.id,
        index: r.slot_index,
        numa: r.numa_node,
    })
    .collect();
    let partitions = sqlx::query!(
        r#"SELECT partition_id, slot_ids AS "slot_ids: Vec<uuid::Uuid>"
           FROM node_fabric_partitions WHERE node_id = $1"#,
        node as NodeId
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| Partition {
        id: r.partition_id,
        slots: r.slot_ids.into_iter().map(SlotId).collect(),
    })
    .collect();
    Ok(NodeView { free, partitions })
}

/// [`node_view`] of each of `nodes` at once: two statements however many nodes.
async fn node_views(
    conn: &mut PgConnection,
    nodes: &[uuid::Uuid],
    model: &str,
) -> Result<std::collections::HashMap<NodeId, NodeView>> {
    let free = sqlx::query!(
        r#"SELECT s.node_id AS "node_id: NodeId", s.id AS "id: SlotId", s.slot_index, s.numa_node
           FROM node_resource_slots s
           WHERE s.node_id = ANY($1) AND s.gpu_model = $2 AND s.retired_at IS NULL
             AND s.drift IS NULL AND s.cleanup_state = 'clean' AND s.out_of_service_event IS NULL
             AND NOT EXISTS (SELECT 1 FROM resource_claims c
                             WHERE c.node_id = s.node_id AND c.released_at IS NULL
                               AND (c.slot_id = s.id OR c.kind = 'baremetal'))"#,
        nodes,
        model
    )
    .fetch_all(&mut *conn)
    .await?;
    let partitions = sqlx::query!(
        r#"SELECT node_id AS "node_id: NodeId", partition_id, slot_ids AS "slot_ids: Vec<uuid::Uuid>"
           FROM node_fabric_partitions WHERE node_id = ANY($1)"#,
        nodes
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut views: std::collections::HashMap<NodeId, NodeView> = std::collections::HashMap::new();
    for r in free {
        views.entry(r.node_id).or_default().free.push(FreeSlot {
            id: r.id,
            index: r.slot_index,
            numa: r.numa_node,
        });
    }
    for r in partitions {
        views
            .entry(r.node_id)
            .or_default()
            .partitions
            .push(Partition {
                id: r.partition_id,
                slots: r.slot_ids.into_iter().map(SlotId).collect(),
            });
    }
    Ok(views)
}

/// What to do with a placement inside the caller's transaction (a savepoint): write the
/// allocation and its claims. An error from the database there means "try the next node".
#[allow(async_fn_in_trait)]
pub trait Reserve {
    async fn reserve(&mut self, conn: &mut PgConnection, placement: &Placement) -> Result<()>;
}

/// How long a launch keeps looking, by default, while every candidate that could take it is
/// being reserved by other launches. Long enough that a burst of concurrent launches onto a
/// fleet with room all succeed; short enough that a launch onto a full fleet answers at once
/// (a round in which nothing was busy ends the search). `ControlPlane::with_contention_deadline`
/// changes it.
pub use cp_base::CONTENTION_DEADLINE;

/// Places `sku` within `regions` on the caller's transaction. Each candidate node's row is
/// locked with `FOR NO KEY UPDATE SKIP LOCKED` (a node someone else is placing on right now is
/// skipped, which spreads concurrent launches), its free slots are read under that lock, and
/// the chosen slots are locked too. `reserve` runs in a savepoint; a refusal by the database
/// moves on to the next candidate. While some candidate was busy, it looks again, with a short
/// growing pause, until `patience` has passed ([`CONTENTION_DEADLINE`] by default); then it
/// answers `sku_unavailable`, counting the nodes that were only busy apart from those that
/// cannot fit.
pub async fn place(
    conn: &mut PgConnection,
    sku: &Sku,
    regions: &[String],
    reserve: &mut impl Reserve,
    patience: std::time::Duration,
    reasons: &RefusalReasons,
) -> Result<Placement> {
    let deadline = std::time::Instant::now() + patience;
    let mut busy = 0;
    for round in 0u32.. {
        busy = 0;
        for candidate in candidates(&mut *conn, sku, regions).await? {
            let locked = sqlx::query_scalar!(
                "SELECT 1 AS one FROM nodes WHERE id = $1 FOR NO KEY UPDATE SKIP LOCKED",
                candidate.node_id as NodeId
            )
            .fetch_optional(&mut *conn)
            .await?
            .is_some();
            if !locked {
                busy += 1;
                continue;
            }
            let Some(placement) = plan_on(&mut *conn, sku, &candidate).await? else {
                continue;
            };
            lock_slots(&mut *conn, std::slice::from_ref(&placement)).await?;
            let mut sp = conn.begin().await?;
            match reserve.reserve(&mut sp, &placement).await {
                Ok(()) => {
                    sp.commit().await?;
                    return Ok(placement);
                }
                Err(Error::Database(sqlx::Error::Database(e)))
                    if matches!(e.code().as_deref(), Some("23505" | "23P01" | "23514")) =>
                {
                    tracing::debug!(node.id = %candidate.node_id, db.error = %e, "claim refused; next candidate");
                    sp.rollback().await?;
                    busy += 1;
                }
                Err(e) => return Err(e),
            }
        }
        if busy == 0 || std::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(backoff(round)).await;
    }
    let mut why = explain_recent(conn, reasons, sku, regions).await?;
    if busy > 0 {
        why.push_str(&format!(
            ". {busy} node(s) that could take it were being reserved by other launches for \
             the whole {} ms this launch waited; try again",
            patience.as_millis()
        ));
    }
    Err(Error::SkuUnavailable(why))
}

/// Places up to `count` launches of `sku` within `regions` together, on the caller's
/// transaction, against one read of the free blocks: the best-fit candidates, as many of
/// them locked at once (`FOR NO KEY UPDATE SKIP LOCKED`, one statement) as the launches need,
/// their free slots and partitions read at once, the slots chosen in memory one launch after
/// another (each taking its slots out of the node's view), and every chosen slot locked with
/// one statement. Returns the placements made, best fit first: fewer than `count` when the
/// locked nodes ran out (the caller places the rest one by one with [`place`], which waits for
/// busy nodes and explains a refusal); or, when no node in `regions` has room for `sku` at
/// all, the refusal [`place`] would answer (nothing busy, so nothing to wait for). Nothing is
/// written: the caller writes the claims, and the database still refuses any double-booking.
#[tracing::instrument(skip_all, fields(sku = %sku.name, count))]
pub async fn place_group(
    conn: &mut PgConnection,
    sku: &Sku,
    regions: &[String],
    count: usize,
    reasons: &RefusalReasons,
) -> Result<Vec<Placement>> {
    let found = candidates(&mut *conn, sku, regions).await?;
    if found.is_empty() {
        let why = explain_recent(conn, reasons, sku, regions).await?;
        return Err(Error::SkuUnavailable(why));
    }
    // As many nodes as the free blocks say the launches need, and one more for room another
    // group took meanwhile: in best-fit order, skipping nodes another launch or group holds
    // (another replica's group takes the next ones). Every node locked here waits for this
    // group's commit, agents' results for it included, so no more than that.
    let mut room = 0;
    let needed = found
        .iter()
        .take_while(|c| {
            let more = room < count;
            room += usize::try_from(c.free_blocks).unwrap_or(0).max(1);
            more
        })
        .count();
    let ordered: Vec<uuid::Uuid> = found.iter().map(|c| c.node_id.0).collect();
    let locked: Vec<uuid::Uuid> = sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM nodes WHERE id = ANY($1)
           ORDER BY array_position($1, id) LIMIT $2
           FOR NO KEY UPDATE SKIP LOCKED"#,
        &ordered,
        i64::try_from(needed).unwrap_or(i64::MAX).saturating_add(1)
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut nodes: Vec<(&Candidate, NodeView)> = found
        .iter()
        .filter(|c| locked.contains(&c.node_id.0))
        .map(|c| (c, NodeView::default()))
        .collect();
    if sku.shape == Shape::GpuSlice && !nodes.is_empty() {
        let mut views = node_views(&mut *conn, &locked, &sku.gpu_model).await?;
        for (c, view) in &mut nodes {
            *view = views.remove(&c.node_id).unwrap_or_default();
        }
    }
    let mut placed = Vec::new();
    let mut whole_taken = Vec::new();
    'launch: for _ in 0..count {
        for (c, view) in &mut nodes {
            let base = |slots: Vec<SlotId>, slot_indexes: Vec<i32>, why: String| Placement {
                node_id: c.node_id,
                hostname: c.hostname.clone(),
                region: c.region.clone(),
                slots,
                slot_indexes,
                why,
            };
            match sku.shape {
                Shape::Baremetal => {
                    if whole_taken.contains(&c.node_id) {
                        continue;
                    }
                    whole_taken.push(c.node_id);
                    placed.push(base(
                        vec![],
                        vec![],
                        format!(
                            "the whole node {} ({} GPUs, no claims): the smallest free node that fits",
                            c.hostname, c.free_slots
                        ),
                    ));
                    continue 'launch;
                }
                Shape::GpuSlice => {
                    let free_before = view.free.len();
                    let per = usize::try_from(sku.gpu_count).unwrap_or(1);
                    if let Some(choice) = view.choose(per) {
                        let indexes = choice.slots.iter().map(|id| view.index_of(*id)).collect();
                        view.take(&choice.slots);
                        placed.push(base(
                            choice.slots,
                            indexes,
                            format!(
                                "{} on {} ({free_before} free slots: best fit)",
                                choice.why, c.hostname
                            ),
                        ));
                        continue 'launch;
                    }
                }
            }
        }
        break;
    }
    lock_slots(&mut *conn, &placed).await?;
    Ok(placed)
}

/// Where a cluster's members went: one [`Placement`] per member, in member order, with the
/// leaf and spine of each, and the fabric they share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterPlacement {
    pub fabric: String,
    pub within: cluster::Locality,
    pub members: Vec<(Placement, cluster::Where)>,
    /// "16 members on 2 leaf switches of spine s1 (fabric ib0)".
    pub why: String,
}

/// How many times a cluster's placement reads the fleet again after a node it chose turned
/// out to have changed (taken by a launch that committed between the read and the lock).
const CLUSTER_ROUNDS: u32 = 4;

/// Places every member of a cluster of `sku` within `regions` on the caller's transaction,
/// or none: reads the room of every node of the SKU on an approved fabric place (no drift),
/// lets [`cluster::choose`] decide, locks the chosen nodes in id order (waiting for a launch
/// that holds one, as every path that locks several nodes locks them in that order), reads
/// their free slots under the lock, and picks each member's slots. If a chosen node no longer
/// has the room it was read with, that round is rolled back (its locks with it) and the fleet
/// read again. Nothing is written: the caller writes the members, and the database still
/// refuses a double booking and a partial cluster (`clusters_whole`).
#[tracing::instrument(skip_all, fields(sku = %sku.name, members = want.members))]
pub async fn place_cluster(
    conn: &mut PgConnection,
    sku: &Sku,
    regions: &[String],
    want: cluster::Want,
) -> Result<ClusterPlacement> {
    take_turns(&mut *conn, regions).await?;
    let mut refusal = None;
    for region in regions {
        for round in 0..CLUSTER_ROUNDS {
            let rooms = cluster_rooms(&mut *conn, sku, region, None).await?;
            let pick = match cluster::choose(&rooms, want) {
                Ok(pick) => pick,
                Err(short) => {
                    // The region that came closest is the one worth explaining.
                    let room = |s: &cluster::Shortfall| s.best.iter().map(|b| b.1).max();
                    if refusal
                        .as_ref()
                        .is_none_or(|(kept, _)| room(&short) > room(kept))
                    {
                        refusal = Some((short, region.clone()));
                    }
                    break;
                }
            };
            let mut sp = conn.begin().await?;
            if let Some(placed) = lock_and_pick_slots(&mut sp, sku, region, &rooms, &pick).await? {
                sp.commit().await?;
                return Ok(placed);
            }
            sp.rollback().await?;
            tokio::time::sleep(backoff(round)).await;
        }
    }
    let Some((short, region)) = refusal else {
        return Err(Error::SkuUnavailable(format!(
            "the nodes chosen for this cluster of {} kept changing while it was placed; try again",
            want.members
        )));
    };
    let held = held_back(&mut *conn, sku, &region, short.closest()).await?;
    Err(Error::SkuUnavailable(format!("{short} in {region}{held}")))
}

/// Cluster placements in a region take turns, until the caller's transaction ends. Each reads
/// the same fleet and [`cluster::choose`] is deterministic, so concurrent ones pick the same
/// nodes: without turns all but one found their nodes taken, read the fleet again, and after
/// [`CLUSTER_ROUNDS`] were refused while room was left (4 of 200 in `bench clusters`).
/// Lone launches don't take turns; they still race a cluster's choice, which the rounds
/// absorb. The regions are locked in one order, so two orders can't deadlock.
async fn take_turns(conn: &mut PgConnection, regions: &[String]) -> Result<()> {
    let mut sorted: Vec<&String> = regions.iter().collect();
    sorted.sort_unstable();
    sorted.dedup();
    for region in sorted {
        sqlx::query!(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 74)) AS locked",
            format!("cluster placement in {region}")
        )
        .fetch_one(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Every node of `region` selling `sku` on an approved fabric place (or those of them in
/// `only`), with how many members of `sku` it can take now.
async fn cluster_rooms(
    conn: &mut PgConnection,
    sku: &Sku,
    region: &str,
    only: Option<&[uuid::Uuid]>,
) -> Result<Vec<cluster::Room>> {
    let per = sku.per_gpu();
    let baremetal = sku.shape == Shape::Baremetal;
    let rows = sqlx::query!(
        r#"SELECT b.node_id AS "node_id: NodeId", n.hostname, p.fabric, p.spine_group, p.leaf,
                  CASE WHEN $7 THEN 1 ELSE b.free_blocks END AS "members!"
           FROM node_free_blocks b
           JOIN nodes n ON n.id = b.node_id
           JOIN node_fabric_places p ON p.node_id = b.node_id AND p.drift_seen_at IS NULL
           WHERE b.gpu_model = $1 AND n.region = $6 AND n.family = ANY($8)
             AND ($9::uuid[] IS NULL OR b.node_id = ANY($9))
             AND CASE WHEN $7
                      THEN b.block_size = 1 AND b.whole_node_free AND b.live_slots >= $2
                           AND node_sells(n, 'baremetal')
                      ELSE b.block_size = $2 AND b.free_blocks > 0 AND b.min_vcpus >= $3
                           AND b.min_memory_mib >= $4 AND b.min_nvme_bytes >= $5
                           AND node_sells(n, 'gpu_slice') END"#,
        sku.gpu_model,
        sku.gpu_count,
        per.vcpus,
        per.memory_mib,
        per.nvme_bytes,
        region,
        baremetal,
        &sku.families,
        only,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| cluster::Room {
            node: r.node_id,
            hostname: r.hostname,
            fabric: r.fabric,
            spine: r.spine_group,
            leaf: r.leaf,
            members: u32::try_from(r.members).unwrap_or(0),
        })
        .collect())
}

/// Locks the nodes `pick` chose and picks each member's slots on them; `None` when one of
/// them no longer has the room it was read with.
async fn lock_and_pick_slots(
    conn: &mut PgConnection,
    sku: &Sku,
    region: &str,
    rooms: &[cluster::Room],
    pick: &cluster::Pick,
) -> Result<Option<ClusterPlacement>> {
    let mut ids: Vec<uuid::Uuid> = pick.nodes.iter().map(|(i, _)| rooms[*i].node.0).collect();
    ids.sort_unstable();
    sqlx::query!(
        "SELECT id FROM nodes WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE",
        &ids
    )
    .fetch_all(&mut *conn)
    .await?;
    let still = cluster_rooms(&mut *conn, sku, region, Some(&ids)).await?;
    let mut views = match sku.shape {
        Shape::GpuSlice => node_views(&mut *conn, &ids, &sku.gpu_model).await?,
        Shape::Baremetal => Default::default(),
    };
    let per = usize::try_from(sku.gpu_count).unwrap_or(1);
    let mut members = Vec::new();
    for (i, count) in &pick.nodes {
        let room = &rooms[*i];
        if !still
            .iter()
            .any(|r| r.node == room.node && r.members >= *count)
        {
            return Ok(None);
        }
        let at = cluster::Where {
            fabric: room.fabric.clone(),
            spine: Some(room.spine.clone()),
            leaf: Some(room.leaf.clone()),
        };
        let base = |slots: Vec<SlotId>, slot_indexes: Vec<i32>, why: String| Placement {
            node_id: room.node,
            hostname: room.hostname.clone(),
            region: region.to_string(),
            slots,
            slot_indexes,
            why,
        };
        for _ in 0..*count {
            let placement = match sku.shape {
                Shape::Baremetal => base(
                    vec![],
                    vec![],
                    format!("the whole node {} on {at}: {}", room.hostname, pick.why),
                ),
                Shape::GpuSlice => {
                    let Some(view) = views.get_mut(&room.node) else {
                        return Ok(None);
                    };
                    let Some(choice) = view.choose(per) else {
                        return Ok(None);
                    };
                    let indexes = choice.slots.iter().map(|id| view.index_of(*id)).collect();
                    view.take(&choice.slots);
                    base(
                        choice.slots,
                        indexes,
                        format!("{} on {} ({at}): {}", choice.why, room.hostname, pick.why),
                    )
                }
            };
            members.push((placement, at.clone()));
        }
    }
    let placements: Vec<Placement> = members.iter().map(|(p, _)| p.clone()).collect();
    lock_slots(&mut *conn, &placements).await?;
    Ok(Some(ClusterPlacement {
        fabric: rooms[pick.nodes[0].0].fabric.clone(),
        within: pick.within,
        members,
        why: pick.why.clone(),
    }))
}

/// What keeps nodes of `at` out of clusters now, as the end of a refusal: "; in spine s2,
/// 3 nodes are draining, unhealthy or silent and 1 awaits approval of a fabric move".
async fn held_back(
    conn: &mut PgConnection,
    sku: &Sku,
    region: &str,
    at: Option<&cluster::Where>,
) -> Result<String> {
    let Some(at) = at else {
        return Ok(String::new());
    };
    let counts = sqlx::query!(
        r#"SELECT count(*) FILTER (WHERE p.drift_seen_at IS NOT NULL) AS "drift!",
                  count(*) FILTER (WHERE p.drift_seen_at IS NULL AND NOT node_sells(n, $5))
                      AS "not_selling!"
           FROM node_fabric_places p JOIN nodes n ON n.id = p.node_id
           WHERE p.fabric = $1 AND ($2::text IS NULL OR p.spine_group = $2)
             AND ($3::text IS NULL OR p.leaf = $3) AND n.region = $4"#,
        at.fabric,
        at.spine,
        at.leaf,
        region,
        sku.shape.as_str(),
    )
    .fetch_one(&mut *conn)
    .await?;
    let mut parts = Vec::new();
    if counts.not_selling > 0 {
        parts.push(format!(
            "{} node(s) are draining, unhealthy, silent or not selling {}",
            counts.not_selling,
            sku.shape.as_str()
        ));
    }
    if counts.drift > 0 {
        parts.push(format!(
            "{} node(s) await an operator's approval of a fabric move",
            counts.drift
        ));
    }
    Ok(if parts.is_empty() {
        String::new()
    } else {
        format!("; in {at}, {}", parts.join(" and "))
    })
}

/// Locks the slots `placed` chose (one statement), so the claims the caller writes find them
/// as they were read.
async fn lock_slots(conn: &mut PgConnection, placed: &[Placement]) -> Result<()> {
    let slots: Vec<uuid::Uuid> = placed
        .iter()
        .flat_map(|p| p.slots.iter().map(|s| s.0))
        .collect();
    if !slots.is_empty() {
        sqlx::query!(
            "SELECT id FROM node_resource_slots WHERE id = ANY($1) FOR NO KEY UPDATE",
            &slots
        )
        .fetch_all(&mut *conn)
        .await?;
    }
    Ok(())
}

/// 1, 2, 4, 8, 16, then 20 ms, with up to half of it again as jitter so that launches that
/// collided once don't collide again in lockstep.
fn backoff(round: u32) -> std::time::Duration {
    let base = (1u64 << round.min(5)).min(20) * 1000;
    let jitter = u64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0),
    ) % (base / 2 + 1);
    std::time::Duration::from_micros(base + jitter)
}

/// The slots `sku` would take on `candidate`, without locking anything.
async fn plan_on(
    conn: &mut PgConnection,
    sku: &Sku,
    candidate: &Candidate,
) -> Result<Option<Placement>> {
    let base = |slots: Vec<SlotId>, slot_indexes: Vec<i32>, why: String| Placement {
        node_id: candidate.node_id,
        hostname: candidate.hostname.clone(),
        region: candidate.region.clone(),
        slots,
        slot_indexes,
        why,
    };
    Ok(match sku.shape {
        Shape::Baremetal => Some(base(
            vec![],
            vec![],
            format!(
                "the whole node {} ({} GPUs, no claims): the smallest free node that fits",
                candidate.hostname, candidate.free_slots
            ),
        )),
        Shape::GpuSlice => {
            let view = node_view(&mut *conn, candidate.node_id, &sku.gpu_model).await?;
            view.choose(sku.gpu_count as usize).map(|c| {
                let indexes = c.slots.iter().map(|id| view.index_of(*id)).collect();
                base(
                    c.slots,
                    indexes,
                    format!(
                        "{} on {} ({} free slots: best fit)",
                        c.why, candidate.hostname, candidate.free_slots
                    ),
                )
            })
        }
    })
}

/// [`explain`], or its answer for the same SKU and regions from less than
/// [`cp_base::reasons::REASONS_TTL`] ago; or, once that has passed, the older answer while one
/// caller counts again in a task of its own on a connection of its own, so that no launch (and
/// no placement group's turn) waits for a count of the whole fleet. See [`cp_base::reasons`].
pub async fn explain_recent(
    conn: &mut PgConnection,
    reasons: &RefusalReasons,
    sku: &Sku,
    regions: &[String],
) -> Result<String> {
    match explain_kept(reasons, sku, regions) {
        Some(why) => Ok(why),
        None => explain_now(conn, reasons, sku, regions).await,
    }
}

/// What [`explain_recent`] answers without the database, when it can (the answer kept, fresh
/// or, while a task counts again, stale); `None` when it must count now ([`explain_now`]), so
/// a page that shows several SKUs takes a connection only then.
pub fn explain_kept(reasons: &RefusalReasons, sku: &Sku, regions: &[String]) -> Option<String> {
    let key = explanation_key(sku, regions);
    match reasons.recent(&key) {
        Recent::Fresh(why) => Some(why),
        Recent::Stale { why, refresh } => {
            if refresh {
                // Without a pool of its own to count on (a test's handle), the caller counts.
                let pool = reasons.pool()?;
                tokio::spawn(refresh_explanation(
                    pool.clone(),
                    reasons.clone(),
                    key,
                    sku.clone(),
                    regions.to_vec(),
                ));
            }
            Some(why)
        }
        Recent::Missing => None,
    }
}

/// [`explain`] now, kept for [`explain_recent`]'s next callers.
pub async fn explain_now(
    conn: &mut PgConnection,
    reasons: &RefusalReasons,
    sku: &Sku,
    regions: &[String],
) -> Result<String> {
    explain_and_keep(conn, reasons, explanation_key(sku, regions), sku, regions).await
}

fn explanation_key(sku: &Sku, regions: &[String]) -> String {
    format!("{}|{}", sku.id, regions.join(","))
}

/// [`explain`], kept under `key` with what it took to count.
async fn explain_and_keep(
    conn: &mut PgConnection,
    reasons: &RefusalReasons,
    key: String,
    sku: &Sku,
    regions: &[String],
) -> Result<String> {
    let began = std::time::Instant::now();
    let why = explain(conn, sku, regions).await?;
    reasons.put(key, why.clone(), began.elapsed());
    Ok(why)
}

/// Counts [`explain`] again for `key` and keeps it; on failure, lets the next caller try.
#[tracing::instrument(skip_all, fields(sku = %sku.name))]
async fn refresh_explanation(
    pool: sqlx::PgPool,
    reasons: RefusalReasons,
    key: String,
    sku: Sku,
    regions: Vec<String>,
) {
    let counted = async {
        let mut conn = pool.acquire().await?;
        explain_and_keep(&mut conn, &reasons, key.clone(), &sku, &regions).await
    }
    .await;
    if let Err(e) = counted {
        tracing::warn!(error = %e, "counting why a SKU is unavailable failed; kept the last answer");
        reasons.refresh_failed(&key);
    }
}

/// Why `sku` can't be placed within `regions`: which constraint ruled out how many nodes,
/// and what would fit instead (a smaller count here, or this SKU elsewhere).
pub(crate) async fn explain(
    conn: &mut PgConnection,
    sku: &Sku,
    regions: &[String],
) -> Result<String> {
    let reasons = nodes_by_reason(&mut *conn, sku, regions).await?;
    let in_scope: i64 = reasons
        .iter()
        .filter(|(reason, _)| reason != "region")
        .map(|(_, n)| n)
        .sum();
    let mut text = if in_scope == 0 {
        format!(
            "no node in {} has {} GPUs",
            regions.join(", "),
            sku.gpu_model
        )
    } else {
        let ruled_out = ruled_out(sku, &reasons);
        format!(
            "no node fits {} × {} in {}; of {in_scope} node(s) with this GPU: {}",
            sku.gpu_count,
            sku.gpu_model,
            regions.join(", "),
            if ruled_out.is_empty() {
                "all were taken meanwhile (retry)".to_string()
            } else {
                ruled_out.join(", ")
            }
        )
    };
    let mut instead = Vec::new();
    if sku.shape == Shape::GpuSlice
        && let Some(smaller) = smaller_slice_here(&mut *conn, sku, regions).await?
    {
        instead.push(smaller);
    }
    let elsewhere = regions_elsewhere(&mut *conn, sku, regions).await?;
    if !elsewhere.is_empty() {
        instead.push(format!("this shape in {}", elsewhere.join(", ")));
    }
    if !instead.is_empty() {
        text.push_str(&format!(". What would fit instead: {}", instead.join("; ")));
    }
    Ok(text)
}

/// The nodes with this SKU's GPU, counted by the first constraint that rules each out
/// (`fits` for none).
async fn nodes_by_reason(
    conn: &mut PgConnection,
    sku: &Sku,
    regions: &[String],
) -> Result<Vec<(String, i64)>> {
    let per = sku.per_gpu();
    let rows = sqlx::query!(
        r#"SELECT reason AS "reason!", count(*) AS "nodes!" FROM (
               SELECT CASE
                   WHEN NOT n.region = ANY($3) THEN 'region'
                   WHEN NOT n.family = ANY($4) THEN 'family'
                   WHEN NOT $5 = ANY(n.capacity_shapes) THEN 'shape'
                   WHEN n.admin_state <> 'active' THEN n.admin_state
                   WHEN NOT node_sells(n, $5) THEN 'unhealthy'
                   WHEN $5 = 'baremetal' AND b.live_slots < $2 THEN 'too_few_gpus'
                   WHEN $5 = 'baremetal' AND NOT b.whole_node_free THEN 'in_use'
                   WHEN $5 = 'gpu_slice' AND (b.min_vcpus < $6 OR b.min_memory_mib < $7
                                              OR b.min_nvme_bytes < $8) THEN 'too_small'
                   WHEN $5 = 'gpu_slice' AND b.free_blocks = 0 AND b.free_slots >= $2
                       THEN 'fragmented'
                   WHEN $5 = 'gpu_slice' AND b.free_blocks = 0 THEN 'too_few_free'
                   ELSE 'fits'
               END AS reason
               FROM node_free_blocks b JOIN nodes n ON n.id = b.node_id
               WHERE b.gpu_model = $1
                 AND b.block_size = CASE WHEN $5 = 'baremetal' THEN 1 ELSE $2 END
           ) r GROUP BY reason ORDER BY reason"#,
        sku.gpu_model,
        sku.gpu_count,
        regions,
        &sku.families,
        sku.shape.as_str(),
        per.vcpus,
        per.memory_mib,
        per.nvme_bytes,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.reason, r.nodes)).collect())
}

/// "3 draining", "1 with fewer than 8 GPUs", …: each constraint that ruled nodes out.
fn ruled_out(sku: &Sku, reasons: &[(String, i64)]) -> Vec<String> {
    let per = sku.per_gpu();
    let count = |r: &str| {
        reasons
            .iter()
            .find(|(reason, _)| reason == r)
            .map_or(0, |(_, n)| *n)
    };
    let mut ruled_out = Vec::new();
    let mut say = |n: i64, what: String| {
        if n > 0 {
            ruled_out.push(format!("{n} {what}"));
        }
    };
    say(
        count("family"),
        format!(
            "of another node family (this SKU uses {})",
            sku.families.join(", ")
        ),
    );
    say(
        count("shape"),
        format!("not sold as {}", sku.shape.as_str()),
    );
    say(count("draining"), "draining".into());
    say(count("cordoned"), "cordoned".into());
    say(
        count("unhealthy"),
        "without a recent heartbeat or unhealthy".into(),
    );
    say(
        count("too_few_gpus"),
        format!("with fewer than {} GPUs", sku.gpu_count),
    );
    say(
        count("in_use"),
        "partly in use or waiting for cleanup".into(),
    );
    say(
        count("too_small"),
        format!(
            "whose slots are smaller than {} vCPUs / {} MiB / {} GiB NVMe per GPU",
            per.vcpus,
            per.memory_mib,
            per.nvme_bytes >> 30
        ),
    );
    say(
        count("fragmented"),
        format!(
            "with at least {} free GPUs but no free NVLink partition of {}",
            sku.gpu_count, sku.gpu_count
        ),
    );
    say(
        count("too_few_free"),
        format!("with fewer than {} free GPUs", sku.gpu_count),
    );
    ruled_out
}

/// The largest smaller slice that fits here now, and how many (counted in one statement).
async fn smaller_slice_here(
    conn: &mut PgConnection,
    sku: &Sku,
    regions: &[String],
) -> Result<Option<String>> {
    let per = sku.per_gpu();
    let probes: Vec<Sku> = [4, 2, 1]
        .into_iter()
        .filter(|&c| c < sku.gpu_count)
        .map(|smaller| Sku {
            gpu_count: smaller,
            vcpus: per.vcpus * smaller,
            memory_gib: ((per.memory_mib * smaller as i64) / 1024) as i32,
            nvme_gib: ((per.nvme_bytes * smaller as i64) >> 30) as i32,
            regions: regions.to_vec(),
            ..sku.clone()
        })
        .collect();
    let counts = availability_of_each(&mut *conn, &probes).await?;
    let fits = probes
        .iter()
        .zip(counts)
        .map(|(probe, found)| (probe.gpu_count, found.iter().map(|r| r.1).sum::<i64>()))
        .find(|&(_, n)| n > 0);
    Ok(fits.map(|(smaller, n)| format!("{n} × {smaller}-GPU slice(s) here")))
}

/// Other regions where this SKU's shape fits now.
async fn regions_elsewhere(
    conn: &mut PgConnection,
    sku: &Sku,
    regions: &[String],
) -> Result<Vec<String>> {
    let elsewhere: Vec<String> = sqlx::query_scalar!(
        r#"SELECT DISTINCT n.region AS "region!"
           FROM node_free_blocks b JOIN nodes n ON n.id = b.node_id
           WHERE b.gpu_model = $1
             AND CASE WHEN $3 = 'baremetal' THEN b.block_size = 1 AND b.whole_node_free AND b.live_slots >= $2
                      ELSE b.block_size = $2 AND b.free_blocks > 0 END
             AND NOT n.region = ANY($4) AND node_sells(n, $3)
           ORDER BY 1"#,
        sku.gpu_model,
        sku.gpu_count,
        sku.shape.as_str(),
        regions,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(elsewhere)
}

/// Nothing to reserve: the dry run's [`Reserve`].
struct DryRun;
impl Reserve for DryRun {
    async fn reserve(&mut self, _: &mut PgConnection, _: &Placement) -> Result<()> {
        Ok(())
    }
}

/// What the control plane offers for placement.
#[allow(async_fn_in_trait)]
pub trait PlacementApi {
    /// "Where would this go, and why", without reserving anything: the same placement in a
    /// transaction that is rolled back.
    async fn placement_dry_run(
        &self,
        _who: &Platform<PlatformOperators>,
        sku_name: &str,
        region: Option<&str>,
    ) -> Result<Placement>;
}

impl PlacementApi for ControlPlane {
    #[tracing::instrument(skip_all, fields(sku.name = %sku_name))]
    async fn placement_dry_run(
        &self,
        _who: &Platform<PlatformOperators>,
        sku_name: &str,
        region: Option<&str>,
    ) -> Result<Placement> {
        let mut tx = self.pool().begin().await?;
        let sku = sku_by_name(&mut tx, sku_name).await?;
        let regions = match region.map(str::trim).filter(|r| !r.is_empty()) {
            Some(r) if sku.regions.iter().any(|x| x == r) => vec![r.to_string()],
            Some(r) => {
                return Err(Error::Invalid {
                    field: "region",
                    reason: format!(
                        "{} is sold in {}, not {r}",
                        sku.name,
                        sku.regions.join(", ")
                    ),
                });
            }
            None => sku.regions.clone(),
        };
        let placed = place(
            &mut tx,
            &sku,
            &regions,
            &mut DryRun,
            self.contention_deadline(),
            self.refusal_reasons(),
        )
        .await;
        tx.rollback().await?;
        placed
    }
}
