//! The shared storage story, run against a fresh database on the server that
//! `TOOLGATE_TEST_POSTGRES_URL` names (start one with `scripts/pg-up.sh DIR`).
//!
//! Each test creates its own database and drops it afterwards, so runs never see each other's rows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use sqlx::{Connection, PgConnection};
use toolgate_domain::{AccountId, ApiKey, Brand, Email};
use toolgate_store::{Accounts, NewAccount};
use toolgate_store_postgres::PgStore;
use toolgate_store_postgres::testkit::with_fresh_database;

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
async fn postgres_passes_the_spend_controls_story() {
    with_fresh_database(|url| async move {
        let store = PgStore::connect(&url).await.unwrap();
        toolgate_store::testkit::spend_story(Arc::new(store.clone()), "pg").await;
        store.close().await;
    })
    .await;
}

/// Named keys' story (its racing creates need a pool of several connections).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_passes_the_named_keys_story() {
    with_fresh_database(|url| async move {
        let store = PgStore::connect(&url).await.unwrap();
        toolgate_store::testkit::named_keys_story(Arc::new(store.clone()), "pg").await;
        store.close().await;
    })
    .await;
}

/// Placement's story on two pools of one database: two front ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_passes_the_placement_story() {
    with_fresh_database(|url| async move {
        let first = PgStore::connect(&url).await.unwrap();
        let second = PgStore::connect(&url).await.unwrap();
        toolgate_store::testkit::placement_story(Arc::new(first.clone()), Arc::new(second.clone()))
            .await;
        first.close().await;
        second.close().await;
    })
    .await;
}

/// Legacy MCP sessions' story on two pools of one database: two front ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_passes_the_mcp_sessions_story() {
    with_fresh_database(|url| async move {
        let first = PgStore::connect(&url).await.unwrap();
        let second = PgStore::connect(&url).await.unwrap();
        toolgate_store::testkit::mcp_sessions_story(
            Arc::new(first.clone()),
            Arc::new(second.clone()),
            "pg",
        )
        .await;
        first.close().await;
        second.close().await;
    })
    .await;
}

/// MCP tasks' story on two pools of one database: two front ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_passes_the_tasks_story() {
    with_fresh_database(|url| async move {
        let first = PgStore::connect(&url).await.unwrap();
        let second = PgStore::connect(&url).await.unwrap();
        toolgate_store::testkit::tasks_story(
            Arc::new(first.clone()),
            Arc::new(second.clone()),
            "pg",
        )
        .await;
        first.close().await;
        second.close().await;
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

/// Spend caps on two pools of one database (two front ends), 32 calls at once per step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_caps_are_exact_under_concurrent_calls() {
    with_fresh_database(|url| async move {
        let first = PgStore::connect(&url).await.unwrap();
        let second = PgStore::connect(&url).await.unwrap();
        let setup_url = url.clone();
        let setup: toolgate_store::testkit::CapsSetup =
            Arc::new(move |account, key, month, day| {
                let url = setup_url.clone();
                Box::pin(async move {
                    let mut conn = PgConnection::connect(&url).await.unwrap();
                    match key {
                    None => sqlx::query(
                        "UPDATE accounts SET cap_month_micros = $2, cap_day_micros = $3
                         WHERE id = $1",
                    )
                    .bind(account.as_str())
                    .bind(month)
                    .bind(day),
                    Some(key) => sqlx::query(
                        "INSERT INTO api_keys (id, account_id, name, key_hash, cap_month_micros,
                                               cap_day_micros, created_at)
                         VALUES ($1, $2, $1, sha256(convert_to($1, 'UTF8')), $3, $4, 0)
                         ON CONFLICT (id) DO UPDATE SET
                             cap_month_micros = excluded.cap_month_micros,
                             cap_day_micros = excluded.cap_day_micros",
                    )
                    .bind(key.as_str().to_owned())
                    .bind(account.as_str())
                    .bind(month)
                    .bind(day),
                }
                .execute(&mut conn)
                .await
                .unwrap();
                    conn.close().await.unwrap();
                })
            });
        toolgate_store::testkit::caps_story(
            Arc::new(first.clone()),
            Arc::new(second.clone()),
            setup,
            "pg",
        )
        .await;
        first.close().await;
        second.close().await;
    })
    .await;
}
