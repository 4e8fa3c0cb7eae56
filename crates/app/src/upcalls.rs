//! Upcalls from code in a session, answered by the same call use case as a tool call: each is
//! one call of the account that owns the session, admitted and metered by the same rules
//! (refused when the allowance is used up and the wallet cannot pay), never more than the
//! account could do through the tools. An upcall is mapped onto a tool call that cannot reach a
//! session (no upcall runs code, none names a session, and `toolgate.sql` refuses a `sqlite:`
//! file), so a session can never wait on itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolgate_domain::Account;
use toolgate_ports::database::Table;
use toolgate_ports::fetch::{FetchedPage, PageContent};
use toolgate_sandbox::upcall::{
    HttpAnswer, SqlAnswer, SqlColumn, SqlValue, Upcall, UpcallError, UpcallErrorCode,
    UpcallHandler, UpcallOrigin, UpcallValue,
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
        let (kind, args) = tool_call(&upcall)?;
        // its kind only: a header, a body or a parameter may hold a credential the code wrote
        tracing::debug!(upcall = upcall.kind(), ?kind, "upcall from a session");
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
            Ok(Answer::Ran(outcome)) => outcome,
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
            Ok(Answer::NotAllowed(outcome)) => {
                return Err(UpcallError::new(
                    UpcallErrorCode::Refused,
                    text(&outcome.content),
                ));
            }
            Err(CallError::Refused(message)) => {
                return Err(UpcallError::new(UpcallErrorCode::Refused, message));
            }
            Err(CallError::NotRecorded(_) | CallError::UnknownTool) => return Err(unavailable()),
        };
        let failed = outcome.is_error.then(|| text(&outcome.content));
        // a page that answered 404 is still the page: its status says how it went, as in a
        // browser; a capability that failed has no typed result
        match (value(&upcall, outcome.typed), failed) {
            (Some(value), _) => Ok(value),
            (None, Some(message)) => Err(UpcallError::new(UpcallErrorCode::Failed, message)),
            (None, None) => Err(unavailable()),
        }
    }
}

/// The tool call an upcall is: the tool, and its arguments; refused (before any charge) when
/// no tool call may be made of it.
fn tool_call(upcall: &Upcall) -> Result<(ToolKind, JsonObject), UpcallError> {
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
        Upcall::Fetch {
            url,
            headers,
            max_bytes,
        } => (ToolKind::Read, get(url, headers, *max_bytes)),
        Upcall::Http {
            method,
            url,
            headers,
            body,
            max_bytes,
        } => http_call(method, url, headers, body.as_deref(), *max_bytes)?,
        Upcall::Sql {
            database,
            query,
            params,
            write,
            max_rows,
        } => sql_call(database, (query, params), *write, *max_rows)?,
        Upcall::Secrets {} => (ToolKind::Read, json!({"list_secrets": true})),
    };
    let Value::Object(args) = args else {
        return Ok((kind, JsonObject::new()));
    };
    Ok((kind, args))
}

/// The read tool's `url` (a GET).
fn get(url: &str, headers: &BTreeMap<String, String>, max_bytes: Option<u64>) -> Value {
    let mut args = json!({"url": url});
    if !headers.is_empty() {
        args["headers"] = json!(headers);
    }
    if let Some(n) = max_bytes {
        args["max_bytes"] = json!(n);
    }
    args
}

/// A GET as the read tool's `url`, any other method as the write tool's `http`: the one rule a
/// caller of `toolgate.http` needs not know.
fn http_call(
    method: &str,
    url: &str,
    headers: &BTreeMap<String, String>,
    body: Option<&str>,
    max_bytes: Option<u64>,
) -> Result<(ToolKind, Value), UpcallError> {
    match (method, body) {
        ("GET", None) => Ok((ToolKind::Read, get(url, headers, max_bytes))),
        ("GET", Some(_)) => Err(bad_request("a GET request has no body")),
        ("POST" | "PUT" | "PATCH" | "DELETE", _) => {
            let mut http = json!({"method": method, "url": url});
            if !headers.is_empty() {
                http["headers"] = json!(headers);
            }
            if let Some(body) = body {
                http["body"] = json!(body);
            }
            if let Some(n) = max_bytes {
                http["max_bytes"] = json!(n);
            }
            Ok((ToolKind::Write, json!({"http": http})))
        }
        _ => Err(bad_request(
            "`method` must be one of GET, POST, PUT, PATCH, DELETE",
        )),
    }
}

/// `sql` on a database server: read-only on the read tool, with `write` on the write tool.
/// A `sqlite:` file is a session's, served by the session itself; code reaches its own with
/// Python's `sqlite3`, and an upcall that waited on its own session would wait for ever.
fn sql_call(
    database: &str,
    (query, params): (&str, &[SqlValue]),
    write: bool,
    max_rows: Option<u64>,
) -> Result<(ToolKind, Value), UpcallError> {
    if database
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("sqlite:")
    {
        return Err(bad_request(
            "toolgate.sql reaches database servers (a vault secret holding postgres://… or \
             mysql://…), not a sqlite: file: open the session's own SQLite files with Python's \
             sqlite3 module",
        ));
    }
    let mut args = json!({"sql": query, "database": database});
    if !params.is_empty() {
        let values: Vec<Value> = params.iter().cloned().map(Value::from).collect();
        args["params"] = Value::Array(values);
    }
    if let Some(n) = max_rows {
        args["max_rows"] = json!(n);
    }
    let tool = if write {
        ToolKind::Write
    } else {
        ToolKind::Read
    };
    Ok((tool, args))
}

/// The typed answer: the result the capability returned, as it returned it (redacted where
/// the call finished), never read back out of the tool's rendering.
fn value(upcall: &Upcall, typed: Vec<TypedOutput>) -> Option<UpcallValue> {
    typed.into_iter().find_map(|typed| match (upcall, typed) {
        (Upcall::Billing {}, TypedOutput::Billing(status)) => Some(UpcallValue::Billing(status)),
        (Upcall::InvokeLlm { .. }, TypedOutput::Llm(answer)) => Some(UpcallValue::Llm(answer)),
        (Upcall::WebSearch { .. }, TypedOutput::Search(results)) => {
            Some(UpcallValue::WebSearch(results))
        }
        (Upcall::Fetch { .. }, TypedOutput::Page(page)) => {
            Some(UpcallValue::Fetch(http_answer(page)))
        }
        (Upcall::Http { .. }, TypedOutput::Page(page)) => {
            Some(UpcallValue::Http(http_answer(page)))
        }
        (Upcall::Sql { .. }, TypedOutput::Table(database, table)) => {
            Some(UpcallValue::Sql(sql_answer(database, table)))
        }
        (Upcall::Secrets {}, TypedOutput::SecretNames(names)) => Some(UpcallValue::Secrets(names)),
        _ => None,
    })
}

/// A fetched page as the session gets it: its body as the tool renders it, whole.
fn http_answer(page: FetchedPage) -> HttpAnswer {
    let (format, text) = match page.content {
        PageContent::Text { text, format } => (format, text),
        PageContent::Image { data, .. } => ("image", data),
        PageContent::Binary { summary } => ("binary", summary),
    };
    HttpAnswer {
        status: page.status,
        url: page.final_url,
        content_type: page.content_type,
        format: format.to_owned(),
        text,
        bytes: u64::try_from(page.bytes).unwrap_or(u64::MAX),
        truncated: page.truncated,
        headers: page.headers,
    }
}

/// A statement's table as the session gets it.
fn sql_answer(database: &str, table: Table) -> SqlAnswer {
    SqlAnswer {
        database: database.to_owned(),
        columns: table
            .columns
            .into_iter()
            .map(|c| SqlColumn {
                name: c.name,
                type_name: c.type_name,
            })
            .collect(),
        row_count: u64::try_from(table.rows.len()).unwrap_or(u64::MAX),
        rows: table
            .rows
            .iter()
            .map(|row| row.iter().map(SqlValue::of).collect())
            .collect(),
        truncated: table.truncated,
        changes: table.changes,
    }
}

fn bad_request(message: &str) -> UpcallError {
    UpcallError::new(UpcallErrorCode::BadRequest, message)
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
#[cfg(test)]
#[path = "upcalls_web_tests.rs"]
mod web_tests;
