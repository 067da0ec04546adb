-- One batch of storage rating (`rating::rate_storage_batch`): the next unrated hours of storage
-- intervals, cut at UTC days, become storage charges, their journal entries and postings, the
-- month totals, and each interval's progress, in one statement under the rating lock. The
-- rules are usage's (`rate_batch.sql`); the amount is `storage_micro_until` (migration 0050).
WITH cand AS (
    SELECT u.id AS interval_id, s.period_start, u.tenant_id, u.project_id, u.volume_id,
           u.snapshot_id, u.region,
           u.size_gib, u.price_per_gib_month_micro, u.currency,
           ceil(extract(epoch FROM s.through - s.period_start) / 3600)::int AS hours,
           (extract(epoch FROM greatest(s.period_start, u.started_at) - u.started_at)
                * 1000000)::bigint AS from_us,
           (extract(epoch FROM s.through - u.started_at) * 1000000)::bigint AS to_us,
           s.through
    FROM storage_intervals u
    CROSS JOIN LATERAL (
        SELECT date_trunc('hour', coalesce(u.rated_until, u.started_at), 'UTC') AS first,
               CASE WHEN u.ended_at <= $1::timestamptz THEN u.ended_at
                    ELSE date_trunc('hour', $1::timestamptz, 'UTC') END AS cap
    ) b
    CROSS JOIN LATERAL generate_series(date_trunc('day', b.first, 'UTC'), b.cap,
                                       interval '1 day') AS d(day)
    CROSS JOIN LATERAL (
        SELECT greatest(d.day, b.first) AS period_start,
               least(d.day + interval '1 day', b.cap) AS through
    ) s
    WHERE NOT u.fully_rated
      AND (s.through > s.period_start OR s.through = u.ended_at)
      AND (u.rated_until IS NULL OR s.period_start >= u.rated_until)
      AND NOT EXISTS (SELECT 1 FROM storage_charges c
                      WHERE c.interval_id = u.id AND c.period_start = s.period_start
                      OFFSET 0)
    ORDER BY u.id, s.period_start
    LIMIT $2
), billable AS (
    SELECT * FROM cand WHERE to_us > from_us
), ent AS (
    INSERT INTO journal_entries (kind, tenant_id, currency, memo)
    SELECT 'usage', tenant_id, currency,
           'storage: ' || sum(hours) || ' volume-hours rated'
    FROM billable GROUP BY tenant_id, currency
    RETURNING id, tenant_id, currency
), ch AS (
    INSERT INTO storage_charges (interval_id, period_start, tenant_id, project_id, volume_id,
                                 snapshot_id, region, size_gib, price_per_gib_month_micro,
                                 currency, hours, rated_us, amount_micro, entry_id)
    SELECT b.interval_id, b.period_start, b.tenant_id, b.project_id, b.volume_id, b.snapshot_id,
           b.region,
           b.size_gib, b.price_per_gib_month_micro, b.currency, b.hours, b.to_us - b.from_us,
           (storage_micro_until(b.price_per_gib_month_micro, b.size_gib, b.to_us)
            - storage_micro_until(b.price_per_gib_month_micro, b.size_gib, b.from_us))::bigint,
           e.id
    FROM billable b JOIN ent e USING (tenant_id, currency)
    RETURNING entry_id, tenant_id, project_id, currency, period_start, hours, amount_micro
), months AS (
    INSERT INTO usage_month_totals AS t (tenant_id, project_id, month, currency, amount_micro)
    SELECT tenant_id, project_id, (date_trunc('month', period_start, 'UTC') AT TIME ZONE 'UTC')::date,
           currency, sum(amount_micro)::bigint
    FROM ch GROUP BY 1, 2, 3, 4
    ON CONFLICT (tenant_id, project_id, month, currency)
        DO UPDATE SET amount_micro = t.amount_micro + EXCLUDED.amount_micro
    RETURNING 1
), totals AS (
    SELECT entry_id, tenant_id, currency, sum(amount_micro)::bigint AS total
    FROM ch GROUP BY entry_id, tenant_id, currency
), posted AS (
    INSERT INTO postings (entry_id, account_id, amount_micro)
    SELECT entry_id, ledger_account('tenant_receivable', tenant_id, currency), total FROM totals
    UNION ALL
    SELECT entry_id, ledger_account('platform_revenue', NULL, currency), -total FROM totals
    RETURNING 1
), progress AS (
    UPDATE storage_intervals u
    SET rated_until = pr.through
    FROM (SELECT interval_id, max(through) AS through FROM cand GROUP BY interval_id) pr
    WHERE u.id = pr.interval_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM ch) AS "charges!", (SELECT coalesce(sum(hours), 0) FROM ch)::bigint AS "hours!",
       (SELECT count(*) FROM ent) AS "entries!",
       (SELECT count(*) FROM posted) AS "postings!", (SELECT count(*) FROM progress) AS "progress!",
       (SELECT count(*) FROM months) AS "months!"
