-- GPU health (#23): the events agents report with their heartbeats (XID errors, uncorrectable
-- ECC errors, thermal slowdown), the fleet's policy for them, and slots taken out of service.
-- A slot out of service is not placed (free blocks, placement's own query, the posture
-- view); an operator returns it to service, audited. Its running allocation is not stopped:
-- the tenant is told on the allocation page and decides.

-- The one fleet-wide policy: which events take a GPU's slot out of service. The defaults are
-- the XIDs NVIDIA documents as needing a GPU reset or worse (48 double-bit ECC, 63/64 row
-- remapping, 74 NVLink, 79 fallen off the bus) and uncorrectable ECC errors.
CREATE TABLE gpu_health_policy (
    id                boolean PRIMARY KEY DEFAULT true CHECK (id),
    xid_codes         integer[] NOT NULL CHECK (
        cardinality(xid_codes) <= 64 AND array_position(xid_codes, NULL) IS NULL
        AND 1 <= ALL (xid_codes) AND 999 >= ALL (xid_codes)),
    ecc_uncorrectable boolean NOT NULL,
    thermal           boolean NOT NULL,
    updated_by        uuid REFERENCES users (id),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
INSERT INTO gpu_health_policy (xid_codes, ecc_uncorrectable, thermal)
VALUES ('{48,63,64,74,79}', true, false);

CREATE TABLE gpu_health_events (
    id                  uuid PRIMARY KEY,
    node_id             uuid NOT NULL REFERENCES nodes (id),
    -- The agent's id for the event: a heartbeat retried after a lost answer records it once.
    agent_event_id      text NOT NULL CHECK (agent_event_id ~ '^[A-Za-z0-9_-]{1,64}$'),
    gpu_pci_address     text NOT NULL
                        CHECK (gpu_pci_address ~ '^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$'),
    -- The live slot of that GPU when the event was recorded (none: a GPU not approved to sell).
    slot_id             uuid REFERENCES node_resource_slots (id),
    kind                text NOT NULL CHECK (kind IN ('xid', 'ecc_uncorrectable', 'thermal')),
    xid                 integer CHECK (xid BETWEEN 1 AND 999),
    detail              text NOT NULL CHECK (length(detail) <= 500 AND detail !~ '[[:cntrl:]]'),
    observed_at         timestamptz NOT NULL,
    recorded_at         timestamptz NOT NULL DEFAULT now(),
    took_out_of_service boolean NOT NULL,
    CHECK ((kind = 'xid') = (xid IS NOT NULL)),
    CHECK (NOT took_out_of_service OR slot_id IS NOT NULL),
    UNIQUE (node_id, agent_event_id),
    UNIQUE (id, slot_id)
);
CREATE INDEX gpu_health_events_node ON gpu_health_events (node_id, recorded_at DESC);
CREATE INDEX gpu_health_events_slot ON gpu_health_events (slot_id, recorded_at DESC)
    WHERE slot_id IS NOT NULL;

-- Events are evidence: never changed or removed.
CREATE FUNCTION gpu_health_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'GPU health events are append-only' USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER gpu_health_events_append_only
    BEFORE UPDATE OR DELETE ON gpu_health_events
    FOR EACH ROW EXECUTE FUNCTION gpu_health_events_append_only();
CREATE TRIGGER gpu_health_events_no_truncate
    BEFORE TRUNCATE ON gpu_health_events
    FOR EACH STATEMENT EXECUTE FUNCTION gpu_health_events_append_only();

-- Out of service because of this event, which must be an event of this very slot.
ALTER TABLE node_resource_slots
    ADD COLUMN out_of_service_event uuid,
    ADD COLUMN out_of_service_at timestamptz,
    ADD CONSTRAINT slot_out_of_service_event
        FOREIGN KEY (out_of_service_event, id) REFERENCES gpu_health_events (id, slot_id),
    ADD CONSTRAINT slot_out_of_service_when
        CHECK ((out_of_service_event IS NULL) = (out_of_service_at IS NULL));

-- Free blocks: a slot out of service is neither free nor part of a free whole node.
CREATE OR REPLACE FUNCTION refresh_node_free_blocks(node uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    partitioned boolean;
    whole boolean;
BEGIN
    partitioned := EXISTS (SELECT 1 FROM node_fabric_partitions WHERE node_id = node);
    whole := NOT EXISTS (SELECT 1 FROM resource_claims WHERE node_id = node AND released_at IS NULL)
         AND NOT EXISTS (SELECT 1 FROM node_resource_slots
                         WHERE node_id = node AND retired_at IS NULL
                           AND (drift IS NOT NULL OR cleanup_state <> 'clean'
                                OR out_of_service_event IS NOT NULL));
    DELETE FROM node_free_blocks WHERE node_id = node;
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
    )
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
    FROM per_model m CROSS JOIN (VALUES (1), (2), (4), (8)) AS b (size);
END;
$$;

-- The posture view: slots out of service are not schedulable, and are counted (a new last
-- column; the rest is as in 20261121000006_fleet.sql).
CREATE OR REPLACE VIEW node_postures AS
SELECT
    n.id AS node_id,
    s.live_slots,
    s.schedulable_slots,
    s.drifted_slots,
    s.blocked_slots,
    c.slice_claims,
    c.baremetal_claims,
    p.posture,
    p.reason,
    s.out_of_service_slots
FROM nodes n
CROSS JOIN LATERAL (
    SELECT
        count(*)::int AS live_slots,
        count(*) FILTER (WHERE drift IS NULL AND cleanup_state = 'clean'
                               AND out_of_service_event IS NULL)::int AS schedulable_slots,
        count(*) FILTER (WHERE drift IS NOT NULL)::int AS drifted_slots,
        count(*) FILTER (WHERE cleanup_state = 'blocked')::int AS blocked_slots,
        count(*) FILTER (WHERE out_of_service_event IS NOT NULL)::int AS out_of_service_slots
    FROM node_resource_slots WHERE node_id = n.id AND retired_at IS NULL
) s
CROSS JOIN LATERAL (
    SELECT
        count(*) FILTER (WHERE kind = 'gpu_slice')::int AS slice_claims,
        count(*) FILTER (WHERE kind = 'baremetal')::int AS baremetal_claims,
        count(*) FILTER (WHERE kind = 'gpu_slice' AND slot_id IN (
            SELECT id FROM node_resource_slots
            WHERE node_id = n.id AND retired_at IS NULL AND drift IS NULL AND cleanup_state = 'clean'
              AND out_of_service_event IS NULL
        ))::int AS schedulable_claimed
    FROM resource_claims WHERE node_id = n.id AND released_at IS NULL
) c
CROSS JOIN LATERAL (
    SELECT * FROM (VALUES (
        CASE
            WHEN n.admin_state = 'cordoned' THEN 'unavailable'
            WHEN n.last_heartbeat_at IS NULL THEN 'unavailable'
            WHEN n.last_heartbeat_at < now() - interval '60 seconds' THEN 'unavailable'
            WHEN n.health = 'degraded' THEN 'unavailable'
            WHEN s.blocked_slots > 0 THEN 'cleanup_blocked'
            WHEN n.admin_state = 'draining' THEN 'draining'
            WHEN c.baremetal_claims > 0 THEN 'exclusively_allocated_baremetal'
            WHEN c.slice_claims > 0 AND c.schedulable_claimed >= s.schedulable_slots
                THEN 'fully_allocated_slices'
            WHEN c.slice_claims > 0 THEN 'partially_allocated'
            WHEN s.schedulable_slots = 0 THEN 'unavailable'
            ELSE 'fully_available'
        END,
        CASE
            WHEN n.admin_state = 'cordoned' THEN 'cordoned by an operator'
            WHEN n.last_heartbeat_at IS NULL THEN 'the agent has not reported yet'
            WHEN n.last_heartbeat_at < now() - interval '60 seconds'
                THEN 'no heartbeat since ' || to_char(n.last_heartbeat_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'
            WHEN n.health = 'degraded' THEN 'the agent reports degraded health: ' || coalesce(n.health_detail, 'no detail')
            WHEN s.blocked_slots > 0 THEN s.blocked_slots || ' slot(s) wait for a cleanup proof'
            WHEN n.admin_state = 'draining' THEN 'draining: running work continues, nothing new is placed'
            WHEN c.baremetal_claims > 0 THEN 'leased whole'
            WHEN c.slice_claims > 0 AND c.schedulable_claimed >= s.schedulable_slots
                THEN 'every schedulable slot is claimed'
            WHEN c.slice_claims > 0 THEN c.slice_claims || ' of ' || s.schedulable_slots || ' slots claimed'
            WHEN s.schedulable_slots = 0 AND s.out_of_service_slots > 0
                THEN 'every approved slot is out of service (GPU health)'
            WHEN s.schedulable_slots = 0 THEN 'no approved, schedulable slots'
            ELSE 'ready'
        END
    )) AS v (posture, reason)
) p;
