//! Why a call in a session failed.

use std::fmt;
use std::time::Duration;

use toolgate_sandbox::protocol::ExitInfo;

/// Why the server killed a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    /// the code ran past its time limit and ignored the interrupt
    Timeout,
    /// the call was cancelled and the code ignored the interrupt
    Cancelled,
    /// the session broke the protocol (an unreadable or oversized frame, or it closed its socket
    /// while a call ran)
    Protocol,
}

impl fmt::Display for KillReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Timeout => "timeout",
            Self::Cancelled => "cancellation",
            Self::Protocol => "protocol violation",
        })
    }
}

/// Why a call failed. After `Killed`, `OutOfMemory`, `Died`, `Lost` and `Ended` the session is
/// gone (its variables with it); after `Rejected`, `Cancelled` and `TooLarge` it lives on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SessionError {
    /// the server killed the session (SIGKILL) after the interrupt went unanswered
    #[error("{}", killed_message(*.reason, .limit, .grace, .violation.as_deref()))]
    Killed {
        /// why
        reason: KillReason,
        /// the call's time limit
        limit: Duration,
        /// how long the code had to answer the interrupt
        grace: Duration,
        /// for a protocol violation, what the session did (a frame over a cap, bytes between
        /// calls, …)
        violation: Option<String>,
    },
    /// the kernel killed the session's interpreter when the session reached its memory limit
    /// (its cgroup's OOM count rose as it died). A `MemoryError` raised inside Python (an
    /// allocation refused) is not this: it is an ordinary exception in the call's outcome.
    #[error(
        "out of memory: the session used its limit of {} (memory_bytes) and was killed; its \
         variables are lost",
        human_bytes(*.limit_bytes)
    )]
    OutOfMemory {
        /// the session's memory limit, in bytes
        limit_bytes: u64,
    },
    /// the session process ended during the call by itself (a signal, an exit)
    #[error("the session process {0}; its variables are lost")]
    Died(ExitInfo),
    /// the session's socket closed and no exit status came (the zygote is gone too)
    #[error(
        "the session process ended and the zygote (fork server) is gone; its variables are lost"
    )]
    Lost,
    /// the session had already ended before this call
    #[error("the session has ended ({0})")]
    Ended(String),
    /// the session answered the request with an error frame
    #[error("the session rejected the request ({code}): {message}")]
    Rejected {
        /// the error frame's code
        code: String,
        /// its message
        message: String,
    },
    /// the call was cancelled before it started (nothing ran)
    #[error("the call was cancelled before it started")]
    Cancelled,
    /// the request does not fit in one frame
    #[error("the request is too large: {0}")]
    TooLarge(String),
}

fn killed_message(
    reason: KillReason,
    limit: &Duration,
    grace: &Duration,
    violation: Option<&str>,
) -> String {
    match reason {
        KillReason::Timeout => format!(
            "the code ran past its time limit of {} s and did not stop within {} s of being \
             interrupted, so its session was killed (SIGKILL); its variables are lost",
            limit.as_secs_f64(),
            grace.as_secs_f64()
        ),
        KillReason::Cancelled => format!(
            "the call was cancelled and the code did not stop within {} s of being interrupted, \
             so its session was killed (SIGKILL); its variables are lost",
            grace.as_secs_f64()
        ),
        KillReason::Protocol => match violation {
            Some(what) => format!(
                "the session broke the server's protocol ({what}) and was killed (SIGKILL); its \
                 variables are lost"
            ),
            None => "the session broke the server's protocol and was killed (SIGKILL)".to_owned(),
        },
    }
}

/// A byte count as people write it: "1 GiB", "512 MiB", "1536 bytes" when not a whole unit.
pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    UNITS
        .iter()
        .find(|(size, _)| bytes >= *size && bytes.is_multiple_of(*size))
        .map_or_else(
            || format!("{bytes} bytes"),
            |(size, unit)| format!("{} {unit}", bytes / size),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_reads_plainly() {
        let error = SessionError::OutOfMemory {
            limit_bytes: 1 << 30,
        };
        assert_eq!(
            error.to_string(),
            "out of memory: the session used its limit of 1 GiB (memory_bytes) and was killed; \
             its variables are lost"
        );
        assert_eq!(human_bytes(64 << 20), "64 MiB");
        assert_eq!(human_bytes(1536), "1536 bytes");
    }
}
