//! What the OAuth authorization server stores: registered clients, authorization codes, and
//! access and refresh tokens. Every code and token is stored as its SHA-256 only; a refresh
//! token belongs to a family (one authorization), and reusing a rotated one revokes the family.
//!
//! A family is revoked as a whole, never in part, and stays revoked: tokens stored into it
//! afterwards are stored revoked. Its code and tokens belong to one account and one client.
//!
//! When a code or a refresh token is spent, replayed or refused is `toolgate-oauth`'s rule
//! (`credential::step`), applied once for every backend by [`OAuthStore::use_code`] and
//! [`OAuthStore::refresh`]; a backend provides the atomic primitives under it: read a
//! credential's state, write the next one by compare-and-set, revoke a family.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use toolgate_domain::{Account, AccountId};
use toolgate_oauth::credential::{Credential, CredentialState, Stage};

use crate::{StoreError, TokenHash};

/// A client allowed to ask for authorization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthClient {
    /// `client_id`: a random id (Dynamic Client Registration) or an https URL (a Client ID
    /// Metadata Document's own address).
    pub client_id: String,
    /// The name shown on the consent page and among connected apps.
    pub name: String,
    /// Redirect URIs, matched exactly.
    pub redirect_uris: Vec<String>,
    /// When it was registered or its metadata document last fetched (Unix ms).
    pub updated_at: i64,
}

/// An authorization code to be stored, bound to what the token request must repeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCode {
    /// SHA-256 of the code.
    pub code_hash: TokenHash,
    /// The token family its tokens will belong to (so that a replayed code revokes them): random,
    /// made for this authorization; no two codes share one.
    pub family: String,
    /// The grant it will start.
    pub grant: Grant,
    /// The redirect URI the authorization request named.
    pub redirect_uri: String,
    /// The PKCE S256 challenge (base64url of SHA-256 of the verifier).
    pub code_challenge: String,
    /// Unix ms after which the code is refused.
    pub expires_at: i64,
}

/// Who authorized which client for what: what a code carries into its tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The account that consented.
    pub account: AccountId,
    /// The client it consented to.
    pub client_id: String,
    /// Granted scopes, space-separated.
    pub scope: String,
    /// The resource (RFC 8707) the tokens are for: this service's `/mcp`.
    pub resource: String,
}

/// A used code: its grant and what the token request must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsedCode {
    /// The family its tokens belong to.
    pub family: String,
    /// The grant.
    pub grant: Grant,
    /// The redirect URI of the authorization request.
    pub redirect_uri: String,
    /// The PKCE challenge.
    pub code_challenge: String,
}

/// A pair of tokens to be stored for one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTokens {
    /// The family (one authorization) the tokens belong to.
    pub family: String,
    /// The grant.
    pub grant: Grant,
    /// SHA-256 of the access token and its expiry (Unix ms).
    pub access: (TokenHash, i64),
    /// SHA-256 of the refresh token and its expiry, if one is issued.
    pub refresh: Option<(TokenHash, i64)>,
}

/// A live access token's account and grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessGrant {
    /// The account the token acts for.
    pub account: Account,
    /// What it was granted.
    pub grant: Grant,
    /// Unix ms after which it is refused.
    pub expires_at: i64,
}

/// What presenting a code did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeUse {
    /// It was live and is now used.
    Fresh(UsedCode),
    /// It had been used before: the tokens issued for it are revoked now (RFC 6749 §4.1.2).
    Reused,
    /// Unknown or expired.
    Invalid,
}

/// What presenting a refresh token did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refreshed {
    /// It was live and is now used; the family's new tokens are stored.
    Rotated(Grant),
    /// It had been used before: the whole family is revoked now (a stolen token was replayed).
    Reused,
    /// Unknown, expired, revoked, or another client's.
    Invalid,
}

/// A code as stored: what its use gives, and where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCode {
    /// Its family, grant, redirect URI and PKCE challenge.
    pub code: UsedCode,
    /// Its stage and expiry, what the replay rule reads.
    pub state: CredentialState,
}

/// A refresh token as stored: its family and grant, and where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRefresh {
    /// The family it belongs to.
    pub family: String,
    /// The grant its successors inherit.
    pub grant: Grant,
    /// Its stage and expiry, what the rotation rule reads.
    pub state: CredentialState,
}

/// A code's columns as both backends read them: family, account, client, scope, resource,
/// redirect URI, challenge, expiry, and when it was used and revoked.
pub type CodeColumns = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    i64,
    Option<i64>,
    Option<i64>,
);

/// A refresh token's columns as both backends read them: family, account, client, scope,
/// resource, expiry, and when it was used and revoked.
pub type RefreshColumns = (
    String,
    String,
    String,
    String,
    String,
    i64,
    Option<i64>,
    Option<i64>,
);

impl StoredCode {
    /// The code a row holds.
    pub fn from_columns(row: CodeColumns) -> Self {
        let (family, account, client_id, scope, resource, redirect_uri, code_challenge) =
            (row.0, row.1, row.2, row.3, row.4, row.5, row.6);
        Self {
            code: UsedCode {
                family,
                grant: Grant {
                    account: AccountId::from_stored(account),
                    client_id,
                    scope,
                    resource,
                },
                redirect_uri,
                code_challenge,
            },
            state: credential_state(Credential::Code, row.7, row.8, row.9),
        }
    }
}

impl StoredRefresh {
    /// The refresh token a row holds.
    pub fn from_columns(row: RefreshColumns) -> Self {
        let (family, account, client_id, scope, resource) = (row.0, row.1, row.2, row.3, row.4);
        Self {
            family,
            grant: Grant {
                account: AccountId::from_stored(account),
                client_id,
                scope,
                resource,
            },
            state: credential_state(Credential::Refresh, row.5, row.6, row.7),
        }
    }
}

/// A credential's state from its expiry and the times it was used and revoked.
fn credential_state(
    credential: Credential,
    expires_at: i64,
    used_at: Option<i64>,
    revoked_at: Option<i64>,
) -> CredentialState {
    CredentialState {
        credential,
        stage: Stage {
            used: used_at.is_some(),
            revoked: revoked_at.is_some(),
        },
        expires_at,
    }
}

/// One compare-and-set of a code or a refresh token: the rule's answer to what was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advance<'a> {
    /// SHA-256 of the code or token.
    pub hash: &'a TokenHash,
    /// The stage read: the write happens only if the credential still stands there.
    pub seen: Stage,
    /// The stage to write.
    pub next: Stage,
    /// Whether its whole family is revoked with it.
    pub revoke_family: bool,
    /// Unix ms, the time written for a flag set now.
    pub now: i64,
}

/// A client holding live tokens of an account, for the dashboard's "Connected apps".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectedApp {
    /// The client's id.
    pub client_id: String,
    /// Its name.
    pub name: String,
    /// Scopes granted (the union over its live families), space-separated.
    pub scope: String,
    /// When it was first authorized (Unix ms).
    pub since: i64,
}

/// The authorization server's storage.
#[async_trait]
pub trait OAuthStore: Send + Sync {
    /// Creates or replaces a client.
    async fn put_client(&self, client: &OAuthClient) -> Result<(), StoreError>;

    /// The client of that id. `Ok(None)`: none.
    async fn client(&self, client_id: &str) -> Result<Option<OAuthClient>, StoreError>;

    /// Stores a code. `Err(NotFound)` if the account does not exist; `Err(Conflict)` if the
    /// hash or the family is taken.
    async fn put_code(&self, code: &NewCode) -> Result<(), StoreError>;

    /// Presents a code: unused, unrevoked and `now < expires_at` → marked used, `Fresh` (of
    /// concurrent callers exactly one gets it); used before (expired or not) → its family
    /// revoked, tokens stored later included, `Reused`; otherwise `Invalid`. Provided: the rule
    /// is `toolgate_oauth::credential::step`, written by compare-and-set through
    /// [`OAuthStore::code_state`] and [`OAuthStore::advance_code`]; a backend does not override it.
    async fn use_code(&self, code_hash: &TokenHash, now: i64) -> Result<CodeUse, StoreError> {
        crate::oauth_spend::use_code(self, code_hash, now).await
    }

    /// Where a code stands, with what its use gives. `Ok(None)`: unknown.
    async fn code_state(&self, code_hash: &TokenHash) -> Result<Option<StoredCode>, StoreError>;

    /// Compare-and-set of a code, in one atomic step: if it still stands at `change.seen`,
    /// moves it to `change.next` (a flag once set stays set) and, if told, revokes its family;
    /// `false`, writing nothing, when it had moved meanwhile or is unknown.
    async fn advance_code(&self, change: &Advance<'_>) -> Result<bool, StoreError>;

    /// Stores an access token and, if given, a refresh token of one family, created now.
    /// `Err(NotFound)` if the account does not exist; `Err(Conflict)` if a hash is taken. Into
    /// a revoked family (its code replayed meanwhile) they are stored revoked.
    async fn put_tokens(&self, tokens: &NewTokens) -> Result<(), StoreError>;

    /// The account and grant of a live access token: unrevoked and `now < expires_at`.
    async fn find_access(
        &self,
        token_hash: &TokenHash,
        now: i64,
    ) -> Result<Option<AccessGrant>, StoreError>;

    /// Presents a refresh token of `client_id`. Unrevoked, `now < expires_at`, unused → marked
    /// used, `next` stored, `Rotated` with the token's grant; used before → its whole family
    /// revoked, `Reused`; otherwise (unknown, another client's, expired, revoked, an access
    /// token) `Invalid`. `next.family` must be the token's family, else `Err(Conflict)` and
    /// nothing changes; `next.grant` is not read: the new tokens inherit the presented token's
    /// grant. Of concurrent callers exactly one gets `Rotated`. Provided, as
    /// [`OAuthStore::use_code`] is, over [`OAuthStore::refresh_state`] and
    /// [`OAuthStore::advance_refresh`].
    async fn refresh(
        &self,
        token_hash: &TokenHash,
        client_id: &str,
        now: i64,
        next: &NewTokens,
    ) -> Result<Refreshed, StoreError> {
        crate::oauth_spend::refresh(self, token_hash, client_id, now, next).await
    }

    /// Where a refresh token of `client_id` stands, with its family and grant. `Ok(None)`:
    /// unknown, another client's, or an access token.
    async fn refresh_state(
        &self,
        token_hash: &TokenHash,
        client_id: &str,
    ) -> Result<Option<StoredRefresh>, StoreError>;

    /// Compare-and-set of a refresh token, in one atomic step: as [`OAuthStore::advance_code`],
    /// and `issue` stored into its family with it (revoked if the family is). `false`, writing
    /// nothing, when it had moved meanwhile or is unknown.
    async fn advance_refresh(
        &self,
        change: &Advance<'_>,
        issue: Option<&NewTokens>,
    ) -> Result<bool, StoreError>;

    /// Revokes the whole family of the token (access or refresh, live or not); `false` if the
    /// token is unknown.
    async fn revoke_token(&self, token_hash: &TokenHash, now: i64) -> Result<bool, StoreError>;

    /// Revokes every family the account granted `client_id` (their codes too, so a pending
    /// code no longer works); returns how many tokens it revoked, expired ones included.
    async fn revoke_client(
        &self,
        account: &AccountId,
        client_id: &str,
        now: i64,
    ) -> Result<u64, StoreError>;

    /// The clients holding live (unrevoked, unexpired) tokens of the account, ordered by name
    /// (then id); a client without a stored row is named by its id.
    async fn connected_apps(
        &self,
        account: &AccountId,
        now: i64,
    ) -> Result<Vec<ConnectedApp>, StoreError>;

    /// Deletes, in one statement, every client stored (registered, or its metadata document
    /// fetched) before `stored_before` that holds no live token (unrevoked, `now < expires_at`:
    /// what [`OAuthStore::connected_apps`] lists) and no pending code (unused, unrevoked, `now <
    /// expires_at`) of any account; returns how many went. Its dead codes and tokens stay.
    async fn purge_clients(&self, stored_before: i64, now: i64) -> Result<u64, StoreError>;
}

/// One group of an account's live tokens as a backend reads it: the client's id, its stored
/// name if any, a scope, and the group's earliest creation time (Unix ms).
pub type LiveTokenGroup = (String, Option<String>, String, i64);

/// Folds an account's live token groups into its connected apps: per client, the sorted union
/// of the scopes and the earliest time; ordered by name, then id (in byte order on every
/// backend, whatever the database's collation).
pub fn connected_apps_from_groups(groups: Vec<LiveTokenGroup>) -> Vec<ConnectedApp> {
    let mut clients: BTreeMap<String, (String, BTreeSet<String>, i64)> = BTreeMap::new();
    for (client_id, name, scope, since) in groups {
        let entry = clients
            .entry(client_id.clone())
            .or_insert_with(|| (name.unwrap_or(client_id), BTreeSet::new(), since));
        entry
            .1
            .extend(scope.split_ascii_whitespace().map(str::to_owned));
        entry.2 = entry.2.min(since);
    }
    let mut apps: Vec<ConnectedApp> = clients
        .into_iter()
        .map(|(client_id, (name, scopes, since))| ConnectedApp {
            client_id,
            name,
            scope: scopes.into_iter().collect::<Vec<_>>().join(" "),
            since,
        })
        .collect();
    apps.sort_by(|a, b| (&a.name, &a.client_id).cmp(&(&b.name, &b.client_id)));
    apps
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn groups_fold_into_apps_by_name() {
        let group = |id: &str, name: Option<&str>, scope: &str, since| {
            (
                id.to_owned(),
                name.map(str::to_owned),
                scope.to_owned(),
                since,
            )
        };
        let apps = connected_apps_from_groups(vec![
            group("b", Some("Zed"), "write read", 30),
            group("c", None, "", 5),
            group("b", Some("Zed"), "admin  read", 20),
            group("a", Some("Alpha"), "read", 40),
        ]);
        let seen: Vec<(&str, &str, &str, i64)> = apps
            .iter()
            .map(|a| {
                (
                    a.client_id.as_str(),
                    a.name.as_str(),
                    a.scope.as_str(),
                    a.since,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("a", "Alpha", "read", 40),
                ("b", "Zed", "admin read write", 20),
                ("c", "c", "", 5),
            ]
        );
    }
}
