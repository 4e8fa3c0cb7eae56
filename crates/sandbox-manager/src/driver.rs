//! What owns a session's socket (the "driver") and runs its calls one at a time: it writes each
//! call's request, reads what the session sends within the call's bounds, answers upcalls,
//! interrupts on time-out or cancellation (SIGINT, then SIGKILL), and keeps the session in step
//! for the next call. Each call runs it in the caller's own task, one turn at a time; between
//! calls it is looked at by the session's watcher ([`crate::session`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolgate_sandbox::frame::{self, FrameError};
use toolgate_sandbox::protocol::{ExitInfo, SessionRequest};
use toolgate_sandbox::stages::{Stage, Stages};
use toolgate_sandbox::upcall::UpcallAnswer;
use toolgate_sandbox::{ExecOutcome, Interruption, OutputChunk, Work};

use crate::bounded::CallBudget;
use crate::frame_io::FrameReader;
use crate::keep::{KEEP_FRAME_BYTES, Keep, KeepAnswer, KeepStep, keep_frame};
use crate::session_error::{KillReason, SessionError};
use crate::session_input::{Idle, Step, on_frame, poll_idle};
use crate::upcalls::{PendingUpcalls, Ready, Upcalls};

/// One call for a session: what to run, for how long, and where its output, its upcalls and
/// its cancellation come from. Cheap to clone (a call that never reached its session is made
/// again in another).
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) work: Arc<Work>,
    /// Added to the run's environment, for this run only.
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) timeout: Duration,
    pub(crate) output: Option<mpsc::Sender<OutputChunk>>,
    pub(crate) upcalls: Option<Upcalls>,
    pub(crate) cancel: Option<CancellationToken>,
    /// Keep the whole of a stream that passes its inline limit in a workspace file.
    pub(crate) spill: bool,
}

async fn cancelled(token: Option<&CancellationToken>) {
    match token {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

/// A session's socket and what is known of the session's state.
pub(crate) struct Driver {
    pid: i32,
    stream: UnixStream,
    reader: FrameReader,
    exit: watch::Receiver<Option<ExitInfo>>,
    /// false once the zygote is gone (no `exited` can come any more)
    exit_open: bool,
    grace: Duration,
    next_id: u64,
    /// How the session broke the protocol, once it has (said in the call's error).
    violation: Option<String>,
    /// Why the session ended; shared with the [`Session`] handle.
    ended: Arc<Mutex<Option<String>>>,
}

/// Where a running call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    Interrupted(Interruption),
    Killed(KillReason),
}

/// How long to wait for the zygote's `exited` once the socket has ended, or for the socket to
/// end once `exited` came (a grandchild may hold it open), before concluding.
const SETTLE: Duration = Duration::from_secs(2);

/// How long after a bash command's own time limit the session is interrupted from outside.
const BASH_SLACK: Duration = Duration::from_secs(2);

/// How long the answer to an upcall may take to be written (the session reads it at once).
const ANSWER_WRITE: Duration = Duration::from_secs(10);

/// The request frame of call `id`.
fn request_frame(id: u64, call: &Call) -> SessionRequest<'_> {
    let stream = call.output.is_some();
    match &*call.work {
        Work::Python { code } => SessionRequest::Exec {
            id,
            code,
            stream,
            spill: call.spill,
            env: &call.env,
        },
        Work::Bash { command } => SessionRequest::Bash {
            id,
            command,
            stream,
            timeout_s: call.timeout.as_secs_f64(),
            spill: call.spill,
            env: &call.env,
        },
        Work::Sqlite(sqlite) => SessionRequest::Sqlite {
            id,
            path: &sqlite.path,
            statement: &sqlite.statement,
            write: sqlite.write,
            max_rows: sqlite.max_rows,
            max_bytes: sqlite.max_bytes,
            timeout_s: call.timeout.as_secs_f64(),
        },
    }
}

impl Driver {
    /// The driver of session `pid`, reading `stream`; `ended` is shared with its handle.
    pub(crate) fn new(
        pid: i32,
        stream: UnixStream,
        exit: watch::Receiver<Option<ExitInfo>>,
        grace: Duration,
        ended: Arc<Mutex<Option<String>>>,
    ) -> Self {
        Self {
            pid,
            stream,
            reader: FrameReader::default(),
            exit,
            exit_open: true,
            grace,
            next_id: 0,
            violation: None,
            ended,
        }
    }

    /// Looks at the socket while no call runs, without waiting; see [`poll_idle`].
    pub(crate) fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<Idle> {
        poll_idle(
            &mut self.reader,
            &self.stream,
            self.next_id == 0,
            self.pid,
            cx,
        )
    }

    /// Hands the wake-up for the socket's next input to the task of `cx` (the watcher, as a call
    /// ends: the call's reads had taken it over). True when input is there already.
    pub(crate) fn watch_with(&self, cx: &mut Context<'_>) -> bool {
        self.stream.poll_read_ready(cx).is_ready()
    }

    /// Ends a session that `idle` showed to be gone or out of step; says why it ended.
    pub(crate) async fn end_idle(&mut self, idle: Idle) -> String {
        match idle {
            Idle::Ended => self.settle(None, Duration::ZERO).await.to_string(),
            Idle::Spoke => {
                self.violated("it wrote to its socket between calls".to_owned())
                    .await
            }
        }
    }

    /// Runs one call, its outcome sent to `reply`. Returns why the session ended, if it did.
    pub(crate) async fn run(
        &mut self,
        call: Call,
        reply: oneshot::Sender<Result<ExecOutcome, SessionError>>,
        stages: Option<Arc<Stages>>,
    ) -> Option<String> {
        if call.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
            // cancelled while waiting its turn: a SIGINT now would find nothing running and be ignored
            let _ = reply.send(Err(SessionError::Cancelled));
            return None;
        }
        self.next_id += 1;
        let id = self.next_id;
        let mut budget = CallBudget::default();
        let limit = call.timeout;
        let mut interrupt_at = Instant::now() + limit;
        if matches!(*call.work, Work::Bash { .. } | Work::Sqlite(_)) {
            // bash has its own time limit in the session (SIGTERM, then SIGKILL to the
            // command's process group, reported as timed_out), and so has a SQLite statement
            // (its progress handler); SIGINT is the back-stop
            interrupt_at += BASH_SLACK;
        }
        let stages = stages.as_deref();
        let reply = match self
            .send_request(&request_frame(id, &call), limit, reply)
            .await
        {
            Ok(reply) => reply,
            Err(ended) => return ended,
        };
        if let Some(stages) = stages {
            stages.mark(Stage::Sent);
        }

        // upcalls being answered; dropped (their tasks aborted) when the call ends
        let mut upcalls = PendingUpcalls::new(call.upcalls);
        let mut phase = Phase::Running;
        let far = Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
        let mut kill_at = far;
        let mut resend_at = far;
        let mut give_up_at = far;
        loop {
            let running = phase == Phase::Running;
            let interrupted = matches!(phase, Phase::Interrupted(_));
            let killed = match phase {
                Phase::Killed(reason) => Some(reason),
                _ => None,
            };
            tokio::select! {
                frame = self.reader.next(&mut self.stream, budget.frame_limit()) => match frame {
                    Ok(Some(body)) => match on_frame(id, &body, call.output.as_ref(), &mut budget) {
                        Step::Continue => {}
                        Step::Upcall(asked) => {
                            if let Some(answer) = upcalls.ask(asked)
                                && let Err(what) = self.send_answer(id, answer).await
                            {
                                return self.broken(reply, what, limit).await;
                            }
                        }
                        Step::Reply(mut outcome) => {
                            if let Some(stages) = stages {
                                stages.mark(Stage::Answered);
                            }
                            if let Phase::Interrupted(why) = phase {
                                outcome.interrupted = Some(why);
                            }
                            if let Some(reason) = killed {
                                // the answer came, but the kill is on its way
                                self.mark_ended("it was killed after its time limit");
                                let _ = reply.send(Ok(*outcome));
                                return Some(self.settle(Some(reason), limit).await.to_string());
                            }
                            return self.answer(reply, Ok(*outcome)).await;
                        }
                        Step::Rejected(e) => return self.answer(reply, Err(e)).await,
                        Step::Broken(what) => return self.broken(reply, what, limit).await,
                    },
                    Ok(None) | Err(FrameError::Truncated | FrameError::Io(_) | FrameError::Closed) => {
                        let error = self.settle(killed, limit).await;
                        return self.finish(reply, error);
                    }
                    Err(FrameError::Oversized(len)) => {
                        let what = format!(
                            "a frame of {len} bytes, over the {} bytes left of the call's budget",
                            budget.frame_limit()
                        );
                        return self.broken(reply, what, limit).await;
                    }
                    Err(e) => return self.broken(reply, format!("{e}"), limit).await,
                },
                Some(ready) = upcalls.next(), if killed.is_none() => {
                    let sent = match ready {
                        Ready::Answer(n, answer) => self.send_answer(id, (n, answer)).await,
                        Ready::Piece(n, piece) => self.send_piece(id, n, &piece).await,
                    };
                    if let Err(what) = sent {
                        return self.broken(reply, what, limit).await;
                    }
                }
                changed = self.exit.changed(), if self.exit_open => {
                    self.exit_open = changed.is_ok();
                    if self.exit.borrow().is_some() {
                        // the process is gone; its socket should end at once (unless something
                        // it forked holds it): read what is left, but not for long
                        give_up_at = give_up_at.min(Instant::now() + SETTLE);
                    }
                }
                () = tokio::time::sleep_until(interrupt_at), if running => {
                    phase = self.interrupt(Interruption::Timeout, &mut kill_at, &mut resend_at);
                }
                () = cancelled(call.cancel.as_ref()), if running => {
                    phase = self.interrupt(Interruption::Cancelled, &mut kill_at, &mut resend_at);
                }
                () = tokio::time::sleep_until(kill_at), if interrupted => {
                    let reason = match phase {
                        Phase::Interrupted(Interruption::Timeout) => KillReason::Timeout,
                        _ => KillReason::Cancelled,
                    };
                    self.signal(Signal::KILL);
                    phase = Phase::Killed(reason);
                    give_up_at = Instant::now() + SETTLE;
                }
                () = tokio::time::sleep_until(resend_at), if interrupted => {
                    self.signal(Signal::INT);
                    resend_at = Instant::now() + self.resend_interval();
                }
                () = tokio::time::sleep_until(give_up_at) => {
                    let error = self.settle(killed, limit).await;
                    return self.finish(reply, error);
                }
            }
        }
    }

    /// Asks the session to checkpoint or restore its state, between calls, and reads its answer
    /// within `limit` (then it is killed: a session that cannot keep its state in time is one
    /// whose code is in the way). Returns why the session ended, if it did.
    pub(crate) async fn keep(
        &mut self,
        keep: Keep,
        limit: Duration,
        reply: oneshot::Sender<Result<KeepAnswer, SessionError>>,
    ) -> Option<String> {
        self.next_id += 1;
        let id = self.next_id;
        let deadline = Instant::now() + limit;
        let reply = match self.send_request(&keep.frame(id), limit, reply).await {
            Ok(reply) => reply,
            Err(ended) => return ended,
        };
        // what it may send besides its answer (a stray output frame) counts against a budget
        let mut budget = CallBudget::default();
        loop {
            let max = budget.frame_limit().min(KEEP_FRAME_BYTES);
            tokio::select! {
                frame = self.reader.next(&mut self.stream, max) => match frame {
                    Ok(Some(body)) => {
                        budget.charge_frame(body.len());
                        match keep_frame(id, &keep, &body) {
                            KeepStep::Continue => {}
                            KeepStep::Answer(answer) => return self.answer(reply, Ok(answer)).await,
                            KeepStep::Rejected(e) => return self.answer(reply, Err(e)).await,
                            KeepStep::Broken(what) => return self.broken(reply, what, limit).await,
                        }
                    }
                    Ok(None) | Err(FrameError::Truncated | FrameError::Io(_) | FrameError::Closed) => {
                        let error = self.settle(None, limit).await;
                        return self.finish(reply, error);
                    }
                    Err(e) => return self.broken(reply, format!("{e}"), limit).await,
                },
                () = tokio::time::sleep_until(deadline) => {
                    self.signal(Signal::KILL);
                    let error = self.settle(Some(KillReason::Timeout), limit).await;
                    return self.finish(reply, error);
                }
            }
        }
    }

    /// Writes a request frame within `limit`. A session takes a request only between runs,
    /// when it is always reading; the limit bounds the write anyway, since a half-written frame
    /// would leave it out of step. `Err`: the request was answered already (too large, or the
    /// session is gone), with why the session ended if it did.
    async fn send_request<T>(
        &mut self,
        request: &SessionRequest<'_>,
        limit: Duration,
        reply: oneshot::Sender<Result<T, SessionError>>,
    ) -> Result<oneshot::Sender<Result<T, SessionError>>, Option<String>> {
        let bytes = match frame::encode(request) {
            Ok(bytes) => bytes,
            Err(e) => {
                let _ = reply.send(Err(SessionError::TooLarge(e.to_string())));
                return Err(None);
            }
        };
        match tokio::time::timeout(limit, self.stream.write_all(&bytes)).await {
            Ok(Ok(())) => Ok(reply),
            Ok(Err(_)) => {
                // its end of the socket is closed: it had died before this request reached it
                let error = self.settle(None, limit).await;
                Err(self.finish(reply, SessionError::Ended(error.to_string())))
            }
            Err(_) => {
                self.signal(Signal::KILL);
                let error = self.settle(Some(KillReason::Timeout), limit).await;
                Err(self.finish(reply, error))
            }
        }
    }

    /// Writes the answer to one of the running request's upcalls. The session is reading it
    /// (the code waits for it), so the write is quick; one that is not read within
    /// [`ANSWER_WRITE`] is a session not keeping to the protocol.
    async fn send_answer(
        &mut self,
        id: u64,
        (upcall, answer): (u64, UpcallAnswer),
    ) -> Result<(), String> {
        let frame = SessionRequest::UpcallResult { id, upcall, answer };
        let bytes = frame::encode(&frame).map_err(|e| format!("an upcall's answer: {e}"))?;
        match tokio::time::timeout(ANSWER_WRITE, self.stream.write_all(&bytes)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!(
                "the answer to its upcall could not be written: {e}"
            )),
            Err(_) => Err(format!(
                "it did not read the answer to its upcall within {} s",
                ANSWER_WRITE.as_secs()
            )),
        }
    }

    /// Writes a piece of a streamed answer to one of the running request's upcalls, under the
    /// rule of [`Self::send_answer`].
    async fn send_piece(&mut self, id: u64, upcall: u64, data: &str) -> Result<(), String> {
        let frame = SessionRequest::UpcallProgress { id, upcall, data };
        let bytes = frame::encode(&frame).map_err(|e| format!("a piece of an answer: {e}"))?;
        match tokio::time::timeout(ANSWER_WRITE, self.stream.write_all(&bytes)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("a piece of an answer could not be written: {e}")),
            Err(_) => Err(format!(
                "it did not read a piece of an answer within {} s",
                ANSWER_WRITE.as_secs()
            )),
        }
    }

    /// Answers a call that got its reply. Bytes already read past it came when nothing was due:
    /// the session is marked ended before the answer goes out, then killed.
    async fn answer<T>(
        &mut self,
        reply: oneshot::Sender<Result<T, SessionError>>,
        answer: Result<T, SessionError>,
    ) -> Option<String> {
        if !self.reader.has_pending() {
            let _ = reply.send(answer);
            return None;
        }
        let why = "it sent more after its reply".to_owned();
        self.mark_ended(&format!("it broke the protocol: {why}"));
        let _ = reply.send(answer);
        Some(self.violated(why).await)
    }

    /// The session broke the protocol during a call: it is killed, and the call fails saying how.
    async fn broken<T>(
        &mut self,
        reply: oneshot::Sender<Result<T, SessionError>>,
        what: String,
        limit: Duration,
    ) -> Option<String> {
        tracing::warn!(pid = self.pid, "session broke the protocol: {what}");
        self.violation = Some(what);
        self.signal(Signal::KILL);
        let error = self.settle(Some(KillReason::Protocol), limit).await;
        self.finish(reply, error)
    }

    /// The session broke the protocol between calls: it is killed; returns why it ended.
    async fn violated(&mut self, what: String) -> String {
        tracing::warn!(pid = self.pid, "session broke the protocol: {what}");
        self.violation = Some(what);
        self.signal(Signal::KILL);
        self.settle(Some(KillReason::Protocol), Duration::ZERO)
            .await
            .to_string()
    }

    /// Replies to a call that ended without a result; returns why the session ended. The session
    /// is marked ended before the reply goes out, so the caller never sees it alive after this.
    fn finish<T>(
        &self,
        reply: oneshot::Sender<Result<T, SessionError>>,
        error: SessionError,
    ) -> Option<String> {
        let why = error.to_string();
        self.mark_ended(&why);
        let _ = reply.send(Err(error));
        Some(why)
    }

    fn mark_ended(&self, why: &str) {
        let mut ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        if ended.is_none() {
            *ended = Some(why.to_owned());
        }
    }

    fn interrupt(
        &self,
        why: Interruption,
        kill_at: &mut Instant,
        resend_at: &mut Instant,
    ) -> Phase {
        self.signal(Signal::INT);
        *kill_at = Instant::now() + self.grace;
        *resend_at = Instant::now() + self.resend_interval();
        Phase::Interrupted(why)
    }

    /// SIGINT is sent again a few times within the grace: the session ignores a SIGINT that
    /// arrives just before its code starts running (it cannot tell it from a stray one), and a
    /// lost interrupt must not cost the session its life.
    fn resend_interval(&self) -> Duration {
        (self.grace / 4).max(Duration::from_millis(50))
    }

    fn signal(&self, signal: Signal) {
        // Only while the zygote is there and has not reported the child's exit: after that the
        // pid may be reaped and reused by another process.
        if self.exit.has_changed().is_err() || self.exit.borrow().is_some() {
            return;
        }
        if let Some(pid) = Pid::from_raw(self.pid) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }

    /// The socket has ended (or is given up on): waits a little for the zygote's word on how the
    /// process ended, makes sure it has, and says how.
    async fn settle(&mut self, mut killed: Option<KillReason>, limit: Duration) -> SessionError {
        // (no exit status from a gone zygote: the child died with it, nothing to kill)
        if !self.exited() && !self.wait_exit().await && self.exit.has_changed().is_ok() {
            // alive without its socket (the code closed it): of no use to anyone any more
            self.signal(Signal::KILL);
            killed = killed.or(Some(KillReason::Protocol));
            self.wait_exit().await;
        }
        let info = self.exit.borrow().clone();
        match (killed, info) {
            (Some(reason), _) => SessionError::Killed {
                reason,
                limit,
                grace: self.grace,
                violation: self
                    .violation
                    .clone()
                    .filter(|_| reason == KillReason::Protocol),
            },
            (None, Some(info)) => SessionError::Died(info),
            (None, None) => SessionError::Lost,
        }
    }

    /// The session is being closed: end of file on its socket makes it exit.
    pub(crate) async fn close(&mut self) {
        let _ = self.stream.shutdown().await;
        if self.exit.has_changed().is_err() || self.exit.borrow().is_some() {
            return;
        }
        if !self.wait_exit().await {
            self.signal(Signal::KILL);
            self.wait_exit().await;
        }
    }

    /// Whether the zygote has reported the child's exit.
    fn exited(&self) -> bool {
        self.exit.borrow().is_some()
    }

    /// Waits (a little) for the zygote's `exited`; false if it did not come.
    async fn wait_exit(&mut self) -> bool {
        let waited = tokio::time::timeout(SETTLE, self.exit.wait_for(Option::is_some)).await;
        matches!(waited, Ok(Ok(_)))
    }
}
