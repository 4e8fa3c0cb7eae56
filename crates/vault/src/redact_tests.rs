#![allow(clippy::unwrap_used)]

use base64::Engine;
use toolgate_domain::SecretName;

use super::*;

fn redactor(secrets: &[(&str, &str)]) -> Redactor {
    let named: Vec<(SecretName, &[u8])> = secrets
        .iter()
        .map(|(n, v)| (SecretName::parse(n).unwrap(), v.as_bytes()))
        .collect();
    Redactor::new(named.iter().map(|(n, v)| (n, *v)))
}

#[test]
fn every_form_of_a_value_is_replaced() {
    let value = "s3cr3t/+value with space?";
    let r = redactor(&[("TOKEN", value)]);
    for form in [
        value.to_owned(),
        base64::engine::general_purpose::STANDARD.encode(value),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value),
        hex::encode(value),
        hex::encode_upper(value),
        url_encoded(value.as_bytes(), false, false),
        url_encoded(value.as_bytes(), true, false),
    ] {
        let shown = r.redact(&format!("before {form} after"));
        assert_eq!(shown, "before [REDACTED:TOKEN] after", "form {form}");
    }
    assert_eq!(r.redact("nothing here"), "nothing here");
}

/// A value with every character URL encoding treats specially, and its encodings as Python's
/// `urllib.parse` writes them (`quote(v, safe='')`, `quote_plus(v)`, `quote(v)`), written out
/// here rather than computed by the code under test.
const RESERVED: &str = "pa ss/w+rd%20&k=v é✓~";
const RESERVED_ENCODED: [&str; 3] = [
    "pa%20ss%2Fw%2Brd%2520%26k%3Dv%20%C3%A9%E2%9C%93~",
    "pa+ss%2Fw%2Brd%2520%26k%3Dv+%C3%A9%E2%9C%93~",
    "pa%20ss/w%2Brd%2520%26k%3Dv%20%C3%A9%E2%9C%93~",
];

#[test]
fn url_encodings_of_reserved_and_non_ascii_characters_are_replaced() {
    let r = redactor(&[("ODD", RESERVED)]);
    for form in RESERVED_ENCODED {
        assert_eq!(
            r.redact(&format!("GET /?k={form}&x=1")),
            "GET /?k=[REDACTED:ODD]&x=1",
            "form {form}"
        );
        // and in a stream cut anywhere
        let text = format!("k={form};");
        for cut in 0..=text.len() {
            let mut stream = r.stream();
            let mut shown = stream.push(&text[..cut]);
            shown += &stream.push(&text[cut..]);
            shown += &stream.finish();
            assert_eq!(shown, "k=[REDACTED:ODD];", "form {form} cut at {cut}");
        }
    }
}

#[test]
fn the_longest_value_wins_and_tiny_values_are_left() {
    let r = redactor(&[("SHORT", "abcdef"), ("LONG", "abcdefghij"), ("TINY", "ab")]);
    assert_eq!(
        r.redact("abcdefghij abcdef ab"),
        "[REDACTED:LONG] [REDACTED:SHORT] ab"
    );
    assert!(redactor(&[("TINY", "ab")]).is_empty());
}

#[test]
fn a_value_split_across_pieces_is_still_found() {
    let value = "correct-horse-battery";
    let r = redactor(&[("PW", value)]);
    let text = format!("x{value}y{value}z é ü {value}");
    // every way of cutting the text in two, and one byte at a time
    for cut in (0..=text.len()).filter(|c| text.is_char_boundary(*c)) {
        let mut stream = r.stream();
        let mut shown = stream.push(&text[..cut]);
        shown += &stream.push(&text[cut..]);
        shown += &stream.finish();
        assert_eq!(shown, r.redact(&text), "cut at {cut}");
        assert!(!shown.contains(value));
    }
    let mut stream = r.stream();
    let mut shown = String::new();
    for ch in text.chars() {
        let piece = stream.push(&ch.to_string());
        assert!(!piece.contains("horse"));
        shown += &piece;
    }
    shown += &stream.finish();
    assert_eq!(shown.matches("[REDACTED:PW]").count(), 3);
}

#[test]
fn a_stream_without_secrets_passes_at_once() {
    let r = redactor(&[]);
    let mut stream = r.stream();
    assert_eq!(stream.push("abc"), "abc");
    assert_eq!(stream.finish(), "");
}

#[test]
fn a_stream_holds_back_only_a_tail_that_could_begin_a_value() {
    let name = SecretName::parse("KEY").unwrap();
    let redactor = Redactor::new([(&name, b"sk-secret-123".as_slice())]);
    let mut stream = redactor.stream();
    // nothing here can begin any form of the value: shown at once
    assert_eq!(stream.push("Hello there, "), "Hello there, ");
    // "sk-se" may be the start of it: held
    assert_eq!(stream.push("key: sk-se"), "key: ");
    assert_eq!(stream.push("cret-123 done"), "[REDACTED:KEY] done");
    assert_eq!(stream.finish(), "");
}

#[test]
fn a_stream_made_to_match_everywhere_costs_a_bounded_search_per_piece() {
    // a value and a text that agree at every offset: finding the shortest tail to hold back
    // would compare ~longest² bytes per piece without a bound
    let value = "a".repeat(1300) + "b";
    let r = redactor(&[("AAA", &value)]);
    // every tail of a unit begins like the value and fails only at its last byte
    let text = ("a".repeat(1290) + "c").repeat(30) + &value;
    let mut stream = r.stream();
    let mut shown = String::new();
    for piece in text.as_bytes().chunks(7) {
        shown += &stream.push(std::str::from_utf8(piece).unwrap());
    }
    shown += &stream.finish();
    assert_eq!(shown, r.redact(&text));
    assert!(!shown.contains(&value));
}

#[test]
fn a_stream_with_a_very_long_value_is_shown_at_its_end() {
    let value = "v".repeat(super::STREAM_LONGEST_FORM);
    let r = redactor(&[("BIG", &value)]);
    let mut stream = r.stream();
    assert_eq!(stream.push("before "), "");
    assert_eq!(stream.push(&value[..10]), "");
    assert_eq!(stream.push(&value[10..]), "");
    assert_eq!(stream.finish(), "before [REDACTED:BIG]");
}
