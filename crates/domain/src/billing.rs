//! Pricing, the month an allowance belongs to, and the billing status record.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::money::Micros;

/// The operator's prices and allowances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pricing {
    /// Free calls per calendar month (UTC).
    pub free_monthly_calls: i64,
    /// Price of one call once the allowance is used up.
    pub paid_call_cost: Micros,
    /// Smallest wallet top-up a customer may buy.
    pub min_topup: Micros,
    /// Largest wallet top-up a customer may buy.
    pub max_topup: Micros,
}

impl Default for Pricing {
    fn default() -> Self {
        Self {
            free_monthly_calls: 1000,
            paid_call_cost: Micros(8_000),
            min_topup: Micros(5_000_000),
            max_topup: Micros(500_000_000),
        }
    }
}

/// A calendar month in UTC, `YYYY-MM`: the key an allowance is counted under, so no reset job is needed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MonthKey(String);

impl MonthKey {
    /// The month that contains `at`, read in UTC.
    pub fn containing(at: OffsetDateTime) -> Self {
        let utc = at.to_offset(time::UtcOffset::UTC);
        Self(format!("{:04}-{:02}", utc.year(), u8::from(utc.month())))
    }

    /// The current month.
    pub fn now() -> Self {
        Self::containing(OffsetDateTime::now_utc())
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A calendar day in UTC, `YYYY-MM-DD`: the key a daily count (tokens on the operator's model
/// keys) is kept under, so no reset job is needed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DayKey(String);

impl DayKey {
    /// The day that contains `at`, read in UTC.
    pub fn containing(at: OffsetDateTime) -> Self {
        let utc = at.to_offset(time::UtcOffset::UTC);
        Self(format!(
            "{:04}-{:02}-{:02}",
            utc.year(),
            u8::from(utc.month()),
            utc.day()
        ))
    }

    /// The current day.
    pub fn now() -> Self {
        Self::containing(OffsetDateTime::now_utc())
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An account's consumption as storage reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageSnapshot {
    /// Free calls used in the month asked about.
    pub free_used: i64,
    /// Wallet balance less what the account owes: negative while a refund or dispute has taken
    /// back more than the wallet held (the wallet itself never goes below zero).
    pub wallet: Micros,
}

/// The billing status record, field for field as the interface specification names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BillingStatus {
    /// Account tier; `free` is the one that occurs.
    pub tier: String,
    /// Free calls left this month.
    pub free_remaining_this_month: i64,
    /// The monthly allowance.
    pub free_monthly_limit: i64,
    /// Wallet balance, two decimals.
    pub wallet_balance_usd: String,
    /// Paid calls the wallet covers; 0 while anything is owed.
    pub paid_calls_available: i64,
    /// Price of one paid call.
    pub paid_call_cost_usd: String,
    /// Minimum top-up.
    pub min_topup_usd: String,
    /// Maximum top-up.
    pub max_topup_usd: String,
}

impl BillingStatus {
    /// Builds the record from what storage reports and the operator's prices.
    pub fn new(tier: &str, usage: UsageSnapshot, pricing: &Pricing) -> Self {
        let paid_calls_available = if pricing.paid_call_cost.0 > 0 {
            usage.wallet.0.max(0) / pricing.paid_call_cost.0
        } else {
            0
        };
        Self {
            tier: tier.to_owned(),
            free_remaining_this_month: (pricing.free_monthly_calls - usage.free_used).max(0),
            free_monthly_limit: pricing.free_monthly_calls,
            wallet_balance_usd: usage.wallet.to_usd_cents_string(),
            paid_calls_available,
            paid_call_cost_usd: pricing.paid_call_cost.to_usd_price_string(),
            min_topup_usd: pricing.min_topup.to_usd_cents_string(),
            max_topup_usd: pricing.max_topup.to_usd_cents_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn month_key_is_the_utc_calendar_month() {
        assert_eq!(
            MonthKey::containing(datetime!(2026-11-30 23:59:59 -02:00)).as_str(),
            "2026-12"
        );
        assert_eq!(
            MonthKey::containing(datetime!(2026-01-01 00:00:00 UTC)).as_str(),
            "2026-01"
        );
    }

    #[test]
    fn record_matches_the_specification() {
        let usage = UsageSnapshot {
            free_used: 3,
            wallet: Micros(12_500_000),
        };
        let record = BillingStatus::new("free", usage, &Pricing::default());
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "tier": "free",
                "free_remaining_this_month": 997,
                "free_monthly_limit": 1000,
                "wallet_balance_usd": "12.50",
                "paid_calls_available": 1562,
                "paid_call_cost_usd": "0.008",
                "min_topup_usd": "5.00",
                "max_topup_usd": "500.00",
            })
        );
    }

    #[test]
    fn day_key_is_the_utc_calendar_day() {
        assert_eq!(
            DayKey::containing(datetime!(2026-11-30 23:59:59 -02:00)).as_str(),
            "2026-12-01"
        );
        assert_eq!(
            DayKey::containing(datetime!(2026-03-09 00:00:00 UTC)).as_str(),
            "2026-03-09"
        );
    }

    #[test]
    fn a_balance_owed_shows_negative_with_no_paid_calls() {
        let usage = UsageSnapshot {
            free_used: 1000,
            wallet: Micros(-3_005_000),
        };
        let record = BillingStatus::new("free", usage, &Pricing::default());
        assert_eq!(record.wallet_balance_usd, "-3.01");
        assert_eq!(record.paid_calls_available, 0);
    }

    #[test]
    fn remaining_never_goes_negative_when_the_limit_is_lowered() {
        let usage = UsageSnapshot {
            free_used: 50,
            wallet: Micros::ZERO,
        };
        let pricing = Pricing {
            free_monthly_calls: 10,
            ..Pricing::default()
        };
        assert_eq!(
            BillingStatus::new("free", usage, &pricing).free_remaining_this_month,
            0
        );
    }
}
