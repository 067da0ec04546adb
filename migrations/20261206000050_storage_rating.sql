-- Storage is rated per second like compute, by provisioned GiB (#73). The operator prices
-- storage per region, per GiB-month; a volume keeps the price in force when it was made, as an
-- instance keeps its launch price. A GiB-month is 730 hours, the convention the public clouds
-- bill block storage by, so a price means the same in February as in March.
--
-- What is metered is a `storage_interval`: a volume at one size, from when it became available
-- (or was grown) until it was grown again or deleted. Rating cuts them into `storage_charges`
-- by the same rules as usage (whole hours inside one UTC day, amounts telescoping from the
-- interval's start, floored once), posts them as usage entries, and adds them to the month's
-- totals, so budgets, the month-to-date, invoices and the ledger's checks all count storage.

CREATE TABLE storage_prices (
    region                    text PRIMARY KEY
                              CHECK (region ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    currency                  text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    -- Micro-units (10^-6 of the currency unit) per GiB-month: 0.10 USD is 100000.
    price_per_gib_month_micro bigint NOT NULL
                              CHECK (price_per_gib_month_micro BETWEEN 1 AND 1000000000),
    updated_by                uuid REFERENCES users (id),
    updated_at                timestamptz NOT NULL DEFAULT now()
);

-- The price a volume is billed at. Volumes made before storage had a price carry none and are
-- not billed; every volume made from now on carries one (the trigger below).
ALTER TABLE volumes
    ADD COLUMN price_per_gib_month_micro bigint
        CHECK (price_per_gib_month_micro BETWEEN 1 AND 1000000000),
    ADD COLUMN currency text CHECK (currency ~ '^[A-Z]{3}$'),
    ADD CONSTRAINT volumes_priced_in_a_currency
        CHECK ((price_per_gib_month_micro IS NULL) = (currency IS NULL));

CREATE FUNCTION volumes_priced() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' AND NEW.price_per_gib_month_micro IS NULL THEN
        RAISE EXCEPTION 'volume % has no storage price', NEW.name
            USING ERRCODE = 'check_violation', CONSTRAINT = 'volumes_priced';
    END IF;
    IF TG_OP = 'UPDATE' AND (NEW.price_per_gib_month_micro, NEW.currency)
                            IS DISTINCT FROM (OLD.price_per_gib_month_micro, OLD.currency) THEN
        RAISE EXCEPTION 'volume % keeps the storage price it was made at', OLD.name
            USING ERRCODE = 'check_violation', CONSTRAINT = 'volumes_priced';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER volumes_priced BEFORE INSERT OR UPDATE ON volumes
    FOR EACH ROW EXECUTE FUNCTION volumes_priced();

-- The rating rule for storage, in one place: what `gib` GiB at `per_gib_month_micro` cost for
-- the first `us` microseconds of an interval, floored (2,628,000,000,000 µs in 730 hours).
CREATE FUNCTION storage_micro_until(per_gib_month_micro bigint, gib integer, us bigint)
RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT div(per_gib_month_micro::numeric * gib * us, 2628000000000)
$$;

CREATE TABLE storage_intervals (
    id                        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    volume_id                 uuid NOT NULL REFERENCES volumes (id),
    tenant_id                 uuid NOT NULL REFERENCES tenants (id),
    project_id                uuid NOT NULL,
    region                    text NOT NULL,
    size_gib                  integer NOT NULL CHECK (size_gib BETWEEN 1 AND 16384),
    price_per_gib_month_micro bigint NOT NULL
                              CHECK (price_per_gib_month_micro BETWEEN 1 AND 1000000000),
    currency                  text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    started_at                timestamptz NOT NULL,
    ended_at                  timestamptz CHECK (ended_at >= started_at),
    -- Rating's progress: every period before this instant has its charge.
    rated_until               timestamptz,
    fully_rated               boolean NOT NULL
                              GENERATED ALWAYS AS (coalesce(rated_until >= ended_at, false)) STORED,
    FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id)
);
-- A volume is billed at one size at a time.
CREATE UNIQUE INDEX storage_intervals_one_open ON storage_intervals (volume_id) WHERE ended_at IS NULL;
CREATE INDEX storage_intervals_unrated ON storage_intervals (id) WHERE NOT fully_rated;
CREATE INDEX storage_intervals_unrated_tenant ON storage_intervals (tenant_id) WHERE NOT fully_rated;
CREATE INDEX storage_intervals_by_volume ON storage_intervals (volume_id, started_at);

-- An interval opens when a volume becomes available, closes when it is deleted, and a grow
-- closes it and opens the next at the new size, in the transaction that changes the volume.
CREATE FUNCTION storage_intervals_from_volumes() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    closed integer := 0;
BEGIN
    IF NEW.price_per_gib_month_micro IS NULL THEN
        RETURN NULL;
    END IF;
    IF NEW.size_gib <> OLD.size_gib
       OR (NEW.state = 'deleting' AND OLD.state <> 'deleting') THEN
        UPDATE storage_intervals SET ended_at = now()
        WHERE volume_id = NEW.id AND ended_at IS NULL;
        GET DIAGNOSTICS closed = ROW_COUNT;
    END IF;
    IF (OLD.state = 'creating' AND NEW.state = 'available')
       OR (closed > 0 AND NEW.state NOT IN ('deleting', 'deleted')) THEN
        INSERT INTO storage_intervals (volume_id, tenant_id, project_id, region, size_gib,
                                       price_per_gib_month_micro, currency, started_at)
        VALUES (NEW.id, NEW.tenant_id, NEW.project_id, NEW.region, NEW.size_gib,
                NEW.price_per_gib_month_micro, NEW.currency, now());
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER storage_intervals_from_volumes AFTER UPDATE ON volumes
    FOR EACH ROW EXECUTE FUNCTION storage_intervals_from_volumes();

-- An interval's facts never change once written; only its end (once) and rating's progress.
CREATE FUNCTION storage_intervals_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'storage intervals are never deleted' USING ERRCODE = 'check_violation';
    END IF;
    IF (NEW.volume_id, NEW.tenant_id, NEW.project_id, NEW.region, NEW.size_gib,
        NEW.price_per_gib_month_micro, NEW.currency, NEW.started_at)
       IS DISTINCT FROM
       (OLD.volume_id, OLD.tenant_id, OLD.project_id, OLD.region, OLD.size_gib,
        OLD.price_per_gib_month_micro, OLD.currency, OLD.started_at)
       OR (OLD.ended_at IS NOT NULL AND NEW.ended_at IS DISTINCT FROM OLD.ended_at)
       OR NEW.rated_until < OLD.rated_until THEN
        RAISE EXCEPTION 'storage interval % can''t change what was metered', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER storage_intervals_guard BEFORE UPDATE OR DELETE ON storage_intervals
    FOR EACH ROW EXECUTE FUNCTION storage_intervals_guard();

-- Rated storage: the subledger behind storage's usage entries, one row per interval and span
-- of whole hours inside one UTC day.
CREATE TABLE storage_charges (
    interval_id               bigint NOT NULL REFERENCES storage_intervals (id),
    period_start              timestamptz NOT NULL
                              CHECK (extract(epoch FROM period_start) % 3600 = 0),
    tenant_id                 uuid NOT NULL,
    project_id                uuid NOT NULL,
    volume_id                 uuid NOT NULL,
    region                    text NOT NULL,
    size_gib                  integer NOT NULL,
    price_per_gib_month_micro bigint NOT NULL,
    currency                  text NOT NULL,
    hours                     integer NOT NULL,
    -- Provisioned time inside the span, in microseconds (exact; no rounding).
    rated_us                  bigint NOT NULL,
    amount_micro              bigint NOT NULL CHECK (amount_micro >= 0),
    entry_id                  bigint NOT NULL,
    rated_at                  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (interval_id, period_start),
    CONSTRAINT storage_charges_span_in_one_day
        CHECK (hours BETWEEN 1 AND 24
               AND extract(epoch FROM period_start) % 86400 + hours * 3600 <= 86400),
    CONSTRAINT storage_charges_rated_us_check
        CHECK (rated_us > 0 AND rated_us <= hours * 3600000000::bigint)
);
CREATE INDEX storage_charges_tenant_period ON storage_charges (tenant_id, period_start);
CREATE TRIGGER storage_charges_append_only BEFORE UPDATE OR DELETE ON storage_charges
    FOR EACH ROW EXECUTE FUNCTION ledger_is_append_only();
CREATE TRIGGER storage_charges_no_truncate BEFORE TRUNCATE ON storage_charges
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_is_append_only();

-- The checks `charges_checked` makes of usage (0023), once per statement: the entry exists,
-- the month is not invoiced, and no span overlaps one already rated.
CREATE FUNCTION storage_charges_checked() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    EXECUTE $q$
        SELECT c.entry_id FROM new_charges c
        WHERE NOT EXISTS (SELECT 1 FROM journal_entries e WHERE e.id = c.entry_id)
        LIMIT 1$q$ INTO bad;
    IF bad.entry_id IS NOT NULL THEN
        RAISE EXCEPTION 'a storage charge names journal entry %, which does not exist', bad.entry_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    EXECUTE $q$
        SELECT c.volume_id, c.period_start FROM new_charges c
        JOIN invoices i ON i.tenant_id = c.tenant_id AND i.currency = c.currency
                       AND i.month = date_trunc('month', c.period_start AT TIME ZONE 'UTC')::date
                       AND i.status <> 'draft'
        LIMIT 1$q$ INTO bad;
    IF bad.volume_id IS NOT NULL THEN
        RAISE EXCEPTION 'storage of volume % in % is after that month was invoiced',
            bad.volume_id, to_char(bad.period_start AT TIME ZONE 'UTC', 'YYYY-MM')
            USING ERRCODE = 'check_violation';
    END IF;
    EXECUTE $q$
        SELECT n.interval_id, n.period_start FROM new_charges n
        WHERE EXISTS (SELECT 1 FROM storage_charges c
                      WHERE c.interval_id = n.interval_id
                        AND c.period_start > n.period_start - interval '1 day'
                        AND c.period_start < n.period_start + n.hours * interval '1 hour'
                        AND c.period_start <> n.period_start
                        AND c.period_start + c.hours * interval '1 hour' > n.period_start)
        LIMIT 1$q$ INTO bad;
    IF bad.interval_id IS NOT NULL THEN
        RAISE EXCEPTION 'storage interval % from % overlaps time already rated',
            bad.interval_id, bad.period_start
            USING ERRCODE = 'exclusion_violation';
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER storage_charges_checked AFTER INSERT ON storage_charges
    REFERENCING NEW TABLE AS new_charges
    FOR EACH STATEMENT EXECUTE FUNCTION storage_charges_checked();

-- Storage is its own invoice line: per project, region and price.
ALTER TABLE invoice_lines
    ADD COLUMN region text CHECK (region ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    -- Storage lines: GiB × provisioned seconds × 10^6 (exact), shown as GiB-hours.
    ADD COLUMN gib_us bigint NOT NULL DEFAULT 0 CHECK (gib_us >= 0),
    DROP CONSTRAINT invoice_lines_kind_check,
    ADD CONSTRAINT invoice_lines_kind_check CHECK (kind IN ('usage', 'fee', 'storage', 'credit')),
    ADD CONSTRAINT invoice_lines_storage_has_region CHECK ((kind = 'storage') = (region IS NOT NULL)),
    ADD CONSTRAINT invoice_lines_storage_has_project CHECK (kind <> 'storage' OR project_id IS NOT NULL);

-- Lines change only while their invoice is a draft (the Stripe item id is recorded once):
-- the guard of 0009, comparing every column a line has now.
CREATE OR REPLACE FUNCTION invoice_lines_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    inv record;
BEGIN
    SELECT status, number INTO inv FROM invoices
    WHERE id = CASE TG_OP WHEN 'DELETE' THEN OLD.invoice_id ELSE NEW.invoice_id END;
    IF inv.status = 'draft' THEN
        RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.stripe_invoice_item_id IS NULL
       AND (NEW.invoice_id, NEW.line_no, NEW.kind, NEW.project_id, NEW.sku_id, NEW.description,
            NEW.gpu_us, NEW.unit_price_micro, NEW.rated_micro, NEW.amount_minor,
            NEW.listing_version_id, NEW.run_us, NEW.region, NEW.gib_us)
           IS NOT DISTINCT FROM
           (OLD.invoice_id, OLD.line_no, OLD.kind, OLD.project_id, OLD.sku_id, OLD.description,
            OLD.gpu_us, OLD.unit_price_micro, OLD.rated_micro, OLD.amount_minor,
            OLD.listing_version_id, OLD.run_us, OLD.region, OLD.gib_us) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'invoice % is finalised; its lines never change', inv.number
        USING ERRCODE = 'check_violation';
END;
$$;

-- Storage spent in a month that rating has not reached yet, per project and currency: what
-- `month_spend` adds for it, and what the billing page shows beside the rated part.
CREATE FUNCTION storage_unrated(tenant uuid, month_start timestamptz, upto timestamptz)
RETURNS TABLE (project_id uuid, currency text, micro numeric)
LANGUAGE sql STABLE AS $$
    SELECT project_id, currency,
           storage_micro_until(price_per_gib_month_micro, size_gib,
               round(date_part('epoch', least(coalesce(ended_at, upto), upto) - started_at) * 1e6)::bigint)
         - storage_micro_until(price_per_gib_month_micro, size_gib,
               round(date_part('epoch', greatest(coalesce(rated_until, started_at), month_start) - started_at) * 1e6)::bigint)
    FROM storage_intervals
    WHERE tenant_id = tenant AND NOT fully_rated
      AND least(coalesce(ended_at, upto), upto) > greatest(coalesce(rated_until, started_at), month_start)
$$;

-- `month_spend` (0043) with storage: the month's rated totals (which hold rated storage), the
-- unrated running time, and the unrated storage. Same signature, replaced in place.
CREATE OR REPLACE FUNCTION month_spend(tenant uuid, month_start timestamptz, upto timestamptz)
RETURNS TABLE (project_id uuid, currency text, micro numeric)
LANGUAGE sql STABLE AS $$
    SELECT project_id, currency, amount_micro::numeric
    FROM usage_month_totals
    WHERE tenant_id = tenant AND month = (month_start AT TIME ZONE 'UTC')::date
    UNION ALL
    SELECT project_id, currency,
           div((price_per_hour_minor + fee_per_hour_minor)::numeric
               * round(date_part('epoch', least(coalesce(ended_at, upto), upto) - started_at) * 1e6)::bigint,
               360000)
         - div((price_per_hour_minor + fee_per_hour_minor)::numeric
               * round(date_part('epoch', greatest(coalesce(rated_until, started_at), month_start) - started_at) * 1e6)::bigint,
               360000)
    FROM usage_intervals
    WHERE tenant_id = tenant AND NOT fully_rated
      AND least(coalesce(ended_at, upto), upto) > greatest(coalesce(rated_until, started_at), month_start)
    UNION ALL
    SELECT * FROM storage_unrated(tenant, month_start, upto)
$$;
