//! Using a sign-in link over real HTTP: the button and the one sign-in, the session cookie
//! (host-only and secure behind https, never two), forged, malformed, expired and cross-site
//! links, and the headers every dashboard answer carries.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common::*;

#[tokio::test]
async fn a_link_shows_a_button_and_signs_in_once() {
    let d = Dash::start(&[]).await;
    let token = d.new_link("first@example.org").await;

    // opening the link (twice: a mail scanner, then the owner) uses nothing
    for _ in 0..2 {
        let page = d.confirm_page(&token).await;
        assert_eq!(page.status, 200, "{page:?}");
        assert!(page.body.contains(r#"id="confirm""#), "{page:?}");
        assert!(page.body.contains("first@example.org"), "{page:?}");
        assert!(page.body.contains(&token), "the form carries the token");
        assert_eq!(page.header("cache-control").as_deref(), Some("no-store"));
        assert_eq!(
            page.header("referrer-policy").as_deref(),
            Some("same-origin")
        );
    }

    let used = d.confirm(&token).await;
    assert_eq!(used.status, 303, "{used:?}");
    let to = location(&used);
    assert!(to.starts_with("/dashboard"), "{to}");
    assert_eq!(to, "/dashboard?notice=welcome", "a new account is welcomed");
    let cookies = set_cookies(&used);
    assert_eq!(cookies.len(), 1, "{cookies:?}");
    let cookie = &cookies[0];
    let value = session_cookie(&used).unwrap();
    assert!(is_hex64(&value), "{cookie}");
    assert_ne!(value, token, "the cookie is not the link's token");
    for attribute in ["Path=/dashboard", "HttpOnly", "SameSite=Lax"] {
        assert!(
            cookie.split("; ").any(|a| a == attribute),
            "{attribute} missing: {cookie}"
        );
    }
    assert!(!cookie.contains("Secure"), "Secure on plain http: {cookie}");
    let session = SignInSession {
        cookie: format!("{COOKIE}={value}"),
        token: value,
        csrf: String::new(),
    };
    let welcome = d.page("/dashboard?notice=welcome", &session).await;
    assert!(has_id(&welcome, "notice"), "{welcome}");

    // used: neither the button nor the page works again
    assert_error_page(&d.confirm(&token).await, 400);
    assert_error_page(&d.confirm_page(&token).await, 400);

    // the first sign-in created the account: the operator finds it by its address
    let rotated = rotate_key(&d.storage, "first@example.org");
    assert_eq!(rotated.email, "first@example.org");
    billing_of(&post_personal(&client(), &d.server, &rotated.key, &billing_call()).await);

    // a second sign-in reaches the same account, and both sessions see its current key; of
    // five presses of one button at once, one signs in
    let again = d.new_link("first@example.org").await;
    let presses = futures::future::join_all((0..5).map(|_| d.confirm(&again))).await;
    let mut statuses: Vec<u16> = presses.iter().map(|r| r.status).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [303, 400, 400, 400, 400], "{presses:#?}");
    let reply = presses.iter().find(|r| r.status == 303).unwrap();
    assert_see_other(reply, "/dashboard");
    let second = format!("{COOKIE}={}", session_cookie(reply).unwrap());
    for cookie in [&session.cookie, &second] {
        let page = d.get("/dashboard", Some(cookie)).await;
        assert_eq!(page.status, 200, "{page:?}");
        let url = text_of_id(&page.body, "personal-url-full").unwrap();
        assert_eq!(url, d.server.personal(&rotated.key), "{page:?}");
        assert!(page.body.contains("first@example.org"));
    }
}

#[tokio::test]
async fn behind_https_the_session_cookie_is_host_only_and_secure() {
    let d = Dash::start(&[("TOOLGATE_PUBLIC_URL", "https://tools.example.test")]).await;
    let token = d.new_link("tls@example.org").await;
    // the page's own origin is the public one: the loopback address is another site
    let local = d.server.base.clone();
    assert_eq!(d.confirm_from(&token, Some(&local)).await.status, 403);
    let reply = d.confirm(&token).await;
    assert_eq!(reply.status, 303, "{reply:?}");
    let cookies = set_cookies(&reply);
    assert_eq!(cookies.len(), 1, "{cookies:?}");
    // RFC 6265bis §4.1.3.2: `__Host-` needs Secure, Path=/ and no Domain, so that only this
    // host, over https, can set it (a sibling subdomain cannot toss one in)
    let cookie = &cookies[0];
    let (pair, attributes) = cookie.split_once("; ").unwrap();
    let (name, value) = pair.split_once('=').unwrap();
    assert_eq!(name, HOST_COOKIE, "{cookie}");
    assert!(is_hex64(value), "{cookie}");
    let mut attributes: Vec<&str> = attributes.split("; ").collect();
    attributes.sort_unstable();
    assert_eq!(
        attributes,
        [
            "HttpOnly",
            "Max-Age=604800",
            "Path=/",
            "SameSite=Lax",
            "Secure"
        ],
        "{cookie}"
    );
    // the prefixed cookie signs in; the same token under the plain name (as a sibling
    // subdomain could set it) is nothing here
    let signed = d
        .get("/dashboard", Some(&format!("{HOST_COOKIE}={value}")))
        .await;
    assert_eq!(signed.status, 200, "{signed:?}");
    let tossed = d
        .get("/dashboard", Some(&format!("{COOKIE}={value}")))
        .await;
    assert_see_other(&tossed, "/dashboard/sign-in");
    // and signing out clears the prefixed cookie, with the same scope
    let session = SignInSession {
        cookie: format!("{HOST_COOKIE}={value}"),
        token: value.to_owned(),
        csrf: csrf_of(&signed.body),
    };
    let out = d
        .post("/dashboard/sign-out", &session, &[("csrf", &session.csrf)])
        .await;
    assert_eq!(out.status, 303, "{out:?}");
    assert_eq!(
        set_cookies(&out),
        [format!(
            "{HOST_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax; Secure"
        )]
    );
}

#[tokio::test]
async fn two_session_cookies_are_refused() {
    for public in [None, Some("https://tools.example.test")] {
        let env: Vec<(&str, &str)> = public
            .iter()
            .map(|url| ("TOOLGATE_PUBLIC_URL", *url))
            .collect();
        let d = Dash::start(&env).await;
        let name = if public.is_some() {
            HOST_COOKIE
        } else {
            COOKIE
        };
        let token = d.new_link("twice@example.org").await;
        let live = session_cookie_named(&d.confirm(&token).await, name);
        let planted = d.new_link("planter@example.org").await;
        let other = session_cookie_named(&d.confirm(&planted).await, name);
        assert_eq!(
            d.get("/dashboard", Some(&format!("{name}={live}")))
                .await
                .status,
            200
        );
        let ask = Ask::new(&d, "tgc_00000000000000000000000000000000", &Pkce::new());
        for cookies in [
            format!("{name}={live}; {name}={other}"),
            format!("{name}={other}; {name}={live}"),
            format!("{name}={live}; {name}={live}"),
            format!("{name}={live}; {name}=nothex"),
        ] {
            for path in ["/dashboard", "/dashboard/apps", &ask.path()] {
                let reply = d.get(path, Some(&cookies)).await;
                assert_error_page(&reply, 400);
                assert!(
                    reply.body.contains("two dashboard session cookies"),
                    "{reply:?}"
                );
                assert!(
                    set_cookies(&reply).is_empty(),
                    "neither is cleared: {reply:?}"
                );
            }
        }
        // the cookie on two header lines is two cookies as well
        let reply = send(
            d.http
                .get(d.server.url("/dashboard"))
                .header("Cookie", format!("{name}={live}"))
                .header("Cookie", format!("{name}={other}")),
        )
        .await;
        assert_error_page(&reply, 400);
    }
}

#[tokio::test]
async fn forged_malformed_and_expired_links_are_refused() {
    let d = Dash::start(&[]).await;
    let forged = forged_token();
    let malformed = [
        "".to_owned(),
        "abc".to_owned(),
        forged[..63].to_owned(),
        format!("{forged}0"),
        forged.to_ascii_uppercase(),
        format!("{}g", &forged[..63]),
    ];
    for token in std::iter::once(&forged).chain(malformed.iter()) {
        assert_error_page(&d.confirm_page(token).await, 400);
        let used = d.confirm(token).await;
        assert_error_page(&used, 400);
        assert!(set_cookies(&used).is_empty(), "{used:?}");
    }
    let missing = d.get("/dashboard/sign-in/confirm", None).await;
    assert_error_page(&missing, 400);

    // a link past its 15 minutes
    let token = d.new_link("late@example.org").await;
    assert_eq!(d.confirm_page(&token).await.status, 200);
    let hash = toolgate_domain::SecretToken::parse(&token).unwrap().hash();
    let db = rusqlite::Connection::open(d.storage.data_dir.join("toolgate.db")).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    let past = toolgate_store::now_millis() - 1000;
    let changed = db
        .execute(
            "UPDATE sign_in_links SET expires_at = ?1 WHERE token_hash = ?2",
            rusqlite::params![past, &hash[..]],
        )
        .unwrap();
    assert_eq!(changed, 1, "the link's row is found by the token's SHA-256");
    drop(db);
    assert_error_page(&d.confirm_page(&token).await, 400);
    let used = d.confirm(&token).await;
    assert_error_page(&used, 400);
    assert!(session_cookie(&used).is_none(), "{used:?}");
}

#[tokio::test]
async fn a_cross_site_confirmation_is_refused_and_the_link_still_works() {
    let d = Dash::start(&[]).await;
    let token = d.new_link("victim@example.org").await;
    let evil = d.confirm_from(&token, Some("http://evil.example")).await;
    assert_error_page(&evil, 403);
    assert!(set_cookies(&evil).is_empty(), "{evil:?}");
    // a browser that names no origin but says the request is cross-site
    let fetch = send(
        d.http
            .post(d.server.url("/dashboard/sign-in/confirm"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .header("Sec-Fetch-Site", "cross-site")
            .body(form(&[("token", &token)])),
    )
    .await;
    assert_eq!(fetch.status, 403, "{fetch:?}");
    // an opaque origin (`Origin: null`) passes only when the browser vouches for the site
    for (site, status) in [
        (None, 403),
        (Some("cross-site"), 403),
        (Some("same-site"), 403),
    ] {
        let mut request = d
            .http
            .post(d.server.url("/dashboard/sign-in/confirm"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .header("Origin", "null")
            .body(form(&[("token", &token)]));
        if let Some(site) = site {
            request = request.header("Sec-Fetch-Site", site);
        }
        assert_eq!(send(request).await.status, status, "Origin: null, {site:?}");
    }
    // another port of the same host is another origin
    let other_port = format!("http://127.0.0.1:{}", d.server.port.wrapping_add(1));
    assert_eq!(d.confirm_from(&token, Some(&other_port)).await.status, 403);

    assert_eq!(d.confirm_page(&token).await.status, 200);
    let session = d.session_from(&token).await;
    assert!(
        d.page("/dashboard", &session)
            .await
            .contains("victim@example.org")
    );
}

/// The headers every dashboard answer must carry: no framing, no caching, no sniffing, a
/// referrer only to this origin, and a content policy that loads the dashboard's own script and
/// stylesheet and nothing else (no inline code, no other origin, no framing by anyone).
fn assert_page_headers(what: &str, reply: &Reply) {
    assert_eq!(
        reply.header("x-frame-options").as_deref(),
        Some("DENY"),
        "{what}: {reply:?}"
    );
    assert_eq!(
        reply.header("cache-control").as_deref(),
        Some("no-store"),
        "{what}: {reply:?}"
    );
    assert_eq!(
        reply.header("x-content-type-options").as_deref(),
        Some("nosniff"),
        "{what}"
    );
    assert_eq!(
        reply.header("referrer-policy").as_deref(),
        Some("same-origin"),
        "{what}"
    );
    let policy = reply
        .header("content-security-policy")
        .unwrap_or_else(|| panic!("{what}: no Content-Security-Policy: {reply:?}"));
    let directives: std::collections::HashMap<&str, &str> = policy
        .split(';')
        .filter_map(|d| d.trim().split_once(' '))
        .collect();
    for (directive, value) in [
        ("default-src", "'none'"),
        ("script-src", "'self'"),
        ("style-src", "'self'"),
        ("img-src", "'self'"),
        ("connect-src", "'none'"),
        ("base-uri", "'none'"),
        ("frame-ancestors", "'none'"),
    ] {
        assert_eq!(directives.get(directive), Some(&value), "{what}: {policy}");
    }
    for loose in ["unsafe", "*", "http:", "https:", "data:"] {
        assert!(!policy.contains(loose), "{what}: {loose} in {policy}");
    }
}

#[tokio::test]
async fn every_dashboard_answer_keeps_out_of_frames_and_caches_and_loads_only_its_own_assets() {
    let d = Dash::start(&[]).await;
    let unused = d.new_link("second@example.org").await;
    let session = d.sign_in("framed@example.org").await;
    let cookie = Some(session.cookie.as_str());
    let mut answers = Vec::new();
    for path in [
        "/dashboard",
        "/dashboard/secrets",
        "/dashboard/usage",
        "/dashboard/wallet",
        "/dashboard/sessions",
        "/dashboard/apps",
    ] {
        let page = d.get(path, cookie).await;
        assert_eq!(page.status, 200, "{path}: {page:?}");
        answers.push((path.to_owned(), page));
    }
    answers.push((
        "sign-in page".into(),
        d.get("/dashboard/sign-in", None).await,
    ));
    answers.push(("the link's page".into(), d.confirm_page(&unused).await));
    let forged = d.confirm_page(&forged_token()).await;
    assert_error_page(&forged, 400);
    answers.push(("a forged link's page".into(), forged));
    let signed_out = d.get("/dashboard", None).await;
    assert_see_other(&signed_out, "/dashboard/sign-in");
    answers.push(("the redirect to sign in".into(), signed_out));
    let unknown_app = d
        .get(
            "/dashboard/oauth/authorize?response_type=code&client_id=tgc_none",
            cookie,
        )
        .await;
    assert_error_page(&unknown_app, 400);
    answers.push(("an unknown app's authorization".into(), unknown_app));
    let cross_site = d
        .post_from(
            "/dashboard/secrets/set",
            cookie,
            &[("csrf", &session.csrf), ("name", "A"), ("value", "v")],
            Some("http://evil.example"),
        )
        .await;
    assert_error_page(&cross_site, 403);
    answers.push(("a cross-site form".into(), cross_site));
    let saved = d
        .post(
            "/dashboard/secrets/set",
            &session,
            &[("csrf", &session.csrf), ("name", "A"), ("value", "v1")],
        )
        .await;
    assert_eq!(saved.status, 303, "{saved:?}");
    answers.push(("the redirect after a form".into(), saved));
    for (what, reply) in &answers {
        assert_page_headers(what, reply);
        // nothing inline the policy would block: scripts and styles come from the assets
        let body = reply.body.to_ascii_lowercase();
        for inline in ["<style", " style=", " onclick=", " onload=", "javascript:"] {
            assert!(!body.contains(inline), "{what}: {inline} in {}", reply.body);
        }
        for script in body.split("<script").skip(1) {
            assert!(
                script
                    .trim_start()
                    .starts_with(r#"src="/dashboard/assets/app.js""#),
                "{what}: an inline or foreign script: {}",
                reply.body
            );
        }
    }
}
