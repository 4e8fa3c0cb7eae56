//! Property tests: every textual form of an IPv4 address a URL can carry (decimal, octal and hex
//! parts, the shortened `a.b.c`, `a.b` and `a` forms, a trailing dot, and the IPv6 forms that
//! embed it: mapped, compatible, NAT64, 6to4) is judged exactly as that address, under the
//! default policy and under one that allows a range.
#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;
use url::Url;

use super::*;

/// `n` written in base 10, 8 (`0` prefix) or 16 (`0x` or `0X` prefix), as browsers read it.
fn number(n: u32, base: u8) -> String {
    match base {
        0 => n.to_string(),
        1 => format!("0{n:o}"),
        2 => format!("0x{n:x}"),
        _ => format!("0X{n:X}"),
    }
}

/// The address written with `parts` numbers (4, 3, 2 or 1: the last one takes the bytes left),
/// each in the base `bases` picks.
fn shortened(address: Ipv4Addr, parts: usize, bases: [u8; 4], trailing_dot: bool) -> String {
    let octets = address.octets();
    let mut numbers: Vec<u32> = octets[..parts - 1].iter().map(|o| u32::from(*o)).collect();
    let rest = octets[parts - 1..]
        .iter()
        .fold(0u32, |acc, o| (acc << 8) | u32::from(*o));
    numbers.push(rest);
    let mut host = numbers
        .iter()
        .zip(bases)
        .map(|(n, base)| number(*n, base))
        .collect::<Vec<_>>()
        .join(".");
    if trailing_dot {
        host.push('.');
    }
    host
}

/// The IPv6 forms that carry `address`, in brackets.
fn embedded_forms(address: Ipv4Addr, six_to_four_tail: u64) -> Vec<String> {
    let [a, b, c, d] = address.octets();
    let high = u16::from_be_bytes([a, b]);
    let low = u16::from_be_bytes([c, d]);
    let tail = six_to_four_tail.to_be_bytes();
    let suffix: Vec<String> = tail
        .chunks(2)
        .map(|pair| format!("{:x}", u16::from_be_bytes([pair[0], pair[1]])))
        .collect();
    vec![
        format!("[::ffff:{address}]"),
        format!("[::ffff:{high:x}:{low:x}]"),
        format!("[0:0:0:0:0:FFFF:{address}]"),
        format!("[::{address}]"),
        format!("[::{high:x}:{low:x}]"),
        format!("[64:ff9b::{address}]"),
        format!("[64:ff9b::{high:x}:{low:x}]"),
        format!("[2002:{high:x}:{low:x}::]"),
        format!("[2002:{high:x}:{low:x}:{}:1]", suffix.join(":")),
    ]
}

/// A policy: the default, or one allowing a range around (or away from) the address.
fn policy(address: Ipv4Addr, allow: Option<(u8, bool)>) -> EgressPolicy {
    match allow {
        None => EgressPolicy::default(),
        Some((prefix, around)) => {
            let base = if around {
                address
            } else {
                Ipv4Addr::from(address.to_bits() ^ 0x8000_0000)
            };
            let net = ipnet::Ipv4Net::new(base, prefix).unwrap().trunc();
            EgressPolicy::new(&[net.to_string()]).unwrap()
        }
    }
}

fn verdict(policy: &EgressPolicy, host: &str) -> Result<(), Refusal> {
    let url = Url::parse(&format!("http://{host}/path")).unwrap();
    policy.check_url(&url)
}

/// Addresses worth most: the special ranges, those whose first half is zero (in IPv6 they look
/// like `::x`), then anything.
fn address() -> impl Strategy<Value = Ipv4Addr> {
    prop_oneof![
        any::<u32>().prop_map(Ipv4Addr::from),
        any::<u16>().prop_map(|low| Ipv4Addr::from(u32::from(low))),
        (
            prop::sample::select(vec![
                0u8, 10, 100, 127, 169, 172, 192, 198, 203, 224, 240, 255
            ]),
            any::<[u8; 3]>()
        )
            .prop_map(|(first, rest)| Ipv4Addr::new(first, rest[0], rest[1], rest[2])),
    ]
}

proptest! {
    #[test]
    fn every_ipv4_notation_is_judged_as_its_address(
        address in address(),
        parts in 1usize..=4,
        bases in any::<[u8; 4]>().prop_map(|b| b.map(|x| x % 4)),
        trailing_dot in any::<bool>(),
        allow in proptest::option::of((0u8..=32, any::<bool>())),
    ) {
        let policy = policy(address, allow);
        let expected = policy.check_ip(IpAddr::V4(address));
        let host = shortened(address, parts, bases, trailing_dot);
        prop_assert_eq!(verdict(&policy, &host), expected, "{}", host);
    }

    #[test]
    fn every_ipv6_form_that_carries_an_ipv4_address_is_judged_as_it(
        address in address(),
        tail in any::<u64>(),
        allow in proptest::option::of((0u8..=32, any::<bool>())),
    ) {
        let policy = policy(address, allow);
        let expected = policy.check_ip(IpAddr::V4(address));
        for host in embedded_forms(address, tail) {
            let got = verdict(&policy, &host);
            if address.to_bits() <= 1 && host.starts_with("[::") && !host.starts_with("[::f") {
                // `::` and `::1` keep their IPv6 meaning (unspecified, loopback): refused too
                prop_assert!(got.is_err(), "{} was allowed", host);
            } else {
                prop_assert_eq!(got, expected.clone(), "{}", host);
            }
        }
    }
}

/// The case the properties found: `::0.0.0.2` was read as the IPv6 address `::2`, which no
/// range refuses, while 0.0.0.2 is in "this network".
#[test]
fn a_compatible_address_with_a_zero_first_half_is_its_ipv4_address() {
    let policy = EgressPolicy::default();
    for host in ["[::0.0.0.2]", "[::0.0.127.1]", "[::2]", "[::7f01]"] {
        assert!(
            matches!(
                verdict(&policy, host),
                Err(Refusal::Private {
                    address: IpAddr::V4(_),
                    ..
                })
            ),
            "{host}"
        );
    }
    assert!(verdict(&policy, "[::]").is_err());
    assert!(verdict(&policy, "[::1]").is_err());
}
