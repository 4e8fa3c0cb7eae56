//! The order of a metered call: work that may overlap the charge's commit starts before it is
//! durable, but no answer leaves before it is; work that reads metering state starts only after;
//! a refused call never runs; a commit that fails leaves the call uncharged (and, for work that
//! waits for it, unrun). A real SQLite store sits behind a gate that holds every commit until
//! the test opens it (or fails it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::watch;
use toolgate_domain::{
    Account, AccountId, Admission, Brand, Email, KeyHash, Micros, MonthKey, Pricing, SealedSecret,
    SecretInfo, SecretName, UsageSnapshot,
};
use toolgate_store::{
    Accounts, CallCharge, Decided, Metering, NewAccount, Recorded, Secrets, Store, StoreError,
    StoredSecret,
};
use toolgate_store_sqlite::{Durability, SqliteStore};

use super::{Answer, CallError, CallIo};
use crate::App;
use crate::capability::{
    CallContext, Capability, ContentItem, Failure, Field, FieldKind, JsonObject, Output, ToolKind,
};

#[path = "calls_gated_store_tests.rs"]
mod passthrough;

/// What the gate does with the commits it holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Gate {
    Held,
    Open,
    Failing,
}

/// The real store, whose commits are reported durable only once the gate opens.
/// (Its other storage passes straight through: `calls_gated_store_tests.rs`.)
struct GatedStore {
    inner: SqliteStore,
    gate: watch::Receiver<Gate>,
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
            usage: decided.usage,
            recorded: Recorded::when(async move {
                reached.notify_one();
                let passed = gate.wait_for(|gate| *gate != Gate::Held).await.map(|g| *g);
                if matches!(passed, Ok(Gate::Failing)) {
                    return Err(StoreError::Unavailable("the gate failed the commit".into()));
                }
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

#[async_trait]
impl Secrets for GatedStore {
    async fn put_secret(
        &self,
        account: &AccountId,
        name: &SecretName,
        sealed: &SealedSecret,
        hosts: Option<&[String]>,
    ) -> Result<bool, StoreError> {
        self.inner.put_secret(account, name, sealed, hosts).await
    }
    async fn delete_secret(
        &self,
        account: &AccountId,
        name: &SecretName,
    ) -> Result<bool, StoreError> {
        self.inner.delete_secret(account, name).await
    }
    async fn list_secrets(&self, account: &AccountId) -> Result<Vec<SecretInfo>, StoreError> {
        self.inner.list_secrets(account).await
    }
    async fn bound_secrets(
        &self,
        account: &AccountId,
    ) -> Result<Vec<toolgate_store::BoundSecret>, StoreError> {
        self.inner.bound_secrets(account).await
    }
    async fn sealed_secrets(
        &self,
        account: &AccountId,
        names: &[SecretName],
    ) -> Result<Vec<(SecretName, SealedSecret)>, StoreError> {
        self.inner.sealed_secrets(account, names).await
    }
    async fn secrets_to_rewrap(
        &self,
        version: u32,
        after: Option<(&AccountId, &SecretName)>,
        limit: u32,
    ) -> Result<Vec<StoredSecret>, StoreError> {
        self.inner.secrets_to_rewrap(version, after, limit).await
    }
    async fn rewrap_secret(
        &self,
        account: &AccountId,
        name: &SecretName,
        old: &SealedSecret,
        new: &SealedSecret,
    ) -> Result<bool, StoreError> {
        self.inner.rewrap_secret(account, name, old, new).await
    }
}

/// Says that it ran; overlaps the commit or not, as told.
struct Probe {
    key: &'static str,
    overlaps: bool,
    ran: Arc<AtomicBool>,
    running: Arc<tokio::sync::Notify>,
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
            kind: FieldKind::Boolean,
            description: "run it",
        }]
    }
    fn output_schema(&self) -> Value {
        json!({"type": "boolean"})
    }
    fn wants(&self, args: &JsonObject) -> bool {
        args.contains_key(self.key)
    }
    fn overlaps_commit(&self) -> bool {
        self.overlaps
    }
    async fn run(&self, _ctx: &CallContext<'_>, _args: &JsonObject) -> Result<Output, Failure> {
        self.ran.store(true, Ordering::SeqCst);
        self.running.notify_one();
        Ok(Output {
            content: vec![ContentItem::Text("ran".to_owned())],
            structured: json!(true),
            ..Output::default()
        })
    }
}

struct Rig {
    _dir: tempfile::TempDir,
    app: App,
    gate: watch::Sender<Gate>,
    reached_gate: Arc<tokio::sync::Notify>,
    ran: Arc<AtomicBool>,
    running: Arc<tokio::sync::Notify>,
    inner: SqliteStore,
    account: Account,
}

async fn rig(pricing: Pricing) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let inner = SqliteStore::open(&dir.path().join("t.db"), Durability::Full)
        .await
        .unwrap();
    let (gate, held) = watch::channel(Gate::Held);
    let reached_gate = Arc::new(tokio::sync::Notify::new());
    let store: Arc<dyn Store> = Arc::new(GatedStore {
        inner: inner.clone(),
        gate: held,
        reached: Arc::clone(&reached_gate),
    });
    let (ran, running) = (Arc::<AtomicBool>::default(), Arc::default());
    let probes: Vec<Arc<dyn Capability>> = [("overlapping", true), ("waiting", false)]
        .into_iter()
        .map(|(key, overlaps)| {
            Arc::new(Probe {
                key,
                overlaps,
                ran: Arc::clone(&ran),
                running: Arc::clone(&running),
            }) as Arc<dyn Capability>
        })
        .collect();
    let brand = Brand::parse("svc").unwrap();
    let app = App::with_capabilities(store, brand, pricing, "http://127.0.0.1", probes);
    let issued = app
        .admin()
        .create_account("gate@example.org")
        .await
        .unwrap();
    let account = inner
        .find_by_email(&Email::parse("gate@example.org").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(account.id.as_str(), issued.account_id);
    Rig {
        _dir: dir,
        app,
        gate,
        reached_gate,
        ran,
        running,
        inner,
        account,
    }
}

impl Rig {
    /// One call of svc_write asking for `field`, running in the background.
    fn call(&self, field: &str) -> tokio::task::JoinHandle<Result<Answer, CallError>> {
        let (app, account) = (self.app.clone(), self.account.clone());
        let args = json!({ field: true }).as_object().cloned();
        tokio::spawn(async move {
            app.calls()
                .call(&account, "svc_write", args, CallIo::default())
                .await
        })
    }

    async fn charged(&self) -> (i64, i64) {
        let month = MonthKey::now();
        self.inner
            .ledger_counts(&self.account.id, &month)
            .await
            .unwrap()
    }
}

/// Waits (bounded) for `what` to be told.
async fn told(notify: &tokio::sync::Notify, what: &str) {
    tokio::time::timeout(Duration::from_secs(10), notify.notified())
        .await
        .unwrap_or_else(|_| panic!("never told: {what}"));
}

/// Asserts that `answer` stays pending: a broken order answers within microseconds, so half a
/// second of silence is the evidence (a negative cannot be waited for as an event).
async fn stays_pending(answer: &mut tokio::task::JoinHandle<Result<Answer, CallError>>) {
    let early = tokio::time::timeout(Duration::from_millis(500), answer).await;
    assert!(early.is_err(), "answered before the commit: {early:?}");
}

fn ran_text(answer: Result<Result<Answer, CallError>, tokio::task::JoinError>) -> String {
    match answer.unwrap().unwrap() {
        Answer::Ran(outcome) => match &outcome.content[..] {
            [ContentItem::Text(text)] => text.clone(),
            other => panic!("unexpected content {other:?}"),
        },
        other => panic!("expected a run, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_work_starts_before_the_commit_but_answers_after_it() {
    let rig = rig(Pricing::default()).await;
    let mut answer = rig.call("overlapping");
    told(&rig.running, "the work started while the commit was held").await;
    stays_pending(&mut answer).await;
    rig.gate.send(Gate::Open).unwrap();
    assert_eq!(ran_text(answer.await), "ran");
    assert_eq!(rig.charged().await, (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_that_reads_metering_state_waits_for_the_commit() {
    let rig = rig(Pricing::default()).await;
    let mut answer = rig.call("waiting");
    // Held at the gate now. Had the work not waited for the commit, it would have run before
    // the call reached the gate (the answer's own wait is the only other way there).
    told(&rig.reached_gate, "the call reached the gate").await;
    assert!(
        !rig.ran.load(Ordering::SeqCst),
        "the work must not start before its charge is durable"
    );
    stays_pending(&mut answer).await;
    rig.gate.send(Gate::Open).unwrap();
    assert_eq!(ran_text(answer.await), "ran");
    assert!(rig.ran.load(Ordering::SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_call_never_runs() {
    let broke = Pricing {
        free_monthly_calls: 0,
        ..Pricing::default()
    };
    let rig = rig(broke).await;
    rig.gate.send(Gate::Open).unwrap();
    for field in ["overlapping", "waiting"] {
        let refused = rig.call(field).await.unwrap();
        let Err(CallError::Refused(message)) = &refused else {
            panic!("expected a refusal, got {refused:?}");
        };
        assert!(message.contains("top up your wallet"), "{message}");
    }
    assert!(!rig.ran.load(Ordering::SeqCst), "a refused call ran");
    assert_eq!(rig.charged().await, (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_leaves_the_call_free_and_waiting_work_unrun() {
    let rig = rig(Pricing::default()).await;
    rig.gate.send(Gate::Failing).unwrap();
    // work that waits for the commit never starts, and the caller is told to retry
    let waited = rig.call("waiting").await.unwrap();
    let Err(error @ CallError::NotRecorded(_)) = &waited else {
        panic!("expected 'not recorded', got {waited:?}");
    };
    assert!(
        error
            .to_string()
            .contains("did not run and nothing was charged")
    );
    assert!(
        !rig.ran.load(Ordering::SeqCst),
        "work ran without its charge"
    );
    // work that overlapped it has run: its output is the caller's, and it is free
    assert_eq!(ran_text(rig.call("overlapping").await), "ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_and_unknown_tools_are_answered_before_admission() {
    let rig = rig(Pricing::default()).await;
    rig.gate.send(Gate::Open).unwrap();
    let args = json!({"no_such_field": 1}).as_object().cloned();
    let answer = rig
        .app
        .calls()
        .call(&rig.account, "svc_write", args, CallIo::default())
        .await
        .unwrap();
    let Answer::InvalidArguments(outcome) = answer else {
        panic!("expected invalid arguments, got {answer:?}");
    };
    assert!(outcome.is_error);
    let unknown = rig
        .app
        .calls()
        .call(&rig.account, "svc_nope", None, CallIo::default())
        .await;
    assert!(
        matches!(unknown, Err(CallError::UnknownTool)),
        "{unknown:?}"
    );
    assert!(!rig.ran.load(Ordering::SeqCst));
    assert_eq!(rig.charged().await, (0, 0));
}
