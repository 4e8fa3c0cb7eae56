//! The vault's sealed secrets. Values are opaque bytes here, and no error or log line carries
//! them: PostgreSQL's error text is its message only, never the DETAIL that echoes a row.

use async_trait::async_trait;
use toolgate_domain::{AccountId, SealedSecret, SecretInfo, SecretName};
use toolgate_store::{
    BoundSecret, Secrets, StoreError, StoredSecret, hosts_from_column, hosts_to_column, now_millis,
    sealed_from_columns, secret_name_from_column,
};

use crate::PgStore;
use crate::rows::{map_error, map_write_error, version_to_column};

/// A rewrap candidate's columns: account id, name, key version, wrapped key, ciphertext.
type RewrapRow = (String, String, i32, Vec<u8>, Vec<u8>);

#[async_trait]
impl Secrets for PgStore {
    async fn put_secret(
        &self,
        account: &AccountId,
        name: &SecretName,
        sealed: &SealedSecret,
        hosts: Option<&[String]>,
    ) -> Result<bool, StoreError> {
        let hosts = hosts.map(hosts_to_column).transpose()?;
        // xmax is 0 only on a row version this statement inserted; an updated row carries the
        // updating transaction's id. GREATEST: a clock that stood still or stepped back never
        // dates a replacement before the creation or the previous replacement.
        let created: bool = sqlx::query_scalar(
            "INSERT INTO secrets
                 (account_id, name, key_version, wrapped_key, ciphertext, created_at, updated_at,
                  hosts)
             VALUES ($1, $2, $3, $4, $5, $6, $6, COALESCE($7, ''))
             ON CONFLICT (account_id, name) DO UPDATE
             SET key_version = EXCLUDED.key_version,
                 wrapped_key = EXCLUDED.wrapped_key,
                 ciphertext = EXCLUDED.ciphertext,
                 updated_at = GREATEST(EXCLUDED.updated_at, secrets.updated_at),
                 hosts = COALESCE($7, secrets.hosts)
             RETURNING (xmax = 0)",
        )
        .bind(account.as_str())
        .bind(name.as_str())
        .bind(version_to_column(sealed.key_version)?)
        .bind(sealed.wrapped_key.as_slice())
        .bind(sealed.ciphertext.as_slice())
        .bind(now_millis())
        .bind(hosts.as_deref())
        .fetch_one(&self.pool)
        .await
        .map_err(map_write_error)?;
        Ok(created)
    }

    async fn delete_secret(
        &self,
        account: &AccountId,
        name: &SecretName,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM secrets WHERE account_id = $1 AND name = $2")
            .bind(account.as_str())
            .bind(name.as_str())
            .execute(&self.pool)
            .await
            .map_err(map_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn list_secrets(&self, account: &AccountId) -> Result<Vec<SecretInfo>, StoreError> {
        let rows: Vec<(String, i64, i64, String)> = sqlx::query_as(
            "SELECT name, created_at, updated_at, hosts FROM secrets WHERE account_id = $1
             ORDER BY name",
        )
        .bind(account.as_str())
        .fetch_all(&self.pool)
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
        let rows: Vec<(String, i32, Vec<u8>, Vec<u8>, String)> = sqlx::query_as(
            "SELECT name, key_version, wrapped_key, ciphertext, hosts FROM secrets
             WHERE account_id = $1 AND hosts <> '' ORDER BY name",
        )
        .bind(account.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(map_error)?;
        rows.into_iter()
            .map(|(name, version, wrapped_key, ciphertext, hosts)| {
                Ok(BoundSecret {
                    name: secret_name_from_column(&name)?,
                    sealed: sealed_from_columns(i64::from(version), wrapped_key, ciphertext)?,
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
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<&str> = names.iter().map(SecretName::as_str).collect();
        let rows: Vec<(String, i32, Vec<u8>, Vec<u8>)> = sqlx::query_as(
            "SELECT name, key_version, wrapped_key, ciphertext FROM secrets
             WHERE account_id = $1 AND name = ANY($2)
             ORDER BY name",
        )
        .bind(account.as_str())
        .bind(names)
        .fetch_all(&self.pool)
        .await
        .map_err(map_error)?;
        rows.into_iter()
            .map(|(name, version, wrapped_key, ciphertext)| {
                Ok((
                    secret_name_from_column(&name)?,
                    sealed_from_columns(i64::from(version), wrapped_key, ciphertext)?,
                ))
            })
            .collect()
    }

    async fn secrets_to_rewrap(
        &self,
        version: u32,
        after: Option<(&AccountId, &SecretName)>,
        limit: u32,
    ) -> Result<Vec<StoredSecret>, StoreError> {
        // Versions are compared as BIGINT so that any u32 is a valid bound. Two statements
        // rather than `$2 IS NULL OR …`, so that the cursor is a range on the primary key.
        let rows: Vec<RewrapRow> = match after {
            None => sqlx::query_as(
                "SELECT account_id, name, key_version, wrapped_key, ciphertext FROM secrets
                 WHERE key_version < $1
                 ORDER BY account_id, name LIMIT $2",
            )
            .bind(i64::from(version))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(map_error)?,
            Some((account, name)) => sqlx::query_as(
                "SELECT account_id, name, key_version, wrapped_key, ciphertext FROM secrets
                 WHERE (account_id, name) > ($2, $3) AND key_version < $1
                 ORDER BY account_id, name LIMIT $4",
            )
            .bind(i64::from(version))
            .bind(account.as_str())
            .bind(name.as_str())
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(map_error)?,
        };
        rows.into_iter()
            .map(|(account, name, version, wrapped_key, ciphertext)| {
                Ok(StoredSecret {
                    account: AccountId::from_stored(account),
                    name: secret_name_from_column(&name)?,
                    sealed: sealed_from_columns(i64::from(version), wrapped_key, ciphertext)?,
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
            "UPDATE secrets SET key_version = $3, wrapped_key = $4, ciphertext = $5
             WHERE account_id = $1 AND name = $2
               AND key_version = $6 AND wrapped_key = $7 AND ciphertext = $8",
        )
        .bind(account.as_str())
        .bind(name.as_str())
        .bind(version_to_column(new.key_version)?)
        .bind(new.wrapped_key.as_slice())
        .bind(new.ciphertext.as_slice())
        .bind(i64::from(old.key_version))
        .bind(old.wrapped_key.as_slice())
        .bind(old.ciphertext.as_slice())
        .execute(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected() == 1)
    }
}

#[cfg(all(test, feature = "testkit"))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use toolgate_domain::{ApiKey, Brand, Email};
    use toolgate_store::{Accounts, NewAccount};

    use super::*;
    use crate::testkit::with_fresh_database;

    async fn store_with_account(url: &str) -> (PgStore, AccountId) {
        let store = PgStore::connect(url).await.unwrap();
        let key = ApiKey::generate(&Brand::parse("svc").unwrap()).unwrap();
        let account = NewAccount {
            id: AccountId::generate(),
            email: Email::parse("vault@example.org").unwrap(),
            key_hash: key.hash(),
        };
        store.create_account(&account).await.unwrap();
        (store, account.id)
    }

    fn assert_corrupt<T: std::fmt::Debug>(result: Result<T, StoreError>, column: &str) {
        match result {
            Err(StoreError::Unavailable(detail)) => {
                assert_eq!(detail, format!("corrupt secrets row: {column}"));
            }
            other => panic!("expected a corrupt {column}, got {other:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn corrupt_stored_values_are_reported_not_panicked_on() {
        with_fresh_database(|url| async move {
            let (store, account) = store_with_account(&url).await;
            sqlx::query(
                "INSERT INTO secrets VALUES ($1, '1-not a name', 1, '\\x00', '\\x00', 0, 0)",
            )
            .bind(account.as_str())
            .execute(&store.pool)
            .await
            .unwrap();
            assert_corrupt(store.list_secrets(&account).await, "name");
            assert_corrupt(store.secrets_to_rewrap(2, None, 10).await, "name");
            sqlx::query("DELETE FROM secrets")
                .execute(&store.pool)
                .await
                .unwrap();

            // The table's CHECK refuses it; only a damaged or hand-edited database could hold one.
            sqlx::query("ALTER TABLE secrets DROP CONSTRAINT secrets_key_version_check")
                .execute(&store.pool)
                .await
                .unwrap();
            sqlx::query("INSERT INTO secrets VALUES ($1, 'TOKEN', -1, '\\xab', '\\xcd', 0, 0)")
                .bind(account.as_str())
                .execute(&store.pool)
                .await
                .unwrap();
            let token = SecretName::parse("TOKEN").unwrap();
            assert_corrupt(
                store.sealed_secrets(&account, &[token]).await,
                "key_version",
            );
            assert_corrupt(store.secrets_to_rewrap(1, None, 10).await, "key_version");
            store.close().await;
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replacement_is_never_dated_before_the_creation() {
        with_fresh_database(|url| async move {
            let (store, account) = store_with_account(&url).await;
            let name = SecretName::parse("K").unwrap();
            let sealed = |byte| SealedSecret {
                key_version: 1,
                wrapped_key: vec![byte; 60],
                ciphertext: vec![byte; 40],
            };
            assert!(
                store
                    .put_secret(&account, &name, &sealed(1), None)
                    .await
                    .unwrap()
            );
            // As if the clock had stepped back since the secret was created.
            let future = now_millis() + 3_600_000;
            sqlx::query("UPDATE secrets SET created_at = $1, updated_at = $1")
                .bind(future)
                .execute(&store.pool)
                .await
                .unwrap();
            assert!(
                !store
                    .put_secret(&account, &name, &sealed(2), None)
                    .await
                    .unwrap()
            );
            let listed = store.list_secrets(&account).await.unwrap();
            assert_eq!(
                (listed[0].created_ms, listed[0].updated_ms),
                (future, future)
            );
            let too_new = SealedSecret {
                key_version: u32::MAX,
                ..sealed(3)
            };
            assert!(matches!(
                store.put_secret(&account, &name, &too_new, None).await,
                Err(StoreError::Unavailable(_))
            ));
            store.close().await;
        })
        .await;
    }
}
