//! Upcalls from code in a session, answered by the same call use case as a tool call: each is
//! one call of the account that owns the session, admitted and metered by the same rules
//! (refused when the allowance is used up and the wallet cannot pay), never more than the
//! account could do through the tools. An upcall is mapped onto a tool call that cannot reach a
//! session (no upcall runs code), so a session can never wait on itself.

use std::sync::Weak;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolgate_domain::{Account, BillingStatus};
use toolgate_sandbox::upcall::{
    Upcall, UpcallError, UpcallErrorCode, UpcallHandler, UpcallOrigin, UpcallValue,
};

use crate::calls::{Answer, CallError, CallIo, ToolCalls};
use crate::capability::{ContentItem, JsonObject, ToolKind};

/// Answers the upcalls of one run for the account whose call started it.
pub(crate) struct SessionUpcalls {
    calls: Weak<ToolCalls>,
    account: Account,
}

impl SessionUpcalls {
    /// Upcalls of `account`'s run, answered through `calls`.
    pub(crate) fn new(calls: Weak<ToolCalls>, account: Account) -> Self {
        Self { calls, account }
    }
}

/// Passes a streamed answer's pieces (the call's progress messages) on to the session.
struct Pieces(tokio::sync::mpsc::Sender<String>);

impl crate::capability::ProgressSink for Pieces {
    fn report(&self, _progress: f64, message: &str) {
        // never waited for: a session that does not keep up loses pieces, not the answer
        let _ = self.0.try_send(message.to_owned());
    }
}

#[async_trait]
impl UpcallHandler for SessionUpcalls {
    async fn answer(
        &self,
        origin: UpcallOrigin,
        upcall: Upcall,
    ) -> Result<UpcallValue, UpcallError> {
        self.answered(origin, upcall, None).await
    }

    async fn answer_streaming(
        &self,
        origin: UpcallOrigin,
        upcall: Upcall,
        pieces: tokio::sync::mpsc::Sender<String>,
    ) -> Result<UpcallValue, UpcallError> {
        self.answered(origin, upcall, Some(Pieces(pieces))).await
    }
}

impl SessionUpcalls {
    async fn answered(
        &self,
        origin: UpcallOrigin,
        upcall: Upcall,
        pieces: Option<Pieces>,
    ) -> Result<UpcallValue, UpcallError> {
        // The sandbox attaches the session's account; it is the run's. Anything else is a bug
        // that must not charge or serve the wrong account.
        if origin.account != self.account.id.to_string() {
            tracing::error!("an upcall came from another account's session; refused");
            return Err(unavailable());
        }
        let calls = self.calls.upgrade().ok_or_else(unavailable)?;
        let (kind, args) = tool_call(&upcall);
        let tool = calls.tool_name(kind).ok_or_else(unavailable)?;
        tracing::debug!(?upcall, tool, "upcall from a session");
        let io = CallIo {
            progress: pieces
                .as_ref()
                .map(|p| p as &dyn crate::capability::ProgressSink),
            cancel: None,
        };
        let answer = calls.call(&self.account, tool, Some(args), io).await;
        let outcome = match answer {
            Ok(Answer::Ran(outcome)) if !outcome.is_error => outcome,
            Ok(Answer::Ran(outcome)) => {
                return Err(UpcallError::new(
                    UpcallErrorCode::Failed,
                    text(&outcome.content),
                ));
            }
            Ok(Answer::InvalidArguments(outcome)) => {
                return Err(UpcallError::new(
                    UpcallErrorCode::BadRequest,
                    text(&outcome.content),
                ));
            }
            Ok(Answer::Busy(outcome)) => {
                return Err(UpcallError::new(
                    UpcallErrorCode::Busy,
                    text(&outcome.content),
                ));
            }
            Err(CallError::Refused(message)) => {
                return Err(UpcallError::new(UpcallErrorCode::Refused, message));
            }
            Err(CallError::NotRecorded(_) | CallError::UnknownTool) => return Err(unavailable()),
        };
        value(&upcall, outcome.structured, &outcome.content)
    }
}

/// The tool call an upcall is: the tool, and its arguments.
fn tool_call(upcall: &Upcall) -> (ToolKind, JsonObject) {
    let (kind, args) = match upcall {
        Upcall::Billing {} => (ToolKind::Read, json!({"billing": true})),
        Upcall::InvokeLlm {
            model,
            prompt,
            system,
            max_tokens,
            temperature,
            response_format,
            api_key_secret,
            stream: _,
        } => {
            let mut args = json!({"model": model, "prompt": prompt});
            let optional = [
                ("system", system.as_ref().map(|s| json!(s))),
                ("max_tokens", max_tokens.map(|n| json!(n))),
                ("temperature", temperature.map(|t| json!(t))),
                ("response_format", response_format.clone()),
                ("api_key_secret", api_key_secret.as_ref().map(|s| json!(s))),
            ];
            for (name, value) in optional {
                if let Some(value) = value {
                    args[name] = value;
                }
            }
            (ToolKind::Ai, args)
        }
        Upcall::WebSearch { query, max_results } => {
            let mut args = json!({"search": query});
            if let Some(n) = max_results {
                args["max_results"] = json!(n);
            }
            (ToolKind::Ai, args)
        }
    };
    let Value::Object(args) = args else {
        return (kind, JsonObject::new());
    };
    (kind, args)
}

/// The typed answer, from the call's structured content.
fn value(
    upcall: &Upcall,
    mut structured: JsonObject,
    content: &[ContentItem],
) -> Result<UpcallValue, UpcallError> {
    match upcall {
        Upcall::Billing {} => structured
            .remove("billing")
            .and_then(|record| serde_json::from_value::<BillingStatus>(record).ok())
            .map(UpcallValue::Billing)
            .ok_or_else(unavailable),
        Upcall::InvokeLlm { .. } => {
            let mut llm = structured.remove("llm").ok_or_else(unavailable)?;
            llm["text"] = json!(text(content));
            Ok(UpcallValue::Llm(llm))
        }
        Upcall::WebSearch { .. } => structured
            .remove("search")
            .and_then(|mut search| search.get_mut("results").map(Value::take))
            .and_then(|results| match results {
                Value::Array(results) => Some(UpcallValue::WebSearch(results)),
                _ => None,
            })
            .ok_or_else(unavailable),
    }
}

fn unavailable() -> UpcallError {
    UpcallError::new(
        UpcallErrorCode::Unavailable,
        "the service could not answer this request right now, and nothing was charged for it; \
         please retry",
    )
}

/// The text of a tool's content, as an upcall's error message.
fn text(content: &[ContentItem]) -> String {
    content
        .iter()
        .filter_map(|item| match item {
            ContentItem::Text(text) => Some(text.as_str()),
            ContentItem::Image { .. } => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use toolgate_domain::{Brand, Email, Pricing};
    use toolgate_store::Store;
    use toolgate_store_sqlite::{Durability, SqliteStore};

    use super::*;
    use crate::App;

    /// An app over a real SQLite store with `free` calls a month, and one account.
    async fn rig(free: i64) -> (tempfile::TempDir, App, Account) {
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
        let app = App::new(
            store.clone(),
            brand,
            pricing,
            "http://127.0.0.1",
            crate::Services::default(),
        );
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
            .status(account)
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
        let upcalls = SessionUpcalls::new(Arc::downgrade(&app.calls), account.clone());
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
        let upcalls = SessionUpcalls::new(Arc::downgrade(&app.calls), account.clone());
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
}
