-- A cluster's members are billed as instances, and what they cost is shown under their
-- cluster: an invoice's usage lines are per project, cluster and SKU (a member's hours are
-- never merged with a lone instance's of the same SKU), and the billing page lists each
-- cluster's month so far.

-- The cluster a usage line is for; none for lone instances and for every other kind of line.
ALTER TABLE invoice_lines
    ADD COLUMN cluster_id uuid REFERENCES clusters (id),
    ADD CONSTRAINT invoice_lines_cluster_is_usage CHECK (cluster_id IS NULL OR kind = 'usage');

-- The billing page reads a tenant's clusters first.
CREATE INDEX clusters_tenant ON clusters (tenant_id, created_at);

-- What each of a tenant's clusters has cost from `month_start` up to `upto`, per currency, in
-- micro-units: its members' rated usage and fees in the month, plus what ran and is not rated
-- yet by `month_spend`'s own rule, so a cluster's figures add up to the month's spend. It
-- starts from the tenant's clusters and reaches each member's charges by their keys, so the
-- billing page of a tenant without clusters reads one index entry, not its month of charges.
CREATE FUNCTION cluster_month_spend(tenant uuid, month_start timestamptz, upto timestamptz)
RETURNS TABLE (cluster_id uuid, currency text, micro numeric)
LANGUAGE sql STABLE AS $$
    WITH members AS (
        SELECT a.id, a.cluster_id
        FROM clusters k JOIN allocations a ON a.cluster_id = k.id
        WHERE k.tenant_id = tenant AND k.created_at < upto
    )
    SELECT x.cluster_id, x.currency, sum(x.micro)
    FROM (
        SELECT m.cluster_id, c.currency, c.amount_micro::numeric AS micro
        FROM members m JOIN usage_charges c ON c.allocation_id = m.id
        WHERE c.period_start >= month_start AND c.period_start < upto
        UNION ALL
        SELECT m.cluster_id, f.currency, f.amount_micro::numeric
        FROM members m JOIN fee_charges f ON f.allocation_id = m.id
        WHERE f.period_start >= month_start AND f.period_start < upto
        UNION ALL
        SELECT m.cluster_id, u.currency,
               div((u.price_per_hour_minor + u.fee_per_hour_minor)::numeric
                   * round(date_part('epoch', least(coalesce(u.ended_at, upto), upto) - u.started_at) * 1e6)::bigint,
                   360000)
             - div((u.price_per_hour_minor + u.fee_per_hour_minor)::numeric
                   * round(date_part('epoch', greatest(coalesce(u.rated_until, u.started_at), month_start) - u.started_at) * 1e6)::bigint,
                   360000)
        FROM members m JOIN usage_intervals u ON u.allocation_id = m.id
        WHERE NOT u.fully_rated
          AND least(coalesce(u.ended_at, upto), upto) > greatest(coalesce(u.rated_until, u.started_at), month_start)
    ) x
    GROUP BY x.cluster_id, x.currency
$$;
