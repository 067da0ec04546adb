//! Billing: metering, rating, the double-entry ledger, invoices, credits and Stripe.
//!
//! - **Metering**: a trigger on the lifecycle log keeps one `usage_intervals` row per
//!   allocation that reached `running`: start, end (running → releasing, or → released on a
//!   failure branch), and the price in force at launch.
//! - **Rating** ([`rating`]): per allocation and UTC hour, the running microseconds and their
//!   cost in micro-units, posted to the ledger in batches. Idempotent per (allocation, hour).
//! - **Invoices** ([`invoices`]): one per tenant, month and currency, lines per project × SKU
//!   price, prepaid credit applied first, rounded to cents once (per line, half up), numbered
//!   and made immutable at finalisation, then synced to Stripe through the outbox ([`stripe`]).
//! - **Storage** ([`storage_prices`]): a price per region and GiB-month; volumes are metered
//!   in `storage_intervals` (migration 0050) and rated beside usage.
//! - **Reports** ([`reports`]): month-to-date, forecast, budget alerts, spend series, CSV.
//!
//! Part of the control plane (see ARCHITECTURE.md); no web code.

pub mod history;
pub mod invoices;
pub mod rating;
pub mod reports;
pub mod storage_prices;
pub mod stripe;

/// Micro-units of a currency (shared with the pages and the API).
pub use portal_types::Micros;

/// The cost in micro-units of `us` microseconds of running at `price_per_hour_minor`,
/// floored. Rating takes differences of this at period bounds, so an allocation's charges sum
/// to exactly `cost_micros(price, total running time)`.
pub fn cost_micros(price_per_hour_minor: i64, us: i64) -> Micros {
    // minor/h × µs × (10^4 micro/minor) / (3.6 × 10^9 µs/h)
    Micros((price_per_hour_minor as i128 * us as i128 / 360_000) as i64)
}

/// `12.500000` GPU-hours from GPU-microseconds.
pub fn gpu_hours(gpu_us: i64) -> String {
    let whole = gpu_us / 3_600_000_000;
    let frac = (gpu_us % 3_600_000_000) as i128 * 1_000_000 / 3_600_000_000;
    format!("{whole}.{frac:06}")
}

/// First instant of the UTC month containing `t`, and of the next one.
pub fn month_bounds(t: time::OffsetDateTime) -> (time::OffsetDateTime, time::OffsetDateTime) {
    let t = t.to_offset(time::UtcOffset::UTC);
    let start = time::Date::from_calendar_date(t.year(), t.month(), 1)
        .expect("day 1 exists")
        .midnight()
        .assume_utc();
    let (y, m) = if t.month() == time::Month::December {
        (t.year() + 1, time::Month::January)
    } else {
        (t.year(), t.month().next())
    };
    let end = time::Date::from_calendar_date(y, m, 1)
        .expect("day 1 exists")
        .midnight()
        .assume_utc();
    (start, end)
}

/// `2026-11` for a month's first day.
pub fn month_label(month: time::Date) -> String {
    format!("{:04}-{:02}", month.year(), month.month() as u8)
}

/// Parses `2026-11` as that month's first day; the error names `field`.
pub fn parse_month(field: &'static str, input: &str) -> cp_base::Result<time::Date> {
    let bad = || cp_base::Error::Invalid {
        field,
        reason: format!("{input:?} is not a month; write it as YYYY-MM, e.g. 2026-11"),
    };
    let (y, m) = input.trim().split_once('-').ok_or_else(bad)?;
    let (y, m): (i32, u8) = (y.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    let month = time::Month::try_from(m).map_err(|_| bad())?;
    time::Date::from_calendar_date(y, month, 1).map_err(|_| bad())
}

/// Every area's trait up to this crate (the facade's prelude is built from the top one).
pub mod prelude {
    pub use crate::invoices::InvoicesApi;
    pub use crate::reports::BillingReportsApi;
    pub use crate::storage_prices::StoragePricesApi;
    pub use crate::stripe::StripeApi;
    pub use cp_marketplace::prelude::*;
}

/// What the areas above use of these without a proof: never re-exported to the pages or
/// the API (the `control-plane` facade leaves it out, and they depend only on the facade).
#[doc(hidden)]
pub mod internal {
    pub use crate::storage_prices::price_in as storage_price_in;
    pub use cp_marketplace::internal::*;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_half_away_from_zero_once() {
        assert_eq!(Micros(4_999).round_to_minor(), 0);
        assert_eq!(Micros(5_000).round_to_minor(), 1);
        assert_eq!(Micros(15_000).round_to_minor(), 2);
        assert_eq!(Micros(-5_000).round_to_minor(), -1);
        assert_eq!(Micros(-4_999).round_to_minor(), 0);
        assert_eq!(Micros(1).ceil_to_minor(), 1);
        assert_eq!(Micros(-1).ceil_to_minor(), 0);
        assert_eq!(Micros(20_000).ceil_to_minor(), 2);
    }

    #[test]
    fn cost_is_exact_for_whole_hours_and_floors_otherwise() {
        // 2.50/h for one hour: 250 cents = 2 500 000 micro.
        assert_eq!(cost_micros(250, 3_600_000_000), Micros(2_500_000));
        // one second of 2.50/h = 694.44… micro, floored.
        assert_eq!(cost_micros(250, 1_000_000), Micros(694));
        // Telescoping: the sum of differences is the total, whatever the cut points.
        let cuts = [0, 1_234_567, 900_000_000, 3_599_999_999, 7_200_000_001];
        let sum: i64 = cuts
            .windows(2)
            .map(|w| cost_micros(250, w[1]).0 - cost_micros(250, w[0]).0)
            .sum();
        assert_eq!(sum, cost_micros(250, 7_200_000_001).0);
    }

    #[test]
    fn months_and_gpu_hours() {
        let t = time::macros::datetime!(2026-12-31 23:59:59 UTC);
        let (s, e) = month_bounds(t);
        assert_eq!(s, time::macros::datetime!(2026-12-01 00:00 UTC));
        assert_eq!(e, time::macros::datetime!(2027-01-01 00:00 UTC));
        assert_eq!(gpu_hours(3_600_000_000 * 12 + 1_800_000_000), "12.500000");
        assert_eq!(
            month_label(parse_month("month", "2026-11").unwrap()),
            "2026-11"
        );
        let err = parse_month("month", "nov").unwrap_err().to_string();
        assert!(err.contains("YYYY-MM"), "{err}");
    }
}
