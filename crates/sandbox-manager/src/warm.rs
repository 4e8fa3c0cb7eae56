//! Warm sessions: a few session children started ahead of time, fully confined and idle, with
//! their cgroups, workspace and uid already made ([`ManagerConfig::warm_sessions`], made with
//! [`ManagerConfig::warm_limits`]). A new session takes one instead of waiting for the whole start
//! (fork of the zygote, confinement, cgroups, mounts: 20 to 30 ms), and the filler task makes a
//! new one in the background.
//!
//! - Each warm session has a place of its own (`<root>/.warm/<manager>-<n>`, cgroup
//!   `warm-<n>`, a uid from the table, the highest free one, never one of the last
//!   [`ManagerConfig::warm_sessions`] free ones), which the entry that takes it keeps for its
//!   life: nothing about a warm session is renamed or moved when it is taken.
//! - Ready ones live in the table ([`crate::session_table::Table::pool`]), under its lock: taking one is
//!   a pop, so one is never handed to two sessions.
//! - One whose process died, or whose zygote did, is discarded when found (at a take, at each
//!   top-up, and when the filler sees the zygote end, which also refills from a new one).
//! - A warm session is a session like any other until taken: shutdown closes them all, and
//!   dropping the manager without a shutdown kills them (by `Live`'s fields' `Drop`).
//!
//! [`ManagerConfig::warm_sessions`]: crate::ManagerConfig::warm_sessions
//! [`ManagerConfig::warm_limits`]: crate::ManagerConfig::warm_limits

use std::collections::VecDeque;

use crate::incarnation::{Live, Place};
use crate::manager_types::ManagerConfig;
use toolgate_sandbox::policy::Limits;

/// The directory under the manager's root that holds the warm sessions' workspaces (no account
/// directory starts with '.').
pub(super) const WARM_DIR: &str = ".warm";

/// A warm session: confined, idle, in its own place.
#[derive(Debug)]
pub(super) struct Warm {
    pub(super) place: Place,
    pub(super) live: Live,
}

impl Warm {
    /// Whether it can still serve: its process and its zygote are alive.
    pub(super) fn usable(&self) -> bool {
        self.live.session.is_alive() && self.live.zygote.is_alive()
    }
}

/// The ready warm sessions and the bookkeeping of the filler.
#[derive(Debug, Default)]
pub(super) struct Pool {
    pub(super) ready: VecDeque<Warm>,
    /// Warm sessions being made.
    pub(super) filling: usize,
    /// Numbers the places of warm sessions.
    pub(super) next: u64,
    /// A call of other limits was logged (once: see [`Pool::take`]).
    mismatch_logged: bool,
}

/// Whether a call's limits are those warm sessions are made with: memory and processes (the
/// cgroup's) and the workspace size (the tmpfs's, and the largest file). The time limit is per
/// call, the output limit is not the session's.
fn fits(limits: &Limits, warm: &Limits) -> bool {
    limits.memory_bytes == warm.memory_bytes
        && limits.max_pids == warm.max_pids
        && limits.workspace_bytes == warm.workspace_bytes
}

impl Pool {
    /// Whether a call with `limits` could take a warm session.
    pub(super) fn serves(&self, limits: &Limits, config: &ManagerConfig) -> bool {
        config.warm_sessions > 0 && fits(limits, &config.warm_limits)
    }

    /// A usable warm session for a call with `limits`, if there is one, and the unusable ones
    /// found on the way (to be discarded).
    pub(super) fn take(
        &mut self,
        limits: &Limits,
        config: &ManagerConfig,
    ) -> (Option<Warm>, Vec<Warm>) {
        let mut unusable = Vec::new();
        if !self.serves(limits, config) {
            if config.warm_sessions > 0 && !self.mismatch_logged {
                // calls normally come with the server's limits: most likely `warm_limits` was not
                // set to them, and every new session starts cold
                self.mismatch_logged = true;
                tracing::warn!(
                    "a new session's limits (memory {} bytes, {} processes, workspace {} bytes) are                      not those of the warm sessions (memory {} bytes, {} processes, workspace {}                      bytes): it starts without one; set ManagerConfig::warm_limits to the                      server's limits (logged once)",
                    limits.memory_bytes,
                    limits.max_pids,
                    limits.workspace_bytes,
                    config.warm_limits.memory_bytes,
                    config.warm_limits.max_pids,
                    config.warm_limits.workspace_bytes,
                );
            }
            return (None, unusable);
        }
        while let Some(warm) = self.ready.pop_front() {
            if warm.usable() {
                return (Some(warm), unusable);
            }
            unusable.push(warm);
        }
        (None, unusable)
    }

    /// Takes out every ready warm session that can no longer serve.
    pub(super) fn take_unusable(&mut self) -> Vec<Warm> {
        let mut unusable = Vec::new();
        for warm in std::mem::take(&mut self.ready) {
            if warm.usable() {
                self.ready.push_back(warm);
            } else {
                unusable.push(warm);
            }
        }
        unusable
    }

    /// A ready warm session to give up for its uid (every uid is taken).
    pub(super) fn evict(&mut self) -> Option<Warm> {
        self.ready.pop_back()
    }

    /// Every ready warm session (shutdown).
    pub(super) fn drain(&mut self) -> Vec<Warm> {
        self.ready.drain(..).collect()
    }

    /// The process ids of the ready warm sessions.
    pub(super) fn pids(&self) -> Vec<i32> {
        self.ready
            .iter()
            .map(|warm| warm.live.session.pid())
            .collect()
    }
}
