//! Dynamic Client Registration requests (RFC 7591), and the checks of client metadata that
//! Client ID Metadata Documents share with them: redirect URIs and names.

use serde_json::{Map, Value, json};

use crate::OAuthError;
use crate::uri::{check_redirect_uri, parse_uri};

/// Largest registration request accepted.
pub const MAX_REGISTRATION_BYTES: usize = 16 * 1024;
/// Most redirect URIs one client may have.
const MAX_REDIRECT_URIS: usize = 10;
/// Longest client name accepted.
const MAX_NAME_CHARS: usize = 200;
/// The grant types a client may register.
const GRANT_TYPES: [&str; 2] = ["authorization_code", "refresh_token"];
/// The response types a client may register.
const RESPONSE_TYPES: [&str; 1] = ["code"];

/// A registration request (RFC 7591 §3), read and checked. Every client is public: it proves
/// itself with PKCE, holds no secret, and so is registered with `token_endpoint_auth_method`
/// `none` whatever method it asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The client's name, or its first redirect URI's host (or app scheme) when it gave none.
    pub name: String,
    /// 1 to 10 acceptable redirect URIs, duplicates dropped.
    pub redirect_uris: Vec<String>,
    /// The grant types asked for (all offered when none).
    pub grant_types: Vec<String>,
    /// The response types asked for (`code`).
    pub response_types: Vec<String>,
}

impl Registration {
    /// Reads the JSON request `body`; an unacceptable one is `invalid_redirect_uri` or
    /// `invalid_client_metadata`, saying why.
    pub fn parse(body: &[u8]) -> Result<Self, OAuthError> {
        if body.len() > MAX_REGISTRATION_BYTES {
            return Err(metadata_error(format!(
                "the registration request is larger than {} KiB",
                MAX_REGISTRATION_BYTES / 1024
            )));
        }
        let fields = match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(fields)) => fields,
            _ => {
                return Err(metadata_error(
                    "the registration request must be a JSON object".to_owned(),
                ));
            }
        };
        let redirect_uris =
            redirect_uris(fields.get("redirect_uris")).map_err(OAuthError::InvalidRedirectUri)?;
        let grant_types = listed(&fields, "grant_types", &GRANT_TYPES)?;
        let response_types = listed(&fields, "response_types", &RESPONSE_TYPES)?;
        // the first redirect URI's host, or an app scheme's name (`com.example.app:/callback`)
        let fallback = redirect_uris
            .first()
            .and_then(|uri| parse_uri(uri).ok())
            .map_or_else(
                || "unnamed client".to_owned(),
                |uri| uri.host.map_or(uri.scheme, str::to_owned),
            );
        let name = client_name(fields.get("client_name"), &fallback)
            .map_err(OAuthError::InvalidClientMetadata)?;
        Ok(Self {
            name,
            redirect_uris,
            grant_types,
            response_types,
        })
    }

    /// The client information response (RFC 7591 §3.2.1, status 201) of the client registered
    /// as `client_id` at `issued_at` (Unix seconds).
    pub fn answer(&self, client_id: &str, issued_at: i64) -> Value {
        json!({
            "client_id": client_id,
            "client_id_issued_at": issued_at,
            "client_name": self.name,
            "redirect_uris": self.redirect_uris,
            "grant_types": self.grant_types,
            "response_types": self.response_types,
            "token_endpoint_auth_method": "none",
        })
    }
}

/// `invalid_client_metadata` with `description`.
fn metadata_error(description: String) -> OAuthError {
    OAuthError::InvalidClientMetadata(description)
}

/// A metadata list that must be a subset of `allowed`; absent or empty means all of `allowed`.
fn listed(
    fields: &Map<String, Value>,
    field: &str,
    allowed: &[&str],
) -> Result<Vec<String>, OAuthError> {
    let Some(value) = fields.get(field) else {
        return Ok(allowed.iter().map(|item| (*item).to_owned()).collect());
    };
    let items = value
        .as_array()
        .ok_or_else(|| metadata_error(format!("{field} must be an array of strings")))?;
    let mut chosen: Vec<String> = Vec::new();
    for item in items {
        let item = item
            .as_str()
            .ok_or_else(|| metadata_error(format!("{field} must be an array of strings")))?;
        if !allowed.contains(&item) {
            return Err(metadata_error(format!(
                "{field} may only contain {}",
                allowed.join(", ")
            )));
        }
        if !chosen.iter().any(|known| known == item) {
            chosen.push(item.to_owned());
        }
    }
    if chosen.is_empty() {
        chosen = allowed.iter().map(|item| (*item).to_owned()).collect();
    }
    Ok(chosen)
}

/// Reads and checks a client's `redirect_uris`: 1 to 10 acceptable URIs, duplicates dropped.
pub(crate) fn redirect_uris(value: Option<&Value>) -> Result<Vec<String>, String> {
    let items = value
        .ok_or("redirect_uris is required")?
        .as_array()
        .ok_or("redirect_uris must be an array of strings")?;
    if items.is_empty() || items.len() > MAX_REDIRECT_URIS {
        return Err(format!(
            "redirect_uris must hold 1 to {MAX_REDIRECT_URIS} URIs"
        ));
    }
    let mut uris: Vec<String> = Vec::new();
    for item in items {
        let uri = item
            .as_str()
            .ok_or("redirect_uris must be an array of strings")?;
        check_redirect_uri(uri)?;
        if !uris.iter().any(|known| known == uri) {
            uris.push(uri.to_owned());
        }
    }
    Ok(uris)
}

/// Reads `client_name` (at most 200 characters, no control characters); absent or blank:
/// `fallback`.
pub(crate) fn client_name(value: Option<&Value>, fallback: &str) -> Result<String, String> {
    let given = match value {
        None | Some(Value::Null) => "",
        Some(Value::String(name)) => name.trim(),
        Some(_) => return Err("client_name must be a string".to_owned()),
    };
    if given.chars().count() > MAX_NAME_CHARS {
        return Err(format!(
            "client_name must have at most {MAX_NAME_CHARS} characters"
        ));
    }
    if given.chars().any(char::is_control) {
        return Err("client_name must not contain control characters".to_owned());
    }
    Ok(if given.is_empty() { fallback } else { given }.to_owned())
}
