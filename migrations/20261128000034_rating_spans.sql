-- A charge covers a span of whole hours inside one UTC day, not always one hour (#22).
--
-- Rating wrote one row per (allocation, hour). Measured on a 5,000-charge batch (auto_explain):
-- ~157 ms of statement, of which the charge insert ~50 ms and its statement-level check 21 ms,
-- plus ~50 ms of commit; about 40 µs per allocation-hour on this machine, so 100,000
-- allocation-hours a second was out of reach by making rows cheaper. In steady state rating
-- runs every round and an hour closes once, so a running allocation still gets one charge per
-- hour. When rating catches up (a month imported, the worker down for a day, the benchmark),
-- one row now carries every hour of an allocation inside one UTC day: up to 24 times fewer rows.
--
-- What stays the same:
-- * amounts telescope from the interval's start, so an allocation's charges sum to its exact
--   cost floored once, whatever the spans (and an hour's share of a span is computed the same
--   way: the usage CSV still lists one line per hour, the same lines as before);
-- * the day and month totals: a span never crosses a UTC day, so never a month either;
-- * "an (allocation, hour) is rated once": the primary key still refuses a second charge
--   starting at the same hour, and `usage_charges_disjoint` refuses one that overlaps another
--   charge of the allocation (a span is at most a day, so a probe of the day before is enough).
--
-- `hours` is added with a default so existing rows (all one hour) need no rewrite and the
-- append-only rows are not updated; the default is then dropped, so rating must say.
-- A fee charge sits beside its usage charge and covers the same span, so both tables get it.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['usage_charges', 'fee_charges'] LOOP
        EXECUTE format('ALTER TABLE %I ADD COLUMN hours integer NOT NULL DEFAULT 1', t);
        EXECUTE format('ALTER TABLE %I ALTER COLUMN hours DROP DEFAULT', t);
        EXECUTE format($f$
            ALTER TABLE %I
                ADD CONSTRAINT %I
                    CHECK (hours BETWEEN 1 AND 24
                           AND extract(epoch FROM period_start) %% 86400 + hours * 3600 <= 86400),
                DROP CONSTRAINT %I,
                ADD CONSTRAINT %I
                    CHECK (rated_us > 0 AND rated_us <= hours * 3600000000::bigint)$f$,
            t, t || '_span_in_one_day', t || '_rated_us_check', t || '_rated_us_check');
    END LOOP;
END;
$$;

-- The rating rule in one place: what `per_hour_minor` costs, in micro-units, for the first `us`
-- microseconds of an interval, floored. A piece of time from `a` to `b` costs
-- `micro_until(p, b) - micro_until(p, a)`, so however the time is cut (hours, spans, the
-- export's hourly lines), the pieces sum to the whole floored once. Inlined by the planner.
CREATE FUNCTION micro_until(per_hour_minor bigint, us bigint) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT div(per_hour_minor::numeric * us, 360000)
$$;

-- Both checks below run once per statement and are planned each time (`EXECUTE`): a plan
-- cached while the table was small scans it whole, per batch, until an ANALYZE.
CREATE FUNCTION usage_charges_disjoint() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    twice record;
BEGIN
    EXECUTE $q$
        SELECT n.allocation_id, n.period_start
        FROM new_charges n
        WHERE EXISTS (SELECT 1 FROM usage_charges c
                      WHERE c.allocation_id = n.allocation_id
                        AND c.period_start > n.period_start - interval '1 day'
                        AND c.period_start < n.period_start + n.hours * interval '1 hour'
                        AND c.period_start <> n.period_start
                        AND c.period_start + c.hours * interval '1 hour' > n.period_start)
        LIMIT 1$q$ INTO twice;
    IF twice.allocation_id IS NOT NULL THEN
        RAISE EXCEPTION 'usage of allocation % from % overlaps time already rated',
            twice.allocation_id, twice.period_start
            USING ERRCODE = 'exclusion_violation';
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER usage_charges_disjoint AFTER INSERT ON usage_charges
    REFERENCING NEW TABLE AS new_charges
    FOR EACH STATEMENT EXECUTE FUNCTION usage_charges_disjoint();

-- The same rule for a fee charge: its span is its usage charge's.
CREATE FUNCTION fee_charges_match() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    odd record;
BEGIN
    EXECUTE $q$
        SELECT f.allocation_id, f.period_start
        FROM new_fees f
        JOIN usage_charges c USING (allocation_id, period_start)
        WHERE c.hours <> f.hours OR c.rated_us <> f.rated_us
        LIMIT 1$q$ INTO odd;
    IF odd.allocation_id IS NOT NULL THEN
        RAISE EXCEPTION 'the fee charge of allocation % from % does not cover its usage charge''s span',
            odd.allocation_id, odd.period_start
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER fee_charges_match AFTER INSERT ON fee_charges
    REFERENCING NEW TABLE AS new_fees
    FOR EACH STATEMENT EXECUTE FUNCTION fee_charges_match();
