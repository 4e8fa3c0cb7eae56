//! URIs as the protocol checks them: a client's redirect URIs (what may receive a code, and
//! when a presented one is the registered one) and the query of a redirect back to a client.

/// Longest redirect URI (or metadata document URL) accepted.
pub const MAX_URI_CHARS: usize = 2000;
/// Schemes that run or show content in the browser itself instead of reaching an app.
const FORBIDDEN_SCHEMES: [&str; 6] = ["javascript", "data", "file", "vbscript", "about", "blob"];
/// The hosts an `http` redirect URI may name: the user's own machine only.
const LOOPBACK_HOSTS: [&str; 3] = ["127.0.0.1", "[::1]", "localhost"];

/// The parts of an absolute URI that the checks look at.
#[derive(Debug)]
pub struct UriParts<'a> {
    /// The scheme, lower-cased.
    pub scheme: String,
    /// The host of its authority (`//host:port`), if it has one; IPv6 hosts keep their brackets.
    pub host: Option<&'a str>,
    /// The path, without query.
    pub path: &'a str,
}

/// Splits an absolute URI without a fragment, refusing characters a URI cannot hold, user
/// information (`user@host`, which disguises the host) and malformed hosts or ports.
pub fn parse_uri(raw: &str) -> Result<UriParts<'_>, String> {
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
pub fn check_redirect_uri(raw: &str) -> Result<(), String> {
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

/// Whether a presented redirect URI is the registered one: exactly, or (RFC 8252 §7.3) a
/// loopback IP address's `http` URI that differs only in its port (1 to 65535), which a native
/// app picks when it starts.
pub fn redirect_matches(registered: &str, presented: &str) -> bool {
    if registered == presented {
        return true;
    }
    let without_port = |uri: &str| -> Option<(String, String)> {
        let rest = uri.strip_prefix("http://")?;
        let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        let host = if authority.starts_with("[::1]") {
            "[::1]"
        } else {
            authority.split(':').next()?
        };
        if host != "127.0.0.1" && host != "[::1]" {
            return None;
        }
        // a real port (1 to 65535, at most 5 digits), not any run of digits
        let port = &authority[host.len()..];
        if !(port.is_empty()
            || port.strip_prefix(':').is_some_and(|p| {
                p.len() <= 5
                    && p.bytes().all(|b| b.is_ascii_digit())
                    && p.parse::<u16>().is_ok_and(|n| n > 0)
            }))
        {
            return None;
        }
        Some((host.to_owned(), path.to_owned()))
    };
    matches!((without_port(registered), without_port(presented)), (Some(a), Some(b)) if a == b)
}

/// `uri` with `pairs` appended to its query, percent-encoded.
pub(crate) fn with_query(uri: &str, pairs: &[(&str, &str)]) -> String {
    let mut url = uri.to_owned();
    if !url.contains('?') {
        url.push('?');
    } else if !url.ends_with('?') && !url.ends_with('&') {
        url.push('&');
    }
    let query: Vec<String> = pairs
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect();
    url.push_str(&query.join("&"));
    url
}

/// Percent-encodes everything but the unreserved characters (RFC 3986 §2.3).
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod loopback_tests {
    use super::redirect_matches;

    #[test]
    fn loopback_redirects_may_change_only_their_port() {
        let registered = "http://127.0.0.1:3000/callback";
        assert!(redirect_matches(
            registered,
            "http://127.0.0.1:3000/callback"
        ));
        assert!(redirect_matches(
            registered,
            "http://127.0.0.1:51234/callback"
        ));
        assert!(redirect_matches("http://[::1]/cb", "http://[::1]:8080/cb"));
        for other in [
            "http://127.0.0.1:51234/callback2",
            "http://127.0.0.1:51234/callback?x=1",
            "http://127.0.0.2:3000/callback",
            "http://localhost:3000/callback",
            "https://127.0.0.1:3000/callback",
            "http://127.0.0.1:3000@evil.example/callback",
            "http://127.0.0.1:x/callback",
        ] {
            assert!(!redirect_matches(registered, other), "{other}");
        }
        assert!(!redirect_matches(
            "https://app.example/cb",
            "https://app.example:444/cb"
        ));
    }
}

#[cfg(test)]
#[path = "redirect_proptests.rs"]
mod redirect_proptests;
