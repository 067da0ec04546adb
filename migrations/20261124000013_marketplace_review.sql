-- A listing's cloud-init runs as root in every tenant VM launched from it, so what it may set
-- is an allowlist of data-only cloud-config modules (control-plane/src/marketplace/cloud_init.rs
-- checks each value too). Checked when a version is written, when its content changes, and
-- when it moves toward publication; deprecating or withdrawing is always possible.

-- The first key of a cloud-init fragment that listings may not set, or NULL.
CREATE FUNCTION listing_cloud_init_disallowed_key(fragment jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT k FROM jsonb_object_keys(fragment) AS k
     WHERE k NOT IN ('packages', 'package_update', 'package_upgrade',
                     'package_reboot_if_required', 'timezone', 'locale', 'final_message')
     ORDER BY k LIMIT 1
$$;

CREATE FUNCTION listing_versions_cloud_init_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad text;
BEGIN
    IF TG_OP = 'INSERT'
       OR NEW.cloud_init IS DISTINCT FROM OLD.cloud_init
       OR (NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN ('in_review', 'approved', 'published')) THEN
        bad := listing_cloud_init_disallowed_key(NEW.cloud_init);
        IF bad IS NOT NULL THEN
            RAISE EXCEPTION 'cloud-init key "%" is not allowed in a listing; put what it does in the image', bad
                USING ERRCODE = 'check_violation', CONSTRAINT = 'listing_versions_cloud_init_allowlist';
        END IF;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER listing_versions_cloud_init_guard BEFORE INSERT OR UPDATE ON listing_versions
    FOR EACH ROW EXECUTE FUNCTION listing_versions_cloud_init_guard();

-- Third-party versions approved blind with commands or files in their cloud-init stop being
-- offered (allocations running from them keep running): those waiting or approved go back to
-- their publisher as rejected, with the reason; published ones are withdrawn. The platform's
-- own were written by its operators, who run the hosts anyway; they stay, and their next
-- version follows the allowlist.
UPDATE listing_versions v
   SET state = 'rejected',
       review_reason = 'Its cloud-init runs commands or writes files, which listings may no longer do: put them in the image, keep only packages, package_update, package_upgrade, package_reboot_if_required, timezone, locale and final_message, and submit again.'
  FROM listings l JOIN publishers p ON p.id = l.publisher_id
 WHERE l.id = v.listing_id AND p.tenant_id IS NOT NULL
   AND v.state IN ('in_review', 'approved')
   AND listing_cloud_init_disallowed_key(v.cloud_init) IS NOT NULL;
UPDATE listing_versions v
   SET state = 'withdrawn'
  FROM listings l JOIN publishers p ON p.id = l.publisher_id
 WHERE l.id = v.listing_id AND p.tenant_id IS NOT NULL
   AND v.state = 'published'
   AND listing_cloud_init_disallowed_key(v.cloud_init) IS NOT NULL;
