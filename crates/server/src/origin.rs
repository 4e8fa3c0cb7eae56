//! `Origin` validation against DNS rebinding and cross-site requests: the public URL's origin
//! and the operator's allow-list pass; any other present Origin gets 403. No Origin passes,
//! since non-browser clients do not send one. What an origin is, is `toolgate_domain::Origin`'s
//! (the dashboard's forms read it with the same parser); this is only the MCP endpoints' policy.

use axum::http::{HeaderMap, header};
use toolgate_domain::Origin;

/// The origins a browser may call from.
#[derive(Debug, Clone)]
pub struct Origins {
    allowed: Vec<Origin>,
}

impl Origins {
    /// Allows the origin of `public_url` and each entry of `extra` (`scheme://host[:port]`).
    pub fn new(public_url: &str, extra: &[String]) -> Self {
        let allowed = std::iter::once(public_url)
            .chain(extra.iter().map(String::as_str))
            .filter_map(Origin::parse)
            .collect();
        Self { allowed }
    }

    /// The normalised allowed origins, for rmcp's own (second) check.
    pub fn list(&self) -> Vec<String> {
        self.allowed.iter().map(|o| o.as_str().to_owned()).collect()
    }

    /// `true` when the request carries no Origin or an allowed one.
    pub fn permits(&self, headers: &HeaderMap) -> bool {
        let Some(value) = headers.get(header::ORIGIN) else {
            return true;
        };
        value
            .to_str()
            .ok()
            .and_then(Origin::parse)
            .is_some_and(|origin| self.allowed.contains(&origin))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_origin(origin: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ORIGIN, HeaderValue::from_static(origin));
        headers
    }

    #[test]
    fn public_origin_and_list_pass_others_fail() {
        let origins = Origins::new(
            "https://Tools.Example.com/base",
            &["http://localhost:6274".into()],
        );
        assert!(origins.permits(&HeaderMap::new()));
        assert!(origins.permits(&with_origin("https://tools.example.com")));
        assert!(origins.permits(&with_origin("https://tools.example.com:443")));
        assert!(origins.permits(&with_origin("http://localhost:6274")));
        assert!(!origins.permits(&with_origin("http://tools.example.com")));
        assert!(!origins.permits(&with_origin("https://evil.example")));
        assert!(!origins.permits(&with_origin("null")));
        assert!(!origins.permits(&with_origin("http://localhost:6275")));
    }
}
