//! The shared storage story, run against a fresh SQLite file.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use toolgate_store_sqlite::{Durability, SqliteStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_passes_the_storage_story() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("nested/toolgate.db"), Durability::Full)
        .await
        .unwrap();
    toolgate_store::testkit::run_story(Arc::new(store), "sqlite").await;
}

#[tokio::test]
async fn reopening_keeps_data_and_migrations_are_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.db");
    let email = toolgate_domain::Email::parse("reopen@example.org").unwrap();
    {
        let store = SqliteStore::open(&path, Durability::Normal).await.unwrap();
        let key = toolgate_domain::ApiKey::generate(&toolgate_domain::Brand::parse("svc").unwrap())
            .unwrap();
        let account = toolgate_store::NewAccount {
            id: toolgate_domain::AccountId::generate(),
            email: email.clone(),
            key_hash: key.hash(),
        };
        toolgate_store::Accounts::create_account(&store, &account)
            .await
            .unwrap();
    }
    let store = SqliteStore::open(&path, Durability::Normal).await.unwrap();
    assert!(
        toolgate_store::Accounts::find_by_email(&store, &email)
            .await
            .unwrap()
            .is_some()
    );
}

/// The same story with the admission mirror of a serving process on: every answer must be the
/// one the database gives without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_passes_the_storage_story_while_serving() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("toolgate.db"), Durability::Full)
        .await
        .unwrap();
    store.serve_exclusively().unwrap();
    toolgate_store::testkit::run_story(Arc::new(store), "sqlite-serving").await;
}

#[tokio::test]
async fn a_second_server_on_the_same_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.db");
    let first = SqliteStore::open(&path, Durability::Normal).await.unwrap();
    first.serve_exclusively().unwrap();
    let second = SqliteStore::open(&path, Durability::Normal).await.unwrap();
    let refused = second.serve_exclusively().unwrap_err();
    assert!(
        refused.to_string().contains("another toolgate serve"),
        "{refused}"
    );
    drop(first);
    second
        .serve_exclusively()
        .expect("the claim ends with the first server");
}
