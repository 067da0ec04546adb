-- Less work in the database per launch and release (#22), the same rules.
--
-- Measured with `track_functions = all` on the dispatch benchmark (200 launches/s, 40 nodes,
-- 2,001 launch-and-release cycles in 10 s): the database was 85% of the machine's CPU, and of
-- its time, per cycle:
--   - 4.2 free-block refreshes, 0.59 ms each; one of them always finds nothing to change (a
--     release that sends its slots to `cleaning` refreshes the node from the slots' trigger
--     and again from the claims' trigger, in one statement);
--   - `published_ports_ok`, the allocations' check, 5 calls at 0.09 ms: a SQL function with
--     an aggregate is never inlined, so every statement that writes an allocation plans it
--     again, although almost every allocation publishes no port;
--   - `cpu_count`, 2 calls at 0.12 ms, the same way: the slots' stored vCPU count is
--     computed again on every update of a slot (its cleanup state, twice a cycle);
--   - `usage_intervals_from_lifecycle`, 7 calls at 0.07 ms, one per transition, of which
--     only the two into and out of `running` do anything; likewise `resource_claims_exclusive`
--     on a claim's end and `slots_clean_needs_proof` on a slot's way to `cleaning`, whose
--     functions return at once.

-- Same answers; PL/pgSQL keeps its plan for the session, and no ports is answered at once.
CREATE OR REPLACE FUNCTION published_ports_ok(ports integer[]) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
BEGIN
    IF cardinality(ports) = 0 THEN
        RETURN true;
    END IF;
    RETURN cardinality(ports) <= 7
       AND (SELECT coalesce(bool_and(p BETWEEN 1 AND 65535 AND p <> 22), true)
                   AND count(DISTINCT p) = count(p)
            FROM unnest(ports) AS p);
END;
$$;

-- Same answers (a NULL or empty set counts 0; a range `a-b` counts b - a + 1), without a
-- query.
CREATE OR REPLACE FUNCTION cpu_count(cpus text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    r text;
    n integer := 0;
BEGIN
    IF cpus IS NULL THEN
        RETURN 0;
    END IF;
    FOREACH r IN ARRAY string_to_array(cpus, ',') LOOP
        IF r LIKE '%-%' THEN
            n := n + split_part(r, '-', 2)::int - split_part(r, '-', 1)::int + 1;
        ELSE
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END;
$$;

DROP TRIGGER usage_intervals_from_lifecycle ON allocation_transitions;
CREATE TRIGGER usage_intervals_from_lifecycle AFTER INSERT ON allocation_transitions
    FOR EACH ROW
    WHEN (NEW.to_state = 'running' OR NEW.from_state = 'running')
    EXECUTE FUNCTION usage_intervals_from_lifecycle();

DROP TRIGGER resource_claims_exclusive ON resource_claims;
CREATE TRIGGER resource_claims_exclusive BEFORE INSERT OR UPDATE ON resource_claims
    FOR EACH ROW
    WHEN (NEW.released_at IS NULL)
    EXECUTE FUNCTION resource_claims_exclusive();

DROP TRIGGER slots_clean_needs_proof ON node_resource_slots;
CREATE TRIGGER slots_clean_needs_proof BEFORE UPDATE OF cleanup_state ON node_resource_slots
    FOR EACH ROW
    WHEN (OLD.cleanup_state <> 'clean' AND NEW.cleanup_state = 'clean')
    EXECUTE FUNCTION slots_clean_needs_proof();

-- A release's claims end and, in the same statement, their slots go to `cleaning` (the row
-- trigger below). The claims' statement trigger refreshes every node whose claims changed,
-- after the row triggers, so the slots' own refresh of that node, in between, is skipped:
-- the release says so for the length of its one update, in a setting local to the
-- transaction.
CREATE OR REPLACE FUNCTION node_free_blocks_on_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'node_resource_slots'
       AND current_setting('portal.claims_refresh_follows', true) = 'on' THEN
        RETURN NULL;
    END IF;
    PERFORM refresh_node_free_blocks(n.node_id)
    FROM (SELECT node_id FROM changed_rows GROUP BY node_id ORDER BY node_id) AS n;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION resource_claims_release_cleans() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.released_at IS NULL AND NEW.released_at IS NOT NULL
       AND EXISTS (SELECT 1 FROM agent_tasks t
                   WHERE t.allocation_id = NEW.allocation_id AND t.claimed_at IS NOT NULL) THEN
        -- Only slots of NEW.node_id, whose claim is in the statement's changed rows.
        PERFORM set_config('portal.claims_refresh_follows', 'on', true);
        UPDATE node_resource_slots
           SET cleanup_state = 'cleaning',
               cleanup_detail = 'waiting for the cleanup proof of allocation ' || NEW.allocation_id
         WHERE node_id = NEW.node_id AND retired_at IS NULL
           AND (id = NEW.slot_id OR NEW.slot_id IS NULL)
           AND cleanup_state = 'clean';
        PERFORM set_config('portal.claims_refresh_follows', 'off', true);
    END IF;
    RETURN NEW;
END;
$$;
