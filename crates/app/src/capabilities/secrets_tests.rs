//! `secret_set`'s `hosts`: checked before the call is metered, stored with the secret, shown
//! by `list_secrets`, kept or cleared on replacement, and opened for the network proxy.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use toolgate_domain::{Account, Brand, Email, MonthKey, Pricing};
use toolgate_store::Store;
use toolgate_store_sqlite::{Durability, SqliteStore};
use toolgate_vault::{KeySource, MasterKeys, Vault};

use crate::calls::{Answer, CallIo};
use crate::{App, Services};

struct Rig {
    _dir: tempfile::TempDir,
    app: App,
    store: Arc<dyn Store>,
    account: Account,
}

async fn rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&dir.path().join("t.db"), Durability::Normal)
            .await
            .unwrap(),
    );
    let vault = Vault::open_source(KeySource::Given(MasterKeys::generate().unwrap())).unwrap();
    let app = App::new(
        store.clone(),
        Brand::parse("svc").unwrap(),
        Pricing::default(),
        "http://127.0.0.1",
        Services {
            vault: Some(Arc::new(vault)),
            ..Services::default()
        },
    );
    app.admin()
        .create_account("edge@example.org")
        .await
        .unwrap();
    let email = Email::parse("edge@example.org").unwrap();
    let account = store.find_by_email(&email).await.unwrap().unwrap();
    Rig {
        _dir: dir,
        app,
        store,
        account,
    }
}

impl Rig {
    async fn call(&self, tool: &str, args: Value) -> Answer {
        let Value::Object(args) = args else {
            panic!("arguments are an object")
        };
        self.app
            .calls()
            .call(&self.account, tool, Some(args), CallIo::default())
            .await
            .unwrap()
    }

    /// `list_secrets`' rows as (name, hosts).
    async fn listed(&self) -> Vec<(String, Value)> {
        let Answer::Ran(outcome) = self.call("svc_read", json!({"list_secrets": true})).await
        else {
            panic!("list_secrets refused")
        };
        outcome.structured["list_secrets"]["secrets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                (
                    row["name"].as_str().unwrap().to_owned(),
                    row["hosts"].clone(),
                )
            })
            .collect()
    }

    async fn charged(&self) -> (i64, i64) {
        self.store
            .ledger_counts(&self.account.id, &MonthKey::now())
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn hosts_are_stored_listed_kept_and_cleared() {
    let rig = rig().await;
    let set = json!({"secret_set": {"name": "GH", "value": "ghp_value-1",
                     "hosts": ["API.github.com.", "*.openai.com", "api.github.com"]}});
    let Answer::Ran(outcome) = rig.call("svc_write", set).await else {
        panic!("refused")
    };
    assert!(!outcome.is_error, "{outcome:?}");
    assert_eq!(
        outcome.structured["secret_set"]["hosts"],
        json!(["api.github.com", "*.openai.com"]),
        "written as matched, without repeats"
    );
    let plain = json!({"secret_set": {"name": "PLAIN", "value": "v"}});
    rig.call("svc_write", plain).await;
    assert_eq!(
        rig.listed().await,
        [
            ("GH".to_owned(), json!(["api.github.com", "*.openai.com"])),
            ("PLAIN".to_owned(), json!([]))
        ]
    );
    let vault = rig.app.secrets().unwrap();
    let bound = vault.open_bound(&rig.account.id).await.unwrap();
    assert_eq!(bound.len(), 1);
    assert_eq!(
        (bound[0].name.as_str(), bound[0].value.as_str()),
        ("GH", "ghp_value-1")
    );

    // a new value without hosts keeps them (and the proxy gets the new value)
    rig.call(
        "svc_write",
        json!({"secret_set": {"name": "GH", "value": "ghp_value-2"}}),
    )
    .await;
    assert_eq!(
        rig.listed().await[0].1,
        json!(["api.github.com", "*.openai.com"])
    );
    let bound = vault.open_bound(&rig.account.id).await.unwrap();
    assert_eq!(
        bound[0].value, "ghp_value-2",
        "the cache forgot the old value"
    );
    // hosts: [] unbinds
    rig.call(
        "svc_write",
        json!({"secret_set": {"name": "GH", "value": "ghp_value-3", "hosts": []}}),
    )
    .await;
    assert_eq!(rig.listed().await[0].1, json!([]));
    assert!(vault.open_bound(&rig.account.id).await.unwrap().is_empty());
}

#[tokio::test]
async fn bad_hosts_are_refused_before_the_call_is_metered() {
    let rig = rig().await;
    let too_many: Vec<String> = (0..33).map(|i| format!("h{i}.example.org")).collect();
    let cases = [
        (json!(["*"]), "every host"),
        (json!(["http://api.github.com"]), "not a host pattern"),
        (json!(["a b"]), "not a host pattern"),
        (json!(["*x.org"]), "not a host pattern"),
        (json!([""]), "empty"),
        (json!(["a\r\nb.org"]), "not a host pattern"),
        (json!(["x".repeat(300)]), "longer than"),
        (json!(too_many), "at most 32"),
        (json!("api.github.com"), "must be an array"),
        (json!([7]), "must be a string"),
    ];
    for (hosts, expected) in cases {
        let args = json!({"secret_set": {"name": "K", "value": "v", "hosts": hosts}});
        let answer = rig.call("svc_write", args).await;
        let Answer::InvalidArguments(outcome) = answer else {
            panic!("{hosts}: expected a refusal before admission, got {answer:?}")
        };
        let text = format!("{:?}", outcome.content);
        assert!(text.contains(expected), "{hosts}: {text}");
        assert!(text.contains("hosts"), "{hosts}: names the field: {text}");
    }
    assert_eq!(rig.charged().await, (0, 0), "nothing was metered");
    assert!(rig.listed().await.is_empty(), "nothing was stored");
}

#[tokio::test]
async fn a_bound_value_that_cannot_go_in_a_header_is_refused() {
    let rig = rig().await;
    let args = json!({"secret_set": {"name": "K", "value": "a\r\nX-Evil: 1",
                      "hosts": ["api.example.org"]}});
    let Answer::Ran(outcome) = rig.call("svc_write", args).await else {
        panic!("refused before admission")
    };
    assert!(outcome.is_error);
    let text = format!("{:?}", outcome.content);
    assert!(
        text.contains("line breaks") && !text.contains("Evil"),
        "{text}"
    );
    assert!(rig.listed().await.is_empty());
}
