-- API tokens follow the person who made them, and SSH keys say where they came from.
--
-- 1. Leaving ends a token. Removing someone from a project revokes the tokens they made for
--    it; removing them from an organization revokes every token they made there. Revoking is
--    final (20261125000019_api_tokens.sql), so a token stays dead if they are invited back.
--    Such a revocation has no revoker: `revoked_because` says why instead.
-- 2. In an organization that signs in with its own identity provider, a token lapses when its
--    maker has not signed in for `identity_providers.token_idle_days` (30 unless the
--    organization sets another): someone disabled at the provider can no longer sign in, and
--    their tokens stop within that period instead of living out their year. The clock starts
--    at the maker's last sign-in to the organization, or the token's making if that is later
--    (a token is made in a signed-in session). `api_token_lapses_at` is the one definition;
--    the sign-in check and the tokens page both read it.
-- 3. A `keys` scope: adding and deleting a person's saved SSH keys through the API needs it (on
--    an organization-wide token), since the keys reach every later launch of theirs.
-- 4. A saved key records the API token it was added through (none: the portal), for the
--    account page.

ALTER TABLE api_tokens
    ADD COLUMN revoked_because text
        CONSTRAINT api_tokens_revoked_because CHECK (revoked_because IN ('revoked', 'left')),
    DROP CONSTRAINT api_tokens_check1,
    DROP CONSTRAINT api_tokens_scopes_check,
    ADD CONSTRAINT api_tokens_scopes_check CHECK (
        cardinality(scopes) BETWEEN 1 AND 5
        AND scopes <@ ARRAY['read', 'launch', 'billing', 'admin', 'keys']::text[]);

-- The rows revoked so far were revoked by someone. The guard refuses any change to a revoked
-- token, so it is set aside for this one backfill.
ALTER TABLE api_tokens DISABLE TRIGGER api_tokens_guard;
UPDATE api_tokens SET revoked_because = 'revoked' WHERE revoked_at IS NOT NULL;
ALTER TABLE api_tokens ENABLE TRIGGER api_tokens_guard;

ALTER TABLE api_tokens
    ADD CONSTRAINT api_tokens_revocation_explained CHECK (
        (revoked_at IS NULL) = (revoked_because IS NULL)
        AND (revoked_by IS NOT NULL) = (revoked_because IS NOT DISTINCT FROM 'revoked'));

-- Tokens by maker, for the revocations below.
CREATE INDEX api_tokens_maker ON api_tokens (created_by, tenant_id) WHERE revoked_at IS NULL;

CREATE FUNCTION api_tokens_end_with_project_membership() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE api_tokens t
    SET revoked_at = now(), revoked_because = 'left'
    WHERE t.created_by = OLD.user_id AND t.tenant_id = OLD.tenant_id
      AND t.project_id = OLD.project_id AND t.revoked_at IS NULL;
    RETURN NULL;
END;
$$;

CREATE FUNCTION api_tokens_end_with_tenant_membership() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE api_tokens t
    SET revoked_at = now(), revoked_because = 'left'
    WHERE t.created_by = OLD.user_id AND t.tenant_id = OLD.tenant_id AND t.revoked_at IS NULL;
    RETURN NULL;
END;
$$;

CREATE TRIGGER api_tokens_end_with_project_membership
    AFTER DELETE ON project_memberships
    FOR EACH ROW EXECUTE FUNCTION api_tokens_end_with_project_membership();

CREATE TRIGGER api_tokens_end_with_tenant_membership
    AFTER DELETE ON tenant_memberships
    FOR EACH ROW EXECUTE FUNCTION api_tokens_end_with_tenant_membership();

ALTER TABLE identity_providers
    ADD COLUMN token_idle_days integer NOT NULL DEFAULT 30
        CONSTRAINT identity_providers_token_idle_days CHECK (token_idle_days BETWEEN 1 AND 365);

-- When `t` stops for want of its maker signing in; NULL where the organization has no identity
-- provider of its own (its people sign in otherwise, and their membership is what counts).
CREATE FUNCTION api_token_lapses_at(t api_tokens) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT greatest(t.created_at,
                    (SELECT max(i.last_login) FROM user_identities i
                     WHERE i.user_id = t.created_by AND i.tenant_id = t.tenant_id))
           + make_interval(days => p.token_idle_days)
    FROM identity_providers p
    WHERE p.tenant_id = t.tenant_id
$$;

ALTER TABLE user_ssh_keys
    ADD COLUMN added_via_token uuid REFERENCES api_tokens (id);
