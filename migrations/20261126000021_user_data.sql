-- Tenant user data: a launch may carry its own cloud-init user data (a `#cloud-config`
-- document or a `#!` script) where the image's version says it accepts one. The agent puts it
-- in the VM's NoCloud seed after the platform's own cloud-config (SSH keys, network,
-- telemetry), as a second part of a MIME multipart user-data; it runs inside the tenant's own
-- VM, never on the host.
--
-- Whether a version accepts user data is part of its content, so it is fixed once the version
-- leaves its publisher like everything else the operator reviewed (listing_versions_guard).
ALTER TABLE listing_versions ADD COLUMN accepts_user_data boolean NOT NULL DEFAULT false;

-- The platform's plain OS images accept user data, as every cloud's stock images do. Their
-- versions are already published, so the guard that fixes published content is set aside for
-- this one statement: a schema change made on purpose, not a version edited behind review.
ALTER TABLE listing_versions DISABLE TRIGGER listing_versions_guard;
UPDATE listing_versions v SET accepts_user_data = true
  FROM listings l JOIN publishers p ON p.id = l.publisher_id
 WHERE l.id = v.listing_id AND l.category = 'os_image' AND p.tenant_id IS NULL;
ALTER TABLE listing_versions ENABLE TRIGGER listing_versions_guard;

-- At most 16 KiB (what a NoCloud seed comfortably carries; EC2 allows the same), in one of the
-- two forms cloud-init runs. The domain checks the same with sentences (decide::check_user_data).
ALTER TABLE allocations
    ADD COLUMN user_data text
        CONSTRAINT allocations_user_data CHECK (
            octet_length(user_data) BETWEEN 1 AND 16384
            AND (user_data LIKE '#cloud-config%' OR user_data LIKE '#!%')
        );

-- Only a version that accepts user data can be launched with it.
CREATE FUNCTION allocations_user_data_accepted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v record;
BEGIN
    SELECT lv.accepts_user_data, lv.version, l.slug INTO v
      FROM listing_versions lv JOIN listings l ON l.id = lv.listing_id
     WHERE lv.id = NEW.listing_version_id;
    IF NOT v.accepts_user_data THEN
        RAISE EXCEPTION '% % doesn''t accept user data', v.slug, v.version
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER allocations_user_data_accepted BEFORE INSERT ON allocations
    FOR EACH ROW WHEN (NEW.user_data IS NOT NULL)
    EXECUTE FUNCTION allocations_user_data_accepted();
