#![allow(clippy::unwrap_used)]

use super::*;

fn refused(policy: &EgressPolicy, url: &str) -> bool {
    let parsed = Url::parse(url).unwrap();
    policy.check_url(&parsed).is_err()
}

#[test]
fn every_notation_of_a_private_address_is_refused() {
    let policy = EgressPolicy::default();
    for url in [
        "http://127.0.0.1/",
        "http://127.1/",
        "http://0x7f000001/",
        "http://2130706433/",
        "http://0177.0.0.1/",
        "http://0x7f.0.0.1/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:7f00:1]/",
        "http://[::127.0.0.1]/",
        "http://[64:ff9b::127.0.0.1]/",
        "http://[2002:7f00:1::]/",
        "http://0.0.0.0/",
        "http://0/",
        "http://10.1.2.3/",
        "http://172.16.0.1/",
        "http://192.168.1.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://100.64.0.1/",
        "http://224.0.0.1/",
        "http://255.255.255.255/",
        "http://[fe80::1]/",
        "http://[fc00::1]/",
        "HTTP://127.0.0.1.:80/",
        "http://[0:0:0:0:0:ffff:a00:1]/",
    ] {
        assert!(refused(&policy, url), "{url} was allowed");
    }
}

#[test]
fn public_addresses_and_names_pass_the_url_check() {
    let policy = EgressPolicy::default();
    for url in [
        "https://example.com/a?b=c",
        "http://93.184.216.34/",
        "http://[2606:2800:220:1:248:1893:25c8:1946]/",
        "https://172.32.0.1/",
        "http://100.128.0.1/",
        "http://[::ffff:8.8.8.8]/",
    ] {
        assert!(!refused(&policy, url), "{url} was refused");
    }
}

#[test]
fn only_http_without_credentials() {
    let policy = EgressPolicy::default();
    for (url, says) in [
        ("file:///etc/passwd", "only http"),
        ("gopher://example.com/", "only http"),
        ("ftp://example.com/", "only http"),
        ("https://user:pass@example.com/", "user name or password"),
        ("https://user@example.com/", "user name or password"),
    ] {
        let err = policy
            .check_url(&Url::parse(url).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{url}: {err}");
        assert!(!err.contains("pass@"), "{err}");
    }
}

#[test]
fn the_operator_can_allow_private_ranges() {
    let policy = EgressPolicy::new(&["127.0.0.1/32".into(), "10.0.0.5".into()]).unwrap();
    assert!(policy.check_ip("127.0.0.1".parse().unwrap()).is_ok());
    assert!(
        policy.check_ip("::ffff:127.0.0.1".parse().unwrap()).is_ok(),
        "mapped form of an allowed one"
    );
    assert!(policy.check_ip("10.0.0.5".parse().unwrap()).is_ok());
    assert!(policy.check_ip("127.0.0.2".parse().unwrap()).is_err());
    assert!(policy.check_ip("10.0.0.6".parse().unwrap()).is_err());
    let err = EgressPolicy::new(&["10.0.0.0/33".into()]).unwrap_err();
    assert!(err.contains("not an address"), "{err}");
}

#[test]
fn refusals_name_the_kind_of_range() {
    let policy = EgressPolicy::default();
    let err = policy
        .check_ip("169.254.169.254".parse().unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("169.254.169.254") && err.contains("metadata"),
        "{err}"
    );
    let err = policy
        .check_ip("::ffff:10.0.0.1".parse().unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("10.0.0.1 is a private address"), "{err}");
}
