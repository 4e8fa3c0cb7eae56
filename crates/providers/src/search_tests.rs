//! Brave, Tavily and Exa against stand-ins on loopback that answer in each engine's documented
//! shape and record what they were asked; the real SearXNG is in tests/searxng.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{HeaderMap, Uri};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::*;

const KEY: &str = "search-key-9f8e7d6c5b4a";

#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(String, HeaderMap, Value)>>>);

async fn rig() -> (SearchEngines, Seen) {
    let seen = Seen::default();
    let (a, b, c) = (seen.clone(), seen.clone(), seen.clone());
    let app = Router::new()
        .route("/brave/web/search", get(move |uri: Uri, headers: HeaderMap| async move {
            a.0.lock().unwrap().push((uri.to_string(), headers, Value::Null));
            axum::Json(json!({"type": "search", "web": {"type": "search", "results": [
                {"title": "Brave one", "url": "https://b.example/1", "description": "first <strong>hit</strong> &amp; more <3", "age": "2 days ago"},
                {"title": "Brave two", "url": "https://b.example/2", "description": "second"}]}}))
        }))
        .route("/tavily/search", post(move |headers: HeaderMap, body: axum::Json<Value>| async move {
            if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(&format!("Bearer {KEY}")) {
                return (axum::http::StatusCode::UNAUTHORIZED, axum::Json(json!({"detail": {"error": format!("Unauthorized: bad key {KEY}")}})));
            }
            b.0.lock().unwrap().push(("/tavily/search".into(), headers, body.0));
            (axum::http::StatusCode::OK, axum::Json(json!({"query": "q", "results": [
                {"title": "Tavily one", "url": "https://t.example/1", "content": "tav snippet", "score": 0.9, "published_date": "2026-11-20"}]})))
        }))
        .route("/exa/search", post(move |headers: HeaderMap, body: axum::Json<Value>| async move {
            c.0.lock().unwrap().push(("/exa/search".into(), headers, body.0));
            axum::Json(json!({"requestId": "r", "results": [
                {"id": "x", "title": "Exa one", "url": "https://x.example/1", "publishedDate": "2026-11-01T00:00:00.000Z", "highlights": ["exa highlight"]}]}))
        }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut settings = SearchSettings::default();
    for engine in ["brave", "tavily", "exa"] {
        settings
            .base_urls
            .insert(engine.into(), format!("{base}/{engine}"));
    }
    let policy = EgressPolicy::new(&["127.0.0.1/32".to_owned()]).unwrap();
    (
        SearchEngines::new(policy, settings, Duration::from_secs(5)).unwrap(),
        seen,
    )
}

fn query(engine: &str, freshness: Option<Freshness>) -> SearchQuery {
    SearchQuery {
        query: "rust & tokio".into(),
        max_results: 3,
        freshness,
        engine: Some((engine.into(), Zeroizing::new(KEY.into()))),
    }
}

#[tokio::test]
async fn each_engine_is_asked_its_way_and_read_into_one_shape() {
    let (engines, seen) = rig().await;
    let brave = engines
        .search(query("brave", Some(Freshness::Week)))
        .await
        .unwrap();
    assert_eq!(brave.engine, "brave");
    assert_eq!(brave.results.len(), 2);
    assert_eq!(
        brave.results[0],
        SearchResult {
            title: "Brave one".into(),
            url: "https://b.example/1".into(),
            snippet: "first hit & more <3".into(),
            date: Some("2 days ago".into()),
        }
    );
    let tavily = engines
        .search(query("tavily", Some(Freshness::Day)))
        .await
        .unwrap();
    assert_eq!(tavily.results[0].date.as_deref(), Some("2026-11-20"));
    let exa = engines.search(query("exa", None)).await.unwrap();
    assert_eq!(exa.results[0].snippet, "exa highlight");
    let seen = seen.0.lock().unwrap();
    let (uri, headers, _) = &seen[0];
    assert!(
        uri.contains("q=rust+%26+tokio") && uri.contains("count=3") && uri.contains("freshness=pw"),
        "{uri}"
    );
    assert_eq!(headers["x-subscription-token"], KEY);
    assert_eq!(
        seen[1].2,
        json!({"query": "rust & tokio", "max_results": 3, "time_range": "day"})
    );
    assert_eq!(seen[2].1["x-api-key"], KEY);
    assert_eq!(seen[2].2["numResults"], 3);
}

#[tokio::test]
async fn engine_errors_come_back_without_the_key_and_no_engine_is_a_clear_refusal() {
    let (engines, _) = rig().await;
    let mut wrong = query("tavily", None);
    wrong.engine = Some(("tavily".into(), Zeroizing::new("other-key-123456".into())));
    let refused = engines.search(wrong).await.unwrap_err().to_string();
    assert!(refused.contains("tavily answered 401"), "{refused}");
    assert!(!refused.contains("other-key-123456"), "{refused}");
    let none = SearchEngines::new(
        EgressPolicy::default(),
        SearchSettings::default(),
        Duration::from_secs(1),
    )
    .unwrap();
    let mut operator = query("brave", None);
    operator.engine = None;
    let refused = none.search(operator).await.unwrap_err().to_string();
    assert!(
        refused.contains("BRAVE_API_KEY, TAVILY_API_KEY or EXA_API_KEY"),
        "{refused}"
    );
}

#[tokio::test]
async fn only_the_private_engine_the_operator_configured_is_reached() {
    let settings = SearchSettings {
        searxng_url: Some("http://127.0.0.1:9".into()),
        ..SearchSettings::default()
    };
    let engines =
        SearchEngines::new(EgressPolicy::default(), settings, Duration::from_secs(1)).unwrap();
    let mut q = query("brave", None);
    q.engine = None;
    let failed = engines.search(q).await.unwrap_err().to_string();
    assert!(
        !failed.contains("loopback"),
        "configured, so let through: {failed}"
    );
    // an engine base URL the operator did not configure is judged as any address
    let settings = SearchSettings {
        base_urls: [("brave".to_owned(), "http://127.0.0.1:9".to_owned())].into(),
        ..SearchSettings::default()
    };
    let policy = EgressPolicy::default();
    assert!(
        policy
            .check_url(&reqwest::Url::parse("http://127.0.0.1:9").unwrap())
            .is_err()
    );
    let engines = SearchEngines::new(policy, settings, Duration::from_secs(1)).unwrap();
    let failed = engines
        .search(query("brave", None))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        !failed.contains("loopback"),
        "a configured base URL: {failed}"
    );
}
