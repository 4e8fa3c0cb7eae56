//! The owner's dashboard over real HTTP: asking for a sign-in link (answers, refusals, limits,
//! the mail in the outbox and what the log shows of it). Using a link (once, not forged, not
//! expired, not from another site) is in `dashboard_sign_in`; signed-in pages (rotation,
//! secrets, sign-out) in `dashboard_owner`; wallet, webhook and usage pages in
//! `dashboard_wallet`.

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
