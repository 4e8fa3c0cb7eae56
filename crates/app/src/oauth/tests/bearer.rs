//! The resource side: which bearer tokens `/mcp` accepts.

use std::time::Duration;

use toolgate_domain::SecretToken;
use toolgate_store::{Grant, NewTokens, OAuthStore};

use super::{Harness, RESOURCE, create_account};
use toolgate_oauth::TokenError;

/// Stores an access token of `scope` for `resource` straight into the store.
async fn stored_token(h: &Harness, scope: &str, resource: &str) -> SecretToken {
    let token = SecretToken::generate().unwrap();
    let now = toolgate_store::now_millis();
    h.store
        .put_tokens(&NewTokens {
            family: SecretToken::generate().unwrap().expose()[..32].to_owned(),
            grant: Grant {
                account: h.account.id.clone(),
                client_id: "tgc_direct".to_owned(),
                scope: scope.to_owned(),
                resource: resource.to_owned(),
            },
            access: (token.hash(), now + 3_600_000),
            refresh: None,
        })
        .await
        .unwrap();
    token
}

#[tokio::test]
async fn tokens_of_the_wrong_shape_are_refused_without_a_look_up() {
    let h = Harness::new().await;
    assert_eq!(
        h.server.authenticate(None).await.unwrap_err(),
        TokenError::Missing
    );
    for malformed in [
        "",
        "Bearer abc",
        "svck_0000000000000000000000000000000000000000000000000000000000000000",
        &"A".repeat(64),
        &"a".repeat(63),
    ] {
        assert_eq!(
            h.server.authenticate(Some(malformed)).await.unwrap_err(),
            TokenError::Malformed,
            "{malformed}"
        );
    }
    assert_eq!(
        h.server
            .authenticate(Some(&"a".repeat(64)))
            .await
            .unwrap_err(),
        TokenError::Invalid
    );
}

#[tokio::test]
async fn a_token_for_another_resource_is_refused() {
    let h = Harness::new().await;
    let foreign = stored_token(&h, "mcp", "https://other.example/mcp").await;
    assert_eq!(
        h.server
            .authenticate(Some(foreign.expose()))
            .await
            .unwrap_err(),
        TokenError::WrongAudience
    );
    let ours = stored_token(&h, "mcp", RESOURCE).await;
    let (account, grant) = h.server.authenticate(Some(ours.expose())).await.unwrap();
    assert_eq!(account.email, h.account.email);
    assert_eq!(grant.client_id, "tgc_direct");
}

#[tokio::test]
async fn a_token_without_the_mcp_scope_is_refused() {
    let h = Harness::new().await;
    let stored = stored_token(&h, "offline_access", RESOURCE).await;
    assert_eq!(
        h.server
            .authenticate(Some(stored.expose()))
            .await
            .unwrap_err(),
        TokenError::InsufficientScope
    );
    let lookalike = stored_token(&h, "mcpx mcp:read", RESOURCE).await;
    assert_eq!(
        h.server
            .authenticate(Some(lookalike.expose()))
            .await
            .unwrap_err(),
        TokenError::InsufficientScope
    );
    // and one granted through the flow without mcp
    let (_, answer) = h.tokens(Some("offline_access")).await;
    assert_eq!(
        h.server
            .authenticate(Some(&answer.access_token))
            .await
            .unwrap_err(),
        TokenError::InsufficientScope
    );
}

#[tokio::test]
async fn an_expired_token_is_refused_even_from_the_cache() {
    let h = Harness::new().await;
    let (_, answer) = h.tokens(None).await;
    h.server
        .authenticate(Some(&answer.access_token))
        .await
        .unwrap();
    h.advance(Duration::from_secs(3600));
    assert_eq!(
        h.server
            .authenticate(Some(&answer.access_token))
            .await
            .unwrap_err(),
        TokenError::Invalid
    );
}

#[tokio::test]
async fn disconnecting_one_app_leaves_the_others() {
    let h = Harness::new().await;
    let (first_client, first) = h.tokens(None).await;
    let (_, second) = h.tokens(None).await;
    let someone = create_account(&h.store, "someone@example.com").await;
    let code = h
        .code_for(&someone.id, &first_client, None, super::VERIFIER)
        .await;
    let theirs = h
        .exchange(&first_client, &code, super::VERIFIER)
        .await
        .unwrap();
    for token in [&first, &second, &theirs] {
        h.server
            .authenticate(Some(&token.access_token))
            .await
            .unwrap();
    }
    h.server
        .revoke_client(&h.account.id, &first_client)
        .await
        .unwrap();
    assert_eq!(
        h.server
            .authenticate(Some(&first.access_token))
            .await
            .unwrap_err(),
        TokenError::Invalid
    );
    h.server
        .authenticate(Some(&second.access_token))
        .await
        .unwrap();
    let (account, _) = h
        .server
        .authenticate(Some(&theirs.access_token))
        .await
        .unwrap();
    assert_eq!(account.id, someone.id);
}
