#![allow(clippy::unwrap_used)]

use toolgate_ports::fetch::PageContent;

use super::{max_text, render};

const EIGHT_MIB: usize = 8 << 20;

fn text_of(content: PageContent) -> (String, &'static str) {
    match content {
        PageContent::Text { text, format } => (text, format),
        other => panic!("{other:?}"),
    }
}

#[test]
fn json_a_million_deep_is_shown_as_text_not_parsed_into_a_tree() {
    for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
        let body = format!("{}1{}", open.repeat(1_000_000), close.repeat(1_000_000));
        let (text, format) = text_of(render("application/json", body.as_bytes()));
        assert_eq!(format, "text");
        assert_eq!(text.len(), body.len());
    }
}

#[test]
fn pretty_json_is_bounded_even_where_indentation_would_multiply_it() {
    // 100 levels deep (within serde_json's limit), then a flat array: each element on a line
    // indented 202 spaces would make 8 MiB into ~800 MiB
    let inner = "1,".repeat((EIGHT_MIB - 400) / 2);
    let body = format!("{}[{}1]{}", "[".repeat(100), inner, "]".repeat(100));
    let (text, format) = text_of(render("application/json", body.as_bytes()));
    assert_eq!(format, "text", "too long once pretty: shown as it came");
    assert_eq!(text.len(), body.len());
    let (pretty, format) = text_of(render("application/json", b"{\"a\":[1,2]}"));
    assert_eq!(
        (pretty.as_str(), format),
        ("{\n  \"a\": [\n    1,\n    2\n  ]\n}", "json")
    );
    let (_, format) = text_of(render("application/json", b"{\"a\":1} trailing"));
    assert_eq!(format, "text");
}

#[test]
fn xml_images_and_bytes_are_not_parsed() {
    let xml = format!("<a>{}</a>", "<b>".repeat(1_000_000));
    let (text, format) = text_of(render("application/xml", xml.as_bytes()));
    assert_eq!((text.len(), format), (xml.len(), "text"));
    let png: Vec<u8> = b"\x89PNG\r\n\x1a\n"
        .iter()
        .copied()
        .cycle()
        .take(EIGHT_MIB)
        .collect();
    let PageContent::Image { data, mime_type } = render("image/png", &png) else {
        panic!()
    };
    assert_eq!(
        (data.len(), mime_type.as_str()),
        (EIGHT_MIB.div_ceil(3) * 4, "image/png")
    );
    let PageContent::Binary { summary } = render("application/octet-stream", &vec![7; EIGHT_MIB])
    else {
        panic!()
    };
    assert!(summary.contains(&format!("{EIGHT_MIB} bytes")));
}

#[test]
fn html_is_bounded_and_says_when_it_was_cut() {
    let deep = format!("{}x", "<blockquote><ul><li>".repeat(8)) + &"a<br>".repeat(EIGHT_MIB / 5);
    let (text, format) = text_of(render("text/html; charset=utf-8", deep.as_bytes()));
    assert_eq!(format, "markdown");
    assert!(text.len() <= max_text(deep.len()) + 100);
    assert!(text.ends_with("bytes)"), "{}", &text[text.len() - 80..]);
    let (text, _) = text_of(render("text/html", "<h2>Hi</h2>".as_bytes()));
    assert_eq!(text, "## Hi");
}
