//! The session manager with the confinement library (crates/sandbox-harden) loaded into the
//! zygote: every session is forked with a spec made from its workspace, and the confinement is
//! checked from inside, through the manager, and from the host. Workspaces live under
//! `/var/tmp`: `/tmp` is each session's own empty tmpfs, and a workspace there would
//! be hidden from it.
//!
//! The library is `TOOLGATE_HARDEN_LIB`, else `libtoolgate_sandbox_harden.so` in `target/debug`
//! or `target/debug/deps` (`cargo test --workspace` builds it there). A missing library fails
//! the test: build it with `cargo build -p toolgate-sandbox-harden`.

// The helpers are test code too: a panic is how they report failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use crate::common::{exec_ok as exec, harden_lib, limits, manager, text, tmp_skeleton};
use tempfile::TempDir;
use toolgate_sandbox_manager::{ManagerError, RunOutcome, SandboxManager, ZygoteError};

/// What `statement` raises, by type name ('ok' when nothing).
async fn raised(m: &SandboxManager, account: &str, id: &str, statement: &str) -> String {
    let code = format!(
        "try:\n    {statement}\n    _r = 'ok'\nexcept BaseException as e:\n    _r = type(e).__name__\n_r"
    );
    text(&exec(m, account, id, &code).await).to_owned()
}

/// A root for workspaces outside `/tmp`; the manager makes it 0711 itself.
fn workspace_root() -> TempDir {
    tempfile::tempdir_in("/var/tmp").unwrap()
}

async fn hardened_manager(root: &std::path::Path) -> SandboxManager {
    let lib = harden_lib();
    manager(root, |config| {
        config.zygote.harden_lib = Some(lib);
    })
    .await
}

/// A field of `/proc/<pid>/status`, read on the host.
fn host_status(pid: i32, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hardened_sessions_are_confined_to_their_workspace() {
    let root = workspace_root();
    let m = hardened_manager(root.path()).await;

    let first = exec(&m, "acct-a", "s1", "1+1").await;
    assert_eq!(text(&first), "2");
    // nothing preloaded: numpy is read from the runtime after hardening
    let numpy = exec(
        &m,
        "acct-a",
        "s1",
        "import numpy\nint(numpy.arange(5).sum())",
    )
    .await;
    assert_eq!(text(&numpy), "10");
    let write = exec(&m, "acct-a", "s1", "open('note.txt', 'w').write('kept')").await;
    assert_eq!(text(&write), "4");
    assert_eq!(
        std::fs::read_to_string(first.workspace.join("note.txt")).unwrap(),
        "kept"
    );
    let hostname = exec(&m, "acct-a", "s1", "import socket\nsocket.gethostname()").await;
    assert_eq!(text(&hostname), "'sandbox'");

    let bash = m
        .bash(
            "acct-a",
            Some("s1"),
            "echo from-bash > b.txt; cat b.txt; cat /etc/shadow",
            &limits(60),
            &[],
            None,
        )
        .await
        .unwrap();
    assert!(
        bash.outcome.stdout.contains("from-bash") && bash.outcome.exit_status != Some(0),
        "{:?}",
        bash.outcome
    );

    // the host's files are not in the session's root at all, world-readable ones included
    let absent = "'FileNotFoundError'";
    for host_file in ["/etc/shadow", "/etc/passwd"] {
        assert!(std::path::Path::new(host_file).exists());
        let read = format!("open({host_file:?}).read()");
        assert_eq!(raised(&m, "acct-a", "s1", &read).await, absent);
    }
    // and what is there but not granted stays refused by Landlock: the root's listing
    let denied = "'PermissionError'";
    assert_eq!(
        raised(&m, "acct-a", "s1", "import os\n    os.listdir('/')").await,
        denied
    );
    assert_eq!(
        raised(
            &m,
            "acct-a",
            "s1",
            "import socket\n    socket.socket(socket.AF_INET)"
        )
        .await,
        denied
    );

    // another session, of the same account or another one, cannot even find this one's
    // workspace: its own root holds nothing of the host's sessions root
    let note = first.workspace.join("note.txt");
    let read_note = format!("open({:?}).read()", note.to_str().unwrap());
    for account in ["acct-a", "acct-b"] {
        let other = exec(&m, account, "s2", "1").await;
        assert_ne!(other.pid, first.pid);
        assert_eq!(raised(&m, account, "s2", &read_note).await, absent);
        let list = format!("import os\n    os.listdir({:?})", first.workspace);
        assert_eq!(raised(&m, account, "s2", &list).await, absent);
    }
    // while the first session still reads its own, at /workspace (its host path is not there)
    assert_eq!(raised(&m, "acct-a", "s1", &read_note).await, absent);
    let own_note = "open('/workspace/note.txt').read()";
    assert_eq!(raised(&m, "acct-a", "s1", own_note).await, "'ok'");
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hardened_session_is_pid_1_and_an_unprivileged_uid_with_its_own_tmp() {
    let root = workspace_root();
    let m = hardened_manager(root.path()).await;
    let probe = "import os, json\njson.dumps([os.getpid(), os.getuid(), os.getgid(), \
                 sorted(p for p in os.listdir('/proc') if p.isdigit()), sorted(os.listdir('/tmp')), \
                 os.environ['HOME'], os.getcwd(), os.environ.get('TMPDIR')])";
    let first = exec(&m, "acct-a", "s1", probe).await;
    let seen: serde_json::Value = serde_json::from_str(text(&first).trim_matches('\'')).unwrap();
    // the workspace is at a fixed path in the session's own root, whatever its host path
    assert_eq!(
        seen,
        serde_json::json!([
            1,
            1000,
            1000,
            ["1"],
            tmp_skeleton(),
            "/workspace",
            "/workspace",
            "/tmp"
        ])
    );
    // The host sees the session's own host uid (the zygote's map: 1000 inside is it), and no
    // capability; the workspace belongs to that uid.
    let map = std::fs::read_to_string(format!("/proc/{}/uid_map", first.pid)).unwrap();
    let fields: Vec<&str> = map.split_whitespace().collect();
    assert_eq!((fields[0], fields[2]), ("1000", "1"), "{map}");
    let host_uid: u32 = fields[1].parse().unwrap();
    assert_ne!(host_uid, 0);
    assert_eq!(
        host_status(first.pid, "Uid:"),
        format!("{host_uid}\t").repeat(4).trim()
    );
    assert_eq!(host_status(first.pid, "CapEff:"), "0000000000000000");
    assert_eq!(std::fs::metadata(&first.workspace).unwrap().uid(), host_uid);
    let namespace = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/pid")).unwrap();
    assert_ne!(namespace(&first.pid.to_string()), namespace("self"));

    // /tmp is per session: what one writes there, the next one does not see.
    exec(&m, "acct-a", "s1", "open('/tmp/mine', 'w').write('x')").await;
    let listing = "import os, json\njson.dumps(sorted(os.listdir('/tmp')))";
    let other = exec(&m, "acct-a", "s2", listing).await;
    let listed = |call: &RunOutcome| -> Vec<String> {
        serde_json::from_str(text(call).trim_matches('\'')).unwrap()
    };
    assert_eq!(listed(&other), tmp_skeleton());
    assert_ne!(other.pid, first.pid);
    let still = exec(&m, "acct-a", "s1", listing).await;
    let mut mine = tmp_skeleton();
    mine.push("mine".to_owned());
    mine.sort();
    assert_eq!(listed(&still), mine);
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_the_sessions_uid_cannot_reach_is_refused_with_a_clear_error() {
    // The manager makes its root and account directories 0711; a directory above the root that
    // only its owner may search is the operator's to fix, not the server's to chmod.
    let outer = workspace_root();
    std::fs::set_permissions(outer.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let root = outer.path().join("sessions");
    let m = hardened_manager(&root).await;
    let error = m
        .exec("acct-a", Some("s1"), "1", &limits(60), &[], None)
        .await
        .unwrap_err();
    match &error {
        ManagerError::Zygote(ZygoteError::WorkspaceNotTraversable { ancestor, mode, .. }) => {
            assert_eq!(ancestor, outer.path());
            assert_eq!(*mode, 0o700);
        }
        other => panic!("expected WorkspaceNotTraversable, got {other:?}"),
    }
    assert!(error.to_string().contains("o+x"), "{error}");
    assert_eq!(
        std::fs::metadata(outer.path()).unwrap().mode() & 0o7777,
        0o700,
        "left as it was"
    );
    // Control: once the operator opens it, the same session starts.
    std::fs::set_permissions(outer.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let call = exec(&m, "acct-a", "s1", "1+1").await;
    assert_eq!(text(&call), "2");
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn figures_new_hardened_session() {
    // The production preload (numpy, pandas, matplotlib.pyplot), as in sessions.rs's figures.
    let lib = harden_lib();
    let root = workspace_root();
    let mut config = toolgate_sandbox_manager::ManagerConfig::new(
        crate::common::zygote_config(None),
        root.path(),
    );
    config.zygote.harden_lib = Some(lib);
    let m = SandboxManager::start(config).await.unwrap();
    let mut took = Vec::new();
    for i in 0..30 {
        let start = std::time::Instant::now();
        let call = exec(&m, "bench", &format!("n{i}"), "1+1").await;
        took.push(start.elapsed());
        assert_eq!(text(&call), "2");
        m.close_session("bench", &format!("n{i}")).await;
    }
    took.sort();
    let ms = |index: usize| took[index].as_secs_f64() * 1000.0;
    println!(
        "new hardened session (named id) to first result, n=30: p50 {:.2} ms, p90 {:.2} ms, max {:.2} ms",
        ms(15),
        ms(27),
        ms(29)
    );
    m.shutdown().await;
}

/// The filesystem source of each mount in `/proc/<pid>/mountinfo`.
fn mount_sources(pid: &str) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap()
        .lines()
        .filter_map(|line| {
            line.split_once(" - ")?
                .1
                .split(' ')
                .nth(1)
                .map(str::to_owned)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zygotes_mount_namespace_holds_no_workspace_however_many_sessions_live() {
    // Each session's mount namespace starts as a copy of the zygote's: were the zygote in the
    // host's, every new session would copy every live session's workspace mounts.
    let root = workspace_root();
    let m = hardened_manager(root.path()).await;
    assert!(
        m.isolation().workspace_quota,
        "root should be able to mount"
    );
    let first = exec(&m, "acct-a", "m0", "open('mine.txt', 'w').write('0')").await;
    let zygote = host_status(first.pid, "PPid:");
    assert_ne!(
        std::fs::read_link(format!("/proc/{zygote}/ns/mnt")).unwrap(),
        std::fs::read_link("/proc/self/ns/mnt").unwrap(),
        "the zygote has a mount namespace of its own"
    );
    let before = mount_sources(&zygote);
    for n in 1..6 {
        let call = exec(&m, "acct-a", &format!("m{n}"), "1").await;
        assert_eq!(host_status(call.pid, "PPid:"), zygote);
    }
    let host = mount_sources("self");
    let workspaces = host.iter().filter(|s| *s == "toolgate-workspace").count();
    assert!(
        workspaces >= 12,
        "two mounts per live session: {workspaces}"
    );
    let after = mount_sources(&zygote);
    assert_eq!(after, before, "the zygote's mounts did not change");
    assert!(
        !after.iter().any(|s| s == "toolgate-workspace"),
        "{after:?}"
    );
    // each session still has its own workspace, shared with the server
    let read = exec(&m, "acct-a", "m0", "open('mine.txt').read()").await;
    assert_eq!(text(&read), "'0'");
    std::fs::write(first.workspace.join("from-host.txt"), "h").unwrap();
    let seen = exec(&m, "acct-a", "m0", "open('from-host.txt').read()").await;
    assert_eq!(text(&seen), "'h'");
    let other = exec(&m, "acct-a", "m1", "import os\nsorted(os.listdir('.'))").await;
    assert_eq!(text(&other), "[]");
    m.shutdown().await;
}
