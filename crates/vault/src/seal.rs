//! Sealing and opening one secret. The value is encrypted under a fresh data key; the data key
//! is wrapped by the newest master key. Both carry associated data naming the account, the
//! secret and the master key version, so nothing sealed for one place opens in another.

use std::sync::{Arc, PoisonError, RwLock};

use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{KeyInit, XChaCha20Poly1305, XNonce};
use toolgate_domain::{AccountId, MAX_SECRET_BYTES, SealedSecret, SecretName};
use zeroize::Zeroizing;

use crate::keyfile::KeySource;
use crate::keys::{KeyBytes, MasterKeys};
use crate::{VaultError, random};

const NONCE: usize = 24;

/// Seals and opens secrets under the master keys of one [`KeySource`].
pub struct Vault {
    keys: RwLock<Arc<MasterKeys>>,
    source: KeySource,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vault")
            .field("newest_version", &self.newest_version())
            .field("source", &self.source)
            .finish()
    }
}

impl Vault {
    /// A vault over the keys `source` holds now.
    pub fn open_source(source: KeySource) -> Result<Self, VaultError> {
        let keys = source.load()?;
        Ok(Self {
            keys: RwLock::new(Arc::new(keys)),
            source,
        })
    }

    /// The master key version new secrets are sealed under.
    pub fn newest_version(&self) -> u32 {
        self.current().newest()
    }

    /// Encrypts `value` as the secret `name` of `account`.
    pub fn seal(
        &self,
        account: &AccountId,
        name: &SecretName,
        value: &[u8],
    ) -> Result<SealedSecret, VaultError> {
        self.seal_as(account, Label::Secret(name), value)
    }

    /// Encrypts the account's own API key, so that its owner can see the personal URL again.
    /// Bound to the account and to this purpose: it never opens as a secret, nor a secret as it.
    pub fn seal_account_key(
        &self,
        account: &AccountId,
        key: &[u8],
    ) -> Result<SealedSecret, VaultError> {
        self.seal_as(account, Label::AccountKey, key)
    }

    /// Decrypts what [`Vault::seal_account_key`] sealed for `account`.
    pub fn open_account_key(
        &self,
        account: &AccountId,
        sealed: &SealedSecret,
    ) -> Result<Zeroizing<Vec<u8>>, VaultError> {
        let data_key = self.unwrap_key(account, Label::AccountKey, sealed)?;
        decrypt(
            &data_key,
            &sealed.ciphertext,
            &value_context(account, Label::AccountKey),
        )
    }

    fn seal_as(
        &self,
        account: &AccountId,
        name: Label<'_>,
        value: &[u8],
    ) -> Result<SealedSecret, VaultError> {
        if value.len() > MAX_SECRET_BYTES {
            return Err(VaultError::TooLarge {
                max: MAX_SECRET_BYTES,
                got: value.len(),
            });
        }
        let data_key = random::<32>()?;
        let ciphertext = encrypt(&data_key, value, &value_context(account, name))?;
        let (version, wrapped_key) =
            self.wrap_new_key(&data_key, |version| key_context(account, name, version))?;
        Ok(SealedSecret {
            key_version: version,
            wrapped_key,
            ciphertext,
        })
    }

    /// Decrypts the secret `name` of `account`; the plaintext is wiped when dropped.
    pub fn open(
        &self,
        account: &AccountId,
        name: &SecretName,
        sealed: &SealedSecret,
    ) -> Result<Zeroizing<Vec<u8>>, VaultError> {
        let name = Label::Secret(name);
        let data_key = self.unwrap_key(account, name, sealed)?;
        decrypt(&data_key, &sealed.ciphertext, &value_context(account, name))
    }

    /// The same secret with its data key wrapped by the newest master key; `None` when it is
    /// already. The value's ciphertext is unchanged: only the small wrapped key is rewritten.
    pub fn rewrap(
        &self,
        account: &AccountId,
        name: &SecretName,
        sealed: &SealedSecret,
    ) -> Result<Option<SealedSecret>, VaultError> {
        let keys = self.current();
        let Some((version, master)) = keys.newest_key() else {
            return Ok(None);
        };
        if sealed.key_version >= version {
            return Ok(None);
        }
        let name = Label::Secret(name);
        let data_key = self.unwrap_key(account, name, sealed)?;
        let wrapped_key = encrypt(
            master,
            data_key.as_ref(),
            &key_context(account, name, version),
        )?;
        Ok(Some(SealedSecret {
            key_version: version,
            wrapped_key,
            ciphertext: sealed.ciphertext.clone(),
        }))
    }

    /// A key for `purpose` (a fixed label, say `b"download links"`), derived from the newest
    /// master key: the same in every process that has these master keys, after a restart too,
    /// and another one once a new master key version is added. `Err` only when no key is given.
    pub fn derive_key(&self, purpose: &[u8]) -> Result<Zeroizing<[u8; 32]>, VaultError> {
        use hmac::{Hmac, KeyInit, Mac};
        let keys = self.current();
        let (_, master) = keys
            .newest_key()
            .ok_or_else(|| VaultError::BadKeys("no key is given".to_owned()))?;
        let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(master.as_ref())
            .map_err(|_| VaultError::BadKeys("a master key of the wrong length".to_owned()))?;
        mac.update(b"toolgate derived key\0");
        mac.update(purpose);
        let mut key = KeyBytes::default();
        key.copy_from_slice(&mac.finalize().into_bytes());
        Ok(key)
    }

    /// Re-reads the key source: always with `force`, else only if it changed.
    pub fn refresh(&self, force: bool) -> Result<(), VaultError> {
        if let Some(keys) = self.source.reload(force)? {
            *self.keys.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(keys);
        }
        Ok(())
    }

    fn current(&self) -> Arc<MasterKeys> {
        self.keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn unwrap_key(
        &self,
        account: &AccountId,
        name: Label<'_>,
        sealed: &SealedSecret,
    ) -> Result<KeyBytes, VaultError> {
        let version = sealed.key_version;
        self.unwrap_data_key(
            version,
            &sealed.wrapped_key,
            &key_context(account, name, version),
        )
    }

    /// Wraps `data_key` under the newest master key, bound to what `context` makes of that
    /// key's version; the version and the wrapped key.
    pub(crate) fn wrap_new_key(
        &self,
        data_key: &KeyBytes,
        context: impl FnOnce(u32) -> Vec<u8>,
    ) -> Result<(u32, Vec<u8>), VaultError> {
        // another process (the rotation command) may have added a version meanwhile
        self.refresh(false)?;
        let keys = self.current();
        let (version, master) = keys
            .newest_key()
            .ok_or_else(|| VaultError::BadKeys("no key is given".to_owned()))?;
        Ok((
            version,
            encrypt(master, data_key.as_ref(), &context(version))?,
        ))
    }

    /// The data key that master key `version` wrapped under `context`.
    pub(crate) fn unwrap_data_key(
        &self,
        version: u32,
        wrapped: &[u8],
        context: &[u8],
    ) -> Result<KeyBytes, VaultError> {
        if self.current().key(version).is_none() {
            self.refresh(true)?;
        }
        let keys = self.current();
        let master = keys
            .key(version)
            .ok_or(VaultError::UnknownKeyVersion(version))?;
        to_key(&decrypt(master, wrapped, context)?)
    }
}

fn to_key(bytes: &[u8]) -> Result<KeyBytes, VaultError> {
    let mut key = Zeroizing::new([0u8; 32]);
    if bytes.len() != key.len() {
        return Err(VaultError::Undecryptable);
    }
    key.copy_from_slice(bytes);
    Ok(key)
}

/// What a value's encryption is bound to.
fn value_context(account: &AccountId, name: Label<'_>) -> Vec<u8> {
    [
        name.value_purpose(),
        account.as_str().as_bytes(),
        b"\0",
        name.as_bytes(),
    ]
    .concat()
}

/// What a data key's wrapping is bound to.
fn key_context(account: &AccountId, name: Label<'_>, version: u32) -> Vec<u8> {
    [
        name.key_purpose(),
        account.as_str().as_bytes(),
        b"\0",
        name.as_bytes(),
        b"\0",
        &version.to_be_bytes(),
    ]
    .concat()
}

/// What a sealed value is: a tenant's named secret, or the account's API key. Each has its own
/// purpose strings in the associated data, so one can never be opened as the other.
#[derive(Clone, Copy)]
enum Label<'a> {
    Secret(&'a SecretName),
    AccountKey,
}

impl Label<'_> {
    fn value_purpose(self) -> &'static [u8] {
        match self {
            Self::Secret(_) => b"toolgate/secret-value/1\0",
            Self::AccountKey => b"toolgate/account-key-value/1\0",
        }
    }

    fn key_purpose(self) -> &'static [u8] {
        match self {
            Self::Secret(_) => b"toolgate/data-key/1\0",
            Self::AccountKey => b"toolgate/account-key-data-key/1\0",
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Secret(name) => name.as_str().as_bytes(),
            Self::AccountKey => b"",
        }
    }
}

fn encrypt(key: &[u8; 32], plain: &[u8], context: &[u8]) -> Result<Vec<u8>, VaultError> {
    let cipher = XChaCha20Poly1305::new(key.into());
    let nonce = random::<NONCE>()?;
    let sealed = cipher
        .encrypt(
            &XNonce::from(*nonce),
            Payload {
                msg: plain,
                aad: context,
            },
        )
        .map_err(|_| VaultError::Undecryptable)?;
    Ok([nonce.as_ref(), &sealed].concat())
}

fn decrypt(
    key: &[u8; 32],
    sealed: &[u8],
    context: &[u8],
) -> Result<Zeroizing<Vec<u8>>, VaultError> {
    if sealed.len() < NONCE {
        return Err(VaultError::Undecryptable);
    }
    let (nonce, body) = sealed.split_at(NONCE);
    let nonce: [u8; NONCE] = nonce.try_into().map_err(|_| VaultError::Undecryptable)?;
    XChaCha20Poly1305::new(key.into())
        .decrypt(
            &XNonce::from(nonce),
            Payload {
                msg: body,
                aad: context,
            },
        )
        .map(Zeroizing::new)
        .map_err(|_| VaultError::Undecryptable)
}

#[cfg(test)]
#[path = "seal_tests.rs"]
mod tests;
