//! Call history on both backends over the real binary: rows written in batches by the server,
//! read back from the store, a secret printed by sandboxed code nowhere in the history or its
//! export, the run's destinations recorded, and the retention's purge when the server starts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::json;
use toolgate_domain::AccountId;
use toolgate_store::{CallOutcome, CallRecord, HistoryFilter, Store};

use crate::common::*;

/// The account's calls once there are at least `count` (the writer stores off the call's path).
async fn calls_of(store: &dyn Store, account: &str, count: usize) -> Vec<CallRecord> {
    let account = AccountId::from_stored(account.to_owned());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let rows = store
            .call_page(&account, &HistoryFilter::default(), None, 100)
            .await
            .unwrap();
        if rows.len() >= count || Instant::now() > deadline {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A row of `account` `days` old, as a server would have written it then.
fn old_row(account: &str, days: i64) -> CallRecord {
    let at_ms = toolgate_store::now_millis() - days * 24 * 60 * 60 * 1000;
    CallRecord {
        id: format!("call_{at_ms:014x}000000000000000000"),
        account: AccountId::from_stored(account.to_owned()),
        at_ms,
        key_label: "default".into(),
        key_id: None,
        client: None,
        tool: "svc_read".into(),
        fields: "{}".into(),
        outcome: CallOutcome::Ok,
        duration_ms: 1,
        charge: None,
        session: None,
        destinations: Vec::new(),
        model: None,
    }
}

/// Calls recorded by the server, then rows older than `history_days` purged at its next start.
async fn recorded_then_purged(storage: &Storage, email: &str) {
    let alice = create_account(storage, email);
    let mut server = Server::start(storage, &["--sandbox", "off"]).await;
    let http = client();
    let ok = post_personal(&http, &server, &alice.key, &billing_call()).await;
    assert_eq!(ok.result()["isError"], json!(false));
    let failed = post_personal(
        &http,
        &server,
        &alice.key,
        &tool_call("svc_read", json!({"nope": 1})),
    )
    .await;
    assert_eq!(failed.result()["isError"], json!(true));
    let store = storage.open_store().await;
    let rows = calls_of(&*store, &alice.id, 2).await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        matches!(rows[0].outcome, CallOutcome::ToolError(_)),
        "{rows:?}"
    );
    assert_eq!(rows[1].outcome, CallOutcome::Ok);
    assert_eq!(rows[1].fields, r#"{"billing":true}"#);
    assert_eq!(rows[1].key_label, "default");
    server.stop();

    store
        .append_calls(&[old_row(&alice.id, 3), old_row(&alice.id, 10)])
        .await
        .unwrap();
    assert_eq!(calls_of(&*store, &alice.id, 4).await.len(), 4);
    let mut server = Server::start(storage, &["--sandbox", "off", "--history-days", "2"]).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut left = calls_of(&*store, &alice.id, 0).await;
    while left.len() > 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = calls_of(&*store, &alice.id, 0).await;
    }
    assert_eq!(
        left.len(),
        2,
        "the two rows older than 2 days are purged at start: {left:?}"
    );
    assert!(left.iter().all(|row| row.id != old_row(&alice.id, 3).id));
    server.stop();
}

#[tokio::test]
async fn sqlite_records_calls_and_purges_past_retention() {
    let dir = tempfile::tempdir().unwrap();
    recorded_then_purged(&Storage::sqlite(dir.path()), "history-sqlite@example.org").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_records_calls_and_purges_past_retention() {
    let url = std::env::var("TOOLGATE_TEST_POSTGRES_URL")
        .expect("TOOLGATE_TEST_POSTGRES_URL: scripts/test.sh starts a server and sets it");
    let dir = tempfile::tempdir().unwrap();
    let email = format!("history-pg-{}@example.org", toolgate_store::now_millis());
    recorded_then_purged(&Storage::postgres(dir.path(), &url), &email).await;
}

#[tokio::test]
async fn a_secret_code_prints_is_nowhere_in_history_and_destinations_are_recorded() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let site = axum::Router::new().route("/hi", axum::routing::get(|| async { "hi" }));
    tokio::spawn(async move { axum::serve(listener, site).await });
    let d = Dash::start_sandboxed_with(&["--egress-allow-private", "127.0.0.1"]).await;
    let owner = d.sign_in("history-code@example.org").await;
    let key = d.key_of(&owner).await;
    let url = d.server.personal(&key);
    let secret = "code-secret-7d41a0b2";
    let call = |args: serde_json::Value| {
        let (http, url) = (d.http.clone(), url.clone());
        async move {
            post_personal_url(&http, &url, &tool_call("svc_write", args))
                .await
                .result()
        }
    };
    let set = call(json!({"secret_set": {"name": "TOKEN", "value": secret}})).await;
    assert_eq!(set["isError"], json!(false), "{set}");
    let code = format!(
        "import os, urllib.request\n\
         print(os.environ['TOKEN'])\n\
         assert os.environ['TOKEN'] == '{secret}'\n\
         print(urllib.request.urlopen('http://127.0.0.1:{port}/hi').read())"
    );
    let ran = call(json!({"code": code, "secrets": ["TOKEN"]})).await;
    assert_eq!(ran["isError"], json!(false), "{ran}");

    let deadline = Instant::now() + Duration::from_secs(20);
    let csv = loop {
        let csv = d.get("/dashboard/history.csv", Some(&owner.cookie)).await;
        if csv.body.matches("\r\n\"call_").count() >= 2 || Instant::now() > deadline {
            break csv;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(csv.body.matches("\r\n\"call_").count(), 2, "{}", csv.body);
    assert!(
        !csv.body.contains(secret),
        "the secret is in the export: {}",
        csv.body
    );
    assert!(
        csv.body.contains(&format!("127.0.0.1:{port}")),
        "the run's destination: {}",
        csv.body
    );
    let page = d.page("/dashboard/history", &owner).await;
    let newest = page.split(r#"<tr data-id=""#).nth(1).unwrap();
    let id = &newest[..newest.find('"').unwrap()];
    let record = d.page(&format!("/dashboard/history/{id}"), &owner).await;
    assert!(!record.contains(secret));
    let fields = text_of_id(&record, "record-fields").unwrap();
    assert!(
        fields.contains("[REDACTED:TOKEN]"),
        "the value in the code is redacted: {fields}"
    );
    assert!(
        record.contains(&format!("<code>127.0.0.1:{port}</code>")),
        "the run's destination on the record: {record}"
    );
}

#[tokio::test]
async fn a_stateless_request_names_its_client_on_either_path() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "history-modern@example.org");
    let mut server = Server::start(&storage, &["--sandbox", "off"]).await;
    let http = client();
    let info = json!({"name": "modern-sdk", "version": "2.0"});
    // a plain call, answered without rmcp
    let (mut plain, headers) = modern_tool_call("svc_read", json!({"billing": true}));
    plain["params"]["_meta"]["io.modelcontextprotocol/clientInfo"] = info.clone();
    let reply = post_modern(&http, &server, &alice.key, (plain, headers.clone())).await;
    assert_eq!(reply.result()["isError"], json!(false), "{reply:?}");
    // asking for progress sends it through rmcp
    let (mut streamed, _) = modern_tool_call("svc_read", json!({"list_secrets": true}));
    streamed["params"]["_meta"]["io.modelcontextprotocol/clientInfo"] = info;
    streamed["params"]["_meta"]["progressToken"] = json!("p1");
    let reply = post_modern(&http, &server, &alice.key, (streamed, headers)).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let store = storage.open_store().await;
    let rows = calls_of(&*store, &alice.id, 2).await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        assert_eq!(row.client.as_deref(), Some("modern-sdk 2.0"), "{row:?}");
        assert_eq!(row.session, None);
    }
    server.stop();
}

/// A JSON-RPC POST to a personal URL.
async fn post_personal_url(http: &reqwest::Client, url: &str, body: &serde_json::Value) -> Reply {
    send(
        http.post(url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(body.to_string()),
    )
    .await
}
