//! Call history, written off the calls' path: a call hands its record to a bounded queue (a
//! full queue drops the record and counts it, never holding the call) and one writer task
//! stores what has gathered as one batch. The costly part of a record, its fields (the
//! arguments redacted of every secret the call opened, `secret_set.value` always, and each
//! string cut to 4 KiB), is made by the writer, not the call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde_json::Value;
use tokio::sync::mpsc;
use toolgate_domain::{Account, AccountId, Micros, MonthKey, Via};
/// The history's records and queries, as the dashboard reads them.
pub use toolgate_store::{
    CallOutcome, CallRecord, HistoryCursor, HistoryFilter, MAX_PAGE_ROWS, MAX_SEARCH_CHARS,
    ProviderTokens,
};
use toolgate_store::{ModelUse, Store, StoreError};
use toolgate_vault::Redactor;

use crate::capability::{
    Answer, CallError, CallIo, ContentItem, JsonObject, ToolOutcome, TypedOutput,
};
use crate::redaction::redact_value;

/// Records waiting for the writer; past this, records are dropped (and counted).
const QUEUE: usize = 8192;

/// The most records one batch writes.
const BATCH: usize = 512;

/// How long the writer gathers records after the first before it stores them.
const GATHER: std::time::Duration = std::time::Duration::from_millis(200);

/// The longest string a record's fields keep, in bytes; longer ones are cut with a marker.
pub const CUT_BYTES: usize = 4096;

/// What replaces `secret_set.value` in every record.
pub const SECRET_VALUE: &str = "[secret value]";

/// The longest first line of an error a record keeps, in characters.
const FIRST_LINE_CHARS: usize = 500;

/// The JSON-RPC code of a refusal (by metering or a cap), as the server answers it.
const REFUSED_CODE: i32 = -32002;

/// The JSON-RPC code of a call whose charge could not be recorded (an internal error).
const NOT_RECORDED_CODE: i32 = -32603;

/// Where calls' records go: the queue to the writer task.
pub struct CallLog {
    queue: mpsc::Sender<Pending>,
    dropped: AtomicU64,
    price: Micros,
}

/// A call's record as the call leaves it: everything but its fields, made by the writer.
struct Pending {
    record: CallRecord,
    args: Option<JsonObject>,
    redactor: Option<Arc<Redactor>>,
}

/// What one call tells its record besides its answer.
#[derive(Default)]
pub(crate) struct CallFacts {
    /// The wallet paid for the call (else it was free, or not admitted).
    pub paid: bool,
    /// The redactor of the secrets the call opened.
    pub redactor: Option<Arc<Redactor>>,
}

impl CallLog {
    /// Starts the writer over `store`; `price` is what a paid call costs. Needs a Tokio runtime.
    pub fn start(store: Arc<dyn Store>, price: Micros) -> Arc<Self> {
        let (queue, pending) = mpsc::channel(QUEUE);
        tokio::spawn(write(store, pending));
        Arc::new(Self {
            queue,
            dropped: AtomicU64::new(0),
            price,
        })
    }

    /// Records dropped because the queue was full (or the writer gone) since start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Hands one call's record to the writer; never waits.
    #[allow(clippy::too_many_arguments)] // one call's parts, gathered in one place
    pub(crate) fn record(
        &self,
        caller: &Account,
        tool: &str,
        args: Option<JsonObject>,
        io: &CallIo<'_>,
        (at_ms, started): (i64, Instant),
        answered: &Result<Answer, CallError>,
        facts: CallFacts,
    ) {
        let Some(outcome) = outcome_of(answered) else {
            return;
        };
        let ran = match answered {
            Ok(Answer::Ran(outcome)) => Some(outcome),
            _ => None,
        };
        let (key_id, client) = match &caller.via {
            Via::NamedKey(key) => (Some(key.id.to_string()), None),
            Via::OAuth { client_id } => (None, Some(format!("oauth:{client_id}"))),
            Via::PrimaryKey => (None, None),
        };
        let mut destinations = args.as_ref().map(url_hosts).unwrap_or_default();
        if let Some(ran) = ran {
            run_destinations(ran, &mut destinations);
        }
        let record = CallRecord {
            id: call_id(),
            account: caller.id.clone(),
            at_ms,
            key_label: caller.via.label(),
            key_id,
            client: io.client.map(|c| cut_chars(c, 200)).or(client),
            tool: tool.to_owned(),
            fields: String::new(),
            outcome,
            duration_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
            charge: facts.paid.then_some(self.price),
            session: io.session.map(|s| cut_chars(s, 200)),
            destinations,
            model: ran.and_then(model_use),
        };
        let pending = Pending {
            record,
            args,
            redactor: facts.redactor,
        };
        if self.queue.try_send(pending).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // one warning per thousand, not one per call of a flood
            if dropped % 1000 == 1 {
                tracing::warn!(dropped, "call history queue full: records dropped");
            }
        }
    }
}

/// A new call's id: `call_`, the time in microseconds (14 hex digits) and 18 random ones, so
/// that calls of one millisecond still sort in the order they were made.
fn call_id() -> String {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("call_{micros:014x}{}", &random[..18])
}

/// The writer: from a first record on, sleeps [`GATHER`] and then stores what came (up to a
/// batch) in one transaction, so that a busy server pays one commit (one fsync on SQLite, whose
/// file the calls' own admissions share) for many calls rather than one each; and while it
/// sleeps, a call's record wakes nobody.
async fn write(store: Arc<dyn Store>, mut pending: mpsc::Receiver<Pending>) {
    let mut batch = Vec::with_capacity(BATCH);
    while pending.recv_many(&mut batch, BATCH).await > 0 {
        tokio::time::sleep(GATHER).await;
        while batch.len() < BATCH {
            match pending.try_recv() {
                Ok(record) => batch.push(record),
                Err(_) => break,
            }
        }
        let records: Vec<CallRecord> = batch.drain(..).map(Pending::finish).collect();
        if let Err(error) = store.append_calls(&records).await {
            tracing::warn!(%error, rows = records.len(), "call history batch was not stored");
        }
    }
}

impl Pending {
    /// The record with its fields made.
    fn finish(self) -> CallRecord {
        let Self {
            mut record,
            args,
            redactor,
        } = self;
        record.fields = fields_text(args, redactor.as_deref());
        record
    }
}

/// The arguments as history shows them: `secret_set.value` replaced, every value of a secret
/// the call opened redacted, every string cut to [`CUT_BYTES`].
pub fn fields_text(args: Option<JsonObject>, redactor: Option<&Redactor>) -> String {
    let mut value = Value::Object(args.unwrap_or_default());
    if let Some(set) = value.get_mut("secret_set").and_then(Value::as_object_mut)
        && let Some(secret) = set.get_mut("value")
    {
        *secret = Value::String(SECRET_VALUE.to_owned());
    }
    if let Some(redactor) = redactor {
        redact_value(&mut value, redactor);
    }
    cut_strings(&mut value);
    serde_json::to_string(&value).unwrap_or_default()
}

/// Cuts every string of `value` longer than [`CUT_BYTES`], without recursion.
fn cut_strings(value: &mut Value) {
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Value::String(text) if text.len() > CUT_BYTES => {
                let total = text.len();
                let mut end = CUT_BYTES;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push_str(&format!("…[cut: {total} bytes]"));
            }
            Value::Array(items) => pending.extend(items.iter_mut()),
            Value::Object(fields) => pending.extend(fields.values_mut()),
            _ => {}
        }
    }
}

/// How the call ended; `None` for a call of no tool (not a call).
fn outcome_of(answered: &Result<Answer, CallError>) -> Option<CallOutcome> {
    Some(match answered {
        Ok(Answer::Ran(outcome)) if !outcome.is_error => CallOutcome::Ok,
        Ok(
            Answer::Ran(outcome)
            | Answer::InvalidArguments(outcome)
            | Answer::Busy(outcome)
            | Answer::NotAllowed(outcome),
        ) => CallOutcome::ToolError(first_line(outcome)),
        Err(CallError::UnknownTool) => return None,
        Err(CallError::Refused(_)) => CallOutcome::Refused(REFUSED_CODE),
        Err(CallError::NotRecorded(_)) => CallOutcome::Refused(NOT_RECORDED_CODE),
    })
}

/// The first line of an outcome's first text (redacted already, as the caller read it).
fn first_line(outcome: &ToolOutcome) -> String {
    let text = outcome.content.iter().find_map(|item| match item {
        ContentItem::Text(text) => Some(text.as_str()),
        _ => None,
    });
    let line = text.and_then(|t| t.lines().next()).unwrap_or_default();
    cut_chars(line, FIRST_LINE_CHARS)
}

fn cut_chars(text: &str, chars: usize) -> String {
    text.chars().take(chars).collect()
}

/// The hosts of the URLs the arguments fetch (`url`, `http.url`).
fn url_hosts(args: &JsonObject) -> Vec<String> {
    let mut hosts = Vec::new();
    for key in ["url", "http"] {
        let url = match args.get(key) {
            Some(Value::String(url)) => Some(url.as_str()),
            Some(Value::Object(fields)) => fields.get("url").and_then(Value::as_str),
            _ => None,
        };
        if let Some(host) = url.and_then(host_of) {
            hosts.push(host);
        }
    }
    hosts
}

/// The host (and port, when given) of an absolute URL.
fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    (!host.is_empty()).then(|| cut_chars(host, 255).to_ascii_lowercase())
}

/// The destinations of a run's network records (`python.network`, `bash.network`), each once.
fn run_destinations(outcome: &ToolOutcome, into: &mut Vec<String>) {
    for runner in ["python", "bash"] {
        let Some(Value::Array(records)) = outcome
            .structured
            .get(runner)
            .and_then(|run| run.get("network"))
        else {
            continue;
        };
        for record in records {
            let Some(host) = record.get("host").and_then(Value::as_str) else {
                continue;
            };
            let destination = match record.get("port").and_then(Value::as_u64) {
                Some(port) => format!("{host}:{port}"),
                None => host.to_owned(),
            };
            if !into.contains(&destination) {
                into.push(destination);
            }
        }
    }
}

/// The model and tokens of a model call.
fn model_use(outcome: &ToolOutcome) -> Option<ModelUse> {
    outcome.typed.iter().find_map(|typed| match typed {
        TypedOutput::Llm(answer) => Some(ModelUse {
            provider: answer.provider.clone(),
            model: answer.model.clone(),
            input_tokens: i64::try_from(answer.usage.input_tokens).unwrap_or(i64::MAX),
            output_tokens: i64::try_from(answer.usage.output_tokens).unwrap_or(i64::MAX),
        }),
        _ => None,
    })
}

/// What the owner reads of the history: pages, records, the month's model tokens; and the
/// retention's purge.
pub struct CallHistoryPages {
    store: Arc<dyn Store>,
}

/// Rows one purge statement deletes at most.
const PURGE_BATCH: u32 = 5000;

impl CallHistoryPages {
    /// Over `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Up to `limit` of the account's calls matching `filter`, newest first, after `cursor`.
    pub async fn page(
        &self,
        account: &AccountId,
        filter: &HistoryFilter,
        cursor: Option<&HistoryCursor>,
        limit: u32,
    ) -> Result<Vec<CallRecord>, StoreError> {
        self.store.call_page(account, filter, cursor, limit).await
    }

    /// The account's call `id`, if it has one.
    pub async fn record(
        &self,
        account: &AccountId,
        id: &str,
    ) -> Result<Option<CallRecord>, StoreError> {
        self.store.call_record(account, id).await
    }

    /// The account's model calls and tokens per provider this month.
    pub async fn model_tokens(
        &self,
        account: &AccountId,
    ) -> Result<Vec<ProviderTokens>, StoreError> {
        self.store.model_tokens(account, &MonthKey::now()).await
    }

    /// Deletes every call older than `before_ms`, in bounded batches; returns how many.
    pub async fn purge_before(&self, before_ms: i64) -> Result<u64, StoreError> {
        let mut purged = 0;
        loop {
            let done = self.store.purge_calls(before_ms, PURGE_BATCH).await?;
            purged += done;
            if done < u64::from(PURGE_BATCH) {
                return Ok(purged);
            }
            // other writers get the database between batches
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
