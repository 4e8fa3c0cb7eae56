//! The embedded default backend: one SQLite file in WAL mode.
//!
//! Call admissions are decided by one thread with its own connection, batched into shared
//! transactions (group commit), so each commit's fsync is paid once for many calls while each
//! call still gets its own answer only after its ledger row is durable (see `admit`). Other
//! writes go through a single sqlx connection; SQLite serialises the two, and `busy_timeout`
//! (10 s) makes either wait for the other rather than answer "database is locked".

mod admit;
mod allowance;
mod call_history;
mod dashboard;
mod file_modes;
mod host_lists;
mod jobs;
mod key_epoch;
mod mcp_sessions;
mod money;
mod named_keys;
mod oauth;
mod placement;
mod rows;
mod secrets;
mod spend;
mod standing;
mod take_back;
mod tasks;
mod wal_checkpoints;

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use tokio::sync::mpsc;
use toolgate_domain::{
    Account, AccountId, Admission, Email, KeyHash, Micros, MonthKey, UsageSnapshot,
};
use toolgate_store::{
    Accounts, CallCharge, Decided, Metering, NewAccount, StoreError, account_from_columns,
    key_hash_from_column, now_millis,
};

use crate::allowance::{Mirror, Submitted};
use crate::jobs::{AdmitJob, WriterJob};
use crate::key_epoch::KeyEpoch;
use crate::rows::map_error;

/// How hard a commit waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync on every commit: an admitted call survives a power cut.
    Full,
    /// WAL written on commit, fsynced at checkpoints: survives a killed process, not a power cut.
    Normal,
}

impl FromStr for Durability {
    type Err = String;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw {
            "full" => Ok(Self::Full),
            "normal" => Ok(Self::Normal),
            _ => Err(format!(
                "sqlite durability must be 'full' or 'normal', not {raw:?}"
            )),
        }
    }
}

/// Store backed by one SQLite file.
#[derive(Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    admissions: mpsc::Sender<WriterJob>,
    mirror: Arc<Mirror>,
    key_epoch: Arc<KeyEpoch>,
    /// Held while this process serves: see [`SqliteStore::serve_exclusively`].
    serving: Arc<OnceLock<File>>,
    path: PathBuf,
}

impl SqliteStore {
    /// Opens (creating and migrating when needed) the database file at `path`.
    pub async fn open(path: &Path, durability: Durability) -> Result<Self, StoreError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            file_modes::create_dir(parent).map_err(|e| {
                StoreError::Unavailable(format!("cannot create {}: {e}", parent.display()))
            })?;
        }
        // SQLite gives its -wal and -shm files the database's own mode: create that one 0600
        file_modes::open(path)
            .map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
        for companion in ["-wal", "-shm"] {
            let mut name = path.as_os_str().to_owned();
            name.push(companion);
            file_modes::narrow_if_present(Path::new(&name)).map_err(|e| {
                StoreError::Unavailable(format!(
                    "cannot restrict {}{companion}: {e}",
                    path.display()
                ))
            })?;
        }
        let synchronous = match durability {
            Durability::Full => SqliteSynchronous::Full,
            Durability::Normal => SqliteSynchronous::Normal,
        };
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        // A connection to a local file cannot drop, so the pool's ping before each acquire would
        // be a wasted round trip to the connection's worker thread on every call.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await
            .map_err(map_error)?;
        sqlx::migrate!("./migrations")
            .run(&writer)
            .await
            .map_err(|e| StoreError::Unavailable(format!("migration failed: {e}")))?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect_with(options.read_only(true))
            .await
            .map_err(map_error)?;
        let mirror = Arc::new(Mirror::default());
        let admissions = admit::spawn_writer(path, durability, Arc::clone(&mirror))?;
        let key_epoch = KeyEpoch::beside(path).map_err(|e| {
            StoreError::Unavailable(format!("cannot create the key epoch file: {e}"))
        })?;
        Ok(Self {
            writer,
            reader,
            admissions,
            mirror,
            key_epoch: Arc::new(key_epoch),
            serving: Arc::new(OnceLock::new()),
            path: path.to_owned(),
        })
    }

    /// Claims the database for this process's `serve`, for as long as the store lives: a
    /// second server on the same file is refused rather than left to double-spend allowances.
    /// With the claim, calls certain to be admitted (see `allowance`) start without waiting
    /// for the database; they are still decided and recorded there before they are answered.
    pub fn serve_exclusively(&self) -> Result<(), StoreError> {
        let mut name = self.path.as_os_str().to_owned();
        name.push("-serve.lock");
        let file = file_modes::open(Path::new(&name))
            .map_err(|e| StoreError::Unavailable(format!("cannot open the serve lock: {e}")))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(StoreError::Conflict(
                    "another toolgate serve is using this database",
                ));
            }
            Err(TryLockError::Error(e)) => {
                return Err(StoreError::Unavailable(format!(
                    "cannot lock the serve lock: {e}"
                )));
            }
        }
        let _ = self.serving.set(file);
        self.mirror.enable();
        Ok(())
    }
}

#[async_trait]
impl Accounts for SqliteStore {
    async fn create_account(&self, account: &NewAccount) -> Result<Account, StoreError> {
        sqlx::query(
            "INSERT INTO accounts (id, email, key_hash, created_at) VALUES (?1, ?2, ?3, ?4)",
        )
        .bind(account.id.as_str())
        .bind(account.email.as_str())
        .bind(&account.key_hash.as_bytes()[..])
        .bind(now_millis())
        .execute(&self.writer)
        .await
        .map_err(map_error)?;
        Ok(Account {
            id: account.id.clone(),
            email: account.email.clone(),
            tier: "free".to_owned(),
            caps: Default::default(),
            via: Default::default(),
        })
    }

    async fn find_by_key_hash(
        &self,
        hash: &KeyHash,
    ) -> Result<Option<(Account, KeyHash)>, StoreError> {
        let row: Option<(String, String, String, Option<i64>, Option<i64>, Vec<u8>)> =
            sqlx::query_as("SELECT id, email, tier, cap_month_micros, cap_day_micros, key_hash FROM accounts WHERE key_hash = ?1")
                .bind(&hash.as_bytes()[..])
                .fetch_optional(&self.reader)
                .await
                .map_err(map_error)?;
        match row {
            Some((id, email, tier, month, day, stored)) => Ok(Some((
                account_from_columns(id, &email, tier, (month, day))?,
                key_hash_from_column(&stored)?,
            ))),
            // a named key costs a second indexed look-up only when no first key matched
            None => self.find_by_named_key(hash).await,
        }
    }

    async fn find_by_email(&self, email: &Email) -> Result<Option<Account>, StoreError> {
        let row: Option<(String, String, String, Option<i64>, Option<i64>)> =
            sqlx::query_as("SELECT id, email, tier, cap_month_micros, cap_day_micros FROM accounts WHERE email = ?1")
                .bind(email.as_str())
                .fetch_optional(&self.reader)
                .await
                .map_err(map_error)?;
        row.map(|(id, email, tier, month, day)| {
            account_from_columns(id, &email, tier, (month, day))
        })
        .transpose()
    }

    fn key_epoch(&self) -> Option<u64> {
        self.key_epoch.current()
    }

    async fn replace_key(&self, account: &AccountId, new_hash: &KeyHash) -> Result<(), StoreError> {
        // Readers tag a cached key with the token read before their look-up, so the bump after
        // the commit invalidates every look-up that could have seen the old key. The bump before
        // it covers a crash between commit and second bump: entries cached before the rotation
        // started are invalid already (later ones wait out the cache's 1 s TTL).
        self.bump_key_epoch()?;
        let result = self.write_key(account, new_hash).await;
        self.bump_key_epoch()?;
        result
    }
}

impl SqliteStore {
    fn bump_key_epoch(&self) -> Result<(), StoreError> {
        self.key_epoch
            .bump()
            .map_err(|e| StoreError::Unavailable(format!("cannot bump the key epoch: {e}")))
    }

    async fn write_key(&self, account: &AccountId, new_hash: &KeyHash) -> Result<(), StoreError> {
        // The sealed copy belongs to the old key: forgetting it in the same statement means no
        // reader ever sees the new hash beside the old key's sealed copy.
        let done = sqlx::query(
            "UPDATE accounts SET key_hash = ?1, key_rotated_at = ?2,
                 key_sealed_version = NULL, key_wrapped = NULL, key_ciphertext = NULL
             WHERE id = ?3",
        )
        .bind(&new_hash.as_bytes()[..])
        .bind(now_millis())
        .bind(account.as_str())
        .execute(&self.writer)
        .await
        .map_err(map_error)?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(StoreError::NotFound)
        }
    }
}

#[async_trait]
impl Metering for SqliteStore {
    async fn admit_call(&self, charge: &CallCharge<'_>) -> Result<Admission, StoreError> {
        let decided = self.decide_call(charge).await?;
        decided.recorded.wait().await?;
        Ok(decided.admission)
    }

    async fn decide_call(&self, charge: &CallCharge<'_>) -> Result<Decided, StoreError> {
        let (job, answers) = AdmitJob::new(charge);
        match self.mirror.submit(job, &self.admissions) {
            Submitted::Predicted(admission) => {
                return Ok(Decided {
                    admission,
                    usage: None,
                    recorded: answers.recorded(),
                });
            }
            Submitted::Queued => {}
            Submitted::Send(job) => self.admissions.send(job).await.map_err(|_| {
                StoreError::Unavailable("the metering writer has stopped".to_owned())
            })?,
        }
        answers.decided().await
    }

    async fn credit_wallet(
        &self,
        account: &AccountId,
        amount: Micros,
        reference: &str,
    ) -> Result<(Micros, bool), StoreError> {
        money::credit(&self.writer, account, amount, reference, None).await
    }

    async fn usage(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<UsageSnapshot, StoreError> {
        let row: Option<(i64, Option<i64>)> = sqlx::query_as(
            "SELECT a.wallet_micros - a.owed_micros, u.free_used FROM accounts a
             LEFT JOIN monthly_usage u ON u.account_id = a.id AND u.month = ?2
             WHERE a.id = ?1",
        )
        .bind(account.as_str())
        .bind(month.as_str())
        .fetch_optional(&self.reader)
        .await
        .map_err(map_error)?;
        let (wallet, free_used) = row.ok_or(StoreError::NotFound)?;
        Ok(UsageSnapshot {
            free_used: free_used.unwrap_or(0),
            wallet: Micros(wallet),
        })
    }

    async fn ledger_counts(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<(i64, i64), StoreError> {
        let (free, paid): (i64, i64) = sqlx::query_as(
            "SELECT COALESCE(SUM(paid_from = 'free'), 0), COALESCE(SUM(paid_from = 'wallet'), 0)
             FROM call_ledger WHERE account_id = ?1 AND month = ?2",
        )
        .bind(account.as_str())
        .bind(month.as_str())
        .fetch_one(&self.reader)
        .await
        .map_err(map_error)?;
        Ok((free, paid))
    }
}
