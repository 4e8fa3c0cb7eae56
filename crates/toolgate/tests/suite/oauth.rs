//! OAuth 2.1 at `/mcp` over real HTTP, as a chat client and its user's browser meet it: dynamic
//! registration, the consent page of the signed-in owner, PKCE S256 computed here, codes and
//! rotating refresh tokens, revocation (by the client and from Connected apps) taking effect at
//! once, and every refusal that keeps the server from becoming an open redirector. No redirect
//! is followed: each `Location` is read and checked.

use serde_json::json;

use crate::common::*;

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
    assert_eq!(
        reply.status, 403,
        "RFC 6750 §3.1: insufficient_scope is 403: {reply:?}"
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
