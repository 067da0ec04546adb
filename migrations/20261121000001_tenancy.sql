-- Data model v1: tenancy and the audit log.
-- Never edit this file once it has landed; add a new migration instead.

CREATE TABLE tenants (
    id           uuid PRIMARY KEY,
    -- A short, URL-safe handle: lowercase letters, digits and inner hyphens.
    slug         text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    display_name text NOT NULL CHECK (length(btrim(display_name)) BETWEEN 1 AND 200),
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE projects (
    id           uuid PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (id),
    slug         text NOT NULL CHECK (slug ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    display_name text NOT NULL CHECK (length(btrim(display_name)) BETWEEN 1 AND 200),
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, slug),
    -- Target of composite foreign keys that pin a child row to the same tenant.
    UNIQUE (tenant_id, id)
);

CREATE TABLE users (
    id            uuid PRIMARY KEY,
    email         text NOT NULL CHECK (email ~ '^[^@\s]+@[^@\s]+$'),
    display_name  text NOT NULL CHECK (length(btrim(display_name)) BETWEEN 1 AND 200),
    -- NULL for ordinary users; platform staff carry one platform role.
    platform_role text CHECK (platform_role IN ('admin', 'operator', 'finance')),
    created_at    timestamptz NOT NULL DEFAULT now()
);
-- Emails are compared case-insensitively: Alice@ACME.example is alice@acme.example.
CREATE UNIQUE INDEX users_email_key ON users (lower(email));

CREATE TABLE tenant_memberships (
    tenant_id  uuid NOT NULL REFERENCES tenants (id),
    user_id    uuid NOT NULL REFERENCES users (id),
    role       text NOT NULL CHECK (role IN ('owner', 'admin', 'finance', 'member')),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id)
);

CREATE TABLE project_memberships (
    project_id uuid NOT NULL,
    tenant_id  uuid NOT NULL,
    user_id    uuid NOT NULL,
    role       text NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, user_id),
    -- The project belongs to this tenant ...
    FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id),
    -- ... and only a member of that tenant can be a member of its projects.
    FOREIGN KEY (tenant_id, user_id) REFERENCES tenant_memberships (tenant_id, user_id)
        ON DELETE CASCADE
);

-- Who did what to which resource. Append-only: see the trigger below.
CREATE TABLE audit_log (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    occurred_at   timestamptz NOT NULL DEFAULT now(),
    actor_user_id uuid REFERENCES users (id),
    -- 'user' (actor_user_id set), 'system' (workers, seeds) or 'agent' (a node).
    actor_kind    text NOT NULL CHECK (actor_kind IN ('user', 'system', 'agent')),
    action        text NOT NULL CHECK (action ~ '^[a-z_]+(\.[a-z_]+)+$'),
    -- Canonical resource name, {partition}:{service}:{region}:{tenant}:{project}:{type}:{id}.
    resource      text NOT NULL CHECK (length(resource) > 0),
    tenant_id     uuid REFERENCES tenants (id),
    before        jsonb,
    after         jsonb,
    request_id    text,
    CHECK ((actor_kind = 'user') = (actor_user_id IS NOT NULL))
);
CREATE INDEX audit_log_tenant_idx ON audit_log (tenant_id, occurred_at DESC);
CREATE INDEX audit_log_resource_idx ON audit_log (resource, occurred_at DESC);

CREATE FUNCTION audit_log_is_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER audit_log_no_update_or_delete
    BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_is_append_only();

CREATE TRIGGER audit_log_no_truncate
    BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_is_append_only();
