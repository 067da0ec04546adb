-- A cheaper free-block refresh (#22).
--
-- `refresh_node_free_blocks` runs on every change to a node's claims or slots: a launch's
-- claim, the release's end of the claims and the slots going to `cleaning` (twice: the row
-- trigger that sends the slots to cleaning refreshes, then the claims' own statement trigger
-- refreshes again), the proof that cleans them. It deleted the node's rows and inserted them
-- again each time, so every refresh paid a foreign-key check per row, four index insertions
-- per row and dead rows, whether anything had changed or not; and each slot's vCPUs were
-- counted from its `cpu_set` text by a SQL function that is not inlined (~40 µs a slot).
-- Measured on the dispatch benchmark's fleet (8-slot nodes): 1–2 ms a refresh, and up to
-- 2.2 ms once the node's rows had bloated within a transaction; ~4 refreshes per launch and
-- release, the largest share of the database's CPU at 100 launches/s.
--
-- Now the refresh computes the node's rows first and compares them with what is stored:
-- equal, it writes nothing (the second refresh of a release); different, it updates the rows
-- whose key stays in place and deletes or inserts only the keys that came or went. The vCPU
-- count is a stored column of the slot. Same machine: 0.18–0.31 ms when nothing changed,
-- ~0.5 ms for a slot's change with its triggers.

ALTER TABLE node_resource_slots
    ADD COLUMN vcpus integer GENERATED ALWAYS AS (cpu_count(cpu_set)) STORED;

CREATE OR REPLACE FUNCTION refresh_node_free_blocks(node uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    n nodes;
    before node_free_blocks[];
    after node_free_blocks[];
BEGIN
    SELECT * INTO n FROM nodes WHERE id = node;
    SELECT array_agg(b ORDER BY b.gpu_model, b.block_size) INTO before
    FROM node_free_blocks b WHERE b.node_id = node;
    WITH live AS (
        SELECT s.id, s.gpu_model, s.vcpus, s.memory_mib, s.nvme_size_bytes,
               s.drift IS NULL AND s.cleanup_state = 'clean' AND s.out_of_service_event IS NULL
                   AS usable,
               EXISTS (SELECT 1 FROM resource_claims c
                       WHERE c.node_id = node AND c.released_at IS NULL
                         AND (c.slot_id = s.id OR c.kind = 'baremetal')) AS claimed
        FROM node_resource_slots s
        WHERE s.node_id = node AND s.retired_at IS NULL
    ), facts AS (
        SELECT EXISTS (SELECT 1 FROM node_fabric_partitions WHERE node_id = node) AS partitioned,
               NOT EXISTS (SELECT 1 FROM resource_claims
                           WHERE node_id = node AND released_at IS NULL)
               AND NOT EXISTS (SELECT 1 FROM live WHERE NOT usable) AS whole
    ), per_model AS (
        SELECT gpu_model, count(*)::int AS live_slots,
               count(*) FILTER (WHERE usable AND NOT claimed)::int AS free_slots,
               min(vcpus)::int AS min_vcpus, min(memory_mib) AS min_memory_mib,
               min(nvme_size_bytes) AS min_nvme_bytes
        FROM live GROUP BY gpu_model
    )
    SELECT array_agg(ROW(
               node, m.gpu_model, b.size,
               CASE
                   WHEN b.size = 1 THEN m.free_slots
                   WHEN NOT f.partitioned THEN m.free_slots / b.size
                   ELSE (SELECT count(*)::int FROM node_fabric_partitions p
                         WHERE p.node_id = node AND cardinality(p.slot_ids) = b.size
                           AND NOT EXISTS (SELECT 1 FROM unnest(p.slot_ids) AS ps (id)
                                           WHERE NOT EXISTS (SELECT 1 FROM live l
                                                             WHERE l.id = ps.id AND l.usable
                                                               AND NOT l.claimed
                                                               AND l.gpu_model = m.gpu_model)))
               END,
               m.free_slots, m.live_slots, f.whole, m.min_vcpus, m.min_memory_mib,
               m.min_nvme_bytes)::node_free_blocks ORDER BY m.gpu_model, b.size)
    INTO after
    FROM per_model m CROSS JOIN facts f CROSS JOIN (VALUES (1), (2), (4), (8)) AS b (size);
    IF before IS NOT DISTINCT FROM after THEN
        RETURN;
    END IF;
    -- In place where the key stays (no foreign-key check, no index entry for an unchanged
    -- key), and only the rows that differ.
    DELETE FROM node_free_blocks t
    WHERE t.node_id = node
      AND NOT EXISTS (SELECT 1 FROM unnest(after) a
                      WHERE a.gpu_model = t.gpu_model AND a.block_size = t.block_size);
    UPDATE node_free_blocks t
    SET free_blocks = a.free_blocks, free_slots = a.free_slots, live_slots = a.live_slots,
        whole_node_free = a.whole_node_free, min_vcpus = a.min_vcpus,
        min_memory_mib = a.min_memory_mib, min_nvme_bytes = a.min_nvme_bytes
    FROM unnest(after) a
    WHERE t.node_id = node AND t.gpu_model = a.gpu_model AND t.block_size = a.block_size
      AND (t.*) IS DISTINCT FROM (a.*);
    INSERT INTO node_free_blocks
    SELECT a.* FROM unnest(after) a
    WHERE NOT EXISTS (SELECT 1 FROM unnest(before) o
                      WHERE o.gpu_model = a.gpu_model AND o.block_size = a.block_size);
    IF node_sells_stored(n, 'gpu_slice') OR node_sells_stored(n, 'baremetal') THEN
        INSERT INTO availability_changes SELECT * FROM availability_change(n, before, n, after);
    END IF;
END;
$$;
