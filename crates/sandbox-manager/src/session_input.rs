//! What a session's driver reads: the frames of a call, and input while no call runs. Both are
//! hostile (the session's code can write on its socket): frames are decoded within the caps of
//! [`crate::bounded`], and nothing is read between calls.

use std::task::{Context, Poll};

use tokio::net::UnixStream;
use tokio::sync::mpsc;

use toolgate_sandbox::upcall::Upcall;
use toolgate_sandbox::{ExecOutcome, OutputChunk};

use crate::bounded::{
    self, CallBudget, FrameId, MAX_UPCALL_FRAME_BYTES, SessionErrorFrame, SessionFrameHead,
    SessionOutputFrame, SessionUpcallFrame,
};
use crate::frame_io::FrameReader;
use crate::session_error::SessionError;

/// The largest frame read before a session's first call (a set-up error).
const SETUP_FRAME_BYTES: u32 = 64 << 10;

/// What came on a session's socket while no call ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Idle {
    /// end of file (or the socket failed)
    Ended,
    /// bytes, when none are due
    Spoke,
}

/// Looks at an idle session's socket without waiting: `Pending` while nothing came (the task of
/// `cx` is woken when something does). Before the first call only the runtime has run: it
/// reports a failed set-up with one error frame and exits, so that frame is read (bounded) and
/// logged. After it, nothing is read: one byte is enough to know the session broke the protocol.
pub(crate) fn poll_idle(
    reader: &mut FrameReader,
    stream: &UnixStream,
    first: bool,
    pid: i32,
    cx: &mut Context<'_>,
) -> Poll<Idle> {
    loop {
        match stream.poll_read_ready(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(_)) => return Poll::Ready(Idle::Ended),
            Poll::Ready(Ok(())) => {}
        }
        let mut byte = [0u8; 1];
        let read = if first {
            reader.try_fill(stream)
        } else {
            stream.try_read(&mut byte)
        };
        match read {
            // the readiness was stale, and is cleared: the next poll waits for more
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Ok(0) | Err(_) => return Poll::Ready(Idle::Ended),
            Ok(_) if first => loop {
                match reader.take(SETUP_FRAME_BYTES) {
                    Ok(Some(body)) => log_setup_error(&body, pid),
                    Ok(None) => break,
                    Err(_) => return Poll::Ready(Idle::Ended),
                }
            },
            Ok(_) => return Poll::Ready(Idle::Spoke),
        }
    }
}

/// Logs the runtime's report of a failed set-up (its code and message; nothing else is in it).
fn log_setup_error(body: &[u8], pid: i32) {
    if let Ok(e) = serde_json::from_slice::<SessionErrorFrame>(body) {
        tracing::warn!(
            pid,
            code = e.code.text,
            "session set-up failed: {}",
            e.message.text
        );
    }
}

/// An upcall the running code made: the session's number for it, and its request (or why the
/// request is not one the service knows, which is answered, not held against the session).
pub(crate) struct UpcallAsked {
    pub(crate) upcall: u64,
    pub(crate) request: Result<Upcall, String>,
}

/// What a frame read during a call means for it.
pub(crate) enum Step {
    Continue,
    Upcall(UpcallAsked),
    Reply(Box<ExecOutcome>),
    Rejected(SessionError),
    Broken(String),
}

/// Reads one frame of call `id`: output is passed on, the result or an error frame ends the call,
/// frames of other requests or unknown ops are dropped (their bytes counted in `budget`), and
/// anything over a cap is a violation.
pub(crate) fn on_frame(
    id: u64,
    body: &[u8],
    output: Option<&mpsc::Sender<OutputChunk>>,
    budget: &mut CallBudget,
) -> Step {
    budget.charge_frame(body.len());
    let head: SessionFrameHead = match serde_json::from_slice(body) {
        Ok(head) => head,
        Err(e) => return Step::Broken(format!("not a frame: {e}")),
    };
    let ours = head.id == FrameId::Number(id);
    match head.op.text.as_str() {
        "output" if ours => {
            let frame = match serde_json::from_slice::<SessionOutputFrame>(body) {
                Ok(frame) => frame,
                Err(e) => return Step::Broken(format!("bad output frame: {e}")),
            };
            let chars = frame.data.text.chars().count();
            if let Err(what) = budget.charge_output(body.len(), frame.stream, chars) {
                return Step::Broken(what);
            }
            if let Some(output) = output {
                // a full queue (the caller is not keeping up) drops the chunk, never waits
                let _ = output.try_send(OutputChunk {
                    stream: frame.stream,
                    data: frame.data.into_string(),
                });
            }
            Step::Continue
        }
        "upcall" if ours => upcall_asked(body),
        "result" if ours => match bounded::decode_result(body) {
            Ok(outcome) => Step::Reply(Box::new(outcome)),
            Err(e) => Step::Broken(e),
        },
        // an error about our request, or about a frame it could not place (id null)
        "error" if ours || head.id == FrameId::Null => {
            match serde_json::from_slice::<SessionErrorFrame>(body) {
                Ok(e) => Step::Rejected(SessionError::Rejected {
                    code: e.code.into_string(),
                    message: e.message.into_string(),
                }),
                Err(e) => Step::Broken(format!("bad error frame: {e}")),
            }
        }
        // frames of an earlier request (it cannot happen: each call waits for its result)
        // or of ops this server does not know: dropped, their bytes counted
        _ => Step::Continue,
    }
}

/// Reads an `upcall` frame: a frame over its limit or without an upcall number breaks the
/// protocol; a request the service does not know is answered so.
fn upcall_asked(body: &[u8]) -> Step {
    if body.len() > MAX_UPCALL_FRAME_BYTES {
        return Step::Broken(format!(
            "an upcall frame of {} bytes, over its limit of {MAX_UPCALL_FRAME_BYTES}",
            body.len()
        ));
    }
    let frame = match serde_json::from_slice::<SessionUpcallFrame>(body) {
        Ok(frame) => frame,
        Err(e) => return Step::Broken(format!("bad upcall frame: {e}")),
    };
    let request = serde_json::from_value::<Upcall>(frame.request)
        .map_err(|e| format!("the request is not one the service knows: {e}"));
    Step::Upcall(UpcallAsked {
        upcall: frame.upcall,
        request,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use toolgate_sandbox::OutputStream;

    /// A session's frame as the runtime writes it (`runtime/golden/session/`).
    fn golden(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/../../runtime/golden/session/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let frame: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        serde_json::to_vec(&frame).unwrap()
    }

    fn step(name: &str, id: u64) -> Step {
        let (output, _) = mpsc::channel(4);
        on_frame(id, &golden(name), Some(&output), &mut CallBudget::default())
    }

    /// The runtime's frames of a call, as the golden files hold them, pass the server's bounded
    /// decoding and mean what they say.
    #[tokio::test]
    async fn the_runtimes_golden_frames_decode_within_the_caps() {
        let (output, mut chunks) = mpsc::channel(4);
        let mut budget = CallBudget::default();
        assert!(matches!(
            on_frame(7, &golden("output.json"), Some(&output), &mut budget),
            Step::Continue
        ));
        let chunk = chunks.try_recv().unwrap();
        assert_eq!(
            (chunk.stream, chunk.data.as_str()),
            (OutputStream::Stdout, "hello\n")
        );
        let Step::Reply(exec) = step("result_exec.json", 7) else {
            panic!("the exec result was not taken")
        };
        assert_eq!(exec.result.unwrap().text_plain, "5");
        let Step::Reply(bash) = step("result_bash.json", 8) else {
            panic!("the bash result was not taken")
        };
        assert_eq!(bash.exit_status, Some(3));
        let Step::Rejected(SessionError::Rejected { code, .. }) = step("error.json", 9) else {
            panic!("the error frame was not taken")
        };
        assert_eq!(code, "bad_request");
        let Step::Upcall(asked) = step("upcall.json", 7) else {
            panic!("the upcall was not taken")
        };
        assert_eq!(asked.upcall, 1);
        assert_eq!(asked.request.unwrap(), Upcall::Billing {});
        // a frame of another request is not this call's
        assert!(matches!(step("upcall.json", 8), Step::Continue));
    }

    /// An upcall the service does not know is answered, not held against the session; one over
    /// its size or without its number breaks the protocol.
    #[test]
    fn upcalls_are_bounded_and_typed() {
        let asked = |frame: serde_json::Value| {
            let body = serde_json::to_vec(&frame).unwrap();
            on_frame(3, &body, None, &mut CallBudget::default())
        };
        let Step::Upcall(unknown) = asked(serde_json::json!({
            "op": "upcall", "id": 3, "upcall": 2, "request": {"kind": "launch"}
        })) else {
            panic!("an unknown request must be answered")
        };
        assert!(unknown.request.is_err());
        let huge = "x".repeat(MAX_UPCALL_FRAME_BYTES);
        let over = asked(serde_json::json!({
            "op": "upcall", "id": 3, "upcall": 3, "request": {"kind": "billing", "pad": huge}
        }));
        assert!(matches!(over, Step::Broken(ref why) if why.contains("over its limit")));
        let numberless = asked(serde_json::json!({
            "op": "upcall", "id": 3, "request": {"kind": "billing"}
        }));
        assert!(matches!(numberless, Step::Broken(_)));
    }
}

#[cfg(test)]
#[path = "frames_hostile_tests.rs"]
mod hostile_tests;
