//! Spend caps over the real binary, 32 calls at once against each: a named key's daily cap
//! (set by `key create`) and then the account's monthly cap (set on the dashboard's Limits
//! page) each admit exactly as many paid calls as they hold; every other call is refused before
//! it runs with -32002 naming the cap; free calls never count. On SQLite and on PostgreSQL
//! with the calls split over two front ends of one database.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use toolgate_store_postgres::testkit::with_fresh_database;

use crate::common::*;

const EMAIL: &str = "capped@example.org";

/// 32 billing calls at once with `key`, alternating between `servers`: (paid, refusals' bodies).
async fn burst(servers: &[&Server], key: &str) -> (usize, Vec<String>) {
    let http = client();
    let calls = (0..32).map(|n| {
        let (http, server, key) = (http.clone(), servers[n % servers.len()], key.to_owned());
        async move { post_personal(&http, server, &key, &billing_call()).await }
    });
    let replies = futures::future::join_all(calls).await;
    let mut refused = Vec::new();
    let mut paid = 0;
    for reply in replies {
        assert_eq!(reply.status, 200, "{reply:?}");
        match reply.error_code() {
            None => {
                let _: Value = reply.result();
                paid += 1;
            }
            Some(-32002) => refused.push(reply.body.clone()),
            Some(other) => panic!("unexpected error {other}: {reply:?}"),
        }
    }
    (paid, refused)
}

async fn caps_hold_under_bursts(d: Dash, second: Option<Server>) {
    let owner = create_account(&d.storage, EMAIL);
    credit(&d.storage, EMAIL, "5.00");
    // before any call: the sign-in reads the newest mail, which the caps' alerts would be
    let s = d.sign_in(EMAIL).await;
    let servers: Vec<&Server> = std::iter::once(&d.server).chain(second.as_ref()).collect();

    // a named key whose daily cap holds ten calls of 0.008
    let key = cli_json(
        &d.storage,
        &[
            "key",
            "create",
            "--email",
            EMAIL,
            "--name",
            "agent",
            "--day-cap-usd",
            "0.08",
        ],
    );
    let agent = key["api_key"].as_str().unwrap().to_owned();
    let (paid, refused) = burst(&servers, &agent).await;
    assert_eq!(paid, 10, "the key's daily cap holds exactly ten calls");
    assert_eq!(refused.len(), 22);
    for body in &refused {
        assert!(
            body.contains("this key's daily spend cap of 0.08 USD (0.08 USD spent today"),
            "{body}"
        );
    }
    assert_eq!(
        d.storage.ledger_counts(&owner.id).await,
        (0, 10),
        "capped calls are free"
    );

    // the account's monthly cap, set on the Limits page, counts every key's spend: 0.08 so far
    let saved = d
        .post(
            "/dashboard/limits/set",
            &s,
            &[
                ("csrf", s.csrf.as_str()),
                ("month", "0.20"),
                ("day", ""),
                ("alert_below", ""),
            ],
        )
        .await;
    assert_eq!(saved.status, 303, "{saved:?}");
    let (paid, refused) = burst(&servers, &owner.key).await;
    assert_eq!(paid, 15, "0.12 USD of room is fifteen calls");
    assert!(
        refused.iter().all(
            |body| body.contains("the account's monthly spend cap of 0.20 USD (0.20 USD spent")
        ),
        "{refused:?}"
    );
    // the key is held to both: its own day is spent, and so is the account's month
    let (paid, _) = burst(&servers, &agent).await;
    assert_eq!(paid, 0);
    assert_eq!(d.storage.ledger_counts(&owner.id).await, (0, 25));
    let billing = d.server.billing(&owner.key).await;
    assert_eq!(billing["wallet_balance_usd"], "4.80", "{billing}");
}

const FREE_NONE: [(&str, &str); 1] = [("TOOLGATE_FREE_MONTHLY_CALLS", "0")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_hold_under_32_concurrent_calls_on_sqlite() {
    caps_hold_under_bursts(Dash::start(&FREE_NONE).await, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_hold_under_32_concurrent_calls_across_two_postgres_front_ends() {
    with_fresh_database(|url| async move {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::postgres(dir.path(), &url);
        let d = Dash::start_on(dir, storage, &FREE_NONE).await;
        let second = Server::start_with_env(&d.storage, &["--sandbox", "off"], &FREE_NONE).await;
        caps_hold_under_bursts(d, Some(second)).await;
    })
    .await;
}
