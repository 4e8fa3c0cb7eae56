//! Code's way out: a session reaches the network only through the service's proxy (in its own
//! network namespace, as HTTP_PROXY/HTTPS_PROXY), under the egress guard and the run's limits,
//! and every destination is recorded in the call's result. Real sandboxed sessions, a real site
//! on loopback (made reachable with `--egress-allow-private 127.0.0.1`, as an operator would for
//! an internal API).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::get;
use serde_json::{Value, json};

use crate::common::*;
use crate::sandbox::{is_error, text};

/// Requests a site saw: path and query, and headers.
type Seen = Arc<Mutex<Vec<(String, HeaderMap)>>>;

/// A site on loopback: `/hello` answers "hello from the site", `/big?mib=N` N MiB, `/slow`
/// holds the connection for 5 s; every request is recorded.
async fn site() -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let app = Router::new()
        .route("/hello", get(|| async { "hello from the site" }))
        .route(
            "/big",
            get(
                |axum::extract::Query(q): axum::extract::Query<
                    std::collections::HashMap<String, String>,
                >| async move {
                    let mib: usize = q["mib"].parse().unwrap();
                    vec![b'x'; mib << 20]
                },
            ),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                "slow"
            }),
        )
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let record = record.clone();
                async move {
                    let path = request
                        .uri()
                        .path_and_query()
                        .map(ToString::to_string)
                        .unwrap_or_default();
                    record
                        .lock()
                        .unwrap()
                        .push((path, request.headers().clone()));
                    next.run(request).await
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

/// The run's network record.
fn network(result: &Value) -> Vec<Value> {
    result["structuredContent"]["python"]["network"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn requests_httpx_and_curl_reach_a_site_through_the_proxy_and_each_connection_is_recorded() {
    let (addr, seen) = site().await;
    let f = fixture_with(&["--egress-allow-private", "127.0.0.1"]).await;
    let port = addr.port();
    let code = format!(
        "import requests, httpx, os\n\
         r = requests.get('http://127.0.0.1:{port}/hello?via=requests')\n\
         h = httpx.get('http://127.0.0.1:{port}/hello?via=httpx')\n\
         print(r.status_code, r.text, '|', h.status_code, h.text, '|', os.environ['HTTPS_PROXY'])"
    );
    let result = f.write(json!({"code": code, "session_id": "net"})).await;
    assert!(!is_error(&result), "{result}");
    assert_eq!(
        text(&result).trim(),
        "200 hello from the site | 200 hello from the site | http://127.0.0.1:3128",
        "{result}"
    );
    let reached = network(&result);
    assert_eq!(reached.len(), 2, "{result}");
    for record in &reached {
        assert_eq!(record["host"], "127.0.0.1");
        assert_eq!(record["port"], port);
        assert_eq!(record["kind"], "http");
        assert!(record["bytes_sent"].as_u64().unwrap() > 20, "{record}");
        assert!(record["bytes_received"].as_u64().unwrap() > 19, "{record}");
        assert!(record.get("refused").is_none(), "{record}");
    }
    // bash commands get the proxy too
    let result = f
        .write(json!({"bash": format!("curl -sS http://127.0.0.1:{port}/hello?via=curl"), "session_id": "net"}))
        .await;
    assert!(!is_error(&result), "{result}");
    assert_eq!(text(&result).trim(), "hello from the site", "{result}");
    let paths: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(
        paths,
        ["/hello?via=requests", "/hello?via=httpx", "/hello?via=curl"]
    );
    // no proxy header reaches the site; the proxy asks for one request per connection
    let (_, headers) = &seen.lock().unwrap()[0];
    assert!(headers.get("proxy-connection").is_none());
    assert_eq!(headers["connection"], "close");
}

#[tokio::test]
async fn the_guard_holds_and_there_is_no_route_around_the_proxy() {
    let (addr, seen) = site().await;
    // no --egress-allow-private: loopback and metadata addresses are refused by the proxy
    let f = fixture().await;
    let port = addr.port();
    let code = format!(
        "import requests, socket, errno\n\
         out = []\n\
         for url in ['http://127.0.0.1:{port}/hello', 'http://169.254.169.254/latest/meta-data/',\n\
                     'http://[::1]:{port}/hello', 'http://10.0.0.1/']:\n\
         \x20   r = requests.get(url, timeout=20)\n\
         \x20   out.append((r.status_code, 'reachable from a session' in r.text or 'not reachable' in r.text))\n\
         def attempt(f):\n\
         \x20   try:\n\
         \x20       f(); return 'open'\n\
         \x20   except OSError as e:\n\
         \x20       return type(e).__name__\n\
         def tcp(host, p):\n\
         \x20   s = socket.socket(); s.settimeout(3); s.connect((host, p))\n\
         out.append(attempt(lambda: tcp('127.0.0.1', {port})))\n\
         out.append(attempt(lambda: tcp('1.1.1.1', 80)))\n\
         out.append(attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)))\n\
         out.append(attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)))\n\
         out.append(attempt(lambda: socket.getaddrinfo('example.org', 443)))\n\
         s = socket.socket()\n\
         out.append(attempt(lambda: s.bind(('127.0.0.1', 8080))))\n\
         print(out)"
    );
    let result = f.write(json!({"code": code})).await;
    assert!(!is_error(&result), "{result}");
    let printed = text(&result);
    let line = printed
        .lines()
        .find(|l| l.starts_with('['))
        .unwrap_or_default();
    assert_eq!(
        line,
        "[(403, True), (403, True), (403, True), (403, True), 'PermissionError', \
         'PermissionError', 'PermissionError', 'PermissionError', 'gaierror', 'PermissionError']",
        "{result}"
    );
    assert!(seen.lock().unwrap().is_empty(), "the site was reached");
    let reached = network(&result);
    assert_eq!(reached.len(), 4, "{result}");
    assert!(
        reached.iter().all(|r| r["refused"]
            .as_str()
            .is_some_and(|why| why.contains("address"))),
        "{result}"
    );
    assert!(
        printed.contains("Network: the proxy refused 4"),
        "{printed}"
    );
}

#[tokio::test]
async fn the_network_is_open_only_while_a_call_runs_and_limits_hold() {
    let (addr, _seen) = site().await;
    let f = fixture_with(&[
        "--egress-allow-private",
        "127.0.0.1",
        "--egress-max-connections",
        "2",
        "--egress-max-mib",
        "2",
    ])
    .await;
    let port = addr.port();
    // a thread that outlives its cell finds the network closed
    let later = format!(
        "import threading, time, requests\n\
         found = {{}}\n\
         def later():\n\
         \x20   time.sleep(1.5)\n\
         \x20   try:\n\
         \x20       found['status'] = requests.get('http://127.0.0.1:{port}/hello', timeout=10).status_code\n\
         \x20   except Exception as e:\n\
         \x20       found['status'] = repr(e)\n\
         threading.Thread(target=later).start()"
    );
    let result = f.write(json!({"code": later, "session_id": "l"})).await;
    assert!(!is_error(&result), "{result}");
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let result = f
        .write(json!({"code": "found['status']", "session_id": "l"}))
        .await;
    assert_eq!(text(&result).trim(), "403", "{result}");

    // two connections at once, not three
    let three = format!(
        "import requests, concurrent.futures as cf\n\
         def get(_):\n\
         \x20   return requests.get('http://127.0.0.1:{port}/slow', timeout=20).status_code\n\
         with cf.ThreadPoolExecutor(3) as pool:\n\
         \x20   print(sorted(pool.map(get, range(3))))"
    );
    let result = f.write(json!({"code": three})).await;
    assert_eq!(
        result["structuredContent"]["python"]["stdout"], "[200, 200, 429]\n",
        "{result}"
    );
    assert!(
        text(&result).contains("connections open, the most it may"),
        "{result}"
    );

    // 2 MiB in all: a 3 MiB download is cut, and the record says why
    let big = format!(
        "import requests\n\
         try:\n\
         \x20   r = requests.get('http://127.0.0.1:{port}/big?mib=3', timeout=20)\n\
         \x20   print(len(r.content))\n\
         except Exception as e:\n\
         \x20   print(type(e).__name__)"
    );
    let result = f.write(json!({"code": big})).await;
    assert!(!text(&result).contains("3145728"), "{result}");
    let reached = network(&result);
    assert!(
        reached[0]["refused"]
            .as_str()
            .is_some_and(|w| w.contains("limit of 2097152 bytes")),
        "{result}"
    );
}

#[tokio::test]
async fn with_the_network_off_sessions_have_none() {
    let (addr, seen) = site().await;
    let f = fixture_with(&[
        "--sandbox-network",
        "off",
        "--egress-allow-private",
        "127.0.0.1",
    ])
    .await;
    let code = format!(
        "import os, requests\n\
         try:\n\
         \x20   requests.get('http://127.0.0.1:{}/hello', timeout=5)\n\
         \x20   print('reached')\n\
         except requests.ConnectionError:\n\
         \x20   print('no network', 'HTTP_PROXY' in os.environ)",
        addr.port()
    );
    let result = f.write(json!({"code": code})).await;
    assert_eq!(text(&result).trim(), "no network False", "{result}");
    assert!(seen.lock().unwrap().is_empty());
}
