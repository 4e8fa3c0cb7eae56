//! The storage seam: what the service needs from a database, and nothing about which one.
//!
//! Backends (`toolgate-store-sqlite`, `toolgate-store-postgres`) implement [`Store`]; the
//! binary picks one at start-up and hands the rest of the service an `Arc<dyn Store>`.

use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use toolgate_domain::{
    Account, AccountId, Admission, Email, KeyHash, KeyId, Micros, MonthKey, SealedSecret,
    SecretInfo, SecretName, SpendCaps, UsageSnapshot, Via,
};

mod call_history;
mod caps;
mod dashboard;
mod host_lists;
mod mcp_sessions;
mod money;
mod named_keys;
mod oauth;
mod oauth_columns;
mod oauth_spend;
mod placement;
mod spend;
mod tasks;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use call_history::{
    CallHistory, CallOutcome, CallRecord, HistoryCursor, HistoryFilter, MAX_PAGE_ROWS,
    MAX_SEARCH_CHARS, ModelUse, ProviderTokens, destinations_from_column, destinations_to_column,
    like_pattern, model_from_columns, month_of, tokens_per_month,
};
pub use caps::{CapColumns, cap_rooms, spend_rows};
pub use dashboard::{
    DailyCalls, History, NewSignInSession, SealedKeys, SignIns, SingleUseLinks, TokenHash,
    WalletCredit, WalletEntry,
};
pub use host_lists::{
    HostListStore, HostLists, HostListsChange, host_list_from_column, host_list_to_column,
};
pub use mcp_sessions::{McpSessionOpened, McpSessionStore, duration_millis};
pub use money::{
    OperatorTokens, PaymentCredit, Reversal, TakeBack, TakeBacks, TakenBack, reversal_amounts,
};
pub use named_keys::{
    KeyChange, KeyColumns, KeyRecord, NamedKeys, NewNamedKey, key_record_from_columns,
    key_uses_to_json, lines_to_column, named_key_from_columns,
};
pub use oauth::{
    AccessGrant, Advance, CodeColumns, CodeUse, ConnectedApp, Grant, LiveTokenGroup, NewCode,
    NewTokens, OAuthClient, OAuthStore, RefreshColumns, Refreshed, StoredCode, StoredRefresh,
    UsedCode, connected_apps_from_groups,
};
pub use oauth_columns::{redirect_uris_from_column, redirect_uris_to_column};
pub use placement::{
    ClaimView, NodeBeat, NodeLoad, NodeRecord, Placement, claim_view_from_columns, load_to_columns,
    node_from_columns, node_name_from_column, owner_from_columns, seen_columns,
};
pub use spend::{
    KeySpend, KeySpendColumns, SpendControls, SpendLimits, SpendLine, SpendOverview,
    key_spend_from_columns, owner_email_from_column, spend_line_from_columns,
};
pub use tasks::{
    NewTask, TaskCancel, TaskColumns, TaskRecord, TaskState, TaskStore, ended_task_state,
    running_task_state, task_from_columns, task_ttl_millis,
};
/// The replay and rotation rule's values, as the backends' primitives read and write them.
pub use toolgate_oauth::credential::{Credential, CredentialState, Stage};

/// What went wrong in storage, kept apart so that callers answer each case differently.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// the record does not exist
    #[error("not found")]
    NotFound,
    /// a record with the same unique value already exists
    #[error("conflict: {0}")]
    Conflict(&'static str),
    /// the database could not be reached or failed; the detail is for logs only
    #[error("storage unavailable: {0}")]
    Unavailable(String),
}

/// A new account, with the hash of its first key.
#[derive(Debug, Clone)]
pub struct NewAccount {
    /// Identifier chosen by the caller.
    pub id: AccountId,
    /// Normalised address; unique.
    pub email: Email,
    /// SHA-256 of the account's key; unique.
    pub key_hash: KeyHash,
}

/// One call to be admitted and recorded.
#[derive(Debug, Clone)]
pub struct CallCharge<'a> {
    /// Who pays.
    pub account: &'a AccountId,
    /// The month the allowance is counted in.
    pub month: &'a MonthKey,
    /// Tool that was called, for the ledger.
    pub tool: &'a str,
    /// Free calls per month at the time of the call.
    pub free_monthly_calls: i64,
    /// Price if the allowance is used up.
    pub paid_call_cost: Micros,
    /// The named key that made the call (`None`: the account's first key or an OAuth app),
    /// recorded in the ledger, whose own caps apply.
    pub key: Option<&'a KeyId>,
    /// Whether a spend cap may apply (the account or the key had one when it was
    /// authenticated): such a call is decided on the caps and the spend read exactly in its
    /// admission, and never predicted.
    pub capped: bool,
}

impl CallCharge<'_> {
    /// The account and month it counts against, owned: how a backend's queue keys a call.
    pub fn account_month(&self) -> (String, String) {
        (
            self.account.as_str().to_owned(),
            self.month.as_str().to_owned(),
        )
    }

    /// The allowance and price the call is decided on.
    pub fn terms(&self) -> toolgate_domain::Terms {
        toolgate_domain::Terms {
            free_monthly_calls: self.free_monthly_calls,
            paid_call_cost: self.paid_call_cost,
        }
    }
}

/// The answer to one admission as soon as it is decided; its ledger row may still be on its way
/// to disk, so a caller may start the call's work at once but answers only after `recorded`.
#[derive(Debug)]
pub struct Decided {
    /// Who paid, or the refusal.
    pub admission: Admission,
    /// The account's usage just after this call's charge, when the backend decided on a
    /// standing it knows to be exact; what reports usage may answer from it without a read.
    pub usage: Option<UsageSnapshot>,
    /// Resolves once the admission is durable (at once for a refusal).
    pub recorded: Recorded,
}

/// Whether a decided admission has been made durable; see [`Decided`].
#[must_use = "an admitted call must not be answered before its record is durable"]
pub struct Recorded(Option<PendingCommit>);

/// A commit on its way to disk, as the backend reports it.
type PendingCommit = Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send>>;

impl Recorded {
    /// Durable already: the backend decided and committed together.
    pub fn already() -> Self {
        Self(None)
    }

    /// Durable when `commit` resolves.
    pub fn when(commit: impl Future<Output = Result<(), StoreError>> + Send + 'static) -> Self {
        Self(Some(Box::pin(commit)))
    }

    /// Waits until the admission is durable; an error means it never will be (it was undone).
    pub async fn wait(self) -> Result<(), StoreError> {
        match self.0 {
            Some(commit) => commit.await,
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for Recorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Recorded(pending)"
        } else {
            "Recorded(done)"
        })
    }
}

/// Accounts and their keys.
#[async_trait]
pub trait Accounts: Send + Sync {
    /// Creates an account. `Err(Conflict)` when the e-mail address (or key hash) is taken.
    async fn create_account(&self, account: &NewAccount) -> Result<Account, StoreError>;

    /// The account whose current first key, or one of whose live named keys, hashes to `hash`
    /// (with `via` saying which, and the named key's scope and caps). `Ok(None)`: no such key,
    /// or it was rotated away or revoked.
    async fn find_by_key_hash(
        &self,
        hash: &KeyHash,
    ) -> Result<Option<(Account, KeyHash)>, StoreError>;

    /// The account registered under `email`. `Ok(None)`: none.
    async fn find_by_email(&self, email: &Email) -> Result<Option<Account>, StoreError>;

    /// A token that changes whenever any account's key changes, by this process or another,
    /// readable without a query. `None`: the backend offers none, so keys must not be cached.
    fn key_epoch(&self) -> Option<u64> {
        None
    }

    /// Replaces the account's key; the old hash stops matching when this returns, and the
    /// sealed copy of the old key ([`SealedKeys`]) is forgotten in the same statement.
    /// `Err(NotFound)` when there is no such account.
    async fn replace_key(&self, account: &AccountId, new_hash: &KeyHash) -> Result<(), StoreError>;
}

/// The allowance, the wallet and the call ledger.
#[async_trait]
pub trait Metering: Send + Sync {
    /// Charges one call to the allowance, else to the wallet, else refuses it, in one
    /// transaction. An admitted call's ledger row is durable when this returns; a refused
    /// call changes nothing. Concurrent calls never overdraw or double-count.
    async fn admit_call(&self, charge: &CallCharge<'_>) -> Result<Admission, StoreError>;

    /// Decides one call exactly as [`Metering::admit_call`] does, but may answer before the
    /// decision is durable, so that the call's work overlaps the commit. Backends that cannot
    /// split the two answer after the commit.
    async fn decide_call(&self, charge: &CallCharge<'_>) -> Result<Decided, StoreError> {
        let admission = self.admit_call(charge).await?;
        Ok(Decided {
            admission,
            usage: None,
            recorded: Recorded::already(),
        })
    }

    /// Adds `amount` to the wallet and records the credit under `reference`, at most once per
    /// reference; what the account owes (see [`TakeBacks`]) is repaid from it first. Returns the
    /// new balance (wallet less owed) and whether this call applied the credit.
    async fn credit_wallet(
        &self,
        account: &AccountId,
        amount: Micros,
        reference: &str,
    ) -> Result<(Micros, bool), StoreError>;

    /// Free calls used in `month` and the balance (wallet less owed). `Err(NotFound)` for an
    /// unknown account.
    async fn usage(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<UsageSnapshot, StoreError>;

    /// Number of ledger rows for the account in `month`, split into (free, paid).
    async fn ledger_counts(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<(i64, i64), StoreError>;
}

/// One stored secret, as master-key rotation walks them.
#[derive(Debug, Clone)]
pub struct StoredSecret {
    /// Whose it is.
    pub account: AccountId,
    /// Its name within the account.
    pub name: SecretName,
    /// Its sealed value.
    pub sealed: SealedSecret,
}

/// A secret bound to hosts, as the sessions' network proxy is given it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundSecret {
    /// Its name within the account.
    pub name: SecretName,
    /// Its sealed value.
    pub sealed: SealedSecret,
    /// The host patterns it may be sent to (never empty).
    pub hosts: Vec<String>,
}

/// The vault's sealed secrets. Values arrive sealed and leave sealed: storage never sees
/// plaintext, and nothing here decrypts.
#[async_trait]
pub trait Secrets: Send + Sync {
    /// Creates the secret or replaces its value (keeping its creation time); `true` when it
    /// was created. `hosts`: the host patterns it is bound to (`Some(&[])`: none); `None`
    /// keeps a replaced secret's hosts (a new one has none). `Err(NotFound)` when the account
    /// does not exist.
    async fn put_secret(
        &self,
        account: &AccountId,
        name: &SecretName,
        sealed: &SealedSecret,
        hosts: Option<&[String]>,
    ) -> Result<bool, StoreError>;

    /// Deletes the secret; `false` when there was none of that name.
    async fn delete_secret(
        &self,
        account: &AccountId,
        name: &SecretName,
    ) -> Result<bool, StoreError>;

    /// The account's secrets' names, dates and hosts, ordered by name.
    async fn list_secrets(&self, account: &AccountId) -> Result<Vec<SecretInfo>, StoreError>;

    /// The named secrets of the account that exist, sealed; names without a secret are left out.
    async fn sealed_secrets(
        &self,
        account: &AccountId,
        names: &[SecretName],
    ) -> Result<Vec<(SecretName, SealedSecret)>, StoreError>;

    /// The account's secrets bound to at least one host, sealed, with their hosts, by name.
    async fn bound_secrets(&self, account: &AccountId) -> Result<Vec<BoundSecret>, StoreError>;

    /// Up to `limit` secrets of any account whose data key is wrapped by a master key older
    /// than `version`, ordered by (account id, name) and strictly after `after` in that order.
    async fn secrets_to_rewrap(
        &self,
        version: u32,
        after: Option<(&AccountId, &SecretName)>,
        limit: u32,
    ) -> Result<Vec<StoredSecret>, StoreError>;

    /// Replaces one secret's sealed form by `new` (the same value, its data key wrapped again)
    /// only if it is still exactly `old`; `false` when it was replaced or deleted meanwhile.
    async fn rewrap_secret(
        &self,
        account: &AccountId,
        name: &SecretName,
        old: &SealedSecret,
        new: &SealedSecret,
    ) -> Result<bool, StoreError>;
}

/// Everything the service stores.
pub trait Store:
    Accounts
    + Metering
    + Secrets
    + SignIns
    + SingleUseLinks
    + SealedKeys
    + History
    + OAuthStore
    + OperatorTokens
    + TakeBacks
    + Placement
    + McpSessionStore
    + TaskStore
    + HostListStore
    + SpendControls
    + NamedKeys
    + CallHistory
{
}

impl<
    T: Accounts
        + Metering
        + Secrets
        + SignIns
        + SingleUseLinks
        + SealedKeys
        + History
        + OAuthStore
        + OperatorTokens
        + TakeBacks
        + Placement
        + McpSessionStore
        + TaskStore
        + HostListStore
        + SpendControls
        + NamedKeys
        + CallHistory,
> Store for T
{
}

/// Rebuilds an account from its stored columns; a malformed column means corrupt storage.
/// `caps` are its `cap_month_micros` and `cap_day_micros` columns; the account is as its first
/// key presents it (`Via::PrimaryKey`), which a caller that authenticated otherwise replaces.
pub fn account_from_columns(
    id: String,
    email: &str,
    tier: String,
    caps: (Option<i64>, Option<i64>),
) -> Result<Account, StoreError> {
    let email = Email::parse(email)
        .map_err(|_| StoreError::Unavailable("corrupt accounts row: email".to_owned()))?;
    Ok(Account {
        id: AccountId::from_stored(id),
        email,
        tier,
        caps: SpendCaps::from_columns(caps.0, caps.1),
        via: Via::PrimaryKey,
    })
}

/// Rebuilds a secret's name from its stored column; a malformed one means corrupt storage.
pub fn secret_name_from_column(raw: &str) -> Result<SecretName, StoreError> {
    SecretName::parse(raw).map_err(|_| corrupt_secret("name"))
}

/// A secret's host patterns as stored: one a line. `Err` for a pattern that is empty or holds
/// a line break (the app refuses those before; storage must not mistake one for two).
pub fn hosts_to_column(hosts: &[String]) -> Result<String, StoreError> {
    if hosts
        .iter()
        .any(|h| h.is_empty() || h.contains(['\n', '\r']))
    {
        return Err(StoreError::Unavailable(
            "a secret's host pattern is empty or holds a line break".to_owned(),
        ));
    }
    Ok(hosts.join("\n"))
}

/// A secret's host patterns from their stored column.
pub fn hosts_from_column(raw: &str) -> Vec<String> {
    raw.lines()
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Rebuilds a sealed value from its stored columns.
pub fn sealed_from_columns(
    version: i64,
    wrapped_key: Vec<u8>,
    ciphertext: Vec<u8>,
) -> Result<SealedSecret, StoreError> {
    Ok(SealedSecret {
        key_version: u32::try_from(version).map_err(|_| corrupt_secret("key_version"))?,
        wrapped_key,
        ciphertext,
    })
}

/// A stored secret's value that cannot be what was written; names the column, never its content.
fn corrupt_secret(column: &str) -> StoreError {
    StoreError::Unavailable(format!("corrupt secrets row: {column}"))
}

/// Rebuilds a key hash from its stored bytes.
pub fn key_hash_from_column(bytes: &[u8]) -> Result<KeyHash, StoreError> {
    KeyHash::from_stored(bytes)
        .ok_or_else(|| StoreError::Unavailable("corrupt accounts row: key_hash".to_owned()))
}

/// The current time as Unix milliseconds, the form every timestamp column holds.
pub fn now_millis() -> i64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    i64::try_from(nanos).unwrap_or(i64::MAX)
}
