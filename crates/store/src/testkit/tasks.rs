//! MCP tasks' part of the story, on two stores of one database (two front ends): a task created
//! through one is read, changed, ended and cancelled through the other; only its owner sees it;
//! the first end wins; the unended cap holds under concurrent creates through both; runners that
//! stop beating lose their tasks; tasks past their ttl are gone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use toolgate_domain::AccountId;

use super::new_account;
use crate::{NewTask, Store, StoreError, TaskCancel, TaskState};

const HOUR: Duration = Duration::from_secs(3600);
/// How long a runner may be silent in the lost-runner steps: long enough that the steps between
/// a beat and the sweep never take as long, even on a loaded machine.
const SILENT: Duration = Duration::from_millis(1000);

/// The tasks' seam, on two stores of one database that holds no other unended tasks (the
/// lost-runner steps sweep the whole database and count what they fail).
pub async fn tasks_story(first: Arc<dyn Store>, second: Arc<dyn Store>, tag: &str) {
    lost_runners_fail(&*first, &*second, tag).await;
    lifecycle(&*first, &*second, tag).await;
    listing_is_newest_first_in_pages(&*first, &*second, tag).await;
    the_unended_cap_holds(&*first, &*second, tag).await;
    concurrent_creates_respect_the_cap(first.clone(), second.clone(), tag).await;
    expired_tasks_are_gone(&*first, &*second, tag).await;
}

fn new_task<'a>(id: &'a str, owner: &'a AccountId, runner: &'a str) -> NewTask<'a> {
    NewTask {
        id,
        owner,
        tool: "svc_ai",
        runner,
        ttl: HOUR,
        max_unended: 100,
    }
}

async fn lost_runners_fail(first: &dyn Store, second: &dyn Store, tag: &str) {
    let owner = account(first, &format!("task-lost-{tag}@example.org")).await;
    let (quiet, busy, spare) = (
        format!("quiet-{tag}"),
        format!("busy-{tag}"),
        format!("spare-{tag}"),
    );
    let ids: Vec<String> = (0..3).map(|n| format!("{tag}-lost{n}")).collect();
    first
        .create_task(&new_task(&ids[0], &owner, &quiet))
        .await
        .unwrap();
    second
        .create_task(&new_task(&ids[1], &owner, &busy))
        .await
        .unwrap();
    first
        .create_task(&new_task(&ids[2], &owner, &spare))
        .await
        .unwrap();
    tokio::time::sleep(SILENT + Duration::from_millis(50)).await;
    assert_eq!(second.beat_tasks(&busy).await.unwrap(), 1);
    assert_eq!(
        first
            .fail_lost_tasks(SILENT, &spare, "runner lost", "{\"code\":-32603}")
            .await
            .unwrap(),
        1,
        "only the silent runner's task fails; the beating one and the spared one run on"
    );
    let lost = second.task(&ids[0], &owner).await.unwrap().unwrap();
    assert_eq!(lost.state, TaskState::Failed);
    assert_eq!(lost.status_message.as_deref(), Some("runner lost"));
    assert_eq!(lost.outcome.as_deref(), Some("{\"code\":-32603}"));
    for id in &ids[1..] {
        let running = first.task(id, &owner).await.unwrap().unwrap();
        assert_eq!(running.state, TaskState::Working, "{id} runs on");
    }
    assert!(
        !first
            .end_task(&ids[0], TaskState::Completed, None, "{}")
            .await
            .unwrap(),
        "a runner back too late does not overwrite the failure"
    );
    assert_eq!(
        first.beat_tasks(&quiet).await.unwrap(),
        0,
        "ended tasks are not beaten"
    );

    // ZERO: every unended task not of the spared runner, however recent its beat
    assert_eq!(second.beat_tasks(&spare).await.unwrap(), 1);
    assert_eq!(
        second
            .fail_lost_tasks(Duration::ZERO, &busy, "restarted", "{}")
            .await
            .unwrap(),
        1
    );
    let swept = first.task(&ids[2], &owner).await.unwrap().unwrap();
    assert_eq!(
        (swept.state, swept.status_message.as_deref()),
        (TaskState::Failed, Some("restarted"))
    );
    let spared = first.task(&ids[1], &owner).await.unwrap().unwrap();
    assert_eq!(spared.state, TaskState::Working);
    assert!(
        first
            .end_task(&ids[1], TaskState::Completed, None, "{}")
            .await
            .unwrap()
    );
    assert_eq!(second.beat_tasks(&busy).await.unwrap(), 0);
}

async fn lifecycle(first: &dyn Store, second: &dyn Store, tag: &str) {
    let alice = account(first, &format!("task-alice-{tag}@example.org")).await;
    let bob = account(first, &format!("task-bob-{tag}@example.org")).await;
    let runner = format!("runner-{tag}");
    let id = format!("{tag}-t1");

    let created = first
        .create_task(&new_task(&id, &alice, &runner))
        .await
        .unwrap();
    assert_eq!(
        (created.id.as_str(), &created.owner, created.tool.as_str()),
        (id.as_str(), &alice, "svc_ai")
    );
    assert_eq!(created.state, TaskState::Working);
    assert_eq!(
        (&created.status_message, &created.input_requests),
        (&None, &None)
    );
    assert_eq!(created.outcome, None);
    assert_eq!(created.created_ms, created.updated_ms);
    assert_eq!(
        (created.ttl_ms, created.runner.as_str()),
        (3_600_000, runner.as_str())
    );
    assert_eq!(
        second.task(&id, &alice).await.unwrap(),
        Some(created.clone()),
        "a task created through one front end is read through another"
    );
    assert_eq!(
        second.task(&id, &bob).await.unwrap(),
        None,
        "another account's task looks missing"
    );
    assert_eq!(second.task("forged", &alice).await.unwrap(), None);
    assert!(matches!(
        second.create_task(&new_task(&id, &bob, &runner)).await,
        Err(StoreError::Conflict("task id"))
    ));
    assert!(matches!(
        first
            .create_task(&new_task(
                &format!("{tag}-nobody"),
                &AccountId::generate(),
                &runner
            ))
            .await,
        Err(StoreError::NotFound)
    ));

    // input required and back
    let requests = "{\"r1\":{\"method\":\"elicitation/create\"}}";
    assert!(
        second
            .update_task(
                &id,
                TaskState::InputRequired,
                Some("need a value"),
                Some(requests)
            )
            .await
            .unwrap()
    );
    let waiting = first.task(&id, &alice).await.unwrap().unwrap();
    assert_eq!(waiting.state, TaskState::InputRequired);
    assert_eq!(waiting.status_message.as_deref(), Some("need a value"));
    assert_eq!(waiting.input_requests.as_deref(), Some(requests));
    assert!(waiting.updated_ms >= created.updated_ms);
    assert!(
        first
            .update_task(&id, TaskState::Working, None, None)
            .await
            .unwrap()
    );
    let working = second.task(&id, &alice).await.unwrap().unwrap();
    assert_eq!(working.state, TaskState::Working);
    assert_eq!(
        (working.status_message, working.input_requests),
        (None, None)
    );
    assert!(
        first
            .update_task(&id, TaskState::Completed, None, None)
            .await
            .is_err(),
        "update_task does not end a task"
    );
    assert!(
        first
            .end_task(&id, TaskState::InputRequired, None, "{}")
            .await
            .is_err(),
        "end_task ends a task"
    );
    assert_eq!(
        first.task(&id, &alice).await.unwrap().unwrap().state,
        TaskState::Working
    );

    // the first end wins; a large outcome comes back whole
    let outcome = format!("{{\"content\":\"{}\"}}", "x".repeat(3 << 20));
    second
        .update_task(&id, TaskState::InputRequired, None, Some(requests))
        .await
        .unwrap();
    assert!(
        first
            .end_task(&id, TaskState::Completed, Some("done"), &outcome)
            .await
            .unwrap()
    );
    let ended = second.task(&id, &alice).await.unwrap().unwrap();
    assert_eq!(ended.state, TaskState::Completed);
    assert_eq!(ended.status_message.as_deref(), Some("done"));
    assert_eq!(
        ended.input_requests, None,
        "an end clears the input requests"
    );
    assert!(
        ended.outcome.as_deref() == Some(outcome.as_str()),
        "the outcome is kept whole"
    );
    assert!(
        !second
            .end_task(&id, TaskState::Failed, Some("late"), "{}")
            .await
            .unwrap(),
        "a second end changes nothing"
    );
    assert!(
        !second
            .update_task(&id, TaskState::Working, Some("again"), None)
            .await
            .unwrap(),
        "an ended task does not run again"
    );
    assert_eq!(
        second.cancel_task(&id, &alice, "stop").await.unwrap(),
        TaskCancel::AlreadyEnded(ended.clone())
    );
    assert_eq!(first.task(&id, &alice).await.unwrap(), Some(ended));
    assert_eq!(
        second.cancel_task(&id, &bob, "stop").await.unwrap(),
        TaskCancel::NotFound
    );
    assert_eq!(
        second.cancel_task("forged", &alice, "stop").await.unwrap(),
        TaskCancel::NotFound
    );
    assert!(
        !first
            .end_task("forged", TaskState::Failed, None, "{}")
            .await
            .unwrap()
    );
    assert!(
        !first
            .update_task("forged", TaskState::Working, None, None)
            .await
            .unwrap()
    );

    // cancelling a running task; the runner's end then changes nothing
    let id = format!("{tag}-t2");
    first
        .create_task(&new_task(&id, &alice, &runner))
        .await
        .unwrap();
    first
        .update_task(
            &id,
            TaskState::InputRequired,
            Some("asking"),
            Some(requests),
        )
        .await
        .unwrap();
    assert_eq!(
        second.cancel_task(&id, &bob, "not yours").await.unwrap(),
        TaskCancel::NotFound
    );
    let TaskCancel::Cancelled(cancelled) = second
        .cancel_task(&id, &alice, "cancelled by the client")
        .await
        .unwrap()
    else {
        panic!("a running task is cancelled");
    };
    assert_eq!(cancelled.state, TaskState::Cancelled);
    assert_eq!(
        cancelled.status_message.as_deref(),
        Some("cancelled by the client")
    );
    assert_eq!(
        (&cancelled.outcome, &cancelled.input_requests),
        (&None, &None)
    );
    assert!(
        !first
            .end_task(&id, TaskState::Completed, None, "{}")
            .await
            .unwrap(),
        "a cancel before the finish wins"
    );
    assert_eq!(
        first.task(&id, &alice).await.unwrap(),
        Some(cancelled.clone())
    );
    assert_eq!(
        first.cancel_task(&id, &alice, "again").await.unwrap(),
        TaskCancel::AlreadyEnded(cancelled)
    );
}

async fn listing_is_newest_first_in_pages(first: &dyn Store, second: &dyn Store, tag: &str) {
    let carol = account(first, &format!("task-carol-{tag}@example.org")).await;
    let runner = format!("runner-{tag}");
    // created in descending id order, so that the order by creation is not the order by id
    let ids: Vec<String> = (0..3).rev().map(|n| format!("{tag}-l{n}")).collect();
    for (n, id) in ids.iter().enumerate() {
        let store = if n % 2 == 0 { first } else { second };
        store
            .create_task(&new_task(id, &carol, &runner))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let page = second.tasks_of(&carol, None, 2).await.unwrap();
    let listed: Vec<&str> = page.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(listed, [ids[2].as_str(), ids[1].as_str()], "newest first");
    let last = page.last().unwrap();
    let rest = first
        .tasks_of(&carol, Some((last.created_ms, &last.id)), 2)
        .await
        .unwrap();
    let listed: Vec<&str> = rest.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        listed,
        [ids[0].as_str()],
        "the page after the last one seen"
    );
    assert!(
        first
            .tasks_of(&carol, Some((rest[0].created_ms, &rest[0].id)), 2)
            .await
            .unwrap()
            .is_empty()
    );
    let whole = first.tasks_of(&carol, None, 10).await.unwrap();
    assert_eq!(whole.len(), 3);
    assert_eq!(whole[0], page[0], "the listing holds the whole records");
    let stranger = AccountId::generate();
    assert!(
        second
            .tasks_of(&stranger, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    for id in &ids {
        first
            .end_task(id, TaskState::Completed, None, "{}")
            .await
            .unwrap();
    }
}

async fn the_unended_cap_holds(first: &dyn Store, second: &dyn Store, tag: &str) {
    let dave = account(first, &format!("task-dave-{tag}@example.org")).await;
    let erin = account(first, &format!("task-erin-{tag}@example.org")).await;
    let runner = format!("runner-{tag}");
    let ids: Vec<String> = (0..4).map(|n| format!("{tag}-c{n}")).collect();
    let capped = |id| NewTask {
        max_unended: 2,
        ..new_task(id, &dave, &runner)
    };
    first.create_task(&capped(&ids[0])).await.unwrap();
    second.create_task(&capped(&ids[1])).await.unwrap();
    assert!(
        matches!(
            first.create_task(&capped(&ids[2])).await,
            Err(StoreError::Conflict("too many tasks"))
        ),
        "the cap counts the creates of both front ends"
    );
    assert_eq!(first.task(&ids[2], &dave).await.unwrap(), None);
    let erins = format!("{tag}-ce");
    second
        .create_task(&NewTask {
            max_unended: 2,
            ..new_task(&erins, &erin, &runner)
        })
        .await
        .unwrap();
    assert!(
        first
            .end_task(&ids[0], TaskState::Completed, None, "{}")
            .await
            .unwrap()
    );
    second.create_task(&capped(&ids[2])).await.unwrap();
    assert!(matches!(
        second.create_task(&capped(&ids[3])).await,
        Err(StoreError::Conflict("too many tasks"))
    ));
    second.cancel_task(&ids[1], &dave, "stop").await.unwrap();
    first.create_task(&capped(&ids[3])).await.unwrap();
    for (id, owner) in [(&ids[2], &dave), (&ids[3], &dave), (&erins, &erin)] {
        second.cancel_task(id, owner, "stop").await.unwrap();
    }
}

async fn concurrent_creates_respect_the_cap(
    first: Arc<dyn Store>,
    second: Arc<dyn Store>,
    tag: &str,
) {
    for round in 0..3 {
        let frank = account(&*first, &format!("task-frank{round}-{tag}@example.org")).await;
        let creates = (0..8).map(|n| {
            let store = if n % 2 == 0 {
                first.clone()
            } else {
                second.clone()
            };
            let (owner, id, runner) = (
                frank.clone(),
                format!("{tag}-race{round}-{n}"),
                format!("runner-{tag}"),
            );
            tokio::spawn(async move {
                let task = NewTask {
                    max_unended: 3,
                    ..new_task(&id, &owner, &runner)
                };
                store.create_task(&task).await
            })
        });
        let outcomes = futures::future::join_all(creates).await;
        let mut created = 0;
        for outcome in outcomes {
            match outcome.unwrap() {
                Ok(_) => created += 1,
                Err(StoreError::Conflict("too many tasks")) => {}
                Err(other) => panic!("a create failed otherwise: {other:?}"),
            }
        }
        assert_eq!(
            created, 3,
            "exactly the cap's worth of concurrent creates succeed"
        );
        assert_eq!(first.tasks_of(&frank, None, 10).await.unwrap().len(), 3);
    }
}

async fn expired_tasks_are_gone(first: &dyn Store, second: &dyn Store, tag: &str) {
    let grace = account(first, &format!("task-grace-{tag}@example.org")).await;
    let runner = format!("runner-{tag}");
    let (brief, kept) = (format!("{tag}-x0"), format!("{tag}-x1"));
    first
        .create_task(&NewTask {
            ttl: Duration::from_millis(1),
            ..new_task(&brief, &grace, &runner)
        })
        .await
        .unwrap();
    first
        .create_task(&new_task(&kept, &grace, &runner))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        second.task(&brief, &grace).await.unwrap(),
        None,
        "a task past its ttl is gone"
    );
    let listed = second.tasks_of(&grace, None, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, kept);
    assert_eq!(
        second.cancel_task(&brief, &grace, "stop").await.unwrap(),
        TaskCancel::NotFound
    );
    assert!(second.purge_tasks().await.unwrap() >= 1);
    first
        .create_task(&new_task(&brief, &grace, &runner))
        .await
        .expect("purging deleted the expired row, so its id is free");
    assert!(
        first.task(&kept, &grace).await.unwrap().is_some(),
        "a live task is kept"
    );
}

async fn account(store: &dyn Store, email: &str) -> AccountId {
    let (account, _) = new_account(email);
    store.create_account(&account).await.unwrap().id
}
