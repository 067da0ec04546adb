-- Money is bounded (security finding 8), so no price, fee or amount can overflow rating's
-- arithmetic (price × running time in micro-units) or a bigint total, and one bad row can't
-- stop rating for every tenant. The same bounds are checked at the edge (policy.rs:
-- Money::MAX_MINOR, catalog::MAX_PRICE_PER_HOUR_MINOR) with a sentence naming the field.
--
-- Prices and fees: at most 100,000.00 per hour (10,000,000 minor units).
-- Amounts (budgets, credit notes): at most 1,000,000,000.00 (100,000,000,000 minor units).
--
-- NOT VALID: every new or changed row is checked; rows written before are not re-checked here
-- (a deployment holding an out-of-bounds row would otherwise fail to upgrade). Rating leaves
-- such rows unrated and reports them (billing/rating.rs).
ALTER TABLE skus ADD CONSTRAINT skus_price_bounded
    CHECK (price_per_hour_minor <= 10000000) NOT VALID;
ALTER TABLE allocations ADD CONSTRAINT allocations_price_bounded
    CHECK (price_per_hour_minor <= 10000000 AND fee_per_hour_minor <= 10000000) NOT VALID;
ALTER TABLE usage_intervals ADD CONSTRAINT usage_intervals_price_bounded
    CHECK (price_per_hour_minor <= 10000000 AND fee_per_hour_minor <= 10000000) NOT VALID;
ALTER TABLE listing_versions ADD CONSTRAINT listing_versions_fee_bounded
    CHECK (fee_per_hour_minor <= 10000000) NOT VALID;
ALTER TABLE credit_notes ADD CONSTRAINT credit_notes_amount_bounded
    CHECK (amount_minor <= 100000000000) NOT VALID;
ALTER TABLE policies ADD CONSTRAINT policies_budget_bounded
    CHECK (key <> 'monthly_budget' OR (value ->> 'amount_minor')::numeric <= 100000000000) NOT VALID;
