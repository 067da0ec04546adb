//! Money is integer minor units of a currency; never floats.

use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Serialize};

use crate::Invalid;

/// Currencies budgets, prices and credit notes may be entered in: two-decimal ones, so minor
/// units are cents.
pub const BUDGET_CURRENCIES: &[&str] = &["USD", "EUR", "GBP", "CHF", "CAD", "AUD"];

/// An ISO 4217 code, upper case ("USD"). Compares with `&str`, and derefs to one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(value_type = String, example = "USD"))]
#[serde(transparent)]
#[cfg_attr(feature = "sqlx", sqlx(transparent))]
pub struct Currency(String);

impl Currency {
    /// A currency a person typed: one of [`BUDGET_CURRENCIES`], in any case.
    pub fn parse_as(field: &'static str, input: &str) -> Result<Self, Invalid> {
        let code = input.trim().to_ascii_uppercase();
        if BUDGET_CURRENCIES.contains(&code.as_str()) {
            Ok(Self(code))
        } else {
            Err(Invalid::new(
                field,
                format!(
                    "{code} is not supported; use one of {}",
                    BUDGET_CURRENCIES.join(", ")
                ),
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A code read back from storage, where the schema holds its form (three upper-case letters).
impl From<String> for Currency {
    fn from(code: String) -> Self {
        debug_assert!(
            code.len() == 3 && code.bytes().all(|b| b.is_ascii_uppercase()),
            "{code:?} is not an ISO 4217 code"
        );
        Self(code)
    }
}

impl From<&str> for Currency {
    fn from(code: &str) -> Self {
        Self::from(code.to_string())
    }
}

impl Deref for Currency {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Currency {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for Currency {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<String> for Currency {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<&str> for Currency {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Integer minor units (cents) of a currency.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Money {
    pub amount_minor: i64,
    pub currency: Currency,
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let abs = self.amount_minor.unsigned_abs();
        let sign = if self.amount_minor < 0 { "-" } else { "" };
        write!(f, "{sign}{}.{:02} {}", abs / 100, abs % 100, self.currency)
    }
}

impl Money {
    /// As people read money: thousands grouped, two decimals, the currency after
    /// (`1,722.24 USD`). [`Display`](fmt::Display) keeps the plain form (`1722.24 USD`), which
    /// [`Money::parse`] reads back and messages, forms and exports use.
    pub fn grouped(&self) -> String {
        let abs = self.amount_minor.unsigned_abs();
        let sign = if self.amount_minor < 0 { "-" } else { "" };
        format!(
            "{sign}{}.{:02} {}",
            group_thousands(&(abs / 100).to_string()),
            abs % 100,
            self.currency
        )
    }

    /// The largest amount anyone may enter: 1,000,000,000.00 (the schema holds budgets and
    /// credit notes to the same bound; migration 0015).
    pub const MAX_MINOR: i64 = 100_000_000_000;
    /// The largest hourly price or fee: 100,000.00 per hour, so price × running time fits
    /// rating's arithmetic for any month (the schema holds prices and fees to it too).
    pub const MAX_PER_HOUR_MINOR: i64 = 10_000_000;

    pub fn new(amount_minor: i64, currency: impl Into<Currency>) -> Self {
        Self {
            amount_minor,
            currency: currency.into(),
        }
    }

    /// [`Money::parse_as`] for an hourly price or fee: above zero, at most
    /// [`Money::MAX_PER_HOUR_MINOR`].
    pub fn parse_hourly(field: &'static str, input: &str) -> Result<Self, Invalid> {
        let m = Self::parse_as(field, input)?;
        if m.amount_minor > Self::MAX_PER_HOUR_MINOR {
            return Err(Invalid::new(
                field,
                format!(
                    "{m} per hour is more than the most a price may be ({}.00 {} per hour)",
                    Self::MAX_PER_HOUR_MINOR / 100,
                    m.currency
                ),
            ));
        }
        Ok(m)
    }

    /// Parses `5000.00 USD`, `5000 usd` or `12.5 EUR`, as a monthly budget.
    pub fn parse(input: &str) -> Result<Self, Invalid> {
        Self::parse_as("monthly_budget", input)
    }

    /// [`Money::parse`], with errors naming `field`.
    pub fn parse_as(field: &'static str, input: &str) -> Result<Self, Invalid> {
        let invalid = |reason: String| Invalid::new(field, reason);
        let parts: Vec<&str> = input.split_whitespace().collect();
        let [amount, currency] = parts[..] else {
            return Err(invalid(format!(
                "{input:?}: write an amount and a currency, e.g. \"5000.00 USD\""
            )));
        };
        let currency = Currency::parse_as(field, currency)?;
        let (whole, frac) = amount.split_once('.').unwrap_or((amount, ""));
        let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
        if !digits(whole) || (!frac.is_empty() && !digits(frac)) || frac.len() > 2 {
            return Err(invalid(format!(
                "{amount:?} is not an amount: use digits and at most two decimals"
            )));
        }
        let cents: i64 = format!("{frac:0<2}").parse().unwrap_or(0);
        let amount_minor = whole
            .parse::<i64>()
            .ok()
            .and_then(|w| w.checked_mul(100))
            .and_then(|w| w.checked_add(cents))
            .filter(|m| *m <= Self::MAX_MINOR)
            .ok_or_else(|| {
                invalid(format!(
                    "{amount} is more than the largest amount accepted ({} {currency})",
                    Self::MAX_MINOR / 100
                ))
            })?;
        Ok(Money {
            amount_minor,
            currency,
        })
    }
}

/// Micro-units of a currency: 10^-6 of its unit, 10^-4 of a cent. Rating works in these so
/// that per-second usage is never rounded to cents before the invoice.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Micros(pub i64);

impl Micros {
    /// Micro-units in one minor unit (cent) of the two-decimal currencies the platform sells in.
    pub const PER_MINOR: i64 = 10_000;

    pub fn from_minor(minor: i64) -> Self {
        Micros(minor * Self::PER_MINOR)
    }

    /// The rounding rule, applied once per invoice line: to the nearest cent, halves away
    /// from zero.
    pub fn round_to_minor(self) -> i64 {
        let (q, r) = (self.0 / Self::PER_MINOR, self.0 % Self::PER_MINOR);
        if r.abs() * 2 >= Self::PER_MINOR {
            q + r.signum()
        } else {
            q
        }
    }

    /// Whole cents, rounded up: what a budget check counts (never under-counts spend).
    pub fn ceil_to_minor(self) -> i64 {
        let (q, r) = (
            self.0.div_euclid(Self::PER_MINOR),
            self.0.rem_euclid(Self::PER_MINOR),
        );
        if r > 0 { q + 1 } else { q }
    }

    pub fn money(self, currency: &str) -> Money {
        Money::new(self.round_to_minor(), currency)
    }

    /// An amount a person typed in currency units, with up to six decimals (`0.085`), as
    /// micro-units, at most `max`; errors name `field`.
    pub fn parse_amount(field: &'static str, amount: &str, max: Micros) -> Result<Self, Invalid> {
        let amount = amount.trim();
        let (whole, frac) = amount.split_once('.').unwrap_or((amount, ""));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || (!frac.is_empty() && !digits(frac)) || frac.len() > 6 {
            return Err(Invalid::new(
                field,
                format!("{amount:?} is not an amount: use digits and at most six decimals"),
            ));
        }
        let micro = whole
            .parse::<i64>()
            .ok()
            .and_then(|w| w.checked_mul(1_000_000))
            .and_then(|w| w.checked_add(format!("{frac:0<6}").parse::<i64>().unwrap_or(0)))
            .filter(|m| *m <= max.0)
            .ok_or_else(|| {
                Invalid::new(
                    field,
                    format!("{amount} is more than the most allowed ({max})"),
                )
            })?;
        Ok(Micros(micro))
    }
}

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let abs = self.0.unsigned_abs();
        let sign = if self.0 < 0 { "-" } else { "" };
        write!(f, "{sign}{}.{:06}", abs / 1_000_000, abs % 1_000_000)
    }
}

/// `1234567` → `1,234,567`: ASCII digits, grouped by three from the right.
pub(crate) fn group_thousands(digits: &str) -> String {
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A decimal quantity as people read it (`12.500000` GPU-hours → `12.50`, `1722` →
/// `1,722.00`): rounded half up to `places` decimals, thousands grouped. Anything that is not
/// a plain non-negative decimal comes back as it was.
pub fn readable_decimal(value: &str, places: u32) -> String {
    // A quantity with its unit after it ("230.000000 h") keeps the unit.
    if let Some((number, unit)) = value.split_once(' ') {
        return format!("{} {unit}", readable_decimal(number, places));
    }
    let (whole, frac) = value.split_once('.').unwrap_or((value, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || whole.len() > 18 || !digits(whole) || !digits(frac) {
        return value.to_owned();
    }
    let scale = 10u128.pow(places);
    let kept: String = frac
        .chars()
        .chain(std::iter::repeat('0'))
        .take(places as usize)
        .collect();
    let mut scaled = whole.parse::<u128>().unwrap_or(0) * scale + kept.parse::<u128>().unwrap_or(0);
    if frac
        .as_bytes()
        .get(places as usize)
        .is_some_and(|d| *d >= b'5')
    {
        scaled += 1;
    }
    let grouped = group_thousands(&(scaled / scale).to_string());
    match places {
        0 => grouped,
        p => format!("{grouped}.{:0width$}", scaled % scale, width = p as usize),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_reads_with_grouped_thousands_and_two_decimals() {
        assert_eq!(Money::new(172_224, "USD").grouped(), "1,722.24 USD");
        assert_eq!(Money::new(64_800_000, "EUR").grouped(), "648,000.00 EUR");
        assert_eq!(Money::new(5, "USD").grouped(), "0.05 USD");
        assert_eq!(
            Money::new(-123_456_789, "USD").grouped(),
            "-1,234,567.89 USD"
        );
        assert_eq!(Money::new(99_999, "USD").grouped(), "999.99 USD");
        // The plain form is unchanged, and still parses.
        assert_eq!(Money::new(172_224, "USD").to_string(), "1722.24 USD");
    }

    #[test]
    fn quantities_read_rounded_and_grouped() {
        assert_eq!(readable_decimal("648.000000", 2), "648.00");
        assert_eq!(readable_decimal("12.505000", 2), "12.51");
        assert_eq!(readable_decimal("1722.244999", 2), "1,722.24");
        assert_eq!(readable_decimal("999.995", 2), "1,000.00");
        assert_eq!(readable_decimal("1234567", 0), "1,234,567");
        assert_eq!(readable_decimal("2.5", 3), "2.500");
        assert_eq!(readable_decimal("230.000000 h", 2), "230.00 h");
        for odd in ["", "-1.5", "1e3", ".5", "twelve h"] {
            assert_eq!(readable_decimal(odd, 2), odd);
        }
    }

    #[test]
    fn amounts_parse_to_minor_units_and_print_back() {
        let m = Money::parse("5000 usd").unwrap();
        assert_eq!(m, Money::new(500_000, "USD"));
        assert_eq!(m.to_string(), "5000.00 USD");
        assert_eq!(Money::parse("12.5 EUR").unwrap().amount_minor, 1250);
        assert_eq!(Money::new(-5, "GBP").to_string(), "-0.05 GBP");
    }

    #[test]
    fn bad_amounts_name_the_field_and_the_rule() {
        let e = Money::parse_as("amount", "12.345 USD").unwrap_err();
        assert_eq!(e.field, "amount");
        assert!(e.reason.contains("at most two decimals"), "{e}");
        let e = Money::parse("10 XYZ").unwrap_err();
        assert!(e.reason.starts_with("XYZ is not supported"), "{e}");
        let e = Money::parse("1000000000.01 USD").unwrap_err();
        assert!(e.reason.contains("largest amount"), "{e}");
        assert!(Money::parse("1000000000.00 USD").is_ok());
        let e = Money::parse_hourly("fee", "100000.01 USD").unwrap_err();
        assert!(e.reason.contains("per hour is more than"), "{e}");
    }

    #[test]
    fn money_keeps_its_json_shape() {
        let json = serde_json::to_value(Money::new(250, "USD")).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"amount_minor": 250, "currency": "USD"})
        );
        let back: Money = serde_json::from_value(json).unwrap();
        assert_eq!(back.currency, "USD");
    }
}
