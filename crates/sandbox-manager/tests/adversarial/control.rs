//! The adversarial suite, part 2: attacks on the server's control of a session: endless loops,
//! ignored interrupts, signals aimed at the server and the zygote, daemons, crashes, deep
//! recursion, and forged frames on the session's own channel to the server. What each case
//! asserts, (a) to (d), is said in `adversarial.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use crate::harness::{
    HostProcess, KillMarked, Sandbox, Traced, assert_no_marker, error_type, json, marker,
    session_error, small, text, with_marker, within,
};
use toolgate_sandbox::Limits;
use toolgate_sandbox_manager::{Interruption, KillReason, SessionError};

/// `while True: pass`: the time limit interrupts it (KeyboardInterrupt, `interrupted` says
/// why) and the session keeps its variables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_loop_is_interrupted_at_the_time_limit() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(2);
    let first = s.ok("attacker", "loop", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    let start = Instant::now();
    let call = s
        .exec("attacker", "loop", "while True:\n    pass", &limits)
        .await
        .unwrap();
    let took = start.elapsed();
    assert_eq!(error_type(&call), "KeyboardInterrupt", "{:?}", call.outcome);
    assert_eq!(call.outcome.interrupted, Some(Interruption::Timeout));
    // not before its limit (the interruption says it was the limit; no speed is asserted)
    assert!(took >= Duration::from_secs(2), "{took:?}");
    s.assert_survived("attacker", "loop", "kept", "yes").await;
    assert_eq!(HostProcess::of(first.pid), Some(traced.session));
    s.assert_healthy(zygote).await;
    assert!(s.m.close_session("attacker", "loop").await);
    traced.assert_gone().await;
    s.m.shutdown().await;
}

/// Code that ignores SIGINT (and SIGTERM, which a pid 1 never gets anyway), or swallows every
/// KeyboardInterrupt, is killed once the grace after the interrupt has passed: a clear
/// "killed after its time limit" error, and the next call is fresh. A bash command that traps
/// SIGINT and SIGTERM is killed by its own time limit (SIGKILL to its group); the interpreter
/// survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_that_ignores_interrupts_is_killed_after_the_grace() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(2);
    let ignoring = [
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
        "import signal\nfor sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):\n    \
         signal.signal(sig, signal.SIG_IGN)\nwhile True:\n    pass",
        "while True:\n    try:\n        while True:\n            pass\n    \
         except KeyboardInterrupt:\n        pass",
    ];
    // in parallel: each one costs the limit and the grace
    tokio::join!(
        ignores_interrupts(&s, "ignore0", ignoring[0], &limits),
        ignores_interrupts(&s, "ignore1", ignoring[1], &limits),
        ignores_interrupts(&s, "ignore2", ignoring[2], &limits),
    );

    let first = s.ok("attacker", "bash", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    let tag = marker("trap");
    let _cleanup = KillMarked(tag.clone());
    let trap = format!("trap '' INT TERM HUP; while :; do :; done # {tag}");
    let call = s.bash("attacker", "bash", &trap, &limits).await.unwrap();
    assert!(call.outcome.timed_out, "{:?}", call.outcome);
    assert_eq!(error_type(&call), "Timeout");
    assert_eq!(call.outcome.signal.as_deref(), Some("SIGKILL"));
    assert_no_marker(&tag).await;
    s.assert_survived("attacker", "bash", "kept", "yes").await;
    s.assert_healthy(zygote).await;
    assert!(s.m.close_session("attacker", "bash").await);
    traced.assert_gone().await;
    s.m.shutdown().await;
}

/// Runs `code`, which ignores interrupts, in a new session `id`: it must be killed after the
/// limit and the grace, with nothing left of it, and its next call must be fresh.
async fn ignores_interrupts(s: &Sandbox, id: &str, code: &str, limits: &Limits) {
    let first = s.ok("attacker", id, "kept = 'yes'", limits).await;
    let traced = Traced::of(first.pid);
    let start = Instant::now();
    let killed = s.exec("attacker", id, code, limits).await;
    let took = start.elapsed();
    let error = session_error(&killed);
    let SessionError::Killed { reason, .. } = error else {
        panic!("{code}: expected a kill, got {error:?}");
    };
    assert_eq!(*reason, KillReason::Timeout);
    let message = error.to_string();
    assert!(
        message.contains("time limit of 2 s") && message.contains("SIGKILL"),
        "{message}"
    );
    // 2 s limit + 2 s grace: not before (the kill reason says it was the limit)
    assert!(took >= Duration::from_secs(4), "{code}: {took:?}");
    traced.assert_gone().await;
    s.assert_fresh("attacker", id, "kept").await;
    assert!(s.m.close_session("attacker", id).await);
}

/// Signals aimed outside: the server (this test process) and the zygote are not even visible
/// in the session's pid namespace (ESRCH); `kill(-1, SIGKILL)` reaches only the session's own
/// processes; `kill(0, SIGKILL)` (the process group the session shares with the server on the
/// host) reaches none of them. The test process, the zygote, a host process of the same
/// process group and another session all survive, and so does the attacker's session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_cannot_reach_the_server_the_zygote_or_other_sessions() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(10);
    let me = std::process::id();
    let tag = marker("bystander");
    let _cleanup = KillMarked(tag.clone());
    // a host process of the same process group as this test (and so as the zygote)
    let mut host = std::process::Command::new("/bin/sleep")
        .arg0(&tag)
        .arg("600")
        .spawn()
        .unwrap();
    let host_pid = i32::try_from(host.id()).unwrap();
    // another session, of another account
    let victim = s.ok("victim", "v", "kept = 'yes'", &limits).await;
    let victim_traced = Traced::of(victim.pid);

    let first = s.ok("attacker", "kill", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    let code = format!(
        "import errno, json, os, signal, subprocess\n\
         def kill(pid, sig=signal.SIGKILL):\n    \
             try:\n        \
                 os.kill(pid, sig)\n        \
                 return 'sent'\n    \
             except OSError as e:\n        \
                 return errno.errorcode[e.errno]\n\
         child = subprocess.Popen(['sleep', '600'])\n\
         seen = {{\n    \
             'server': kill({me}),\n    \
             'server_term': kill({me}, signal.SIGTERM),\n    \
             'zygote': kill({zygote}),\n    \
             'host': kill({host_pid}),\n    \
             'victim': kill({victim}),\n    \
             'all': kill(-1),\n    \
             'group': kill(0),\n    \
             'self': kill(1),\n\
         }}\n\
         seen['own_child'] = child.wait()\n\
         seen['ppid'] = os.getppid()\n\
         json.dumps(seen)",
        victim = victim.pid,
    );
    let call = s.ok("attacker", "kill", &code, &limits).await;
    let seen = json(&call);
    for target in ["server", "server_term", "zygote", "host", "victim"] {
        assert_eq!(seen[target], "ESRCH", "{target}: {seen}");
    }
    // -1: every process the caller may signal in its namespace, which is its own child only
    assert_eq!(seen["all"], "sent", "{seen}");
    assert_eq!(seen["own_child"], -9, "{seen}");
    assert_eq!(seen["ppid"], 0, "{seen}");
    // 0: the session's process group on the host is the server's (and the zygote's): the kernel
    // sends to each member it may, which is none of them but the session itself, and a pid 1
    // ignores SIGKILL from inside its own namespace
    assert!(
        seen["group"] == "sent" || seen["group"] == "EPERM",
        "{seen}"
    );
    assert_eq!(seen["self"], "sent", "{seen}");

    // bash's kill, too
    let call = s
        .bash(
            "attacker",
            "kill",
            &format!("kill -9 {me} {zygote} {host_pid}; echo status=$?; kill -9 -1; echo after"),
            &limits,
        )
        .await
        .unwrap();
    assert!(
        call.outcome.stderr.contains("No such process"),
        "{:?}",
        call.outcome
    );
    assert!(
        call.outcome.stdout.contains("status=1"),
        "{:?}",
        call.outcome
    );

    // (a) everything outside is still there
    assert!(host.try_wait().unwrap().is_none(), "the host process died");
    assert!(victim_traced.session.exists(), "the other session died");
    s.assert_survived("victim", "v", "kept", "yes").await;
    // (c)
    s.assert_survived("attacker", "kill", "kept", "yes").await;
    s.assert_healthy(zygote).await;
    // (d)
    assert!(s.m.close_session("attacker", "kill").await);
    traced.assert_gone().await;
    host.kill().unwrap();
    host.wait().unwrap();
    s.m.shutdown().await;
}

/// A daemon: double fork, `setsid`, SIGHUP and SIGTERM ignored, exec. It outlives its call (on
/// purpose: a cell may start a server for the next one) but not its session. The same from bash
/// with `setsid nohup ... &`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_daemon_dies_with_its_session() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(10);
    let tag = marker("daemon");
    let _cleanup = KillMarked(tag.clone());
    let first = s.ok("attacker", "daemon", "kept = 'yes'", &limits).await;
    let mut traced = Traced::of(first.pid);
    let daemon = format!(
        "import os, signal\n\
         if os.fork() == 0:\n    \
             os.setsid()\n    \
             signal.signal(signal.SIGHUP, signal.SIG_IGN)\n    \
             signal.signal(signal.SIGTERM, signal.SIG_IGN)\n    \
             if os.fork() == 0:\n        \
                 os.execv('/bin/sleep', ['{tag}-py', '600'])\n    \
             os._exit(0)\n\
         os.wait()\n\
         'started'"
    );
    let call = s.ok("attacker", "daemon", &daemon, &limits).await;
    assert_eq!(text(&call), "'started'");
    let call = s
        .bash(
            "attacker",
            "daemon",
            &format!("setsid nohup bash -c 'exec -a {tag}-sh sleep 600' >/dev/null 2>&1 &"),
            &limits,
        )
        .await
        .unwrap();
    assert_eq!(call.outcome.exit_status, Some(0), "{:?}", call.outcome);
    within(Duration::from_secs(5), "both daemons run", || {
        with_marker(&tag).len() == 2
    })
    .await;
    let daemons = with_marker(&tag);
    traced.look();
    for pid in &daemons {
        assert!(
            traced.members().contains(pid),
            "daemon {pid} left the group"
        );
    }
    s.assert_survived("attacker", "daemon", "kept", "yes").await;
    s.assert_healthy(zygote).await;
    assert!(s.m.close_session("attacker", "daemon").await);
    assert_no_marker(&tag).await;
    traced.assert_gone().await;
    s.m.shutdown().await;
}

/// A segfault (`ctypes.string_at(0)`) kills the interpreter: the caller is told it was killed
/// by SIGSEGV, without a core file, and the next call is fresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segfault_is_named_and_the_next_call_is_fresh() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(10);
    let first = s.ok("attacker", "segv", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    let died = s
        .exec(
            "attacker",
            "segv",
            "import ctypes\nctypes.string_at(0)",
            &limits,
        )
        .await;
    let error = session_error(&died);
    let SessionError::Died(info) = error else {
        panic!("expected a death, got {error:?}");
    };
    assert_eq!(info.signal.as_deref(), Some("SIGSEGV"));
    assert!(!info.core_dumped);
    assert!(
        error.to_string().contains("killed by signal SIGSEGV"),
        "{error}"
    );
    traced.assert_gone().await;
    s.assert_fresh("attacker", "segv", "kept").await;
    s.assert_healthy(zygote).await;
    assert!(s.m.close_session("attacker", "segv").await);
    s.m.shutdown().await;
}

/// Deep recursion: RecursionError at the default limit (the session lives on); with the limit
/// raised to 10**6, Python recursion and C recursion (`repr` of a deeply nested list) end in an
/// exception, an out-of-memory kill or a stack overflow (SIGSEGV), each reported as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_recursion_ends_in_a_clear_error() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(20);
    let first = s.ok("attacker", "rec", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    let call = s
        .exec(
            "attacker",
            "rec",
            "def f(n):\n    return f(n + 1)\nf(0)",
            &limits,
        )
        .await
        .unwrap();
    assert_eq!(error_type(&call), "RecursionError");
    s.assert_survived("attacker", "rec", "kept", "yes").await;
    s.m.close_session("attacker", "rec").await;
    traced.assert_gone().await;

    let deep = [
        "import sys\nsys.setrecursionlimit(10**6)\ndef f(n):\n    return f(n + 1)\nf(0)",
        "import sys\nsys.setrecursionlimit(10**6)\nnested = []\nfor _ in range(10**6):\n    \
         nested = [nested]\nrepr(nested)",
    ];
    for (i, code) in deep.iter().enumerate() {
        let id = format!("deep{i}");
        let first = s.ok("attacker", &id, "kept = 'yes'", &limits).await;
        let traced = Traced::of(first.pid);
        match s.exec("attacker", &id, code, &limits).await {
            Ok(call) => {
                assert!(
                    ["RecursionError", "MemoryError"].contains(&error_type(&call)),
                    "{code}: {:?}",
                    call.outcome
                );
                s.assert_survived("attacker", &id, "kept", "yes").await;
            }
            Err(e) => {
                let died = Err(e);
                let error = session_error(&died);
                let named = match error {
                    SessionError::Died(info) => info.signal.as_deref() == Some("SIGSEGV"),
                    SessionError::OutOfMemory { .. } => true,
                    _ => false,
                };
                assert!(named, "{code}: {error:?}");
                traced.assert_gone().await;
                s.assert_fresh("attacker", &id, "kept").await;
            }
        }
        s.m.close_session("attacker", &id).await;
        traced.assert_gone().await;
    }
    s.assert_healthy(zygote).await;
    s.m.shutdown().await;
}

/// The peak virtual memory of this process (`VmPeak`), in bytes.
fn vm_peak() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmPeak:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// The session's own socket to the server is an inherited descriptor: code can find it and write
/// forged frames on it. A forged length of 2^31 (or 2^32-1, or one byte over the limit) is
/// refused before anything is allocated, and so is a frame that is not JSON: the session is
/// killed with a protocol error, during a call or between calls, and the service is fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_frames_on_the_session_channel_kill_only_that_session() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(10);
    let find = "import json, os, struct, threading, time\n\
                def link(fd):\n    \
                    try:\n        \
                        return os.readlink(f'/proc/self/fd/{fd}')\n    \
                    except OSError:\n        \
                        return ''\n\
                sockets = [int(fd) for fd in os.listdir('/proc/self/fd')\n           \
                           if link(fd).startswith('socket:')]\n\
                assert len(sockets) == 1, sockets\n\
                channel = sockets[0]\n";
    let garbage = "b'{\"op\": \"result\", \"id\": 1, garbage' * 64";
    let forged = [
        (
            "length 2^31",
            format!("struct.pack('>I', 2**31) + {garbage}"),
        ),
        (
            "length 2^32-1",
            format!("struct.pack('>I', 2**32 - 1) + {garbage}"),
        ),
        (
            "64 MiB + 1",
            format!("struct.pack('>I', (64 << 20) + 1) + {garbage}"),
        ),
        (
            "not JSON",
            "struct.pack('>I', 11) + b'not json!!!'".to_owned(),
        ),
        ("not a frame", "struct.pack('>I', 2) + b'[]'".to_owned()),
    ];
    let peak = vm_peak();
    for (i, (what, bytes)) in forged.iter().enumerate() {
        let id = format!("forge{i}");
        let first = s
            .ok("attacker", &id, &format!("{find}kept = 'yes'"), &limits)
            .await;
        let traced = Traced::of(first.pid);
        let start = Instant::now();
        let code = format!("os.write(channel, {bytes})\ntime.sleep(30)");
        let killed = s.exec("attacker", &id, &code, &limits).await;
        let error = session_error(&killed);
        assert!(
            matches!(
                error,
                SessionError::Killed {
                    reason: KillReason::Protocol,
                    ..
                }
            ),
            "{what}: {error:?}"
        );
        assert!(error.to_string().contains("protocol"), "{what}: {error}");
        // killed, not left to sleep its 30 s (no speed is asserted)
        assert!(start.elapsed() < Duration::from_secs(20), "{what}");
        traced.assert_gone().await;
        s.assert_fresh("attacker", &id, "kept").await;
        assert!(s.m.close_session("attacker", &id).await);
    }
    // between calls: a thread writes the forged length after the call has returned
    let first = s
        .ok("attacker", "late", &format!("{find}kept = 'yes'"), &limits)
        .await;
    let traced = Traced::of(first.pid);
    let late = format!(
        "def forge():\n    time.sleep(0.5)\n    os.write(channel, {})\n\
         threading.Thread(target=forge).start()\n'returned'",
        forged[0].1
    );
    let call = s.ok("attacker", "late", &late, &limits).await;
    assert_eq!(text(&call), "'returned'");
    // killed when it is seen to keep its socket open after the broken frame; its (empty) groups
    // stay until the session is retired (its next call makes new ones of the same name)
    traced.assert_processes_gone().await;
    s.assert_fresh("attacker", "late", "kept").await;
    assert!(s.m.close_session("attacker", "late").await);
    traced.assert_gone().await;

    // nothing of 2 GiB or 4 GiB was ever reserved here (thread stacks and malloc arenas of a
    // busy test process stay well below)
    let grown = vm_peak().saturating_sub(peak);
    assert!(grown < 1536 << 20, "VmPeak grew by {grown} bytes");
    s.assert_healthy(zygote).await;
    s.m.shutdown().await;
}
