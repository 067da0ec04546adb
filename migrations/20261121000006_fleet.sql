-- Fleet: nodes, their enrolment and credentials, the agent's task queue, slot-map proposals,
-- approved slots, resource claims, and node posture (a view: derived, never stored).

CREATE TABLE nodes (
    id                uuid PRIMARY KEY,
    hostname          text NOT NULL CHECK (
        length(hostname) <= 253
        AND hostname ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$'),
    region            text NOT NULL CHECK (region ~ '^[a-z][a-z0-9-]{0,30}[a-z0-9]$'),
    rack              text NOT NULL CHECK (length(rack) BETWEEN 1 AND 64 AND rack !~ '[[:cntrl:]]'),
    family            text NOT NULL CHECK (family ~ '^[a-z0-9][a-z0-9-]{0,62}[a-z0-9]$'),
    capacity_shapes   text[] NOT NULL CHECK (
        cardinality(capacity_shapes) > 0
        AND capacity_shapes <@ ARRAY['baremetal', 'gpu_slice']::text[]),
    -- 'active', 'draining' (running work continues, no new placement) or 'cordoned'.
    admin_state       text NOT NULL DEFAULT 'active'
                      CHECK (admin_state IN ('active', 'draining', 'cordoned')),
    enrolled_by       uuid NOT NULL REFERENCES users (id),
    created_at        timestamptz NOT NULL DEFAULT now(),
    -- Filled by the agent: first credential exchange, then every heartbeat.
    agent_enrolled_at timestamptz,
    agent_version     text CHECK (length(agent_version) <= 64),
    last_heartbeat_at timestamptz,
    health            text CHECK (health IN ('healthy', 'degraded')),
    health_detail     text CHECK (length(health_detail) <= 500),
    CHECK (last_heartbeat_at IS NULL OR agent_enrolled_at IS NOT NULL),
    CHECK ((health IS NULL) = (last_heartbeat_at IS NULL))
);
CREATE UNIQUE INDEX nodes_hostname_key ON nodes (hostname);

-- One-time bootstrap tokens. Only the SHA-256 of the token is kept; it is shown once.
CREATE TABLE node_bootstrap_tokens (
    id          uuid PRIMARY KEY,
    node_id     uuid NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    token_hash  bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    created_by  uuid NOT NULL REFERENCES users (id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz,
    revoked_at  timestamptz,
    CHECK (expires_at > created_at),
    CHECK (used_at IS NULL OR revoked_at IS NULL)
);
-- At most one usable token per node: issuing a new one revokes the old in the same transaction.
CREATE UNIQUE INDEX node_bootstrap_tokens_one_open
    ON node_bootstrap_tokens (node_id) WHERE used_at IS NULL AND revoked_at IS NULL;

-- The node's own credential (hash only), separate from user sessions.
CREATE TABLE node_credentials (
    id              uuid PRIMARY KEY,
    node_id         uuid NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    credential_hash bytea NOT NULL UNIQUE CHECK (length(credential_hash) = 32),
    created_at      timestamptz NOT NULL DEFAULT now(),
    revoked_at      timestamptz
);
CREATE UNIQUE INDEX node_credentials_one_active
    ON node_credentials (node_id) WHERE revoked_at IS NULL;

-- The agent's queue: written in the transaction that decides the work, pulled by the agent.
CREATE TABLE agent_tasks (
    id           uuid PRIMARY KEY,
    node_id      uuid NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('slice.topology_discover')),
    spec         jsonb NOT NULL,
    state        text NOT NULL DEFAULT 'queued'
                 CHECK (state IN ('queued', 'running', 'succeeded', 'failed')),
    requested_by uuid REFERENCES users (id),
    created_at   timestamptz NOT NULL DEFAULT now(),
    claimed_at   timestamptz,
    finished_at  timestamptz,
    error        text,
    CHECK ((state = 'queued') = (claimed_at IS NULL)),
    CHECK ((state IN ('succeeded', 'failed')) = (finished_at IS NOT NULL)),
    CHECK ((state = 'failed') = (error IS NOT NULL))
);
CREATE INDEX agent_tasks_queued ON agent_tasks (node_id, created_at) WHERE state = 'queued';
-- One discovery at a time per node.
CREATE UNIQUE INDEX agent_tasks_one_discovery ON agent_tasks (node_id)
    WHERE kind = 'slice.topology_discover' AND state IN ('queued', 'running');

CREATE TABLE agent_task_phases (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id     uuid NOT NULL REFERENCES agent_tasks (id) ON DELETE CASCADE,
    phase       text NOT NULL CHECK (phase ~ '^[a-z][a-z0-9_]{0,62}$'),
    status      text NOT NULL CHECK (status IN ('started', 'succeeded', 'failed')),
    elapsed_ms  bigint NOT NULL CHECK (elapsed_ms >= 0),
    detail      text CHECK (length(detail) <= 2000),
    reported_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX agent_task_phases_task ON agent_task_phases (task_id, id);

-- Every discovery is a numbered proposal. Decisions are final and carry the generation.
CREATE TABLE slot_map_proposals (
    node_id         uuid NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    generation      integer NOT NULL CHECK (generation > 0),
    task_id         uuid UNIQUE REFERENCES agent_tasks (id),
    discovery       jsonb NOT NULL,
    discovered_at   timestamptz NOT NULL DEFAULT now(),
    status          text NOT NULL DEFAULT 'pending' CHECK (
        status IN ('pending', 'approved', 'partially_approved', 'rejected', 'superseded')),
    decided_by      uuid REFERENCES users (id),
    decided_at      timestamptz,
    decision_reason text CHECK (length(decision_reason) <= 1000),
    PRIMARY KEY (node_id, generation),
    CHECK ((status IN ('pending', 'superseded')) = (decided_by IS NULL)),
    CHECK ((decided_by IS NULL) = (decided_at IS NULL)),
    CHECK (status <> 'rejected' OR length(trim(decision_reason)) > 0)
);
CREATE UNIQUE INDEX slot_map_proposals_one_pending
    ON slot_map_proposals (node_id) WHERE status = 'pending';

-- A decided (or superseded) proposal never changes again: two operators cannot both win.
CREATE FUNCTION slot_map_proposal_decided_once() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status <> 'pending' THEN
        RAISE EXCEPTION 'slot map generation % of node % is already %',
            OLD.generation, OLD.node_id, OLD.status
            USING ERRCODE = 'serialization_failure';
    END IF;
    IF NEW.node_id <> OLD.node_id OR NEW.generation <> OLD.generation
       OR NEW.discovery <> OLD.discovery THEN
        RAISE EXCEPTION 'a slot map proposal''s contents never change';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER slot_map_proposals_decided_once
    BEFORE UPDATE ON slot_map_proposals
    FOR EACH ROW EXECUTE FUNCTION slot_map_proposal_decided_once();

-- Approved slots. Only an operator's approval creates rows here; the CHECK makes a slot
-- without its isolation metadata impossible, whatever the Rust code does.
CREATE TABLE node_resource_slots (
    id                  uuid PRIMARY KEY,
    node_id             uuid NOT NULL REFERENCES nodes (id),
    slot_index          integer NOT NULL CHECK (slot_index >= 0),
    gpu_pci_address     text NOT NULL CHECK (gpu_pci_address ~ '^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$'),
    gpu_model           text NOT NULL CHECK (length(gpu_model) BETWEEN 1 AND 100),
    gpu_uuid            text,
    numa_node           integer NOT NULL CHECK (numa_node >= 0),
    nvme_pci_address    text NOT NULL CHECK (nvme_pci_address ~ '^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$'),
    nvme_serial         text NOT NULL,
    nvme_namespace      text NOT NULL CHECK (nvme_namespace ~ '^nvme[0-9]+n[0-9]+$'),
    nvme_size_bytes     bigint NOT NULL CHECK (nvme_size_bytes > 0),
    ib_vf_pci_address   text NOT NULL CHECK (ib_vf_pci_address ~ '^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$'),
    cpu_set             text NOT NULL CHECK (cpu_set ~ '^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$'),
    memory_mib          bigint NOT NULL CHECK (memory_mib > 0),
    capacity_metadata   jsonb NOT NULL,
    approved_generation integer NOT NULL,
    approved_by         uuid NOT NULL REFERENCES users (id),
    approved_at         timestamptz NOT NULL DEFAULT now(),
    -- Why the latest discovery disagrees with this slot; NULL while it agrees.
    drift               text,
    drift_generation    integer,
    -- After a release the slot is reusable only once a cleanup proof arrives.
    cleanup_state       text NOT NULL DEFAULT 'clean'
                        CHECK (cleanup_state IN ('clean', 'cleaning', 'blocked')),
    retired_at          timestamptz,
    FOREIGN KEY (node_id, approved_generation) REFERENCES slot_map_proposals (node_id, generation),
    FOREIGN KEY (node_id, drift_generation) REFERENCES slot_map_proposals (node_id, generation),
    CONSTRAINT slot_capacity_metadata_complete CHECK (
        capacity_metadata ->> 'storage_ownership' = 'slice'
        AND capacity_metadata ->> 'fabric_claim_mode' = 'per_slot_vf'
        AND capacity_metadata ->> 'fabric_vf_pci_address' = ib_vf_pci_address
        AND length(trim(coalesce(capacity_metadata ->> 'destructive_wipe_policy', ''))) > 0),
    CHECK ((drift IS NULL) = (drift_generation IS NULL)),
    -- Deferred, so that one approval may move addresses between live slots.
    CONSTRAINT slot_index_unique EXCLUDE USING btree (node_id WITH =, slot_index WITH =)
        WHERE (retired_at IS NULL) DEFERRABLE INITIALLY DEFERRED,
    CONSTRAINT slot_gpu_unique EXCLUDE USING btree (node_id WITH =, gpu_pci_address WITH =)
        WHERE (retired_at IS NULL) DEFERRABLE INITIALLY DEFERRED,
    CONSTRAINT slot_nvme_unique EXCLUDE USING btree (node_id WITH =, nvme_pci_address WITH =)
        WHERE (retired_at IS NULL) DEFERRABLE INITIALLY DEFERRED,
    CONSTRAINT slot_vf_unique EXCLUDE USING btree (node_id WITH =, ib_vf_pci_address WITH =)
        WHERE (retired_at IS NULL) DEFERRABLE INITIALLY DEFERRED
);
CREATE INDEX node_resource_slots_node ON node_resource_slots (node_id) WHERE retired_at IS NULL;

-- Claims on capacity: one slot (gpu_slice) or a whole node (baremetal). Allocations (which
-- own claims) arrive with placement; the invariants are here from the start.
CREATE TABLE resource_claims (
    id            uuid PRIMARY KEY,
    node_id       uuid NOT NULL REFERENCES nodes (id),
    slot_id       uuid REFERENCES node_resource_slots (id),
    kind          text NOT NULL CHECK (kind IN ('gpu_slice', 'baremetal')),
    allocation_id uuid NOT NULL,
    claimed_at    timestamptz NOT NULL DEFAULT now(),
    released_at   timestamptz,
    CHECK ((kind = 'gpu_slice') = (slot_id IS NOT NULL))
);
CREATE UNIQUE INDEX resource_claims_one_active_per_slot
    ON resource_claims (slot_id) WHERE released_at IS NULL AND slot_id IS NOT NULL;
CREATE UNIQUE INDEX resource_claims_one_baremetal_per_node
    ON resource_claims (node_id) WHERE released_at IS NULL AND kind = 'baremetal';

-- A whole-node claim and slice claims exclude each other. The node row lock serialises
-- concurrent claimers, so the check can't be raced.
CREATE FUNCTION resource_claims_exclusive() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.released_at IS NOT NULL THEN
        RETURN NEW;
    END IF;
    PERFORM 1 FROM nodes WHERE id = NEW.node_id FOR UPDATE;
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
CREATE TRIGGER resource_claims_exclusive
    BEFORE INSERT OR UPDATE ON resource_claims
    FOR EACH ROW EXECUTE FUNCTION resource_claims_exclusive();

-- Node posture, derived in this one place. Order of precedence: unavailable (admin state,
-- health, heartbeat, nothing approved to sell), cleanup blocked, draining, then occupancy.
-- A node without an approved slot map is unavailable for bare metal too: the approved map is
-- what carries the wipe policy that cleaning the node after a lease needs.
-- A heartbeat older than 60 s (four missed 15 s beats) is stale.
CREATE VIEW node_postures AS
SELECT
    n.id AS node_id,
    s.live_slots,
    s.schedulable_slots,
    s.drifted_slots,
    s.blocked_slots,
    c.slice_claims,
    c.baremetal_claims,
    p.posture,
    p.reason
FROM nodes n
CROSS JOIN LATERAL (
    SELECT
        count(*)::int AS live_slots,
        count(*) FILTER (WHERE drift IS NULL AND cleanup_state = 'clean')::int AS schedulable_slots,
        count(*) FILTER (WHERE drift IS NOT NULL)::int AS drifted_slots,
        count(*) FILTER (WHERE cleanup_state = 'blocked')::int AS blocked_slots
    FROM node_resource_slots WHERE node_id = n.id AND retired_at IS NULL
) s
CROSS JOIN LATERAL (
    SELECT
        count(*) FILTER (WHERE kind = 'gpu_slice')::int AS slice_claims,
        count(*) FILTER (WHERE kind = 'baremetal')::int AS baremetal_claims,
        count(*) FILTER (WHERE kind = 'gpu_slice' AND slot_id IN (
            SELECT id FROM node_resource_slots
            WHERE node_id = n.id AND retired_at IS NULL AND drift IS NULL AND cleanup_state = 'clean'
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
            WHEN s.schedulable_slots = 0 THEN 'no approved, schedulable slots'
            ELSE 'ready'
        END
    )) AS v (posture, reason)
) p;
