//! Where a caller's key may travel: the path, `Authorization: Bearer`, `X-Api-Key`, `?key=`.

use axum::http::{HeaderMap, header};

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

fn bearer(headers: &HeaderMap) -> Option<String> {
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

/// A path or query with every key replaced by `…`, for logs.
pub fn redact(path: &str, query: Option<&str>) -> String {
    let mut shown = match path.strip_prefix("/u/") {
        Some(rest) => {
            let prefix: String = rest.chars().take_while(|c| *c != '_').collect();
            if rest.contains('_') {
                format!("/u/{prefix}_…")
            } else {
                "/u/…".to_owned()
            }
        }
        None => path.to_owned(),
    };
    if let Some(query) = query {
        let parts: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some(("key", _)) => "key=…".to_owned(),
                _ => pair.to_owned(),
            })
            .collect();
        shown.push('?');
        shown.push_str(&parts.join("&"));
    }
    shown
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
        assert_eq!(redact("/u/svck_0123abcd", None), "/u/svck_…");
        assert_eq!(redact("/u/garbage", None), "/u/…");
        assert_eq!(redact("/", Some("x=1&key=svck_00")), "/?x=1&key=…");
        assert_eq!(redact("/healthz", None), "/healthz");
    }
}
