//! `tools/list` of the older generation answered from bytes rendered once. Every client asks for
//! it on connect and the answer never changes; through rmcp each one built a service, spawned a
//! task and serialised 2.6 KB. Anything unusual (a cursor, a 2026-07-28 request, an unknown
//! protocol version, a Host rmcp would refuse) still goes to rmcp, which has the last word.

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderValue, header};
use axum::response::Response;

use crate::handler::McpHandler;
use crate::jsonrpc::MessageInfo;

/// Versions of the session generation whose `tools/list` result is the one rendered here.
const LEGACY_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The rendered result and the Host values rmcp accepts.
pub struct ToolsList {
    result: String,
    hosts: Vec<(String, Option<u16>)>,
}

impl ToolsList {
    /// Renders `handler`'s tool list once; `hosts` are rmcp's allowed Host values.
    pub fn new(handler: &McpHandler, hosts: &[String]) -> Option<Self> {
        let mut result = serde_json::to_value(handler.tool_list()).ok()?;
        // rmcp shows `resultType` to 2026-07-28 clients only
        result.as_object_mut()?.remove("resultType");
        // 2025-11-25 clients learn here which tools run as tasks (rmcp's `Tool` has no field)
        for tool in result.get_mut("tools")?.as_array_mut()? {
            let name = tool
                .get("name")
                .and_then(|n| n.as_str())
                .unwrap_or_default();
            if let Some(support) = handler.task_support(name).shown() {
                tool.as_object_mut()?.insert(
                    "execution".to_owned(),
                    serde_json::json!({ "taskSupport": support }),
                );
            }
        }
        let result = serde_json::to_string(&result).ok()?;
        // as rmcp: an entry that is not an authority (a bare IPv6 literal) is a host alone
        let hosts = hosts
            .iter()
            .map(|h| {
                authority(h)
                    .unwrap_or_else(|| (h.trim_matches(['[', ']']).to_ascii_lowercase(), None))
            })
            .collect();
        Some(Self { result, hosts })
    }

    /// The answer, when this request is a plain legacy `tools/list` rmcp would serve.
    pub fn answer(&self, parts: &Parts, info: &MessageInfo) -> Option<Response> {
        if info.method.as_deref() != Some("tools/list")
            || info.per_request_version
            || !info.plain_params
        {
            return None;
        }
        let id = info.id.as_ref()?;
        if !self.serves(parts) {
            return None;
        }
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{}}}"#, self.result);
        let mut response = Response::new(Body::from(body));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Some(response)
    }

    /// Whether rmcp would serve this request of the older generation as it is: a protocol
    /// version it knows (or none) and a Host it allows.
    pub fn serves(&self, parts: &Parts) -> bool {
        let version_ok = parts
            .headers
            .get("mcp-protocol-version")
            .is_none_or(|v| v.to_str().is_ok_and(|v| LEGACY_VERSIONS.contains(&v)));
        version_ok && self.host_allowed(parts)
    }

    /// Whether rmcp would accept this request's Host.
    pub(crate) fn host_allowed(&self, parts: &Parts) -> bool {
        let Some((host, port)) = parts
            .headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .and_then(authority)
        else {
            return false;
        };
        self.hosts.iter().any(|(allowed, allowed_port)| {
            *allowed == host && allowed_port.is_none_or(|p| Some(p) == port)
        })
    }
}

/// `host[:port]` as rmcp compares it: lower case, IPv6 brackets dropped.
fn authority(text: &str) -> Option<(String, Option<u16>)> {
    let parsed = http::uri::Authority::try_from(text.trim()).ok()?;
    let host = parsed.host().trim_matches(['[', ']']).to_ascii_lowercase();
    Some((host, parsed.port_u16()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_compare_as_rmcp_compares_them() {
        assert_eq!(
            authority("LocalHost:8080"),
            Some(("localhost".into(), Some(8080)))
        );
        assert_eq!(authority("[::1]:80"), Some(("::1".into(), Some(80))));
        assert_eq!(
            authority("::1"),
            None,
            "a bare IPv6 literal is not an authority"
        );
        assert_eq!(authority("example.com"), Some(("example.com".into(), None)));
    }
}
