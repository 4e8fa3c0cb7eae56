//! The authorization server's edges: no redirect to a client before the owner has signed in,
//! and metadata-document fetches counted per account.

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
