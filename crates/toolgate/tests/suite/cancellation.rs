//! `notifications/cancelled` in a legacy session, through the real binary and a real sandboxed
//! session: the named call's code is interrupted, an SSE client gets no answer for it (the spec:
//! the receiver SHOULD NOT respond), a JSON-only client still gets one, the session and the
//! Python session go on, and nobody else can cancel it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{Value, json};

fn write_call(id: i64, code: &str) -> Value {
    rpc(
        id,
        "tools/call",
        Some(json!({"name": "svc_write", "arguments": {"code": code, "session_id": "c"}})),
    )
}

fn cancel(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id, "reason": "test"}})
}

/// Code that marks the workspace of session "c" as soon as it runs, then sleeps `seconds`.
fn sleeper(seconds: u32) -> String {
    format!(
        "import time\nopen('running', 'w').write('{seconds}')\ntime.sleep({seconds})\n\
         print('finished')"
    )
}

/// Waits until `who`'s code in session "c" has started (its `running` mark, read through
/// svc_read while the call runs): a cancellation sent after this reaches a running call, not
/// one still on its way.
async fn wait_until_running(f: &Fixture, who: &Account) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let read = tool_call("svc_read", json!({"session_id": "c", "path": "running"}));
    loop {
        let reply = post_personal(&f.http, &f.server, &who.key, &read).await;
        if !reply.result()["isError"].as_bool().unwrap_or(true) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the code never started: {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts a 60 s sleep as call `id` in `session`, cancels it once it runs with `who`'s
/// key, and returns the sleeping call's reply and how long it took.
async fn sleep_then_cancel(
    f: &Fixture,
    session: &str,
    who: &Account,
    accept: &str,
) -> (Reply, Duration) {
    let url = f.server.personal(&f.alice.key);
    let sleeping = f
        .http
        .post(&url)
        .header("Content-Type", "application/json")
        .header("Accept", accept)
        .header("Mcp-Session-Id", session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .body(write_call(7, &sleeper(60)).to_string());
    let started = Instant::now();
    let call = tokio::spawn(async move { send(sleeping).await });
    wait_until_running(f, &f.alice).await;
    let cancelled = send(in_session(
        &f.http,
        &f.server.personal(&who.key),
        session,
        &cancel(7),
    ))
    .await;
    if who.key == f.alice.key {
        assert_eq!(cancelled.status, 202, "{cancelled:?}");
    } else {
        cancelled.assert_error(404, -32600);
    }
    let reply = tokio::time::timeout(Duration::from_secs(90), call)
        .await
        .unwrap()
        .unwrap();
    (reply, started.elapsed())
}

/// A legacy session of alice's whose Python session "c" holds `kept`; its URL and id.
async fn session_with_kept(f: &Fixture) -> (String, String) {
    let url = f.server.personal(&f.alice.key);
    let session = open_session(&f.http, &url).await.unwrap();
    let set = send(in_session(
        &f.http,
        &url,
        &session,
        &write_call(1, "kept = 'still here'"),
    ))
    .await;
    assert_eq!(set.status, 200, "{set:?}");
    (url, session)
}

async fn kept_after(f: &Fixture, session: &str) {
    let url = f.server.personal(&f.alice.key);
    let after = send(in_session(&f.http, &url, session, &write_call(8, "kept"))).await;
    assert_eq!(
        after.json()["result"]["content"][0]["text"],
        "'still here'",
        "{after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_client_gets_no_answer_for_a_cancelled_call_and_goes_on() {
    let f = fixture().await;
    let (_, session) = session_with_kept(&f).await;
    let (reply, took) = sleep_then_cancel(
        &f,
        &session,
        &f.alice,
        "application/json, text/event-stream",
    )
    .await;
    assert!(
        took < Duration::from_secs(15),
        "the cancelled code kept running: {took:?}"
    );
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(
        reply
            .header("content-type")
            .unwrap_or_default()
            .starts_with("text/event-stream"),
        "{reply:?}"
    );
    assert!(
        !reply.body.contains("\"result\""),
        "a cancelled call is not answered: {reply:?}"
    );
    kept_after(&f, &session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_only_client_still_gets_its_answer() {
    let f = fixture().await;
    let (_, session) = session_with_kept(&f).await;
    let (reply, took) = sleep_then_cancel(&f, &session, &f.alice, "application/json").await;
    assert!(
        took < Duration::from_secs(15),
        "the cancelled code kept running: {took:?}"
    );
    let result = reply.result();
    assert!(result["isError"].as_bool().unwrap_or(false), "{reply:?}");
    kept_after(&f, &session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_account_cannot_cancel_a_call() {
    let f = fixture().await;
    let url = f.server.personal(&f.alice.key);
    let session = open_session(&f.http, &url).await.unwrap();
    let quick = in_session(&f.http, &url, &session, &write_call(7, &sleeper(2)));
    let call = tokio::spawn(async move { send(quick).await });
    wait_until_running(&f, &f.alice).await;
    let foreign = send(in_session(
        &f.http,
        &f.server.personal(&f.bob.key),
        &session,
        &cancel(7),
    ))
    .await;
    foreign.assert_error(404, -32600);
    let reply = call.await.unwrap();
    assert_eq!(
        reply.json()["result"]["content"][0]["text"],
        "finished\n",
        "{reply:?}"
    );
}

/// A client that goes away mid-call (its connection closed) cancels the call as surely as one
/// that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_cancels_its_call() {
    let f = fixture().await;
    let (url, session) = session_with_kept(&f).await;
    let sleeping = in_session(&f.http, &url, &session, &write_call(7, &sleeper(60)));
    let call = tokio::spawn(async move { sleeping.send().await });
    wait_until_running(&f, &f.alice).await;
    // the client goes away: its request (and connection) dropped mid-call
    call.abort();
    assert!(
        call.await.is_err_and(|e| e.is_cancelled()),
        "the sleep answered early"
    );
    let started = Instant::now();
    kept_after(&f, &session).await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the abandoned code kept running: {:?}",
        started.elapsed()
    );
}
