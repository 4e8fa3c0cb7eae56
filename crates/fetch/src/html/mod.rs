//! HTML as Markdown for a language model to read, for any page a tenant can serve: the work
//! is linear in the page and the output bounded, whatever its nesting (a page of 10^6 nested
//! elements is read like any other). html5ever's tokenizer reads the page in chunks (see
//! `sink` for why no tree is built); if it is still at work after the time given (its
//! duplicate-attribute check is quadratic in one tag's attributes), the page's text is shown
//! without markup instead.

mod elements;
mod plain;
mod sink;
mod writer;

use std::time::{Duration, Instant};

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::{BufferQueue, Tokenizer, TokenizerOpts};

use sink::MarkdownSink;

/// Bytes handed to the tokenizer at once: the time limit is checked between chunks.
const CHUNK_BYTES: usize = 32 * 1024;

/// How a page became text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted {
    /// The text.
    pub text: String,
    /// It reached `max_output` and the rest was dropped.
    pub cut: bool,
    /// The converter ran out of time: `text` is the page's text without markup.
    pub plain: bool,
}

/// `html` as Markdown of at most `max_output` bytes, converted within about `time`.
pub fn to_markdown(html: &str, max_output: usize, time: Duration) -> Converted {
    let started = Instant::now();
    let tokenizer = Tokenizer::new(MarkdownSink::new(max_output), TokenizerOpts::default());
    let queue = BufferQueue::default();
    let mut rest = html;
    while !rest.is_empty() {
        let mut end = rest.len().min(CHUNK_BYTES);
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (chunk, after) = rest.split_at(end);
        rest = after;
        queue.push_back(StrTendril::from_slice(chunk));
        // the sink never asks to stop for a script or an encoding, so this reads the chunk
        let _ = tokenizer.feed(&queue);
        if tokenizer.sink.is_cut() {
            break;
        }
        if started.elapsed() > time {
            let (text, cut) = plain::text(html, max_output);
            return Converted {
                text,
                cut,
                plain: true,
            };
        }
    }
    tokenizer.end();
    let (text, cut) = tokenizer.sink.finish();
    Converted {
        text,
        cut,
        plain: false,
    }
}

#[cfg(test)]
mod tests;
