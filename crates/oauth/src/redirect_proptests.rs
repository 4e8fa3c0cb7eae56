//! Property tests of redirect-URI matching: a presented URI matches a registered one exactly,
//! or (RFC 8252 §7.3) when both are `http` URIs of a loopback IP address that differ only in
//! their port, a real one (1 to 65535); no other string ever matches.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;

use super::redirect_matches;

/// The oracle, written apart from the code: `http://` + a loopback IP + an optional port of
/// 1 to 65535 + the rest (path and query) → the host and the rest.
fn loopback_parts(uri: &str) -> Option<(&str, &str)> {
    let rest = uri.strip_prefix("http://")?;
    let host = ["127.0.0.1", "[::1]"]
        .into_iter()
        .find(|host| rest.starts_with(host))?;
    let rest = &rest[host.len()..];
    let rest = match rest.strip_prefix(':') {
        Some(tail) => {
            let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
            let port: u32 = tail[..digits].parse().ok()?;
            if digits > 5 || !(1..=65535).contains(&port) {
                return None;
            }
            &tail[digits..]
        }
        None => rest,
    };
    (rest.is_empty() || rest.starts_with(['/', '?'])).then_some((host, rest))
}

fn expected(registered: &str, presented: &str) -> bool {
    registered == presented
        || matches!(
            (loopback_parts(registered), loopback_parts(presented)),
            (Some(a), Some(b)) if a == b
        )
}

/// Redirect URIs as clients register them.
fn registered() -> impl Strategy<Value = String> {
    prop_oneof![
        "https://[a-z]{1,8}\\.example(:[0-9]{1,5})?/[a-z/]{0,8}(\\?[a-z=&]{0,6})?",
        "http://(127\\.0\\.0\\.1|\\[::1\\]|localhost)(:[0-9]{1,5})?(/[a-z/]{0,8})?(\\?[a-z=]{0,4})?",
        "com\\.example\\.[a-z]{1,6}:/[a-z]{0,6}",
    ]
}

/// What an attacker presents: the registered URI changed in one place, its port swapped or
/// dropped, something appended, or any string at all.
fn presented(registered: String) -> impl Strategy<Value = (String, String)> {
    let len = registered.len();
    let edits = prop_oneof![
        Just(registered.clone()),
        (0..=len, "[\\x20-\\x7e]{1,3}").prop_map({
            let r = registered.clone();
            move |(at, text)| format!("{}{}{}", &r[..at], text, &r[at..])
        }),
        (0..len.max(1)).prop_map({
            let r = registered.clone();
            move |at| {
                let mut s = r.clone();
                if at < s.len() {
                    s.remove(at);
                }
                s
            }
        }),
        (0u32..100_000, any::<bool>()).prop_map({
            let r = registered.clone();
            move |(port, drop)| swap_port(&r, port, drop)
        }),
        "\\PC{0,40}",
    ];
    edits.prop_map(move |p| (registered.clone(), p))
}

/// `uri` with its authority's port replaced by `port` (or dropped).
fn swap_port(uri: &str, port: u32, drop: bool) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.to_owned();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let host = match authority.rfind(':') {
        Some(colon) if !authority[colon..].contains(']') => &authority[..colon],
        _ => authority,
    };
    if drop {
        format!("{scheme}://{host}{tail}")
    } else {
        format!("{scheme}://{host}:{port}{tail}")
    }
}

proptest! {
    #[test]
    fn only_the_registered_uri_or_a_loopback_port_change_matches(
        (registered, presented) in registered().prop_flat_map(presented),
    ) {
        prop_assert_eq!(
            redirect_matches(&registered, &presented),
            expected(&registered, &presented),
            "registered {}, presented {}", registered, presented
        );
    }

    #[test]
    fn nothing_outside_the_set_matches_any_of_it(
        set in prop::collection::vec(registered(), 1..4),
        presented in "\\PC{0,60}",
    ) {
        for registered in &set {
            if redirect_matches(registered, &presented) {
                prop_assert!(expected(registered, &presented), "{} ~ {}", registered, presented);
            }
        }
    }
}

/// The case the properties found: a "port" of any number of digits, or 0, was taken as a port.
#[test]
fn a_loopback_port_must_be_a_real_port() {
    let registered = "http://127.0.0.1:3000/callback";
    for presented in [
        "http://127.0.0.1:99999999/callback",
        "http://127.0.0.1:65536/callback",
        "http://127.0.0.1:0/callback",
        "http://[::1]:000000080/cb",
    ] {
        assert!(
            !redirect_matches(registered, presented)
                && !redirect_matches("http://[::1]/cb", presented),
            "{presented}"
        );
    }
    assert!(redirect_matches(
        registered,
        "http://127.0.0.1:65535/callback"
    ));
    assert!(redirect_matches(registered, "http://127.0.0.1:1/callback"));
}
