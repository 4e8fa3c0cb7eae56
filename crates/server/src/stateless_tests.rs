#![allow(clippy::unwrap_used)]
use super::*;
use axum::http::HeaderName;
use rmcp::model::{NumberOrString, ServerJsonRpcMessage, Tool};
use serde_json::json;

use crate::jsonrpc::check_message;

const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// A request as a 2026-07-28 client sends it: body and headers, each editable.
struct Request {
    body: Value,
    headers: Vec<(&'static str, String)>,
}

impl Request {
    fn new(method: &str, params: Value) -> Self {
        let mut params = params;
        params["_meta"] = json!({
            META_VERSION: "2026-07-28",
            META_CAPABILITIES: {},
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        });
        let mut headers = vec![
            ("mcp-protocol-version", "2026-07-28".to_owned()),
            ("mcp-method", method.to_owned()),
        ];
        if let Some(name) = params["name"].as_str() {
            headers.push(("mcp-name", name.to_owned()));
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        Self { body, headers }
    }

    fn list() -> Self {
        Self::new("tools/list", json!({}))
    }

    fn call() -> Self {
        Self::new(
            "tools/call",
            json!({"name": "svc_read", "arguments": {"billing": true}}),
        )
    }

    fn edit(mut self, edit: impl FnOnce(&mut Value)) -> Self {
        edit(&mut self.body);
        self
    }

    fn meta(self, key: &str, value: Value) -> Self {
        let key = key.to_owned();
        self.edit(move |body| body["params"]["_meta"][key] = value)
    }

    fn without_meta(self, key: &str) -> Self {
        let key = key.to_owned();
        self.edit(move |body| {
            body["params"]["_meta"]
                .as_object_mut()
                .unwrap()
                .remove(&key);
        })
    }

    fn header(mut self, name: &'static str, value: Option<&str>) -> Self {
        self.headers.retain(|(n, _)| *n != name);
        if let Some(value) = value {
            self.headers.push((name, value.to_owned()));
        }
        self
    }

    fn header_twice(mut self, name: &'static str) -> Self {
        let value = self
            .headers
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap()
            .1
            .clone();
        self.headers.push((name, value));
        self
    }

    fn plain(&self) -> Option<Plain> {
        let body = serde_json::to_vec(&self.body).unwrap();
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            headers.append(
                HeaderName::from_static(name),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        plain_request(&headers, &body, &check_message(&body).unwrap())
    }
}

#[test]
fn plain_requests_of_the_generation_are_answered_here() {
    assert_eq!(Request::list().plain(), Some(Plain::List));
    assert_eq!(
        Request::list().edit(|b| b["id"] = json!("req-7")).plain(),
        Some(Plain::List)
    );
    let billing = json!({"billing": true}).as_object().cloned();
    assert_eq!(
        Request::call().plain(),
        Some(Plain::Call {
            name: "svc_read".into(),
            arguments: billing,
            client: Some("t 1".into()),
        })
    );
    let bare = |arguments: Option<Value>| {
        Request::call().edit(|b| match arguments {
            Some(arguments) => b["params"]["arguments"] = arguments,
            None => drop(b["params"].as_object_mut().unwrap().remove("arguments")),
        })
    };
    for request in [bare(None), bare(Some(Value::Null))] {
        assert_eq!(
            request.plain(),
            Some(Plain::Call {
                name: "svc_read".into(),
                arguments: None,
                client: Some("t 1".into()),
            })
        );
    }
    // rmcp reads clientInfo only when a handler asks for it, and a malformed one passes there
    assert!(
        Request::call()
            .meta("io.modelcontextprotocol/clientInfo", json!(3))
            .plain()
            .is_some()
    );
    assert!(
        Request::call()
            .without_meta("io.modelcontextprotocol/clientInfo")
            .plain()
            .is_some()
    );
}

/// Each request rmcp refuses (its code and status are in the suite's protocol_2026.rs) is left
/// to rmcp, and so is each one asking for more than a plain answer.
#[test]
fn everything_else_is_left_to_rmcp() {
    let cases = [
        // SEP-2243 and the version header: rmcp answers -32020, 400
        (
            "no MCP-Protocol-Version",
            Request::list().header("mcp-protocol-version", None),
        ),
        (
            "another MCP-Protocol-Version",
            Request::list().header("mcp-protocol-version", Some("2025-11-25")),
        ),
        (
            "MCP-Protocol-Version twice",
            Request::list().header_twice("mcp-protocol-version"),
        ),
        ("no Mcp-Method", Request::list().header("mcp-method", None)),
        (
            "another Mcp-Method",
            Request::list().header("mcp-method", Some("tools/call")),
        ),
        (
            "Mcp-Method twice",
            Request::call().header_twice("mcp-method"),
        ),
        ("no Mcp-Name", Request::call().header("mcp-name", None)),
        (
            "another Mcp-Name",
            Request::call().header("mcp-name", Some("svc_write")),
        ),
        ("Mcp-Name twice", Request::call().header_twice("mcp-name")),
        (
            "Mcp-Name in Base64",
            Request::call().header("mcp-name", Some("=?base64?c3ZjX3JlYWQ=?=")),
        ),
        // versions: an unsupported one is -32022, 400; an older one is answered in its shape
        (
            "an unsupported version",
            Request::list()
                .meta(META_VERSION, json!("2099-01-01"))
                .header("mcp-protocol-version", Some("2099-01-01")),
        ),
        (
            "an older version",
            Request::call()
                .meta(META_VERSION, json!("2025-11-25"))
                .header("mcp-protocol-version", Some("2025-11-25")),
        ),
        (
            "a version that is not a string",
            Request::list().meta(META_VERSION, json!(20260728)),
        ),
        // the required capabilities: -32602, 400
        (
            "no clientCapabilities",
            Request::list().without_meta(META_CAPABILITIES),
        ),
        (
            "malformed clientCapabilities",
            Request::call().meta(META_CAPABILITIES, json!(5)),
        ),
        (
            "clientCapabilities of the wrong shape",
            Request::call().meta(META_CAPABILITIES, json!({"extensions": 5})),
        ),
        // more than a plain answer
        (
            "the tasks extension",
            Request::call().meta(
                META_CAPABILITIES,
                json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
            ),
        ),
        (
            "progress",
            Request::call().meta("progressToken", json!("p-1")),
        ),
        (
            "a log level",
            Request::call().meta("io.modelcontextprotocol/logLevel", json!("debug")),
        ),
        (
            "a vendor's key",
            Request::call().meta("anthropic/maxResultSizeChars", json!(100000)),
        ),
        (
            "a cursor",
            Request::list().edit(|b| b["params"]["cursor"] = json!("c")),
        ),
        (
            "a call's member in a list",
            Request::list().edit(|b| b["params"]["arguments"] = json!({})),
        ),
        (
            "an unknown member",
            Request::call().edit(|b| b["params"]["task"] = json!({"ttl": 1000})),
        ),
        (
            "an unknown top-level member",
            Request::list().edit(|b| b["extra"] = json!(1)),
        ),
        (
            "a name that is not a string",
            Request::call()
                .edit(|b| b["params"]["name"] = json!(7))
                .header("mcp-name", Some("7")),
        ),
        (
            "arguments that are not an object",
            Request::call().edit(|b| b["params"]["arguments"] = json!([1])),
        ),
        (
            "an id past i64",
            Request::list().edit(|b| b["id"] = json!(u64::MAX)),
        ),
        ("another method", Request::new("prompts/list", json!({}))),
        (
            "server/discover",
            Request::new("server/discover", json!({})),
        ),
        (
            "no version in _meta (the older generation)",
            Request::list().without_meta(META_VERSION),
        ),
    ];
    for (what, request) in cases {
        assert_eq!(request.plain(), None, "{what}");
    }
}

fn tool(name: &str, schema: Value) -> Tool {
    Tool::new(
        name.to_owned(),
        "a tool",
        Arc::new(schema.as_object().unwrap().clone()),
    )
}

fn tools() -> ListToolsResult {
    let schema = json!({"type": "object", "properties": {"billing": {"type": "boolean"}}});
    ListToolsResult::with_all_items(vec![tool("svc_read", schema)])
        .with_ttl_ms(300_000)
        .with_cache_scope(rmcp::model::CacheScope::Private)
}

#[test]
fn the_list_is_byte_for_byte_what_rmcp_writes() {
    let stateless = Stateless::new(tools()).unwrap();
    for (id, rmcp_id) in [
        (json!(7), NumberOrString::Number(7)),
        (json!("req-7"), NumberOrString::String("req-7".into())),
    ] {
        // as rmcp's handler shapes a 2026-07-28 result, and its transport writes it
        let mut result = ServerResult::ListToolsResult(tools());
        result.fill_missing_cache_hints();
        let rmcp = serde_json::to_string(&ServerJsonRpcMessage::response(result, rmcp_id)).unwrap();
        assert_eq!(stateless.list_body(&id), rmcp);
        assert!(rmcp.contains(r#""resultType":"complete""#), "{rmcp}");
    }
}

#[test]
fn calls_go_to_rmcp_when_a_tool_routes_an_argument_to_a_header() {
    assert!(Stateless::new(tools()).unwrap().calls);
    let annotated = json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
    }});
    let mut list = tools();
    list.tools.push(tool("svc_write", annotated));
    assert!(!Stateless::new(list).unwrap().calls);
}
