//! MCP tasks behind a load balancer: two `serve` processes on one PostgreSQL, each with its own
//! sandbox. A task made through one is read and cancelled through the other (the cancel stops
//! its code where it runs), and a task whose front end is killed ends `failed` through the
//! other, once that one has not heard the dead one beat.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use toolgate_store_postgres::testkit::with_fresh_database;

use crate::common::*;

/// How long a killed front end's task may stay `working` elsewhere: the README's bound (30 s
/// without a beat, swept every 5 s), with room for a slow machine.
const LOST_WITHIN: Duration = Duration::from_secs(50);

async fn post(http: &reqwest::Client, url: &str, session: &str, body: &Value) -> Value {
    let reply = send(in_session(http, url, session, body)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()
}

fn task_call(code: &str) -> Value {
    let mut call = tool_call(
        "svc_write",
        json!({"code": code, "session_id": "shared", "timeout_s": 120}),
    );
    call["params"]["task"] = json!({"ttl": 600_000});
    call
}

fn about(method: &str, id: &str) -> Value {
    rpc(9, method, Some(json!({"taskId": id})))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_answered_and_cancelled_by_every_front_end() {
    with_fresh_database(|url| async move {
        let dirs = [sandbox_dir(), sandbox_dir()];
        let stores = [
            Storage::postgres(&dirs[0].path().join("data"), &url),
            Storage::postgres(&dirs[1].path().join("data"), &url),
        ];
        for storage in &stores {
            std::fs::create_dir_all(&storage.data_dir).unwrap();
        }
        let alice = create_account(&stores[0], "alice@example.org");
        let mut servers = Vec::new();
        for (n, (dir, storage)) in dirs.iter().zip(&stores).enumerate() {
            let mut flags = sandbox_flags(dir.path());
            flags.extend([
                "--sandbox-first-uid".to_owned(),
                (1_200_000_000 + n * 100_000).to_string(),
            ]);
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            servers.push(Server::start(storage, &flags).await);
        }
        let http = client();
        let (one, two) = (
            servers[0].personal(&alice.key),
            servers[1].personal(&alice.key),
        );
        let s1 = open_session(&http, &one).await.unwrap();
        let s2 = open_session(&http, &two).await.unwrap();

        let made = post(
            &http,
            &one,
            &s1,
            &task_call("import time\ntime.sleep(8)\nopen('after.txt', 'w').write('x')"),
        )
        .await;
        let id = made["result"]["task"]["taskId"]
            .as_str()
            .unwrap()
            .to_owned();
        let seen = post(&http, &two, &s2, &about("tasks/get", &id)).await;
        assert_eq!(seen["result"]["status"], "working", "{seen}");
        let cancelled = post(&http, &two, &s2, &about("tasks/cancel", &id)).await;
        assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
        // the code runs on the first front end's sandbox; it is stopped from there within a second
        tokio::time::sleep(Duration::from_secs(10)).await;
        let look = post(
            &http,
            &one,
            &s1,
            &tool_call(
                "svc_write",
                json!({"code": "import os\nos.path.exists('after.txt')", "session_id": "shared"}),
            ),
        )
        .await;
        assert_eq!(
            value(&look["result"]),
            "False",
            "a cancel made elsewhere did not stop the code: {look}"
        );

        // the first front end dies with a task running; the second fails it, never leaves it hanging
        let made = post(&http, &one, &s1, &task_call("import time\ntime.sleep(100)")).await;
        let id = made["result"]["task"]["taskId"]
            .as_str()
            .unwrap()
            .to_owned();
        servers[0].kill();
        let deadline = tokio::time::Instant::now() + LOST_WITHIN;
        let task = loop {
            let task = post(&http, &two, &s2, &about("tasks/get", &id)).await["result"].clone();
            if task["status"] != "working" || tokio::time::Instant::now() > deadline {
                break task;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        assert_eq!(task["status"], "failed", "{task}");
        assert!(
            task["statusMessage"].as_str().unwrap().contains("stopped"),
            "{task}"
        );
        let result = post(&http, &two, &s2, &about("tasks/result", &id)).await;
        assert_eq!(result["error"]["code"], -32603, "{result}");
    })
    .await;
}
