#![allow(clippy::unwrap_used)]
use super::*;

fn secrets() -> Vec<BoundSecret> {
    BoundSecret::from_grant(vec![
        EdgeSecret {
            name: "TOKEN".into(),
            value: "s3cr3t-value".into(),
            hosts: vec!["api.example.org".into(), "*.github.com".into()],
        },
        EdgeSecret {
            name: "OTHER".into(),
            value: "other-value".into(),
            hosts: vec!["other.example".into()],
        },
        EdgeSecret {
            name: "BROKEN".into(),
            value: "a\r\nX-Injected: 1".into(),
            hosts: vec!["api.example.org".into()],
        },
    ])
}

fn headers(pairs: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    pairs
        .iter()
        .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
        .collect()
}

fn value(headers: &[(String, Vec<u8>)], at: usize) -> String {
    String::from_utf8(headers[at].1.clone()).unwrap()
}

#[test]
fn a_bound_secret_is_written_into_every_header_that_names_it() {
    let mut h = headers(&[
        ("Host", "api.example.org"),
        ("Authorization", "Bearer {{secret:TOKEN}}"),
        ("X-Both", "{{secret:TOKEN}}:{{secret:TOKEN}}"),
        ("X-Template", "{{ not a secret }} {{other:x}}"),
    ]);
    assert_eq!(substitute(&mut h, "API.example.org.", &secrets()), Ok(3));
    assert_eq!(value(&h, 1), "Bearer s3cr3t-value");
    assert_eq!(value(&h, 2), "s3cr3t-value:s3cr3t-value");
    assert_eq!(value(&h, 3), "{{ not a secret }} {{other:x}}", "left alone");
    let mut h = headers(&[("Authorization", "token {{secret:TOKEN}}")]);
    assert_eq!(substitute(&mut h, "api.github.com", &secrets()), Ok(1));
    assert_eq!(value(&h, 0), "token s3cr3t-value");
}

#[test]
fn a_head_without_placeholders_is_untouched() {
    let mut h = headers(&[("Host", "x.org"), ("Accept", "*/*")]);
    let before = h.clone();
    assert_eq!(substitute(&mut h, "x.org", &[]), Ok(0));
    assert_eq!(h, before);
}

#[test]
fn a_secret_sent_to_a_host_it_is_not_bound_to_refuses_the_request() {
    let mut h = headers(&[
        ("X-Fine", "{{secret:OTHER}}"),
        ("Authorization", "Bearer {{secret:TOKEN}}"),
    ]);
    let before = h.clone();
    let err = substitute(&mut h, "other.example", &secrets()).unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, PlaceholderError::NotBound { .. }),
        "{message}"
    );
    assert!(
        message.contains("TOKEN")
            && message.contains("other.example")
            && message.contains("api.example.org, *.github.com")
            && message.contains("not sent"),
        "{message}"
    );
    assert!(!message.contains("s3cr3t"), "{message}");
    assert_eq!(h, before, "nothing was replaced, not even the bound one");
    // github.com itself is not beneath *.github.com
    let mut h = headers(&[("Authorization", "{{secret:TOKEN}}")]);
    assert!(substitute(&mut h, "github.com", &secrets()).is_err());
}

#[test]
fn an_unknown_secret_refuses_the_request() {
    let mut h = headers(&[("Authorization", "Bearer {{secret:NOPE}}")]);
    let err = substitute(&mut h, "api.example.org", &secrets()).unwrap_err();
    assert!(matches!(err, PlaceholderError::Unknown { .. }), "{err}");
    assert!(
        err.to_string().contains("NOPE") && err.to_string().contains("api.example.org"),
        "{err}"
    );
}

#[test]
fn hostile_placeholders_get_clear_errors() {
    for bad in [
        "{{secret:TOKEN}",
        "{{secret:TOKEN",
        "{{secret:}}",
        "{{secret:{{secret:TOKEN}}}}",
        "{{secret:TO KEN}}",
        "{{secret:1TOKEN}}",
        "{{secret:TOKEN\u{e9}}}",
    ] {
        let mut h = headers(&[("X-Key", bad)]);
        let err = substitute(&mut h, "api.example.org", &secrets()).unwrap_err();
        assert!(
            matches!(err, PlaceholderError::Malformed { .. }),
            "{bad:?}: {err}"
        );
        assert!(err.to_string().contains("X-Key"), "{err}");
    }
    let long = format!("{{{{secret:{}}}}}", "A".repeat(200));
    let mut h = headers(&[("X-Key", &long)]);
    assert!(matches!(
        substitute(&mut h, "api.example.org", &secrets()),
        Err(PlaceholderError::Malformed { .. })
    ));
}

#[test]
fn a_value_that_would_break_the_head_is_refused() {
    let mut h = headers(&[("Authorization", "{{secret:BROKEN}}")]);
    let err = substitute(&mut h, "api.example.org", &secrets()).unwrap_err();
    assert_eq!(
        err,
        PlaceholderError::UnfitValue {
            name: "BROKEN".into()
        }
    );
    assert!(!err.to_string().contains("Injected"), "{err}");
}

#[test]
fn a_hundred_thousand_placeholders_are_refused_quickly() {
    let many = "{{secret:TOKEN}}".repeat(100_000);
    let mut h = headers(&[("X-Many", &many)]);
    assert!(matches!(
        substitute(&mut h, "api.example.org", &secrets()),
        Err(PlaceholderError::TooMany | PlaceholderError::TooLarge)
    ));
    let mut h = headers(&[("X-Many", &"{{secret:TOKEN}}".repeat(MAX_PLACEHOLDERS + 1))]);
    assert_eq!(
        substitute(&mut h, "api.example.org", &secrets()),
        Err(PlaceholderError::TooMany)
    );
    // spread over many headers, counted together
    let mut h: Vec<(String, Vec<u8>)> = (0..100)
        .map(|i| (format!("X-{i}"), b"{{secret:TOKEN}}".to_vec()))
        .collect();
    assert_eq!(
        substitute(&mut h, "api.example.org", &secrets()),
        Err(PlaceholderError::TooMany)
    );
    // a large value many times over passes the size bound
    let big = BoundSecret::from_grant(vec![EdgeSecret {
        name: "BIG".into(),
        value: "x".repeat(64 * 1024),
        hosts: vec!["*".into()],
    }]);
    let mut h = headers(&[("X", &"{{secret:BIG}}".repeat(20))]);
    assert_eq!(
        substitute(&mut h, "a.org", &big),
        Err(PlaceholderError::TooLarge)
    );
}
