-- Rated usage per project, SKU and UTC day: what the billing page's daily chart reads. It
-- summed a month of hourly charges on every load (5.5 ms a page for one tenant with 1,239
-- charges, 71% of the database's time in the page benchmark; an allocation adds 720 rows a
-- month). Kept by rating in the statement that writes the charges, as usage_month_totals is;
-- `rating_is_exact_balanced_and_idempotent` checks it against the charges.
CREATE TABLE usage_day_totals (
    tenant_id    uuid NOT NULL REFERENCES tenants (id),
    day          date NOT NULL,
    project_id   uuid NOT NULL,
    sku_id       uuid NOT NULL,
    currency     text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    amount_micro bigint NOT NULL CHECK (amount_micro >= 0),
    PRIMARY KEY (tenant_id, day, project_id, sku_id, currency)
);

INSERT INTO usage_day_totals (tenant_id, day, project_id, sku_id, currency, amount_micro)
SELECT tenant_id, (period_start AT TIME ZONE 'UTC')::date, project_id, sku_id, currency,
       sum(amount_micro)::bigint
FROM usage_charges
GROUP BY 1, 2, 3, 4, 5;
