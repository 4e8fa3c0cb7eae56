//! The service's tools from code, through the real binary: `toolgate.fetch`, `toolgate.http`,
//! `toolgate.sql` and `toolgate.secrets()` in a session are the tools' `url`, `http`, `sql` and
//! `list_secrets`, each one metered call of the session's account, with a secret added by the
//! service (the session never holds it) and bad arguments refused before anything is charged.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{any, get};
use serde_json::{Value, json};

use crate::common::*;

const KEY: &str = "kv-upcall-5e6f7a8b9c";

/// One request as the site saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    uri: String,
    headers: HeaderMap,
    body: String,
}

/// A loopback site: `/page` is HTML, `/missing` a 404 with a JSON body; anything else is
/// recorded and answered with JSON, echoing its `Authorization` in a header (as a careless
/// site does).
async fn site() -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = Router::new()
        .route(
            "/page",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html")],
                    "<h1>Prices</h1><p>A pen costs <b>2</b>.</p>",
                )
            }),
        )
        .route(
            "/missing",
            get(|| async {
                (
                    StatusCode::NOT_FOUND,
                    [(header::CONTENT_TYPE, "application/json")],
                    r#"{"error":"gone"}"#,
                )
            }),
        )
        .fallback(any(
            move |method: axum::http::Method,
                  uri: axum::http::Uri,
                  headers: HeaderMap,
                  body: String| {
                let record = record.clone();
                async move {
                    let auth = headers
                        .get(header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned();
                    record.lock().unwrap().push(Seen {
                        method: method.to_string(),
                        uri: uri.to_string(),
                        headers,
                        body,
                    });
                    (
                        StatusCode::CREATED,
                        [
                            (header::CONTENT_TYPE, "application/json".to_owned()),
                            (header::HeaderName::from_static("x-echo"), auth),
                        ],
                        r#"{"id":7}"#,
                    )
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

/// A sandbox server that may reach loopback sites, alice holding the secret K.
async fn serving(extra: &[&str]) -> Fixture {
    let mut flags = vec!["--egress-allow-private", "127.0.0.1/32"];
    flags.extend_from_slice(extra);
    let f = fixture_with(&flags).await;
    let stored = f
        .write(json!({"secret_set": {"name": "K", "value": KEY}}))
        .await;
    assert_eq!(stored["isError"], false, "{stored}");
    f
}

/// Runs `code` in alice's session `s`: what it printed (one JSON line, parsed) and how many
/// calls it took of her allowance (the cell itself is one).
async fn cell(f: &Fixture, code: &str) -> (Value, i64) {
    let before = f.server.free_remaining(&f.alice.key).await;
    let ran = f
        .write(json!({"code": format!("import json, toolgate\n{code}"), "session_id": "s"}))
        .await;
    let after = f.server.free_remaining(&f.alice.key).await;
    let python = &ran["structuredContent"]["python"];
    assert!(python["error"].is_null(), "{ran}");
    assert!(
        !ran.to_string().contains(KEY),
        "the session saw the key: {ran}"
    );
    let printed = python["stdout"].as_str().unwrap_or_default();
    let printed = serde_json::from_str(printed.trim())
        .unwrap_or_else(|e| panic!("not one JSON line ({e}): {ran}"));
    (printed, before - after)
}

/// `toolgate.fetch` reads a page as the read tool's `url` renders it (a 404 is an answer with its
/// status); `toolgate.http` sends a POST whose `{{secret:K}}` header the site receives filled
/// in, while the session's answer and output show only `[REDACTED:K]`; `toolgate.secrets()`
/// lists names. Each is exactly one metered call beside the cell's own.
#[tokio::test]
async fn code_fetches_and_posts_through_the_service_which_adds_the_secret() {
    let (addr, seen) = site().await;
    let f = serving(&[]).await;
    let (page, charged) = cell(
        &f,
        &format!(
            "p = toolgate.fetch('http://{addr}/page')\n\
             m = toolgate.fetch('http://{addr}/missing')\n\
             print(json.dumps([p['status'], p['format'], p['text'], p['url'], m['status'], \
             m['json'], m['headers']['content-type']]))"
        ),
    )
    .await;
    assert_eq!(
        page,
        json!([200, "markdown", "# Prices\n\nA pen costs **2**.", format!("http://{addr}/page"),
               404, {"error": "gone"}, "application/json"]),
    );
    assert_eq!(charged, 3, "the cell and its two fetches");

    let (posted, charged) = cell(
        &f,
        &format!(
            "h = toolgate.http('POST', 'http://{addr}/items', json={{'name': 'pen'}}, \
             headers={{'Authorization': 'Bearer {{{{secret:K}}}}'}})\n\
             print(json.dumps([h['status'], h['json'], h['headers']['x-echo']]))"
        ),
    )
    .await;
    assert_eq!(posted, json!([201, {"id": 7}, "Bearer [REDACTED:K]"]));
    assert_eq!(charged, 2);
    let got = seen.lock().unwrap().pop().expect("the site got the POST");
    assert_eq!(got.method, "POST");
    assert_eq!(got.uri, "/items");
    assert_eq!(got.headers[header::AUTHORIZATION], format!("Bearer {KEY}"));
    assert_eq!(got.headers[header::CONTENT_TYPE], "application/json");
    assert_eq!(got.body, r#"{"name": "pen"}"#);

    let (names, charged) = cell(&f, "print(json.dumps(toolgate.secrets()))").await;
    assert_eq!(names, json!(["K"]));
    assert_eq!(charged, 2);
}

/// `toolgate.sql` runs a statement on the suite's PostgreSQL named by a vault secret: a write
/// with `write=True`, a read as the read tool's (the database refuses a write there), rows
/// typed; each one metered call. A `sqlite:` database (the session's own file) is refused
/// before metering.
#[tokio::test]
async fn code_queries_a_database_server_through_the_service() {
    let f = serving(&[]).await;
    let url = std::env::var("TOOLGATE_TEST_POSTGRES_URL")
        .expect("TOOLGATE_TEST_POSTGRES_URL: scripts/test.sh starts a server and sets it");
    let stored = f
        .write(json!({"secret_set": {"name": "PG", "value": url}}))
        .await;
    assert_eq!(stored["isError"], false, "{stored}");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let table = format!("upcall_suite_{nanos}");
    let (made, charged) = cell(
        &f,
        &format!(
            "t = toolgate.sql('PG', \"CREATE TABLE {table}(id int, doc jsonb, total numeric(6,2)); \
             INSERT INTO {table} VALUES (1, '{{\\\"a\\\": [1, true]}}', 2.50), (2, NULL, NULL)\", \
             write=True)\n\
             print(json.dumps(t['changes']))"
        ),
    )
    .await;
    assert_eq!(made, json!(2));
    assert_eq!(charged, 2);
    let (rows, charged) = cell(
        &f,
        &format!(
            "t = toolgate.sql('PG', 'SELECT * FROM {table} WHERE id >= $1 AND $2 ORDER BY id', \
             [1, True], max_rows=10)\n\
             q = toolgate.sql('PG', 'SELECT count(*) FROM {table} WHERE doc::text = $1', \
             [\"x' OR '1'='1\"])\n\
             try:\n    toolgate.sql('PG', 'DELETE FROM {table}')\n    e = None\n\
             except toolgate.ToolgateError as error:\n    e = error.code\n\
             print(json.dumps([t['columns'][1], t['rows'], t['row_count'], t['truncated'], e, \
             q['rows']]))"
        ),
    )
    .await;
    assert_eq!(
        rows,
        json!([{"name": "doc", "type": "jsonb"}, [[1, {"a": [1, true]}, "2.50"], [2, null, null]],
               2, false, "failed", [[0]]])
    );
    assert_eq!(charged, 4, "the cell, the two reads and the refused write");

    let (own, charged) = cell(
        &f,
        "import sqlite3\n\
         sqlite3.connect('data.db').execute('CREATE TABLE IF NOT EXISTS t(a)')\n\
         try:\n    toolgate.sql('sqlite:data.db', 'SELECT * FROM t')\n    r = None\n\
         except toolgate.ToolgateError as e:\n    r = [e.code, 'sqlite3' in e.message]\n\
         print(json.dumps(r))",
    )
    .await;
    assert_eq!(own, json!(["bad_request", true]));
    assert_eq!(charged, 1, "only the cell");
    f.write(json!({"database": "PG", "sql": format!("DROP TABLE {table}")}))
        .await;
}

/// Arguments the tools refuse are refused as `bad_request`, nothing charged, nothing sent, the
/// session alive: a 10 MB URL (over the 2 MiB an upcall may be), a URL over the tool's 8 KiB,
/// a header value with CR/LF, headers that are not a dict, numbers of the wrong type.
#[tokio::test]
async fn hostile_arguments_are_refused_before_anything_is_charged_or_sent() {
    let (addr, seen) = site().await;
    let f = serving(&[]).await;
    let calls = [
        format!("toolgate.fetch('http://{addr}/' + 'x' * (10 << 20))"),
        format!("toolgate.fetch('http://{addr}/' + 'x' * 9000)"),
        format!("toolgate.fetch('http://{addr}/a', headers={{'X-A': 'v\\r\\nHost: evil'}})"),
        format!("toolgate.fetch('http://{addr}/a', headers='Authorization: x')"),
        format!("toolgate.fetch('http://{addr}/a', headers=[('A', 'b')])"),
        format!("toolgate.http('POST', 'http://{addr}/a', headers={{'Host': 'evil'}})"),
        format!("toolgate.http('GET', 'http://{addr}/a', body='x')"),
        format!("toolgate.fetch('http://{addr}/a', max_bytes='many')"),
        "toolgate.sql('PG', 'SELECT 1', max_rows=[1])".to_owned(),
        "toolgate.sql('PG', 'SELECT $1', params={'a': 1})".to_owned(),
        "toolgate.sql('PG', 'SELECT $1', params=[[1, 2]])".to_owned(),
        "toolgate._upcall({'kind': 'sql', 'database': 'PG', 'query': 'SELECT $1', 'params': [[1]]})"
            .to_owned(),
        "toolgate.sql('sqlite:data.db', 'SELECT $1', params=[1])".to_owned(),
        "toolgate.sql('not a name', 'SELECT 1')".to_owned(),
    ];
    let code = format!(
        "codes = []\nfor call in {calls:?}:\n    try:\n        eval(call)\n        \
         codes.append(None)\n    except toolgate.ToolgateError as e:\n        \
         codes.append(e.code)\nprint(json.dumps(codes))"
    );
    let (codes, charged) = cell(&f, &code).await;
    assert_eq!(codes, json!(vec!["bad_request"; calls.len()]), "{calls:?}");
    assert_eq!(charged, 1, "only the cell");
    assert!(seen.lock().unwrap().is_empty(), "nothing was sent");
    let (alive, _) = cell(&f, "print(json.dumps(1 + 1))").await;
    assert_eq!(alive, json!(2));
}

/// Once the allowance is used up and the wallet is empty, an upcall is refused like a tool
/// call (`refused`), and nothing reaches the site.
#[tokio::test]
async fn an_upcall_over_the_allowance_is_refused() {
    let (addr, seen) = site().await;
    // the secret's call and the cell's use both free calls
    let f = serving(&["--free-monthly-calls", "2"]).await;
    let (refused, charged) = cell(
        &f,
        &format!(
            "try:\n    toolgate.http('POST', 'http://{addr}/a', body='x')\n    r = None\n\
             except toolgate.ToolgateError as e:\n    r = [e.code, 'top up' in e.message]\n\
             print(json.dumps(r))"
        ),
    )
    .await;
    assert_eq!(refused, json!(["refused", true]));
    assert_eq!(charged, 1);
    assert!(seen.lock().unwrap().is_empty());
}
