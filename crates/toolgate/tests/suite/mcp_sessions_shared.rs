//! Legacy MCP sessions behind a load balancer: two `serve` processes on one PostgreSQL serve
//! each other's sessions, a session closed through one stops being served by the other within
//! the re-validation bound (5 s), ids stay their owner's and unguessable on both, and the
//! per-account cap counts the sessions of both.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use toolgate_store_postgres::testkit::with_fresh_database;

use crate::common::*;

/// How long a front end may go on serving a session closed elsewhere (the README's bound), with
/// room for a slow machine.
const CLOSED_ELSEWHERE_WITHIN: Duration = Duration::from_secs(8);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sessions_are_served_by_every_front_end() {
    with_fresh_database(|url| async move {
        let dir = tempfile::tempdir().unwrap();
        let one = Storage::postgres(&dir.path().join("front-1"), &url);
        let two = Storage::postgres(&dir.path().join("front-2"), &url);
        for storage in [&one, &two] {
            std::fs::create_dir_all(&storage.data_dir).unwrap();
        }
        let alice = create_account(&one, "alice@example.org");
        let bob = create_account(&one, "bob@example.org");
        let flags = ["--max-mcp-sessions-per-account", "3"];
        let first = Server::start(&one, &flags).await;
        let second = Server::start(&two, &flags).await;
        let http = client();
        let (a_on_1, a_on_2) = (first.personal(&alice.key), second.personal(&alice.key));
        let (b_on_1, b_on_2) = (first.personal(&bob.key), second.personal(&bob.key));

        let id = open_session(&http, &a_on_1).await.unwrap();
        let listed = send(in_session(&http, &a_on_2, &id, &tools_list())).await;
        assert_eq!(listed.status, 200, "{listed:?}");
        let called = send(in_session(&http, &a_on_2, &id, &billing_call())).await;
        assert_eq!(called.status, 200, "{called:?}");
        billing_of(&called);
        for url in [&b_on_1, &b_on_2] {
            send(in_session(&http, url, &id, &tools_list()))
                .await
                .assert_error(404, -32600);
        }
        for url in [&a_on_1, &a_on_2] {
            send(in_session(
                &http,
                url,
                "0123456789abcdef0123456789abcdef",
                &tools_list(),
            ))
            .await
            .assert_error(404, -32600);
        }

        // closed through the second, refused by the first within the bound
        assert_eq!(
            send(in_session(&http, &a_on_1, &id, &tools_list()))
                .await
                .status,
            200
        );
        let closed = send(
            http.delete(&a_on_2)
                .header("Mcp-Session-Id", &id)
                .header("MCP-Protocol-Version", "2025-11-25"),
        )
        .await;
        assert_eq!(closed.status, 200, "{closed:?}");
        refused_within(&http, &a_on_1, &id).await;

        // the cap (3) counts both front ends' sessions: the fourth closes the longest idle
        let s1 = open_session(&http, &a_on_1).await.unwrap();
        let s2 = open_session(&http, &a_on_2).await.unwrap();
        let s3 = open_session(&http, &a_on_1).await.unwrap();
        let s4 = open_session(&http, &a_on_2).await.unwrap();
        send(in_session(&http, &a_on_2, &s1, &tools_list()))
            .await
            .assert_error(404, -32600);
        refused_within(&http, &a_on_1, &s1).await;
        for (url, session) in [(&a_on_1, &s2), (&a_on_2, &s3), (&a_on_1, &s4)] {
            let listed = send(in_session(&http, url, session, &tools_list())).await;
            assert_eq!(listed.status, 200, "{listed:?}");
        }
    })
    .await;
}

/// Polls `url` with session `id` until it is refused; fails if it is still served after the
/// bound.
async fn refused_within(http: &reqwest::Client, url: &str, id: &str) {
    let start = Instant::now();
    loop {
        let reply = send(in_session(http, url, id, &tools_list())).await;
        if reply.status == 404 {
            reply.assert_error(404, -32600);
            return;
        }
        assert_eq!(reply.status, 200, "{reply:?}");
        assert!(
            start.elapsed() < CLOSED_ELSEWHERE_WITHIN,
            "a session closed elsewhere was still served after {:?}",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
