//! The four key carriers, content negotiation (inline JSON or SSE), and every way a key is
//! refused with -32001 / 401, including rotation, `/mcp` and `/billing/status`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use serde_json::{Value, json};

const TOOL_NAMES: [&str; 3] = ["svc_read", "svc_write", "svc_ai"];

fn tool_names(result: &Value) -> Vec<String> {
    let tools = result["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools array: {result}"));
    tools
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn every_carrier_lists_the_tools_and_runs_metered_calls() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, "carriers@example.org");
    let server = Server::start(&storage, &[]).await;
    let http = client();

    let mut last_free = server.free_remaining(&account.key).await;
    assert_eq!(
        last_free, 1000,
        "a new account starts with the default allowance"
    );
    for carrier in CARRIERS {
        let listed = post_rpc(&http, &server, carrier, &account.key, &tools_list()).await;
        let names = tool_names(&listed.result());
        assert_eq!(names, TOOL_NAMES, "{carrier:?}: tools/list names");
        for tool in listed.result()["tools"].as_array().unwrap() {
            assert_eq!(tool["inputSchema"]["type"], "object", "{carrier:?}: {tool}");
        }

        for _ in 0..2 {
            let reply = post_rpc(&http, &server, carrier, &account.key, &billing_call()).await;
            let record = billing_of(&reply);
            let free = record["free_remaining_this_month"].as_i64().unwrap();
            assert_eq!(
                free,
                last_free - 1,
                "{carrier:?}: each call uses one free call: {record}"
            );
            assert_eq!(record["free_monthly_limit"], 1000);
            assert_eq!(record["wallet_balance_usd"], "0.00");
            assert_eq!(record["paid_call_cost_usd"], "0.008");
            assert_eq!(record["min_topup_usd"], "5.00");
            assert_eq!(record["max_topup_usd"], "500.00");
            let text = reply.result()["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(!text.is_empty(), "human-readable content too: {reply:?}");
            last_free = free;
        }
    }
    // tools/list is free: 8 calls metered, 4 listings not.
    assert_eq!(server.free_remaining(&account.key).await, 1000 - 8);
}

#[tokio::test]
async fn answers_inline_json_or_sse_as_the_accept_header_allows() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, "accept@example.org");
    let server = Server::start(&storage, &[]).await;
    let http = client();
    let url = server.personal(&account.key);

    // Accept: application/json only → inline JSON, for listing, calls and even initialize.
    for body in [tools_list(), billing_call(), initialize()] {
        let reply = send(
            http.post(&url)
                .header("Accept", "application/json")
                .body(body.to_string()),
        )
        .await;
        assert_eq!(reply.status, 200, "{reply:?}");
        let kind = reply.header("content-type").unwrap_or_default();
        assert!(
            kind.starts_with("application/json"),
            "inline JSON expected: {reply:?}"
        );
        assert!(reply.result().is_object(), "{reply:?}");
    }

    // No Accept header at all (raw socket; reqwest always adds one) → inline JSON.
    // Also a form content type, as `curl -d` sends: the body is JSON whatever the label.
    for content_type in [
        "Content-Type: application/json",
        "Content-Type: application/x-www-form-urlencoded",
    ] {
        let head = format!("POST /u/{} HTTP/1.1\r\n{content_type}", account.key);
        let raw = raw_http(server.port, &head, billing_call().to_string().as_bytes()).await;
        assert_eq!(raw.status, 200, "{raw:?}");
        assert!(
            raw.header("content-type")
                .unwrap_or_default()
                .starts_with("application/json"),
            "{raw:?}"
        );
        let body: Value =
            serde_json::from_str(&raw.body).unwrap_or_else(|e| panic!("{e}: {raw:?}"));
        assert_eq!(body["result"]["isError"], false, "{raw:?}");
        assert_billing_record(&body["result"]["structuredContent"]["billing"]);
    }

    // Accept: application/json, text/event-stream + initialize → a session id; a plain answer is
    // JSON (one write) even for a client that accepts SSE, which the transport allows.
    let reply = send(
        http.post(&url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(initialize().to_string()),
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(
        reply
            .header("content-type")
            .unwrap_or_default()
            .starts_with("application/json"),
        "{reply:?}"
    );
    let session = reply.header("mcp-session-id").unwrap_or_default();
    assert!(!session.is_empty(), "initialize opens a session: {reply:?}");
    let init = sse_response(&reply.body);
    assert_eq!(init["id"], 1, "{init}");
    assert!(init["result"]["protocolVersion"].is_string(), "{init}");
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );

    // The session goes on: initialized notification, then tools/list inside it.
    let sse_post = |body: Value| {
        http.post(&url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", session.clone())
            .header(
                "MCP-Protocol-Version",
                init["result"]["protocolVersion"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
            .body(body.to_string())
    };
    let notified = send(sse_post(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ))
    .await;
    assert_eq!(notified.status, 202, "{notified:?}");
    let listed = send(sse_post(rpc(2, "tools/list", None))).await;
    assert_eq!(listed.status, 200, "{listed:?}");
    let listed = sse_response(&listed.body);
    assert_eq!(listed["id"], 2);
    assert_eq!(tool_names(&listed["result"]), TOOL_NAMES);

    // A raw tools/list POST needs no initialize and no session.
    let reply = post_personal(&http, &server, &account.key, &tools_list()).await;
    assert_eq!(tool_names(&reply.result()), TOOL_NAMES);

    // Another account cannot use this session, even with its own valid key.
    let other = create_account(&storage, "accept-other@example.org");
    let hijack = send(
        http.post(server.personal(&other.key))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", session.clone())
            .body(billing_call().to_string()),
    )
    .await;
    assert_eq!(
        hijack.status, 404,
        "another account's session is not found: {hijack:?}"
    );
    assert!(!hijack.body.contains("\"result\""), "{hijack:?}");

    // An unknown session id is rmcp's 404, in the same JSON-RPC error shape as every refusal.
    let unknown = send(
        http.post(&url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", "no-such-session")
            .body(billing_call().to_string()),
    )
    .await;
    assert_eq!(unknown.status, 404, "{unknown:?}");
    let body: Value = serde_json::from_str(&unknown.body).unwrap();
    assert_eq!(body["error"]["code"], -32600, "{unknown:?}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Session not found"),
        "{unknown:?}"
    );
    assert_eq!(
        server.free_remaining(&other.key).await,
        1000,
        "nothing was metered to either account"
    );
}

#[tokio::test]
async fn http2_clients_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, "h2@example.org");
    let server = Server::start(&storage, &[]).await;
    let h2 = client_builder()
        .no_proxy()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    for carrier in CARRIERS {
        let response = carrier
            .post(&h2, &server, &account.key)
            .body(billing_call().to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.version(), reqwest::Version::HTTP_2);
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["result"]["isError"], false, "{body}");
    }
    assert_eq!(server.free_remaining(&account.key).await, 996);
}

/// The last JSON-RPC response carried in an SSE body.
/// The JSON-RPC response of an answer, inline JSON or the last response event of a stream.
fn sse_response(stream: &str) -> Value {
    if let Ok(inline) = serde_json::from_str::<Value>(stream) {
        return inline;
    }
    stream
        .split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            serde_json::from_str::<Value>(&data.join("\n")).ok()
        })
        .filter(|v| v.get("result").is_some() || v.get("error").is_some())
        .last()
        .unwrap_or_else(|| panic!("no JSON-RPC response in the stream: {stream:?}"))
}

/// Keys that must be refused without a look-up, built from a valid one.
fn malformed_keys(valid: &str) -> Vec<(&'static str, String)> {
    let hex = valid.strip_prefix("svck_").unwrap();
    let mut upper = hex.to_ascii_uppercase();
    if upper == hex {
        upper = format!("A{}", &hex[1..]);
    }
    vec![
        ("wrong prefix", format!("sk_{hex}")),
        ("other brand prefix", format!("abck_{hex}")),
        ("upper-case prefix", format!("SVCK_{hex}")),
        ("no prefix", hex.to_owned()),
        ("63 hex", format!("svck_{}", &hex[..63])),
        ("65 hex", format!("svck_{hex}0")),
        ("upper-case hex", format!("svck_{upper}")),
        ("non-hex", format!("svck_{}", "g".repeat(64))),
        ("one non-hex char", format!("svck_{}z", &hex[..63])),
        ("prefix only", "svck_".to_owned()),
    ]
}

#[tokio::test]
async fn bad_keys_are_refused_with_32001_in_every_carrier() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, "keys@example.org");
    let server = Server::start(&storage, &[]).await;
    let http = client();

    let mut bad: Vec<(&str, String)> = malformed_keys(&account.key);
    bad.push(("unknown well-formed", format!("svck_{}", "0".repeat(64))));
    bad.push(("unknown well-formed 2", format!("svck_{}", "ab".repeat(32))));
    for (what, key) in &bad {
        for carrier in CARRIERS {
            for body in [tools_list(), billing_call()] {
                let reply = post_rpc(&http, &server, carrier, key, &body).await;
                reply.assert_error(401, -32001);
                let message = reply.json()["error"]["message"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                if key.len() > 16 {
                    assert!(
                        !message.contains(key.as_str()),
                        "the message never repeats the key: {message}"
                    );
                }
                if carrier == Carrier::Path {
                    assert!(
                        reply.header("www-authenticate").is_none(),
                        "{what}: /u/ 401 has no challenge: {reply:?}"
                    );
                }
            }
        }
    }

    // No key anywhere, and empty values in each carrier.
    let nothing = [
        http.post(server.url("/")),
        http.post(server.url("/"))
            .header("Authorization", "Bearer "),
        http.post(server.url("/"))
            .header("Authorization", "Basic c3ZjazpzZWNyZXQ="),
        http.post(server.url("/")).header("X-Api-Key", ""),
        http.post(server.url("/?key=")),
        http.post(server.url("/?other=1")),
    ];
    for request in nothing {
        let reply = send(
            request
                .header("Content-Type", "application/json")
                .body(tools_list().to_string()),
        )
        .await;
        reply.assert_error(401, -32001);
    }

    // Nothing was metered by the refusals.
    assert_eq!(server.free_remaining(&account.key).await, 1000);
}

#[tokio::test]
async fn a_rotated_key_fails_at_once_and_the_new_one_works_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let old = create_account(&storage, "rotate@example.org");
    let server = Server::start(&storage, &[]).await;
    let http = client();

    for carrier in CARRIERS {
        post_rpc(&http, &server, carrier, &old.key, &tools_list())
            .await
            .result();
    }
    let new = rotate_key(&storage, "rotate@example.org");
    assert_eq!(new.id, old.id, "rotation keeps the account");
    assert_eq!(new.email, old.email);
    assert_ne!(new.key, old.key, "rotation issues a new key");

    for carrier in CARRIERS {
        for body in [tools_list(), billing_call()] {
            post_rpc(&http, &server, carrier, &old.key, &body)
                .await
                .assert_error(401, -32001);
        }
    }
    for request in billing_requests(&http, &server, &old.key) {
        send(request).await.assert_error(401, -32001);
    }
    for carrier in CARRIERS {
        let reply = post_rpc(&http, &server, carrier, &new.key, &billing_call()).await;
        billing_of(&reply);
    }
    for request in billing_requests(&http, &server, &new.key) {
        let reply = send(request).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(
            reply.json()["free_remaining_this_month"],
            1000 - 4,
            "the account's usage survives rotation"
        );
    }

    // A second rotation retires the first new key too.
    let newer = rotate_key(&storage, "rotate@example.org");
    post_personal(&http, &server, &new.key, &tools_list())
        .await
        .assert_error(401, -32001);
    post_personal(&http, &server, &newer.key, &tools_list())
        .await
        .result();

    // Rotating an unknown account fails cleanly.
    let out = cli(
        Some(&storage),
        &["account", "rotate-key", "--email", "ghost@example.org"],
        &[],
    );
    assert!(
        !out.success() && out.stdout.trim().is_empty() && !out.stderr.trim().is_empty(),
        "{out:?}"
    );
}

/// `GET /billing/status` with the key in each header and query carrier.
fn billing_requests(
    http: &reqwest::Client,
    server: &Server,
    key: &str,
) -> Vec<reqwest::RequestBuilder> {
    vec![
        http.get(server.url("/billing/status"))
            .header("Authorization", format!("Bearer {key}")),
        http.get(server.url("/billing/status"))
            .header("X-Api-Key", key),
        http.get(server.url(&format!("/billing/status?key={key}"))),
    ]
}

#[tokio::test]
async fn billing_status_answers_in_each_carrier_and_refuses_bad_keys() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, "status@example.org");
    credit(&storage, "status@example.org", "12.50");
    let server = Server::start(&storage, &["--free-monthly-calls", "3"]).await;
    let http = client();

    for request in billing_requests(&http, &server, &account.key) {
        let reply = send(request).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert!(
            reply
                .header("content-type")
                .unwrap_or_default()
                .starts_with("application/json"),
            "{reply:?}"
        );
        let record = reply.json();
        assert_billing_record(&record);
        assert_eq!(
            record,
            json!({
                "tier": "free", "free_remaining_this_month": 3, "free_monthly_limit": 3,
                "wallet_balance_usd": "12.50", "paid_calls_available": 1562, "paid_call_cost_usd": "0.008",
                "min_topup_usd": "5.00", "max_topup_usd": "500.00",
            })
        );
    }
    // The status endpoint itself is not metered.
    assert_eq!(server.free_remaining(&account.key).await, 3);

    let unknown = format!("svck_{}", "1".repeat(64));
    for key in [unknown.as_str(), "svck_short", "nonsense"] {
        for request in billing_requests(&http, &server, key) {
            send(request).await.assert_error(401, -32001);
        }
    }
    send(http.get(server.url("/billing/status")))
        .await
        .assert_error(401, -32001);
}

#[tokio::test]
async fn the_oauth_endpoint_refuses_with_a_challenge() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, "oauth@example.org");
    let server = Server::start(&storage, &[]).await;
    let http = client();

    let requests = [
        http.post(server.url("/mcp")).body(tools_list().to_string()),
        http.post(server.url("/mcp"))
            .bearer_auth("not-a-token")
            .body(tools_list().to_string()),
        // A personal API key is not an OAuth token.
        http.post(server.url("/mcp"))
            .bearer_auth(&account.key)
            .body(billing_call().to_string()),
    ];
    for request in requests {
        let reply = send(request.header("Content-Type", "application/json")).await;
        reply.assert_error(401, -32001);
        let challenge = reply
            .header("www-authenticate")
            .unwrap_or_else(|| panic!("/mcp 401 needs WWW-Authenticate: {reply:?}"));
        assert!(
            challenge.to_ascii_lowercase().starts_with("bearer"),
            "{challenge}"
        );
    }
    assert_eq!(
        server.free_remaining(&account.key).await,
        1000,
        "nothing was metered"
    );
}
