//! What a session's driver reads: the frames of a call, and input while no call runs. Both are
//! hostile (the session's code can write on its socket): frames are decoded within the caps of
//! [`super::bounded`], and nothing is read between calls.

use tokio::net::UnixStream;
use tokio::sync::mpsc;

use super::bounded::{
    self, CallBudget, FrameId, SessionErrorFrame, SessionFrameHead, SessionOutputFrame,
};
use super::session_error::SessionError;
use super::wire::{ExecOutcome, FrameReader, OutputChunk};

/// The largest frame read before a session's first call (a set-up error).
const SETUP_FRAME_BYTES: u32 = 64 << 10;

/// What came on a session's socket while no call ran.
pub(super) enum Idle {
    /// nothing after all (a spurious wake-up), or a set-up error frame before the first call
    Quiet,
    /// end of file (or the socket failed)
    Ended,
    /// bytes, when none are due
    Spoke,
}

/// Waits for input on an idle session's socket. Before the first call only the runtime has run:
/// it reports a failed set-up with one error frame and exits, so that frame is read (bounded) and
/// logged. After it, nothing is read: one byte is enough to know the session broke the protocol.
pub(super) async fn idle_input(
    reader: &mut FrameReader,
    stream: &mut UnixStream,
    first: bool,
    pid: i32,
) -> Idle {
    if first {
        return match reader.next(stream, SETUP_FRAME_BYTES).await {
            Ok(Some(body)) => {
                if let Ok(e) = serde_json::from_slice::<SessionErrorFrame>(&body) {
                    tracing::warn!(
                        pid,
                        code = e.code.text,
                        "session set-up failed: {}",
                        e.message.text
                    );
                }
                Idle::Quiet
            }
            Ok(None) | Err(_) => Idle::Ended,
        };
    }
    let readable = stream.readable().await;
    let mut byte = [0u8; 1];
    match (readable, stream.try_read(&mut byte)) {
        (Ok(()), Err(e)) if e.kind() == std::io::ErrorKind::WouldBlock => Idle::Quiet,
        (Ok(()), Ok(1..)) => Idle::Spoke,
        _ => Idle::Ended,
    }
}

/// What a frame read during a call means for it.
pub(super) enum Step {
    Continue,
    Reply(Box<ExecOutcome>),
    Rejected(SessionError),
    Broken(String),
}

/// Reads one frame of call `id`: output is passed on, the result or an error frame ends the call,
/// frames of other requests or unknown ops are dropped (their bytes counted in `budget`), and
/// anything over a cap is a violation.
pub(super) fn on_frame(
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
