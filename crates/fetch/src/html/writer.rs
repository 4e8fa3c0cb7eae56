//! Markdown written line by line, with every amplification bounded: the line prefix of
//! nested quotes and list items stops growing after [`MAX_PREFIX_LEVELS`], and everything
//! goes through one cap on the output, after which the rest is dropped and `cut` is set.

/// Quote and list levels that still indent; deeper ones write as the deepest.
pub(super) const MAX_PREFIX_LEVELS: usize = 8;

/// One level of the line prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Level {
    /// `> ` on every line
    Quote,
    /// a list item's continuation indent (its marker's width)
    Item(usize),
}

/// The Markdown being written.
#[derive(Debug)]
pub(super) struct Writer {
    out: String,
    cap: usize,
    cut: bool,
    levels: Vec<Level>,
    /// The prefix of the current levels, rebuilt when they change (at most a few dozen bytes).
    prefix: String,
    /// Newlines wanted before the next content (0, 1 or 2).
    pending_newlines: u8,
    pending_space: bool,
    /// Written at the start of the next line, after the prefix; `true` when it stands in for
    /// the innermost list item's indent (the item's own marker).
    marker: Option<(String, bool)>,
    at_line_start: bool,
    /// A line was just started without a marker of ours: a page's `#` or `-` there would read
    /// as Markdown structure, so it is escaped.
    bare_line: bool,
    /// Inside `<pre>`: text verbatim, newlines kept.
    preformatted: usize,
    /// Inside an inline context where block breaks become spaces (headings, table cells).
    single_line: usize,
}

impl Writer {
    /// A writer that stops after `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            out: String::new(),
            cap,
            cut: false,
            levels: Vec::new(),
            prefix: String::new(),
            pending_newlines: 0,
            pending_space: false,
            marker: None,
            at_line_start: true,
            bare_line: false,
            preformatted: 0,
            single_line: 0,
        }
    }

    /// Whether the cap was reached (the rest of the page is dropped).
    pub fn is_cut(&self) -> bool {
        self.cut
    }

    /// The Markdown, without trailing blank lines.
    pub fn finish(mut self) -> (String, bool) {
        let end = self.out.trim_end().len();
        self.out.truncate(end);
        (self.out, self.cut)
    }

    /// Ends the current block: the next content starts after `newlines` line breaks (a blank
    /// line for 2). In a single-line context a block break is a space.
    pub fn block(&mut self, newlines: u8) {
        if self.single_line > 0 {
            self.pending_space = true;
            return;
        }
        if self.out.is_empty() {
            return;
        }
        self.pending_newlines = self.pending_newlines.max(newlines.min(2));
        self.pending_space = false;
    }

    /// A hard line break (`<br>`).
    pub fn line_break(&mut self) {
        if self.single_line > 0 {
            self.pending_space = true;
        } else if self.preformatted > 0 {
            self.raw_newline();
        } else {
            self.pending_newlines = self.pending_newlines.max(1);
            self.pending_space = false;
        }
    }

    /// Starts a line with `marker` (a heading's `## `, a row's `| `); `item` when it is a list
    /// item's marker, written in place of that item's indent (push its level right after).
    pub fn start_marked_line(&mut self, marker: String, item: bool) {
        if self.single_line > 0 {
            self.pending_space = true;
            return;
        }
        if !self.out.is_empty() {
            self.pending_newlines = self.pending_newlines.max(1);
        }
        self.marker = Some((marker, item));
        self.pending_space = false;
    }

    /// Opens a quote or list-item level.
    pub fn push_level(&mut self, level: Level) {
        self.levels.push(level);
        self.rebuild_prefix();
    }

    /// Closes the innermost level.
    pub fn pop_level(&mut self) {
        self.levels.pop();
        self.rebuild_prefix();
    }

    /// Enters or leaves preformatted text.
    pub fn set_preformatted(&mut self, entering: bool) {
        if entering {
            self.preformatted += 1;
        } else {
            self.preformatted = self.preformatted.saturating_sub(1);
        }
    }

    /// Whether text is preformatted here.
    pub fn is_preformatted(&self) -> bool {
        self.preformatted > 0
    }

    /// Enters or leaves a single-line context.
    pub fn set_single_line(&mut self, entering: bool) {
        if entering {
            self.single_line += 1;
        } else {
            self.single_line = self.single_line.saturating_sub(1);
        }
    }

    fn rebuild_prefix(&mut self) {
        self.prefix.clear();
        for level in self.levels.iter().take(MAX_PREFIX_LEVELS) {
            match level {
                Level::Quote => self.prefix.push_str("> "),
                Level::Item(width) => self.prefix.extend(std::iter::repeat_n(' ', *width)),
            }
        }
    }

    /// Writes markup (a marker such as `**` or `](url)`) as it is.
    pub fn markup(&mut self, text: &str) {
        self.flush_pending();
        self.bare_line = false;
        self.push(text);
    }

    /// Writes a page's text: whitespace collapsed and Markdown's specials escaped, or as it is
    /// inside `<pre>` (`verbatim` also for inline code).
    pub fn text(&mut self, text: &str, verbatim: bool) {
        if self.preformatted > 0 {
            let mut lines = text.split('\n');
            if let Some(first) = lines.next() {
                self.flush_pending();
                self.push(first);
            }
            for line in lines {
                self.raw_newline();
                self.push(line);
            }
            return;
        }
        for (n, word) in text.split(is_html_space).enumerate() {
            if n > 0 {
                // a run of whitespace between (or after) words is one space
                self.pending_space = true;
            }
            if word.is_empty() {
                continue;
            }
            self.flush_pending();
            let bare_line = std::mem::take(&mut self.bare_line);
            if verbatim {
                self.push(word);
            } else {
                self.escaped(word, bare_line);
            }
        }
    }

    /// Breaks the line inside `<pre>`, keeping the prefix.
    fn raw_newline(&mut self) {
        self.push("\n");
        let prefix = std::mem::take(&mut self.prefix);
        self.push(&prefix);
        self.prefix = prefix;
        self.at_line_start = false;
    }

    /// Writes `word` with Markdown's specials escaped (and a line's leading `#`, `>`, `-`, `+`,
    /// `=` when `line_start`).
    fn escaped(&mut self, word: &str, line_start: bool) {
        let mut start = 0;
        for (at, ch) in word.char_indices() {
            let special = matches!(ch, '\\' | '*' | '_' | '`' | '[' | ']')
                || (at == 0 && line_start && matches!(ch, '#' | '>' | '-' | '+' | '='));
            if special {
                self.push(&word[start..at]);
                self.push("\\");
                start = at;
            }
        }
        self.push(&word[start..]);
    }

    /// Writes what is pending before content: line breaks and the prefix (and a marker), or a
    /// space.
    fn flush_pending(&mut self) {
        if self.pending_newlines > 0 {
            let blank = self.prefix.trim_end().to_owned();
            for n in 0..self.pending_newlines {
                self.push("\n");
                if n + 1 < self.pending_newlines {
                    self.push(&blank);
                }
            }
            self.pending_newlines = 0;
            self.at_line_start = true;
        }
        if self.at_line_start {
            self.bare_line = self.marker.is_none();
            self.write_prefix();
            self.at_line_start = false;
            self.pending_space = false;
            return;
        }
        if self.pending_space {
            self.push(" ");
            self.pending_space = false;
        }
    }

    /// The prefix, with the innermost item's indent replaced by a pending marker.
    fn write_prefix(&mut self) {
        let prefix = std::mem::take(&mut self.prefix);
        match self.marker.take() {
            Some((marker, item)) => {
                let indent = match self.levels.last() {
                    Some(Level::Item(width)) if item && self.levels.len() <= MAX_PREFIX_LEVELS => {
                        *width
                    }
                    _ => 0,
                };
                self.push(&prefix[..prefix.len() - indent]);
                self.push(&marker);
            }
            None => self.push(&prefix),
        }
        self.prefix = prefix;
    }

    /// The one place output grows: nothing past the cap.
    fn push(&mut self, text: &str) {
        if !self.cut {
            self.cut = push_capped(&mut self.out, self.cap, text);
        }
    }
}

/// Appends what of `text` fits in `cap` bytes of `out` (on a character boundary); whether
/// some of it did not fit.
pub(super) fn push_capped(out: &mut String, cap: usize, text: &str) -> bool {
    let room = cap.saturating_sub(out.len());
    if text.len() <= room {
        out.push_str(text);
        return false;
    }
    let mut end = room;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    out.push_str(&text[..end]);
    true
}

/// HTML's ASCII whitespace.
pub(super) fn is_html_space(ch: char) -> bool {
    matches!(ch, ' ' | '\t' | '\n' | '\r' | '\x0c')
}
