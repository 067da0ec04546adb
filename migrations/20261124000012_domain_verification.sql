-- An email domain is first claimed, then proved. Single sign-on routes and admits only the
-- domains a tenant has verified: by a DNS TXT record it was asked to publish, or by a
-- platform operator's (audited) approval. Several tenants may hold a pending claim on one
-- domain, so a squatter's claim never blocks the real owner; only one may hold it verified.
--
-- The platform's own domains (those of platform staff) can never be claimed, and an
-- external identity is never linked to platform staff, a break-glass account, or a user who
-- belongs to another tenant.

ALTER TABLE tenant_email_domains
    ADD COLUMN verification_token text,
    ADD COLUMN verified_at timestamptz,
    ADD COLUMN verified_via text CHECK (verified_via IN ('dns', 'operator', 'before_verification')),
    ADD COLUMN claimed_at timestamptz NOT NULL DEFAULT now();

-- Claims made before verification existed: the platform's own domains are dropped; the rest
-- keep working (marked so an operator can see which were never proved).
DELETE FROM tenant_email_domains d
 WHERE EXISTS (SELECT 1 FROM users u
                WHERE u.platform_role IS NOT NULL AND split_part(lower(u.email), '@', 2) = d.domain);
UPDATE tenant_email_domains
   SET verification_token = replace(gen_random_uuid()::text, '-', ''),
       verified_at = now(), verified_via = 'before_verification';

ALTER TABLE tenant_email_domains
    ALTER COLUMN verification_token SET NOT NULL,
    ADD CONSTRAINT tenant_email_domains_token_check CHECK (verification_token ~ '^[0-9a-f]{32}$'),
    ADD CONSTRAINT tenant_email_domains_verified_check CHECK ((verified_at IS NULL) = (verified_via IS NULL)),
    DROP CONSTRAINT tenant_email_domains_pkey,
    ADD CONSTRAINT tenant_email_domains_pkey PRIMARY KEY (tenant_id, domain);
DROP INDEX tenant_email_domains_tenant_idx;
CREATE UNIQUE INDEX tenant_email_domains_verified_key
    ON tenant_email_domains (domain) WHERE verified_at IS NOT NULL;

CREATE FUNCTION tenant_email_domains_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM users
                WHERE platform_role IS NOT NULL AND split_part(lower(email), '@', 2) = NEW.domain) THEN
        RAISE EXCEPTION 'the domain % belongs to the platform and can''t be claimed', NEW.domain
            USING ERRCODE = 'check_violation', CONSTRAINT = 'tenant_email_domains_platform';
    END IF;
    IF TG_OP = 'UPDATE' AND (NEW.domain, NEW.tenant_id, NEW.verification_token)
                        IS DISTINCT FROM (OLD.domain, OLD.tenant_id, OLD.verification_token) THEN
        RAISE EXCEPTION 'a domain claim''s domain, tenant and token never change'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER tenant_email_domains_guard BEFORE INSERT OR UPDATE ON tenant_email_domains
    FOR EACH ROW EXECUTE FUNCTION tenant_email_domains_guard();

CREATE FUNCTION user_identities_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM users WHERE id = NEW.user_id AND platform_role IS NOT NULL)
       OR EXISTS (SELECT 1 FROM break_glass_credentials WHERE user_id = NEW.user_id) THEN
        RAISE EXCEPTION 'platform staff sign in with the platform''s own credentials, never a tenant''s provider'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'user_identities_not_staff';
    END IF;
    IF EXISTS (SELECT 1 FROM tenant_memberships WHERE user_id = NEW.user_id AND tenant_id <> NEW.tenant_id)
       OR EXISTS (SELECT 1 FROM user_identities WHERE user_id = NEW.user_id AND tenant_id <> NEW.tenant_id) THEN
        RAISE EXCEPTION 'the user belongs to another organization'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'user_identities_one_tenant';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER user_identities_guard BEFORE INSERT OR UPDATE OF user_id, tenant_id ON user_identities
    FOR EACH ROW EXECUTE FUNCTION user_identities_guard();
