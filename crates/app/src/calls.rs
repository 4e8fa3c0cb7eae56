//! One tool call, start to finish, whoever makes it (an MCP client through the server today,
//! code inside a session tomorrow): the arguments checked, the call admitted and charged, the
//! capabilities run (alongside the charge's commit when none of them reads metering state,
//! after it otherwise), and the answer held until the charge is durable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use tokio_util::sync::CancellationToken;
use toolgate_domain::{Account, Admission};
use toolgate_store::Decided;

use crate::capability::{
    CallContext, CallScratch, ContentItem, JsonObject, ProgressSink, ToolKind,
};
use crate::metering::{Meter, MeterError};
use crate::registry::{Registry, ToolOutcome};
use crate::turns::Budgets;

/// What the caller's side gives a call: where progress goes and what cancels it.
#[derive(Default, Clone, Copy)]
pub struct CallIo<'a> {
    /// Where to report progress, if the caller wants it.
    pub progress: Option<&'a dyn ProgressSink>,
    /// Cancelled when the caller cancels the call or goes away.
    pub cancel: Option<&'a CancellationToken>,
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

/// The tool-call use case over the registry and the meter.
pub struct ToolCalls {
    meter: Arc<Meter>,
    registry: Arc<Registry>,
    /// Turns of outbound and heavy work, taken before a call is charged.
    budgets: Arc<Budgets>,
    /// Numbers calls, so capabilities of one call can share state (a call-scoped session).
    next_call: AtomicU64,
    /// This use case, for the upcalls of the runs it starts (which are calls of their own).
    this: Weak<ToolCalls>,
}

impl ToolCalls {
    /// Calls of `registry`'s tools, charged by `meter`, their work taking turns of `budgets`.
    pub fn new(meter: Arc<Meter>, registry: Arc<Registry>, budgets: Arc<Budgets>) -> Arc<Self> {
        Arc::new_cyclic(|this| Self {
            meter,
            registry,
            budgets,
            next_call: AtomicU64::new(1),
            this: this.clone(),
        })
    }

    /// The full name of the tool of `kind` (`svc_read`, …), if the registry has it.
    pub fn tool_name(&self, kind: ToolKind) -> Option<&str> {
        self.registry
            .tools()
            .iter()
            .find(|spec| spec.kind == kind)
            .map(|spec| spec.name.as_str())
    }

    /// Calls `tool` with `args` for `caller`.
    pub async fn call(
        &self,
        caller: &Account,
        tool: &str,
        args: Option<JsonObject>,
        io: CallIo<'_>,
    ) -> Result<Answer, CallError> {
        let spec = self.registry.tool(tool).ok_or(CallError::UnknownTool)?;
        let plan = match self.registry.plan(spec.kind, args) {
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
        let Decided {
            admission,
            recorded,
        } = decided;
        if admission == Admission::Refused {
            return Err(CallError::Refused(self.meter.refusal_message()));
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
        let ctx = CallContext {
            account: caller,
            tool: &spec.name,
            call_id: self.next_call.fetch_add(1, Ordering::Relaxed),
            calls: &self.this,
            scratch: &scratch,
            progress: io.progress,
            cancel: io.cancel,
        };
        let outcome = self.registry.run(&plan, &ctx).await;
        // The charge's commit ran alongside the call; the answer waits for it. If it failed,
        // the call has run all the same and goes uncharged: its output is still the caller's.
        if let Some(recorded) = overlapping
            && let Err(err) = recorded.wait().await
        {
            tracing::error!(error = %err, tool = %spec.name, "a call ran but its charge could not be recorded; it is free");
        }
        Ok(Answer::Ran(outcome))
    }
}

/// A tool error whose whole content is `message`.
fn error_text(message: String) -> ToolOutcome {
    ToolOutcome {
        content: vec![ContentItem::Text(message)],
        structured: JsonObject::new(),
        is_error: true,
    }
}

#[cfg(test)]
#[path = "calls_tests.rs"]
mod tests;
