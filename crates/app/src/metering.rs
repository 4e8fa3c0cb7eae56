//! Admitting calls against the allowance and the wallet, and reporting the billing status.

use std::sync::Arc;

use toolgate_domain::{
    Account, BillingStatus, CapPeriod, CapRoom, CapScope, MonthKey, Pricing, UsageSnapshot,
};
use toolgate_store::{CallCharge, Decided, Store, StoreError};

/// Why metering could not answer.
#[derive(Debug, thiserror::Error)]
pub enum MeterError {
    /// the account disappeared between authentication and metering
    #[error("the account no longer exists")]
    NoAccount,
    /// storage failed; the source is for logs only
    #[error("metering is temporarily unavailable")]
    Unavailable(#[source] StoreError),
}

impl From<StoreError> for MeterError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound => Self::NoAccount,
            other => Self::Unavailable(other),
        }
    }
}

/// The meter: one admission per tool call, recorded before the tool runs.
pub struct Meter {
    store: Arc<dyn Store>,
    pricing: Pricing,
}

impl Meter {
    /// A meter charging `pricing`.
    pub fn new(store: Arc<dyn Store>, pricing: Pricing) -> Self {
        Self { store, pricing }
    }

    /// The operator's prices.
    pub fn pricing(&self) -> &Pricing {
        &self.pricing
    }

    /// Charges one call of `tool` to the current UTC month's allowance, else the wallet. The
    /// answer may come before the charge is durable: the call may start at once, and its result
    /// goes out only after [`Decided::recorded`] resolves.
    pub async fn admit(&self, account: &Account, tool: &str) -> Result<Decided, MeterError> {
        let month = MonthKey::now();
        let charge = CallCharge {
            account: &account.id,
            month: &month,
            tool,
            free_monthly_calls: self.pricing.free_monthly_calls,
            paid_call_cost: self.pricing.paid_call_cost,
            key: account.via.named_key().map(|key| &key.id),
            capped: account.capped(),
        };
        Ok(self.store.decide_call(&charge).await?)
    }

    /// The billing status record as of now, or as of `known` (the usage a call's admission
    /// left, which the store reported exactly) without a read.
    pub async fn status(
        &self,
        account: &Account,
        known: Option<UsageSnapshot>,
    ) -> Result<BillingStatus, MeterError> {
        let usage = match known {
            Some(usage) => usage,
            None => self.store.usage(&account.id, &MonthKey::now()).await?,
        };
        Ok(BillingStatus::new(&account.tier, usage, &self.pricing))
    }

    /// The message a caller refused by a spend cap reads: which cap, how much of it is spent,
    /// and how to go on.
    pub fn cap_message(&self, room: &CapRoom) -> String {
        let whose = match room.scope {
            CapScope::Account => "the account's",
            CapScope::Key => "this key's",
        };
        let (period, spent_in, renews) = match room.period {
            CapPeriod::Month => ("monthly", "this month", "on the 1st of next month (UTC)"),
            CapPeriod::Day => ("daily", "today", "at 00:00 UTC"),
        };
        format!(
            "This call would pass {whose} {period} spend cap of {} USD ({} USD spent {spent_in}, \
             {} USD per call). The owner can raise or remove the cap in the dashboard; \
             it renews {renews}. Free calls are not counted against it.",
            room.cap.to_usd_price_string(),
            room.spent.to_usd_price_string(),
            self.pricing.paid_call_cost.to_usd_price_string(),
        )
    }

    /// The message a refused caller reads: what happened and how to continue. (It names the
    /// operator, who can credit a wallet today; the dashboard's top-up is not built yet.)
    pub fn refusal_message(&self) -> String {
        format!(
            "The monthly free allowance of {} calls is used up and the wallet cannot pay for this call \
             ({} USD per call). Ask the service's operator to top up your wallet ({} to {} USD); \
             the allowance renews on the 1st of next month (UTC).",
            self.pricing.free_monthly_calls,
            self.pricing.paid_call_cost.to_usd_price_string(),
            self.pricing.min_topup.to_usd_cents_string(),
            self.pricing.max_topup.to_usd_cents_string(),
        )
    }
}
