//! Warm sessions (`ManagerConfig::warm_sessions`): sessions started ahead of time, fully
//! confined, that new sessions take. A session that took one must be confined and private
//! exactly like one started for it; one is never handed to two sessions; those of a dead zygote
//! are replaced from the new one; and shutdown leaves nothing of them behind.
//!
//! These run the production confinement (the hardening library, see hardened.rs for where it is
//! found) with cgroups required: root, and a cgroup hierarchy with memory and pids.

// Test code: a panic is how a helper reports failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{
    eventually, exec_ok as exec, harden_lib, limits, manager, outside_tmp, process_gone, text,
    tmp_skeleton,
};

use toolgate_sandbox_manager::{CgroupMode, ManagerConfig, RunOutcome, SandboxManager};

async fn warm_manager(root: &Path, tweak: impl FnOnce(&mut ManagerConfig)) -> SandboxManager {
    let lib = harden_lib();
    manager(root, |config| {
        config.zygote.harden_lib = Some(lib);
        config.cgroups = CgroupMode::Required;
        // a pool of fixed size unless a test says otherwise (the tests below count it)
        config.warm_sessions_max = 0;
        tweak(config);
    })
    .await
}

/// A `json.dumps(...)` result.
fn json(call: &RunOutcome) -> serde_json::Value {
    serde_json::from_str(text(call).trim_matches('\'')).unwrap()
}

/// The process's host uid (the real one, from `/proc/<pid>/status`).
fn host_uid(pid: i32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap()
}

/// The process's parent, as the host sees it.
fn host_parent(pid: i32) -> Option<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("PPid:"))
        .and_then(|ppid| ppid.trim().parse().ok())
}

/// The process's cgroup directories (v1: one per hierarchy; v2: the unified one), those of this
/// crate's managers only.
fn cgroup_dirs(pid: i32) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            if !path.contains("/toolgate/") {
                return None;
            }
            let mount = match controllers {
                "" => "/sys/fs/cgroup".to_owned(),
                list => format!("/sys/fs/cgroup/{}", list.split(',').next()?),
            };
            Some(PathBuf::from(format!("{mount}{path}")))
        })
        .collect()
}

/// Mount points at or beneath `dir`, as this process sees them.
fn mounts_beneath(dir: &Path) -> Vec<String> {
    let dir = dir.canonicalize().unwrap();
    let dir = dir.to_str().unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| point.starts_with(dir))
        .map(str::to_owned)
        .collect()
}

async fn pool_full(m: &SandboxManager, size: usize) {
    eventually("the pool is full again", || m.warm_pids().len() == size).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_from_the_pool_is_confined_and_private_like_a_started_one() {
    let root = outside_tmp();
    let m = warm_manager(root.path(), |_| {}).await;
    let warm = m.warm_pids();
    assert_eq!(warm.len(), 2, "start returns with the pool full");

    let probe = "import os, json\njson.dumps([os.getpid(), os.getuid(), os.listdir('.'), \
                 sorted(os.listdir('/tmp')), os.getcwd(), os.environ['HOME'], \
                 sorted(p for p in os.listdir('/proc') if p.isdigit())])";
    let first = exec(&m, "acct-a", "s1", probe).await;
    assert!(warm.contains(&first.pid), "it took a warm session");
    assert!(first.fresh);
    assert_eq!(first.outcome.execution_count, 1);
    // not `.warm/<manager>-<n>`: the session's own root shows the workspace at a fixed path
    assert_eq!(
        json(&first),
        serde_json::json!([
            1,
            1000,
            [],
            tmp_skeleton(),
            "/workspace",
            "/workspace",
            ["1"]
        ])
    );
    // the workspace is the session's: private, its uid's, and where uploads and reads go
    let meta = std::fs::metadata(&first.workspace).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o700);
    assert_eq!(meta.uid(), host_uid(first.pid));
    exec(&m, "acct-a", "s1", "open('note.txt', 'w').write('mine')").await;
    let read = m.read_file("acct-a", "s1", "note.txt", 1024).await.unwrap();
    assert_eq!(read.bytes, b"mine");

    // a session started for its id (other limits: the pool does not serve them) is its peer
    let mut other_limits = limits(30);
    other_limits.max_pids = 64;
    let started = m
        .exec("acct-b", Some("s1"), "1", &other_limits, &[], None)
        .await
        .unwrap();
    assert!(!warm.contains(&started.pid));
    let second = exec(&m, "acct-b", "s2", "1").await;
    assert!(warm.contains(&second.pid), "the second warm session");
    let uids: BTreeSet<u32> = [first.pid, started.pid, second.pid]
        .into_iter()
        .map(host_uid)
        .collect();
    assert_eq!(uids.len(), 3, "each has its own uid: {uids:?}");
    let groups: BTreeSet<PathBuf> = [first.pid, started.pid, second.pid]
        .into_iter()
        .flat_map(cgroup_dirs)
        .collect();
    assert_eq!(groups.len(), 3 * cgroup_dirs(first.pid).len());
    assert!(
        !cgroup_dirs(first.pid).is_empty(),
        "it is in its own cgroups"
    );
    // the warm session's limits are the manager's (`warm_limits`)
    let memory = cgroup_dirs(first.pid)
        .into_iter()
        .find(|dir| dir.starts_with("/sys/fs/cgroup/memory"));
    if let Some(memory) = memory {
        let limit = std::fs::read_to_string(memory.join("memory.limit_in_bytes")).unwrap();
        assert_eq!(limit.trim(), limits(30).memory_bytes.to_string());
    }

    // neither can reach the other's files: they are not even there in its view
    let note = first.workspace.join("note.txt");
    let steal = format!(
        "try:\n    open({:?}).read()\n    r = 'read'\nexcept OSError as e:\n    r = type(e).__name__\nr",
        note.to_str().unwrap()
    );
    for (account, id) in [("acct-b", "s1"), ("acct-b", "s2")] {
        let call = m
            .exec(account, Some(id), &steal, &other_limits, &[], None)
            .await
            .unwrap();
        assert_eq!(text(&call), "'FileNotFoundError'");
    }
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_new_sessions_never_share_a_warm_one() {
    let root = outside_tmp();
    let m = Arc::new(
        warm_manager(root.path(), |c| {
            c.warm_sessions = 4;
            c.max_sessions_per_account = 64;
        })
        .await,
    );
    let warm: BTreeSet<i32> = m.warm_pids().into_iter().collect();
    assert_eq!(warm.len(), 4);
    let calls: Vec<_> = (0..12)
        .map(|i| {
            let m = Arc::clone(&m);
            tokio::spawn(async move {
                let code = format!("import os\nmine = {i}\n(os.getuid(), mine)");
                let call = m
                    .exec(
                        "acct",
                        Some(&format!("s{i}")),
                        &code,
                        &limits(30),
                        &[],
                        None,
                    )
                    .await
                    .unwrap();
                let uid = host_uid(call.pid);
                (i, call, uid)
            })
        })
        .collect();
    let mut pids = BTreeSet::new();
    let mut uids = BTreeSet::new();
    let mut workspaces = BTreeSet::new();
    let mut from_pool = 0;
    for call in calls {
        let (i, call, uid) = call.await.unwrap();
        assert_eq!(text(&call), format!("(1000, {i})"));
        pids.insert(call.pid);
        uids.insert(uid);
        workspaces.insert(call.workspace.clone());
        from_pool += usize::from(warm.contains(&call.pid));
    }
    assert_eq!(pids.len(), 12, "a process was handed to two sessions");
    assert_eq!(uids.len(), 12, "a uid was handed to two sessions");
    assert_eq!(
        workspaces.len(),
        12,
        "a workspace was handed to two sessions"
    );
    assert!(from_pool >= 1, "no session took a warm one");
    // each kept its own variables
    for i in 0..12 {
        let call = exec(&m, "acct", &format!("s{i}"), "mine").await;
        assert_eq!(text(&call), i.to_string());
    }
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_zygote_dies_the_pool_refills_from_the_new_one() {
    let root = outside_tmp();
    let m = warm_manager(root.path(), |_| {}).await;
    let old = m.current_zygote().await.unwrap();
    let before = m.warm_pids();
    assert_eq!(before.len(), 2);
    assert!(
        before
            .iter()
            .all(|pid| host_parent(*pid) == Some(old.pid()))
    );

    let pid = rustix::process::Pid::from_raw(old.pid()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    for warm in &before {
        let warm = *warm;
        eventually("a warm session died with its zygote", || process_gone(warm)).await;
    }
    // without any call: the filler sees the zygote end, starts a new one and refills
    eventually("the pool refilled from a new zygote", || {
        let now = m.warm_pids();
        now.len() == 2 && now.iter().all(|pid| !before.contains(pid))
    })
    .await;
    let new = m.current_zygote().await.unwrap();
    assert_ne!(new.pid(), old.pid());
    let after = m.warm_pids();
    assert!(after.iter().all(|pid| host_parent(*pid) == Some(new.pid())));
    let call = exec(&m, "acct", "s", "1+1").await;
    assert_eq!(text(&call), "2");
    assert!(after.contains(&call.pid));

    // a warm session that dies idle is never handed out, and is replaced
    let idle = m.warm_pids();
    for pid in &idle {
        let pid = rustix::process::Pid::from_raw(*pid).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    }
    for pid in &idle {
        let pid = *pid;
        eventually("the killed warm session is reaped", || process_gone(pid)).await;
    }
    let call = exec(&m, "acct", "t", "2+2").await;
    assert_eq!(text(&call), "4");
    assert!(!idle.contains(&call.pid));
    pool_full(&m, 2).await;
    assert!(m.warm_pids().iter().all(|pid| !idle.contains(pid)));
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_leaves_no_warm_process_mount_or_cgroup_behind() {
    let root = outside_tmp();
    let m = warm_manager(root.path(), |_| {}).await;
    // one warm session taken and in use, one refilled: all of them must go
    let used = exec(&m, "acct", "s", "x = 1").await;
    pool_full(&m, 2).await;
    let warm = m.warm_pids();
    let groups: Vec<PathBuf> = warm
        .iter()
        .chain([&used.pid])
        .flat_map(|pid| cgroup_dirs(*pid))
        .collect();
    assert!(!groups.is_empty());
    assert!(!mounts_beneath(root.path()).is_empty());
    let zygote = m.current_zygote().await.unwrap().pid();

    m.shutdown().await;
    for pid in warm.iter().chain([&used.pid, &zygote]) {
        assert!(process_gone(*pid), "process {pid} outlived the shutdown");
    }
    assert_eq!(mounts_beneath(root.path()), Vec::<String>::new());
    for group in &groups {
        assert!(!group.exists(), "{} outlived the shutdown", group.display());
    }
    let left: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in the root: {left:?}");
    assert!(m.warm_pids().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_warm_sessions_every_session_is_started() {
    let root = outside_tmp();
    let m = warm_manager(root.path(), |c| c.warm_sessions = 0).await;
    assert!(m.warm_pids().is_empty());
    let call = exec(&m, "acct", "s", "1+1").await;
    assert_eq!(text(&call), "2");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(m.warm_pids().is_empty());
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_grows_to_a_bursts_demand_serves_the_next_from_it_and_shrinks_after() {
    let root = outside_tmp();
    let m = Arc::new(
        warm_manager(root.path(), |c| {
            c.warm_sessions = 1;
            c.warm_sessions_max = 8;
            c.max_sessions_per_account = 64;
        })
        .await,
    );
    assert_eq!(m.warm_pids().len(), 1, "the floor at start");
    // a first burst of 6: more than the floor, so most are started for it
    for i in 0..6 {
        exec(&m, "acct", &format!("first-{i}"), "1+1").await;
    }
    // the pool grows to that demand (made in the background)
    let grown = async {
        while m.warm_pids().len() < 6 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), grown)
        .await
        .expect("the pool did not grow to the burst's demand (6) within 20 s");
    let warm: BTreeSet<i32> = m.warm_pids().into_iter().collect();
    assert!(warm.len() <= 8, "past the ceiling: {}", warm.len());
    // the next burst of the same size, all at once, is served from sessions made before it
    let calls: Vec<_> = (0..6)
        .map(|i| {
            let m = Arc::clone(&m);
            tokio::spawn(async move { exec(&m, "acct", &format!("again-{i}"), "1+1").await })
        })
        .collect();
    for call in calls {
        let call = call.await.unwrap();
        assert_eq!(text(&call), "2");
        assert!(
            warm.contains(&call.pid),
            "a session of the second burst was started for it rather than taken from the pool"
        );
    }
    // refilled to the demand of both bursts (12 wants: the ceiling) ...
    let refilled = async {
        while m.warm_pids().len() < 8 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), refilled)
        .await
        .expect("the pool did not refill to its ceiling (8) within 20 s");
    // ... and with no more demand, it falls back to its floor once the bursts leave its window
    let shrunk = async {
        while m.warm_pids().len() > 1 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), shrunk)
        .await
        .expect("the pool did not shrink back to its floor");
    let floor = m.warm_pids();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(m.warm_pids().len(), 1, "the floor is kept: {floor:?}");
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growing_pool_makes_as_many_warm_sessions_at_once_as_there_are_cores() {
    // The fillers are topped up at every demand, also while earlier ones still run: a round
    // that waited for all of its fillers went on with the one left once the others had found
    // the pool full for a moment, and a burst's pool grew one session at a time.
    let root = outside_tmp();
    let m = Arc::new(
        warm_manager(root.path(), |c| {
            c.warm_sessions = 1;
            c.warm_sessions_max = 40;
            c.max_sessions_per_account = 128;
        })
        .await,
    );
    let at_once = std::thread::available_parallelism().map_or(1, usize::from);
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let (m, watching) = (Arc::clone(&m), Arc::clone(&watching));
        tokio::spawn(async move {
            let mut most = 0;
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                most = most.max(m.warm_being_made());
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            most
        })
    };
    for i in 0..16 {
        exec(&m, "acct", &format!("burst-{i}"), "1+1").await;
    }
    let grown = async {
        while m.warm_pids().len() < 16 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), grown)
        .await
        .expect("the pool did not grow to the burst's demand (16) within 60 s");
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    let most = watcher.await.unwrap();
    // (on one core, one at a time is all there is to check)
    assert!(
        most == at_once,
        "at most {most} warm sessions were made at once (expected {at_once})"
    );
    m.shutdown().await;
}
