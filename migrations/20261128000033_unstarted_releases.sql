-- A release that no host ever saw ends at once (#22).
--
-- A release cancels the allocation's provision if no agent has claimed it yet, and then waited
-- for the node's agent to wipe slots that no host had touched: the release task queued behind
-- whatever the agent was doing, and the slots stayed out of service until its proof came back.
-- Under load that was most releases (at 100 launches/s on the dispatch benchmark, 477 of 1,001
-- provisions were cancelled unclaimed); with an agent that is down, the slots waited for it to
-- return; on real hardware a wipe takes minutes.
--
-- Now a task cancelled before any agent claimed it keeps `claimed_at` empty, so the database
-- knows which allocations no host ever had a task of. Ending such an allocation's claims leaves
-- its slots clean (they were clean when it claimed them, and nothing has run on them since);
-- every other release still sends them to `cleaning`, to come back only with a proof.

ALTER TABLE agent_tasks DROP CONSTRAINT agent_tasks_check;
-- Queued: never claimed; running or succeeded: claimed; failed: either (a task cancelled
-- before any agent claimed it never was).
ALTER TABLE agent_tasks ADD CONSTRAINT agent_tasks_claimed CHECK (
    (state = 'queued') <= (claimed_at IS NULL)
    AND (state IN ('running', 'succeeded')) <= (claimed_at IS NOT NULL));

-- Whether an agent ever had a task of an allocation.
CREATE INDEX agent_tasks_handed ON agent_tasks (allocation_id)
    WHERE allocation_id IS NOT NULL AND claimed_at IS NOT NULL;

CREATE OR REPLACE FUNCTION resource_claims_release_cleans() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.released_at IS NULL AND NEW.released_at IS NOT NULL
       AND EXISTS (SELECT 1 FROM agent_tasks t
                   WHERE t.allocation_id = NEW.allocation_id AND t.claimed_at IS NOT NULL) THEN
        UPDATE node_resource_slots
           SET cleanup_state = 'cleaning',
               cleanup_detail = 'waiting for the cleanup proof of allocation ' || NEW.allocation_id
         WHERE node_id = NEW.node_id AND retired_at IS NULL
           AND (id = NEW.slot_id OR NEW.slot_id IS NULL)
           AND cleanup_state = 'clean';
    END IF;
    RETURN NEW;
END;
$$;
