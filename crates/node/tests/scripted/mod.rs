//! What the channel tests stand on: sessions that do what a bash command names (the real
//! manager is the suite's), a front end's upcall answers, a node on loopback, and a placement
//! store in a real SQLite file with one account.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolgate_domain::{AccountId, ApiKey, Brand, Email};
use toolgate_node::{
    ClientTls, Fleet, NodeControl, NodeLoad, NodeServer, NodeToken, RemoteSessions, ServerTls,
};
use toolgate_sandbox::upcall::{
    Upcall, UpcallError, UpcallErrorCode, UpcallHandler, UpcallOrigin, UpcallValue,
};
use toolgate_sandbox::{
    ExecOutcome, Interruption, LimitSettings, OutputChunk, OutputStream, RequestKind, RunOutcome,
    RunRequest, SandboxSessionInfo, SandboxSessions, SandboxSessionsError, SessionState, Work,
    WorkspaceRead,
};
use toolgate_store::{Accounts, NewAccount, Placement};
use toolgate_store_sqlite::{Durability, SqliteStore};

/// Sessions that do what the bash command names, and remember what they were given.
#[derive(Default)]
pub struct Scripted {
    pub seen: Mutex<Vec<String>>,
    pub cancelled: Mutex<Vec<String>>,
    pub fences: Mutex<usize>,
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

pub fn outcome(stdout: String) -> RunOutcome {
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
            stdout_file: None,
            stderr_file: None,
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
        egress: Vec::new(),
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

pub fn streaming_upcall() -> Upcall {
    serde_json::from_value(
        serde_json::json!({"kind": "invoke_llm", "model": "m/x", "prompt": "p", "stream": true}),
    )
    .unwrap()
}

/// Answers upcalls as the front end's app would: billing fails, a model streams three pieces.
pub struct Answers;

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

pub fn token() -> NodeToken {
    NodeToken::parse(&"n".repeat(48)).unwrap()
}

pub async fn node(
    sessions: Arc<Scripted>,
) -> (String, CancellationToken, tokio::task::JoinHandle<()>) {
    node_with(sessions, None).await
}

/// A node on loopback, over mutual TLS when `tls` is given (its URL is then `https://`).
pub async fn node_with(
    sessions: Arc<Scripted>,
    tls: Option<ServerTls>,
) -> (String, CancellationToken, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let server = NodeServer::new(sessions.clone(), token(), tls, sessions);
    let task = tokio::spawn(server.serve(listener, stop.clone()));
    (url, stop, task)
}

/// A placement store (a real SQLite file) with one account, whose id runs use.
pub struct Books {
    _dir: tempfile::TempDir,
    pub store: Arc<SqliteStore>,
    pub account: String,
}

pub async fn books() -> Books {
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
pub async fn front_end(
    books: &Books,
    urls: &[&str],
    token: NodeToken,
) -> (RemoteSessions, Arc<Fleet>) {
    front_end_with(books, urls, token, None).await
}

/// [`front_end`], over mutual TLS when `tls` is given.
pub async fn front_end_with(
    books: &Books,
    urls: &[&str],
    token: NodeToken,
    tls: Option<&ClientTls>,
) -> (RemoteSessions, Arc<Fleet>) {
    let urls: Vec<String> = urls.iter().map(|u| (*u).to_owned()).collect();
    let placement: Arc<dyn Placement> = books.store.clone();
    let fleet = Fleet::new(&urls, &token, tls, placement, Duration::from_secs(3)).unwrap();
    fleet.renew_all().await;
    (
        RemoteSessions::new(Arc::clone(&fleet), Duration::from_secs(600)),
        fleet,
    )
}

pub fn bash(account: &str, session: Option<&str>, command: &str) -> RunRequest {
    RunRequest::new(
        account,
        session.map(str::to_owned),
        Work::Bash {
            command: command.into(),
        },
        LimitSettings::default().for_call(None).unwrap(),
    )
}
