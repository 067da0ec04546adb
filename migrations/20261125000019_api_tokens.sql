-- API tokens: how scripts, CI and tools act for a person through the public API.
-- Never edit this file once it has landed; add a new migration instead.
--
-- Only a SHA-256 of the secret is kept (the secret is shown once). A token acts as the person
-- who created it, never more: every call re-checks that person's roles, so a token stops
-- working when they lose access, and its scopes narrow what it may do further.

CREATE TABLE api_tokens (
    id             uuid PRIMARY KEY,
    tenant_id      uuid NOT NULL REFERENCES tenants (id),
    -- NULL: the whole organization; otherwise one of its projects (same tenant, by the key).
    project_id     uuid,
    created_by     uuid NOT NULL REFERENCES users (id),
    name           text NOT NULL CHECK (name ~ '^[^[:cntrl:]]{1,64}$' AND name = btrim(name)),
    -- What the caller sees of the secret afterwards, to tell tokens apart: `gpk_` and 8 more.
    display_prefix text NOT NULL CHECK (display_prefix ~ '^gpk_[A-Za-z0-9_-]{8}$'),
    secret_sha256  bytea NOT NULL UNIQUE CHECK (length(secret_sha256) = 32),
    scopes         text[] NOT NULL CHECK (
                       cardinality(scopes) BETWEEN 1 AND 4
                       AND scopes <@ ARRAY['read', 'launch', 'billing', 'admin']::text[]),
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL,
    last_used_at   timestamptz,
    -- The client address of the last use.
    last_used_from text CHECK (length(last_used_from) <= 64),
    revoked_at     timestamptz,
    revoked_by     uuid REFERENCES users (id),
    FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id),
    -- A token lives at most a year: a forgotten secret stops working by itself.
    CHECK (expires_at > created_at AND expires_at <= created_at + interval '366 days'),
    CHECK ((revoked_at IS NULL) = (revoked_by IS NULL))
);

CREATE INDEX api_tokens_tenant ON api_tokens (tenant_id, created_at DESC);

-- Revoking is final, and a token's identity never changes: only its use and its revocation
-- are written after it is made.
CREATE FUNCTION api_tokens_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.revoked_at IS NOT NULL THEN
        RAISE EXCEPTION 'api token % is revoked; a revoked token never changes', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF (NEW.id, NEW.tenant_id, NEW.project_id, NEW.created_by, NEW.name, NEW.display_prefix,
        NEW.secret_sha256, NEW.scopes, NEW.created_at, NEW.expires_at)
       IS DISTINCT FROM
       (OLD.id, OLD.tenant_id, OLD.project_id, OLD.created_by, OLD.name, OLD.display_prefix,
        OLD.secret_sha256, OLD.scopes, OLD.created_at, OLD.expires_at) THEN
        RAISE EXCEPTION 'api token %: only its last use and its revocation may change', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER api_tokens_guard BEFORE UPDATE ON api_tokens
    FOR EACH ROW EXECUTE FUNCTION api_tokens_guard();

CREATE FUNCTION api_tokens_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'api token %: tokens are revoked, never deleted (the audit log names them)', OLD.id
        USING ERRCODE = 'check_violation';
END;
$$;

CREATE TRIGGER api_tokens_kept BEFORE DELETE ON api_tokens
    FOR EACH ROW EXECUTE FUNCTION api_tokens_kept();
