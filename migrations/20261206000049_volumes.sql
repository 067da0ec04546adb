-- A project's volumes: block storage on the region's storage backend, off the GPU hosts, so an
-- instance on any host of the region can attach one. The state machine is
-- `cp_allocations::volumes::VolumeState`; `volume_transitions` is the same table, and the
-- guard below refuses any other move, so no code path can skip a step.

CREATE TABLE volume_transitions (
    from_state text NOT NULL,
    to_state   text NOT NULL,
    PRIMARY KEY (from_state, to_state)
);
INSERT INTO volume_transitions VALUES
    ('creating', 'available'), ('creating', 'error'),
    ('available', 'attaching'), ('available', 'deleting'),
    ('attaching', 'in_use'), ('attaching', 'detaching'), ('attaching', 'error'),
    ('in_use', 'detaching'),
    ('detaching', 'available'), ('detaching', 'error'),
    ('deleting', 'deleted'), ('deleting', 'error'),
    ('error', 'deleting');

-- Allocations are the target of a composite key that pins an attachment to the volume's
-- project and region.
CREATE UNIQUE INDEX allocations_id_project_region ON allocations (id, project_id, region);

CREATE TABLE volumes (
    id                  uuid PRIMARY KEY,
    tenant_id           uuid NOT NULL,
    project_id          uuid NOT NULL,
    region              text NOT NULL CHECK (region ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    name                text NOT NULL CHECK (name ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    size_gib            integer NOT NULL CHECK (size_gib BETWEEN 1 AND 16384),
    kind                text NOT NULL DEFAULT 'block' CHECK (kind = 'block'),
    state               text NOT NULL DEFAULT 'creating' CONSTRAINT volumes_state_known CHECK (
                            state IN ('creating', 'available', 'attaching', 'in_use', 'detaching',
                                      'deleting', 'deleted', 'error')),
    error_reason        text CHECK (length(error_reason) <= 2000),
    -- The instance it is attached to (attaching, in use or detaching): one at most, by
    -- construction, and of the same project and region, by the key.
    attached_to         uuid,
    -- How the hosts reach it (`storage::Target`), once the backend serves it.
    target              jsonb,
    -- What the backend holds so far: a grow is done when this reaches size_gib.
    backend_size_gib    integer NOT NULL DEFAULT 0,
    idempotency_key     text NOT NULL CHECK (length(idempotency_key) BETWEEN 8 AND 200),
    request_fingerprint text NOT NULL,
    created_by          uuid NOT NULL REFERENCES users (id),
    created_at          timestamptz NOT NULL DEFAULT now(),
    state_changed_at    timestamptz NOT NULL DEFAULT now(),
    deleted_at          timestamptz,
    FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id),
    CONSTRAINT volumes_attached_in_project_and_region
        FOREIGN KEY (attached_to, project_id, region)
        REFERENCES allocations (id, project_id, region),
    CONSTRAINT volumes_attached_only_while_attached
        CHECK ((attached_to IS NOT NULL) = (state IN ('attaching', 'in_use', 'detaching'))),
    CONSTRAINT volumes_error_has_reason CHECK ((state = 'error') = (error_reason IS NOT NULL)),
    CONSTRAINT volumes_deleted_when_deleted CHECK ((state = 'deleted') = (deleted_at IS NOT NULL))
);
CREATE UNIQUE INDEX volumes_name_in_project ON volumes (project_id, name) WHERE state <> 'deleted';
CREATE UNIQUE INDEX volumes_idempotency ON volumes (project_id, idempotency_key);
CREATE INDEX volumes_by_allocation ON volumes (attached_to) WHERE attached_to IS NOT NULL;
CREATE INDEX volumes_by_project ON volumes (project_id, created_at DESC);

CREATE FUNCTION volumes_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    alloc_desired text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'creating' THEN
            RAISE EXCEPTION 'a volume starts as creating, not %', NEW.state
                USING ERRCODE = 'check_violation', CONSTRAINT = 'volumes_state_machine';
        END IF;
    ELSE
        IF NEW.state IS DISTINCT FROM OLD.state THEN
            IF NOT EXISTS (SELECT 1 FROM volume_transitions
                           WHERE from_state = OLD.state AND to_state = NEW.state) THEN
                RAISE EXCEPTION 'volume % is %; it cannot become %', OLD.name, OLD.state, NEW.state
                    USING ERRCODE = 'check_violation', CONSTRAINT = 'volumes_state_machine';
            END IF;
            NEW.state_changed_at := now();
        END IF;
        IF NEW.size_gib < OLD.size_gib THEN
            RAISE EXCEPTION 'volume % holds % GiB; volumes only grow', OLD.name, OLD.size_gib
                USING ERRCODE = 'check_violation', CONSTRAINT = 'volumes_only_grow';
        END IF;
        IF (NEW.tenant_id, NEW.project_id, NEW.region, NEW.kind, NEW.created_by, NEW.idempotency_key)
           IS DISTINCT FROM
           (OLD.tenant_id, OLD.project_id, OLD.region, OLD.kind, OLD.created_by, OLD.idempotency_key) THEN
            RAISE EXCEPTION 'a volume''s project, region and kind are fixed'
                USING ERRCODE = 'check_violation', CONSTRAINT = 'volumes_fixed';
        END IF;
        IF OLD.attached_to IS NOT NULL AND NEW.attached_to IS NOT NULL
           AND NEW.attached_to <> OLD.attached_to THEN
            RAISE EXCEPTION 'volume % is attached to another instance; detach it first', OLD.name
                USING ERRCODE = 'check_violation', CONSTRAINT = 'volumes_one_attachment';
        END IF;
    END IF;
    -- A new attachment is to an instance that is to keep running.
    IF NEW.attached_to IS NOT NULL AND NEW.state = 'attaching'
       AND (TG_OP = 'INSERT' OR OLD.attached_to IS DISTINCT FROM NEW.attached_to) THEN
        SELECT desired_state INTO alloc_desired FROM allocations WHERE id = NEW.attached_to FOR SHARE;
        IF alloc_desired IS DISTINCT FROM 'running' THEN
            RAISE EXCEPTION 'instance % is being released; volumes attach to running instances',
                NEW.attached_to
                USING ERRCODE = 'check_violation', CONSTRAINT = 'volumes_attach_to_running';
        END IF;
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER volumes_guard BEFORE INSERT OR UPDATE ON volumes
    FOR EACH ROW EXECUTE FUNCTION volumes_guard();

CREATE FUNCTION volumes_never_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'volumes are deleted by the state machine, never by DELETE'
        USING ERRCODE = 'check_violation';
END;
$$;
CREATE TRIGGER volumes_never_deleted BEFORE DELETE ON volumes
    FOR EACH ROW EXECUTE FUNCTION volumes_never_deleted();

-- What the storage worker does on the backend, outside any transaction: one row per step,
-- done at most once (`done_at`), retried with backoff until then.
CREATE TABLE volume_jobs (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    volume_id    uuid NOT NULL REFERENCES volumes (id),
    kind         text NOT NULL CHECK (kind IN ('create', 'grow', 'export', 'withdraw', 'erase')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    available_at timestamptz NOT NULL DEFAULT now(),
    attempts     integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error   text CHECK (length(last_error) <= 2000),
    done_at      timestamptz
);
CREATE INDEX volume_jobs_pending ON volume_jobs (available_at) WHERE done_at IS NULL;

-- The record that a deleted volume's bytes were destroyed before its space was reused.
CREATE TABLE volume_erasures (
    volume_id          uuid PRIMARY KEY REFERENCES volumes (id),
    backend            text NOT NULL CHECK (length(backend) <= 500),
    method             text NOT NULL CHECK (length(method) <= 500),
    bytes_overwritten  bigint NOT NULL CHECK (bytes_overwritten >= 0),
    erased_at          timestamptz NOT NULL DEFAULT now(),
    -- The record's fields (`cp_allocations::volumes::erasure_record`) sealed with the control
    -- plane's keyring and bound to this row: it opens only as written, so the platform can
    -- show a record is the one its storage worker made.
    seal               text NOT NULL CHECK (length(seal) BETWEEN 1 AND 4000)
);

-- When an instance is released its volumes are detached: once it is cleaning (the VM is
-- gone), each attached volume is detaching and its export is withdrawn by the storage worker.
CREATE FUNCTION allocations_release_volumes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IN ('cleaning', 'released') AND OLD.state NOT IN ('cleaning', 'released') THEN
        WITH detached AS (
            UPDATE volumes SET state = 'detaching'
            WHERE attached_to = NEW.id AND state IN ('attaching', 'in_use')
            RETURNING id
        )
        INSERT INTO volume_jobs (volume_id, kind) SELECT id, 'withdraw' FROM detached;
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER allocations_release_volumes AFTER UPDATE OF state ON allocations
    FOR EACH ROW EXECUTE FUNCTION allocations_release_volumes();

-- The policy keys that bound volumes: GiB in all and how many, in the scope that sets them.
ALTER TABLE policies
    DROP CONSTRAINT policies_key_check,
    ADD CONSTRAINT policies_key_check CHECK (key IN (
        'max_gpus_in_use', 'allowed_skus', 'allowed_regions',
        'max_allocation_lifetime_hours', 'monthly_budget', 'allowed_listings',
        'max_published_ports', 'max_volume_gib', 'max_volumes')),
    DROP CONSTRAINT policies_value_shape,
    ADD CONSTRAINT policies_value_shape CHECK (CASE key
        WHEN 'max_gpus_in_use' THEN
            jsonb_typeof(value) = 'number' AND value::numeric >= 0
            AND value::numeric = trunc(value::numeric) AND value::numeric <= 100000
        WHEN 'max_allocation_lifetime_hours' THEN
            jsonb_typeof(value) = 'number' AND value::numeric >= 1
            AND value::numeric = trunc(value::numeric) AND value::numeric <= 8760
        WHEN 'max_published_ports' THEN
            jsonb_typeof(value) = 'number' AND value::numeric >= 0
            AND value::numeric = trunc(value::numeric) AND value::numeric <= 7
        WHEN 'max_volume_gib' THEN
            jsonb_typeof(value) = 'number' AND value::numeric >= 0
            AND value::numeric = trunc(value::numeric) AND value::numeric <= 10000000
        WHEN 'max_volumes' THEN
            jsonb_typeof(value) = 'number' AND value::numeric >= 0
            AND value::numeric = trunc(value::numeric) AND value::numeric <= 100000
        WHEN 'allowed_skus' THEN
            jsonb_typeof(value) = 'array' AND jsonb_array_length(value) > 0
        WHEN 'allowed_regions' THEN
            jsonb_typeof(value) = 'array' AND jsonb_array_length(value) > 0
        WHEN 'allowed_listings' THEN
            jsonb_typeof(value) = 'array' AND jsonb_array_length(value) > 0
        WHEN 'monthly_budget' THEN
            jsonb_typeof(value) = 'object'
            AND jsonb_typeof(value -> 'amount_minor') = 'number'
            AND (value ->> 'amount_minor')::numeric >= 0
            AND (value ->> 'currency') ~ '^[A-Z]{3}$'
        ELSE false
    END);

-- Plugging a running allocation's volumes in and out: like a network update, an allocation has
-- many such tasks over its life but at most one waiting to be claimed (the dispatcher rewrites
-- that one's plan instead of queueing another).
ALTER TABLE outbox DROP CONSTRAINT outbox_kind_check,
    ADD CONSTRAINT outbox_kind_check CHECK (kind IN (
        'allocation.provision', 'allocation.release', 'allocation.network_update',
        'allocation.volumes_update'));

CREATE OR REPLACE FUNCTION agent_tasks_well_formed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ((NEW.kind = 'slice.topology_discover') = (NEW.allocation_id IS NULL)) THEN
        PERFORM refuse_check('agent_tasks', 'agent_tasks_allocation_kinds');
    END IF;
    IF NOT (NEW.kind IN ('slice.topology_discover', 'slice.vm_provision', 'slice.vm_release',
                         'baremetal.provision', 'baremetal.release',
                         'allocation.network_update', 'allocation.volumes_update')) THEN
        PERFORM refuse_check('agent_tasks', 'agent_tasks_kind_check');
    END IF;
    IF NOT (NEW.traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
            AND NEW.traceparent !~ '^00-0{32}-'
            AND NEW.traceparent !~ '^00-[0-9a-f]{32}-0{16}-') THEN
        PERFORM refuse_check('agent_tasks', 'agent_tasks_traceparent_check');
    END IF;
    RETURN NEW;
END;
$$;

DROP INDEX agent_tasks_one_per_allocation;
CREATE UNIQUE INDEX agent_tasks_one_per_allocation ON agent_tasks (allocation_id, kind)
    WHERE allocation_id IS NOT NULL AND state <> 'failed'
      AND kind NOT IN ('allocation.network_update', 'allocation.volumes_update');
CREATE UNIQUE INDEX agent_tasks_one_queued_volumes_update ON agent_tasks (allocation_id)
    WHERE kind = 'allocation.volumes_update' AND state = 'queued';
