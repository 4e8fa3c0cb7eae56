//! The last resort for a page the converter gave up on: its text without markup, in one
//! linear pass over the bytes (tags and comments dropped, scripts and styles with their
//! content, a few entities decoded, whitespace collapsed).

use super::writer::{is_html_space, push_capped};

/// The text of `html`, at most `cap` bytes; `true` when it was cut.
pub(super) fn text(html: &str, cap: usize) -> (String, bool) {
    let mut out = Plain {
        text: String::new(),
        cap,
        cut: false,
        space: false,
    };
    let bytes = html.as_bytes();
    let mut at = 0;
    while at < bytes.len() && !out.cut {
        let rest = &html[at..];
        let ch = rest.chars().next().unwrap_or(' ');
        if ch == '<' {
            match markup_length(rest) {
                Some(length) => {
                    at += length;
                    out.space = true;
                }
                None => {
                    out.push("<");
                    at += 1;
                }
            }
        } else if ch == '&' {
            let (decoded, used) = entity(rest);
            out.push(&decoded);
            at += used;
        } else if is_html_space(ch) {
            out.space = true;
            at += 1;
        } else {
            // a run of ordinary text at once
            let run = rest
                .find(|c: char| c == '<' || c == '&' || is_html_space(c))
                .unwrap_or(rest.len());
            out.push(&rest[..run]);
            at += run;
        }
    }
    let cut = out.cut;
    (out.text, cut)
}

struct Plain {
    text: String,
    cap: usize,
    cut: bool,
    space: bool,
}

impl Plain {
    fn push(&mut self, word: &str) {
        if std::mem::take(&mut self.space) && !self.text.is_empty() {
            self.append(" ");
        }
        self.append(word);
    }

    fn append(&mut self, piece: &str) {
        self.cut |= push_capped(&mut self.text, self.cap, piece);
    }
}

/// The length of the markup `rest` starts with (it starts with `<`): a comment, a tag, or a
/// script or style element whole; `None` for a `<` that starts no markup.
fn markup_length(rest: &str) -> Option<usize> {
    if let Some(comment) = rest.strip_prefix("<!--") {
        return Some(comment.find("-->").map_or(rest.len(), |end| 4 + end + 3));
    }
    let starts_tag = rest
        .as_bytes()
        .get(1)
        .is_some_and(|b| b.is_ascii_alphabetic() || matches!(b, b'/' | b'!' | b'?'));
    if !starts_tag {
        return None;
    }
    let end = rest.find('>').map_or(rest.len(), |end| end + 1);
    for raw in ["script", "style"] {
        if starts_with_ignore_case(&rest[1..], raw) {
            let closing = format!("</{raw}");
            return Some(
                end + find_ignore_case(&rest[end..], &closing).unwrap_or(rest.len() - end),
            );
        }
    }
    Some(end)
}

fn starts_with_ignore_case(text: &str, prefix: &str) -> bool {
    text.len() >= prefix.len()
        && text.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// Where `needle` (ASCII) first occurs in `text`, ignoring ASCII case; linear, since only the
/// `<` bytes are tried.
fn find_ignore_case(text: &str, needle: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(found) = bytes[from..].iter().position(|b| *b == b'<') {
        let at = from + found;
        if bytes.len() - at >= needle.len()
            && bytes[at..at + needle.len()].eq_ignore_ascii_case(needle.as_bytes())
        {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// The character an entity at the start of `rest` stands for, and its length; an `&` that
/// starts none is itself.
fn entity(rest: &str) -> (String, usize) {
    const NAMED: [(&str, &str); 7] = [
        ("&amp;", "&"),
        ("&lt;", "<"),
        ("&gt;", ">"),
        ("&quot;", "\""),
        ("&apos;", "'"),
        ("&#39;", "'"),
        ("&nbsp;", "\u{a0}"),
    ];
    for (name, value) in NAMED {
        if rest.starts_with(name) {
            return (value.to_owned(), name.len());
        }
    }
    // only a short look ahead: a page of `&#` without `;` must not be scanned to its end
    // from every one of them
    if let Some(number) = rest.strip_prefix("&#")
        && let Some(end) = number.bytes().take(9).position(|b| b == b';')
    {
        let digits = &number[..end];
        let code = match digits.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok(),
            None => digits.parse::<u32>().ok(),
        };
        if let Some(ch) = code.and_then(char::from_u32).filter(|c| *c != '\0') {
            return (ch.to_string(), 2 + end + 1);
        }
    }
    ("&".to_owned(), 1)
}
