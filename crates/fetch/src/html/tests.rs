use std::time::Duration;

use super::{Converted, to_markdown};

const EIGHT_MIB: usize = 8 << 20;

fn markdown(html: &str) -> String {
    let converted = to_markdown(html, 1 << 20, Duration::from_secs(30));
    assert!(!converted.plain && !converted.cut, "{converted:?}");
    converted.text
}

/// A page of at most `size` bytes made of `unit` repeated after `head`.
fn page(head: &str, unit: &str, size: usize) -> String {
    let mut page = head.to_owned();
    page.push_str(&unit.repeat((size - head.len()) / unit.len()));
    page
}

/// Converts on a thread with a small stack (a recursive walk would overflow it and abort the
/// test process), with the cap the service uses: twice the page and 64 KiB.
fn hostile(html: String) -> Converted {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || to_markdown(&html, 2 * html.len() + 65536, Duration::from_secs(60)))
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn common_markup_reads_as_markdown() {
    assert_eq!(
        markdown(
            "<html><head><title>T</title><style>p{}</style></head><body>\
             <h1>Title</h1><p>Some <b>bold</b>, <em>emphasis</em> and <a href=\"/x\">a link</a>.</p>\
             <script>if (a < b) document.write('<p>no</p>')</script></body></html>"
        ),
        "# Title\n\nSome **bold**, _emphasis_ and [a link](/x)."
    );
    assert_eq!(
        markdown("<ul><li>one<li>two<ul><li>inner</ul></ul><ol start=3><li>three<li>four</ol>"),
        "- one\n- two\n  - inner\n\n3. three\n4. four"
    );
    assert_eq!(
        markdown("<blockquote><p>quoted</p><p>twice</p></blockquote><p>after</p>"),
        "> quoted\n>\n> twice\n\nafter"
    );
    assert_eq!(
        markdown("<pre>\nfn main() {\n    x < y;\n}</pre><p>use <code>a*b</code></p>"),
        "```\nfn main() {\n    x < y;\n}\n```\n\nuse `a*b`"
    );
    assert_eq!(
        markdown("<table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>"),
        "| a | b |\n| --- | --- |\n| 1 | 2 |"
    );
    assert_eq!(
        markdown("<p>a<br>b</p><hr><p><img alt=\"logo\" src=\"/l.png\"> 5 * 3_x [y]</p>"),
        "a\nb\n\n---\n\n![logo](/l.png) 5 \\* 3\\_x \\[y\\]"
    );
    assert_eq!(
        markdown("<p># not a heading</p><p><a href=\"javascript:alert(1)\">no link</a></p>"),
        "\\# not a heading\n\nno link"
    );
    assert_eq!(markdown("<p>a &amp; b &lt;c&gt;</p><b></b>"), "a & b <c>");
    assert_eq!(
        markdown("<p>a<script/>hidden()</script><svg/>b<svg><text>c</text></svg>d</p>"),
        "abd"
    );
}

#[test]
fn nesting_a_million_deep_is_read_without_recursion() {
    for (open, close) in [
        ("<span>", "</span>"),
        ("<div>", "</div>"),
        ("<blockquote>", "</blockquote>"),
        ("<ul><li>", "</li></ul>"),
        ("<table><tr><td>", "</td></tr></table>"),
        ("<b><i>", "</i></b>"),
        ("<a href=x>", "</a>"),
    ] {
        let depth = 1_000_000;
        let html = format!(
            "<html><body>{}deep text{}",
            open.repeat(depth),
            close.repeat(depth)
        );
        let converted = hostile(html);
        assert!(
            converted.text.contains("deep text") || converted.cut,
            "{open}: {:?}",
            &converted.text[..converted.text.len().min(200)]
        );
        // unclosed, too
        let converted = hostile(format!("{}x", open.repeat(depth)));
        assert!(converted.text.len() <= 2 * depth * open.len() + 65536);
    }
}

#[test]
fn prefixes_of_deep_quotes_and_lists_stop_growing() {
    let quoted = markdown(&format!("{}x", "<blockquote>".repeat(50)));
    assert_eq!(quoted, format!("{}x", "> ".repeat(8)));
    let listed = markdown(&format!("{}x", "<ul><li>".repeat(50)));
    assert!(
        listed.lines().all(|line| line.len() <= 8 * 2 + "- x".len()),
        "{listed}"
    );
}

#[test]
fn pages_made_to_amplify_stay_within_the_cap() {
    // each <br> a line with the deepest prefix
    let lines = hostile(page(&"<blockquote><ul><li>".repeat(8), "a<br>", EIGHT_MIB));
    assert!(lines.text.len() <= 2 * EIGHT_MIB + 65536);
    // the HTML spec reopens a formatting element in every paragraph: a long link would be
    // repeated once per paragraph by a tree builder
    let long = format!("<p><a href=\"{}\">", "A".repeat(1 << 20));
    let reopened = hostile(page(&long, "<p>a", EIGHT_MIB));
    assert!(
        reopened.text.len() <= 2 * EIGHT_MIB + 65536,
        "{}",
        reopened.text.len()
    );
    // distinct formatting elements, then paragraphs: quadratic in a tree builder
    let formatting: String = (0..100_000).map(|i| format!("<b id={i}>")).collect();
    let many = hostile(page(&formatting, "<p>x", EIGHT_MIB));
    assert!(many.text.contains('x') && !many.plain);
}

#[test]
fn flat_pages_at_the_size_limit_convert() {
    for unit in [
        "<code>a</code>",
        "<b>a</b>",
        "<p>a</p>",
        "<li>a",
        "<tr><td>a<td>b",
        "<a href=\"http://x/\">a</a>",
        "<img src=x alt=y>",
        "&amp;",
        "&#",
        "<",
        "word ",
    ] {
        let converted = hostile(page("<html><body>", unit, EIGHT_MIB));
        assert!(!converted.text.is_empty(), "{unit}");
        assert!(converted.text.len() <= 2 * EIGHT_MIB + 65536, "{unit}");
    }
}

#[test]
fn a_page_that_takes_too_long_is_shown_as_plain_text() {
    // one tag with 200,000 distinct attributes: the tokenizer's duplicate check is quadratic
    let attributes: String = (0..200_000).map(|i| format!(" a{i}")).collect();
    let html = format!("<p>before</p><div{attributes}>inside</div><script>hidden()</script>");
    let converted =
        std::thread::spawn(move || to_markdown(&html, 2 * html.len(), Duration::from_millis(200)))
            .join()
            .unwrap();
    assert!(
        converted.plain,
        "{:?}",
        &converted.text[..100.min(converted.text.len())]
    );
    assert_eq!(converted.text, "before inside");
}

#[test]
fn plain_text_is_linear_and_decodes_entities() {
    let (text, cut) = super::plain::text(
        "<p>a &amp; b&#33; &#x41;&nbsp;<!-- c --><STYLE>x{}</style> d &# &bogus; <</p>",
        1024,
    );
    assert!(!cut);
    assert_eq!(text, "a & b! A\u{a0} d &# &bogus; <");
    let (text, cut) = super::plain::text(&"&#".repeat(4 << 20), 1 << 20);
    assert!(cut && text.len() == 1 << 20);
    let (text, _) = super::plain::text(&format!("<script>{}", "<".repeat(1 << 20)), 1024);
    assert!(text.is_empty());
}
