//! The budget above the sessions: all sessions together, and one account's, may reserve only so
//! much memory and so many processes; a new session beyond is refused with a clear error, and
//! the totals are also the kernel's limits on the manager's parent groups. Needs root and
//! cgroups (v1 or v2), like isolation.rs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use crate::common::{limits, manager};
use toolgate_sandbox::Limits;
use toolgate_sandbox_manager::{Budget, CgroupMode, ManagerError, SandboxManager};

const MIB: u64 = 1 << 20;

fn small() -> Limits {
    let mut limits = limits(30);
    limits.memory_bytes = 256 * MIB;
    limits.max_pids = 64;
    limits.workspace_bytes = 64 * MIB;
    limits
}

async fn budgeted(root: &std::path::Path, budget: Budget) -> SandboxManager {
    manager(root, |config| {
        config.cgroups = CgroupMode::Required;
        config.max_sessions_per_account = 10;
        config.warm_sessions = 0;
        config.budget = budget;
    })
    .await
}

async fn open(m: &SandboxManager, account: &str, id: &str) -> Result<i32, ManagerError> {
    m.exec(account, Some(id), "1", &small(), &[], None)
        .await
        .map(|call| call.pid)
}

/// `pid`'s group for `controller` (v1), or its unified group (v2).
fn group_of(pid: i32, controller: &str) -> PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let path = text
        .lines()
        .find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == controller)
                .then(|| format!("/sys/fs/cgroup/{controller}{path}"))
        })
        .or_else(|| {
            let unified = text.lines().find_map(|l| l.strip_prefix("0::"))?;
            Some(format!("/sys/fs/cgroup{unified}"))
        })
        .unwrap();
    PathBuf::from(path)
}

/// The manager's own group above `pid`'s.
fn parent_group(pid: i32, controller: &str) -> PathBuf {
    group_of(pid, controller).parent().unwrap().to_owned()
}

fn read_limit(dir: &std::path::Path, v1: &str, v2: &str) -> u64 {
    let text = std::fs::read_to_string(dir.join(v1))
        .or_else(|_| std::fs::read_to_string(dir.join(v2)))
        .unwrap();
    text.trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_beyond_the_budget_are_refused_and_room_comes_back() {
    let root = tempfile::tempdir().unwrap();
    let budget = Budget {
        memory_bytes: 400 * MIB,
        pids: 0,
        account_memory_bytes: 0,
    };
    let m = budgeted(root.path(), budget).await;
    let first = open(&m, "acct-a", "s1").await.unwrap();
    // 200 MiB in use: one more session of 256 MiB would pass the 400 MiB total
    m.exec(
        "acct-a",
        Some("s1"),
        "held = bytearray(200 << 20)",
        &small(),
        &[],
        None,
    )
    .await
    .unwrap();
    let full = open(&m, "acct-b", "s1").await;
    let Err(error @ ManagerError::AtCapacity { what: "memory" }) = &full else {
        panic!("expected the capacity error, got {full:?}");
    };
    assert!(error.to_string().contains("at capacity") && error.to_string().contains("try again"));
    // the kernel holds the same total over every session's group
    let parent = parent_group(first, "memory");
    assert_eq!(
        read_limit(&parent, "memory.limit_in_bytes", "memory.max"),
        400 * MIB,
        "{}",
        parent.display()
    );
    // memory given back is room again
    m.exec("acct-a", Some("s1"), "del held", &small(), &[], None)
        .await
        .unwrap();
    open(&m, "acct-b", "s1").await.unwrap();
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_may_reserve_only_its_share() {
    let root = tempfile::tempdir().unwrap();
    let budget = Budget {
        memory_bytes: 0,
        pids: 0,
        account_memory_bytes: 2 * 256 * MIB,
    };
    let m = budgeted(root.path(), budget).await;
    open(&m, "acct-a", "s1").await.unwrap();
    open(&m, "acct-a", "s2").await.unwrap();
    let own_share = open(&m, "acct-a", "s3").await;
    assert!(
        matches!(own_share, Err(ManagerError::AccountBudget { limit }) if limit == 512 * MIB),
        "{own_share:?}"
    );
    assert!(own_share.unwrap_err().to_string().contains("512 MiB"));
    // another account is untouched by the first one's share
    open(&m, "acct-b", "s1").await.unwrap();
    assert!(m.close_session("acct-a", "s1").await);
    open(&m, "acct-a", "s3").await.unwrap();
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_have_a_budget_too() {
    let root = tempfile::tempdir().unwrap();
    let budget = Budget {
        memory_bytes: 0,
        pids: 64 + 16,
        account_memory_bytes: 0,
    };
    let m = budgeted(root.path(), budget).await;
    let first = open(&m, "acct-a", "s1").await.unwrap();
    let threads = "import threading, time\nfor _ in range(20):\n    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()";
    m.exec("acct-a", Some("s1"), threads, &small(), &[], None)
        .await
        .unwrap();
    let full = open(&m, "acct-c", "s1").await;
    assert!(
        matches!(full, Err(ManagerError::AtCapacity { what: "processes" })),
        "{full:?}"
    );
    let parent = parent_group(first, "pids");
    assert_eq!(read_limit(&parent, "pids.max", "pids.max"), 80);
    m.shutdown().await;
}

/// Files the server writes into a session's workspace are the session's memory, not the
/// server's: before, a 7 MiB upload added nothing to the session's group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_is_charged_to_its_session() {
    let root = tempfile::tempdir().unwrap();
    let m = budgeted(root.path(), Budget::default()).await;
    let pid = open(&m, "acct-a", "s1").await.unwrap();
    let group = group_of(pid, "memory");
    let usage = || read_limit(&group, "memory.usage_in_bytes", "memory.current");
    let before = usage();
    let upload = toolgate_sandbox_manager::WorkspaceFile {
        path: "upload.bin".to_owned(),
        content: vec![7u8; 7 * MIB as usize],
    };
    m.exec("acct-a", Some("s1"), "1", &small(), &[upload], None)
        .await
        .unwrap();
    let grown = usage().saturating_sub(before);
    println!("a 7 MiB upload: the session's group +{} KiB", grown / 1024);
    assert!(
        grown >= 6 * MIB,
        "the session was charged only {} KiB",
        grown / 1024
    );
    m.shutdown().await;
}
