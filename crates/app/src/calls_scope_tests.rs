//! A named key's scope over calls: the key's refused tool and fields are answered before
//! admission (nothing runs, nothing is charged), and code that calls back (an upcall) calls as
//! the same key, so a key without the read tool cannot reach it through the write tool.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolgate_domain::{
    Account, Brand, Email, KeyId, KeyScope, MonthKey, NamedKey, Pricing, SpendCaps, Via,
};
use toolgate_store::Store;
use toolgate_store_sqlite::{Durability, SqliteStore};

use super::{Answer, CallIo};
use crate::App;
use crate::capability::{
    CallContext, Capability, ContentItem, Failure, Field, FieldKind, JsonObject, Output, ToolKind,
};

/// `key` on the tool of `kind`: `upcall` makes a call of the read tool as its caller and says
/// what came back; anything else says `ran`.
struct Caller {
    key: &'static str,
    kind: ToolKind,
}

#[async_trait]
impl Capability for Caller {
    fn key(&self) -> &'static str {
        self.key
    }
    fn tool(&self) -> ToolKind {
        self.kind
    }
    fn summary(&self) -> &'static str {
        "calls back, or runs"
    }
    fn fields(&self) -> Vec<Field> {
        vec![Field {
            name: self.key,
            kind: FieldKind::Boolean,
            description: "run it",
        }]
    }
    fn output_schema(&self) -> Value {
        json!({"type": "string"})
    }
    fn wants(&self, args: &JsonObject) -> bool {
        args.contains_key(self.key)
    }
    async fn run(&self, ctx: &CallContext<'_>, _args: &JsonObject) -> Result<Output, Failure> {
        let said = if self.key == "upcall" {
            let args = json!({"look": true}).as_object().cloned().unwrap();
            let answer = Arc::clone(ctx.calls)
                .make_call(ctx.account, ToolKind::Read, args, CallIo::default())
                .await;
            match answer {
                Ok(Answer::NotAllowed(_)) => "refused".to_owned(),
                other => format!("reached: {other:?}"),
            }
        } else {
            "ran".to_owned()
        };
        Ok(Output {
            content: vec![ContentItem::Text(said.clone())],
            structured: json!(said),
            ..Output::default()
        })
    }
}

async fn app_and_account(dir: &tempfile::TempDir) -> (App, Arc<dyn Store>, Account) {
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&dir.path().join("t.db"), Durability::Full)
            .await
            .unwrap(),
    );
    let capabilities: Vec<Arc<dyn Capability>> = vec![
        Arc::new(Caller {
            key: "upcall",
            kind: ToolKind::Write,
        }),
        Arc::new(Caller {
            key: "look",
            kind: ToolKind::Read,
        }),
    ];
    let brand = Brand::parse("svc").unwrap();
    let app = App::with_capabilities(
        store.clone(),
        brand,
        Pricing::default(),
        "http://127.0.0.1",
        capabilities,
    );
    app.admin()
        .create_account("scope@example.org")
        .await
        .unwrap();
    let account = store
        .find_by_email(&Email::parse("scope@example.org").unwrap())
        .await
        .unwrap()
        .unwrap();
    (app, store, account)
}

fn with_scope(account: &Account, tools: &[&str], fields: &[&str]) -> Account {
    Account {
        via: Via::NamedKey(NamedKey {
            id: KeyId::generate(),
            name: "agent".to_owned(),
            scope: KeyScope {
                tools: tools.iter().map(|t| (*t).to_owned()).collect(),
                fields: fields.iter().map(|f| (*f).to_owned()).collect(),
            },
            caps: SpendCaps::default(),
        }),
        ..account.clone()
    }
}

fn text(answer: &Answer) -> String {
    let outcome = match answer {
        Answer::Ran(o) | Answer::InvalidArguments(o) | Answer::Busy(o) | Answer::NotAllowed(o) => o,
    };
    match &outcome.content[..] {
        [ContentItem::Text(text)] => text.clone(),
        other => panic!("unexpected content {other:?}"),
    }
}

#[tokio::test]
async fn a_key_without_the_read_tool_cannot_reach_it_through_an_upcall() {
    let dir = tempfile::tempdir().unwrap();
    let (app, store, account) = app_and_account(&dir).await;
    let writer = with_scope(&account, &["write"], &[]);
    let args = json!({"upcall": true}).as_object().cloned();
    let answer = app
        .calls()
        .call(&writer, "svc_write", args.clone(), CallIo::default())
        .await
        .unwrap();
    assert_eq!(text(&answer), "refused", "{answer:?}");
    let full = app
        .calls()
        .call(&account, "svc_write", args, CallIo::default())
        .await
        .unwrap();
    assert!(text(&full).starts_with("reached: Ok(Ran"), "{full:?}");
    // the outer call and the first key's two calls were charged; the refused upcall was not
    let (free, paid) = store
        .ledger_counts(&account.id, &MonthKey::now())
        .await
        .unwrap();
    assert_eq!((free, paid), (3, 0));
}

#[tokio::test]
async fn a_refused_tool_or_field_runs_nothing_and_charges_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (app, store, account) = app_and_account(&dir).await;
    let reader = with_scope(&account, &["read"], &[]);
    let refused = app
        .calls()
        .call(
            &reader,
            "svc_write",
            json!({"upcall": true}).as_object().cloned(),
            CallIo::default(),
        )
        .await
        .unwrap();
    let Answer::NotAllowed(outcome) = &refused else {
        panic!("{refused:?}")
    };
    assert!(outcome.is_error);
    assert!(text(&refused).contains("`svc_read`"), "{refused:?}");
    let narrow = with_scope(&account, &[], &["other"]);
    let refused = app
        .calls()
        .call(
            &narrow,
            "svc_read",
            json!({"look": true}).as_object().cloned(),
            CallIo::default(),
        )
        .await
        .unwrap();
    assert!(matches!(refused, Answer::NotAllowed(_)), "{refused:?}");
    assert!(text(&refused).contains("`look`"), "{refused:?}");
    let allowed = with_scope(&account, &["read"], &["look"]);
    let ran = app
        .calls()
        .call(
            &allowed,
            "svc_read",
            json!({"look": true}).as_object().cloned(),
            CallIo::default(),
        )
        .await
        .unwrap();
    assert_eq!(text(&ran), "ran");
    assert_eq!(
        store
            .ledger_counts(&account.id, &MonthKey::now())
            .await
            .unwrap(),
        (1, 0),
        "only the allowed call was charged"
    );
    assert!(app.calls().may_call(&reader, "svc_read"));
    assert!(!app.calls().may_call(&reader, "svc_write"));
    assert!(!app.calls().may_call_all(&reader));
    assert!(
        app.calls().may_call_all(&narrow),
        "fields do not narrow the list"
    );
}
