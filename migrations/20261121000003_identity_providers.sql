-- Per-tenant single sign-on: each tenant's OpenID provider, the email domains it owns, how
-- the provider's group (or other claim) values map to tenant roles, and the external
-- identities linked to users.

CREATE TABLE identity_providers (
    tenant_id     uuid PRIMARY KEY REFERENCES tenants (id),
    issuer_url    text NOT NULL CHECK (issuer_url ~ '^https?://[^/\s]+'),
    client_id     text NOT NULL CHECK (length(client_id) BETWEEN 1 AND 255),
    -- Stored as given. Encrypting it at rest needs a key-management decision; see ARCHITECTURE.md.
    client_secret text NOT NULL CHECK (length(client_secret) BETWEEN 1 AND 1024),
    -- The ID-token claim whose values map to roles (e.g. "groups"), and the role of a signed-in
    -- user whose values match no mapping.
    role_claim    text NOT NULL DEFAULT 'groups' CHECK (role_claim ~ '^[A-Za-z0-9_.:-]{1,64}$'),
    default_role  text NOT NULL DEFAULT 'member' CHECK (default_role IN ('admin', 'finance', 'member')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- One tenant per domain: the sign-in page routes by the domain of the email typed.
CREATE TABLE tenant_email_domains (
    domain    text PRIMARY KEY
              CHECK (domain = lower(domain) AND domain ~ '^([a-z0-9]([a-z0-9-]*[a-z0-9])?\.)+[a-z]{2,63}$'),
    tenant_id uuid NOT NULL REFERENCES identity_providers (tenant_id) ON DELETE CASCADE
);
CREATE INDEX tenant_email_domains_tenant_idx ON tenant_email_domains (tenant_id);

CREATE TABLE identity_provider_role_mappings (
    tenant_id   uuid NOT NULL REFERENCES identity_providers (tenant_id) ON DELETE CASCADE,
    claim_value text NOT NULL CHECK (length(claim_value) BETWEEN 1 AND 255),
    role        text NOT NULL CHECK (role IN ('owner', 'admin', 'finance', 'member')),
    PRIMARY KEY (tenant_id, claim_value)
);

-- An external identity (issuer + subject) belongs to exactly one user.
CREATE TABLE user_identities (
    issuer     text NOT NULL,
    subject    text NOT NULL,
    user_id    uuid NOT NULL REFERENCES users (id),
    tenant_id  uuid NOT NULL REFERENCES tenants (id),
    created_at timestamptz NOT NULL DEFAULT now(),
    last_login timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (issuer, subject)
);
CREATE INDEX user_identities_user_idx ON user_identities (user_id);
