//! `url` through HTTP: a page fetched on the caller's behalf, `{{secret:NAME}}` filled in and
//! redacted from the answer, private destinations refused unless the operator allows them, and
//! headers that frame the request or steer the connection never taken from the caller.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::get;
use serde_json::{Value, json};

use crate::common::*;

const TOKEN: &str = "tok-9d8e7f6a5b4c3d2e";

/// A loopback site that records the Authorization header of each request.
async fn site() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = Router::new()
        .route(
            "/page",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html")],
                    "<html><body><h2>Prices</h2><ul><li>one</li><li>two</li></ul></body></html>",
                )
            }),
        )
        .route(
            "/echo",
            get(move |headers: HeaderMap| {
                let record = record.clone();
                async move {
                    let auth = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned();
                    record.lock().unwrap().push(auth.clone());
                    (
                        [(header::CONTENT_TYPE, "application/json")],
                        json!({"you_sent": auth}).to_string(),
                    )
                }
            }),
        )
        .route(
            "/missing",
            get(|| async { (StatusCode::NOT_FOUND, "no such page") }),
        )
        .route(
            "/items",
            axum::routing::any(|method: axum::http::Method, body: String| async move {
                (StatusCode::CREATED, format!("{method} {body}"))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

async fn read(server: &Server, key: &str, args: Value) -> Value {
    post_personal(&client(), server, key, &tool_call("svc_read", args))
        .await
        .result()
}

#[tokio::test]
async fn pages_are_fetched_and_secrets_in_headers_never_come_back() {
    let (addr, seen) = site().await;
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "web@example.org");
    let mut server = Server::start(&storage, &["--egress-allow-private", "127.0.0.1/32"]).await;

    let page = read(
        &server,
        &alice.key,
        json!({"url": format!("http://{addr}/page")}),
    )
    .await;
    assert_eq!(page["isError"], false, "{page}");
    let text = page["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("## Prices") && text.contains("one"), "{text}");
    let url = &page["structuredContent"]["url"];
    assert_eq!(url["status"], 200);
    assert_eq!(url["format"], "markdown");
    assert_eq!(url["content_type"], "text/html");
    assert_eq!(url["final_url"], format!("http://{addr}/page"));

    let write = json!({"secret_set": {"name": "API_TOKEN", "value": TOKEN}});
    post_personal(
        &client(),
        &server,
        &alice.key,
        &tool_call("svc_write", write),
    )
    .await;
    let echoed = read(
        &server,
        &alice.key,
        json!({"url": format!("http://{addr}/echo"),
               "headers": {"Authorization": "Bearer {{secret:API_TOKEN}}"}}),
    )
    .await;
    assert_eq!(echoed["isError"], false, "{echoed}");
    assert_eq!(seen.lock().unwrap().as_slice(), [format!("Bearer {TOKEN}")]);
    let shown = echoed.to_string();
    assert!(!shown.contains(TOKEN), "the secret came back: {shown}");
    assert!(shown.contains("Bearer [REDACTED:API_TOKEN]"), "{shown}");

    let missing = read(
        &server,
        &alice.key,
        json!({"url": format!("http://{addr}/missing")}),
    )
    .await;
    assert_eq!(missing["isError"], true, "{missing}");
    assert_eq!(missing["structuredContent"]["url"]["status"], 404);
    assert!(
        !server.stop_and_read_log().contains(TOKEN),
        "the secret is in the log"
    );
}

#[tokio::test]
async fn private_destinations_and_bad_input_are_refused_clearly() {
    let (addr, seen) = site().await;
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "guarded@example.org");
    let server = Server::start(&storage, &[]).await;
    let port = addr.port();
    for (args, says) in [
        (
            json!({"url": format!("http://127.0.0.1:{port}/page")}),
            "loopback",
        ),
        (
            json!({"url": format!("http://0x7f000001:{port}/page")}),
            "loopback",
        ),
        (
            json!({"url": format!("http://[::ffff:127.0.0.1]:{port}/page")}),
            "loopback",
        ),
        (
            json!({"url": format!("http://localhost:{port}/page")}),
            "loopback",
        ),
        (
            json!({"url": "http://169.254.169.254/latest/meta-data/"}),
            "metadata",
        ),
        (json!({"url": "file:///etc/passwd"}), "only http"),
        (json!({"url": "not a url"}), "not a URL"),
        (json!({"url": 5}), "must be a string"),
        (
            json!({"url": "http://example.com/", "headers": "x"}),
            "object of header names",
        ),
        (
            json!({"url": "http://example.com/", "headers": {"X": "a\r\nB: c"}}),
            "line breaks",
        ),
        (
            json!({"url": "http://example.com/", "headers": {"Bad Name": "v"}}),
            "not a header name",
        ),
        (
            json!({"url": "http://example.com/", "headers": {"Transfer-Encoding": "chunked"}}),
            "set by the service",
        ),
        (
            json!({"url": "http://example.com/", "headers": {"Proxy-Authorization": "x"}}),
            "set by the service",
        ),
        (
            json!({"url": "http://example.com/", "max_bytes": 0}),
            "between 1 and",
        ),
        (
            json!({"url": "http://example.com/{{secret:NOPE}}"}),
            "no secret named NOPE",
        ),
        (
            json!({"url": "http://example.com/{{secret:NOPE"}),
            "not closed",
        ),
        (json!({"headers": {"A": "b"}}), "without a field that asks"),
    ] {
        let result = read(&server, &alice.key, args.clone()).await;
        assert_eq!(result["isError"], true, "{args}: {result}");
        assert!(result.to_string().contains(says), "{args}: {result}");
    }
    assert!(seen.lock().unwrap().is_empty());
    // fetches the guard refused ran (8, charged); argument errors were refused before metering
    assert_eq!(server.free_remaining(&alice.key).await, 1000 - 8);
}

#[tokio::test]
async fn http_sends_writes_with_secrets_in_the_body() {
    let (addr, _) = site().await;
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "sender@example.org");
    let server = Server::start(&storage, &["--egress-allow-private", "127.0.0.1/32"]).await;
    let write = |args: Value| {
        let (server, key) = (&server, alice.key.clone());
        async move {
            post_personal(&client(), server, &key, &tool_call("svc_write", args))
                .await
                .result()
        }
    };
    write(json!({"secret_set": {"name": "API_TOKEN", "value": TOKEN}})).await;
    for method in ["POST", "PUT", "PATCH", "DELETE"] {
        let sent = write(
            json!({"http": {"method": method, "url": format!("http://{addr}/items"),
            "headers": {"Content-Type": "application/json"},
            "body": "{\"token\": \"{{secret:API_TOKEN}}\"}"}}),
        )
        .await;
        assert_eq!(sent["isError"], false, "{sent}");
        let text = sent["content"][0]["text"].as_str().unwrap();
        assert_eq!(
            text,
            format!("{method} {{\"token\": \"[REDACTED:API_TOKEN]\"}}")
        );
        assert_eq!(sent["structuredContent"]["http"]["status"], 201);
        assert_eq!(sent["structuredContent"]["http"]["method"], method);
    }
    for (args, says) in [
        (
            json!({"http": {"method": "GET", "url": "http://example.com/"}}),
            "one of POST",
        ),
        (json!({"http": {"method": "POST"}}), "must be a string"),
        (
            json!({"http": {"method": "POST", "url": "http://example.com/", "verb": 1}}),
            "unknown key",
        ),
        (
            json!({"http": {"method": "POST", "url": "http://example.com/", "body": 5}}),
            "must be a string",
        ),
        (
            json!({"http": {"method": "POST", "url": "http://example.com/", "body": "{{secret:A"}}),
            "not closed",
        ),
        (
            json!({"http": "POST http://example.com/"}),
            "must be an object",
        ),
        (
            json!({"http": {"method": "POST", "url": "http://10.0.0.1/"}}),
            "private address",
        ),
    ] {
        let result = write(args.clone()).await;
        assert_eq!(result["isError"], true, "{args}: {result}");
        assert!(result.to_string().contains(says), "{args}: {result}");
    }
}

/// One account's fetches take turns: however many it sends, at most four are in flight.
#[tokio::test]
async fn one_accounts_fetches_take_turns() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (n, m) = (now.clone(), most.clone());
    let app = Router::new().route(
        "/hold",
        get(move || {
            let (n, m) = (n.clone(), m.clone());
            async move {
                let inside = n.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(inside, Ordering::SeqCst);
                // the page takes a while to come, as a slow site's does
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                n.fetch_sub(1, Ordering::SeqCst);
                "held"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "many@example.org");
    let server = Server::start(&storage, &["--egress-allow-private", "127.0.0.1/32"]).await;
    let server = Arc::new(server);
    let mut calls = Vec::new();
    for _ in 0..10 {
        let (server, key) = (server.clone(), alice.key.clone());
        let url = format!("http://{addr}/hold");
        calls.push(tokio::spawn(async move {
            read(&server, &key, json!({"url": url})).await
        }));
    }
    for call in calls {
        assert_eq!(call.await.unwrap()["isError"], false);
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        (2..=4).contains(&most),
        "{most} fetches of one account were in flight at once"
    );
}

/// Headers that frame the request or steer the connection (README, "Outbound requests"), as a
/// caller might write them.
const RESERVED: [&str; 14] = [
    "Host",
    "host",
    "Content-Length",
    "Transfer-Encoding",
    "CONNECTION",
    "Keep-Alive",
    "Upgrade",
    "TE",
    "te",
    "Trailer",
    "Proxy-Authorization",
    "Proxy-Connection",
    "proxy-authenticate",
    "Proxy-Anything-Else",
];

#[tokio::test]
async fn headers_that_frame_the_request_cannot_be_set_by_the_caller() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    let app = Router::new().route(
        "/any",
        axum::routing::any(move |headers: HeaderMap| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                let custom = headers.get("x-custom").map(|v| v.as_bytes().to_vec());
                String::from_utf8(custom.unwrap_or_default()).unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "framing@example.org");
    let server = Server::start(&storage, &["--egress-allow-private", "127.0.0.1/32"]).await;
    let url = format!("http://{addr}/any");
    let call = |tool: &'static str, args: Value| {
        let (server, key) = (&server, alice.key.clone());
        async move {
            post_personal(&client(), server, &key, &tool_call(tool, args))
                .await
                .result()
        }
    };
    // an ordinary header goes through: the site is reachable and counts what arrives
    let ordinary = call(
        "svc_read",
        json!({"url": url, "headers": {"X-Custom": "seen"}}),
    )
    .await;
    assert_eq!(ordinary["isError"], false, "{ordinary}");
    assert_eq!(ordinary["content"][0]["text"], "seen", "{ordinary}");
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    let before = server.free_remaining(&alice.key).await;
    for name in RESERVED {
        for (tool, args) in [
            ("svc_read", json!({"url": url, "headers": {name: "0"}})),
            (
                "svc_write",
                json!({"http": {"method": "POST", "url": url, "headers": {name: "0"}, "body": "b"}}),
            ),
        ] {
            let refused = call(tool, args).await;
            assert_eq!(refused["isError"], true, "{tool} {name}: {refused}");
            let says = format!("{name} is set by the service itself");
            assert!(
                refused.to_string().contains(&says),
                "{tool} {name}: {refused}"
            );
        }
    }
    assert_eq!(
        requests.load(Ordering::SeqCst),
        1,
        "a refused request was sent"
    );
    assert_eq!(
        server.free_remaining(&alice.key).await,
        before,
        "refused arguments are free"
    );
}
