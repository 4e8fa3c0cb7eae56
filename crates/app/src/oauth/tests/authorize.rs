//! The authorization endpoint: the open-redirect guard, the checks after it, consent.

use super::{
    Harness, ISSUER, OTHER_VERIFIER, REDIRECT, RESOURCE, VERIFIER, base, challenge, form, params,
    query,
};
use toolgate_oauth::{AuthorizeError, AuthorizeParams, OAuthError};

/// The error a refused request redirects with, after checking where it goes.
fn redirected_error(outcome: Result<toolgate_oauth::AuthorizeRequest, AuthorizeError>) -> String {
    let Err(AuthorizeError::Redirect(back)) = outcome else {
        panic!("expected a redirect, got {outcome:?}");
    };
    assert_eq!(base(&back.url), REDIRECT);
    let query = query(&back.url);
    assert_eq!(query["state"], "st-1");
    assert_eq!(query["iss"], ISSUER);
    assert!(!query["error_description"].is_empty());
    // what an error page shows before sign-in is what the redirect would have said
    assert_eq!(query["error"], back.error);
    assert_eq!(query["error_description"], back.description);
    let shown = AuthorizeError::Redirect(back.clone()).to_string();
    assert!(
        shown.contains(&back.description) && shown.contains(back.error),
        "{shown}"
    );
    query["error"].clone()
}

#[tokio::test]
async fn a_valid_request_is_carried_to_consent() {
    let h = Harness::new().await;
    let client_id = h.register(&[REDIRECT]).await;
    let request = h
        .server
        .authorize(&params(&client_id, VERIFIER), Some(&h.account.id))
        .await
        .unwrap();
    assert_eq!(request.client_id(), client_id);
    assert_eq!(request.client_name(), "Test App");
    assert_eq!(request.redirect_uri(), REDIRECT);
    assert_eq!(request.scope(), "mcp");
    assert_eq!(request.state(), Some("st-1"));
    // what a consent form carries is checked again into the same request
    let again = h
        .server
        .authorize(&request.params(), Some(&h.account.id))
        .await
        .unwrap();
    assert_eq!(again, request);
    let pairs: Vec<(String, String)> = request
        .params()
        .to_pairs()
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect();
    assert_eq!(
        AuthorizeParams::from_pairs(&pairs).unwrap(),
        request.params()
    );

    // one registered URI: it may be left out; offline_access is kept; resource may be left out
    let mut bare = params(&client_id, VERIFIER);
    bare.redirect_uri = None;
    bare.resource = None;
    bare.state = None;
    bare.scope = Some("offline_access mcp mcp".to_owned());
    let request = h
        .server
        .authorize(&bare, Some(&h.account.id))
        .await
        .unwrap();
    assert_eq!(request.redirect_uri(), REDIRECT);
    assert_eq!(request.scope(), "mcp offline_access");
    assert_eq!(request.state(), None);
}

#[tokio::test]
async fn unknown_clients_and_foreign_redirect_uris_are_not_redirected() {
    let h = Harness::new().await;
    let client_id = h.register(&[REDIRECT, "https://app.example/other"]).await;
    let mut unknown = params("tgc_00000000000000000000000000000000", VERIFIER);
    assert!(matches!(
        h.server.authorize(&unknown, Some(&h.account.id)).await,
        Err(AuthorizeError::NoRedirect(_))
    ));
    unknown.client_id = None;
    assert!(matches!(
        h.server.authorize(&unknown, Some(&h.account.id)).await,
        Err(AuthorizeError::NoRedirect(_))
    ));
    // open-redirect attempts: anything but an exact registered URI
    for attempt in [
        "https://evil.example/cb",
        "https://app.example/cb/../../evil",
        "https://app.example/cb/more",
        "https://app.example/c",
        "https://app.example/cb?next=https://evil.example",
        "https://app.example/cb#x",
        "https://app.example/cb/",
        "https://APP.example/cb",
        "https://app.example:443/cb",
        "http://app.example/cb",
        "https://app.example.evil.example/cb",
        "https://app.example@evil.example/cb",
    ] {
        let mut request = params(&client_id, VERIFIER);
        request.redirect_uri = Some(attempt.to_owned());
        match h.server.authorize(&request, Some(&h.account.id)).await {
            Err(AuthorizeError::NoRedirect(message)) => {
                assert!(message.contains("redirect_uri"), "{message}");
            }
            other => panic!("{attempt}: {other:?}"),
        }
    }
    // two registered URIs: one must be named
    let mut unnamed = params(&client_id, VERIFIER);
    unnamed.redirect_uri = None;
    assert!(matches!(
        h.server.authorize(&unnamed, Some(&h.account.id)).await,
        Err(AuthorizeError::NoRedirect(_))
    ));
    // and even a bad request of an unknown client is not redirected
    let mut both = params("tgc_unknown", VERIFIER);
    both.response_type = Some("token".to_owned());
    assert!(matches!(
        h.server.authorize(&both, Some(&h.account.id)).await,
        Err(AuthorizeError::NoRedirect(_))
    ));
}

#[tokio::test]
async fn later_errors_go_back_to_the_client() {
    let h = Harness::new().await;
    let client_id = h.register(&[REDIRECT]).await;
    let change = |edit: &dyn Fn(&mut AuthorizeParams)| {
        let mut request = params(&client_id, VERIFIER);
        edit(&mut request);
        request
    };
    let cases: Vec<(AuthorizeParams, &str)> = vec![
        (
            change(&|p| p.response_type = Some("token".to_owned())),
            "unsupported_response_type",
        ),
        (change(&|p| p.response_type = None), "invalid_request"),
        (change(&|p| p.code_challenge = None), "invalid_request"),
        (
            change(&|p| {
                p.code_challenge = Some(VERIFIER.to_owned());
                p.code_challenge_method = Some("plain".to_owned());
            }),
            "invalid_request",
        ),
        (
            change(&|p| p.code_challenge_method = None),
            "invalid_request",
        ),
        (
            change(&|p| p.code_challenge_method = Some("s256".to_owned())),
            "invalid_request",
        ),
        (
            change(&|p| p.code_challenge = Some(challenge(VERIFIER)[..42].to_owned())),
            "invalid_request",
        ),
        (
            change(&|p| p.code_challenge = Some(format!("{}=", &challenge(VERIFIER)[..42]))),
            "invalid_request",
        ),
        (
            change(&|p| p.resource = Some("https://other.example/mcp".to_owned())),
            "invalid_target",
        ),
        (
            change(&|p| p.resource = Some(format!("{RESOURCE}/"))),
            "invalid_target",
        ),
        (
            change(&|p| p.scope = Some("admin".to_owned())),
            "invalid_scope",
        ),
        (
            change(&|p| p.scope = Some("mcp admin".to_owned())),
            "invalid_scope",
        ),
    ];
    for (request, expected) in cases {
        let error = redirected_error(h.server.authorize(&request, Some(&h.account.id)).await);
        assert_eq!(error, expected, "{request:?}");
    }
}

#[tokio::test]
async fn approval_redirects_with_the_code_state_and_issuer() {
    let h = Harness::new().await;
    let with_query = "https://app.example/cb?tenant=a%20b";
    let client_id = h.register(&[with_query]).await;
    let mut request = params(&client_id, VERIFIER);
    request.redirect_uri = Some(with_query.to_owned());
    request.state = Some("a b&c=d/é".to_owned());
    let request = h
        .server
        .authorize(&request, Some(&h.account.id))
        .await
        .unwrap();
    let url = h.server.approve(&h.account.id, &request).await.unwrap();
    assert!(
        url.starts_with("https://app.example/cb?tenant=a%20b&code="),
        "{url}"
    );
    let query = query(&url);
    assert_eq!(query["tenant"], "a b");
    assert_eq!(query["state"], "a b&c=d/é");
    assert_eq!(query["iss"], ISSUER);
    assert_eq!(query["code"].len(), 64);
    assert!(!url.contains(' '));

    // each approval makes a new code
    let second = h.server.approve(&h.account.id, &request).await.unwrap();
    assert_ne!(super::query(&second)["code"], query["code"]);
}

#[tokio::test]
async fn approval_for_a_missing_account_is_refused() {
    let h = Harness::new().await;
    let client_id = h.register(&[REDIRECT]).await;
    let request = h
        .server
        .authorize(&params(&client_id, OTHER_VERIFIER), Some(&h.account.id))
        .await
        .unwrap();
    let ghost = toolgate_domain::AccountId::generate();
    assert!(matches!(
        h.server.approve(&ghost, &request).await,
        Err(OAuthError::InvalidRequest(_))
    ));
}

#[tokio::test]
async fn denial_redirects_with_access_denied() {
    let h = Harness::new().await;
    let client_id = h.register(&[REDIRECT]).await;
    let request = h
        .server
        .authorize(&params(&client_id, VERIFIER), Some(&h.account.id))
        .await
        .unwrap();
    let url = h.server.deny(&request);
    assert_eq!(base(&url), REDIRECT);
    let query = query(&url);
    assert_eq!(query["error"], "access_denied");
    assert_eq!(query["state"], "st-1");
    assert_eq!(query["iss"], ISSUER);
    assert!(!query.contains_key("code"));
}

#[test]
fn repeated_authorization_parameters_are_refused() {
    let pairs = form(&[
        ("client_id", "a"),
        ("redirect_uri", REDIRECT),
        ("redirect_uri", "https://evil.example/cb"),
    ]);
    assert!(matches!(
        AuthorizeParams::from_pairs(&pairs),
        Err(AuthorizeError::NoRedirect(_))
    ));
    let pairs = form(&[
        ("client_id", "a"),
        ("state", ""),
        ("other", "1"),
        ("other", "2"),
    ]);
    let params = AuthorizeParams::from_pairs(&pairs).unwrap();
    assert_eq!(params.client_id.as_deref(), Some("a"));
    assert_eq!(params.state, None);
}
