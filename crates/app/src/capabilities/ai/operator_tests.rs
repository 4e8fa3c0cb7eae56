//! Calls on the operator's key through the whole call use case (a real SQLite store, a vault)
//! against a stand-in `Models` that records what it was asked: capped, counted, refused before
//! anything is sent once the day's limit is reached, from tool calls and upcalls alike; a
//! caller's own key and a keyless endpoint are not limited.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use toolgate_domain::{Account, Brand, DayKey, Email, Pricing, SecretName};
use toolgate_sandbox::upcall::{Upcall, UpcallErrorCode, UpcallHandler, UpcallOrigin, UpcallValue};
use toolgate_store::Store;
use toolgate_store_sqlite::{Durability, SqliteStore};
use toolgate_vault::{KeySource, MasterKeys, Vault};

use toolgate_ports::ai::{
    ModelAnswer, ModelError, ModelRequest, Models, Part, ProviderInfo, Usage,
};

use super::OperatorKeyLimits;
use crate::calls::{Answer, CallIo};
use crate::{App, Services};

/// One request the stand-in received.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    prompt: String,
    max_tokens: Option<u32>,
    own_key: bool,
}

/// Answers as the prompt says: "no usage" reports none, "break" fails mid-answer, "reject" is
/// an error status, "hang" never answers; anything else uses 30 + 70 tokens.
#[derive(Default)]
struct StandIn {
    seen: Mutex<Vec<Seen>>,
    arrived: Notify,
}

impl StandIn {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

#[async_trait]
impl Models for StandIn {
    fn provider(&self, provider: &str) -> Option<ProviderInfo> {
        let info = |operator_key, keyless| ProviderInfo {
            key_secret: "OPENAI_API_KEY".to_owned(),
            operator_key,
            keyless,
        };
        match provider {
            "openai" => Some(info(true, false)),
            "local" => Some(info(false, true)),
            _ => None,
        }
    }

    fn providers(&self) -> Vec<String> {
        vec!["local".to_owned(), "openai".to_owned()]
    }

    async fn complete(
        &self,
        request: ModelRequest,
        _tokens: Option<mpsc::Sender<String>>,
    ) -> Result<ModelAnswer, ModelError> {
        let prompt = match request.messages.last().and_then(|m| m.parts.first()) {
            Some(Part::Text(text)) => text.clone(),
            _ => String::new(),
        };
        self.seen.lock().unwrap().push(Seen {
            prompt: prompt.clone(),
            max_tokens: request.max_tokens,
            own_key: request.api_key.is_some(),
        });
        self.arrived.notify_one();
        let usage = match prompt.as_str() {
            "break" => return Err(ModelError::Failed("the stream broke".to_owned())),
            "reject" => return Err(ModelError::Rejected("openai answered 400".to_owned())),
            "hang" => std::future::pending().await,
            "no usage" => Usage::default(),
            _ => Usage {
                input_tokens: 30,
                output_tokens: 70,
            },
        };
        Ok(ModelAnswer {
            text: "fine".to_owned(),
            model: "gpt-x".to_owned(),
            finish_reason: "stop".to_owned(),
            usage,
            attempts: 1,
        })
    }
}

struct Rig {
    _dir: tempfile::TempDir,
    app: App,
    store: Arc<dyn Store>,
    models: Arc<StandIn>,
}

/// An app whose operator lends its key for `max_tokens` 100 and `tokens_per_day` per account.
async fn rig(tokens_per_day: u64) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&dir.path().join("t.db"), Durability::Normal)
            .await
            .unwrap(),
    );
    let models = Arc::new(StandIn::default());
    let vault = Vault::open_source(KeySource::Given(MasterKeys::generate().unwrap())).unwrap();
    let app = App::new(
        store.clone(),
        Brand::parse("svc").unwrap(),
        Pricing::default(),
        "http://127.0.0.1",
        Services {
            vault: Some(Arc::new(vault)),
            models: Some(models.clone()),
            operator_keys: OperatorKeyLimits {
                max_tokens: 100,
                tokens_per_day,
            },
            ..Services::default()
        },
    );
    Rig {
        _dir: dir,
        app,
        store,
        models,
    }
}

impl Rig {
    async fn account(&self, email: &str) -> Account {
        self.app.admin().create_account(email).await.unwrap();
        let email = Email::parse(email).unwrap();
        self.store.find_by_email(&email).await.unwrap().unwrap()
    }

    /// One `svc_ai` call: its text and its `structuredContent.llm`, or its error text.
    async fn ai(&self, account: &Account, args: Value) -> Result<Value, String> {
        let Value::Object(args) = args else {
            panic!("arguments are an object")
        };
        let answer = self
            .app
            .calls()
            .call(account, "svc_ai", Some(args), CallIo::default())
            .await
            .unwrap();
        let Answer::Ran(outcome) = answer else {
            panic!("refused before admission: {answer:?}")
        };
        let text = match outcome.content.first() {
            Some(crate::ContentItem::Text(text)) => text.clone(),
            _ => String::new(),
        };
        if outcome.is_error {
            return Err(text);
        }
        Ok(outcome.structured["llm"].clone())
    }

    async fn tokens_today(&self, account: &Account) -> i64 {
        self.store
            .operator_tokens(&account.id, &DayKey::now())
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn the_operators_key_is_capped_counted_and_refused_before_sending_at_the_limit() {
    let rig = rig(250).await;
    let ann = rig.account("ann@example.org").await;
    let asked_much = rig
        .ai(
            &ann,
            json!({"model": "openai/gpt-x", "prompt": "hi", "max_tokens": 5000}),
        )
        .await
        .unwrap();
    assert_eq!(
        asked_much["operator_key"],
        json!({"max_tokens": 100, "capped": true, "tokens_today": 100, "tokens_per_day": 250})
    );
    let asked_none = rig
        .ai(&ann, json!({"model": "openai/gpt-x", "prompt": "hi"}))
        .await
        .unwrap();
    assert_eq!(asked_none["operator_key"]["capped"], false);
    assert_eq!(asked_none["operator_key"]["tokens_today"], 200);
    rig.ai(
        &ann,
        json!({"model": "openai/gpt-x", "prompt": "hi", "max_tokens": 40}),
    )
    .await
    .unwrap();
    let sent: Vec<Option<u32>> = rig.models.seen().iter().map(|s| s.max_tokens).collect();
    assert_eq!(
        sent,
        [Some(100), Some(100), Some(40)],
        "capped, the default, as asked"
    );
    // 300 of 250 used (the third call was admitted at 200): refused, and nothing is sent
    let refused = rig
        .ai(&ann, json!({"model": "openai/gpt-x", "prompt": "hi"}))
        .await
        .unwrap_err();
    assert!(refused.contains("daily limit"), "{refused}");
    assert!(refused.contains("300 of 250"), "{refused}");
    assert!(refused.contains("OPENAI_API_KEY"), "{refused}");
    assert_eq!(
        rig.models.seen().len(),
        3,
        "the refused call was never sent"
    );
    assert_eq!(rig.tokens_today(&ann).await, 300);
    // the limit is per account
    let bob = rig.account("bob@example.org").await;
    let bobs = rig
        .ai(&bob, json!({"model": "openai/gpt-x", "prompt": "hi"}))
        .await
        .unwrap();
    assert_eq!(bobs["operator_key"]["tokens_today"], 100);
}

#[tokio::test]
async fn a_callers_own_key_and_a_keyless_endpoint_are_not_limited() {
    let rig = rig(0).await;
    let ann = rig.account("own@example.org").await;
    let refused = rig
        .ai(&ann, json!({"model": "openai/gpt-x", "prompt": "hi"}))
        .await
        .unwrap_err();
    assert!(
        refused.contains("does not lend its model keys"),
        "{refused}"
    );
    assert!(refused.contains("OPENAI_API_KEY"), "{refused}");
    assert!(rig.models.seen().is_empty());
    let local = rig
        .ai(
            &ann,
            json!({"model": "local/tiny", "prompt": "hi", "max_tokens": 5000}),
        )
        .await
        .unwrap();
    assert!(local.get("operator_key").is_none(), "{local}");
    rig.app
        .secrets()
        .unwrap()
        .set(
            &ann.id,
            &SecretName::parse("OPENAI_API_KEY").unwrap(),
            "sk-own-0123456789abcdef",
            None,
        )
        .await
        .unwrap();
    let own = rig
        .ai(
            &ann,
            json!({"model": "openai/gpt-x", "prompt": "hi", "max_tokens": 5000}),
        )
        .await
        .unwrap();
    assert!(own.get("operator_key").is_none(), "{own}");
    let seen = rig.models.seen();
    assert_eq!(
        seen.iter()
            .map(|s| (s.max_tokens, s.own_key))
            .collect::<Vec<_>>(),
        [(Some(5000), false), (Some(5000), true)],
        "sent as asked"
    );
    assert_eq!(rig.tokens_today(&ann).await, 0, "nothing counted");
}

#[tokio::test]
async fn usage_not_reported_counts_max_tokens_and_an_estimate_of_the_input() {
    let rig = rig(100_000).await;
    let ann = rig.account("unknown@example.org").await;
    // a system prompt of 20 bytes and a prompt of 8: ceil(28 / 3) = 10 tokens of input
    let args = |prompt: &str| {
        json!({"model": "openai/gpt-x", "prompt": prompt, "max_tokens": 40,
               "system": "answer in one word!!"})
    };
    let answered = rig.ai(&ann, args("no usage")).await.unwrap();
    assert_eq!(answered["operator_key"]["tokens_today"], 50);
    let broke = rig.ai(&ann, args("break")).await.unwrap_err();
    assert!(broke.contains("the stream broke"), "{broke}");
    assert_eq!(rig.tokens_today(&ann).await, 50 + 49, "40 + ceil(25 / 3)");
    rig.ai(&ann, args("reject")).await.unwrap_err();
    assert_eq!(
        rig.tokens_today(&ann).await,
        99,
        "an error status generated nothing"
    );
}

#[tokio::test]
async fn a_call_abandoned_in_flight_counts_as_unknown() {
    let rig = rig(100_000).await;
    let ann = rig.account("dropped@example.org").await;
    let (app, account) = (rig.app.clone(), ann.clone());
    let call = tokio::spawn(async move {
        let args = json!({"model": "openai/gpt-x", "prompt": "hang", "max_tokens": 60});
        let Value::Object(args) = args else {
            unreachable!()
        };
        app.calls()
            .call(&account, "svc_ai", Some(args), CallIo::default())
            .await
    });
    rig.models.arrived.notified().await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    // counted by a task of its own: 60 + ceil(4 / 3)
    let mut counted = 0;
    for _ in 0..500 {
        counted = rig.tokens_today(&ann).await;
        if counted != 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(counted, 62);
}

#[tokio::test]
async fn a_cancelled_call_counts_as_unknown() {
    let rig = rig(100_000).await;
    let ann = rig.account("cancelled@example.org").await;
    let cancel = tokio_util::sync::CancellationToken::new();
    let io = CallIo {
        cancel: Some(&cancel),
        ..CallIo::default()
    };
    let args = json!({"model": "openai/gpt-x", "prompt": "hang", "max_tokens": 60});
    let Value::Object(args) = args else {
        unreachable!()
    };
    let call = rig.app.calls().call(&ann, "svc_ai", Some(args), io);
    let cancelling = async {
        rig.models.arrived.notified().await;
        cancel.cancel();
    };
    let (answer, ()) = tokio::join!(call, cancelling);
    let Ok(Answer::Ran(outcome)) = answer else {
        panic!("{answer:?}")
    };
    assert!(outcome.is_error);
    assert_eq!(rig.tokens_today(&ann).await, 62);
}

#[tokio::test]
async fn concurrent_calls_are_counted_exactly() {
    let rig = Arc::new(rig(1_000_000).await);
    let ann = rig.account("many@example.org").await;
    let calls = (0..20).map(|_| {
        let (rig, ann) = (rig.clone(), ann.clone());
        tokio::spawn(async move {
            rig.ai(&ann, json!({"model": "openai/gpt-x", "prompt": "hi"}))
                .await
                .unwrap()
        })
    });
    let mut totals: Vec<i64> = futures_totals(calls).await;
    totals.sort_unstable();
    let expected: Vec<i64> = (1..=20).map(|n| n * 100).collect();
    assert_eq!(totals, expected, "each call saw its own total");
    assert_eq!(rig.tokens_today(&ann).await, 2000);
}

async fn futures_totals(calls: impl Iterator<Item = tokio::task::JoinHandle<Value>>) -> Vec<i64> {
    let mut totals = Vec::new();
    for call in calls.collect::<Vec<_>>() {
        let llm = call.await.unwrap();
        totals.push(llm["operator_key"]["tokens_today"].as_i64().unwrap());
    }
    totals
}

#[tokio::test]
async fn an_upcall_from_code_is_capped_and_refused_alike() {
    let rig = rig(150).await;
    let ann = rig.account("code@example.org").await;
    let upcalls = crate::upcalls::SessionUpcalls::new(rig.app.calls.clone(), ann.clone());
    let origin = || UpcallOrigin {
        account: ann.id.to_string(),
        session_id: Some("s".to_owned()),
    };
    let invoke = || Upcall::InvokeLlm {
        model: "openai/gpt-x".to_owned(),
        prompt: "hi".to_owned(),
        system: None,
        max_tokens: Some(5000),
        temperature: None,
        response_format: None,
        api_key_secret: None,
        stream: false,
    };
    let UpcallValue::Llm(llm) = upcalls.answer(origin(), invoke()).await.unwrap() else {
        panic!("not a model's answer")
    };
    let loan = llm.operator_key.expect("the operator's key was lent");
    assert!(loan.capped, "{llm:?}");
    assert_eq!(rig.models.seen()[0].max_tokens, Some(100));
    upcalls.answer(origin(), invoke()).await.unwrap();
    let refused = upcalls.answer(origin(), invoke()).await.unwrap_err();
    assert_eq!(refused.code, UpcallErrorCode::Failed);
    assert!(refused.message.contains("daily limit"), "{refused}");
    assert_eq!(rig.models.seen().len(), 2);
}

/// The check waits for the call's turn (4 per account), so calls started together pass the
/// day's limit by at most the ones in flight when it is reached.
#[tokio::test]
async fn the_limit_is_passed_by_at_most_the_calls_in_flight() {
    let rig = Arc::new(rig(250).await);
    let ann = rig.account("burst@example.org").await;
    let calls: Vec<_> = (0..12)
        .map(|_| {
            let (rig, ann) = (rig.clone(), ann.clone());
            tokio::spawn(async move {
                rig.ai(&ann, json!({"model": "openai/gpt-x", "prompt": "hi"}))
                    .await
            })
        })
        .collect();
    let mut refused = 0;
    for call in calls {
        if let Err(message) = call.await.unwrap() {
            assert!(message.contains("daily limit"), "{message}");
            refused += 1;
        }
    }
    let sent = rig.models.seen().len();
    assert_eq!(sent + refused, 12);
    // 3 calls reach 250 (300); at most 3 more were in flight beside the one that reached it
    assert!(sent <= 6, "{sent} calls were sent");
    assert_eq!(
        rig.tokens_today(&ann).await,
        100 * i64::try_from(sent).unwrap()
    );
}
