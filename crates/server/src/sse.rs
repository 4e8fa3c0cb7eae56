//! Content negotiation around rmcp, which insists on `Accept: application/json, text/event-stream`.
//! A caller that accepts only JSON (curl, plain HTTP clients) still gets its answer: the stream is
//! read to its JSON-RPC response, which is returned inline.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use http_body_util::BodyExt;

/// What the caller's `Accept` allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepts {
    /// `text/event-stream` may be returned.
    pub sse: bool,
}

/// Reads the caller's `Accept` and rewrites it to what rmcp requires.
pub fn negotiate(headers: &mut HeaderMap) -> Accepts {
    let listed: Vec<String> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|item| {
            item.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .collect();
    let sse = listed.iter().any(|t| t == "text/event-stream");
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    Accepts { sse }
}

/// Responses larger than this are not buffered into JSON; the stream is passed on unchanged.
const MAX_BUFFERED: usize = 64 * 1024 * 1024;

/// Turns an SSE response into the inline JSON of its last JSON-RPC response, when the caller
/// cannot read streams. Anything else passes through.
pub async fn inline_if_needed(response: Response, accepts: Accepts) -> Response {
    let is_stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if accepts.sse || !is_stream {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = match http_body_util::Limited::new(body, MAX_BUFFERED)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return Response::from_parts(parts, Body::empty()),
    };
    let Some(message) = last_response_event(&String::from_utf8_lossy(&bytes)) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::CACHE_CONTROL);
    Response::from_parts(parts, Body::from(message))
}

/// The data of the last event that is a JSON-RPC response (it has `result` or `error`).
fn last_response_event(stream: &str) -> Option<String> {
    let mut found = None;
    for event in stream.split("\n\n") {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        let data = data.join("\n");
        if serde_json::from_str::<IsResponse>(&data).is_ok_and(|r| r.0) {
            found = Some(data);
        }
    }
    found
}

/// Whether a JSON text is an object with `result` or `error`, read without building its values:
/// a result may nest deeper than serde_json builds (a tenant's JSON, a few levels down in
/// `structuredContent`), and is passed on as it is.
struct IsResponse(bool);

impl<'de> serde::Deserialize<'de> for IsResponse {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(IsResponseVisitor)
    }
}

struct IsResponseVisitor;

impl<'de> serde::de::Visitor<'de> for IsResponseVisitor {
    type Value = IsResponse;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<IsResponse, A::Error> {
        let mut found = false;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            map.next_value::<serde::de::IgnoredAny>()?;
            found |= key == "result" || key == "error";
        }
        Ok(IsResponse(found))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<IsResponse, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(IsResponse(false))
    }

    fn visit_bool<E>(self, _: bool) -> Result<IsResponse, E> {
        Ok(IsResponse(false))
    }
    fn visit_i64<E>(self, _: i64) -> Result<IsResponse, E> {
        Ok(IsResponse(false))
    }
    fn visit_u64<E>(self, _: u64) -> Result<IsResponse, E> {
        Ok(IsResponse(false))
    }
    fn visit_f64<E>(self, _: f64) -> Result<IsResponse, E> {
        Ok(IsResponse(false))
    }
    fn visit_str<E>(self, _: &str) -> Result<IsResponse, E> {
        Ok(IsResponse(false))
    }
    fn visit_unit<E>(self) -> Result<IsResponse, E> {
        Ok(IsResponse(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_is_rewritten_and_remembered() {
        let mut headers = HeaderMap::new();
        assert!(!negotiate(&mut headers).sse);
        assert_eq!(
            headers[header::ACCEPT],
            "application/json, text/event-stream"
        );
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json;q=1, Text/Event-Stream"),
        );
        assert!(negotiate(&mut headers).sse);
    }

    #[test]
    fn finds_the_response_among_events() {
        let stream = "id: 0\ndata: \n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n";
        assert_eq!(
            last_response_event(stream).as_deref(),
            Some("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}")
        );
        assert_eq!(last_response_event("data: nope\n\n"), None);
    }

    #[test]
    fn a_response_nested_past_serde_jsons_limit_is_still_found() {
        for depth in [200, 1_000_000] {
            let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let response = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"x":{deep}}}}}"#);
            let stream = format!("event: message\ndata: {response}\n\n");
            assert_eq!(
                last_response_event(&stream).as_deref(),
                Some(response.as_str())
            );
        }
        assert_eq!(
            last_response_event("data: [1,2]\n\ndata: \"result\"\n\n"),
            None
        );
        assert_eq!(last_response_event("data: {\"result\":\n\n"), None);
    }
}
