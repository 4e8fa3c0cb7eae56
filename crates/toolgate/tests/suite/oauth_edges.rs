//! The authorization server's edges: no redirect to a client before the owner has signed in,
//! metadata-document fetches counted per account, and clients never used purged.

use std::time::{Duration, Instant};

use crate::common::*;

/// Where a client registered by anyone sends browsers back to.
const LANDING: &str = "https://evil.example/landing";

/// Each error found once the client and its redirect URI are verified, with its RFC code.
fn bad_requests(ask: &Ask) -> Vec<(Ask, &'static str)> {
    vec![
        (ask.with("response_type", None), "invalid_request"),
        (
            ask.with("response_type", Some("token")),
            "unsupported_response_type",
        ),
        (ask.with("code_challenge", None), "invalid_request"),
        (ask.with("code_challenge_method", None), "invalid_request"),
        (
            ask.with("code_challenge_method", Some("plain")),
            "invalid_request",
        ),
        (
            ask.with("code_challenge", Some("too-short")),
            "invalid_request",
        ),
        (
            ask.with("resource", Some("https://other.example/mcp")),
            "invalid_target",
        ),
        (ask.with("scope", Some("admin")), "invalid_scope"),
        // the client's one redirect URI, implied
        (
            ask.with("redirect_uri", None).with("scope", Some("admin")),
            "invalid_scope",
        ),
    ]
}

#[tokio::test]
async fn before_sign_in_no_error_is_sent_to_the_client() {
    let d = Dash::start(&[]).await;
    let client_id = register(&d, "Bouncer", &[LANDING]).await;
    let ask = Ask::new(&d, &client_id, &Pkce::new()).with("redirect_uri", Some(LANDING));

    // signed out: every error is this service's own page, never a way to the client's URI
    for (bad, error) in bad_requests(&ask) {
        let reply = d.get(&bad.path(), None).await;
        assert_error_page(&reply, 400);
        assert!(
            reply.header("location").is_none(),
            "{error} redirected: {reply:?}"
        );
        assert!(
            reply.body.contains(error),
            "the page names {error}: {reply:?}"
        );
        assert!(!reply.body.contains("evil.example"), "{reply:?}");
    }
    // a stale or forged session is no sign-in either
    let stale = format!("{COOKIE}={}", forged_token());
    let (bad, _) = &bad_requests(&ask)[0];
    let reply = d.get(&bad.path(), Some(&stale)).await;
    assert_error_page(&reply, 400);
    assert!(reply.header("location").is_none(), "{reply:?}");

    // signed in: the verified client gets its RFC 6749 §4.1.2.1 error response
    let owner = d.sign_in("bounced@example.org").await;
    for (bad, error) in bad_requests(&ask) {
        let reply = d.get(&bad.path(), Some(&owner.cookie)).await;
        let back = redirected(&reply, LANDING);
        assert_eq!(back["error"], error, "{back:?}");
        assert_eq!(back["state"], ask.get("state"), "{back:?}");
        assert_eq!(back["iss"], d.origin(), "{back:?}");
    }
}

#[tokio::test]
async fn metadata_document_fetches_are_counted_per_account() {
    let d = Dash::start(&[]).await;
    let owner = d.sign_in("fetcher@example.org").await;
    let pkce = Pkce::new();
    // a document on a loopback address: fetched, and refused by the egress policy at once
    let ask = |n: usize| Ask::new(&d, &format!("https://127.0.0.1/client-{n}.json"), &pkce);
    for n in 0..20 {
        let reply = d.get(&ask(n).path(), Some(&owner.cookie)).await;
        assert_error_page(&reply, 400);
        assert!(
            reply.body.contains("could not be fetched"),
            "{n}: {reply:?}"
        );
    }
    let over = d.get(&ask(20).path(), Some(&owner.cookie)).await;
    assert_error_page(&over, 429);
    assert!(over.header("location").is_none(), "{over:?}");
    assert!(
        over.body.contains("20 client metadata documents"),
        "{over:?}"
    );
    let wait: u64 = over
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After: {over:?}"));
    assert!((1..=3600).contains(&wait), "{wait}");
    // another account has its own count
    let other = d.sign_in("fetcher-too@example.org").await;
    let reply = d.get(&ask(21).path(), Some(&other.cookie)).await;
    assert_error_page(&reply, 400);
    assert!(reply.body.contains("could not be fetched"), "{reply:?}");
}

/// Whether the consent page of `client_id` opens for `owner` (200), or the client is unknown
/// (400).
async fn known(d: &Dash, owner: &SignInSession, client_id: &str) -> bool {
    let ask = Ask::new(d, client_id, &Pkce::new());
    let reply = d.get(&ask.path(), Some(&owner.cookie)).await;
    match reply.status {
        200 => true,
        400 if reply.body.contains("unknown") => false,
        _ => panic!("{client_id}: {reply:?}"),
    }
}

#[tokio::test]
async fn clients_never_used_are_purged() {
    let mut d = Dash::start(&[]).await;
    let owner = d.sign_in("purge@example.org").await;
    let idle = register(&d, "Idle", &[REDIRECT]).await;
    let connected = register(&d, APP, &[REDIRECT]).await;
    connect(&d, &owner, &connected).await;
    let young = register(&d, "Young", &[REDIRECT]).await;

    // the first two were registered more than a day ago; the purge runs when a server starts
    d.server.stop();
    let db = rusqlite::Connection::open(d.storage.data_dir.join("toolgate.db")).unwrap();
    let day_and_more = 25 * 3600 * 1000_i64;
    for id in [&idle, &connected] {
        let aged = db
            .execute(
                "UPDATE oauth_clients SET updated_at = updated_at - ?1 WHERE client_id = ?2",
                rusqlite::params![day_and_more, id],
            )
            .unwrap();
        assert_eq!(aged, 1, "{id}");
    }
    drop(db);
    d.server = Server::start_with_env(&d.storage, &["--sandbox", "off"], &[]).await;
    d.public = d.server.base.clone();

    let deadline = Instant::now() + Duration::from_secs(10);
    while known(&d, &owner, &idle).await {
        assert!(Instant::now() < deadline, "the idle client was not purged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // a client with a live token of its owner stays, and so does a young one
    assert!(known(&d, &owner, &connected).await);
    assert!(known(&d, &owner, &young).await);
}
