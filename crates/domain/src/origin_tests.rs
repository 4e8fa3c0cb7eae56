//! What an origin is, for every check of one.
#![allow(clippy::unwrap_used)]

use super::Origin;

fn parsed(raw: &str) -> Option<String> {
    Origin::parse(raw).map(|o| o.as_str().to_owned())
}

#[test]
fn origins_are_normalised_with_the_port_written() {
    for (raw, origin) in [
        ("https://Tools.Example.com", "https://tools.example.com:443"),
        (
            "https://tools.example.com:443",
            "https://tools.example.com:443",
        ),
        ("HTTP://localhost:6274", "http://localhost:6274"),
        ("http://127.0.0.1", "http://127.0.0.1:80"),
        ("http://127.0.0.1:", "http://127.0.0.1:80"),
        (
            "https://tools.example/base/path?q=1#f",
            "https://tools.example:443",
        ),
        ("  https://tools.example  ", "https://tools.example:443"),
        ("http://[::1]:8080", "http://[::1]:8080"),
        ("https://[2001:DB8::1]", "https://[2001:db8::1]:443"),
        ("chrome-extension://abc:1", "chrome-extension://abc:1"),
    ] {
        assert_eq!(parsed(raw).as_deref(), Some(origin), "{raw}");
    }
}

#[test]
fn what_names_no_tuple_origin_is_none() {
    for raw in [
        "null",
        "",
        "tools.example",
        "https://",
        "https:///path",
        "https://user@tools.example",
        "https://tools.example:99999",
        "https://tools.example:8o",
        "https://tools example",
        "https://[::1",
        "https://[]:80",
        "https://[::1]x",
        "1https://tools.example",
        "ht tp://tools.example",
        "chrome-extension://abc",
    ] {
        assert_eq!(parsed(raw), None, "{raw}");
    }
}

#[test]
fn equal_origins_compare_equal() {
    let a = Origin::parse("https://Tools.Example").unwrap();
    let b = Origin::parse("https://tools.example:443/x").unwrap();
    assert_eq!(a, b);
    assert_ne!(a, Origin::parse("http://tools.example").unwrap());
    assert_ne!(a, Origin::parse("https://tools.example:8443").unwrap());
    assert_eq!(a.to_string(), "https://tools.example:443");
}
