//! What the dashboard stores: sign-in links, dashboard sessions, the account's sealed key (so
//! its owner can see the personal URL again), and the usage and wallet history it shows.

use async_trait::async_trait;
use toolgate_domain::{Account, AccountId, Email, KeyHash, Micros, MonthKey, SealedSecret};

use crate::StoreError;

/// A token's SHA-256: links and session cookies are stored only as this.
pub type TokenHash = [u8; 32];

/// A dashboard sign-in session to be stored.
#[derive(Debug, Clone)]
pub struct NewSignInSession {
    /// SHA-256 of the cookie's token.
    pub token_hash: TokenHash,
    /// Whose session it is.
    pub account: AccountId,
    /// Unix milliseconds after which the session is refused.
    pub expires_at: i64,
}

/// One day of calls in a month, as the usage chart shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DailyCalls {
    /// Day of the month, 1–31 (UTC).
    pub day: u8,
    /// Calls paid by the free allowance.
    pub free: i64,
    /// Calls paid from the wallet.
    pub paid: i64,
    /// What the paid calls cost together.
    pub paid_cost: Micros,
}

/// One credit to a wallet (an operator's or a Stripe top-up), or one refund or dispute taken
/// back from it (a negative amount).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalletCredit {
    /// The unique reference it was applied under (a Stripe event id, `manual-…`).
    pub reference: String,
    /// How much: positive for a credit, negative (or zero) for a take-back.
    pub amount: Micros,
    /// When, as Unix milliseconds.
    pub at: i64,
    /// What it was.
    pub kind: WalletEntry,
}

/// What moved money in or out of a wallet, as its history names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalletEntry {
    /// A top-up or an operator's credit.
    Credit,
    /// A refund taken back.
    Refund,
    /// A dispute taken back.
    Dispute,
}

impl WalletEntry {
    /// From the history query's kind column (`credit`, `refund`, `dispute`).
    pub fn from_column(raw: &str) -> Result<Self, crate::StoreError> {
        match raw {
            "credit" => Ok(Self::Credit),
            "refund" => Ok(Self::Refund),
            "dispute" => Ok(Self::Dispute),
            _ => Err(crate::StoreError::Unavailable(
                "corrupt wallet history: kind".to_owned(),
            )),
        }
    }
}

/// Sign-in links and dashboard sessions; every token is stored as its SHA-256 only.
#[async_trait]
pub trait SignIns: Send + Sync {
    /// Stores a link for `email` under the hash of its token, usable until `expires_at` (Unix ms).
    /// `Err(Conflict)` if the hash exists (a repeated random token: never in practice).
    async fn put_sign_in_link(
        &self,
        token_hash: &TokenHash,
        email: &Email,
        created_at: i64,
        expires_at: i64,
    ) -> Result<(), StoreError>;

    /// The address of a link that exists, is unused and has `now < expires_at`, without using it
    /// (the confirmation page). `Ok(None)` otherwise.
    async fn peek_sign_in_link(
        &self,
        token_hash: &TokenHash,
        now: i64,
    ) -> Result<Option<Email>, StoreError>;

    /// Uses the link: marks it used and returns its address if it was unused and unexpired, in
    /// one atomic statement, so that of concurrent callers at most one gets `Some`.
    async fn use_sign_in_link(
        &self,
        token_hash: &TokenHash,
        now: i64,
    ) -> Result<Option<Email>, StoreError>;

    /// How many links were requested for `email` since `since` (Unix ms), used or not. Links
    /// go with [`SignIns::purge_expired`] once expired, so a caller counts within a window no
    /// longer than a link's life (sign-in counts the last 15 minutes, links last 15 minutes).
    async fn count_sign_in_links(&self, email: &Email, since: i64) -> Result<i64, StoreError>;

    /// Stores a dashboard session. `Err(NotFound)` if the account does not exist.
    async fn create_sign_in_session(&self, session: &NewSignInSession) -> Result<(), StoreError>;

    /// The account of the session whose token hashes to `token_hash`, if it exists and
    /// `now < expires_at`. `Ok(None)` otherwise.
    async fn find_sign_in_session(
        &self,
        token_hash: &TokenHash,
        now: i64,
    ) -> Result<Option<Account>, StoreError>;

    /// Ends one session; `false` if there was none.
    async fn end_sign_in_session(&self, token_hash: &TokenHash) -> Result<bool, StoreError>;

    /// Ends every session of the account; returns how many there were.
    async fn end_all_sign_in_sessions(&self, account: &AccountId) -> Result<u64, StoreError>;

    /// Deletes links (sign-in links, and the uses of [`SingleUseLinks`]) and sessions that expired
    /// before `now`; returns how many rows went.
    async fn purge_expired(&self, now: i64) -> Result<u64, StoreError>;
}

/// The account's key kept sealed by the vault, so the dashboard can show the personal URL again.
#[async_trait]
pub trait SealedKeys: Send + Sync {
    /// Stores `sealed` as the account's key only while the account's current key hashes to
    /// `key_hash` (a rotation in between wins); `false` when it did not match.
    async fn put_sealed_key(
        &self,
        account: &AccountId,
        key_hash: &KeyHash,
        sealed: &SealedSecret,
    ) -> Result<bool, StoreError>;

    /// The sealed current key, `Ok(None)` when none was stored since the last rotation
    /// ([`crate::Accounts::replace_key`] forgets it in the same statement).
    async fn sealed_key(&self, account: &AccountId) -> Result<Option<SealedSecret>, StoreError>;
}

/// What the dashboard's usage and wallet pages read.
#[async_trait]
pub trait History: Send + Sync {
    /// Calls per day of `month` from the ledger, only days with calls, ordered by day.
    async fn daily_calls(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<Vec<DailyCalls>, StoreError>;

    /// The newest `limit` credits and take-backs of the account's wallet, newest first.
    async fn wallet_credits(
        &self,
        account: &AccountId,
        limit: u32,
    ) -> Result<Vec<WalletCredit>, StoreError>;
}

/// Single-use links (a signed upload link takes one `PUT`): each use is recorded here, so that of
/// all the front ends of one database one use succeeds.
#[async_trait]
pub trait SingleUseLinks: Send + Sync {
    /// Records the one use of the link whose token hashes to `token_hash`, which expires at
    /// `expires_at` (Unix ms): `true` the first time, `false` ever after, in one atomic
    /// statement, so that of concurrent callers at most one gets `true`. The record is kept until
    /// the link has expired ([`SignIns::purge_expired`] removes it then).
    async fn use_link_once(
        &self,
        token_hash: &TokenHash,
        expires_at: i64,
    ) -> Result<bool, StoreError>;
}
