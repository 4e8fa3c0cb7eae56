//! Turning a presented API key into an account.

use std::sync::Arc;

use toolgate_domain::{Account, ApiKey, Brand};
use toolgate_store::Store;

/// Why a caller was not authenticated. Messages never repeat the presented key.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// no key in any carrier
    #[error(
        "authentication required: put your API key in the URL (/u/<key>), an `Authorization: Bearer` header, an `X-Api-Key` header or `?key=`"
    )]
    Missing,
    /// the key has the wrong shape; refused without a look-up
    #[error("invalid API key: a key is the prefix `{0}` followed by 64 lowercase hexadecimal characters")]
    Malformed(String),
    /// well-formed but unknown, revoked or rotated
    #[error("invalid API key: it is unknown, revoked or was rotated; copy the current personal URL from the dashboard")]
    Rejected,
    /// storage failed; the caller may retry
    #[error("authentication is temporarily unavailable, please retry")]
    Unavailable(String),
}

/// Resolves keys against storage. No cache: a rotated key must fail on its very next use.
pub struct Authenticator {
    store: Arc<dyn Store>,
    brand: Brand,
}

impl Authenticator {
    /// An authenticator for keys of `brand`.
    pub fn new(store: Arc<dyn Store>, brand: Brand) -> Self {
        Self { store, brand }
    }

    /// The account that owns `presented`, checking the shape before touching storage.
    pub async fn authenticate(&self, presented: Option<&str>) -> Result<Account, AuthError> {
        let presented = presented.ok_or(AuthError::Missing)?;
        let key = ApiKey::parse(&self.brand, presented)
            .map_err(|_| AuthError::Malformed(self.brand.key_prefix().to_owned()))?;
        let hash = key.hash();
        match self.store.find_by_key_hash(&hash).await {
            // The store matched by index; the constant-time comparison guards against a
            // backend whose index lookup were ever to match loosely.
            Ok(Some((account, stored))) if stored == hash => Ok(account),
            Ok(_) => Err(AuthError::Rejected),
            Err(err) => Err(AuthError::Unavailable(err.to_string())),
        }
    }
}
