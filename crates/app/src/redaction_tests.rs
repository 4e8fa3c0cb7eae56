//! Redaction where a call finishes: structured output of any depth is walked without recursion;
//! a capability that opened a secret and shows it is redacted by the call, not by itself.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use toolgate_domain::{Account, Brand, Email, Pricing, SearchResult, SecretName};
use toolgate_store::Store;
use toolgate_store_sqlite::{Durability, SqliteStore};
use toolgate_vault::Redactor;

use super::redact_value;
use crate::App;
use crate::capability::{
    Answer, CallContext, CallIo, Capability, ContentItem, Failure, Field, FieldKind, JsonObject,
    Output, ProgressSink, ToolKind, TypedOutput,
};

/// `[` nested `depth` deep around `inner`, built without recursion.
fn nested(depth: usize, inner: Value) -> Value {
    (0..depth).fold(inner, |value, _| Value::Array(vec![value]))
}

/// Takes `value` apart without recursion (serde_json's own drop recurses).
fn dismantle(value: Value) {
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Value::Array(items) => pending.extend(items),
            Value::Object(fields) => pending.extend(fields.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

#[test]
fn a_value_nested_a_million_deep_is_redacted_without_recursion() {
    let name = SecretName::parse("TOKEN").unwrap();
    let redactor = Redactor::new([(&name, "hunter2-secret".as_bytes())]);
    // built by hand: json! would copy the value through serde, recursively
    let mut fields = serde_json::Map::new();
    fields.insert(
        "deep".into(),
        nested(1_000_000, json!("the hunter2-secret")),
    );
    let mut value = Value::Object(fields);
    redact_value(&mut value, &redactor);
    let mut bottom = &value["deep"];
    while let Value::Array(items) = bottom {
        bottom = &items[0];
    }
    assert_eq!(bottom, "the [REDACTED:TOKEN]");
    dismantle(value);
}

/// A capability that opens a secret (the value it is given, registered with the call as
/// `TOKEN`, as a capability registers what it opens from the vault) and shows it everywhere a
/// call shows something: its text, its structured content, its typed result, its progress, and
/// (with `leak_fail`) its failure. It redacts nothing itself.
struct Leaky {
    key: &'static str,
    verbatim: bool,
}

#[async_trait::async_trait]
impl Capability for Leaky {
    fn key(&self) -> &'static str {
        self.key
    }
    fn tool(&self) -> ToolKind {
        ToolKind::Read
    }
    fn summary(&self) -> &'static str {
        "shows what it opened"
    }
    fn fields(&self) -> Vec<Field> {
        vec![Field {
            name: self.key,
            kind: FieldKind::String { max_len: 64 },
            description: "the value to open",
        }]
    }
    fn output_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn wants(&self, args: &JsonObject) -> bool {
        args.contains_key(self.key)
    }
    async fn run(&self, ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure> {
        let value = args[self.key].as_str().unwrap().to_owned();
        let name = SecretName::parse("TOKEN").unwrap();
        ctx.secrets.add([(&name, value.as_bytes())]);
        if let Some(progress) = ctx.progress {
            progress.report(1.0, &format!("working with {value}"));
        }
        if self.key == "leak_fail" {
            return Err(Failure::new(format!("the server said: bad token {value}")));
        }
        Ok(Output {
            content: vec![ContentItem::Text(format!("the key is {value}"))],
            structured: json!({"said": value, "deep": [{"more": format!("x{value}x")}]}),
            typed: Some(TypedOutput::Search(vec![SearchResult {
                title: value.clone(),
                url: format!("https://example.org/?k={value}"),
                snippet: String::new(),
                date: Some(value.clone()),
            }])),
            verbatim: self.verbatim,
            ..Output::default()
        })
    }
}

/// Collects progress messages.
#[derive(Default)]
struct Seen(std::sync::Mutex<Vec<String>>);

impl ProgressSink for Seen {
    fn report(&self, _progress: f64, message: &str) {
        self.0.lock().unwrap().push(message.to_owned());
    }
}

/// An app over a real SQLite store with the leaky capabilities, and one account.
async fn leaky_app() -> (tempfile::TempDir, App, Account) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&dir.path().join("t.db"), Durability::Full)
            .await
            .unwrap(),
    );
    let capabilities: Vec<Arc<dyn Capability>> = vec![
        Arc::new(Leaky {
            key: "leak",
            verbatim: false,
        }),
        Arc::new(Leaky {
            key: "leak_fail",
            verbatim: false,
        }),
        Arc::new(Leaky {
            key: "leak_bytes",
            verbatim: true,
        }),
    ];
    let app = App::with_capabilities(
        store.clone(),
        Brand::parse("svc").unwrap(),
        Pricing::default(),
        "http://127.0.0.1",
        capabilities,
    );
    app.admin().create_account("r@example.org").await.unwrap();
    let email = Email::parse("r@example.org").unwrap();
    let account = store.find_by_email(&email).await.unwrap().unwrap();
    (dir, app, account)
}

/// A capability that opened a secret and puts it into its output is redacted by the call, in
/// one place: its text, structured content, typed result (what an upcall answers with),
/// progress and failure; bytes it marks verbatim are left as they are.
#[tokio::test]
async fn what_a_capability_opened_is_redacted_where_the_call_finishes() {
    let (_dir, app, account) = leaky_app().await;
    let secret = "hunter2-secret";
    let seen = Seen::default();
    let io = CallIo {
        progress: Some(&seen),
        ..CallIo::default()
    };
    let args = json!({"leak": secret, "leak_fail": secret});
    let Answer::Ran(outcome) = app
        .calls()
        .call(&account, "svc_read", args.as_object().cloned(), io)
        .await
        .unwrap()
    else {
        panic!("the call did not run")
    };
    let everything = format!(
        "{:?} {} {:?} {:?}",
        outcome.content,
        Value::Object(outcome.structured.clone()),
        outcome.typed,
        seen.0.lock().unwrap()
    );
    assert!(!everything.contains(secret), "{everything}");
    assert_eq!(
        outcome.content[0],
        ContentItem::Text("the key is [REDACTED:TOKEN]".into())
    );
    assert_eq!(
        outcome.structured["leak"]["deep"][0]["more"],
        "x[REDACTED:TOKEN]x"
    );
    assert_eq!(
        outcome.structured["leak_fail"]["error"],
        "the server said: bad token [REDACTED:TOKEN]"
    );
    let [TypedOutput::Search(results)] = outcome.typed.as_slice() else {
        panic!("no typed result: {:?}", outcome.typed)
    };
    assert_eq!(results[0].title, "[REDACTED:TOKEN]");
    assert_eq!(results[0].date.as_deref(), Some("[REDACTED:TOKEN]"));
    assert_eq!(
        seen.0.lock().unwrap().as_slice(),
        [
            "working with [REDACTED:TOKEN]",
            "working with [REDACTED:TOKEN]"
        ]
    );

    // verbatim bytes (a binary file read back) come back as they are, as documented
    let args = json!({"leak_bytes": secret});
    let Answer::Ran(bytes) = app
        .calls()
        .call(
            &account,
            "svc_read",
            args.as_object().cloned(),
            CallIo::default(),
        )
        .await
        .unwrap()
    else {
        panic!("the call did not run")
    };
    assert_eq!(bytes.structured["leak_bytes"]["said"], secret);
}
