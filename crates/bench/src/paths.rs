//! The ways real clients reach the server, each measured on its own: a benchmark of one path
//! once hid a 44 ms stall on every request of the path most clients take.
//!
//! - legacy + SSE: the 2025-11-25 handshake, one session, `Accept: application/json,
//!   text/event-stream` (Claude Desktop via mcp-remote, Cursor, VS Code, the SDKs' default);
//! - legacy + JSON: the same session, `Accept: application/json` (plain HTTP clients);
//! - 2026-07-28: no session, `_meta` and the `Mcp-Method` header on every request;
//! - bare: no session and no protocol headers (curl, scripts).

use anyhow::{Context, Result, bail};
use http::header::{ACCEPT, HeaderName};
use http::{HeaderValue, StatusCode};

use crate::load::{Endpoint, Workload};

/// A way a client reaches the MCP endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientPath {
    /// 2025-11-25 session, SSE accepted.
    LegacySse,
    /// 2025-11-25 session, JSON only.
    LegacyJson,
    /// 2026-07-28, stateless.
    Modern,
    /// No session, no protocol headers.
    Bare,
}

/// What is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// `tools/list`.
    ToolsList,
    /// `tools/call` of `svc_read {"billing": true}`, one metered call.
    Billing,
}

const BOTH: &str = "application/json, text/event-stream";
const JSON: &str = "application/json";
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"toolgate-bench","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const MODERN_META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

impl ClientPath {
    /// Every path, the one most real clients take first.
    pub const ALL: [ClientPath; 4] = [
        ClientPath::LegacySse,
        ClientPath::LegacyJson,
        ClientPath::Modern,
        ClientPath::Bare,
    ];

    /// The label of a figure of this path.
    pub fn label(self, ask: Ask) -> &'static str {
        match (self, ask) {
            (ClientPath::LegacySse, Ask::ToolsList) => "tools/list [legacy session, SSE accepted]",
            (ClientPath::LegacyJson, Ask::ToolsList) => "tools/list [legacy session, JSON only]",
            (ClientPath::Modern, Ask::ToolsList) => "tools/list [2026-07-28]",
            (ClientPath::Bare, Ask::ToolsList) => "tools/list [bare POST]",
            (ClientPath::LegacySse, Ask::Billing) => "svc_read billing [legacy session, SSE]",
            (ClientPath::LegacyJson, Ask::Billing) => "svc_read billing [legacy session, JSON]",
            (ClientPath::Modern, Ask::Billing) => "svc_read billing [2026-07-28]",
            (ClientPath::Bare, Ask::Billing) => "svc_read billing [bare POST]",
        }
    }

    fn accept(self) -> &'static str {
        match self {
            ClientPath::LegacyJson => JSON,
            _ => BOTH,
        }
    }

    /// The workload of `ask` on this path, opening a session first where the path has one.
    pub async fn workload(self, endpoint: &Endpoint, path: &str, ask: Ask) -> Result<Workload> {
        let (method, params) = match ask {
            Ask::ToolsList => ("tools/list", String::new()),
            Ask::Billing => (
                "tools/call",
                r#""name":"svc_read","arguments":{"billing":true}"#.to_owned(),
            ),
        };
        let needle: &'static [u8] = match ask {
            Ask::ToolsList => b"\"svc_read\"",
            Ask::Billing => b"\"isError\":false",
        };
        let mut headers = vec![(ACCEPT, HeaderValue::from_static(self.accept()))];
        let body = match self {
            ClientPath::LegacySse | ClientPath::LegacyJson => {
                let session = open_session(endpoint, path, self.accept(), Vec::new()).await?;
                headers.push((HeaderName::from_static("mcp-session-id"), session));
                headers.push(protocol_version("2025-11-25"));
                request(method, &params)
            }
            ClientPath::Modern => {
                headers.push(protocol_version("2026-07-28"));
                headers.push((
                    HeaderName::from_static("mcp-method"),
                    HeaderValue::from_static(method),
                ));
                if ask == Ask::Billing {
                    headers.push((
                        HeaderName::from_static("mcp-name"),
                        HeaderValue::from_static("svc_read"),
                    ));
                }
                let params = if params.is_empty() {
                    MODERN_META.to_owned()
                } else {
                    format!("{params},{MODERN_META}")
                };
                request(method, &params)
            }
            ClientPath::Bare => request(method, &params),
        };
        Ok(Workload::post(path, body, vec![needle])?.with_headers(headers))
    }
}

/// The headers of a 2026-07-28 `tools/call` of `tool`, as a client of that revision sends them
/// (no session; the method and the tool's name also in headers).
pub fn modern_call_headers(tool: &'static str) -> Vec<(HeaderName, HeaderValue)> {
    vec![
        (ACCEPT, HeaderValue::from_static(BOTH)),
        protocol_version("2026-07-28"),
        (
            HeaderName::from_static("mcp-method"),
            HeaderValue::from_static("tools/call"),
        ),
        (
            HeaderName::from_static("mcp-name"),
            HeaderValue::from_static(tool),
        ),
    ]
}

/// `request` (a JSON-RPC request) with the `_meta` every 2026-07-28 request carries.
pub fn with_modern_meta(request: &str) -> Result<String> {
    let mut body: serde_json::Value =
        serde_json::from_str(request).context("the request is not JSON")?;
    let meta: serde_json::Value =
        serde_json::from_str(&format!("{{{MODERN_META}}}")).context("the _meta of 2026-07-28")?;
    body["params"]["_meta"] = meta["_meta"].clone();
    Ok(body.to_string())
}

/// The headers of a request in a new legacy session with SSE accepted, as real clients send them.
pub async fn legacy_session(
    endpoint: &Endpoint,
    path: &str,
) -> Result<Vec<(HeaderName, HeaderValue)>> {
    legacy_session_with(endpoint, path, Vec::new()).await
}

/// The same, for a client that also sends `credentials` (an `Authorization` header) on every
/// request of the session.
pub async fn legacy_session_with(
    endpoint: &Endpoint,
    path: &str,
    credentials: Vec<(HeaderName, HeaderValue)>,
) -> Result<Vec<(HeaderName, HeaderValue)>> {
    let session = open_session(endpoint, path, BOTH, credentials.clone()).await?;
    let mut headers = credentials;
    headers.extend([
        (ACCEPT, HeaderValue::from_static(BOTH)),
        (HeaderName::from_static("mcp-session-id"), session),
        protocol_version("2025-11-25"),
    ]);
    Ok(headers)
}

fn protocol_version(version: &'static str) -> (HeaderName, HeaderValue) {
    (
        HeaderName::from_static("mcp-protocol-version"),
        HeaderValue::from_static(version),
    )
}

fn request(method: &str, params: &str) -> String {
    if params.is_empty() {
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"}}"#)
    } else {
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{{params}}}}}"#)
    }
}

/// `initialize` and `notifications/initialized`, as a client does; the session's id.
async fn open_session(
    endpoint: &Endpoint,
    path: &str,
    accept: &'static str,
    credentials: Vec<(HeaderName, HeaderValue)>,
) -> Result<HeaderValue> {
    let mut accept_headers = credentials;
    accept_headers.push((ACCEPT, HeaderValue::from_static(accept)));
    let accept = accept_headers;
    let init =
        Workload::post(path, INITIALIZE, vec![b"protocolVersion"])?.with_headers(accept.clone());
    let (status, headers, body) = init.send_once(endpoint).await?;
    if status != StatusCode::OK {
        bail!(
            "initialize: HTTP {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let session = headers
        .get("mcp-session-id")
        .cloned()
        .context("initialize opened no session")?;
    let mut in_session = accept;
    in_session.push((HeaderName::from_static("mcp-session-id"), session.clone()));
    in_session.push(protocol_version("2025-11-25"));
    let initialized = Workload::post(path, INITIALIZED, vec![])?.with_headers(in_session);
    let (status, _, body) = initialized.send_once(endpoint).await?;
    if status != StatusCode::ACCEPTED {
        bail!(
            "notifications/initialized: HTTP {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    Ok(session)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_json_rpc() {
        for (method, params) in [("tools/list", ""), ("tools/call", r#""name":"x""#)] {
            let body: serde_json::Value =
                serde_json::from_str(&request(method, params)).unwrap_or_default();
            assert_eq!(body["method"], method);
        }
        let modern = request("tools/list", MODERN_META);
        let body: serde_json::Value = serde_json::from_str(&modern).unwrap_or_default();
        assert_eq!(
            body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
    }

    #[test]
    fn a_modern_call_carries_its_meta_and_keeps_its_arguments() {
        let call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"svc_write","arguments":{"code":"1+1"}}}"#;
        let body: serde_json::Value =
            serde_json::from_str(&with_modern_meta(call).unwrap_or_default()).unwrap_or_default();
        assert_eq!(
            body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
        assert_eq!(body["params"]["arguments"]["code"], "1+1");
        let headers = modern_call_headers("svc_write");
        assert!(
            headers
                .iter()
                .any(|(n, v)| n == "mcp-name" && v == "svc_write")
        );
        assert!(
            headers
                .iter()
                .any(|(n, v)| n == "mcp-protocol-version" && v == "2026-07-28")
        );
    }
}
