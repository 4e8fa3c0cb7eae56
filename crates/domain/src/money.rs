//! Money as integer micro-dollars, so no amount is ever rounded by floating point.

use std::fmt;

/// Micro-dollars in one US dollar.
pub const MICROS_PER_USD: i64 = 1_000_000;

/// Largest amount accepted from text: one billion dollars keeps every sum far inside `i64`.
const MAX_PARSED_MICROS: i64 = 1_000_000_000 * MICROS_PER_USD;

/// Why a dollar amount was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    /// an amount in US dollars must look like 12.50: digits, an optional point and at most six decimals
    #[error(
        "an amount in US dollars must look like 12.50: digits, an optional point and at most six decimals"
    )]
    Malformed,
    /// the amount is larger than 1,000,000,000 US dollars
    #[error("the amount is larger than 1,000,000,000 US dollars")]
    TooLarge,
}

/// An amount of US dollars in millionths; a balance is negative only while money is owed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Micros(pub i64);

impl Micros {
    /// Zero dollars.
    pub const ZERO: Self = Self(0);

    /// Parses a non-negative decimal such as `12.50` or `0.008`.
    pub fn parse_usd(raw: &str) -> Result<Self, MoneyError> {
        let (whole, fraction) = raw.split_once('.').unwrap_or((raw, ""));
        let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits_only(whole) || !digits_only(fraction) || fraction.len() > 6 {
            return Err(MoneyError::Malformed);
        }
        if raw.ends_with('.') {
            return Err(MoneyError::Malformed);
        }
        let whole = whole.trim_start_matches('0');
        if whole.len() > 10 {
            return Err(MoneyError::TooLarge);
        }
        let whole_micros = whole.parse::<i64>().unwrap_or(0) * MICROS_PER_USD;
        let fraction_micros = format!("{fraction:0<6}")
            .parse::<i64>()
            .map_err(|_| MoneyError::Malformed)?;
        let total = whole_micros + fraction_micros;
        if total > MAX_PARSED_MICROS {
            return Err(MoneyError::TooLarge);
        }
        Ok(Self(total))
    }

    /// Two decimals, rounded down: a balance never shows a cent it does not hold (and a debt
    /// never a cent less than is owed: -3.005 shows as -3.01).
    pub fn to_usd_cents_string(self) -> String {
        let cents = self.0.div_euclid(10_000);
        let sign = if cents < 0 { "-" } else { "" };
        let cents = cents.unsigned_abs();
        format!("{sign}{}.{:02}", cents / 100, cents % 100)
    }

    /// At least two decimals and as many more as the amount needs, e.g. `0.008`.
    pub fn to_usd_price_string(self) -> String {
        let whole = self.0.div_euclid(MICROS_PER_USD);
        let fraction = format!("{:06}", self.0.rem_euclid(MICROS_PER_USD));
        let trimmed = fraction.trim_end_matches('0');
        let shown = if trimmed.len() < 2 {
            &fraction[..2]
        } else {
            trimmed
        };
        format!("{whole}.{shown}")
    }
}

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} USD", self.to_usd_price_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dollar_amounts_exactly() {
        assert_eq!(Micros::parse_usd("12.50"), Ok(Micros(12_500_000)));
        assert_eq!(Micros::parse_usd("0.008"), Ok(Micros(8_000)));
        assert_eq!(Micros::parse_usd("5"), Ok(Micros(5_000_000)));
        assert_eq!(Micros::parse_usd("0.000001"), Ok(Micros(1)));
        assert_eq!(Micros::parse_usd("007.1"), Ok(Micros(7_100_000)));
        assert_eq!(
            Micros::parse_usd("1000000000"),
            Ok(Micros(1_000_000_000 * MICROS_PER_USD))
        );
    }

    #[test]
    fn refuses_malformed_and_huge_amounts() {
        for bad in [
            "",
            ".5",
            "5.",
            "-1",
            "+1",
            "1e3",
            "1,00",
            "0.0000001",
            " 1",
            "1.2.3",
            "NaN",
            "١",
        ] {
            assert_eq!(
                Micros::parse_usd(bad),
                Err(MoneyError::Malformed),
                "{bad:?}"
            );
        }
        assert_eq!(
            Micros::parse_usd("1000000000.01"),
            Err(MoneyError::TooLarge)
        );
        assert_eq!(
            Micros::parse_usd("99999999999999999999999"),
            Err(MoneyError::TooLarge)
        );
    }

    #[test]
    fn formats_balances_and_prices() {
        assert_eq!(Micros(12_500_000).to_usd_cents_string(), "12.50");
        assert_eq!(Micros(4_992_000).to_usd_cents_string(), "4.99");
        assert_eq!(Micros(0).to_usd_cents_string(), "0.00");
        assert_eq!(Micros(500_000_000).to_usd_cents_string(), "500.00");
        assert_eq!(Micros(-3_000_000).to_usd_cents_string(), "-3.00");
        assert_eq!(Micros(-500_000).to_usd_cents_string(), "-0.50");
        assert_eq!(
            Micros(-1).to_usd_cents_string(),
            "-0.01",
            "a debt is never shown smaller"
        );
        assert_eq!(Micros(8_000).to_usd_price_string(), "0.008");
        assert_eq!(Micros(5_000_000).to_usd_price_string(), "5.00");
        assert_eq!(Micros(500_000_000).to_usd_price_string(), "500.00");
        assert_eq!(Micros(1).to_usd_price_string(), "0.000001");
        assert_eq!(Micros(10_000).to_usd_price_string(), "0.01");
    }
}
