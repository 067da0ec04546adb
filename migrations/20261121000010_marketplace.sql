-- The marketplace: publishers, listings and their reviewed versions, what an allocation was
-- launched with, publisher fees rated through the same ledger, and the `allowed_listings`
-- policy. The operator-managed `images` list becomes the platform's own listings.

-- Who publishes: the platform itself (no tenant), or an organization operators approved.
CREATE TABLE publishers (
    id                uuid PRIMARY KEY,
    tenant_id         uuid UNIQUE REFERENCES tenants (id),
    display_name      text NOT NULL CHECK (length(trim(display_name)) BETWEEN 1 AND 100),
    status            text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'suspended')),
    -- The publisher's share of its listings' fees, in basis points; the platform keeps the rest.
    revenue_share_bps integer NOT NULL DEFAULT 7000 CHECK (revenue_share_bps BETWEEN 0 AND 10000),
    created_at        timestamptz NOT NULL DEFAULT now(),
    decided_by        uuid REFERENCES users (id),
    decided_at        timestamptz,
    -- The platform publishes as itself, is always approved and keeps every fee.
    CHECK (tenant_id IS NOT NULL OR (status = 'approved' AND revenue_share_bps = 0))
);
-- One platform publisher.
CREATE UNIQUE INDEX publishers_one_platform ON publishers ((tenant_id IS NULL)) WHERE tenant_id IS NULL;
INSERT INTO publishers (id, tenant_id, display_name, status, revenue_share_bps)
VALUES ('00000000-0000-4000-8000-0000000000f1', NULL, 'GPU Cloud', 'approved', 0);

ALTER TABLE ledger_accounts
    ADD CONSTRAINT ledger_accounts_publisher_fk FOREIGN KEY (publisher_id) REFERENCES publishers (id);

CREATE TABLE listings (
    id           uuid PRIMARY KEY,
    publisher_id uuid NOT NULL REFERENCES publishers (id),
    slug         text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    name         text NOT NULL CHECK (length(trim(name)) BETWEEN 1 AND 100),
    category     text NOT NULL CHECK (category IN ('os_image', 'ml_stack', 'app')),
    -- A small image (PNG or SVG), served from the portal's own origin with a strict policy.
    logo         bytea CHECK (length(logo) <= 65536),
    logo_type    text CHECK (logo_type IN ('image/png', 'image/svg+xml')),
    created_by   uuid REFERENCES users (id),
    created_at   timestamptz NOT NULL DEFAULT now(),
    CHECK ((logo IS NULL) = (logo_type IS NULL))
);
CREATE INDEX listings_publisher ON listings (publisher_id);

-- A version is a reviewed snapshot of everything a launch uses and a tenant reads: image,
-- cloud-init, description, compatibility and fee. Content changes only while it is a draft
-- (or rejected); after that a change is a new version.
CREATE TABLE listing_versions (
    id                 uuid PRIMARY KEY,
    listing_id         uuid NOT NULL REFERENCES listings (id),
    version            text NOT NULL CHECK (version ~ '^[0-9A-Za-z][0-9A-Za-z._+-]{0,31}$'),
    summary            text NOT NULL CHECK (length(trim(summary)) BETWEEN 1 AND 200),
    description_md     text NOT NULL DEFAULT '' CHECK (length(description_md) <= 20000),
    release_notes      text NOT NULL DEFAULT '' CHECK (length(release_notes) <= 5000),
    -- Where the agent reads the image from (a path on the host's image cache, or a URL).
    image_source       text NOT NULL CHECK (length(image_source) BETWEEN 1 AND 1000 AND image_source !~ '[[:cntrl:][:space:]]'),
    ssh_user           text NOT NULL CHECK (ssh_user ~ '^[a-z_][a-z0-9_-]{0,31}$'),
    -- Cloud-config keys merged after the platform's own (JSON is YAML).
    cloud_init         jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(cloud_init) = 'object'
                           AND NOT cloud_init ?| ARRAY['users', 'hostname', 'fqdn', 'ssh_pwauth',
                                                       'ssh_authorized_keys', 'network', 'disable_root']),
    -- Compatibility: shapes, GPU models (empty: any) and a minimum GPU count.
    shapes             text[] NOT NULL CHECK (cardinality(shapes) > 0
                           AND shapes <@ ARRAY['baremetal', 'gpu_slice']),
    gpu_models         text[] NOT NULL DEFAULT '{}',
    min_gpus           integer NOT NULL DEFAULT 1 CHECK (min_gpus BETWEEN 1 AND 16),
    -- Per allocation-hour, on top of the SKU, in the fee's currency (only SKUs priced in it fit).
    fee_per_hour_minor bigint NOT NULL DEFAULT 0 CHECK (fee_per_hour_minor >= 0),
    fee_currency       text CHECK (fee_currency ~ '^[A-Z]{3}$'),
    state              text NOT NULL DEFAULT 'draft' CHECK (state IN (
                           'draft', 'in_review', 'approved', 'rejected', 'published',
                           'deprecated', 'withdrawn')),
    review_reason      text CHECK (length(trim(review_reason)) BETWEEN 1 AND 1000),
    created_by         uuid REFERENCES users (id),
    -- Clock time, not transaction time: versions made or published in one transaction (a
    -- seed, an import) still order newest first.
    created_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    state_changed_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    published_at       timestamptz,
    UNIQUE (listing_id, version),
    CHECK ((fee_per_hour_minor > 0) <= (fee_currency IS NOT NULL)),
    CHECK (state <> 'rejected' OR review_reason IS NOT NULL)
);
CREATE INDEX listing_versions_live ON listing_versions (listing_id) WHERE state = 'published';
CREATE INDEX listing_versions_review ON listing_versions (state_changed_at) WHERE state IN ('in_review', 'approved');

-- The curation state machine, and a version's content fixed once it left the publisher.
CREATE FUNCTION listing_versions_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    pub_status text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.state <> 'draft' THEN
            RAISE EXCEPTION 'version % is %; only drafts can be discarded', OLD.version, OLD.state
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN OLD;
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'draft' THEN
            RAISE EXCEPTION 'a version starts as a draft, not %', NEW.state
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF (to_jsonb(NEW) - ARRAY['state', 'review_reason', 'state_changed_at', 'published_at'])
       IS DISTINCT FROM (to_jsonb(OLD) - ARRAY['state', 'review_reason', 'state_changed_at', 'published_at'])
       AND OLD.state NOT IN ('draft', 'rejected') THEN
        RAISE EXCEPTION 'version % is %; its content is fixed, publish a new version instead',
            OLD.version, OLD.state USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state THEN
        IF NOT (OLD.state, NEW.state) IN (
            ('draft', 'in_review'), ('rejected', 'in_review'),
            ('in_review', 'approved'), ('in_review', 'rejected'),
            ('approved', 'published'), ('approved', 'rejected'), ('approved', 'withdrawn'),
            ('published', 'deprecated'), ('published', 'withdrawn'),
            ('deprecated', 'withdrawn')
        ) THEN
            RAISE EXCEPTION 'version % can''t go from % to %', OLD.version, OLD.state, NEW.state
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.state IN ('in_review', 'approved', 'published') THEN
            SELECT p.status INTO pub_status
            FROM listings l JOIN publishers p ON p.id = l.publisher_id WHERE l.id = NEW.listing_id;
            IF pub_status <> 'approved' THEN
                RAISE EXCEPTION 'the publisher is % (not approved), so version % can''t be %',
                    pub_status, NEW.version, NEW.state USING ERRCODE = 'check_violation';
            END IF;
        END IF;
        NEW.state_changed_at := clock_timestamp();
        IF NEW.state = 'published' THEN
            NEW.published_at := clock_timestamp();
        END IF;
        IF NEW.state <> 'rejected' THEN
            NEW.review_reason := NULL;
        END IF;
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER listing_versions_guard BEFORE INSERT OR UPDATE OR DELETE ON listing_versions
    FOR EACH ROW EXECUTE FUNCTION listing_versions_guard();

-- The images become the platform's OS-image listings, version "1", published, with the same
-- ids as versions so allocations keep pointing at what they launched.
INSERT INTO listings (id, publisher_id, slug, name, category, created_at)
SELECT gen_random_uuid(), '00000000-0000-4000-8000-0000000000f1', name, display_name, 'os_image', created_at
FROM images;
INSERT INTO listing_versions (id, listing_id, version, summary, image_source, ssh_user, shapes,
                              created_at)
SELECT i.id, l.id, '1', i.display_name, i.source, i.ssh_user, ARRAY['baremetal', 'gpu_slice'], i.created_at
FROM images i JOIN listings l ON l.slug = i.name;
UPDATE listing_versions v SET state = 'in_review' FROM images i WHERE i.id = v.id;
UPDATE listing_versions v SET state = 'approved' FROM images i WHERE i.id = v.id;
UPDATE listing_versions v SET state = 'published' FROM images i WHERE i.id = v.id;
UPDATE listing_versions v SET state = 'deprecated' FROM images i WHERE i.id = v.id AND NOT i.active;

-- Allocations record the version they were launched with and its fee at launch.
ALTER TABLE allocations
    ADD COLUMN listing_version_id uuid REFERENCES listing_versions (id),
    ADD COLUMN fee_per_hour_minor bigint NOT NULL DEFAULT 0 CHECK (fee_per_hour_minor >= 0);
UPDATE allocations SET listing_version_id = image_id;
ALTER TABLE allocations ALTER COLUMN listing_version_id SET NOT NULL;
ALTER TABLE allocations DROP COLUMN image_id;
DROP TABLE images;

-- Only a published version that fits the SKU can be launched; the fee is taken from the
-- version here, so the allocation can't disagree with what was published.
CREATE FUNCTION allocations_listing_fits() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v record;
    model text;
BEGIN
    SELECT lv.state, lv.version, lv.shapes, lv.gpu_models, lv.min_gpus, lv.fee_per_hour_minor,
           lv.fee_currency, l.slug
      INTO v
      FROM listing_versions lv JOIN listings l ON l.id = lv.listing_id
     WHERE lv.id = NEW.listing_version_id;
    IF v.state <> 'published' THEN
        RAISE EXCEPTION '% % is %; only published versions can be launched', v.slug, v.version, v.state
            USING ERRCODE = 'check_violation';
    END IF;
    SELECT gpu_model INTO model FROM skus WHERE id = NEW.sku_id;
    IF NOT NEW.shape = ANY (v.shapes)
       OR NEW.gpu_count < v.min_gpus
       OR (cardinality(v.gpu_models) > 0 AND NOT model = ANY (v.gpu_models))
       OR (v.fee_per_hour_minor > 0 AND v.fee_currency <> NEW.currency) THEN
        RAISE EXCEPTION '% % doesn''t fit this SKU (% %, % GPUs of %)', v.slug, v.version,
            NEW.shape, NEW.currency, NEW.gpu_count, model USING ERRCODE = 'check_violation';
    END IF;
    NEW.fee_per_hour_minor := v.fee_per_hour_minor;
    RETURN NEW;
END;
$$;
CREATE TRIGGER allocations_listing_fits BEFORE INSERT ON allocations
    FOR EACH ROW EXECUTE FUNCTION allocations_listing_fits();

-- Metering carries the fee, who is owed part of it, and the share in force when it started.
ALTER TABLE usage_intervals
    ADD COLUMN listing_version_id uuid REFERENCES listing_versions (id),
    ADD COLUMN fee_per_hour_minor bigint NOT NULL DEFAULT 0 CHECK (fee_per_hour_minor >= 0),
    ADD COLUMN publisher_id       uuid REFERENCES publishers (id),
    ADD COLUMN publisher_share_bps integer NOT NULL DEFAULT 0 CHECK (publisher_share_bps BETWEEN 0 AND 10000),
    ADD CHECK (fee_per_hour_minor = 0 OR publisher_id IS NOT NULL);

CREATE OR REPLACE FUNCTION usage_intervals_from_lifecycle() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.to_state = 'running' THEN
        INSERT INTO usage_intervals (allocation_id, tenant_id, project_id, sku_id, gpu_count,
                                     price_per_hour_minor, currency, started_at,
                                     listing_version_id, fee_per_hour_minor, publisher_id,
                                     publisher_share_bps)
        SELECT a.id, a.tenant_id, a.project_id, a.sku_id, a.gpu_count,
               a.price_per_hour_minor, a.currency, NEW.at,
               a.listing_version_id, a.fee_per_hour_minor, p.id, p.revenue_share_bps
        FROM allocations a
        JOIN listing_versions v ON v.id = a.listing_version_id
        JOIN listings l ON l.id = v.listing_id
        JOIN publishers p ON p.id = l.publisher_id
        WHERE a.id = NEW.allocation_id;
    ELSIF NEW.from_state = 'running' THEN
        UPDATE usage_intervals SET ended_at = NEW.at
        WHERE allocation_id = NEW.allocation_id AND ended_at IS NULL;
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION usage_intervals_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'usage intervals are never deleted' USING ERRCODE = 'check_violation';
    END IF;
    IF (to_jsonb(NEW) - ARRAY['ended_at', 'rated_until', 'fully_rated'])
       IS DISTINCT FROM (to_jsonb(OLD) - ARRAY['ended_at', 'rated_until', 'fully_rated'])
       OR (OLD.ended_at IS NOT NULL AND NEW.ended_at IS DISTINCT FROM OLD.ended_at)
       OR NEW.rated_until < OLD.rated_until THEN
        RAISE EXCEPTION 'usage interval of allocation % can''t change what was metered',
            OLD.allocation_id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;

-- Fee charges: one per (allocation, hour) that has a fee, beside its usage charge and posted
-- in the same entry. The publisher's part is floored per charge; the platform keeps the rest.
CREATE TABLE fee_charges (
    allocation_id      uuid NOT NULL,
    period_start       timestamptz NOT NULL,
    tenant_id          uuid NOT NULL,
    project_id         uuid NOT NULL,
    listing_version_id uuid NOT NULL REFERENCES listing_versions (id),
    publisher_id       uuid NOT NULL REFERENCES publishers (id),
    fee_per_hour_minor bigint NOT NULL CHECK (fee_per_hour_minor > 0),
    currency           text NOT NULL,
    rated_us           bigint NOT NULL CHECK (rated_us > 0 AND rated_us <= 3600000000),
    amount_micro       bigint NOT NULL CHECK (amount_micro >= 0),
    publisher_micro    bigint NOT NULL CHECK (publisher_micro BETWEEN 0 AND amount_micro),
    entry_id           bigint NOT NULL REFERENCES journal_entries (id),
    PRIMARY KEY (allocation_id, period_start),
    FOREIGN KEY (allocation_id, period_start) REFERENCES usage_charges (allocation_id, period_start)
);
CREATE INDEX fee_charges_tenant_period ON fee_charges (tenant_id, period_start);
CREATE TRIGGER fee_charges_append_only BEFORE UPDATE OR DELETE ON fee_charges
    FOR EACH ROW EXECUTE FUNCTION ledger_is_append_only();
CREATE TRIGGER fee_charges_no_truncate BEFORE TRUNCATE ON fee_charges
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_is_append_only();
CREATE TRIGGER fee_charges_month_open BEFORE INSERT ON fee_charges
    FOR EACH ROW EXECUTE FUNCTION usage_charges_month_open();

-- Fees are their own invoice lines: per project, listing version and fee.
ALTER TABLE invoice_lines
    ADD COLUMN listing_version_id uuid REFERENCES listing_versions (id),
    -- Fee lines: allocation running time × 10^6 (exact), shown as hours.
    ADD COLUMN run_us bigint NOT NULL DEFAULT 0 CHECK (run_us >= 0),
    DROP CONSTRAINT invoice_lines_kind_check,
    ADD CONSTRAINT invoice_lines_kind_check CHECK (kind IN ('usage', 'fee', 'credit')),
    ADD CHECK ((kind = 'fee') = (listing_version_id IS NOT NULL)),
    ADD CHECK (kind <> 'fee' OR project_id IS NOT NULL);

-- Tenants restrict which listings their projects may launch.
ALTER TABLE policies
    DROP CONSTRAINT policies_key_check,
    ADD CONSTRAINT policies_key_check CHECK (key IN (
        'max_gpus_in_use', 'allowed_skus', 'allowed_regions',
        'max_allocation_lifetime_hours', 'monthly_budget', 'allowed_listings')),
    DROP CONSTRAINT policies_value_shape,
    ADD CONSTRAINT policies_value_shape CHECK (CASE key
        WHEN 'max_gpus_in_use' THEN
            jsonb_typeof(value) = 'number' AND value::numeric >= 0
            AND value::numeric = trunc(value::numeric) AND value::numeric <= 100000
        WHEN 'max_allocation_lifetime_hours' THEN
            jsonb_typeof(value) = 'number' AND value::numeric >= 1
            AND value::numeric = trunc(value::numeric) AND value::numeric <= 8760
        WHEN 'allowed_skus' THEN
            jsonb_typeof(value) = 'array' AND jsonb_array_length(value) > 0
        WHEN 'allowed_regions' THEN
            jsonb_typeof(value) = 'array' AND jsonb_array_length(value) > 0
        WHEN 'allowed_listings' THEN
            jsonb_typeof(value) = 'array' AND jsonb_array_length(value) > 0
        WHEN 'monthly_budget' THEN
            jsonb_typeof(value) = 'object'
            AND jsonb_typeof(value -> 'amount_minor') = 'number'
            AND (value ->> 'amount_minor')::numeric >= 0
            AND (value ->> 'currency') ~ '^[A-Z]{3}$'
        ELSE false
    END);
