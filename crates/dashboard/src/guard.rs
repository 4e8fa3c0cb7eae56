//! Who is signed in, and whether a form may be trusted: the session cookie, the origin of a
//! form post, the anti-forgery value, and the headers every page carries.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::Markup;
use toolgate_domain::{Account, Origin, SecretToken};

use crate::Dash;
use crate::cookie::TwoSessions;
use crate::views;

/// Scripts and styles from this origin only, no frames, no plug-ins.
const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; \
                   connect-src 'none'; base-uri 'none'; frame-ancestors 'none'";

/// A signed-in owner: the account and the session's token (for the anti-forgery value).
pub struct Signed {
    /// Whose session it is.
    pub account: Account,
    /// The cookie's token.
    pub token: SecretToken,
}

impl Signed {
    /// The anti-forgery value every form of this session carries.
    pub fn csrf(&self) -> String {
        self.token.csrf()
    }
}

impl FromRequestParts<Dash> for Signed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Dash) -> Result<Self, Response> {
        match current(state, &parts.headers).await {
            Ok(Some(signed)) => Ok(signed),
            Ok(None) if !state.cookie.present(&parts.headers) => {
                Err(see_other("/dashboard/sign-in"))
            }
            Ok(None) => Err(with_cookie(
                see_other("/dashboard/sign-in"),
                &state.cookie.clear(),
            )),
            Err(refused) => Err(refused),
        }
    }
}

/// The signed-in owner of a request, `Ok(None)` when there is no live session; two session
/// cookies are answered with a 400 page.
pub async fn current(state: &Dash, headers: &HeaderMap) -> Result<Option<Signed>, Response> {
    let token = match state.cookie.token(headers) {
        Ok(Some(token)) => token,
        Ok(None) => return Ok(None),
        Err(TwoSessions) => return Err(two_sessions()),
    };
    let Some(sign_in) = state.app.sign_in() else {
        return Err(unavailable());
    };
    match sign_in.session(&token).await {
        Ok(Some(account)) => Ok(Some(Signed { account, token })),
        Ok(None) => Ok(None),
        Err(err) => Err(failed("cannot read a dashboard session", &err)),
    }
}

/// Whether a form post comes from the dashboard's own pages.
pub fn same_origin(state: &Dash, headers: &HeaderMap) -> bool {
    from_origin(state.origin.as_ref(), headers)
}

/// The forms' policy over `toolgate_domain::Origin` (the parser the MCP endpoints' allow-list
/// reads with): a browser names the page's origin (`Origin`, else `Sec-Fetch-Site`), which must
/// be `expected`; a request naming neither is no browser's cross-site post.
fn from_origin(expected: Option<&Origin>, headers: &HeaderMap) -> bool {
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    match headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        // an opaque origin (a privacy setting, a sandboxed frame): only the browser's own
        // account of where the request came from can vouch for it
        Some("null") => site == Some("same-origin"),
        Some(origin) => {
            expected.is_some_and(|expected| Origin::parse(origin).as_ref() == Some(expected))
        }
        None => site.is_none_or(|site| site == "same-origin" || site == "none"),
    }
}

/// Where a sign-in may lead on to: only an authorization request of this service (a path, so
/// never another site), of a sane length.
pub fn safe_next(next: &str) -> Option<&str> {
    let ok = next.starts_with("/dashboard/oauth/authorize?")
        && next.len() <= 4096
        && !next.contains(['\r', '\n', '\\']);
    ok.then_some(next)
}

/// Whether a signed-in form may be trusted: its origin and its anti-forgery value.
pub fn form_ok(state: &Dash, headers: &HeaderMap, signed: &Signed, csrf: &str) -> bool {
    same_origin(state, headers) && signed.token.csrf_matches(csrf)
}

/// 400 for a request carrying the session cookie twice (one may have been planted by another
/// site): neither is used, and neither is cleared, which would leave the planted one in force.
fn two_sessions() -> Response {
    page(
        StatusCode::BAD_REQUEST,
        views::message_page(
            "Two sign-ins in one browser",
            "Your browser sent two dashboard session cookies, so neither was used. Delete this \
             site's cookies in your browser, then sign in again.",
            true,
        ),
    )
}

/// 403 for a forged or cross-site form.
pub fn forbidden() -> Response {
    page(
        StatusCode::FORBIDDEN,
        views::message_page(
            "Request refused",
            "This form did not come from your dashboard (or the page was open too long). \
             Reload the page and try again.",
            true,
        ),
    )
}

/// Logs why an action failed (never sent) and answers 503.
pub fn failed(what: &str, error: &dyn std::fmt::Debug) -> Response {
    tracing::error!(error = ?error, "{what}");
    unavailable()
}

/// 503 when storage or the vault fails.
pub fn unavailable() -> Response {
    page(
        StatusCode::SERVICE_UNAVAILABLE,
        views::message_page(
            "Temporarily unavailable",
            "The dashboard cannot do this right now. Please retry in a moment.",
            true,
        ),
    )
}

/// An HTML page with the headers every dashboard page carries.
pub fn page(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    secure_headers(headers);
    response
}

/// No caching, no sniffing, no framing, the content policy, and a referrer only to this
/// origin: the confirmation page's URL holds a sign-in token that must not reach another site
/// (and same-origin posts then carry their real `Origin`; under `no-referrer` Chromium sends
/// `Origin: null`).
pub fn secure_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

/// 303 to `location` (after a form: the browser then GETs it).
pub fn see_other(location: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    secure_headers(response.headers_mut());
    response
}

/// Adds a `Set-Cookie` to `response`.
pub fn with_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn a_form_comes_from_the_public_urls_origin() {
        let ours = Origin::parse("https://Tools.Example/dashboard");
        let from =
            |pairs: &[(&'static str, &'static str)]| from_origin(ours.as_ref(), &headers(pairs));
        for same in [
            "https://tools.example",
            "https://TOOLS.example:443",
            "https://tools.example:443",
        ] {
            assert!(from(&[("origin", same)]), "{same}");
        }
        for other in [
            "http://tools.example",
            "https://tools.example:8443",
            "https://evil.example",
            "https://tools.example.evil.example",
            "garbage",
        ] {
            assert!(!from(&[("origin", other)]), "{other}");
        }
        assert!(!from(&[("origin", "null")]), "null alone");
        assert!(!from(&[
            ("origin", "null"),
            ("sec-fetch-site", "same-site")
        ]));
        assert!(from(&[
            ("origin", "null"),
            ("sec-fetch-site", "same-origin")
        ]));
        assert!(from(&[]), "no browser");
        assert!(from(&[("sec-fetch-site", "none")]));
        assert!(!from(&[("sec-fetch-site", "cross-site")]));
        let nowhere = headers(&[("origin", "https://tools.example")]);
        assert!(
            !from_origin(None, &nowhere),
            "no public origin, no origin passes"
        );
    }
}
