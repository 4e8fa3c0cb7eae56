#![allow(clippy::unwrap_used)]
use std::sync::Arc;

use toolgate_domain::{Brand, Email, LlmAnswer, Pricing, SearchResult, Usage};
use toolgate_store::Store;
use toolgate_store_sqlite::{Durability, SqliteStore};

use super::*;
use crate::App;
use crate::capability::{Capability, Failure, Field, FieldKind, Output};

/// An app over a real SQLite store with `free` calls a month, and one account.
async fn rig(free: i64) -> (tempfile::TempDir, App, Account) {
    rigged(free, None).await
}

/// The same, with only `capabilities` when given (else the built-in ones).
async fn rigged(
    free: i64,
    capabilities: Option<Vec<Arc<dyn Capability>>>,
) -> (tempfile::TempDir, App, Account) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&dir.path().join("t.db"), Durability::Full)
            .await
            .unwrap(),
    );
    let pricing = Pricing {
        free_monthly_calls: free,
        ..Pricing::default()
    };
    let brand = Brand::parse("svc").unwrap();
    let app = match capabilities {
        Some(capabilities) => App::with_capabilities(
            store.clone(),
            brand,
            pricing,
            "http://127.0.0.1",
            capabilities,
        ),
        None => App::new(
            store.clone(),
            brand,
            pricing,
            "http://127.0.0.1",
            crate::Services::default(),
        ),
    };
    app.admin()
        .create_account("code@example.org")
        .await
        .unwrap();
    let email = Email::parse("code@example.org").unwrap();
    let account = store.find_by_email(&email).await.unwrap().unwrap();
    (dir, app, account)
}

fn origin(account: &Account) -> UpcallOrigin {
    UpcallOrigin {
        account: account.id.to_string(),
        session_id: Some("s".into()),
    }
}

async fn free_left(app: &App, account: &Account) -> i64 {
    app.meter()
        .status(account, None)
        .await
        .unwrap()
        .free_remaining_this_month
}

/// An upcall is one metered call of the session's account, answered with the typed record
/// (which already counts it); once the allowance is used up and the wallet is empty it is
/// refused with the same message a tool call gets, and runs nothing.
#[tokio::test]
async fn an_upcall_is_one_metered_call_refused_like_any_other() {
    let (_dir, app, account) = rig(2).await;
    let upcalls = SessionUpcalls::new(app.calls.clone(), account.clone());
    let answer = upcalls
        .answer(origin(&account), Upcall::Billing {})
        .await
        .unwrap();
    let UpcallValue::Billing(record) = answer else {
        panic!("not a billing record: {answer:?}")
    };
    assert_eq!(record.free_remaining_this_month, 1);
    assert_eq!(free_left(&app, &account).await, 1);
    upcalls
        .answer(origin(&account), Upcall::Billing {})
        .await
        .unwrap();
    let refused = upcalls
        .answer(origin(&account), Upcall::Billing {})
        .await
        .unwrap_err();
    assert_eq!(refused.code, UpcallErrorCode::Refused);
    assert_eq!(refused.message, app.meter().refusal_message());
    assert_eq!(free_left(&app, &account).await, 0);
    // a funded wallet pays for the next one, as it would for a tool call
    app.admin()
        .credit_wallet("code@example.org", "1.00", None)
        .await
        .unwrap();
    let UpcallValue::Billing(paid) = upcalls
        .answer(origin(&account), Upcall::Billing {})
        .await
        .unwrap()
    else {
        panic!("not a billing record")
    };
    assert_eq!(paid.wallet_balance_usd, "0.99");
}

/// An upcall that says it comes from another account's session is refused and charges no
/// one: identity is the sandbox's to attach, and it is always the run's own account.
#[tokio::test]
async fn an_upcall_from_another_accounts_session_charges_no_one() {
    let (_dir, app, account) = rig(5).await;
    let upcalls = SessionUpcalls::new(app.calls.clone(), account.clone());
    let stranger = UpcallOrigin {
        account: "some-other-account".into(),
        session_id: None,
    };
    let refused = upcalls
        .answer(stranger, Upcall::Billing {})
        .await
        .unwrap_err();
    assert_eq!(refused.code, UpcallErrorCode::Unavailable);
    assert_eq!(free_left(&app, &account).await, 5);
}

/// A capability of the AI tool that takes the fields of a model call and a search, answers
/// with `typed`, and renders under a key and in a shape of its own: nothing of it is named as
/// the built-in `llm` and `search` render.
struct Oddly {
    typed: TypedOutput,
}

#[async_trait]
impl Capability for Oddly {
    fn key(&self) -> &'static str {
        "not_the_usual_key"
    }
    fn tool(&self) -> ToolKind {
        ToolKind::Ai
    }
    fn summary(&self) -> &'static str {
        "answers oddly"
    }
    fn fields(&self) -> Vec<Field> {
        ["model", "prompt", "search"]
            .into_iter()
            .map(|name| Field {
                name,
                kind: FieldKind::String { max_len: 64 },
                description: "a text",
            })
            .chain([Field {
                name: "max_results",
                kind: FieldKind::Integer { min: 1, max: 20 },
                description: "a number",
            }])
            .collect()
    }
    fn output_schema(&self) -> Value {
        json!({"type": "array"})
    }
    fn wants(&self, _args: &JsonObject) -> bool {
        true
    }
    async fn run(
        &self,
        _ctx: &crate::capability::CallContext<'_>,
        _args: &JsonObject,
    ) -> Result<Output, Failure> {
        Ok(Output {
            content: vec![ContentItem::Text("rendered some other way".into())],
            structured: json!(["no", "text", "here"]),
            typed: Some(self.typed.clone()),
            ..Output::default()
        })
    }
}

/// An upcall's answer is the typed result the capability returned, whatever the tool's
/// rendering calls its parts: the Python API does not depend on the MCP output's key names.
#[tokio::test]
async fn an_upcalls_answer_is_the_capabilitys_typed_result_not_its_rendering() {
    let answer = LlmAnswer {
        text: "typed text".into(),
        model: "m-1".into(),
        provider: "p".into(),
        finish_reason: "stop".into(),
        usage: Usage {
            input_tokens: 3,
            output_tokens: 4,
        },
        latency_ms: 1.5,
        attempts: 2,
        operator_key: None,
    };
    let odd: Vec<Arc<dyn Capability>> = vec![Arc::new(Oddly {
        typed: TypedOutput::Llm(answer.clone()),
    })];
    let (_dir, app, account) = rigged(5, Some(odd)).await;
    let upcalls = SessionUpcalls::new(app.calls.clone(), account.clone());
    let invoke = Upcall::InvokeLlm {
        model: "p/m".into(),
        prompt: "hi".into(),
        system: None,
        max_tokens: None,
        temperature: None,
        response_format: None,
        api_key_secret: None,
        stream: false,
    };
    let value = upcalls.answer(origin(&account), invoke).await.unwrap();
    assert_eq!(value, UpcallValue::Llm(answer));
    // asked for another kind than the capability answers with: no guess from the rendering
    let refused = upcalls
        .answer(
            origin(&account),
            Upcall::WebSearch {
                query: "q".into(),
                max_results: None,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(refused.code, UpcallErrorCode::Unavailable);

    let results = vec![SearchResult {
        title: "T".into(),
        url: "https://example.org/".into(),
        snippet: "S".into(),
        date: None,
    }];
    let odd: Vec<Arc<dyn Capability>> = vec![Arc::new(Oddly {
        typed: TypedOutput::Search(results.clone()),
    })];
    let (_dir, app, account) = rigged(5, Some(odd)).await;
    let upcalls = SessionUpcalls::new(app.calls.clone(), account.clone());
    let search = Upcall::WebSearch {
        query: "q".into(),
        max_results: Some(1),
    };
    let value = upcalls.answer(origin(&account), search).await.unwrap();
    assert_eq!(value, UpcallValue::WebSearch(results));
}
