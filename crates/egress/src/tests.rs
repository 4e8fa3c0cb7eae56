#![allow(clippy::unwrap_used)]

use super::*;

fn refused(policy: &EgressPolicy, url: &str) -> bool {
    let parsed = Url::parse(url).unwrap();
    policy.check_url(&parsed).is_err()
}

/// The kinds of range as a refusal names them.
const LOOPBACK: &str = "loopback";
const THIS_NETWORK: &str = "unspecified ('this network')";
const PRIVATE: &str = "private";
const LINK_LOCAL_V4: &str = "link-local (cloud metadata)";
const CGNAT: &str = "shared (CGNAT)";
const MULTICAST: &str = "multicast";
const RESERVED: &str = "reserved";
const DOCUMENTATION: &str = "documentation";
const BENCHMARKING: &str = "benchmarking";
const UNIQUE_LOCAL: &str = "unique local (private)";

/// Checks that `refusal` is of `address` (as the guard judges it) for being of `kind`, and
/// says so in its message.
fn assert_private(what: &str, refusal: Result<(), Refusal>, address: &str, kind: &'static str) {
    let address: IpAddr = address.parse().unwrap();
    assert_eq!(refusal, Err(Refusal::Private { address, kind }), "{what}");
    let message = refusal.unwrap_err().to_string();
    assert_eq!(
        message,
        format!("{address} is a {kind} address, which this service does not connect to"),
        "{what}"
    );
}

#[test]
fn every_notation_of_a_private_address_is_refused() {
    let policy = EgressPolicy::default();
    for (url, address, kind) in [
        ("http://127.0.0.1/", "127.0.0.1", LOOPBACK),
        ("http://127.1/", "127.0.0.1", LOOPBACK),
        ("http://0x7f000001/", "127.0.0.1", LOOPBACK),
        ("http://2130706433/", "127.0.0.1", LOOPBACK),
        ("http://0177.0.0.1/", "127.0.0.1", LOOPBACK),
        ("http://0x7f.0.0.1/", "127.0.0.1", LOOPBACK),
        ("http://[::1]/", "::1", LOOPBACK),
        ("http://[::ffff:127.0.0.1]/", "127.0.0.1", LOOPBACK),
        ("http://[::ffff:7f00:1]/", "127.0.0.1", LOOPBACK),
        ("http://[::127.0.0.1]/", "127.0.0.1", LOOPBACK),
        ("http://[64:ff9b::127.0.0.1]/", "127.0.0.1", LOOPBACK),
        ("http://[2002:7f00:1::]/", "127.0.0.1", LOOPBACK),
        ("http://0.0.0.0/", "0.0.0.0", THIS_NETWORK),
        ("http://0/", "0.0.0.0", THIS_NETWORK),
        ("http://10.1.2.3/", "10.1.2.3", PRIVATE),
        ("http://172.16.0.1/", "172.16.0.1", PRIVATE),
        ("http://192.168.1.1/", "192.168.1.1", PRIVATE),
        (
            "http://169.254.169.254/latest/meta-data/",
            "169.254.169.254",
            LINK_LOCAL_V4,
        ),
        ("http://[fd00:ec2::254]/", "fd00:ec2::254", UNIQUE_LOCAL),
        ("http://100.64.0.1/", "100.64.0.1", CGNAT),
        ("http://224.0.0.1/", "224.0.0.1", MULTICAST),
        ("http://255.255.255.255/", "255.255.255.255", RESERVED),
        ("http://[fe80::1]/", "fe80::1", "link-local"),
        ("http://[fc00::1]/", "fc00::1", UNIQUE_LOCAL),
        ("HTTP://127.0.0.1.:80/", "127.0.0.1", LOOPBACK),
        ("http://[0:0:0:0:0:ffff:a00:1]/", "10.0.0.1", PRIVATE),
    ] {
        let refusal = policy.check_url(&Url::parse(url).unwrap());
        assert_private(url, refusal, address, kind);
    }
}

/// Each range of the README's "Outbound requests", at both of its ends, refused with its kind;
/// the addresses just outside it pass.
#[test]
fn each_range_is_refused_with_its_kind() {
    let policy = EgressPolicy::default();
    for (address, kind) in [
        ("127.0.0.1", LOOPBACK),
        ("127.255.255.254", LOOPBACK),
        ("0.0.0.0", THIS_NETWORK),
        ("0.255.255.255", THIS_NETWORK),
        ("10.0.0.0", PRIVATE),
        ("10.255.255.255", PRIVATE),
        ("172.16.0.0", PRIVATE),
        ("172.31.255.255", PRIVATE),
        ("192.168.0.0", PRIVATE),
        ("192.168.255.255", PRIVATE),
        ("169.254.0.0", LINK_LOCAL_V4),
        ("169.254.169.254", LINK_LOCAL_V4),
        ("169.254.255.255", LINK_LOCAL_V4),
        ("100.64.0.0", CGNAT),
        ("100.127.255.255", CGNAT),
        ("224.0.0.0", MULTICAST),
        ("239.255.255.255", MULTICAST),
        ("240.0.0.0", RESERVED),
        ("254.255.255.255", RESERVED),
        ("255.255.255.255", RESERVED),
        ("192.0.0.0", "IETF protocol assignment"),
        ("192.0.0.255", "IETF protocol assignment"),
        ("192.0.2.0", DOCUMENTATION),
        ("192.0.2.255", DOCUMENTATION),
        ("198.51.100.0", DOCUMENTATION),
        ("198.51.100.255", DOCUMENTATION),
        ("203.0.113.0", DOCUMENTATION),
        ("203.0.113.255", DOCUMENTATION),
        ("198.18.0.0", BENCHMARKING),
        ("198.19.255.255", BENCHMARKING),
        ("::1", LOOPBACK),
        ("::", "unspecified"),
        ("ff02::1", MULTICAST),
        ("ff0e::101", MULTICAST),
        ("fc00::", UNIQUE_LOCAL),
        ("fd00:ec2::254", UNIQUE_LOCAL),
        ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", UNIQUE_LOCAL),
        ("fe80::", "link-local"),
        ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "link-local"),
        ("fec0::", "site-local"),
        ("feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "site-local"),
        ("2001:db8::", DOCUMENTATION),
        ("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", DOCUMENTATION),
        ("100::", "discard-only"),
        ("100::ffff:ffff:ffff:ffff", "discard-only"),
    ] {
        let refusal = policy.check_ip(address.parse().unwrap());
        assert_private(address, refusal, address, kind);
    }
    for public in [
        "1.0.0.1",
        "9.255.255.255",
        "11.0.0.0",
        "126.255.255.255",
        "128.0.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "192.167.255.255",
        "192.169.0.0",
        "169.253.255.255",
        "169.255.0.0",
        "100.63.255.255",
        "100.128.0.0",
        "223.255.255.255",
        "192.0.1.255",
        "192.0.3.0",
        "198.51.99.255",
        "198.51.101.0",
        "203.0.112.255",
        "203.0.114.0",
        "198.17.255.255",
        "198.20.0.0",
        "2001:db9::1",
        "2606:4700:4700::1111",
        "2a00:1450:4001:80b::200e",
    ] {
        assert_eq!(
            policy.check_ip(public.parse().unwrap()),
            Ok(()),
            "{public} is public"
        );
    }
}

/// An IPv6 address that carries an IPv4 one is judged as that IPv4 address, in every form.
#[test]
fn ipv6_forms_carrying_an_ipv4_address_are_judged_as_it() {
    let policy = EgressPolicy::default();
    for (address, carried, kind) in [
        ("::ffff:10.0.0.1", "10.0.0.1", PRIVATE),
        ("::ffff:169.254.169.254", "169.254.169.254", LINK_LOCAL_V4),
        ("::10.0.0.1", "10.0.0.1", PRIVATE),
        ("::192.168.1.1", "192.168.1.1", PRIVATE),
        ("64:ff9b::a9fe:a9fe", "169.254.169.254", LINK_LOCAL_V4),
        ("64:ff9b::100.64.0.1", "100.64.0.1", CGNAT),
        ("64:ff9b:1::7f00:1", "127.0.0.1", LOOPBACK),
        ("2002:c0a8:101::", "192.168.1.1", PRIVATE),
        ("2002:0a00:0001:1234::1", "10.0.0.1", PRIVATE),
        ("2002:e000:0001::", "224.0.0.1", MULTICAST),
    ] {
        let refusal = policy.check_ip(address.parse().unwrap());
        assert_private(address, refusal, carried, kind);
    }
    for public in [
        "::ffff:8.8.8.8",
        "::8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::",
    ] {
        assert_eq!(
            policy.check_ip(public.parse().unwrap()),
            Ok(()),
            "{public} carries a public address"
        );
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
    for (url, expected, says) in [
        (
            "file:///etc/passwd",
            Refusal::Scheme("file".into()),
            "only http",
        ),
        (
            "gopher://example.com/",
            Refusal::Scheme("gopher".into()),
            "only http",
        ),
        (
            "ftp://example.com/",
            Refusal::Scheme("ftp".into()),
            "only http",
        ),
        (
            "https://user:pass@example.com/",
            Refusal::Credentials,
            "user name or password",
        ),
        (
            "https://user@example.com/",
            Refusal::Credentials,
            "user name or password",
        ),
        (
            "http://:pass@example.com/",
            Refusal::Credentials,
            "user name or password",
        ),
    ] {
        let refusal = policy.check_url(&Url::parse(url).unwrap()).unwrap_err();
        assert_eq!(refusal, expected, "{url}");
        let err = refusal.to_string();
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
    assert_private(
        "127.0.0.2",
        policy.check_ip("127.0.0.2".parse().unwrap()),
        "127.0.0.2",
        LOOPBACK,
    );
    assert_private(
        "10.0.0.6",
        policy.check_ip("10.0.0.6".parse().unwrap()),
        "10.0.0.6",
        PRIVATE,
    );
    // of several resolved addresses only the allowed ones are kept; none allowed: the refusal
    let mixed: Vec<SocketAddr> = ["10.0.0.6:80", "127.0.0.1:80", "10.0.0.5:80"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    assert_eq!(policy.allowed(mixed.clone()), Ok(vec![mixed[1], mixed[2]]));
    assert_eq!(
        policy.allowed(vec![mixed[0]]),
        Err(Some(Refusal::Private {
            address: "10.0.0.6".parse().unwrap(),
            kind: PRIVATE
        }))
    );
    assert_eq!(policy.allowed(Vec::new()), Err(None));
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

#[test]
fn a_configured_endpoint_is_reachable_at_its_host_and_port_only() {
    let policy = EgressPolicy::default()
        .with_endpoints(["http://127.0.0.1:11434/v1", "http://searx.internal:8888"])
        .unwrap();
    let url = |text: &str| Url::parse(text).unwrap();
    assert_eq!(
        policy.check_url(&url("http://127.0.0.1:11434/v1/chat")),
        Ok(())
    );
    assert!(matches!(
        policy.check_url(&url("http://127.0.0.1:11435/")),
        Err(Refusal::Private {
            kind: "loopback",
            ..
        })
    ));
    assert!(matches!(
        policy.check_url(&url("http://127.0.0.2:11434/")),
        Err(Refusal::Private { .. })
    ));
    // a named endpoint resolves past the guard, so any other port of that name is refused
    assert_eq!(
        policy.check_url(&url("http://SEARX.internal:8888/search")),
        Ok(())
    );
    assert!(matches!(
        policy.check_url(&url("http://searx.internal:22/")),
        Err(Refusal::NotConfigured { port: 22, .. })
    ));
    assert!(policy.is_endpoint_name("searx.internal"));
    assert!(!policy.is_endpoint_name("other.internal"));
    // the resolved addresses of a name that is not an endpoint are still judged
    assert!(policy.check_ip("10.0.0.1".parse().unwrap()).is_err());
    assert!(
        EgressPolicy::default()
            .with_endpoints(["not a url"])
            .is_err()
    );
}

#[test]
fn ipv6_forms_that_hide_ipv4_or_tunnels_are_refused() {
    let policy = EgressPolicy::default();
    for (address, kind) in [
        ("::0.0.1.2", THIS_NETWORK),
        ("::127.0.0.1", LOOPBACK),
        ("::ffff:0:127.0.0.1", LOOPBACK),
        ("::ffff:0:10.1.2.3", PRIVATE),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo tunnel"),
        ("2001:2::1", BENCHMARKING),
    ] {
        let refusal = policy.check_ip(address.parse().unwrap()).unwrap_err();
        assert!(
            matches!(refusal, Refusal::Private { kind: k, .. } if k == kind),
            "{address}: {refusal:?}"
        );
    }
    assert!(policy.check_ip("2001:4860::8888".parse().unwrap()).is_ok());
}
