//! Call history: one row per call of the three tools (refused and invalid ones included), as
//! the owner reads it on the dashboard's History page, and the month's model tokens per
//! provider, kept apart so that they outlive a short retention. Rows arrive in batches from one
//! writer off the calls' path; every read is one account's, bounded, newest first.

use async_trait::async_trait;
use toolgate_domain::{AccountId, Micros, MonthKey};

use crate::StoreError;

/// The most rows one page (or one export) may ask for.
pub const MAX_PAGE_ROWS: u32 = 10_000;

/// The longest search string, in characters.
pub const MAX_SEARCH_CHARS: usize = 200;

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOutcome {
    /// It ran and answered without an error.
    Ok,
    /// It answered with a tool error (invalid arguments included): the error text's first line.
    ToolError(String),
    /// It got a JSON-RPC error (a refusal by metering or a cap, -32002): the code.
    Refused(i32),
}

impl CallOutcome {
    /// The outcome's kind as stored and filtered on: `ok`, `tool_error` or `refused`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::ToolError(_) => "tool_error",
            Self::Refused(_) => "refused",
        }
    }

    /// The stored detail: the error's first line, the code as text, or nothing.
    pub fn detail(&self) -> String {
        match self {
            Self::Ok => String::new(),
            Self::ToolError(line) => line.clone(),
            Self::Refused(code) => code.to_string(),
        }
    }

    /// Rebuilds an outcome from its two columns; an unknown kind means corrupt storage.
    pub fn from_columns(kind: &str, detail: String) -> Result<Self, StoreError> {
        match kind {
            "ok" => Ok(Self::Ok),
            "tool_error" => Ok(Self::ToolError(detail)),
            "refused" => detail
                .parse()
                .map(Self::Refused)
                .map_err(|_| corrupt("refused code")),
            _ => Err(corrupt("outcome")),
        }
    }
}

/// A model call's provider, model and tokens (of `svc_ai`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelUse {
    /// The provider called.
    pub provider: String,
    /// The model that answered.
    pub model: String,
    /// Tokens of the prompt.
    pub input_tokens: i64,
    /// Tokens of the answer.
    pub output_tokens: i64,
}

/// One call as history keeps it; its fields are redacted and cut before they get here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRecord {
    /// `call_` and 32 hexadecimal characters.
    pub id: String,
    /// Whose call it was.
    pub account: AccountId,
    /// When it started, Unix milliseconds.
    pub at_ms: i64,
    /// The key as the owner names it (`default`, a named key's name, `oauth:<client id>`).
    pub key_label: String,
    /// The named key's id, if a named key made it.
    pub key_id: Option<String>,
    /// The client (`name version` from its handshake or request, or the OAuth app).
    pub client: Option<String>,
    /// The tool called.
    pub tool: String,
    /// The arguments as JSON text, secrets redacted and long strings cut.
    pub fields: String,
    /// How it ended.
    pub outcome: CallOutcome,
    /// From its start to its answer.
    pub duration_ms: i64,
    /// What the wallet paid; `None`: free.
    pub charge: Option<Micros>,
    /// The MCP session it was made in, if any.
    pub session: Option<String>,
    /// Hosts it reached out to (a run's network records, a fetched URL's host).
    pub destinations: Vec<String>,
    /// The model and tokens of a model call.
    pub model: Option<ModelUse>,
}

/// Which rows a page shows; every filter is optional and they combine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryFilter {
    /// A key's label or id.
    pub key: Option<String>,
    /// The tool's name.
    pub tool: Option<String>,
    /// `ok`, `tool_error` or `refused`.
    pub outcome: Option<String>,
    /// The session id.
    pub session: Option<String>,
    /// Calls at or after this time (Unix ms).
    pub from_ms: Option<i64>,
    /// Calls before this time (Unix ms).
    pub to_ms: Option<i64>,
    /// Text the fields contain, literally (`%` and `_` are not wildcards); at most
    /// [`MAX_SEARCH_CHARS`] characters are used.
    pub search: Option<String>,
}

/// Where a page starts: strictly older than this row (time, then id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryCursor {
    /// The last row's time.
    pub at_ms: i64,
    /// The last row's id.
    pub id: String,
}

impl HistoryCursor {
    /// The cursor after `record`.
    pub fn after(record: &CallRecord) -> Self {
        Self {
            at_ms: record.at_ms,
            id: record.id.clone(),
        }
    }

    /// As a query parameter: `<ms>.<id>`.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.at_ms, self.id)
    }

    /// From [`HistoryCursor::encode`]'s text; `None` for anything else.
    pub fn decode(raw: &str) -> Option<Self> {
        let (ms, id) = raw.split_once('.')?;
        let valid_id = id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        valid_id.then_some(())?;
        Some(Self {
            at_ms: ms.parse().ok()?,
            id: id.to_owned(),
        })
    }
}

/// One provider's model use in a month.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderTokens {
    /// The provider.
    pub provider: String,
    /// Model calls.
    pub calls: i64,
    /// Tokens of the prompts.
    pub input_tokens: i64,
    /// Tokens of the answers.
    pub output_tokens: i64,
}

/// The calls' history and the month's model tokens.
#[async_trait]
pub trait CallHistory: Send + Sync {
    /// Inserts `records` in one transaction and adds their model tokens to the month of each
    /// call. Rows of accounts that no longer exist are an error for the whole batch.
    async fn append_calls(&self, records: &[CallRecord]) -> Result<(), StoreError>;

    /// Up to `limit` (at most [`MAX_PAGE_ROWS`]) of `account`'s calls matching `filter`,
    /// newest first, strictly after `cursor`.
    async fn call_page(
        &self,
        account: &AccountId,
        filter: &HistoryFilter,
        cursor: Option<&HistoryCursor>,
        limit: u32,
    ) -> Result<Vec<CallRecord>, StoreError>;

    /// `account`'s call `id`; `None` when there is none (or it is another account's).
    async fn call_record(
        &self,
        account: &AccountId,
        id: &str,
    ) -> Result<Option<CallRecord>, StoreError>;

    /// Deletes up to `limit` calls older than `before_ms` (any account's); returns how many.
    async fn purge_calls(&self, before_ms: i64, limit: u32) -> Result<u64, StoreError>;

    /// `account`'s model calls and tokens per provider in `month`, by provider.
    async fn model_tokens(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<Vec<ProviderTokens>, StoreError>;
}

/// The search text as a `LIKE` pattern escaped with `\`: `%` and `_` match themselves.
pub fn like_pattern(search: &str) -> String {
    let mut pattern = String::with_capacity(search.len() + 2);
    pattern.push('%');
    for c in search.chars().take(MAX_SEARCH_CHARS) {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// Destinations as stored: one host a line.
pub fn destinations_to_column(hosts: &[String]) -> String {
    hosts.join("\n")
}

/// Destinations from their column.
pub fn destinations_from_column(raw: &str) -> Vec<String> {
    raw.lines().map(str::to_owned).collect()
}

/// The model tokens of a batch summed per (account, month, provider), so that each is one
/// upsert.
pub fn tokens_per_month(records: &[CallRecord]) -> Vec<(String, String, ProviderTokens)> {
    let mut sums: Vec<(String, String, ProviderTokens)> = Vec::new();
    for record in records {
        let Some(model) = &record.model else { continue };
        let month = month_of(record.at_ms);
        let found = sums.iter_mut().find(|(account, m, tokens)| {
            account == record.account.as_str() && *m == month && tokens.provider == model.provider
        });
        match found {
            Some((_, _, tokens)) => {
                tokens.calls += 1;
                tokens.input_tokens += model.input_tokens;
                tokens.output_tokens += model.output_tokens;
            }
            None => sums.push((
                record.account.as_str().to_owned(),
                month,
                ProviderTokens {
                    provider: model.provider.clone(),
                    calls: 1,
                    input_tokens: model.input_tokens,
                    output_tokens: model.output_tokens,
                },
            )),
        }
    }
    sums
}

/// The month (`YYYY-MM`, UTC) of a time in Unix milliseconds.
pub fn month_of(at_ms: i64) -> String {
    let at = toolgate_domain::time_reexport::OffsetDateTime::from_unix_timestamp(at_ms / 1000)
        .unwrap_or(toolgate_domain::time_reexport::OffsetDateTime::UNIX_EPOCH);
    MonthKey::containing(at).as_str().to_owned()
}

/// Rebuilds a model use from its nullable columns.
pub fn model_from_columns(
    provider: Option<String>,
    model: Option<String>,
    input: Option<i64>,
    output: Option<i64>,
) -> Option<ModelUse> {
    Some(ModelUse {
        provider: provider?,
        model: model.unwrap_or_default(),
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
    })
}

fn corrupt(column: &str) -> StoreError {
    StoreError::Unavailable(format!("corrupt call_history row: {column}"))
}
