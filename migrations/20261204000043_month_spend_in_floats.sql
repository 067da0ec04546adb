-- `month_spend` (0041) measures the unrated time of each interval in float8 seconds
-- (`date_part`) instead of `numeric` (`extract`), for the billing page (#22).
--
-- Under the pages benchmark the billing overview's statement cost ~0.45 ms a call, much of it
-- this expression over the tenant's 200 running intervals; `extract` returns `numeric` since
-- PostgreSQL 14, and its conversion was the costliest part of the expression in psql. On the
-- benchmark's data the statement went from 0.306 to 0.271 ms (docs/PERFORMANCE.md).
--
-- Still exact: the difference of two `timestamptz` is a whole number of microseconds, held as
-- days and microseconds; `date_part` returns it as seconds in a double, whose error for a span
-- under ~47 years is below 0.05 µs, so `round(… * 1e6)` gives back the very microseconds that
-- `extract(…) * 1000000` gave, and the amounts (still floored in `numeric`, the rating rule of
-- `micro_until`, 0034) are the same to the micro-unit. The function's signature and what it
-- returns do not change, so it is replaced in place.
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
$$;
