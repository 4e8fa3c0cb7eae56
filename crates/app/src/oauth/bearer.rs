//! The resource server's side: is this bearer token good for `/mcp`? Live grants are cached
//! for at most a second, and every revocation made by this process empties what it touches at
//! once (revocations made by another process are honoured within that second). An entry is
//! also tagged with the store's key epoch, so that an owner's change to the account (its spend
//! caps, which the grant's account carries) is seen at once, as key changes are.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::RwLock;
use toolgate_domain::{Account, AccountId, SecretToken};
use toolgate_oauth::TokenError;
use toolgate_oauth::scope::allows_tools;
use toolgate_store::{AccessGrant, Grant, TokenHash};

use super::AuthServer;

/// How long a looked-up grant is trusted without asking storage again.
const CACHE_FOR: Duration = Duration::from_secs(1);
/// Entries past which the cache is emptied (a flood of distinct tokens cannot grow it).
const CACHE_MAX: usize = 100_000;

/// A cached grant, when it was read, and the key epoch read before it.
type Entry = (AccessGrant, Instant, Option<u64>);

/// Live access grants by token hash, with when each was read.
#[derive(Default)]
pub(super) struct Cache {
    /// Grant, when it was read and the key epoch before the read, by token hash.
    entries: RwLock<HashMap<TokenHash, Entry>>,
    /// Bumped by every revocation, so that a look-up that raced one is not cached.
    generation: AtomicU64,
}

impl Cache {
    /// The grant of `hash` if read less than a second ago, at key epoch `epoch`.
    async fn get(&self, hash: &TokenHash, epoch: Option<u64>) -> Option<AccessGrant> {
        let entries = self.entries.read().await;
        entries
            .get(hash)
            .filter(|(_, read_at, read_epoch)| {
                read_at.elapsed() < CACHE_FOR && *read_epoch == epoch
            })
            .map(|(grant, _, _)| grant.clone())
    }

    /// How many revocations this process has made.
    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Keeps `grant`, unless a revocation happened since `generation` was read.
    async fn put(&self, hash: TokenHash, grant: AccessGrant, generation: u64, epoch: Option<u64>) {
        let mut entries = self.entries.write().await;
        if self.generation() != generation {
            return;
        }
        if entries.len() >= CACHE_MAX {
            entries.clear();
        }
        entries.insert(hash, (grant, Instant::now(), epoch));
    }

    /// Forgets everything (a token's family was revoked: which entries it had is unknown).
    pub(super) async fn forget_all(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.entries.write().await.clear();
    }

    /// Forgets the grants of one account to one client.
    pub(super) async fn forget_client(&self, account: &AccountId, client_id: &str) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.entries.write().await.retain(|_, (entry, _, _)| {
            entry.grant.account != *account || entry.grant.client_id != client_id
        });
    }
}

impl AuthServer {
    /// The account and grant of a bearer token presented at `/mcp` (the header's value after
    /// `Bearer `; `None` when there was none): live, issued for this resource, with scope `mcp`.
    pub async fn authenticate(&self, bearer: Option<&str>) -> Result<(Account, Grant), TokenError> {
        let presented = bearer.ok_or(TokenError::Missing)?;
        // a token of another shape is refused without a look-up
        let token = SecretToken::parse(presented).ok_or(TokenError::Malformed)?;
        let hash = token.hash();
        let now = self.now();
        // read before the look-up, as the key cache does: an entry is never newer than its tag
        let epoch = self.store.key_epoch();
        let found = match self.cache.get(&hash, epoch).await {
            Some(found) => found,
            None => {
                let generation = self.cache.generation();
                match self.store.find_access(&hash, now).await {
                    Ok(Some(found)) => {
                        self.cache.put(hash, found.clone(), generation, epoch).await;
                        found
                    }
                    Ok(None) => return Err(TokenError::Invalid),
                    Err(err) => {
                        tracing::error!(error = %err, "oauth: access token look-up failed");
                        return Err(TokenError::Unavailable);
                    }
                }
            }
        };
        if found.expires_at <= now {
            return Err(TokenError::Invalid);
        }
        if found.grant.resource != self.issuer.resource() {
            return Err(TokenError::WrongAudience);
        }
        if !allows_tools(&found.grant.scope) {
            return Err(TokenError::InsufficientScope);
        }
        Ok((found.account, found.grant))
    }
}
