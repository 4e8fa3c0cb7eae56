//! OAuth at `/mcp`, continued: revocation by the client and from Connected apps taking effect at
//! once, the consent form's anti-forgery value and origin, the sign-in detour that comes back to
//! the authorization request, one account's token out of another's data, and the limit on
//! client registrations per client address.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::*;

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
    let session = SignInSession {
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

#[tokio::test]
async fn clients_as_they_come_loopback_ports_basic_auth_preflight_and_refresh_targets() {
    let d = Dash::start(&[]).await;
    let owner = d.sign_in("clients@example.org").await;
    let client_id = register(&d, APP, &[REDIRECT]).await;
    // a native app picks its loopback port when it starts (RFC 8252 §7.3)
    let pkce = Pkce::new();
    let moved = "http://127.0.0.1:53682/callback";
    let ask = Ask::new(&d, &client_id, &pkce).with("redirect_uri", Some(moved));
    let back = allow(&d, &owner, &ask).await;
    // the client names itself in Authorization: Basic instead of the form (RFC 6749 §2.3.1)
    let basic = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("{client_id}:"),
    );
    let resource = resource(&d);
    let reply = send(
        d.http
            .post(d.server.url("/oauth/token"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .header("Authorization", format!("Basic {basic}"))
            .body(form(&[
                ("grant_type", "authorization_code"),
                ("code", &back["code"]),
                ("redirect_uri", moved),
                ("code_verifier", &pkce.verifier),
                ("resource", &resource),
            ])),
    )
    .await;
    let tokens = tokens_of(&reply);
    assert_works(&d, &tokens.access).await;
    // another path, or another loopback host, is still refused without a redirect
    for other in [
        "http://127.0.0.1:53682/elsewhere",
        "http://localhost:53682/callback",
    ] {
        let ask = Ask::new(&d, &client_id, &Pkce::new()).with("redirect_uri", Some(other));
        let reply = d.get(&ask.path(), Some(&owner.cookie)).await;
        assert_eq!(reply.status, 400, "{other}: {reply:?}");
        assert!(reply.header("location").is_none(), "{reply:?}");
    }
    // a refresh for another resource is refused and spends nothing
    let refused = token_request(
        &d,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", &tokens.refresh),
            ("client_id", &client_id),
            ("resource", "https://other.example/mcp"),
        ],
    )
    .await;
    assert_oauth_error(&refused, 400, "invalid_target");
    tokens_of(&refresh(&d, &client_id, &tokens.refresh).await);
    // browser-based clients ask first
    for path in [
        "/oauth/register",
        "/oauth/token",
        "/oauth/revoke",
        "/.well-known/oauth-authorization-server",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let reply = send(
            d.http
                .request(reqwest::Method::OPTIONS, d.server.url(path))
                .header("Origin", "https://app.example")
                .header("Access-Control-Request-Method", "POST"),
        )
        .await;
        assert_eq!(reply.status, 204, "{path}: {reply:?}");
        assert_eq!(
            reply.header("access-control-allow-origin").as_deref(),
            Some("*"),
            "{path}"
        );
    }
}

#[tokio::test]
async fn a_metadata_document_is_fetched_only_for_a_signed_in_owner() {
    let d = Dash::start(&[]).await;
    let pkce = Pkce::new();
    let document = "https://app.example/oauth/client.json";
    let ask = Ask::new(&d, document, &pkce);
    // signed out: sent to sign in, nothing fetched (a fetch here would fail: no such host)
    let reply = d.get(&ask.path(), None).await;
    assert_eq!(reply.status, 303, "{reply:?}");
    assert!(
        location(&reply).starts_with("/dashboard/sign-in?next="),
        "{reply:?}"
    );
    // signed in: the document is fetched, fails, and the request is refused without a redirect
    let owner = d.sign_in("document@example.org").await;
    let reply = d.get(&ask.path(), Some(&owner.cookie)).await;
    assert_eq!(reply.status, 400, "{reply:?}");
    assert!(reply.header("location").is_none(), "{reply:?}");
}

/// `POST /oauth/register` as the client at `address` (through the trusted proxy on loopback).
async fn register_from(d: &Dash, address: &str, n: usize) -> Reply {
    send(
        d.http
            .post(d.server.url("/oauth/register"))
            .header("Content-Type", "application/json")
            .header("X-Forwarded-For", address)
            .body(
                json!({"client_name": format!("App {n}"), "redirect_uris": [REDIRECT],
                       "token_endpoint_auth_method": "none"})
                .to_string(),
            ),
    )
    .await
}

#[tokio::test]
async fn one_client_address_registers_at_most_sixty_clients_an_hour() {
    let d = Dash::start(&[("TOOLGATE_TRUSTED_PROXIES", "127.0.0.1/32")]).await;
    for n in 0..60 {
        let reply = register_from(&d, "203.0.113.7", n).await;
        assert_eq!(reply.status, 201, "registration {n}: {reply:?}");
    }
    let refused = register_from(&d, "203.0.113.7", 60).await;
    assert_oauth_error(&refused, 503, "temporarily_unavailable");
    let said = refused.json()["error_description"].to_string();
    assert!(
        said.contains("too many client registrations from this address"),
        "{refused:?}"
    );
    // another address is another count
    let other = register_from(&d, "198.51.100.9", 61).await;
    assert_eq!(other.status, 201, "{other:?}");
    // the refused one stored nothing
    let db = rusqlite::Connection::open(d.storage.data_dir.join("toolgate.db")).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    let names: Vec<String> = db
        .prepare("SELECT name FROM oauth_clients")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(names.len(), 61, "{names:?}");
    assert!(!names.iter().any(|name| name == "App 60"), "{names:?}");
}
