//! Helpers of the OAuth suites: a chat client's side of the flow (registration, PKCE, the
//! signed-in owner's consent, the token endpoint) and checks of `/mcp`'s answers.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::*;

/// The redirect URI clients register here: a loopback callback, as desktop clients use.
pub const REDIRECT: &str = "http://127.0.0.1:9/callback";
/// The name clients register under (shown on the consent page and under Connected apps).
pub const APP: &str = "Suite Chat";

/// A PKCE pair: a verifier and its S256 challenge.
pub struct Pkce {
    pub verifier: String,
    pub challenge: String,
}

impl Pkce {
    /// 64 random hex characters (a valid verifier) and base64url(SHA-256(verifier)).
    pub fn new() -> Self {
        let verifier = forged_token();
        Self {
            challenge: s256(&verifier),
            verifier,
        }
    }
}

/// The S256 challenge of `verifier` (RFC 7636 §4.2).
pub fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// An authorization request's parameters, in order; changeable before it is sent.
#[derive(Clone, Debug)]
pub struct Ask {
    pub pairs: Vec<(&'static str, String)>,
}

impl Ask {
    /// What a client sends: code, its id and redirect URI, a fresh state, both scopes, the PKCE
    /// challenge (S256) and this service's `/mcp` as the resource.
    pub fn new(d: &Dash, client_id: &str, pkce: &Pkce) -> Self {
        Self {
            pairs: vec![
                ("response_type", "code".to_owned()),
                ("client_id", client_id.to_owned()),
                ("redirect_uri", REDIRECT.to_owned()),
                ("state", forged_token()),
                ("scope", "mcp offline_access".to_owned()),
                ("code_challenge", pkce.challenge.clone()),
                ("code_challenge_method", "S256".to_owned()),
                ("resource", resource(d)),
            ],
        }
    }

    /// The request with `name` set to `value` (`None`: left out).
    pub fn with(&self, name: &'static str, value: Option<&str>) -> Self {
        let mut pairs: Vec<(&'static str, String)> = self
            .pairs
            .iter()
            .filter(|(n, _)| *n != name)
            .cloned()
            .collect();
        if let Some(value) = value {
            pairs.push((name, value.to_owned()));
        }
        Self { pairs }
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> &str {
        self.pairs
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("", |(_, v)| v.as_str())
    }

    /// The authorization endpoint's path and query.
    pub fn path(&self) -> String {
        let pairs: Vec<(&str, &str)> = self.pairs.iter().map(|(n, v)| (*n, v.as_str())).collect();
        format!("/dashboard/oauth/authorize?{}", form(&pairs))
    }
}

/// This service's protected resource: `{public URL}/mcp`.
pub fn resource(d: &Dash) -> String {
    format!("{}/mcp", d.origin())
}

/// `POST /oauth/register` (RFC 7591) with a JSON body.
pub async fn register_raw(d: &Dash, body: &Value) -> Reply {
    send(
        d.http
            .post(d.server.url("/oauth/register"))
            .header("Content-Type", "application/json")
            .body(body.to_string()),
    )
    .await
}

/// Registers a public client named `name` with `redirect_uris`; its `client_id`.
pub async fn register(d: &Dash, name: &str, redirect_uris: &[&str]) -> String {
    let reply = register_raw(
        d,
        &json!({
            "client_name": name,
            "redirect_uris": redirect_uris,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }),
    )
    .await;
    assert_eq!(reply.status, 201, "{reply:?}");
    reply.json()["client_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no client_id: {reply:?}"))
        .to_owned()
}

/// The `name` and `value` of every `<input>` of the form with `id`, unescaped, in order.
pub fn form_fields(html: &str, id: &str) -> Vec<(String, String)> {
    let start = html
        .find(&format!(r#"id="{id}""#))
        .unwrap_or_else(|| panic!("no form #{id} in:\n{html}"));
    let rest = &html[start..];
    let form = &rest[..rest.find("</form>").expect("the form ends")];
    form.split("<input")
        .skip(1)
        .filter_map(|tag| {
            let tag = &tag[..tag.find('>')?];
            Some((attribute(tag, "name")?, attribute(tag, "value")?))
        })
        .collect()
}

/// The value of the attribute `name` in a tag's text, unescaped.
pub fn attribute(tag: &str, name: &str) -> Option<String> {
    let key = format!(r#" {name}=""#);
    let at = tag.find(&key)? + key.len();
    let end = at + tag[at..].find('"')?;
    Some(unescape(&tag[at..end]))
}

/// The value of `name` among form fields.
pub fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// The consent page of `ask` for the signed-in `session`: 200, with its form's fields.
pub async fn consent(d: &Dash, session: &SignInSession, ask: &Ask) -> Vec<(String, String)> {
    let reply = d.get(&ask.path(), Some(&session.cookie)).await;
    assert_eq!(reply.status, 200, "the consent page: {reply:?}");
    form_fields(&reply.body, "authorize")
}

/// Posts the consent form's `fields` with `decision` from the dashboard's origin.
pub async fn decide(
    d: &Dash,
    session: &SignInSession,
    fields: &[(String, String)],
    decision: &str,
) -> Reply {
    let mut all: Vec<(&str, &str)> = fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    all.push(("decision", decision));
    d.post("/dashboard/oauth/authorize", session, &all).await
}

/// The decoded query of a 303 to `to` (the client's redirect URI, exactly, before `?`).
pub fn redirected(reply: &Reply, to: &str) -> HashMap<String, String> {
    assert_eq!(reply.status, 303, "{reply:?}");
    let target = location(reply);
    let (base, _) = target
        .split_once('?')
        .unwrap_or_else(|| panic!("no query in {target}"));
    assert_eq!(base, to, "{reply:?}");
    reqwest::Url::parse(&target)
        .unwrap_or_else(|e| panic!("{target}: {e}"))
        .query_pairs()
        .into_owned()
        .collect()
}

/// An error redirect to `REDIRECT` with `error`, the request's state and our issuer.
pub fn assert_error_redirect(d: &Dash, reply: &Reply, ask: &Ask, error: &str) {
    let back = redirected(reply, REDIRECT);
    assert_eq!(
        back.get("error").map(String::as_str),
        Some(error),
        "{back:?}"
    );
    assert!(
        back.get("error_description").is_some_and(|t| !t.is_empty()),
        "{back:?}"
    );
    assert_eq!(back["state"], ask.get("state"), "{back:?}");
    assert_eq!(back["iss"], d.origin(), "{back:?}");
    assert!(!back.contains_key("code"), "{back:?}");
}

/// The owner consents to `ask`: the redirect's query (code, state, iss), checked.
pub async fn allow(d: &Dash, session: &SignInSession, ask: &Ask) -> HashMap<String, String> {
    let fields = consent(d, session, ask).await;
    let reply = decide(d, session, &fields, "allow").await;
    let back = redirected(&reply, ask.get("redirect_uri"));
    assert_eq!(back["state"], ask.get("state"), "{back:?}");
    assert_eq!(back["iss"], d.origin(), "{back:?}");
    assert!(is_hex64(&back["code"]), "{back:?}");
    back
}

/// `POST /oauth/token` with form `fields`.
pub async fn token_request(d: &Dash, fields: &[(&str, &str)]) -> Reply {
    send(
        d.http
            .post(d.server.url("/oauth/token"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(form(fields)),
    )
    .await
}

/// The code exchange as the client makes it (with `resource`).
pub async fn exchange(d: &Dash, client_id: &str, code: &str, verifier: &str) -> Reply {
    let resource = resource(d);
    token_request(
        d,
        &[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", REDIRECT),
            ("client_id", client_id),
            ("code_verifier", verifier),
            ("resource", &resource),
        ],
    )
    .await
}

/// `grant_type=refresh_token`.
pub async fn refresh(d: &Dash, client_id: &str, refresh_token: &str) -> Reply {
    token_request(
        d,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
            ("client_id", client_id),
        ],
    )
    .await
}

/// `POST /oauth/revoke` of `token`.
pub async fn revoke(d: &Dash, token: &str) -> Reply {
    send(
        d.http
            .post(d.server.url("/oauth/revoke"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(form(&[("token", token)])),
    )
    .await
}

/// An access and a refresh token.
#[derive(Clone, Debug)]
pub struct Tokens {
    pub access: String,
    pub refresh: String,
}

/// The tokens of a successful token response, checked (RFC 6749 §5.1).
pub fn tokens_of(reply: &Reply) -> Tokens {
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.header("cache-control").as_deref(), Some("no-store"));
    let body = reply.json();
    assert_eq!(body["token_type"], "Bearer", "{body}");
    assert_eq!(body["expires_in"], 3600, "{body}");
    let text = |name: &str| {
        body[name]
            .as_str()
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| panic!("no {name}: {body}"))
            .to_owned()
    };
    let tokens = Tokens {
        access: text("access_token"),
        refresh: text("refresh_token"),
    };
    assert_ne!(tokens.access, tokens.refresh);
    tokens
}

/// An OAuth error answer (RFC 6749 §5.2) with `status` and `error`.
pub fn assert_oauth_error(reply: &Reply, status: u16, error: &str) {
    assert_eq!(reply.status, status, "{reply:?}");
    let body = reply.json();
    assert_eq!(body["error"], error, "{reply:?}");
    assert!(
        body["error_description"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{reply:?}"
    );
    assert!(body.get("access_token").is_none(), "{reply:?}");
}

/// Everything from the consent page to tokens, as `session`'s owner, for `client_id`.
pub async fn connect(d: &Dash, session: &SignInSession, client_id: &str) -> Tokens {
    let pkce = Pkce::new();
    let ask = Ask::new(d, client_id, &pkce);
    let back = allow(d, session, &ask).await;
    tokens_of(&exchange(d, client_id, &back["code"], &pkce.verifier).await)
}

/// A JSON-RPC POST to `/mcp` with `token` as the bearer (none: no `Authorization`).
pub async fn mcp(d: &Dash, token: Option<&str>, body: &Value) -> Reply {
    let mut request = d
        .http
        .post(d.server.url("/mcp"))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream");
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    send(request.body(body.to_string())).await
}

/// The token works at `/mcp`: a metered billing call succeeds; its record.
pub async fn assert_works(d: &Dash, token: &str) -> Value {
    billing_of(&mcp(d, Some(token), &billing_call()).await)
}

/// A 401 from `/mcp` with the JSON-RPC -32001 body and the challenge: resource metadata, scope,
/// and `error` when given (none: no `error` at all).
pub fn assert_challenge(d: &Dash, reply: &Reply, error: Option<&str>) {
    reply.assert_error(401, -32001);
    let challenge = reply
        .header("www-authenticate")
        .unwrap_or_else(|| panic!("no WWW-Authenticate: {reply:?}"));
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    let metadata = format!(
        r#"resource_metadata="{}/.well-known/oauth-protected-resource/mcp""#,
        d.origin()
    );
    assert!(challenge.contains(&metadata), "{challenge}");
    assert!(challenge.contains(r#"scope="mcp""#), "{challenge}");
    match error {
        Some(error) => assert!(
            challenge.contains(&format!(r#"error="{error}""#)),
            "{challenge}"
        ),
        None => assert!(!challenge.contains("error="), "{challenge}"),
    }
}

/// The token is refused at `/mcp` (401, `invalid_token`).
pub async fn assert_refused(d: &Dash, token: &str) {
    let reply = mcp(d, Some(token), &tools_list()).await;
    assert_challenge(d, &reply, Some("invalid_token"));
}

/// A JSON body served to anyone: 200, no-store, `Access-Control-Allow-Origin: *`.
pub async fn public_json(d: &Dash, path: &str) -> Value {
    let reply = d.get(path, None).await;
    assert_eq!(reply.status, 200, "GET {path}: {reply:?}");
    assert_eq!(
        reply.header("access-control-allow-origin").as_deref(),
        Some("*")
    );
    reply.json()
}
