-- The head of a tenant's billing overview (`reports::billing_overview`): its currency, what
-- runs now per hour, its credit, its projects and the month's spend per project, and its
-- storage: what is provisioned now, at what price per month, and its part of the month.
-- `cur` is materialised so that its column is a plain value to what uses it: were it folded
-- in, `credit_balance`'s argument would hold its subqueries, and the planner inlines no
-- function whose arguments do.
WITH cur AS MATERIALIZED (
    SELECT coalesce((SELECT currency FROM usage_intervals WHERE tenant_id = $1
                     ORDER BY started_at DESC LIMIT 1),
                    (SELECT currency FROM skus ORDER BY created_at LIMIT 1),
                    'USD') AS c
)
SELECT cur.c AS "currency!",
       (SELECT coalesce(sum(price_per_hour_minor + fee_per_hour_minor), 0)::bigint
        FROM usage_intervals
        WHERE tenant_id = $1 AND currency = cur.c AND ended_at IS NULL
          -- Implied (an open interval is never fully rated); it lets the partial
          -- index of unrated intervals answer, instead of every interval the
          -- tenant ever ran.
          AND NOT fully_rated) AS "rate_minor!",
       (SELECT micro FROM credit_balance($1, cur.c)) AS "credit_micro!",
       st.gib AS "storage_gib!", st.per_month_micro AS "storage_per_month_micro!",
       ((SELECT coalesce(sum(amount_micro), 0) FROM storage_charges
         WHERE tenant_id = $1 AND currency = cur.c AND period_start >= $2)
        + (SELECT coalesce(sum(micro), 0) FROM storage_unrated($1, $2, $3)
           WHERE currency = cur.c))::bigint AS "storage_micro!",
       p.ids AS "project_ids!", p.slugs AS "project_slugs!",
       s.projects AS "spend_projects!", s.currencies AS "spend_currencies!",
       s.micros AS "spend_micros!"
FROM cur,
     -- An open interval is never fully rated: the partial index answers, as above.
     (SELECT coalesce(sum(size_gib), 0)::bigint AS gib,
             coalesce(sum(size_gib::bigint * price_per_gib_month_micro), 0)::bigint AS per_month_micro
      FROM storage_intervals, cur c2
      WHERE tenant_id = $1 AND currency = c2.c AND ended_at IS NULL AND NOT fully_rated) st,
     (SELECT coalesce(array_agg(id ORDER BY slug), '{}') AS ids,
             coalesce(array_agg(slug ORDER BY slug), '{}') AS slugs
      FROM projects WHERE tenant_id = $1) p,
     (SELECT coalesce(array_agg(project_id), '{}') AS projects,
             coalesce(array_agg(currency), '{}') AS currencies,
             coalesce(array_agg(micro), '{}') AS micros
      FROM (SELECT project_id, currency, sum(micro)::bigint AS micro
            FROM month_spend($1, $2, $3) GROUP BY project_id, currency) g) s
