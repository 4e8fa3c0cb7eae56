//! One run on the node: the front end's frames in (the run, its files, upcall answers, a
//! cancel), the run's frames out (output, upcalls, how it ended), over one HTTP/2 stream.
//!
//! The front end keeps its side open until the run's end: should it end or break first (the
//! front end died, or dropped the call), the run is interrupted as a cancelled call is.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::Response;
use http_body_util::BodyExt;
use http_body_util::channel::Channel;
use hyper::body::Incoming;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use toolgate_sandbox::upcall::{
    MAX_UPCALLS_IN_FLIGHT, Upcall, UpcallAnswer, UpcallError, UpcallErrorCode, UpcallHandler,
    UpcallOrigin, UpcallValue,
};
use toolgate_sandbox::{
    MAX_UPLOAD_FILES, OUTPUT_QUEUE, OutputChunk, RunRequest, SandboxSessions, SandboxSessionsError,
    WorkspaceFile,
};

use crate::lease::NodeLease;
use crate::wire::{
    Done, ErrorKind, FrameReader, RunHeader, Tag, UpcallCall, UpcallPiece, UpcallReply, WireError,
    json_frame, parse, split_file,
};

/// The body of every answer of a node: whole, or a run's frames as they come.
pub(crate) type AnswerBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

/// How long the front end has to send a run's start and files.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Frames waiting to be written to the front end.
const OUT_QUEUE: usize = 64;

/// Answers at once with the run's frames to come; the run goes on in a task of its own.
pub(crate) fn start(
    sessions: Arc<dyn SandboxSessions>,
    lease: Arc<NodeLease>,
    body: Incoming,
) -> Response<AnswerBody> {
    let (mut sink, answer) = Channel::<Bytes, std::convert::Infallible>::new(8);
    let (out, mut queue) = mpsc::channel::<Bytes>(OUT_QUEUE);
    tokio::spawn(async move {
        while let Some(frame) = queue.recv().await {
            let last = frame.get(4) == Some(&(Tag::Done as u8));
            if sink.send_data(frame).await.is_err() || last {
                break;
            }
        }
    });
    tokio::spawn(run(sessions, lease, FrameReader::new(body), out));
    Response::new(answer.boxed())
}

async fn run(
    sessions: Arc<dyn SandboxSessions>,
    lease: Arc<NodeLease>,
    mut frames: FrameReader<Incoming>,
    out: mpsc::Sender<Bytes>,
) {
    let request = match tokio::time::timeout(START_TIMEOUT, read_start(&mut frames)).await {
        Ok(Ok(request)) => request,
        Ok(Err(message)) => return finish(&out, Done::Error(refused(message))).await,
        Err(_) => {
            return finish(
                &out,
                Done::Error(refused("the run's start did not come in time".to_owned())),
            )
            .await;
        }
    };
    let (header, files) = request;
    if !lease.holds(header.incarnation) {
        let stale = WireError {
            kind: ErrorKind::Stale,
            message: "this node is not the incarnation the run was placed on".to_owned(),
        };
        return finish(&out, Done::Error(stale)).await;
    }
    if lease.draining() && !live_here(&*sessions, &header).await {
        let draining = WireError {
            kind: ErrorKind::Stale,
            message: "this node is draining: it takes no new sessions".to_owned(),
        };
        return finish(&out, Done::Error(draining)).await;
    }
    let cancel = CancellationToken::new();
    let upcalls = header
        .upcalls
        .then(|| Arc::new(RemoteUpcalls::new(out.clone())));
    let ended = Arc::new(Notify::new());
    let mut forwarder = None;
    let output = header.output.then(|| {
        let (sender, chunks) = mpsc::channel(OUTPUT_QUEUE);
        forwarder = Some(tokio::spawn(forward_output(
            chunks,
            out.clone(),
            Arc::clone(&ended),
        )));
        sender
    });
    let listener = tokio::spawn(listen(frames, cancel.clone(), upcalls.clone()));
    let mut request = RunRequest::new(
        header.account,
        header.session_id,
        header.work,
        header.limits,
    );
    request.files = files;
    request.env = header.env;
    request.existing_only = header.existing_only;
    request.spill = header.spill;
    request.egress = header.egress;
    request.output = output;
    request.upcalls = upcalls.map(|u| u as Arc<dyn UpcallHandler>);
    request.cancel = Some(cancel);
    let result = sessions.run(request).await;
    ended.notify_one();
    if let Some(forwarder) = forwarder {
        let _ = forwarder.await;
    }
    listener.abort();
    let done = match result {
        Ok(outcome) => Done::Ran {
            interrupted: outcome.outcome.interrupted,
            outcome: Box::new(outcome),
        },
        Err(failure) => {
            if let SandboxSessionsError::Unavailable(source) = &failure {
                tracing::warn!(error = %source, "node: the sandbox could not run a call");
            }
            Done::Error(WireError::from(&failure))
        }
    };
    finish(&out, done).await;
}

/// Whether the run's session lives on this node now (a draining node serves only those).
async fn live_here(sessions: &dyn SandboxSessions, header: &RunHeader) -> bool {
    let Some(id) = &header.session_id else {
        return false;
    };
    sessions
        .list(&header.account)
        .await
        .iter()
        .any(|s| s.id == *id && s.state == toolgate_sandbox::SessionState::Live)
}

async fn finish(out: &mpsc::Sender<Bytes>, done: Done) {
    let _ = out.send(json_frame(Tag::Done, &done)).await;
}

fn refused(message: String) -> WireError {
    WireError::from(&SandboxSessionsError::Refused(message))
}

/// The run's header and its files, as the front end sent them first.
async fn read_start(
    frames: &mut FrameReader<Incoming>,
) -> Result<(RunHeader, Vec<WorkspaceFile>), String> {
    let header: RunHeader = match frames.next().await {
        Ok(Some((Tag::Start, payload))) => {
            parse(Tag::Start, &payload).map_err(|e| e.to_string())?
        }
        Ok(_) => return Err("a run must begin with its start".to_owned()),
        Err(e) => return Err(e.to_string()),
    };
    let count = usize::try_from(header.files).unwrap_or(usize::MAX);
    if count > MAX_UPLOAD_FILES {
        return Err(format!("at most {MAX_UPLOAD_FILES} files may be uploaded"));
    }
    let mut files = Vec::with_capacity(count);
    for _ in 0..count {
        match frames.next().await {
            Ok(Some((Tag::File, payload))) => {
                let (path, content) = split_file(&payload).map_err(|e| e.to_string())?;
                files.push(WorkspaceFile { path, content });
            }
            Ok(_) => return Err("fewer files came than the start announced".to_owned()),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok((header, files))
}

/// Passes output on until the run has ended, then what was left of it.
async fn forward_output(
    mut chunks: mpsc::Receiver<OutputChunk>,
    out: mpsc::Sender<Bytes>,
    ended: Arc<Notify>,
) {
    loop {
        tokio::select! {
            biased;
            chunk = chunks.recv() => match chunk {
                Some(chunk) => {
                    if out.send(json_frame(Tag::Output, &chunk)).await.is_err() {
                        return;
                    }
                }
                None => return,
            },
            () = ended.notified() => break,
        }
    }
    while let Ok(chunk) = chunks.try_recv() {
        if out.send(json_frame(Tag::Output, &chunk)).await.is_err() {
            return;
        }
    }
}

/// The front end's frames after the start: upcall answers and their pieces, a cancel. Its side
/// ending or breaking interrupts the run.
async fn listen(
    mut frames: FrameReader<Incoming>,
    cancel: CancellationToken,
    upcalls: Option<Arc<RemoteUpcalls>>,
) {
    loop {
        match frames.next().await {
            Ok(Some((Tag::Cancel, _))) => cancel.cancel(),
            Ok(Some((Tag::UpcallAnswer, payload))) => {
                if let (Ok(reply), Some(upcalls)) =
                    (parse::<UpcallReply>(Tag::UpcallAnswer, &payload), &upcalls)
                {
                    upcalls.answered(reply);
                }
            }
            Ok(Some((Tag::UpcallPiece, payload))) => {
                if let (Ok(piece), Some(upcalls)) =
                    (parse::<UpcallPiece>(Tag::UpcallPiece, &payload), &upcalls)
                {
                    upcalls.piece(piece);
                }
            }
            Ok(Some((tag, _))) => {
                tracing::warn!(
                    ?tag,
                    "node: an unexpected frame from a front end; the run is interrupted"
                );
                cancel.cancel();
                return;
            }
            Ok(None) | Err(_) => {
                cancel.cancel();
                return;
            }
        }
    }
}

/// Upcalls of one run, passed to the front end that sent it, which answers them.
struct RemoteUpcalls {
    out: mpsc::Sender<Bytes>,
    next: AtomicU32,
    pending: Mutex<HashMap<u32, Pending>>,
}

struct Pending {
    answer: oneshot::Sender<UpcallAnswer>,
    pieces: Option<mpsc::Sender<String>>,
}

impl RemoteUpcalls {
    fn new(out: mpsc::Sender<Bytes>) -> Self {
        Self {
            out,
            next: AtomicU32::new(0),
            pending: Mutex::new(HashMap::new()),
        }
    }

    fn answered(&self, reply: UpcallReply) {
        let waiting = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&reply.id);
        if let Some(waiting) = waiting {
            let _ = waiting.answer.send(reply.answer);
        }
    }

    fn piece(&self, piece: UpcallPiece) {
        let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pieces) = pending.get(&piece.id).and_then(|p| p.pieces.as_ref()) {
            // never wait: a piece the session does not take in time is dropped (the whole
            // answer still comes)
            let _ = pieces.try_send(piece.piece);
        }
    }

    async fn ask(
        &self,
        upcall: Upcall,
        pieces: Option<mpsc::Sender<String>>,
    ) -> Result<UpcallValue, UpcallError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        {
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            if pending.len() >= MAX_UPCALLS_IN_FLIGHT {
                return Err(UpcallError::new(
                    UpcallErrorCode::Busy,
                    "too many upcalls of this call at once",
                ));
            }
            pending.insert(id, Pending { answer, pieces });
        }
        let forget = Forget { upcalls: self, id };
        if self
            .out
            .send(json_frame(Tag::Upcall, &UpcallCall { id, upcall }))
            .await
            .is_err()
        {
            return Err(gone());
        }
        let answer = answered.await.map_err(|_| gone());
        drop(forget);
        match answer? {
            UpcallAnswer::Value(value) => Ok(value),
            UpcallAnswer::Error(error) => Err(error),
        }
    }
}

/// Removes an upcall's entry however its wait ends (answered, or dropped with its call).
struct Forget<'a> {
    upcalls: &'a RemoteUpcalls,
    id: u32,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.upcalls
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

fn gone() -> UpcallError {
    UpcallError::new(
        UpcallErrorCode::Unavailable,
        "the server answering this call's upcalls is gone; nothing was charged",
    )
}

#[async_trait]
impl UpcallHandler for RemoteUpcalls {
    async fn answer(
        &self,
        _origin: UpcallOrigin,
        upcall: Upcall,
    ) -> Result<UpcallValue, UpcallError> {
        self.ask(upcall, None).await
    }

    async fn answer_streaming(
        &self,
        _origin: UpcallOrigin,
        upcall: Upcall,
        pieces: mpsc::Sender<String>,
    ) -> Result<UpcallValue, UpcallError> {
        self.ask(upcall, Some(pieces)).await
    }
}
