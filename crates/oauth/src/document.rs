//! Client ID Metadata Documents: a `client_id` that is an https URL names a JSON document,
//! served at that very URL, holding the client's metadata. This is what may be such an address
//! and what such a document must say; fetching and keeping it is the application's.

use std::time::Duration;

use serde_json::Value;

use crate::register::{client_name, redirect_uris};
use crate::uri::{MAX_URI_CHARS, parse_uri};

/// Largest metadata document read.
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// How long a fetched metadata document is reused before it is fetched again.
pub const DOCUMENT_TTL: Duration = Duration::from_secs(24 * 3600);

/// What a metadata document says of its client, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentClient {
    /// Its name, or the document's host when it gives none.
    pub name: String,
    /// Its acceptable redirect URIs, duplicates dropped.
    pub redirect_uris: Vec<String>,
}

/// Whether `url` may be a metadata document's address: https, a host, a path other than `/`,
/// no fragment, user information or dot segments.
pub fn check_url(url: &str) -> Result<(), String> {
    let refused = |why: &str| {
        format!(
            "a URL client_id must be an https URL with a path, at most {MAX_URI_CHARS} \
             characters, serving the client's metadata document: {why}"
        )
    };
    let parts = parse_uri(url).map_err(|why| refused(&why))?;
    if parts.scheme != "https" || parts.host.is_none() {
        return Err(refused("it needs https and a host"));
    }
    if parts.path.len() < 2 {
        return Err(refused("it has no path"));
    }
    if parts
        .path
        .split('/')
        .any(|segment| segment == "." || segment == "..")
    {
        return Err(refused("it has a . or .. segment"));
    }
    Ok(())
}

/// Reads the document served at `url` (its text, as fetched): a JSON object naming `url` as its
/// `client_id`, with acceptable redirect URIs and name. The error completes "the client's
/// metadata document at {url} …".
pub fn read(url: &str, text: &str) -> Result<DocumentClient, String> {
    let Ok(Value::Object(document)) = serde_json::from_str::<Value>(text) else {
        return Err("is not a JSON object".to_owned());
    };
    if document.get("client_id").and_then(Value::as_str) != Some(url) {
        return Err("names another client_id than its own URL: the two must be equal".to_owned());
    }
    let redirect_uris = redirect_uris(document.get("redirect_uris"))
        .map_err(|why| format!("is not acceptable: {why}"))?;
    let host = parse_uri(url)
        .ok()
        .and_then(|parts| parts.host)
        .unwrap_or("unnamed client");
    let name = client_name(document.get("client_name"), host)
        .map_err(|why| format!("is not acceptable: {why}"))?;
    Ok(DocumentClient {
        name,
        redirect_uris,
    })
}
