//! A tool call as the MCP layer makes it, whichever path it came by (rmcp, the answers written
//! without rmcp, a task's run): through the app's call use case, counted in the metrics, and
//! its answer in the form the wire carries. Also which tools may run as MCP tasks.

use std::sync::Arc;
use std::time::Instant;

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;
use toolgate_app::{Answer, App, CallError, CallIo, ContentItem, ToolOutcome};
use toolgate_domain::Account;

use crate::error::call_error;
use crate::metrics::{CallLabel, Metrics};

/// Whether a tool runs as an MCP task (`execution.taskSupport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskSupport {
    /// Never (a quick tool).
    Forbidden,
    /// Where the client accepts one.
    Optional,
    /// Always: a client that accepts none cannot call it (only conformance fixtures are).
    #[cfg_attr(not(feature = "conformance-fixtures"), allow(dead_code))]
    Required,
}

impl TaskSupport {
    /// As `tools/list` shows it, when it may run as a task.
    pub(crate) fn shown(self) -> Option<&'static str> {
        match self {
            Self::Forbidden => None,
            Self::Optional => Some("optional"),
            Self::Required => Some("required"),
        }
    }
}

/// The `_meta` key in which a client says how many characters of a result it takes inline
/// (Claude's clients).
pub(crate) const RESULT_CHARS_KEY: &str = "anthropic/maxResultSizeChars";

/// The most characters a client takes inline, from its `_meta` value under
/// [`RESULT_CHARS_KEY`]; anything but a positive integer is not said.
pub(crate) fn result_chars(said: Option<&Value>) -> Option<usize> {
    said?
        .as_u64()
        .filter(|chars| *chars > 0)
        .and_then(|chars| usize::try_from(chars).ok())
}

/// Makes tool calls through the app and counts them.
#[derive(Clone)]
pub(crate) struct Answerer {
    app: App,
    metrics: Arc<Metrics>,
}

impl Answerer {
    /// Calls of `app`'s tools, counted in `metrics`.
    pub(crate) fn new(app: App, metrics: Arc<Metrics>) -> Self {
        Self { app, metrics }
    }

    /// The app the calls go to.
    pub(crate) fn app(&self) -> &App {
        &self.app
    }

    /// Where calls and errors are counted.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Whether `name` is one of the three tools (not a fixture's, not unknown).
    pub(crate) fn is_tool(&self, name: &str) -> bool {
        self.app.tools().iter().any(|tool| tool.name == name)
    }

    /// Whether the tool `name` may run as an MCP task: the tools that may run long may.
    pub(crate) fn task_support(&self, name: &str) -> TaskSupport {
        match self.app.tools().iter().find(|tool| tool.name == name) {
            Some(tool) if tool.runs_long => TaskSupport::Optional,
            _ => TaskSupport::Forbidden,
        }
    }

    /// Makes the call through the app and counts it: the answer as the wire carries it, or a
    /// JSON-RPC error.
    pub(crate) async fn answer(
        &self,
        caller: &Account,
        name: &str,
        arguments: Option<serde_json::Map<String, Value>>,
        io: CallIo<'_>,
        started: Instant,
    ) -> Result<Answered, McpError> {
        let answer = self.app.calls().call(caller, name, arguments, io).await;
        let (result, label) = match answer {
            Ok(Answer::Ran(outcome)) => {
                let label = if outcome.is_error {
                    CallLabel::ToolError
                } else {
                    CallLabel::Ok
                };
                (Ok(Answered::ran(outcome)), label)
            }
            Ok(Answer::InvalidArguments(outcome)) => {
                (Ok(Answered::refused(outcome)), CallLabel::InvalidArguments)
            }
            Ok(Answer::Busy(outcome)) => (Ok(Answered::refused(outcome)), CallLabel::Busy),
            Ok(Answer::NotAllowed(outcome)) => (Ok(Answered::refused(outcome)), CallLabel::Refused),
            Err(err) => {
                let label = match err {
                    CallError::Refused(_) => CallLabel::Refused,
                    CallError::UnknownTool | CallError::NotRecorded(_) => CallLabel::Internal,
                };
                (Err(call_error(&err)), label)
            }
        };
        self.metrics
            .tool_call(name, label, started.elapsed().as_secs_f64());
        if let Err(err) = &result {
            self.metrics.rpc_error(i64::from(err.code.0));
        }
        result
    }
}

pub(crate) fn to_rmcp_content(item: ContentItem) -> ContentBlock {
    match item {
        ContentItem::Text(text) => ContentBlock::text(text),
        ContentItem::Image { data, mime_type } => ContentBlock::image(data, mime_type),
        ContentItem::ResourceLink(link) => ContentBlock::resource_link(
            rmcp::model::Resource::new(link.uri, link.name)
                .with_mime_type(link.mime_type)
                .with_size(link.size)
                .with_description(link.description),
        ),
    }
}

/// A call's answer, before it is put into rmcp's types (or written by `direct`): what ran
/// carries its structured output, a call refused before it ran (bad arguments, busy) only its
/// message.
#[derive(Debug)]
pub(crate) struct Answered {
    pub content: Vec<ContentItem>,
    pub structured: Option<serde_json::Map<String, Value>>,
    pub is_error: bool,
}

impl Answered {
    fn ran(outcome: ToolOutcome) -> Self {
        Self {
            content: outcome.content,
            structured: Some(outcome.structured),
            is_error: outcome.is_error,
        }
    }

    fn refused(outcome: ToolOutcome) -> Self {
        Self {
            content: outcome.content,
            structured: None,
            is_error: true,
        }
    }

    /// As rmcp's result.
    pub(crate) fn into_rmcp(self) -> CallToolResult {
        let content = self.content.into_iter().map(to_rmcp_content).collect();
        let mut result = if self.is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        };
        result.structured_content = self.structured.map(Value::Object);
        result
    }
}
