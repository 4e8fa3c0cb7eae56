//! One tool call, start to finish, whoever makes it (an MCP client through the server, code in a
//! session through an upcall): the arguments checked, the call admitted and charged, the
//! capabilities run (alongside the charge's commit when none of them reads metering state,
//! after it otherwise), their output redacted of every secret they opened, and the answer held
//! until the charge is durable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use async_trait::async_trait;
use toolgate_domain::{Account, Admission, NamedKey};
use toolgate_sandbox::stages::{self, Stage};
use toolgate_store::Decided;

pub use crate::capability::{Answer, CallError, CallIo};
use crate::capability::{
    CallContext, CallScratch, CallSecrets, ContentItem, JsonObject, MakeCall, ProgressSink,
    ToolKind, ToolOutcome,
};
use crate::history::{CallFacts, CallLog};
use crate::metering::Meter;
use crate::redaction::{RedactedProgress, redact_ran};
use crate::registry::{Registry, merge};
use crate::spend_alerts::SpendWatch;
use crate::turns::Budgets;

/// The tool-call use case over the registry and the meter.
pub struct ToolCalls {
    meter: Arc<Meter>,
    registry: Arc<Registry>,
    /// Turns of outbound and heavy work, taken before a call is charged.
    budgets: Arc<Budgets>,
    /// Numbers calls, so capabilities of one call can share state (a call-scoped session).
    next_call: AtomicU64,
    /// Told of each paid or capped call, to check the account's spend alerts off the call's path.
    spend_watch: OnceLock<SpendWatch>,
    /// Where each call's record goes; `None`: history is off.
    history: Option<Arc<CallLog>>,
}

impl ToolCalls {
    /// Calls of `registry`'s tools, charged by `meter`, their work taking turns of `budgets`.
    /// Each call is recorded in `history`, when given.
    pub fn new(
        meter: Arc<Meter>,
        registry: Arc<Registry>,
        budgets: Arc<Budgets>,
        history: Option<Arc<CallLog>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            meter,
            registry,
            budgets,
            next_call: AtomicU64::new(1),
            spend_watch: OnceLock::new(),
            history,
        })
    }

    /// From now on, paid and capped calls tell `watch` of their account (once; later calls of
    /// this are ignored).
    pub fn watch_spend(&self, watch: SpendWatch) {
        let _first = self.spend_watch.set(watch);
    }

    /// Tells the spend watch, if any, that the account's spend moved or met a cap: a bounded
    /// queue that never blocks the call.
    fn spend_changed(&self, caller: &Account) {
        if let Some(watch) = self.spend_watch.get() {
            watch.notify(&caller.id);
        }
    }

    /// The full name of the tool of `kind` (`svc_read`, …), if the registry has it.
    pub fn tool_name(&self, kind: ToolKind) -> Option<&str> {
        self.registry
            .tools()
            .iter()
            .find(|spec| spec.kind == kind)
            .map(|spec| spec.name.as_str())
    }

    /// Whether `caller`'s key may call the tool named `tool` (what `tools/list` shows it): a
    /// tool outside the registry is open only to a key whose scope names no tools.
    pub fn may_call(&self, caller: &Account, tool: &str) -> bool {
        let Some(key) = caller.via.named_key() else {
            return true;
        };
        match self.registry.tool(tool) {
            Some(spec) => key.scope.allows_tool(spec.kind.suffix()),
            None => key.scope.tools.is_empty(),
        }
    }

    /// Whether `caller` may call every tool, so that the one `tools/list` answer rendered for
    /// everybody is also its own.
    pub fn may_call_all(&self, caller: &Account) -> bool {
        caller
            .via
            .named_key()
            .is_none_or(|key| key.scope.tools.is_empty())
    }

    /// Why `caller`'s key may not make this call, naming what it may use; `None`: it may.
    fn scope_refusal(
        &self,
        caller: &Account,
        kind: ToolKind,
        args: Option<&JsonObject>,
    ) -> Option<String> {
        let key = caller.via.named_key()?;
        if !key.scope.allows_tool(kind.suffix()) {
            return Some(format!(
                "The key \"{}\" may not call this tool; it may call only {}.",
                key.name,
                self.allowed_tools(key)
            ));
        }
        let fields = args
            .into_iter()
            .flat_map(|args| args.keys().map(String::as_str));
        let refused = key.scope.refused_field(fields)?;
        Some(format!(
            "The key \"{}\" may not use the field `{refused}`; it may use only the fields {}.",
            key.name,
            key.scope
                .fields
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }

    fn allowed_tools(&self, key: &NamedKey) -> String {
        self.registry
            .tools()
            .iter()
            .filter(|spec| key.scope.allows_tool(spec.kind.suffix()))
            .map(|spec| format!("`{}`", spec.name))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Calls `tool` with `args` for `caller`, and records the call in the history. Work of the
    /// call that makes calls of its own (an upcall from code in a session) makes them through
    /// this same use case, held only while the call runs.
    pub async fn call(
        self: &Arc<Self>,
        caller: &Account,
        tool: &str,
        args: Option<JsonObject>,
        io: CallIo<'_>,
    ) -> Result<Answer, CallError> {
        let Some(history) = &self.history else {
            let answered = self
                .run(caller, tool, args, io, &mut CallFacts::default())
                .await;
            stages::mark(Stage::Ran);
            return answered;
        };
        let started = (toolgate_store::now_millis(), Instant::now());
        let kept = args.clone();
        let mut facts = CallFacts::default();
        let answered = self.run(caller, tool, args, io, &mut facts).await;
        stages::mark(Stage::Ran);
        history.record(caller, tool, kept, &io, started, &answered, facts);
        stages::mark(Stage::Recorded);
        answered
    }

    async fn run(
        self: &Arc<Self>,
        caller: &Account,
        tool: &str,
        args: Option<JsonObject>,
        io: CallIo<'_>,
        facts: &mut CallFacts,
    ) -> Result<Answer, CallError> {
        let spec = self.registry.tool(tool).ok_or(CallError::UnknownTool)?;
        // before anything else: a key's scope is the same whoever calls with it, upcalls included
        if let Some(refusal) = self.scope_refusal(caller, spec.kind, args.as_ref()) {
            return Ok(Answer::NotAllowed(error_text(refusal)));
        }
        let plan = match self.registry.plan_as(spec.kind, args, io.as_task) {
            Ok(plan) => plan,
            Err(failure) => return Ok(Answer::InvalidArguments(error_text(failure.message))),
        };
        // before the charge: a call that finds no turn in time is told so, and is free
        let _turns = match self
            .budgets
            .take(plan.turn_kinds(), &caller.id.to_string())
            .await
        {
            Ok(turns) => turns,
            Err(busy) => return Ok(Answer::Busy(error_text(busy.to_string()))),
        };
        let decided = self.meter.admit(caller, &spec.name).await.map_err(|err| {
            tracing::error!(error = %err, tool = %spec.name, "admission failed");
            CallError::NotRecorded(err)
        })?;
        stages::mark(Stage::Admitted);
        let Decided {
            admission,
            usage,
            recorded,
        } = decided;
        match admission {
            Admission::Refused => return Err(CallError::Refused(self.meter.refusal_message())),
            Admission::Capped(room) => {
                self.spend_changed(caller);
                return Err(CallError::Refused(self.meter.cap_message(&room)));
            }
            Admission::Free { .. } | Admission::Paid { .. } => {}
        }
        let paid = matches!(admission, Admission::Paid { .. });
        facts.paid = paid;
        if let Some(admitted) = io.admitted {
            admitted.notify_one();
        }
        // Work that reads metering state must see this call's charge: it waits for the commit.
        let overlapping = if plan.overlaps_commit() {
            Some(recorded)
        } else {
            recorded.wait().await.map_err(|err| {
                tracing::error!(error = %err, tool = %spec.name, "admission failed");
                CallError::NotRecorded(err.into())
            })?;
            None
        };
        // dropped when this call returns, after the commit: a call-scoped session closes then
        let scratch = CallScratch::default();
        let secrets = CallSecrets::default();
        let progress = io
            .progress
            .map(|sink| RedactedProgress::new(sink, &secrets));
        let calls: Arc<dyn MakeCall> = self.clone();
        let ctx = CallContext {
            account: caller,
            tool: &spec.name,
            call_id: self.next_call.fetch_add(1, Ordering::Relaxed),
            usage_after: usage,
            calls: &calls,
            scratch: &scratch,
            secrets: &secrets,
            progress: progress.as_ref().map(|p| p as &dyn ProgressSink),
            cancel: io.cancel,
            as_task: io.as_task,
            result_chars: io.result_chars,
        };
        let mut ran = self.registry.run(&plan, &ctx).await;
        // the one place a call's output is redacted, of every value any capability opened
        if let Some(redactor) = secrets.redactor() {
            for part in &mut ran {
                redact_ran(part, &redactor);
            }
            facts.redactor = Some(redactor);
        }
        let outcome = merge(ran);
        // The charge's commit ran alongside the call; the answer waits for it. If it failed,
        // the call has run all the same and goes uncharged: its output is still the caller's.
        if let Some(recorded) = overlapping
            && let Err(err) = recorded.wait().await
        {
            tracing::error!(error = %err, tool = %spec.name, "a call ran but its charge could not be recorded; it is free");
        }
        // after the commit, so that the check reads this call's charge
        if paid {
            self.spend_changed(caller);
        }
        Ok(Answer::Ran(outcome))
    }
}

#[async_trait]
impl MakeCall for ToolCalls {
    async fn make_call(
        self: Arc<Self>,
        caller: &Account,
        kind: ToolKind,
        args: JsonObject,
        io: CallIo<'_>,
    ) -> Result<Answer, CallError> {
        let tool = self
            .tool_name(kind)
            .ok_or(CallError::UnknownTool)?
            .to_owned();
        self.call(caller, &tool, Some(args), io).await
    }
}

/// A tool error whose whole content is `message`.
fn error_text(message: String) -> ToolOutcome {
    ToolOutcome {
        content: vec![ContentItem::Text(message)],
        structured: JsonObject::new(),
        is_error: true,
        typed: Vec::new(),
    }
}

#[cfg(test)]
#[path = "calls_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "calls_scope_tests.rs"]
mod scope_tests;
