//! The channel end to end on loopback: a real `NodeServer` over a scripted `SandboxSessions`
//! (the real manager is the suite's: `toolgate node` with confined sessions), reached through
//! `RemoteSessions` as a front end reaches it, placing sessions through a real SQLite store.
//! What is checked is what crosses: files, output in order, upcalls and their streamed pieces,
//! cancellation both ways, errors in their kinds, reads, listing, a wrong token, a node lost
//! mid-run, placement over two nodes seen alike by two front ends, and a node that no front end
//! renews fencing itself, its sessions placed again elsewhere and said to be.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolgate_domain::{AccountId, ApiKey, Brand, Email};
use toolgate_node::{
    Fleet, NODE_LOST, NodeControl, NodeLoad, NodeServer, NodeToken, RemoteSessions,
};
use toolgate_sandbox::upcall::{
    Upcall, UpcallError, UpcallErrorCode, UpcallHandler, UpcallOrigin, UpcallValue,
};
use toolgate_sandbox::{
    ExecOutcome, Interruption, LimitSettings, OutputChunk, OutputStream, RequestKind, RunOutcome,
    RunRequest, SandboxSessionInfo, SandboxSessions, SandboxSessionsError, SessionState, Work,
    WorkspaceFile, WorkspaceRead,
};
use toolgate_store::{Accounts, NewAccount, Placement};
use toolgate_store_sqlite::{Durability, SqliteStore};

/// Sessions that do what the bash command names, and remember what they were given.
#[derive(Default)]
struct Scripted {
    seen: Mutex<Vec<String>>,
    cancelled: Mutex<Vec<String>>,
    fences: Mutex<usize>,
}

#[async_trait]
impl NodeControl for Scripted {
    fn load(&self) -> NodeLoad {
        NodeLoad {
            sessions: self.seen.lock().unwrap().len() as u64,
            memory_bytes: 0,
        }
    }

    async fn fence(&self) {
        *self.fences.lock().unwrap() += 1;
    }

    async fn drain(&self) -> u64 {
        7
    }
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
                self.cancelled
                    .lock()
                    .unwrap()
                    .push(request.session_id.clone().unwrap_or_default());
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
    let server = NodeServer::new(sessions.clone(), token(), sessions);
    let task = tokio::spawn(server.serve(listener, stop.clone()));
    (url, stop, task)
}

/// A placement store (a real SQLite file) with one account, whose id runs use.
struct Books {
    _dir: tempfile::TempDir,
    store: Arc<SqliteStore>,
    account: String,
}

async fn books() -> Books {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        SqliteStore::open(&dir.path().join("t.db"), Durability::Normal)
            .await
            .unwrap(),
    );
    let key = ApiKey::generate(&Brand::parse("svc").unwrap()).unwrap();
    let account = NewAccount {
        id: AccountId::generate(),
        email: Email::parse("nodes@example.org").unwrap(),
        key_hash: key.hash(),
    };
    store.create_account(&account).await.unwrap();
    Books {
        _dir: dir,
        account: account.id.as_str().to_owned(),
        store,
    }
}

/// A front end's sessions on `urls`, its nodes registered and leased (3 s) already.
async fn front_end(books: &Books, urls: &[&str], token: NodeToken) -> (RemoteSessions, Arc<Fleet>) {
    let urls: Vec<String> = urls.iter().map(|u| (*u).to_owned()).collect();
    let placement: Arc<dyn Placement> = books.store.clone();
    let fleet = Fleet::new(&urls, &token, placement, Duration::from_secs(3)).unwrap();
    fleet.renew_all().await;
    (
        RemoteSessions::new(Arc::clone(&fleet), Duration::from_secs(600)),
        fleet,
    )
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
    let b = books().await;
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) = node(Arc::clone(&sessions)).await;
    let (remote, _fleet) = front_end(&b, &[&url], token()).await;
    let mut request = bash(&b.account, Some("s1"), "echo");
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
    assert!(!outcome.node_lost);
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
        [format!(
            "{}|Some(\"s1\")|v4lue|a.bin=70000,dir/b.txt=2",
            b.account
        )]
    );
    // an outcome bigger than the link's flow-control window still arrives whole
    let big = remote.run(bash(&b.account, None, "big")).await.unwrap();
    assert_eq!(big.outcome.stdout.len(), 3 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upcalls_are_answered_by_the_front_end_with_their_pieces() {
    let b = books().await;
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) = node(sessions).await;
    let (remote, _fleet) = front_end(&b, &[&url], token()).await;
    let mut request = bash(&b.account, Some("s9"), "upcall");
    request.upcalls = Some(Arc::new(Answers));
    let outcome = remote.run(request).await.unwrap();
    let text = outcome.outcome.stdout;
    assert!(
        text.contains(&format!("no money for {}", b.account)),
        "{text}"
    );
    assert!(text.contains("done for Some(\\\"s9\\\")"), "{text}");
    assert!(
        text.ends_with("|one two three"),
        "the pieces before the answer: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_interrupts_the_run_on_the_node_and_so_does_dropping_it() {
    let b = books().await;
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) = node(Arc::clone(&sessions)).await;
    let (remote, _fleet) = front_end(&b, &[&url], token()).await;
    let remote = Arc::new(remote);
    let mut request = bash(&b.account, Some("cancelled"), "wait");
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
        let account = b.account.clone();
        async move { remote.run(bash(&account, Some("dropped"), "wait")).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    dropped.abort();
    for _ in 0..100 {
        if sessions
            .cancelled
            .lock()
            .unwrap()
            .iter()
            .any(|s| s == "dropped")
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the node's run was not interrupted when its caller left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_keep_their_kind_and_never_their_internals() {
    let b = books().await;
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) = node(sessions).await;
    let (remote, _fleet) = front_end(&b, &[&url], token()).await;
    let refused = remote
        .run(bash(&b.account, None, "refuse"))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, SandboxSessionsError::Refused(ref m) if m.contains("too many sessions"))
    );
    let failed = remote
        .run(bash(&b.account, None, "nope"))
        .await
        .unwrap_err();
    assert!(matches!(failed, SandboxSessionsError::Failed(_)));
    let unavailable = remote
        .run(bash(&b.account, None, "unavailable"))
        .await
        .unwrap_err();
    assert!(matches!(unavailable, SandboxSessionsError::Unavailable(_)));
    let shown = format!(
        "{unavailable} {:?}",
        std::error::Error::source(&unavailable).map(ToString::to_string)
    );
    assert!(!shown.contains("/secret/host/path"), "{shown}");
    // a session id placement cannot take is refused before anything is sent
    let long = "x".repeat(300);
    let bad = remote
        .run(bash(&b.account, Some(&long), "echo"))
        .await
        .unwrap_err();
    assert!(matches!(bad, SandboxSessionsError::Refused(_)), "{bad:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_closes_and_lists_cross_and_a_wrong_token_gets_nothing() {
    let b = books().await;
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) = node(sessions).await;
    let (remote, _fleet) = front_end(&b, &[&url], token()).await;
    let read = remote.read_file(&b.account, "s", "f.txt", 8).await.unwrap();
    let whole = format!("{}/s/f.txt", b.account);
    assert_eq!(
        (read.bytes.as_slice(), read.size),
        (&whole.as_bytes()[..8], whole.len() as u64)
    );
    let missing = remote
        .read_file(&b.account, "s", "missing", 8)
        .await
        .unwrap_err();
    assert!(matches!(missing, SandboxSessionsError::Refused(ref m) if m == "no such file"));
    assert!(remote.close(&b.account, "open").await);
    assert!(!remote.close(&b.account, "other").await);
    let listed = remote.list(&b.account).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].id.clone(), listed[0].state),
        (format!("{}-s", b.account), SessionState::Live)
    );

    let other = books().await;
    let (intruder, _fleet) =
        front_end(&other, &[&url], NodeToken::parse(&"x".repeat(48)).unwrap()).await;
    let refused = intruder
        .run(bash(&other.account, Some("s"), "echo"))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, SandboxSessionsError::Unavailable(_)),
        "{refused:?}"
    );
    assert!(intruder.list(&other.account).await.is_empty());
    assert!(
        intruder
            .read_file(&other.account, "s", "f.txt", 8)
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_lost_mid_run_ends_the_call_with_a_clear_error() {
    let b = books().await;
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
            NodeServer::new(sessions.clone(), token(), sessions)
                .serve(listener, stop)
                .await;
        }
    });
    let (remote, fleet) = front_end(&b, &[&url], token()).await;
    let remote = Arc::new(remote);
    let running = tokio::spawn({
        let remote = Arc::clone(&remote);
        let account = b.account.clone();
        async move { remote.run(bash(&account, Some("s"), "wait")).await }
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
    // once its lease ran out, no node is live: nothing runs and the caller is told so
    tokio::time::sleep(Duration::from_secs(4)).await;
    fleet.renew_all().await;
    let after = remote
        .run(bash(&b.account, Some("s"), "echo"))
        .await
        .unwrap_err();
    assert!(
        matches!(after, SandboxSessionsError::Unavailable(_)),
        "{after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_spread_over_the_nodes_and_stay_where_they_were_placed() {
    let b = books().await;
    let first = Arc::new(Scripted::default());
    let second = Arc::new(Scripted::default());
    let (x, _s1, _t1) = node(Arc::clone(&first)).await;
    let (y, _s2, _t2) = node(Arc::clone(&second)).await;
    // two front ends on one store, naming the nodes in another order
    let (one, _f1) = front_end(&b, &[&x, &y], token()).await;
    let (two, _f2) = front_end(&b, &[&y, &x], token()).await;
    for i in 0..20 {
        let id = format!("session-{i}");
        one.run(bash(&b.account, Some(&id), "echo-none"))
            .await
            .unwrap_err();
        two.run(bash(&b.account, Some(&id), "echo-none"))
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_nobody_renews_fences_itself_and_its_sessions_move() {
    let b = books().await;
    let lonely = Arc::new(Scripted::default());
    let (x, _s1, _t1) = node(Arc::clone(&lonely)).await;
    // this front end knows only the first node; it places a session there, then goes away
    let (before, fleet) = front_end(&b, &[&x], token()).await;
    before
        .run(bash(&b.account, Some("moving"), "echo-none"))
        .await
        .unwrap_err();
    assert_eq!(lonely.seen.lock().unwrap().len(), 1);
    drop((before, fleet));
    // with nobody renewing it, the node fences itself once its lease (3 s less the margin) ends
    for _ in 0..100 {
        if *lonely.fences.lock().unwrap() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(*lonely.fences.lock().unwrap(), 1, "the node fenced itself");
    // the session moves to a node that is live, and the run says its node was lost; the fenced
    // node, until someone registers it again, takes nothing placed on its old incarnation
    tokio::time::sleep(Duration::from_secs(2)).await;
    let other = Arc::new(Scripted::default());
    let (y, _s2, _t2) = node(Arc::clone(&other)).await;
    let (after, _fleet) = front_end(&b, &[&y], token()).await;
    let mut request = bash(&b.account, Some("moving"), "echo");
    let (output, _chunks) = mpsc::channel(1024);
    request.output = Some(output);
    let moved = after.run(request).await.unwrap();
    assert!(moved.node_lost, "the run says the session's node was lost");
    assert_eq!(other.seen.lock().unwrap().len(), 1);
    assert_eq!(
        lonely.seen.lock().unwrap().len(),
        1,
        "nothing more ran on the fenced node"
    );
}
