//! Sessions by the manager: persistence, isolation between accounts and ids, the per-account
//! cap, time limits, cancellation, streaming, per-run environments (expiry, a dead zygote and
//! shutdown are in `lifecycle.rs`).

// The helpers are test code too: a panic is how they report failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{error_type, eventually, limits, manager, process_gone, text};

use sha2::{Digest, Sha256};
use toolgate_sandbox_manager::{
    Interruption, KillReason, ManagerError, OutputChunk, OutputStream, RequestKind, RunOutcome,
    SandboxManager, SessionError,
};

pub(crate) async fn exec(
    m: &SandboxManager,
    account: &str,
    id: Option<&str>,
    code: &str,
) -> RunOutcome {
    m.exec(account, id, code, &limits(30), &[], None)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variables_persist_per_session_and_accounts_are_apart() {
    let root = tempfile::tempdir().unwrap();
    // no warm sessions: the place checked below is that of a session made for its id (a warm
    // session's is its own, see warm.rs)
    let m = manager(root.path(), |c| c.warm_sessions = 0).await;
    let first = exec(&m, "acct-a", Some("s1"), "x = 41").await;
    assert!(first.fresh && !first.expired);
    let second = exec(&m, "acct-a", Some("s1"), "x + 1").await;
    assert_eq!(text(&second), "42");
    assert!(!second.fresh);
    assert_eq!(second.pid, first.pid);

    // the same id in another account is another session
    let other = exec(&m, "acct-b", Some("s1"), "x").await;
    assert!(other.fresh);
    assert_eq!(error_type(&other), "NameError");
    assert_ne!(other.pid, first.pid);

    // the workspace is <root>/<account>/<sha256 of the id>, private, and the cwd of the code
    let hashed = hex::encode(Sha256::digest(b"s1"));
    assert_eq!(first.workspace, root.path().join("acct-a").join(&hashed));
    let mode = std::fs::metadata(&first.workspace)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    let cwd = exec(&m, "acct-a", Some("s1"), "import os; os.getcwd()").await;
    assert_eq!(text(&cwd), format!("'{}'", first.workspace.display()));
    m.shutdown().await;
    assert!(
        !first.workspace.exists(),
        "the workspace outlived the session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_session_id_every_call_is_fresh() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    let first = exec(&m, "acct", None, "y = 1; open('f.txt', 'w').write('x')").await;
    assert!(first.fresh && first.outcome.error.is_none());
    let second = exec(&m, "acct", None, "y").await;
    assert!(second.fresh);
    assert_eq!(error_type(&second), "NameError");
    assert_ne!(first.workspace, second.workspace);
    eventually("one-off sessions closed", || m.live_sessions("acct") == 0).await;
    eventually("one-off workspaces removed", || {
        !first.workspace.exists() && !second.workspace.exists()
    })
    .await;
    eventually("one-off processes gone", || {
        process_gone(first.pid) && process_gone(second.pid)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notebook_values_and_exceptions() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    assert_eq!(text(&exec(&m, "a", Some("s"), "1+1").await), "2");
    assert_eq!(text(&exec(&m, "a", Some("s"), "a = 3\na * 2").await), "6");
    let hidden = exec(&m, "a", Some("s"), "a * 2;").await;
    assert!(hidden.outcome.result.is_none());
    let failed = exec(&m, "a", Some("s"), "print('hi')\n1/0").await;
    assert_eq!(failed.outcome.stdout, "hi\n");
    assert_eq!(failed.outcome.kind, RequestKind::Exec);
    let error = failed.outcome.error.as_ref().unwrap();
    assert_eq!(error.error_type, "ZeroDivisionError");
    assert_eq!(error.message, "division by zero");
    assert!(
        error
            .traceback
            .contains("ZeroDivisionError: division by zero")
    );
    assert!(error.traceback.contains("<cell"), "{}", error.traceback);
    // the session survives an exception
    assert_eq!(text(&exec(&m, "a", Some("s"), "a").await), "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_interrupts_and_the_session_keeps_its_variables() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    exec(&m, "a", Some("s"), "v = 7").await;
    let start = Instant::now();
    let looped = m
        .exec("a", Some("s"), "while True: pass", &limits(1), &[], None)
        .await
        .unwrap();
    let took = start.elapsed();
    assert_eq!(error_type(&looped), "KeyboardInterrupt");
    assert_eq!(looped.outcome.interrupted, Some(Interruption::Timeout));
    // not before its limit; and it did end (the loop never would): no speed is asserted
    assert!(took >= Duration::from_secs(1), "{took:?}");
    let after = exec(&m, "a", Some("s"), "v").await;
    assert_eq!(text(&after), "7");
    assert!(!after.fresh);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_that_ignores_sigint_is_killed_after_the_grace() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    let before = exec(&m, "a", Some("s"), "w = 1").await;
    let code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass";
    let start = Instant::now();
    let killed = m.exec("a", Some("s"), code, &limits(1), &[], None).await;
    let took = start.elapsed();
    let Err(ManagerError::Session(error @ SessionError::Killed { reason, .. })) = &killed else {
        panic!("expected a timeout kill, got {killed:?}");
    };
    assert_eq!(*reason, KillReason::Timeout);
    let message = error.to_string();
    assert!(
        message.contains("time limit of 1 s") && message.contains("killed"),
        "{message}"
    );
    // 1 s limit + 2 s grace, then SIGKILL: not before (the loop alone never ends)
    assert!(took >= Duration::from_secs(3), "{took:?}");
    eventually("killed session reaped", || process_gone(before.pid)).await;
    assert_eq!(m.live_sessions("a"), 0);
    let next = exec(&m, "a", Some("s"), "w").await;
    assert!(next.fresh);
    assert_eq!(error_type(&next), "NameError");
    assert_eq!(text(&exec(&m, "b", Some("s"), "2*21").await), "42");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_killed_by_a_signal_is_named_and_the_next_call_is_fresh() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    let before = exec(&m, "a", Some("s"), "u = 1").await;
    let died = m
        .exec(
            "a",
            Some("s"),
            "import os; os.kill(os.getpid(), 9)",
            &limits(10),
            &[],
            None,
        )
        .await;
    let Err(ManagerError::Session(SessionError::Died(info))) = &died else {
        panic!("expected a death, got {died:?}");
    };
    assert_eq!(info.signal.as_deref(), Some("SIGKILL"));
    assert_eq!(info.pid, before.pid);
    let message = died.unwrap_err().to_string();
    assert!(message.contains("killed by signal SIGKILL"), "{message}");
    assert!(!before.workspace.exists());
    let next = exec(&m, "a", Some("s"), "u").await;
    assert!(next.fresh);
    assert_eq!(error_type(&next), "NameError");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_reports_exit_status_and_output_in_the_shared_workspace() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    exec(
        &m,
        "a",
        Some("s"),
        "open('note.txt', 'w').write('from python')",
    )
    .await;
    let run = m
        .bash(
            "a",
            Some("s"),
            "cat note.txt; echo; echo err >&2; exit 3",
            &limits(10),
            &[],
            None,
        )
        .await
        .unwrap();
    assert_eq!(run.outcome.kind, RequestKind::Bash);
    assert_eq!(run.outcome.exit_status, Some(3));
    assert_eq!(run.outcome.stdout, "from python\n");
    assert_eq!(run.outcome.stderr, "err\n");
    assert!(!run.fresh);
    let timed = m
        .bash("a", Some("s"), "sleep 30", &limits(1), &[], None)
        .await
        .unwrap();
    assert!(timed.outcome.timed_out);
    assert_eq!(error_type(&timed), "Timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_output_arrives_while_the_code_runs() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    // the code waits for a file that the test writes only once it has seen the first chunk:
    // without streaming, the code would give up waiting and say so
    let opened = exec(&m, "a", Some("s"), "1").await;
    let go = opened.workspace.join("go");
    let mut chunks: Vec<OutputChunk> = Vec::new();
    let mut on_output = |chunk: OutputChunk| {
        if chunks.is_empty() {
            std::fs::write(&go, "").unwrap();
        }
        chunks.push(chunk);
    };
    let code = "import os, time\nprint(0, flush=True)\nfor _ in range(2000):\n    \
                if os.path.exists('go'):\n        break\n    time.sleep(0.01)\n\
                print(1, flush=True)\nos.path.exists('go')";
    let call = m
        .exec("a", Some("s"), code, &limits(60), &[], Some(&mut on_output))
        .await
        .unwrap();
    assert_eq!(
        text(&call),
        "True",
        "the first chunk did not arrive while the code ran"
    );
    assert_eq!(call.outcome.stdout, "0\n1\n");
    let streamed: String = chunks
        .iter()
        .filter(|c| c.stream == OutputStream::Stdout)
        .map(|c| c.data.as_str())
        .collect();
    assert_eq!(streamed, "0\n1\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_has_a_cap_on_live_sessions() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |c| c.max_sessions_per_account = 2).await;
    exec(&m, "a", Some("s1"), "1").await;
    exec(&m, "a", Some("s2"), "1").await;
    let refused = m.exec("a", Some("s3"), "1", &limits(5), &[], None).await;
    let Err(error @ ManagerError::TooManySessions { limit: 2, .. }) = &refused else {
        panic!("expected the cap, got {refused:?}");
    };
    assert!(
        error.to_string().contains("already has 2 live sessions"),
        "{error}"
    );
    assert!(matches!(
        m.exec("a", None, "1", &limits(5), &[], None).await,
        Err(ManagerError::TooManySessions { .. })
    ));
    // existing sessions and other accounts are unaffected
    exec(&m, "a", Some("s1"), "1").await;
    exec(&m, "b", Some("s3"), "1").await;
    assert!(m.close_session("a", "s1").await);
    assert!(exec(&m, "a", Some("s3"), "1").await.fresh);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_calls_on_twenty_sessions() {
    let root = tempfile::tempdir().unwrap();
    let m = Arc::new(manager(root.path(), |c| c.max_sessions_per_account = 20).await);
    let mut tasks = Vec::new();
    for i in 0..20 {
        let m = Arc::clone(&m);
        tasks.push(tokio::spawn(async move {
            // each cell reports when it ran, by the clock the host shares
            let code = format!(
                "import time\nt = time.time()\ntime.sleep(2)\nn = {i}\nf'{{t}} {{time.time()}}'"
            );
            let call = m
                .exec("a", Some(&format!("s{i}")), &code, &limits(30), &[], None)
                .await
                .unwrap();
            let shown = text(&call).trim_matches('\'').to_owned();
            let (began, ended) = shown.split_once(' ').unwrap();
            (began.parse::<f64>().unwrap(), ended.parse::<f64>().unwrap())
        }));
    }
    let mut spans = Vec::new();
    for task in tasks {
        spans.push(task.await.unwrap());
    }
    // all twenty ran at once: the last to begin began before the first to end ended (one
    // after another, no two would overlap); no speed is asserted
    let last_start = spans.iter().map(|s| s.0).fold(f64::MIN, f64::max);
    let first_end = spans.iter().map(|s| s.1).fold(f64::MAX, f64::min);
    assert!(
        last_start < first_end,
        "the calls did not all run at once: {spans:?}"
    );
    assert_eq!(m.live_sessions("a"), 20);
    for i in 0..20 {
        let call = exec(&m, "a", Some(&format!("s{i}")), "n").await;
        assert_eq!(text(&call), i.to_string());
    }
    m.shutdown().await;
}

/// Calls without a session id one after another: each one's session is cleaned up in the
/// background once it has answered, and must not count against the account meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_off_calls_back_to_back_never_hit_the_session_limit() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |c| c.max_sessions_per_account = 1).await;
    for i in 0..20 {
        let call = m
            .exec("a", None, &format!("{i}"), &limits(30), &[], None)
            .await
            .unwrap_or_else(|e| panic!("call {i}: {e}"));
        assert_eq!(text(&call), i.to_string());
    }
    m.shutdown().await;
}

/// A run's environment (how secrets will reach code) is the run's only: Python and bash see it,
/// the next run in the same session does not; bad names, NUL bytes and floods are refused
/// before anything runs, without echoing a value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_environment_is_that_runs_only() {
    use std::collections::BTreeMap;
    use toolgate_sandbox_manager::{RunRequest, Work};

    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    let env = BTreeMap::from([("TG_RUN_VALUE".to_owned(), "s3cret-value".to_owned())]);
    let ten = limits(10);
    let with_env = |work: Work| RunRequest {
        env: env.clone(),
        ..RunRequest::new("a", Some("s".to_owned()), work, ten.clone())
    };
    let code = "import os\nos.environ.get('TG_RUN_VALUE')".to_owned();
    let python = m.run(with_env(Work::Python { code })).await.unwrap();
    assert_eq!(text(&python), "'s3cret-value'");
    let command = "echo \"[$TG_RUN_VALUE]\"".to_owned();
    let bash = m.run(with_env(Work::Bash { command })).await.unwrap();
    assert_eq!(bash.outcome.stdout, "[s3cret-value]\n");
    let after = exec(&m, "a", Some("s"), "os.environ.get('TG_RUN_VALUE', 'gone')").await;
    assert_eq!(
        text(&after),
        "'gone'",
        "the next run still saw the variable"
    );

    let nul = BTreeMap::from([("OK_NAME".to_owned(), "a\0b".to_owned())]);
    let bad_name = BTreeMap::from([("1BAD".to_owned(), "hidden-value".to_owned())]);
    let flood: BTreeMap<String, String> =
        (0..65).map(|i| (format!("V{i}"), String::new())).collect();
    for bad in [&nul, &bad_name, &flood] {
        let refused = m
            .run(RunRequest {
                env: bad.clone(),
                ..RunRequest::new(
                    "a",
                    Some("s".to_owned()),
                    Work::Python { code: "1".into() },
                    ten.clone(),
                )
            })
            .await;
        let Err(error @ ManagerError::InvalidEnv(_)) = &refused else {
            panic!("expected an invalid environment, got {refused:?}");
        };
        assert!(!error.to_string().contains("hidden-value"), "{error}");
    }
}

/// A run that asks for the session as it lives never starts one: not for an id never used,
/// not for one closed or expired, not without an id; in a live session it runs as usual.
#[tokio::test]
async fn an_existing_only_run_never_starts_a_session() {
    use toolgate_sandbox_manager::{RunRequest, Work};

    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    let only = |id: Option<&str>| RunRequest {
        existing_only: true,
        ..RunRequest::new(
            "a",
            id.map(str::to_owned),
            Work::Python { code: "x".into() },
            limits(10),
        )
    };
    for id in [Some("never"), None] {
        let refused = m.run(only(id)).await;
        assert!(
            matches!(refused, Err(ManagerError::NoSuchSession)),
            "{id:?}: {refused:?}"
        );
    }
    assert_eq!(m.live_sessions("a"), 0, "a refused run started nothing");
    exec(&m, "a", Some("s"), "x = 41").await;
    let ran = m.run(only(Some("s"))).await.unwrap();
    assert_eq!(text(&ran), "41");
    assert!(m.close_session("a", "s").await);
    let refused = m.run(only(Some("s"))).await;
    assert!(
        matches!(refused, Err(ManagerError::NoSuchSession)),
        "{refused:?}"
    );
    assert_eq!(m.live_sessions("a"), 0);
}
