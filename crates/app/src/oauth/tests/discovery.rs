//! Discovery documents, the challenge, and the errors' wire forms.

use serde_json::json;

use super::{Harness, ISSUER, RESOURCE};
use toolgate_oauth::{OAuthError, TokenError};

#[tokio::test]
async fn metadata_lists_the_endpoints_and_only_s256() {
    let h = Harness::new().await;
    let metadata = h.server.metadata();
    assert_eq!(h.server.issuer(), ISSUER);
    assert_eq!(metadata["issuer"], ISSUER);
    assert_eq!(
        metadata["authorization_endpoint"],
        "https://tg.example/dashboard/oauth/authorize"
    );
    assert_eq!(metadata["token_endpoint"], "https://tg.example/oauth/token");
    assert_eq!(
        metadata["registration_endpoint"],
        "https://tg.example/oauth/register"
    );
    assert_eq!(
        metadata["revocation_endpoint"],
        "https://tg.example/oauth/revoke"
    );
    assert_eq!(metadata["response_types_supported"], json!(["code"]));
    assert_eq!(
        metadata["grant_types_supported"],
        json!(["authorization_code", "refresh_token"])
    );
    assert_eq!(
        metadata["code_challenge_methods_supported"],
        json!(["S256"])
    );
    assert_eq!(
        metadata["token_endpoint_auth_methods_supported"],
        json!(["none"])
    );
    assert_eq!(
        metadata["revocation_endpoint_auth_methods_supported"],
        json!(["none"])
    );
    assert_eq!(
        metadata["scopes_supported"],
        json!(["mcp", "offline_access"])
    );
    assert_eq!(
        metadata["authorization_response_iss_parameter_supported"],
        true
    );
    assert_eq!(metadata["client_id_metadata_document_supported"], true);
}

#[tokio::test]
async fn resource_metadata_names_mcp_and_its_issuer() {
    let h = Harness::new().await;
    let metadata = h.server.resource_metadata();
    assert_eq!(h.server.resource(), RESOURCE);
    assert_eq!(metadata["resource"], RESOURCE);
    assert_eq!(metadata["authorization_servers"], json!([ISSUER]));
    assert_eq!(metadata["scopes_supported"], json!(["mcp"]));
    assert_eq!(metadata["bearer_methods_supported"], json!(["header"]));
    assert!(metadata["resource_name"].is_string());
}

#[tokio::test]
async fn the_challenge_points_at_the_resource_metadata() {
    let h = Harness::new().await;
    let plain = "Bearer resource_metadata=\"https://tg.example/.well-known/oauth-protected-resource/mcp\", scope=\"mcp\"";
    assert_eq!(h.server.challenge(None), plain);
    assert_eq!(
        h.server.challenge(Some("invalid_token")),
        format!("{plain}, error=\"invalid_token\"")
    );
    // nothing but a code word is written into the header
    assert_eq!(h.server.challenge(Some("x\", evil=\"1")), plain);
    assert_eq!(h.server.challenge(Some("")), plain);
}

#[test]
fn oauth_errors_print_their_wire_codes() {
    let d = || "why".to_owned();
    let cases = [
        (OAuthError::InvalidRequest(d()), "invalid_request", 400),
        (OAuthError::InvalidClient(d()), "invalid_client", 401),
        (OAuthError::InvalidGrant(d()), "invalid_grant", 400),
        (
            OAuthError::UnauthorizedClient(d()),
            "unauthorized_client",
            400,
        ),
        (
            OAuthError::UnsupportedGrantType(d()),
            "unsupported_grant_type",
            400,
        ),
        (OAuthError::InvalidScope(d()), "invalid_scope", 400),
        (OAuthError::InvalidTarget(d()), "invalid_target", 400),
        (
            OAuthError::InvalidRedirectUri(d()),
            "invalid_redirect_uri",
            400,
        ),
        (
            OAuthError::InvalidClientMetadata(d()),
            "invalid_client_metadata",
            400,
        ),
        (OAuthError::ServerError(d()), "server_error", 500),
        (
            OAuthError::TemporarilyUnavailable(d()),
            "temporarily_unavailable",
            503,
        ),
    ];
    for (error, code, status) in cases {
        assert_eq!(error.code(), code);
        assert_eq!(error.to_string(), format!("{code}: why"));
        assert_eq!(error.description(), "why");
        assert_eq!(
            error.body(),
            json!({ "error": code, "error_description": "why" })
        );
        assert_eq!(error.http_status(), status, "{code}");
    }
}

#[test]
fn token_errors_choose_the_challenge_error() {
    assert_eq!(TokenError::Missing.challenge_error(), None);
    assert_eq!(TokenError::Unavailable.challenge_error(), None);
    assert_eq!(
        TokenError::Malformed.challenge_error(),
        Some("invalid_token")
    );
    assert_eq!(TokenError::Invalid.challenge_error(), Some("invalid_token"));
    assert_eq!(
        TokenError::WrongAudience.challenge_error(),
        Some("invalid_token")
    );
    assert_eq!(
        TokenError::InsufficientScope.challenge_error(),
        Some("insufficient_scope")
    );
    for error in [
        TokenError::Missing,
        TokenError::Malformed,
        TokenError::Invalid,
        TokenError::WrongAudience,
        TokenError::InsufficientScope,
        TokenError::Unavailable,
    ] {
        assert!(error.to_string().len() > 40, "{error:?} says too little");
    }
}
