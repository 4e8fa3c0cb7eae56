//! Web origins (RFC 6454 §4): the scheme, host and port a browser names in `Origin`, and the
//! origin of a configured URL. One parser for every check of an origin (the MCP endpoints'
//! allow-list, the dashboard's same-origin forms), so that two checks never disagree on what
//! an origin is; each check keeps its own policy.

use std::fmt;

/// An origin, normalised: scheme and host in lower case, the port always written (80 for
/// `http`, 443 for `https` when absent), so that equal origins are equal strings.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin(String);

impl Origin {
    /// The origin of `raw`, an `Origin` header's value or a URL (its path, query and fragment
    /// ignored). `None` for what names no tuple origin: `null` (an opaque origin), no `://`, a
    /// malformed scheme, user information, an empty or malformed host, a port that is not
    /// 0 to 65535, or a scheme other than `http` and `https` without a port.
    pub fn parse(raw: &str) -> Option<Self> {
        let (scheme, rest) = raw.trim().split_once("://")?;
        let mut scheme_chars = scheme.chars();
        let scheme_ok = scheme_chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && scheme_chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
        if !scheme_ok {
            return None;
        }
        let scheme = scheme.to_ascii_lowercase();
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if authority.contains('@') {
            return None;
        }
        let (host, port) = split_host_port(authority)?;
        let port = match port {
            Some(port) => port,
            None => match scheme.as_str() {
                "https" => 443,
                "http" => 80,
                _ => return None,
            },
        };
        Some(Self(format!(
            "{scheme}://{}:{port}",
            host.to_ascii_lowercase()
        )))
    }

    /// `scheme://host:port`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The host and the port, if written, of an authority without user information.
fn split_host_port(authority: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if authority.starts_with('[') {
        // an IPv6 literal: its colons are not the port's
        let end = authority.find(']')?;
        let (host, tail) = authority.split_at(end + 1);
        let port = match tail {
            "" => None,
            tail => Some(tail.strip_prefix(':')?),
        };
        let inside = &host[1..host.len() - 1];
        let literal = !inside.is_empty()
            && inside
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
        literal.then_some((host, port))?
    } else {
        let (host, port) = match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        };
        let name = !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._~%".contains(c));
        name.then_some((host, port))?
    };
    let port = match port {
        // an empty port is the scheme's default (RFC 3986 §3.2.3)
        None | Some("") => None,
        Some(digits) if digits.bytes().all(|b| b.is_ascii_digit()) => Some(digits.parse().ok()?),
        Some(_) => return None,
    };
    Some((host, port))
}

#[cfg(test)]
#[path = "origin_tests.rs"]
mod tests;
