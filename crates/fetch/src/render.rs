//! A body as a language model reads it best: HTML as Markdown, JSON pretty-printed, images as
//! images, other text as it is, and anything else summarised. Whatever a page holds, the work
//! is linear in its size and the text it becomes is at most [`max_text`] bytes.

use std::time::Duration;

use base64::Engine;
use toolgate_ports::fetch::PageContent;

/// The most time Markdown conversion may take before the page is shown as plain text.
const MARKDOWN_TIME: Duration = Duration::from_secs(5);

/// The most text a body of `bytes` becomes: Markdown and pretty JSON are rarely longer than
/// what they came from, but nesting can make them so.
pub fn max_text(bytes: usize) -> usize {
    2 * bytes + 64 * 1024
}

/// Renders `body` of type `content_type`.
pub fn render(content_type: &str, body: &[u8]) -> PageContent {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if mime == "text/html" || mime == "application/xhtml+xml" {
        let html = String::from_utf8_lossy(body);
        return html_as_markdown(&html);
    }
    if (mime == "application/json" || mime.ends_with("+json"))
        && let Some(pretty) = pretty_json(body)
    {
        return PageContent::Text {
            text: pretty,
            format: "json",
        };
    }
    if matches!(
        mime.as_str(),
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    ) {
        return PageContent::Image {
            data: base64::engine::general_purpose::STANDARD.encode(body),
            mime_type: mime,
        };
    }
    // JSON too deep or too long to pretty-print is still text
    let textual = mime.starts_with("text/")
        || mime == "application/json"
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
        || mime == "application/xml"
        || mime == "application/javascript";
    match std::str::from_utf8(body) {
        Ok(text) if textual || (mime.is_empty() && !text.contains('\0')) => PageContent::Text {
            text: text.to_owned(),
            format: "text",
        },
        _ if textual => PageContent::Text {
            text: String::from_utf8_lossy(body).into_owned(),
            format: "text",
        },
        _ => PageContent::Binary {
            summary: summary(&mime, body),
        },
    }
}

fn html_as_markdown(html: &str) -> PageContent {
    let converted = crate::html::to_markdown(html, max_text(html.len()), MARKDOWN_TIME);
    let mut text = converted.text;
    if converted.cut {
        text.push_str(&format!(
            "\n\n(the page's text was cut after {} bytes)",
            text.len()
        ));
    }
    PageContent::Text {
        text,
        format: if converted.plain { "text" } else { "markdown" },
    }
}

/// `body` pretty-printed, if it is JSON (nested at most serde_json's 128 levels) and its
/// pretty form fits [`max_text`]: indentation grows with depth, so a deep document could
/// otherwise grow a hundredfold.
fn pretty_json(body: &[u8]) -> Option<String> {
    let mut out = Capped {
        bytes: Vec::new(),
        cap: max_text(body.len()),
    };
    let mut reader = serde_json::Deserializer::from_slice(body);
    let mut writer = serde_json::Serializer::pretty(&mut out);
    serde_transcode::transcode(&mut reader, &mut writer).ok()?;
    reader.end().ok()?;
    String::from_utf8(out.bytes).ok()
}

/// A buffer that refuses to grow past its cap.
struct Capped {
    bytes: Vec<u8>,
    cap: usize,
}

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.cap {
            return Err(std::io::Error::other("over the cap"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn summary(mime: &str, body: &[u8]) -> String {
    let kind = if mime.is_empty() {
        "unknown type"
    } else {
        mime
    };
    let head: String = body.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!(
        "binary content ({kind}, {} bytes; first bytes {head}): not shown",
        body.len()
    )
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
