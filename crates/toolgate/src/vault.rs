//! The vault's master keys at start-up (the rotation command is in `commands`).

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use toolgate_store::Store;
use toolgate_vault::{KeyFile, KeySource, Vault};

use crate::config::VaultKeys;

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

/// The vault of a node: the keys given, or the key file, which must exist (`serve` makes it;
/// a node only seals and opens checkpoints with it).
pub fn open_existing(keys: VaultKeys) -> Result<Arc<Vault>> {
    let source = match keys {
        VaultKeys::Given(keys) => KeySource::Given(keys),
        VaultKeys::File(path) => KeySource::File(KeyFile::new(path)),
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
