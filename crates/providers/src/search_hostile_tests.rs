//! Search answers a hostile engine (or whatever answers in its place) can send, through the
//! real client against a stand-in on loopback, in each engine's shape: JSON nested 10^6 deep,
//! answers at and over the 2 MiB cap, an error message of any size, a snippet of markup that
//! made the tag stripper quadratic, and tens of thousands of results.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::mpsc as sync_mpsc;

use axum::Router;
use axum::body::Body;
use axum::extract::Query;
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::json;

use super::*;

const DEEP: usize = 1_000_000;

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn json_response(status: u16, body: impl Into<Body>) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap()
}

/// A Brave answer of one result whose description is `description`, padded to `size` bytes.
fn brave_of(size: usize, description: &str) -> Vec<u8> {
    let mut body = json!({"web": {"results": [
        {"title": "t", "url": "https://b.example/1", "description": description}]}})
    .to_string()
    .into_bytes();
    assert!(body.len() <= size);
    body.resize(size, b' ');
    body
}

/// What the stand-in answers for the query `q` (every engine's route answers alike).
fn answer(q: &str) -> Response {
    match q {
        "deep" => json_response(200, nested(DEEP)),
        "deep-field" => json_response(
            200,
            format!(
                r#"{{"results":[{{"url":"https://x.example/"}}],"x":{}}}"#,
                nested(DEEP)
            ),
        ),
        "exactly-the-cap" => json_response(200, brave_of(MAX_SEARCH_BYTES, "fits")),
        "one-byte-over" => json_response(200, brave_of(MAX_SEARCH_BYTES + 1, "fits")),
        "angle-brackets" => json_response(200, brave_of(2 << 20, &"<".repeat((2 << 20) - 200))),
        "tags" => json_response(200, brave_of(2 << 20, &"</b><i>x".repeat(200_000))),
        "huge-error" => json_response(
            500,
            json!({"error": {"message": {"x": "y".repeat(1 << 20)}}}).to_string(),
        ),
        "deep-error" => json_response(500, format!(r#"{{"error":{}}}"#, nested(DEEP))),
        "many" => {
            let results: Vec<_> = (0..8_000)
                .map(|i| json!({"url": format!("https://m.example/{i}"), "title": "m", "description": "d", "content": "c"}))
                .collect();
            json_response(
                200,
                json!({"web": {"results": results}, "results": results}).to_string(),
            )
        }
        _ => json_response(200, brave_of(100, "honest")),
    }
}

/// The query string's `q`.
type Asked = std::collections::HashMap<String, String>;

async fn rig() -> SearchEngines {
    let app = Router::new()
        .route(
            "/brave/web/search",
            get(|Query(a): Query<Asked>| async move { answer(a.get("q").map_or("", String::as_str)) }),
        )
        .route(
            "/searxng/search",
            get(|Query(a): Query<Asked>| async move { answer(a.get("q").map_or("", String::as_str)) }),
        )
        .route(
            "/tavily/search",
            post(|body: axum::Json<Value>| async move { answer(body["query"].as_str().unwrap()) }),
        )
        .route(
            "/exa/search",
            post(|body: axum::Json<Value>| async move { answer(body["query"].as_str().unwrap()) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut settings = SearchSettings {
        searxng_url: Some(format!("{base}/searxng")),
        ..SearchSettings::default()
    };
    for engine in ["brave", "tavily", "exa"] {
        settings
            .base_urls
            .insert(engine.into(), format!("{base}/{engine}"));
    }
    let policy = EgressPolicy::new(&["127.0.0.1/32".to_owned()]).unwrap();
    SearchEngines::new(policy, settings, Duration::from_secs(60)).unwrap()
}

fn query(engine: &str, q: &str) -> SearchQuery {
    SearchQuery {
        query: q.into(),
        max_results: 5,
        freshness: None,
        // no key: the operator's SearXNG
        engine: (engine != "searxng")
            .then(|| (engine.into(), Zeroizing::new("key-0123456789".into()))),
    }
}

async fn failure(engines: &SearchEngines, engine: &str, q: &str) -> String {
    match engines.search(query(engine, q)).await {
        Err(ModelError::Failed(message)) => message,
        other => panic!("{engine} {q}: expected a failure, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_nested_a_million_deep_or_over_the_cap_are_refused_by_every_engine() {
    let engines = rig().await;
    for engine in ["searxng", "brave", "tavily", "exa"] {
        for q in ["deep", "deep-field"] {
            let message = failure(&engines, engine, q).await;
            assert!(message.contains("is not JSON"), "{engine} {q}: {message}");
        }
        let message = failure(&engines, engine, "one-byte-over").await;
        assert!(
            message.contains(&format!("longer than {MAX_SEARCH_BYTES} bytes")),
            "{message}"
        );
        for q in ["huge-error", "deep-error"] {
            let message = failure(&engines, engine, q).await;
            assert!(message.contains("answered 500"), "{message}");
            assert!(
                message.chars().count() < 400,
                "{q}: {} characters",
                message.chars().count()
            );
        }
        let many = engines.search(query(engine, "many")).await.unwrap();
        assert_eq!(many.results.len(), 5, "{engine}");
    }
    let fits = engines
        .search(query("brave", "exactly-the-cap"))
        .await
        .unwrap();
    assert_eq!(fits.results[0].snippet, "fits");
}

/// A snippet of 2 MiB of `<` (and one of many tags) is stripped in one pass. The stripper read on
/// to the next `>` from every `<`: hours of a thread for this answer. A hang guard, not a speed
/// figure: the search runs on its own thread and must end within a minute.
#[test]
fn a_snippet_of_markup_is_stripped_in_one_pass() {
    let (done, finished) = sync_mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let engines = rig().await;
            let brackets = engines
                .search(query("brave", "angle-brackets"))
                .await
                .unwrap();
            let tags = engines.search(query("brave", "tags")).await.unwrap();
            done.send((brackets, tags)).unwrap();
        });
    });
    let (brackets, tags) = finished
        .recv_timeout(Duration::from_secs(60))
        .expect("stripping the snippet's markup did not end");
    assert_eq!(brackets.results[0].snippet, "<".repeat(MAX_SNIPPET));
    assert_eq!(tags.results[0].snippet, "x".repeat(MAX_SNIPPET));
    assert_eq!(
        plain("a <b>bold</b> <<3 <//i> x</ y>"),
        "a bold <<3  x</ y>"
    );
}
