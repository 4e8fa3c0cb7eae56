//! The vault's use cases: store, replace, delete and list an account's secrets, open the ones a
//! call names (plaintext only for as long as the call holds it), and re-wrap every data key
//! after a master key rotation. Values never leave through an error or a log line.

use std::sync::Arc;

use toolgate_domain::{AccountId, SecretInfo, SecretName};
use toolgate_store::{Store, StoreError};
use toolgate_vault::{Redactor, Vault, VaultError, Zeroizing};

use crate::sealed_cache::SealedCache;

/// Why a vault use case failed; messages are safe to show the caller.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// names a call asked for that the account does not have
    #[error("no secret named {}: store it first with secret_set", .0.join(", "))]
    Unknown(Vec<String>),
    /// the value does not fit
    #[error("{0}")]
    Refused(String),
    /// a stored secret could not be decrypted (logged with its cause)
    #[error("the secret {0} cannot be decrypted by this service's master key")]
    Undecryptable(String),
    /// storage failed (logged with its cause)
    #[error("the vault is temporarily unavailable; please retry")]
    Unavailable(#[source] StoreError),
}

/// The secrets a call opened, by name; wiped when dropped.
#[derive(Default)]
pub struct OpenedSecrets {
    values: Vec<(SecretName, Zeroizing<String>)>,
}

impl std::fmt::Debug for OpenedSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.values.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("OpenedSecrets")
            .field("names", &names)
            .finish()
    }
}

impl OpenedSecrets {
    /// Each name with its value.
    pub fn iter(&self) -> impl Iterator<Item = (&SecretName, &str)> {
        self.values.iter().map(|(n, v)| (n, v.as_str()))
    }

    /// A redactor for every value.
    pub fn redactor(&self) -> Redactor {
        Redactor::new(self.values.iter().map(|(n, v)| (n, v.as_bytes())))
    }
}

/// What one master key rotation did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Rewrapped {
    /// data keys now wrapped by the newest master key
    pub rewrapped: u64,
    /// secrets replaced or deleted while the walk ran (already current or gone)
    pub raced: u64,
    /// secrets that could not be opened (left as they are, and logged)
    pub failed: u64,
}

/// The vault over one store.
pub struct Secrets {
    store: Arc<dyn Store>,
    vault: Arc<Vault>,
    sealed: SealedCache,
}

impl Secrets {
    /// Seals with `vault` and keeps the sealed values in `store`.
    pub fn new(store: Arc<dyn Store>, vault: Arc<Vault>) -> Self {
        Self {
            store,
            vault,
            sealed: SealedCache::default(),
        }
    }

    /// Creates or replaces `name`; `true` when it was created.
    pub async fn set(
        &self,
        account: &AccountId,
        name: &SecretName,
        value: &str,
    ) -> Result<bool, SecretsError> {
        let sealed = self
            .vault
            .seal(account, name, value.as_bytes())
            .map_err(|err| match err {
                VaultError::TooLarge { .. } => SecretsError::Refused(err.to_string()),
                other => {
                    tracing::error!(error = %other, "cannot seal a secret");
                    SecretsError::Refused("the vault cannot store secrets right now".to_owned())
                }
            })?;
        let created = self
            .store
            .put_secret(account, name, &sealed)
            .await
            .map_err(unavailable);
        self.sealed.forget(account, name);
        created
    }

    /// Deletes `name`; `false` when there was none.
    pub async fn delete(
        &self,
        account: &AccountId,
        name: &SecretName,
    ) -> Result<bool, SecretsError> {
        let deleted = self
            .store
            .delete_secret(account, name)
            .await
            .map_err(unavailable);
        self.sealed.forget(account, name);
        deleted
    }

    /// Names and dates of the account's secrets.
    pub async fn list(&self, account: &AccountId) -> Result<Vec<SecretInfo>, SecretsError> {
        self.store.list_secrets(account).await.map_err(unavailable)
    }

    /// Opens every named secret, or fails naming each unknown one.
    pub async fn open(
        &self,
        account: &AccountId,
        names: &[SecretName],
    ) -> Result<OpenedSecrets, SecretsError> {
        let (mut sealed, missing, changes) = self.sealed.split(account, names);
        if !missing.is_empty() {
            let read = self
                .store
                .sealed_secrets(account, &missing)
                .await
                .map_err(unavailable)?;
            self.sealed.keep(account, &missing, &read, changes);
            sealed.extend(read);
        }
        let unknown: Vec<String> = names
            .iter()
            .filter(|n| !sealed.iter().any(|(found, _)| found == *n))
            .map(|n| n.to_string())
            .collect();
        if !unknown.is_empty() {
            return Err(SecretsError::Unknown(unknown));
        }
        let mut opened = OpenedSecrets::default();
        for (name, sealed) in sealed {
            let plain = self.vault.open(account, &name, &sealed).map_err(|err| {
                tracing::error!(secret = %name, error = %err, "cannot open a secret");
                SecretsError::Undecryptable(name.to_string())
            })?;
            let text = String::from_utf8(plain.to_vec())
                .map_err(|_| SecretsError::Undecryptable(name.to_string()))?;
            opened.values.push((name, Zeroizing::new(text)));
        }
        Ok(opened)
    }

    /// Wraps every data key older than the newest master key again, while the service runs.
    /// A secret replaced meanwhile is already current; passes repeat until none is left behind.
    pub async fn rewrap_all(&self) -> Result<Rewrapped, SecretsError> {
        self.vault
            .refresh(true)
            .map_err(|err| SecretsError::Refused(err.to_string()))?;
        let version = self.vault.newest_version();
        self.sealed.clear();
        let mut done = Rewrapped::default();
        // a secret sealed by a server that had not yet seen the new key file can appear behind
        // the walk; a few passes catch those
        for _pass in 0..5 {
            let before = done;
            self.rewrap_pass(version, &mut done).await?;
            if done.rewrapped == before.rewrapped && done.raced == before.raced {
                break;
            }
        }
        Ok(done)
    }

    async fn rewrap_pass(&self, version: u32, done: &mut Rewrapped) -> Result<(), SecretsError> {
        let mut after: Option<(AccountId, SecretName)> = None;
        loop {
            let batch = self
                .store
                .secrets_to_rewrap(version, after.as_ref().map(|(a, n)| (a, n)), 256)
                .await
                .map_err(unavailable)?;
            let Some(last) = batch.last() else {
                return Ok(());
            };
            after = Some((last.account.clone(), last.name.clone()));
            for secret in batch {
                let new = match self
                    .vault
                    .rewrap(&secret.account, &secret.name, &secret.sealed)
                {
                    Ok(Some(new)) => new,
                    Ok(None) => continue,
                    Err(err) => {
                        tracing::error!(secret = %secret.name, error = %err, "cannot re-wrap a secret");
                        done.failed += 1;
                        continue;
                    }
                };
                let swapped = self
                    .store
                    .rewrap_secret(&secret.account, &secret.name, &secret.sealed, &new)
                    .await
                    .map_err(unavailable)?;
                if swapped {
                    done.rewrapped += 1;
                } else {
                    done.raced += 1;
                }
            }
        }
    }
}

fn unavailable(err: StoreError) -> SecretsError {
    tracing::error!(error = %err, "vault storage failed");
    SecretsError::Unavailable(err)
}
