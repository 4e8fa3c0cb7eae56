//! The operator commands: each prints one JSON object on success.

use anyhow::{Context, Result, bail};
use serde::Serialize;
use toolgate_app::{App, Services};
use toolgate_domain::{Brand, Pricing};
use toolgate_vault::KeyFile;

use crate::config::{Settings, StoreConfig, VaultKeys};

/// What an operator command needs of the configuration, checked before anything is opened:
/// the same typed pieces `serve` uses.
pub struct Pieces {
    store: StoreConfig,
    vault: Option<VaultKeys>,
    brand: Brand,
    pricing: Pricing,
    public_url: String,
}

impl Pieces {
    /// Reads and checks the pieces, the vault's keys only `with_vault`.
    pub fn from_settings(settings: &Settings, with_vault: bool) -> Result<Self> {
        Ok(Self {
            store: StoreConfig::from_settings(settings)?,
            vault: if with_vault {
                Some(VaultKeys::from_settings(settings)?)
            } else {
                None
            },
            brand: settings.brand()?,
            pricing: settings.pricing()?,
            public_url: settings.public_url()?,
        })
    }
}

/// The use cases over the configured store, with the vault when the pieces have its keys.
pub async fn app(pieces: Pieces) -> Result<App> {
    let store = crate::backend::open(&pieces.store, crate::backend::Opener::Command).await?;
    let vault = match pieces.vault {
        Some(keys) => Some(crate::vault::open(keys, &store).await?),
        None => None,
    };
    Ok(App::new(
        store,
        pieces.brand,
        pieces.pricing,
        &pieces.public_url,
        Services {
            vault,
            ..Services::default()
        },
    ))
}

/// Prints `value` as one line of JSON.
pub(crate) fn print_json(value: &impl Serialize) -> Result<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}

/// `account create --email E`.
pub async fn create_account(settings: &Settings, email: &str) -> Result<()> {
    // with the vault, so the key is also kept sealed for the owner's dashboard
    let issued = app(Pieces::from_settings(settings, true)?)
        .await?
        .admin()
        .create_account(email)
        .await?;
    print_json(&issued)
}

/// `account rotate-key --email E`.
pub async fn rotate_key(settings: &Settings, email: &str) -> Result<()> {
    let issued = app(Pieces::from_settings(settings, true)?)
        .await?
        .admin()
        .rotate_key(email)
        .await?;
    print_json(&issued)
}

/// `wallet credit --email E --usd AMOUNT`.
pub async fn credit_wallet(
    settings: &Settings,
    email: &str,
    usd: &str,
    reference: Option<&str>,
) -> Result<()> {
    let status = app(Pieces::from_settings(settings, false)?)
        .await?
        .admin()
        .credit_wallet(email, usd, reference)
        .await?;
    print_json(&status)
}

/// `vault rotate-master-key`: a new master key version in the key file, then every data key
/// wrapped again under it, while the service may keep running (it follows the file).
pub async fn rotate_vault_master_key(settings: &Settings) -> Result<()> {
    let path = match VaultKeys::from_settings(settings)? {
        VaultKeys::Given(_) => bail!(
            "the master keys come from the vault_master_key setting: add a new version there \
             (`v<N+1> <base64 of 32 random bytes>`), restart, and run this command with that \
             setting to re-wrap every secret; key-file rotation needs no restart"
        ),
        VaultKeys::File(path) => path,
    };
    let file = KeyFile::new(path);
    if !file.exists() {
        bail!("there is no vault key file at {}", file.path().display());
    }
    // checked before the file changes: a bad setting leaves the keys as they were
    let pieces = Pieces::from_settings(settings, true)?;
    let keys = file.add_version()?;
    let app = app(pieces).await?;
    let secrets = app.secrets().context("the vault is not available")?;
    let done = secrets.rewrap_all().await?;
    let report = serde_json::json!({
        "key_version": keys.newest(), "rewrapped": done.rewrapped,
        "replaced_meanwhile": done.raced, "failed": done.failed,
    });
    println!("{report}");
    if done.failed > 0 {
        bail!(
            "{} secret(s) could not be re-wrapped (see the log)",
            done.failed
        );
    }
    Ok(())
}
