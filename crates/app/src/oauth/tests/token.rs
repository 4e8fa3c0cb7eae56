//! The token endpoint and revocation: the code flow, PKCE, replays, rotation.

use std::time::Duration;

use super::{Harness, OTHER_VERIFIER, REDIRECT, RESOURCE, VERIFIER, challenge, form};
use toolgate_oauth::token::pkce_matches;
use toolgate_oauth::{OAuthError, TokenError};

fn invalid_grant(outcome: Result<toolgate_oauth::TokenAnswer, OAuthError>) {
    assert!(
        matches!(outcome, Err(OAuthError::InvalidGrant(_))),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn the_whole_code_flow() {
    let h = Harness::new().await;
    let client_id = h.register(&[REDIRECT]).await;
    let code = h
        .code(&client_id, Some("mcp offline_access"), VERIFIER)
        .await;
    let answer = h.exchange(&client_id, &code, VERIFIER).await.unwrap();
    assert_eq!(answer.token_type, "Bearer");
    assert_eq!(answer.expires_in, 3600);
    assert_eq!(answer.scope, "mcp offline_access");
    assert_eq!(answer.access_token.len(), 64);
    assert_eq!(answer.refresh_token.len(), 64);
    assert_ne!(answer.access_token, answer.refresh_token);
    let json = serde_json::to_value(&answer).unwrap();
    assert_eq!(json["token_type"], "Bearer");
    assert_eq!(json["refresh_token"], answer.refresh_token.as_str());

    let (account, grant) = h
        .server
        .authenticate(Some(&answer.access_token))
        .await
        .unwrap();
    assert_eq!(account.id, h.account.id);
    assert_eq!(grant.client_id, client_id);
    assert_eq!(grant.resource, RESOURCE);
    // a refresh token is no access token
    assert_eq!(
        h.server
            .authenticate(Some(&answer.refresh_token))
            .await
            .unwrap_err(),
        TokenError::Invalid
    );

    let apps = h.server.connected_apps(&h.account.id).await.unwrap();
    assert_eq!(apps.len(), 1);
    assert_eq!(apps[0].client_id, client_id);
    assert_eq!(apps[0].name, "Test App");

    let rotated = h
        .refresh(&client_id, &answer.refresh_token, None)
        .await
        .unwrap();
    assert_ne!(rotated.refresh_token, answer.refresh_token);
    assert_ne!(rotated.access_token, answer.access_token);
    assert_eq!(rotated.scope, "mcp offline_access");
    h.server
        .authenticate(Some(&rotated.access_token))
        .await
        .unwrap();

    // disconnecting the app ends its tokens at once, cached or not
    assert!(
        h.server
            .revoke_client(&h.account.id, &client_id)
            .await
            .unwrap()
            > 0
    );
    assert_eq!(
        h.server
            .authenticate(Some(&rotated.access_token))
            .await
            .unwrap_err(),
        TokenError::Invalid
    );
    invalid_grant(h.refresh(&client_id, &rotated.refresh_token, None).await);
    assert!(
        h.server
            .connected_apps(&h.account.id)
            .await
            .unwrap()
            .is_empty()
    );
}

#[test]
fn pkce_follows_rfc_7636() {
    // RFC 7636 appendix B
    let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    let challenge_b = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
    assert!(pkce_matches(verifier, challenge_b));
    assert_eq!(challenge(verifier), challenge_b);
    assert!(!pkce_matches(verifier, &challenge_b[..42]));
    assert!(!pkce_matches(OTHER_VERIFIER, challenge_b));
}

#[tokio::test]
async fn a_wrong_verifier_is_refused_and_burns_the_code() {
    let h = Harness::new().await;
    let client_id = h.register(&[REDIRECT]).await;
    let code = h.code(&client_id, None, VERIFIER).await;
    match h.exchange(&client_id, &code, OTHER_VERIFIER).await {
        Err(OAuthError::InvalidGrant(why)) => assert!(why.contains("code_verifier"), "{why}"),
        other => panic!("{other:?}"),
    }
    invalid_grant(h.exchange(&client_id, &code, VERIFIER).await);
}

#[tokio::test]
async fn a_malformed_verifier_is_refused_before_the_code_is_used() {
    let h = Harness::new().await;
    let client_id = h.register(&[REDIRECT]).await;
    let code = h.code(&client_id, None, VERIFIER).await;
    for bad in ["short".to_owned(), "v".repeat(129), format!("{VERIFIER}+")] {
        assert!(matches!(
            h.exchange(&client_id, &code, &bad).await,
            Err(OAuthError::InvalidRequest(_))
        ));
    }
    h.exchange(&client_id, &code, VERIFIER).await.unwrap();
}

#[tokio::test]
async fn a_replayed_code_revokes_what_it_gave() {
    let h = Harness::new().await;
    let client_id = h.register(&[REDIRECT]).await;
    let code = h.code(&client_id, None, VERIFIER).await;
    let first = h.exchange(&client_id, &code, VERIFIER).await.unwrap();
    // authenticated once, so the grant is in the cache
    h.server
        .authenticate(Some(&first.access_token))
        .await
        .unwrap();
    invalid_grant(h.exchange(&client_id, &code, VERIFIER).await);
    assert_eq!(
        h.server
            .authenticate(Some(&first.access_token))
            .await
            .unwrap_err(),
        TokenError::Invalid
    );
    invalid_grant(h.refresh(&client_id, &first.refresh_token, None).await);
}

#[tokio::test]
async fn an_expired_code_is_refused() {
    let h = Harness::new().await;
    let client_id = h.register(&[REDIRECT]).await;
    let code = h.code(&client_id, None, VERIFIER).await;
    h.advance(Duration::from_secs(61));
    invalid_grant(h.exchange(&client_id, &code, VERIFIER).await);
    // within its minute it works
    let fresh = h.code(&client_id, None, VERIFIER).await;
    h.advance(Duration::from_secs(50));
    h.exchange(&client_id, &fresh, VERIFIER).await.unwrap();
}

#[tokio::test]
async fn a_code_is_bound_to_its_client_redirect_and_resource() {
    let h = Harness::new().await;
    let client_id = h.register(&[REDIRECT, "https://app.example/two"]).await;
    let other_client = h.register(&[REDIRECT]).await;

    let code = h.code(&client_id, None, VERIFIER).await;
    invalid_grant(h.exchange(&other_client, &code, VERIFIER).await);

    let code = h.code(&client_id, None, VERIFIER).await;
    let mut pairs = vec![
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", "https://app.example/two"),
        ("client_id", client_id.as_str()),
        ("code_verifier", VERIFIER),
    ];
    invalid_grant(h.server.token(&form(&pairs)).await);

    let code = h.code(&client_id, None, VERIFIER).await;
    pairs[1].1 = &code;
    pairs[2].1 = REDIRECT;
    pairs.push(("resource", "https://other.example/mcp"));
    assert!(matches!(
        h.server.token(&form(&pairs)).await,
        Err(OAuthError::InvalidTarget(_))
    ));
    // the wrong resource did not use the code up; without resource it works
    pairs.pop();
    h.server.token(&form(&pairs)).await.unwrap();

    invalid_grant(h.exchange(&client_id, "not-a-code", VERIFIER).await);
    invalid_grant(h.exchange(&client_id, &"0".repeat(64), VERIFIER).await);
}

#[tokio::test]
async fn malformed_token_requests_are_refused() {
    let h = Harness::new().await;
    let cases: [(&[(&str, &str)], &str); 6] = [
        (&[], "invalid_request"),
        (&[("grant_type", "")], "invalid_request"),
        (&[("grant_type", "password")], "unsupported_grant_type"),
        (
            &[("grant_type", "client_credentials")],
            "unsupported_grant_type",
        ),
        (
            &[
                ("grant_type", "refresh_token"),
                ("grant_type", "refresh_token"),
            ],
            "invalid_request",
        ),
        (
            &[
                ("grant_type", "authorization_code"),
                ("redirect_uri", REDIRECT),
                ("client_id", "x"),
                ("code_verifier", VERIFIER),
            ],
            "invalid_request",
        ),
    ];
    for (pairs, expected) in cases {
        let error = h.server.token(&form(pairs)).await.unwrap_err();
        assert_eq!(error.code(), expected, "{pairs:?}");
    }
}

#[tokio::test]
async fn refresh_rotates_and_a_replay_revokes_the_family() {
    let h = Harness::new().await;
    let (client_id, first) = h.tokens(None).await;
    // a second authorization of the same client is another family and survives
    let other_code = h.code(&client_id, None, OTHER_VERIFIER).await;
    let other = h
        .exchange(&client_id, &other_code, OTHER_VERIFIER)
        .await
        .unwrap();

    let second = h
        .refresh(&client_id, &first.refresh_token, None)
        .await
        .unwrap();
    let third = h
        .refresh(&client_id, &second.refresh_token, None)
        .await
        .unwrap();
    h.server
        .authenticate(Some(&third.access_token))
        .await
        .unwrap();

    // the first refresh token again: someone kept a copy
    match h.refresh(&client_id, &first.refresh_token, None).await {
        Err(OAuthError::InvalidGrant(why)) => assert!(why.contains("used already"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        h.server
            .authenticate(Some(&third.access_token))
            .await
            .unwrap_err(),
        TokenError::Invalid
    );
    invalid_grant(h.refresh(&client_id, &third.refresh_token, None).await);
    h.server
        .authenticate(Some(&other.access_token))
        .await
        .unwrap();
    h.refresh(&client_id, &other.refresh_token, None)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_refresh_token_is_bound_to_its_client_and_life() {
    let h = Harness::new().await;
    let (client_id, answer) = h.tokens(None).await;
    let other_client = h.register(&[REDIRECT]).await;
    invalid_grant(h.refresh(&other_client, &answer.refresh_token, None).await);
    invalid_grant(h.refresh(&client_id, "garbage", None).await);
    invalid_grant(h.refresh(&client_id, &"ab".repeat(32), None).await);
    // the other client's attempt did not use it
    let rotated = h
        .refresh(&client_id, &answer.refresh_token, None)
        .await
        .unwrap();
    h.advance(Duration::from_secs(30 * 24 * 3600 + 1));
    invalid_grant(h.refresh(&client_id, &rotated.refresh_token, None).await);
}

#[tokio::test]
async fn refresh_scope_may_not_exceed_the_grant() {
    let h = Harness::new().await;
    let (client_id, answer) = h.tokens(Some("mcp")).await;
    assert!(matches!(
        h.refresh(&client_id, &answer.refresh_token, Some("admin"))
            .await,
        Err(OAuthError::InvalidScope(_))
    ));
    // offline_access is what holding a refresh token means: asking for it is no widening
    let rotated = h
        .refresh(
            &client_id,
            &answer.refresh_token,
            Some("mcp offline_access"),
        )
        .await
        .unwrap();
    assert_eq!(rotated.scope, "mcp");

    // a grant without mcp cannot gain it by refreshing, and its family goes
    let code = h
        .code(&client_id, Some("offline_access"), OTHER_VERIFIER)
        .await;
    let narrow = h.exchange(&client_id, &code, OTHER_VERIFIER).await.unwrap();
    assert_eq!(narrow.scope, "offline_access");
    assert!(matches!(
        h.refresh(&client_id, &narrow.refresh_token, Some("mcp"))
            .await,
        Err(OAuthError::InvalidScope(_))
    ));
    invalid_grant(h.refresh(&client_id, &narrow.refresh_token, None).await);
    // the first family was not touched
    h.refresh(&client_id, &rotated.refresh_token, None)
        .await
        .unwrap();
}

#[tokio::test]
async fn revocation_is_honoured_at_once() {
    let h = Harness::new().await;
    let (client_id, answer) = h.tokens(None).await;
    h.server
        .authenticate(Some(&answer.access_token))
        .await
        .unwrap();
    h.server
        .revoke(&form(&[("token", &answer.access_token)]))
        .await
        .unwrap();
    assert_eq!(
        h.server
            .authenticate(Some(&answer.access_token))
            .await
            .unwrap_err(),
        TokenError::Invalid
    );
    // the family went with it
    invalid_grant(h.refresh(&client_id, &answer.refresh_token, None).await);

    // revoking the refresh token ends the access token too
    let (client_id, answer) = h.tokens(None).await;
    h.server
        .authenticate(Some(&answer.access_token))
        .await
        .unwrap();
    h.server
        .revoke(&form(&[
            ("token", &answer.refresh_token),
            ("token_type_hint", "refresh_token"),
            ("client_id", &client_id),
        ]))
        .await
        .unwrap();
    assert_eq!(
        h.server
            .authenticate(Some(&answer.access_token))
            .await
            .unwrap_err(),
        TokenError::Invalid
    );

    // unknown and malformed tokens are no error; a missing one is
    h.server
        .revoke(&form(&[("token", &"c".repeat(64))]))
        .await
        .unwrap();
    h.server.revoke(&form(&[("token", "junk")])).await.unwrap();
    assert!(matches!(
        h.server.revoke(&form(&[])).await,
        Err(OAuthError::InvalidRequest(_))
    ));
    assert!(matches!(
        h.server
            .revoke(&form(&[("token", "a"), ("token", "b")]))
            .await,
        Err(OAuthError::InvalidRequest(_))
    ));
}

#[tokio::test]
async fn token_answers_hide_their_tokens() {
    let h = Harness::new().await;
    let (_, answer) = h.tokens(None).await;
    let shown = format!("{answer:?}");
    assert!(!shown.contains(&answer.access_token), "{shown}");
    assert!(!shown.contains(&answer.refresh_token), "{shown}");
    assert!(shown.contains("Bearer"));
}
