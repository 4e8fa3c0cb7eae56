//! The vault's use cases: store, replace, delete and list an account's secrets, open the ones a
//! call names (plaintext only for as long as the call holds it), and re-wrap every data key
//! after a master key rotation. Values never leave through an error or a log line.

use std::sync::Arc;

use toolgate_domain::{AccountId, SecretInfo, SecretName};
use toolgate_egress::HostPattern;
use toolgate_sandbox::EdgeSecret;
use toolgate_store::{Store, StoreError};
use toolgate_vault::{Redactor, Vault, VaultError, Zeroizing};

use crate::bound_cache::BoundCache;
use crate::sealed_cache::SealedCache;

/// Most host patterns one secret may be bound to.
pub const MAX_SECRET_HOSTS: usize = 32;

/// A secret's `hosts` checked, without repeats and written as the proxy matches them
/// (`API.Example.org.` → `api.example.org`); `Err` is a sentence for the caller. `*` alone is
/// refused: a secret sent to every host is no longer kept from anyone.
pub fn secret_hosts<'a>(raw: impl IntoIterator<Item = &'a str>) -> Result<Vec<String>, String> {
    let mut hosts: Vec<String> = Vec::new();
    for (i, text) in raw.into_iter().enumerate() {
        if i >= MAX_SECRET_HOSTS {
            return Err(format!(
                "a secret may be bound to at most {MAX_SECRET_HOSTS} host patterns"
            ));
        }
        let pattern = HostPattern::parse(text).map_err(|e| e.to_string())?;
        let written = pattern.to_string();
        if written == "*" {
            return Err(
                "a secret cannot be bound to every host (*): name the hosts it is \
                        for, such as api.github.com or *.openai.com"
                    .to_owned(),
            );
        }
        if !hosts.contains(&written) {
            hosts.push(written);
        }
    }
    Ok(hosts)
}

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
    bound: BoundCache,
}

impl Secrets {
    /// Seals with `vault` and keeps the sealed values in `store`.
    pub fn new(store: Arc<dyn Store>, vault: Arc<Vault>) -> Self {
        Self {
            store,
            vault,
            sealed: SealedCache::default(),
            bound: BoundCache::default(),
        }
    }

    /// Creates or replaces `name`; `true` when it was created. `hosts` binds it to those host
    /// patterns (`Some(&[])`: to none); `None` keeps a replaced secret's hosts.
    pub async fn set(
        &self,
        account: &AccountId,
        name: &SecretName,
        value: &str,
        hosts: Option<&[String]>,
    ) -> Result<bool, SecretsError> {
        let hosts = hosts
            .map(|hosts| secret_hosts(hosts.iter().map(String::as_str)))
            .transpose()
            .map_err(SecretsError::Refused)?;
        let in_headers = hosts.as_ref().is_some_and(|h| !h.is_empty());
        if in_headers && value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return Err(SecretsError::Refused(
                "a secret bound to hosts is written into request headers: its value may not \
                 hold line breaks or other control characters"
                    .to_owned(),
            ));
        }
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
            .put_secret(account, name, &sealed, hosts.as_deref())
            .await
            .map_err(unavailable);
        self.sealed.forget(account, name);
        self.bound.forget(account);
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
        self.bound.forget(account);
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

    /// The account's secrets bound to hosts, opened, for the sessions' network proxy. An
    /// account without any costs neither a vault open nor (once cached) a database read. A
    /// secret that cannot be opened is left out and logged: the proxy then refuses requests
    /// naming it, and the account's other runs go on.
    pub async fn open_bound(&self, account: &AccountId) -> Result<Vec<EdgeSecret>, SecretsError> {
        let list = self.bound_list(account).await?;
        let mut opened = Vec::with_capacity(list.len());
        for secret in list.iter() {
            let text = self
                .vault
                .open(account, &secret.name, &secret.sealed)
                .ok()
                .and_then(|plain| String::from_utf8(plain.to_vec()).ok());
            let Some(value) = text else {
                tracing::error!(secret = %secret.name, "cannot open a secret bound to hosts");
                continue;
            };
            opened.push(EdgeSecret {
                name: secret.name.to_string(),
                value,
                hosts: secret.hosts.clone(),
            });
        }
        Ok(opened)
    }

    /// The names and hosts of the account's secrets bound to hosts (nothing opened).
    pub async fn bound_hosts(
        &self,
        account: &AccountId,
    ) -> Result<Vec<(SecretName, Vec<String>)>, SecretsError> {
        let list = self.bound_list(account).await?;
        Ok(list
            .iter()
            .map(|secret| (secret.name.clone(), secret.hosts.clone()))
            .collect())
    }

    /// The account's bound secrets, sealed, from the cache or the store.
    async fn bound_list(
        &self,
        account: &AccountId,
    ) -> Result<Arc<Vec<toolgate_store::BoundSecret>>, SecretsError> {
        match self.bound.get(account) {
            Ok(list) => Ok(list),
            Err(changes) => {
                let read = Arc::new(
                    self.store
                        .bound_secrets(account)
                        .await
                        .map_err(unavailable)?,
                );
                self.bound.keep(account, &read, changes);
                Ok(read)
            }
        }
    }

    /// Wraps every data key older than the newest master key again, while the service runs.
    /// A secret replaced meanwhile is already current; passes repeat until none is left behind.
    pub async fn rewrap_all(&self) -> Result<Rewrapped, SecretsError> {
        self.vault
            .refresh(true)
            .map_err(|err| SecretsError::Refused(err.to_string()))?;
        let version = self.vault.newest_version();
        self.sealed.clear();
        self.bound.clear();
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
