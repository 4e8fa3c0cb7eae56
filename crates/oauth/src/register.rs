//! Dynamic Client Registration (RFC 7591), and the checks of client metadata that Client ID
//! Metadata Documents share with it: redirect URIs and names.

use serde_json::{Map, Value, json};
use toolgate_store::OAuthClient;

use crate::{AuthServer, OAuthError, error, fresh_token};

/// Largest registration request accepted.
pub(crate) const MAX_REGISTRATION_BYTES: usize = 16 * 1024;
/// Most redirect URIs one client may have.
const MAX_REDIRECT_URIS: usize = 10;
/// Longest redirect URI (or metadata document URL) accepted.
pub(crate) const MAX_URI_CHARS: usize = 2000;
/// Longest client name accepted.
const MAX_NAME_CHARS: usize = 200;
/// Schemes that run or show content in the browser itself instead of reaching an app.
const FORBIDDEN_SCHEMES: [&str; 6] = ["javascript", "data", "file", "vbscript", "about", "blob"];
/// The hosts an `http` redirect URI may name: the user's own machine only.
const LOOPBACK_HOSTS: [&str; 3] = ["127.0.0.1", "[::1]", "localhost"];
/// The grant types a client may register.
const GRANT_TYPES: [&str; 2] = ["authorization_code", "refresh_token"];
/// The response types a client may register.
const RESPONSE_TYPES: [&str; 1] = ["code"];

impl AuthServer {
    /// Registers a client (RFC 7591 §3): `body` is the JSON request; the answer is the client
    /// information response (RFC 7591 §3.2.1, status 201). Every client is public: it proves
    /// itself with PKCE, holds no secret, and so is registered with `token_endpoint_auth_method`
    /// `none` whatever method it asked for.
    pub async fn register(&self, body: &[u8]) -> Result<Value, OAuthError> {
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
        let token = fresh_token()?;
        let client_id = format!("tgc_{}", token.expose().get(..32).unwrap_or_default());
        let now = self.now();
        self.store
            .put_client(&OAuthClient {
                client_id: client_id.clone(),
                name: name.clone(),
                redirect_uris: redirect_uris.clone(),
                updated_at: now,
            })
            .await
            .map_err(error::storage)?;
        tracing::info!(client_id = %client_id, "oauth: client registered");
        Ok(json!({
            "client_id": client_id,
            "client_id_issued_at": now / 1000,
            "client_name": name,
            "redirect_uris": redirect_uris,
            "grant_types": grant_types,
            "response_types": response_types,
            "token_endpoint_auth_method": "none",
        }))
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

/// The parts of an absolute URI that the checks look at.
#[derive(Debug)]
pub(crate) struct UriParts<'a> {
    /// The scheme, lower-cased.
    pub(crate) scheme: String,
    /// The host of its authority (`//host:port`), if it has one; IPv6 hosts keep their brackets.
    pub(crate) host: Option<&'a str>,
    /// The path, without query.
    pub(crate) path: &'a str,
}

/// Splits an absolute URI without a fragment, refusing characters a URI cannot hold, user
/// information (`user@host`, which disguises the host) and malformed hosts or ports.
pub(crate) fn parse_uri(raw: &str) -> Result<UriParts<'_>, String> {
    if raw.is_empty() || raw.len() > MAX_URI_CHARS {
        return Err(format!("a URI must have 1 to {MAX_URI_CHARS} characters"));
    }
    if raw
        .bytes()
        .any(|b| !(0x21..=0x7e).contains(&b) || b"\"<>\\^`{|}".contains(&b))
    {
        return Err("a URI must not contain spaces, control or non-ASCII characters".to_owned());
    }
    if raw.contains('#') {
        return Err("a URI must not contain a fragment (#)".to_owned());
    }
    let (scheme, rest) = raw
        .split_once(':')
        .ok_or("a URI must be absolute (scheme:…)")?;
    let scheme_ok = scheme
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    if !scheme_ok || rest.is_empty() {
        return Err("a URI must be absolute (scheme:…)".to_owned());
    }
    let scheme = scheme.to_ascii_lowercase();
    let (authority, after) = match rest.strip_prefix("//") {
        Some(tail) => {
            let end = tail.find(['/', '?']).unwrap_or(tail.len());
            (Some(&tail[..end]), &tail[end..])
        }
        None => (None, rest),
    };
    let path = after.split('?').next().unwrap_or_default();
    let host = authority.map(split_authority).transpose()?;
    Ok(UriParts { scheme, host, path })
}

/// `host[:port]` → the host, once both are checked.
fn split_authority(authority: &str) -> Result<&str, String> {
    if authority.contains('@') {
        return Err("a URI must not contain user information (user@host)".to_owned());
    }
    let (host, port) = if authority.starts_with('[') {
        let end = authority.find(']').ok_or("malformed IPv6 host")?;
        let host = &authority[..=end];
        let inner = &host[1..host.len() - 1];
        if inner.is_empty()
            || !inner
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return Err("malformed IPv6 host".to_owned());
        }
        match &authority[end + 1..] {
            "" => (host, None),
            tail => (host, Some(tail.strip_prefix(':').ok_or("malformed port")?)),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let host_ok = host.starts_with('[')
        || (!host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'));
    if !host_ok {
        return Err("a URI must name a host of letters, digits, dots and hyphens".to_owned());
    }
    if let Some(port) = port
        && (port.is_empty()
            || port.len() > 5
            || !port.bytes().all(|b| b.is_ascii_digit())
            || port.parse::<u32>().map_or(true, |p| p > 65535))
    {
        return Err("malformed port".to_owned());
    }
    Ok(host)
}

/// Whether a redirect URI may receive codes: https anywhere, http on this machine only, or an
/// app's own scheme (not one that runs or shows content in the browser itself).
pub(crate) fn check_redirect_uri(raw: &str) -> Result<(), String> {
    let uri = parse_uri(raw).map_err(|why| format!("redirect URI refused: {why}"))?;
    match uri.scheme.as_str() {
        "https" => match uri.host {
            Some(_) => Ok(()),
            None => Err("redirect URI refused: an https URI needs a host".to_owned()),
        },
        "http" => match uri.host {
            Some(host) if LOOPBACK_HOSTS.contains(&host.to_ascii_lowercase().as_str()) => Ok(()),
            _ => Err(
                "redirect URI refused: http is allowed only on loopback hosts (127.0.0.1, [::1], \
                 localhost); use https"
                    .to_owned(),
            ),
        },
        scheme if FORBIDDEN_SCHEMES.contains(&scheme) => Err(format!(
            "redirect URI refused: the {scheme}: scheme cannot receive an authorization code"
        )),
        _ => Ok(()),
    }
}
