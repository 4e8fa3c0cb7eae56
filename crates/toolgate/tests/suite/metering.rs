//! Metering through the real binary: the free allowance, then the wallet, then -32002; exact
//! counts under 32 concurrent connections; and no admitted call lost when the server is
//! SIGKILLed mid-burst. The concurrency and crash stories run on SQLite and on PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::json;
use toolgate_store_postgres::testkit::with_fresh_database;

#[tokio::test]
async fn allowance_then_wallet_then_32002() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let email = "wallet@example.org";
    let account = create_account(&storage, email);
    let server = Server::start(&storage, &["--free-monthly-calls", "2"]).await;
    let http = client();

    for expected_free in [1, 0] {
        let record =
            billing_of(&post_personal(&http, &server, &account.key, &billing_call()).await);
        assert_eq!(
            record["free_remaining_this_month"], expected_free,
            "{record}"
        );
        assert_eq!(record["free_monthly_limit"], 2);
        assert_eq!(record["wallet_balance_usd"], "0.00");
        assert_eq!(record["paid_calls_available"], 0);
        assert_eq!(record["paid_call_cost_usd"], "0.008");
    }
    assert_refused(&post_personal(&http, &server, &account.key, &billing_call()).await);
    // Refusals are free and repeatable, in every carrier and for every tool.
    for carrier in CARRIERS {
        assert_refused(&post_rpc(&http, &server, carrier, &account.key, &billing_call()).await);
    }
    // An unknown tool is still -32601, not a refusal for money.
    post_personal(
        &http,
        &server,
        &account.key,
        &tool_call("svc_gone", json!({})),
    )
    .await
    .assert_error(200, -32601);
    // Listing stays free when the allowance is gone.
    post_personal(&http, &server, &account.key, &tools_list())
        .await
        .result();

    // The operator command reads the same settings as the server (here: the allowance flag).
    let credited = cli_json(
        &storage,
        &[
            "wallet",
            "credit",
            "--email",
            email,
            "--usd",
            "0.016",
            "--free-monthly-calls",
            "2",
        ],
    );
    assert_billing_record(&credited);
    assert_eq!(credited["paid_calls_available"], 2, "{credited}");
    assert_eq!(
        credited["wallet_balance_usd"], "0.01",
        "0.016 shows truncated to cents: {credited}"
    );
    assert_eq!(credited["free_remaining_this_month"], 0, "{credited}");
    assert_eq!(credited["free_monthly_limit"], 2, "{credited}");
    let status = server.billing(&account.key).await;
    assert_eq!(
        (
            status["wallet_balance_usd"].as_str(),
            status["paid_calls_available"].as_i64()
        ),
        (Some("0.01"), Some(2))
    );

    let first = billing_of(&post_personal(&http, &server, &account.key, &billing_call()).await);
    assert_eq!(first["paid_calls_available"], 1, "{first}");
    assert_eq!(
        first["wallet_balance_usd"], "0.00",
        "0.008 left shows as 0.00: {first}"
    );
    let second = billing_of(
        &post_rpc(
            &http,
            &server,
            Carrier::XApiKey,
            &account.key,
            &billing_call(),
        )
        .await,
    );
    assert_eq!(second["paid_calls_available"], 0, "{second}");
    assert_eq!(second["wallet_balance_usd"], "0.00", "{second}");
    assert_eq!(second["free_remaining_this_month"], 0, "{second}");
    assert_refused(&post_personal(&http, &server, &account.key, &billing_call()).await);

    let status = server.billing(&account.key).await;
    assert_eq!(status["wallet_balance_usd"], "0.00");
    assert_eq!(status["paid_calls_available"], 0);
    drop(server);
    assert_eq!(
        storage.ledger_counts(&account.id).await,
        (2, 2),
        "two free and two paid calls recorded"
    );
}

fn assert_refused(reply: &Reply) {
    reply.assert_error(200, -32002);
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(
        message.contains("top up") || message.contains("top-up"),
        "the message says how to top up: {message}"
    );
}

/// What a burst of billing calls saw.
#[derive(Debug, Default)]
struct Tally {
    ok: AtomicUsize,
    refused: AtomicUsize,
    /// anything else: a wrong status, a malformed body, a transport error where none is expected
    unexpected: std::sync::Mutex<Vec<String>>,
}

/// `connections` tasks, each with its own one-connection HTTP/1.1 client, take call numbers
/// from a shared counter until `total` are issued or `stop` is set. With `stop_on_error`, a
/// transport failure ends the task quietly (the server was killed); otherwise it is unexpected.
async fn burst(
    url: String,
    total: usize,
    connections: usize,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    stop_on_error: bool,
) {
    let next = Arc::new(AtomicUsize::new(0));
    let body = billing_call().to_string();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (url, body, next, tally, stop) = (
            url.clone(),
            body.clone(),
            next.clone(),
            tally.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let http = client_builder()
                .no_proxy()
                .http1_only()
                .pool_max_idle_per_host(1)
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap();
            while !stop.load(Ordering::SeqCst) && next.fetch_add(1, Ordering::SeqCst) < total {
                let request = http
                    .post(&url)
                    .header("Content-Type", "application/json")
                    .header("Accept", "application/json")
                    .body(body.clone());
                let reply = match try_send(request).await {
                    Ok(reply) => reply,
                    // The server was killed: this connection is done.
                    Err(_) if stop_on_error => return,
                    Err(err) => {
                        tally
                            .unexpected
                            .lock()
                            .unwrap()
                            .push(format!("transport: {err:?}"));
                        return;
                    }
                };
                let parsed: serde_json::Value =
                    serde_json::from_str(&reply.body).unwrap_or_default();
                if reply.status == 200
                    && parsed["result"]["isError"] == false
                    && parsed["result"]["structuredContent"]["billing"].is_object()
                {
                    tally.ok.fetch_add(1, Ordering::SeqCst);
                } else if reply.status == 200 && parsed["error"]["code"] == -32002 {
                    tally.refused.fetch_add(1, Ordering::SeqCst);
                } else {
                    tally
                        .unexpected
                        .lock()
                        .unwrap()
                        .push(format!("{} {}", reply.status, reply.body));
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// 1,000 calls over 32 connections against 10 free calls and 5.00 USD (625 paid calls).
async fn exact_under_concurrency(storage: Storage) {
    let email = "burst@example.org";
    let account = create_account(&storage, email);
    let credited = credit(&storage, email, "5.00");
    assert_eq!(credited["paid_calls_available"], 625, "{credited}");
    let server = Server::start(&storage, &["--free-monthly-calls", "10"]).await;

    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    burst(
        server.personal(&account.key),
        1000,
        32,
        tally.clone(),
        Arc::new(AtomicBool::new(false)),
        false,
    )
    .await;
    let elapsed = started.elapsed();
    let unexpected = tally.unexpected.lock().unwrap().clone();
    assert!(
        unexpected.is_empty(),
        "{} unexpected answers, e.g. {:?}",
        unexpected.len(),
        unexpected.first()
    );
    let (ok, refused) = (
        tally.ok.load(Ordering::SeqCst),
        tally.refused.load(Ordering::SeqCst),
    );
    assert_eq!(
        (ok, refused),
        (635, 365),
        "successes and -32002 refusals (in {elapsed:?})"
    );
    eprintln!("1000 calls over 32 connections in {elapsed:?}");

    let status = server.billing(&account.key).await;
    assert_eq!(status["free_remaining_this_month"], 0, "{status}");
    assert_eq!(status["wallet_balance_usd"], "0.00", "{status}");
    assert_eq!(status["paid_calls_available"], 0, "{status}");
    drop(server);
    assert_eq!(
        storage.ledger_counts(&account.id).await,
        (10, 625),
        "ledger rows (free, paid)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_under_concurrency_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    exact_under_concurrency(Storage::sqlite(dir.path())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_under_concurrency_on_postgres() {
    with_fresh_database(|url| async move {
        let dir = tempfile::tempdir().unwrap();
        exact_under_concurrency(Storage::postgres(dir.path(), &url)).await;
    })
    .await;
}

/// Free 10 and 500.00 USD; SIGKILL after about 200 successes; restart on the same storage.
async fn no_call_lost_when_killed(storage: Storage) {
    const CONNECTIONS: usize = 32;
    const WALLET_MICROS: i64 = 500_000_000;
    const COST_MICROS: i64 = 8_000;
    let email = "crash@example.org";
    let account = create_account(&storage, email);
    credit(&storage, email, "500.00");
    let flags = ["--free-monthly-calls", "10"];
    let mut server = Server::start(&storage, &flags).await;

    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(burst(
        server.personal(&account.key),
        20_000,
        CONNECTIONS,
        tally.clone(),
        stop.clone(),
        true,
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    while tally.ok.load(Ordering::SeqCst) < 200 {
        assert!(
            Instant::now() < deadline,
            "200 successes did not arrive in 60 s: {tally:?}"
        );
        assert!(
            !load.is_finished(),
            "the burst ended before the kill: {tally:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    server.kill();
    stop.store(true, Ordering::SeqCst);
    load.await.unwrap();
    let seen = tally.ok.load(Ordering::SeqCst);
    let unexpected = tally.unexpected.lock().unwrap().clone();
    assert!(
        unexpected.is_empty(),
        "unexpected answers before the kill: {unexpected:?}"
    );
    assert_eq!(
        tally.refused.load(Ordering::SeqCst),
        0,
        "the budget was never exhausted"
    );
    assert!(seen >= 200, "{seen}");

    let server = Server::start(&storage, &flags).await;
    let status = server.billing(&account.key).await;
    drop(server);
    let (free, paid) = storage.ledger_counts(&account.id).await;
    let recorded = usize::try_from(free + paid).unwrap();
    eprintln!(
        "killed mid-burst: clients saw {seen} successes, the ledger holds {recorded} ({free} free, {paid} paid)"
    );
    assert!(
        recorded >= seen,
        "every success the clients saw is in the ledger: ledger {recorded}, seen {seen}"
    );
    assert!(
        recorded <= seen + CONNECTIONS,
        "at most one unanswered call per connection was admitted: ledger {recorded}, seen {seen}"
    );
    assert_eq!(free, 10, "the allowance was used first");

    let free_used = 10 - status["free_remaining_this_month"].as_i64().unwrap();
    assert_eq!(
        free_used, free,
        "status and ledger agree on free calls: {status}"
    );
    let wallet = WALLET_MICROS - COST_MICROS * paid;
    assert_eq!(
        status["wallet_balance_usd"],
        usd_cents(wallet),
        "wallet = 500.00 - 0.008 x {paid}: {status}"
    );
    assert_eq!(
        status["paid_calls_available"],
        wallet / COST_MICROS,
        "{status}"
    );
    assert_eq!(status["free_monthly_limit"], 10);

    // The restarted server keeps metering from where the ledger stands.
    let server = Server::start(&storage, &flags).await;
    let record =
        billing_of(&post_personal(&client(), &server, &account.key, &billing_call()).await);
    assert_eq!(
        record["paid_calls_available"],
        json!((wallet - COST_MICROS) / COST_MICROS),
        "{record}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_lost_when_killed_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    no_call_lost_when_killed(Storage::sqlite(dir.path())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_lost_when_killed_on_postgres() {
    with_fresh_database(|url| async move {
        let dir = tempfile::tempdir().unwrap();
        no_call_lost_when_killed(Storage::postgres(dir.path(), &url)).await;
    })
    .await;
}
