//! The limits a session's code runs under, with the caller's and the operator's say in them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Limits of one execution and its session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Wall-clock limit of one call: interrupt first, kill if that fails.
    pub timeout: Duration,
    /// Memory of the whole session (its cgroup), in bytes.
    pub memory_bytes: u64,
    /// Processes and threads of the session.
    pub max_pids: u32,
    /// Output kept inline per stream; the rest is cut with a note.
    pub output_bytes: usize,
    /// Size of the session's private workspace and /tmp, in bytes.
    pub workspace_bytes: u64,
}

/// The operator's defaults and ceilings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitSettings {
    /// `timeout_s` when the call gives none.
    pub default_timeout: Duration,
    /// The largest `timeout_s` a call may ask for.
    pub max_timeout: Duration,
    /// The largest `timeout_s` of a call that runs as an MCP task.
    pub max_task_timeout: Duration,
    /// Per-session memory.
    pub memory_bytes: u64,
    /// Per-session process and thread count.
    pub max_pids: u32,
    /// Inline output per stream.
    pub output_bytes: usize,
    /// Workspace size.
    pub workspace_bytes: u64,
}

impl Default for LimitSettings {
    fn default() -> Self {
        Self {
            default_timeout: Duration::from_secs(60),
            max_timeout: Duration::from_secs(300),
            max_task_timeout: Duration::from_secs(3600),
            memory_bytes: 1024 * 1024 * 1024,
            max_pids: 256,
            output_bytes: 1024 * 1024,
            workspace_bytes: 512 * 1024 * 1024,
        }
    }
}

/// A caller's limit that the operator does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    /// `timeout_s` outside 1..=max
    #[error("timeout_s must be between 1 and {max}, got {given}")]
    Timeout {
        /// what the call asked for
        given: u64,
        /// the operator's ceiling
        max: u64,
    },
    /// `timeout_s` past a request's ceiling but within a task's, in a call that is no task
    #[error(
        "timeout_s {given} is past the {max} s a call may run while its client waits; \
         up to {task_max} s needs the call to run as an MCP task (a client that supports \
         tasks asks for one)"
    )]
    NeedsTask {
        /// what the call asked for
        given: u64,
        /// the ceiling of a call that is no task
        max: u64,
        /// the ceiling of a task
        task_max: u64,
    },
}

impl LimitSettings {
    /// The limits of a call that asked for `timeout_s` (or not), while its client waits.
    pub fn for_call(&self, timeout_s: Option<u64>) -> Result<Limits, LimitsError> {
        self.for_call_as(timeout_s, false)
    }

    /// The limits of a call that asked for `timeout_s` (or not); `as_task`: the call may run as
    /// an MCP task, up to the task ceiling.
    pub fn for_call_as(
        &self,
        timeout_s: Option<u64>,
        as_task: bool,
    ) -> Result<Limits, LimitsError> {
        let max = self.max_timeout.as_secs();
        let task_max = self.max_task_timeout.as_secs().max(max);
        let timeout = match timeout_s {
            None => self.default_timeout,
            Some(given) if (1..=max).contains(&given) => Duration::from_secs(given),
            Some(given) if given > max && given <= task_max && as_task => {
                Duration::from_secs(given)
            }
            Some(given) if given > max && given <= task_max => {
                return Err(LimitsError::NeedsTask {
                    given,
                    max,
                    task_max,
                });
            }
            Some(given) => {
                return Err(LimitsError::Timeout {
                    given,
                    max: if as_task { task_max } else { max },
                });
            }
        };
        Ok(Limits {
            timeout,
            memory_bytes: self.memory_bytes,
            max_pids: self.max_pids,
            output_bytes: self.output_bytes,
            workspace_bytes: self.workspace_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_default_and_are_bounded() {
        let settings = LimitSettings::default();
        assert_eq!(
            settings.for_call(None).unwrap().timeout,
            Duration::from_secs(60)
        );
        assert_eq!(
            settings.for_call(Some(300)).unwrap().timeout,
            Duration::from_secs(300)
        );
        // past a waiting call's ceiling, only a call that may run as a task, up to its own
        assert_eq!(
            settings.for_call(Some(301)),
            Err(LimitsError::NeedsTask {
                given: 301,
                max: 300,
                task_max: 3600
            })
        );
        assert_eq!(
            settings.for_call_as(Some(3600), true).unwrap().timeout,
            Duration::from_secs(3600)
        );
        assert_eq!(
            settings.for_call_as(Some(3601), true),
            Err(LimitsError::Timeout {
                given: 3601,
                max: 3600
            })
        );
        assert_eq!(
            settings.for_call(Some(3601)),
            Err(LimitsError::Timeout {
                given: 3601,
                max: 300
            })
        );
        assert!(settings.for_call(Some(0)).is_err());
        assert_eq!(settings.for_call(None).unwrap().memory_bytes, 1 << 30);
    }
}
