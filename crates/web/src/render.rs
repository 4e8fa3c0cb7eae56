//! A body as a language model reads it best: HTML as Markdown, JSON pretty-printed, images as
//! images, other text as it is, and anything else summarised.

use base64::Engine;
use toolgate_app::web::WebContent;

/// Renders `body` of type `content_type`.
pub fn render(content_type: &str, body: &[u8]) -> WebContent {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if mime == "text/html" || mime == "application/xhtml+xml" {
        let html = String::from_utf8_lossy(body);
        let text = htmd::convert(&html).unwrap_or_else(|_| html.into_owned());
        return WebContent::Text {
            text,
            format: "markdown",
        };
    }
    if (mime == "application/json" || mime.ends_with("+json"))
        && let Ok(value) = serde_json::from_slice::<serde_json::Value>(body)
        && let Ok(pretty) = serde_json::to_string_pretty(&value)
    {
        return WebContent::Text {
            text: pretty,
            format: "json",
        };
    }
    if matches!(
        mime.as_str(),
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    ) {
        return WebContent::Image {
            data: base64::engine::general_purpose::STANDARD.encode(body),
            mime_type: mime,
        };
    }
    let textual = mime.starts_with("text/")
        || mime.ends_with("+xml")
        || mime == "application/xml"
        || mime == "application/javascript";
    match std::str::from_utf8(body) {
        Ok(text) if textual || (mime.is_empty() && !text.contains('\0')) => WebContent::Text {
            text: text.to_owned(),
            format: "text",
        },
        _ if textual => WebContent::Text {
            text: String::from_utf8_lossy(body).into_owned(),
            format: "text",
        },
        _ => WebContent::Binary {
            summary: summary(&mime, body),
        },
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
