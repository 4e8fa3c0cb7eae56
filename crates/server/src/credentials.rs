//! Where a caller's key may travel: the path, `Authorization: Bearer`, `X-Api-Key`, `?key=`.

use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use toolgate_app::App;
use toolgate_domain::Account;

use crate::error::EdgeError;

/// The one way every route learns who calls: the key from its carrier (`path_key` first on
/// the personal URL), resolved by the app. A refusal is the error map's to answer.
pub async fn authenticate(
    app: &App,
    path_key: Option<String>,
    parts: &Parts,
) -> Result<Account, EdgeError> {
    let presented = presented_key(path_key, &parts.headers, parts.uri.query());
    Ok(app.auth().authenticate(presented.as_deref()).await?)
}

/// The presented key, taken from the first carrier that holds one, in the order
/// path, `Authorization`, `X-Api-Key`, query. Later carriers are ignored, not compared.
pub fn presented_key(
    path_key: Option<String>,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Option<String> {
    path_key
        .filter(|key| !key.is_empty())
        .or_else(|| bearer(headers))
        .or_else(|| header_text(headers, "x-api-key"))
        .or_else(|| query.and_then(query_key))
}

/// The token of `Authorization: Bearer …`, if any.
pub fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_owned())
        .filter(|token| !token.is_empty())
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    let value = headers.get(name)?.to_str().ok()?.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

/// `key=` from a query string. Keys are hex, so a percent-encoded one is simply malformed.
fn query_key(query: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| *name == "key")
        .map(|(_, value)| value.to_owned())
        .filter(|value| !value.is_empty())
}

/// A path or query with every key-shaped token replaced, for logs. A key may arrive anywhere a
/// client puts it (`/u/…`, `/mcp/u/…`, `?api_key=…`, an unrouted path, a query *name*), so
/// every run of 16 or more key characters is hidden, wherever it sits; a brand prefix
/// (`svck_`) stays visible, as it tells which service the key was for.
pub fn redact(path: &str, query: Option<&str>) -> String {
    let mut shown = hide_tokens(path);
    if let Some(query) = query {
        shown.push('?');
        shown.push_str(&hide_tokens(query));
    }
    shown
}

/// Shorter runs are route names and ordinary values; keys are 64 hex digits after a prefix.
const KEY_LIKE_RUN: usize = 16;

fn hide_tokens(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let run = rest.find(|c: char| !is_key_char(c)).unwrap_or(rest.len());
        if run == 0 {
            let separator = rest.chars().next().map_or(1, char::len_utf8);
            shown.push_str(&rest[..separator]);
            rest = &rest[separator..];
            continue;
        }
        let token = &rest[..run];
        if token.len() >= KEY_LIKE_RUN {
            shown.push_str(visible_prefix(token));
            shown.push('…');
        } else {
            shown.push_str(token);
        }
        rest = &rest[run..];
    }
    shown
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '%' | '.' | '~' | '+')
}

/// `svck_` of `svck_0123…`: a short prefix ending in `_`, never part of the secret.
fn visible_prefix(token: &str) -> &str {
    match token.find('_') {
        Some(end) if end < 12 => &token[..=end],
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn carriers_in_order() {
        let mut headers = HeaderMap::new();
        assert_eq!(
            presented_key(None, &headers, Some("a=1&key=q")),
            Some("q".into())
        );
        headers.insert("x-api-key", HeaderValue::from_static(" x "));
        assert_eq!(
            presented_key(None, &headers, Some("key=q")),
            Some("x".into())
        );
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("bearer  b"));
        assert_eq!(
            presented_key(None, &headers, Some("key=q")),
            Some("b".into())
        );
        assert_eq!(
            presented_key(Some("p".into()), &headers, None),
            Some("p".into())
        );
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(presented_key(None, &headers, None), Some("x".into()));
        assert_eq!(presented_key(None, &HeaderMap::new(), Some("key=")), None);
    }

    #[test]
    fn redaction_hides_keys() {
        let key = format!("svck_{}", "0123456789abcdef".repeat(4));
        let shown = |path: &str, query: Option<&str>| {
            let shown = redact(path, query);
            assert!(!shown.contains("0123456789"), "{shown}");
            shown
        };
        assert_eq!(shown(&format!("/u/{key}"), None), "/u/svck_…");
        assert_eq!(shown(&format!("/mcp/u/{key}"), None), "/mcp/u/svck_…");
        assert_eq!(
            shown(&format!("/anything/{key}/x"), None),
            "/anything/svck_…/x"
        );
        assert_eq!(shown("/u/garbage-but-long-enough", None), "/u/…");
        let query = format!("x=1&key={key}");
        assert_eq!(shown("/", Some(&query)), "/?x=1&key=svck_…");
        let query = format!("api_key={key}&{key}=1");
        assert_eq!(shown("/", Some(&query)), "/?api_key=svck_…&svck_…=1");
        let truncated = format!("token=%20{}", &key[5..30]);
        assert_eq!(shown("/", Some(&truncated)), "/?token=…");
        // a signed link's payload and signature (base64url, `.` between) never show
        let signature = "Zm9vYmFyYmF6cXV4X3NpZ25hdHVyZV9oZXJlX3h5eg";
        let link = format!("/files/AVUAAAAAaQ_2lVGv.{signature}/data.csv");
        let shown = redact(&link, None);
        assert!(
            !shown.contains(signature) && !shown.contains("Zm9v"),
            "{shown}"
        );
        assert_eq!(shown, "/files/AVUAAAAAaQ_…/data.csv");
        assert_eq!(redact("/healthz", Some("a=b")), "/healthz?a=b");
        assert_eq!(redact("/billing/status", None), "/billing/status");
    }
}
