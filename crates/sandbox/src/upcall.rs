//! Upcalls: code in a session asks the service for something and waits for the answer.
//!
//! The code sends a typed request ([`Upcall`]) on its session's channel while one of its calls
//! runs (never between calls); the implementation of [`SandboxSessions`](crate::SandboxSessions) attaches
//! the session's identity ([`UpcallOrigin`]: from its own table, never from the frame) and
//! hands both to the call's [`UpcallHandler`], whose typed answer goes back to the code. An
//! upcall is admitted and metered by the same rules as a tool call (the handler is `app`'s
//! call use case), so code in a session can do nothing its account could not do through the
//! tools. The Python side is the `toolgate` module of `runtime/` (see `runtime/PROTOCOL.md`).

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use toolgate_domain::{BillingStatus, LlmAnswer, SearchResult};

pub use crate::upcall_values::{HttpAnswer, SqlAnswer, SqlColumn, SqlValue};

/// Upcalls of one call that may wait for their answers at once; one more is answered `busy`
/// (the runtime sends one at a time). The one bound for every party that reads upcalls: the
/// manager from its session, a node's channel, and a front end from a node.
pub const MAX_UPCALLS_IN_FLIGHT: usize = 4;

/// What code in a session asks the service for: the billing status, a language model's
/// answer, web search results, a page, an HTTP request, a database statement, the vault's
/// secret names. Each is one metered call, as the matching tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Upcall {
    /// The account's billing status record (one metered call, as `billing` on the read tool).
    /// It takes no fields (`{}` keeps unknown ones refused).
    Billing {},
    /// A language model's answer (as `prompt` and `model` on the AI tool).
    InvokeLlm {
        /// `provider/model`
        model: String,
        /// what to ask
        prompt: String,
        /// instructions for the model
        #[serde(default, skip_serializing_if = "Option::is_none")]
        system: Option<String>,
        /// most tokens of the answer
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_tokens: Option<u64>,
        /// sampling temperature
        #[serde(default, skip_serializing_if = "Option::is_none")]
        temperature: Option<f64>,
        /// `"json"` or a JSON Schema
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response_format: Option<ResponseFormat>,
        /// the vault secret holding the key to use
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_key_secret: Option<String>,
        /// send the answer's text in pieces (`upcall_progress` frames) as it comes
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        stream: bool,
    },
    /// Web search results (as `search` on the AI tool).
    WebSearch {
        /// what to search for
        query: String,
        /// results wanted at most
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_results: Option<u64>,
    },
    /// A page, by a GET through the service's fetcher (as `url` on the read tool).
    Fetch {
        /// an http:// or https:// URL; `{{secret:NAME}}` may stand in it
        url: String,
        /// request headers, name to value; a value may hold `{{secret:NAME}}`
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
        /// most body bytes to read
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_bytes: Option<u64>,
    },
    /// An HTTP request: a GET as [`Upcall::Fetch`], any other method as `http` on the write
    /// tool.
    Http {
        /// `GET`, `POST`, `PUT`, `PATCH` or `DELETE`
        method: String,
        /// an http:// or https:// URL; `{{secret:NAME}}` may stand in it
        url: String,
        /// request headers, name to value; a value may hold `{{secret:NAME}}`
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
        /// the request body (not with a GET); `{{secret:NAME}}` may stand in it
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<String>,
        /// most answer bytes to read
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_bytes: Option<u64>,
    },
    /// A statement on a database server named by a vault secret (as `sql` with `database`):
    /// read-only as on the read tool, or with `write` as on the write tool.
    Sql {
        /// the vault secret holding the connection string
        database: String,
        /// the statement (with `write` and no `params`, possibly several)
        query: String,
        /// values for its placeholders, in order: bound by the server, never spliced in
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        params: Vec<SqlValue>,
        /// run it as the write tool does (one transaction that may change data)
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        write: bool,
        /// most rows returned
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_rows: Option<u64>,
    },
    /// The names of the account's vault secrets, never their values (as `list_secrets`).
    /// It takes no fields.
    Secrets {},
}

/// The form a model's answer must take: any JSON object, or one that follows a schema.
/// On the wire `"json"` or the schema itself (an object), as the AI tool's `response_format`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "WireFormat", into = "WireFormat")]
pub enum ResponseFormat {
    /// `"json"`: a JSON object, of any shape.
    Json,
    /// A JSON object that follows this JSON Schema.
    Schema(JsonSchema),
}

/// A JSON Schema document, held as its text, which is checked to be one JSON object.
///
/// Why text and not a type of its own: the service never reads a schema, it only hands it to
/// the model's provider, and JSON Schema is open (any keyword, vocabularies of each draft,
/// extensions a provider reads). A typed model of it would drop what it does not know, so the
/// provider would get less than the caller wrote, or it would be a second JSON value type.
/// Text keeps the document exactly, serialises to the same object on any wire, and leaves
/// `serde_json::Value` out of the seam's types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonSchema(String);

impl JsonSchema {
    /// The schema in `text`, which must be one JSON object.
    pub fn parse(text: &str) -> Result<Self, String> {
        let object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(text).map_err(|_| NOT_A_FORMAT.to_owned())?;
        Self::of(&object)
    }

    fn of(object: &serde_json::Map<String, serde_json::Value>) -> Result<Self, String> {
        serde_json::to_string(object)
            .map(Self)
            .map_err(|_| NOT_A_FORMAT.to_owned())
    }

    /// The schema's JSON text (one object).
    pub fn as_json(&self) -> &str {
        &self.0
    }
}

const NOT_A_FORMAT: &str = "`response_format` must be \"json\" or a JSON Schema object";

/// [`ResponseFormat`] as it is written: a word or an object.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum WireFormat {
    Word(String),
    Object(serde_json::Map<String, serde_json::Value>),
}

impl TryFrom<WireFormat> for ResponseFormat {
    type Error = String;

    fn try_from(wire: WireFormat) -> Result<Self, String> {
        match wire {
            WireFormat::Word(word) if word == "json" => Ok(Self::Json),
            WireFormat::Word(_) => Err(NOT_A_FORMAT.to_owned()),
            WireFormat::Object(object) => JsonSchema::of(&object).map(Self::Schema),
        }
    }
}

impl From<ResponseFormat> for WireFormat {
    fn from(format: ResponseFormat) -> Self {
        match format {
            ResponseFormat::Json => Self::Word("json".to_owned()),
            // checked to be an object when it was made; an empty one should it ever not parse
            ResponseFormat::Schema(schema) => {
                Self::Object(serde_json::from_str(schema.as_json()).unwrap_or_default())
            }
        }
    }
}

/// The service's answer to an [`Upcall`], one variant per kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpcallValue {
    /// The billing status record, already counting the upcall itself.
    Billing(BillingStatus),
    /// The model's answer.
    Llm(LlmAnswer),
    /// The results, best first.
    WebSearch(Vec<SearchResult>),
    /// The page a [`Upcall::Fetch`] got.
    Fetch(HttpAnswer),
    /// The answer to a [`Upcall::Http`].
    Http(HttpAnswer),
    /// What a [`Upcall::Sql`] statement returned.
    Sql(SqlAnswer),
    /// The vault's secret names, in the order the vault lists them.
    Secrets(Vec<String>),
}

/// Why an upcall got no value. The message is for the code's author (it becomes the Python
/// exception's text): it never holds internals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct UpcallError {
    /// What kind of failure.
    pub code: UpcallErrorCode,
    /// What the code's author reads.
    pub message: String,
}

impl UpcallError {
    /// An error of `code` saying `message`.
    pub fn new(code: UpcallErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// The kinds of [`UpcallError`], as the session reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpcallErrorCode {
    /// The allowance is used up and the wallet cannot pay (as -32002 for a tool call).
    Refused,
    /// The service could not record or answer it; nothing was charged; retry.
    Unavailable,
    /// It ran and failed.
    Failed,
    /// Too many upcalls of this call at once.
    Busy,
    /// The request was not understood.
    BadRequest,
}

impl std::fmt::Display for UpcallErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Refused => "refused",
            Self::Unavailable => "unavailable",
            Self::Failed => "failed",
            Self::Busy => "busy",
            Self::BadRequest => "bad_request",
        })
    }
}

/// The answer as it travels: `{"value": …}` or `{"error": …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpcallAnswer {
    /// It was answered.
    Value(UpcallValue),
    /// It failed.
    Error(UpcallError),
}

impl From<Result<UpcallValue, UpcallError>> for UpcallAnswer {
    fn from(result: Result<UpcallValue, UpcallError>) -> Self {
        match result {
            Ok(value) => Self::Value(value),
            Err(error) => Self::Error(error),
        }
    }
}

/// Who made an upcall: the session it came from, as the implementation knows it (never as the
/// code claims it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpcallOrigin {
    /// The account the session belongs to.
    pub account: String,
    /// The caller's session id; `None`: the session of a call without one.
    pub session_id: Option<String>,
}

/// Answers the upcalls of one run. Given with the [`RunRequest`](crate::RunRequest); called
/// only while that run is in progress, never after it returned (an answer still being made
/// then is dropped, which cancels it).
#[async_trait]
pub trait UpcallHandler: Send + Sync {
    /// Answers `upcall`, made by code in the session `origin` names.
    async fn answer(
        &self,
        origin: UpcallOrigin,
        upcall: Upcall,
    ) -> Result<UpcallValue, UpcallError>;

    /// Answers `upcall` as [`Self::answer`] does, passing the pieces of a streamed answer to
    /// `pieces` as they come (never waiting for it); without streaming there are none.
    async fn answer_streaming(
        &self,
        origin: UpcallOrigin,
        upcall: Upcall,
        pieces: tokio::sync::mpsc::Sender<String>,
    ) -> Result<UpcallValue, UpcallError> {
        drop(pieces);
        self.answer(origin, upcall).await
    }
}

impl Upcall {
    /// Its `kind`, as the wire names it (what a log line may show of it).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Billing {} => "billing",
            Self::InvokeLlm { .. } => "invoke_llm",
            Self::WebSearch { .. } => "web_search",
            Self::Fetch { .. } => "fetch",
            Self::Http { .. } => "http",
            Self::Sql { .. } => "sql",
            Self::Secrets {} => "secrets",
        }
    }

    /// Whether its answer streams in pieces before it comes whole.
    pub fn streams(&self) -> bool {
        matches!(self, Self::InvokeLlm { stream: true, .. })
    }
}

#[cfg(test)]
#[path = "upcall_tests.rs"]
mod tests;
