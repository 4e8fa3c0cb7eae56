//! One run on a node, from the front end: the run's frames out (its start, files, upcall
//! answers, a cancel), the node's frames in (output, upcalls, how it ended).

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::channel::Channel;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use toolgate_sandbox::upcall::{
    MAX_UPCALLS_IN_FLIGHT, UpcallAnswer, UpcallError, UpcallErrorCode, UpcallHandler, UpcallOrigin,
};
use toolgate_sandbox::{OutputChunk, RunOutcome, RunRequest, SandboxSessionsError};

use crate::link::NodeLink;
use crate::wire::{
    Done, ErrorKind, FrameReader, RunHeader, Tag, UpcallCall, UpcallPiece, UpcallReply, file_frame,
    frame, json_frame, parse,
};

/// What a caller reads when the node running its call was lost during it.
pub const NODE_LOST: &str = "the execution node running this session was lost during the call \
     (it stopped or was cut off from the network); what the session held since its last \
     checkpoint is gone";

/// Frames waiting to go to the node.
const OUT_QUEUE: usize = 64;

/// Why a run on a node did not come back with an outcome.
#[derive(Debug)]
pub(crate) enum RunError {
    /// The node is not the incarnation the run was placed on; nothing ran.
    Stale,
    /// The node could not be reached (dialling failed, or its connection broke before it
    /// answered); nothing ran.
    Unreachable(crate::LinkError),
    /// The seam's own error (nothing ran, or the session was lost).
    Seam(SandboxSessionsError),
}

impl From<SandboxSessionsError> for RunError {
    fn from(error: SandboxSessionsError) -> Self {
        Self::Seam(error)
    }
}

/// Runs `request` on the node behind `link`, placed on its `incarnation`. The request is only
/// borrowed, so that a run the node refused as stale can be placed again.
pub(crate) async fn run(
    link: &NodeLink,
    request: &RunRequest,
    incarnation: i64,
) -> Result<RunOutcome, RunError> {
    let header = RunHeader {
        account: request.account.clone(),
        session_id: request.session_id.clone(),
        work: request.work.clone(),
        limits: request.limits.clone(),
        files: u32::try_from(request.files.len()).unwrap_or(u32::MAX),
        env: request.env.clone(),
        output: request.output.is_some(),
        upcalls: request.upcalls.is_some(),
        existing_only: request.existing_only,
        spill: request.spill,
        egress: request.egress.clone(),
        incarnation,
    };
    let (mut sink, body) = Channel::<Bytes, std::convert::Infallible>::new(8);
    let (out, mut queue) = mpsc::channel::<Bytes>(OUT_QUEUE);
    // the request's side stays open until this run returns and drops `out`: the node takes its
    // end as the caller leaving
    let writer = tokio::spawn(async move {
        while let Some(frame) = queue.recv().await {
            if sink.send_data(frame).await.is_err() {
                break;
            }
        }
    });
    let _writer = AbortOnDrop(writer);
    let _ = out.send(json_frame(Tag::Start, &header)).await;
    drop(header);
    for file in &request.files {
        let _ = out.send(file_frame(&file.path, &file.content)).await;
    }
    let answer = link
        .request("run", body.boxed())
        .await
        .map_err(RunError::Unreachable)?;
    if answer.status() != http::StatusCode::OK {
        tracing::error!(node = link.address(), status = %answer.status(), "a node refused a run (is the node token the same?)");
        return Err(SandboxSessionsError::Unavailable(
            format!(
                "the node at {} answered {}",
                link.address(),
                answer.status()
            )
            .into(),
        )
        .into());
    }
    let mut frames = FrameReader::new(answer.into_body());
    let origin = UpcallOrigin {
        account: request.account.clone(),
        session_id: request.session_id.clone(),
    };
    let cancel = request.cancel.clone().unwrap_or_default();
    let mut cancel_sent = false;
    let mut answering = JoinSet::new();
    loop {
        let next = tokio::select! {
            next = frames.next() => next,
            () = cancel.cancelled(), if !cancel_sent => {
                cancel_sent = true;
                let _ = out.send(frame(Tag::Cancel, &[])).await;
                continue;
            }
        };
        match next {
            Ok(Some((Tag::Output, payload))) => {
                if let (Some(output), Ok(chunk)) =
                    (&request.output, parse::<OutputChunk>(Tag::Output, &payload))
                {
                    // never wait for the caller: what it does not take now is in the outcome
                    let _ = output.try_send(chunk);
                }
            }
            Ok(Some((Tag::Upcall, payload))) => {
                let Ok(call) = parse::<UpcallCall>(Tag::Upcall, &payload) else {
                    return Err(lost(link, "a malformed upcall").into());
                };
                if let Some(handler) = &request.upcalls {
                    // the node bounds its session's upcalls, and so does the front end itself:
                    // a node is another host, whose sessions' code may have taken it over
                    while answering.try_join_next().is_some() {}
                    if answering.len() >= MAX_UPCALLS_IN_FLIGHT {
                        let busy = UpcallReply {
                            id: call.id,
                            answer: UpcallAnswer::Error(UpcallError::new(
                                UpcallErrorCode::Busy,
                                format!(
                                    "at most {MAX_UPCALLS_IN_FLIGHT} requests to the service may wait at once"
                                ),
                            )),
                        };
                        // never wait here: a node that does not read its answers gets none
                        let _ = out.try_send(json_frame(Tag::UpcallAnswer, &busy));
                    } else {
                        answering.spawn(answer_upcall(
                            Arc::clone(handler),
                            origin.clone(),
                            call,
                            out.clone(),
                        ));
                    }
                }
            }
            Ok(Some((Tag::Done, payload))) => {
                return match parse::<Done>(Tag::Done, &payload) {
                    Ok(Done::Ran {
                        mut outcome,
                        interrupted,
                    }) => {
                        outcome.outcome.interrupted = interrupted;
                        Ok(*outcome)
                    }
                    Ok(Done::Error(error)) if error.kind == ErrorKind::Stale => {
                        Err(RunError::Stale)
                    }
                    Ok(Done::Error(error)) => Err(RunError::Seam(error.into())),
                    Err(e) => Err(lost(link, e).into()),
                };
            }
            Ok(Some((tag, _))) => {
                return Err(lost(link, format!("an unexpected frame {tag:?}")).into());
            }
            Ok(None) => return Err(lost(link, "the run's stream ended before its outcome").into()),
            Err(e) => return Err(lost(link, e).into()),
        }
    }
}

/// Answers one upcall with the call's own handler, its streamed pieces first.
async fn answer_upcall(
    handler: Arc<dyn UpcallHandler>,
    origin: UpcallOrigin,
    call: UpcallCall,
    out: mpsc::Sender<Bytes>,
) {
    let id = call.id;
    let result = if call.upcall.streams() {
        let (pieces, mut pending) = mpsc::channel::<String>(64);
        let answering = handler.answer_streaming(origin, call.upcall, pieces);
        tokio::pin!(answering);
        loop {
            tokio::select! {
                biased;
                Some(piece) = pending.recv() => {
                    let _ = out.send(json_frame(Tag::UpcallPiece, &UpcallPiece { id, piece })).await;
                }
                result = &mut answering => {
                    while let Ok(piece) = pending.try_recv() {
                        let _ = out.send(json_frame(Tag::UpcallPiece, &UpcallPiece { id, piece })).await;
                    }
                    break result;
                }
            }
        }
    } else {
        handler.answer(origin, call.upcall).await
    };
    let reply = UpcallReply {
        id,
        answer: UpcallAnswer::from(result),
    };
    let _ = out.send(json_frame(Tag::UpcallAnswer, &reply)).await;
}

fn lost(link: &NodeLink, why: impl std::fmt::Display) -> SandboxSessionsError {
    tracing::warn!(node = link.address(), %why, "a run's node was lost");
    SandboxSessionsError::Failed(NODE_LOST.to_owned())
}

/// Aborts a task when the run it serves returns or is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
#[path = "remote_run_tests.rs"]
mod tests;
