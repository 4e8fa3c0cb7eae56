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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_passes_the_named_keys_story() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("toolgate.db"), Durability::Full)
        .await
        .unwrap();
    toolgate_store::testkit::named_keys_story(Arc::new(store), "sqlite").await;
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

/// Should another process admit calls on the file anyway (bypassing `serve`'s claim), a call
/// started on a prediction the database then refuses is reported as not recorded, and the
/// mirror stops predicting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_prediction_is_reported_and_switches_the_mirror_off() {
    use toolgate_domain::{AccountId, Admission, ApiKey, Brand, Email, Micros, MonthKey};
    use toolgate_store::{Accounts, CallCharge, Metering, NewAccount};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.db");
    let serving = SqliteStore::open(&path, Durability::Normal).await.unwrap();
    serving.serve_exclusively().unwrap();
    let intruder = SqliteStore::open(&path, Durability::Normal).await.unwrap();
    let account = NewAccount {
        id: AccountId::generate(),
        email: Email::parse("twice@example.org").unwrap(),
        key_hash: ApiKey::generate(&Brand::parse("svc").unwrap())
            .unwrap()
            .hash(),
    };
    serving.create_account(&account).await.unwrap();
    let month = MonthKey::now();
    let charge = CallCharge {
        account: &account.id,
        month: &month,
        tool: "svc_write",
        free_monthly_calls: 2,
        paid_call_cost: Micros(8_000),
        key: None,
        capped: false,
    };
    assert_eq!(
        serving.admit_call(&charge).await.unwrap(),
        Admission::Free { free_used: 1 }
    );
    assert_eq!(
        intruder.admit_call(&charge).await.unwrap(),
        Admission::Free { free_used: 2 }
    );
    let predicted = serving.decide_call(&charge).await.unwrap();
    assert_eq!(predicted.admission, Admission::Free { free_used: 2 });
    let recorded = predicted.recorded.wait().await;
    assert!(recorded.is_err(), "the database refused it: {recorded:?}");
    let next = serving.decide_call(&charge).await.unwrap();
    assert_eq!(next.admission, Admission::Refused, "no prediction any more");
    assert_eq!(
        serving.ledger_counts(&account.id, &month).await.unwrap(),
        (2, 0)
    );
}

/// Admissions (their own thread and connection) and wallet credits (the pool's writer) write
/// the same rows at once: neither may fail with "database is locked", and the books add up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credits_and_admissions_at_once_both_succeed() {
    use toolgate_domain::{AccountId, ApiKey, Brand, Email, Micros, MonthKey};
    use toolgate_store::{Accounts, CallCharge, Metering, NewAccount};

    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("toolgate.db"), Durability::Normal)
        .await
        .unwrap();
    store.serve_exclusively().unwrap();
    let account = NewAccount {
        id: AccountId::generate(),
        email: Email::parse("both@example.org").unwrap(),
        key_hash: ApiKey::generate(&Brand::parse("svc").unwrap())
            .unwrap()
            .hash(),
    };
    store.create_account(&account).await.unwrap();
    store
        .credit_wallet(&account.id, Micros(800_000), "start")
        .await
        .unwrap();
    let month = MonthKey::now();
    let calls = (0..300).map(|_| {
        let (store, id, month) = (store.clone(), account.id.clone(), month.clone());
        tokio::spawn(async move {
            let charge = CallCharge {
                account: &id,
                month: &month,
                tool: "svc_write",
                free_monthly_calls: 0,
                paid_call_cost: Micros(8_000),
                key: None,
                capped: false,
            };
            store.admit_call(&charge).await.unwrap().admitted()
        })
    });
    let credits = (0..50).map(|n| {
        let (store, id) = (store.clone(), account.id.clone());
        tokio::spawn(async move {
            store
                .credit_wallet(&id, Micros(8_000), &format!("credit-{n}"))
                .await
                .unwrap()
        })
    });
    let (calls, credits) = futures::future::join(
        futures::future::join_all(calls),
        futures::future::join_all(credits),
    )
    .await;
    let admitted = calls.into_iter().filter(|c| *c.as_ref().unwrap()).count();
    assert!(
        credits.iter().all(|c| c.as_ref().unwrap().1),
        "every credit applied"
    );
    let usage = store.usage(&account.id, &month).await.unwrap();
    // 1,200,000 credited in all; every admitted call took 8,000 of it
    assert_eq!(
        usage.wallet.0,
        1_200_000 - 8_000 * i64::try_from(admitted).unwrap()
    );
    assert!(
        admitted >= 100,
        "the first 800,000 paid for 100 calls: {admitted}"
    );
    assert_eq!(
        store.ledger_counts(&account.id, &month).await.unwrap(),
        (0, i64::try_from(admitted).unwrap())
    );
}

/// Placement's story on two stores of one file, as two processes of one host would open it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_passes_the_placement_story() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.db");
    let first = SqliteStore::open(&path, Durability::Full).await.unwrap();
    let second = SqliteStore::open(&path, Durability::Full).await.unwrap();
    toolgate_store::testkit::placement_story(Arc::new(first), Arc::new(second)).await;
}

/// Legacy MCP sessions' story on two stores of one file, as two processes of one host would open it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_passes_the_mcp_sessions_story() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.db");
    let first = SqliteStore::open(&path, Durability::Full).await.unwrap();
    let second = SqliteStore::open(&path, Durability::Full).await.unwrap();
    toolgate_store::testkit::mcp_sessions_story(Arc::new(first), Arc::new(second), "sqlite").await;
}

/// MCP tasks' story on two stores of one file, as two processes of one host would open it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_passes_the_tasks_story() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.db");
    let first = SqliteStore::open(&path, Durability::Full).await.unwrap();
    let second = SqliteStore::open(&path, Durability::Full).await.unwrap();
    toolgate_store::testkit::tasks_story(Arc::new(first), Arc::new(second), "sqlite").await;
}

/// Writes caps straight into the file, as the dashboard's stores would.
fn sqlite_caps_setup(path: std::path::PathBuf) -> toolgate_store::testkit::CapsSetup {
    Arc::new(move |account, key, month, day| {
        let path = path.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let conn = rusqlite::Connection::open(&path).unwrap();
                conn.busy_timeout(std::time::Duration::from_secs(10))
                    .unwrap();
                match key {
                    None => conn.execute(
                        "UPDATE accounts SET cap_month_micros = ?2, cap_day_micros = ?3
                         WHERE id = ?1",
                        rusqlite::params![account.as_str(), month, day],
                    ),
                    Some(key) => conn.execute(
                        "INSERT INTO api_keys (id, account_id, name, key_hash, cap_month_micros,
                                               cap_day_micros, created_at)
                         VALUES (?1, ?2, ?1, randomblob(32), ?3, ?4, 0)
                         ON CONFLICT (id) DO UPDATE SET
                             cap_month_micros = excluded.cap_month_micros,
                             cap_day_micros = excluded.cap_day_micros",
                        rusqlite::params![key.as_str(), account.as_str(), month, day],
                    ),
                }
                .unwrap();
            })
            .await
            .unwrap();
        })
    })
}

/// Spend caps on two handles of one file (two processes' admissions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_caps_are_exact_under_concurrent_calls() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.db");
    let first = SqliteStore::open(&path, Durability::Normal).await.unwrap();
    let second = SqliteStore::open(&path, Durability::Normal).await.unwrap();
    let setup = sqlite_caps_setup(path);
    toolgate_store::testkit::caps_story(Arc::new(first), Arc::new(second), setup, "sqlite").await;
}

/// Spend caps with the admission mirror of a serving process on, which must not predict them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_caps_are_exact_while_serving() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.db");
    let store = SqliteStore::open(&path, Durability::Normal).await.unwrap();
    store.serve_exclusively().unwrap();
    let store: Arc<dyn toolgate_store::Store> = Arc::new(store);
    let setup = sqlite_caps_setup(path);
    toolgate_store::testkit::caps_story(store.clone(), store, setup, "sqlite-serving").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_passes_the_spend_controls_story() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("toolgate.db"), Durability::Full)
        .await
        .unwrap();
    store.serve_exclusively().unwrap();
    toolgate_store::testkit::spend_story(Arc::new(store), "sqlite").await;
}
