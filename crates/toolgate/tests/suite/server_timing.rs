//! The opt-in `Server-Timing` answer header (`server_timing = "on"`): present on the tool calls
//! the server answers itself on every client path, absent by default, and nothing in it but
//! stage names and durations (no key, account, secret or code).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use crate::common::*;

/// The stage names the header may carry, in their order.
const STAGES: [&str; 9] = [
    "auth", "read", "admit", "send", "session", "finish", "history", "encode", "total",
];

/// The header's metrics as (name, milliseconds), checked to be nothing else.
fn metrics(reply: &Reply) -> Vec<(String, f64)> {
    let value = reply
        .header("server-timing")
        .unwrap_or_else(|| panic!("no Server-Timing: {reply:?}"));
    let metrics: Vec<(String, f64)> = value
        .split(", ")
        .map(|metric| {
            let (name, dur) = metric
                .split_once(";dur=")
                .unwrap_or_else(|| panic!("not name;dur=: {value}"));
            let dur: f64 = dur.parse().unwrap_or_else(|_| panic!("{value}"));
            assert!(STAGES.contains(&name), "unknown stage {name} in {value}");
            assert!(dur >= 0.0, "{value}");
            (name.to_owned(), dur)
        })
        .collect();
    let names: Vec<&str> = metrics.iter().map(|(name, _)| name.as_str()).collect();
    let mut ordered = names.clone();
    ordered.sort_by_key(|name| STAGES.iter().position(|s| s == name));
    assert_eq!(names, ordered, "stages out of order: {value}");
    assert_eq!(names.last(), Some(&"total"), "{value}");
    metrics
}

fn names(metrics: &[(String, f64)]) -> Vec<&str> {
    metrics.iter().map(|(name, _)| name.as_str()).collect()
}

fn svc_write(code: &str) -> Value {
    tool_call("svc_write", json!({"code": code, "session_id": "timed"}))
}

#[tokio::test]
async fn absent_unless_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "alice@example.org");
    let mut server = Server::start(&storage, &["--sandbox", "off"]).await;
    let http = client();
    let reply = post_personal(&http, &server, &alice.key, &billing_call()).await;
    assert_eq!(reply.result()["isError"], json!(false));
    assert_eq!(reply.header("server-timing"), None);
    server.stop();

    let mut server = Server::start(&storage, &["--sandbox", "off", "--server-timing", "on"]).await;
    let reply = post_personal(&http, &server, &alice.key, &billing_call()).await;
    assert_eq!(reply.result()["isError"], json!(false));
    let metrics = metrics(&reply);
    for stage in ["auth", "read", "admit", "finish", "history", "encode"] {
        assert!(names(&metrics).contains(&stage), "{stage}: {metrics:?}");
    }
    // no session ran: no session stages
    assert!(!names(&metrics).contains(&"session"), "{metrics:?}");
    // a request that is not a tool call has none
    let listed = post_personal(&http, &server, &alice.key, &tools_list()).await;
    assert_eq!(listed.header("server-timing"), None);
    server.stop();
}

#[tokio::test]
async fn every_stage_of_a_sandboxed_call_on_every_path() {
    let f = fixture_with(&["--server-timing", "on"]).await;
    let secret = "print('svck-not-in-a-header')";
    let bare = post_personal(&f.http, &f.server, &f.alice.key, &svc_write(secret)).await;
    assert!(bare.body.contains("svck-not-in-a-header"), "{bare:?}");
    let bare_metrics = metrics(&bare);
    for stage in STAGES {
        assert!(
            names(&bare_metrics).contains(&stage),
            "{stage}: {bare_metrics:?}"
        );
    }
    let (total, stages) = bare_metrics.split_last().unwrap();
    let sum: f64 = stages.iter().map(|(_, dur)| dur).sum();
    assert!(sum <= total.1 + 0.01, "{bare_metrics:?}");

    // the legacy session with SSE accepted, and the 2026-07-28 generation
    let url = f.server.personal(&f.alice.key);
    let session = open_session(&f.http, &url).await.unwrap();
    let legacy = send(in_session(&f.http, &url, &session, &svc_write("1+1"))).await;
    assert_eq!(legacy.status, 200, "{legacy:?}");
    assert!(names(&metrics(&legacy)).contains(&"session"));
    let modern = post_modern(
        &f.http,
        &f.server,
        &f.alice.key,
        modern_tool_call("svc_write", json!({"code": "1+1", "session_id": "timed"})),
    )
    .await;
    assert_eq!(modern.status, 200, "{modern:?}");
    assert!(names(&metrics(&modern)).contains(&"session"));

    for reply in [&bare, &legacy, &modern] {
        let value = reply.header("server-timing").unwrap();
        for private in [
            f.alice.key.as_str(),
            f.alice.id.as_str(),
            "svck",
            "print",
            "timed",
        ] {
            assert!(!value.contains(private), "{private} in {value}");
        }
    }
}
