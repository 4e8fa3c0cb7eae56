//! The frames the server reads from the zygote and from session children, as typed values (the
//! protocol is the docstring of `runtime/toolgate_zygote.py`), and a cancel-safe frame reader.
//!
//! Decoding tolerates fields it does not know, so the runtime can add some without breaking the
//! server; the fields it does know are required, so a protocol drift fails loudly.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::frame::{FrameError, MAX_FRAME_BYTES};

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

/// Frames on the control channel (zygote -> server).
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub(crate) enum ControlFrame {
    Hello(Hello),
    Forked {
        session: String,
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
    Exited(ExitInfo),
    Error(ErrorFrame),
    Pong,
    /// Anything newer than this server: read and dropped, so the channel stays drained.
    #[serde(other)]
    Other,
}

/// `{"op":"error",...}` on either channel.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ErrorFrame {
    pub code: String,
    pub message: String,
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

/// Output streamed while a request runs (only when the caller asked for it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutputChunk {
    /// stdout or stderr
    pub stream: OutputStream,
    /// The text, decoded as UTF-8 with replacement characters.
    pub data: String,
}

/// Whether a result came from Python (`exec`) or bash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestKind {
    /// Python code in the session's namespace
    Exec,
    /// a `/bin/bash -c` command line in the workspace
    Bash,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
    /// Set by the server (not in the frame) when it interrupted the call; the code then normally
    /// reports a KeyboardInterrupt and the session lives on.
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interruption>,
}

/// Splits a byte stream into frame bodies. Unlike `frame::nonblocking::read`, dropping a pending
/// `next()` loses nothing (the bytes read so far stay in the buffer), so it can sit in a
/// `select!` next to a deadline. A frame's length, once checked against the caller's limit, is
/// reserved at once: that is address space, whose pages become memory only as bytes arrive (a
/// frame announced at 60 MiB whose bytes never come costs what came), and the buffer is never
/// copied to grow (growing it by doubling cost the old and the new buffer at once: +100 MiB of
/// peak memory for a 60 MiB frame, against +60 MiB).
#[derive(Debug, Default)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
}

/// What the reader keeps allocated between frames; a larger buffer (after a big result) is
/// given back.
const KEEP_CAPACITY: usize = 64 * 1024;

impl FrameReader {
    /// The next frame body, of at most `limit` bytes (a longer one is `Oversized`, refused from
    /// its header); `Ok(None)` at a clean end of stream (between frames).
    pub(crate) async fn next(
        &mut self,
        input: &mut (impl AsyncRead + Unpin),
        limit: u32,
    ) -> Result<Option<Vec<u8>>, FrameError> {
        loop {
            if let Some(body) = self.take(limit)? {
                return Ok(Some(body));
            }
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve_exact(KEEP_CAPACITY);
            }
            // read_buf is cancel-safe: when it has not completed, no byte was consumed
            let n = input.read_buf(&mut self.buf).await?;
            if n == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(FrameError::Truncated)
                };
            }
        }
    }

    /// Whether bytes of a next frame were read already.
    pub(crate) fn has_pending(&self) -> bool {
        !self.buf.is_empty()
    }

    fn take(&mut self, limit: u32) -> Result<Option<Vec<u8>>, FrameError> {
        let Some(header) = self.buf.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*header);
        if len > limit.min(MAX_FRAME_BYTES) {
            // checked before reading on, so a forged length cannot make us allocate 4 GiB
            return Err(FrameError::Oversized(u64::from(len)));
        }
        let total = 4 + len as usize;
        if self.buf.len() < total {
            self.buf.reserve_exact(total - self.buf.len());
            return Ok(None);
        }
        if total < KEEP_CAPACITY {
            // a small frame (most are): copied out, the buffer kept for the next ones
            let body = self.buf[4..total].to_vec();
            self.buf.drain(..total);
            return Ok(Some(body));
        }
        // a large one is handed over whole rather than copied; what follows it gets a new buffer
        let rest = self.buf.get(total..).unwrap_or_default().to_vec();
        let mut body = std::mem::replace(&mut self.buf, rest);
        body.truncate(total);
        body.drain(..4);
        if self.buf.capacity() < KEEP_CAPACITY {
            self.buf.reserve_exact(KEEP_CAPACITY - self.buf.len());
        }
        Ok(Some(body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::encode;
    use serde_json::json;

    #[tokio::test]
    async fn reader_splits_frames_and_refuses_forged_lengths() {
        let mut wire = encode(&json!({"op": "pong", "id": 1})).unwrap();
        wire.extend(
            encode(&json!({"op": "output", "id": 2, "stream": "stdout", "data": "x"})).unwrap(),
        );
        let mut reader = FrameReader::default();
        let mut input = wire.as_slice();
        let first = reader
            .next(&mut input, MAX_FRAME_BYTES)
            .await
            .unwrap()
            .unwrap();
        let first: serde_json::Value = serde_json::from_slice(&first).unwrap();
        assert_eq!(first["op"], "pong");
        // the second frame is longer than 16 bytes: refused from its header
        assert!(matches!(
            reader.next(&mut input, 16).await,
            Err(FrameError::Oversized(_))
        ));
        let body = reader.next(&mut input, 64).await.unwrap().unwrap();
        assert!(body.starts_with(b"{"));
        assert!(!reader.has_pending());
        assert!(
            reader
                .next(&mut input, MAX_FRAME_BYTES)
                .await
                .unwrap()
                .is_none()
        );

        let mut forged = FrameReader::default();
        let bytes = [0xffu8, 0xff, 0xff, 0xff, b'{'];
        assert!(matches!(
            forged.next(&mut &bytes[..], MAX_FRAME_BYTES).await,
            Err(FrameError::Oversized(_))
        ));
        let mut short = FrameReader::default();
        assert!(matches!(
            short
                .next(&mut &[0u8, 0, 0, 5, b'{'][..], MAX_FRAME_BYTES)
                .await,
            Err(FrameError::Truncated)
        ));
    }

    #[test]
    fn control_frames_tolerate_extra_fields_and_unknown_ops() {
        let exited: ControlFrame = serde_json::from_value(json!({
            "op": "exited", "pid": 7, "session": "s", "status": null, "signal": "SIGKILL",
            "core_dumped": false, "new_field": 1
        }))
        .unwrap();
        let ControlFrame::Exited(info) = exited else {
            panic!("not exited")
        };
        assert_eq!(info.to_string(), "was killed by signal SIGKILL");
        let pong: ControlFrame =
            serde_json::from_value(json!({"op": "pong", "pid": 3, "id": null})).unwrap();
        assert!(matches!(pong, ControlFrame::Pong));
        let other: ControlFrame = serde_json::from_value(json!({"op": "future"})).unwrap();
        assert!(matches!(other, ControlFrame::Other));
    }
}
