//! Property test of the stream redactor: for any values and any text holding them (as they
//! are, and in their base64, hex and URL-encoded forms), any split of the text into pieces,
//! pushed one by one and then finished, shows no value in any form and equals `redact` of the
//! whole text.
#![allow(clippy::unwrap_used)]

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use proptest::prelude::*;
use toolgate_domain::SecretName;

use super::{MIN_REDACTED_BYTES, Redactor};

/// Characters that make values overlap, need escaping, or span several bytes.
const ALPHABET: &[char] = &[
    'a', 'b', 'c', 'a', 'b', ' ', '/', '+', '?', '%', '=', 'é', '€',
];

fn value() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(ALPHABET), MIN_REDACTED_BYTES..10)
        .prop_map(|chars| chars.into_iter().collect())
}

/// Every form a value is redacted in.
fn forms(value: &str) -> Vec<String> {
    let url = |plus: bool| -> String {
        value
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    char::from(b).to_string()
                }
                b' ' if plus => "+".to_owned(),
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    vec![
        value.to_owned(),
        STANDARD.encode(value),
        URL_SAFE_NO_PAD.encode(value),
        hex::encode(value),
        hex::encode_upper(value),
        url(false),
        url(true),
    ]
}

/// A text of filler, values and their forms; and the byte offsets (fractions) to cut it at.
fn case() -> impl Strategy<Value = (Vec<String>, String, Vec<f64>)> {
    prop::collection::vec(value(), 1..4).prop_flat_map(|values| {
        let all_forms: Vec<String> = values.iter().flat_map(|v| forms(v)).collect();
        let piece = prop_oneof![
            2 => prop::sample::select(all_forms),
            3 => prop::collection::vec(
                prop::sample::select(&['a', 'b', 'c', 'x', ' ', '[', ']', 'é', '\n'][..]),
                0..6,
            )
            .prop_map(|c| c.into_iter().collect::<String>()),
        ];
        (
            Just(values),
            prop::collection::vec(piece, 1..12).prop_map(|p| p.concat()),
            prop::collection::vec(0.0..1.0f64, 0..8),
        )
    })
}

/// The text between redaction markers: where a value must never show.
fn plain_parts(shown: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut rest = shown;
    while let Some(start) = rest.find("[REDACTED:") {
        parts.push(rest[..start].to_owned());
        let after = &rest[start..];
        let end = after.find(']').map_or(after.len(), |e| e + 1);
        rest = &after[end..];
    }
    parts.push(rest.to_owned());
    parts
}

proptest! {
    #[test]
    fn no_split_of_the_text_shows_a_value_and_all_equal_redact((values, text, cuts) in case()) {
        let names: Vec<SecretName> = (0..values.len())
            .map(|i| SecretName::parse(&format!("S{i}")).unwrap())
            .collect();
        let redactor = Redactor::new(names.iter().zip(&values).map(|(n, v)| (n, v.as_bytes())));
        let whole = redactor.redact(&text);

        let mut at: Vec<usize> = cuts
            .iter()
            .map(|f| {
                let mut cut = (f * text.len() as f64) as usize;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                cut
            })
            .collect();
        at.push(text.len());
        at.sort_unstable();
        let mut stream = redactor.stream();
        let mut shown = String::new();
        let mut from = 0;
        for cut in at {
            shown.push_str(&stream.push(&text[from..cut]));
            from = cut;
        }
        shown.push_str(&stream.finish());

        prop_assert_eq!(&shown, &whole, "pieces of {:?}", text);
        for part in plain_parts(&shown) {
            for value in &values {
                for form in forms(value) {
                    prop_assert!(!part.contains(&form), "{:?} shows {:?}", shown, form);
                }
            }
        }
    }
}
