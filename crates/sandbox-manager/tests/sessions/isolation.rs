//! What confines a session beyond the zygote (unhardened mode is enough for these): its cgroup
//! (memory with OOM reporting, pids against fork and thread bombs, a kill of everything at the
//! end), its size-capped tmpfs workspace, and its own host uid.
//!
//! These need root and a cgroup hierarchy with memory and pids (v1 or v2): the managers are
//! started with `CgroupMode::Required`, so a host without them fails here rather than passing
//! quietly.

// The helpers are test code too: a panic is how they report failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::common::{error_type, eventually, limits, manager, process_gone, text};
use toolgate_sandbox::Limits;
use toolgate_sandbox_manager::{
    CgroupMode, CgroupVersion, ManagerConfig, ManagerError, RunOutcome, SandboxManager,
    SessionError,
};

async fn confined(root: &Path, tweak: impl FnOnce(&mut ManagerConfig)) -> SandboxManager {
    manager(root, |config| {
        config.cgroups = CgroupMode::Required;
        tweak(config);
    })
    .await
}

fn limits_with(tweak: impl FnOnce(&mut Limits)) -> Limits {
    let mut limits = limits(30);
    tweak(&mut limits);
    limits
}

/// The directory of `pid`'s group for `controller` (v1), or its unified group (v2).
fn cgroup_dir(pid: i32, controller: &str) -> PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
        if controllers.split(',').any(|c| c == controller) {
            return PathBuf::from(format!("/sys/fs/cgroup/{controller}{path}"));
        }
    }
    let unified = text.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    PathBuf::from(format!("/sys/fs/cgroup{unified}"))
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}/{file}: {e}", dir.display()))
        .trim()
        .to_owned()
}

/// Processes whose command line contains `marker`.
fn with_marker(marker: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(marker))
        })
        .collect()
}

/// Kills processes carrying a marker when dropped: a failing test leaves no daemon behind.
struct KillMarked(String);

impl Drop for KillMarked {
    fn drop(&mut self) {
        for pid in with_marker(&self.0) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

fn is_mounted(point: &Path) -> bool {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let point = point.to_str().unwrap();
    mountinfo
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(point))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_get_their_own_cgroup_with_the_limits() {
    let root = tempfile::tempdir().unwrap();
    let m = confined(root.path(), |_| {}).await;
    let isolation = m.isolation();
    assert_ne!(isolation.cgroups, CgroupVersion::None);
    assert!(isolation.workspace_quota, "root should be able to mount");
    let limits = limits_with(|l| {
        l.memory_bytes = 256 << 20;
        l.max_pids = 100;
    });
    let call = m
        .exec("a", Some("s"), "import os; os.getpid()", &limits, &[], None)
        .await
        .unwrap();
    assert_eq!(text(&call), call.pid.to_string());
    let (memory, pids) = match isolation.cgroups {
        CgroupVersion::V1 => (cgroup_dir(call.pid, "memory"), cgroup_dir(call.pid, "pids")),
        _ => (cgroup_dir(call.pid, ""), cgroup_dir(call.pid, "")),
    };
    assert!(
        memory.to_str().unwrap().contains("/toolgate/"),
        "{}",
        memory.display()
    );
    match isolation.cgroups {
        CgroupVersion::V1 => {
            assert_eq!(
                read(&memory, "memory.limit_in_bytes"),
                (256u64 << 20).to_string()
            );
            if memory.join("memory.memsw.limit_in_bytes").exists() {
                assert_eq!(
                    read(&memory, "memory.memsw.limit_in_bytes"),
                    (256u64 << 20).to_string()
                );
            }
            let cpu = cgroup_dir(call.pid, "cpu");
            assert_eq!(read(&cpu, "cpu.shares"), "1024");
        }
        _ => {
            assert_eq!(read(&memory, "memory.max"), (256u64 << 20).to_string());
            assert_eq!(read(&memory, "cpu.weight"), "100");
        }
    }
    assert_eq!(read(&pids, "pids.max"), "100");
    // the manager's other session is in another group
    let other = m
        .exec("a", Some("t"), "1", &limits, &[], None)
        .await
        .unwrap();
    assert_ne!(cgroup_dir(other.pid, "pids"), pids);
    assert!(m.close_session("a", "s").await);
    assert!(
        !memory.exists() && !pids.exists(),
        "the groups outlived the session"
    );
    m.shutdown().await;
    assert!(
        !pids.parent().unwrap().exists(),
        "the instance group outlived the manager"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_memory_kills_the_session_and_says_so() {
    let root = tempfile::tempdir().unwrap();
    let m = confined(root.path(), |_| {}).await;
    let limits = limits_with(|l| l.memory_bytes = 96 << 20);
    let before = m
        .exec("a", Some("s"), "keep = 1", &limits, &[], None)
        .await
        .unwrap();
    let died = m
        .exec("a", Some("s"), "x = b'x' * (400 << 20)", &limits, &[], None)
        .await;
    let Err(ManagerError::Session(error @ SessionError::OutOfMemory { limit_bytes })) = &died
    else {
        panic!("expected an out-of-memory error, got {died:?}");
    };
    assert_eq!(*limit_bytes, 96 << 20);
    assert_eq!(
        error.to_string(),
        "out of memory: the session used its limit of 96 MiB (memory_bytes) and was killed; its \
         variables are lost"
    );
    eventually("OOM-killed session reaped", || process_gone(before.pid)).await;
    let next = m
        .exec("a", Some("s"), "keep", &limits, &[], None)
        .await
        .unwrap();
    assert!(next.fresh);
    assert_eq!(error_type(&next), "NameError");

    // a refused allocation is Python's own MemoryError: the session lives on
    let refused = m
        .exec(
            "a",
            Some("s"),
            "kept = 2\nbytearray(1 << 50)",
            &limits,
            &[],
            None,
        )
        .await
        .unwrap();
    assert_eq!(error_type(&refused), "MemoryError");
    assert_eq!(refused.oom_kills, 0);
    let after = m
        .exec("a", Some("s"), "kept", &limits, &[], None)
        .await
        .unwrap();
    assert_eq!(text(&after), "2");

    // a bash command killed for memory is counted; the interpreter survives it
    let bash = m
        .bash(
            "a",
            Some("s"),
            "python -c 'x = b\"x\" * (400 << 20)'",
            &limits,
            &[],
            None,
        )
        .await
        .unwrap();
    assert_eq!(bash.outcome.exit_status, Some(137), "{:?}", bash.outcome);
    assert_eq!(bash.oom_kills, 1);
    let still = m
        .exec("a", Some("s"), "kept", &limits, &[], None)
        .await
        .unwrap();
    assert_eq!(text(&still), "2");
    assert!(!still.fresh);
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_bombs_and_setsid_daemons_are_contained_and_killed() {
    let root = tempfile::tempdir().unwrap();
    let m = confined(root.path(), |_| {}).await;
    let limits = limits_with(|l| l.max_pids = 64);
    let marker = format!("toolgate-test-daemon-{}", std::process::id());
    let _guard = KillMarked(marker.clone());

    // 10,000 threads: creation fails inside the session at the cap
    let bomb = "import threading, time\nstarted = 0\ntry:\n    for _ in range(10000):\n        \
                threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n        \
                started += 1\nexcept RuntimeError as e:\n    failed = str(e)\nstarted";
    let call = m
        .exec("a", Some("s"), bomb, &limits, &[], None)
        .await
        .unwrap();
    let started: u32 = text(&call).parse().unwrap();
    assert!(started > 0 && started < 64, "{started} threads started");
    let pids_dir = cgroup_dir(call.pid, "pids");
    let current: u32 = read(&pids_dir, "pids.current").parse().unwrap();
    assert!(current <= 64, "pids.current {current}");

    // a daemon, in another session (this one's pids are used up): double fork, setsid, exec
    // with a marker in its command line
    let daemon = format!(
        "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        \
         os.execv('/bin/sleep', ['{marker}', '600'])\n    os._exit(0)\nos.wait()\n'ok'"
    );
    let spawned = m
        .exec("a", Some("d"), &daemon, &limits, &[], None)
        .await
        .unwrap();
    assert_eq!(text(&spawned), "'ok'", "{:?}", spawned.outcome);
    eventually("the daemon runs", || !with_marker(&marker).is_empty()).await;
    let daemon_pid = with_marker(&marker)[0];
    let parent = std::fs::read_to_string(format!("/proc/{daemon_pid}/stat")).unwrap();
    assert_ne!(
        parent.rsplit(')').next().unwrap().split(' ').nth(2),
        Some(spawned.pid.to_string().as_str()),
        "the daemon should have left the session's process tree"
    );
    let daemon_group = cgroup_dir(daemon_pid, "pids");
    assert_eq!(daemon_group, cgroup_dir(spawned.pid, "pids"));

    // a fork bomb in bash, in a third session, stopped by its time limit; pids.max holds it
    let short = limits_with(|l| {
        l.max_pids = 64;
        l.timeout = std::time::Duration::from_secs(2);
    });
    let opened = m
        .exec("a", Some("f"), "1", &short, &[], None)
        .await
        .unwrap();
    let bomb_group = cgroup_dir(opened.pid, "pids");
    let forked = m
        .bash("a", Some("f"), "b() { b | b & }; b", &short, &[], None)
        .await;
    assert!(
        forked.is_ok() || matches!(forked, Err(ManagerError::Session(_))),
        "{forked:?}"
    );
    let peak: u32 = read(&bomb_group, "pids.current").parse().unwrap_or(0);
    assert!(peak <= 64, "pids.current {peak}");

    // the end of a session kills all of it
    for id in ["s", "d", "f"] {
        m.close_session("a", id).await;
    }
    eventually("no daemon left", || with_marker(&marker).is_empty()).await;
    for group in [&pids_dir, &daemon_group, &bomb_group] {
        assert!(!group.exists(), "{} outlived its session", group.display());
    }
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workspace_is_a_capped_tmpfs_shared_with_tmp() {
    let root = tempfile::tempdir().unwrap();
    let m = confined(root.path(), |_| {}).await;
    let limits = limits_with(|l| l.workspace_bytes = 8 << 20);
    let first = m
        .exec(
            "a",
            Some("s"),
            "import os; os.environ['TMPDIR']",
            &limits,
            &[],
            None,
        )
        .await
        .unwrap();
    let workspace = first.workspace.clone();
    let tmpdir = PathBuf::from(text(&first).trim_matches('\''));
    assert!(is_mounted(&workspace) && is_mounted(&tmpdir));
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = mountinfo
        .lines()
        .find(|l| l.split(' ').nth(4) == workspace.to_str())
        .unwrap();
    assert!(
        line.contains("nosuid") && line.contains("nodev") && line.contains("size=8192k"),
        "{line}"
    );
    let owner = std::fs::metadata(&workspace).unwrap();
    assert_eq!(owner.uid(), toolgate_sandbox_manager::DEFAULT_SANDBOX_UID);
    assert_eq!(owner.mode() & 0o777, 0o700);

    let fill = "import errno, os\n\
                def fill(path, size):\n    \
                    try:\n        \
                        with open(path, 'wb') as f:\n            \
                            f.write(b'x' * size)\n        \
                        return 'ok'\n    \
                    except OSError as e:\n        \
                        return errno.errorcode[e.errno]\n";
    let big = format!("{fill}fill('big', 16 << 20)");
    let call = m
        .exec("a", Some("s"), &big, &limits, &[], None)
        .await
        .unwrap();
    assert_eq!(text(&call), "'ENOSPC'");
    // TMPDIR shares the quota
    let shared = format!(
        "{fill}os.remove('big')\n(fill('half', 5 << 20), fill(os.environ['TMPDIR'] + '/half', 5 << 20))"
    );
    let call = m
        .exec("a", Some("s"), &shared, &limits, &[], None)
        .await
        .unwrap();
    assert_eq!(text(&call), "('ok', 'ENOSPC')");
    let many = "import errno, os\nfor f in os.listdir('.'): os.remove(f)\ntry:\n    \
                for i in range(100000):\n        open(f'f{i}', 'w').close()\n    \
                r = 'ok'\nexcept OSError as e:\n    r = errno.errorcode[e.errno]\n(r, i)";
    let call = m
        .exec("a", Some("s"), many, &limits, &[], None)
        .await
        .unwrap();
    assert!(text(&call).starts_with("('ENOSPC', "), "{}", text(&call));
    // the host's disk is untouched and the session goes on
    assert!(!root.path().join("big").exists());
    m.close_session("a", "s").await;
    assert!(!is_mounted(&workspace) && !is_mounted(&tmpdir));
    assert!(!workspace.exists() && !tmpdir.exists());
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_live_session_has_its_own_uid_and_freed_ones_are_reused() {
    let root = tempfile::tempdir().unwrap();
    let base = 2_000_000_000;
    let m = confined(root.path(), |c| {
        c.uid_base = base;
        c.uid_count = 2;
    })
    .await;
    let owner = |call: &RunOutcome| std::fs::metadata(&call.workspace).unwrap().uid();
    let s1 = m
        .exec("a", Some("s1"), "1", &limits(10), &[], None)
        .await
        .unwrap();
    let s2 = m
        .exec("b", Some("s1"), "1", &limits(10), &[], None)
        .await
        .unwrap();
    assert_eq!((owner(&s1), owner(&s2)), (base, base + 1));
    let full = m.exec("a", Some("s3"), "1", &limits(10), &[], None).await;
    assert!(matches!(full, Err(ManagerError::NoFreeUid(2))), "{full:?}");
    assert_eq!(
        m.live_sessions("a"),
        1,
        "a refused session must not stay in the table"
    );
    assert!(m.close_session("a", "s1").await);
    let s3 = m
        .exec("a", Some("s3"), "1", &limits(10), &[], None)
        .await
        .unwrap();
    assert_eq!(owner(&s3), base);
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cgroups_sessions_still_run_and_say_so() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |c| c.cgroups = CgroupMode::Off).await;
    assert_eq!(m.isolation().cgroups, CgroupVersion::None);
    assert_eq!(
        serde_json::to_value(m.isolation()).unwrap(),
        serde_json::json!({"cgroups": "none", "workspace_quota": true})
    );
    let call = m
        .exec(
            "a",
            Some("s"),
            "import os; os.getpid()",
            &limits(10),
            &[],
            None,
        )
        .await
        .unwrap();
    assert!(
        !cgroup_dir(call.pid, "pids")
            .to_str()
            .unwrap()
            .contains("toolgate")
    );
    assert_eq!(call.oom_kills, 0);
    m.shutdown().await;
}

/// Unmounts (and removes) a test's own mounts and cgroups when dropped, should the manager not.
struct Leftovers {
    mounts: Vec<PathBuf>,
    groups: Vec<PathBuf>,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        for point in &self.mounts {
            let _ = rustix::mount::unmount(point, rustix::mount::UnmountFlags::DETACH);
        }
        for group in self.groups.iter().rev() {
            let _ = std::fs::remove_dir(group);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_crashed_run_left_is_cleaned_up_at_start() {
    let root = tempfile::tempdir().unwrap();
    // a workspace mount of a crashed run, and a mount that is not a manager's (one level up)
    let stale = root.path().join("acct").join("0123abcd");
    let foreign = root.path().join("foreign");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::create_dir_all(&foreign).unwrap();
    for point in [&stale, &foreign] {
        rustix::mount::mount(
            "tmpfs",
            point,
            "tmpfs",
            rustix::mount::MountFlags::empty(),
            c"size=4096",
        )
        .unwrap();
    }
    // a cgroup instance of a manager whose process is gone
    let mut child = std::process::Command::new("/bin/true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let own = cgroup_dir(i32::try_from(std::process::id()).unwrap(), "memory");
    let instance = own.join("toolgate").join(format!("{dead:x}-0"));
    let session = instance.join("a.stale");
    let mut leftovers = Leftovers {
        mounts: vec![
            stale.canonicalize().unwrap(),
            foreign.canonicalize().unwrap(),
        ],
        groups: vec![own.join("toolgate"), instance.clone(), session.clone()],
    };
    std::fs::create_dir_all(&session).unwrap();

    let m = confined(root.path(), |_| {}).await;
    assert!(
        !is_mounted(&leftovers.mounts[0]),
        "the stale workspace is still mounted"
    );
    assert!(
        is_mounted(&leftovers.mounts[1]),
        "a mount that is not a manager's was removed"
    );
    assert!(
        !instance.exists(),
        "the dead manager's cgroups are still there"
    );
    m.shutdown().await;
    leftovers.groups.clear();
}
