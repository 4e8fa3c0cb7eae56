//! The typed frames of the runtime's protocol (`runtime/PROTOCOL.md`; examples of every frame
//! in `runtime/golden/`, read by these tests and by the runtime's): what the server sends the
//! zygote and its sessions, what the zygote sends back, and the payload of a session's result.
//!
//! A session's own frames are hostile input (its code can write on its socket): the
//! implementation decodes them within caps of its own and produces the values here.
//!
//! Decoding tolerates fields it does not know, so the runtime can add some without breaking the
//! server; the fields it does know are required, so a protocol drift fails loudly.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Frames the server sends the zygote on the control channel.
// built once per fork and serialised at once, never stored: the size of a variant is no cost
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ControlRequest<'a> {
    /// Is it alive? Answered by [`ControlEvent::Pong`].
    Ping,
    /// Fork a session child (the socket's other end rides along by `SCM_RIGHTS`).
    Fork(ForkRequest<'a>),
}

/// `{"op":"fork",...}`: one session child to fork.
#[derive(Debug, Serialize)]
pub struct ForkRequest<'a> {
    /// A tag the answer (`forked` or `error`) and the child's `exited` carry.
    pub session: &'a str,
    /// The child's working directory (`/workspace` for a hardened one).
    pub cwd: &'a str,
    /// Its `TMPDIR` (`/tmp` for a hardened one), if any.
    pub tmpdir: Option<&'a str>,
    /// The sender's number for the descriptor attached (informational).
    pub fd: i32,
    /// The confinement the child applies before it runs anything; required when the zygote
    /// loaded the confinement library.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub harden: Option<HardenSpec>,
    /// Variables of the session's environment for its whole life (its network proxy's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<&'a std::collections::BTreeMap<String, String>>,
}

/// The confinement of one session child, as `toolgate-sandbox-harden` reads it (its own
/// `HardenSpec`, which refuses unknown and missing fields; that crate cannot depend on this one,
/// which carries tokio's channels, so the two are held together by `golden/control/fork_hardened.json`,
/// which both test against).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HardenSpec {
    /// The workspace on the host, shown to the session at `/workspace`.
    pub workspace: String,
    /// The session's own temporary directory (`/tmp`).
    pub tmp: String,
    /// Paths shown read-only at their own place: the runtime, the base interpreter, system
    /// libraries.
    pub read_only: Vec<String>,
    /// `RLIMIT_NOFILE`.
    pub max_open_files: u64,
    /// `RLIMIT_FSIZE`, in bytes.
    pub max_file_bytes: u64,
    /// The host name seen inside.
    pub hostname: String,
    /// `false`: an empty network namespace.
    pub network: bool,
    /// Without network: loopback up and TCP connects to this port only (the server's proxy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_port: Option<u16>,
    /// The unprivileged host uid (and gid) the session runs as.
    pub uid: u32,
    /// cgroup directories the child joins before it runs anything.
    pub cgroups: Vec<String>,
    /// The size of its `/tmp`, in bytes.
    pub tmp_bytes: u64,
}

/// Frames the server sends a session child; a session serves them one at a time, in order.
#[derive(Debug, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum SessionRequest<'a> {
    /// Is it alive? Answered by `{"op":"pong","id":N}`.
    Ping {
        /// echoed
        id: u64,
    },
    /// Run Python code as a notebook cell.
    Exec {
        /// the request's number; its frames carry it
        id: u64,
        /// the cell
        code: &'a str,
        /// send `output` frames while it runs
        stream: bool,
        /// keep the whole of a stream that passes its inline limit in a workspace file
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        spill: bool,
        /// added to the environment of this run only
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        env: &'a BTreeMap<String, String>,
    },
    /// Run a command line with `/bin/bash -c` in the workspace.
    Bash {
        /// the request's number; its frames carry it
        id: u64,
        /// the command line
        command: &'a str,
        /// send `output` frames while it runs
        stream: bool,
        /// the command's own time limit, in seconds
        timeout_s: f64,
        /// keep the whole of a stream that passes its inline limit in a workspace file
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        spill: bool,
        /// added to the environment of this run only
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        env: &'a BTreeMap<String, String>,
    },
    /// Run a statement on a SQLite file of the workspace.
    Sqlite {
        /// the request's number; its frames carry it
        id: u64,
        /// the file, relative to the workspace
        path: &'a str,
        /// the statement (a script when `write`)
        statement: &'a str,
        /// open the file read-write (else read-only)
        write: bool,
        /// most rows returned
        max_rows: u64,
        /// about most bytes of values returned
        max_bytes: u64,
        /// the statement's own time limit, in seconds
        timeout_s: f64,
    },
    /// Write the session's Python state to a file of its workspace (between requests, before
    /// a hibernation). Answered by [`Checkpointed`], or an error frame `checkpoint_failed`.
    Checkpoint {
        /// the request's number
        id: u64,
        /// the state file, relative to the workspace
        path: &'a str,
    },
    /// Read a checkpoint's state file back into the namespace, and delete it (the first
    /// request of a new session). Answered by [`Restored`], or an error frame `restore_failed`.
    Restore {
        /// the request's number
        id: u64,
        /// the state file, relative to the workspace
        path: &'a str,
    },
    /// A piece of a streamed answer to an upcall, before its `upcall_result`.
    UpcallProgress {
        /// the running request's number
        id: u64,
        /// the session's number for the upcall
        upcall: u64,
        /// the piece of text
        data: &'a str,
    },
    /// The service's answer to an upcall the running request made.
    UpcallResult {
        /// the running request's number
        id: u64,
        /// the session's number for the upcall
        upcall: u64,
        /// `"value"` or `"error"`
        #[serde(flatten)]
        answer: crate::upcall::UpcallAnswer,
    },
}

/// The zygote's first frame, sent once its modules are loaded and frozen.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Hello {
    /// The zygote's process id (the parent of every session child).
    pub pid: i32,
    /// The interpreter's version, e.g. "3.11.7".
    pub python: String,
    /// The modules imported before forking.
    pub preloaded: Vec<String>,
    /// Modules that failed to import, with the error.
    pub skipped: BTreeMap<String, String>,
    /// The interpreter that runs.
    pub executable: String,
    /// The runtime's `sys.prefix`.
    pub prefix: String,
    /// The base interpreter's `sys.base_prefix` (its standard library; the runtime's own prefix
    /// when it is not a virtual environment). A hardened session must be able to read it.
    pub base_prefix: String,
    /// From the zygote's start to this frame, in milliseconds.
    pub startup_ms: f64,
}

/// How a session child ended, from the zygote's `exited` frame.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct ExitInfo {
    /// The child's process id.
    pub pid: i32,
    /// Its exit code, when it exited.
    pub status: Option<i32>,
    /// The signal that killed it ("SIGKILL"), when one did.
    pub signal: Option<String>,
    /// Whether it left a core dump.
    #[serde(default)]
    pub core_dumped: bool,
}

impl fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.signal, self.status) {
            (Some(signal), _) => {
                write!(f, "was killed by signal {signal}")?;
                if self.core_dumped {
                    f.write_str(" (core dumped)")?;
                }
                Ok(())
            }
            (None, Some(code)) => write!(f, "exited with status {code}"),
            (None, None) => f.write_str("ended"),
        }
    }
}

/// Frames the zygote sends on the control channel.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum ControlEvent {
    /// Its first frame: modules loaded and frozen.
    Hello(Hello),
    /// A session child was forked (and hardened, when asked).
    Forked {
        /// The fork request's `session` tag.
        session: String,
        /// The child's pid in the zygote's pid namespace.
        pid: i32,
        /// From the start of the fork to `forked`, in the zygote (milliseconds).
        #[serde(default)]
        ready_ms: Option<f64>,
        /// How long `os.fork()` took in the zygote (milliseconds).
        #[serde(default)]
        fork_ms: Option<f64>,
        /// The hardening library's report line (with its per-step timings).
        #[serde(default)]
        hardened: Option<String>,
    },
    /// A hardened child was forked and released; its confinement goes on beside the zygote's
    /// next requests, and `forked` (or an error) follows.
    Spawned {
        /// The fork request's `session` tag.
        session: String,
    },
    /// A session child ended.
    Exited(ExitInfo),
    /// A request was refused or failed.
    Error(ControlError),
    /// The answer to `ping`.
    Pong,
    /// Anything newer than this server: read and dropped, so the channel stays drained.
    #[serde(other)]
    Other,
}

/// `{"op":"error",...}` on the control channel.
#[derive(Debug, Clone, Deserialize)]
pub struct ControlError {
    /// `bad_request`, `fork_failed`, `harden_failed`, … (see PROTOCOL.md).
    pub code: String,
    /// What went wrong.
    pub message: String,
    /// The fork request's `session` tag, when the error is about one.
    #[serde(default)]
    pub session: Option<String>,
}

/// Which stream a piece of output was written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    /// file descriptor 1
    Stdout,
    /// file descriptor 2
    Stderr,
}

/// Whether a result came from Python (`exec`) or bash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestKind {
    /// Python code in the session's namespace
    Exec,
    /// a `/bin/bash -c` command line in the workspace
    Bash,
    /// a statement on a SQLite file of the workspace
    Sqlite,
}

/// The value of a cell's last bare expression, as a notebook shows it (a MIME bundle).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct DisplayData {
    /// `repr()` of the value, or a DataFrame's `to_string()`.
    #[serde(rename = "text/plain", default)]
    pub text_plain: String,
    /// `_repr_html_()` or a DataFrame's `to_html()`, when there is one.
    #[serde(rename = "text/html", default, skip_serializing_if = "Option::is_none")]
    pub text_html: Option<String>,
    /// A base64 PNG (`_repr_png_()` or a figure outside pyplot), when there is one.
    #[serde(rename = "image/png", default, skip_serializing_if = "Option::is_none")]
    pub image_png: Option<String>,
}

/// An exception raised by the code (or, for bash, "Timeout" / "KeyboardInterrupt").
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct PyError {
    /// The exception's class name, e.g. "ZeroDivisionError".
    #[serde(rename = "type")]
    pub error_type: String,
    /// `str()` of the exception.
    pub message: String,
    /// The formatted traceback (the runtime's own frames left out).
    pub traceback: String,
}

/// Why the server interrupted a call (sent SIGINT to its session).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Interruption {
    /// the call ran past its time limit
    Timeout,
    /// the caller cancelled the call (or stopped waiting for it)
    Cancelled,
}

/// A session's `result` frame: the outcome of one `exec` or `bash` request.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ExecOutcome {
    /// exec or bash
    pub kind: RequestKind,
    /// What the run wrote to fd 1 (at most 1 MiB kept).
    pub stdout: String,
    /// What the run wrote to fd 2 (at most 1 MiB kept).
    pub stderr: String,
    /// stdout was cut at the limit
    pub stdout_truncated: bool,
    /// stderr was cut at the limit
    pub stderr_truncated: bool,
    /// Bytes written to stdout, kept or not.
    pub stdout_bytes: u64,
    /// Bytes written to stderr, kept or not.
    pub stderr_bytes: u64,
    /// The value of the last bare expression (exec only).
    pub result: Option<DisplayData>,
    /// A base64 PNG of every matplotlib figure open after the run.
    pub images: Vec<String>,
    /// Some figures were left out (size limit).
    pub images_truncated: bool,
    /// The exception, if the run raised one.
    pub error: Option<PyError>,
    /// bash: the exit code (128+N when killed by signal N).
    pub exit_status: Option<i32>,
    /// bash: the signal that killed the command.
    pub signal: Option<String>,
    /// bash: the command ran past `timeout_s` and was stopped.
    pub timed_out: bool,
    /// Requests run in this session so far.
    pub execution_count: u64,
    /// Wall time of the run inside the session, in milliseconds.
    pub duration_ms: f64,
    /// stdout passed its inline limit in a run that asked to spill: where its whole is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_file: Option<SpilledStream>,
    /// stderr passed its inline limit in a run that asked to spill: where its whole is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_file: Option<SpilledStream>,
    /// sqlite: what the statement returned, `{columns, rows, truncated, changes}` (see
    /// PROTOCOL.md); `None` for exec and bash, and when the statement failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<serde_json::Value>,
    /// Set by the server (not in the frame) when it interrupted the call; the code then normally
    /// reports a KeyboardInterrupt and the session lives on.
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interruption>,
}

/// A stream's whole, kept in a workspace file because it passed its inline limit.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct SpilledStream {
    /// The file, relative to the workspace.
    pub path: String,
    /// The stream's last bytes (at most 256 KiB), decoded as UTF-8 with replacement.
    pub tail: String,
}

/// A global a checkpoint did not keep, or a restore did not bring back. After 1000 entries one
/// more says how many were left out: name `…`, empty type, reason `N more not kept` (or `not
/// restored`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct NotKept {
    /// The global's name.
    pub name: String,
    /// Its value's type name ("generator"; "module" for a module that no longer imports).
    #[serde(rename = "type")]
    pub value_type: String,
    /// The first line of the exception, e.g. "TypeError: cannot pickle 'generator' object".
    pub reason: String,
}

/// A session's `checkpointed` frame: its state file is written. The file is the session's
/// alone: the server archives it as bytes and never reads it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Checkpointed {
    /// The request's number.
    pub id: u64,
    /// The state file's size.
    pub bytes: u64,
    /// The globals saved, sorted.
    pub kept: Vec<String>,
    /// The globals that could not be saved, sorted by name.
    pub not_kept: Vec<NotKept>,
    /// The checkpoint's time in the session, in milliseconds.
    pub duration_ms: f64,
}

/// A session's `restored` frame: a checkpoint's state file is read back (and deleted).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Restored {
    /// The request's number.
    pub id: u64,
    /// The globals restored, sorted.
    pub restored: Vec<String>,
    /// What the checkpoint did not keep, and what failed to load now.
    pub not_restored: Vec<NotKept>,
    /// The checkpointed session's count of requests; the next request goes on from it.
    pub execution_count: u64,
    /// The restore's time in the session, in milliseconds.
    pub duration_ms: f64,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn control_frames_tolerate_extra_fields_and_unknown_ops() {
        let exited: ControlEvent = serde_json::from_value(json!({
            "op": "exited", "pid": 7, "session": "s", "status": null, "signal": "SIGKILL",
            "core_dumped": false, "new_field": 1
        }))
        .unwrap();
        let ControlEvent::Exited(info) = exited else {
            panic!("not exited")
        };
        assert_eq!(info.to_string(), "was killed by signal SIGKILL");
        let pong: ControlEvent =
            serde_json::from_value(json!({"op": "pong", "pid": 3, "id": null})).unwrap();
        assert!(matches!(pong, ControlEvent::Pong));
        let other: ControlEvent = serde_json::from_value(json!({"op": "future"})).unwrap();
        assert!(matches!(other, ControlEvent::Other));
    }
}
