//! Upcalls: code in a session asks the service (through the runtime's `toolgate` module) and
//! waits for its typed answer. The identity is the manager's, never the code's; the answer goes
//! back to the code that asked; a call without a handler, a request the service does not know
//! and a handler that never answers all leave the session usable.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use toolgate_domain::{BillingStatus, Micros, Pricing, UsageSnapshot};
use toolgate_sandbox::upcall::{
    Upcall, UpcallError, UpcallErrorCode, UpcallHandler, UpcallOrigin, UpcallValue,
};
use toolgate_sandbox::{Interruption, RunOutcome, RunRequest, Work};
use toolgate_sandbox_manager::SandboxManager;

use crate::common::{error_type, limits, manager, text};

/// What a test's handler does with an upcall.
#[derive(Clone, Copy)]
enum Behaviour {
    /// answers with a billing record whose free calls are 7
    Answer,
    /// refuses it as the meter would
    Refuse,
    /// never answers (until the call ends and drops it)
    Hang,
}

/// Records who asked what, and answers as told.
struct Recording {
    behaviour: Behaviour,
    asked: Mutex<Vec<(UpcallOrigin, Upcall)>>,
    /// Set when a hanging answer is dropped (its call ended).
    dropped: Arc<tokio::sync::Notify>,
}

impl Recording {
    fn new(behaviour: Behaviour) -> Arc<Self> {
        Arc::new(Self {
            behaviour,
            asked: Mutex::new(Vec::new()),
            dropped: Arc::new(tokio::sync::Notify::new()),
        })
    }

    fn asked(&self) -> Vec<(UpcallOrigin, Upcall)> {
        self.asked.lock().unwrap().clone()
    }
}

/// Tells `notify` when dropped.
struct OnDrop(Arc<tokio::sync::Notify>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

fn record() -> BillingStatus {
    let usage = UsageSnapshot {
        free_used: 993,
        wallet: Micros(0),
    };
    BillingStatus::new("free", usage, &Pricing::default())
}

#[async_trait]
impl UpcallHandler for Recording {
    async fn answer(
        &self,
        origin: UpcallOrigin,
        upcall: Upcall,
    ) -> Result<UpcallValue, UpcallError> {
        self.asked.lock().unwrap().push((origin, upcall));
        match self.behaviour {
            Behaviour::Answer => Ok(UpcallValue::Billing(record())),
            Behaviour::Refuse => Err(UpcallError::new(
                UpcallErrorCode::Refused,
                "the allowance is used up: top up",
            )),
            Behaviour::Hang => {
                let _dropped = OnDrop(Arc::clone(&self.dropped));
                std::future::pending().await
            }
        }
    }
}

async fn run_with(
    m: &SandboxManager,
    account: &str,
    session: Option<&str>,
    code: &str,
    handler: Option<Arc<Recording>>,
    timeout_s: u64,
) -> RunOutcome {
    let work = Work::Python {
        code: code.to_owned(),
    };
    let request = RunRequest {
        upcalls: handler.map(|h| h as Arc<dyn UpcallHandler>),
        ..RunRequest::new(account, session.map(str::to_owned), work, limits(timeout_s))
    };
    m.run(request).await.unwrap()
}

/// The code's `toolgate.billing()` reaches the handler with the session's identity as the
/// manager knows it, and the typed answer comes back as a dict; a request that names someone
/// else is refused before any handler sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upcall_carries_the_sessions_identity_and_gets_its_answer() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    let handler = Recording::new(Behaviour::Answer);
    let code = "import toolgate\nb = toolgate.billing()\nb['free_remaining_this_month']";
    let call = run_with(&m, "acct-a", Some("s1"), code, Some(handler.clone()), 30).await;
    assert_eq!(text(&call), "7", "{:?}", call.outcome.error);
    let call = run_with(&m, "acct-a", None, code, Some(handler.clone()), 30).await;
    assert_eq!(text(&call), "7", "{:?}", call.outcome.error);
    let asked = handler.asked();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[0].0.account, "acct-a");
    assert_eq!(asked[0].0.session_id.as_deref(), Some("s1"));
    assert_eq!(asked[1].0.session_id, None);
    assert!(
        asked
            .iter()
            .all(|(_, upcall)| *upcall == Upcall::Billing {})
    );

    // the request is closed: a claimed account is refused, never passed on
    let forged = "import toolgate\ntry:\n    toolgate._upcall({'kind': 'billing', 'account': \
                  'acct-b'})\nexcept toolgate.ToolgateError as e:\n    r = e.code\nr";
    let call = run_with(&m, "acct-a", Some("s1"), forged, Some(handler.clone()), 30).await;
    assert_eq!(text(&call), "'bad_request'");
    assert_eq!(
        handler.asked().len(),
        2,
        "a forged request reached the handler"
    );
    m.shutdown().await;
}

/// A refusal is the code's exception, with the service's code and message; a run without a
/// handler answers "unavailable"; the session goes on after either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_runs_without_a_handler_are_exceptions_in_the_code() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    let code = "import toolgate\ntry:\n    toolgate.billing()\nexcept toolgate.ToolgateError as \
                e:\n    r = (e.code, e.message)\nr";
    let refused = run_with(
        &m,
        "a",
        Some("s"),
        code,
        Some(Recording::new(Behaviour::Refuse)),
        30,
    );
    assert_eq!(
        text(&refused.await),
        "('refused', 'the allowance is used up: top up')"
    );
    let without = run_with(&m, "a", Some("s"), code, None, 30).await;
    assert!(
        text(&without).starts_with("('unavailable', "),
        "{}",
        text(&without)
    );
    let after = run_with(&m, "a", Some("s"), "1 + 1", None, 30).await;
    assert_eq!(text(&after), "2");
    assert!(!after.fresh, "the session did not survive");
    m.shutdown().await;
}

/// A handler that never answers holds the code only until the call's time limit: the code is
/// interrupted, the answer being made is dropped, and the session and its variables survive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upcall_never_answered_ends_with_its_calls_time_limit() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    run_with(&m, "a", Some("s"), "kept = 41", None, 30).await;
    let handler = Recording::new(Behaviour::Hang);
    let dropped = handler.dropped.notified();
    let call = run_with(
        &m,
        "a",
        Some("s"),
        "import toolgate\ntoolgate.billing()",
        Some(handler.clone()),
        1,
    )
    .await;
    assert_eq!(call.outcome.interrupted, Some(Interruption::Timeout));
    assert_eq!(error_type(&call), "KeyboardInterrupt");
    tokio::time::timeout(Duration::from_secs(10), dropped)
        .await
        .expect("the unanswered upcall was not dropped with its call");
    let after = run_with(&m, "a", Some("s"), "kept + 1", None, 30).await;
    assert_eq!(text(&after), "42");
    m.shutdown().await;
}

/// The environment a run is given and its upcalls are independent: a secret-like variable is
/// the run's own, and an upcall does not carry it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upcall_carries_no_environment() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |_| {}).await;
    let handler = Recording::new(Behaviour::Answer);
    let work = Work::Python {
        code: "import toolgate, os\ntoolgate.billing()['tier'], os.environ['TG_KEY']".to_owned(),
    };
    let request = RunRequest {
        env: BTreeMap::from([("TG_KEY".to_owned(), "s3cret".to_owned())]),
        upcalls: Some(handler.clone()),
        ..RunRequest::new("a", Some("s".to_owned()), work, limits(30))
    };
    let call = m.run(request).await.unwrap();
    assert_eq!(text(&call), "('free', 's3cret')");
    assert!(!format!("{:?}", handler.asked()).contains("s3cret"));
    m.shutdown().await;
}
