//! An account's named keys: keys besides its first one, each with a name unique among the
//! account's live keys, a scope of tools and fields, and its own spend caps. Only the key's
//! SHA-256 is stored. Authentication finds a live named key through
//! [`crate::Accounts::find_by_key_hash`]; revoking a key, or changing its caps or scope, moves
//! the key epoch on so that every front end's cache of keys forgets it at once.

use async_trait::async_trait;
use toolgate_domain::{AccountId, KeyHash, KeyId, KeyScope, NamedKey, SpendCaps};

use crate::StoreError;

/// A named key to create.
#[derive(Debug, Clone)]
pub struct NewNamedKey<'a> {
    /// Its identifier, chosen by the caller.
    pub id: &'a KeyId,
    /// Whose key it is.
    pub account: &'a AccountId,
    /// The owner's name for it.
    pub name: &'a str,
    /// SHA-256 of the key; unique over every key of every account.
    pub key_hash: &'a KeyHash,
    /// What it may call.
    pub scope: &'a KeyScope,
    /// Its own caps.
    pub caps: SpendCaps,
}

/// A named key as the owner sees it (never its value nor its hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    /// The key's identity, scope and caps.
    pub key: NamedKey,
    /// When it was created (Unix milliseconds).
    pub created_at: i64,
    /// When it was revoked, if it was.
    pub revoked_at: Option<i64>,
    /// When it was last used to authenticate, as last flushed (see [`NamedKeys::record_key_uses`]).
    pub last_used_at: Option<i64>,
}

/// A change of a live key: what is given replaces the key's; `None` keeps it.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyChange<'a> {
    /// New caps.
    pub caps: Option<SpendCaps>,
    /// New scope.
    pub scope: Option<&'a KeyScope>,
}

/// The accounts' named keys.
#[async_trait]
pub trait NamedKeys: Send + Sync {
    /// Creates the key. `Err(Conflict)`: the account has a live key of this name (or the hash
    /// is taken); `Err(NotFound)`: no such account.
    async fn create_named_key(&self, key: &NewNamedKey<'_>) -> Result<KeyRecord, StoreError>;

    /// The account's keys, live and revoked, oldest first.
    async fn named_keys(&self, account: &AccountId) -> Result<Vec<KeyRecord>, StoreError>;

    /// Revokes the account's key `id`: its hash stops matching when this returns. Answers the
    /// key and whether this call revoked it (`false`: it was revoked already).
    /// `Err(NotFound)`: the account has no such key.
    async fn revoke_named_key(
        &self,
        account: &AccountId,
        id: &KeyId,
    ) -> Result<(KeyRecord, bool), StoreError>;

    /// Changes the account's live key `id`, answering it as it is now. `Err(NotFound)`: the
    /// account has no such live key.
    async fn change_named_key(
        &self,
        account: &AccountId,
        id: &KeyId,
        change: KeyChange<'_>,
    ) -> Result<KeyRecord, StoreError>;

    /// Records when keys were last used (Unix milliseconds), in one statement; a time older
    /// than the one stored is ignored, and unknown ids are skipped.
    async fn record_key_uses(&self, uses: &[(KeyId, i64)]) -> Result<(), StoreError>;
}

/// A key's columns as both backends select them: id, name, scope_tools, scope_fields,
/// cap_month_micros, cap_day_micros, created_at, revoked_at, last_used_at.
pub type KeyColumns = (
    String,
    String,
    String,
    String,
    Option<i64>,
    Option<i64>,
    i64,
    Option<i64>,
    Option<i64>,
);

/// The column list matching [`KeyColumns`], as a literal the backends' statements `concat!`.
#[macro_export]
macro_rules! key_columns {
    () => {
        "id, name, scope_tools, scope_fields, cap_month_micros, cap_day_micros, created_at, \
         revoked_at, last_used_at"
    };
}

/// Rebuilds a key from its columns.
pub fn key_record_from_columns(columns: KeyColumns) -> KeyRecord {
    let (id, name, tools, fields, month, day, created_at, revoked_at, last_used_at) = columns;
    KeyRecord {
        key: named_key_from_columns(id, name, (&tools, &fields), (month, day)),
        created_at,
        revoked_at,
        last_used_at,
    }
}

/// Rebuilds the key authentication presents from its columns.
pub fn named_key_from_columns(
    id: String,
    name: String,
    scope: (&str, &str),
    caps: (Option<i64>, Option<i64>),
) -> NamedKey {
    NamedKey {
        id: KeyId::from_stored(id),
        name,
        scope: KeyScope {
            tools: lines_from_column(scope.0),
            fields: lines_from_column(scope.1),
        },
        caps: SpendCaps::from_columns(caps.0, caps.1),
    }
}

/// A scope's list as its column holds it: one item a line. `Err` for an item that is empty or
/// holds a line break (the app refuses those before; storage must not mistake one for two).
pub fn lines_to_column(items: &[String]) -> Result<String, StoreError> {
    if items
        .iter()
        .any(|item| item.is_empty() || item.contains(['\n', '\r']))
    {
        return Err(StoreError::Unavailable(
            "a key's scope item is empty or holds a line break".to_owned(),
        ));
    }
    Ok(items.join("\n"))
}

fn lines_from_column(column: &str) -> Vec<String> {
    column
        .split('\n')
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Key uses as one JSON array of `[id, millis]` pairs, the single parameter SQLite's one
/// flushing statement unpacks. Only ids of the generated shape (`key_` and hex) are written,
/// so nothing needs escaping.
pub fn key_uses_to_json(uses: &[(KeyId, i64)]) -> String {
    let pairs: Vec<String> = uses
        .iter()
        .filter(|(id, _)| KeyId::parse(id.as_str()).is_some())
        .map(|(id, at)| format!("[\"{}\",{at}]", id.as_str()))
        .collect();
    format!("[{}]", pairs.join(","))
}
