//! The owner's dashboard over real HTTP: asking for a sign-in link (answers, refusals, limits,
//! the mail in the outbox and what the log shows of it) and using a link (once, not forged, not
//! expired, not from another site). Signed-in pages (rotation, secrets, sign-out) are in
//! `dashboard_owner`; wallet, webhook and usage pages in `dashboard_wallet`.

use std::time::Duration;

use crate::common::*;
use serde_json::{Value, json};

/// What `POST /magic-link` answers for any acceptable address.
fn assert_sent(reply: &Reply) -> Value {
    assert_eq!(reply.status, 202, "{reply:?}");
    assert!(
        reply
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{reply:?}"
    );
    let body = reply.json();
    assert_eq!(body["status"], "sent", "{reply:?}");
    assert!(
        body["message"].as_str().is_some_and(|m| m.contains("link")),
        "{reply:?}"
    );
    body
}

/// A JSON refusal with a readable `error`.
fn assert_json_error(reply: &Reply, status: u16) -> String {
    assert_eq!(reply.status, status, "{reply:?}");
    let error = reply.json()["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no `error` text: {reply:?}"))
        .to_owned();
    assert!(error.len() > 10, "{reply:?}");
    error
}

/// `Retry-After` in whole seconds, within the 15-minute window.
fn retry_after(reply: &Reply) -> u64 {
    let seconds: u64 = reply
        .header("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After: {reply:?}"))
        .parse()
        .unwrap();
    assert!((1..=900).contains(&seconds), "{reply:?}");
    seconds
}

#[tokio::test]
async fn a_link_is_asked_for_alike_for_known_and_unknown_addresses_and_only_mailed() {
    let d = Dash::start(&[]).await;
    create_account(&d.storage, "known@example.org");

    let known = assert_sent(&d.ask_link("known@example.org").await);
    let unknown = assert_sent(&d.ask_link("nobody@example.org").await);
    assert_eq!(known, unknown, "the answer tells whether an account exists");

    // the sign-in page's form: a page with the notice, same words
    let page = d
        .post_from(
            "/magic-link",
            None,
            &[("email", "Form.User@Example.org")],
            Some(&d.origin()),
        )
        .await;
    assert_eq!(page.status, 202, "{page:?}");
    assert!(
        page.header("content-type")
            .is_some_and(|t| t.starts_with("text/html")),
        "{page:?}"
    );
    assert_eq!(
        text_of_id(&page.body, "notice").as_deref(),
        known["message"].as_str(),
        "{page:?}"
    );
    // the same form from another site is refused and mails nothing
    let forged = d
        .post_from(
            "/magic-link",
            None,
            &[("email", "victim@example.org")],
            Some("http://evil.example"),
        )
        .await;
    assert_eq!(forged.status, 403, "{forged:?}");

    // one mail each, with one link of the documented shape (the form's address lower-cased)
    let known_token = d.wait_mails("known@example.org", 1).await.remove(0);
    let unknown_token = d.wait_mails("nobody@example.org", 1).await.remove(0);
    d.wait_mails("form.user@example.org", 1).await;
    assert_ne!(known_token, unknown_token);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(d.mails_to("victim@example.org").is_empty());
    assert_eq!(std::fs::read_dir(d.outbox()).unwrap().count(), 3);

    // the confirmation page's access-log line hides the token
    assert_eq!(d.confirm_page(&known_token).await.status, 200);
    let session = d.session_from(&known_token).await;
    let log = d
        .server
        .log_after("/dashboard/sign-in/confirm?token=…")
        .await;
    assert!(
        log.contains("/dashboard/sign-in/confirm?token=…"),
        "no redacted confirm path in the log:\n{log}"
    );
    for token in [&known_token, &unknown_token] {
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(token.as_str())).collect();
        assert_eq!(lines.len(), 1, "the token is logged elsewhere: {lines:#?}");
        assert!(
            lines[0].contains("INFO") && lines[0].contains("outbox"),
            "{lines:?}"
        );
    }
    assert!(
        !log.contains(&session.token),
        "the session cookie is in the log"
    );
}

#[tokio::test]
async fn a_bad_link_request_is_refused_with_a_clear_error() {
    let d = Dash::start(&[]).await;
    let json = "application/json";
    let cases: Vec<(&str, &str, String)> = vec![
        ("not JSON", json, "{email: x@example.org".to_owned()),
        ("an array", json, r#"["x@example.org"]"#.to_owned()),
        ("a number", json, r#"{"email": 5}"#.to_owned()),
        ("no email", json, "{}".to_owned()),
        ("an empty email", json, r#"{"email": "  "}"#.to_owned()),
        (
            "not an address",
            json,
            r#"{"email": "x.example.org"}"#.to_owned(),
        ),
        ("no domain", json, r#"{"email": "x@localhost"}"#.to_owned()),
        (
            "text/plain",
            "text/plain",
            r#"{"email": "x@example.org"}"#.to_owned(),
        ),
        (
            "5 KB",
            json,
            json!({"email": "x@example.org", "pad": "p".repeat(5 * 1024)}).to_string(),
        ),
    ];
    for (what, content_type, body) in cases {
        let reply = d.ask_link_raw(content_type, body).await;
        assert_eq!(reply.status, 400, "{what}: {reply:?}");
        let error = assert_json_error(&reply, 400);
        assert!(!error.contains("x@example.org"), "{what}: {error}");
    }
    // the sign-in page's form gets its page back, with the error
    for fields in [
        &[("email", "x.example.org")][..],
        &[("mail", "x@example.org")][..],
    ] {
        let page = d
            .post_from("/magic-link", None, fields, Some(&d.origin()))
            .await;
        assert_error_page(&page, 400);
        assert!(has_id(&page.body, "sign-in"), "{page:?}");
    }
    // the address's five links are all still there: nothing above was counted
    for _ in 0..5 {
        assert_sent(&d.ask_link("x@example.org").await);
    }
    d.wait_mails("x@example.org", 5).await;
}

#[tokio::test]
async fn the_sixth_link_for_one_address_waits() {
    let d = Dash::start(&[]).await;
    for _ in 0..5 {
        assert_sent(&d.ask_link("busy@example.org").await);
    }
    let refused = d.ask_link("busy@example.org").await;
    let error = assert_json_error(&refused, 429);
    assert!(error.contains("too many"), "{error}");
    retry_after(&refused);
    // the limit is the address's, not everyone's
    assert_sent(&d.ask_link("other@example.org").await);
    d.wait_mails("busy@example.org", 5).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(d.mails_to("busy@example.org").len(), 5);
}

#[tokio::test]
async fn twenty_concurrent_requests_for_one_address_send_five_links() {
    let d = Dash::start(&[]).await;
    let requests = (0..20).map(|_| d.ask_link("rush@example.org"));
    let replies = futures::future::join_all(requests).await;
    let sent = replies.iter().filter(|r| r.status == 202).count();
    let refused: Vec<&Reply> = replies.iter().filter(|r| r.status == 429).collect();
    assert_eq!((sent, refused.len()), (5, 15), "{replies:#?}");
    for reply in refused {
        retry_after(reply);
    }
    d.wait_mails("rush@example.org", 5).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(d.mails_to("rush@example.org").len(), 5);
}

#[tokio::test]
async fn one_client_gets_its_limit_of_links_across_addresses() {
    let d = Dash::start(&[("TOOLGATE_SIGN_IN_LIMIT_PER_CLIENT", "3")]).await;
    for email in ["c1@example.org", "c2@example.org", "c3@example.org"] {
        assert_sent(&d.ask_link(email).await);
    }
    let refused = d.ask_link("c4@example.org").await;
    assert_json_error(&refused, 429);
    retry_after(&refused);
    d.wait_mails("c3@example.org", 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(d.mails_to("c4@example.org").is_empty());
}

/// `POST /magic-link` for `email` with an `X-Forwarded-For` header.
async fn ask_forwarded(d: &Dash, email: &str, forwarded: &str) -> u16 {
    ask_forwarded_lines(d, email, &[forwarded]).await
}

/// `POST /magic-link` for `email` with one `X-Forwarded-For` header line per entry of `lines`.
async fn ask_forwarded_lines(d: &Dash, email: &str, lines: &[&str]) -> u16 {
    let mut request = d
        .http
        .post(d.server.url("/magic-link"))
        .header("Content-Type", "application/json");
    for line in lines {
        // `header` appends: each value goes out as a line of its own
        request = request.header("X-Forwarded-For", *line);
    }
    send(request.body(json!({ "email": email }).to_string()))
        .await
        .status
}

#[tokio::test]
async fn behind_a_trusted_proxy_clients_are_counted_apart() {
    let limit = ("TOOLGATE_SIGN_IN_LIMIT_PER_CLIENT", "2");
    let d = Dash::start(&[limit, ("TOOLGATE_TRUSTED_PROXIES", "127.0.0.1/32")]).await;
    assert_eq!(
        ask_forwarded(&d, "p1@example.org", "203.0.113.5").await,
        202
    );
    assert_eq!(
        ask_forwarded(&d, "p2@example.org", "203.0.113.5").await,
        202
    );
    assert_eq!(
        ask_forwarded(&d, "p3@example.org", "203.0.113.5").await,
        429
    );
    // another client behind the same proxy has its own count
    assert_eq!(
        ask_forwarded(&d, "p4@example.org", "203.0.113.6").await,
        202
    );
    // what a client writes left of the proxy's entry is not believed
    let forged = "203.0.113.77, 203.0.113.5";
    assert_eq!(ask_forwarded(&d, "p5@example.org", forged).await, 429);

    // without trusted proxies the header is ignored: every request is the loopback peer's
    let plain = Dash::start(&[limit]).await;
    assert_eq!(
        ask_forwarded(&plain, "q1@example.org", "203.0.113.5").await,
        202
    );
    assert_eq!(
        ask_forwarded(&plain, "q2@example.org", "203.0.113.6").await,
        202
    );
    assert_eq!(
        ask_forwarded(&plain, "q3@example.org", "203.0.113.7").await,
        429
    );
}

#[tokio::test]
async fn several_forwarded_lines_are_read_as_one_list() {
    let limit = ("TOOLGATE_SIGN_IN_LIMIT_PER_CLIENT", "2");
    let d = Dash::start(&[limit, ("TOOLGATE_TRUSTED_PROXIES", "127.0.0.1/32")]).await;
    for email in ["l1@example.org", "l2@example.org"] {
        assert_eq!(ask_forwarded(&d, email, "203.0.113.5").await, 202);
    }
    // the client wrote a line of its own and the proxy added its entry as a second line: the
    // client is still the right-most untrusted entry of all lines, so its count is spent
    let lines = ["203.0.113.77", "203.0.113.5"];
    assert_eq!(ask_forwarded_lines(&d, "l3@example.org", &lines).await, 429);
    let lines = ["203.0.113.78", "203.0.113.5", "127.0.0.1"];
    assert_eq!(ask_forwarded_lines(&d, "l4@example.org", &lines).await, 429);
    // and a client named only in the last line is counted as itself
    let lines = ["203.0.113.5", "203.0.113.6"];
    assert_eq!(ask_forwarded_lines(&d, "l5@example.org", &lines).await, 202);
}

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
    let session = Session {
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
    let session = Session {
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
