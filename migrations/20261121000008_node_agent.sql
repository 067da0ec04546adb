-- What guests report through their node's telemetry sink, aggregated by the agent and sent
-- with its heartbeat: one row per allocation per heartbeat that carried reports.
CREATE TABLE allocation_gpu_utilisation (
    allocation_id uuid NOT NULL REFERENCES allocations (id),
    node_id       uuid NOT NULL REFERENCES nodes (id),
    at            timestamptz NOT NULL DEFAULT now(),
    gpu_util_pct  smallint NOT NULL CHECK (gpu_util_pct BETWEEN 0 AND 100),
    samples       integer NOT NULL CHECK (samples > 0),
    PRIMARY KEY (allocation_id, at)
);

-- A node may only report for allocations placed on it.
CREATE FUNCTION allocation_gpu_utilisation_own_node() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM allocations WHERE id = NEW.allocation_id AND node_id = NEW.node_id) THEN
        RAISE EXCEPTION 'allocation % is not on node %', NEW.allocation_id, NEW.node_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER allocation_gpu_utilisation_own_node BEFORE INSERT ON allocation_gpu_utilisation
    FOR EACH ROW EXECUTE FUNCTION allocation_gpu_utilisation_own_node();

-- Agents list their claimed, unfinished tasks when they restart.
CREATE INDEX agent_tasks_running ON agent_tasks (node_id) WHERE state = 'running';

-- What the proof now also covers: how long the wipe took, how many read-back samples the
-- verification checked, and the GPU firmware seen after the reset. NULL on older rows.
ALTER TABLE cleanup_certificates
    ADD COLUMN wipe_ms bigint CHECK (wipe_ms >= 0),
    ADD COLUMN verified_samples integer CHECK (verified_samples > 0),
    ADD COLUMN gpu_firmware text CHECK (length(gpu_firmware) BETWEEN 1 AND 200);
