//! The order of a metered call: work that may overlap the charge's commit starts before it is
//! durable, but no answer leaves before it is; work that reads metering state starts only after.
//! A real SQLite store sits behind a gate that holds every commit until the test opens it.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use toolgate_app::capability::Field;
use toolgate_app::{
    Admin, App, Authenticator, CallContext, Capability, ContentItem, Failure, Meter, Output,
    Recorded, Registry, ToolKind,
};
use toolgate_domain::{
    Account, AccountId, Admission, Brand, Email, KeyHash, Micros, MonthKey, Pricing, UsageSnapshot,
};
use toolgate_store::{Accounts, CallCharge, Decided, Metering, NewAccount, Store, StoreError};
use toolgate_store_sqlite::{Durability, SqliteStore};

use crate::{HttpSettings, Metrics, router};

/// The real store, whose commits are reported durable only once the gate opens.
struct GatedStore {
    inner: SqliteStore,
    gate: watch::Receiver<bool>,
    /// Told each time a call's durability is awaited at the gate.
    reached: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl Accounts for GatedStore {
    async fn create_account(&self, account: &NewAccount) -> Result<Account, StoreError> {
        self.inner.create_account(account).await
    }
    async fn find_by_key_hash(
        &self,
        hash: &KeyHash,
    ) -> Result<Option<(Account, KeyHash)>, StoreError> {
        self.inner.find_by_key_hash(hash).await
    }
    async fn find_by_email(&self, email: &Email) -> Result<Option<Account>, StoreError> {
        self.inner.find_by_email(email).await
    }
    async fn replace_key(&self, account: &AccountId, new_hash: &KeyHash) -> Result<(), StoreError> {
        self.inner.replace_key(account, new_hash).await
    }
}

#[async_trait]
impl Metering for GatedStore {
    async fn admit_call(&self, charge: &CallCharge<'_>) -> Result<Admission, StoreError> {
        let decided = self.decide_call(charge).await?;
        decided.recorded.wait().await?;
        Ok(decided.admission)
    }
    async fn decide_call(&self, charge: &CallCharge<'_>) -> Result<Decided, StoreError> {
        let decided = self.inner.decide_call(charge).await?;
        let mut gate = self.gate.clone();
        let reached = Arc::clone(&self.reached);
        let commit = decided.recorded;
        Ok(Decided {
            admission: decided.admission,
            recorded: Recorded::when(async move {
                reached.notify_one();
                let _ = gate.wait_for(|open| *open).await;
                commit.wait().await
            }),
        })
    }
    async fn credit_wallet(
        &self,
        account: &AccountId,
        amount: Micros,
        reference: &str,
    ) -> Result<(Micros, bool), StoreError> {
        self.inner.credit_wallet(account, amount, reference).await
    }
    async fn usage(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<UsageSnapshot, StoreError> {
        self.inner.usage(account, month).await
    }
    async fn ledger_counts(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<(i64, i64), StoreError> {
        self.inner.ledger_counts(account, month).await
    }
}

/// Notes that it ran; overlaps the commit or not, as told.
struct Probe {
    key: &'static str,
    overlaps: bool,
    ran: Arc<AtomicBool>,
}

#[async_trait]
impl Capability for Probe {
    fn key(&self) -> &'static str {
        self.key
    }
    fn tool(&self) -> ToolKind {
        ToolKind::Write
    }
    fn summary(&self) -> &'static str {
        "notes that it ran"
    }
    fn fields(&self) -> Vec<Field> {
        vec![Field {
            name: self.key,
            kind: toolgate_app::capability::FieldKind::Boolean,
            description: "run it",
        }]
    }
    fn output_schema(&self) -> Value {
        json!({"type": "boolean"})
    }
    fn wants(&self, args: &toolgate_app::capability::JsonObject) -> bool {
        args.contains_key(self.key)
    }
    fn overlaps_commit(&self) -> bool {
        self.overlaps
    }
    async fn run(
        &self,
        _ctx: &CallContext<'_>,
        _args: &toolgate_app::capability::JsonObject,
    ) -> Result<Output, Failure> {
        self.ran.store(true, Ordering::SeqCst);
        Ok(Output {
            content: vec![ContentItem::Text("ran".to_owned())],
            structured: json!(true),
            is_error: false,
        })
    }
}

struct Rig {
    _dir: tempfile::TempDir,
    addr: std::net::SocketAddr,
    key: String,
    open_gate: watch::Sender<bool>,
    reached_gate: Arc<tokio::sync::Notify>,
    overlapping: Arc<AtomicBool>,
    waiting: Arc<AtomicBool>,
    inner: SqliteStore,
    account: AccountId,
}

async fn rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let inner = SqliteStore::open(&dir.path().join("t.db"), Durability::Full)
        .await
        .unwrap();
    let (open_gate, gate) = watch::channel(false);
    let reached_gate = Arc::new(tokio::sync::Notify::new());
    let store: Arc<dyn Store> = Arc::new(GatedStore {
        inner: inner.clone(),
        gate,
        reached: Arc::clone(&reached_gate),
    });
    let (brand, pricing) = (Brand::parse("svc").unwrap(), Pricing::default());
    let (overlapping, waiting) = (Arc::default(), Arc::default());
    let probes: Vec<Arc<dyn Capability>> = vec![
        Arc::new(Probe {
            key: "overlapping",
            overlaps: true,
            ran: Arc::clone(&overlapping),
        }),
        Arc::new(Probe {
            key: "waiting",
            overlaps: false,
            ran: Arc::clone(&waiting),
        }),
    ];
    let public_url = "http://127.0.0.1";
    let app = App {
        auth: Arc::new(Authenticator::new(store.clone(), brand.clone())),
        meter: Arc::new(Meter::new(store.clone(), pricing.clone())),
        registry: Arc::new(Registry::new(&brand, probes)),
        admin: Arc::new(Admin::new(store, brand, pricing, public_url)),
    };
    let issued = app.admin.create_account("gate@example.org").await.unwrap();
    let settings = HttpSettings {
        public_url: public_url.to_owned(),
        allowed_origins: Vec::new(),
        allowed_hosts: Vec::new(),
        max_request_bytes: 1 << 20,
        sessions: crate::SessionLimits::default(),
    };
    let routes = router(
        app,
        &settings,
        Arc::new(Metrics::new()),
        CancellationToken::new(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, routes).await });
    Rig {
        _dir: dir,
        addr,
        key: issued.api_key,
        open_gate,
        reached_gate,
        overlapping,
        waiting,
        inner,
        account: AccountId::from_stored(issued.account_id),
    }
}

/// Sends one `tools/call` of svc_write with `field` and returns the pending answer.
fn call(rig: &Rig, field: &str) -> tokio::task::JoinHandle<String> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "svc_write", "arguments": {field: true}}})
    .to_string();
    let request = format!(
        "POST /u/{} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        rig.key,
        body.len()
    );
    let addr = rig.addr;
    tokio::spawn(async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    })
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_work_starts_before_the_commit_but_answers_after_it() {
    let rig = rig().await;
    let answer = call(&rig, "overlapping");
    settle().await;
    assert!(
        rig.overlapping.load(Ordering::SeqCst),
        "the work started while the commit was held"
    );
    assert!(
        !answer.is_finished(),
        "no answer may leave before the commit"
    );
    rig.open_gate.send(true).unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), answer)
        .await
        .unwrap()
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""text":"ran""#), "{answer}");
    let month = MonthKey::now();
    assert_eq!(
        rig.inner.ledger_counts(&rig.account, &month).await.unwrap(),
        (1, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_that_reads_metering_state_waits_for_the_commit() {
    let rig = rig().await;
    let answer = call(&rig, "waiting");
    // the call is held at the gate now: had the work been started first, it would have run
    tokio::time::timeout(Duration::from_secs(10), rig.reached_gate.notified())
        .await
        .expect("the call reached the gate");
    settle().await;
    assert!(
        !rig.waiting.load(Ordering::SeqCst),
        "the work must not start before its charge is durable"
    );
    assert!(!answer.is_finished());
    rig.open_gate.send(true).unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), answer)
        .await
        .unwrap()
        .unwrap();
    assert!(answer.contains(r#""text":"ran""#), "{answer}");
    assert!(rig.waiting.load(Ordering::SeqCst));
}
