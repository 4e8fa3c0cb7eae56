//! The channel end to end on loopback: a real `NodeServer` over a scripted `SandboxSessions`
//! (the real manager is the suite's: `toolgate node` with confined sessions), reached through
//! `RemoteSessions` as a front end reaches it. What is checked is what crosses: files, output in
//! order, upcalls and their streamed pieces, cancellation both ways, errors in their kinds,
//! reads, listing, a wrong token, and a node lost mid-run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolgate_node::{NODE_LOST, NodeLink, NodeServer, NodeToken, RemoteSessions};
use toolgate_sandbox::upcall::{
    Upcall, UpcallError, UpcallErrorCode, UpcallHandler, UpcallOrigin, UpcallValue,
};
use toolgate_sandbox::{
    ExecOutcome, Interruption, LimitSettings, OutputChunk, OutputStream, RequestKind, RunOutcome,
    RunRequest, SandboxSessionInfo, SandboxSessions, SandboxSessionsError, SessionState, Work,
    WorkspaceFile, WorkspaceRead,
};

/// Sessions that do what the bash command names, and remember what they were given.
#[derive(Default)]
struct Scripted {
    seen: Mutex<Vec<String>>,
    cancelled: Mutex<Vec<String>>,
}

fn outcome(stdout: String) -> RunOutcome {
    RunOutcome {
        outcome: ExecOutcome {
            kind: RequestKind::Bash,
            stdout,
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            stdout_bytes: 0,
            stderr_bytes: 0,
            result: None,
            images: Vec::new(),
            images_truncated: false,
            error: None,
            exit_status: Some(0),
            signal: None,
            timed_out: false,
            execution_count: 1,
            duration_ms: 1.0,
            table: None,
            interrupted: None,
        },
        fresh: true,
        expired: false,
        pid: 42,
        workspace: "/node/only".into(),
        oom_kills: 0,
        restored: None,
        lost_checkpoint: None,
        node_lost: false,
    }
}

#[async_trait]
impl SandboxSessions for Scripted {
    async fn run(&self, request: RunRequest) -> Result<RunOutcome, SandboxSessionsError> {
        let Work::Bash { command } = &request.work else {
            return Err(SandboxSessionsError::Refused("bash only here".into()));
        };
        self.seen.lock().unwrap().push(format!(
            "{}|{:?}|{}|{}",
            request.account,
            request.session_id,
            request.env.get("TOKEN").cloned().unwrap_or_default(),
            request
                .files
                .iter()
                .map(|f| format!("{}={}", f.path, f.content.len()))
                .collect::<Vec<_>>()
                .join(",")
        ));
        match command.as_str() {
            "echo" => {
                let out = request.output.as_ref().unwrap();
                for i in 0..50 {
                    out.send(OutputChunk {
                        stream: OutputStream::Stdout,
                        data: format!("{i};"),
                    })
                    .await
                    .unwrap();
                }
                Ok(outcome("echoed".into()))
            }
            "upcall" => {
                let handler = request.upcalls.as_ref().unwrap();
                let origin = UpcallOrigin {
                    account: request.account.clone(),
                    session_id: request.session_id.clone(),
                };
                let plain = handler.answer(origin.clone(), Upcall::Billing {}).await;
                let (pieces, mut got) = mpsc::channel(16);
                let streamed = handler
                    .answer_streaming(origin, streaming_upcall(), pieces)
                    .await;
                let mut text = Vec::new();
                while let Ok(piece) = got.try_recv() {
                    text.push(piece);
                }
                Ok(outcome(format!("{plain:?}|{streamed:?}|{}", text.join(""))))
            }
            "wait" => {
                let cancel = request.cancel.clone().unwrap();
                tokio::select! {
                    () = cancel.cancelled() => {}
                    () = tokio::time::sleep(Duration::from_secs(30)) => {}
                }
                self.cancelled.lock().unwrap().push(request.account.clone());
                let mut done = outcome("interrupted".into());
                done.outcome.interrupted = Some(Interruption::Cancelled);
                Ok(done)
            }
            "refuse" => Err(SandboxSessionsError::Refused(
                "too many sessions for this key".into(),
            )),
            "unavailable" => Err(SandboxSessionsError::Unavailable(
                "/secret/host/path EACCES".into(),
            )),
            "big" => Ok(outcome("x".repeat(3 << 20))),
            other => Err(SandboxSessionsError::Failed(format!("unknown {other}"))),
        }
    }

    async fn read_file(
        &self,
        account: &str,
        session_id: &str,
        path: &str,
        max_bytes: u64,
    ) -> Result<WorkspaceRead, SandboxSessionsError> {
        if path == "missing" {
            return Err(SandboxSessionsError::Refused("no such file".into()));
        }
        let content = format!("{account}/{session_id}/{path}").into_bytes();
        let size = content.len() as u64;
        let bytes = content
            .into_iter()
            .take(usize::try_from(max_bytes).unwrap())
            .collect();
        Ok(WorkspaceRead { bytes, size })
    }

    async fn close(&self, _account: &str, session_id: &str) -> bool {
        session_id == "open"
    }

    fn idle_ttl(&self) -> Duration {
        Duration::from_secs(600)
    }

    async fn list(&self, account: &str) -> Vec<SandboxSessionInfo> {
        vec![SandboxSessionInfo {
            id: format!("{account}-s"),
            age: Duration::from_secs(3),
            idle: Duration::from_secs(1),
            memory_bytes: Some(1 << 20),
            busy: false,
            checkpoint: None,
            state: SessionState::Live,
        }]
    }
}

fn streaming_upcall() -> Upcall {
    serde_json::from_value(
        serde_json::json!({"kind": "invoke_llm", "model": "m/x", "prompt": "p", "stream": true}),
    )
    .unwrap()
}

/// Answers upcalls as the front end's app would: billing fails, a model streams three pieces.
struct Answers;

#[async_trait]
impl UpcallHandler for Answers {
    async fn answer(
        &self,
        origin: UpcallOrigin,
        _upcall: Upcall,
    ) -> Result<UpcallValue, UpcallError> {
        Err(UpcallError::new(
            UpcallErrorCode::Refused,
            format!("no money for {}", origin.account),
        ))
    }

    async fn answer_streaming(
        &self,
        origin: UpcallOrigin,
        upcall: Upcall,
        pieces: mpsc::Sender<String>,
    ) -> Result<UpcallValue, UpcallError> {
        assert!(upcall.streams());
        for piece in ["one ", "two ", "three"] {
            pieces.send(piece.to_owned()).await.unwrap();
        }
        Err(UpcallError::new(
            UpcallErrorCode::Failed,
            format!("done for {:?}", origin.session_id),
        ))
    }
}

fn token() -> NodeToken {
    NodeToken::parse(&"n".repeat(48)).unwrap()
}

async fn node(sessions: Arc<Scripted>) -> (String, CancellationToken, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let server = NodeServer::new(sessions, token());
    let task = tokio::spawn(server.serve(listener, stop.clone()));
    (url, stop, task)
}

fn front_end(urls: &[&str], token: NodeToken) -> RemoteSessions {
    let links = urls
        .iter()
        .map(|u| NodeLink::new(u, token.clone()).unwrap())
        .collect();
    RemoteSessions::new(links, Duration::from_secs(600)).unwrap()
}

fn bash(account: &str, session: Option<&str>, command: &str) -> RunRequest {
    RunRequest::new(
        account,
        session.map(str::to_owned),
        Work::Bash {
            command: command.into(),
        },
        LimitSettings::default().for_call(None).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_crosses_with_its_files_environment_and_output_in_order() {
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) = node(Arc::clone(&sessions)).await;
    let remote = front_end(&[&url], token());
    let mut request = bash("acct", Some("s1"), "echo");
    request.env = BTreeMap::from([("TOKEN".to_owned(), "v4lue".to_owned())]);
    request.files = vec![
        WorkspaceFile {
            path: "a.bin".into(),
            content: vec![0; 70_000],
        },
        WorkspaceFile {
            path: "dir/b.txt".into(),
            content: b"hi".to_vec(),
        },
    ];
    let (output, mut chunks) = mpsc::channel(1024);
    request.output = Some(output);
    let outcome = remote.run(request).await.unwrap();
    assert_eq!(outcome.outcome.stdout, "echoed");
    assert_eq!(outcome.pid, 42);
    let mut streamed = String::new();
    while let Ok(chunk) = chunks.try_recv() {
        streamed.push_str(&chunk.data);
    }
    let expected: String = (0..50).map(|i| format!("{i};")).collect();
    assert_eq!(
        streamed, expected,
        "every chunk, in order, before the outcome"
    );
    assert_eq!(
        sessions.seen.lock().unwrap().as_slice(),
        ["acct|Some(\"s1\")|v4lue|a.bin=70000,dir/b.txt=2"]
    );
    // an outcome bigger than a frame of the link's window still arrives whole
    let big = remote.run(bash("acct", None, "big")).await.unwrap();
    assert_eq!(big.outcome.stdout.len(), 3 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upcalls_are_answered_by_the_front_end_with_their_pieces() {
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) = node(sessions).await;
    let remote = front_end(&[&url], token());
    let mut request = bash("acct", Some("s9"), "upcall");
    request.upcalls = Some(Arc::new(Answers));
    let outcome = remote.run(request).await.unwrap();
    let text = outcome.outcome.stdout;
    assert!(text.contains("no money for acct"), "{text}");
    assert!(text.contains("done for Some(\\\"s9\\\")"), "{text}");
    assert!(
        text.ends_with("|one two three"),
        "the pieces before the answer: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_interrupts_the_run_on_the_node_and_so_does_dropping_it() {
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) = node(Arc::clone(&sessions)).await;
    let remote = Arc::new(front_end(&[&url], token()));
    let mut request = bash("cancelled", Some("w"), "wait");
    let cancel = CancellationToken::new();
    request.cancel = Some(cancel.clone());
    let running = tokio::spawn({
        let remote = Arc::clone(&remote);
        async move { remote.run(request).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    cancel.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        outcome.outcome.interrupted,
        Some(Interruption::Cancelled),
        "the interruption crosses"
    );
    // a caller that goes away (its future dropped) interrupts the run as well
    let dropped = tokio::spawn({
        let remote = Arc::clone(&remote);
        async move { remote.run(bash("dropped", Some("w"), "wait")).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    dropped.abort();
    for _ in 0..100 {
        if sessions
            .cancelled
            .lock()
            .unwrap()
            .iter()
            .any(|a| a == "dropped")
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the node's run was not interrupted when its caller left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_keep_their_kind_and_never_their_internals() {
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) = node(sessions).await;
    let remote = front_end(&[&url], token());
    let refused = remote.run(bash("a", None, "refuse")).await.unwrap_err();
    assert!(
        matches!(refused, SandboxSessionsError::Refused(ref m) if m.contains("too many sessions"))
    );
    let failed = remote.run(bash("a", None, "nope")).await.unwrap_err();
    assert!(matches!(failed, SandboxSessionsError::Failed(_)));
    let unavailable = remote
        .run(bash("a", None, "unavailable"))
        .await
        .unwrap_err();
    assert!(matches!(unavailable, SandboxSessionsError::Unavailable(_)));
    let shown = format!(
        "{unavailable} {:?}",
        std::error::Error::source(&unavailable).map(ToString::to_string)
    );
    assert!(!shown.contains("/secret/host/path"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_closes_and_lists_cross_and_a_wrong_token_gets_nothing() {
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) = node(sessions).await;
    let remote = front_end(&[&url], token());
    let read = remote.read_file("acct", "s", "f.txt", 8).await.unwrap();
    assert_eq!((read.bytes.as_slice(), read.size), (&b"acct/s/f"[..], 12));
    let missing = remote
        .read_file("acct", "s", "missing", 8)
        .await
        .unwrap_err();
    assert!(matches!(missing, SandboxSessionsError::Refused(ref m) if m == "no such file"));
    assert!(remote.close("acct", "open").await);
    assert!(!remote.close("acct", "other").await);
    let listed = remote.list("acct").await;
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].id.as_str(), listed[0].state),
        ("acct-s", SessionState::Live)
    );

    let intruder = front_end(&[&url], NodeToken::parse(&"x".repeat(48)).unwrap());
    let refused = intruder
        .run(bash("acct", Some("s"), "echo"))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, SandboxSessionsError::Unavailable(_)),
        "{refused:?}"
    );
    assert!(intruder.list("acct").await.is_empty());
    assert!(intruder.read_file("acct", "s", "f.txt", 8).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_lost_mid_run_ends_the_call_with_a_clear_error() {
    let sessions = Arc::new(Scripted::default());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    // the node runs on a runtime of its own, which is dropped as a process dies
    let node_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let stop = CancellationToken::new();
    node_runtime.spawn({
        let sessions = Arc::clone(&sessions);
        let stop = stop.clone();
        async move {
            listener.set_nonblocking(true).unwrap();
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            NodeServer::new(sessions, token())
                .serve(listener, stop)
                .await;
        }
    });
    let remote = Arc::new(front_end(&[&url], token()));
    let running = tokio::spawn({
        let remote = Arc::clone(&remote);
        async move { remote.run(bash("a", Some("s"), "wait")).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    node_runtime.shutdown_background();
    let lost = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(lost, SandboxSessionsError::Failed(ref m) if m == NODE_LOST),
        "{lost:?}"
    );
    // with the node gone, nothing runs and the caller is told so
    let after = remote.run(bash("a", Some("s"), "echo")).await.unwrap_err();
    assert!(
        matches!(after, SandboxSessionsError::Unavailable(_)),
        "{after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_goes_to_one_node_and_runs_without_an_id_take_turns() {
    let first = Arc::new(Scripted::default());
    let second = Arc::new(Scripted::default());
    let (a, _s1, _t1) = node(Arc::clone(&first)).await;
    let (b, _s2, _t2) = node(Arc::clone(&second)).await;
    let remote = front_end(&[&a, &b], token());
    let other = front_end(&[&b, &a], token());
    for i in 0..20 {
        let id = format!("session-{i}");
        remote
            .run(bash("acct", Some(&id), "echo-none"))
            .await
            .unwrap_err();
        other
            .run(bash("acct", Some(&id), "echo-none"))
            .await
            .unwrap_err();
    }
    let on_first = first.seen.lock().unwrap().clone();
    let on_second = second.seen.lock().unwrap().clone();
    assert_eq!(on_first.len() + on_second.len(), 40);
    assert!(
        !on_first.is_empty() && !on_second.is_empty(),
        "both nodes take sessions"
    );
    for seen in &on_first {
        assert!(!on_second.contains(seen), "{seen} ran on both nodes");
    }
    let before = (
        first.seen.lock().unwrap().len(),
        second.seen.lock().unwrap().len(),
    );
    for _ in 0..4 {
        remote
            .run(bash("acct", None, "echo-none"))
            .await
            .unwrap_err();
    }
    assert_eq!(first.seen.lock().unwrap().len(), before.0 + 2);
    assert_eq!(second.seen.lock().unwrap().len(), before.1 + 2);
}
