//! What an operator does from the command line: create accounts, rotate keys, credit wallets.

use std::sync::Arc;

use serde::Serialize;
use toolgate_domain::{AccountId, ApiKey, BillingStatus, Brand, Email, Micros, MonthKey, Pricing};
use toolgate_store::{NewAccount, Store, StoreError};

/// Why an operator command failed; each message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// the e-mail address is not usable
    #[error("invalid e-mail address: {0}")]
    InvalidEmail(String),
    /// an account with this address exists
    #[error(
        "an account with this e-mail address already exists (use `account rotate-key` to issue a new key)"
    )]
    AlreadyExists,
    /// no account with this address
    #[error("no account has this e-mail address (create one with `account create`)")]
    NoSuchAccount,
    /// the amount is not a positive dollar amount
    #[error("invalid amount: {0}")]
    InvalidAmount(String),
    /// the credit reference is unusable
    #[error("invalid reference: {0}")]
    InvalidReference(&'static str),
    /// the key could not be generated or storage failed
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<StoreError> for AdminError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound => Self::NoSuchAccount,
            StoreError::Conflict(_) => Self::AlreadyExists,
            StoreError::Unavailable(detail) => Self::Internal(detail),
        }
    }
}

/// What `account create` and `account rotate-key` print: shown once, never stored in clear.
#[derive(Debug, Serialize)]
pub struct IssuedKey {
    /// The account's identifier.
    pub account_id: String,
    /// The normalised address.
    pub email: String,
    /// The new key.
    pub api_key: String,
    /// `{public_url}/u/{api_key}`.
    pub personal_url: String,
}

/// Operator use cases.
pub struct Admin {
    store: Arc<dyn Store>,
    brand: Brand,
    pricing: Pricing,
    public_url: String,
    vault: Option<Arc<toolgate_vault::Vault>>,
}

/// Longest credit reference accepted; references are event ids, not prose.
const MAX_REFERENCE_LEN: usize = 200;

impl Admin {
    /// Operator commands for one store; `public_url` forms the personal URLs.
    pub fn new(store: Arc<dyn Store>, brand: Brand, pricing: Pricing, public_url: &str) -> Self {
        let public_url = public_url.trim_end_matches('/').to_owned();
        Self {
            store,
            brand,
            pricing,
            public_url,
            vault: None,
        }
    }

    /// Keeps each issued key sealed by `vault`, so the owner's dashboard can show it again.
    pub fn keeping_keys(mut self, vault: Arc<toolgate_vault::Vault>) -> Self {
        self.vault = Some(vault);
        self
    }

    /// Creates an account with a fresh key.
    pub async fn create_account(&self, email: &str) -> Result<IssuedKey, AdminError> {
        let email = parse_email(email)?;
        let key = self.new_key()?;
        let account = NewAccount {
            id: AccountId::generate(),
            email,
            key_hash: key.hash(),
        };
        let created = self.store.create_account(&account).await?;
        crate::owner::keep_key(&*self.store, self.vault.as_deref(), &created.id, &key).await;
        Ok(self.issued(&created.id, &created.email, &key))
    }

    /// Replaces the account's key; the old one stops working when this returns.
    pub async fn rotate_key(&self, email: &str) -> Result<IssuedKey, AdminError> {
        let email = parse_email(email)?;
        let account = self
            .store
            .find_by_email(&email)
            .await?
            .ok_or(AdminError::NoSuchAccount)?;
        let key = self.new_key()?;
        self.store.replace_key(&account.id, &key.hash()).await?;
        crate::owner::keep_key(&*self.store, self.vault.as_deref(), &account.id, &key).await;
        Ok(self.issued(&account.id, &account.email, &key))
    }

    /// Credits the wallet once per `reference` (a fresh one when `None`) and returns the status.
    pub async fn credit_wallet(
        &self,
        email: &str,
        usd: &str,
        reference: Option<&str>,
    ) -> Result<BillingStatus, AdminError> {
        let email = parse_email(email)?;
        let amount =
            Micros::parse_usd(usd).map_err(|err| AdminError::InvalidAmount(err.to_string()))?;
        if amount.0 <= 0 {
            return Err(AdminError::InvalidAmount(
                "the amount must be greater than 0.00".to_owned(),
            ));
        }
        let reference = match reference {
            Some(given) => check_reference(given)?.to_owned(),
            None => format!("manual-{}", AccountId::generate()),
        };
        let account = self
            .store
            .find_by_email(&email)
            .await?
            .ok_or(AdminError::NoSuchAccount)?;
        self.store
            .credit_wallet(&account.id, amount, &reference)
            .await?;
        let usage = self.store.usage(&account.id, &MonthKey::now()).await?;
        Ok(BillingStatus::new(&account.tier, usage, &self.pricing))
    }

    fn new_key(&self) -> Result<ApiKey, AdminError> {
        ApiKey::generate(&self.brand).map_err(|err| AdminError::Internal(err.to_string()))
    }

    fn issued(&self, id: &AccountId, email: &Email, key: &ApiKey) -> IssuedKey {
        IssuedKey {
            account_id: id.to_string(),
            email: email.to_string(),
            api_key: key.expose().to_owned(),
            personal_url: format!("{}/u/{}", self.public_url, key.expose()),
        }
    }
}

fn parse_email(raw: &str) -> Result<Email, AdminError> {
    Email::parse(raw).map_err(|err| AdminError::InvalidEmail(err.to_string()))
}

fn check_reference(reference: &str) -> Result<&str, AdminError> {
    if reference.is_empty() || reference.len() > MAX_REFERENCE_LEN {
        return Err(AdminError::InvalidReference("between 1 and 200 characters"));
    }
    if reference.chars().any(char::is_control) {
        return Err(AdminError::InvalidReference("no control characters"));
    }
    Ok(reference)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use toolgate_store_sqlite::{Durability, SqliteStore};

    async fn admin() -> (Admin, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("t.db"), Durability::Normal)
            .await
            .unwrap();
        let admin = Admin::new(
            Arc::new(store),
            Brand::parse("svc").unwrap(),
            Pricing::default(),
            "http://h:1/",
        );
        (admin, dir)
    }

    #[tokio::test]
    async fn create_rotate_and_credit() {
        let (admin, _dir) = admin().await;
        let issued = admin.create_account("Ann@Example.org").await.unwrap();
        assert_eq!(issued.email, "ann@example.org");
        assert_eq!(
            issued.personal_url,
            format!("http://h:1/u/{}", issued.api_key)
        );
        assert!(matches!(
            admin.create_account("ann@example.org").await,
            Err(AdminError::AlreadyExists)
        ));

        let rotated = admin.rotate_key("ann@example.org").await.unwrap();
        assert_eq!(rotated.account_id, issued.account_id);
        assert_ne!(rotated.api_key, issued.api_key);

        let status = admin
            .credit_wallet("ann@example.org", "12.50", Some("ref-1"))
            .await
            .unwrap();
        assert_eq!(
            (
                status.wallet_balance_usd.as_str(),
                status.paid_calls_available
            ),
            ("12.50", 1562)
        );
        let again = admin
            .credit_wallet("ann@example.org", "12.50", Some("ref-1"))
            .await
            .unwrap();
        assert_eq!(
            again.wallet_balance_usd, "12.50",
            "same reference credits once"
        );
    }

    #[tokio::test]
    async fn bad_operator_input_is_refused_clearly() {
        let (admin, _dir) = admin().await;
        assert!(matches!(
            admin.create_account("not-an-address").await,
            Err(AdminError::InvalidEmail(_))
        ));
        assert!(matches!(
            admin.rotate_key("ghost@example.org").await,
            Err(AdminError::NoSuchAccount)
        ));
        admin.create_account("bob@example.org").await.unwrap();
        for bad in ["0", "-1", "abc", "1.2345678", "0.00"] {
            assert!(
                matches!(
                    admin.credit_wallet("bob@example.org", bad, None).await,
                    Err(AdminError::InvalidAmount(_))
                ),
                "{bad} must be refused"
            );
        }
        let long = "r".repeat(201);
        assert!(matches!(
            admin
                .credit_wallet("bob@example.org", "5", Some(&long))
                .await,
            Err(AdminError::InvalidReference(_))
        ));
    }
}
