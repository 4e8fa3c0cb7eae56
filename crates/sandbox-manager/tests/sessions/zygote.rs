//! A zygote and its sessions used directly, without the manager: start-up, cancellation, the
//! clean environment, closing. Same runtime as `sessions.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::common::{limits, process_gone, zygote_config};
use tokio_util::sync::CancellationToken;
use toolgate_sandbox_manager::{
    Interruption, KillReason, OutputChunk, SessionError, Work, Zygote, ZygoteError,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_directly_from_the_zygote_with_cancellation() {
    let dir = tempfile::tempdir().unwrap();
    let zygote = Zygote::start(zygote_config(Some(vec![]))).await.unwrap();
    assert!(zygote.hello().python.starts_with("3."));
    let session = zygote
        .fork_session("direct", dir.path(), None)
        .await
        .unwrap();
    let pid = session.pid();

    // the environment is clean: nothing of this process's leaks in
    let env = session
        .exec("import os; sorted(os.environ)", &limits(5), None)
        .await
        .unwrap();
    let keys = env.result.unwrap().text_plain;
    assert!(!keys.contains("CARGO"), "{keys}");

    // a cancellation token interrupts once the code runs (it says so), and the session lives on
    session.exec("q = 5", &limits(5), None).await.unwrap();
    let token = CancellationToken::new();
    let cancel = token.clone();
    let mut on_output = |_: OutputChunk| cancel.cancel();
    let request = toolgate_sandbox_manager::Work::Python {
        code: "print('running', flush=True)\nwhile True: pass".to_owned(),
    };
    let cancelled = session
        .run(request, &limits(30), Some(&mut on_output), Some(&token))
        .await
        .unwrap();
    assert_eq!(cancelled.interrupted, Some(Interruption::Cancelled));
    assert_eq!(cancelled.error.unwrap().error_type, "KeyboardInterrupt");

    // so does dropping the call's future, once the code runs
    let (started, running) = tokio::sync::oneshot::channel::<()>();
    let mut started = Some(started);
    let mut on_output = |_: OutputChunk| {
        if let Some(started) = started.take() {
            let _ = started.send(());
        }
    };
    let request = toolgate_sandbox_manager::Work::Python {
        code: "print('running', flush=True)\nwhile True: pass".to_owned(),
    };
    let long = limits(30);
    tokio::select! {
        ended = session.run(request, &long, Some(&mut on_output), None) => {
            panic!("an endless loop ended: {ended:?}")
        }
        _ = running => {}
    }
    // the loop was interrupted, not left to its 30 s limit (no speed is asserted)
    let start = Instant::now();
    let value = session.exec("q", &limits(5), None).await.unwrap();
    assert_eq!(value.result.unwrap().text_plain, "5");
    assert!(start.elapsed() < Duration::from_secs(20));

    let bash = session.bash("echo $HOME", &limits(5), None).await.unwrap();
    assert_eq!(bash.stdout.trim(), dir.path().to_str().unwrap());
    session.close().await;
    assert!(process_gone(pid), "a closed session left its process");
    zygote.shutdown().await;
    assert!(!zygote.is_alive());
    assert!(process_gone(zygote.pid()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_runtime_fails_to_start_and_says_why() {
    let mut config = zygote_config(Some(vec![]));
    config.script = "/nonexistent/toolgate_zygote.py".into();
    let started = Zygote::start(config).await;
    let Err(error @ ZygoteError::StartupFailed(..)) = &started else {
        panic!("expected a start-up failure, got {started:?}");
    };
    let message = error.to_string();
    assert!(message.contains("exited with status 2"), "{message}");
    assert!(message.contains("can't open file"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_at_any_moment_leaves_the_session_alive() {
    let dir = tempfile::tempdir().unwrap();
    let zygote = Zygote::start(zygote_config(Some(vec![]))).await.unwrap();
    let session = zygote.fork_session("c", dir.path(), None).await.unwrap();
    session.exec("q = 5", &limits(5), None).await.unwrap();
    // a SIGINT that lands before the code starts is ignored by the session; the interrupt is
    // repeated within the grace, so none of these may end in a kill
    for delay_us in [0u64, 50, 200, 1000, 3000, 10_000] {
        let token = CancellationToken::new();
        let cancel = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_micros(delay_us)).await;
            cancel.cancel();
        });
        let request = Work::Python {
            code: "while True: pass".to_owned(),
        };
        match session.run(request, &limits(30), None, Some(&token)).await {
            Ok(outcome) => assert_eq!(outcome.interrupted, Some(Interruption::Cancelled)),
            Err(SessionError::Cancelled) => {}
            Err(other) => panic!("cancelled after {delay_us} µs: {other}"),
        }
        assert!(session.is_alive());
    }
    let value = session.exec("q", &limits(5), None).await.unwrap();
    assert_eq!(value.result.unwrap().text_plain, "5");
}

/// The session socket's descriptor number inside the child (the only socket it has).
const FIND_SOCKET: &str = "import os, stat\n\
def _sock():\n    for fd in range(3, 256):\n        try:\n            if stat.S_ISSOCK(os.fstat(fd).st_mode):\n                return fd\n        except OSError:\n            pass\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_frames_and_a_closed_socket_get_the_session_killed() {
    let dir = tempfile::tempdir().unwrap();
    let zygote = Zygote::start(zygote_config(Some(vec![]))).await.unwrap();

    // a result for another request is ignored; the real one follows
    let session = zygote.fork_session("f", dir.path(), None).await.unwrap();
    let stray = format!(
        "{FIND_SOCKET}import json, struct\nb = json.dumps({{'op': 'result', 'id': 999}}).encode()\n\
         os.write(_sock(), struct.pack('>I', len(b)) + b)\n'real'"
    );
    let real = session.exec(&stray, &limits(5), None).await.unwrap();
    assert_eq!(real.result.unwrap().text_plain, "'real'");

    // an oversized length is a protocol violation: killed, never allocated
    let pid = session.pid();
    let forged = format!(
        "{FIND_SOCKET}os.write(_sock(), b'\\xff\\xff\\xff\\xff')\nimport time\ntime.sleep(30)"
    );
    let start = Instant::now();
    let killed = session.exec(&forged, &limits(30), None).await;
    assert!(
        matches!(
            killed,
            Err(SessionError::Killed {
                reason: KillReason::Protocol,
                ..
            })
        ),
        "{killed:?}"
    );
    // killed, not left to sleep its 30 s (no speed is asserted)
    assert!(start.elapsed() < Duration::from_secs(20));
    assert!(!session.is_alive());
    assert!(process_gone(pid));

    // closing its own socket mid-call: no way to answer, so it is killed too
    let session = zygote.fork_session("g", dir.path(), None).await.unwrap();
    let closer = format!("{FIND_SOCKET}os.close(_sock())\nimport time\ntime.sleep(30)");
    let closed = session.exec(&closer, &limits(30), None).await;
    assert!(
        matches!(
            closed,
            Err(SessionError::Killed {
                reason: KillReason::Protocol,
                ..
            })
        ),
        "{closed:?}"
    );
    // the zygote is unharmed
    let fine = zygote.fork_session("h", dir.path(), None).await.unwrap();
    let two = fine.exec("1+1", &limits(5), None).await.unwrap();
    assert_eq!(two.result.unwrap().text_plain, "2");
}
