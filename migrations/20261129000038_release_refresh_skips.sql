-- A release whose slots went to `cleaning` does not refresh its node's free blocks (#22).
--
-- When a claim ends at a wipe's start, the row trigger `resource_claims_release_cleans` sends
-- its slots from `clean` to `cleaning` in the same statement, and the statement trigger then
-- refreshed the node. That refresh never finds a change: the slot was not free before (it
-- was claimed) and is not free after (it is not clean), the node was not wholly free before
-- (a claim was live) and is not after (a slot is not clean), and the live slots and their
-- smallest sizes do not depend on claims. Yet it costs a full recount of the node (~0.5 ms),
-- once for every release the agent wipes.
--
-- So the claims' update trigger now refreshes a node only if one of the statement's changed
-- claims on it is not such an end: a claim that is still live, one whose node, slot or end
-- changed any other way, or one with a slot of it still `clean` afterwards (a release no
-- host saw, which ends at once and frees its slots now). Anything it can't be sure of is
-- refreshed as before. The wipe's result (`cleaning` to `clean`) still refreshes the node
-- through the slots' trigger, and that is when the slots come back.

CREATE OR REPLACE FUNCTION node_free_blocks_on_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'node_resource_slots'
       AND current_setting('portal.claims_refresh_follows', true) = 'on' THEN
        RETURN NULL;
    END IF;
    IF TG_TABLE_NAME = 'resource_claims' AND TG_OP = 'UPDATE' THEN
        PERFORM refresh_node_free_blocks(n.node_id)
        FROM (SELECT x.node_id
              FROM changed_rows c JOIN old_rows o ON o.id = c.id
                   CROSS JOIN LATERAL (VALUES (c.node_id), (o.node_id)) AS x (node_id)
              WHERE NOT (o.released_at IS NULL AND c.released_at IS NOT NULL
                         AND o.node_id = c.node_id
                         AND o.slot_id IS NOT DISTINCT FROM c.slot_id
                         AND NOT EXISTS (SELECT 1 FROM node_resource_slots s
                                         WHERE s.node_id = c.node_id
                                           AND s.retired_at IS NULL
                                           AND (s.id = c.slot_id OR c.slot_id IS NULL)
                                           AND s.cleanup_state = 'clean'))
              GROUP BY x.node_id ORDER BY x.node_id) AS n;
        RETURN NULL;
    END IF;
    PERFORM refresh_node_free_blocks(n.node_id)
    FROM (SELECT node_id FROM changed_rows GROUP BY node_id ORDER BY node_id) AS n;
    RETURN NULL;
END;
$$;

DROP TRIGGER resource_claims_free_blocks_upd ON resource_claims;
CREATE TRIGGER resource_claims_free_blocks_upd AFTER UPDATE ON resource_claims
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION node_free_blocks_on_change();
