//! The vault's master keys at start-up, and the rotation command.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use toolgate_store::Store;
use toolgate_vault::{KeyFile, KeySource, MasterKeys, Vault};

use crate::config::Settings;

/// The vault `serve` uses: the keys of `vault_master_key`, else the key file, created with a
/// fresh key on the first start, unless the database already holds secrets (then the file was
/// lost, and a new key would only hide that every stored secret is unreadable).
pub async fn open(settings: &Settings, store: &Arc<dyn Store>) -> Result<Arc<Vault>> {
    let source = match &settings.vault_master_key {
        Some(keys) => {
            if settings.vault_key_file.is_some() {
                bail!(
                    "give the vault's master keys either as vault_master_key or in vault_key_file, not both"
                );
            }
            KeySource::Given(MasterKeys::parse(keys.expose())?)
        }
        None => {
            let file = key_file(settings);
            if !file.exists() {
                create(&file, store).await?;
            }
            KeySource::File(file)
        }
    };
    Ok(Arc::new(Vault::open_source(source)?))
}

fn key_file(settings: &Settings) -> KeyFile {
    KeyFile::new(
        settings
            .vault_key_file
            .clone()
            .unwrap_or_else(|| settings.data_dir().join("vault.key")),
    )
}

async fn create(file: &KeyFile, store: &Arc<dyn Store>) -> Result<()> {
    let stored = store
        .secrets_to_rewrap(u32::MAX, None, 1)
        .await
        .context("cannot check the vault for stored secrets")?;
    if !stored.is_empty() {
        bail!(
            "the vault key file {} is missing, but the database holds secrets sealed by it: \
             restore the file from its backup (a new key could not read them)",
            file.path().display()
        );
    }
    if let Some(dir) = file.path().parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    file.create()?;
    tracing::info!(path = %file.path().display(), "created the vault's master key file");
    Ok(())
}

/// `vault rotate-master-key`: a new master key version in the key file, then every data key
/// wrapped again under it, while the service may keep running (it follows the file).
pub async fn rotate(settings: &Settings) -> Result<()> {
    if settings.vault_master_key.is_some() {
        bail!(
            "the master keys come from the vault_master_key setting: add a new version there \
             (`v<N+1> <base64 of 32 random bytes>`), restart, and run this command with that \
             setting to re-wrap every secret; key-file rotation needs no restart"
        );
    }
    let file = key_file(settings);
    if !file.exists() {
        bail!("there is no vault key file at {}", file.path().display());
    }
    let keys = file.add_version()?;
    let app = crate::commands::app_with_vault(settings, true).await?;
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
