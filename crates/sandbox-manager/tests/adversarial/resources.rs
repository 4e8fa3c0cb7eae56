//! Part 1: attacks on resources (processes, memory, threads, descriptors, disk, output).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::harness::{
    KillMarked, Sandbox, Traced, Watch, assert_no_marker, error_type, json, marker, session_error,
    small, text, with_marker, within,
};
use toolgate_sandbox_manager::SessionError;

/// The classic Python fork bomb: every process forks forever. The pids limit makes `fork` fail
/// (EAGAIN), which ends the cell in every child (a forked process exits at the cell's end) and
/// is reported to the caller; the interpreter lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_fork_bomb_is_held_by_the_pids_limit() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(10);
    let first = s.ok("attacker", "bomb", "kept = 'yes'", &limits).await;
    let mut traced = Traced::of(first.pid);
    let watch = Watch::start(&traced);
    let call = s
        .exec(
            "attacker",
            "bomb",
            "import os\nwhile True:\n    os.fork()",
            &limits,
        )
        .await
        .unwrap();
    let watched = watch.stop();
    traced.add(&watched);
    // (b) fork's own error, not the time limit (which would interrupt the call)
    assert_eq!(error_type(&call), "BlockingIOError", "{:?}", call.outcome);
    assert_eq!(call.outcome.interrupted, None);
    // (a) the group held it, and nothing of the namespace was outside the group; the bomb
    // did reach the limit (a lower bound: a group that counted nothing would pass the upper one)
    assert!(watched.max_pids <= 64, "{watched:?}");
    assert!(
        watched.max_pids >= 48,
        "the bomb never came near the limit: {watched:?}"
    );
    assert!(watched.outside_group.is_empty(), "{watched:?}");
    assert!(watched.max_in_namespace <= 64, "{watched:?}");
    // (c) the interpreter answers; a new process may still be refused: the bomb's orphans are
    // the session's children, and their zombies are reaped only when the session ends
    // (crates/sandbox-harden, "The session as pid 1"), so they hold its pids until then
    s.assert_survived("attacker", "bomb", "kept", "yes").await;
    let bash = s
        .bash("attacker", "bomb", "echo still", &limits)
        .await
        .unwrap();
    assert!(
        bash.outcome.stdout == "still\n" || error_type(&bash) == "BlockingIOError",
        "{:?}",
        bash.outcome
    );
    println!(
        "after a Python fork bomb: pids.current {}, bash in the session: {:?} {:?}",
        traced.pids_current(),
        bash.outcome.stdout,
        bash.outcome.error
    );
    s.assert_healthy(zygote).await;
    // (d)
    assert!(s.m.close_session("attacker", "bomb").await);
    traced.assert_gone().await;
    s.m.shutdown().await;
}

/// `:(){ :|:& };:` in bash: the command returns at once (the bomb is in the background) and the
/// bomb goes on in the session's group, held at the pids limit, until the session is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bash_fork_bomb_is_held_by_the_pids_limit_and_dies_with_the_session() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(3);
    let tag = marker("bashbomb");
    let _cleanup = KillMarked(tag.clone());
    let first = s.ok("attacker", "bomb", "kept = 'yes'", &limits).await;
    let mut traced = Traced::of(first.pid);
    let watch = Watch::start(&traced);
    let bomb = format!(":(){{ :|:& }};: # {tag}");
    let call = s.bash("attacker", "bomb", &bomb, &limits).await;
    // until it pressed against the limit (64), whatever the machine's speed
    within(
        Duration::from_secs(30),
        "the bomb near the pids limit",
        || traced.pids_current() >= 48,
    )
    .await;
    let watched = watch.stop();
    traced.add(&watched);
    // (b) bash reports how it ended (or its time limit does)
    let call = call.unwrap();
    assert!(
        call.outcome.exit_status.is_some() || call.outcome.timed_out,
        "{:?}",
        call.outcome
    );
    // (a)
    assert!(watched.max_pids <= 64, "{watched:?}");
    assert!(
        watched.max_pids >= 48,
        "the bomb did not go off: {watched:?}"
    );
    assert!(watched.outside_group.is_empty(), "{watched:?}");
    let outside: Vec<i32> = with_marker(&tag)
        .into_iter()
        .filter(|pid| !traced.members().contains(pid))
        .collect();
    assert!(
        outside.is_empty(),
        "bomb processes outside the group: {outside:?}"
    );
    // (c) the interpreter (which needs no new process) still answers
    s.assert_survived("attacker", "bomb", "kept", "yes").await;
    s.assert_healthy(zygote).await;
    // (d) closing the session ends the bomb
    assert!(s.m.close_session("attacker", "bomb").await);
    traced.assert_gone().await;
    assert_no_marker(&tag).await;
    s.m.shutdown().await;
}

/// A list that grows until the memory limit: the kernel kills the interpreter and the caller is
/// told "out of memory" (or Python gets a MemoryError first). A bash child that does the same
/// is killed alone; the interpreter and its variables survive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_bombs_are_stopped_by_the_memory_limit() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(30);

    // Python: list growth
    let first = s.ok("attacker", "py", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    let bomb = "chunks = []\nwhile True:\n    chunks.append(bytearray(1 << 20))";
    let died = s.exec("attacker", "py", bomb, &limits).await;
    println!("Python memory bomb: {died:?}");
    match &died {
        Err(_) => {
            let error = session_error(&died);
            let SessionError::OutOfMemory { limit_bytes } = error else {
                panic!("expected out of memory, got {error:?}");
            };
            assert_eq!(*limit_bytes, 256 << 20);
            assert!(error.to_string().contains("out of memory"), "{error}");
            s.assert_fresh("attacker", "py", "kept").await;
        }
        Ok(call) => {
            assert_eq!(error_type(call), "MemoryError", "{:?}", call.outcome);
            s.assert_survived("attacker", "py", "kept", "yes").await;
        }
    }
    s.m.close_session("attacker", "py").await;
    traced.assert_gone().await;

    // bash: a child process blows up; only it is killed
    let first = s.ok("attacker", "sh", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    let child = "python -c 'x = bytearray(1 << 30); print(len(x))'; echo after=$?";
    let call = s.bash("attacker", "sh", child, &limits).await.unwrap();
    assert!(
        call.outcome.stdout.contains("after=137"),
        "{:?}",
        call.outcome
    );
    assert_eq!(call.oom_kills, 1);
    s.assert_survived("attacker", "sh", "kept", "yes").await;
    s.assert_healthy(zygote).await;
    assert!(s.m.close_session("attacker", "sh").await);
    traced.assert_gone().await;
    s.m.shutdown().await;
}

/// Anonymous memory behind a file (memfd) and the session's own /dev/shm count against the
/// session: the memfd bomb ends in an error or an out-of-memory kill, /dev/shm is full at its
/// 64 MiB (ENOSPC) and is the session's own (the host's /dev/shm never sees the file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memfd_and_dev_shm_bombs_are_contained() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(30);

    let first = s.ok("attacker", "memfd", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    // one memfd stops at the file size limit (EFBIG at 64 MiB here): a bomb opens more
    let memfd = "import errno, json, os\n\
                 written = 0\n\
                 held = []\n\
                 chunk = b'x' * (1 << 20)\n\
                 try:\n    \
                     while True:\n        \
                         held.append(os.memfd_create('bomb'))\n        \
                         try:\n            \
                             while True:\n                \
                                 written += os.write(held[-1], chunk)\n        \
                         except OSError as e:\n            \
                             if e.errno != errno.EFBIG:\n                \
                                 raise\n\
                 except OSError as e:\n    \
                     r = errno.errorcode.get(e.errno, str(e.errno))\n\
                 json.dumps([r, written])";
    let call = s.exec("attacker", "memfd", memfd, &limits).await;
    println!("memfd bomb: {call:?}");
    match &call {
        Ok(call) => {
            // refused by the filter, or the write fails at the limit
            let seen = json(call);
            assert!(
                ["EPERM", "ENOSYS", "ENOMEM", "ENOSPC"].contains(&seen[0].as_str().unwrap()),
                "{seen}"
            );
            assert!(seen[1].as_u64().unwrap() <= 256 << 20, "{seen}");
            s.assert_survived("attacker", "memfd", "kept", "yes").await;
        }
        Err(_) => {
            let error = session_error(&call);
            assert!(
                matches!(error, SessionError::OutOfMemory { .. }),
                "expected out of memory, got {error:?}"
            );
            s.assert_fresh("attacker", "memfd", "kept").await;
        }
    }
    s.m.close_session("attacker", "memfd").await;
    traced.assert_gone().await;

    let tag = marker("shm");
    let first = s.ok("attacker", "shm", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    let shm = format!(
        "import errno, json, os\n\
         written = 0\n\
         try:\n    \
             with open('/dev/shm/{tag}', 'wb') as f:\n        \
                 chunk = b'x' * (1 << 20)\n        \
                 while True:\n            \
                     written += f.write(chunk)\n            \
                     f.flush()\n\
         except OSError as e:\n    \
             r = errno.errorcode.get(e.errno, str(e.errno))\n\
         st = os.statvfs('/dev/shm')\n\
         json.dumps([r, written, st.f_blocks * st.f_frsize, os.listdir('/dev/shm')])"
    );
    let call = s.ok("attacker", "shm", &shm, &limits).await;
    let seen = json(&call);
    // the file size limit is 64 MiB here too: whichever comes first
    assert!(seen[0] == "ENOSPC" || seen[0] == "EFBIG", "{seen}");
    assert_eq!(seen[2], 64 << 20, "{seen}");
    let more = "try:\n    open('/dev/shm/more', 'wb').write(b'x' * 65536)\n    r = 'ok'\n\
                except OSError as e:\n    r = errno.errorcode[e.errno]\nr";
    let call = s.ok("attacker", "shm", more, &limits).await;
    assert_eq!(text(&call), "'ENOSPC'");
    assert!(seen[1].as_u64().unwrap() <= 64 << 20, "{seen}");
    assert_eq!(seen[3], serde_json::json!([tag]), "{seen}");
    assert!(!std::path::Path::new("/dev/shm/more").exists());
    assert!(
        !std::path::Path::new("/dev/shm").join(&tag).exists(),
        "the session wrote to the host's /dev/shm"
    );
    // the full /dev/shm is the session's problem only: it goes on, and frees it
    s.assert_survived("attacker", "shm", "kept", "yes").await;
    s.ok(
        "attacker",
        "shm",
        &format!("import os\nos.remove('/dev/shm/{tag}')\nos.remove('/dev/shm/more')"),
        &limits,
    )
    .await;
    s.assert_healthy(zygote).await;
    assert!(s.m.close_session("attacker", "shm").await);
    traced.assert_gone().await;
    s.m.shutdown().await;
}

/// 10,000 threads: the pids limit refuses them inside the session (RuntimeError: can't start
/// new thread); the interpreter answers the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_threads_are_refused_at_the_pids_limit() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(30);
    let first = s.ok("attacker", "threads", "kept = 'yes'", &limits).await;
    let mut traced = Traced::of(first.pid);
    let watch = Watch::start(&traced);
    let bomb = "import threading\nstop = threading.Event()\nstarted = 0\n\
                for _ in range(10000):\n    \
                    threading.Thread(target=stop.wait, daemon=True).start()\n    \
                    started += 1";
    let call = s.exec("attacker", "threads", bomb, &limits).await.unwrap();
    let watched = watch.stop();
    traced.add(&watched);
    // (b)
    let error = call.outcome.error.as_ref().unwrap();
    assert_eq!(error.error_type, "RuntimeError", "{error:?}");
    assert!(
        error.message.contains("can't start new thread"),
        "{error:?}"
    );
    // (a)
    assert!(watched.max_pids <= 64, "{watched:?}");
    assert!(traced.pids_current() <= 64);
    let started = s.ok("attacker", "threads", "started", &limits).await;
    let started: u32 = text(&started).parse().unwrap();
    assert!(started > 0 && started < 64, "{started} threads started");
    // (c) the session lives, and gets its threads back
    s.assert_survived("attacker", "threads", "kept", "yes")
        .await;
    s.ok("attacker", "threads", "stop.set()", &limits).await;
    s.assert_healthy(zygote).await;
    // (d)
    assert!(s.m.close_session("attacker", "threads").await);
    traced.assert_gone().await;
    s.m.shutdown().await;
}

/// Opening descriptors until the per-process limit: EMFILE in the session, which keeps them
/// open and still answers (its own channel and output pipes were opened before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptor_exhaustion_ends_in_emfile_and_the_session_answers() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(30);
    let first = s.ok("attacker", "fds", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    let code = "import errno, json, os\nheld = []\n\
                try:\n    \
                    while True:\n        \
                        held.extend(os.pipe())\n\
                except OSError as e:\n    \
                    r = errno.errorcode[e.errno]\n\
                json.dumps([r, len(held)])";
    let call = s.ok("attacker", "fds", code, &limits).await;
    let seen = json(&call);
    assert_eq!(seen[0], "EMFILE", "{seen}");
    let held = seen[1].as_u64().unwrap();
    assert!((900..=1024).contains(&held), "{seen}");
    // still exhausted: the session answers anyway
    s.assert_survived("attacker", "fds", "kept", "yes").await;
    let full = s
        .ok(
            "attacker",
            "fds",
            "import errno\ntry:\n    os.dup(0)\n    r = 'ok'\nexcept OSError as e:\n    \
             r = errno.errorcode[e.errno]\nr",
            &limits,
        )
        .await;
    assert_eq!(text(&full), "'EMFILE'");
    s.assert_healthy(zygote).await;
    assert!(s.m.close_session("attacker", "fds").await);
    traced.assert_gone().await;
    s.m.shutdown().await;
}

/// Filling the disk: the workspace is a tmpfs of `workspace_bytes` (64 MiB here) with an inode
/// per 4 KiB, so one big file and many small ones both end in ENOSPC in the session; the host's
/// filesystem under the sessions root is not where the bytes went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filling_the_disk_fills_only_the_sessions_own_tmpfs() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(60);
    let first = s.ok("attacker", "disk", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    let workspace = first.workspace.clone();
    let host = rustix::fs::statvfs(s.dir.path()).unwrap();

    let one = "import errno, json, os\nwritten = 0\n\
               try:\n    \
                   with open('big', 'wb') as f:\n        \
                       chunk = b'x' * (1 << 20)\n        \
                       while True:\n            \
                           written += f.write(chunk)\n            \
                           f.flush()\n\
               except OSError as e:\n    \
                   r = errno.errorcode[e.errno]\n\
               json.dumps([r, written])";
    let call = s.ok("attacker", "disk", one, &limits).await;
    let seen = json(&call);
    // the file size limit of a hardened session is the workspace's size: whichever comes first
    assert!(seen[0] == "ENOSPC" || seen[0] == "EFBIG", "{seen}");
    assert!(seen[1].as_u64().unwrap() <= 64 << 20, "{seen}");
    // and then the workspace is full for any other file
    let more = "try:\n    open('more', 'wb').write(b'x' * 65536)\n    r = 'ok'\n\
                except OSError as e:\n    r = errno.errorcode[e.errno]\nr";
    let call = s.ok("attacker", "disk", more, &limits).await;
    assert_eq!(text(&call), "'ENOSPC'");
    // the host sees the session's tmpfs full, not its own disk
    let ws = rustix::fs::statvfs(&workspace).unwrap();
    assert_ne!(
        ws.f_fsid, host.f_fsid,
        "the workspace is not a filesystem of its own"
    );
    assert_eq!(ws.f_blocks * ws.f_frsize, 64 << 20);
    assert!(
        ws.f_bavail * ws.f_frsize < 1 << 20,
        "{} bytes free",
        ws.f_bavail * ws.f_frsize
    );
    let after = rustix::fs::statvfs(s.dir.path()).unwrap();
    let host_used = (host.f_bavail.saturating_sub(after.f_bavail)) * host.f_frsize;
    assert!(
        host_used < 32 << 20,
        "the host's filesystem lost {host_used} bytes"
    );

    let many = "import errno, json, os\nos.remove('big')\nos.remove('more')\nmade = 0\n\
                try:\n    \
                    os.mkdir('many')\n    \
                    while True:\n        \
                        open(f'many/{made}', 'w').close()\n        \
                        made += 1\n\
                except OSError as e:\n    \
                    r = errno.errorcode[e.errno]\n\
                json.dumps([r, made])";
    let call = s.ok("attacker", "disk", many, &limits).await;
    let seen = json(&call);
    assert_eq!(seen[0], "ENOSPC", "{seen}");
    // an inode per 4 KiB of the 64 MiB
    assert!(seen[1].as_u64().unwrap() <= 16384, "{seen}");
    let ws = rustix::fs::statvfs(&workspace).unwrap();
    assert!(ws.f_favail < 16, "{} inodes free", ws.f_favail);

    // (c) the session goes on (it can free its space), the service is fine
    s.assert_survived("attacker", "disk", "kept", "yes").await;
    s.ok(
        "attacker",
        "disk",
        "import shutil\nshutil.rmtree('many')",
        &limits,
    )
    .await;
    s.assert_healthy(zygote).await;
    // (d) and the workspace goes with the session
    assert!(s.m.close_session("attacker", "disk").await);
    traced.assert_gone().await;
    assert!(!workspace.exists());
    s.m.shutdown().await;
}

/// Huge output, by `print` and by raw `os.write(1, ...)` (no Python buffering): each stream keeps
/// its first 1 MiB, sets the truncation flag, and counts every byte written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_output_is_cut_at_one_mib_and_counted() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(60);
    let first = s.ok("attacker", "out", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    let cases = [
        // 200,000 lines of 99 x and a newline: 20,000,000 bytes
        (
            "for _ in range(200000):\n    print('x' * 99)",
            20_000_000u64,
            false,
        ),
        (
            "import os\nchunk = b'y' * 65536\nfor _ in range(320):\n    os.write(1, chunk)",
            320 * 65536,
            false,
        ),
        (
            "import os\nchunk = b'z' * 65536\nfor _ in range(320):\n    os.write(2, chunk)",
            320 * 65536,
            true,
        ),
    ];
    for (code, bytes, stderr) in cases {
        let call = s.ok("attacker", "out", code, &limits).await;
        let o = &call.outcome;
        let (kept, truncated, counted, other) = if stderr {
            (&o.stderr, o.stderr_truncated, o.stderr_bytes, &o.stdout)
        } else {
            (&o.stdout, o.stdout_truncated, o.stdout_bytes, &o.stderr)
        };
        assert!(truncated, "{code}");
        assert_eq!(counted, bytes, "{code}");
        assert!(
            kept.len() <= 1 << 20 && kept.len() >= (1 << 20) - 100,
            "{code}: {} bytes kept",
            kept.len()
        );
        assert!(other.is_empty(), "{code}");
    }
    // bash: the same cut for a command's output
    let call = s
        .bash(
            "attacker",
            "out",
            "head -c 50000000 /dev/zero | tr '\\0' a",
            &limits,
        )
        .await
        .unwrap();
    assert!(call.outcome.stdout_truncated);
    assert_eq!(call.outcome.stdout_bytes, 50_000_000);
    assert_eq!(call.outcome.stdout.len(), 1 << 20);
    s.assert_survived("attacker", "out", "kept", "yes").await;
    s.assert_healthy(zygote).await;
    assert!(s.m.close_session("attacker", "out").await);
    traced.assert_gone().await;
    s.m.shutdown().await;
}
