//! What an operator sees and relies on: Prometheus metrics, an access log that never holds a
//! key, and a server that answers a concurrent mix of hostile and valid requests correctly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use serde_json::json;

/// The value of the sample line that starts with `series ` (exact labels), if present.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| {
            line.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .and_then(|value| value.trim().parse().ok())
}

#[tokio::test]
async fn metrics_count_requests_calls_and_errors_without_keys() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, "metrics@example.org");
    let server = Server::start(&storage, &["--free-monthly-calls", "2"]).await;
    let http = client();

    let before = send(http.get(server.url("/metrics"))).await;
    assert_eq!(before.status, 200, "{before:?}");
    assert!(
        before
            .header("content-type")
            .unwrap_or_default()
            .starts_with("text/plain"),
        "{before:?}"
    );

    for _ in 0..2 {
        billing_of(&post_personal(&http, &server, &account.key, &billing_call()).await);
    }
    post_personal(&http, &server, &account.key, &billing_call())
        .await
        .assert_error(200, -32002);
    let unknown = format!("svck_{}", "e".repeat(64));
    post_personal(&http, &server, &unknown, &tools_list())
        .await
        .assert_error(401, -32001);
    post_rpc(&http, &server, Carrier::Query, "svck_bad", &tools_list())
        .await
        .assert_error(401, -32001);
    post_rpc(&http, &server, Carrier::Bearer, &account.key, &tools_list())
        .await
        .result();
    post_personal(
        &http,
        &server,
        &account.key,
        &tool_call("svc_read", json!({"bogus": 1})),
    )
    .await
    .result();
    send(
        Carrier::Path
            .post(&http, &server, &account.key)
            .body("nope"),
    )
    .await
    .assert_error(400, -32700);
    post_personal(
        &http,
        &server,
        &account.key,
        &tool_call("svc_zzz", json!({})),
    )
    .await
    .assert_error(200, -32601);

    let reply = send(http.get(server.url("/metrics"))).await;
    assert_eq!(reply.status, 200);
    let text = reply.body;
    assert!(text.contains("toolgate_http_requests_total"), "{text}");
    assert_eq!(
        sample(
            &text,
            r#"toolgate_tool_calls_total{tool="svc_read",outcome="ok"}"#
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"toolgate_tool_calls_total{tool="svc_read",outcome="refused"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, r#"toolgate_jsonrpc_errors_total{code="-32001"}"#),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, r#"toolgate_jsonrpc_errors_total{code="-32002"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, r#"toolgate_jsonrpc_errors_total{code="-32700"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, r#"toolgate_jsonrpc_errors_total{code="-32601"}"#),
        Some(1.0),
        "{text}"
    );
    let personal_posts: f64 = text
        .lines()
        .filter(|l| {
            l.starts_with(r#"toolgate_http_requests_total{route="/u/{api_key}",method="POST""#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(personal_posts, 7.0, "seven POSTs to personal URLs: {text}");
    assert!(text.contains("_bucket{"), "histogram buckets: {text}");
    assert!(text.contains("le=\"+Inf\""), "{text}");
    assert!(
        text.contains("toolgate_tool_call_duration_seconds_bucket"),
        "{text}"
    );
    assert!(
        text.contains("toolgate_http_request_duration_seconds_bucket"),
        "{text}"
    );
    assert!(
        !text.contains("svck_"),
        "no key material in metrics: {text}"
    );
    assert!(!text.contains(&account.key[5..]), "{text}");
    assert!(!text.contains(&account.id), "no account ids in metrics");
    assert!(
        !text.contains("svc_zzz"),
        "caller-supplied tool names are not labels: {text}"
    );
}

#[tokio::test]
async fn the_access_log_never_holds_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, "log@example.org");
    let server = Server::start(&storage, &[]).await;
    let http = client();
    let unknown = format!("svck_{}", "7d".repeat(32));

    for carrier in CARRIERS {
        billing_of(&post_rpc(&http, &server, carrier, &account.key, &billing_call()).await);
        post_rpc(&http, &server, carrier, &unknown, &tools_list())
            .await
            .assert_error(401, -32001);
    }
    send(http.get(server.url(&format!("/billing/status?key={}&x=1", account.key)))).await;
    send(http.get(server.url(&format!("/billing/status?key={unknown}")))).await;
    send(http.get(server.url(&format!("/u/{}/extra?key={}", account.key, account.key)))).await;
    send(Carrier::Path.post(&http, &server, &account.key).body("{"))
        .await
        .assert_error(400, -32700);

    // The log writer is non-blocking: a last request's line, once written, shows that every
    // earlier one is in the file.
    let log = server.settled_log().await;
    assert!(
        log.contains("/u/svck_…"),
        "personal URL paths are logged redacted: {log}"
    );
    assert!(
        log.contains("key=svck_…"),
        "query keys are logged redacted: {log}"
    );
    assert!(log.contains("x=1"), "other query parameters stay: {log}");
    for secret in [&account.key, &unknown] {
        let hex = &secret[5..];
        assert!(!log.contains(hex), "the log holds a key: {log}");
        assert!(
            !log.contains(&hex[..24]),
            "the log holds part of a key: {log}"
        );
    }
}

/// What a hostile-mix request should get.
#[derive(Debug, Clone, Copy)]
enum Expect {
    Ok,
    Status(u16, i64),
    Forbidden,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_hostile_mix_gets_correct_answers_and_the_server_stays_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, "hostile@example.org");
    let server = Server::start(&storage, &["--max-request-bytes", "65536"]).await;
    let http = client();
    let unknown = format!("svck_{}", "9".repeat(64));
    let key = account.key.clone();

    let mut requests = Vec::new();
    for i in 0..200usize {
        let carrier = CARRIERS[i % 4];
        let (request, expect) = match i % 10 {
            0 => (carrier.post(&http, &server, &key).body(vec![0xff, 0x00, 0x7b]), Expect::Status(400, -32700)),
            1 => (carrier.post(&http, &server, &key).body("[1,2,3]"), Expect::Status(400, -32600)),
            2 => (carrier.post(&http, &server, &unknown).body(billing_call().to_string()), Expect::Status(401, -32001)),
            3 => (carrier.post(&http, &server, "svck_%00%0a%27--").body(billing_call().to_string()), Expect::Status(401, -32001)),
            4 => (
                carrier.post(&http, &server, &key).header("Origin", "http://evil.example").body(billing_call().to_string()),
                Expect::Forbidden,
            ),
            5 => (carrier.post(&http, &server, &key).body(tool_call("svc_nope", json!({})).to_string()), Expect::Status(200, -32601)),
            6 => (carrier.post(&http, &server, &key).body(vec![b' '; 70_000]), Expect::Status(413, 0)),
            7 => (carrier.post(&http, &server, &key).body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"svc_read","argu"#), Expect::Status(400, -32700)),
            _ => (carrier.post(&http, &server, &key).body(billing_call().to_string()), Expect::Ok),
        };
        requests.push(async move { (i, expect, try_send(request).await) });
    }
    let answers = futures::future::join_all(requests).await;

    let mut valid = 0;
    let mut wrong = Vec::new();
    for (i, expect, answer) in answers {
        let Ok(reply) = answer else {
            wrong.push(format!("#{i} {expect:?}: transport error {answer:?}"));
            continue;
        };
        let right = match expect {
            Expect::Ok => {
                valid += 1;
                let body: serde_json::Value = serde_json::from_str(&reply.body).unwrap_or_default();
                reply.status == 200 && body["result"]["isError"] == false
            }
            Expect::Forbidden => reply.status == 403,
            Expect::Status(413, _) => reply.status == 413 && reply.error_code().is_some(),
            Expect::Status(status, code) => {
                reply.status == status && reply.error_code() == Some(code)
            }
        };
        if !right {
            wrong.push(format!("#{i} {expect:?}: {} {}", reply.status, reply.body));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} wrong answers:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert_eq!(valid, 40);

    let health = send(http.get(server.url("/healthz"))).await;
    assert_eq!(health.status, 200, "{health:?}");
    for carrier in CARRIERS {
        billing_of(&post_rpc(&client(), &server, carrier, &key, &billing_call()).await);
    }
    assert_eq!(
        server.free_remaining(&key).await,
        1000 - 40 - 4,
        "exactly the valid calls were metered"
    );
}
