//! What HTML elements are to the converter: which have no content, which end a paragraph,
//! which hold raw text, and the URLs and attributes it writes.

use html5ever::Attribute;
use html5ever::tokenizer::TokenSinkResult;
use html5ever::tokenizer::states::RawKind;

use super::writer::is_html_space;

/// The longest URL written for a link or an image.
const MAX_URL_CHARS: usize = 2048;

/// Elements without content or end tag.
pub(super) fn is_void(name: &str) -> bool {
    matches!(
        name,
        "area"
            | "base"
            | "br"
            | "col"
            | "embed"
            | "hr"
            | "img"
            | "input"
            | "keygen"
            | "link"
            | "meta"
            | "param"
            | "source"
            | "track"
            | "wbr"
    )
}

/// Elements that end an open paragraph.
pub(super) fn closes_paragraph(name: &str) -> bool {
    matches!(
        name,
        "address"
            | "article"
            | "aside"
            | "blockquote"
            | "details"
            | "div"
            | "dl"
            | "fieldset"
            | "figure"
            | "footer"
            | "form"
            | "h1"
            | "h2"
            | "h3"
            | "h4"
            | "h5"
            | "h6"
            | "header"
            | "hr"
            | "main"
            | "nav"
            | "ol"
            | "p"
            | "pre"
            | "section"
            | "table"
            | "ul"
    )
}

/// The tokenizer state an element's content is read in, for elements whose content is text
/// (a script's `<` is not a tag).
pub(super) fn raw_kind(name: &str) -> Option<TokenSinkResult<()>> {
    Some(match name {
        "script" => TokenSinkResult::RawData(RawKind::ScriptData),
        "style" | "noscript" | "iframe" | "noembed" | "noframes" | "xmp" => {
            TokenSinkResult::RawData(RawKind::Rawtext)
        }
        "title" | "textarea" => TokenSinkResult::RawData(RawKind::Rcdata),
        "plaintext" => TokenSinkResult::Plaintext,
        _ => return None,
    })
}

/// An attribute's value.
pub(super) fn attribute<'a>(attrs: &'a [Attribute], name: &str) -> Option<&'a str> {
    attrs
        .iter()
        .find(|a| &*a.name.local == name)
        .map(|a| &*a.value)
}

/// A URL as Markdown may carry it: no script or inline data, nothing that ends the link
/// early, and not longer than [`MAX_URL_CHARS`]; `None` when nothing is left to show.
pub(super) fn link_target(url: Option<&str>) -> Option<String> {
    let url = url?.trim_matches(is_html_space);
    let scheme = url.split(':').next().unwrap_or_default();
    if url.is_empty()
        || (url.contains(':')
            && (scheme.eq_ignore_ascii_case("javascript")
                || scheme.eq_ignore_ascii_case("data")
                || scheme.eq_ignore_ascii_case("vbscript")))
    {
        return None;
    }
    let mut target = String::with_capacity(url.len().min(MAX_URL_CHARS));
    for ch in url.chars().take(MAX_URL_CHARS) {
        match ch {
            ' ' => target.push_str("%20"),
            '(' => target.push_str("%28"),
            ')' => target.push_str("%29"),
            '<' => target.push_str("%3C"),
            '>' => target.push_str("%3E"),
            c if c.is_control() => {}
            c => target.push(c),
        }
    }
    Some(target)
}
