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

/// One 8 MB read, on a server that has read a small file once: how much its peak grows (the
/// goal: at most 3× the file). The file is in the answer once, read into a buffer sized once,
/// its base64 made in place, and the answer written into a buffer sized for it, each content
/// item given up once written (`crates/server/src/direct.rs`): what remains is the file in its
/// answer's form and the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_large_read_grows_the_server_by_a_few_times_the_file() {
    const SIZE: u64 = 8_000_000;
    for (path, most) in [("big.txt", 3.0), ("big.png", 3.0)] {
        for accept in ["application/json", "application/json, text/event-stream"] {
            let f = fixture().await;
            let made = f
                .write(json!({"session_id": "big", "code": "import os\nopen('big.txt', 'w').write('abcdefgh' * 1_000_000)\nopen('big.png', 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + os.urandom(8_000_000 - 8))\nopen('small.txt', 'w').write('x')"}))
                .await;
            assert_eq!(made["isError"], false, "{made}");
            let (pid, url) = (f.server.pid(), f.server.personal(&f.alice.key));
            let post = |path: &str| {
                let body = tool_call("svc_read", json!({"session_id": "big", "path": path}));
                f.http
                    .post(&url)
                    .header("Content-Type", "application/json")
                    .header("Accept", accept)
                    .body(body.to_string())
            };
            send(post("small.txt")).await;
            std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
            let before = peak_kib(pid);
            let reply = send(post(path)).await;
            let grown = peak_kib(pid).saturating_sub(before) * 1024;
            let result = reply.result();
            assert_eq!(result["structuredContent"]["file"]["size"], SIZE, "{path}");
            assert!(
                result["structuredContent"]["file"].get("content").is_none(),
                "{path}: the bytes are in the answer once"
            );
            let times = grown as f64 / SIZE as f64;
            println!("one 8 MB read of {path} ({accept}): server peak +{times:.2}× the file");
            assert!(times <= most, "{path} ({accept}): +{times:.2}× the file");
        }
    }
}
