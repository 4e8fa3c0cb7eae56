//! The vault's master keys at start-up, and the rotation command.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use toolgate_store::Store;
use toolgate_vault::{KeyFile, KeySource, Vault};

use crate::config::{Settings, VaultKeys};

/// The vault `serve` uses: the keys given, else the key file, created with a fresh key on the
/// first start, unless the database already holds secrets (then the file was lost, and a new
/// key would only hide that every stored secret is unreadable).
pub async fn open(keys: VaultKeys, store: &Arc<dyn Store>) -> Result<Arc<Vault>> {
    let source = match keys {
        VaultKeys::Given(keys) => KeySource::Given(keys),
        VaultKeys::File(path) => {
            let file = KeyFile::new(path);
            if !file.exists() {
                create(&file, store).await?;
            }
            KeySource::File(file)
        }
    };
    Ok(Arc::new(Vault::open_source(source)?))
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
    let pieces = crate::commands::Pieces::from_settings(settings, true)?;
    let keys = file.add_version()?;
    let app = crate::commands::app(pieces).await?;
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
