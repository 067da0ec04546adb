-- Stop and start (#73; docs/decisions/2026-12-06-stop-and-start.md). An instance is a sequence
-- of runs, and each run is an allocation as before: metering, cleaning, claims and the
-- lifecycle trigger are unchanged. The instance's id is its first run's, so every id tenants
-- hold stays valid; a later run names that id in `instance_id`. Exactly one run of an instance
-- is current (`superseded_by IS NULL`).
--
-- A stop saves the run's boot disk into a root volume (`stop_root_volume`) as the run is
-- released; a start is a new run whose boot disk is restored from it (`restore_from`), and the
-- root volume is erased once that run is running. A root volume is a volume like any other on
-- the storage backend, billed as storage while it exists, but the tenant never attaches,
-- snapshots or deletes it: it belongs to its instance (`root_of`).

ALTER TABLE allocations
    ADD COLUMN instance_id      uuid REFERENCES allocations (id),
    ADD COLUMN superseded_by    uuid REFERENCES allocations (id),
    ADD COLUMN stop_root_volume uuid REFERENCES volumes (id),
    ADD COLUMN restore_from     uuid REFERENCES volumes (id),
    ADD CONSTRAINT allocations_instance_is_a_first_run CHECK (instance_id <> id),
    ADD CONSTRAINT allocations_superseded_by_another CHECK (superseded_by <> id);

-- One current run per instance among later runs; the first run is superseded before a later
-- one is written (`start_instance`), in the same transaction.
CREATE UNIQUE INDEX allocations_current_run ON allocations (instance_id)
    WHERE instance_id IS NOT NULL AND superseded_by IS NULL;
CREATE INDEX allocations_restoring ON allocations (restore_from) WHERE restore_from IS NOT NULL;
CREATE INDEX allocations_stopping ON allocations (stop_root_volume)
    WHERE stop_root_volume IS NOT NULL;

ALTER TABLE volumes
    ADD COLUMN root_of uuid REFERENCES allocations (id),
    ADD CONSTRAINT volumes_root_never_attached CHECK (root_of IS NULL OR attached_to IS NULL);

-- A root volume is named after its instance; tenants' own volumes keep their names to
-- themselves.
DROP INDEX volumes_name_in_project;
CREATE UNIQUE INDEX volumes_name_in_project ON volumes (project_id, name)
    WHERE state <> 'deleted' AND root_of IS NULL;

-- A run released before its root volume was served (the tenant released it while it was
-- stopping, or its lifetime ran out) saves nothing, so it is no stop: it ends released, and the
-- storage worker erases the unused volume once it is made.
--
-- A start that never reached `running` (placement took it, but the host failed to restore or
-- boot it) leaves the instance stopped on the same root disk, whatever path released the run.
CREATE FUNCTION allocations_stop_and_start_end() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'releasing' AND OLD.state <> 'releasing' AND NEW.stop_root_volume IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM volumes
                       WHERE id = NEW.stop_root_volume AND target IS NOT NULL) THEN
        NEW.stop_root_volume := NULL;
    END IF;
    IF NEW.state = 'released' AND OLD.state <> 'released'
       AND NEW.restore_from IS NOT NULL AND NEW.stop_root_volume IS NULL
       AND EXISTS (SELECT 1 FROM volumes
                   WHERE id = NEW.restore_from AND state NOT IN ('deleting', 'deleted')) THEN
        NEW.stop_root_volume := NEW.restore_from;
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER allocations_stop_and_start_end BEFORE UPDATE OF state ON allocations
    FOR EACH ROW EXECUTE FUNCTION allocations_stop_and_start_end();

-- A stopped instance keeps its volumes: they stay attached to the run that was stopped (its
-- host unplugged them with the VM, and the storage backend keeps serving them) until a start
-- moves them to the new run, or the instance is released. The same function as 0049's
-- otherwise.
CREATE OR REPLACE FUNCTION allocations_release_volumes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IN ('cleaning', 'released') AND OLD.state NOT IN ('cleaning', 'released')
       AND NEW.stop_root_volume IS NULL THEN
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
