//! The OAuth endpoints around `/mcp`: discovery (RFC 9728 protected resource metadata, RFC 8414
//! authorization server metadata and its OpenID discovery twin), Dynamic Client Registration
//! (RFC 7591), the token endpoint and revocation (RFC 7009). The authorization endpoint is a page
//! of the dashboard (the owner's session cookie reaches it there). The use cases are the app's
//! (`App::oauth`), the protocol's values `toolgate-oauth`'s; this module only reads requests and
//! writes their answers.

use axum::body::to_bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use toolgate_oauth::OAuthError;

use crate::Shared;

/// A registration or token request is a few hundred bytes; this is generous.
const MAX_FORM_BYTES: usize = 16 * 1024;

/// `GET /.well-known/oauth-protected-resource[/mcp]`.
pub async fn resource_metadata(State(state): State<Shared>) -> Response {
    public_json(StatusCode::OK, state.app.oauth().resource_metadata())
}

/// `GET /.well-known/oauth-authorization-server` and `/.well-known/openid-configuration`.
pub async fn server_metadata(State(state): State<Shared>) -> Response {
    public_json(StatusCode::OK, state.app.oauth().metadata())
}

/// `POST /oauth/register`: Dynamic Client Registration, limited per client address by the app.
pub async fn register(State(state): State<Shared>, request: Request) -> Response {
    let client = crate::client_ip(&request);
    let Ok(body) = to_bytes(request.into_body(), MAX_FORM_BYTES).await else {
        return oauth_error(&too_large());
    };
    match state.app.oauth().register(client, &body).await {
        Ok(client) => public_json(StatusCode::CREATED, client),
        Err(err) => oauth_error(&err),
    }
}

/// `POST /oauth/token`: codes and refresh tokens for tokens.
pub async fn token(State(state): State<Shared>, request: Request) -> Response {
    let form = match read_form(request).await {
        Ok(form) => form,
        Err(err) => return oauth_error(&err),
    };
    match state.app.oauth().token(&form).await {
        Ok(answer) => match serde_json::to_value(&answer) {
            Ok(body) => public_json(StatusCode::OK, body),
            Err(_) => oauth_error(&OAuthError::ServerError("cannot write the answer".into())),
        },
        Err(err) => oauth_error(&err),
    }
}

/// `POST /oauth/revoke`: 200 whether or not the token was known (RFC 7009 §2.2).
pub async fn revoke(State(state): State<Shared>, request: Request) -> Response {
    let form = match read_form(request).await {
        Ok(form) => form,
        Err(err) => return oauth_error(&err),
    };
    match state.app.oauth().revoke(&form).await {
        Ok(()) => public_json(StatusCode::OK, serde_json::json!({})),
        Err(err) => oauth_error(&err),
    }
}

async fn read_form(request: Request) -> Result<Vec<(String, String)>, OAuthError> {
    let form = is_form(request.headers());
    let basic_client = basic_client_id(request.headers());
    let body = to_bytes(request.into_body(), MAX_FORM_BYTES)
        .await
        .map_err(|_| too_large())?;
    if !form {
        return Err(OAuthError::InvalidRequest(
            "send the parameters as application/x-www-form-urlencoded".to_owned(),
        ));
    }
    let mut pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(&body)
        .map_err(|_| OAuthError::InvalidRequest("the form could not be read".to_owned()))?;
    // a client authenticating with HTTP Basic names itself there (its secret, if any, is not
    // one we issued: every client is public and proves itself with PKCE)
    if let Some(client_id) = basic_client
        && !pairs.iter().any(|(name, _)| name == "client_id")
    {
        pairs.push(("client_id".to_owned(), client_id));
    }
    Ok(pairs)
}

/// The client id of an `Authorization: Basic` header (RFC 6749 §2.3.1: form-encoded, then base64).
fn basic_client_id(headers: &HeaderMap) -> Option<String> {
    use base64::Engine;
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let id = text.split(':').next()?;
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(&format!("id={id}")).ok()?;
    pairs
        .into_iter()
        .next()
        .map(|(_, id)| id)
        .filter(|id| !id.is_empty())
}

/// `OPTIONS` on the discovery, registration, token and revocation endpoints: browser-based
/// clients ask before a JSON or form POST from another origin.
pub async fn preflight() -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, OPTIONS"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("content-type, authorization, mcp-protocol-version"),
    );
    headers.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("86400"),
    );
    response
}

fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"))
}

fn too_large() -> OAuthError {
    OAuthError::InvalidRequest(format!(
        "the request body is larger than {MAX_FORM_BYTES} bytes"
    ))
}

fn oauth_error(error: &OAuthError) -> Response {
    let status = StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    public_json(status, error.body())
}

/// JSON that browsers' apps on other origins may read (metadata and token answers hold nothing
/// a cookie would unlock), never cached (RFC 6749 §5.1).
fn public_json(status: StatusCode, body: Value) -> Response {
    let mut response = (status, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    response
}
