//! What an account's owner does from the dashboard: sign in ([`sign_in`]), see and rotate the
//! personal URL, read usage, fund the wallet ([`wallet`]) and end sandbox sessions. Everything
//! takes the signed-in account; nothing here reaches another account's data.

pub mod limits;
pub mod sign_in;
pub mod wallet;

use std::sync::Arc;

use toolgate_domain::{Account, AccountId, ApiKey, BillingStatus, Brand, MonthKey, Pricing};
use toolgate_sandbox::SandboxSessions;
pub use toolgate_sandbox::{SandboxSessionInfo, SessionState};
use toolgate_store::{DailyCalls, Store, StoreError};
use toolgate_vault::Vault;

pub use limits::{LimitsError, LimitsInput, LimitsReport, SpendSplit};
pub use sign_in::{SignIn, SignInError, SignInLimits, Started};
pub use toolgate_store::{SpendLine, WalletEntry};
pub use wallet::{TopUpError, WalletReport, Wallets, WebhookOutcome};

/// Why an owner's action failed; the detail of `Unavailable` is for logs.
#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    /// storage or the vault failed
    #[error("the service cannot do this right now, please retry")]
    Unavailable(String),
}

impl From<StoreError> for OwnerError {
    fn from(err: StoreError) -> Self {
        Self::Unavailable(err.to_string())
    }
}

/// A month of calls, as the usage page shows it.
#[derive(Debug, Clone)]
pub struct UsageReport {
    /// `YYYY-MM`.
    pub month: String,
    /// Days in that month.
    pub days_in_month: u8,
    /// Days with calls.
    pub days: Vec<DailyCalls>,
    /// Calls paid by the allowance this month.
    pub free_calls: i64,
    /// Calls paid from the wallet this month.
    pub paid_calls: i64,
    /// The billing status record.
    pub status: BillingStatus,
}

/// The owner's use cases besides sign-in and the wallet.
pub struct Owner {
    store: Arc<dyn Store>,
    vault: Option<Arc<Vault>>,
    sessions: Option<Arc<dyn SandboxSessions>>,
    brand: Brand,
    pricing: Pricing,
    public_url: String,
}

impl Owner {
    /// The owner's use cases; `sessions` absent means no sandbox (the sessions page is empty).
    pub fn new(
        store: Arc<dyn Store>,
        vault: Option<Arc<Vault>>,
        sessions: Option<Arc<dyn SandboxSessions>>,
        brand: Brand,
        pricing: Pricing,
        public_url: &str,
    ) -> Self {
        Self {
            store,
            vault,
            sessions,
            brand,
            pricing,
            public_url: public_url.trim_end_matches('/').to_owned(),
        }
    }

    /// The personal URL, if the current key was kept sealed (it is, unless it was issued
    /// before the dashboard existed or the vault lost its master key: a rotation mends both).
    pub async fn personal_url(&self, account: &AccountId) -> Result<Option<String>, OwnerError> {
        let (Some(vault), Some(sealed)) = (&self.vault, self.store.sealed_key(account).await?)
        else {
            return Ok(None);
        };
        match vault.open_account_key(account, &sealed) {
            Ok(key) => Ok(std::str::from_utf8(&key)
                .ok()
                .map(|key| format!("{}/u/{key}", self.public_url))),
            Err(err) => {
                tracing::warn!(error = %err, "a kept account key does not open");
                Ok(None)
            }
        }
    }

    /// Replaces the key; the old one stops working when this returns. Returns the new URL.
    pub async fn rotate_key(&self, account: &AccountId) -> Result<String, OwnerError> {
        let key =
            ApiKey::generate(&self.brand).map_err(|e| OwnerError::Unavailable(e.to_string()))?;
        self.store.replace_key(account, &key.hash()).await?;
        keep_key(&*self.store, self.vault.as_deref(), account, &key).await;
        Ok(format!("{}/u/{}", self.public_url, key.expose()))
    }

    /// This month's calls per day and the billing status.
    pub async fn usage(&self, account: &Account) -> Result<UsageReport, OwnerError> {
        let month = MonthKey::now();
        let days = self.store.daily_calls(&account.id, &month).await?;
        let usage = self.store.usage(&account.id, &month).await?;
        let status = BillingStatus::new(&account.tier, usage, &self.pricing);
        Ok(UsageReport {
            days_in_month: days_in_month(month.as_str()),
            month: month.as_str().to_owned(),
            free_calls: days.iter().map(|d| d.free).sum(),
            paid_calls: days.iter().map(|d| d.paid).sum(),
            days,
            status,
        })
    }

    /// The account's live sandbox sessions.
    pub async fn sandbox_sessions(&self, account: &AccountId) -> Vec<SandboxSessionInfo> {
        match &self.sessions {
            Some(sessions) => sessions.list(account.as_str()).await,
            None => Vec::new(),
        }
    }

    /// Ends one of the account's sandbox sessions; `false` if it had none of that id.
    pub async fn end_sandbox_session(&self, account: &AccountId, id: &str) -> bool {
        match &self.sessions {
            Some(sessions) => sessions.close(account.as_str(), id).await,
            None => false,
        }
    }
}

/// Keeps `key` sealed for the dashboard. A failure costs only the "reveal" (a rotation
/// mends it), so it is logged, not raised: the key itself is already in force.
pub(crate) async fn keep_key(
    store: &dyn Store,
    vault: Option<&Vault>,
    account: &AccountId,
    key: &ApiKey,
) {
    let Some(vault) = vault else { return };
    let kept = match vault.seal_account_key(account, key.expose().as_bytes()) {
        Ok(sealed) => store.put_sealed_key(account, &key.hash(), &sealed).await,
        Err(err) => Err(StoreError::Unavailable(err.to_string())),
    };
    if let Err(err) = kept {
        tracing::warn!(error = %err, "the new key was not kept for the dashboard");
    }
}

/// Days in a `YYYY-MM` month (31 if the text is not one).
fn days_in_month(month: &str) -> u8 {
    let parsed = month
        .split_once('-')
        .and_then(|(y, m)| Some((y.parse::<i32>().ok()?, m.parse::<u8>().ok()?)));
    parsed
        .and_then(|(year, month)| {
            let month = toolgate_domain::time_reexport::Month::try_from(month).ok()?;
            Some(month.length(year))
        })
        .unwrap_or(31)
}

#[cfg(test)]
mod tests {
    #[test]
    fn month_lengths() {
        assert_eq!(super::days_in_month("2026-02"), 28);
        assert_eq!(super::days_in_month("2028-02"), 29);
        assert_eq!(super::days_in_month("2026-11"), 30);
        assert_eq!(super::days_in_month("junk"), 31);
    }
}
