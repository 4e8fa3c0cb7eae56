//! Turning a presented API key into an account.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use toolgate_domain::{Account, ApiKey, Brand, KeyHash};
use toolgate_store::{Store, StoreError};

use crate::named_keys::KeyUses;

/// Why a caller was not authenticated. Messages never repeat the presented key.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// no key in any carrier
    #[error(
        "authentication required: put your API key in the URL (/u/<key>), an `Authorization: Bearer` header, an `X-Api-Key` header or `?key=`"
    )]
    Missing,
    /// the key has the wrong shape; refused without a look-up
    #[error(
        "invalid API key: a key is the prefix `{0}` followed by 64 lowercase hexadecimal characters"
    )]
    Malformed(String),
    /// well-formed but unknown, revoked or rotated
    #[error(
        "invalid API key: it is unknown, revoked or was rotated; use the current personal URL (a rotation issues a new one)"
    )]
    Rejected,
    /// storage failed; the caller may retry (the source is for logs only)
    #[error("authentication is temporarily unavailable, please retry")]
    Unavailable(#[source] StoreError),
}

/// Resolves keys against storage, remembering recent answers only while the store's key epoch
/// is unchanged: any rotation, by this process or another, empties the cache's validity at once.
pub struct Authenticator {
    store: Arc<dyn Store>,
    brand: Brand,
    cache: RwLock<HashMap<[u8; 32], Cached>>,
    /// Named keys' last uses, noted here and flushed in the background.
    uses: Arc<KeyUses>,
}

struct Cached {
    account: Account,
    epoch: u64,
    stored_at: Instant,
}

/// A cached key is re-checked at least this often, which bounds staleness even if a rotating
/// process died between its commit and its final epoch bump.
const CACHE_TTL: Duration = Duration::from_secs(1);
/// The cache is emptied when it grows past this many keys.
const CACHE_LIMIT: usize = 100_000;

impl Authenticator {
    /// An authenticator for keys of `brand`.
    pub fn new(store: Arc<dyn Store>, brand: Brand) -> Self {
        Self {
            store,
            brand,
            cache: RwLock::new(HashMap::new()),
            uses: Arc::default(),
        }
    }

    /// Named keys' last uses as authentication noted them.
    pub fn key_uses(&self) -> &Arc<KeyUses> {
        &self.uses
    }

    /// Writes the named keys' last uses noted since the last flush, in one statement.
    pub async fn flush_key_uses(&self) -> Result<(), StoreError> {
        self.uses.flush(&*self.store).await
    }

    /// The account that owns `presented`, checking the shape before touching storage.
    pub async fn authenticate(&self, presented: Option<&str>) -> Result<Account, AuthError> {
        let presented = presented.ok_or(AuthError::Missing)?;
        let key = ApiKey::parse(&self.brand, presented)
            .map_err(|_| AuthError::Malformed(self.brand.key_prefix().to_owned()))?;
        let hash = key.hash();
        // Read before the look-up: an entry is tagged with an epoch no newer than what it saw.
        let epoch = self.store.key_epoch();
        if let Some(account) = epoch.and_then(|epoch| self.cached(&hash, epoch)) {
            self.note_use(&account);
            return Ok(account);
        }
        match self.store.find_by_key_hash(&hash).await {
            // The store matched by index; the constant-time comparison guards against a
            // backend whose index lookup were ever to match loosely.
            Ok(Some((account, stored))) if stored == hash => {
                if let Some(epoch) = epoch {
                    self.remember(&hash, &account, epoch);
                }
                self.note_use(&account);
                Ok(account)
            }
            Ok(_) => Err(AuthError::Rejected),
            Err(err) => Err(AuthError::Unavailable(err)),
        }
    }

    fn note_use(&self, account: &Account) {
        if let Some(key) = account.via.named_key() {
            self.uses.note(&key.id);
        }
    }

    fn cached(&self, hash: &KeyHash, epoch: u64) -> Option<Account> {
        let cache = self.cache.read().ok()?;
        let entry = cache.get(hash.as_bytes())?;
        (entry.epoch == epoch && entry.stored_at.elapsed() < CACHE_TTL)
            .then(|| entry.account.clone())
    }

    fn remember(&self, hash: &KeyHash, account: &Account, epoch: u64) {
        let Ok(mut cache) = self.cache.write() else {
            return;
        };
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        let entry = Cached {
            account: account.clone(),
            epoch,
            stored_at: Instant::now(),
        };
        cache.insert(*hash.as_bytes(), entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_domain::{AccountId, Email};
    use toolgate_store::{Accounts, NewAccount};
    use toolgate_store_sqlite::{Durability, SqliteStore};

    #[tokio::test]
    async fn a_rotation_by_another_store_handle_is_seen_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let server_side: Arc<dyn Store> =
            Arc::new(SqliteStore::open(&path, Durability::Normal).await.unwrap());
        // A second handle on the same file stands for the CLI, another process.
        let cli_side = SqliteStore::open(&path, Durability::Normal).await.unwrap();
        let brand = Brand::parse("svc").unwrap();
        let key = ApiKey::generate(&brand).unwrap();
        let id = AccountId::generate();
        let email = Email::parse("c@example.org").unwrap();
        cli_side
            .create_account(&NewAccount {
                id: id.clone(),
                email,
                key_hash: key.hash(),
            })
            .await
            .unwrap();

        let auth = Authenticator::new(server_side, brand.clone());
        for _ in 0..3 {
            assert_eq!(
                auth.authenticate(Some(key.expose())).await.unwrap().id,
                id,
                "cached or not, it works"
            );
        }
        let new_key = ApiKey::generate(&brand).unwrap();
        cli_side.replace_key(&id, &new_key.hash()).await.unwrap();
        assert!(matches!(
            auth.authenticate(Some(key.expose())).await,
            Err(AuthError::Rejected)
        ));
        assert_eq!(
            auth.authenticate(Some(new_key.expose())).await.unwrap().id,
            id
        );
        assert!(matches!(
            auth.authenticate(Some("svck_nope")).await,
            Err(AuthError::Malformed(_))
        ));
        assert!(matches!(
            auth.authenticate(None).await,
            Err(AuthError::Missing)
        ));
    }
}
