//! `network` through the app's real call path, on a real SQLite file: refused lists are refused
//! before metering; written lists are shown by the read tool and reach every run's grant, also
//! right after a change; without network the runs get no grant at all.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolgate_domain::{Account, Brand, Email, MonthKey, Pricing};
use toolgate_sandbox::{
    EgressGrant, EgressLimits, LimitSettings, RunOutcome, RunRequest, SandboxSessionInfo,
    SandboxSessions, SandboxSessionsError, WorkspaceRead,
};
use toolgate_store::{Accounts, Metering, Store};
use toolgate_store_sqlite::{Durability, SqliteStore};

use crate::capabilities::Sandbox;
use crate::{Answer, App, CallIo, Services};

/// Keeps each run's grant and refuses the run: what the sessions would be given is all these
/// tests look at (the suite runs real sessions).
#[derive(Default)]
struct Recorder {
    grants: Mutex<Vec<Option<EgressGrant>>>,
}

#[async_trait]
impl SandboxSessions for Recorder {
    async fn run(&self, request: RunRequest) -> Result<RunOutcome, SandboxSessionsError> {
        self.grants.lock().unwrap().push(request.egress);
        Err(SandboxSessionsError::Refused("recorded".into()))
    }
    async fn read_file(
        &self,
        _: &str,
        _: &str,
        _: &str,
        _: u64,
    ) -> Result<WorkspaceRead, SandboxSessionsError> {
        Err(SandboxSessionsError::Refused("no files here".into()))
    }
    async fn close(&self, _: &str, _: &str) -> bool {
        false
    }
    fn idle_ttl(&self) -> Duration {
        Duration::from_secs(60)
    }
    async fn list(&self, _: &str) -> Vec<SandboxSessionInfo> {
        Vec::new()
    }
}

struct Rig {
    _dir: tempfile::TempDir,
    app: App,
    store: Arc<SqliteStore>,
    account: Account,
    recorder: Arc<Recorder>,
}

async fn rig(network: bool) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        SqliteStore::open(&dir.path().join("t.db"), Durability::Normal)
            .await
            .unwrap(),
    );
    let recorder = Arc::new(Recorder::default());
    let mut sandbox = Sandbox::new(recorder.clone(), LimitSettings::default());
    if network {
        sandbox = sandbox.with_network(EgressLimits::default());
    }
    let services = Services {
        sandbox: Some(sandbox),
        ..Services::default()
    };
    let app = App::new(
        store.clone() as Arc<dyn Store>,
        Brand::parse("svc").unwrap(),
        Pricing::default(),
        "http://127.0.0.1",
        services,
    );
    app.admin().create_account("net@example.org").await.unwrap();
    let account = store
        .find_by_email(&Email::parse("net@example.org").unwrap())
        .await
        .unwrap()
        .unwrap();
    Rig {
        _dir: dir,
        app,
        store,
        account,
        recorder,
    }
}

impl Rig {
    async fn call(&self, tool: &str, args: Value) -> Answer {
        self.app
            .calls()
            .call(
                &self.account,
                tool,
                args.as_object().cloned(),
                CallIo::default(),
            )
            .await
            .unwrap()
    }

    /// The structured `network` of a call that ran without error.
    async fn network(&self, tool: &str, args: Value) -> Value {
        match self.call(tool, args).await {
            Answer::Ran(outcome) if !outcome.is_error => outcome.structured["network"].clone(),
            other => panic!("{tool} did not run cleanly: {other:?}"),
        }
    }

    /// The refusal of a call refused before admission.
    async fn refusal(&self, args: Value) -> String {
        match self.call("svc_write", args).await {
            Answer::InvalidArguments(outcome) => match &outcome.content[0] {
                crate::ContentItem::Text(text) => text.clone(),
                other => panic!("not text: {other:?}"),
            },
            other => panic!("not refused before admission: {other:?}"),
        }
    }

    /// The grant of one `code` run.
    async fn grant_of_a_run(&self) -> Option<EgressGrant> {
        let _ = self.call("svc_write", json!({"code": "1+1"})).await;
        self.recorder.grants.lock().unwrap().pop().expect("a run")
    }

    async fn calls_charged(&self) -> i64 {
        let (free, paid) = self
            .store
            .ledger_counts(&self.account.id, &MonthKey::now())
            .await
            .unwrap();
        free + paid
    }
}

#[tokio::test]
async fn bad_lists_are_refused_before_metering_with_a_clear_error() {
    let rig = rig(true).await;
    let many: Vec<String> = (0..10_000).map(|i| format!("h{i}.example.org")).collect();
    let megabyte = "a".repeat(1 << 20);
    for (args, expected) in [
        (json!({"network": ["a.org"]}), "must be an object"),
        (json!({"network": "a.org"}), "must be an object"),
        (json!({"network": {}}), "names no list"),
        (json!({"network": {"allow": "a.org"}}), "must be an array"),
        (
            json!({"network": {"allow": [1]}}),
            "`network.allow[0]` must be a string",
        ),
        (
            json!({"network": {"deny": [null]}}),
            "`network.deny[0]` must be a string",
        ),
        (
            json!({"network": {"allow": [], "ports": [443]}}),
            "unknown key `ports`",
        ),
        (json!({"network": {"allow": many}}), "has 10000 patterns"),
        (json!({"network": {"allow": [megabyte]}}), "longer than 255"),
        (
            json!({"network": {"allow": ["ok.org", "http://x.org"]}}),
            "`network.allow[1]`",
        ),
        (
            json!({"network": {"deny": ["a..b"]}}),
            "is not a host pattern",
        ),
        (
            json!({"network": {"deny": ["*x.org"]}}),
            "is not a host pattern",
        ),
        (
            json!({"network": {"deny": ["x.org\nevil.org"]}}),
            "is not a host pattern",
        ),
        (json!({"network": {"deny": [""]}}), "is empty"),
        (
            json!({"network": {"deny": ["\u{0}"]}}),
            "is not a host pattern",
        ),
    ] {
        let refusal = rig.refusal(args.clone()).await;
        assert!(
            refusal.contains(expected),
            "{expected:?} for {args:.80}: {refusal}"
        );
        assert!(
            refusal.len() < 2_000,
            "a refusal quotes little: {} bytes",
            refusal.len()
        );
    }
    assert_eq!(rig.calls_charged().await, 0, "refused calls are free");
    assert_eq!(
        rig.network("svc_read", json!({"network": true})).await,
        json!({"allow": [], "deny": [], "sessions_have_network": true}),
        "nothing was written"
    );
}

#[tokio::test]
async fn written_lists_are_shown_and_reach_every_runs_grant() {
    let rig = rig(true).await;
    let before = rig.grant_of_a_run().await.expect("sessions have network");
    assert!(before.allow.is_empty() && before.deny.is_empty());

    let written = rig
        .network(
            "svc_write",
            json!({"network": {"allow": ["API.GitHub.com.", "*.pypi.org", "api.github.com"],
                               "deny": ["evil.pypi.org"]}}),
        )
        .await;
    let expected = json!({"allow": ["api.github.com", "*.pypi.org"], "deny": ["evil.pypi.org"],
                          "sessions_have_network": true});
    assert_eq!(written, expected, "canonical forms, a repeat kept once");
    assert_eq!(
        rig.network("svc_read", json!({"network": true})).await,
        expected
    );

    let grant = rig.grant_of_a_run().await.unwrap();
    assert_eq!(grant.allow, ["api.github.com", "*.pypi.org"]);
    assert_eq!(grant.deny, ["evil.pypi.org"]);
    assert_eq!(grant.limits, EgressLimits::default());

    // a change is in the very next run's grant: the cached lists were forgotten
    let changed = rig
        .network("svc_write", json!({"network": {"deny": ["*.evil.org"]}}))
        .await;
    assert_eq!(
        changed["allow"],
        json!(["api.github.com", "*.pypi.org"]),
        "allow kept"
    );
    let grant = rig.grant_of_a_run().await.unwrap();
    assert_eq!(grant.deny, ["*.evil.org"]);
    rig.network("svc_write", json!({"network": {"allow": []}}))
        .await;
    assert!(rig.grant_of_a_run().await.unwrap().allow.is_empty());

    // one call that sets the lists and runs code runs it under the new lists
    let _ = rig
        .call(
            "svc_write",
            json!({"code": "1+1", "network": {"allow": ["only.example.org"]}}),
        )
        .await;
    let grant = rig.recorder.grants.lock().unwrap().pop().unwrap().unwrap();
    assert_eq!(grant.allow, ["only.example.org"]);
}

#[tokio::test]
async fn without_network_runs_get_no_grant_and_the_lists_say_so() {
    let rig = rig(false).await;
    let written = rig
        .network("svc_write", json!({"network": {"allow": ["example.org"]}}))
        .await;
    assert_eq!(written["sessions_have_network"], json!(false));
    assert!(rig.grant_of_a_run().await.is_none());
    match rig.call("svc_read", json!({"network": true})).await {
        Answer::Ran(outcome) => {
            let crate::ContentItem::Text(text) = &outcome.content[0] else {
                panic!("not text")
            };
            assert!(text.contains("only example.org"), "{text}");
            assert!(text.contains("no network"), "{text}");
        }
        other => panic!("{other:?}"),
    }
}
