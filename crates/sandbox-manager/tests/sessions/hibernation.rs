//! Sessions that outlive their process: hibernation when idle, restore on the next call (in this
//! manager or a new one), checkpoints at shutdown, closing deletes them.

use std::sync::Arc;
use std::time::Duration;

use toolgate_sandbox::{CheckpointKey, CheckpointStore};
use toolgate_sandbox_manager::{Keeping, SandboxManager};

use crate::common::{self, eventually, limits, text};

mod store;
use store::test_store;

async fn kept_manager(
    root: &std::path::Path,
    store: Arc<dyn CheckpointStore>,
    hibernate_after: Duration,
) -> SandboxManager {
    common::manager(root, |config| {
        let mut keeping = Keeping::new(store);
        keeping.hibernate_after = hibernate_after;
        keeping.shutdown_grace = Duration::from_secs(2);
        config.keeping = Some(keeping);
        config.warm_sessions = 0;
    })
    .await
}

/// Waits until `id` of `account` is listed as hibernated: its checkpoint written and its entry
/// gone (its processes end a moment before its entry leaves the table).
async fn hibernated(m: &SandboxManager, account: &str, id: &str) {
    let start = std::time::Instant::now();
    loop {
        let listed = m.sessions_of(account).await;
        if listed
            .iter()
            .any(|s| s.id == id && s.state == toolgate_sandbox::SessionState::Hibernated)
        {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{id} did not hibernate: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn key(account: &str, id: &str) -> CheckpointKey {
    CheckpointKey {
        account: account.to_owned(),
        session_id: id.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_hibernates_and_comes_back_with_its_state_and_files() {
    let root = tempfile::tempdir().unwrap();
    let (store, _dir) = test_store().await;
    let m = kept_manager(root.path(), Arc::clone(&store), Duration::from_millis(300)).await;
    let first = m
        .exec(
            "acct",
            Some("s1"),
            "import os\nx = 41\nopen('notes.txt', 'w').write('kept')\nos.chmod('notes.txt', 0o640)\ndef f():\n    return x + 1\nf()",
            &limits(30),
            &[],
            None,
        )
        .await
        .unwrap();
    assert_eq!(text(&first), "42");
    assert!(first.restored.is_none());
    let pid = first.pid;
    // within about a second of its time: its process ends, its checkpoint is there
    eventually("the session hibernates", || common::process_gone(pid)).await;
    hibernated(&m, "acct", "s1").await;
    assert_eq!(m.live_sessions("acct"), 0);
    let listed = m.sessions_of("acct").await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state, toolgate_sandbox::SessionState::Hibernated);
    assert!(listed[0].checkpoint.is_some());

    let back = m
        .exec(
            "acct",
            Some("s1"),
            "import os\n(x, f(), open('notes.txt').read(), oct(os.stat('notes.txt').st_mode & 0o777))",
            &limits(30),
            &[],
            None,
        )
        .await
        .unwrap();
    let restored = back.restored.as_ref().expect("restored");
    assert!(!back.fresh);
    assert_eq!(text(&back), "(41, 42, 'kept', '0o640')", "{restored:?}");
    assert!(restored.not_restored.is_empty(), "{restored:?}");
    // the state file is not left in the workspace
    let files = m
        .exec(
            "acct",
            Some("s1"),
            "sorted(os.listdir('.'))",
            &limits(30),
            &[],
            None,
        )
        .await
        .unwrap();
    assert_eq!(text(&files), "['notes.txt']");
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_kept_is_named() {
    let root = tempfile::tempdir().unwrap();
    let (store, _dir) = test_store().await;
    let m = kept_manager(root.path(), Arc::clone(&store), Duration::from_millis(300)).await;
    let first = m
        .exec(
            "acct",
            Some("g"),
            "import threading\ngen = (i for i in range(3))\nlock = threading.Lock()\nkeep = [1, 2]",
            &limits(30),
            &[],
            None,
        )
        .await
        .unwrap();
    eventually("the session hibernates", || common::process_gone(first.pid)).await;
    let back = m
        .exec("acct", Some("g"), "keep", &limits(30), &[], None)
        .await
        .unwrap();
    assert_eq!(text(&back), "[1, 2]");
    let mut names: Vec<&str> = back
        .restored
        .as_ref()
        .unwrap()
        .not_restored
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["gen", "lock"]);
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_loses_nothing_and_another_account_sees_nothing() {
    let root = tempfile::tempdir().unwrap();
    let (store, _dir) = test_store().await;
    let m = kept_manager(root.path(), Arc::clone(&store), Duration::from_secs(3600)).await;
    m.exec(
        "acct",
        Some("s"),
        "y = 'before the restart'",
        &limits(30),
        &[],
        None,
    )
    .await
    .unwrap();
    m.shutdown().await;
    drop(m);
    assert!(store.list("acct").await.unwrap().len() == 1);

    let root = tempfile::tempdir().unwrap();
    let m = kept_manager(root.path(), Arc::clone(&store), Duration::from_secs(3600)).await;
    // another account's same id is another session
    let other = m
        .exec("other", Some("s"), "'y' in dir()", &limits(30), &[], None)
        .await
        .unwrap();
    assert_eq!(text(&other), "False");
    assert!(other.restored.is_none());
    let back = m
        .exec("acct", Some("s"), "y", &limits(30), &[], None)
        .await
        .unwrap();
    assert_eq!(text(&back), "'before the restart'");
    assert!(back.restored.is_some());
    // closing deletes the checkpoint: the next call starts fresh
    assert!(m.close_session("acct", "s").await);
    assert!(store.load(&key("acct", "s")).await.unwrap().is_none());
    let fresh = m
        .exec("acct", Some("s"), "'y' in dir()", &limits(30), &[], None)
        .await
        .unwrap();
    assert_eq!(text(&fresh), "False");
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_quota_the_oldest_hibernated_session_is_dropped_and_said_so() {
    let root = tempfile::tempdir().unwrap();
    let (store, _dir) = test_store().await;
    let m = common::manager(root.path(), |config| {
        let mut keeping = Keeping::new(Arc::clone(&store));
        keeping.hibernate_after = Duration::from_millis(300);
        // room for about one image of 200 KiB of random bytes (which do not compress)
        keeping.account_quota_bytes = 300 << 10;
        config.keeping = Some(keeping);
        config.warm_sessions = 0;
    })
    .await;
    let fill = "import os\nopen('blob', 'wb').write(os.urandom(200 << 10))\n1";
    for id in ["old", "new"] {
        m.exec("acct", Some(id), fill, &limits(30), &[], None)
            .await
            .unwrap();
        hibernated(&m, "acct", id).await;
    }
    let listed = m.sessions_of("acct").await;
    let state = |id: &str| listed.iter().find(|s| s.id == id).map(|s| s.state);
    assert_eq!(
        state("old"),
        Some(toolgate_sandbox::SessionState::Dropped),
        "{listed:?}"
    );
    assert_eq!(
        state("new"),
        Some(toolgate_sandbox::SessionState::Hibernated),
        "{listed:?}"
    );
    let again = m
        .exec(
            "acct",
            Some("old"),
            "'blob' in __import__('os').listdir('.')",
            &limits(30),
            &[],
            None,
        )
        .await
        .unwrap();
    assert_eq!(text(&again), "False");
    assert!(
        again.lost_checkpoint.as_deref().unwrap().contains("quota"),
        "{:?}",
        again.lost_checkpoint
    );
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_past_their_retention_are_deleted() {
    let root = tempfile::tempdir().unwrap();
    let (store, _dir) = test_store().await;
    let m = kept_manager(root.path(), Arc::clone(&store), Duration::from_secs(3600)).await;
    m.exec("acct", Some("r"), "z = 1", &limits(30), &[], None)
        .await
        .unwrap();
    m.shutdown().await;
    drop(m);
    assert_eq!(store.list("acct").await.unwrap().len(), 1);
    // a manager keeping checkpoints for a moment only deletes it at its first sweep
    let root = tempfile::tempdir().unwrap();
    let m = common::manager(root.path(), |config| {
        let mut keeping = Keeping::new(Arc::clone(&store));
        keeping.retention = Duration::from_millis(1);
        config.keeping = Some(keeping);
        config.warm_sessions = 0;
    })
    .await;
    let start = std::time::Instant::now();
    while !store.list("acct").await.unwrap().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(10), "not deleted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_of_a_hibernated_session_can_be_read() {
    let root = tempfile::tempdir().unwrap();
    let (store, _dir) = test_store().await;
    let m = kept_manager(root.path(), Arc::clone(&store), Duration::from_millis(300)).await;
    let run = m
        .exec(
            "acct",
            Some("f"),
            "open('out.csv', 'w').write('a,b\\n1,2\\n')",
            &limits(30),
            &[],
            None,
        )
        .await
        .unwrap();
    eventually("the session hibernates", || common::process_gone(run.pid)).await;
    let start = std::time::Instant::now();
    while m
        .sessions_of("acct")
        .await
        .iter()
        .all(|s| s.state != toolgate_sandbox::SessionState::Hibernated)
    {
        assert!(start.elapsed() < Duration::from_secs(10), "not hibernated");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let read = m.read_file("acct", "f", "out.csv", 1 << 20).await.unwrap();
    assert_eq!(read.bytes, b"a,b\n1,2\n");
    // never a session that had none
    assert!(
        m.read_file("acct", "nope", "out.csv", 1 << 20)
            .await
            .is_err()
    );
    m.shutdown().await;
}
