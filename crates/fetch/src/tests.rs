#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use toolgate_egress::EgressPolicy;
use toolgate_ports::fetch::{FetchError, FetchRequest, Fetcher, Method, PageContent};

use super::FetchClient;

/// A loopback server with one route per case; counts the requests it saw.
async fn server() -> (SocketAddr, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    let app = Router::new()
        .route(
            "/html",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                    "<h1>Title</h1><p>Some <b>bold</b> text and <a href=\"/x\">a link</a>.</p>",
                )
            }),
        )
        .route(
            "/json",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "application/json")],
                    r#"{"a":[1,2],"b":{"c":true}}"#,
                )
            }),
        )
        .route(
            "/png",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "image/png")],
                    vec![0x89u8, b'P', b'N', b'G', 13, 10, 26, 10],
                )
            }),
        )
        .route(
            "/bin",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "application/octet-stream")],
                    vec![0u8, 1, 2, 255],
                )
            }),
        )
        .route("/huge", get(|| async { "x".repeat(3 * 1024 * 1024) }))
        .route(
            "/many-headers",
            get(|| async {
                let mut answer = Response::builder().header("x-long", "v".repeat(5_000));
                for n in 0..70 {
                    answer = answer.header("x-n", n.to_string());
                }
                answer.body(axum::body::Body::from("ok")).unwrap()
            }),
        )
        .route(
            "/gzip",
            get(|| async {
                let mut encoder =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                encoder.write_all(b"compressed hello").unwrap();
                (
                    [
                        (header::CONTENT_ENCODING, "gzip"),
                        (header::CONTENT_TYPE, "text/plain"),
                    ],
                    encoder.finish().unwrap(),
                )
            }),
        )
        .route(
            "/items",
            axum::routing::any(|method: axum::http::Method, body: String| async move {
                format!("{method} {body}")
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "late"
            }),
        )
        .route(
            "/hop/{n}",
            get(|Path(n): Path<u32>| async move {
                if n == 0 {
                    "arrived".into_response()
                } else {
                    Redirect::temporary(&format!("/hop/{}", n - 1)).into_response()
                }
            }),
        )
        .route(
            "/to",
            get(|headers: HeaderMap| async move {
                let target = headers
                    .get("x-target")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("/")
                    .to_owned();
                Response::builder()
                    .status(StatusCode::FOUND)
                    .header(header::LOCATION, target)
                    .body(axum::body::Body::empty())
                    .unwrap()
            }),
        )
        .route(
            "/echo",
            get(|headers: HeaderMap| async move {
                headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned()
            }),
        )
        .layer(axum::middleware::from_fn(
            move |req, next: axum::middleware::Next| {
                let count = count.clone();
                async move {
                    count.fetch_add(1, Ordering::SeqCst);
                    next.run(req).await
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

fn allowing_loopback() -> FetchClient {
    FetchClient::new(
        EgressPolicy::new(&["127.0.0.1/32".into()]).unwrap(),
        Duration::from_secs(2),
    )
    .unwrap()
}

fn get_of(url: String) -> FetchRequest {
    FetchRequest {
        method: Method::Get,
        url,
        headers: Vec::new(),
        body: None,
        body_holds_secret: false,
        max_bytes: 1024 * 1024,
    }
}

#[tokio::test]
async fn pages_are_rendered_for_reading() {
    let (addr, _) = server().await;
    let web = allowing_loopback();
    let page = web
        .send(get_of(format!("http://{addr}/html")))
        .await
        .unwrap();
    assert_eq!(page.status, 200);
    let PageContent::Text { text, format } = &page.content else {
        panic!("{page:?}")
    };
    assert_eq!(*format, "markdown");
    assert!(
        text.contains("# Title") && text.contains("**bold**") && text.contains("[a link](/x)"),
        "{text}"
    );
    let json = web
        .send(get_of(format!("http://{addr}/json")))
        .await
        .unwrap();
    assert_eq!(
        json.content,
        PageContent::Text {
            text: "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {\n    \"c\": true\n  }\n}".into(),
            format: "json"
        }
    );
    let png = web
        .send(get_of(format!("http://{addr}/png")))
        .await
        .unwrap();
    assert!(
        matches!(png.content, PageContent::Image { ref mime_type, .. } if mime_type == "image/png"),
        "{png:?}"
    );
    let bin = web
        .send(get_of(format!("http://{addr}/bin")))
        .await
        .unwrap();
    let PageContent::Binary { summary } = &bin.content else {
        panic!("{bin:?}")
    };
    assert!(
        summary.contains("4 bytes") && summary.contains("000102ff"),
        "{summary}"
    );
    let gz = web
        .send(get_of(format!("http://{addr}/gzip")))
        .await
        .unwrap();
    assert_eq!(
        gz.content,
        PageContent::Text {
            text: "compressed hello".into(),
            format: "text"
        }
    );
}

#[tokio::test]
async fn size_time_and_redirects_are_bounded() {
    let (addr, _) = server().await;
    let web = allowing_loopback();
    let huge = web
        .send(FetchRequest {
            max_bytes: 1000,
            ..get_of(format!("http://{addr}/huge"))
        })
        .await
        .unwrap();
    assert!(huge.truncated && huge.bytes == 1000, "{huge:?}");
    let slow = web
        .send(get_of(format!("http://{addr}/slow")))
        .await
        .unwrap_err();
    assert!(
        matches!(slow, FetchError::Failed(ref m) if m.contains("timed out")),
        "{slow:?}"
    );
    let five = web
        .send(get_of(format!("http://{addr}/hop/5")))
        .await
        .unwrap();
    assert!(
        five.final_url.ends_with("/hop/0") && five.status == 200,
        "{five:?}"
    );
    let six = web
        .send(get_of(format!("http://{addr}/hop/6")))
        .await
        .unwrap_err();
    assert!(six.to_string().contains("more than 5 redirects"), "{six:?}");
}

#[tokio::test]
async fn the_guard_refuses_before_connecting() {
    let (addr, seen) = server().await;
    let guarded = FetchClient::new(EgressPolicy::default(), Duration::from_secs(2)).unwrap();
    for url in [
        format!("http://{addr}/html"),
        format!("http://0x7f000001:{}/html", addr.port()),
        format!("http://2130706433:{}/html", addr.port()),
        format!("http://[::ffff:127.0.0.1]:{}/html", addr.port()),
        format!("http://localhost:{}/html", addr.port()),
    ] {
        let err = guarded.send(get_of(url.clone())).await.unwrap_err();
        assert!(
            matches!(err, FetchError::Refused(ref m) if m.contains("loopback")),
            "{url}: {err:?}"
        );
    }
    for url in ["file:///etc/passwd", "ftp://example.com/", "not a url"] {
        assert!(
            matches!(
                guarded.send(get_of(url.into())).await,
                Err(FetchError::Refused(_))
            ),
            "{url}"
        );
    }
    assert_eq!(seen.load(Ordering::SeqCst), 0, "the server was reached");
    // an allowed host that redirects to a refused one: the redirect is not followed
    let web = allowing_loopback();
    let mut request = get_of(format!("http://{addr}/to"));
    request.headers.push((
        "x-target".into(),
        format!("http://127.0.0.2:{}/html", addr.port()),
    ));
    let err = web.send(request).await.unwrap_err();
    assert!(
        err.to_string().contains("127.0.0.2 is a loopback address"),
        "{err:?}"
    );
    let mut request = get_of(format!("http://{addr}/to"));
    request.headers.push((
        "x-target".into(),
        "http://169.254.169.254/latest/meta-data/".into(),
    ));
    let err = web.send(request).await.unwrap_err();
    assert!(err.to_string().contains("metadata"), "{err:?}");
    assert_eq!(
        seen.load(Ordering::SeqCst),
        2,
        "only the two redirecting requests arrived"
    );
}

#[tokio::test]
async fn headers_are_sent_and_bad_ones_refused_without_their_value() {
    let (addr, _) = server().await;
    let web = allowing_loopback();
    let mut request = get_of(format!("http://{addr}/echo"));
    request
        .headers
        .push(("Authorization".into(), "Bearer abc".into()));
    let page = web.send(request).await.unwrap();
    assert_eq!(
        page.content,
        PageContent::Text {
            text: "Bearer abc".into(),
            format: "text"
        }
    );
    let mut bad = get_of(format!("http://{addr}/echo"));
    bad.headers
        .push(("X-Bad".into(), "line\r\nInjected: sk-hidden".into()));
    let err = web.send(bad).await.unwrap_err().to_string();
    assert!(err.contains("x-bad") && !err.contains("sk-hidden"), "{err}");
}

#[tokio::test]
async fn writes_carry_their_method_and_body() {
    let (addr, _) = server().await;
    let web = allowing_loopback();
    for method in [Method::Post, Method::Put, Method::Patch, Method::Delete] {
        let page = web
            .send(FetchRequest {
                method,
                body: Some("payload".into()),
                ..get_of(format!("http://{addr}/items"))
            })
            .await
            .unwrap();
        let expected = format!("{} payload", method.as_str());
        assert_eq!(
            page.content,
            PageContent::Text {
                text: expected,
                format: "text"
            }
        );
    }
}

/// The answer's headers come back with the page, bounded: a site cannot send the caller more
/// than [`MAX_ANSWER_HEADERS`] of them or values longer than [`MAX_ANSWER_HEADER_CHARS`].
#[tokio::test]
async fn an_answers_headers_come_back_bounded() {
    let (addr, _) = server().await;
    let web = allowing_loopback();
    let json = web
        .send(get_of(format!("http://{addr}/json")))
        .await
        .unwrap();
    assert!(
        json.headers
            .contains(&("content-type".to_owned(), "application/json".to_owned())),
        "{:?}",
        json.headers
    );
    let many = web
        .send(get_of(format!("http://{addr}/many-headers")))
        .await
        .unwrap();
    assert_eq!(
        many.headers.len(),
        toolgate_ports::fetch::MAX_ANSWER_HEADERS
    );
    let long = many
        .headers
        .iter()
        .find(|(name, _)| name == "x-long")
        .unwrap();
    assert_eq!(long.1.len(), toolgate_ports::fetch::MAX_ANSWER_HEADER_CHARS);
    assert!(many.headers.contains(&("x-n".to_owned(), "0".to_owned())));
}
