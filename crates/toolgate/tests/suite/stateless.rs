//! The 2026-07-28 generation's `tools/list` and plain `tools/call`, which the server answers
//! without rmcp: the answer is rmcp's to the byte, each request is metered as rmcp meters it,
//! and every refusal keeps rmcp's JSON-RPC code and HTTP status.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use serde_json::{Value, json};

/// A 2026-07-28 request as its clients send it, with its headers, editable.
struct Modern {
    body: Value,
    headers: Vec<(&'static str, String)>,
}

impl Modern {
    fn list() -> Self {
        let (body, headers) = modern_request(json!(1), "tools/list", json!({}));
        Self { body, headers }
    }

    fn call(tool: &str, arguments: Value) -> Self {
        let (body, headers) = modern_tool_call(tool, arguments);
        Self { body, headers }
    }

    fn meta(mut self, key: &str, value: Value) -> Self {
        self.body["params"]["_meta"][key] = value;
        self
    }

    fn without_meta(mut self, key: &str) -> Self {
        let meta = self.body["params"]["_meta"].as_object_mut().unwrap();
        meta.remove(key);
        self
    }

    /// Replaces (or with `None` removes) every value of header `name`.
    fn header(mut self, name: &'static str, value: Option<&str>) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        if let Some(value) = value {
            self.headers.push((name, value.to_owned()));
        }
        self
    }

    /// The same request with a `_meta` key of the client's own, which rmcp ignores and the
    /// server's own path leaves to rmcp: the answer rmcp gives.
    fn through_rmcp(self) -> Self {
        self.meta("example.org/trace", json!("t-1"))
    }

    async fn send(&self, http: &reqwest::Client, server: &Server, key: &str) -> Reply {
        let mut request = http
            .post(server.personal(key))
            .header("Content-Type", "application/json");
        if !self
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("accept"))
        {
            request = request.header("Accept", "application/json, text/event-stream");
        }
        for (name, value) in &self.headers {
            request = request.header(*name, value);
        }
        send(request.body(self.body.to_string())).await
    }
}

async fn setup(email: &str, extra: &[&str]) -> (tempfile::TempDir, Account, Server) {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, email);
    let server = Server::start(&storage, extra).await;
    (dir, account, server)
}

/// The answer and rmcp's answer to the same request, compared whole: status, type, bytes.
async fn assert_as_rmcp(http: &reqwest::Client, server: &Server, key: &str, request: Modern) {
    let what = request.body.to_string();
    let ours = request.send(http, server, key).await;
    let rmcp = request.through_rmcp().send(http, server, key).await;
    assert_eq!(ours.status, rmcp.status, "{what}");
    assert_eq!(
        ours.header("content-type"),
        rmcp.header("content-type"),
        "{what}"
    );
    assert_eq!(ours.body, rmcp.body, "{what}");
}

#[tokio::test]
async fn answers_are_rmcps_to_the_byte_and_metered_once() {
    let (_dir, account, server) = setup("stateless@example.org", &[]).await;
    let (http, key) = (client(), account.key.as_str());

    let listed = Modern::list().send(&http, &server, key).await;
    let result = listed.result();
    assert_eq!(result["resultType"], "complete", "{listed:?}");
    assert_eq!(result["cacheScope"], "private", "{listed:?}");
    assert!(result["ttlMs"].is_u64(), "{listed:?}");
    assert_as_rmcp(&http, &server, key, Modern::list()).await;
    let string_id = |mut m: Modern| {
        m.body["id"] = json!("req-7");
        m
    };
    assert_as_rmcp(&http, &server, key, string_id(Modern::list())).await;
    // a JSON-only client and an SSE-only one get the JSON answer, as from rmcp
    for accept in ["application/json", "text/event-stream"] {
        let list = Modern::list().header("Accept", Some(accept));
        assert_as_rmcp(&http, &server, key, list).await;
    }

    // results, a tool's refusal of its arguments, and a call without arguments
    for arguments in [json!({"list_secrets": true}), json!({"zzz": 1}), json!({})] {
        let call = Modern::call("svc_read", arguments);
        assert_as_rmcp(&http, &server, key, string_id(call)).await;
    }

    // the same billing call both ways: each metered once
    let billing = || Modern::call("svc_read", json!({"billing": true}));
    let left = |record: &Value| record["free_remaining_this_month"].as_i64().unwrap();
    let before = server.free_remaining(key).await;
    let mut ours = billing_of(&billing().send(&http, &server, key).await);
    assert_eq!(left(&ours), before - 1, "{ours}");
    let rmcp = billing_of(&billing().through_rmcp().send(&http, &server, key).await);
    assert_eq!(left(&rmcp), before - 2, "{rmcp}");
    ours["free_remaining_this_month"] = rmcp["free_remaining_this_month"].clone();
    assert_eq!(ours, rmcp, "otherwise the same record");
}

#[tokio::test]
async fn an_account_that_cannot_pay_gets_rmcps_error() {
    let extra = ["--free-monthly-calls", "0"];
    let (_dir, account, server) = setup("stateless-broke@example.org", &extra).await;
    let (http, key) = (client(), account.key.as_str());
    let call = Modern::call("svc_read", json!({"billing": true}));
    let reply = call.send(&http, &server, key).await;
    reply.assert_error(200, -32002);
    assert_as_rmcp(&http, &server, key, call).await;
}

/// Each refusal rmcp makes of a 2026-07-28 request, with its code and status (taken from rmcp
/// before the server answered these requests itself), and two requests it answers in a shape
/// other than this path's.
#[tokio::test]
async fn refusals_keep_rmcps_codes_and_statuses() {
    let (_dir, account, server) = setup("stateless-refusals@example.org", &[]).await;
    let (http, key) = (client(), account.key.as_str());
    let versions = |m: Modern, meta: &str, header: &str| {
        m.meta("io.modelcontextprotocol/protocolVersion", json!(meta))
            .header("MCP-Protocol-Version", Some(header))
    };
    let billing = || Modern::call("svc_read", json!({"billing": true}));
    let cases = [
        (
            "no MCP-Protocol-Version",
            Modern::list().header("MCP-Protocol-Version", None),
            400,
            -32020,
        ),
        (
            "MCP-Protocol-Version other than _meta's",
            Modern::list().header("MCP-Protocol-Version", Some("2025-11-25")),
            400,
            -32020,
        ),
        (
            "an unsupported version",
            versions(Modern::list(), "2099-01-01", "2099-01-01"),
            400,
            -32022,
        ),
        (
            "no clientCapabilities",
            Modern::list().without_meta("io.modelcontextprotocol/clientCapabilities"),
            400,
            -32602,
        ),
        (
            "malformed clientCapabilities",
            billing().meta("io.modelcontextprotocol/clientCapabilities", json!(5)),
            400,
            -32602,
        ),
        (
            "no Mcp-Method",
            Modern::list().header("Mcp-Method", None),
            400,
            -32020,
        ),
        (
            "another Mcp-Method",
            Modern::list().header("Mcp-Method", Some("tools/call")),
            400,
            -32020,
        ),
        (
            "no Mcp-Name",
            billing().header("Mcp-Name", None),
            400,
            -32020,
        ),
        (
            "another Mcp-Name",
            billing().header("Mcp-Name", Some("svc_write")),
            400,
            -32020,
        ),
        (
            "an unknown tool",
            Modern::call("svc_nope", json!({})),
            404,
            -32601,
        ),
    ];
    let before = server.free_remaining(key).await;
    for (what, request, status, code) in cases {
        let reply = request.send(&http, &server, key).await;
        assert!(reply.error_code().is_some(), "{what}: {reply:?}");
        reply.assert_error(status, code);
    }
    assert_eq!(server.free_remaining(key).await, before, "none is metered");

    // an older version named per request is answered in that version's shape
    let older = versions(billing(), "2025-11-25", "2025-11-25");
    let result = older.send(&http, &server, key).await.result();
    assert!(result.get("resultType").is_none(), "{result}");
    let older = versions(Modern::list(), "2025-11-25", "2025-11-25");
    let result = older.send(&http, &server, key).await.result();
    assert!(result.get("resultType").is_none(), "{result}");
}
