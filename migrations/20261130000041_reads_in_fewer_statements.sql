-- Three reads named once, so that the statements that need them can join them instead of
-- asking separately (#22): the billing page asked nine statements and now asks three, and
-- every signed-in page reads its user's home organization with the session.
--
-- Each is a SQL function returning a table, neither STRICT nor VOLATILE, with one SELECT:
-- the planner inlines it into the statement that calls it (`FROM f(…)`) and pushes that
-- statement's conditions into it, as if its body had been written there.

-- A user's home organization: their oldest membership (then the organization's name, for a
-- tie), with their role in it. At most one row. `TenancyApi::tenants_of` lists memberships
-- in the same order.
CREATE FUNCTION home_tenant(for_user uuid)
RETURNS TABLE (tenant_id uuid, display_name text, role text)
LANGUAGE sql STABLE AS $$
    SELECT t.id, t.display_name, m.role
    FROM tenant_memberships m JOIN tenants t ON t.id = m.tenant_id
    WHERE m.user_id = for_user
    ORDER BY m.created_at, t.display_name
    LIMIT 1
$$;

-- What a tenant has spent in the month that starts at `month_start`, up to `upto`, in
-- micro-units, as pieces to be summed (grouped by project and currency, or filtered to one):
-- the month's rated total per project and currency (`usage_month_totals`, kept by rating),
-- and for each interval not yet rated to its end, what ran since it was last rated (or since
-- the month began) until `upto`.
CREATE FUNCTION month_spend(tenant uuid, month_start timestamptz, upto timestamptz)
RETURNS TABLE (project_id uuid, currency text, micro numeric)
LANGUAGE sql STABLE AS $$
    SELECT project_id, currency, amount_micro::numeric
    FROM usage_month_totals
    WHERE tenant_id = tenant AND month = (month_start AT TIME ZONE 'UTC')::date
    UNION ALL
    SELECT project_id, currency,
           div((price_per_hour_minor + fee_per_hour_minor)::numeric
               * (extract(epoch FROM least(coalesce(ended_at, upto), upto) - started_at) * 1000000)::bigint,
               360000)
         - div((price_per_hour_minor + fee_per_hour_minor)::numeric
               * (extract(epoch FROM greatest(coalesce(rated_until, started_at), month_start) - started_at) * 1000000)::bigint,
               360000)
    FROM usage_intervals
    WHERE tenant_id = tenant AND NOT fully_rated
      AND least(coalesce(ended_at, upto), upto) > greatest(coalesce(rated_until, started_at), month_start)
$$;

-- The prepaid credit a tenant holds in `currency`, in micro-units (its credit account's
-- balance, which postings draw down as invoices apply it). One row.
CREATE FUNCTION credit_balance(tenant uuid, in_currency text)
RETURNS TABLE (micro bigint)
LANGUAGE sql STABLE AS $$
    SELECT coalesce(-sum(p.amount_micro), 0)::bigint
    FROM postings p JOIN ledger_accounts a ON a.id = p.account_id
    WHERE a.kind = 'prepaid_credit' AND a.tenant_id = tenant AND a.currency = in_currency
$$;
