-- Snapshots of a project's volumes (#73): a point-in-time copy kept on the storage backend
-- apart from its volume, from which new volumes are made, billed by size as volumes are.
-- As in Cinder, a volume with snapshots is not deleted (delete them first): on Ceph a
-- snapshot lives inside its image, and an image with snapshots can't be removed.

CREATE TABLE snapshot_transitions (
    from_state text NOT NULL,
    to_state   text NOT NULL,
    PRIMARY KEY (from_state, to_state)
);
INSERT INTO snapshot_transitions VALUES
    ('creating', 'available'), ('creating', 'error'),
    ('available', 'deleting'), ('error', 'deleting'),
    ('deleting', 'deleted'), ('deleting', 'error');

-- A snapshot's volume is of its project and region, by key.
CREATE UNIQUE INDEX volumes_id_project_region ON volumes (id, project_id, region);

CREATE TABLE volume_snapshots (
    id                        uuid PRIMARY KEY,
    volume_id                 uuid NOT NULL,
    tenant_id                 uuid NOT NULL,
    project_id                uuid NOT NULL,
    region                    text NOT NULL,
    name                      text NOT NULL CHECK (name ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    -- The volume's size when it was taken: what it holds, and what a volume made from it
    -- holds at least.
    size_gib                  integer NOT NULL CHECK (size_gib BETWEEN 1 AND 16384),
    state                     text NOT NULL DEFAULT 'creating' CONSTRAINT volume_snapshots_state_known
                              CHECK (state IN ('creating', 'available', 'deleting', 'deleted', 'error')),
    error_reason              text CHECK (length(error_reason) <= 2000),
    price_per_gib_month_micro bigint NOT NULL
                              CHECK (price_per_gib_month_micro BETWEEN 1 AND 1000000000),
    currency                  text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    idempotency_key           text NOT NULL CHECK (length(idempotency_key) BETWEEN 8 AND 200),
    request_fingerprint       text NOT NULL,
    created_by                uuid NOT NULL REFERENCES users (id),
    created_at                timestamptz NOT NULL DEFAULT now(),
    state_changed_at          timestamptz NOT NULL DEFAULT now(),
    deleted_at                timestamptz,
    FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id),
    CONSTRAINT volume_snapshots_of_a_volume_of_the_project
        FOREIGN KEY (volume_id, project_id, region) REFERENCES volumes (id, project_id, region),
    CONSTRAINT volume_snapshots_error_has_reason CHECK ((state = 'error') = (error_reason IS NOT NULL)),
    CONSTRAINT volume_snapshots_deleted_when_deleted CHECK ((state = 'deleted') = (deleted_at IS NOT NULL))
);
CREATE UNIQUE INDEX volume_snapshots_name_in_project ON volume_snapshots (project_id, name)
    WHERE state <> 'deleted';
CREATE UNIQUE INDEX volume_snapshots_idempotency ON volume_snapshots (project_id, idempotency_key);
CREATE UNIQUE INDEX volume_snapshots_id_project_region ON volume_snapshots (id, project_id, region);
CREATE INDEX volume_snapshots_by_project ON volume_snapshots (project_id, created_at DESC);
CREATE INDEX volume_snapshots_by_volume ON volume_snapshots (volume_id) WHERE state <> 'deleted';

-- A volume made from a snapshot: of the snapshot's project and region, by key.
ALTER TABLE volumes
    ADD COLUMN source_snapshot uuid,
    ADD CONSTRAINT volumes_from_a_snapshot_of_the_project
        FOREIGN KEY (source_snapshot, project_id, region)
        REFERENCES volume_snapshots (id, project_id, region);
CREATE INDEX volumes_by_source_snapshot ON volumes (source_snapshot) WHERE source_snapshot IS NOT NULL;

CREATE FUNCTION volume_snapshots_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    source_state text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'snapshots are deleted by the state machine, never by DELETE'
            USING ERRCODE = 'check_violation';
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'creating' THEN
            RAISE EXCEPTION 'a snapshot starts as creating, not %', NEW.state
                USING ERRCODE = 'check_violation', CONSTRAINT = 'volume_snapshots_state_machine';
        END IF;
        SELECT state INTO source_state FROM volumes WHERE id = NEW.volume_id FOR SHARE;
        IF source_state NOT IN ('available', 'attaching', 'in_use', 'detaching') THEN
            RAISE EXCEPTION 'volume % is %; snapshots are taken of a volume that is available or attached',
                NEW.volume_id, source_state
                USING ERRCODE = 'check_violation', CONSTRAINT = 'volume_snapshots_of_a_live_volume';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state THEN
        IF NOT EXISTS (SELECT 1 FROM snapshot_transitions
                       WHERE from_state = OLD.state AND to_state = NEW.state) THEN
            RAISE EXCEPTION 'snapshot % is %; it cannot become %', OLD.name, OLD.state, NEW.state
                USING ERRCODE = 'check_violation', CONSTRAINT = 'volume_snapshots_state_machine';
        END IF;
        NEW.state_changed_at := now();
        IF NEW.state = 'deleting' AND EXISTS (SELECT 1 FROM volumes
                                              WHERE source_snapshot = NEW.id AND state = 'creating') THEN
            RAISE EXCEPTION 'snapshot % is being copied into a new volume; delete it once that is made', OLD.name
                USING ERRCODE = 'check_violation', CONSTRAINT = 'volume_snapshots_in_use';
        END IF;
    END IF;
    IF (NEW.volume_id, NEW.tenant_id, NEW.project_id, NEW.region, NEW.size_gib,
        NEW.price_per_gib_month_micro, NEW.currency, NEW.created_by, NEW.idempotency_key)
       IS DISTINCT FROM
       (OLD.volume_id, OLD.tenant_id, OLD.project_id, OLD.region, OLD.size_gib,
        OLD.price_per_gib_month_micro, OLD.currency, OLD.created_by, OLD.idempotency_key) THEN
        RAISE EXCEPTION 'a snapshot''s volume, size and price are fixed'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'volume_snapshots_fixed';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER volume_snapshots_guard BEFORE INSERT OR UPDATE OR DELETE ON volume_snapshots
    FOR EACH ROW EXECUTE FUNCTION volume_snapshots_guard();

-- A volume is deleted only once its snapshots are; one made from a snapshot holds at least
-- what the snapshot holds, and is made from one that is available.
CREATE FUNCTION volumes_and_their_snapshots() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    snap record;
BEGIN
    IF TG_OP = 'INSERT' AND NEW.source_snapshot IS NOT NULL THEN
        SELECT state, size_gib, name INTO snap FROM volume_snapshots
        WHERE id = NEW.source_snapshot FOR SHARE;
        IF snap.state <> 'available' THEN
            RAISE EXCEPTION 'snapshot % is %; volumes are made from available snapshots', snap.name, snap.state
                USING ERRCODE = 'check_violation', CONSTRAINT = 'volumes_from_an_available_snapshot';
        END IF;
        IF NEW.size_gib < snap.size_gib THEN
            RAISE EXCEPTION 'snapshot % holds % GiB; a volume made from it holds at least that', snap.name, snap.size_gib
                USING ERRCODE = 'check_violation', CONSTRAINT = 'volumes_hold_their_snapshot';
        END IF;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.source_snapshot IS DISTINCT FROM OLD.source_snapshot THEN
        RAISE EXCEPTION 'a volume''s source snapshot is fixed'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'volumes_fixed';
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.state = 'deleting' AND OLD.state <> 'deleting'
       AND EXISTS (SELECT 1 FROM volume_snapshots WHERE volume_id = NEW.id AND state <> 'deleted') THEN
        RAISE EXCEPTION 'volume % has snapshots; delete them first', OLD.name
            USING ERRCODE = 'check_violation', CONSTRAINT = 'volumes_snapshots_first';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER volumes_and_their_snapshots BEFORE INSERT OR UPDATE ON volumes
    FOR EACH ROW EXECUTE FUNCTION volumes_and_their_snapshots();

-- The storage worker's steps for snapshots: taken of, and erased from, their volume's
-- storage, in order with that volume's other steps.
ALTER TABLE volume_jobs
    ADD COLUMN snapshot_id uuid REFERENCES volume_snapshots (id),
    DROP CONSTRAINT volume_jobs_kind_check,
    ADD CONSTRAINT volume_jobs_kind_check
        CHECK (kind IN ('create', 'grow', 'export', 'withdraw', 'erase', 'snapshot', 'erase_snapshot')),
    ADD CONSTRAINT volume_jobs_snapshot_named
        CHECK ((kind IN ('snapshot', 'erase_snapshot')) = (snapshot_id IS NOT NULL));

-- Snapshots are metered as volumes are, from available until deleted, at their price.
ALTER TABLE storage_intervals
    ALTER COLUMN volume_id DROP NOT NULL,
    ADD COLUMN snapshot_id uuid REFERENCES volume_snapshots (id),
    ADD CONSTRAINT storage_intervals_one_subject CHECK ((volume_id IS NULL) <> (snapshot_id IS NULL));
CREATE UNIQUE INDEX storage_intervals_one_open_snapshot ON storage_intervals (snapshot_id)
    WHERE ended_at IS NULL AND snapshot_id IS NOT NULL;
ALTER TABLE storage_charges
    ALTER COLUMN volume_id DROP NOT NULL,
    ADD COLUMN snapshot_id uuid;

CREATE OR REPLACE FUNCTION storage_intervals_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'storage intervals are never deleted' USING ERRCODE = 'check_violation';
    END IF;
    IF (NEW.volume_id, NEW.snapshot_id, NEW.tenant_id, NEW.project_id, NEW.region, NEW.size_gib,
        NEW.price_per_gib_month_micro, NEW.currency, NEW.started_at)
       IS DISTINCT FROM
       (OLD.volume_id, OLD.snapshot_id, OLD.tenant_id, OLD.project_id, OLD.region, OLD.size_gib,
        OLD.price_per_gib_month_micro, OLD.currency, OLD.started_at)
       OR (OLD.ended_at IS NOT NULL AND NEW.ended_at IS DISTINCT FROM OLD.ended_at)
       OR NEW.rated_until < OLD.rated_until THEN
        RAISE EXCEPTION 'storage interval % can''t change what was metered', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE FUNCTION storage_intervals_from_snapshots() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'creating' AND NEW.state = 'available' THEN
        INSERT INTO storage_intervals (snapshot_id, tenant_id, project_id, region, size_gib,
                                       price_per_gib_month_micro, currency, started_at)
        VALUES (NEW.id, NEW.tenant_id, NEW.project_id, NEW.region, NEW.size_gib,
                NEW.price_per_gib_month_micro, NEW.currency, now());
    ELSIF NEW.state = 'deleting' AND OLD.state <> 'deleting' THEN
        UPDATE storage_intervals SET ended_at = now()
        WHERE snapshot_id = NEW.id AND ended_at IS NULL;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER storage_intervals_from_snapshots AFTER UPDATE ON volume_snapshots
    FOR EACH ROW EXECUTE FUNCTION storage_intervals_from_snapshots();
