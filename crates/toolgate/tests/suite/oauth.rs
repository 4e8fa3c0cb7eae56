//! OAuth 2.1 at `/mcp` over real HTTP, as a chat client and its user's browser meet it: dynamic
//! registration, the consent page of the signed-in owner, PKCE S256 computed here, codes and
//! rotating refresh tokens, revocation (by the client and from Connected apps) taking effect at
//! once, and every refusal that keeps the server from becoming an open redirector. No redirect
//! is followed: each `Location` is read and checked.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::common::*;

/// The redirect URI clients register here: a loopback callback, as desktop clients use.
const REDIRECT: &str = "http://127.0.0.1:9/callback";
/// The name clients register under (shown on the consent page and under Connected apps).
const APP: &str = "Suite Chat";

/// A PKCE pair: a verifier and its S256 challenge.
struct Pkce {
    verifier: String,
    challenge: String,
}

impl Pkce {
    /// 64 random hex characters (a valid verifier) and base64url(SHA-256(verifier)).
    fn new() -> Self {
        let verifier = forged_token();
        Self {
            challenge: s256(&verifier),
            verifier,
        }
    }
}

/// The S256 challenge of `verifier` (RFC 7636 §4.2).
fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// An authorization request's parameters, in order; changeable before it is sent.
#[derive(Clone, Debug)]
struct Ask {
    pairs: Vec<(&'static str, String)>,
}

impl Ask {
    /// What a client sends: code, its id and redirect URI, a fresh state, both scopes, the PKCE
    /// challenge (S256) and this service's `/mcp` as the resource.
    fn new(d: &Dash, client_id: &str, pkce: &Pkce) -> Self {
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
    fn with(&self, name: &'static str, value: Option<&str>) -> Self {
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
    fn get(&self, name: &str) -> &str {
        self.pairs
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("", |(_, v)| v.as_str())
    }

    /// The authorization endpoint's path and query.
    fn path(&self) -> String {
        let pairs: Vec<(&str, &str)> = self.pairs.iter().map(|(n, v)| (*n, v.as_str())).collect();
        format!("/dashboard/oauth/authorize?{}", form(&pairs))
    }
}

/// This service's protected resource: `{public URL}/mcp`.
fn resource(d: &Dash) -> String {
    format!("{}/mcp", d.origin())
}

/// `POST /oauth/register` (RFC 7591) with a JSON body.
async fn register_raw(d: &Dash, body: &Value) -> Reply {
    send(
        d.http
            .post(d.server.url("/oauth/register"))
            .header("Content-Type", "application/json")
            .body(body.to_string()),
    )
    .await
}

/// Registers a public client named `name` with `redirect_uris`; its `client_id`.
async fn register(d: &Dash, name: &str, redirect_uris: &[&str]) -> String {
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
fn form_fields(html: &str, id: &str) -> Vec<(String, String)> {
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
fn attribute(tag: &str, name: &str) -> Option<String> {
    let key = format!(r#" {name}=""#);
    let at = tag.find(&key)? + key.len();
    let end = at + tag[at..].find('"')?;
    Some(unescape(&tag[at..end]))
}

/// The value of `name` among form fields.
fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// The consent page of `ask` for the signed-in `session`: 200, with its form's fields.
async fn consent(d: &Dash, session: &Session, ask: &Ask) -> Vec<(String, String)> {
    let reply = d.get(&ask.path(), Some(&session.cookie)).await;
    assert_eq!(reply.status, 200, "the consent page: {reply:?}");
    form_fields(&reply.body, "authorize")
}

/// Posts the consent form's `fields` with `decision` from the dashboard's origin.
async fn decide(d: &Dash, session: &Session, fields: &[(String, String)], decision: &str) -> Reply {
    let mut all: Vec<(&str, &str)> = fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    all.push(("decision", decision));
    d.post("/dashboard/oauth/authorize", session, &all).await
}

/// The decoded query of a 303 to `to` (the client's redirect URI, exactly, before `?`).
fn redirected(reply: &Reply, to: &str) -> HashMap<String, String> {
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
fn assert_error_redirect(d: &Dash, reply: &Reply, ask: &Ask, error: &str) {
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
async fn allow(d: &Dash, session: &Session, ask: &Ask) -> HashMap<String, String> {
    let fields = consent(d, session, ask).await;
    let reply = decide(d, session, &fields, "allow").await;
    let back = redirected(&reply, ask.get("redirect_uri"));
    assert_eq!(back["state"], ask.get("state"), "{back:?}");
    assert_eq!(back["iss"], d.origin(), "{back:?}");
    assert!(is_hex64(&back["code"]), "{back:?}");
    back
}

/// `POST /oauth/token` with form `fields`.
async fn token_request(d: &Dash, fields: &[(&str, &str)]) -> Reply {
    send(
        d.http
            .post(d.server.url("/oauth/token"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(form(fields)),
    )
    .await
}

/// The code exchange as the client makes it (with `resource`).
async fn exchange(d: &Dash, client_id: &str, code: &str, verifier: &str) -> Reply {
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
async fn refresh(d: &Dash, client_id: &str, refresh_token: &str) -> Reply {
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
async fn revoke(d: &Dash, token: &str) -> Reply {
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
struct Tokens {
    access: String,
    refresh: String,
}

/// The tokens of a successful token response, checked (RFC 6749 §5.1).
fn tokens_of(reply: &Reply) -> Tokens {
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
fn assert_oauth_error(reply: &Reply, status: u16, error: &str) {
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
async fn connect(d: &Dash, session: &Session, client_id: &str) -> Tokens {
    let pkce = Pkce::new();
    let ask = Ask::new(d, client_id, &pkce);
    let back = allow(d, session, &ask).await;
    tokens_of(&exchange(d, client_id, &back["code"], &pkce.verifier).await)
}

/// A JSON-RPC POST to `/mcp` with `token` as the bearer (none: no `Authorization`).
async fn mcp(d: &Dash, token: Option<&str>, body: &Value) -> Reply {
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
async fn assert_works(d: &Dash, token: &str) -> Value {
    billing_of(&mcp(d, Some(token), &billing_call()).await)
}

/// A 401 from `/mcp` with the JSON-RPC -32001 body and the challenge: resource metadata, scope,
/// and `error` when given (none: no `error` at all).
fn assert_challenge(d: &Dash, reply: &Reply, error: Option<&str>) {
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
async fn assert_refused(d: &Dash, token: &str) {
    let reply = mcp(d, Some(token), &tools_list()).await;
    assert_challenge(d, &reply, Some("invalid_token"));
}

/// A JSON body served to anyone: 200, no-store, `Access-Control-Allow-Origin: *`.
async fn public_json(d: &Dash, path: &str) -> Value {
    let reply = d.get(path, None).await;
    assert_eq!(reply.status, 200, "GET {path}: {reply:?}");
    assert_eq!(
        reply.header("access-control-allow-origin").as_deref(),
        Some("*")
    );
    reply.json()
}

#[tokio::test]
async fn discovery_and_the_challenge_point_a_client_to_the_server() {
    let d = Dash::start(&[]).await;
    let issuer = d.origin();
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let prm = public_json(&d, path).await;
        assert_eq!(prm["resource"], resource(&d), "{path}: {prm}");
        assert_eq!(
            prm["authorization_servers"],
            json!([issuer]),
            "{path}: {prm}"
        );
        assert_eq!(prm["scopes_supported"], json!(["mcp"]), "{path}: {prm}");
    }
    for path in [
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
    ] {
        let asm = public_json(&d, path).await;
        assert_eq!(asm["issuer"], issuer, "{path}: {asm}");
        assert_eq!(
            asm["authorization_endpoint"],
            format!("{issuer}/dashboard/oauth/authorize")
        );
        assert_eq!(asm["token_endpoint"], format!("{issuer}/oauth/token"));
        assert_eq!(
            asm["registration_endpoint"],
            format!("{issuer}/oauth/register")
        );
        assert_eq!(asm["revocation_endpoint"], format!("{issuer}/oauth/revoke"));
        assert_eq!(asm["code_challenge_methods_supported"], json!(["S256"]));
        assert_eq!(asm["authorization_response_iss_parameter_supported"], true);
        assert_eq!(asm["response_types_supported"], json!(["code"]));
        assert_eq!(
            asm["token_endpoint_auth_methods_supported"],
            json!(["none"])
        );
    }

    // no token, a malformed one, a well-formed unknown one, an API key: each a 401 challenge
    let none = mcp(&d, None, &tools_list()).await;
    assert_challenge(&d, &none, None);
    for token in ["garbage", &forged_token()] {
        let reply = mcp(&d, Some(token), &tools_list()).await;
        assert_challenge(&d, &reply, Some("invalid_token"));
    }
    let owner = create_account(&d.storage, "keyholder@example.org");
    assert_refused(&d, &owner.key).await;
    // the key itself still works where keys go
    let works = post_personal(&d.http, &d.server, &owner.key, &tools_list()).await;
    works.result();
}

#[tokio::test]
async fn a_registered_client_calls_the_tools_as_the_signed_in_owner() {
    let d = Dash::start(&[]).await;
    let session = d.sign_in("owner@example.org").await;
    let key = d.key_of(&session).await;

    // a client asking for a secret-based method is registered public: PKCE is its proof
    let reply = register_raw(
        &d,
        &json!({
            "client_name": APP,
            "redirect_uris": [REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "client_secret_basic",
        }),
    )
    .await;
    assert_eq!(reply.status, 201, "{reply:?}");
    let registered = reply.json();
    let client_id = registered["client_id"].as_str().unwrap().to_owned();
    assert!(client_id.starts_with("tgc_"), "{registered}");
    assert_eq!(registered["client_name"], APP);
    assert_eq!(registered["redirect_uris"], json!([REDIRECT]));
    assert_eq!(registered["token_endpoint_auth_method"], "none");
    assert!(registered.get("client_secret").is_none(), "{registered}");

    let pkce = Pkce::new();
    let ask = Ask::new(&d, &client_id, &pkce);
    let page = d.get(&ask.path(), Some(&session.cookie)).await;
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(text_of_id(&page.body, "client-name").as_deref(), Some(APP));
    assert_eq!(
        text_of_id(&page.body, "redirect-host").as_deref(),
        Some("127.0.0.1:9")
    );
    let fields = form_fields(&page.body, "authorize");
    assert_eq!(field(&fields, "csrf"), Some(session.csrf.as_str()));
    for name in [
        "client_id",
        "redirect_uri",
        "state",
        "code_challenge",
        "resource",
    ] {
        assert_eq!(field(&fields, name), Some(ask.get(name)), "{fields:?}");
    }
    let reply = decide(&d, &session, &fields, "allow").await;
    let back = redirected(&reply, REDIRECT);
    assert_eq!(back["state"], ask.get("state"));
    assert_eq!(back["iss"], d.origin());

    let reply = exchange(&d, &client_id, &back["code"], &pkce.verifier).await;
    let tokens = tokens_of(&reply);
    assert_eq!(reply.json()["scope"], "mcp offline_access", "{reply:?}");

    let listed = mcp(&d, Some(&tokens.access), &tools_list()).await.result();
    let mut names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["svc_ai", "svc_read", "svc_write"], "{listed}");

    // metered to the account that consented: its own key's status shows the calls
    let first = assert_works(&d, &tokens.access).await;
    assert_eq!(first["free_remaining_this_month"], 999, "{first}");
    assert_eq!(d.server.free_remaining(&key).await, 999);
    let second = assert_works(&d, &tokens.access).await;
    assert_eq!(second["free_remaining_this_month"], 998, "{second}");
    assert_eq!(d.server.free_remaining(&key).await, 998);
}

#[tokio::test]
async fn a_code_works_once_and_its_replay_revokes_what_it_gave() {
    let d = Dash::start(&[]).await;
    let session = d.sign_in("replay@example.org").await;
    let client_id = register(&d, APP, &[REDIRECT]).await;
    let pkce = Pkce::new();
    let ask = Ask::new(&d, &client_id, &pkce);
    let back = allow(&d, &session, &ask).await;
    let tokens = tokens_of(&exchange(&d, &client_id, &back["code"], &pkce.verifier).await);
    assert_works(&d, &tokens.access).await;

    let again = exchange(&d, &client_id, &back["code"], &pkce.verifier).await;
    assert_oauth_error(&again, 400, "invalid_grant");
    assert_refused(&d, &tokens.access).await;
    assert_oauth_error(
        &refresh(&d, &client_id, &tokens.refresh).await,
        400,
        "invalid_grant",
    );

    // a code that was never issued, and one of another shape
    for code in [forged_token(), "not-a-code".to_owned()] {
        let reply = exchange(&d, &client_id, &code, &pkce.verifier).await;
        assert_oauth_error(&reply, 400, "invalid_grant");
    }
}

#[tokio::test]
async fn pkce_s256_is_required_and_checked() {
    let d = Dash::start(&[]).await;
    let session = d.sign_in("pkce@example.org").await;
    let client_id = register(&d, APP, &[REDIRECT]).await;

    // a verifier other than the one hashed: refused, and the code is spent
    let pkce = Pkce::new();
    let ask = Ask::new(&d, &client_id, &pkce);
    let back = allow(&d, &session, &ask).await;
    let wrong = exchange(&d, &client_id, &back["code"], &Pkce::new().verifier).await;
    assert_oauth_error(&wrong, 400, "invalid_grant");
    let late = exchange(&d, &client_id, &back["code"], &pkce.verifier).await;
    assert_oauth_error(&late, 400, "invalid_grant");

    // no verifier, or one of the wrong shape
    let back = allow(&d, &session, &ask).await;
    let resource = resource(&d);
    let missing = token_request(
        &d,
        &[
            ("grant_type", "authorization_code"),
            ("code", &back["code"]),
            ("redirect_uri", REDIRECT),
            ("client_id", &client_id),
            ("resource", &resource),
        ],
    )
    .await;
    assert_oauth_error(&missing, 400, "invalid_request");
    let short = exchange(&d, &client_id, &back["code"], "short").await;
    assert_oauth_error(&short, 400, "invalid_request");

    // plain, no method, no challenge, a challenge of the wrong shape: sent back to the client
    // with invalid_request before any consent is shown
    for bad in [
        ask.with("code_challenge_method", Some("plain"))
            .with("code_challenge", Some(&pkce.verifier)),
        ask.with("code_challenge_method", None),
        ask.with("code_challenge", None),
        ask.with("code_challenge", Some("too-short")),
    ] {
        let reply = d.get(&bad.path(), Some(&session.cookie)).await;
        assert_error_redirect(&d, &reply, &bad, "invalid_request");
    }
}

#[tokio::test]
async fn redirect_uris_match_exactly_and_refusals_never_redirect() {
    let d = Dash::start(&[]).await;
    let session = d.sign_in("redirects@example.org").await;
    let client_id = register(&d, APP, &[REDIRECT]).await;
    let ask = Ask::new(&d, &client_id, &Pkce::new());

    let assert_refused_page = |reply: &Reply, what: &str| {
        assert_error_page(reply, 400);
        assert!(
            reply.header("location").is_none(),
            "{what} redirected: {reply:?}"
        );
        assert!(!reply.body.contains("code="), "{what}: {reply:?}");
    };
    for uri in [
        "http://127.0.0.1:9/other",
        "https://evil.example/callback",
        "http://evil.example/callback",
        "http://127.0.0.1:9/callbackevil",
        "http://127.0.0.1:9/callback/evil",
        "http://127.0.0.1:9/",
        "http://127.0.0.1:9/call",
        "http://127.0.0.1:9/callback?next=https://evil.example/",
        "http://127.0.0.1:9/callback?",
        "http://127.0.0.1:9/callback#fragment",
        "http://127.0.0.1:9@evil.example/callback",
        "HTTP://127.0.0.1:9/callback",
        "javascript:alert(1)",
    ] {
        let bad = ask.with("redirect_uri", Some(uri));
        // signed in or not: the client's address is checked before anything else
        let signed = d.get(&bad.path(), Some(&session.cookie)).await;
        assert_refused_page(&signed, uri);
        let anonymous = d.get(&bad.path(), None).await;
        assert_refused_page(&anonymous, uri);
        // errors found later are not sent to an unchecked address either
        let worse = bad.with("code_challenge_method", Some("plain"));
        assert_refused_page(&d.get(&worse.path(), Some(&session.cookie)).await, uri);
    }
    // an unknown client, or none
    for bad in [
        ask.with("client_id", Some("tgc_00000000000000000000000000000000")),
        ask.with("client_id", None),
    ] {
        assert_refused_page(&d.get(&bad.path(), Some(&session.cookie)).await, "client");
    }
    // a repeated redirect_uri
    let repeated = format!("{}&redirect_uri={}", ask.path(), encode(REDIRECT));
    assert_refused_page(&d.get(&repeated, Some(&session.cookie)).await, "repeated");

    // the consent form is checked again when posted: a redirect URI changed in it is refused
    let mut fields = consent(&d, &session, &ask).await;
    for (name, value) in &mut fields {
        if name == "redirect_uri" {
            *value = "https://evil.example/callback".to_owned();
        }
    }
    let reply = decide(&d, &session, &fields, "allow").await;
    assert_refused_page(&reply, "the posted form");

    // the token endpoint wants the redirect URI of the request
    let pkce = Pkce::new();
    let ask = Ask::new(&d, &client_id, &pkce);
    let back = allow(&d, &session, &ask).await;
    let resource = resource(&d);
    let other = token_request(
        &d,
        &[
            ("grant_type", "authorization_code"),
            ("code", &back["code"]),
            ("redirect_uri", "http://127.0.0.1:9/other"),
            ("client_id", &client_id),
            ("code_verifier", &pkce.verifier),
            ("resource", &resource),
        ],
    )
    .await;
    assert_oauth_error(&other, 400, "invalid_grant");
}

#[tokio::test]
async fn a_foreign_resource_is_refused() {
    let d = Dash::start(&[]).await;
    let session = d.sign_in("resource@example.org").await;
    let client_id = register(&d, APP, &[REDIRECT]).await;
    let pkce = Pkce::new();
    let ask = Ask::new(&d, &client_id, &pkce);

    for other in [
        "https://other.example/mcp".to_owned(),
        format!("{}/u", d.origin()),
        d.origin(),
    ] {
        let bad = ask.with("resource", Some(&other));
        let reply = d.get(&bad.path(), Some(&session.cookie)).await;
        assert_error_redirect(&d, &reply, &bad, "invalid_target");
    }

    let back = allow(&d, &session, &ask).await;
    let foreign = token_request(
        &d,
        &[
            ("grant_type", "authorization_code"),
            ("code", &back["code"]),
            ("redirect_uri", REDIRECT),
            ("client_id", &client_id),
            ("code_verifier", &pkce.verifier),
            ("resource", "https://other.example/mcp"),
        ],
    )
    .await;
    assert_oauth_error(&foreign, 400, "invalid_target");

    // a client that names no resource at all (older clients) gets a token for /mcp
    let pkce = Pkce::new();
    let bare = Ask::new(&d, &client_id, &pkce).with("resource", None);
    let back = allow(&d, &session, &bare).await;
    let reply = token_request(
        &d,
        &[
            ("grant_type", "authorization_code"),
            ("code", &back["code"]),
            ("redirect_uri", REDIRECT),
            ("client_id", &client_id),
            ("code_verifier", &pkce.verifier),
        ],
    )
    .await;
    assert_works(&d, &tokens_of(&reply).access).await;
}

#[tokio::test]
async fn a_token_without_the_mcp_scope_cannot_use_the_tools() {
    let d = Dash::start(&[]).await;
    let session = d.sign_in("scope@example.org").await;
    let client_id = register(&d, APP, &[REDIRECT]).await;
    let pkce = Pkce::new();
    let ask = Ask::new(&d, &client_id, &pkce);

    let unknown = ask.with("scope", Some("mcp admin"));
    let reply = d.get(&unknown.path(), Some(&session.cookie)).await;
    assert_error_redirect(&d, &reply, &unknown, "invalid_scope");

    let narrow = ask.with("scope", Some("offline_access"));
    let back = allow(&d, &session, &narrow).await;
    let tokens = tokens_of(&exchange(&d, &client_id, &back["code"], &pkce.verifier).await);
    let reply = mcp(&d, Some(&tokens.access), &tools_list()).await;
    assert!(
        reply.status == 401 || reply.status == 403,
        "a token without mcp: {reply:?}"
    );
    assert_eq!(reply.error_code(), Some(-32001), "{reply:?}");
    let challenge = reply.header("www-authenticate").unwrap_or_default();
    assert!(
        challenge.contains(r#"error="insufficient_scope""#) && challenge.contains(r#"scope="mcp""#),
        "{reply:?}"
    );
}

#[tokio::test]
async fn refresh_rotates_and_a_replayed_refresh_token_ends_the_family() {
    let d = Dash::start(&[]).await;
    let session = d.sign_in("rotate@example.org").await;
    let client_id = register(&d, APP, &[REDIRECT]).await;
    let other_client = register(&d, "Other Chat", &[REDIRECT]).await;
    let first = connect(&d, &session, &client_id).await;
    // another authorization of the same app and account: a family of its own
    let sibling = connect(&d, &session, &client_id).await;
    assert_works(&d, &first.access).await;

    let reply = refresh(&d, &client_id, &first.refresh).await;
    let second = tokens_of(&reply);
    assert_eq!(reply.json()["scope"], "mcp offline_access", "{reply:?}");
    assert_ne!(second.access, first.access);
    assert_ne!(second.refresh, first.refresh);
    assert_works(&d, &second.access).await;

    // another client cannot use the token
    let stolen = refresh(&d, &other_client, &second.refresh).await;
    assert_oauth_error(&stolen, 400, "invalid_grant");
    let third = tokens_of(&refresh(&d, &client_id, &second.refresh).await);
    assert_works(&d, &third.access).await;

    // the first refresh token again: refused, and every token of its family ends at once
    let replay = refresh(&d, &client_id, &first.refresh).await;
    assert_oauth_error(&replay, 400, "invalid_grant");
    for access in [&first.access, &second.access, &third.access] {
        assert_refused(&d, access).await;
    }
    assert_oauth_error(
        &refresh(&d, &client_id, &third.refresh).await,
        400,
        "invalid_grant",
    );
    // the other family is untouched
    assert_works(&d, &sibling.access).await;
    tokens_of(&refresh(&d, &client_id, &sibling.refresh).await);

    // an unknown grant type, a malformed refresh token
    let odd = token_request(&d, &[("grant_type", "password"), ("client_id", &client_id)]).await;
    assert_oauth_error(&odd, 400, "unsupported_grant_type");
    let junk = refresh(&d, &client_id, "junk").await;
    assert_oauth_error(&junk, 400, "invalid_grant");
}

#[tokio::test]
async fn revoking_a_token_ends_its_access_at_once() {
    let d = Dash::start(&[]).await;
    let session = d.sign_in("revoke@example.org").await;
    let client_id = register(&d, APP, &[REDIRECT]).await;

    let tokens = connect(&d, &session, &client_id).await;
    // used first, so that a cached look-up would still let it in
    assert_works(&d, &tokens.access).await;
    let reply = revoke(&d, &tokens.access).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_refused(&d, &tokens.access).await;
    assert_oauth_error(
        &refresh(&d, &client_id, &tokens.refresh).await,
        400,
        "invalid_grant",
    );

    // revoking the refresh token ends the access token of its family too
    let tokens = connect(&d, &session, &client_id).await;
    assert_works(&d, &tokens.access).await;
    assert_eq!(revoke(&d, &tokens.refresh).await.status, 200);
    assert_refused(&d, &tokens.access).await;

    // unknown and malformed tokens are no error (RFC 7009 §2.2); a missing one is
    for token in [forged_token(), "garbage".to_owned()] {
        assert_eq!(revoke(&d, &token).await.status, 200);
    }
    let empty = send(
        d.http
            .post(d.server.url("/oauth/revoke"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(""),
    )
    .await;
    assert_oauth_error(&empty, 400, "invalid_request");
}

#[tokio::test]
async fn connected_apps_lists_the_app_and_revokes_it_at_once() {
    let d = Dash::start(&[]).await;
    let owner = d.sign_in("apps-owner@example.org").await;
    let stranger = d.sign_in("apps-stranger@example.org").await;
    let client_id = register(&d, APP, &[REDIRECT]).await;
    let tokens = connect(&d, &owner, &client_id).await;
    assert_works(&d, &tokens.access).await;

    let row = format!(r#"data-client="{client_id}""#);
    let page = d.page("/dashboard/apps", &owner).await;
    assert!(page.contains(&row) && page.contains(APP), "{page}");
    assert!(
        page.contains("app-revoke") && !has_id(&page, "no-apps"),
        "{page}"
    );
    let theirs = d.page("/dashboard/apps", &stranger).await;
    assert!(
        !theirs.contains(&row) && has_id(&theirs, "no-apps"),
        "{theirs}"
    );

    // another account's session cannot disconnect it
    let client_field = ("client_id", client_id.as_str());
    let attempt = d
        .post(
            "/dashboard/apps/revoke",
            &stranger,
            &[("csrf", &stranger.csrf), client_field],
        )
        .await;
    assert!(
        attempt.status == 303 || attempt.status >= 400,
        "{attempt:?}"
    );
    assert_works(&d, &tokens.access).await;
    assert!(d.page("/dashboard/apps", &owner).await.contains(&row));
    // the owner's form needs the owner's csrf and the dashboard's origin
    let forged = d
        .post(
            "/dashboard/apps/revoke",
            &owner,
            &[("csrf", &stranger.csrf), client_field],
        )
        .await;
    assert_eq!(forged.status, 403, "{forged:?}");
    let cross_site = d
        .post_from(
            "/dashboard/apps/revoke",
            Some(&owner.cookie),
            &[("csrf", &owner.csrf), client_field],
            Some("https://evil.example"),
        )
        .await;
    assert_eq!(cross_site.status, 403, "{cross_site:?}");
    assert_works(&d, &tokens.access).await;

    let revoked = d
        .post(
            "/dashboard/apps/revoke",
            &owner,
            &[("csrf", &owner.csrf), client_field],
        )
        .await;
    assert_see_other(&revoked, "/dashboard/apps?notice=revoked");
    assert_refused(&d, &tokens.access).await;
    assert_oauth_error(
        &refresh(&d, &client_id, &tokens.refresh).await,
        400,
        "invalid_grant",
    );
    let page = d.page("/dashboard/apps", &owner).await;
    assert!(!page.contains(&row) && has_id(&page, "no-apps"), "{page}");

    // the app can ask again, and the new grant works
    let again = connect(&d, &owner, &client_id).await;
    assert_works(&d, &again.access).await;
}

#[tokio::test]
async fn the_consent_form_needs_the_sessions_csrf_and_origin() {
    let d = Dash::start(&[]).await;
    let owner = d.sign_in("consent@example.org").await;
    let other = d.sign_in("consent-other@example.org").await;
    let client_id = register(&d, APP, &[REDIRECT]).await;
    let pkce = Pkce::new();
    let ask = Ask::new(&d, &client_id, &pkce);
    let fields = consent(&d, &owner, &ask).await;

    let with_csrf = |csrf: &str| -> Vec<(String, String)> {
        fields
            .iter()
            .map(|(n, v)| {
                let v = if n == "csrf" {
                    csrf.to_owned()
                } else {
                    v.clone()
                };
                (n.clone(), v)
            })
            .collect()
    };
    for csrf in [other.csrf.as_str(), "", "0000"] {
        let reply = decide(&d, &owner, &with_csrf(csrf), "allow").await;
        assert_eq!(reply.status, 403, "csrf {csrf:?}: {reply:?}");
        assert!(reply.header("location").is_none(), "{reply:?}");
    }
    let mut pairs: Vec<(&str, &str)> = fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    pairs.push(("decision", "allow"));
    let cross_site = d
        .post_from(
            "/dashboard/oauth/authorize",
            Some(&owner.cookie),
            &pairs,
            Some("https://evil.example"),
        )
        .await;
    assert_eq!(cross_site.status, 403, "{cross_site:?}");
    // no session: off to sign in, nothing issued
    let anonymous = d
        .post_from(
            "/dashboard/oauth/authorize",
            None,
            &pairs,
            Some(&d.origin()),
        )
        .await;
    assert_eq!(anonymous.status, 303, "{anonymous:?}");
    assert!(location(&anonymous).starts_with("/dashboard/sign-in"));

    // deny: back to the client with access_denied
    let denied = decide(&d, &owner, &fields, "deny").await;
    assert_error_redirect(&d, &denied, &ask, "access_denied");

    // the refusals spent nothing: the owner can still allow
    let reply = decide(&d, &owner, &fields, "allow").await;
    let back = redirected(&reply, REDIRECT);
    let tokens = tokens_of(&exchange(&d, &client_id, &back["code"], &pkce.verifier).await);
    assert_works(&d, &tokens.access).await;
}

/// The sign-in link of the newest mail to `email` that carries `next`, waiting up to 10 s.
async fn link_with_next(d: &Dash, email: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut found: Vec<(std::path::PathBuf, String)> = std::fs::read_dir(d.outbox())
            .map(|entries| {
                entries
                    .filter_map(|entry| {
                        let path = entry.ok()?.path();
                        if path.extension().is_none_or(|ext| ext != "eml") {
                            return None;
                        }
                        let text = std::fs::read_to_string(&path).ok()?;
                        let to = text.lines().find_map(|line| line.strip_prefix("To: "))?;
                        if !to.contains(email) {
                            return None;
                        }
                        let link = text
                            .lines()
                            .map(str::trim)
                            .find(|line| line.contains("/dashboard/sign-in/confirm?token="))?
                            .to_owned();
                        link.contains("&next=").then_some((path, link))
                    })
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        if let Some((_, link)) = found.pop() {
            return link;
        }
        assert!(Instant::now() < deadline, "no mail to {email} with next");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn authorizing_without_a_session_signs_in_and_comes_back() {
    let d = Dash::start(&[]).await;
    let email = "newcomer@example.org";
    let client_id = register(&d, APP, &[REDIRECT]).await;
    let pkce = Pkce::new();
    let ask = Ask::new(&d, &client_id, &pkce);

    // not signed in: to the sign-in page, carrying the whole request
    let reply = d.get(&ask.path(), None).await;
    assert_eq!(reply.status, 303, "{reply:?}");
    let to_sign_in = location(&reply);
    let (path, query) = to_sign_in.split_once('?').unwrap();
    assert_eq!(path, "/dashboard/sign-in");
    let pairs: HashMap<String, String> = reqwest::Url::parse(&format!("http://x/?{query}"))
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect();
    let next = pairs["next"].clone();
    assert_eq!(next, ask.path());

    // the sign-in page keeps it, and so does the link it has mailed
    let page = d.get(&to_sign_in, None).await;
    assert_eq!(page.status, 200, "{page:?}");
    let fields = form_fields(&page.body, "sign-in");
    assert_eq!(field(&fields, "next"), Some(next.as_str()), "{fields:?}");
    let sent = d
        .post_from(
            "/magic-link",
            None,
            &[("email", email), ("next", &next)],
            Some(&d.origin()),
        )
        .await;
    assert_eq!(sent.status, 202, "{sent:?}");
    let link = link_with_next(&d, email).await;
    assert!(
        link.starts_with(&format!("{}/dashboard/sign-in/confirm?token=", d.origin())),
        "{link}"
    );
    let link_url = reqwest::Url::parse(&link).unwrap();
    let link_pairs: HashMap<String, String> = link_url.query_pairs().into_owned().collect();
    assert_eq!(link_pairs["next"], next, "{link}");
    let token = link_pairs["token"].clone();
    assert!(is_hex64(&token), "{link}");

    // the link's page carries it into the confirmation, which leads back to the request
    let path_and_query = &link[d.origin().len()..];
    let confirm_page = d.get(path_and_query, None).await;
    assert_eq!(confirm_page.status, 200, "{confirm_page:?}");
    let fields = form_fields(&confirm_page.body, "confirm");
    assert_eq!(field(&fields, "next"), Some(next.as_str()), "{fields:?}");
    let confirmed = d
        .post_from(
            "/dashboard/sign-in/confirm",
            None,
            &[("token", &token), ("next", &next)],
            Some(&d.origin()),
        )
        .await;
    assert_see_other(&confirmed, &next);
    let cookie_token = session_cookie(&confirmed).expect("a session cookie");
    let cookie = format!("{COOKIE}={cookie_token}");

    let page = d.get(&next, Some(&cookie)).await;
    assert_eq!(page.status, 200, "{page:?}");
    let fields = form_fields(&page.body, "authorize");
    let session = Session {
        cookie,
        token: cookie_token,
        csrf: field(&fields, "csrf").unwrap().to_owned(),
    };
    let reply = decide(&d, &session, &fields, "allow").await;
    let back = redirected(&reply, REDIRECT);
    assert_eq!(back["state"], ask.get("state"));
    let tokens = tokens_of(&exchange(&d, &client_id, &back["code"], &pkce.verifier).await);
    assert_works(&d, &tokens.access).await;
    // the account the mail created is the one charged
    let key = d.key_of(&session).await;
    assert_eq!(d.server.free_remaining(&key).await, 999);

    // a next that is not an authorization request of this service is dropped
    for (n, evil) in [
        "https://evil.example/",
        "//evil.example/dashboard/oauth/authorize?x=1",
    ]
    .into_iter()
    .enumerate()
    {
        let token = d.new_link(&format!("elsewhere-{n}@example.org")).await;
        let elsewhere = d
            .post_from(
                "/dashboard/sign-in/confirm",
                None,
                &[("token", &token), ("next", evil)],
                Some(&d.origin()),
            )
            .await;
        assert_see_other(&elsewhere, "/dashboard?notice=welcome");
    }
}

/// Names of the secrets `svc_read` `list_secrets` shows to `reply`'s caller.
fn secret_names(reply: &Reply) -> Vec<String> {
    let result = reply.result();
    assert_eq!(result["isError"], false, "{result}");
    result["structuredContent"]["list_secrets"]["secrets"]
        .as_array()
        .unwrap_or_else(|| panic!("{result}"))
        .iter()
        .map(|row| row["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_token_reaches_only_its_own_accounts_secrets() {
    let d = Dash::start(&[]).await;
    let session = d.sign_in("secrets-a@example.org").await;
    let other = create_account(&d.storage, "secrets-b@example.org");
    let set = |name: &str| {
        tool_call(
            "svc_write",
            json!({"secret_set": {"name": name, "value": "v-123456"}}),
        )
    };
    let list = tool_call("svc_read", json!({"list_secrets": true}));

    let stored = post_personal(&d.http, &d.server, &other.key, &set("B_ONLY")).await;
    assert_eq!(stored.result()["isError"], false, "{stored:?}");
    let client_id = register(&d, APP, &[REDIRECT]).await;
    let tokens = connect(&d, &session, &client_id).await;

    let seen = mcp(&d, Some(&tokens.access), &list).await;
    assert_eq!(secret_names(&seen), Vec::<String>::new());
    let own = mcp(&d, Some(&tokens.access), &set("A_ONLY")).await;
    assert_eq!(own.result()["isError"], false, "{own:?}");
    let seen = mcp(&d, Some(&tokens.access), &list).await;
    assert_eq!(secret_names(&seen), ["A_ONLY"]);
    let gone = mcp(
        &d,
        Some(&tokens.access),
        &tool_call("svc_write", json!({"secret_delete": "B_ONLY"})),
    )
    .await;
    assert_eq!(gone.result()["isError"], true, "{gone:?}");
    let theirs = post_personal(&d.http, &d.server, &other.key, &list).await;
    assert_eq!(secret_names(&theirs), ["B_ONLY"]);
}
