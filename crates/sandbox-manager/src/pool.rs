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
//! - Ready ones live in the table ([`crate::table::Table::pool`]), under its lock: taking one is
//!   a pop, so one is never handed to two sessions.
//! - One whose process died, or whose zygote did, is discarded when found (at a take, at each
//!   top-up, and when the filler sees the zygote end, which also refills from a new one).
//! - A warm session is a session like any other until taken: shutdown closes them all, and
//!   dropping the manager without a shutdown kills them (by `Live`'s fields' `Drop`).
//!
//! [`ManagerConfig::warm_sessions`]: crate::ManagerConfig::warm_sessions
//! [`ManagerConfig::warm_limits`]: crate::ManagerConfig::warm_limits

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::live::{Live, Place};
use crate::manager_types::{ManagerConfig, ManagerError};
use crate::table::ManagerState;
use crate::workspace::remove_tree;
use crate::zygote::Zygote;
use toolgate_sandbox::policy::Limits;

/// The directory under the manager's root that holds the warm sessions' workspaces (no account
/// directory starts with '.').
pub(super) const WARM_DIR: &str = ".warm";

/// After a failed top-up, the filler waits this long before the next, doubling up to
/// [`MAX_BACKOFF`] while failures go on.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A warm session: confined, idle, in its own place.
#[derive(Debug)]
pub(super) struct Warm {
    pub(super) place: Place,
    pub(super) live: Live,
}

impl Warm {
    /// Whether it can still serve: its process and its zygote are alive.
    fn usable(&self) -> bool {
        self.live.session.is_alive() && self.live.zygote.is_alive()
    }
}

/// The ready warm sessions and the bookkeeping of the filler.
#[derive(Debug, Default)]
pub(super) struct Pool {
    ready: VecDeque<Warm>,
    /// Warm sessions being made.
    filling: usize,
    /// Numbers the places of warm sessions.
    next: u64,
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
    fn take_unusable(&mut self) -> Vec<Warm> {
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
    fn drain(&mut self) -> Vec<Warm> {
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

/// Closes a warm session (its processes, cgroups and mounts), removes its directories, and only
/// then gives its uid back.
pub(super) async fn discard(inner: Arc<ManagerState>, warm: Warm) {
    warm.live.close().await;
    forget_place(&inner, &warm.place).await;
}

/// Removes a warm session's directories, then gives its uid back.
async fn forget_place(inner: &ManagerState, place: &Place) {
    for dir in [&place.workspace, &place.tmpdir] {
        remove_tree(dir).await;
    }
    inner.table().free_uid(place.uid);
}

/// Makes warm sessions until there are [`ManagerConfig::warm_sessions`] (ready or being made),
/// one at a time (the zygote forks one at a time anyway, and a burst would only compete with
/// the calls being served). Stops early, without an error, when no uid is free; fails with the
/// first session that cannot be made.
pub(super) async fn top_up(inner: &Arc<ManagerState>) -> Result<(), ManagerError> {
    loop {
        if inner.shut.load(Ordering::Acquire) {
            return Ok(());
        }
        let (unusable, place) = {
            let mut guard = inner.table();
            let table = &mut *guard;
            let unusable = table.pool.take_unusable();
            let have = table.pool.ready.len() + table.pool.filling;
            let (base, count, want) = (
                inner.config.uid_base,
                inner.config.uid_count,
                inner.config.warm_sessions,
            );
            // the last `want` free uids are left to sessions made on demand
            let uid = (have < want)
                .then(|| table.take_warm_uid(base, count, want))
                .flatten();
            let place = uid.map(|uid| {
                table.pool.filling += 1;
                table.pool.next += 1;
                warm_place(inner, table.pool.next, uid)
            });
            (unusable, place)
        };
        for warm in unusable {
            discard(Arc::clone(inner), warm).await;
        }
        let Some(place) = place else {
            return Ok(());
        };
        let opened = Live::open(inner, &place, &inner.config.warm_limits).await;
        let late = {
            let mut table = inner.table();
            table.pool.filling -= 1;
            match opened {
                Ok(live) if !inner.shut.load(Ordering::Acquire) => {
                    table.pool.ready.push_back(Warm { place, live });
                    None
                }
                Ok(live) => Some(Ok(Warm { place, live })),
                Err(e) => Some(Err((place, e))),
            }
        };
        match late {
            None => {}
            // shut down meanwhile: never handed to anyone
            Some(Ok(warm)) => discard(Arc::clone(inner), warm).await,
            Some(Err((place, e))) => {
                forget_place(inner, &place).await;
                return Err(e);
            }
        }
    }
}

/// The place of warm session `n`.
fn warm_place(inner: &ManagerState, n: u64, uid: u32) -> Place {
    let dir = inner.config.root.join(WARM_DIR);
    let name = format!("{}-{n}", inner.call_prefix);
    Place {
        workspace: dir.join(&name),
        tmpdir: dir.join(format!("{name}.tmp")),
        label: format!("warm/{n}"),
        // no '.': never the name of a session made for its entry
        cgroup_name: format!("warm-{n}"),
        uid,
    }
}

/// The filler: tops the pool up whenever a warm session was taken or wanted, and when the zygote
/// ends (its warm sessions died with it; the top-up starts a new zygote). After a failure it
/// waits before trying again, longer each time. Ends with the manager (its stop token, or the
/// last strong reference gone).
pub(super) async fn fill_loop(inner: Weak<ManagerState>) {
    let mut backoff = Duration::ZERO;
    // the zygote whose end was already handled (a dead one is not waited for again)
    let mut handled_end: Option<i32> = None;
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let stop = strong.stopping.clone();
        if !backoff.is_zero() {
            drop(strong);
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = stop.cancelled() => return,
            }
            let Some(strong) = inner.upgrade() else {
                return;
            };
            backoff = top_up_logged(&strong, backoff).await;
            continue;
        }
        let zygote: Option<Zygote> = strong
            .zygote
            .lock()
            .await
            .clone()
            .filter(|zygote| Some(zygote.pid()) != handled_end);
        let kick = async { strong.pool_kick.notified().await };
        let zygote_ended = async {
            match &zygote {
                Some(zygote) => zygote.ended().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = kick => {}
            () = zygote_ended => handled_end = zygote.as_ref().map(Zygote::pid),
            () = stop.cancelled() => return,
        }
        backoff = top_up_logged(&strong, backoff).await;
    }
}

/// One top-up; the backoff before the next attempt (zero after a success).
async fn top_up_logged(inner: &Arc<ManagerState>, backoff: Duration) -> Duration {
    match top_up(inner).await {
        Ok(()) => Duration::ZERO,
        Err(e) => {
            let next = (backoff * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF);
            if !inner.shut.load(Ordering::Acquire) {
                tracing::warn!(
                    "could not start a warm session (new sessions start without one; trying \
                     again in {} ms): {e}",
                    next.as_millis()
                );
            }
            next
        }
    }
}

/// Closes every ready warm session (shutdown, after the filler has stopped).
pub(super) async fn close_all(inner: &Arc<ManagerState>) {
    let ready = inner.table().pool.drain();
    inner.discard_later(ready);
    inner.background_done().await;
}
