//! Choosing and opening the storage backend from the settings.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use toolgate_store::Store;
use toolgate_store_postgres::PgStore;
use toolgate_store_sqlite::{Durability, SqliteStore};

use crate::config::{Secret, Settings};

/// The SQLite file's name inside the data directory.
pub const SQLITE_FILE: &str = "toolgate.db";

/// Who opens the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opener {
    /// `serve`: the one process admitting calls (on SQLite, it claims the file for its life).
    Server,
    /// An operator command, which may run beside a server.
    Command,
}

/// Opens PostgreSQL when `database_url` is set, else the SQLite file in the data directory.
pub async fn open(settings: &Settings, opener: Opener) -> Result<Arc<dyn Store>> {
    match settings.database_url.as_ref().map(Secret::expose) {
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            let store = PgStore::connect(url)
                .await
                .context("cannot open the PostgreSQL database")?;
            Ok(Arc::new(store))
        }
        Some(_) => bail!(
            "database_url must start with postgres:// or postgresql:// (leave it unset for the embedded SQLite file)"
        ),
        None => {
            let durability: Durability = settings
                .sqlite_synchronous
                .as_deref()
                .unwrap_or("full")
                .parse()
                .map_err(|err: String| anyhow::anyhow!(err))?;
            let path = settings.data_dir().join(SQLITE_FILE);
            let store = SqliteStore::open(&path, durability)
                .await
                .with_context(|| format!("cannot open the SQLite database {}", path.display()))?;
            if opener == Opener::Server {
                store
                    .serve_exclusively()
                    .with_context(|| format!("cannot serve from {}", path.display()))?;
            }
            Ok(Arc::new(store))
        }
    }
}
