//! The rmcp adapter: `tools/list` from the registry, `tools/call` through validation, metering
//! and the dispatcher. The caller's account arrives in the HTTP request's extensions, put there
//! by the authentication step in front of rmcp; nothing in the JSON-RPC message is trusted for it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    ClientCapabilities, GetTaskParams, GetTaskResult, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations, UpdateTaskParams,
};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;
use toolgate_app::{App, CallIo, ProgressSink, ToolSpec};
use toolgate_domain::Account;

use tokio_util::sync::CancellationToken;

use crate::answer::{Answered, Answerer, TaskSupport};
use crate::error::{RpcCode, mcp_error};
use crate::mcp_sessions::{CallCancel, CallOrigin};
use crate::metrics::Metrics;

/// The authenticated account, inserted into request extensions before rmcp sees the request.
#[derive(Clone, Debug)]
pub struct Caller(pub Arc<Account>);

/// The MCP server: one clone per session (legacy) or per request (stateless).
#[derive(Clone)]
pub struct McpHandler {
    answerer: Answerer,
    tools: Arc<Vec<Tool>>,
    tool_names: Arc<String>,
}

const TOOL_LIST_TTL_MS: u64 = 300_000;

/// Progress notifications queued per call before newer ones are dropped: progress is advisory,
/// and a flood of output must not grow memory without bound.
const PROGRESS_QUEUE: usize = 64;

/// How long the answer waits for the progress reports still queued to go out: they normally
/// take microseconds (an in-memory stream); a client that stops reading loses the rest.
const PROGRESS_FLUSH: Duration = Duration::from_secs(2);

/// Sends a call's progress reports to its client as `notifications/progress`, in order, from a
/// task of its own (the capability reporting them must never wait on the network), all of them
/// before the call's answer ([`ProgressRelay::finish`]).
struct ProgressRelay {
    queue: tokio::sync::mpsc::Sender<(f64, String)>,
    task: tokio::task::JoinHandle<()>,
}

impl ProgressRelay {
    fn start(peer: Peer<RoleServer>, token: ProgressToken) -> Self {
        let (queue, mut reports) = tokio::sync::mpsc::channel::<(f64, String)>(PROGRESS_QUEUE);
        let task = tokio::spawn(async move {
            while let Some((progress, message)) = reports.recv().await {
                let note =
                    ProgressNotificationParam::new(token.clone(), progress).with_message(message);
                if peer.notify_progress(note).await.is_err() {
                    break; // the client is gone
                }
            }
        });
        Self { queue, task }
    }

    /// Sends what is still queued, before the answer: rmcp answers as JSON, without the
    /// stream, when no notification went out first, and ends the stream with the answer.
    async fn finish(self) {
        let Self { queue, mut task } = self;
        drop(queue);
        if tokio::time::timeout(PROGRESS_FLUSH, &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
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
        let mut tools: Vec<Tool> = app.tools().iter().map(to_rmcp_tool).collect();
        let names: Vec<String> = tools.iter().map(|t| format!("`{}`", t.name)).collect();
        #[cfg(feature = "conformance-fixtures")]
        tools.extend(crate::fixtures::tools());
        #[cfg(feature = "conformance-fixtures")]
        tools.extend(crate::fixtures_tasks::tools());
        Self {
            answerer: Answerer::new(app, metrics),
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

    /// The `tools/list` result for `caller`: the tools its key may call.
    pub fn tool_list_for(&self, caller: &Account) -> ListToolsResult {
        let calls = self.answerer.app().calls();
        if calls.may_call_all(caller) {
            return self.tool_list();
        }
        let tools = self
            .tools
            .iter()
            .filter(|tool| calls.may_call(caller, &tool.name))
            .cloned()
            .collect();
        ListToolsResult::with_all_items(tools)
            .with_ttl_ms(TOOL_LIST_TTL_MS)
            .with_cache_scope(CacheScope::Private)
    }

    /// Makes the call through the app and translates its answer; counts it.
    async fn call_tool_of(
        &self,
        request: CallToolRequestParams,
        caller: &Account,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        if !self.is_tool(&request.name) {
            return self.unknown_tool(&request, context).await;
        }
        let started = Instant::now();
        let progress = context
            .meta
            .get_progress_token()
            .map(|token| ProgressRelay::start(context.peer.clone(), token));
        let cancel = cancellation_of(context);
        let origin = origin_of(context);
        let io = CallIo {
            progress: progress.as_ref().map(|p| p as &dyn ProgressSink),
            cancel: Some(&cancel),
            result_chars: result_chars_of(context),
            client: origin.client.as_deref(),
            session: origin.session.as_deref(),
            ..CallIo::default()
        };
        let answered = self
            .answer(caller, &request.name, request.arguments, io, started)
            .await;
        if let Some(progress) = progress {
            progress.finish().await;
        }
        answered.map(Answered::into_rmcp)
    }

    /// What makes its calls and counts them.
    pub(crate) fn answerer(&self) -> &Answerer {
        &self.answerer
    }

    /// Whether `name` may run as an MCP task, and must.
    pub(crate) fn task_support(&self, name: &str) -> TaskSupport {
        #[cfg(feature = "conformance-fixtures")]
        if let Some(support) = crate::fixtures_tasks::task_support(name) {
            return support;
        }
        self.answerer.task_support(name)
    }

    /// Whether `name` is one of the three tools (not a fixture's, not unknown).
    pub(crate) fn is_tool(&self, name: &str) -> bool {
        self.answerer.is_tool(name)
    }

    /// Makes the call through the app and counts it (see [`Answerer::answer`]).
    pub(crate) async fn answer(
        &self,
        caller: &Account,
        name: &str,
        arguments: Option<serde_json::Map<String, Value>>,
        io: CallIo<'_>,
        started: Instant,
    ) -> Result<Answered, McpError> {
        self.answerer
            .answer(caller, name, arguments, io, started)
            .await
    }

    /// A name no tool has: a conformance fixture's, or an error naming the real tools.
    #[allow(clippy::unused_async)] // awaits only with the conformance fixtures
    async fn unknown_tool(
        &self,
        request: &CallToolRequestParams,
        #[allow(unused_variables)] context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        #[cfg(feature = "conformance-fixtures")]
        if let Some(result) = crate::fixtures::call(request, context).await {
            return Ok(result);
        }
        let shown: String = request
            .name
            .chars()
            .filter(|c| !c.is_control())
            .take(64)
            .collect();
        let err = mcp_error(
            RpcCode::MethodNotFound,
            format!(
                "unknown tool `{shown}`; this server's tools are {}",
                self.tool_names
            ),
        );
        self.answerer.metrics().rpc_error(i64::from(err.code.0));
        Err(err)
    }
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

/// Who makes the call and where: the request's [`CallOrigin`] (a legacy session's), else the
/// client a 2026-07-28 request names in its `_meta`.
fn origin_of(ctx: &RequestContext<RoleServer>) -> CallOrigin {
    let mut origin = ctx
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<CallOrigin>())
        .cloned()
        .unwrap_or_default();
    if origin.client.is_none() {
        origin.client = CallOrigin::client_of(ctx.meta.get("io.modelcontextprotocol/clientInfo"));
    }
    origin
}

fn caller_of(ctx: &RequestContext<RoleServer>) -> Option<Arc<Account>> {
    let parts = ctx.extensions.get::<http::request::Parts>()?;
    parts
        .extensions
        .get::<Caller>()
        .map(|caller| caller.0.clone())
}

fn caller_or_error(ctx: &RequestContext<RoleServer>) -> Result<Arc<Account>, McpError> {
    caller_of(ctx).ok_or_else(|| {
        tracing::error!("a request reached the MCP handler without an authenticated caller");
        mcp_error(RpcCode::InternalError, "internal error: no caller")
    })
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

/// The most characters the client takes inline, as its request's `_meta` says.
pub(crate) fn result_chars_of(context: &RequestContext<RoleServer>) -> Option<usize> {
    crate::answer::result_chars(context.meta.get(crate::answer::RESULT_CHARS_KEY))
}

fn not_offered(what: &str) -> McpError {
    mcp_error(
        RpcCode::MethodNotFound,
        format!("this server offers no {what}; it offers tools only"),
    )
}

impl ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        // the 2026-07-28 tasks extension; 2025-11-25's `tasks` slot is added to `initialize`
        // answers by `tasks_v1`, as rmcp knows only the extension
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tasks()
            .build();
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
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let caller = caller_or_error(&context)?;
        Ok(self.tool_list_for(&caller))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|tool| tool.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let caller = caller_or_error(&context)?;
        #[cfg(feature = "conformance-fixtures")]
        if let Some(answer) =
            crate::fixtures_tasks::call(&self.answerer, &caller, &request, &context).await
        {
            return answer;
        }
        let declared = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        match self.task_support(&request.name) {
            TaskSupport::Required if !declared => {
                Err(McpError::missing_required_client_capability(
                    ClientCapabilities::builder().enable_tasks().build(),
                ))
            }
            TaskSupport::Optional | TaskSupport::Required if declared => {
                let gone = cancellation_of(&context);
                crate::tasks_v2::call(
                    &self.answerer,
                    caller,
                    request.name.into_owned(),
                    request.arguments,
                    result_chars_of(&context),
                    gone,
                )
                .await
            }
            _ => self
                .call_tool_of(request, &caller, &context)
                .await
                .map(Into::into),
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let caller = caller_or_error(&context)?;
        crate::tasks_v2::get(&self.answerer, &caller, &request).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let caller = caller_or_error(&context)?;
        crate::tasks_v2::update(&self.answerer, &caller, request).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let caller = caller_or_error(&context)?;
        crate::tasks_v2::cancel(&self.answerer, &caller, &request).await
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
