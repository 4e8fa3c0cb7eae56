//! The task runner over a real SQLite file: a task's end written once (a cancel wins over a
//! late finish), progress kept as its status message, waiting for an end, input handed to a task
//! that asks for it, and a process that finds tasks an earlier run left running failing them at
//! once when it is the only one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use toolgate_domain::{AccountId, ApiKey, Brand, Email};
use toolgate_store::{Accounts, NewAccount, Store};
use toolgate_store_sqlite::{Durability, SqliteStore};

use super::*;

async fn store(dir: &tempfile::TempDir) -> (Arc<dyn Store>, AccountId) {
    let store = SqliteStore::open(&dir.path().join("t.db"), Durability::Normal)
        .await
        .unwrap();
    let id = AccountId::generate();
    let key = ApiKey::generate(&Brand::parse("svc").unwrap()).unwrap();
    store
        .create_account(&NewAccount {
            id: id.clone(),
            email: Email::parse("t@example.org").unwrap(),
            key_hash: key.hash(),
        })
        .await
        .unwrap();
    (Arc::new(store), id)
}

fn done(text: &str) -> TaskEnd {
    TaskEnd {
        state: TaskState::Completed,
        message: None,
        outcome: format!(r#"{{"content":[{{"type":"text","text":"{text}"}}]}}"#),
    }
}

#[tokio::test]
async fn a_task_ends_once_and_a_cancel_wins_over_its_late_end() {
    let dir = tempfile::tempdir().unwrap();
    let (store, owner) = store(&dir).await;
    let tasks = Tasks::new(store, TaskSettings::default());
    let task = tasks
        .create(&owner, "svc_write", Duration::from_secs(60))
        .await
        .unwrap();
    let progress = Arc::new(LatestProgress::default());
    let (sink, cancel) = (progress.clone(), CancellationToken::new());
    let stopped = cancel.clone();
    tasks.run(&task, cancel, Some(progress), None, async move {
        sink.report(0.5, "half way");
        // ends only when told to, and then claims to have completed
        stopped.cancelled().await;
        done("too late")
    });
    let mut seen = tasks.get(&owner, &task.id).await.unwrap().unwrap();
    for _ in 0..50 {
        if seen.status_message.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen = tasks.get(&owner, &task.id).await.unwrap().unwrap();
    }
    assert_eq!(seen.status_message.as_deref(), Some("half way"));
    assert_eq!(seen.state, TaskState::Working);
    assert!(matches!(
        tasks.cancel(&owner, &task.id).await.unwrap(),
        TaskCancel::Cancelled(_)
    ));
    let ended = tasks
        .wait_ended(&owner, &task.id, Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        ended.state,
        TaskState::Cancelled,
        "the work's late end must not overwrite the cancel"
    );
    assert_eq!(ended.outcome, None);
    assert!(matches!(
        tasks.cancel(&owner, &task.id).await.unwrap(),
        TaskCancel::AlreadyEnded(_)
    ));
    let stranger = AccountId::generate();
    assert!(tasks.get(&stranger, &task.id).await.unwrap().is_none());
    assert!(matches!(
        tasks.cancel(&stranger, &task.id).await.unwrap(),
        TaskCancel::NotFound
    ));
}

#[tokio::test]
async fn input_reaches_a_task_that_asks_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let (store, owner) = store(&dir).await;
    let tasks = Tasks::new(store, TaskSettings::default());
    let asking = tasks
        .create(&owner, "svc_write", Duration::from_secs(60))
        .await
        .unwrap();
    let (sender, mut inputs) = mpsc::channel::<InputDelivery>(1);
    tasks.run(
        &asking,
        CancellationToken::new(),
        None,
        Some(sender),
        async move {
            let delivery = inputs.recv().await.unwrap();
            let answer = delivery.responses["name"].as_str().unwrap().to_owned();
            let _ = delivery.taken.send(());
            done(&answer)
        },
    );
    let mut responses = serde_json::Map::new();
    responses.insert("name".to_owned(), serde_json::json!("Ada"));
    assert!(
        tasks
            .deliver_input(&owner, &asking.id, responses.clone())
            .await
            .unwrap()
    );
    let ended = tasks
        .wait_ended(&owner, &asking.id, Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ended.state, TaskState::Completed);
    assert!(ended.outcome.unwrap().contains("Ada"));
    // a task that asks for nothing, and one of another account, take nothing
    let quiet = tasks
        .create(&owner, "svc_write", Duration::from_secs(60))
        .await
        .unwrap();
    tasks.run(&quiet, CancellationToken::new(), None, None, async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        done("slept")
    });
    assert!(
        !tasks
            .deliver_input(&owner, &quiet.id, responses.clone())
            .await
            .unwrap()
    );
    assert!(
        !tasks
            .deliver_input(&AccountId::generate(), &quiet.id, responses)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn the_only_process_fails_at_start_what_an_earlier_run_left_running() {
    let dir = tempfile::tempdir().unwrap();
    let (store, owner) = store(&dir).await;
    let earlier = Tasks::new(store.clone(), TaskSettings::default());
    let left = earlier
        .create(&owner, "svc_write", Duration::from_secs(60))
        .await
        .unwrap();
    // a second process on the same file, as after a restart; the earlier one never ran it
    let now = Tasks::new(store, TaskSettings::default());
    let stop = CancellationToken::new();
    now.start_upkeep(stop.clone());
    let ended = now
        .wait_ended(&owner, &left.id, Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    stop.cancel();
    assert_eq!(ended.state, TaskState::Failed);
    assert_eq!(ended.outcome.as_deref(), Some(LOST_OUTCOME));
    assert!(ended.status_message.unwrap().contains("stopped"));
}
