//! The `redirect_uris` column: a client's redirect URIs as a JSON array of strings, written and
//! read the same way on every backend, without a JSON library.

use crate::StoreError;

/// Redirect URIs as the `redirect_uris` column holds them: a JSON array of strings.
pub fn redirect_uris_to_column(uris: &[String]) -> String {
    let mut out = String::from("[");
    for (n, uri) in uris.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push('"');
        for c in uri.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push(']');
    out
}

/// Rebuilds redirect URIs from the `redirect_uris` column; anything but a JSON array of strings
/// means corrupt storage.
pub fn redirect_uris_from_column(raw: &str) -> Result<Vec<String>, StoreError> {
    string_array(raw).ok_or_else(|| {
        StoreError::Unavailable("corrupt oauth_clients row: redirect_uris".to_owned())
    })
}

/// A JSON array of strings, or `None`.
fn string_array(raw: &str) -> Option<Vec<String>> {
    let mut chars = raw.chars().peekable();
    let mut out = Vec::new();
    skip_space(&mut chars);
    if chars.next()? != '[' {
        return None;
    }
    skip_space(&mut chars);
    if chars.peek() == Some(&']') {
        chars.next();
    } else {
        loop {
            skip_space(&mut chars);
            if chars.next()? != '"' {
                return None;
            }
            out.push(string_rest(&mut chars)?);
            skip_space(&mut chars);
            match chars.next()? {
                ',' => {}
                ']' => break,
                _ => return None,
            }
        }
    }
    skip_space(&mut chars);
    chars.next().is_none().then_some(out)
}

/// The characters of a JSON text being read.
type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// Skips JSON whitespace.
fn skip_space(chars: &mut Chars<'_>) {
    let space = |c: &char| matches!(c, ' ' | '\t' | '\n' | '\r');
    while chars.next_if(space).is_some() {}
}

/// The rest of a JSON string after its opening quote, through its closing one.
fn string_rest(chars: &mut Chars<'_>) -> Option<String> {
    let mut out = String::new();
    loop {
        match chars.next()? {
            '"' => return Some(out),
            '\\' => out.push(match chars.next()? {
                '"' => '"',
                '\\' => '\\',
                '/' => '/',
                'b' => '\u{8}',
                'f' => '\u{c}',
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                'u' => escaped_char(chars)?,
                _ => return None,
            }),
            c if u32::from(c) < 0x20 => return None,
            c => out.push(c),
        }
    }
}

/// The character of a `\u` escape (its `\u` read already), a surrogate pair joined.
fn escaped_char(chars: &mut Chars<'_>) -> Option<char> {
    let high = hex4(chars)?;
    if !(0xD800..0xDC00).contains(&high) {
        // A lone low surrogate is no char, and from_u32 refuses it.
        return char::from_u32(high);
    }
    if chars.next()? != '\\' || chars.next()? != 'u' {
        return None;
    }
    let low = hex4(chars)?;
    if !(0xDC00..0xE000).contains(&low) {
        return None;
    }
    char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
}

/// Four hex digits as a number.
fn hex4(chars: &mut Chars<'_>) -> Option<u32> {
    let mut value = 0;
    for _ in 0..4 {
        value = value * 16 + chars.next()?.to_digit(16)?;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn redirect_uris_survive_the_column() {
        let cases: [&[&str]; 4] = [
            &[],
            &["https://app.example/cb"],
            &["http://127.0.0.1:8765/cb?a=\"b\"&c=\\d", "é🦀\u{1}\n/"],
            &["", "x"],
        ];
        for case in cases {
            let uris: Vec<String> = case.iter().map(|u| (*u).to_owned()).collect();
            let column = redirect_uris_to_column(&uris);
            assert_eq!(
                redirect_uris_from_column(&column).unwrap(),
                uris,
                "{column}"
            );
        }
        assert_eq!(
            redirect_uris_to_column(&["a\"\\\u{1f}".to_owned()]),
            r#"["a\"\\\u001f"]"#
        );
    }

    #[test]
    fn any_json_array_of_strings_is_read() {
        let read = redirect_uris_from_column(" [ \"a\\/b\\u00e9\\ud83e\\udd80\" ,\"\\t\" ] ");
        assert_eq!(read.unwrap(), vec!["a/bé🦀".to_owned(), "\t".to_owned()]);
    }

    #[test]
    fn anything_else_is_corrupt() {
        let bad = [
            "",
            "[",
            "]",
            "{}",
            "[1]",
            "[\"a\",]",
            "[\"a\"] x",
            "[\"a\" \"b\"]",
            "[\"\\x\"]",
            "[\"\\ud83e\"]",
            "[\"\\udd80\"]",
            "[\"\\u12\"]",
            "[\"a\u{1}\"]",
            "[\"a]",
            "[,]",
        ];
        for raw in bad {
            assert!(
                matches!(
                    redirect_uris_from_column(raw),
                    Err(StoreError::Unavailable(ref d)) if d == "corrupt oauth_clients row: redirect_uris"
                ),
                "{raw:?}"
            );
        }
    }
}
