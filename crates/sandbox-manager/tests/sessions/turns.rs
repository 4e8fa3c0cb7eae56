//! Calls on one session take turns on its socket, in the caller's own task: concurrent calls
//! never overlap, and a call whose caller goes away is still carried to its end (interrupted,
//! its reply read), so the session is in step for the next one.

use std::time::{Duration, Instant};

use crate::common::{limits, manager, text};
use crate::sessions::exec;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_caller_goes_away_is_interrupted_and_the_session_stays_in_step() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    let first = exec(&m, "a", Some("s"), "v = 7\nimport time").await;
    let started = first.workspace.join("started");
    let long = limits(120);
    let call = m.exec(
        "a",
        Some("s"),
        "open('started', 'w').close()\ntime.sleep(60)\nv = 0",
        &long,
        &[],
        None,
    );
    // the caller goes away once the code runs: its future is dropped half-way
    tokio::select! {
        answer = call => panic!("the call ended by itself: {answer:?}"),
        () = async {
            while !started.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        } => {}
    }
    let since = Instant::now();
    let after = exec(&m, "a", Some("s"), "v").await;
    // interrupted (not left to sleep its 60 s, nor to finish and set v), the same session
    assert_eq!(text(&after), "7");
    assert!(!after.fresh);
    assert_eq!(after.pid, first.pid);
    assert!(
        since.elapsed() < Duration::from_secs(30),
        "{:?}",
        since.elapsed()
    );
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_on_one_session_take_turns() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    exec(&m, "a", Some("s"), "import time\nlog = []").await;
    let turn = |i: usize| {
        format!("log.append(('in', {i}))\ntime.sleep(0.05)\nlog.append(('out', {i}))\n{i}")
    };
    let code: Vec<String> = (0..4).map(turn).collect();
    let (a, b, c, d) = tokio::join!(
        exec(&m, "a", Some("s"), &code[0]),
        exec(&m, "a", Some("s"), &code[1]),
        exec(&m, "a", Some("s"), &code[2]),
        exec(&m, "a", Some("s"), &code[3]),
    );
    for (i, call) in [a, b, c, d].iter().enumerate() {
        assert_eq!(text(call), i.to_string());
        assert!(!call.fresh);
    }
    // each call's code ran whole before the next one's began
    let log = exec(&m, "a", Some("s"), "all(log[k][0] == 'in' and log[k + 1] == ('out', log[k][1]) for k in range(0, len(log), 2)), len(log)").await;
    assert_eq!(text(&log), "(True, 8)");
    m.shutdown().await;
}
