//! Turns of outbound work through the real binary: eight accounts with slow fetches do not
//! hold up a ninth's fast one, and a call that finds no turn within the wait is told "busy"
//! for free.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use serde_json::{Value, json};

use crate::common::*;

/// How long a dripping page takes: longer than the 10 s a call waits for a turn.
const DRIP: Duration = Duration::from_secs(12);

/// `/drip` sends a byte a second for [`DRIP`]; `/fast` answers at once. Counts drips started
/// and finished.
async fn site() -> (SocketAddr, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (started, finished) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (s, f) = (started.clone(), finished.clone());
    let app = Router::new()
        .route(
            "/drip",
            get(move || {
                let (s, f) = (s.clone(), f.clone());
                async move {
                    s.fetch_add(1, SeqCst);
                    let seconds = DRIP.as_secs();
                    let body = futures::stream::unfold(0, move |n| {
                        let f = f.clone();
                        async move {
                            if n == seconds {
                                f.fetch_add(1, SeqCst);
                                return None;
                            }
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            Some((Ok::<_, std::io::Error>(vec![b'.']), n + 1))
                        }
                    });
                    axum::body::Body::from_stream(body)
                }
            }),
        )
        .route("/fast", get(|| async { "fast page" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, started, finished)
}

async fn fetch(server: &Server, key: &str, url: &str) -> Value {
    post_personal(
        &client(),
        server,
        key,
        &tool_call("svc_read", json!({"url": url})),
    )
    .await
    .result()
}

#[tokio::test]
async fn eight_slow_tenants_do_not_hold_up_a_ninth_and_a_busy_answer_is_free() {
    let (addr, started, finished) = site().await;
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let accounts: Vec<Account> = (0..10)
        .map(|n| create_account(&storage, &format!("tenant{n}@example.org")))
        .collect();
    let server =
        Arc::new(Server::start(&storage, &["--egress-allow-private", "127.0.0.1/32"]).await);
    let drip = format!("http://{addr}/drip");
    let mut slow = Vec::new();
    for account in &accounts[..8] {
        for _ in 0..5 {
            let (server, key, url) = (server.clone(), account.key.clone(), drip.clone());
            slow.push(tokio::spawn(
                async move { fetch(&server, &key, &url).await },
            ));
        }
    }
    // every account's first fetch (at least) has reached the site
    while started.load(SeqCst) < 8 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    let fast = fetch(&server, &accounts[8].key, &format!("http://{addr}/fast")).await;
    let took = asked.elapsed();
    assert_eq!(fast["isError"], false, "{fast}");
    assert_eq!(fast["content"][0]["text"], "fast page");
    assert_eq!(
        finished.load(SeqCst),
        0,
        "answered while every slow fetch still ran"
    );
    eprintln!("the ninth tenant's fetch took {took:?} under 40 slow ones");

    // a tenth account asks 25 at once: a few run, sixteen wait, the rest are told at once,
    // and those that wait past 10 s are told too; none of them is charged
    let before = server.free_remaining(&accounts[9].key).await;
    let mut crowd = Vec::new();
    for _ in 0..25 {
        let (server, key, url) = (server.clone(), accounts[9].key.clone(), drip.clone());
        crowd.push(tokio::spawn(
            async move { fetch(&server, &key, &url).await },
        ));
    }
    let mut busy = 0;
    for call in crowd {
        let answer = call.await.unwrap();
        if answer
            .to_string()
            .contains("busy: this service is running as many web requests")
        {
            assert_eq!(answer["isError"], true, "{answer}");
            assert!(
                answer.to_string().contains("nothing was charged"),
                "{answer}"
            );
            busy += 1;
        } else {
            assert_eq!(answer["isError"], false, "{answer}");
        }
    }
    assert!(busy >= 25 - 4, "{busy} of 25 were busy");
    let charged = before - server.free_remaining(&accounts[9].key).await;
    assert_eq!(charged, 25 - busy, "busy answers are free");
    // the slow ones ran, or waited past their 10 s (an account's fifth) and were told so
    for call in slow {
        let answer = call.await.unwrap();
        assert!(
            answer["isError"] == false || answer.to_string().contains("busy:"),
            "{answer}"
        );
    }
}
