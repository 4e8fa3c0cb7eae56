//! html5ever's tokens as Markdown. No tree is built: open elements that change the output are
//! kept on a bounded stack, an end tag is matched within the top [`END_TAG_SEARCH`] of them, and
//! everything else flows through, so work and memory stay linear in the page whatever its
//! nesting (the tree builder's reconstruction of formatting elements is quadratic or worse on
//! hostile pages, and a recursive walk overflows the stack).

use std::cell::RefCell;

use html5ever::tokenizer::{Tag, TagKind, Token, TokenSink, TokenSinkResult};
use html5ever::{Attribute, LocalName};

use super::elements::{attribute, closes_paragraph, is_void, link_target, raw_kind};
use super::writer::{Level, Writer, is_html_space};

/// Elements kept open at most; deeper start tags are counted, not kept.
pub(super) const MAX_OPEN: usize = 256;
/// How far down the stack an end tag looks for its element.
const END_TAG_SEARCH: usize = 64;
/// The longest image description written.
const MAX_ALT_CHARS: usize = 256;
/// Columns of a table's header separator at most.
const MAX_SEPARATOR_COLUMNS: usize = 64;

/// What an open element does to the output.
#[derive(Debug)]
enum Role {
    /// `**`, `_`, `~~` or `` ` `` around its text
    Inline(&'static str),
    /// `[text](href)`
    Link(String),
    /// a block followed by `n` line breaks
    Block(u8),
    /// `## ` and one line
    Heading,
    /// `> ` on each line
    Quote,
    /// a list: ordered with its next number, or not
    List(Option<u64>),
    /// a list item
    Item,
    /// a fenced code block
    Pre,
    /// a table, with how many rows it has written
    Table(usize),
    /// a table row, with its cells so far
    Row(usize),
    /// a table cell
    Cell,
    /// an element whose content is not shown (scripts, styles, the head, …)
    Skip,
}

#[derive(Debug)]
struct Frame {
    name: LocalName,
    role: Role,
    /// An inline marker or link bracket is written with the first text inside it, so that an
    /// empty element leaves nothing behind.
    opened: bool,
}

/// The converter's state.
#[derive(Debug)]
struct State {
    writer: Writer,
    open: Vec<Frame>,
    /// Start tags past [`MAX_OPEN`] not kept; end tags that match nothing use them up.
    overflow: usize,
    /// Inline markers and link brackets waiting for text.
    unopened: usize,
    skipping: usize,
    code: usize,
    /// The newline right after `<pre>` is not content (HTML's rule).
    pre_fresh: bool,
}

/// The token sink.
#[derive(Debug)]
pub(super) struct MarkdownSink {
    state: RefCell<State>,
}

impl MarkdownSink {
    /// A converter writing at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            state: RefCell::new(State {
                writer: Writer::new(cap),
                open: Vec::new(),
                overflow: 0,
                unopened: 0,
                skipping: 0,
                code: 0,
                pre_fresh: false,
            }),
        }
    }

    /// Whether the output reached its cap (feeding more is pointless).
    pub fn is_cut(&self) -> bool {
        self.state.borrow().writer.is_cut()
    }

    /// The Markdown and whether it was cut.
    pub fn finish(self) -> (String, bool) {
        let mut state = self.state.into_inner();
        while !state.open.is_empty() {
            state.pop();
        }
        state.writer.finish()
    }
}

impl TokenSink for MarkdownSink {
    type Handle = ();

    fn process_token(&self, token: Token, _line: u64) -> TokenSinkResult<()> {
        let mut state = self.state.borrow_mut();
        match token {
            Token::TagToken(tag) => match tag.kind {
                TagKind::StartTag => return state.start(&tag),
                TagKind::EndTag => state.end(&tag.name),
            },
            Token::CharacterTokens(text) => state.text(&text),
            _ => {}
        }
        TokenSinkResult::Continue
    }
}

impl State {
    fn start(&mut self, tag: &Tag) -> TokenSinkResult<()> {
        let name = &*tag.name;
        let raw = raw_kind(name);
        if name == "body" {
            // the head ends here even when its end tag is missing
            self.close_up_to("head", MAX_OPEN);
        }
        if self.skipping > 0 {
            // inside a head, svg or select nothing shows, but elements nest there too
            if !(is_void(name) || tag.self_closing && raw.is_none()) {
                self.push(tag, Role::Skip);
            }
            return if name == "plaintext" {
                TokenSinkResult::Continue
            } else {
                raw.unwrap_or(TokenSinkResult::Continue)
            };
        }
        if closes_paragraph(name) {
            self.close_top("p");
        }
        match name {
            "br" => self.writer.line_break(),
            "hr" => {
                self.writer.block(2);
                self.writer.markup("---");
                self.writer.block(2);
            }
            "img" => self.image(&tag.attrs),
            // only foreign elements close themselves; `<script/>` still opens a script
            "svg" | "math" if tag.self_closing => {}
            "script" | "style" | "noscript" | "template" | "head" | "title" | "svg" | "math"
            | "iframe" | "object" | "canvas" | "select" | "textarea" | "noembed" | "noframes"
            | "audio" | "video" => self.push(tag, Role::Skip),
            "b" | "strong" => self.inline(tag, "**"),
            "i" | "em" => self.inline(tag, "_"),
            "s" | "del" | "strike" => self.inline(tag, "~~"),
            "code" | "kbd" | "samp" | "tt" if !self.writer.is_preformatted() => {
                self.inline(tag, "`");
            }
            "a" => {
                self.close_up_to("a", END_TAG_SEARCH);
                if let Some(href) = link_target(attribute(&tag.attrs, "href")) {
                    self.push(tag, Role::Link(href));
                }
            }
            "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => {
                for heading in ["h1", "h2", "h3", "h4", "h5", "h6"] {
                    self.close_top(heading);
                }
                let level = usize::from(name.as_bytes()[1] - b'0');
                self.writer.block(2);
                self.writer
                    .start_marked_line(format!("{} ", "#".repeat(level)), false);
                self.writer.set_single_line(true);
                self.push(tag, Role::Heading);
            }
            "blockquote" => {
                self.writer.block(2);
                self.writer.push_level(Level::Quote);
                self.push(tag, Role::Quote);
            }
            "ul" | "ol" | "menu" => {
                let nested = self
                    .open
                    .iter()
                    .rev()
                    .take(END_TAG_SEARCH)
                    .any(|f| matches!(f.role, Role::Item));
                self.writer.block(if nested { 1 } else { 2 });
                let first = attribute(&tag.attrs, "start")
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .unwrap_or(1);
                let numbering = (name == "ol").then_some(first);
                self.push(tag, Role::List(numbering));
            }
            "li" => self.item(tag),
            "pre" | "listing" | "plaintext" => {
                self.writer.block(2);
                self.writer.markup("```");
                self.writer.set_preformatted(true);
                self.writer.line_break();
                self.pre_fresh = true;
                self.push(tag, Role::Pre);
            }
            "table" => {
                self.writer.block(2);
                self.push(tag, Role::Table(0));
            }
            "tr" => {
                self.close_within("tr", &["table"]);
                self.writer.start_marked_line(String::new(), false);
                self.writer.set_single_line(true);
                self.push(tag, Role::Row(0));
            }
            "td" | "th" => {
                self.close_within("td", &["tr", "table"]);
                self.close_within("th", &["tr", "table"]);
                if let Some(Role::Row(cells)) = self.innermost(|r| matches!(r, Role::Row(_))) {
                    *cells += 1;
                }
                self.writer.markup("| ");
                self.push(tag, Role::Cell);
            }
            "p" => {
                self.writer.block(2);
                self.push(tag, Role::Block(2));
            }
            "dt" | "dd" => {
                self.close_top("dt");
                self.close_top("dd");
                self.writer.block(1);
                self.push(tag, Role::Block(1));
            }
            "div" | "section" | "article" | "header" | "footer" | "main" | "nav" | "aside"
            | "figure" | "figcaption" | "form" | "fieldset" | "details" | "summary" | "address"
            | "dl" | "caption" | "center" | "legend" => {
                self.writer.block(1);
                self.push(tag, Role::Block(1));
            }
            _ => {}
        }
        raw.unwrap_or(TokenSinkResult::Continue)
    }

    /// Keeps `tag` open with `role`, or counts it when too many are open.
    fn push(&mut self, tag: &Tag, role: Role) {
        match role {
            Role::Skip => self.skipping += 1,
            Role::Inline(marker) => {
                self.unopened += 1;
                if marker == "`" {
                    self.code += 1;
                }
            }
            Role::Link(_) => self.unopened += 1,
            _ => {}
        }
        let frame = Frame {
            name: tag.name.clone(),
            role,
            opened: false,
        };
        if self.open.len() >= MAX_OPEN {
            self.overflow += 1;
            // no end tag will find it: what it started ends at once
            self.undo(frame);
            return;
        }
        self.open.push(frame);
    }

    /// An inline marker, unless the same one is already open (`**` in `**` adds nothing).
    fn inline(&mut self, tag: &Tag, marker: &'static str) {
        let already = self
            .open
            .iter()
            .rev()
            .take(END_TAG_SEARCH)
            .any(|f| matches!(f.role, Role::Inline(m) if m == marker));
        if !already {
            self.push(tag, Role::Inline(marker));
        }
    }

    fn item(&mut self, tag: &Tag) {
        self.close_within("li", &["ul", "ol", "menu"]);
        let marker = match self.innermost(|r| matches!(r, Role::List(_))) {
            Some(Role::List(Some(next))) => {
                let marker = format!("{next}. ");
                *next = next.saturating_add(1);
                marker
            }
            _ => "- ".to_owned(),
        };
        let width = marker.len();
        self.writer.start_marked_line(marker, true);
        self.writer.push_level(Level::Item(width));
        self.push(tag, Role::Item);
    }

    fn image(&mut self, attrs: &[Attribute]) {
        let alt: String = attribute(attrs, "alt")
            .unwrap_or_default()
            .chars()
            .take(MAX_ALT_CHARS)
            .filter(|c| !matches!(c, '[' | ']') && !c.is_control())
            .collect();
        let src = link_target(attribute(attrs, "src"));
        if alt.trim().is_empty() && src.is_none() {
            return;
        }
        self.open_pending();
        self.writer
            .markup(&format!("![{}]({})", alt.trim(), src.unwrap_or_default()));
    }

    fn text(&mut self, text: &str) {
        if self.skipping > 0 {
            return;
        }
        let text = if std::mem::take(&mut self.pre_fresh) {
            text.strip_prefix('\n').unwrap_or(text)
        } else {
            text
        };
        let preformatted = self.writer.is_preformatted();
        let words = text.trim_start_matches(is_html_space);
        if words.is_empty() && !preformatted {
            if !text.is_empty() {
                self.writer.text(" ", true);
            }
            return;
        }
        if !preformatted && words.len() < text.len() {
            // the space goes before a marker that opens here, not inside it
            self.writer.text(" ", true);
        }
        self.open_pending();
        let shown = if preformatted { text } else { words };
        self.writer.text(shown, self.code > 0);
    }

    /// Writes the markers of inline elements still waiting for text, outermost first.
    fn open_pending(&mut self) {
        if self.unopened == 0 {
            return;
        }
        let mut waiting = Vec::with_capacity(self.unopened);
        for (at, frame) in self.open.iter().enumerate().rev() {
            if waiting.len() == self.unopened {
                break;
            }
            if matches!(frame.role, Role::Inline(_) | Role::Link(_)) && !frame.opened {
                waiting.push(at);
            }
        }
        for at in waiting.into_iter().rev() {
            let frame = &mut self.open[at];
            frame.opened = true;
            let marker = match frame.role {
                Role::Inline(marker) => marker,
                _ => "[",
            };
            self.writer.markup(marker);
        }
        self.unopened = 0;
    }

    fn end(&mut self, name: &LocalName) {
        if &**name == "br" && self.skipping == 0 {
            self.writer.line_break();
            return;
        }
        if !self.close_up_to(name, END_TAG_SEARCH) && self.overflow > 0 {
            self.overflow -= 1;
        }
    }

    /// The role of the innermost open element `wanted` picks, within the top
    /// [`END_TAG_SEARCH`].
    fn innermost(&mut self, wanted: impl Fn(&Role) -> bool) -> Option<&mut Role> {
        self.open
            .iter_mut()
            .rev()
            .take(END_TAG_SEARCH)
            .map(|frame| &mut frame.role)
            .find(|role| wanted(role))
    }

    /// Closes the element `name` if it is the innermost one.
    fn close_top(&mut self, name: &str) {
        if self.open.last().is_some_and(|f| &*f.name == name) {
            self.pop();
        }
    }

    /// Closes an open `name` found before any of the `boundaries` (an item within its list).
    fn close_within(&mut self, name: &str, boundaries: &[&str]) {
        let found = self
            .open
            .iter()
            .rev()
            .take(END_TAG_SEARCH)
            .take_while(|f| !boundaries.contains(&&*f.name))
            .position(|f| &*f.name == name);
        if let Some(depth) = found {
            for _ in 0..=depth {
                self.pop();
            }
        }
    }

    /// Closes the innermost open `name` within the top `search` elements, and everything
    /// inside it; whether there was one.
    fn close_up_to(&mut self, name: &str, search: usize) -> bool {
        let found = self
            .open
            .iter()
            .rev()
            .take(search)
            .position(|f| &*f.name == name);
        match found {
            Some(depth) => {
                for _ in 0..=depth {
                    self.pop();
                }
                true
            }
            None => false,
        }
    }

    fn pop(&mut self) {
        if let Some(frame) = self.open.pop() {
            self.undo(frame);
        }
    }

    /// Ends what an element started.
    fn undo(&mut self, frame: Frame) {
        let writer = &mut self.writer;
        match frame.role {
            Role::Inline(marker) => {
                if frame.opened {
                    writer.markup(marker);
                } else {
                    self.unopened = self.unopened.saturating_sub(1);
                }
                if marker == "`" {
                    self.code = self.code.saturating_sub(1);
                }
            }
            Role::Link(href) => {
                if frame.opened {
                    writer.markup(&format!("]({href})"));
                } else {
                    self.unopened = self.unopened.saturating_sub(1);
                }
            }
            Role::Block(newlines) => writer.block(newlines),
            Role::Heading => {
                writer.set_single_line(false);
                writer.block(2);
            }
            Role::Quote => {
                writer.pop_level();
                writer.block(2);
            }
            Role::List(_) => writer.block(1),
            Role::Item => {
                writer.pop_level();
                writer.block(1);
            }
            Role::Pre => {
                writer.set_preformatted(false);
                writer.line_break();
                writer.markup("```");
                writer.block(2);
            }
            Role::Table(_) => writer.block(2),
            Role::Row(cells) => {
                if cells > 0 {
                    writer.text(" ", true);
                    writer.markup("|");
                }
                writer.set_single_line(false);
                writer.block(1);
                self.after_row(cells);
            }
            Role::Cell => writer.text(" ", true),
            Role::Skip => self.skipping = self.skipping.saturating_sub(1),
        }
    }

    /// After a table's first row, the separator that makes it a Markdown table.
    fn after_row(&mut self, cells: usize) {
        let Some(Role::Table(rows)) = self.innermost(|r| matches!(r, Role::Table(_))) else {
            return;
        };
        *rows += 1;
        if *rows == 1 && cells > 0 {
            let separator = "| --- ".repeat(cells.min(MAX_SEPARATOR_COLUMNS));
            self.writer.line_break();
            self.writer.markup(&format!("{separator}|"));
            self.writer.block(1);
        }
    }
}
