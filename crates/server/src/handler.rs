//! The rmcp adapter: `tools/list` from the registry, `tools/call` through validation, metering
//! and the dispatcher. The caller's account arrives in the HTTP request's extensions, put there
//! by the authentication step in front of rmcp; nothing in the JSON-RPC message is trusted for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;
use toolgate_app::{
    App, CallContext, ContentItem, Decided, ProgressSink, ToolOutcome as Outcome, ToolSpec,
};
use toolgate_domain::{Account, Admission};

use tokio_util::sync::CancellationToken;

use crate::jsonrpc::{INTERNAL_ERROR, METHOD_NOT_FOUND, PAYMENT_REQUIRED};
use crate::legacy::CallCancel;
use crate::metrics::{Metrics, ToolOutcome};

/// The authenticated account, inserted into request extensions before rmcp sees the request.
#[derive(Clone, Debug)]
pub struct Caller(pub Arc<Account>);

/// The MCP server: one clone per session (legacy) or per request (stateless).
#[derive(Clone)]
pub struct McpHandler {
    app: App,
    metrics: Arc<Metrics>,
    tools: Arc<Vec<Tool>>,
    tool_names: Arc<String>,
}

const TOOL_LIST_TTL_MS: u64 = 300_000;

/// Numbers calls, so capabilities of one call can share state (a call-scoped session).
static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

/// Progress notifications queued per call before newer ones are dropped: progress is advisory,
/// and a flood of output must not grow memory without bound.
const PROGRESS_QUEUE: usize = 64;

/// Sends a call's progress reports to its client as `notifications/progress`, in order, from a
/// task of its own (the capability reporting them must never wait on the network).
struct ProgressRelay {
    queue: tokio::sync::mpsc::Sender<(f64, String)>,
}

impl ProgressRelay {
    fn start(peer: Peer<RoleServer>, token: ProgressToken) -> Self {
        let (queue, mut reports) = tokio::sync::mpsc::channel::<(f64, String)>(PROGRESS_QUEUE);
        tokio::spawn(async move {
            while let Some((progress, message)) = reports.recv().await {
                let note =
                    ProgressNotificationParam::new(token.clone(), progress).with_message(message);
                if peer.notify_progress(note).await.is_err() {
                    break; // the client is gone
                }
            }
        });
        Self { queue }
    }
}

impl ProgressSink for ProgressRelay {
    fn report(&self, progress: f64, message: &str) {
        let _ = self.queue.try_send((progress, message.to_owned()));
    }
}

impl McpHandler {
    /// Builds the handler and renders the tool list once.
    pub fn new(app: App, metrics: Arc<Metrics>) -> Self {
        #[allow(unused_mut)] // extended only with conformance fixtures
        let mut tools: Vec<Tool> = app.registry.tools().iter().map(to_rmcp_tool).collect();
        let names: Vec<String> = tools.iter().map(|t| format!("`{}`", t.name)).collect();
        #[cfg(feature = "conformance-fixtures")]
        tools.extend(crate::fixtures::tools());
        Self {
            app,
            metrics,
            tools: Arc::new(tools),
            tool_names: Arc::new(names.join(", ")),
        }
    }

    /// The `tools/list` result (the same for every caller).
    pub fn tool_list(&self) -> ListToolsResult {
        ListToolsResult::with_all_items((*self.tools).clone())
            .with_ttl_ms(TOOL_LIST_TTL_MS)
            .with_cache_scope(CacheScope::Private)
    }

    async fn call_registered(
        &self,
        spec: &ToolSpec,
        request: CallToolRequestParams,
        caller: &Account,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let started = Instant::now();
        let (result, outcome) = self.admit_and_run(spec, request, caller, context).await;
        self.metrics
            .tool_call(&spec.name, outcome, started.elapsed().as_secs_f64());
        if let Err(err) = &result {
            self.metrics.rpc_error(i64::from(err.code.0));
        }
        result
    }

    async fn admit_and_run(
        &self,
        spec: &ToolSpec,
        request: CallToolRequestParams,
        caller: &Account,
        context: &RequestContext<RoleServer>,
    ) -> (Result<CallToolResult, McpError>, ToolOutcome) {
        let plan = match self.app.registry.plan(spec.kind, request.arguments) {
            Ok(plan) => plan,
            Err(failure) => {
                let result = CallToolResult::error(vec![ContentBlock::text(failure.message)]);
                return (Ok(result), ToolOutcome::InvalidArguments);
            }
        };
        let recorded = match self.app.meter.admit(caller, &spec.name).await {
            Ok(Decided {
                admission: Admission::Refused,
                ..
            }) => {
                let message = self.app.meter.refusal_message();
                return (
                    Err(McpError::new(
                        ErrorCode(PAYMENT_REQUIRED as i32),
                        message,
                        None,
                    )),
                    ToolOutcome::Refused,
                );
            }
            Ok(decided) => decided.recorded,
            Err(err) => {
                tracing::error!(error = %err, tool = %spec.name, "admission failed");
                return not_recorded();
            }
        };
        // Work that reads metering state must see this call's charge: it waits for the commit.
        let recorded = if plan.overlaps_commit() {
            Some(recorded)
        } else if let Err(err) = recorded.wait().await {
            tracing::error!(error = %err, tool = %spec.name, "admission failed");
            return not_recorded();
        } else {
            None
        };
        let progress = context
            .meta
            .get_progress_token()
            .map(|token| ProgressRelay::start(context.peer.clone(), token));
        let cancel = cancellation_of(context);
        let ctx = CallContext {
            account: caller,
            tool: &spec.name,
            call_id: NEXT_CALL.fetch_add(1, Ordering::Relaxed),
            progress: progress.as_ref().map(|p| p as &dyn ProgressSink),
            cancel: Some(&cancel),
        };
        let outcome = self.app.registry.run(&plan, &ctx).await;
        // The charge's commit ran alongside the call; the answer waits for it. If it failed,
        // the call has run all the same and goes uncharged: its output is still the caller's.
        if let Some(recorded) = recorded
            && let Err(err) = recorded.wait().await
        {
            tracing::error!(error = %err, tool = %spec.name, "a call ran but its charge could not be recorded; it is free");
        }
        let label = if outcome.is_error {
            ToolOutcome::ToolError
        } else {
            ToolOutcome::Ok
        };
        (Ok(to_rmcp_result(outcome)), label)
    }
}

/// The answer to a call whose charge could not be recorded before it would have run.
fn not_recorded() -> (Result<CallToolResult, McpError>, ToolOutcome) {
    let message = "The service could not record this call, so it did not run and nothing was charged; please retry.";
    (
        Err(McpError::new(
            ErrorCode(INTERNAL_ERROR as i32),
            message,
            None,
        )),
        ToolOutcome::Internal,
    )
}

/// What a call obeys: in a legacy session, our token, cancelled by the client's
/// `notifications/cancelled` and when its request is dropped (the client went away); elsewhere
/// rmcp's.
fn cancellation_of(ctx: &RequestContext<RoleServer>) -> CancellationToken {
    ctx.extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<CallCancel>())
        .map_or_else(|| ctx.ct.clone(), |CallCancel(token)| token.clone())
}

fn caller_of(ctx: &RequestContext<RoleServer>) -> Option<Arc<Account>> {
    let parts = ctx.extensions.get::<http::request::Parts>()?;
    parts
        .extensions
        .get::<Caller>()
        .map(|caller| caller.0.clone())
}

fn to_rmcp_tool(spec: &ToolSpec) -> Tool {
    let annotations = ToolAnnotations::with_title(spec.title)
        .read_only(spec.hints.read_only)
        .destructive(spec.hints.destructive)
        .idempotent(spec.hints.idempotent)
        .open_world(spec.hints.open_world);
    let mut tool = Tool::new(
        spec.name.clone(),
        spec.description.clone(),
        spec.input_schema.clone(),
    );
    tool.title = Some(spec.title.to_owned());
    tool.output_schema = Some(Arc::new(spec.output_schema.clone()));
    tool.annotations = Some(annotations);
    tool
}

fn to_rmcp_result(outcome: Outcome) -> CallToolResult {
    let content = outcome
        .content
        .into_iter()
        .map(|item| match item {
            ContentItem::Text(text) => ContentBlock::text(text),
            ContentItem::Image { data, mime_type } => ContentBlock::image(data, mime_type),
        })
        .collect();
    let mut result = if outcome.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    result.structured_content = Some(Value::Object(outcome.structured));
    result
}

fn not_offered(what: &str) -> McpError {
    McpError::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("this server offers no {what}; it offers tools only"),
        None,
    )
}

impl ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder().enable_tools().build();
        let implementation =
            Implementation::new("toolgate", env!("CARGO_PKG_VERSION")).with_title("toolgate");
        ServerConfig::new(capabilities).with_server_info(implementation).with_instructions(format!(
            "Three tools: {}. Read-only queries go to the read tool, code and state changes to the write tool, \
             language models and web search to the AI tool. Each tools/call is one metered call.",
            self.tool_names
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(self.tool_list())
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|tool| tool.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(caller) = caller_of(&context) else {
            tracing::error!("tools/call reached the MCP handler without an authenticated caller");
            return Err(McpError::new(
                ErrorCode(INTERNAL_ERROR as i32),
                "internal error: no caller",
                None,
            ));
        };
        let spec = self.app.registry.tool(&request.name).cloned();
        match spec {
            Some(spec) => self
                .call_registered(&spec, request, &caller, &context)
                .await
                .map(Into::into),
            None => {
                #[cfg(feature = "conformance-fixtures")]
                if let Some(result) = crate::fixtures::call(&request, &context).await {
                    return Ok(result.into());
                }
                self.metrics.rpc_error(METHOD_NOT_FOUND);
                let shown: String = request
                    .name
                    .chars()
                    .filter(|c| !c.is_control())
                    .take(64)
                    .collect();
                Err(McpError::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!(
                        "unknown tool `{shown}`; this server's tools are {}",
                        self.tool_names
                    ),
                    None,
                ))
            }
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Err(not_offered("prompts"))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Err(not_offered("resources"))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Err(not_offered("resource templates"))
    }
}

#[cfg(test)]
#[path = "handler_tests.rs"]
mod tests;
