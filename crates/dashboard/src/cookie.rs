//! The session cookie: its name and scope, and reading it from a request.
//!
//! Behind https it is `__Host-toolgate_session` with `Secure` and `Path=/` (RFC 6265bis §4.1.3.2):
//! a browser keeps a cookie of that name only when this very host set it over https, without
//! `Domain`, so a sibling subdomain cannot toss one in. Over plain http (local development)
//! browsers refuse the prefix, so it is `toolgate_session` with `Path=/dashboard`. A request
//! naming the session cookie twice is refused: which of the two the owner's own is cannot be told.

use axum::http::{HeaderMap, header};
use toolgate_domain::SecretToken;

/// The cookie's name behind https.
const HOST_NAME: &str = "__Host-toolgate_session";
/// The cookie's name over plain http.
const PLAIN_NAME: &str = "toolgate_session";
/// Seconds the cookie is kept by the browser (the session's own expiry is enforced on the server).
const MAX_AGE: u64 = 7 * 24 * 3600;

/// How the sign-in session's cookie is named and scoped for one public URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignInCookie {
    name: &'static str,
    path: &'static str,
    secure: bool,
}

/// A request carried the session cookie more than once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TwoSessions;

impl SignInCookie {
    /// The cookie of a service reached at `public_url`: prefixed and `Secure` behind https.
    pub fn for_public_url(public_url: &str) -> Self {
        let https = public_url
            .get(..8)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"));
        if https {
            Self {
                name: HOST_NAME,
                path: "/",
                secure: true,
            }
        } else {
            Self {
                name: PLAIN_NAME,
                path: "/dashboard",
                secure: false,
            }
        }
    }

    /// The `Set-Cookie` value that carries a new session.
    pub fn set(&self, token: &SecretToken) -> String {
        self.line(token.expose(), MAX_AGE)
    }

    /// The `Set-Cookie` value that makes the browser forget the session.
    pub fn clear(&self) -> String {
        self.line("", 0)
    }

    fn line(&self, value: &str, max_age: u64) -> String {
        format!(
            "{}={value}; Path={}; Max-Age={max_age}; HttpOnly; SameSite=Lax{}",
            self.name,
            self.path,
            if self.secure { "; Secure" } else { "" }
        )
    }

    /// Whether the request names the cookie at all (well-formed or not).
    pub fn present(&self, headers: &HeaderMap) -> bool {
        self.values(headers).next().is_some()
    }

    /// The session token the request carries, if it has the right shape; `Err` when the
    /// cookie comes more than once, whatever the values.
    pub fn token(&self, headers: &HeaderMap) -> Result<Option<SecretToken>, TwoSessions> {
        let mut values = self.values(headers);
        let first = values.next();
        if values.next().is_some() {
            return Err(TwoSessions);
        }
        Ok(first.and_then(SecretToken::parse))
    }

    /// The values of every cookie of this name, over all `Cookie` lines.
    fn values<'h>(&self, headers: &'h HeaderMap) -> impl Iterator<Item = &'h str> + use<'h> {
        let name = self.name;
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|line| line.to_str().ok())
            .flat_map(|line| line.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .filter(move |(found, _)| *found == name)
            .map(|(_, value)| value.trim())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use axum::http::HeaderValue;

    use super::*;

    fn with_cookies(lines: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(header::COOKIE, HeaderValue::from_str(line).unwrap());
        }
        headers
    }

    #[test]
    fn behind_https_the_cookie_is_host_prefixed_secure_and_at_the_root() {
        let token = SecretToken::generate().unwrap();
        for url in ["https://tools.example", "HTTPS://tools.example/"] {
            let cookie = SignInCookie::for_public_url(url);
            assert_eq!(
                cookie.set(&token),
                format!(
                    "__Host-toolgate_session={}; Path=/; Max-Age=604800; HttpOnly; \
                     SameSite=Lax; Secure",
                    token.expose()
                )
            );
            assert_eq!(
                cookie.clear(),
                "__Host-toolgate_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax; Secure"
            );
        }
    }

    #[test]
    fn over_plain_http_the_cookie_keeps_its_plain_name_and_path() {
        let token = SecretToken::generate().unwrap();
        let cookie = SignInCookie::for_public_url("http://127.0.0.1:8080");
        let line = cookie.set(&token);
        assert_eq!(
            line,
            format!(
                "toolgate_session={}; Path=/dashboard; Max-Age=604800; HttpOnly; SameSite=Lax",
                token.expose()
            )
        );
        assert!(!line.contains("Secure") && !line.contains("__Host-"));
        assert!(cookie.clear().contains("Max-Age=0"));
    }

    #[test]
    fn the_session_cookie_is_found_among_others_and_only_under_its_own_name() {
        let token = SecretToken::generate().unwrap();
        let plain = SignInCookie::for_public_url("http://127.0.0.1:8080");
        let host = SignInCookie::for_public_url("https://tools.example");
        let line = format!("a=b; toolgate_session={}; c=d", token.expose());
        let headers = with_cookies(&[&line]);
        assert_eq!(plain.token(&headers).unwrap().unwrap().hash(), token.hash());
        // a sibling's unprefixed cookie is nothing to the https service
        assert!(host.token(&headers).unwrap().is_none());
        assert!(!host.present(&headers));
        let line = format!("__Host-toolgate_session={}", token.expose());
        let headers = with_cookies(&[&line]);
        assert_eq!(host.token(&headers).unwrap().unwrap().hash(), token.hash());
        assert!(plain.token(&headers).unwrap().is_none());
        let junk = with_cookies(&["toolgate_session=nothex"]);
        assert!(plain.token(&junk).unwrap().is_none());
        assert!(plain.present(&junk));
    }

    #[test]
    fn two_session_cookies_are_refused_on_one_line_or_on_two() {
        let token = SecretToken::generate().unwrap();
        let other = SecretToken::generate().unwrap();
        let plain = SignInCookie::for_public_url("http://127.0.0.1:8080");
        let host = SignInCookie::for_public_url("https://tools.example");
        let (a, b) = (token.expose(), other.expose());
        for (cookie, name) in [
            (plain, "toolgate_session"),
            (host, "__Host-toolgate_session"),
        ] {
            for lines in [
                vec![format!("{name}={a}; {name}={b}")],
                vec![format!("{name}={a}"), format!("x=1; {name}={b}")],
                vec![format!("{name}={a}; {name}={a}")],
                vec![format!("{name}=nothex; {name}={a}")],
            ] {
                let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
                assert!(matches!(
                    cookie.token(&with_cookies(&lines)),
                    Err(TwoSessions)
                ));
            }
        }
    }
}
