-- One batch of rating (`rating::rate_batch`): the next unrated hours of usage intervals, cut
-- at UTC days, become usage and fee charges, their journal entries and postings, the day and
-- month totals, and each interval's progress, in one statement under the rating lock.
WITH cand AS (
    SELECT u.allocation_id, s.period_start, u.tenant_id, u.project_id, u.sku_id, u.gpu_count,
           u.price_per_hour_minor, u.currency, u.ended_at, u.listing_version_id,
           u.fee_per_hour_minor, u.publisher_id, u.publisher_share_bps,
           ceil(extract(epoch FROM s.through - s.period_start) / 3600)::int AS hours,
           (extract(epoch FROM greatest(s.period_start, u.started_at) - u.started_at)
                * 1000000)::bigint AS from_us,
           (extract(epoch FROM s.through - u.started_at) * 1000000)::bigint AS to_us,
           s.through
    FROM usage_intervals u
    -- Rated from the first unrated hour up to `cap`: the allocation's end once it has ended
    -- by `until`, else the last whole hour before `until` (an hour is rated once it is over).
    CROSS JOIN LATERAL (
        SELECT date_trunc('hour', coalesce(u.rated_until, u.started_at), 'UTC') AS first,
               CASE WHEN u.ended_at <= $1::timestamptz THEN u.ended_at
                    ELSE date_trunc('hour', $1::timestamptz, 'UTC') END AS cap
    ) b
    -- One span per UTC day: the first unrated hour (or midnight) up to the cap (or midnight).
    CROSS JOIN LATERAL generate_series(date_trunc('day', b.first, 'UTC'), b.cap,
                                       interval '1 day') AS d(day)
    CROSS JOIN LATERAL (
        SELECT greatest(d.day, b.first) AS period_start,
               least(d.day + interval '1 day', b.cap) AS through
    ) s
    WHERE NOT u.fully_rated
      -- Out of bounds (written before migration 0015): held back and reported, never allowed
      -- to fail the batch for everyone else.
      AND u.price_per_hour_minor <= $3 AND u.fee_per_hour_minor <= $3
      -- An empty span is kept only where the interval ends, so that an interval that ran for
      -- no time at all (ended the microsecond it started, on the hour) is still marked done.
      AND (s.through > s.period_start OR s.through = u.ended_at)
      AND (u.rated_until IS NULL OR s.period_start >= u.rated_until)
      -- Not rated already: a probe of the primary key per candidate. (`OFFSET 0` keeps it a
      -- probe: as an anti-join the planner merged against every charge ever written, once
      -- per batch, which grew with the ledger.)
      AND NOT EXISTS (SELECT 1 FROM usage_charges c
                      WHERE c.allocation_id = u.allocation_id AND c.period_start = s.period_start
                      OFFSET 0)
    ORDER BY u.allocation_id, s.period_start
    LIMIT $2
), billable AS (
    SELECT * FROM cand WHERE to_us > from_us
), ent AS (
    INSERT INTO journal_entries (kind, tenant_id, currency, memo)
    SELECT 'usage', tenant_id, currency,
           'usage: ' || sum(hours) || ' allocation-hours rated'
    FROM billable GROUP BY tenant_id, currency
    RETURNING id, tenant_id, currency
), ch AS (
    INSERT INTO usage_charges (allocation_id, period_start, tenant_id, project_id, sku_id,
                               gpu_count, price_per_hour_minor, currency, hours, rated_us,
                               amount_micro, entry_id)
    SELECT b.allocation_id, b.period_start, b.tenant_id, b.project_id, b.sku_id, b.gpu_count,
           b.price_per_hour_minor, b.currency, b.hours, b.to_us - b.from_us,
           (micro_until(b.price_per_hour_minor, b.to_us)
            - micro_until(b.price_per_hour_minor, b.from_us))::bigint,
           e.id
    FROM billable b JOIN ent e USING (tenant_id, currency)
    RETURNING entry_id, tenant_id, project_id, sku_id, currency, period_start, hours, amount_micro
), days AS (
    INSERT INTO usage_day_totals AS t (tenant_id, day, project_id, sku_id, currency, amount_micro)
    SELECT tenant_id, (period_start AT TIME ZONE 'UTC')::date, project_id, sku_id, currency,
           sum(amount_micro)::bigint
    FROM ch GROUP BY 1, 2, 3, 4, 5
    ON CONFLICT (tenant_id, day, project_id, sku_id, currency)
        DO UPDATE SET amount_micro = t.amount_micro + EXCLUDED.amount_micro
    RETURNING 1
), fee AS (
    INSERT INTO fee_charges (allocation_id, period_start, tenant_id, project_id,
                             listing_version_id, publisher_id, fee_per_hour_minor, currency,
                             hours, rated_us, amount_micro, publisher_micro, entry_id)
    SELECT f.allocation_id, f.period_start, f.tenant_id, f.project_id, f.listing_version_id,
           f.publisher_id, f.fee_per_hour_minor, f.currency, f.hours, f.to_us - f.from_us,
           (f.fee_to - f.fee_from)::bigint,
           -- The publisher's part telescopes as the fee does: floored once per allocation,
           -- whatever the spans.
           (div(f.fee_to * f.publisher_share_bps, 10000)
            - div(f.fee_from * f.publisher_share_bps, 10000))::bigint,
           f.entry_id
    FROM (SELECT b.*, e.id AS entry_id,
                 micro_until(b.fee_per_hour_minor, b.to_us) AS fee_to,
                 micro_until(b.fee_per_hour_minor, b.from_us) AS fee_from
          FROM billable b JOIN ent e USING (tenant_id, currency)
          WHERE b.fee_per_hour_minor > 0) f
    RETURNING entry_id, tenant_id, project_id, currency, period_start, amount_micro,
              publisher_id, publisher_micro
), spend AS (
    SELECT entry_id, tenant_id, project_id, currency, period_start, amount_micro,
           0::bigint AS publisher_micro
    FROM ch
    UNION ALL
    SELECT entry_id, tenant_id, project_id, currency, period_start, amount_micro, publisher_micro
    FROM fee
), months AS (
    INSERT INTO usage_month_totals AS t (tenant_id, project_id, month, currency, amount_micro)
    SELECT tenant_id, project_id, (date_trunc('month', period_start, 'UTC') AT TIME ZONE 'UTC')::date,
           currency, sum(amount_micro)::bigint
    FROM spend GROUP BY 1, 2, 3, 4
    ON CONFLICT (tenant_id, project_id, month, currency)
        DO UPDATE SET amount_micro = t.amount_micro + EXCLUDED.amount_micro
    RETURNING 1
), totals AS (
    SELECT entry_id, tenant_id, currency, sum(amount_micro)::bigint AS total,
           sum(publisher_micro)::bigint AS publishers
    FROM spend GROUP BY entry_id, tenant_id, currency
), payable AS (
    SELECT entry_id, publisher_id, currency, sum(publisher_micro)::bigint AS owed
    FROM fee GROUP BY entry_id, publisher_id, currency
    HAVING sum(publisher_micro) > 0
), posted AS (
    INSERT INTO postings (entry_id, account_id, amount_micro)
    SELECT entry_id, ledger_account('tenant_receivable', tenant_id, currency), total FROM totals
    UNION ALL
    SELECT entry_id, ledger_account('platform_revenue', NULL, currency), -(total - publishers) FROM totals
    UNION ALL
    SELECT entry_id, ledger_account('publisher_payable', publisher_id, currency), -owed FROM payable
    RETURNING 1
), progress AS (
    UPDATE usage_intervals u
    SET rated_until = pr.through
    FROM (SELECT allocation_id, max(through) AS through FROM cand GROUP BY allocation_id) pr
    WHERE u.allocation_id = pr.allocation_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM ch) AS "charges!", (SELECT coalesce(sum(hours), 0) FROM ch)::bigint AS "hours!",
       (SELECT count(*) FROM ent) AS "entries!",
       (SELECT count(*) FROM posted) AS "postings!", (SELECT count(*) FROM progress) AS "progress!"
