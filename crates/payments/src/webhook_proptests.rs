//! Property tests of the `Stripe-Signature` check: any header, body and clock never panic; a
//! correct v1 within the tolerance passes; any single-byte change of the body, the timestamp
//! or the signature fails, and so does a timestamp outside the tolerance.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use toolgate_ports::payments::PaymentError;

use super::{TOLERANCE_SECONDS, sign, verify};

const SECRET: &str = "whsec_proptest_0123456789";
/// A plausible "now" (2026); the properties move around it.
const NOW: i64 = 1_790_000_000;

/// An event body Stripe could send (one this service ignores), or any bytes at all.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "[a-z_.]{1,20}".prop_map(|kind| {
            format!(r#"{{"id":"evt_1","type":"{kind}","data":{{"object":{{}}}}}}"#).into_bytes()
        }),
        prop::collection::vec(any::<u8>(), 0..200),
    ]
}

fn bad_signature(result: &Result<toolgate_ports::payments::PaymentEvent, PaymentError>) -> bool {
    matches!(result, Err(PaymentError::BadSignature(_)))
}

/// `text` with the byte at `at` replaced by `byte` (a different one), as bytes may not stay UTF-8.
fn changed(text: &[u8], at: usize, byte: u8) -> Vec<u8> {
    let mut out = text.to_vec();
    let at = at % out.len();
    out[at] = if out[at] == byte {
        byte.wrapping_add(1)
    } else {
        byte
    };
    out
}

proptest! {
    #[test]
    fn any_header_body_and_clock_never_panic(
        header in prop_oneof![
            "\\PC{0,120}",
            "(t=-?[0-9+]{0,21}|v1=[0-9a-fA-F]{0,70}|v0=[a-z]{0,4}|[a-z]{0,3}=?)(,\\s?(t=-?[0-9]{0,21}|v1=[0-9a-f]{0,66}))*",
        ],
        body in body(),
        now in any::<i64>(),
        present in any::<bool>(),
    ) {
        let result = verify(SECRET, present.then_some(header.as_str()), &body, now);
        prop_assert!(bad_signature(&result), "{:?}", result);
    }

    #[test]
    fn a_correct_signature_within_the_tolerance_passes(
        body in body(),
        age in -TOLERANCE_SECONDS..=TOLERANCE_SECONDS,
        other_v1 in proptest::option::of("[0-9a-f]{64}"),
    ) {
        let t = NOW - age;
        let mut header = sign(SECRET, t, &body);
        if let Some(other) = other_v1 {
            // a second signature, as during a secret's rotation, and Stripe's test scheme
            header = format!("{header},v1={other},v0=abc");
        }
        let result = verify(SECRET, Some(&header), &body, NOW);
        prop_assert!(!bad_signature(&result), "{} {:?}", header, result);
    }

    #[test]
    fn a_timestamp_outside_the_tolerance_fails(
        body in body(),
        beyond in 1..i64::from(u32::MAX),
        ahead in any::<bool>(),
    ) {
        let t = if ahead { NOW + TOLERANCE_SECONDS + beyond } else { NOW - TOLERANCE_SECONDS - beyond };
        let header = sign(SECRET, t, &body);
        prop_assert!(bad_signature(&verify(SECRET, Some(&header), &body, NOW)));
    }

    #[test]
    fn any_single_byte_change_of_body_timestamp_or_signature_fails(
        body in body().prop_filter("not empty", |b| !b.is_empty()),
        age in -TOLERANCE_SECONDS..=TOLERANCE_SECONDS,
        at in any::<usize>(),
        byte in any::<u8>(),
        part in 0..3,
    ) {
        let t = NOW - age;
        let header = sign(SECRET, t, &body);
        let (t_part, v1_part) = header.split_once(',').unwrap();
        let t_text = t_part.strip_prefix("t=").unwrap().as_bytes();
        let v1 = v1_part.strip_prefix("v1=").unwrap().as_bytes();
        let (header, body) = match part {
            0 => (header.clone(), changed(&body, at, byte)),
            1 => {
                let t = String::from_utf8_lossy(&changed(t_text, at, byte)).into_owned();
                (format!("t={t},{v1_part}"), body.clone())
            }
            _ => {
                let v1 = String::from_utf8_lossy(&changed(v1, at, byte)).into_owned();
                (format!("{t_part},v1={v1}"), body.clone())
            }
        };
        let result = verify(SECRET, Some(&header), &body, NOW);
        prop_assert!(bad_signature(&result), "{} {:?}", header, result);
    }
}

/// The cases the properties found: another spelling of the signed timestamp (`+t`, `0t`) or of
/// the signature (upper-case hex) passed as the signed one.
#[test]
fn only_the_signed_spelling_passes() {
    let body = br#"{"id":"evt_1","type":"ping"}"#;
    let header = sign(SECRET, NOW, body);
    assert!(!bad_signature(&verify(SECRET, Some(&header), body, NOW)));
    for forged in [
        header.replace("t=", "t=+"),
        header.replace("t=", "t=0"),
        header.replace("t=", "t= "),
        format!(
            "t={NOW},v1={}",
            header.split("v1=").nth(1).unwrap().to_uppercase()
        ),
    ] {
        assert!(
            bad_signature(&verify(SECRET, Some(&forged), body, NOW)),
            "{forged}"
        );
    }
}
