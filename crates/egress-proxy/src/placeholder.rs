//! Secrets added at the edge: a request's header values may hold `{{secret:NAME}}`, which the
//! proxy replaces by the secret's value when the request goes to a host the secret is bound to.
//! A placeholder for any other host (or a secret the run was not given) refuses the request
//! whole: nothing of it is sent. Only header values are read: not the request line, not bodies.

use toolgate_egress::{HostPattern, any_matches};
use toolgate_sandbox::EdgeSecret;
use zeroize::Zeroizing;

/// How a placeholder opens; it closes with `}}`.
const OPEN: &[u8] = b"{{secret:";
const CLOSE: &[u8] = b"}}";
/// Most placeholders one request head may hold.
pub(crate) const MAX_PLACEHOLDERS: usize = 64;
/// Most bytes the header values of one request may grow to once the values are in.
pub(crate) const MAX_SUBSTITUTED_BYTES: usize = 1024 * 1024;
/// Longest secret name (the vault's rule).
const MAX_NAME_CHARS: usize = 128;

/// A secret of the run, its host patterns parsed once.
pub(crate) struct BoundSecret {
    name: String,
    value: Zeroizing<String>,
    hosts: Vec<HostPattern>,
}

impl std::fmt::Debug for BoundSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundSecret")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

impl BoundSecret {
    /// The run's secrets as the proxy uses them; a pattern that does not parse binds nothing
    /// (the app refuses those when a secret is stored).
    pub(crate) fn from_grant(secrets: Vec<EdgeSecret>) -> Vec<Self> {
        secrets
            .into_iter()
            .map(|secret| Self {
                hosts: secret
                    .hosts
                    .iter()
                    .filter_map(|p| HostPattern::parse(p).ok())
                    .collect(),
                name: secret.name,
                value: Zeroizing::new(secret.value),
            })
            .collect()
    }
}

/// Why a request with placeholders is refused; the message is for the session's code and
/// never holds a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PlaceholderError {
    /// The secret exists for this run but is not bound to the host.
    #[error(
        "the secret {name} may not be sent to {host}: it is bound to {bound}; the request was \
         not sent"
    )]
    NotBound {
        name: String,
        host: String,
        bound: String,
    },
    /// No secret of that name is bound to any host.
    #[error(
        "no secret named {name} is bound to a host (store it with secret_set and `hosts` \
         naming {host}); the request was not sent"
    )]
    Unknown { name: String, host: String },
    /// A `{{secret:` without a well-formed name and `}}`.
    #[error(
        "the header {header} holds a malformed placeholder: write {{{{secret:NAME}}}} with \
         NAME letters, digits and _; the request was not sent"
    )]
    Malformed { header: String },
    /// Too many placeholders in one request.
    #[error("a request may hold at most {MAX_PLACEHOLDERS} secret placeholders; it was not sent")]
    TooMany,
    /// The values would make the head too large.
    #[error(
        "the request's headers would pass {MAX_SUBSTITUTED_BYTES} bytes with the secrets' \
         values in; it was not sent"
    )]
    TooLarge,
    /// The value cannot go in a header (a line break or another control character).
    #[error(
        "the secret {name}'s value holds a line break or another control character, which \
         cannot go in a header; the request was not sent"
    )]
    UnfitValue { name: String },
}

/// Replaces every `{{secret:NAME}}` in the header values of `headers` by NAME's value, when
/// `host` is one of NAME's hosts; refuses the whole request otherwise (the headers are then
/// left as they were). Work is linear in the headers' size and bounded by the limits above.
pub(crate) fn substitute(
    headers: &mut [(String, Vec<u8>)],
    host: &str,
    secrets: &[BoundSecret],
) -> Result<usize, PlaceholderError> {
    let mut rewritten: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut count = 0usize;
    let mut total = 0usize;
    for (at, (name, value)) in headers.iter().enumerate() {
        total += value.len();
        if find(value, OPEN).is_none() {
            continue;
        }
        let mut out = Vec::with_capacity(value.len());
        let mut rest = value.as_slice();
        while let Some(start) = find(rest, OPEN) {
            count += 1;
            if count > MAX_PLACEHOLDERS {
                return Err(PlaceholderError::TooMany);
            }
            out.extend_from_slice(&rest[..start]);
            let after = &rest[start + OPEN.len()..];
            let malformed = || PlaceholderError::Malformed {
                header: shown_header(name),
            };
            let end = find(after, CLOSE).ok_or_else(malformed)?;
            let wanted = std::str::from_utf8(&after[..end]).map_err(|_| malformed())?;
            if !is_name(wanted) {
                return Err(malformed());
            }
            let secret = value_for(wanted, host, secrets)?;
            total += secret.len();
            if total > MAX_SUBSTITUTED_BYTES {
                return Err(PlaceholderError::TooLarge);
            }
            out.extend_from_slice(secret.as_bytes());
            rest = &after[end + CLOSE.len()..];
        }
        out.extend_from_slice(rest);
        rewritten.push((at, out));
    }
    for (at, value) in rewritten {
        headers[at].1 = value;
    }
    Ok(count)
}

/// The value of `name` for a request to `host`.
fn value_for<'a>(
    name: &str,
    host: &str,
    secrets: &'a [BoundSecret],
) -> Result<&'a str, PlaceholderError> {
    let shown_host: String = host.chars().take(253).collect();
    let Some(secret) = secrets.iter().find(|s| s.name == name) else {
        return Err(PlaceholderError::Unknown {
            name: name.to_owned(),
            host: shown_host,
        });
    };
    if !any_matches(&secret.hosts, host) {
        let bound: Vec<String> = secret.hosts.iter().map(ToString::to_string).collect();
        return Err(PlaceholderError::NotBound {
            name: name.to_owned(),
            host: shown_host,
            bound: if bound.is_empty() {
                "no host".to_owned()
            } else {
                bound.join(", ")
            },
        });
    }
    // a value that would split the header (request smuggling) or break it is refused here,
    // whatever the vault let in
    if secret
        .value
        .bytes()
        .any(|b| b.is_ascii_control() && b != b'\t')
    {
        return Err(PlaceholderError::UnfitValue {
            name: name.to_owned(),
        });
    }
    Ok(secret.value.as_str())
}

/// The vault's name rule: letters, digits and `_`, not starting with a digit.
fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_NAME_CHARS
        && !text.starts_with(|c: char| c.is_ascii_digit())
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn shown_header(name: &str) -> String {
    name.chars().take(64).collect()
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
#[path = "placeholder_tests.rs"]
mod tests;
