-- Placement's candidate queries order by (free_slots, node_id) and stop after a few dozen rows.
-- The indexes had only free_slots, so every launch sorted the whole group of equally free nodes
-- by id: on an empty 10,000-node fleet the candidate query took ~100 ms and was 90% of the
-- database's time during a placement benchmark (pg_stat_statements, #22). With node_id in the
-- index the order is the index's own and the scan stops at the limit.
DROP INDEX node_free_blocks_fit;
CREATE INDEX node_free_blocks_fit ON node_free_blocks (gpu_model, block_size, free_slots, node_id)
    WHERE free_blocks > 0;
DROP INDEX node_free_blocks_whole;
CREATE INDEX node_free_blocks_whole ON node_free_blocks (gpu_model, live_slots, node_id)
    WHERE whole_node_free AND block_size = 1;

-- The claim trigger serialises claimers of one node on the node's row. FOR UPDATE also blocked
-- the key-share lock every foreign key naming the node takes (an agent task, an allocation, a
-- heartbeat's writes), so those waited for unrelated placements; FOR NO KEY UPDATE serialises
-- the claimers just the same (#22, as the application's own node locks since 2026-11-26).
CREATE OR REPLACE FUNCTION resource_claims_exclusive() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.released_at IS NOT NULL THEN
        RETURN NEW;
    END IF;
    PERFORM 1 FROM nodes WHERE id = NEW.node_id FOR NO KEY UPDATE;
    IF NEW.slot_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM node_resource_slots s WHERE s.id = NEW.slot_id AND s.node_id = NEW.node_id
    ) THEN
        RAISE EXCEPTION 'slot % is not on node %', NEW.slot_id, NEW.node_id;
    END IF;
    IF EXISTS (
        SELECT 1 FROM resource_claims c
        WHERE c.node_id = NEW.node_id AND c.released_at IS NULL AND c.id <> NEW.id
          AND (c.kind = 'baremetal' OR NEW.kind = 'baremetal')
    ) THEN
        RAISE EXCEPTION 'node % is claimed: a bare-metal claim excludes every other claim', NEW.node_id
            USING ERRCODE = 'exclusion_violation';
    END IF;
    RETURN NEW;
END;
$$;
