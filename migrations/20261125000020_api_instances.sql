-- Tags: labels a tenant puts on an allocation to find it again (`team=vision`), set at launch
-- through the API. The domain checks each key and value (cp-allocations' decide::check_tags);
-- the table holds the shape and the bound, so nothing else can store more.
ALTER TABLE allocations
    ADD COLUMN tags jsonb NOT NULL DEFAULT '{}'
        CHECK (jsonb_typeof(tags) = 'object' AND octet_length(tags::text) <= 4096);

-- The API lists a project's allocations newest first, a page at a time, by (created_at, id).
CREATE INDEX allocations_project_page ON allocations (project_id, created_at DESC, id DESC);
DROP INDEX allocations_project;

-- A change made through the API names the token it was made with (the person is the token's
-- maker, in actor_user_id as always).
ALTER TABLE audit_log ADD COLUMN api_token_id uuid REFERENCES api_tokens (id);
