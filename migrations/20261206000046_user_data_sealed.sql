-- A tenant's user data is sealed at rest, and kept only until its provision has answered.
--
-- User data may carry the tenant's own secrets (a registry token, a key for their storage).
-- It was kept in plain text for ever, in `allocations.user_data` and in the provision task's
-- spec. Now the control plane seals it with the deployment's keys (as it seals identity
-- providers' client secrets, 20261124000014_sealed_secrets.sql) into
-- `allocations.user_data_sealed` and into the task's spec (`user_data_sealed`), opens it only
-- to hand the task to its agent, and drops both once the provision has answered. Rows written
-- before keep `user_data` as they were until their provision answers, as now.

ALTER TABLE allocations ADD COLUMN user_data_sealed text;

-- Sealed text of at most 16 KiB of user data, checked only when it is written.
CREATE FUNCTION allocations_user_data_sealed_bounded() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (length(NEW.user_data_sealed) BETWEEN 1 AND 32768) THEN
        PERFORM refuse_check('allocations', 'allocations_user_data_sealed_bounded');
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER allocations_user_data_sealed_bounded
    BEFORE INSERT OR UPDATE OF user_data_sealed
    ON allocations FOR EACH ROW EXECUTE FUNCTION allocations_user_data_sealed_bounded();
