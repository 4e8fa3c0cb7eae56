//! What the owner's spend controls store: the account's caps and wallet alert amount, the
//! spend against them (per account and per named key), the month's spend per key and per tool,
//! and which alerts were sent, each once.

use async_trait::async_trait;
use toolgate_domain::{AccountId, DayKey, Email, KeyId, Micros, MonthKey, SpendCaps};

use crate::StoreError;

/// The owner's settings of the account's spend: its caps and the wallet alert amount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpendLimits {
    /// The account's monthly and daily caps.
    pub caps: SpendCaps,
    /// Mail the owner once the balance falls below this; `None`: no wallet alert.
    pub alert_below: Option<Micros>,
}

/// A live named key's caps and what it spent from the wallet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpend {
    /// The key.
    pub id: KeyId,
    /// The owner's name for it.
    pub name: String,
    /// Its own caps.
    pub caps: SpendCaps,
    /// Paid from the wallet by its calls this month.
    pub month: Micros,
    /// Paid from the wallet by its calls today (UTC).
    pub day: Micros,
}

/// An account's spend against its limits, as alerts and the limits page read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendOverview {
    /// The owner's address, whom alerts go to.
    pub email: Email,
    /// The owner's settings.
    pub limits: SpendLimits,
    /// The balance (wallet less owed).
    pub balance: Micros,
    /// Paid from the wallet this month, by every credential of the account.
    pub month: Micros,
    /// Paid from the wallet today (UTC).
    pub day: Micros,
    /// The account's live named keys, by name.
    pub keys: Vec<KeySpend>,
}

/// A month's calls of one key or one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendLine {
    /// The key's name (`default` for the first key and OAuth apps), or the tool's name.
    pub label: String,
    /// Calls paid by the allowance.
    pub free: i64,
    /// Calls paid from the wallet.
    pub paid: i64,
    /// What the paid calls cost together.
    pub cost: Micros,
}

/// The spend controls' storage.
#[async_trait]
pub trait SpendControls: Send + Sync {
    /// Replaces the account's caps and wallet alert amount (`None` clears one), then moves the
    /// key epoch on, so that authentication reads the new caps at once. `Err(NotFound)` for an
    /// unknown account.
    async fn set_spend_limits(
        &self,
        account: &AccountId,
        limits: &SpendLimits,
    ) -> Result<(), StoreError>;

    /// The account's settings and what it spent in `month` and on `day` (UTC), only calls paid
    /// from the wallet, as the `spend` rows that admissions keep hold it (the same numbers caps
    /// are decided on). `Err(NotFound)` for an unknown account.
    async fn spend_overview(
        &self,
        account: &AccountId,
        month: &MonthKey,
        day: &DayKey,
    ) -> Result<SpendOverview, StoreError>;

    /// The calls of `month` per key (`default`: the first key and OAuth apps), by label.
    async fn spend_by_key(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<Vec<SpendLine>, StoreError>;

    /// The calls of `month` per tool, by tool name.
    async fn spend_by_tool(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<Vec<SpendLine>, StoreError>;

    /// Records that the alert `kind` of `period` is sent: `true` the first time, `false` ever
    /// after, in one atomic statement, so that of every front end at most one sends it.
    async fn record_alert(
        &self,
        account: &AccountId,
        kind: &str,
        period: &str,
    ) -> Result<bool, StoreError>;

    /// Deletes the per-day `spend` rows of days before `before` (a daily cap and its alerts
    /// read only today's), so the table holds a few days of them; returns how many went.
    async fn purge_spend_days(&self, before: &DayKey) -> Result<u64, StoreError>;

    /// Forgets sent alerts of `kind` (of `period` only, when given), so they may be sent again;
    /// returns how many went.
    async fn forget_alerts(
        &self,
        account: &AccountId,
        kind: &str,
        period: Option<&str>,
    ) -> Result<u64, StoreError>;
}

/// A live key's row as both backends read it: id, name, caps, month and day spend.
pub type KeySpendColumns = (String, String, Option<i64>, Option<i64>, i64, i64);

/// Rebuilds a key's spend from its columns.
pub fn key_spend_from_columns(
    (id, name, cap_month, cap_day, month, day): KeySpendColumns,
) -> KeySpend {
    KeySpend {
        id: KeyId::from_stored(id),
        name,
        caps: SpendCaps::from_columns(cap_month, cap_day),
        month: Micros(month),
        day: Micros(day),
    }
}

/// A month's line from its columns: label, free calls, paid calls, cost.
pub fn spend_line_from_columns((label, free, paid, cost): (String, i64, i64, i64)) -> SpendLine {
    SpendLine {
        label,
        free,
        paid,
        cost: Micros(cost),
    }
}

/// Checks an address read from `accounts`.
pub fn owner_email_from_column(raw: &str) -> Result<Email, StoreError> {
    Email::parse(raw).map_err(|_| StoreError::Unavailable("corrupt accounts row: email".to_owned()))
}
