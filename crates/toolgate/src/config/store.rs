//! The pieces every role reads before it opens storage: which database, and where the vault's
//! master keys come from. Both checked without opening or creating anything.

use std::path::PathBuf;

use toolgate_store_sqlite::Durability;
use toolgate_vault::MasterKeys;

use super::{ConfigError, Secret, Settings};

/// The SQLite file's name inside the data directory.
pub const SQLITE_FILE: &str = "toolgate.db";

/// The storage backend, chosen once.
#[derive(Debug, Clone)]
pub enum StoreConfig {
    /// The embedded SQLite file.
    Sqlite {
        /// `<data_dir>/toolgate.db`
        path: PathBuf,
        /// `sqlite_synchronous`
        durability: Durability,
    },
    /// PostgreSQL at `database_url` (a credential: its `Debug` shows nothing of it).
    Postgres {
        /// `database_url`
        url: Secret,
    },
}

impl StoreConfig {
    /// PostgreSQL when `database_url` is set, else the SQLite file in the data directory.
    pub fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        match &settings.database_url {
            Some(url)
                if url.expose().starts_with("postgres://")
                    || url.expose().starts_with("postgresql://") =>
            {
                Ok(Self::Postgres { url: url.clone() })
            }
            Some(_) => Err(ConfigError::new(
                "database_url",
                "must start with postgres:// or postgresql:// (leave it unset for the \
                 embedded SQLite file)",
            )),
            None => {
                let durability = settings
                    .sqlite_synchronous
                    .as_deref()
                    .unwrap_or("full")
                    .parse()
                    .map_err(|err: String| ConfigError::new("sqlite_synchronous", err))?;
                Ok(Self::Sqlite {
                    path: settings.data_dir().join(SQLITE_FILE),
                    durability,
                })
            }
        }
    }

    /// The backend's name, for the log.
    pub fn backend(&self) -> &'static str {
        match self {
            Self::Sqlite { .. } => "sqlite",
            Self::Postgres { .. } => "postgres",
        }
    }
}

/// Where the vault's master keys come from (no `Debug`: it may hold the keys).
pub enum VaultKeys {
    /// `vault_master_key`, parsed.
    Given(MasterKeys),
    /// `vault_key_file`, else `<data_dir>/vault.key`; created at the first start.
    File(PathBuf),
}

impl VaultKeys {
    /// The keys of `vault_master_key`, else the key file; both given is refused.
    pub fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        match &settings.vault_master_key {
            Some(keys) => {
                if settings.vault_key_file.is_some() {
                    return Err(ConfigError::new(
                        "vault_master_key",
                        "give the vault's master keys either as vault_master_key or in \
                         vault_key_file, not both",
                    ));
                }
                // the parser's message names the entry, never the key
                MasterKeys::parse(keys.expose())
                    .map(Self::Given)
                    .map_err(|err| ConfigError::new("vault_master_key", err))
            }
            None => Ok(Self::File(
                settings
                    .vault_key_file
                    .clone()
                    .unwrap_or_else(|| settings.data_dir().join("vault.key")),
            )),
        }
    }
}
