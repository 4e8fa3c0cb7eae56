#![allow(clippy::unwrap_used)]
use super::*;

const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn base() -> Url {
    Url::parse("https://index.example/simple/demo/").unwrap()
}

#[test]
fn names_are_normalised_as_pep_503_says() {
    assert_eq!(
        normalize("Foo.Bar__baz-Qux").as_deref(),
        Some("foo-bar-baz-qux")
    );
    assert_eq!(normalize("requests").as_deref(), Some("requests"));
    for bad in ["", "-x", "x-", "a/b", "..", "a b", "%2e", &"a".repeat(201)] {
        assert_eq!(normalize(bad), None, "{bad:?}");
    }
}

#[test]
fn a_json_page_is_read() {
    let page = format!(
        r#"{{"meta":{{"api-version":"1.1"}},"name":"demo","files":[
        {{"filename":"demo-1.0-py3-none-any.whl","url":"../../files/demo-1.0-py3-none-any.whl",
          "hashes":{{"sha256":"{}"}},"requires-python":">=3.8","yanked":false,
          "core-metadata":{{"sha256":"{SHA}"}},"size":12}},
        {{"filename":"demo-0.9.tar.gz","url":"https://files.example/demo-0.9.tar.gz",
          "hashes":{{}},"yanked":"broken"}}]}}"#,
        SHA.to_uppercase()
    );
    let files = parse(
        page.as_bytes(),
        "application/vnd.pypi.simple.v1+json",
        &base(),
    )
    .unwrap();
    assert_eq!(
        files,
        vec![
            FileLink {
                filename: "demo-1.0-py3-none-any.whl".into(),
                url: "https://index.example/files/demo-1.0-py3-none-any.whl".into(),
                sha256: Some(SHA.into()),
                requires_python: Some(">=3.8".into()),
                yanked: None,
            },
            FileLink {
                filename: "demo-0.9.tar.gz".into(),
                url: "https://files.example/demo-0.9.tar.gz".into(),
                sha256: None,
                requires_python: None,
                yanked: Some("broken".into()),
            },
        ]
    );
}

#[test]
fn an_html_page_is_read() {
    let page = format!(
        "<!DOCTYPE html><html><body><h1>Links for demo</h1>\n\
         <A HREF=\"/packages/demo-1.0-py3-none-any.whl#sha256={SHA}\" \
           data-requires-python=\"&gt;=3.8\" data-dist-info-metadata>demo-1.0-py3-none-any.whl</A><br>\n\
         <a href='demo-0.9.tar.gz#md5=abc' data-yanked=''>demo-0.9.tar.gz</a>\n\
         <a name=\"no-href\">x</a><a href=\"javascript:alert(1)\">evil.whl</a>\
         <a href=\"../x/..%2f..%2fetc.whl\">../../etc/passwd</a>\
         <a href=\"unterminated"
    );
    let files = parse(page.as_bytes(), "text/html", &base()).unwrap();
    assert_eq!(
        files,
        vec![
            FileLink {
                filename: "demo-1.0-py3-none-any.whl".into(),
                url: "https://index.example/packages/demo-1.0-py3-none-any.whl".into(),
                sha256: Some(SHA.into()),
                requires_python: Some(">=3.8".into()),
                yanked: None,
            },
            FileLink {
                filename: "demo-0.9.tar.gz".into(),
                url: "https://index.example/simple/demo/demo-0.9.tar.gz".into(),
                sha256: None,
                requires_python: None,
                yanked: Some(String::new()),
            },
        ]
    );
}

#[test]
fn hostile_pages_give_errors_not_crashes() {
    let deep = |field: &str| {
        format!(
            "{{\"files\":[{{\"filename\":\"a.whl\",\"url\":\"a.whl\",\"{field}\":{}{}}}]}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        )
    };
    let err = parse(deep("yanked").as_bytes(), JSON_TYPE, &base()).unwrap_err();
    assert!(err.to_string().contains("recursion limit"), "{err}");
    // a field nobody reads is skipped without recursion, however deep
    assert_eq!(
        parse(deep("x").as_bytes(), JSON_TYPE, &base())
            .unwrap()
            .len(),
        1
    );
    for malformed in [
        &b"{\"files\": 3}"[..],
        b"{\"files\": [",
        b"\xff\xfe",
        b"null",
    ] {
        assert!(parse(malformed, JSON_TYPE, &base()).is_err());
    }
    assert!(matches!(
        parse(b"<a href=x>\xff</a>", "text/html", &base()),
        Err(PageError::NotText)
    ));
    let many = "<a href=\"a.whl\">a.whl</a>".repeat(MAX_FILES + 1);
    assert!(matches!(
        parse(many.as_bytes(), "text/html", &base()),
        Err(PageError::TooManyFiles)
    ));
    // nothing but tag openings, and attribute soup: read in one pass, no link
    let soup = "<a <a =\"' / = <a\t".repeat(50_000);
    assert!(
        parse(soup.as_bytes(), "text/html", &base())
            .unwrap()
            .is_empty()
    );
}

#[test]
fn the_served_page_links_the_proxy_and_escapes_what_it_copies() {
    let files = vec![
        FileLink {
            filename: "demo-1.0-py3-none-any.whl".into(),
            url: "https://files.example/x".into(),
            sha256: Some(SHA.into()),
            requires_python: Some(">=3.8\"><script>".into()),
            yanked: Some("bad & <worse>".into()),
        },
        FileLink {
            filename: "demo-0.9.tar.gz".into(),
            url: "https://files.example/y".into(),
            sha256: None,
            requires_python: None,
            yanked: None,
        },
    ];
    let page = render("demo", &files, "http://pypi.toolgate.internal/files");
    assert!(page.contains(&format!(
        "<a href=\"http://pypi.toolgate.internal/files/{SHA}/demo-1.0-py3-none-any.whl#sha256={SHA}\" \
         data-requires-python=\"&gt;=3.8&quot;&gt;&lt;script&gt;\" \
         data-yanked=\"bad &amp; &lt;worse&gt;\">demo-1.0-py3-none-any.whl</a>"
    )));
    assert!(page.contains(
        "<a href=\"http://pypi.toolgate.internal/files/unchecked/demo-0.9.tar.gz\">demo-0.9.tar.gz</a>"
    ));
    assert!(!page.contains("files.example"));
    // what the proxy serves, it reads back the same
    let again = parse(page.as_bytes(), "text/html", &base()).unwrap();
    assert_eq!(again[0].sha256.as_deref(), Some(SHA));
    assert_eq!(again[0].requires_python, files[0].requires_python);
    assert_eq!(again[0].yanked, files[0].yanked);
}
