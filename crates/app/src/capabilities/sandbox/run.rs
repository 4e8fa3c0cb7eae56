//! `python` (`code`) and `bash` on the write tool, and `upload` (`files` alone).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use toolgate_sandbox::{
    OUTPUT_QUEUE, OutputChunk, OutputStream, RunOutcome, RunRequest, SandboxSessionsError, Work,
};

use super::render::{output_schema, render, session_note, session_record};
use super::{
    Asked, MAX_SOURCE_BYTES, Sandbox, Scope, account_key, failure, files_field, uploaded_files,
};
use crate::capability::{
    CallContext, Capability, ContentItem, Failure, Field, JsonObject, Output, ProgressSink,
    ToolKind,
};
use crate::schema::FieldKind;
use crate::secrets::OpenedSecrets;
use toolgate_domain::SecretName;
use toolgate_vault::{Redactor, StreamRedactor};

/// Longest progress message: one notification carries at most this much output.
const MAX_PROGRESS_MESSAGE: usize = 8 * 1024;

/// Which interpreter a [`Runner`] drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Language {
    Python,
    Bash,
}

/// Runs `code` (Python, notebook semantics) or `bash` (a command line) in a session.
pub struct Runner {
    sandbox: Arc<Sandbox>,
    language: Language,
}

impl Runner {
    /// The `python` capability (`code`).
    pub(super) fn python(sandbox: Arc<Sandbox>) -> Self {
        Self {
            sandbox,
            language: Language::Python,
        }
    }

    /// The `bash` capability (`bash`).
    pub(super) fn bash(sandbox: Arc<Sandbox>) -> Self {
        Self {
            sandbox,
            language: Language::Bash,
        }
    }

    fn field(&self) -> &'static str {
        match self.language {
            Language::Python => "code",
            Language::Bash => "bash",
        }
    }

    /// This capability's place in a call's order: upload 0, python 1, bash 2.
    /// Whether this capability writes the call's files: the first of the call's sandbox runs.
    fn uploads(&self, args: &JsonObject) -> bool {
        match self.language {
            Language::Python => true,
            Language::Bash => !Asked::of(args).code,
        }
    }
}

#[async_trait]
impl Capability for Runner {
    fn key(&self) -> &'static str {
        match self.language {
            Language::Python => "python",
            Language::Bash => "bash",
        }
    }

    fn tool(&self) -> ToolKind {
        ToolKind::Write
    }

    fn summary(&self) -> &'static str {
        match self.language {
            Language::Python if self.sandbox.has_network() => {
                "`code`: Python 3 with numpy, pandas and matplotlib, run as a notebook cell in a \
                 sandbox: output, the last expression's value, figures (PNG), DataFrames as \
                 tables, errors with tracebacks. Web via a proxy \
                 (requests, httpx, pip); `import toolgate` calls this service (metered). \
                 With `session_id`, variables, imports and files persist."
            }
            Language::Python => {
                "`code`: Python 3 with numpy, pandas and matplotlib, run as a notebook cell in a \
                 sandbox: output, the last expression's value, figures (PNG), DataFrames as \
                 tables, errors with tracebacks. No network; \
                 `import toolgate` calls this service (metered). With `session_id`, variables, \
                 imports and files persist."
            }
            Language::Bash => {
                "`bash`: a command line run by /bin/bash in the sandbox and workspace of `code` (Python \
                 runs first when both are given); a non-zero exit status is an error that still \
                 shows the output."
            }
        }
    }

    fn fields(&self) -> Vec<Field> {
        let own = match self.language {
            Language::Python => Field {
                name: "code",
                kind: FieldKind::String {
                    max_len: MAX_SOURCE_BYTES,
                },
                description: "Python source to run; the value of a last bare expression is \
                              shown, as in a notebook",
            },
            Language::Bash => Field {
                name: "bash",
                kind: FieldKind::String {
                    max_len: MAX_SOURCE_BYTES,
                },
                description: "a shell command line, run by /bin/bash in the session's workspace",
            },
        };
        let mut fields = vec![
            own,
            self.sandbox.session_id.clone(),
            self.sandbox.timeout.clone(),
            files_field(),
        ];
        if self.sandbox.secrets.is_some() {
            fields.push(Field {
                name: "secrets",
                kind: FieldKind::SecretNames {
                    max_items: MAX_SECRETS_PER_RUN,
                },
                description: "names of vault secrets (stored with secret_set) to set as \
                              environment variables of the same name for this run only; \
                              wherever the run prints a value, the result shows \
                              [REDACTED:NAME]",
            });
        }
        fields
    }

    fn output_schema(&self) -> Value {
        output_schema()
    }

    /// Session work does not read metering state, so it starts while the charge commits.
    fn overlaps_commit(&self) -> bool {
        true
    }

    fn wants(&self, args: &JsonObject) -> bool {
        args.contains_key(self.field())
    }

    /// A `timeout_s` past a waiting call's ceiling is for tasks only: refused before metering.
    fn validate_as(&self, args: &JsonObject, as_task: bool) -> Result<(), String> {
        let timeout_s = args.get("timeout_s").and_then(Value::as_u64);
        self.sandbox
            .limits
            .for_call_as(timeout_s, as_task)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn run(&self, ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure> {
        let scope = Scope::of(args, ctx, &self.sandbox);
        let timeout_s = args.get("timeout_s").and_then(Value::as_u64);
        let limits = self
            .sandbox
            .limits
            .for_call_as(timeout_s, ctx.as_task)
            .map_err(|e| Failure::new(e.to_string()))?;
        let source = args
            .get(self.field())
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let work = match self.language {
            Language::Python => Work::Python { code: source },
            Language::Bash => Work::Bash { command: source },
        };
        let files = if self.uploads(args) {
            uploaded_files(args)?
        } else {
            Vec::new()
        };
        let timeout = limits.timeout;
        let opened = self.open_secrets(ctx, args).await?;
        let egress = self.sandbox.egress_grant(ctx).await?;
        if let (Some(session), Some(grant)) = (scope.caller_id(), &egress) {
            // answers the proxy passed in may echo a bound secret into the session's files
            let bound: Vec<SecretName> = grant
                .secrets
                .iter()
                .filter_map(|s| SecretName::parse(&s.name).ok())
                .collect();
            if !bound.is_empty() {
                self.sandbox
                    .expose(&account_key(ctx), session, &bound)
                    .await;
            }
        }
        let request = RunRequest {
            egress,
            files,
            env: opened
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_owned()))
                .collect(),
            cancel: ctx.cancel.cloned(),
            upcalls: Some(crate::upcalls::upcall_handler(ctx)),
            spill: self.sandbox.keeps_files(scope.caller_id()),
            ..RunRequest::new(
                account_key(ctx),
                scope.id().map(str::to_owned),
                work,
                limits,
            )
        };
        // what the run shows is redacted (by the call) of the values it was given, and of what
        // earlier runs of its session were given (it keeps them in variables, files, its history)
        ctx.secrets
            .add(opened.iter().map(|(name, value)| (name, value.as_bytes())));
        drop(opened);
        if let Some(session) = scope.caller_id() {
            self.sandbox.register_given(ctx, session).await;
        }
        let call = self.run_streaming(request, ctx).await.map_err(failure)?;
        if let (Some(session), Some(restored)) = (scope.caller_id(), &call.restored) {
            // a session restored in this process after a restart: what it was given before
            // is known from its checkpoint (names only), and redacted from here on
            let names: Vec<SecretName> = restored
                .env_names
                .iter()
                .filter_map(|n| SecretName::parse(n).ok())
                .collect();
            if !names.is_empty() {
                self.sandbox
                    .expose(&account_key(ctx), session, &names)
                    .await;
                self.sandbox.register_given(ctx, session).await;
            }
        }
        let kept = self
            .sandbox
            .keep(ctx, scope.caller_id(), &call.outcome)
            .await;
        Ok(render(&call, scope.caller_id(), timeout, kept))
    }
}

/// Most secrets one run may name.
const MAX_SECRETS_PER_RUN: usize = 32;

impl Runner {
    /// The values of the secrets the call names in `secrets`.
    async fn open_secrets(
        &self,
        ctx: &CallContext<'_>,
        args: &JsonObject,
    ) -> Result<OpenedSecrets, Failure> {
        let (Some(secrets), Some(Value::Array(names))) =
            (&self.sandbox.secrets, args.get("secrets"))
        else {
            return Ok(OpenedSecrets::default());
        };
        let names: Vec<SecretName> = names
            .iter()
            .filter_map(|n| n.as_str().and_then(|n| SecretName::parse(n).ok()))
            .collect();
        // a secret bound to hosts never enters a session: the proxy adds it at the edge
        let bound = secrets
            .bound_hosts(&ctx.account.id)
            .await
            .map_err(|e| Failure::new(e.to_string()))?;
        if let Some((name, hosts)) = bound.iter().find(|(name, _)| names.contains(name)) {
            return Err(Failure::new(format!(
                "the secret {name} is bound to hosts ({}): it never enters a session; write \
                 {{{{secret:{name}}}}} in a header of a request to one of them and the network \
                 proxy adds it on the way out",
                hosts.join(", ")
            )));
        }
        let opened = secrets
            .open(&ctx.account.id, &names)
            .await
            .map_err(|e| Failure::new(e.to_string()))?;
        // files the run writes may hold the values: reads of this session redact them too
        if let Some(session) = args.get("session_id").and_then(Value::as_str) {
            self.sandbox
                .expose(&account_key(ctx), session, &names)
                .await;
        }
        Ok(opened)
    }

    /// Runs `request`, its output passed on as progress while it runs when the caller wants
    /// progress (every chunk before this returns), redacted per stream with the call's redactor.
    async fn run_streaming(
        &self,
        mut request: RunRequest,
        ctx: &CallContext<'_>,
    ) -> Result<RunOutcome, SandboxSessionsError> {
        let Some(sink) = ctx.progress else {
            return self.sandbox.sessions.run(request).await;
        };
        let redactor = ctx.secrets.stream_redactor();
        let (output, mut chunks) = mpsc::channel(OUTPUT_QUEUE);
        request.output = Some(output);
        let mut relay = OutputProgress::new(sink, &redactor);
        let result = {
            let running = self.sandbox.sessions.run(request);
            tokio::pin!(running);
            loop {
                tokio::select! {
                    biased;
                    Some(chunk) = chunks.recv() => relay.relay(&chunk),
                    result = &mut running => break result,
                }
            }
        };
        // every chunk is sent before the run returns: pass on what is still queued
        while let Ok(chunk) = chunks.try_recv() {
            relay.relay(&chunk);
        }
        relay.finish();
        result
    }
}

/// Passes streamed output on as progress notifications, redacted per stream: a value split
/// across two writes is held back until it can be told apart.
struct OutputProgress<'a> {
    sink: &'a dyn ProgressSink,
    bytes: u64,
    stdout: StreamRedactor<'a>,
    stderr: StreamRedactor<'a>,
}

impl<'a> OutputProgress<'a> {
    fn new(sink: &'a dyn ProgressSink, redactor: &'a Redactor) -> Self {
        Self {
            sink,
            bytes: 0,
            stdout: redactor.stream(),
            stderr: redactor.stream(),
        }
    }
}

/// `upload`: `files` (with `session_id`) and nothing else, to prepare a session's workspace.
pub struct Upload {
    sandbox: Arc<Sandbox>,
}

impl Upload {
    pub(super) fn new(sandbox: Arc<Sandbox>) -> Self {
        Self { sandbox }
    }
}

#[async_trait]
impl Capability for Upload {
    fn key(&self) -> &'static str {
        "upload"
    }

    fn tool(&self) -> ToolKind {
        ToolKind::Write
    }

    fn summary(&self) -> &'static str {
        "`files` with `session_id` alone: writes files into the session's workspace."
    }

    fn fields(&self) -> Vec<Field> {
        vec![files_field(), self.sandbox.session_id.clone()]
    }

    fn output_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "files": {"type": "array", "items": {"type": "object", "properties": {
                "path": {"type": "string"}, "bytes": {"type": "integer"}}}},
            "session": {"type": "object"},
        }, "required": ["files"]})
    }

    /// Session work does not read metering state, so it starts while the charge commits.
    fn overlaps_commit(&self) -> bool {
        true
    }

    fn wants(&self, args: &JsonObject) -> bool {
        Asked::of(args).upload
    }

    fn validate(&self, args: &JsonObject) -> Result<(), String> {
        if args.contains_key("session_id") {
            Ok(())
        } else {
            Err(
                "`files` without `code` or `bash` needs a `session_id`: without one the files \
                 would vanish with the call's fresh session"
                    .to_owned(),
            )
        }
    }

    async fn run(&self, ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure> {
        let scope = Scope::of(args, ctx, &self.sandbox);
        let files = uploaded_files(args)?;
        let limits = self
            .sandbox
            .limits
            .for_call(None)
            .map_err(|e| Failure::new(e.to_string()))?;
        let listed: Vec<Value> = files
            .iter()
            .map(|f| json!({"path": f.path, "bytes": f.content.len()}))
            .collect();
        let count = files.len();
        let work = Work::Python {
            code: String::new(),
        };
        let call = self
            .sandbox
            .sessions
            .run(RunRequest {
                files,
                cancel: ctx.cancel.cloned(),
                ..RunRequest::new(
                    account_key(ctx),
                    scope.id().map(str::to_owned),
                    work,
                    limits,
                )
            })
            .await
            .map_err(failure)?;
        let mut content = Vec::new();
        content.extend(session_note(&call, scope.caller_id()).map(ContentItem::Text));
        content.push(ContentItem::Text(format!(
            "wrote {count} file(s) into the workspace"
        )));
        Ok(Output {
            content,
            structured: json!({"files": listed,
                "session": session_record(&call, scope.caller_id(), None)}),
            is_error: false,
            ..Output::default()
        })
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl OutputProgress<'_> {
    fn relay(&mut self, chunk: &OutputChunk) {
        self.bytes += chunk.data.len() as u64;
        let data = cut(&chunk.data, MAX_PROGRESS_MESSAGE);
        let shown = match chunk.stream {
            OutputStream::Stdout => self.stdout.push(data),
            OutputStream::Stderr => self.stderr.push(data),
        };
        self.report(chunk.stream, &shown);
    }

    /// Sends what the redactors still hold.
    fn finish(&mut self) {
        let (out, err) = (self.stdout.finish(), self.stderr.finish());
        self.report(OutputStream::Stdout, &out);
        self.report(OutputStream::Stderr, &err);
    }

    fn report(&self, stream: OutputStream, shown: &str) {
        if shown.is_empty() {
            return;
        }
        let message = match stream {
            OutputStream::Stdout => shown.to_owned(),
            OutputStream::Stderr => format!("[stderr] {shown}"),
        };
        self.sink.report(self.bytes as f64, &message);
    }
}
