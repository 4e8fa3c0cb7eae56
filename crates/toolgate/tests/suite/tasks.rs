//! MCP tasks over the real binary and real sandboxed Python, in both wire generations:
//! 2025-11-25's client-requested tasks in a legacy session (a run past the 300 s ceiling of a
//! waiting request, `tasks/result` waiting for it, one charge), their isolation between
//! accounts and their cancellation; 2026-07-28's server-directed tasks (a call that outlasts
//! `task_after_s` becomes one; a quick one does not); the per-account cap; a restart that ends a
//! running task as `failed` rather than leaving it hanging; hostile `tasks/*` params.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Account, Server, Storage, client, client_builder, create_account};
use crate::common::{SandboxDir, sandbox_dir, sandbox_flags, value};
use crate::common::{
    initialize, modern_request, open_session, post_modern, rpc, send, tool_call, tools_list,
};

/// A POST in legacy session `session` at `url`.
async fn in_session(http: &reqwest::Client, url: &str, session: &str, body: &Value) -> Value {
    let reply = send(crate::common::in_session(http, url, session, body)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()
}

/// A `tools/call` of svc_write asking for a task.
fn task_call(code: &str, timeout_s: u64) -> Value {
    let mut call = tool_call(
        "svc_write",
        json!({"code": code, "session_id": "t1", "timeout_s": timeout_s}),
    );
    call["params"]["task"] = json!({"ttl": 600_000});
    call
}

fn task_request(method: &str, id: &str) -> Value {
    rpc(7, method, Some(json!({"taskId": id})))
}

struct Started {
    storage: Storage,
    server: Server,
    alice: Account,
    bob: Account,
    // last: fields drop in order, and the server must be gone before its directory goes
    _dir: SandboxDir,
}

async fn start(extra: &[&str]) -> Started {
    let dir = sandbox_dir();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "alice@example.org");
    let bob = create_account(&storage, "bob@example.org");
    let flags = sandbox_flags(dir.path());
    let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    flags.extend_from_slice(extra);
    let server = Server::start(&storage, &flags).await;
    Started {
        storage,
        server,
        alice,
        bob,
        _dir: dir,
    }
}

/// Polls `tasks/get` until the task has ended (or `limit` passed); the last answer.
async fn ended(
    http: &reqwest::Client,
    url: &str,
    session: &str,
    id: &str,
    limit: Duration,
) -> Value {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let task =
            in_session(http, url, session, &task_request("tasks/get", id)).await["result"].clone();
        let status = task["status"].as_str().unwrap_or_default().to_owned();
        if !matches!(status.as_str(), "working" | "input_required")
            || tokio::time::Instant::now() > deadline
        {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_2025_task_runs_past_a_requests_ceiling_and_is_charged_once() {
    let s = start(&[]).await;
    // tasks/result waits the five minutes out
    let http = client_builder()
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap();
    let url = s.server.personal(&s.alice.key);
    let opened = send(
        http.post(&url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(initialize().to_string()),
    )
    .await;
    assert_eq!(
        opened.json()["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"],
        json!({}),
        "initialize must declare task-augmented tools/call: {}",
        opened.body
    );
    let session = opened.header("mcp-session-id").unwrap();
    let tools = in_session(&http, &url, &session, &tools_list()).await;
    let support = |name: &str| {
        tools["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["execution"]["taskSupport"].clone())
            .unwrap()
    };
    assert_eq!(support("svc_write"), "optional");
    assert_eq!(support("svc_ai"), "optional");
    assert_eq!(
        support("svc_read"),
        Value::Null,
        "a quick read never runs as a task"
    );

    // past 300 s, a call whose client waits is refused with a pointer to tasks
    let waited = in_session(
        &http,
        &url,
        &session,
        &tool_call("svc_write", json!({"code": "1", "timeout_s": 330})),
    )
    .await;
    let text = waited["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("MCP task"), "{waited}");

    let free_before = s.server.free_remaining(&s.alice.key).await;
    let created = in_session(
        &http,
        &url,
        &session,
        &task_call(
            "import time\ntime.sleep(305)\nx = 'done after five minutes'\nx",
            330,
        ),
    )
    .await;
    let task = &created["result"]["task"];
    let id = task["taskId"]
        .as_str()
        .expect("a CreateTaskResult")
        .to_owned();
    assert_eq!(task["status"], "working", "{created}");
    assert_eq!(task["ttl"], 600_000);
    assert!(task["pollInterval"].as_u64().unwrap() > 0);
    let listed = in_session(&http, &url, &session, &rpc(3, "tasks/list", None)).await;
    assert!(
        listed["result"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["taskId"] == id.as_str()),
        "{listed}"
    );
    // a fresh session (or another front end) sees the same task: it lives in the store
    let other = open_session(&http, &url).await.unwrap();
    let seen = in_session(&http, &url, &other, &task_request("tasks/get", &id)).await;
    assert_eq!(seen["result"]["status"], "working", "{seen}");

    let result = in_session(&http, &url, &session, &task_request("tasks/result", &id)).await;
    let result = &result["result"];
    assert_eq!(value(result), "'done after five minutes'", "{result}");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    let done = in_session(&http, &url, &session, &task_request("tasks/get", &id)).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(
        free_before - s.server.free_remaining(&s.alice.key).await,
        1,
        "a task is metered once, by the call it wraps"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_is_its_accounts_alone_and_cancel_stops_its_code() {
    let s = start(&[]).await;
    let http = client();
    let (alice_url, bob_url) = (
        s.server.personal(&s.alice.key),
        s.server.personal(&s.bob.key),
    );
    let alice = open_session(&http, &alice_url).await.unwrap();
    let bob = open_session(&http, &bob_url).await.unwrap();
    let created = in_session(
        &http,
        &alice_url,
        &alice,
        &task_call(
            "import time\ntime.sleep(8)\nopen('after.txt', 'w').write('x')",
            60,
        ),
    )
    .await;
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    for method in ["tasks/get", "tasks/cancel", "tasks/result"] {
        let reply = in_session(&http, &bob_url, &bob, &task_request(method, &id)).await;
        assert_eq!(
            reply["error"]["code"], -32602,
            "{method} of another account's task: {reply}"
        );
    }
    let listed = in_session(&http, &bob_url, &bob, &rpc(3, "tasks/list", None)).await;
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");

    tokio::time::sleep(Duration::from_secs(1)).await;
    let cancelled = in_session(
        &http,
        &alice_url,
        &alice,
        &task_request("tasks/cancel", &id),
    )
    .await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    let again = in_session(
        &http,
        &alice_url,
        &alice,
        &task_request("tasks/cancel", &id),
    )
    .await;
    assert_eq!(
        again["error"]["code"], -32602,
        "an ended task cannot be cancelled: {again}"
    );
    let result = in_session(
        &http,
        &alice_url,
        &alice,
        &task_request("tasks/result", &id),
    )
    .await;
    assert!(
        result["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cancelled"),
        "{result}"
    );
    // the code was interrupted: what it would have written after its sleep never appears
    tokio::time::sleep(Duration::from_secs(10)).await;
    let look = in_session(
        &http,
        &alice_url,
        &alice,
        &tool_call(
            "svc_write",
            json!({"code": "import os\nos.path.exists('after.txt')", "session_id": "t1"}),
        ),
    )
    .await;
    assert_eq!(
        value(&look["result"]),
        "False",
        "the cancelled code ran on: {look}"
    );
    let status = ended(&http, &alice_url, &alice, &id, Duration::from_secs(1)).await;
    assert_eq!(status["status"], "cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_2026_call_becomes_a_task_only_when_it_outlasts_task_after_s() {
    let s = start(&["--task-after-s", "1"]).await;
    let http = client();
    let with_tasks = |code: &str| {
        let (mut body, headers) = modern_request(
            json!(1),
            "tools/call",
            json!({"name": "svc_write", "arguments": {"code": code, "session_id": "m"}}),
        );
        body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
        (body, headers)
    };
    let quick = post_modern(&http, &s.server, &s.alice.key, with_tasks("20 + 22")).await;
    assert_eq!(
        quick.json()["result"]["resultType"],
        "complete",
        "{}",
        quick.body
    );
    assert_eq!(value(&quick.json()["result"]), "42");

    let long = post_modern(
        &http,
        &s.server,
        &s.alice.key,
        with_tasks("import time\ntime.sleep(4)\n'slept'"),
    )
    .await;
    let handle = long.json()["result"].clone();
    assert_eq!(handle["resultType"], "task", "{}", long.body);
    assert!(handle.get("task").is_none(), "a 2026 handle is flat");
    let id = handle["taskId"].as_str().unwrap().to_owned();
    assert_eq!(handle["ttlMs"], 3_600_000);
    let get = |id: String| {
        let (mut body, mut headers) =
            modern_request(json!(2), "tasks/get", json!({"taskId": id.clone()}));
        body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
        headers.push(("Mcp-Name", id));
        (body, headers)
    };
    let mut last = Value::Null;
    for _ in 0..60 {
        last = post_modern(&http, &s.server, &s.alice.key, get(id.clone()))
            .await
            .json()["result"]
            .clone();
        if last["status"] != "working" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(
        value(&last["result"]),
        "'slept'",
        "the result is inlined: {last}"
    );
    // another account asking for it learns nothing
    let foreign = post_modern(&http, &s.server, &s.bob.key, get(id.clone())).await;
    assert_eq!(foreign.json()["error"]["code"], -32602, "{}", foreign.body);

    // a client that goes away before its call became a task cancels it, as for any call
    let impatient = client_builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let (body, headers) =
        with_tasks("import time\ntime.sleep(3)\nopen('gone.txt', 'w').write('x')");
    let mut request = impatient
        .post(s.server.personal(&s.alice.key))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream");
    for (name, value) in &headers {
        request = request.header(*name, value);
    }
    assert!(
        request.body(body.to_string()).send().await.is_err(),
        "the request should time out"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let look = post_modern(
        &http,
        &s.server,
        &s.alice.key,
        with_tasks("import os\nos.path.exists('gone.txt')"),
    )
    .await;
    assert_eq!(
        value(&look.json()["result"]),
        "False",
        "the abandoned call ran on: {}",
        look.body
    );

    // a client that did not declare the extension waits for its call, however long
    let (body, headers) = modern_request(
        json!(3),
        "tools/call",
        json!({"name": "svc_write", "arguments": {"code": "import time\ntime.sleep(2)\n'waited'", "session_id": "m"}}),
    );
    let plain = post_modern(&http, &s.server, &s.alice.key, (body, headers)).await;
    assert_eq!(
        plain.json()["result"]["resultType"],
        "complete",
        "{}",
        plain.body
    );
    assert_eq!(value(&plain.json()["result"]), "'waited'");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_account_runs_at_most_its_cap_of_tasks() {
    let s = start(&["--task-max-running", "1"]).await;
    let http = client();
    let url = s.server.personal(&s.alice.key);
    let session = open_session(&http, &url).await.unwrap();
    let first = in_session(
        &http,
        &url,
        &session,
        &task_call("import time\ntime.sleep(30)", 60),
    )
    .await;
    let id = first["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    // the first task's charge commits just after its handle is answered
    let mut free_before = s.server.free_remaining(&s.alice.key).await;
    for _ in 0..50 {
        if free_before == 999 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        free_before = s.server.free_remaining(&s.alice.key).await;
    }
    assert_eq!(free_before, 999, "the first task is charged once");
    let second = in_session(&http, &url, &session, &task_call("1", 60)).await;
    assert_eq!(second["error"]["code"], -32600, "{second}");
    assert!(
        second["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1 tasks"),
        "{second}"
    );
    assert_eq!(
        s.server.free_remaining(&s.alice.key).await,
        free_before,
        "a task refused for the cap is not charged"
    );
    // bob has his own cap
    let bob_url = s.server.personal(&s.bob.key);
    let bob = open_session(&http, &bob_url).await.unwrap();
    let his = in_session(&http, &bob_url, &bob, &task_call("1", 60)).await;
    assert!(his["result"]["task"]["taskId"].is_string(), "{his}");
    in_session(&http, &url, &session, &task_request("tasks/cancel", &id)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_or_a_stop_ends_a_running_task_as_failed_never_hanging() {
    let mut s = start(&[]).await;
    let http = client();
    let url = s.server.personal(&s.alice.key);
    let session = open_session(&http, &url).await.unwrap();
    let created = in_session(
        &http,
        &url,
        &session,
        &task_call("import time\ntime.sleep(120)", 200),
    )
    .await;
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    s.server.kill();
    let flags = sandbox_flags(s._dir.path());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start(&s.storage, &flags).await;
    let url = server.personal(&s.alice.key);
    let session = open_session(&http, &url).await.unwrap();
    let task = ended(&http, &url, &session, &id, Duration::from_secs(20)).await;
    assert_eq!(task["status"], "failed", "{task}");
    assert!(
        task["statusMessage"].as_str().unwrap().contains("stopped"),
        "{task}"
    );
    let result = in_session(&http, &url, &session, &task_request("tasks/result", &id)).await;
    assert_eq!(result["error"]["code"], -32603, "{result}");

    // stopped in order (SIGTERM), a server fails its running tasks itself, saying so
    let mut server = server;
    let created = in_session(
        &http,
        &url,
        &session,
        &task_call("import time\ntime.sleep(120)", 200),
    )
    .await;
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(server.stop(), "the server did not stop in order");
    let server = Server::start(&s.storage, &flags).await;
    let url = server.personal(&s.alice.key);
    let session = open_session(&http, &url).await.unwrap();
    let task =
        in_session(&http, &url, &session, &task_request("tasks/get", &id)).await["result"].clone();
    assert_eq!(task["status"], "failed", "{task}");
    assert!(
        task["statusMessage"]
            .as_str()
            .unwrap()
            .contains("was stopped"),
        "{task}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_task_params_get_clear_errors() {
    let s = start(&[]).await;
    let http = client();
    let url = s.server.personal(&s.alice.key);
    let session = open_session(&http, &url).await.unwrap();
    let long_id = "x".repeat(100_000);
    let cases = [
        rpc(1, "tasks/get", Some(json!({"taskId": 42}))),
        rpc(1, "tasks/get", Some(json!({}))),
        rpc(1, "tasks/result", None),
        rpc(1, "tasks/cancel", Some(json!({"taskId": null}))),
        rpc(1, "tasks/get", Some(json!({"taskId": long_id}))),
        rpc(
            1,
            "tasks/get",
            Some(json!({"taskId": "'; DROP TABLE tasks; --"})),
        ),
        rpc(1, "tasks/list", Some(json!({"cursor": "not-a-cursor"}))),
        rpc(
            1,
            "tasks/list",
            Some(json!({"cursor": "12.'; DROP TABLE tasks; --"})),
        ),
    ];
    for case in &cases {
        let reply = in_session(&http, &url, &session, case).await;
        let code = reply["error"]["code"].as_i64();
        // a cursor that parses but names nothing is an empty page, not an error
        if case["params"]["cursor"]
            .as_str()
            .is_some_and(|c| c.starts_with("12."))
        {
            assert_eq!(reply["result"]["tasks"], json!([]), "{reply}");
            continue;
        }
        assert_eq!(code, Some(-32602), "{case} → {reply}");
    }
    // a task asked of a tool that never runs as one, and a ttl out of range
    let mut read = tool_call("svc_read", json!({"billing": true}));
    read["params"]["task"] = json!({"ttl": 1000});
    let refused = in_session(&http, &url, &session, &read).await;
    assert_eq!(refused["error"]["code"], -32601, "{refused}");
    for (asked, kept) in [
        (json!(5), 60_000),
        (json!(-5), 3_600_000),
        (json!("soon"), 0),
    ] {
        let mut odd = task_call("1 + 1", 10);
        odd["params"]["task"] = json!({ "ttl": asked });
        let made = in_session(&http, &url, &session, &odd).await;
        if asked.is_string() {
            // not a task request this server can read: answered as a plain call
            assert_eq!(value(&made["result"]), "2", "{made}");
            continue;
        }
        assert_eq!(made["result"]["task"]["ttl"], kept, "ttl {asked}: {made}");
    }
    // twenty tasks at once through one session: each gets its own id, and the cap holds
    let one = task_call("1", 10);
    let calls = (0..20).map(|_| in_session(&http, &url, &session, &one));
    let answers = futures::future::join_all(calls).await;
    let made = answers
        .iter()
        .filter(|a| a["result"]["task"]["taskId"].is_string())
        .count();
    let capped = answers
        .iter()
        .filter(|a| a["error"]["code"] == -32600)
        .count();
    assert_eq!(
        made + capped,
        20,
        "each is a task or refused for the cap: {answers:?}"
    );
    let mut ids: Vec<&str> = answers
        .iter()
        .filter_map(|a| a["result"]["task"]["taskId"].as_str())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), made, "every task has its own id");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ten_megabyte_result_reaches_a_client_through_a_task_and_a_link() {
    let s = start(&[]).await;
    let http = client();
    let url = s.server.personal(&s.alice.key);
    let session = open_session(&http, &url).await.unwrap();
    let code = "import sys\nfor i in range(1_250_000):\n    sys.stdout.write(f'{i:07d}\\n')";
    let expected: Vec<u8> = (0..1_250_000)
        .flat_map(|i| format!("{i:07}\n").into_bytes())
        .collect();
    let mut call = tool_call(
        "svc_write",
        json!({"code": code, "session_id": "big", "timeout_s": 120}),
    );
    call["params"]["task"] = json!({"ttl": 600_000});
    let created = in_session(&http, &url, &session, &call).await;
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let result = in_session(&http, &url, &session, &task_request("tasks/result", &id)).await;
    let result = &result["result"];
    assert_eq!(result["isError"], false, "{result:.2000}");
    assert!(
        serde_json::to_string(result).unwrap().len() < 100_000,
        "the kept result is a preview, not 10 MB"
    );
    let link = result["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["type"] == "resource_link")
        .unwrap_or_else(|| panic!("no link in {result:.2000}"));
    assert_eq!(link["size"], 10_000_000);
    let download = http
        .get(link["uri"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(download.status(), 200);
    let body = download.bytes().await.unwrap();
    assert_eq!(body.len(), expected.len());
    assert!(
        body.as_ref() == expected.as_slice(),
        "the download differs from what was printed"
    );
}
