//! The sandbox capabilities: `python` (`code`), `bash`, `upload` (`files` alone) and
//! `close_session` on the write tool, `file` (`path`) and `sessions` on the read tool. They share
//! the fields `session_id`, `timeout_s` and `files`, and one [`SandboxSessions`] (the sandbox seam:
//! `app` never knows what runs the sessions).
//!
//! Without `session_id` a call runs in a fresh interpreter that ends with the call. When one call
//! combines `code` and `bash` (or `files` with either) without an id, they share one such
//! call-scoped session, so bash sees what Python wrote; it closes when the call ends.

mod egress;
mod keep;
mod listing;
mod read;
mod render;
mod run;
mod secrets_given;
mod upload_link;

use std::sync::Arc;

use base64::Engine;
use serde_json::Value;
use toolgate_sandbox::{
    LimitSettings, MAX_SESSION_ID_BYTES, MAX_UPLOAD_FILES, MAX_WORKSPACE_PATH_BYTES,
    SandboxSessions, SandboxSessionsError, WorkspaceFile,
};

use crate::capability::{CallContext, Capability, Failure, Field, JsonObject};
use crate::schema::FieldKind;
use crate::secrets::{OpenedSecrets, Secrets};
use toolgate_domain::SecretName;

pub use keep::DEFAULT_INLINE_CHARS;
pub use read::ReadFile;
pub use run::{Runner, Upload};

/// Longest `code` or `bash`, in bytes.
const MAX_SOURCE_BYTES: usize = 1024 * 1024;

/// What the sandbox capabilities share: the sessions and the operator's limits.
pub struct Sandbox {
    sessions: Arc<dyn SandboxSessions>,
    limits: LimitSettings,
    /// `timeout_s` as `tools/list` shows it (it names the operator's limits).
    timeout: Field,
    /// `session_id` as `tools/list` shows it (it names the operator's idle expiry).
    session_id: Field,
    /// The vault, for `secrets` on `code` and `bash`.
    secrets: Option<Arc<Secrets>>,
    /// Which secrets each session was given, for reads of its files.
    secrets_given: secrets_given::SecretsGiven,
    /// Characters of a stream shown inline; a longer one is shown as a preview (see [`keep`]).
    inline_chars: usize,
    /// Signed links to workspace files, when the service makes them.
    links: Option<Arc<crate::links::Links>>,
    /// The limits of a run's traffic through the network proxy; `None`: sessions have no
    /// network.
    network: Option<toolgate_sandbox::EgressLimits>,
    /// The accounts' host lists, for each run's grant and the `network` fields.
    host_lists: Option<Arc<crate::egress_rules::EgressRules>>,
}

impl Sandbox {
    /// The sessions it runs calls in (the dashboard lists and ends them too).
    pub fn sessions(&self) -> Arc<dyn SandboxSessions> {
        Arc::clone(&self.sessions)
    }

    /// Runs calls in `sessions` under `limits`.
    pub fn new(sessions: Arc<dyn SandboxSessions>, limits: LimitSettings) -> Self {
        let timeout = timeout_field(&limits);
        let session_id = session_id_field(sessions.idle_ttl());
        Self {
            sessions,
            limits,
            timeout,
            session_id,
            secrets: None,
            secrets_given: secrets_given::SecretsGiven::default(),
            inline_chars: DEFAULT_INLINE_CHARS,
            links: None,
            network: None,
            host_lists: None,
        }
    }

    /// Shows at most `chars` characters of a stream inline (the operator's
    /// `inline_result_chars`); a longer one comes back as a preview.
    pub fn with_inline_chars(mut self, chars: usize) -> Self {
        self.inline_chars = chars.max(1);
        self
    }

    /// The operator's limits.
    pub fn limits(&self) -> &LimitSettings {
        &self.limits
    }

    /// Keeps long output as workspace files with signed `links`, and offers upload links.
    pub(crate) fn with_links(mut self, links: Arc<crate::links::Links>) -> Self {
        self.links = Some(links);
        self
    }

    /// The sandbox as its capabilities (and `sql` on `sqlite:` files) share it; `secrets` on
    /// `code` and `bash` opens values from `secrets`.
    pub fn shared(mut self, secrets: Option<Arc<Secrets>>) -> Arc<Self> {
        self.secrets = secrets;
        Arc::new(self)
    }

    /// The capabilities, in the order a call runs them: network (with host lists), upload,
    /// python, bash, file, sessions, upload_url (when it makes links), close_session.
    pub fn capabilities(shared: &Arc<Self>) -> Vec<Arc<dyn Capability>> {
        let shared = Arc::clone(shared);
        let mut capabilities: Vec<Arc<dyn Capability>> = Vec::new();
        // first: a call that sets the lists and runs code runs it under the new lists
        if let Some(rules) = &shared.host_lists {
            capabilities.extend(super::network::capabilities(rules, shared.has_network()));
        }
        capabilities.extend([
            Arc::new(Upload::new(Arc::clone(&shared))) as Arc<dyn Capability>,
            Arc::new(Runner::python(Arc::clone(&shared))),
            Arc::new(Runner::bash(Arc::clone(&shared))),
            Arc::new(ReadFile::new(Arc::clone(&shared))),
            Arc::new(listing::ListSessions::new(Arc::clone(&shared))),
        ]);
        if let Some(upload_link) = upload_link::UploadLink::of(&shared) {
            capabilities.push(Arc::new(upload_link));
        }
        capabilities.push(Arc::new(listing::CloseSession::new(shared)));
        capabilities
    }
}

/// `session_id`, shared by every sandbox capability. Made once per server, like `timeout_s`.
fn session_id_field(idle_ttl: std::time::Duration) -> Field {
    let description: &'static str = Box::leak(
        format!(
            "your name for a session (1 to 256 bytes, no control characters): Python variables, \
             imports and workspace files persist between calls with the same id; ids are \
             private to your account. A session idle for {} expires (the result then says so). \
             Without it, the call runs in a fresh interpreter that ends with the call.",
            idle_span(idle_ttl)
        )
        .into_boxed_str(),
    );
    Field {
        name: "session_id",
        kind: FieldKind::Name {
            max_len: MAX_SESSION_ID_BYTES,
        },
        description,
    }
}

/// An idle expiry in the words a description uses: "20 minutes", "1 minute", "90 seconds".
fn idle_span(ttl: std::time::Duration) -> String {
    let seconds = ttl.as_secs();
    match (seconds / 60, seconds % 60) {
        (1, 0) => "1 minute".to_owned(),
        (minutes, 0) if minutes > 0 => format!("{minutes} minutes"),
        _ if seconds == 1 => "1 second".to_owned(),
        _ => format!("{seconds} seconds"),
    }
}

/// `timeout_s`, shared by `python` and `bash`. Made once per server: its description is leaked
/// (a `Field` holds `'static` text), which must not happen per call.
fn timeout_field(limits: &LimitSettings) -> Field {
    let task_max = limits.max_task_timeout.max(limits.max_timeout).as_secs();
    let description: &'static str = Box::leak(
        format!(
            "wall-clock limit of this call's code, in seconds (default {}, at most {}; up to {} \
             when the call runs as an MCP task): the code is interrupted first \
             (KeyboardInterrupt; the session and its variables survive) and killed only if it \
             does not stop",
            limits.default_timeout.as_secs(),
            limits.max_timeout.as_secs(),
            task_max
        )
        .into_boxed_str(),
    );
    Field {
        name: "timeout_s",
        kind: FieldKind::Integer {
            min: 1,
            max: i64::try_from(task_max).unwrap_or(i64::MAX),
        },
        description,
    }
}

/// `files`, shared by `upload`, `python` and `bash`.
fn files_field() -> Field {
    Field {
        name: "files",
        kind: FieldKind::Files {
            max_files: MAX_UPLOAD_FILES,
            max_path: MAX_WORKSPACE_PATH_BYTES,
        },
        description: "files to write into the session's workspace before the code runs: \
                      [{\"path\": \"data/in.csv\", \"content\": \"a,b\\n1,2\\n\"}], paths \
                      relative to the workspace (directories are created), `encoding` \"base64\" \
                      for binary content. Existing files are replaced.",
    }
}

/// Which sandbox capabilities a call asks for, to decide who shares and who closes a
/// call-scoped session.
#[derive(Debug, Clone, Copy)]
struct Asked {
    upload: bool,
    code: bool,
    bash: bool,
}

impl Asked {
    fn of(args: &JsonObject) -> Self {
        let code = args.contains_key("code");
        let bash = args.contains_key("bash");
        Self {
            upload: args.contains_key("files") && !code && !bash,
            code,
            bash,
        }
    }
}

/// The session a capability runs in: the caller's, a call-scoped one, or none (fresh).
#[derive(Debug, Clone)]
enum Scope {
    /// the caller's `session_id`
    Named(String),
    /// no id, but several capabilities of this call share one session, closed with the call
    Call(Arc<CallSession>),
    /// no id, one capability: a fresh interpreter for this run only
    Fresh,
}

impl Scope {
    /// The scope of one of this call's sandbox runs.
    fn of(args: &JsonObject, ctx: &CallContext<'_>, sandbox: &Arc<Sandbox>) -> Self {
        if let Some(id) = args.get("session_id").and_then(Value::as_str) {
            return Self::Named(id.to_owned());
        }
        if !shares_a_session(args) {
            return Self::Fresh;
        }
        Self::Call(ctx.scratch.get_or_insert(|| CallSession {
            sessions: Arc::clone(&sandbox.sessions),
            account: account_key(ctx),
            // control characters cannot appear in a caller's id, so this never meets one
            id: format!("\u{1}call-{}", ctx.call_id),
        }))
    }

    /// The id to run under, if any.
    fn id(&self) -> Option<&str> {
        match self {
            Self::Named(id) => Some(id),
            Self::Call(session) => Some(&session.id),
            Self::Fresh => None,
        }
    }

    /// The caller's own id, for results.
    fn caller_id(&self) -> Option<&str> {
        match self {
            Self::Named(id) => Some(id),
            _ => None,
        }
    }
}

/// Whether a call without `session_id` runs its capabilities in one shared session: when it
/// asks for two runs (or more), or brings files (which a later run of the call must see).
fn shares_a_session(args: &JsonObject) -> bool {
    let asked = Asked::of(args);
    let runs = [asked.upload, asked.code, asked.bash];
    runs.iter().filter(|run| **run).count() >= 2 || args.contains_key("files")
}

/// The session a call's capabilities share when it names none: opened by the first run, and
/// closed when the call ends and this value (kept in the call's scratch) is dropped.
struct CallSession {
    sessions: Arc<dyn SandboxSessions>,
    account: String,
    id: String,
}

impl std::fmt::Debug for CallSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallSession")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Drop for CallSession {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime: the manager's idle sweep retires it
        };
        let (sessions, account, id) = (
            Arc::clone(&self.sessions),
            std::mem::take(&mut self.account),
            std::mem::take(&mut self.id),
        );
        runtime.spawn(async move {
            sessions.close(&account, &id).await;
        });
    }
}

/// Decodes the `files` field (already type-checked) into workspace files.
fn uploaded_files(args: &JsonObject) -> Result<Vec<WorkspaceFile>, Failure> {
    let Some(Value::Array(entries)) = args.get("files") else {
        return Ok(Vec::new());
    };
    let mut files = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let text = |key: &str| entry.get(key).and_then(Value::as_str).unwrap_or_default();
        let path = text("path").to_owned();
        let content = match entry.get("encoding").and_then(Value::as_str) {
            Some("base64") => base64::engine::general_purpose::STANDARD
                .decode(text("content"))
                .map_err(|e| {
                    Failure::new(format!("files[{i}].content is not valid base64: {e}"))
                })?,
            _ => text("content").as_bytes().to_vec(),
        };
        files.push(WorkspaceFile { path, content });
    }
    Ok(files)
}

/// The account's key in the session manager.
impl Sandbox {
    /// Remembers that `session` was given `names` (pruning the account's dead sessions when
    /// it remembers many).
    async fn expose(&self, account: &str, session: &str, names: &[SecretName]) {
        if self.secrets_given.record(account, session, names) {
            let live: Vec<String> = self
                .sessions
                .list(account)
                .await
                .into_iter()
                .map(|s| s.id)
                .collect();
            self.secrets_given.keep_only(account, &live);
        }
    }

    /// `session_id` as `tools/list` shows it.
    pub(crate) fn session_id_field(&self) -> Field {
        self.session_id.clone()
    }

    /// The operator's limits with a time limit of `timeout` (at most the operator's most).
    pub(crate) fn limits_for(
        &self,
        timeout: std::time::Duration,
    ) -> Result<toolgate_sandbox::Limits, Failure> {
        let seconds = timeout
            .as_secs()
            .clamp(1, self.limits.max_timeout.as_secs().max(1));
        self.limits
            .for_call(Some(seconds))
            .map_err(|e| Failure::new(e.to_string()))
    }

    /// Runs `request` in its session.
    pub(crate) async fn run(
        &self,
        request: toolgate_sandbox::RunRequest,
    ) -> Result<toolgate_sandbox::RunOutcome, Failure> {
        self.sessions.run(request).await.map_err(failure)
    }

    /// Registers with the call the values of the secrets `session` was given (those that still
    /// exist): what the session shows may hold them (in variables, files, its history), so the
    /// call redacts them from it.
    pub(crate) async fn register_given(&self, ctx: &CallContext<'_>, session: &str) {
        let given = self.given_to(ctx, session).await;
        ctx.secrets
            .add(given.iter().map(|(name, value)| (name, value.as_bytes())));
    }

    /// The values of the secrets `session` was given (those that still exist).
    async fn given_to(&self, ctx: &CallContext<'_>, session: &str) -> OpenedSecrets {
        let names: Vec<SecretName> = self
            .secrets_given
            .of(&account_key(ctx), session)
            .into_iter()
            .filter(|name| !ctx.secrets.holds(name))
            .collect();
        let Some(secrets) = self.secrets.as_ref().filter(|_| !names.is_empty()) else {
            return OpenedSecrets::default();
        };
        match secrets.open(&ctx.account.id, &names).await {
            Ok(opened) => opened,
            // some were deleted since: redact the ones left
            Err(crate::secrets::SecretsError::Unknown(gone)) => {
                let left: Vec<_> = names
                    .into_iter()
                    .filter(|n| !gone.iter().any(|g| g == n.as_str()))
                    .collect();
                secrets
                    .open(&ctx.account.id, &left)
                    .await
                    .unwrap_or_default()
            }
            Err(_) => OpenedSecrets::default(),
        }
    }
}

fn account_key(ctx: &CallContext<'_>) -> String {
    ctx.account.id.to_string()
}

/// A sandbox error as the caller reads it; internal detail goes to the log only.
fn failure(error: SandboxSessionsError) -> Failure {
    if let SandboxSessionsError::Unavailable(source) = &error {
        tracing::error!(error = %source, "the sandbox could not serve a call");
    }
    Failure::new(error.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::capability::CallScratch;
    use serde_json::json;

    #[test]
    fn the_session_description_names_the_operators_idle_expiry() {
        use std::time::Duration;
        assert_eq!(idle_span(Duration::from_secs(20 * 60)), "20 minutes");
        assert_eq!(idle_span(Duration::from_secs(60)), "1 minute");
        assert_eq!(idle_span(Duration::from_secs(90)), "90 seconds");
        let field = session_id_field(Duration::from_secs(5 * 60));
        assert!(
            field.description.contains("idle for 5 minutes expires"),
            "{}",
            field.description
        );
    }

    fn shares(args: Value) -> bool {
        let Value::Object(args) = args else { panic!() };
        shares_a_session(&args)
    }

    #[test]
    fn one_call_shares_a_session_only_when_it_combines() {
        assert!(!shares(json!({"code": "1"})));
        assert!(!shares(json!({"bash": "ls"})));
        assert!(shares(json!({"code": "1", "bash": "ls"})));
        assert!(shares(json!({"bash": "ls", "files": []})));
    }

    #[test]
    fn a_calls_scratch_holds_one_value_per_type() {
        let scratch = CallScratch::default();
        let first = scratch.get_or_insert(|| 7_u32);
        let again = scratch.get_or_insert(|| 8_u32);
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(*scratch.get_or_insert(|| "other"), "other");
    }

    #[test]
    fn files_decode_text_and_base64() {
        let Value::Object(args) = json!({"files": [
            {"path": "a.txt", "content": "hé"},
            {"path": "b.bin", "content": "AAH/", "encoding": "base64"},
        ]}) else {
            panic!()
        };
        let files = uploaded_files(&args).unwrap();
        assert_eq!(files[0].content, "hé".as_bytes());
        assert_eq!(files[1].content, [0, 1, 255]);
        let Value::Object(bad) =
            json!({"files": [{"path": "x", "content": "!!", "encoding": "base64"}]})
        else {
            panic!()
        };
        assert!(
            uploaded_files(&bad)
                .unwrap_err()
                .message
                .contains("files[0]")
        );
    }
}
