//! An account's named keys as the owner (dashboard) and the operator (CLI) manage them: created
//! with a name, optional caps and an optional restriction to tool kinds and fields; listed with
//! their last use; revoked by id or name; their caps changed. A key's value is shown once, when
//! it is created, and never stored in clear (its personal URL is not shown again).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use toolgate_domain::{AccountId, ApiKey, Brand, Email, KeyId, KeyScope, Micros, SpendCaps};
use toolgate_store::{KeyChange, KeyRecord, NewNamedKey, Store, StoreError};

use crate::capabilities::rfc3339;
use crate::capability::ToolKind;

/// Longest key name, in characters.
pub const MAX_NAME_CHARS: usize = 200;
/// Most fields one key's scope may list.
const MAX_FIELDS: usize = 32;
/// Most keys whose last use waits in memory for the next flush; a key first used while the
/// table is full is noted at its next use after the flush.
const MAX_PENDING_USES: usize = 10_000;

/// Why a key could not be created, changed or revoked; each message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// the name is empty, too long or holds control characters
    #[error("invalid key name: {0}")]
    InvalidName(&'static str),
    /// a cap is not a dollar amount
    #[error("invalid {0} cap: {1}")]
    InvalidCap(&'static str, String),
    /// a tool kind is not `read`, `write` or `ai`
    #[error("invalid tools: {0:?} is not one of read, write, ai (give them separated by commas)")]
    InvalidTool(String),
    /// a field name is malformed
    #[error(
        "invalid fields: {0:?} is not a field name (letters, digits and _, at most 64), and at most 32 fields"
    )]
    InvalidField(String),
    /// the account has a live key of this name
    #[error(
        "the account already has a live key named {0:?}; choose another name or revoke that key"
    )]
    DuplicateName(String),
    /// no such key on this account
    #[error("the account has no key with this id or name (see `key list`)")]
    NoSuchKey,
    /// the key was revoked, so it cannot be changed
    #[error("this key was revoked; create a new one")]
    Revoked,
    /// the e-mail address is not usable
    #[error("invalid e-mail address: {0}")]
    InvalidEmail(String),
    /// the account does not exist
    #[error("no account has this e-mail address")]
    NoSuchAccount,
    /// storage failed or a key could not be generated (the detail is for logs)
    #[error("internal error: {0}")]
    Internal(String),
}

/// What an owner asks for when creating a key, as typed (the CLI's flags, the dashboard's form).
#[derive(Debug, Clone, Default)]
pub struct KeyRequest<'a> {
    /// The key's name.
    pub name: &'a str,
    /// Monthly cap in USD; `None` or empty: none.
    pub month_cap_usd: Option<&'a str>,
    /// Daily cap in USD; `None` or empty: none.
    pub day_cap_usd: Option<&'a str>,
    /// Tool kinds separated by commas (`read,ai`); `None` or empty: all three.
    pub tools: Option<&'a str>,
    /// Field names separated by commas; `None` or empty: every field.
    pub fields: Option<&'a str>,
}

/// A key as `key list` prints it and the dashboard shows it; never its value nor its hash.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct KeyView {
    /// Its identifier.
    pub key_id: String,
    /// Its name.
    pub name: String,
    /// When it was created (RFC 3339, UTC).
    pub created_at: String,
    /// When it was last used, as last flushed (within a few seconds).
    pub last_used_at: Option<String>,
    /// When it was revoked.
    pub revoked_at: Option<String>,
    /// Its monthly cap in USD, if any.
    pub month_cap_usd: Option<String>,
    /// Its daily cap in USD, if any.
    pub day_cap_usd: Option<String>,
    /// The tool kinds it may call; empty: all.
    pub tools: Vec<String>,
    /// The fields its calls may use; empty: all.
    pub fields: Vec<String>,
}

impl From<&KeyRecord> for KeyView {
    fn from(record: &KeyRecord) -> Self {
        Self {
            key_id: record.key.id.to_string(),
            name: record.key.name.clone(),
            created_at: rfc3339(record.created_at),
            last_used_at: record.last_used_at.map(rfc3339),
            revoked_at: record.revoked_at.map(rfc3339),
            month_cap_usd: record.key.caps.month.map(Micros::to_usd_price_string),
            day_cap_usd: record.key.caps.day.map(Micros::to_usd_price_string),
            tools: record.key.scope.tools.clone(),
            fields: record.key.scope.fields.clone(),
        }
    }
}

/// A key just created: the only time its value is shown.
#[derive(Debug, Serialize)]
pub struct CreatedKey {
    /// The key as listed.
    #[serde(flatten)]
    pub key: KeyView,
    /// The key itself.
    pub api_key: String,
    /// `{public_url}/u/{api_key}`.
    pub personal_url: String,
}

/// Named keys of accounts.
pub struct NamedKeyAdmin {
    store: Arc<dyn Store>,
    brand: Brand,
    public_url: String,
}

impl NamedKeyAdmin {
    /// Over `store`; `public_url` forms the personal URLs.
    pub fn new(store: Arc<dyn Store>, brand: Brand, public_url: &str) -> Self {
        Self {
            store,
            brand,
            public_url: public_url.trim_end_matches('/').to_owned(),
        }
    }

    /// The account registered under `email` (the operator's way to name one).
    pub async fn account_of(&self, email: &str) -> Result<AccountId, KeyError> {
        let email = Email::parse(email).map_err(|e| KeyError::InvalidEmail(e.to_string()))?;
        match self.store.find_by_email(&email).await {
            Ok(Some(account)) => Ok(account.id),
            Ok(None) => Err(KeyError::NoSuchAccount),
            Err(e) => Err(internal(e)),
        }
    }

    /// Creates a key for `account` after checking every part of `request`.
    pub async fn create(
        &self,
        account: &AccountId,
        request: &KeyRequest<'_>,
    ) -> Result<CreatedKey, KeyError> {
        let name = check_name(request.name)?;
        let caps = SpendCaps {
            month: parse_cap("monthly", request.month_cap_usd)?,
            day: parse_cap("daily", request.day_cap_usd)?,
        };
        let scope = KeyScope {
            tools: parse_tools(request.tools)?,
            fields: parse_fields(request.fields)?,
        };
        let key = ApiKey::generate(&self.brand).map_err(|e| KeyError::Internal(e.to_string()))?;
        let id = KeyId::generate();
        let created = self
            .store
            .create_named_key(&NewNamedKey {
                id: &id,
                account,
                name,
                key_hash: &key.hash(),
                scope: &scope,
                caps,
            })
            .await
            .map_err(|e| match e {
                StoreError::Conflict(_) => KeyError::DuplicateName(name.to_owned()),
                StoreError::NotFound => KeyError::NoSuchAccount,
                StoreError::Unavailable(detail) => KeyError::Internal(detail),
            })?;
        Ok(CreatedKey {
            key: KeyView::from(&created),
            personal_url: format!("{}/u/{}", self.public_url, key.expose()),
            api_key: key.expose().to_owned(),
        })
    }

    /// The account's keys, live and revoked, oldest first.
    pub async fn list(&self, account: &AccountId) -> Result<Vec<KeyView>, KeyError> {
        let records = self.store.named_keys(account).await.map_err(internal)?;
        Ok(records.iter().map(KeyView::from).collect())
    }

    /// Revokes the account's key named by `key` (its id, or the name of a live key); answers it
    /// and whether this call revoked it. Its value stops working when this returns.
    pub async fn revoke(
        &self,
        account: &AccountId,
        key: &str,
    ) -> Result<(KeyView, KeyId, bool), KeyError> {
        let id = self.resolve(account, key).await?;
        let (record, revoked) = self
            .store
            .revoke_named_key(account, &id)
            .await
            .map_err(not_found_is(KeyError::NoSuchKey))?;
        Ok((KeyView::from(&record), id, revoked))
    }

    /// Replaces the caps of the account's live key named by `key` (empty: no cap).
    pub async fn set_caps(
        &self,
        account: &AccountId,
        key: &str,
        month_cap_usd: Option<&str>,
        day_cap_usd: Option<&str>,
    ) -> Result<KeyView, KeyError> {
        let caps = SpendCaps {
            month: parse_cap("monthly", month_cap_usd)?,
            day: parse_cap("daily", day_cap_usd)?,
        };
        let id = self.resolve(account, key).await?;
        let change = KeyChange {
            caps: Some(caps),
            scope: None,
        };
        let record = self
            .store
            .change_named_key(account, &id, change)
            .await
            .map_err(not_found_is(KeyError::Revoked))?;
        Ok(KeyView::from(&record))
    }

    /// The id of the account's key given by id or by the name of a live key (a revoked key
    /// is found by name only when no live key has it).
    async fn resolve(&self, account: &AccountId, key: &str) -> Result<KeyId, KeyError> {
        let keys = self.store.named_keys(account).await.map_err(internal)?;
        if let Some(id) = KeyId::parse(key) {
            return keys
                .iter()
                .any(|record| record.key.id == id)
                .then_some(id)
                .ok_or(KeyError::NoSuchKey);
        }
        let named = |live: bool| {
            keys.iter()
                .rev()
                .find(|r| r.key.name == key && r.revoked_at.is_none() == live)
        };
        named(true)
            .or_else(|| named(false))
            .map(|record| record.key.id.clone())
            .ok_or(KeyError::NoSuchKey)
    }
}

fn internal(error: StoreError) -> KeyError {
    KeyError::Internal(error.to_string())
}

fn not_found_is(answer: KeyError) -> impl FnOnce(StoreError) -> KeyError {
    move |error| match error {
        StoreError::NotFound => answer,
        other => internal(other),
    }
}

/// A name: 1 to 200 characters once trimmed, no control characters, and not shaped like a key
/// id (so that `--key` names one key whichever it is given).
pub fn check_name(raw: &str) -> Result<&str, KeyError> {
    let name = raw.trim();
    if name.is_empty() {
        return Err(KeyError::InvalidName("a name is required"));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(KeyError::InvalidName("at most 200 characters"));
    }
    if name.chars().any(char::is_control) {
        return Err(KeyError::InvalidName("no control characters"));
    }
    if KeyId::parse(name).is_some() {
        return Err(KeyError::InvalidName("a name may not look like a key id"));
    }
    Ok(name)
}

fn parse_cap(which: &'static str, raw: Option<&str>) -> Result<Option<Micros>, KeyError> {
    match raw.map(str::trim).filter(|raw| !raw.is_empty()) {
        None => Ok(None),
        Some(raw) => Micros::parse_usd(raw)
            .map(Some)
            .map_err(|e| KeyError::InvalidCap(which, e.to_string())),
    }
}

fn items(raw: Option<&str>) -> impl Iterator<Item = &str> {
    raw.unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
}

fn parse_tools(raw: Option<&str>) -> Result<Vec<String>, KeyError> {
    let mut tools: Vec<String> = Vec::new();
    for tool in items(raw) {
        let kind = ToolKind::ALL
            .iter()
            .find(|kind| kind.suffix() == tool)
            .ok_or_else(|| KeyError::InvalidTool(tool.chars().take(64).collect()))?;
        if !tools.iter().any(|t| t == kind.suffix()) {
            tools.push(kind.suffix().to_owned());
        }
    }
    Ok(tools)
}

fn parse_fields(raw: Option<&str>) -> Result<Vec<String>, KeyError> {
    let mut fields: Vec<String> = Vec::new();
    for field in items(raw) {
        let well_formed = field.len() <= 64
            && field
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && fields.len() < MAX_FIELDS;
        if !well_formed {
            return Err(KeyError::InvalidField(field.chars().take(64).collect()));
        }
        if !fields.iter().any(|f| f == field) {
            fields.push(field.to_owned());
        }
    }
    Ok(fields)
}

/// Named keys' last uses waiting in memory for the next flush: authentication notes a use
/// without touching storage, and one statement per flush writes them all.
#[derive(Default)]
pub struct KeyUses {
    pending: Mutex<HashMap<KeyId, i64>>,
}

impl KeyUses {
    /// Notes that `key` was used now.
    pub fn note(&self, key: &KeyId) {
        let Ok(mut pending) = self.pending.lock() else {
            return;
        };
        if pending.len() < MAX_PENDING_USES || pending.contains_key(key) {
            pending.insert(key.clone(), toolgate_store::now_millis());
        }
    }

    /// Writes the uses noted since the last flush; on failure they are noted again.
    pub async fn flush(&self, store: &dyn Store) -> Result<(), StoreError> {
        let uses: Vec<(KeyId, i64)> = match self.pending.lock() {
            Ok(mut pending) => pending.drain().collect(),
            Err(_) => return Ok(()),
        };
        if uses.is_empty() {
            return Ok(());
        }
        let written = store.record_key_uses(&uses).await;
        if written.is_err()
            && let Ok(mut pending) = self.pending.lock()
        {
            for (key, at) in uses {
                let kept = pending.entry(key).or_insert(at);
                *kept = (*kept).max(at);
            }
        }
        written
    }
}

#[cfg(test)]
#[path = "named_keys_tests.rs"]
mod tests;
