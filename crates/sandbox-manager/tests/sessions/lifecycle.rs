//! A session's life around its calls: idle expiry, a zygote that dies, shutdown, and the
//! figures of a new session and a warm round trip.

// The helpers are test code too: a panic is how they report failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{error_type, eventually, limits, manager, process_gone, text, zygote_config};
use crate::sessions::exec;

use toolgate_sandbox_manager::{
    Interruption, ManagerConfig, ManagerError, OutputChunk, RunOutcome, SandboxManager, ZygoteError,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_expire_and_say_so() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |c| c.idle_ttl = Duration::from_millis(400)).await;
    let first = exec(&m, "a", Some("s"), "z = 1").await;
    // a call within the time-to-live keeps it
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!exec(&m, "a", Some("s"), "z").await.fresh);
    eventually("idle session swept", || m.live_sessions("a") == 0).await;
    assert!(!first.workspace.exists());
    eventually("expired process gone", || process_gone(first.pid)).await;
    let again = exec(&m, "a", Some("s"), "z").await;
    assert!(again.fresh && again.expired);
    assert_eq!(error_type(&again), "NameError");
    // the expiry is reported once
    assert!(!exec(&m, "a", Some("s"), "1").await.expired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_zygote_gives_clear_errors_and_is_restarted() {
    let root = tempfile::tempdir().unwrap();
    let m = Arc::new(manager(root.path(), |_| {}).await);
    let idle = exec(&m, "a", Some("idle"), "k = 1").await;
    let zygote = m.current_zygote().await.unwrap();
    let (busy, running) = spawn_sleeper(&m);
    running.await.unwrap();
    let zygote_pid = rustix::process::Pid::from_raw(zygote.pid()).unwrap();
    rustix::process::kill_process(zygote_pid, rustix::process::Signal::KILL).unwrap();

    // the running call fails at once, saying why
    let start = Instant::now();
    let failed = busy.await.unwrap();
    assert!(start.elapsed() < PROMPTLY);
    let message = failed.unwrap_err().to_string();
    assert!(message.contains("zygote"), "{message}");

    // the old handle says it is gone
    eventually("zygote noticed dead", || !zygote.is_alive()).await;
    let fork = zygote.fork_session("x", root.path(), None).await;
    let Err(error @ ZygoteError::Gone { .. }) = &fork else {
        panic!("expected Gone, got {fork:?}");
    };
    assert!(
        error.to_string().contains("killed by signal SIGKILL"),
        "{error}"
    );
    eventually("idle session died with the zygote", || {
        process_gone(idle.pid)
    })
    .await;

    // the manager starts a new zygote; the idle session's next call is fresh
    m.ensure_running().await.unwrap();
    let restarted = m.current_zygote().await.unwrap();
    assert_ne!(restarted.pid(), zygote.pid());
    assert!(restarted.is_alive());
    let after = exec(&m, "a", Some("idle"), "k").await;
    assert!(after.fresh);
    assert_eq!(error_type(&after), "NameError");
    assert_eq!(text(&exec(&m, "a", Some("busy"), "3*3").await), "9");

    // and without ensure_running, a call restarts it by itself
    let pid = rustix::process::Pid::from_raw(restarted.pid()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    eventually("second zygote noticed dead", || !restarted.is_alive()).await;
    assert_eq!(text(&exec(&m, "a", None, "5*5").await), "25");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn figures_new_session_and_warm_round_trip() {
    let root = tempfile::tempdir().unwrap();
    // the production preload (numpy, pandas, matplotlib.pyplot): what a session forks from
    let mut config = ManagerConfig::new(zygote_config(None), root.path());
    config.max_sessions_per_account = 64;
    let m = SandboxManager::start(config).await.unwrap();
    let hello = m.current_zygote().await.unwrap().hello().clone();
    assert!(
        hello.skipped.is_empty(),
        "preload failed: {:?}",
        hello.skipped
    );

    let mut new_session = Vec::new();
    for i in 0..30 {
        let start = Instant::now();
        let call = exec(&m, "bench", Some(&format!("new{i}")), "1+1").await;
        new_session.push(start.elapsed());
        assert_eq!(text(&call), "2");
        assert!(call.fresh);
        m.close_session("bench", &format!("new{i}")).await;
    }
    let mut one_off = Vec::new();
    for _ in 0..30 {
        let start = Instant::now();
        let call = exec(&m, "bench", None, "1+1").await;
        one_off.push(start.elapsed());
        assert_eq!(text(&call), "2");
    }
    exec(&m, "bench", Some("warm"), "1+1").await;
    let mut warm = Vec::new();
    for _ in 0..500 {
        let start = Instant::now();
        let call = exec(&m, "bench", Some("warm"), "1+1").await;
        warm.push(start.elapsed());
        assert_eq!(text(&call), "2");
    }
    for samples in [&mut new_session, &mut one_off, &mut warm] {
        samples.sort();
    }
    println!(
        "zygote start-up (preload {:?}): {:.0} ms",
        hello.preloaded, hello.startup_ms
    );
    println!(
        "new session (named id) to first result, n=30: p50 {:.2} ms, p99 {:.2} ms",
        ms(percentile(&new_session, 0.5)),
        ms(percentile(&new_session, 0.99))
    );
    println!(
        "one-off call without session id, n=30: p50 {:.2} ms, p99 {:.2} ms",
        ms(percentile(&one_off, 0.5)),
        ms(percentile(&one_off, 0.99))
    );
    println!(
        "warm `1+1` round trip (SandboxManager::exec), n=500: p50 {:.3} ms, p99 {:.3} ms",
        ms(percentile(&warm, 0.5)),
        ms(percentile(&warm, 0.99))
    );
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_interrupts_running_calls_and_removes_everything() {
    let root = tempfile::tempdir().unwrap();
    let m = Arc::new(manager(root.path(), |_| {}).await);
    let idle = exec(&m, "a", Some("idle"), "1").await;
    let (running, started) = spawn_sleeper(&m);
    started.await.unwrap();
    let start = Instant::now();
    m.shutdown().await;
    assert!(start.elapsed() < PROMPTLY);
    // the running call was interrupted, as if cancelled
    let ended = running.await.unwrap().unwrap();
    assert_eq!(ended.outcome.interrupted, Some(Interruption::Cancelled));
    assert_eq!(error_type(&ended), "KeyboardInterrupt");
    assert!(process_gone(ended.pid));
    assert!(!idle.workspace.exists());
    assert_eq!(
        std::fs::read_dir(root.path().join("a")).map_or(0, |d| d.count()),
        0
    );
    assert!(process_gone(idle.pid));
    assert!(matches!(
        m.exec("a", Some("idle"), "1", &limits(5), &[], None).await,
        Err(ManagerError::ShutDown)
    ));
}

/// A call of account `a` in session `busy` that sleeps for a minute, running in the background,
/// and the signal that its code has started (it prints once it runs).
fn spawn_sleeper(
    m: &Arc<SandboxManager>,
) -> (
    tokio::task::JoinHandle<Result<RunOutcome, ManagerError>>,
    tokio::sync::oneshot::Receiver<()>,
) {
    let m = Arc::clone(m);
    let (started, running) = tokio::sync::oneshot::channel();
    let call = tokio::spawn(async move {
        let mut started = Some(started);
        let mut on_output = |_: OutputChunk| {
            if let Some(started) = started.take() {
                let _ = started.send(());
            }
        };
        m.exec(
            "a",
            Some("busy"),
            "import time\nprint('running', flush=True)\ntime.sleep(60)",
            &limits(120),
            &[],
            Some(&mut on_output),
        )
        .await
    });
    (call, running)
}

/// Far less than the minute a sleeper would otherwise take: a call that ends within it was
/// ended by what the test did, not by its code or time limit (no speed is asserted).
const PROMPTLY: Duration = Duration::from_secs(20);
