//! One session child, as the manager holds it: a handle that hands calls to the task owning its
//! socket (`driver.rs`), one at a time.
//!
//! The socket belongs to a task (the "driver"), not to the caller's future, so that a call whose
//! caller goes away (the future dropped, the request cancelled) is still carried through: the code
//! is interrupted with SIGINT, its reply is read and dropped, and the session stays in step for
//! the next call. A call's time limit works the same way, with SIGKILL when SIGINT is not enough.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use toolgate_sandbox::policy::Limits;
use toolgate_sandbox::protocol::ExitInfo;
use toolgate_sandbox::{ExecOutcome, OUTPUT_QUEUE, OutputChunk, Work};

use crate::driver::{Call, Driver, Job};
use crate::keep::{Keep, KeepAnswer};
use crate::session_error::SessionError;

/// A forked session child. Dropping it closes the session (the child reads end of file and exits;
/// it is killed if it does not); [`Session::close`] does the same and waits for it.
#[derive(Debug)]
pub struct SandboxSession {
    pid: i32,
    jobs: mpsc::UnboundedSender<Job>,
    ended: Arc<Mutex<Option<String>>>,
    driver: Option<JoinHandle<()>>,
}

impl SandboxSession {
    pub(crate) fn start(
        pid: i32,
        stream: UnixStream,
        exit: watch::Receiver<Option<ExitInfo>>,
        grace: Duration,
    ) -> Self {
        let (jobs, jobs_rx) = mpsc::unbounded_channel();
        let ended = Arc::new(Mutex::new(None));
        let driver = Driver::new(pid, stream, exit, grace, Arc::clone(&ended));
        let handle = tokio::spawn(driver.serve(jobs_rx));
        Self {
            pid,
            jobs,
            ended,
            driver: Some(handle),
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
        self.ended.lock().unwrap_or_else(|p| p.into_inner()).clone()
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
    /// — the outcome still holds all of the output). After `limits.timeout`, or when `cancel`
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
    pub(crate) async fn call(&self, call: Call) -> Result<ExecOutcome, SessionError> {
        let (reply, reply_rx) = oneshot::channel();
        let stages = toolgate_sandbox::stages::current();
        if self
            .jobs
            .send(Job::Call {
                call,
                reply,
                stages,
            })
            .is_err()
        {
            return Err(self.ended_error());
        }
        reply_rx.await.unwrap_or_else(|_| Err(self.ended_error()))
    }

    /// Asks the session to checkpoint or restore its Python state (see `keep.rs`), in turn
    /// with its calls; killed if it does not answer within `limit`.
    pub(crate) async fn keep(
        &self,
        keep: Keep,
        limit: Duration,
    ) -> Result<KeepAnswer, SessionError> {
        let (reply, reply_rx) = oneshot::channel();
        if self.jobs.send(Job::Keep { keep, limit, reply }).is_err() {
            return Err(self.ended_error());
        }
        reply_rx.await.unwrap_or_else(|_| Err(self.ended_error()))
    }

    fn ended_error(&self) -> SessionError {
        SessionError::Ended(
            self.end_reason()
                .unwrap_or_else(|| "its driver stopped".to_owned()),
        )
    }

    /// Closes the session and waits until its process has exited (killed after two seconds).
    pub async fn close(mut self) {
        let (jobs, _) = mpsc::unbounded_channel();
        drop(std::mem::replace(&mut self.jobs, jobs));
        if let Some(driver) = self.driver.take() {
            let _ = driver.await;
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
