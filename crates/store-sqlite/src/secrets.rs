//! The vault's sealed secrets. Writes go through the writer connection like every write that is
//! not an admission; reads through the reader pool. Values are opaque bytes here, and no error
//! or log line carries them.

use std::collections::BTreeSet;

use async_trait::async_trait;
use sqlx::{QueryBuilder, Sqlite};
use toolgate_domain::{AccountId, SealedSecret, SecretInfo, SecretName};
use toolgate_store::{
    BoundSecret, Secrets, StoreError, StoredSecret, hosts_from_column, hosts_to_column, now_millis,
    sealed_from_columns, secret_name_from_column,
};

use crate::SqliteStore;
use crate::rows::{map_error, map_write_error};

/// Names looked up per query, well under SQLite's limit on bound parameters.
const NAMES_PER_QUERY: usize = 500;

/// A rewrap candidate's columns: account id, name, key version, wrapped key, ciphertext.
type RewrapRow = (String, String, i64, Vec<u8>, Vec<u8>);

#[async_trait]
impl Secrets for SqliteStore {
    async fn put_secret(
        &self,
        account: &AccountId,
        name: &SecretName,
        sealed: &SealedSecret,
        hosts: Option<&[String]>,
    ) -> Result<bool, StoreError> {
        let now = now_millis();
        let hosts = hosts.map(hosts_to_column).transpose()?;
        // IMMEDIATE, as for credits: the admissions thread writes through its own connection.
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(map_error)?;
        // The insert alone checks the account (its foreign key); the update runs only when the
        // row exists, whose account therefore does too.
        let inserted = sqlx::query(
            "INSERT INTO secrets
                 (account_id, name, key_version, wrapped_key, ciphertext, created_at, updated_at,
                  hosts)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, COALESCE(?7, ''))
             ON CONFLICT (account_id, name) DO NOTHING",
        )
        .bind(account.as_str())
        .bind(name.as_str())
        .bind(i64::from(sealed.key_version))
        .bind(sealed.wrapped_key.as_slice())
        .bind(sealed.ciphertext.as_slice())
        .bind(now)
        .bind(hosts.as_deref())
        .execute(&mut *tx)
        .await
        .map_err(map_write_error)?;
        let created = inserted.rows_affected() == 1;
        if !created {
            // MAX: a clock that stood still or stepped back never dates a replacement before
            // the creation or the previous replacement.
            sqlx::query(
                "UPDATE secrets
                 SET key_version = ?3, wrapped_key = ?4, ciphertext = ?5,
                     updated_at = MAX(?6, updated_at), hosts = COALESCE(?7, hosts)
                 WHERE account_id = ?1 AND name = ?2",
            )
            .bind(account.as_str())
            .bind(name.as_str())
            .bind(i64::from(sealed.key_version))
            .bind(sealed.wrapped_key.as_slice())
            .bind(sealed.ciphertext.as_slice())
            .bind(now)
            .bind(hosts.as_deref())
            .execute(&mut *tx)
            .await
            .map_err(map_write_error)?;
        }
        tx.commit().await.map_err(map_error)?;
        Ok(created)
    }

    async fn delete_secret(
        &self,
        account: &AccountId,
        name: &SecretName,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM secrets WHERE account_id = ?1 AND name = ?2")
            .bind(account.as_str())
            .bind(name.as_str())
            .execute(&self.writer)
            .await
            .map_err(map_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn list_secrets(&self, account: &AccountId) -> Result<Vec<SecretInfo>, StoreError> {
        let rows: Vec<(String, i64, i64, String)> = sqlx::query_as(
            "SELECT name, created_at, updated_at, hosts FROM secrets WHERE account_id = ?1
             ORDER BY name",
        )
        .bind(account.as_str())
        .fetch_all(&self.reader)
        .await
        .map_err(map_error)?;
        rows.into_iter()
            .map(|(name, created_ms, updated_ms, hosts)| {
                Ok(SecretInfo {
                    name: secret_name_from_column(&name)?,
                    created_ms,
                    updated_ms,
                    hosts: hosts_from_column(&hosts),
                })
            })
            .collect()
    }

    async fn bound_secrets(&self, account: &AccountId) -> Result<Vec<BoundSecret>, StoreError> {
        let rows: Vec<(String, i64, Vec<u8>, Vec<u8>, String)> = sqlx::query_as(
            "SELECT name, key_version, wrapped_key, ciphertext, hosts FROM secrets
             WHERE account_id = ?1 AND hosts <> '' ORDER BY name",
        )
        .bind(account.as_str())
        .fetch_all(&self.reader)
        .await
        .map_err(map_error)?;
        rows.into_iter()
            .map(|(name, version, wrapped_key, ciphertext, hosts)| {
                Ok(BoundSecret {
                    name: secret_name_from_column(&name)?,
                    sealed: sealed_from_columns(version, wrapped_key, ciphertext)?,
                    hosts: hosts_from_column(&hosts),
                })
            })
            .collect()
    }

    async fn sealed_secrets(
        &self,
        account: &AccountId,
        names: &[SecretName],
    ) -> Result<Vec<(SecretName, SealedSecret)>, StoreError> {
        // Sorted and unique, so that each chunk is a range and the answer comes out by name.
        let wanted: Vec<&SecretName> = names.iter().collect::<BTreeSet<_>>().into_iter().collect();
        let mut found = Vec::new();
        for chunk in wanted.chunks(NAMES_PER_QUERY) {
            let mut query = QueryBuilder::<Sqlite>::new(
                "SELECT name, key_version, wrapped_key, ciphertext FROM secrets WHERE account_id = ",
            );
            query.push_bind(account.as_str());
            query.push(" AND name IN (");
            let mut list = query.separated(", ");
            for name in chunk {
                list.push_bind(name.as_str());
            }
            query.push(") ORDER BY name");
            let rows: Vec<(String, i64, Vec<u8>, Vec<u8>)> = query
                .build_query_as()
                .fetch_all(&self.reader)
                .await
                .map_err(map_error)?;
            for (name, version, wrapped_key, ciphertext) in rows {
                found.push((
                    secret_name_from_column(&name)?,
                    sealed_from_columns(version, wrapped_key, ciphertext)?,
                ));
            }
        }
        Ok(found)
    }

    async fn secrets_to_rewrap(
        &self,
        version: u32,
        after: Option<(&AccountId, &SecretName)>,
        limit: u32,
    ) -> Result<Vec<StoredSecret>, StoreError> {
        // Two statements rather than `?2 IS NULL OR …`, so that the cursor is a range on the
        // primary key and each page starts where the last one ended instead of at the top.
        let rows: Vec<RewrapRow> = match after {
            None => sqlx::query_as(
                "SELECT account_id, name, key_version, wrapped_key, ciphertext FROM secrets
                 WHERE key_version < ?1
                 ORDER BY account_id, name LIMIT ?2",
            )
            .bind(i64::from(version))
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await
            .map_err(map_error)?,
            Some((account, name)) => sqlx::query_as(
                "SELECT account_id, name, key_version, wrapped_key, ciphertext FROM secrets
                 WHERE (account_id, name) > (?2, ?3) AND key_version < ?1
                 ORDER BY account_id, name LIMIT ?4",
            )
            .bind(i64::from(version))
            .bind(account.as_str())
            .bind(name.as_str())
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await
            .map_err(map_error)?,
        };
        rows.into_iter()
            .map(|(account, name, version, wrapped_key, ciphertext)| {
                Ok(StoredSecret {
                    account: AccountId::from_stored(account),
                    name: secret_name_from_column(&name)?,
                    sealed: sealed_from_columns(version, wrapped_key, ciphertext)?,
                })
            })
            .collect()
    }

    async fn rewrap_secret(
        &self,
        account: &AccountId,
        name: &SecretName,
        old: &SealedSecret,
        new: &SealedSecret,
    ) -> Result<bool, StoreError> {
        // Compare-and-set on the whole sealed form: a put or a delete since `old` was read makes
        // this change nothing, so a rotation never writes back a value that was replaced.
        let done = sqlx::query(
            "UPDATE secrets SET key_version = ?3, wrapped_key = ?4, ciphertext = ?5
             WHERE account_id = ?1 AND name = ?2
               AND key_version = ?6 AND wrapped_key = ?7 AND ciphertext = ?8",
        )
        .bind(account.as_str())
        .bind(name.as_str())
        .bind(i64::from(new.key_version))
        .bind(new.wrapped_key.as_slice())
        .bind(new.ciphertext.as_slice())
        .bind(i64::from(old.key_version))
        .bind(old.wrapped_key.as_slice())
        .bind(old.ciphertext.as_slice())
        .execute(&self.writer)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected() == 1)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use toolgate_domain::{ApiKey, Brand, Email};
    use toolgate_store::{Accounts, NewAccount};

    use super::*;
    use crate::Durability;

    async fn store_with_account(dir: &tempfile::TempDir) -> (SqliteStore, AccountId) {
        let store = SqliteStore::open(&dir.path().join("t.db"), Durability::Normal)
            .await
            .unwrap();
        let key = ApiKey::generate(&Brand::parse("svc").unwrap()).unwrap();
        let account = NewAccount {
            id: AccountId::generate(),
            email: Email::parse("vault@example.org").unwrap(),
            key_hash: key.hash(),
        };
        store.create_account(&account).await.unwrap();
        (store, account.id)
    }

    fn sealed(version: u32, byte: u8) -> SealedSecret {
        SealedSecret {
            key_version: version,
            wrapped_key: vec![byte; 60],
            ciphertext: vec![byte; 40],
        }
    }

    fn name(raw: &str) -> SecretName {
        SecretName::parse(raw).unwrap()
    }

    fn assert_corrupt<T: std::fmt::Debug>(result: Result<T, StoreError>, column: &str) {
        match result {
            Err(StoreError::Unavailable(detail)) => {
                assert_eq!(detail, format!("corrupt secrets row: {column}"));
            }
            other => panic!("expected a corrupt {column}, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_malformed_stored_name_is_reported_as_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let (store, account) = store_with_account(&dir).await;
        sqlx::query("INSERT INTO secrets VALUES (?1, '1-not a name', 1, x'00', x'00', 0, 0, '')")
            .bind(account.as_str())
            .execute(&store.writer)
            .await
            .unwrap();
        assert_corrupt(store.list_secrets(&account).await, "name");
        assert_corrupt(store.secrets_to_rewrap(2, None, 10).await, "name");
    }

    #[tokio::test]
    async fn a_negative_stored_version_is_reported_as_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let (store, account) = store_with_account(&dir).await;
        // The table's CHECK refuses it; only a damaged or hand-edited file could hold one.
        let mut conn = store.writer.acquire().await.unwrap();
        sqlx::query("PRAGMA ignore_check_constraints = ON")
            .execute(&mut *conn)
            .await
            .unwrap();
        sqlx::query("INSERT INTO secrets VALUES (?1, 'TOKEN', -1, x'AB', x'CD', 0, 0, '')")
            .bind(account.as_str())
            .execute(&mut *conn)
            .await
            .unwrap();
        sqlx::query("PRAGMA ignore_check_constraints = OFF")
            .execute(&mut *conn)
            .await
            .unwrap();
        drop(conn);
        assert_corrupt(
            store.sealed_secrets(&account, &[name("TOKEN")]).await,
            "key_version",
        );
        assert_corrupt(store.secrets_to_rewrap(1, None, 10).await, "key_version");
    }

    #[tokio::test]
    async fn a_replacement_is_never_dated_before_the_creation() {
        let dir = tempfile::tempdir().unwrap();
        let (store, account) = store_with_account(&dir).await;
        assert!(
            store
                .put_secret(&account, &name("K"), &sealed(1, 1), None)
                .await
                .unwrap()
        );
        // As if the clock had stepped back since the secret was created.
        let future = now_millis() + 3_600_000;
        sqlx::query("UPDATE secrets SET created_at = ?1, updated_at = ?1")
            .bind(future)
            .execute(&store.writer)
            .await
            .unwrap();
        assert!(
            !store
                .put_secret(&account, &name("K"), &sealed(1, 2), None)
                .await
                .unwrap()
        );
        let listed = store.list_secrets(&account).await.unwrap();
        assert_eq!(
            (listed[0].created_ms, listed[0].updated_ms),
            (future, future)
        );
    }

    #[tokio::test]
    async fn many_names_are_looked_up_in_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let (store, account) = store_with_account(&dir).await;
        let names: Vec<SecretName> = (0..1200).map(|n| name(&format!("N{n:04}"))).collect();
        for wanted in names.iter().step_by(100) {
            store
                .put_secret(&account, wanted, &sealed(1, 9), None)
                .await
                .unwrap();
        }
        let found = store.sealed_secrets(&account, &names).await.unwrap();
        let found: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
        let expected: Vec<String> = (0..1200).step_by(100).map(|n| format!("N{n:04}")).collect();
        assert_eq!(found, expected);
        assert!(
            store
                .sealed_secrets(&account, &[])
                .await
                .unwrap()
                .is_empty()
        );
    }
}
