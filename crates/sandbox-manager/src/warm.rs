//! Warm sessions: session children started ahead of time, fully confined and idle, with their
//! cgroups, workspace and uid already made (made with [`ManagerConfig::warm_limits`]). A new
//! session takes one instead of waiting for the whole start (fork of the zygote, confinement,
//! cgroups, mounts: 10 to 30 ms), and the filler task makes a new one in the background.
//!
//! - The pool is sized by demand: it keeps ready as many as new sessions wanted one in the last
//!   [`DEMAND_WINDOW`], at least [`ManagerConfig::warm_sessions`] and at most
//!   [`ManagerConfig::warm_sessions_max`] (and grows past the floor only while memory allows,
//!   `warming.rs`). A burst is then served from sessions made before it, and the next burst of
//!   the same size finds them ready; once demand falls, the extra ones are closed.
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
//! [`ManagerConfig::warm_sessions_max`]: crate::ManagerConfig::warm_sessions_max
//! [`ManagerConfig::warm_limits`]: crate::ManagerConfig::warm_limits

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::incarnation::{Live, Place};
use crate::manager_types::ManagerConfig;
use toolgate_sandbox::policy::Limits;

/// The directory under the manager's root that holds the warm sessions' workspaces (no account
/// directory starts with '.').
pub(super) const WARM_DIR: &str = ".warm";

/// How far back the pool looks at demand: it keeps ready as many warm sessions as new sessions
/// wanted one in this window (so a burst repeated within it finds them made).
pub(super) const DEMAND_WINDOW: Duration = Duration::from_secs(10);

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
    /// When new sessions wanted a warm one (whether one was ready or not), oldest first: those
    /// of the last [`DEMAND_WINDOW`], at most [`ManagerConfig::warm_sessions_max`] of them.
    wanted: VecDeque<Instant>,
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

    /// How many warm sessions to keep (ready or being made) at `now`: the demand of the last
    /// [`DEMAND_WINDOW`], at least the floor, at most the ceiling. 0 when warm sessions are off.
    pub(super) fn target(&mut self, config: &ManagerConfig, now: Instant) -> usize {
        self.forget_wants(now);
        let ceiling = config.warm_sessions_max.max(config.warm_sessions);
        self.wanted.len().clamp(config.warm_sessions, ceiling)
    }

    /// Notes that a new session wanted a warm one at `now`.
    fn note_wanted(&mut self, config: &ManagerConfig, now: Instant) {
        self.forget_wants(now);
        if self.wanted.len() >= config.warm_sessions_max.max(config.warm_sessions) {
            self.wanted.pop_front();
        }
        self.wanted.push_back(now);
    }

    /// Drops the wants older than [`DEMAND_WINDOW`].
    fn forget_wants(&mut self, now: Instant) {
        while self
            .wanted
            .front()
            .is_some_and(|at| now.saturating_duration_since(*at) >= DEMAND_WINDOW)
        {
            self.wanted.pop_front();
        }
    }

    /// Whether the pool keeps more than its floor (so the filler looks again when demand
    /// passes out of the window, to close the extra ones).
    pub(super) fn above_floor(&self, config: &ManagerConfig) -> bool {
        self.ready.len() + self.filling > config.warm_sessions
    }

    /// Takes out the oldest ready warm sessions past `target` (demand fell).
    pub(super) fn take_surplus(&mut self, target: usize) -> Vec<Warm> {
        let surplus = (self.ready.len() + self.filling).saturating_sub(target);
        let surplus = surplus.min(self.ready.len());
        self.ready.drain(..surplus).collect()
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
        self.note_wanted(config, Instant::now());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ZygoteConfig;

    fn config(floor: usize, ceiling: usize) -> ManagerConfig {
        let mut config = ManagerConfig::new(ZygoteConfig::new("/nonexistent", "/nonexistent"), "/");
        config.warm_sessions = floor;
        config.warm_sessions_max = ceiling;
        config
    }

    #[test]
    fn the_target_follows_the_demand_of_the_window_between_floor_and_ceiling() {
        let config = config(2, 5);
        let mut pool = Pool::default();
        let start = Instant::now();
        assert_eq!(pool.target(&config, start), 2, "no demand: the floor");
        for _ in 0..3 {
            pool.note_wanted(&config, start);
        }
        assert_eq!(pool.target(&config, start), 3);
        for _ in 0..10 {
            pool.note_wanted(&config, start + Duration::from_secs(1));
        }
        assert_eq!(pool.target(&config, start), 5, "at most the ceiling");
        assert!(
            pool.wanted.len() <= 5,
            "no more wants kept than the ceiling"
        );
        let later = start + Duration::from_secs(1) + DEMAND_WINDOW;
        assert_eq!(
            pool.target(&config, later),
            2,
            "demand past the window is forgotten"
        );
    }

    #[test]
    fn a_ceiling_under_the_floor_is_a_pool_of_fixed_size() {
        let config = config(4, 0);
        let mut pool = Pool::default();
        let now = Instant::now();
        for _ in 0..20 {
            pool.note_wanted(&config, now);
        }
        assert_eq!(pool.target(&config, now), 4);
        assert_eq!(
            pool.target(&self::config(0, 0), now),
            0,
            "warm sessions off"
        );
    }
}
