//! The front door under a hostile tenant: legacy sessions capped and cheap, idle and half-sent
//! connections unable to lock real requests out, keys never in the log, the data directory the
//! owner's alone, and sessions closed as the SDKs' own servers close them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::common::*;

/// One key opening thousands of sessions holds at most its cap, and the server barely grows:
/// before, each session was an rmcp worker (~70 KiB), 3,000 of them +206 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_key_cannot_hoard_legacy_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let hoarder = create_account(&storage, "hoarder@example.org");
    let neighbour = create_account(&storage, "neighbour@example.org");
    let server = Server::start(&storage, &[]).await;
    let http = client();
    let url = server.personal(&hoarder.key);
    let theirs = open_session(&http, &server.personal(&neighbour.key))
        .await
        .unwrap();
    let first = open_session(&http, &url).await.unwrap();
    let before = server.rss_kib();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (http, url) = (http.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let mut opened = Vec::new();
            for _ in 0..200 {
                opened.push(open_session(&http, &url).await.unwrap());
            }
            opened
        }));
    }
    let mut opened = Vec::new();
    for task in tasks {
        opened.extend(task.await.unwrap());
    }
    let grown_kib = server.rss_kib().saturating_sub(before);
    println!("3,200 sessions opened by one key: server RSS +{grown_kib} KiB");
    assert!(grown_kib < 24 * 1024, "the server grew by {grown_kib} KiB");
    let gone = send(in_session(&http, &url, &first, &tools_list())).await;
    gone.assert_error(404, -32600);
    let mut alive = 0;
    for id in &opened {
        let listed = send(in_session(&http, &url, id, &tools_list())).await;
        alive += usize::from(listed.status == 200);
    }
    assert_eq!(alive, 64, "the default cap per account");
    let newest = open_session(&http, &url).await.unwrap();
    let listed = send(in_session(&http, &url, &newest, &tools_list())).await;
    assert_eq!(listed.status, 200, "{listed:?}");
    let still = send(in_session(
        &http,
        &server.personal(&neighbour.key),
        &theirs,
        &tools_list(),
    ))
    .await;
    assert_eq!(
        still.status, 200,
        "another account keeps its session: {still:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_total_refuses_clearly_and_frees_on_close() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let (a, b) = (
        create_account(&storage, "a@example.org"),
        create_account(&storage, "b@example.org"),
    );
    let flags = [
        "--max-mcp-sessions",
        "5",
        "--max-mcp-sessions-per-account",
        "3",
    ];
    let server = Server::start(&storage, &flags).await;
    let http = client();
    let (url_a, url_b) = (server.personal(&a.key), server.personal(&b.key));
    let mut of_a = Vec::new();
    for _ in 0..4 {
        of_a.push(open_session(&http, &url_a).await.unwrap());
    }
    let b1 = open_session(&http, &url_b).await.unwrap();
    open_session(&http, &url_b).await.unwrap();
    let full = open_session(&http, &url_b).await.unwrap_err();
    full.assert_error(503, -32600);
    assert!(full.body.contains("try again"), "{full:?}");
    // a's fourth session closed a's oldest, not b's
    send(in_session(&http, &url_a, &of_a[0], &tools_list()))
        .await
        .assert_error(404, -32600);
    // DELETE answers 200 as the SDKs' servers do (the Python SDK logs anything else), and frees room
    let closed = send(
        http.delete(&url_b)
            .header("Mcp-Session-Id", &b1)
            .header("MCP-Protocol-Version", "2025-11-25"),
    )
    .await;
    assert_eq!(closed.status, 200, "{closed:?}");
    send(in_session(&http, &url_b, &b1, &tools_list()))
        .await
        .assert_error(404, -32600);
    open_session(&http, &url_b).await.unwrap();
    // another account cannot close a session it does not own
    let foreign = send(http.delete(&url_b).header("Mcp-Session-Id", &of_a[3])).await;
    foreign.assert_error(404, -32600);
    let alive = send(in_session(&http, &url_a, &of_a[3], &tools_list())).await;
    assert_eq!(alive.status, 200, "{alive:?}");
    // no unsolicited messages: GET is 405 with what is allowed
    let get = send(
        http.get(&url_a)
            .header("Accept", "text/event-stream")
            .header("Mcp-Session-Id", &of_a[3]),
    )
    .await;
    get.assert_error(405, -32600);
    assert_eq!(get.header("allow").as_deref(), Some("POST, DELETE"));
}

/// With descriptors as scarce as a common 1,024 limit makes them, hundreds of idle and
/// half-sent connections still leave room for `/healthz` and a customer's call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_sent_connections_cannot_lock_real_requests_out() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, "busy@example.org");
    let mut server = Server::start(&storage, &["--max-connections", "150"]).await;
    let pid = server.pid().to_string();
    let limited = std::process::Command::new("prlimit")
        .args(["--pid", &pid, "--nofile=256:256"])
        .status()
        .unwrap();
    assert!(limited.success());
    let mut held = Vec::new();
    for i in 0..400 {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        if i % 2 == 0 {
            stream
                .write_all(b"POST /u/x HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .unwrap();
        }
        held.push(stream);
    }
    let http = client_builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let health = try_send(http.get(server.url("/healthz"))).await;
    assert_eq!(health.map(|r| r.status).ok(), Some(200), "healthz answered");
    let call = try_send(
        http.post(server.personal(&account.key))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .body(billing_call().to_string()),
    )
    .await
    .expect("a customer's call is answered");
    billing_of(&call);
    drop(held);
    assert!(!server.stop_and_read_log().contains("panicked"));
}

/// A key is hidden wherever a client puts it in the URL, routed or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_never_reach_the_log_wherever_they_are_sent() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, "logged@example.org");
    let server = Server::start(&storage, &[]).await;
    let http = client();
    let key = &account.key;
    let secret = &key[key.find('_').unwrap() + 1..];
    for path in [
        format!("/?api_key={key}"),
        format!("/mcp/u/{key}"),
        format!("/u/{key}/extra"),
        format!("/anything?{key}=1"),
        format!("/healthz?token={}", &secret[..40]),
        format!("/u/{key}"),
    ] {
        let _ = try_send(http.get(server.url(&path))).await;
        let _ = try_send(
            http.post(server.url(&path))
                .header("Content-Type", "application/json")
                .body(tools_list().to_string()),
        )
        .await;
    }
    let log = server.settled_log().await;
    assert!(
        log.contains("toolgate::access") || log.contains("/healthz"),
        "{log}"
    );
    assert!(
        !log.contains(&secret[..16]),
        "a key leaked into the log:\n{log}"
    );
}

/// toolgate.db and its companions are 0600, the data directory 0711 (sessions pass through it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_directory_is_the_owners_alone() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let storage = Storage::sqlite(&data);
    let account = create_account(&storage, "private@example.org");
    let server = Server::start(&storage, &[]).await;
    billing_of(&post_personal(&client(), &server, &account.key, &billing_call()).await);
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o711, "the data directory");
    let mut seen = 0;
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("toolgate.db") {
            assert_eq!(mode(&path), 0o600, "{name}");
            seen += 1;
        }
    }
    assert!(
        seen >= 4,
        "the database, its WAL, SHM, key epoch and serve lock: {seen}"
    );
}

/// The plain legacy `tools/list` answered without rmcp is exactly rmcp's answer, and a request
/// rmcp would refuse (a foreign Host) is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_without_rmcp_is_rmcps_answer() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, "lister@example.org");
    let server = Server::start(&storage, &[]).await;
    let http = client();
    let plain = post_personal(&http, &server, &account.key, &tools_list()).await;
    let with_cursor = rpc(1, "tools/list", Some(serde_json::json!({"cursor": "c"})));
    let through_rmcp = post_personal(&http, &server, &account.key, &with_cursor).await;
    // rmcp's `Tool` has no `execution`: the answer written here adds 2025-11-25's
    // `execution.taskSupport` to the tools that may run as MCP tasks, and nothing else
    let mut plain_without = plain.json();
    for tool in plain_without["result"]["tools"].as_array_mut().unwrap() {
        let support = tool.as_object_mut().unwrap().remove("execution");
        let expected = match tool["name"].as_str().unwrap() {
            "svc_read" => None,
            _ => Some(serde_json::json!({"taskSupport": "optional"})),
        };
        assert_eq!(support, expected, "{tool}");
    }
    assert_eq!(plain_without, through_rmcp.json());
    assert!(plain.result()["tools"].as_array().unwrap().len() == 3);
    let url = server.personal(&account.key);
    let session = open_session(&http, &url).await.unwrap();
    let in_it = send(in_session(&http, &url, &session, &tools_list())).await;
    assert_eq!(in_it.json(), plain.json());
    let head = format!(
        "POST /u/{} HTTP/1.1\r\nHost: evil.example\r\nContent-Type: application/json",
        account.key
    );
    let foreign = raw_http(server.port, &head, tools_list().to_string().as_bytes()).await;
    assert_eq!(foreign.status, 403, "{foreign:?}");
}
