//! The seam every capability plugs into: its fields, its description, its output and its handler;
//! and what a call answers, with the call-back ([`MakeCall`]) through which work a call started
//! makes calls of its own. The three tools are nothing but the capabilities registered under them.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use toolgate_domain::{Account, BillingStatus, LlmAnswer, SearchResult, UsageSnapshot};
use toolgate_ports::database::Table;
use toolgate_ports::fetch::FetchedPage;

pub use crate::call_secrets::CallSecrets;
use crate::metering::MeterError;
pub use crate::schema::FieldKind;

/// A JSON object, as tool arguments arrive.
pub type JsonObject = Map<String, Value>;

/// Which of the three tools a capability belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolKind {
    /// `<brand>_read`: read-only queries.
    Read,
    /// `<brand>_write`: code execution and state changes.
    Write,
    /// `<brand>_ai`: language models and live web search.
    Ai,
}

impl ToolKind {
    /// All three, in the order `tools/list` shows them.
    pub const ALL: [ToolKind; 3] = [ToolKind::Read, ToolKind::Write, ToolKind::Ai];

    /// The suffix after `<brand>_`.
    pub fn suffix(self) -> &'static str {
        match self {
            ToolKind::Read => "read",
            ToolKind::Write => "write",
            ToolKind::Ai => "ai",
        }
    }
}

/// One input field a capability owns (or shares, like `session_id`).
#[derive(Debug, Clone)]
pub struct Field {
    /// Property name in the tool's input schema.
    pub name: &'static str,
    /// Its type and bounds.
    pub kind: FieldKind,
    /// What the caller reads in `tools/list`.
    pub description: &'static str,
}

/// Where a long-running capability reports progress while it runs (MCP progress notifications,
/// when the caller asked for them).
pub trait ProgressSink: Send + Sync {
    /// Reports `message`; `progress` grows with every report.
    fn report(&self, progress: f64, message: &str);
}

/// State the capabilities of one call share, made by the first that needs it and dropped when
/// the call ends (a call-scoped session closes then). One value per type.
#[derive(Default)]
pub struct CallScratch {
    values: std::sync::Mutex<Vec<std::sync::Arc<dyn std::any::Any + Send + Sync>>>,
}

impl CallScratch {
    /// The call's value of type `T`, made by `make` the first time.
    pub fn get_or_insert<T: Send + Sync + 'static>(
        &self,
        make: impl FnOnce() -> T,
    ) -> std::sync::Arc<T> {
        let mut values = self
            .values
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let found = values
            .iter()
            .find_map(|value| std::sync::Arc::clone(value).downcast::<T>().ok());
        found.unwrap_or_else(|| {
            let made = std::sync::Arc::new(make());
            values.push(made.clone());
            made
        })
    }
}

/// Who is calling and through which tool.
#[derive(Clone, Copy)]
pub struct CallContext<'a> {
    /// The authenticated, admitted account.
    pub account: &'a Account,
    /// The tool's full name.
    pub tool: &'a str,
    /// Unique per call within this process.
    pub call_id: u64,
    /// The account's usage just after this call's charge, when the store knew it exactly.
    pub usage_after: Option<UsageSnapshot>,
    /// Makes the calls a capability's work makes on the caller's behalf (upcalls from code in a
    /// session): the call use case, held only while this call runs.
    pub calls: &'a Arc<dyn MakeCall>,
    /// What the call's capabilities share; dropped when the call ends.
    pub scratch: &'a CallScratch,
    /// The secret values the call's capabilities opened: what the call shows is redacted of
    /// them where the call finishes, whichever capability opened them.
    pub secrets: &'a CallSecrets,
    /// Where to report progress, if the caller wants it.
    pub progress: Option<&'a dyn ProgressSink>,
    /// Cancelled when the caller cancels the call or goes away.
    pub cancel: Option<&'a CancellationToken>,
    /// The call may run as an MCP task: its time limit is a task's, not a request's.
    pub as_task: bool,
    /// The most characters the caller's client takes inline, when it said
    /// (`_meta` `anthropic/maxResultSizeChars`): raises the operator's `inline_result_chars`.
    pub result_chars: Option<usize>,
}

impl std::fmt::Debug for CallContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallContext")
            .field("account", &self.account.id)
            .field("tool", &self.tool)
            .field("call_id", &self.call_id)
            .field("progress", &self.progress.is_some())
            .finish_non_exhaustive()
    }
}

/// One item of human-readable result content.
#[derive(Debug, Clone, PartialEq)]
pub enum ContentItem {
    /// Plain text.
    Text(String),
    /// Base64 image data with its MIME type.
    Image {
        /// base64 of the bytes
        data: String,
        /// e.g. `image/png`
        mime_type: String,
    },
    /// A link to a file the caller may fetch (a signed download link to a workspace file).
    ResourceLink(ResourceLink),
}

/// A link to a file, with what a client shows of it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceLink {
    /// Where to fetch it.
    pub uri: String,
    /// Its name.
    pub name: String,
    /// Its MIME type.
    pub mime_type: String,
    /// Its size in bytes.
    pub size: u64,
    /// What it is, in one sentence.
    pub description: String,
}

/// What a capability returns when it ran.
#[derive(Debug, Clone, Default)]
pub struct Output {
    /// Human-readable content.
    pub content: Vec<ContentItem>,
    /// The capability's part of `structuredContent`, under its key.
    pub structured: Value,
    /// It ran, but what it ran failed (an exception, a non-zero exit status): the call's result
    /// is marked `isError` while the output stays complete.
    pub is_error: bool,
    /// The result as a value, for a caller that wants it rather than its rendering (an upcall):
    /// the content and structured content above are rendered from it.
    pub typed: Option<TypedOutput>,
    /// Bytes shown as they are (a binary file read back): the call's redaction passes over this
    /// output, as it would break them.
    pub verbatim: bool,
}

/// A capability's result as a value, of the capabilities an upcall reaches.
#[derive(Debug, Clone, PartialEq)]
pub enum TypedOutput {
    /// `billing`: the billing status record.
    Billing(BillingStatus),
    /// `llm`: the model's answer.
    Llm(LlmAnswer),
    /// `search`: the results, best first.
    Search(Vec<SearchResult>),
    /// `url` and `http`: the answer, its body as the content renders it.
    Page(FetchedPage),
    /// `sql` on a database server: the kind of database and what the statement returned.
    Table(&'static str, Table),
    /// `list_secrets`: the secrets' names.
    SecretNames(Vec<String>),
}

/// A tool-level failure: reported as a result with `isError: true`, never as a protocol error.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    /// What the caller reads.
    pub message: String,
}

impl Failure {
    /// A failure with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// A capability: registered under one tool, triggered by its fields.
#[async_trait]
pub trait Capability: Send + Sync {
    /// Key under which its output appears in `structuredContent`.
    fn key(&self) -> &'static str;

    /// The tool it belongs to.
    fn tool(&self) -> ToolKind;

    /// One paragraph for the tool's description.
    fn summary(&self) -> &'static str;

    /// The fields it reads.
    fn fields(&self) -> Vec<Field>;

    /// JSON Schema of its part of `structuredContent`.
    fn output_schema(&self) -> Value;

    /// Whether a call's (already type-checked) arguments ask for this capability.
    fn wants(&self, args: &JsonObject) -> bool;

    /// Whether its work reaches beyond this service (the open web, a tenant's database, a
    /// model provider): a tool with any such capability says so (`openWorldHint`).
    fn reaches_outside(&self) -> bool {
        false
    }

    /// Checks what field types cannot (combinations, formats) before the call is metered.
    fn validate(&self, _args: &JsonObject) -> Result<(), String> {
        Ok(())
    }

    /// [`Capability::validate`] for a call that may run as an MCP task (`as_task`) or not:
    /// what only a task may ask for (a longer time limit) is refused, still before metering.
    fn validate_as(&self, args: &JsonObject, _as_task: bool) -> Result<(), String> {
        self.validate(args)
    }

    /// Whether it may run while the call's charge is still being made durable (the answer waits
    /// for it either way). Work that reads metering state, which must include this very call,
    /// keeps the default and runs only after the commit.
    fn overlaps_commit(&self) -> bool {
        false
    }

    /// The budget its work takes a turn of (see [`crate::turns`]), if any: the call takes
    /// that turn before it is charged and holds it until it ends.
    fn turn_kind(&self, _args: &JsonObject) -> Option<crate::turns::TurnKind> {
        None
    }

    /// Runs it. Only called after the call was admitted and metered.
    async fn run(&self, ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure>;
}

/// What the dispatcher returns: content, structured output, and whether any capability failed.
#[derive(Debug, Clone)]
pub struct ToolOutcome {
    /// Human-readable content of every capability, in registry order.
    pub content: Vec<ContentItem>,
    /// `{capability key: output}`; a failed capability shows `{"error": message}`.
    pub structured: JsonObject,
    /// True when at least one capability failed.
    pub is_error: bool,
    /// The typed results of the capabilities that have one, in registry order.
    pub typed: Vec<TypedOutput>,
}

/// What the caller's side gives a call: where progress goes and what cancels it.
#[derive(Default, Clone, Copy)]
pub struct CallIo<'a> {
    /// Where to report progress, if the caller wants it.
    pub progress: Option<&'a dyn ProgressSink>,
    /// Cancelled when the caller cancels the call or goes away.
    pub cancel: Option<&'a CancellationToken>,
    /// Told once the call is admitted and charged (a call refused before never tells it).
    pub admitted: Option<&'a tokio::sync::Notify>,
    /// The call may run as an MCP task: its time limit is a task's, not a request's.
    pub as_task: bool,
    /// The most characters the caller's client takes inline, when it said
    /// (`_meta` `anthropic/maxResultSizeChars`).
    pub result_chars: Option<usize>,
    /// The client making the call, `name version`, for its history record.
    pub client: Option<&'a str>,
    /// The MCP session the call is made in, for its history record.
    pub session: Option<&'a str>,
}

/// An answered call.
#[derive(Debug)]
pub enum Answer {
    /// The tool ran; its outcome may be an error for the caller to read.
    Ran(ToolOutcome),
    /// The arguments were refused before admission: nothing ran, nothing was charged.
    InvalidArguments(ToolOutcome),
    /// No turn of the work it needs came in time (see [`crate::turns`]): nothing ran,
    /// nothing was charged; the outcome says to try again.
    Busy(ToolOutcome),
    /// The named key used may not call this tool or use these fields (its scope): nothing
    /// ran, nothing was charged; the outcome says what the key may use.
    NotAllowed(ToolOutcome),
}

/// A call that got no answer from a tool.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No tool has this name.
    #[error("unknown tool")]
    UnknownTool,
    /// The allowance is used up and the wallet cannot pay: nothing ran.
    #[error("{0}")]
    Refused(String),
    /// The charge could not be decided or recorded before the call would have run: nothing
    /// ran, nothing was charged. The source is for logs only.
    #[error(
        "The service could not record this call, so it did not run and nothing was charged; please retry."
    )]
    NotRecorded(#[source] MeterError),
}

/// The call-back through which work a call started makes calls of its own (an upcall from code
/// in a session is one call of the same account): the call use case as a capability sees it,
/// without knowing it. [`crate::ToolCalls`] implements it.
#[async_trait]
pub trait MakeCall: Send + Sync {
    /// Calls the tool of `kind` with `args` for `caller`, checked, admitted and metered as any
    /// tool call.
    async fn make_call(
        self: Arc<Self>,
        caller: &Account,
        kind: ToolKind,
        args: JsonObject,
        io: CallIo<'_>,
    ) -> Result<Answer, CallError>;
}
