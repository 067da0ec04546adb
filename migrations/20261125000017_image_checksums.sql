-- A listing version may name the SHA-256 of its image file, and the host's agent checks the
-- file against it before converting it onto a tenant's disk: what an operator approved is the
-- content that boots, not whatever later sits under the same file name in the image directory.
--
-- Submitting a third-party publisher's version for review requires one (checked by
-- `submit_version`, which says so in a sentence). The schema holds only its form: versions
-- written before this migration have none, nor do the demo seed's (a simulated host makes up
-- its image files, so no checksum could match), and the platform's own versions, whose images
-- its operators put in the directory themselves, may omit it.
ALTER TABLE listing_versions ADD COLUMN image_sha256 text
    CONSTRAINT listing_versions_image_sha256 CHECK (image_sha256 ~ '^[0-9a-f]{64}$');
