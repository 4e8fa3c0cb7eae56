//! Reading workspace files back is work the server does for a tenant: without turns, twelve
//! 8 MB reads at once grew this debug server's peak by ~285 MiB (the issue measured six at
//! ~357 MiB). Reads take turns (one per account, two on the server), so what one tenant can make
//! the server hold is bounded: ~100 MiB here, however many it sends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use serde_json::json;

/// The server's peak resident memory since the last reset, in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_large_reads_are_bounded_in_server_memory() {
    let f = fixture().await;
    let made = f
        .write(json!({"session_id": "big", "code": "import os\nopen('big.bin', 'wb').write(os.urandom(8_000_000))"}))
        .await;
    assert_eq!(made["isError"], false, "{made}");
    // warm the read path once, then measure the peak from here
    f.call(
        &f.alice,
        "svc_read",
        json!({"session_id": "big", "path": "big.bin"}),
    )
    .await;
    let pid = f.server.pid();
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let before = peak_kib(pid);
    let mut reads = Vec::new();
    for _ in 0..12 {
        let (http, url) = (f.http.clone(), f.server.personal(&f.alice.key));
        reads.push(tokio::spawn(async move {
            let body = tool_call("svc_read", json!({"session_id": "big", "path": "big.bin"}));
            send(
                http.post(url)
                    .header("Content-Type", "application/json")
                    .header("Accept", "application/json")
                    .body(body.to_string()),
            )
            .await
        }));
    }
    for read in reads {
        let reply = read.await.unwrap();
        let record = &reply.result()["structuredContent"]["file"];
        assert_eq!(record["size"], 8_000_000, "{}", &reply.body[..200]);
    }
    let grown = peak_kib(pid).saturating_sub(before);
    println!(
        "twelve concurrent 8 MB reads: server peak +{} MiB",
        grown / 1024
    );
    assert!(
        grown < 160 * 1024,
        "twelve reads grew the server by {} MiB",
        grown / 1024
    );
}
