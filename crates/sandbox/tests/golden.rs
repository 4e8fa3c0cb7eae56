//! The protocol's golden frames (`runtime/golden/`, read by the runtime's tests too): every frame
//! the server sends serialises to exactly its golden file, and every frame the zygote and a
//! session send decodes from its golden file into the values it holds. A field renamed, added
//! or dropped on one side without the other fails here or in `runtime/test_protocol.py`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use toolgate_domain::BillingStatus;
use toolgate_sandbox::protocol::{
    Checkpointed, ControlEvent, ControlRequest, ForkRequest, HardenSpec, NotKept, Restored,
    SessionRequest,
};
use toolgate_sandbox::upcall::{
    HttpAnswer, SqlAnswer, SqlColumn, SqlValue, Upcall, UpcallAnswer, UpcallError, UpcallErrorCode,
    UpcallValue,
};
use toolgate_sandbox::{ExecOutcome, RequestKind};

fn golden(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../runtime/golden")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("golden frame {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The frame `message` serialises to, as JSON (the order of fields does not matter).
fn sent(message: &impl serde::Serialize) -> Value {
    serde_json::to_value(message).unwrap()
}

fn greeting() -> BTreeMap<String, String> {
    BTreeMap::from([("GREETING".to_owned(), "hello".to_owned())])
}

#[test]
fn control_frames_the_server_sends() {
    assert_eq!(sent(&ControlRequest::Ping), golden("control/ping.json"));
    let fork = ControlRequest::Fork(ForkRequest {
        session: "acct-1/3f2a#3",
        cwd: "/var/lib/toolgate/sessions/acct-1/3f2a",
        tmpdir: Some("/var/lib/toolgate/sessions/acct-1/3f2a.tmp"),
        fd: 9,
        harden: None,
        env: None,
    });
    assert_eq!(sent(&fork), golden("control/fork.json"));
    let read_only = [
        "/opt/toolgate/python-runtime",
        "/usr",
        "/lib",
        "/lib64",
        "/bin",
        "/etc/ld.so.cache",
        "/etc/alternatives",
    ];
    let proxy_env = std::collections::BTreeMap::from(
        ["HTTP_PROXY", "HTTPS_PROXY"]
            .map(|name| (name.to_owned(), "http://127.0.0.1:3128".to_owned())),
    );
    let hardened = ControlRequest::Fork(ForkRequest {
        session: "acct-1/3f2a#4",
        cwd: "/workspace",
        tmpdir: Some("/tmp"),
        fd: 9,
        harden: Some(HardenSpec {
            workspace: "/var/lib/toolgate/sessions/acct-1/3f2a".into(),
            tmp: "/tmp".into(),
            read_only: read_only.map(str::to_owned).to_vec(),
            max_open_files: 1024,
            max_file_bytes: 512 << 20,
            hostname: "sandbox".into(),
            network: false,
            proxy_port: Some(3128),
            uid: 1_000_000_000,
            cgroups: vec!["/sys/fs/cgroup/memory/toolgate/s-4".into()],
            tmp_bytes: 256 << 20,
        }),
        env: Some(&proxy_env),
    });
    assert_eq!(sent(&hardened), golden("control/fork_hardened.json"));
}

#[test]
fn control_frames_the_zygote_sends() {
    let decode = |name: &str| -> ControlEvent { serde_json::from_value(golden(name)).unwrap() };
    let ControlEvent::Hello(hello) = decode("control/hello.json") else {
        panic!("not hello")
    };
    assert_eq!(hello.pid, 4242);
    assert_eq!(hello.preloaded, ["numpy", "pandas", "matplotlib.pyplot"]);
    assert_eq!(hello.base_prefix, "/usr/local");
    assert!(matches!(decode("control/pong.json"), ControlEvent::Pong));
    let ControlEvent::Forked {
        session,
        pid,
        ready_ms,
        fork_ms,
        hardened,
    } = decode("control/forked.json")
    else {
        panic!("not forked")
    };
    assert_eq!((session.as_str(), pid), ("acct-1/3f2a#3", 4250));
    assert!(ready_ms.is_some() && fork_ms.is_some() && hardened.is_none());
    let ControlEvent::Forked { hardened, .. } = decode("control/forked_hardened.json") else {
        panic!("not forked")
    };
    assert!(hardened.is_some_and(|report| report.contains("landlock=")));
    let ControlEvent::Spawned { session } = decode("control/spawned.json") else {
        panic!("not spawned")
    };
    assert_eq!(session, "acct-1/3f2a#4");
    let ControlEvent::Exited(exit) = decode("control/exited.json") else {
        panic!("not exited")
    };
    assert_eq!((exit.pid, exit.status, exit.signal), (4250, Some(0), None));
    let ControlEvent::Error(error) = decode("control/error.json") else {
        panic!("not an error")
    };
    assert_eq!(error.code, "bad_fds");
    assert_eq!(error.session.as_deref(), Some("acct-1/3f2a#3"));
}

#[test]
fn session_requests_the_server_sends() {
    assert_eq!(
        sent(&SessionRequest::Ping { id: 1 }),
        golden("session/ping.json")
    );
    let env = greeting();
    let exec = SessionRequest::Exec {
        id: 7,
        code: "import os\ngreeting = os.environ['GREETING']\nprint(greeting)\nlen(greeting)",
        stream: true,
        spill: false,
        env: &env,
    };
    assert_eq!(sent(&exec), golden("session/exec.json"));
    let bash = SessionRequest::Bash {
        id: 8,
        command: "echo \"$GREETING\"; exit 3",
        stream: false,
        timeout_s: 30.0,
        spill: false,
        env: &env,
    };
    assert_eq!(sent(&bash), golden("session/bash.json"));
    let sqlite = SessionRequest::Sqlite {
        id: 10,
        path: "data.db",
        statement: "SELECT 2 AS n, 3 AS m",
        write: true,
        max_rows: 1000,
        max_bytes: 1 << 20,
        timeout_s: 30.0,
    };
    assert_eq!(sent(&sqlite), golden("session/sqlite.json"));
    // without a per-run environment the field is left out, as the runtime allows
    let plain = sent(&SessionRequest::Exec {
        id: 1,
        code: "1",
        stream: false,
        spill: false,
        env: &BTreeMap::new(),
    });
    assert!(plain.get("env").is_none(), "{plain}");
    assert!(plain.get("spill").is_none(), "{plain}");
    let spilling = sent(&SessionRequest::Exec {
        id: 1,
        code: "1",
        stream: false,
        spill: true,
        env: &BTreeMap::new(),
    });
    assert_eq!(spilling["spill"], serde_json::json!(true));
}

fn record() -> BillingStatus {
    serde_json::from_value(golden("session/upcall_result.json")["value"]["billing"].clone())
        .unwrap()
}

#[test]
fn upcall_answers_the_server_sends() {
    let value = SessionRequest::UpcallResult {
        id: 7,
        upcall: 1,
        answer: UpcallAnswer::Value(UpcallValue::Billing(record())),
    };
    assert_eq!(sent(&value), golden("session/upcall_result.json"));
    assert_eq!(record().free_remaining_this_month, 998);
    let refused = SessionRequest::UpcallResult {
        id: 7,
        upcall: 1,
        answer: UpcallAnswer::Error(UpcallError::new(
            UpcallErrorCode::Refused,
            "The free allowance of 1000 calls this month is used up and the wallet is empty: top \
             up the wallet to go on.",
        )),
    };
    assert_eq!(sent(&refused), golden("session/upcall_error.json"));
    let piece = SessionRequest::UpcallProgress {
        id: 7,
        upcall: 1,
        data: "Hel",
    };
    assert_eq!(sent(&piece), golden("session/upcall_progress.json"));
}

#[test]
fn an_upcalls_request_is_typed_and_closed() {
    let frame = golden("session/upcall.json");
    let request: Upcall = serde_json::from_value(frame["request"].clone()).unwrap();
    assert_eq!(request, Upcall::Billing {});
    // unknown kinds and fields are refused, not guessed at
    for unknown in [
        serde_json::json!({"kind": "launch_missiles"}),
        serde_json::json!({"kind": "billing", "account": "someone-else"}),
        serde_json::json!({}),
    ] {
        assert!(
            serde_json::from_value::<Upcall>(unknown.clone()).is_err(),
            "{unknown}"
        );
    }
}

/// The requests of `toolgate.fetch`, `toolgate.http`, `toolgate.sql` and `toolgate.secrets`
/// decode into the values they hold.
#[test]
fn the_web_database_and_vault_requests_decode() {
    let request =
        |name: &str| -> Upcall { serde_json::from_value(golden(name)["request"].clone()).unwrap() };
    let authorization = (
        "Authorization".to_owned(),
        "Bearer {{secret:API_KEY}}".to_owned(),
    );
    assert_eq!(
        request("session/upcall_fetch.json"),
        Upcall::Fetch {
            url: "https://api.example.com/items/1".into(),
            headers: BTreeMap::from([authorization.clone()]),
            max_bytes: Some(65536),
        }
    );
    assert_eq!(
        request("session/upcall_http.json"),
        Upcall::Http {
            method: "POST".into(),
            url: "https://api.example.com/items".into(),
            headers: BTreeMap::from([
                authorization,
                ("Content-Type".to_owned(), "application/json".to_owned()),
            ]),
            body: Some("{\"name\": \"pen\"}".into()),
            max_bytes: None,
        }
    );
    assert_eq!(
        request("session/upcall_sql.json"),
        Upcall::Sql {
            database: "PG_URL".into(),
            query: "select id, name, tags from items where name = $1".into(),
            params: vec![SqlValue::Text("pen".into())],
            write: false,
            max_rows: Some(100),
        }
    );
    assert_eq!(request("session/upcall_secrets.json"), Upcall::Secrets {});
}

/// Their answers, as the server sends them.
#[test]
fn the_web_database_and_vault_answers_the_server_sends() {
    let answer = |value: UpcallValue| SessionRequest::UpcallResult {
        id: 7,
        upcall: 1,
        answer: UpcallAnswer::Value(value),
    };
    let page = HttpAnswer {
        status: 200,
        url: "https://api.example.com/items/1".into(),
        content_type: "application/json".into(),
        format: "json".into(),
        text: "{\n  \"id\": 1,\n  \"name\": \"pen\"\n}".into(),
        bytes: 22,
        truncated: false,
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("x-request-id".into(), "r-42".into()),
        ],
    };
    assert_eq!(
        sent(&answer(UpcallValue::Fetch(page))),
        golden("session/upcall_result_fetch.json")
    );
    let column = |name: &str, type_name: &str| SqlColumn {
        name: name.into(),
        type_name: type_name.into(),
    };
    let table = SqlAnswer {
        database: "postgres".into(),
        columns: vec![
            column("id", "int8"),
            column("name", "text"),
            column("tags", "jsonb"),
        ],
        rows: vec![
            vec![
                SqlValue::Integer(1),
                SqlValue::Text("pen".into()),
                SqlValue::Json(r#"["blue",{"ink":0.5}]"#.into()),
            ],
            vec![SqlValue::Integer(2), SqlValue::Null, SqlValue::Null],
        ],
        row_count: 2,
        truncated: false,
        changes: 0,
    };
    assert_eq!(
        sent(&answer(UpcallValue::Sql(table))),
        golden("session/upcall_result_sql.json")
    );
    assert_eq!(
        sent(&answer(UpcallValue::Secrets(vec![
            "API_KEY".into(),
            "PG_URL".into()
        ]))),
        golden("session/upcall_result_secrets.json")
    );
}

#[test]
fn results_decode_into_the_outcome() {
    let exec: ExecOutcome = serde_json::from_value(golden("session/result_exec.json")).unwrap();
    assert_eq!(exec.kind, RequestKind::Exec);
    assert_eq!(exec.stdout, "hello\n");
    assert_eq!(exec.result.unwrap().text_plain, "5");
    let bash: ExecOutcome = serde_json::from_value(golden("session/result_bash.json")).unwrap();
    assert_eq!((bash.kind, bash.exit_status), (RequestKind::Bash, Some(3)));
    let sqlite: ExecOutcome = serde_json::from_value(golden("session/result_sqlite.json")).unwrap();
    assert_eq!(sqlite.kind, RequestKind::Sqlite);
    assert_eq!(sqlite.table.unwrap()["rows"], serde_json::json!([[2, 3]]));
    // every field the outcome reads is in the golden frame, and the frame has no field the
    // outcome does not know (besides the frame's own op and id)
    let known = sent(&exec_like(&golden("session/result_exec.json")));
    let mut frame = golden("session/result_exec.json");
    let frame = frame.as_object_mut().unwrap();
    frame.remove("op");
    frame.remove("id");
    let mut keys: Vec<&String> = frame.keys().collect();
    let mut ours: Vec<&String> = known.as_object().unwrap().keys().collect();
    keys.sort();
    ours.sort();
    assert_eq!(keys, ours);
}

fn exec_like(frame: &Value) -> ExecOutcome {
    serde_json::from_value(frame.clone()).unwrap()
}

#[test]
fn checkpoint_and_restore_frames() {
    let checkpoint = SessionRequest::Checkpoint {
        id: 12,
        path: ".toolgate-checkpoint",
    };
    assert_eq!(sent(&checkpoint), golden("session/checkpoint.json"));
    let restore = SessionRequest::Restore {
        id: 1,
        path: ".toolgate-checkpoint",
    };
    assert_eq!(sent(&restore), golden("session/restore.json"));
    let generator = NotKept {
        name: "g".to_owned(),
        value_type: "generator".to_owned(),
        reason: "TypeError: cannot pickle 'generator' object".to_owned(),
    };
    let kept = ["df", "f", "np", "x"].map(str::to_owned).to_vec();
    let frame = golden("session/checkpointed.json");
    let checkpointed: Checkpointed = serde_json::from_value(frame.clone()).unwrap();
    assert_eq!(checkpointed.id, 12);
    assert_eq!(checkpointed.kept, kept);
    assert_eq!(checkpointed.not_kept, vec![generator.clone()]);
    assert_eq!(keys(&sent(&checkpointed)), keys(&frame));
    let frame = golden("session/restored.json");
    let restored: Restored = serde_json::from_value(frame.clone()).unwrap();
    assert_eq!((restored.id, restored.execution_count), (1, 7));
    assert_eq!(restored.restored, kept);
    assert_eq!(restored.not_restored, vec![generator]);
    assert_eq!(keys(&sent(&restored)), keys(&frame));
}

/// A frame's keys but its `op`, sorted.
fn keys(frame: &Value) -> Vec<String> {
    let mut keys: Vec<String> = frame
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "op")
        .cloned()
        .collect();
    keys.sort();
    keys
}
