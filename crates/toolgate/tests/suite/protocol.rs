//! Bodies that are not JSON (-32700) or not JSON-RPC (-32600), the body size limit (413),
//! unknown tools (-32601, 200 or 404 by MCP generation), tool errors (`isError`), and the
//! Origin check. None of the refusals is metered.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use serde_json::{Value, json};

async fn setup(email: &str, extra: &[&str]) -> (tempfile::TempDir, Account, Server) {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, email);
    let server = Server::start(&storage, extra).await;
    (dir, account, server)
}

async fn post_bytes(http: &reqwest::Client, server: &Server, key: &str, body: Vec<u8>) -> Reply {
    send(Carrier::Path.post(http, server, key).body(body)).await
}

#[tokio::test]
async fn bodies_that_are_not_json_get_32700() {
    let (_dir, account, server) = setup("parse@example.org", &[]).await;
    let http = client();
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("plain text", b"not json".to_vec()),
        ("empty", Vec::new()),
        ("whitespace only", b"   \n".to_vec()),
        ("invalid UTF-8", vec![0xff, 0xfe, 0xfd]),
        (
            "invalid UTF-8 inside a string",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}".to_vec(),
        ),
        (
            "truncated",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list""#.to_vec(),
        ),
        (
            "truncated string",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/li"#.to_vec(),
        ),
        (
            "trailing garbage",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"} x"#.to_vec(),
        ),
        (
            "single quotes",
            b"{'jsonrpc':'2.0','id':1,'method':'tools/list'}".to_vec(),
        ),
        (
            "form encoding",
            b"jsonrpc=2.0&id=1&method=tools%2Flist".to_vec(),
        ),
        ("NUL bytes", vec![0; 16]),
    ];
    for (what, body) in bodies {
        let reply = post_bytes(&http, &server, &account.key, body).await;
        assert_eq!(reply.status, 400, "{what}: {reply:?}");
        reply.assert_error(400, -32700);
        assert!(
            reply
                .header("content-type")
                .unwrap_or_default()
                .starts_with("application/json"),
            "{what}: {reply:?}"
        );
    }
    assert_eq!(server.free_remaining(&account.key).await, 1000);
}

#[tokio::test]
async fn json_that_is_not_a_json_rpc_request_gets_32600() {
    let (_dir, account, server) = setup("invalid@example.org", &[]).await;
    let http = client();
    let bodies: Vec<(&str, Value)> = vec![
        (
            "batch",
            json!([{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]),
        ),
        ("batch of calls", json!([billing_call(), billing_call()])),
        ("empty array", json!([])),
        ("number", json!(42)),
        ("string", json!("tools/list")),
        ("null", Value::Null),
        ("boolean", json!(true)),
        ("empty object", json!({})),
        ("no jsonrpc", json!({"id": 1, "method": "tools/list"})),
        (
            "jsonrpc 1.0",
            json!({"jsonrpc": "1.0", "id": 1, "method": "tools/list"}),
        ),
        (
            "jsonrpc as a number",
            json!({"jsonrpc": 2.0, "id": 1, "method": "tools/list"}),
        ),
        (
            "float id",
            json!({"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}),
        ),
        (
            "object id",
            json!({"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}),
        ),
        (
            "array id",
            json!({"jsonrpc": "2.0", "id": [1], "method": "tools/list"}),
        ),
        (
            "boolean id",
            json!({"jsonrpc": "2.0", "id": true, "method": "tools/list"}),
        ),
        (
            "method a number",
            json!({"jsonrpc": "2.0", "id": 1, "method": 7}),
        ),
        (
            "method an object",
            json!({"jsonrpc": "2.0", "id": 1, "method": {"name": "tools/list"}}),
        ),
        (
            "method null",
            json!({"jsonrpc": "2.0", "id": 1, "method": null}),
        ),
        ("no method", json!({"jsonrpc": "2.0", "id": 1})),
        (
            "params an array",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ["svc_read"]}),
        ),
        (
            "params a string",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": "x"}),
        ),
        (
            "params a number",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": 3}),
        ),
    ];
    for (what, body) in bodies {
        let reply = post_bytes(&http, &server, &account.key, body.to_string().into_bytes()).await;
        assert_eq!(reply.status, 400, "{what}: {reply:?}");
        reply.assert_error(400, -32600);
    }
    // The id is echoed where it could be read.
    let reply = post_bytes(
        &http,
        &server,
        &account.key,
        br#"{"jsonrpc":"1.0","id":77,"method":"x"}"#.to_vec(),
    )
    .await;
    reply.assert_error(400, -32600);
    assert_eq!(reply.json()["id"], 77, "{reply:?}");
    assert_eq!(
        server.free_remaining(&account.key).await,
        1000,
        "nothing was metered"
    );
}

#[tokio::test]
async fn bodies_over_the_limit_get_413_and_just_under_works() {
    let limit = 65_536usize;
    let (_dir, account, server) = setup(
        "limit@example.org",
        &["--max-request-bytes", &limit.to_string()],
    )
    .await;
    let http = client();

    // A valid request padded with JSON whitespace to an exact size.
    let padded = |size: usize| {
        let mut body = tools_list().to_string().into_bytes();
        assert!(body.len() < size);
        body.resize(size, b' ');
        body
    };
    for size in [limit - 1, limit] {
        let reply = post_bytes(&http, &server, &account.key, padded(size)).await;
        let names: Vec<Value> = reply.result()["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].clone())
            .collect();
        assert_eq!(names, ["svc_read", "svc_write", "svc_ai"], "{size} bytes");
    }
    // A tool call just under the limit runs too (padding inside a string the tool never sees
    // would be refused as a bad argument, so pad with whitespace again).
    let mut call = billing_call().to_string().into_bytes();
    call.resize(limit - 10, b'\n');
    billing_of(&post_bytes(&http, &server, &account.key, call).await);

    for size in [limit + 1, limit + 4096] {
        let reply = post_bytes(&http, &server, &account.key, padded(size)).await;
        assert_eq!(reply.status, 413, "{size} bytes: {reply:?}");
        let body = reply.json();
        assert_eq!(body["jsonrpc"], "2.0", "{reply:?}");
        assert!(body["error"]["code"].is_i64(), "{reply:?}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&limit.to_string()),
            "the message names the limit: {message}"
        );
    }
    // The server keeps serving after refusing large bodies.
    assert_eq!(server.free_remaining(&account.key).await, 999);
}

#[tokio::test]
async fn unknown_tools_get_32601_and_are_not_metered() {
    let (_dir, account, server) = setup("unknown@example.org", &[]).await;
    let http = client();

    for name in [
        "svc_nope",
        "svc_READ",
        "",
        "svc_read ",
        "svc_write\u{7}",
        "x".repeat(300).as_str(),
    ] {
        let reply = post_personal(
            &http,
            &server,
            &account.key,
            &tool_call(name, json!({"billing": true})),
        )
        .await;
        reply.assert_error(200, -32601);
        let message = reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        for tool in ["svc_read", "svc_write", "svc_ai"] {
            assert!(
                message.contains(tool),
                "the message names the accepted tools: {message}"
            );
        }
    }
    for carrier in CARRIERS {
        post_rpc(
            &http,
            &server,
            carrier,
            &account.key,
            &tool_call("svc_other", json!({})),
        )
        .await
        .assert_error(200, -32601);
    }

    // The 2026-07-28 transport answers an unknown tool with HTTP 404.
    let reply = post_modern(
        &http,
        &server,
        &account.key,
        modern_tool_call("svc_nope", json!({"billing": true})),
    )
    .await;
    reply.assert_error(404, -32601);

    // The same generation runs a known tool normally, and meters it once.
    let reply = post_modern(
        &http,
        &server,
        &account.key,
        modern_tool_call("svc_read", json!({"billing": true})),
    )
    .await;
    let record = billing_of(&reply);
    assert_eq!(
        record["free_remaining_this_month"], 999,
        "only the known call was metered"
    );
    assert_eq!(server.free_remaining(&account.key).await, 999);
}

/// The properties of each tool's input schema, from `tools/list`.
async fn accepted_fields(
    http: &reqwest::Client,
    server: &Server,
    key: &str,
) -> Vec<(String, Vec<String>)> {
    let listed = post_personal(http, server, key, &tools_list())
        .await
        .result();
    listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| {
            let props = tool["inputSchema"]["properties"]
                .as_object()
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default();
            (tool["name"].as_str().unwrap().to_owned(), props)
        })
        .collect()
}

#[tokio::test]
async fn bad_arguments_are_tool_errors_that_name_the_fields_and_cost_nothing() {
    let (_dir, account, server) = setup("toolerr@example.org", &[]).await;
    let http = client();
    let fields = accepted_fields(&http, &server, &account.key).await;
    let fields_of = |tool: &str| {
        fields
            .iter()
            .find(|(name, _)| name == tool)
            .map(|(_, f)| f.clone())
            .unwrap()
    };
    assert!(
        fields_of("svc_read").contains(&"billing".to_owned()),
        "{fields:?}"
    );

    let read_without_arguments = rpc(1, "tools/call", Some(json!({"name": "svc_read"})));
    let calls: Vec<(&str, &str, Value)> = vec![
        (
            "billing a string",
            "svc_read",
            tool_call("svc_read", json!({"billing": "yes"})),
        ),
        (
            "billing a number",
            "svc_read",
            tool_call("svc_read", json!({"billing": 1})),
        ),
        (
            "unknown field",
            "svc_read",
            tool_call("svc_read", json!({"bogus": 1})),
        ),
        (
            "unknown field beside a good one",
            "svc_read",
            tool_call("svc_read", json!({"billing": true, "bogus": 1})),
        ),
        (
            "empty arguments",
            "svc_read",
            tool_call("svc_read", json!({})),
        ),
        (
            "billing false asks for nothing",
            "svc_read",
            tool_call("svc_read", json!({"billing": false})),
        ),
        ("arguments omitted", "svc_read", read_without_arguments),
        (
            "write with nothing",
            "svc_write",
            tool_call("svc_write", json!({})),
        ),
        ("ai with nothing", "svc_ai", tool_call("svc_ai", json!({}))),
    ];
    for (what, tool, body) in calls {
        for carrier in [Carrier::Path, Carrier::Bearer] {
            let reply = post_rpc(&http, &server, carrier, &account.key, &body).await;
            assert_eq!(reply.status, 200, "{what}: {reply:?}");
            let result = reply.result();
            assert_eq!(result["isError"], true, "{what}: {reply:?}");
            let text: String = result["content"]
                .as_array()
                .unwrap_or_else(|| panic!("{what}: content must be an array: {reply:?}"))
                .iter()
                .filter_map(|item| item["text"].as_str())
                .collect();
            assert!(
                !text.trim().is_empty(),
                "{what}: the error is in content: {reply:?}"
            );
            for field in fields_of(tool) {
                assert!(
                    text.contains(&field),
                    "{what}: the text names accepted field `{field}`: {text}"
                );
            }
            if tool == "svc_read" {
                assert!(text.contains("`billing`"), "{what}: {text}");
            }
        }
    }
    let status = server.billing(&account.key).await;
    assert_eq!(
        status["free_remaining_this_month"], 1000,
        "bad-argument calls are not metered: {status}"
    );
}

#[tokio::test]
async fn foreign_origins_are_refused_before_authentication() {
    let (_dir, account, server) = setup(
        "origin@example.org",
        &[
            "--allowed-origins",
            "http://localhost:6274,https://app.example.com",
        ],
    )
    .await;
    let http = client();
    let unknown_key = format!("svck_{}", "c".repeat(64));

    for origin in [
        "http://evil.example",
        "null",
        "http://localhost:6275",
        "https://127.0.0.1:1",
        "http://app.example.com",
    ] {
        for key in [account.key.as_str(), unknown_key.as_str(), "garbage"] {
            for carrier in CARRIERS {
                let request = carrier.post(&http, &server, key).header("Origin", origin);
                let reply = send(request.body(billing_call().to_string())).await;
                assert_eq!(reply.status, 403, "{origin} {carrier:?}: {reply:?}");
                assert!(
                    reply.error_code().is_some(),
                    "a JSON-RPC error body: {reply:?}"
                );
                assert!(
                    !reply.json()["error"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .is_empty()
                );
            }
        }
        // Even a body that is not JSON is refused for its Origin first.
        let request = Carrier::Path
            .post(&http, &server, &account.key)
            .header("Origin", origin);
        assert_eq!(send(request.body("{")).await.status, 403);
    }

    let public_origin = format!("http://127.0.0.1:{}", server.port);
    for origin in [
        public_origin.as_str(),
        "http://localhost:6274",
        "https://app.example.com",
        "https://APP.example.com:443",
    ] {
        for carrier in CARRIERS {
            let request = carrier
                .post(&http, &server, &account.key)
                .header("Origin", origin);
            billing_of(&send(request.body(billing_call().to_string())).await);
        }
        // An allowed origin still needs a valid key.
        let request = Carrier::Path
            .post(&http, &server, &unknown_key)
            .header("Origin", origin);
        send(request.body(tools_list().to_string()))
            .await
            .assert_error(401, -32001);
    }
    // Only the 16 calls from allowed origins were metered.
    assert_eq!(server.free_remaining(&account.key).await, 1000 - 16);
}

#[tokio::test]
async fn both_mcp_generations_are_served_on_the_same_endpoint() {
    let (_dir, account, server) = setup("generations@example.org", &[]).await;
    let http = client();

    let discover = modern_request(json!(1), "server/discover", json!({}));
    let result = post_modern(&http, &server, &account.key, discover)
        .await
        .result();
    let versions: Vec<&str> = result["supportedVersions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for version in ["2025-11-25", "2026-07-28"] {
        assert!(
            versions.contains(&version),
            "server/discover lists {version}: {result}"
        );
    }
    assert!(result["capabilities"]["tools"].is_object(), "{result}");

    // String ids are echoed as given, in either generation.
    let listed = post_modern(
        &http,
        &server,
        &account.key,
        modern_request(json!("req-7"), "tools/list", json!({})),
    )
    .await;
    assert_eq!(listed.json()["id"], "req-7", "{listed:?}");
    let names: Vec<Value> = listed.result()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(names, ["svc_read", "svc_write", "svc_ai"]);
    let legacy = post_personal(
        &http,
        &server,
        &account.key,
        &json!({"jsonrpc": "2.0", "id": "x-1", "method": "tools/list"}),
    )
    .await;
    assert_eq!(legacy.json()["id"], "x-1", "{legacy:?}");

    // A 2026-07-28 initialize opens no session.
    let init = modern_request(
        json!(2),
        "initialize",
        json!({"protocolVersion": "2026-07-28", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    let reply = post_modern(&http, &server, &account.key, init).await;
    assert!(reply.header("mcp-session-id").is_none(), "{reply:?}");

    // A notification is accepted without a body.
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let reply = post_personal(&http, &server, &account.key, &note).await;
    assert_eq!(reply.status, 202, "{reply:?}");
    assert_eq!(
        server.free_remaining(&account.key).await,
        1000,
        "none of this is metered"
    );
}

/// Clients cut tool descriptions past about 2 KB, and a tool that reaches the open web (`url`,
/// `http`, `sql` on a tenant's server, models) must say so: `openWorldHint`.
#[tokio::test]
async fn tools_fit_clients_and_say_they_reach_outside() {
    // with the sandbox on, every capability is listed: the longest descriptions
    let f = crate::common::fixture().await;
    let listed = post_personal(&f.http, &f.server, &f.alice.key, &tools_list())
        .await
        .result();
    let tools = listed["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 3);
    for tool in tools {
        let name = tool["name"].as_str().unwrap();
        let description = tool["description"].as_str().unwrap();
        eprintln!("{name}'s description: {} bytes", description.len());
        assert!(
            description.len() <= 2048,
            "{name}'s description is {} bytes: {description}",
            description.len()
        );
        let hints = &tool["annotations"];
        assert_eq!(hints["openWorldHint"], true, "{name}: {hints}");
    }
}
