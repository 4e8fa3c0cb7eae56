#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use sqlx::{Connection, PgConnection};
use toolgate_domain::{AccountId, ApiKey, Brand, Email};
use toolgate_store::{Accounts, NewAccount};

use crate::PgStore;
use crate::testkit::with_fresh_database;

/// Waits up to 10 s for `store`'s epoch to be offered and differ from `from`.
async fn epoch_other_than(store: &PgStore, from: Option<u64>) -> u64 {
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(now) = store.key_epoch()
            && Some(now) != from
        {
            return now;
        }
        assert!(Instant::now() < deadline, "the epoch stayed {from:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn new_key() -> toolgate_domain::KeyHash {
    ApiKey::generate(&Brand::parse("svc").unwrap())
        .unwrap()
        .hash()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_by_one_front_end_moves_every_front_ends_epoch_on() {
    with_fresh_database(|url| async move {
        let rotating = PgStore::connect(&url).await.unwrap();
        let other = PgStore::connect(&url).await.unwrap();
        let account = NewAccount {
            id: AccountId::generate(),
            email: Email::parse("epoch@example.org").unwrap(),
            key_hash: new_key(),
        };
        rotating.create_account(&account).await.unwrap();
        let own = epoch_other_than(&rotating, None).await;
        let seen = epoch_other_than(&other, None).await;
        rotating.replace_key(&account.id, &new_key()).await.unwrap();
        assert_ne!(rotating.key_epoch(), Some(own), "its own rotation, at once");
        epoch_other_than(&other, Some(seen)).await;
        // a rotation of no account commits nothing, and tells nobody
        let quiet = epoch_other_than(&other, None).await;
        let missing = rotating
            .replace_key(&AccountId::generate(), &new_key())
            .await;
        assert!(matches!(missing, Err(toolgate_store::StoreError::NotFound)));
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert_eq!(other.key_epoch(), Some(quiet));
        rotating.close().await;
        other.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_listening_connection_moves_the_epoch_on_and_listens_again() {
    with_fresh_database(|url| async move {
        let store = PgStore::connect(&url).await.unwrap();
        let before = epoch_other_than(&store, None).await;
        let mut admin = PgConnection::connect(&url).await.unwrap();
        let killed: Vec<(bool,)> = sqlx::query_as(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND query ILIKE 'listen%'",
        )
        .fetch_all(&mut admin)
        .await
        .unwrap();
        assert_eq!(killed, vec![(true,)], "one listening connection");
        // whatever was missed while it was down is made up for by a new epoch
        epoch_other_than(&store, Some(before)).await;
        store.close().await;
        assert_eq!(store.key_epoch(), None, "a closed store offers none");
    })
    .await;
}
