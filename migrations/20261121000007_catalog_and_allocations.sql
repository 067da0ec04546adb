-- Catalog (images, SKUs), allocations and their lifecycle, the outbox, cleanup certificates,
-- NVLink fabric partitions, and the free-capacity summary that placement and the catalog share.

-- Operating-system images tenants may launch. Operator-managed.
CREATE TABLE images (
    id           uuid PRIMARY KEY,
    name         text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    display_name text NOT NULL CHECK (length(trim(display_name)) BETWEEN 1 AND 100),
    -- Where the agent reads the image from (a path on the host's image cache, or a URL).
    source       text NOT NULL CHECK (length(source) BETWEEN 1 AND 1000 AND source !~ '[[:cntrl:][:space:]]'),
    ssh_user     text NOT NULL CHECK (ssh_user ~ '^[a-z_][a-z0-9_-]{0,31}$'),
    active       boolean NOT NULL DEFAULT true,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION all_match(items text[], pattern text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(bool_and(i ~ pattern), true) FROM unnest(items) AS i
$$;

-- What is sold. Prices are integer minor units of `currency` per hour.
CREATE TABLE skus (
    id                   uuid PRIMARY KEY,
    name                 text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    display_name         text NOT NULL CHECK (length(trim(display_name)) BETWEEN 1 AND 100),
    shape                text NOT NULL CHECK (shape IN ('baremetal', 'gpu_slice')),
    gpu_model            text NOT NULL CHECK (length(gpu_model) BETWEEN 1 AND 100),
    gpu_count            integer NOT NULL,
    vcpus                integer NOT NULL CHECK (vcpus BETWEEN 1 AND 1024),
    memory_gib           integer NOT NULL CHECK (memory_gib BETWEEN 1 AND 65536),
    nvme_gib             integer NOT NULL CHECK (nvme_gib BETWEEN 0 AND 1048576),
    regions              text[] NOT NULL CHECK (
        cardinality(regions) > 0 AND all_match(regions, '^[a-z][a-z0-9-]{0,30}[a-z0-9]$')),
    families             text[] NOT NULL CHECK (
        cardinality(families) > 0 AND all_match(families, '^[a-z0-9][a-z0-9-]{0,62}[a-z0-9]$')),
    price_per_hour_minor bigint NOT NULL CHECK (price_per_hour_minor > 0),
    currency             text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    state                text NOT NULL DEFAULT 'draft' CHECK (state IN ('draft', 'active', 'retired')),
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CHECK ((shape = 'gpu_slice' AND gpu_count IN (1, 2, 4, 8))
        OR (shape = 'baremetal' AND gpu_count BETWEEN 1 AND 16))
);

-- A retired SKU is never sold again; allocations made from it keep their price.
CREATE FUNCTION skus_retired_is_final() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'retired' THEN
        RAISE EXCEPTION 'SKU % is retired and can''t change', OLD.name
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER skus_retired_is_final BEFORE UPDATE ON skus
    FOR EACH ROW EXECUTE FUNCTION skus_retired_is_final();

-- NVLink fabric partitions of a node, from its approved discovery, by slot. Partitions of
-- one size never overlap (the approval keeps a disjoint set per size).
CREATE TABLE node_fabric_partitions (
    node_id      uuid NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    partition_id integer NOT NULL CHECK (partition_id >= 0),
    slot_ids     uuid[] NOT NULL CHECK (cardinality(slot_ids) IN (2, 4, 8)),
    PRIMARY KEY (node_id, partition_id)
);

-- Allocations: a project's lease of slots (gpu_slice) or of a whole node (baremetal).
CREATE TABLE allocations (
    id                   uuid PRIMARY KEY,
    tenant_id            uuid NOT NULL REFERENCES tenants (id),
    project_id           uuid NOT NULL,
    name                 text NOT NULL CHECK (name ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    sku_id               uuid NOT NULL REFERENCES skus (id),
    shape                text NOT NULL CHECK (shape IN ('baremetal', 'gpu_slice')),
    gpu_count            integer NOT NULL CHECK (gpu_count > 0),
    region               text NOT NULL,
    node_id              uuid NOT NULL REFERENCES nodes (id),
    image_id             uuid NOT NULL REFERENCES images (id),
    ssh_public_key       text NOT NULL CHECK (length(ssh_public_key) BETWEEN 1 AND 16384),
    -- The price in force at launch.
    price_per_hour_minor bigint NOT NULL CHECK (price_per_hour_minor > 0),
    currency             text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    idempotency_key      text NOT NULL CHECK (length(idempotency_key) BETWEEN 8 AND 200),
    -- What the request asked for, so that a reused key with another request is refused.
    request_fingerprint  text NOT NULL,
    requested_by         uuid NOT NULL REFERENCES users (id),
    -- Why this node and these slots (placement's explanation).
    placement            jsonb NOT NULL,
    -- Desired: what the user wants. Observed: what the node last reported. `state`: the
    -- lifecycle as the control plane drives it.
    desired_state        text NOT NULL DEFAULT 'running' CHECK (desired_state IN ('running', 'released')),
    observed_state       text NOT NULL DEFAULT 'absent'
                         CHECK (observed_state IN ('absent', 'provisioning', 'running', 'lost')),
    state                text NOT NULL CHECK (state IN (
        'requested', 'placed', 'provisioning', 'running', 'releasing', 'cleaning', 'released')),
    failure              text CHECK (length(failure) <= 2000),
    ssh_host             text,
    ssh_port             integer CHECK (ssh_port BETWEEN 1 AND 65535),
    ssh_user             text,
    requested_at         timestamptz NOT NULL,
    created_at           timestamptz NOT NULL DEFAULT now(),
    expires_at           timestamptz,
    released_at          timestamptz,
    FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id),
    UNIQUE (project_id, idempotency_key),
    CHECK ((state = 'running') <= (ssh_host IS NOT NULL AND ssh_port IS NOT NULL)),
    CHECK ((state = 'released') = (released_at IS NOT NULL)),
    CHECK (state NOT IN ('releasing', 'cleaning', 'released') OR desired_state = 'released')
);
-- A name is unique among a project's allocations that are not released.
CREATE UNIQUE INDEX allocations_live_name ON allocations (project_id, name) WHERE state <> 'released';
CREATE INDEX allocations_project ON allocations (project_id, created_at DESC);
CREATE INDEX allocations_active ON allocations (state) WHERE state <> 'released';

-- Every state change, with its time: the allocation page's timings.
CREATE TABLE allocation_transitions (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    allocation_id uuid NOT NULL REFERENCES allocations (id),
    from_state    text,
    to_state      text NOT NULL,
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    detail        text
);
CREATE INDEX allocation_transitions_allocation ON allocation_transitions (allocation_id, id);

-- The lifecycle, enforced: only these moves exist. Failure branches go forward
-- (provisioning → releasing, or straight to released with the slots blocked), never back.
CREATE FUNCTION allocations_lifecycle() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'placed' THEN
            RAISE EXCEPTION 'an allocation starts placed, not %', NEW.state;
        END IF;
        INSERT INTO allocation_transitions (allocation_id, from_state, to_state, at)
        VALUES (NEW.id, NULL, 'requested', NEW.requested_at),
               (NEW.id, 'requested', 'placed', clock_timestamp());
        RETURN NULL;
    END IF;
    IF NEW.state = OLD.state THEN
        RETURN NULL;
    END IF;
    IF NOT (OLD.state, NEW.state) IN (
        ('placed', 'provisioning'), ('placed', 'releasing'),
        ('provisioning', 'running'), ('provisioning', 'releasing'), ('provisioning', 'released'),
        ('running', 'releasing'), ('running', 'released'),
        ('releasing', 'cleaning'), ('releasing', 'released'),
        ('cleaning', 'released')
    ) THEN
        RAISE EXCEPTION 'allocation % can''t go from % to %', OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'check_violation';
    END IF;
    INSERT INTO allocation_transitions (allocation_id, from_state, to_state, detail)
    VALUES (NEW.id, OLD.state, NEW.state, NEW.failure);
    RETURN NULL;
END;
$$;
CREATE TRIGGER allocations_lifecycle AFTER INSERT OR UPDATE OF state ON allocations
    FOR EACH ROW EXECUTE FUNCTION allocations_lifecycle();

-- Claims now belong to allocations.
ALTER TABLE resource_claims
    ADD CONSTRAINT resource_claims_allocation_fk FOREIGN KEY (allocation_id) REFERENCES allocations (id);
CREATE INDEX resource_claims_allocation ON resource_claims (allocation_id);
CREATE INDEX resource_claims_active_node ON resource_claims (node_id) WHERE released_at IS NULL;

-- Why a slot waits for cleaning or is blocked.
ALTER TABLE node_resource_slots ADD COLUMN cleanup_detail text CHECK (length(cleanup_detail) <= 2000);

-- A slot can only be claimed while it is live, agrees with discovery, and is clean.
CREATE FUNCTION resource_claims_slot_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad text;
BEGIN
    IF NEW.released_at IS NOT NULL THEN
        RETURN NEW;
    END IF;
    SELECT CASE
             WHEN s.retired_at IS NOT NULL THEN 'retired'
             WHEN s.drift IS NOT NULL THEN 'drifted'
             WHEN s.cleanup_state <> 'clean' THEN 'not clean (' || s.cleanup_state || ')'
           END
      INTO bad
      FROM node_resource_slots s
     WHERE s.node_id = NEW.node_id
       AND ((NEW.slot_id IS NOT NULL AND s.id = NEW.slot_id)
            OR (NEW.slot_id IS NULL AND s.retired_at IS NULL))
       AND (s.retired_at IS NOT NULL OR s.drift IS NOT NULL OR s.cleanup_state <> 'clean')
     LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'a claim on node % needs clean, undrifted slots; one is %', NEW.node_id, bad
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER resource_claims_slot_ready BEFORE INSERT ON resource_claims
    FOR EACH ROW EXECUTE FUNCTION resource_claims_slot_ready();

-- Releasing a claim sends its slots (a bare-metal claim: every live slot) to cleaning.
CREATE FUNCTION resource_claims_release_cleans() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.released_at IS NULL AND NEW.released_at IS NOT NULL THEN
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
CREATE TRIGGER resource_claims_release_cleans AFTER UPDATE OF released_at ON resource_claims
    FOR EACH ROW EXECUTE FUNCTION resource_claims_release_cleans();

-- What the node proved after a release: one row per slot wiped.
CREATE TABLE cleanup_certificates (
    id            uuid PRIMARY KEY,
    allocation_id uuid NOT NULL REFERENCES allocations (id),
    node_id       uuid NOT NULL REFERENCES nodes (id),
    slot_id       uuid NOT NULL REFERENCES node_resource_slots (id),
    task_id       uuid NOT NULL REFERENCES agent_tasks (id),
    nvme_serial   text NOT NULL,
    wipe_method   text NOT NULL,
    wipe_verified boolean NOT NULL CHECK (wipe_verified),
    gpu_reset     boolean NOT NULL CHECK (gpu_reset),
    firmware_ok   boolean NOT NULL CHECK (firmware_ok),
    signature     text NOT NULL CHECK (signature ~ '^[0-9a-f]{64}$'),
    received_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (allocation_id, slot_id)
);

-- An operator's decision that a blocked slot is clean (after looking at the host).
CREATE TABLE slot_cleanup_overrides (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    slot_id    uuid NOT NULL REFERENCES node_resource_slots (id),
    cleared_by uuid NOT NULL REFERENCES users (id),
    reason     text NOT NULL CHECK (length(trim(reason)) BETWEEN 1 AND 1000),
    cleared_at timestamptz NOT NULL DEFAULT now()
);

-- A slot that was claimed becomes clean again only with a cleanup certificate for its last
-- allocation, or an operator's override recorded after that claim ended.
CREATE FUNCTION slots_clean_needs_proof() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    last_claim record;
BEGIN
    IF OLD.cleanup_state = 'clean' OR NEW.cleanup_state <> 'clean' THEN
        RETURN NEW;
    END IF;
    SELECT c.allocation_id, c.released_at INTO last_claim
      FROM resource_claims c
     WHERE c.node_id = NEW.node_id AND (c.slot_id = NEW.id OR c.kind = 'baremetal')
     ORDER BY c.claimed_at DESC LIMIT 1;
    IF last_claim IS NULL THEN
        RETURN NEW;
    END IF;
    IF EXISTS (SELECT 1 FROM cleanup_certificates
               WHERE slot_id = NEW.id AND allocation_id = last_claim.allocation_id)
       OR EXISTS (SELECT 1 FROM slot_cleanup_overrides
                  WHERE slot_id = NEW.id AND cleared_at >= coalesce(last_claim.released_at, now())) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'slot % is reusable only with a cleanup proof for allocation %',
        NEW.id, last_claim.allocation_id USING ERRCODE = 'check_violation';
END;
$$;
CREATE TRIGGER slots_clean_needs_proof BEFORE UPDATE OF cleanup_state ON node_resource_slots
    FOR EACH ROW EXECUTE FUNCTION slots_clean_needs_proof();

-- Agent tasks now also provision and release allocations.
ALTER TABLE agent_tasks DROP CONSTRAINT agent_tasks_kind_check;
ALTER TABLE agent_tasks ADD CONSTRAINT agent_tasks_kind_check CHECK (kind IN (
    'slice.topology_discover', 'slice.vm_provision', 'slice.vm_release',
    'baremetal.provision', 'baremetal.release'));
ALTER TABLE agent_tasks ADD COLUMN allocation_id uuid REFERENCES allocations (id);
ALTER TABLE agent_tasks ADD CONSTRAINT agent_tasks_allocation_kinds
    CHECK ((kind = 'slice.topology_discover') = (allocation_id IS NULL));
-- One live task of each kind per allocation: the dispatcher may run twice, the task not.
CREATE UNIQUE INDEX agent_tasks_one_per_allocation ON agent_tasks (allocation_id, kind)
    WHERE allocation_id IS NOT NULL AND state <> 'failed';

-- The outbox: side effects decided in a transaction, carried out after it by a worker.
CREATE TABLE outbox (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind          text NOT NULL CHECK (kind IN ('allocation.provision', 'allocation.release')),
    allocation_id uuid NOT NULL REFERENCES allocations (id),
    created_at    timestamptz NOT NULL DEFAULT now(),
    available_at  timestamptz NOT NULL DEFAULT now(),
    attempts      integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error    text,
    done_at       timestamptz
);
CREATE INDEX outbox_pending ON outbox (available_at) WHERE done_at IS NULL;

-- Free capacity per node and GPU model, kept by triggers: how many disjoint blocks of 1, 2,
-- 4 and 8 slots placement could take right now. Placement and the catalog both read it, so
-- the availability the catalog shows is what placement would do.
CREATE FUNCTION cpu_count(cpus text) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(sum(CASE WHEN r LIKE '%-%'
                             THEN split_part(r, '-', 2)::int - split_part(r, '-', 1)::int + 1
                             ELSE 1 END), 0)::int
    FROM unnest(string_to_array(cpus, ',')) AS r
$$;

-- Whether a node may take new work of `shape` now: the one definition placement and the
-- catalog share (a heartbeat older than 60 s is stale, as in node_postures).
CREATE FUNCTION node_sells(n nodes, shape text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT shape = ANY(n.capacity_shapes) AND n.admin_state = 'active'
       AND n.health IS NOT DISTINCT FROM 'healthy'
       AND n.last_heartbeat_at > now() - interval '60 seconds'
$$;

CREATE TABLE node_free_blocks (
    node_id         uuid NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    gpu_model       text NOT NULL,
    block_size      integer NOT NULL CHECK (block_size IN (1, 2, 4, 8)),
    -- Disjoint free blocks of this size (with fabric partitions: fully free partitions).
    free_blocks     integer NOT NULL CHECK (free_blocks >= 0),
    free_slots      integer NOT NULL CHECK (free_slots >= 0),
    live_slots      integer NOT NULL CHECK (live_slots >= 0),
    -- No claim on the node and every live slot clean and undrifted: bare metal may take it.
    whole_node_free boolean NOT NULL,
    -- The smallest slot of this model on the node (a SKU's per-GPU share must fit it).
    min_vcpus       integer NOT NULL,
    min_memory_mib  bigint NOT NULL,
    min_nvme_bytes  bigint NOT NULL,
    PRIMARY KEY (node_id, gpu_model, block_size)
);
CREATE INDEX node_free_blocks_fit ON node_free_blocks (gpu_model, block_size, free_slots)
    WHERE free_blocks > 0;
CREATE INDEX node_free_blocks_whole ON node_free_blocks (gpu_model, live_slots)
    WHERE whole_node_free AND block_size = 1;

CREATE FUNCTION refresh_node_free_blocks(node uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    partitioned boolean;
    whole boolean;
BEGIN
    partitioned := EXISTS (SELECT 1 FROM node_fabric_partitions WHERE node_id = node);
    whole := NOT EXISTS (SELECT 1 FROM resource_claims WHERE node_id = node AND released_at IS NULL)
         AND NOT EXISTS (SELECT 1 FROM node_resource_slots
                         WHERE node_id = node AND retired_at IS NULL
                           AND (drift IS NOT NULL OR cleanup_state <> 'clean'));
    DELETE FROM node_free_blocks WHERE node_id = node;
    WITH live AS (
        SELECT s.id, s.gpu_model, s.cpu_set, s.memory_mib, s.nvme_size_bytes,
               (s.drift IS NULL AND s.cleanup_state = 'clean'
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

CREATE FUNCTION node_free_blocks_on_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM refresh_node_free_blocks(n.node_id)
    FROM (SELECT node_id FROM changed_rows GROUP BY node_id ORDER BY node_id) AS n;
    RETURN NULL;
END;
$$;
CREATE TRIGGER resource_claims_free_blocks_ins AFTER INSERT ON resource_claims
    REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION node_free_blocks_on_change();
CREATE TRIGGER resource_claims_free_blocks_upd AFTER UPDATE ON resource_claims
    REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION node_free_blocks_on_change();
CREATE TRIGGER node_resource_slots_free_blocks_ins AFTER INSERT ON node_resource_slots
    REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION node_free_blocks_on_change();
CREATE TRIGGER node_resource_slots_free_blocks_upd AFTER UPDATE ON node_resource_slots
    REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION node_free_blocks_on_change();
CREATE TRIGGER node_fabric_partitions_free_blocks_ins AFTER INSERT ON node_fabric_partitions
    REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION node_free_blocks_on_change();
CREATE TRIGGER node_fabric_partitions_free_blocks_del AFTER DELETE ON node_fabric_partitions
    REFERENCING OLD TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION node_free_blocks_on_change();

-- Slots approved before this migration.
SELECT refresh_node_free_blocks(id) FROM nodes;
