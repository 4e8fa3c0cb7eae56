#![allow(clippy::unwrap_used, clippy::expect_used)]
//! What follows a redirect: nothing the caller set goes to another origin, no Referer ever,
//! and a body that holds a secret is not sent there again.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use axum::routing::any;
use toolgate_egress::EgressPolicy;
use toolgate_ports::fetch::{FetchError, FetchRequest, Fetcher, Method};

use super::FetchClient;

/// One request as a server saw it: its method, headers and body.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    headers: HeaderMap,
    body: String,
}

/// A loopback server answering `/redirect?status=N&to=URL` with that redirect and anything
/// else with 200, recording every request.
async fn recording_server() -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = Router::new().fallback(any(
        move |method: axum::http::Method,
              uri: axum::http::Uri,
              headers: HeaderMap,
              body: String| {
            let record = record.clone();
            async move {
                record.lock().unwrap().push(Seen {
                    method: method.to_string(),
                    headers,
                    body,
                });
                if uri.path() != "/redirect" {
                    return Response::new(axum::body::Body::from("landed"));
                }
                let Query(query): Query<std::collections::HashMap<String, String>> =
                    Query::try_from_uri(&uri).unwrap();
                Response::builder()
                    .status(StatusCode::from_u16(query["status"].parse().unwrap()).unwrap())
                    .header(header::LOCATION, &query["to"])
                    .body(axum::body::Body::empty())
                    .unwrap()
            }
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

fn client() -> FetchClient {
    let policy = EgressPolicy::new(&["127.0.0.1".to_owned()]).unwrap();
    FetchClient::new(policy, Duration::from_secs(5)).unwrap()
}

fn request(method: Method, url: String, body: Option<&str>, secret: bool) -> FetchRequest {
    FetchRequest {
        method,
        url,
        headers: vec![
            ("X-Api-Key".into(), "sk-secret-value".into()),
            ("Authorization".into(), "Bearer sk-secret-value".into()),
            ("Content-Type".into(), "application/json".into()),
        ],
        body: body.map(str::to_owned),
        body_holds_secret: secret,
        max_bytes: 1024,
    }
}

fn escaped(url: &str) -> String {
    url.replace(':', "%3A")
        .replace('/', "%2F")
        .replace('?', "%3F")
}

#[tokio::test]
async fn another_origin_gets_no_header_the_caller_set_and_no_referer() {
    let (site, on_site) = recording_server().await;
    let (other, on_other) = recording_server().await;
    let web = client();
    for status in [301, 302, 303, 307, 308] {
        let url = format!(
            "http://{site}/redirect?k=sk-secret-value&status={status}&to={}",
            escaped(&format!("http://{other}/landing"))
        );
        let page = web
            .send(request(Method::Get, url, None, false))
            .await
            .unwrap();
        assert_eq!(page.status, 200, "{status}");
        let there = on_other
            .lock()
            .unwrap()
            .pop()
            .expect("the other origin was reached");
        assert!(
            there.headers.get("x-api-key").is_none(),
            "{status}: {there:?}"
        );
        assert!(there.headers.get("authorization").is_none(), "{status}");
        assert!(there.headers.get("content-type").is_none(), "{status}");
        assert!(
            there.headers.get(header::REFERER).is_none(),
            "{status}: {there:?}"
        );
        let first = on_site.lock().unwrap().pop().unwrap();
        assert_eq!(
            first.headers["x-api-key"], "sk-secret-value",
            "sent where asked"
        );
    }
}

#[tokio::test]
async fn the_same_origin_keeps_them_and_no_referer_is_sent_there_either() {
    let (site, on_site) = recording_server().await;
    let web = client();
    let url = format!("http://{site}/redirect?status=302&to=%2Flanding");
    web.send(request(Method::Get, url, None, false))
        .await
        .unwrap();
    let landed = on_site.lock().unwrap().pop().unwrap();
    assert_eq!(landed.headers["x-api-key"], "sk-secret-value");
    assert!(landed.headers.get(header::REFERER).is_none());
}

#[tokio::test]
async fn a_body_with_a_secret_is_not_sent_again_to_another_origin() {
    let (site, _) = recording_server().await;
    let (other, on_other) = recording_server().await;
    let web = client();
    for status in [307, 308] {
        let url = format!(
            "http://{site}/redirect?status={status}&to={}",
            escaped(&format!("http://{other}/landing"))
        );
        let refused = web
            .send(request(
                Method::Post,
                url.clone(),
                Some("{\"k\":\"sk-secret-value\"}"),
                true,
            ))
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, FetchError::Refused(m) if m.contains("another origin")),
            "{refused:?}"
        );
        assert!(
            on_other.lock().unwrap().is_empty(),
            "nothing reached the other origin"
        );
        // a body without a secret goes on, with the method, but without the caller's headers
        web.send(request(Method::Post, url, Some("{\"plain\":1}"), false))
            .await
            .unwrap();
        let there = on_other.lock().unwrap().pop().unwrap();
        assert_eq!(
            (there.method.as_str(), there.body.as_str()),
            ("POST", "{\"plain\":1}")
        );
        assert!(there.headers.get("x-api-key").is_none());
    }
    // 303 continues as a GET without the body, so the secret stays behind
    let url = format!(
        "http://{site}/redirect?status=303&to={}",
        escaped(&format!("http://{other}/landing"))
    );
    web.send(request(Method::Post, url, Some("sk-secret-value"), true))
        .await
        .unwrap();
    let there = on_other.lock().unwrap().pop().unwrap();
    assert_eq!((there.method.as_str(), there.body.as_str()), ("GET", ""));
}

#[tokio::test]
async fn every_hop_is_checked_and_the_whole_chain_shares_one_time_limit() {
    let (site, _) = recording_server().await;
    let guarded = FetchClient::new(EgressPolicy::default(), Duration::from_secs(5)).unwrap();
    // a public-looking start is impossible on loopback; the refusal of a hop is what counts
    let url = format!("http://{site}/redirect?status=302&to=http%3A%2F%2F169.254.169.254%2F");
    let refused = client()
        .send(request(Method::Get, url, None, false))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, FetchError::Refused(m) if m.contains("169.254.169.254")),
        "{refused:?}"
    );
    let direct = guarded
        .send(request(Method::Get, format!("http://{site}/"), None, false))
        .await
        .unwrap_err();
    assert!(matches!(direct, FetchError::Refused(_)), "{direct:?}");
}
