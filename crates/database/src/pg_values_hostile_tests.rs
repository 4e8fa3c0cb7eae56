//! Values a hostile PostgreSQL server (a tenant's own) can send, decoded from bytes as they come
//! off the wire: `json` and `jsonb` nested 10^6 deep (PostgreSQL itself stops near 10^4), numeric
//! digits and scales at their 16-bit limits, dates and times at theirs, and any bytes for any
//! type. Each is a bounded, correct value, never a panic or a deep walk.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use serde_json::Value;

use super::*;

const DEEP: usize = 1_000_000;

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn json_nested_a_million_deep_comes_back_as_its_text() {
    for deep in [nested(DEEP), "{\"a\":".repeat(DEEP), nested(129)] {
        let expected = Value::String(deep.clone());
        assert_eq!(from_binary("JSON", deep.as_bytes()), Some(expected.clone()));
        let mut jsonb = vec![1u8];
        jsonb.extend_from_slice(deep.as_bytes());
        assert_eq!(from_binary("JSONB", &jsonb), Some(expected.clone()));
        assert_eq!(from_text("JSON", deep.as_bytes()), expected);
        assert_eq!(from_text("JSONB", deep.as_bytes()), expected);
    }
    // within serde_json's limit it is JSON
    let fits = nested(120);
    assert!(from_binary("JSON", fits.as_bytes()).unwrap().is_array());
    // a jsonb version this client does not know is not guessed at
    assert_eq!(from_binary("JSONB", b"\x02[]"), None);
}

#[test]
fn numerics_at_their_limits_are_bounded_text() {
    let header = |ndigits: u16, weight: i16, sign: u16, scale: u16| {
        let mut bytes = Vec::new();
        for word in [ndigits, weight as u16, sign, scale] {
            bytes.extend(word.to_be_bytes());
        }
        bytes
    };
    // the most a numeric can announce, with all its digits present: 4 * 32768 integer digits and
    // a scale of 65535
    let mut most = header(u16::MAX, i16::MAX, 0, u16::MAX);
    most.extend(std::iter::repeat_n([0x27u8, 0x0f], usize::from(u16::MAX)).flatten());
    let text = numeric(&most).unwrap();
    assert!(text.len() <= 4 * 32768 + 1 + 65535, "{}", text.len());
    assert!(text.starts_with("9999"));
    // digits announced but not sent, and a weight far below them
    assert_eq!(numeric(&header(u16::MAX, 0, 0, 0)), None);
    assert_eq!(
        numeric(&header(0, i16::MIN, 0x4000, 3)).as_deref(),
        Some("-0.000")
    );
    assert_eq!(numeric(&header(0, 0, 0x1234, 0)), None);
}

#[test]
fn dates_and_times_at_their_limits_are_text_or_left_to_the_fallback() {
    for days in [i32::MAX, i32::MIN, i32::MAX - 1, i32::MIN + 1, 0] {
        let _ = from_binary("DATE", &days.to_be_bytes());
    }
    for micros in [i64::MAX, i64::MIN, i64::MAX - 1, i64::MIN + 1, -1, 0] {
        for kind in ["TIMESTAMP", "TIMESTAMPTZ", "TIME"] {
            let _ = from_binary(kind, &micros.to_be_bytes());
        }
    }
    assert_eq!(
        from_binary("DATE", &i32::MAX.to_be_bytes()),
        Some(Value::String("infinity".into()))
    );
}

proptest! {
    #[test]
    fn any_bytes_of_any_type_never_panic(
        kind in prop::sample::select(vec![
            "BOOL", "INT2", "INT4", "INT8", "OID", "FLOAT4", "FLOAT8", "NUMERIC", "JSON", "JSONB",
            "BYTEA", "UUID", "DATE", "TIMESTAMP", "TIMESTAMPTZ", "TIME", "TEXT", "CITEXT",
        ]),
        bytes in prop::collection::vec(any::<u8>(), 0..40),
    ) {
        let _ = from_binary(kind, &bytes).unwrap_or_else(|| fallback(&bytes));
        let _ = from_text(kind, &bytes);
    }
}
