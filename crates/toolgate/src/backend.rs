//! Opening the storage backend the configuration chose.

use std::sync::Arc;

use anyhow::{Context, Result};
use toolgate_store::Store;
use toolgate_store_postgres::PgStore;
use toolgate_store_sqlite::SqliteStore;

use crate::config::StoreConfig;

/// Who opens the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opener {
    /// `serve`: the one process admitting calls (on SQLite, it claims the file for its life).
    Server,
    /// An operator command, which may run beside a server.
    Command,
}

/// Opens PostgreSQL or the SQLite file (creating it and its directory on the first start).
pub async fn open(config: &StoreConfig, opener: Opener) -> Result<Arc<dyn Store>> {
    match config {
        StoreConfig::Postgres { url } => {
            let store = PgStore::connect(url.expose())
                .await
                .context("cannot open the PostgreSQL database")?;
            Ok(Arc::new(store))
        }
        StoreConfig::Sqlite { path, durability } => {
            let store = SqliteStore::open(path, *durability)
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
