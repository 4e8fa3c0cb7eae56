//! `tools/list` and a plain `tools/call` of the 2026-07-28 generation answered without rmcp,
//! whose stateless service built a service, a transport and two tasks for every such request
//! (the slowest client path, at 0.23× the bare floor). A request is answered here only when
//! rmcp would answer it with a result: it passes every check rmcp makes before its handler (the
//! version in `_meta`, supported and equal to `MCP-Protocol-Version`; the required `_meta`
//! keys; SEP-2243's `Mcp-Method` and `Mcp-Name`; the Host), and its `_meta` asks for nothing
//! more (no progress, no tasks extension, no key this path does not know). Everything else,
//! every refusal included, goes to rmcp, which has the last word and answers as before.

use std::sync::Arc;

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use rmcp::model::{ListToolsResult, ProtocolVersion, RequestMetaObject, ServerResult};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value};
use toolgate_domain::Account;

use crate::Shared;
use crate::jsonrpc::MessageInfo;
use crate::mcp_sessions::CallOrigin;
use crate::tools_call::{self, Generation};

/// The only version this path answers; requests naming another go to rmcp.
const VERSION: &str = "2026-07-28";

/// The `_meta` keys a plain request may carry: the two rmcp requires and the client's name.
/// Any other (a progress token, a log level, a vendor's key) asks for more than this path does.
const PLAIN_META_KEYS: [&str; 3] = [
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/clientInfo",
];

/// The 2026-07-28 answers rendered once.
pub struct Stateless {
    /// The `tools/list` result exactly as rmcp writes it for this generation.
    list_result: String,
    /// Whether `tools/call` is answered here (see [`Stateless::new`]).
    calls: bool,
}

impl Stateless {
    /// Renders `list` as rmcp's handler shapes it for a 2026-07-28 peer.
    pub fn new(list: ListToolsResult) -> Option<Self> {
        // rmcp checks SEP-2243 `Mcp-Param-*` headers against a tool's `x-mcp-header`
        // annotations and this path does not: none of the tools has one, and should one ever,
        // every call goes to rmcp
        let calls = !list.tools.iter().any(|tool| {
            serde_json::to_string(&tool.input_schema)
                .map_or(true, |schema| schema.contains("\"x-mcp-header\""))
        });
        let mut result = ServerResult::ListToolsResult(list);
        result.fill_missing_cache_hints();
        let list_result = serde_json::to_string(&result).ok()?;
        Some(Self { list_result, calls })
    }

    fn list_body(&self, id: &Value) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{}}}"#,
            self.list_result
        )
    }

    fn list(&self, id: &Value) -> Response {
        let mut response = Response::new(Body::from(self.list_body(id)));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

/// A request this path answers.
#[derive(Debug, PartialEq)]
enum Plain {
    List,
    Call {
        name: String,
        arguments: Option<Map<String, Value>>,
        client: Option<Arc<str>>,
    },
}

/// The message as this path reads it: nothing at the top but the JSON-RPC members (which
/// `check_message` has checked) and nothing in `params` it does not know.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    #[serde(rename = "jsonrpc")]
    _jsonrpc: IgnoredAny,
    #[serde(rename = "id")]
    _id: IgnoredAny,
    #[serde(rename = "method")]
    _method: IgnoredAny,
    params: Params,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    #[serde(rename = "_meta")]
    meta: Map<String, Value>,
}

/// The answer when `body` is a 2026-07-28 `tools/list` or plain `tools/call` that rmcp would
/// answer with a result; `None` leaves the request to rmcp.
pub async fn answer(
    state: &Shared,
    account: &Arc<Account>,
    parts: &Parts,
    body: &[u8],
    info: &MessageInfo,
) -> Option<Response> {
    if !info.per_request_version {
        return None;
    }
    let stateless = state.stateless.as_ref()?;
    // rmcp checks an Origin with a parser of its own; the front door's check is not taken as
    // the same, so a browser's request goes to rmcp
    if parts.headers.contains_key(header::ORIGIN) || !state.tools_list.as_ref()?.host_allowed(parts)
    {
        return None;
    }
    let id = info.id.as_ref()?;
    match plain_request(&parts.headers, body, info)? {
        Plain::List if state.app.calls().may_call_all(account) => Some(stateless.list(id)),
        Plain::List => None,
        Plain::Call {
            name,
            arguments,
            client,
        } if stateless.calls && state.handler.is_tool(&name) => {
            let generation = Generation::Stateless;
            let origin = CallOrigin {
                client,
                session: None,
            };
            let call = tools_call::Call {
                name,
                arguments,
                origin: Some(origin),
            };
            Some(tools_call::run(state, account, parts, id, call, generation).await)
        }
        Plain::Call { .. } => None,
    }
}

/// What the request asks, when it is one this path answers and passes what rmcp checks.
fn plain_request(headers: &HeaderMap, body: &[u8], info: &MessageInfo) -> Option<Plain> {
    let method = info.method.as_deref()?;
    // rmcp reads an id as a string or an i64
    let id_readable = info
        .id
        .as_ref()
        .is_some_and(|id| id.is_string() || id.is_i64());
    if !id_readable || !info.per_request_version {
        return None;
    }
    let params = serde_json::from_slice::<Envelope>(body).ok()?.params;
    let client = CallOrigin::client_of(params.meta.get("io.modelcontextprotocol/clientInfo"));
    if !meta_is_plain(params.meta) {
        return None;
    }
    let plain = match (method, params.name) {
        ("tools/list", None) if params.arguments.is_none() => Plain::List,
        ("tools/call", Some(name)) => Plain::Call {
            name,
            arguments: params.arguments,
            client,
        },
        _ => return None,
    };
    let name = match &plain {
        Plain::List => None,
        Plain::Call { name, .. } => Some(name.as_str()),
    };
    headers_match(headers, method, name).then_some(plain)
}

/// rmcp's checks of `_meta`: a version it supports (here: this one), the capabilities as its
/// type reads them; and nothing asked beyond a plain request (the tasks extension is answered
/// by the tasks module or rmcp).
fn meta_is_plain(meta: Map<String, Value>) -> bool {
    if !meta
        .keys()
        .all(|key| PLAIN_META_KEYS.contains(&key.as_str()))
    {
        return false;
    }
    let meta = RequestMetaObject::from(meta);
    meta.missing_required_keys(&ProtocolVersion::V_2026_07_28)
        .is_empty()
        && meta
            .protocol_version()
            .is_some_and(|version| version.as_str() == VERSION)
        && meta
            .client_capabilities()
            .is_some_and(|capabilities| !capabilities.supports_tasks())
}

/// SEP-2243 as rmcp checks it: `MCP-Protocol-Version` equal to the version in `_meta`,
/// `Mcp-Method` the method, and for a call `Mcp-Name` the tool, each given once. A name sent
/// Base64-wrapped is compared by rmcp.
fn headers_match(headers: &HeaderMap, method: &str, name: Option<&str>) -> bool {
    single(headers, "mcp-protocol-version") == Some(VERSION.as_bytes())
        && single(headers, "mcp-method") == Some(method.as_bytes())
        && name.is_none_or(|name| single(headers, "mcp-name") == Some(name.as_bytes()))
}

/// The value of header `name`, when it is given exactly once.
fn single<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a [u8]> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    values.next().is_none().then(|| first.as_bytes())
}

#[cfg(test)]
#[path = "stateless_tests.rs"]
mod tests;
