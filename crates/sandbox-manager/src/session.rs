//! One session child, as the manager holds it: a handle whose calls take turns on the session's
//! socket (`driver.rs`), and a watcher task that looks at the socket between calls.
//!
//! A call runs the driver in the caller's own task (handing it to a task of its own and back cost
//! a warm call two wake-ups, README, goal 2), but is still carried through when its caller goes
//! away (the future dropped, the request cancelled): [`RunToEnd`] runs the rest of it in a task
//! of its own, where the code is interrupted with SIGINT, its reply is read and dropped, and the
//! session stays in step for the next call. A call's time limit works the same way, with SIGKILL
//! when SIGINT is not enough.
//!
//! Between calls nothing is due from the session: the watcher is woken by any byte or end of
//! file on the socket, or the zygote's word that the process exited, and ends the session. A
//! call takes the socket's wake-up over while it reads, and hands it back to the watcher as it
//! ends, so a warm call wakes no task but its caller's.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::net::UnixStream;
use tokio::sync::{OwnedMutexGuard, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};
use toolgate_run_to_end::RunToEnd;
use toolgate_sandbox::policy::Limits;
use toolgate_sandbox::protocol::ExitInfo;
use toolgate_sandbox::{ExecOutcome, OUTPUT_QUEUE, OutputChunk, Work};

use crate::driver::{Call, Driver};
use crate::keep::{Keep, KeepAnswer};
use crate::session_error::SessionError;
use crate::session_input::Idle;

/// A forked session child. Dropping it closes the session (the child reads end of file and exits;
/// it is killed if it does not); [`Session::close`] does the same and waits for it.
#[derive(Debug)]
pub struct SandboxSession {
    pid: i32,
    shared: Arc<Shared>,
    /// Cancelled when the handle is closed or dropped: the watcher then closes the session.
    closing: Option<DropGuard>,
    watcher: Option<JoinHandle<()>>,
}

/// A turn's work on the driver: its future, which says why the session ended, if it did.
type OnDriver<'d> = Pin<Box<dyn Future<Output = Option<String>> + Send + 'd>>;

/// What a session's calls and its watcher share.
struct Shared {
    /// The driver, held by one call at a time (in the order they came) or by the watcher while
    /// it ends the session; `None` once the session has ended.
    driver: Arc<tokio::sync::Mutex<Option<Driver>>>,
    /// The watcher's waker, for a call to hand the socket's wake-up back to as it ends.
    watcher: Mutex<Option<Waker>>,
    /// Why the session ended; shared with the driver.
    ended: Arc<Mutex<Option<String>>>,
}

impl SandboxSession {
    pub(crate) fn start(
        pid: i32,
        stream: UnixStream,
        exit: watch::Receiver<Option<ExitInfo>>,
        grace: Duration,
    ) -> Self {
        let ended = Arc::new(Mutex::new(None));
        let watched = exit.clone();
        let driver = Driver::new(pid, stream, exit, grace, Arc::clone(&ended));
        let shared = Arc::new(Shared {
            driver: Arc::new(tokio::sync::Mutex::new(Some(driver))),
            watcher: Mutex::new(None),
            ended,
        });
        let closing = CancellationToken::new();
        let watcher = tokio::spawn(watch(Arc::clone(&shared), watched, closing.clone()));
        Self {
            pid,
            shared,
            closing: Some(closing.drop_guard()),
            watcher: Some(watcher),
        }
    }

    /// The session child's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether the session can still take calls.
    pub fn is_alive(&self) -> bool {
        self.end_reason().is_none()
    }

    /// Why the session ended, once it has.
    pub fn end_reason(&self) -> Option<String> {
        self.shared.end_reason()
    }

    /// Runs Python code; see [`Session::run`].
    pub async fn exec(
        &self,
        code: &str,
        limits: &Limits,
        on_output: Option<&mut (dyn FnMut(OutputChunk) + Send)>,
    ) -> Result<ExecOutcome, SessionError> {
        let work = Work::Python {
            code: code.to_owned(),
        };
        self.run(work, limits, on_output, None).await
    }

    /// Runs a bash command line; see [`Session::run`].
    pub async fn bash(
        &self,
        command: &str,
        limits: &Limits,
        on_output: Option<&mut (dyn FnMut(OutputChunk) + Send)>,
    ) -> Result<ExecOutcome, SessionError> {
        let work = Work::Bash {
            command: command.to_owned(),
        };
        self.run(work, limits, on_output, None).await
    }

    /// Runs one piece of work. With `on_output`, output is streamed to it while the code runs
    /// (every chunk before this returns; while [`OUTPUT_QUEUE`] chunks wait for it, newer ones
    /// are dropped, so a session cannot pile up tiny chunks for a caller that is not keeping up
    /// — the outcome still holds all of the output). It is called in this task, between the
    /// reads of the session's socket: one that blocks holds up the call. After `limits.timeout`, or when `cancel`
    /// fires or this future is dropped, the code is interrupted (SIGINT: a KeyboardInterrupt,
    /// the session survives, and the outcome's `interrupted` says why); if no result comes
    /// within the grace period the session is killed and the call fails with
    /// [`SessionError::Killed`]. Upcalls the code makes are answered with an error.
    pub async fn run(
        &self,
        work: Work,
        limits: &Limits,
        on_output: Option<&mut (dyn FnMut(OutputChunk) + Send)>,
        cancel: Option<&CancellationToken>,
    ) -> Result<ExecOutcome, SessionError> {
        relay_output(on_output, |output| {
            self.call(Call {
                work: Arc::new(work),
                env: BTreeMap::new(),
                timeout: limits.timeout,
                output,
                upcalls: None,
                cancel: cancel.cloned(),
                spill: false,
            })
        })
        .await
    }

    /// Runs `call` (see [`Session::run`]), its output sent to its own channel, its upcalls to
    /// its handler.
    pub(crate) async fn call(&self, mut call: Call) -> Result<ExecOutcome, SessionError> {
        let stages = toolgate_sandbox::stages::current();
        // the caller going away cancels the call, as its own token does
        let gone = call
            .cancel
            .as_ref()
            .map_or_else(CancellationToken::new, CancellationToken::child_token);
        call.cancel = Some(gone.clone());
        self.in_turn(gone, move |driver: &mut Driver, reply| {
            Box::pin(driver.run(call, reply, stages))
        })
        .await
    }

    /// Asks the session to checkpoint or restore its Python state (see `keep.rs`), in turn
    /// with its calls; killed if it does not answer within `limit`.
    pub(crate) async fn keep(
        &self,
        keep: Keep,
        limit: Duration,
    ) -> Result<KeepAnswer, SessionError> {
        self.in_turn(
            CancellationToken::new(),
            move |driver: &mut Driver, reply| Box::pin(driver.keep(keep, limit, reply)),
        )
        .await
    }

    /// Runs `work` on the driver once the calls before have had their turns, in this task, and
    /// carried to its end (cancelled through `cancel`) should this future be dropped.
    async fn in_turn<T: Send + 'static>(
        &self,
        cancel: CancellationToken,
        work: impl for<'d> FnOnce(
            &'d mut Driver,
            oneshot::Sender<Result<T, SessionError>>,
        ) -> OnDriver<'d>
        + Send
        + 'static,
    ) -> Result<T, SessionError> {
        let shared = Arc::clone(&self.shared);
        let turn = async move {
            let mut turn = Turn::take(&shared).await;
            let Some(driver) = turn.driver() else {
                return Err(shared.ended_error());
            };
            let (reply, mut answer) = oneshot::channel();
            let ended = work(driver, reply).await;
            turn.end(ended);
            answer
                .try_recv()
                .unwrap_or_else(|_| Err(shared.ended_error()))
        };
        match RunToEnd::new(turn, cancel).await {
            Ok(answer) => answer,
            // its turn was dropped half-way, and with it the driver (see `Turn`)
            Err(_) => Err(self.shared.ended_error()),
        }
    }

    /// Closes the session and waits until its process has exited (killed after two seconds).
    pub async fn close(mut self) {
        drop(self.closing.take());
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.await;
        }
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("ended", &self.end_reason())
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn end_reason(&self) -> Option<String> {
        self.ended.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn mark_ended(&self, why: &str) {
        let mut ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        if ended.is_none() {
            *ended = Some(why.to_owned());
        }
    }

    fn ended_error(&self) -> SessionError {
        SessionError::Ended(
            self.end_reason()
                .unwrap_or_else(|| "its driver stopped".to_owned()),
        )
    }

    /// Looks at the socket while no call holds the driver; `Pending` while a call does (it
    /// wakes the watcher as it ends, see [`Turn::end`]) or nothing came. `Ready` with the
    /// driver held: what came, or `None` once the session has ended.
    fn poll_idle(
        &self,
        cx: &mut Context<'_>,
    ) -> Poll<(Option<Idle>, OwnedMutexGuard<Option<Driver>>)> {
        {
            // before trying the lock, so that a call holding it finds the waker as it ends
            let mut watcher = self.watcher.lock().unwrap_or_else(|p| p.into_inner());
            if !watcher.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *watcher = Some(cx.waker().clone());
            }
        }
        let Ok(mut guard) = Arc::clone(&self.driver).try_lock_owned() else {
            return Poll::Pending;
        };
        match guard.as_mut() {
            None => Poll::Ready((None, guard)),
            Some(driver) => match driver.poll_idle(cx) {
                Poll::Ready(idle) => Poll::Ready((Some(idle), guard)),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

/// One call's (or keep's) hold on the driver. Dropped without [`Turn::end`] (its future dropped
/// half-way: a panic, or a runtime shutting down), it drops the driver, which is then out of
/// step: the session ends.
struct Turn {
    guard: OwnedMutexGuard<Option<Driver>>,
    shared: Arc<Shared>,
    ended: bool,
}

impl Turn {
    /// The hold on the driver, once the calls before this one have had their turns.
    async fn take(shared: &Arc<Shared>) -> Self {
        Self {
            guard: Arc::clone(&shared.driver).lock_owned().await,
            shared: Arc::clone(shared),
            ended: false,
        }
    }

    /// The driver; `None` when the session has ended.
    fn driver(&mut self) -> Option<&mut Driver> {
        self.guard.as_mut()
    }

    /// Gives the driver back, or drops it when the session ended (`ended`: why). The watcher is
    /// handed the socket's wake-up again, and woken if input is there already.
    fn end(mut self, ended: Option<String>) {
        self.ended = true;
        if let Some(why) = ended {
            self.shared.mark_ended(&why);
            *self.guard = None;
            return;
        }
        let watcher = self
            .shared
            .watcher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let Some(watcher) = watcher else {
            return; // not polled yet: its first poll registers it
        };
        let ready = self
            .guard
            .as_ref()
            .is_some_and(|driver| driver.watch_with(&mut Context::from_waker(&watcher)));
        drop(self); // the lock is let go first, so that the watcher can take it
        if ready {
            watcher.wake();
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if !self.ended {
            self.shared.mark_ended("its call was abandoned half-way");
            *self.guard = None;
        }
    }
}

/// The session's watcher: between calls, ends the session on any input, end of file or exit;
/// when the handle is closed, closes it once the calls before have had their turns.
async fn watch(
    shared: Arc<Shared>,
    mut exit: watch::Receiver<Option<ExitInfo>>,
    closing: CancellationToken,
) {
    let mut exit_open = true;
    loop {
        tokio::select! {
            () = closing.cancelled() => {
                let mut guard = shared.driver.lock().await;
                if let Some(mut driver) = guard.take() {
                    driver.close().await;
                    shared.mark_ended("it was closed");
                }
                return;
            }
            changed = exit.changed(), if exit_open => {
                exit_open = changed.is_ok();
                let Some(info) = exit.borrow().clone() else { continue };
                // a call running now settles it itself; between calls it ends here
                let mut guard = shared.driver.lock().await;
                if guard.take().is_some() {
                    shared.mark_ended(&SessionError::Died(info).to_string());
                }
                return;
            }
            (idle, mut guard) = std::future::poll_fn(|cx| shared.poll_idle(cx)) => {
                let Some(idle) = idle else { return };
                if let Some(mut driver) = guard.take() {
                    let why = driver.end_idle(idle).await;
                    shared.mark_ended(&why);
                }
                return;
            }
        }
    }
}

/// Runs `run`, given an output channel when there is an `on_output` to pass its chunks to as
/// they come ([`OUTPUT_QUEUE`] of them may wait; every chunk is passed on before this returns).
pub(crate) async fn relay_output<F: std::future::Future>(
    on_output: Option<&mut (dyn FnMut(OutputChunk) + Send)>,
    run: impl FnOnce(Option<mpsc::Sender<OutputChunk>>) -> F,
) -> F::Output {
    let Some(callback) = on_output else {
        return run(None).await;
    };
    let (tx, mut rx) = mpsc::channel(OUTPUT_QUEUE);
    let result = {
        let running = run(Some(tx));
        tokio::pin!(running);
        loop {
            tokio::select! {
                biased;
                Some(chunk) = rx.recv() => callback(chunk),
                result = &mut running => break result,
            }
        }
    };
    // the driver sends every chunk before the reply: pass on what is queued
    while let Ok(chunk) = rx.try_recv() {
        callback(chunk);
    }
    result
}
