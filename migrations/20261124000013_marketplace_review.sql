-- What a listing version may make the hosts do, held by the schema (the Rust checks in
-- control-plane/src/marketplace/cloud_init.rs and agent_protocol::image_file say why, field by
-- field). Checked when a version is written, when its content changes, and when it moves
-- toward publication; deprecating or withdrawing is always possible.
--
-- * cloud-init runs as root in every tenant VM launched from the listing, so it is an
--   allowlist of data-only cloud-config modules.
-- * The image is a plain file in the operator's image directory, whose extension names its
--   format (the agent passes it to qemu-img; it never guesses), never any path on the host.

-- The first key of a cloud-init fragment that listings may not set, or NULL.
CREATE FUNCTION listing_cloud_init_disallowed_key(fragment jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT k FROM jsonb_object_keys(fragment) AS k
     WHERE k NOT IN ('packages', 'package_update', 'package_upgrade',
                     'package_reboot_if_required', 'timezone', 'locale', 'final_message')
     ORDER BY k LIMIT 1
$$;

CREATE FUNCTION listing_image_source_ok(source text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT source ~ '^/var/lib/gpuaas/images/[A-Za-z0-9][A-Za-z0-9._+-]{0,199}\.(qcow2|raw|img)$'
$$;

CREATE FUNCTION listing_versions_safety_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad text;
BEGIN
    IF TG_OP = 'INSERT'
       OR NEW.cloud_init IS DISTINCT FROM OLD.cloud_init
       OR NEW.image_source IS DISTINCT FROM OLD.image_source
       OR (NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN ('in_review', 'approved', 'published')) THEN
        bad := listing_cloud_init_disallowed_key(NEW.cloud_init);
        IF bad IS NOT NULL THEN
            RAISE EXCEPTION 'cloud-init key "%" is not allowed in a listing; put what it does in the image', bad
                USING ERRCODE = 'check_violation', CONSTRAINT = 'listing_versions_cloud_init_allowlist';
        END IF;
        IF NOT listing_image_source_ok(NEW.image_source) THEN
            RAISE EXCEPTION 'image source % is not a .qcow2, .raw or .img file in /var/lib/gpuaas/images', NEW.image_source
                USING ERRCODE = 'check_violation', CONSTRAINT = 'listing_versions_image_source';
        END IF;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER listing_versions_safety_guard BEFORE INSERT OR UPDATE ON listing_versions
    FOR EACH ROW EXECUTE FUNCTION listing_versions_safety_guard();

-- Third-party versions that break either rule stop being offered (allocations running from
-- them keep running): those waiting or approved go back to their publisher as rejected, with
-- the reason; published ones are withdrawn. The platform's own were written by its operators,
-- who run the hosts anyway; they stay, and their next version follows the rules.
UPDATE listing_versions v
   SET state = 'rejected',
       review_reason = 'Listings may no longer run commands or write files through cloud-init, nor read an image from outside /var/lib/gpuaas/images: put what it does in the image, keep only packages, package_update, package_upgrade, package_reboot_if_required, timezone, locale and final_message, and submit again.'
  FROM listings l JOIN publishers p ON p.id = l.publisher_id
 WHERE l.id = v.listing_id AND p.tenant_id IS NOT NULL
   AND v.state IN ('in_review', 'approved')
   AND (listing_cloud_init_disallowed_key(v.cloud_init) IS NOT NULL
        OR NOT listing_image_source_ok(v.image_source));
UPDATE listing_versions v
   SET state = 'withdrawn'
  FROM listings l JOIN publishers p ON p.id = l.publisher_id
 WHERE l.id = v.listing_id AND p.tenant_id IS NOT NULL
   AND v.state = 'published'
   AND (listing_cloud_init_disallowed_key(v.cloud_init) IS NOT NULL
        OR NOT listing_image_source_ok(v.image_source));
