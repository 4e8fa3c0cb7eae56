//! Upcalls from code in a session, answered by the same call use case as a tool call: each is
//! one call of the account that owns the session, admitted and metered by the same rules
//! (refused when the allowance is used up and the wallet cannot pay), never more than the
//! account could do through the tools. An upcall is mapped onto a tool call that cannot reach a
//! session (no upcall runs code), so a session can never wait on itself.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolgate_domain::Account;
use toolgate_sandbox::upcall::{
    Upcall, UpcallError, UpcallErrorCode, UpcallHandler, UpcallOrigin, UpcallValue,
};

use crate::capability::{
    Answer, CallContext, CallError, CallIo, ContentItem, JsonObject, MakeCall, ToolKind,
    TypedOutput,
};

/// What answers upcalls from code that `ctx`'s call runs: calls of the caller's account, made
/// through the call's call-back.
pub(crate) fn upcall_handler(ctx: &CallContext<'_>) -> Arc<dyn UpcallHandler> {
    Arc::new(SessionUpcalls::new(
        Arc::clone(ctx.calls),
        ctx.account.clone(),
    ))
}

/// Answers the upcalls of one run for the account whose call started it.
pub(crate) struct SessionUpcalls {
    calls: Arc<dyn MakeCall>,
    account: Account,
}

impl SessionUpcalls {
    /// Upcalls of `account`'s run, answered through `calls`.
    pub(crate) fn new(calls: Arc<dyn MakeCall>, account: Account) -> Self {
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
        let (kind, args) = tool_call(&upcall);
        tracing::debug!(?upcall, ?kind, "upcall from a session");
        let io = CallIo {
            progress: pieces
                .as_ref()
                .map(|p| p as &dyn crate::capability::ProgressSink),
            cancel: None,
            ..CallIo::default()
        };
        let answer = Arc::clone(&self.calls)
            .make_call(&self.account, kind, args, io)
            .await;
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
        value(&upcall, outcome.typed)
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
                (
                    "response_format",
                    response_format
                        .as_ref()
                        .and_then(|format| serde_json::to_value(format).ok()),
                ),
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

/// The typed answer: the result the capability returned, as it returned it (redacted where
/// the call finished), never read back out of the tool's rendering.
fn value(upcall: &Upcall, typed: Vec<TypedOutput>) -> Result<UpcallValue, UpcallError> {
    typed
        .into_iter()
        .find_map(|typed| match (upcall, typed) {
            (Upcall::Billing {}, TypedOutput::Billing(status)) => {
                Some(UpcallValue::Billing(status))
            }
            (Upcall::InvokeLlm { .. }, TypedOutput::Llm(answer)) => Some(UpcallValue::Llm(answer)),
            (Upcall::WebSearch { .. }, TypedOutput::Search(results)) => {
                Some(UpcallValue::WebSearch(results))
            }
            _ => None,
        })
        .ok_or_else(unavailable)
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
            ContentItem::Image { .. } | ContentItem::ResourceLink(_) => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
#[path = "upcalls_tests.rs"]
mod tests;
