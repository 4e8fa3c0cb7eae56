//! A project's page of a simple package index, as an upstream index answers it (PEP 691 JSON or
//! PEP 503 HTML) and as the proxy re-serves it (HTML, every file link pointing at the proxy).
//! Upstream answers are read as hostile: bounded in size by the caller, in files and in field
//! lengths here, JSON nesting bounded by the parser, HTML scanned once without a tree.

use std::collections::HashMap;
use std::fmt::Write as _;

use reqwest::Url;
use serde::Deserialize;

/// The media type of a PEP 691 JSON project page.
pub(crate) const JSON_TYPE: &str = "application/vnd.pypi.simple.v1+json";
/// Most files one project page may list.
pub(crate) const MAX_FILES: usize = 100_000;
/// Longest file name kept (longer names are not distribution files).
const MAX_FILENAME: usize = 255;
/// Longest URL, requires-python or yank reason kept.
const MAX_FIELD: usize = 4096;

/// One file a project page lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileLink {
    pub(crate) filename: String,
    /// Where upstream serves it (absolute).
    pub(crate) url: String,
    /// Lower-case hex; `None` when the index gives none (the file is then refused).
    pub(crate) sha256: Option<String>,
    pub(crate) requires_python: Option<String>,
    /// `Some` (with a reason, maybe empty) when yanked.
    pub(crate) yanked: Option<String>,
}

/// Why an upstream page could not be read. The message is for the session's code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PageError {
    #[error("its JSON could not be read: {0}")]
    Json(String),
    #[error("it lists more than {MAX_FILES} files")]
    TooManyFiles,
    #[error("it is not UTF-8 text")]
    NotText,
}

/// A project's name as PEP 503 normalises it (`Foo.Bar_baz` → `foo-bar-baz`); `None` for a
/// name no project can have.
pub(crate) fn normalize(name: &str) -> Option<String> {
    let valid = !name.is_empty()
        && name.len() <= 200
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    if !valid {
        return None;
    }
    let mut out = String::with_capacity(name.len());
    let mut in_separator = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !in_separator {
                out.push('-');
            }
            in_separator = true;
        } else {
            out.push(c.to_ascii_lowercase());
            in_separator = false;
        }
    }
    Some(out)
}

/// Whether `filename` is a plain file name a link may carry (no path, no control character).
pub(crate) fn safe_filename(filename: &str) -> bool {
    !filename.is_empty()
        && filename.len() <= MAX_FILENAME
        && !filename.starts_with('.')
        && filename
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'+' | b'!'))
}

/// Whether `hash` is 64 lower-case hex digits.
pub(crate) fn is_sha256(hash: &str) -> bool {
    hash.len() == 64 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The files of a page `body` fetched from `base`, read as JSON when `content_type` says so
/// and as HTML otherwise. Links with unusable names or URLs are skipped.
pub(crate) fn parse(
    body: &[u8],
    content_type: &str,
    base: &Url,
) -> Result<Vec<FileLink>, PageError> {
    let raw = if content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case(JSON_TYPE))
    {
        parse_json(body)?
    } else {
        parse_html(std::str::from_utf8(body).map_err(|_| PageError::NotText)?)?
    };
    Ok(raw
        .into_iter()
        .filter_map(|link| link.resolve(base))
        .collect())
}

/// A link as the page wrote it, before its URL is resolved and its fields checked.
#[derive(Debug, Default)]
struct RawLink {
    filename: String,
    href: String,
    sha256: Option<String>,
    requires_python: Option<String>,
    yanked: Option<String>,
}

impl RawLink {
    fn resolve(self, base: &Url) -> Option<FileLink> {
        let (href, fragment_hash) = match self.href.split_once('#') {
            Some((href, fragment)) => (
                href,
                fragment
                    .strip_prefix("sha256=")
                    .map(str::to_ascii_lowercase),
            ),
            None => (self.href.as_str(), None),
        };
        let url = base.join(href).ok()?;
        if !matches!(url.scheme(), "http" | "https") || url.as_str().len() > MAX_FIELD {
            return None;
        }
        let filename = if self.filename.is_empty() {
            url.path_segments()?.next_back()?.to_owned()
        } else {
            self.filename
        };
        if !safe_filename(&filename) {
            return None;
        }
        let sha256 = self
            .sha256
            .map(|h| h.to_ascii_lowercase())
            .or(fragment_hash)
            .filter(|h| is_sha256(h));
        let short = |field: Option<String>| field.filter(|v| v.len() <= MAX_FIELD);
        Some(FileLink {
            filename,
            url: url.to_string(),
            sha256,
            requires_python: short(self.requires_python).filter(|v| !v.is_empty()),
            yanked: self.yanked.map(|r| r.chars().take(MAX_FIELD).collect()),
        })
    }
}

#[derive(Deserialize)]
struct JsonPage {
    files: Vec<JsonFile>,
}

#[derive(Deserialize)]
struct JsonFile {
    filename: String,
    url: String,
    #[serde(default)]
    hashes: HashMap<String, String>,
    #[serde(default, rename = "requires-python")]
    requires_python: Option<String>,
    #[serde(default)]
    yanked: Option<Yanked>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Yanked {
    Flag(bool),
    Reason(String),
}

/// serde_json bounds nesting itself (128 levels): a deeper page is an error, not a crash.
fn parse_json(body: &[u8]) -> Result<Vec<RawLink>, PageError> {
    let page: JsonPage =
        serde_json::from_slice(body).map_err(|e| PageError::Json(e.to_string()))?;
    if page.files.len() > MAX_FILES {
        return Err(PageError::TooManyFiles);
    }
    Ok(page
        .files
        .into_iter()
        .map(|mut file| RawLink {
            sha256: file.hashes.remove("sha256"),
            filename: file.filename,
            href: file.url,
            requires_python: file.requires_python,
            yanked: match file.yanked {
                Some(Yanked::Flag(true)) => Some(String::new()),
                Some(Yanked::Reason(reason)) => Some(reason),
                Some(Yanked::Flag(false)) | None => None,
            },
        })
        .collect())
}

/// Every `<a …>text</a>` of the page, in one pass; anything else is skipped.
fn parse_html(page: &str) -> Result<Vec<RawLink>, PageError> {
    let mut links = Vec::new();
    let lower = page.to_ascii_lowercase();
    let mut at = 0;
    while let Some(found) = lower[at..].find("<a") {
        let start = at + found + 2;
        at = start;
        if !lower[start..].starts_with(|c: char| c.is_ascii_whitespace()) {
            continue;
        }
        let Some(end) = tag_end(&page[start..]) else {
            break;
        };
        let attributes = attributes(&page[start..start + end]);
        at = start + end + 1;
        let text_end = lower[at..].find("</a").map_or(page.len(), |i| at + i);
        let text = decode(page[at..text_end].trim());
        at = text_end;
        let Some(href) = attributes.get("href") else {
            continue;
        };
        if links.len() == MAX_FILES {
            return Err(PageError::TooManyFiles);
        }
        links.push(RawLink {
            filename: text,
            href: href.clone(),
            sha256: None,
            requires_python: attributes.get("data-requires-python").cloned(),
            yanked: attributes.get("data-yanked").cloned(),
        });
    }
    Ok(links)
}

/// Where a tag's `>` is, outside quoted attribute values.
fn tag_end(tag: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in tag.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '>') => return Some(i),
            _ => {}
        }
    }
    None
}

/// A tag's attributes, names lower-cased, values decoded (a bare name has an empty value).
fn attributes(tag: &str) -> HashMap<String, String> {
    let mut found = HashMap::new();
    let mut rest = tag.trim_start();
    while !rest.is_empty() {
        let name_end = rest
            .find(|c: char| c.is_ascii_whitespace() || c == '=' || c == '/')
            .unwrap_or(rest.len());
        let name = rest[..name_end].to_ascii_lowercase();
        rest = rest[name_end..].trim_start();
        let mut value = String::new();
        if let Some(after) = rest.strip_prefix('=') {
            let after = after.trim_start();
            let (raw, next) = match after.chars().next() {
                Some(q @ ('"' | '\'')) => {
                    let body = &after[1..];
                    let close = body.find(q).unwrap_or(body.len());
                    (&body[..close], body.get(close + 1..).unwrap_or(""))
                }
                _ => {
                    let close = after
                        .find(|c: char| c.is_ascii_whitespace())
                        .unwrap_or(after.len());
                    (&after[..close], &after[close..])
                }
            };
            value = decode(raw);
            rest = next.trim_start();
        } else if name.is_empty() {
            // a stray '/' or '='
            rest = rest.get(1..).unwrap_or("").trim_start();
            continue;
        }
        if !name.is_empty() && value.len() <= MAX_FIELD {
            found.entry(name).or_insert(value);
        }
    }
    found
}

/// `s` with HTML's character references decoded (the named ones an index writes, and numeric
/// ones); anything else is kept as written.
fn decode(s: &str) -> String {
    if !s.contains('&') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let reference = rest
            .get(1..)
            .and_then(|r| r.find(';').filter(|&i| i <= 10).map(|i| &r[..i]));
        let decoded = reference.and_then(|name| match name {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => name
                .strip_prefix("#x")
                .or_else(|| name.strip_prefix("#X"))
                .map_or_else(
                    || name.strip_prefix('#').and_then(|d| d.parse().ok()),
                    |h| u32::from_str_radix(h, 16).ok(),
                )
                .and_then(char::from_u32),
        });
        match (reference, decoded) {
            (Some(name), Some(c)) => {
                out.push(c);
                rest = &rest[name.len() + 2..];
            }
            _ => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `s` safe inside a double-quoted attribute or as text.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The page the proxy serves for `project`: each file linked at `files_base/<sha256>/<name>`
/// (a file without a hash at `files_base/unchecked/<name>`, which is refused).
pub(crate) fn render(project: &str, files: &[FileLink], files_base: &str) -> String {
    let mut page = format!(
        "<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.0\">\
         <title>Links for {0}</title></head><body><h1>Links for {0}</h1>\n",
        escape(project)
    );
    for file in files {
        let href = match &file.sha256 {
            Some(sha) => format!("{files_base}/{sha}/{}#sha256={sha}", file.filename),
            None => format!("{files_base}/unchecked/{}", file.filename),
        };
        let _ = write!(page, "<a href=\"{}\"", escape(&href));
        if let Some(requires) = &file.requires_python {
            let _ = write!(page, " data-requires-python=\"{}\"", escape(requires));
        }
        if let Some(reason) = &file.yanked {
            let _ = write!(page, " data-yanked=\"{}\"", escape(reason));
        }
        let _ = writeln!(page, ">{}</a><br>", escape(&file.filename));
    }
    page.push_str("</body></html>\n");
    page
}

#[cfg(test)]
#[path = "page_tests.rs"]
mod tests;
