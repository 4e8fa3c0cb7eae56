//! svc_write's python and bash and svc_read's file, through the real binary with the real Python
//! runtime and confinement: notebook semantics, sessions private to accounts, files in and out,
//! time limits, and bad input refused before it is metered.
//!
//! Needs `.deps/python-runtime` (scripts/python-runtime.sh) and the confinement library in
//! target/debug (`cargo build -p toolgate-sandbox-harden`); scripts/test.sh makes both.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use serde_json::{Value, json};

/// Every text item of a result, joined.
pub(crate) fn text(result: &Value) -> String {
    result["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|item| item["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether a result is a tool error.
pub(crate) fn is_error(result: &Value) -> bool {
    result["isError"].as_bool().unwrap_or(false)
}

#[tokio::test]
async fn tools_list_shows_the_sandbox_fields() {
    let f = fixture().await;
    let reply = post_personal(&f.http, &f.server, &f.alice.key, &tools_list()).await;
    let tools = reply.result()["tools"].clone();
    let write = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "svc_write")
        .unwrap();
    let props = write["inputSchema"]["properties"].as_object().unwrap();
    for field in ["code", "bash", "session_id", "timeout_s", "files"] {
        assert!(
            props.contains_key(field),
            "svc_write lacks {field}: {write}"
        );
    }
    // a call may ask for up to an hour, but past 300 s only as an MCP task (see `tasks.rs`)
    assert_eq!(props["timeout_s"]["maximum"], 3600);
    let told = props["timeout_s"]["description"].as_str().unwrap();
    assert!(
        told.contains("at most 300") && told.contains("up to 3600"),
        "{told}"
    );
    let read = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "svc_read")
        .unwrap();
    assert!(read["inputSchema"]["properties"]["path"].is_object());
}

#[tokio::test]
async fn notebook_semantics_through_http() {
    let f = fixture().await;
    let result = f.write(json!({"code": "print('hi')\n1 + 1"})).await;
    assert!(!is_error(&result), "{result}");
    assert_eq!(text(&result), "hi\n\n2");
    let python = &result["structuredContent"]["python"];
    assert_eq!(python["stdout"], "hi\n");
    assert_eq!(python["result"]["text"], "2");
    assert_eq!(python["session"]["fresh"], true);

    let failed = f.write(json!({"code": "1 / 0"})).await;
    assert!(is_error(&failed), "{failed}");
    assert!(
        text(&failed).contains("ZeroDivisionError: division by zero"),
        "{failed}"
    );
    assert!(text(&failed).contains("Traceback"), "{failed}");
    assert_eq!(
        failed["structuredContent"]["python"]["error"]["type"],
        "ZeroDivisionError"
    );

    let bash = f
        .write(json!({"bash": "echo out; echo err >&2; exit 3"}))
        .await;
    assert!(is_error(&bash), "{bash}");
    let shown = text(&bash);
    assert!(
        shown.contains("out") && shown.contains("stderr:\nerr") && shown.contains("exit status 3"),
        "{shown}"
    );
    assert_eq!(bash["structuredContent"]["bash"]["exit_status"], 3);

    // the everyday devices work inside the confinement
    let devices = f
        .write(json!({"bash": "echo hidden > /dev/null && head -c 4 /dev/zero | wc -c && head -c 8 /dev/urandom | wc -c"}))
        .await;
    assert_eq!(text(&devices), "4\n8\n", "{devices}");

    let plot = f
        .write(json!({"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nNone"}))
        .await;
    let images: Vec<&Value> = plot["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "image")
        .collect();
    assert_eq!(images.len(), 1, "{plot}");
    assert_eq!(images[0]["mimeType"], "image/png");

    let frame = f
        .write(json!({"code": "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})"}))
        .await;
    assert!(text(&frame).contains("a  b"), "{frame}");
}

#[tokio::test]
async fn sessions_persist_and_are_private_to_the_account() {
    let f = fixture().await;
    let set = f
        .write(json!({"code": "x = 41\nimport math", "session_id": "s1"}))
        .await;
    assert!(!is_error(&set), "{set}");
    let get = f
        .write(json!({"code": "x + 1, math.pi > 3", "session_id": "s1"}))
        .await;
    assert_eq!(text(&get), "(42, True)");
    assert_eq!(
        get["structuredContent"]["python"]["session"]["fresh"],
        false
    );
    // bob's "s1" is another session
    let bob = f
        .call(
            &f.bob,
            "svc_write",
            json!({"code": "x", "session_id": "s1"}),
        )
        .await;
    assert!(is_error(&bob) && text(&bob).contains("NameError"), "{bob}");
    // bash shares the workspace with Python in one session
    f.write(json!({"code": "open('note.txt', 'w').write('from python')", "session_id": "s1"}))
        .await;
    let cat = f
        .write(json!({"bash": "cat note.txt", "session_id": "s1"}))
        .await;
    assert_eq!(text(&cat), "from python");
    // without an id every call is fresh
    let fresh = f.write(json!({"code": "x"})).await;
    assert!(text(&fresh).contains("NameError"), "{fresh}");
}

#[tokio::test]
async fn files_go_in_and_come_back_but_never_from_outside() {
    let f = fixture().await;
    let upload = f
        .write(json!({"session_id": "w", "files": [
            {"path": "data/in.csv", "content": "a,b\n1,2\n"},
            {"path": "blob.bin", "content": "AAEC", "encoding": "base64"},
        ]}))
        .await;
    assert!(!is_error(&upload), "{upload}");
    let sum = f
        .write(json!({"session_id": "w", "code": "import pandas as pd\nint(pd.read_csv('data/in.csv').sum().sum())"}))
        .await;
    assert_eq!(text(&sum), "3");
    let back = f
        .call(
            &f.alice,
            "svc_read",
            json!({"session_id": "w", "path": "data/in.csv"}),
        )
        .await;
    assert_eq!(text(&back), "a,b\n1,2\n");
    let blob = f
        .call(
            &f.alice,
            "svc_read",
            json!({"session_id": "w", "path": "blob.bin"}),
        )
        .await;
    assert_eq!(blob["structuredContent"]["file"]["content"], "AAEC");
    // code and files without an id share one call-scoped session, closed once the call ends:
    // a daemon the call leaves behind dies with it
    let marker = format!("tg-call-scoped-{}", std::process::id());
    let daemon =
        format!("cat t.txt; setsid bash -c 'exec -a {marker} sleep 300' > /dev/null 2>&1 &");
    let combined = f
        .write(json!({"files": [{"path": "t.txt", "content": "ok"}], "code": "print(open('t.txt').read())", "bash": daemon}))
        .await;
    assert_eq!(text(&combined), "ok\n\nok", "{combined}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while marked(&marker) {
        assert!(
            std::time::Instant::now() < deadline,
            "the call's session outlived the call"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    f.write(json!({"session_id": "w", "code": "import os\nos.symlink('/etc', 'etc')"}))
        .await;
    // a real sibling: another session of the same account, with a file in it
    f.write(json!({"session_id": "v", "code": "open('in.csv', 'w').write('sibling')"}))
        .await;
    // its directory's name on the host (the session itself sees only /workspace)
    let sibling = sibling_holding(&f.sessions_root(), "in.csv");
    let refusals = [
        (format!("../{sibling}/in.csv"), "must not contain '..'"),
        (
            "/etc/passwd".to_owned(),
            "must be relative to the workspace",
        ),
        ("etc/passwd".to_owned(), "a symbolic link is in the way"),
        ("nope.txt".to_owned(), "no such file in the workspace"),
    ];
    for (path, reason) in &refusals {
        let refused = f
            .call(
                &f.alice,
                "svc_read",
                json!({"session_id": "w", "path": path}),
            )
            .await;
        assert!(is_error(&refused), "{path}: {refused}");
        let shown = text(&refused);
        assert!(
            shown.contains(reason),
            "{path}: the reason is not given: {shown}"
        );
        assert!(
            !shown.contains("root:") && !shown.contains("sibling"),
            "{path}: {refused}"
        );
    }
    let other = f
        .call(
            &f.bob,
            "svc_read",
            json!({"session_id": "w", "path": "data/in.csv"}),
        )
        .await;
    assert!(is_error(&other), "{other}");
    let escape = f
        .write(json!({"session_id": "w", "files": [{"path": "etc/evil", "content": "x"}]}))
        .await;
    assert!(is_error(&escape), "{escape}");
}

#[tokio::test]
async fn a_time_limit_interrupts_and_the_session_survives() {
    let f = fixture().await;
    f.write(json!({"code": "kept = 'yes'", "session_id": "t"}))
        .await;
    let slow = f
        .write(json!({"code": "while True:\n    pass", "session_id": "t", "timeout_s": 1}))
        .await;
    assert!(is_error(&slow), "{slow}");
    let shown = text(&slow);
    assert!(
        shown.contains("KeyboardInterrupt") && shown.contains("time limit of 1 s"),
        "{shown}"
    );
    assert_eq!(
        slow["structuredContent"]["python"]["interrupted"],
        "timeout"
    );
    let after = f.write(json!({"code": "kept", "session_id": "t"})).await;
    assert_eq!(text(&after), "'yes'");
}

#[tokio::test]
async fn bad_input_is_refused_before_it_is_metered() {
    let f = fixture().await;
    let before = f.server.free_remaining(&f.alice.key).await;
    for (args, expected) in [
        (json!({"code": 5}), "must be a string"),
        (json!({"code": "1", "timeout_s": 0}), "between 1 and 3600"),
        (
            json!({"code": "1", "timeout_s": 301}),
            "needs the call to run as an MCP task",
        ),
        (
            json!({"code": "1", "timeout_s": 3601}),
            "between 1 and 3600",
        ),
        (json!({"code": "1", "timeout_s": "5"}), "integer"),
        (json!({"code": "1", "session_id": ""}), "1 to 256"),
        (json!({"code": "1", "session_id": "a\u{7}b"}), "control"),
        (
            json!({"code": "1", "session_id": "x".repeat(257)}),
            "1 to 256",
        ),
        (json!({"code": "x".repeat(1024 * 1024 + 1)}), "limit is"),
        (
            json!({"files": [{"path": "a", "content": "b"}]}),
            "needs a `session_id`",
        ),
        (json!({"code": "1", "files": {"a": "b"}}), "array"),
        (
            json!({"code": "1", "files": [{"path": "a", "content": "b", "mode": 1}]}),
            "unknown key",
        ),
        (json!({"session_id": "s"}), "without a field"),
    ] {
        let result = f.write(args.clone()).await;
        assert!(is_error(&result), "{args}: {result}");
        assert!(
            text(&result).contains(expected),
            "{args}: {}",
            text(&result)
        );
    }
    let read = f.call(&f.alice, "svc_read", json!({"path": "a.txt"})).await;
    assert!(text(&read).contains("needs the `session_id`"), "{read}");
    // refused before admission: the free allowance is untouched
    assert_eq!(f.server.free_remaining(&f.alice.key).await, before);
    let ran = f.write(json!({"code": "1"})).await;
    assert!(!is_error(&ran), "{ran}");
    assert_eq!(f.server.free_remaining(&f.alice.key).await, before - 1);
}

#[tokio::test]
async fn too_many_sessions_is_a_clear_error_and_others_keep_working() {
    let f = fixture().await;
    for id in ["a", "b", "c"] {
        let ok = f.write(json!({"code": "1", "session_id": id})).await;
        assert!(!is_error(&ok), "{ok}");
    }
    let refused = f.write(json!({"code": "1", "session_id": "d"})).await;
    assert!(is_error(&refused), "{refused}");
    assert!(
        text(&refused).contains("already has 3 live sessions"),
        "{refused}"
    );
    let bob = f
        .call(&f.bob, "svc_write", json!({"code": "2", "session_id": "d"}))
        .await;
    assert_eq!(text(&bob), "2");
    let again = f.write(json!({"code": "7", "session_id": "a"})).await;
    assert_eq!(text(&again), "7");
}

/// Code in a session asks the service through the runtime's `toolgate` module without holding
/// a key: each such request is one call of the session's account, metered like any other and
/// refused the same way once the allowance is used up and the wallet is empty.
#[tokio::test]
async fn code_reaches_the_service_as_a_metered_call_of_its_own() {
    let f = fixture_with(&["--free-monthly-calls", "3"]).await;
    let code = "import toolgate\nb = toolgate.billing()\nb['free_remaining_this_month']";
    let first = f.write(json!({"code": code, "session_id": "s"})).await;
    assert!(!is_error(&first), "{first}");
    // the call itself is the first of three, its upcall the second
    assert_eq!(
        first["structuredContent"]["python"]["result"]["text"], "1",
        "{first}"
    );
    // the third call is the last free one; its upcall would be a fourth: refused
    let asked = "try:\n    toolgate.billing()\nexcept toolgate.ToolgateError as e:\n    r = \
                 (e.code, e.message)\nr";
    let refused = f.write(json!({"code": asked, "session_id": "s"})).await;
    let shown = refused["structuredContent"]["python"]["result"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(shown.starts_with("('refused', "), "{refused}");
    assert!(shown.contains("top up"), "{refused}");
    let status = f.server.billing(&f.alice.key).await;
    assert_eq!(status["free_remaining_this_month"], 0, "{status}");
    // bob's allowance was never touched: the identity is the session's account
    let bob = f.server.billing(&f.bob.key).await;
    assert_eq!(bob["free_remaining_this_month"], 3, "{bob}");
}

/// Every piece of output reported as progress goes out before the call's answer, however fast
/// the code ends: a client that asked for progress never gets the result without it (seen
/// missing once in 200 quick calls while the reports went out from a task of their own).
#[tokio::test]
async fn progress_reported_before_the_answer_always_reaches_the_client() {
    let f = fixture().await;
    let url = f.server.personal(&f.alice.key);
    let session = open_session(&f.http, &url).await.unwrap();
    for n in 0..60 {
        let lines = (0..8)
            .map(|i| format!("print('line-{n}-{i}', flush=True)"))
            .collect::<Vec<_>>()
            .join("\n");
        let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
            "name": "svc_write", "arguments": {"code": lines, "session_id": "p"},
            "_meta": {"progressToken": format!("p{n}")}}});
        let reply = send(in_session(&f.http, &url, &session, &call)).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        let result_at = reply.body.find("\"result\"").expect("an answer");
        let last = reply
            .body
            .find(&format!("line-{n}-7"))
            .unwrap_or_else(|| panic!("call {n}: its last line was never reported: {reply:?}"));
        assert!(
            last < result_at,
            "call {n}: progress after the answer: {reply:?}"
        );
    }
}

/// `sessions` lists the caller's live sessions (never another account's), with memory and
/// whether a call runs; `close_session` ends one now.
#[tokio::test]
async fn sessions_are_listed_and_closed_by_their_owner() {
    let f = fixture().await;
    f.write(json!({"session_id": "small", "code": "x = 1"}))
        .await;
    let big = f
        .write(
            json!({"session_id": "big", "code": "blob = bytearray(64 * 1024 * 1024)\nlen(blob)"}),
        )
        .await;
    assert_eq!(big["isError"], false, "{big}");
    let listed = f
        .call(&f.alice, "svc_read", json!({"sessions": true}))
        .await;
    let rows = listed["structuredContent"]["sessions"]["sessions"]
        .as_array()
        .unwrap()
        .clone();
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["big", "small"], "{listed}");
    let memory = |row: &serde_json::Value| row["memory_bytes"].as_u64().unwrap();
    assert!(memory(&rows[0]) > 64 * 1024 * 1024, "{listed}");
    assert!(memory(&rows[1]) < memory(&rows[0]), "{listed}");
    assert!(rows.iter().all(
        |r| r["busy"] == false && r["age_s"].as_f64().unwrap() >= r["idle_s"].as_f64().unwrap()
    ));
    let theirs = f.call(&f.bob, "svc_read", json!({"sessions": true})).await;
    assert_eq!(
        theirs["structuredContent"]["sessions"]["sessions"],
        json!([]),
        "{theirs}"
    );
    let foreign = f
        .call(&f.bob, "svc_write", json!({"close_session": "big"}))
        .await;
    assert_eq!(foreign["isError"], true, "{foreign}");

    // a session running a call says so
    let (http, url) = (f.http.clone(), f.server.personal(&f.alice.key));
    let sleeper = tokio::spawn(async move {
        let call = tool_call(
            "svc_write",
            json!({"session_id": "small", "code": "import time\nopen('running', 'w').close()\ntime.sleep(3)"}),
        );
        send(
            http.post(url)
                .header("Content-Type", "application/json")
                .header("Accept", "application/json")
                .body(call.to_string()),
        )
        .await
    });
    loop {
        let seen = f
            .call(
                &f.alice,
                "svc_read",
                json!({"session_id": "small", "path": "running"}),
            )
            .await;
        if seen["isError"] == false {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let during = f
        .call(&f.alice, "svc_read", json!({"sessions": true}))
        .await;
    let small = &during["structuredContent"]["sessions"]["sessions"][1];
    assert_eq!(small["busy"], true, "{during}");
    sleeper.await.unwrap();

    let closed = f.write(json!({"close_session": "big"})).await;
    assert_eq!(
        closed["structuredContent"]["close_session"]["closed"], true,
        "{closed}"
    );
    let after = f
        .call(&f.alice, "svc_read", json!({"sessions": true}))
        .await;
    assert_eq!(
        after["structuredContent"]["sessions"]["sessions"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "{after}"
    );
    let again = f.write(json!({"close_session": "big"})).await;
    assert_eq!(again["isError"], true);
    assert!(again.to_string().contains("no live session"), "{again}");
    let fresh = f
        .write(json!({"session_id": "big", "code": "'blob' in globals()"}))
        .await;
    assert!(fresh.to_string().contains("False"), "{fresh}");
}

/// Whether a host process's command line starts with `marker`.
fn marked(marker: &str) -> bool {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| {
            std::fs::read(entry.path().join("cmdline"))
                .is_ok_and(|cmdline| cmdline.starts_with(marker.as_bytes()))
        })
}

/// The name of the one workspace beneath `root` (`<account>/<workspace>`) that holds `file`.
fn sibling_holding(root: &std::path::Path, file: &str) -> String {
    let found: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .filter_map(|account| std::fs::read_dir(account.path()).ok())
        .flatten()
        .flatten()
        .filter(|workspace| workspace.path().join(file).is_file())
        .map(|workspace| workspace.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(found.len(), 1, "workspaces holding {file}: {found:?}");
    found[0].clone()
}
