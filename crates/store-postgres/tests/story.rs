//! The shared storage story, run against a fresh database on the server that
//! `TOOLGATE_TEST_POSTGRES_URL` names (start one with `scripts/pg-up.sh DIR`).
//!
//! Each test creates its own database and drops it afterwards, so runs never see each other's rows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::sync::Arc;

use sqlx::{AssertSqlSafe, Connection, PgConnection};
use toolgate_domain::{AccountId, ApiKey, Brand, Email};
use toolgate_store::{Accounts, NewAccount};
use toolgate_store_postgres::PgStore;

const URL_VAR: &str = "TOOLGATE_TEST_POSTGRES_URL";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_passes_the_storage_story() {
    with_fresh_database(|url| async move {
        let store = PgStore::connect(&url).await.unwrap();
        toolgate_store::testkit::run_story(Arc::new(store.clone()), "pg").await;
        store.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnecting_keeps_data_and_migrations_are_idempotent() {
    with_fresh_database(|url| async move {
        let email = Email::parse("reconnect@example.org").unwrap();
        let key = ApiKey::generate(&Brand::parse("svc").unwrap()).unwrap();
        let account = NewAccount {
            id: AccountId::generate(),
            email: email.clone(),
            key_hash: key.hash(),
        };
        let first = PgStore::connect(&url).await.unwrap();
        first.create_account(&account).await.unwrap();
        first.close().await;

        for _ in 0..2 {
            let again = PgStore::connect(&url).await.unwrap();
            let found = again
                .find_by_email(&email)
                .await
                .unwrap()
                .expect("the account survives reconnecting");
            assert_eq!(found.id, account.id);
            again.close().await;
        }
        let mut conn = PgConnection::connect(&url).await.unwrap();
        let (applied, distinct): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), COUNT(DISTINCT version) FROM _sqlx_migrations WHERE success",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap();
        assert_eq!(applied, distinct, "each migration is applied once");
        assert_eq!(applied, migration_files(), "every migration is applied");
        conn.close().await.unwrap();
    })
    .await;
}

/// Runs `test` against the URL of a database created for it, then drops the database even
/// when the test panicked, and only then reports the panic.
async fn with_fresh_database<F, Fut>(test: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let server_url = std::env::var(URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{URL_VAR} is not set: these tests need a PostgreSQL server. Start one with \
             `scripts/pg-up.sh /tmp/pg-helper` and export the URL it prints as {URL_VAR}."
        )
    });
    let name = format!("toolgate_test_{}", uuid::Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(&server_url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the server named by {URL_VAR}: {e}"));
    // The name is generated above from hex digits only, so it is safe to splice into DDL.
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .unwrap();

    let outcome = tokio::spawn(test(with_database(&server_url, &name))).await;

    // FORCE ends connections a panicking test left open.
    sqlx::query(AssertSqlSafe(format!("DROP DATABASE {name} WITH (FORCE)")))
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
    if let Err(failure) = outcome {
        std::panic::resume_unwind(failure.into_panic());
    }
}

/// Migrations shipped in the crate, counted so the check keeps up when one is added.
fn migration_files() -> i64 {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations");
    let files = std::fs::read_dir(dir).unwrap();
    let sql = files.filter(|f| {
        f.as_ref()
            .unwrap()
            .path()
            .extension()
            .is_some_and(|e| e == "sql")
    });
    i64::try_from(sql.count()).unwrap()
}

/// `url` with its database path replaced by `database`, keeping credentials and parameters.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let mut out = format!("{}/{database}", &base[..path_start]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}
