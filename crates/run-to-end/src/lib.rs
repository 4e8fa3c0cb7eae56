//! A call's work polled in its caller's own task rather than a task spawned for it (handing
//! a call to another task and back costs it wake-ups on a multi-thread runtime: 0.02–0.08 ms
//! of a warm call at p50, README, goal 2), with what the spawned task gave kept. The server
//! polls a tool call's work this way, and a session its call on the session's socket:
//! - dropped half-way (the client went away), the work is cancelled through its token and the
//!   rest of it runs in a task of its own, so it ends as it ends on cancellation rather than
//!   being dropped in the middle;
//! - a panic inside it is caught and becomes an error of this call, not of the connection.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio_util::sync::CancellationToken;

/// The work panicked; nothing more is known.
#[derive(Debug)]
pub struct Panicked;

/// `work`, polled where it is awaited, carried to its end if dropped before it.
pub struct RunToEnd<T: Send + 'static> {
    work: Option<Pin<Box<dyn Future<Output = T> + Send>>>,
    cancel: CancellationToken,
}

impl<T: Send + 'static> RunToEnd<T> {
    /// `work`, cancelled through `cancel` when dropped unfinished.
    pub fn new(work: impl Future<Output = T> + Send + 'static, cancel: CancellationToken) -> Self {
        Self {
            work: Some(Box::pin(work)),
            cancel,
        }
    }
}

impl<T: Send + 'static> Future for RunToEnd<T> {
    type Output = Result<T, Panicked>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(work) = this.work.as_mut() else {
            return Poll::Ready(Err(Panicked)); // polled after its end: never by `.await`
        };
        match catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(value)) => {
                this.work = None;
                Poll::Ready(Ok(value))
            }
            Err(_) => {
                this.work = None; // half-run after a panic: neither polled nor carried on
                Poll::Ready(Err(Panicked))
            }
        }
    }
}

impl<T: Send + 'static> Drop for RunToEnd<T> {
    fn drop(&mut self) {
        let Some(work) = self.work.take() else {
            return;
        };
        self.cancel.cancel();
        // outside a runtime (its shutdown dropping the request) there is nothing to run it on
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = work.await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn finished_work_gives_its_value() {
        let answer = RunToEnd::new(async { 42 }, CancellationToken::new()).await;
        assert_eq!(answer.ok(), Some(42));
    }

    #[tokio::test]
    async fn a_panic_is_an_error_of_the_call() {
        let work = async {
            if std::hint::black_box(true) {
                panic!("inside the work");
            }
            1
        };
        assert!(RunToEnd::new(work, CancellationToken::new()).await.is_err());
    }

    #[tokio::test]
    async fn dropped_half_way_it_is_cancelled_and_runs_to_its_end() {
        let cancel = CancellationToken::new();
        let ended_cancelled = Arc::new(AtomicBool::new(false));
        let (seen, token) = (ended_cancelled.clone(), cancel.clone());
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
        let work = async move {
            let _ = started_tx.send(());
            token.cancelled().await;
            tokio::task::yield_now().await; // more of it after the cancellation
            seen.store(true, Ordering::SeqCst);
            let _ = ended_tx.send(());
        };
        let caller = tokio::spawn(RunToEnd::new(work, cancel.clone()));
        started_rx.await.expect("the work started");
        caller.abort(); // the client went away
        let _ = caller.await;
        tokio::time::timeout(Duration::from_secs(5), ended_rx)
            .await
            .expect("the rest of the work ran")
            .expect("the work ended by itself");
        assert!(cancel.is_cancelled());
        assert!(ended_cancelled.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn finished_work_is_not_cancelled_when_dropped() {
        let cancel = CancellationToken::new();
        let run = RunToEnd::new(async {}, cancel.clone());
        assert!(run.await.is_ok());
        assert!(!cancel.is_cancelled());
    }
}
