//! The owner's spend caps and wallet alert: read with this month's and today's spend, and set
//! from the dashboard's form in US dollars. A refused form changes nothing.

use toolgate_domain::time_reexport::OffsetDateTime;
use toolgate_domain::{Account, DayKey, Micros, MonthKey, SpendCaps};
use toolgate_store::{SpendLimits, SpendLine, SpendOverview};

use super::{Owner, OwnerError};

/// Most a cap or the alert amount may be: one million US dollars.
const MAX_LIMIT: Micros = Micros(1_000_000 * 1_000_000);
/// Micro-dollars in a cent: limits are whole cents.
const MICROS_PER_CENT: i64 = 10_000;

/// Why limits were not set.
#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    /// a field is not an amount the form takes; the text says which and why
    #[error("{0}")]
    Refused(String),
    /// storage failed
    #[error(transparent)]
    Failed(#[from] OwnerError),
}

/// The limits form as sent: each field US dollars, or empty for none.
#[derive(Debug, Clone, Copy)]
pub struct LimitsInput<'a> {
    /// The monthly cap.
    pub month: &'a str,
    /// The daily cap.
    pub day: &'a str,
    /// The wallet alert amount.
    pub alert_below: &'a str,
}

/// The limits page's numbers.
#[derive(Debug, Clone)]
pub struct LimitsReport {
    /// Settings and spend.
    pub overview: SpendOverview,
    /// `YYYY-MM`.
    pub month: String,
    /// `YYYY-MM-DD`.
    pub day: String,
}

/// The usage page's split of the month's calls.
#[derive(Debug, Clone)]
pub struct SpendSplit {
    /// Per key: `default` (the first key and OAuth apps), else the key's name.
    pub by_key: Vec<SpendLine>,
    /// Per tool.
    pub by_tool: Vec<SpendLine>,
}

/// One field: empty is none; else whole cents, above zero, at most 1,000,000 USD.
pub fn parse_limit(label: &str, raw: &str) -> Result<Option<Micros>, LimitsError> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(None);
    }
    let refused = || {
        LimitsError::Refused(format!(
            "{label}: enter US dollars with at most two decimals, above 0 and at most \
             1000000.00 (e.g. 25.00), or leave it empty for none"
        ))
    };
    let amount = Micros::parse_usd(raw).map_err(|_| refused())?;
    if amount.0 % MICROS_PER_CENT != 0 || amount.0 <= 0 || amount > MAX_LIMIT {
        return Err(refused());
    }
    Ok(Some(amount))
}

impl Owner {
    /// Deletes the per-day spend rows older than yesterday (UTC), for the periodic purge.
    pub async fn purge_old_spend_days(&self) -> Result<u64, OwnerError> {
        let yesterday =
            OffsetDateTime::now_utc() - toolgate_domain::time_reexport::Duration::days(1);
        Ok(self
            .store
            .purge_spend_days(&DayKey::containing(yesterday))
            .await?)
    }

    /// The account's caps and wallet alert, with this month's and today's paid spend.
    pub async fn spend_limits(&self, account: &Account) -> Result<LimitsReport, OwnerError> {
        let now = OffsetDateTime::now_utc();
        let (month, day) = (MonthKey::containing(now), DayKey::containing(now));
        let overview = self.store.spend_overview(&account.id, &month, &day).await?;
        Ok(LimitsReport {
            overview,
            month: month.as_str().to_owned(),
            day: day.as_str().to_owned(),
        })
    }

    /// Sets the caps and the alert amount from the form; every field is checked before
    /// anything is written.
    pub async fn set_spend_limits(
        &self,
        account: &Account,
        input: LimitsInput<'_>,
    ) -> Result<SpendLimits, LimitsError> {
        let limits = SpendLimits {
            caps: SpendCaps {
                month: parse_limit("Monthly cap", input.month)?,
                day: parse_limit("Daily cap", input.day)?,
            },
            alert_below: parse_limit("Alert below", input.alert_below)?,
        };
        self.store
            .set_spend_limits(&account.id, &limits)
            .await
            .map_err(OwnerError::from)?;
        Ok(limits)
    }

    /// This month's calls per key and per tool.
    pub async fn spend_split(&self, account: &Account) -> Result<SpendSplit, OwnerError> {
        let month = MonthKey::now();
        Ok(SpendSplit {
            by_key: self.store.spend_by_key(&account.id, &month).await?,
            by_tool: self.store.spend_by_tool(&account.id, &month).await?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::parse_limit;
    use toolgate_domain::Micros;

    #[test]
    fn limits_are_whole_cents_above_zero_up_to_a_million() {
        assert_eq!(parse_limit("x", " ").unwrap(), None);
        assert_eq!(parse_limit("x", "25").unwrap(), Some(Micros(25_000_000)));
        assert_eq!(parse_limit("x", "0.05").unwrap(), Some(Micros(50_000)));
        assert_eq!(
            parse_limit("x", "1000000.00").unwrap(),
            Some(Micros(1_000_000_000_000))
        );
        for bad in [
            "0",
            "0.00",
            "0.001",
            "-5",
            "1e3",
            "1,00",
            "1000000.01",
            "abc",
            "5.",
        ] {
            assert!(parse_limit("x", bad).is_err(), "{bad}");
        }
    }
}
