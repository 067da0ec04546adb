-- Catalog availability that does not grow with the fleet (#22).
--
-- The catalog summed `node_free_blocks` over every node of a SKU's GPU model on every load:
-- O(nodes). Now the database keeps what each node could launch as a log of changes,
-- `availability_changes`, written by the same refresh that keeps `node_free_blocks` (and by a
-- trigger on the node's own selling state), so the catalog adds up a handful of rows per SKU.
-- `compact_availability_changes()` folds the log into one row per key (every second, by any
-- replica); `rebase_availability_changes()` replaces it with a fresh count from the nodes
-- themselves and says by how much it was off (every minute: the log is only as right as the
-- triggers that write it, and this makes any mistake temporary and visible).
--
-- The one thing a stored count cannot follow is time: `node_sells` refuses a node whose last
-- heartbeat is older than 60 s. So a node's lapse is stored (`heartbeat_lapsed`, set by
-- `sweep_lapsed_heartbeats()` every second, cleared by the next heartbeat), and the count
-- follows that. Placement still asks `node_sells` itself, so it never takes a silent node;
-- the catalog may count one for at most a sweep after its heartbeat lapses.

ALTER TABLE nodes ADD COLUMN heartbeat_lapsed boolean NOT NULL DEFAULT false;
UPDATE nodes SET heartbeat_lapsed = true WHERE last_heartbeat_at < now() - interval '60 seconds';

-- `node_sells` without the clock: what the stored count follows.
CREATE FUNCTION node_sells_stored(n nodes, shape text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT shape = ANY(n.capacity_shapes) AND n.admin_state = 'active'
       AND n.health IS NOT DISTINCT FROM 'healthy'
       AND n.last_heartbeat_at IS NOT NULL AND NOT n.heartbeat_lapsed
$$;

-- Append-only, except for compaction and rebase: the sum of `launchable` per key is how many
-- launches of that kind could succeed now. For GPU slices `size` is the block size and the
-- minimums are the node's smallest slot; for bare metal `size` is the node's live GPUs of the
-- model and the minimums are 0 (a whole node has no per-GPU share to fit).
CREATE TABLE availability_changes (
    shape          text NOT NULL CHECK (shape IN ('gpu_slice', 'baremetal')),
    gpu_model      text NOT NULL,
    size           integer NOT NULL,
    region         text NOT NULL,
    family         text NOT NULL,
    min_vcpus      integer NOT NULL,
    min_memory_mib bigint NOT NULL,
    min_nvme_bytes bigint NOT NULL,
    launchable     bigint NOT NULL CHECK (launchable <> 0)
);

-- What node `n` adds to the count with these free blocks (`node_free_blocks` rows of `n`).
CREATE FUNCTION blocks_availability(n nodes, blocks node_free_blocks[])
RETURNS TABLE (shape text, gpu_model text, size integer, region text, family text,
               min_vcpus integer, min_memory_mib bigint, min_nvme_bytes bigint,
               launchable bigint)
LANGUAGE sql STABLE AS $$
    SELECT 'gpu_slice', b.gpu_model, b.block_size, n.region, n.family, b.min_vcpus,
           b.min_memory_mib, b.min_nvme_bytes, b.free_blocks::bigint
    FROM unnest(blocks) AS b
    WHERE b.free_blocks > 0 AND node_sells_stored(n, 'gpu_slice')
    UNION ALL
    SELECT 'baremetal', b.gpu_model, b.live_slots, n.region, n.family, 0, 0, 0, 1
    FROM unnest(blocks) AS b
    WHERE b.block_size = 1 AND b.whole_node_free AND node_sells_stored(n, 'baremetal')
$$;

-- What node `n` adds to the count now.
CREATE FUNCTION node_availability(n nodes)
RETURNS TABLE (shape text, gpu_model text, size integer, region text, family text,
               min_vcpus integer, min_memory_mib bigint, min_nvme_bytes bigint,
               launchable bigint)
LANGUAGE sql STABLE AS $$
    SELECT * FROM blocks_availability(
        n, ARRAY(SELECT b FROM node_free_blocks b WHERE b.node_id = n.id))
$$;

-- A change in what `n` adds, from blocks `before` to blocks `after`, netted per key: the rows
-- to log.
CREATE FUNCTION availability_change(before_n nodes, before node_free_blocks[],
                                    after_n nodes, after node_free_blocks[])
RETURNS SETOF availability_changes
LANGUAGE sql STABLE AS $$
    SELECT c.shape, c.gpu_model, c.size, c.region, c.family, c.min_vcpus, c.min_memory_mib,
           c.min_nvme_bytes, sum(c.launchable)::bigint
    FROM (SELECT o.shape, o.gpu_model, o.size, o.region, o.family, o.min_vcpus,
                 o.min_memory_mib, o.min_nvme_bytes, -o.launchable AS launchable
          FROM blocks_availability(before_n, before) o
          UNION ALL
          SELECT * FROM blocks_availability(after_n, after)) AS c
    GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
    HAVING sum(c.launchable) <> 0
$$;

-- The refresh, as in 20261126000024_gpu_health.sql, with the node's change in availability
-- logged beside it, from the rows it deletes and the rows it writes (netted: a refresh that
-- changes nothing the catalog counts logs nothing).
CREATE OR REPLACE FUNCTION refresh_node_free_blocks(node uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    partitioned boolean;
    whole boolean;
    n nodes;
    before node_free_blocks[];
    after node_free_blocks[];
BEGIN
    SELECT * INTO n FROM nodes WHERE id = node;
    partitioned := EXISTS (SELECT 1 FROM node_fabric_partitions WHERE node_id = node);
    whole := NOT EXISTS (SELECT 1 FROM resource_claims WHERE node_id = node AND released_at IS NULL)
         AND NOT EXISTS (SELECT 1 FROM node_resource_slots
                         WHERE node_id = node AND retired_at IS NULL
                           AND (drift IS NOT NULL OR cleanup_state <> 'clean'
                                OR out_of_service_event IS NOT NULL));
    WITH gone AS (DELETE FROM node_free_blocks WHERE node_id = node RETURNING *)
    SELECT array_agg(ROW(gone.*)::node_free_blocks) INTO before FROM gone;
    WITH live AS (
        SELECT s.id, s.gpu_model, s.cpu_set, s.memory_mib, s.nvme_size_bytes,
               (s.drift IS NULL AND s.cleanup_state = 'clean' AND s.out_of_service_event IS NULL
                AND NOT EXISTS (SELECT 1 FROM resource_claims c
                                WHERE c.node_id = node AND c.released_at IS NULL
                                  AND (c.slot_id = s.id OR c.kind = 'baremetal'))) AS free
        FROM node_resource_slots s
        WHERE s.node_id = node AND s.retired_at IS NULL
    ), per_model AS (
        SELECT gpu_model, count(*)::int AS live_slots,
               count(*) FILTER (WHERE free)::int AS free_slots,
               min(cpu_count(cpu_set))::int AS min_vcpus, min(memory_mib) AS min_memory_mib,
               min(nvme_size_bytes) AS min_nvme_bytes
        FROM live GROUP BY gpu_model
    ), made AS (
        INSERT INTO node_free_blocks (node_id, gpu_model, block_size, free_blocks, free_slots,
                                      live_slots, whole_node_free, min_vcpus, min_memory_mib,
                                      min_nvme_bytes)
        SELECT node, m.gpu_model, b.size,
               CASE
                   WHEN b.size = 1 THEN m.free_slots
                   WHEN NOT partitioned THEN m.free_slots / b.size
                   ELSE (SELECT count(*)::int FROM node_fabric_partitions p
                         WHERE p.node_id = node AND cardinality(p.slot_ids) = b.size
                           AND NOT EXISTS (SELECT 1 FROM unnest(p.slot_ids) AS ps (id)
                                           WHERE NOT EXISTS (SELECT 1 FROM live l
                                                             WHERE l.id = ps.id AND l.free
                                                               AND l.gpu_model = m.gpu_model)))
               END,
               m.free_slots, m.live_slots, whole, m.min_vcpus, m.min_memory_mib, m.min_nvme_bytes
        FROM per_model m CROSS JOIN (VALUES (1), (2), (4), (8)) AS b (size)
        RETURNING *
    )
    SELECT array_agg(ROW(made.*)::node_free_blocks) INTO after FROM made;
    -- A node that sells nothing now adds nothing before or after (what it sells changes
    -- only through `nodes`, whose trigger moves its contribution).
    IF node_sells_stored(n, 'gpu_slice') OR node_sells_stored(n, 'baremetal') THEN
        INSERT INTO availability_changes SELECT * FROM availability_change(n, before, n, after);
    END IF;
END;
$$;

-- A change to what a node sells (its state, health, shapes, place, or its heartbeat lapsing
-- or coming back) moves its whole contribution.
CREATE FUNCTION nodes_availability_on_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    blocks node_free_blocks[] := ARRAY(SELECT b FROM node_free_blocks b WHERE b.node_id = NEW.id);
BEGIN
    INSERT INTO availability_changes SELECT * FROM availability_change(OLD, blocks, NEW, blocks);
    RETURN NULL;
END;
$$;
CREATE TRIGGER nodes_availability AFTER UPDATE ON nodes
    FOR EACH ROW
    WHEN (OLD.admin_state IS DISTINCT FROM NEW.admin_state
          OR OLD.health IS DISTINCT FROM NEW.health
          OR OLD.capacity_shapes IS DISTINCT FROM NEW.capacity_shapes
          OR OLD.region IS DISTINCT FROM NEW.region
          OR OLD.family IS DISTINCT FROM NEW.family
          OR OLD.heartbeat_lapsed IS DISTINCT FROM NEW.heartbeat_lapsed
          OR (OLD.last_heartbeat_at IS NULL) <> (NEW.last_heartbeat_at IS NULL))
    EXECUTE FUNCTION nodes_availability_on_change();

-- A node deleted takes its free blocks with it (ON DELETE CASCADE, no refresh): its
-- contribution leaves with it.
CREATE FUNCTION nodes_availability_on_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO availability_changes
    SELECT o.shape, o.gpu_model, o.size, o.region, o.family, o.min_vcpus, o.min_memory_mib,
           o.min_nvme_bytes, -o.launchable
    FROM node_availability(OLD) o;
    RETURN OLD;
END;
$$;
CREATE TRIGGER nodes_availability_delete BEFORE DELETE ON nodes
    FOR EACH ROW EXECUTE FUNCTION nodes_availability_on_delete();

-- Marks nodes whose heartbeat is older than 60 s as lapsed (the next heartbeat clears it).
-- Returns how many it marked.
CREATE FUNCTION sweep_lapsed_heartbeats() RETURNS bigint
LANGUAGE sql AS $$
    WITH lapsed AS (
        UPDATE nodes SET heartbeat_lapsed = true
        WHERE NOT heartbeat_lapsed AND last_heartbeat_at < now() - interval '60 seconds'
        RETURNING 1
    )
    SELECT count(*) FROM lapsed
$$;

-- One row per key instead of the changes since the last compaction. Safe beside concurrent
-- writers (READ COMMITTED: rows committed after the DELETE's snapshot stay as they are);
-- one compaction at a time (the others return at once).
CREATE FUNCTION compact_availability_changes() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    folded bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('availability_changes')) THEN
        RETURN 0;
    END IF;
    WITH gone AS (DELETE FROM availability_changes RETURNING *),
         summed AS (
             INSERT INTO availability_changes
             SELECT shape, gpu_model, size, region, family, min_vcpus, min_memory_mib,
                    min_nvme_bytes, sum(launchable)
             FROM gone GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
             HAVING sum(launchable) <> 0
             RETURNING 1)
    SELECT (SELECT count(*) FROM gone) - (SELECT count(*) FROM summed) INTO folded;
    RETURN folded;
END;
$$;

-- The changes so far: nothing had been logged, so the count starts from the nodes.
INSERT INTO availability_changes
SELECT a.shape, a.gpu_model, a.size, a.region, a.family, a.min_vcpus, a.min_memory_mib,
       a.min_nvme_bytes, sum(a.launchable)
FROM nodes n CROSS JOIN LATERAL node_availability(n) a
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
HAVING sum(a.launchable) <> 0;
