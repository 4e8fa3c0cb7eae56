//! Redaction: every form of a used secret's value that code is likely to print (as is, base64,
//! hex, URL-encoded) is replaced by `[REDACTED:NAME]`, with one multi-pattern automaton
//! (Aho-Corasick) over the whole text rather than a `replace` per pattern.

use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use toolgate_domain::SecretName;
use zeroize::Zeroizing;

/// Values shorter than this are not redacted: a one- or two-character value would blank out
/// ordinary text, and cannot be kept secret by redaction anyway.
pub const MIN_REDACTED_BYTES: usize = 3;

/// Texts up to this size are first searched pattern by pattern (cheap, and almost always
/// empty-handed); the automaton, whose construction costs tens of microseconds, is built only
/// for larger texts or when a value is found.
const QUICK_SCAN_BYTES: usize = 16 * 1024;

/// A stream whose values have a form longer than this is shown only when it ends: what is
/// held back for a split value, and scanned again with every piece, grows with the longest
/// form, so a 64 KiB value would make a stream of small pieces quadratic.
pub const STREAM_LONGEST_FORM: usize = 4096;

/// Comparisons a piece of a stream may spend finding the shortest tail to hold back: this
/// many, and [`HOLD_BACK_SEARCH_PER_BYTE`] for each of its bytes. Past that the tail is held
/// from where the search stopped (more is held, never less), so a value and a text made to
/// agree at every offset keep the work linear in the stream.
const HOLD_BACK_SEARCH: usize = 4096;
/// See [`HOLD_BACK_SEARCH`].
const HOLD_BACK_SEARCH_PER_BYTE: usize = 64;

/// Replaces the values of a call's secrets in text.
pub struct Redactor {
    patterns: Vec<Zeroizing<Vec<u8>>>,
    automaton: OnceLock<Option<AhoCorasick>>,
    replacements: Vec<String>,
    longest: usize,
    /// Bytes some form begins with: a tail starting with any other byte begins no value.
    first_bytes: [bool; 256],
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("patterns", &self.replacements.len())
            .finish_non_exhaustive()
    }
}

impl Redactor {
    /// A redactor for `secrets` (name, value).
    pub fn new<'a>(secrets: impl IntoIterator<Item = (&'a SecretName, &'a [u8])>) -> Self {
        let mut patterns: Vec<Zeroizing<Vec<u8>>> = Vec::new();
        let mut replacements = Vec::new();
        for (name, value) in secrets {
            if value.len() < MIN_REDACTED_BYTES {
                continue;
            }
            for form in forms(value) {
                if !patterns.iter().any(|known| **known == *form) {
                    patterns.push(form);
                    replacements.push(format!("[REDACTED:{name}]"));
                }
            }
        }
        let longest = patterns.iter().map(|p| p.len()).max().unwrap_or(0);
        let mut first_bytes = [false; 256];
        for pattern in &patterns {
            if let Some(first) = pattern.first() {
                first_bytes[usize::from(*first)] = true;
            }
        }
        Self {
            patterns,
            automaton: OnceLock::new(),
            replacements,
            longest,
            first_bytes,
        }
    }

    /// The automaton over every pattern, built on first use.
    fn automaton(&self) -> Option<&AhoCorasick> {
        self.automaton
            .get_or_init(|| {
                // leftmost-longest: a value that contains another secret's value is hidden whole
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .kind(Some(AhoCorasickKind::ContiguousNFA))
                    .build(self.patterns.iter().map(|p| p.as_slice()))
                    .ok()
            })
            .as_ref()
    }

    /// Whether `text` may hold a value: `false` only when it certainly holds none.
    fn may_hold_a_value(&self, text: &str) -> bool {
        if self.patterns.is_empty() {
            return false;
        }
        text.len() > QUICK_SCAN_BYTES
            || self
                .patterns
                .iter()
                .any(|p| memchr::memmem::find(text.as_bytes(), p).is_some())
    }

    /// Whether there is anything to redact.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// `text` with every form of every value replaced.
    pub fn redact(&self, text: &str) -> String {
        if !self.may_hold_a_value(text) {
            return text.to_owned();
        }
        match self.automaton() {
            Some(automaton) => automaton.replace_all(text, &self.replacements),
            None => text.to_owned(),
        }
    }

    /// Redacts `text` in place, returning whether anything was replaced.
    pub fn redact_in_place(&self, text: &mut String) -> bool {
        if !self.may_hold_a_value(text) {
            return false;
        }
        match self.automaton() {
            Some(automaton) if automaton.is_match(text.as_str()) => {
                *text = automaton.replace_all(text, &self.replacements);
                true
            }
            _ => false,
        }
    }

    /// A redactor for one stream whose text arrives in pieces.
    pub fn stream(&self) -> StreamRedactor<'_> {
        StreamRedactor {
            redactor: self,
            held: String::new(),
        }
    }
}

/// Redacts a stream that arrives in pieces: a value split across two writes is still found,
/// because the tail that could begin a value is held back until the next piece (or the end).
pub struct StreamRedactor<'a> {
    redactor: &'a Redactor,
    held: String,
}

impl StreamRedactor<'_> {
    /// What of the stream so far can be shown, redacted.
    pub fn push(&mut self, piece: &str) -> String {
        if self.redactor.is_empty() {
            return piece.to_owned();
        }
        self.held.push_str(piece);
        if self.redactor.longest > STREAM_LONGEST_FORM {
            // held whole until the end, where it is redacted once
            return String::new();
        }
        // A value that starts before `safe` ends inside what is held, so every match starting
        // there is known whole; from `safe` on a value may still continue in the next piece.
        let safe = self.unfinished_start(piece.len());
        if !self.redactor.may_hold_a_value(&self.held) {
            // nothing to replace: the automaton (costly to build) is not needed
            let mut end = safe;
            while !self.held.is_char_boundary(end) {
                end -= 1;
            }
            return self.held.drain(..end).collect();
        }
        let Some(automaton) = self.redactor.automaton() else {
            return std::mem::take(&mut self.held);
        };
        let mut shown = String::with_capacity(self.held.len());
        let mut at = 0;
        for found in automaton.find_iter(self.held.as_str()) {
            if found.start() >= safe {
                break;
            }
            shown.push_str(&self.held[at..found.start()]);
            shown.push_str(&self.redactor.replacements[found.pattern().as_usize()]);
            at = found.end();
        }
        let mut end = safe.max(at);
        while !self.held.is_char_boundary(end) {
            end -= 1;
        }
        let end = end.max(at);
        shown.push_str(&self.held[at..end]);
        self.held.drain(..end);
        shown
    }

    /// Where the held text's longest tail that begins some value starts (its length when
    /// none does): only that much must wait for the next piece. The search is bounded by
    /// [`HOLD_BACK_SEARCH`]; if it runs out, the tail is held from where it stopped.
    fn unfinished_start(&self, piece: usize) -> usize {
        let held = self.held.as_bytes();
        let first = held.len().saturating_sub(self.redactor.longest - 1);
        let mut budget = HOLD_BACK_SEARCH + HOLD_BACK_SEARCH_PER_BYTE * piece;
        for start in first..held.len() {
            if !self.redactor.first_bytes[usize::from(held[start])] {
                continue;
            }
            let tail = &held[start..];
            for pattern in &self.redactor.patterns {
                // only a longer form can still continue past the end of what is held
                if pattern.len() <= tail.len() {
                    continue;
                }
                // charged what the comparison may read, so a value and a text made to agree
                // at every offset cannot make this quadratic
                let cost = if pattern.first() == tail.first() {
                    tail.len()
                } else {
                    1
                };
                if cost > budget {
                    return start;
                }
                budget -= cost;
                if pattern.starts_with(tail) {
                    return start;
                }
            }
        }
        held.len()
    }

    /// The rest of the stream, redacted.
    pub fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.held);
        self.redactor.redact(&rest)
    }
}

/// The forms a value is redacted in.
fn forms(value: &[u8]) -> Vec<Zeroizing<Vec<u8>>> {
    let mut forms = vec![Zeroizing::new(value.to_vec())];
    for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
        forms.push(Zeroizing::new(engine.encode(value).into_bytes()));
    }
    forms.push(Zeroizing::new(hex::encode(value).into_bytes()));
    forms.push(Zeroizing::new(hex::encode_upper(value).into_bytes()));
    forms.push(Zeroizing::new(
        url_encoded(value, false, false).into_bytes(),
    ));
    forms.push(Zeroizing::new(url_encoded(value, true, false).into_bytes()));
    // Python's `urllib.parse.quote(v)` keeps `/` unless told otherwise
    forms.push(Zeroizing::new(url_encoded(value, false, true).into_bytes()));
    forms
}

/// Percent-encoding of everything but unreserved characters (`+` for spaces with `plus`, `/`
/// left as it is with `keep_slash`).
fn url_encoded(value: &[u8], plus: bool, keep_slash: bool) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for &byte in value {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(byte));
            }
            b'/' if keep_slash => out.push('/'),
            b' ' if plus => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
#[path = "redact_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "redact_proptests.rs"]
mod proptests;
