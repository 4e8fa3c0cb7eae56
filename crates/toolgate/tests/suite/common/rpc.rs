//! JSON-RPC bodies, the four key carriers, and reading responses (also off a raw socket).
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use super::{Server, assert_billing_record};

/// A JSON-RPC request envelope.
pub fn rpc(id: i64, method: &str, params: Option<Value>) -> Value {
    let mut envelope = json!({"jsonrpc": "2.0", "id": id, "method": method});
    if let Some(params) = params {
        envelope["params"] = params;
    }
    envelope
}

/// `tools/list`.
pub fn tools_list() -> Value {
    rpc(1, "tools/list", None)
}

/// `tools/call` of `tool` with `arguments`.
pub fn tool_call(tool: &str, arguments: Value) -> Value {
    rpc(
        1,
        "tools/call",
        Some(json!({"name": tool, "arguments": arguments})),
    )
}

/// `tools/call` svc_read `{"billing": true}`.
pub fn billing_call() -> Value {
    tool_call("svc_read", json!({"billing": true}))
}

/// The `initialize` request of the session-based generation.
pub fn initialize() -> Value {
    rpc(
        1,
        "initialize",
        Some(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "toolgate-tests", "version": "1"},
        })),
    )
}

/// The 2026-07-28 (stateless) form of a request: `_meta` in params, and the headers that
/// transport requires (`Mcp-Name` for `tools/call`).
pub fn modern_request(
    id: Value,
    method: &str,
    params: Value,
) -> (Value, Vec<(&'static str, String)>) {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let mut headers = vec![
        ("MCP-Protocol-Version", "2026-07-28".to_owned()),
        ("Mcp-Method", method.to_owned()),
    ];
    if let Some(name) = params["name"].as_str().filter(|_| method == "tools/call") {
        headers.push(("Mcp-Name", name.to_owned()));
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    (body, headers)
}

/// The 2026-07-28 form of a `tools/call`.
pub fn modern_tool_call(tool: &str, arguments: Value) -> (Value, Vec<(&'static str, String)>) {
    modern_request(
        json!(1),
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
}

/// Posts a 2026-07-28 request to the personal URL.
pub async fn post_modern(
    client: &reqwest::Client,
    server: &Server,
    key: &str,
    (body, headers): (Value, Vec<(&'static str, String)>),
) -> Reply {
    let mut request = Carrier::Path.post(client, server, key);
    for (name, value) in &headers {
        request = request.header(*name, value);
    }
    send(request.body(body.to_string())).await
}

/// The four places a key may travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carrier {
    /// `POST /u/{key}`
    Path,
    /// `POST /` with `Authorization: Bearer`
    Bearer,
    /// `POST /` with `X-Api-Key`
    XApiKey,
    /// `POST /?key=`
    Query,
}

/// Every carrier.
pub const CARRIERS: [Carrier; 4] = [
    Carrier::Path,
    Carrier::Bearer,
    Carrier::XApiKey,
    Carrier::Query,
];

impl Carrier {
    /// A POST to the MCP endpoint with `key` in this carrier.
    pub fn post(
        self,
        client: &reqwest::Client,
        server: &Server,
        key: &str,
    ) -> reqwest::RequestBuilder {
        let builder = match self {
            Carrier::Path => client.post(server.personal(key)),
            Carrier::Bearer => client
                .post(server.url("/"))
                .header("Authorization", format!("Bearer {key}")),
            Carrier::XApiKey => client.post(server.url("/")).header("X-Api-Key", key),
            Carrier::Query => client.post(server.url(&format!("/?key={key}"))),
        };
        builder
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
    }
}

/// A JSON-RPC POST with `key` in `carrier`.
pub async fn post_rpc(
    client: &reqwest::Client,
    server: &Server,
    carrier: Carrier,
    key: &str,
    body: &Value,
) -> Reply {
    send(carrier.post(client, server, key).body(body.to_string())).await
}

/// A JSON-RPC POST to the personal URL.
pub async fn post_personal(
    client: &reqwest::Client,
    server: &Server,
    key: &str,
    body: &Value,
) -> Reply {
    post_rpc(client, server, Carrier::Path, key, body).await
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {self:?}"))
    }

    /// `error.code` of a JSON-RPC error body.
    pub fn error_code(&self) -> Option<i64> {
        serde_json::from_str::<Value>(&self.body).ok()?["error"]["code"].as_i64()
    }

    /// `result` of a JSON-RPC success, checked to be one.
    pub fn result(&self) -> Value {
        let body = self.json();
        assert_eq!(self.status, 200, "{self:?}");
        assert_eq!(body["jsonrpc"], "2.0", "{self:?}");
        assert!(body.get("error").is_none(), "expected a result: {self:?}");
        body.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("no result: {self:?}"))
    }

    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    /// Checks a JSON-RPC error with this HTTP status and code, and a message a person can read.
    pub fn assert_error(&self, status: u16, code: i64) {
        assert_eq!(self.status, status, "HTTP status: {self:?}");
        let body = self.json();
        assert_eq!(body["jsonrpc"], "2.0", "{self:?}");
        assert!(
            body.get("id").is_some(),
            "an error response carries `id`: {self:?}"
        );
        assert!(body.get("result").is_none(), "{self:?}");
        assert_eq!(
            body["error"]["code"].as_i64(),
            Some(code),
            "JSON-RPC code: {self:?}"
        );
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert!(
            !message.trim().is_empty(),
            "the error needs a message: {self:?}"
        );
    }
}

/// Sends and reads the whole response; a transport failure panics.
pub async fn send(builder: reqwest::RequestBuilder) -> Reply {
    try_send(builder)
        .await
        .unwrap_or_else(|e| panic!("request failed: {e:?}"))
}

/// Sends and reads the whole response.
pub async fn try_send(builder: reqwest::RequestBuilder) -> Result<Reply, reqwest::Error> {
    let response = builder.send().await?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.text().await?;
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// `structuredContent.billing` of a successful billing call.
pub fn billing_of(reply: &Reply) -> Value {
    let result = reply.result();
    assert_eq!(result["isError"], false, "{reply:?}");
    let record = result["structuredContent"]["billing"].clone();
    assert_billing_record(&record);
    record
}

/// A response read off a raw socket, for requests reqwest cannot make (no `Accept` at all).
#[derive(Debug)]
pub struct RawReply {
    pub status: u16,
    /// header names in lower case
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RawReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends exactly `head` (request line and headers, without the blank line) and `body` over
/// HTTP/1.1 with `Connection: close`, and reads the whole answer.
pub async fn raw_http(port: u16, head: &str, body: &[u8]) -> RawReply {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut request = format!(
        "{head}\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    stream.write_all(&request).await.expect("write the request");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .expect("the server answers within 30 s")
        .expect("read the response");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end: {text:?}"));
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    RawReply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size_line, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or(0);
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].strip_prefix("\r\n").unwrap_or(&after[size..]);
    }
    out
}

/// A POST as real clients send it in a legacy session: JSON, `Accept` both, the session header.
pub fn in_session(
    client: &reqwest::Client,
    url: &str,
    session: &str,
    body: &Value,
) -> reqwest::RequestBuilder {
    client
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .body(body.to_string())
}

/// `initialize` of the 2025-11-25 generation; the session id, or the refusal.
pub async fn open_session(client: &reqwest::Client, url: &str) -> Result<String, Reply> {
    let reply = send(
        client
            .post(url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(initialize().to_string()),
    )
    .await;
    match reply.header("mcp-session-id") {
        Some(id) if reply.status == 200 => Ok(id),
        _ => Err(reply),
    }
}
