//! Where a request's time goes, stage by stage (the server's opt-in `Server-Timing` answer
//! header): the server, the call's use case and the session's driver each stamp the moment their
//! stage ended on one clock the request carries. The clock reaches code deep in the call through
//! a task-local ([`scope`], [`mark`]), so no signature along the way changes, and a request
//! without one costs a failed task-local lookup per stamp. Only durations are ever kept.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The stages of a tool call as the server sees them, in the order they end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The caller's key (or token) resolved to an account.
    Authenticated,
    /// The body read and checked as JSON-RPC, the request routed to the call.
    Read,
    /// The call admitted and its charge decided (its commit may still be running).
    Admitted,
    /// The call's request frame written to its session's socket.
    Sent,
    /// The session's answer frame read.
    Answered,
    /// The use case done: output redacted and merged, the charge's commit waited for.
    Ran,
    /// The call's history record queued.
    Recorded,
    /// The JSON-RPC answer written.
    Encoded,
}

impl Stage {
    const ALL: [Stage; 8] = [
        Stage::Authenticated,
        Stage::Read,
        Stage::Admitted,
        Stage::Sent,
        Stage::Answered,
        Stage::Ran,
        Stage::Recorded,
        Stage::Encoded,
    ];

    /// The `Server-Timing` metric name of the stage that ends here.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Authenticated => "auth",
            Stage::Read => "read",
            Stage::Admitted => "admit",
            Stage::Sent => "send",
            Stage::Answered => "session",
            Stage::Ran => "finish",
            Stage::Recorded => "history",
            Stage::Encoded => "encode",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One request's clock: when it started, and when each stage ended (nanoseconds after the
/// start, 0 for a stage not reached). Shared by the tasks that serve the request.
#[derive(Debug)]
pub struct Stages {
    started: Instant,
    ends: [AtomicU64; Stage::ALL.len()],
}

impl Stages {
    /// A clock started now.
    pub fn start() -> Arc<Self> {
        Arc::new(Self {
            started: Instant::now(),
            ends: Default::default(),
        })
    }

    /// Stamps the end of `stage` now (the first stamp of a stage counts: an upcall's own call
    /// runs inside the outer one and must not move its stamps).
    pub fn mark(&self, stage: Stage) {
        let nanos = u64::try_from(self.started.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        let _ = self.ends[stage.index()].compare_exchange(
            0,
            nanos,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// The `Server-Timing` value: each reached stage's duration since the previous reached one,
    /// in milliseconds, then the total (`auth;dur=0.012, read;dur=0.004, …, total;dur=0.180`).
    pub fn header_value(&self) -> String {
        let mut out = String::with_capacity(160);
        let mut previous = 0;
        for stage in Stage::ALL {
            let end = self.ends[stage.index()].load(Ordering::Relaxed);
            if end == 0 || end < previous {
                continue;
            }
            let _ = write!(out, "{};dur={:.3}, ", stage.name(), ms(end - previous));
            previous = end;
        }
        let total = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let _ = write!(out, "total;dur={:.3}", ms(total));
        out
    }
}

fn ms(nanos: u64) -> f64 {
    nanos as f64 / 1e6
}

tokio::task_local! {
    static CURRENT: Arc<Stages>;
}

/// Runs `work` with `stages` as the clock [`mark`] stamps.
pub async fn scope<F: Future>(stages: Arc<Stages>, work: F) -> F::Output {
    CURRENT.scope(stages, work).await
}

/// Stamps the end of `stage` on the current task's clock, if it has one.
pub fn mark(stage: Stage) {
    let _ = CURRENT.try_with(|stages| stages.mark(stage));
}

/// The current task's clock, to hand to another task (a session's driver).
pub fn current() -> Option<Arc<Stages>> {
    CURRENT.try_with(Arc::clone).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn metrics(value: &str) -> Vec<(String, f64)> {
        value
            .split(", ")
            .map(|metric| {
                let (name, dur) = metric.split_once(";dur=").unwrap();
                (name.to_owned(), dur.parse().unwrap())
            })
            .collect()
    }

    #[tokio::test]
    async fn only_reached_stages_are_named_in_order_with_a_total() {
        let stages = Stages::start();
        stages.mark(Stage::Authenticated);
        scope(stages.clone(), async {
            mark(Stage::Admitted);
            let handed = current().unwrap();
            handed.mark(Stage::Answered);
            // a second stamp does not move the first
            mark(Stage::Admitted);
        })
        .await;
        mark(Stage::Encoded); // outside the scope: no clock, nothing stamped
        let names: Vec<String> = metrics(&stages.header_value())
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(names, ["auth", "admit", "session", "total"]);
        assert!(current().is_none());
    }

    #[test]
    fn durations_add_up_to_at_most_the_total() {
        let stages = Stages::start();
        for stage in Stage::ALL {
            std::thread::sleep(std::time::Duration::from_micros(200));
            stages.mark(stage);
        }
        let metrics = metrics(&stages.header_value());
        assert_eq!(metrics.len(), Stage::ALL.len() + 1);
        let (total, parts) = metrics.split_last().unwrap();
        let sum: f64 = parts.iter().map(|(_, dur)| dur).sum();
        assert!(parts.iter().all(|(_, dur)| *dur >= 0.2), "{metrics:?}");
        assert!(sum <= total.1 + 0.001, "{sum} > {}", total.1);
    }
}
