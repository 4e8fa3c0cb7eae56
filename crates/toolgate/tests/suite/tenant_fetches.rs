//! What the server fetches and parses for a tenant, through the real binary: a page built to
//! break the reader leaves the service running, and what a site answers (a redirect, a
//! Content-Type, binary bytes) never carries a secret to another host or back to the caller.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{any, get};
use serde_json::{Value, json};

use crate::common::*;

/// 16 bytes, so the binary summary's first bytes hold all of it.
const KEY: &str = "kv-0a1b2c3d4e5f6";

/// One request as a site saw it.
#[derive(Debug, Clone)]
struct Seen {
    uri: String,
    headers: HeaderMap,
    body: String,
}

/// A loopback site: `/deep` is `<html><body>` and 300,000 `<span>`, `/to?status=N&host=H`
/// redirects there, `/note` echoes the `X-Note` header in its Content-Type and body, and
/// every request is recorded.
async fn site() -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = Router::new()
        .route(
            "/deep",
            get(|| async {
                let page = format!("<html><body>{}deep", "<span>".repeat(300_000));
                ([(header::CONTENT_TYPE, "text/html")], page)
            }),
        )
        .route("/to", get(redirect).post(redirect))
        .route(
            "/note",
            get(|headers: HeaderMap| async move {
                let note = headers["x-note"].to_str().unwrap().to_owned();
                (
                    [(
                        header::CONTENT_TYPE,
                        format!("application/octet-stream; note={note}"),
                    )],
                    note.into_bytes(),
                )
            }),
        )
        .fallback(any(
            move |uri: axum::http::Uri, headers: HeaderMap, body: String| {
                let record = record.clone();
                async move {
                    record.lock().unwrap().push(Seen {
                        uri: uri.to_string(),
                        headers,
                        body,
                    });
                    "landed"
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

/// `/to?status=N&host=H`: that redirect to `http://H/landed`.
async fn redirect(
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> (StatusCode, [(header::HeaderName, String); 1]) {
    let status = StatusCode::from_u16(q["status"].parse().unwrap()).unwrap();
    (
        status,
        [(header::LOCATION, format!("http://{}/landed", q["host"]))],
    )
}

async fn call(server: &Server, key: &str, tool: &str, args: Value) -> Value {
    post_personal(&client(), server, key, &tool_call(tool, args))
        .await
        .result()
}

async fn serving() -> (tempfile::TempDir, Server, Account) {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "fetches@example.org");
    let server = Server::start(&storage, &["--egress-allow-private", "127.0.0.1/32"]).await;
    let stored = call(
        &server,
        &alice.key,
        "svc_write",
        json!({"secret_set": {"name": "K", "value": KEY}}),
    )
    .await;
    assert_eq!(stored["isError"], false, "{stored}");
    (dir, server, alice)
}

#[tokio::test]
async fn a_page_nested_300000_deep_is_read_and_the_service_lives_on() {
    let (addr, _) = site().await;
    let (_dir, server, alice) = serving().await;
    let page = call(
        &server,
        &alice.key,
        "svc_read",
        json!({"url": format!("http://{addr}/deep"), "max_bytes": 8_388_608}),
    )
    .await;
    assert_eq!(page["isError"], false, "{page}");
    assert_eq!(page["structuredContent"]["url"]["format"], "markdown");
    assert_eq!(page["content"][0]["text"], "deep");
    let billing = call(&server, &alice.key, "svc_read", json!({"billing": true})).await;
    assert_eq!(
        billing["isError"], false,
        "the server still answers: {billing}"
    );
}

#[tokio::test]
async fn secrets_stay_behind_when_a_site_redirects_elsewhere() {
    let (site_addr, _) = site().await;
    let (other, seen_there) = site().await;
    let (_dir, server, alice) = serving().await;
    for status in [302, 307] {
        let fetched = call(
            &server,
            &alice.key,
            "svc_read",
            json!({"url": format!("http://{site_addr}/to?status={status}&host={other}&k={{{{secret:K}}}}"),
                   "headers": {"X-Api-Key": "{{secret:K}}", "Authorization": "Bearer {{secret:K}}"}}),
        )
        .await;
        assert_eq!(fetched["isError"], false, "{fetched}");
        let there = seen_there
            .lock()
            .unwrap()
            .pop()
            .expect("the redirect was followed");
        let everything = format!("{} {:?} {}", there.uri, there.headers, there.body);
        assert!(
            !everything.contains(KEY),
            "{status}: the other host saw {everything}"
        );
        assert!(there.headers.get(header::REFERER).is_none(), "{everything}");
        assert!(there.headers.get("x-api-key").is_none(), "{everything}");
    }
    // a body that holds a secret is not sent again to the other host
    let sent = call(
        &server,
        &alice.key,
        "svc_write",
        json!({"http": {"method": "POST",
                        "url": format!("http://{site_addr}/to?status=307&host={other}"),
                        "body": "{\"key\": \"{{secret:K}}\"}"}}),
    )
    .await;
    assert_eq!(sent["isError"], true, "{sent}");
    assert!(sent.to_string().contains("another origin"), "{sent}");
    assert!(seen_there.lock().unwrap().is_empty());
    assert!(!sent.to_string().contains(KEY));
}

#[tokio::test]
async fn what_a_site_chooses_to_echo_is_redacted_too() {
    let (addr, _) = site().await;
    let (_dir, server, alice) = serving().await;
    let noted = call(
        &server,
        &alice.key,
        "svc_read",
        json!({"url": format!("http://{addr}/note"), "headers": {"X-Note": "{{secret:K}}"}}),
    )
    .await;
    let shown = noted.to_string();
    assert_eq!(
        noted["structuredContent"]["url"]["format"], "binary",
        "{shown}"
    );
    assert!(!shown.contains(KEY), "{shown}");
    assert!(
        !shown.contains(&hex::encode(KEY)),
        "the first bytes in hex: {shown}"
    );
    assert!(
        noted["structuredContent"]["url"]["content_type"]
            .as_str()
            .unwrap()
            .contains("[REDACTED:K]"),
        "{shown}"
    );
}

/// A model server on loopback, as ollama serves OpenAI's chat completions; counts every
/// request it gets, whatever its path.
async fn local_model_server() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            axum::routing::post(|| async {
                axum::Json(json!({
                    "id": "c1", "object": "chat.completion", "model": "llama3",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "local answer"}}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
                }))
            }),
        )
        .fallback(any(|| async { "admin page" }))
        .layer(axum::middleware::from_fn(
            move |request, next: axum::middleware::Next| {
                let seen = seen.clone();
                async move {
                    seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    next.run(request).await
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, count)
}

#[tokio::test]
async fn the_operators_loopback_model_answers_but_tenants_cannot_reach_loopback() {
    use std::sync::atomic::Ordering::SeqCst;
    let (model, requests) = local_model_server().await;
    let (other, _) = site().await;
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "loopback@example.org");
    // no egress_allow_private: the model server is reachable because it is configured
    let base = format!("http://{model}/v1");
    let server = Server::start(&storage, &["--ollama-base-url", &base]).await;
    let answer = call(
        &server,
        &alice.key,
        "svc_ai",
        json!({"model": "ollama/llama3", "prompt": "hello"}),
    )
    .await;
    assert_eq!(answer["isError"], false, "{answer}");
    assert_eq!(answer["content"][0]["text"], "local answer");
    assert_eq!(requests.load(SeqCst), 1);
    for url in [
        format!("http://{model}/v1/chat/completions"),
        format!("http://{model}/admin"),
        format!("http://localhost:{}/admin", model.port()),
        format!("http://{other}/deep"),
    ] {
        let refused = call(&server, &alice.key, "svc_read", json!({"url": url})).await;
        assert_eq!(refused["isError"], true, "{url}: {refused}");
        assert!(refused.to_string().contains("loopback"), "{url}: {refused}");
    }
    let posted = call(
        &server,
        &alice.key,
        "svc_write",
        json!({"http": {"method": "POST", "url": format!("http://{model}/v1/chat/completions"),
                        "body": "{}"}}),
    )
    .await;
    assert_eq!(posted["isError"], true, "{posted}");
    assert_eq!(
        requests.load(SeqCst),
        1,
        "no tenant request reached the model server"
    );
}
