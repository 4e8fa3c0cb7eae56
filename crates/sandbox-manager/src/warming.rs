//! Keeping warm sessions (`warm.rs`) ready: the filler task that tops the pool up in the
//! background, and discarding the ones that can no longer serve (their process or zygote died,
//! or the manager shuts down), off the caller's path; shutdown waits for those discards.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::incarnation::{Live, Place};
use crate::manager_types::ManagerError;
use crate::session_table::ManagerState;
use crate::warm::{DEMAND_WINDOW, WARM_DIR, Warm};
use crate::workspace::remove_tree;
use crate::zygote::Zygote;

/// After a failed top-up, the filler waits this long before the next, doubling up to
/// [`MAX_BACKOFF`] while failures go on.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

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

/// Makes warm sessions until the pool holds its target (ready or being made; `warm.rs`), with
/// [`fillers_at_once`] of them made at once, and closes the ready ones past the target once
/// demand has fallen. Stops early, without an error, when no uid is free or memory does not
/// allow more; fails with the first session that cannot be made. (The server's start waits for
/// this; afterwards [`fill_loop`] keeps the fillers going.)
pub(super) async fn top_up(inner: &Arc<ManagerState>) -> Result<(), ManagerError> {
    let mut fillers = JoinSet::new();
    spawn_fillers(inner, &mut fillers);
    let mut outcome = Ok(());
    while let Some(done) = fillers.join_next().await {
        if let Err(e) = filler_outcome(done)
            && outcome.is_ok()
        {
            outcome = Err(e);
        }
    }
    outcome
}

/// How many warm sessions are made at once: as many as the host has cores. The zygote forks
/// one at a time, but each session's workspace and cgroups are made, and each child confines
/// itself, beside another's fork. Twice the cores was measured too: the zygote's queue grew, a
/// new session that found the pool empty waited behind more of the pool's forks, and the first
/// burst's p99 doubled (69 against 33-42 ms, `toolgate-bench --sandbox-bursts`).
fn fillers_at_once() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Starts fillers until [`fillers_at_once`] run; each ends by itself when the pool is at its
/// target.
fn spawn_fillers(inner: &Arc<ManagerState>, fillers: &mut JoinSet<Result<(), ManagerError>>) {
    while fillers.len() < fillers_at_once() {
        fillers.spawn(fill(Arc::clone(inner)));
    }
}

/// A filler's end: its error, if it had one (a panic is logged, not passed on).
fn filler_outcome(
    done: Result<Result<(), ManagerError>, tokio::task::JoinError>,
) -> Result<(), ManagerError> {
    match done {
        Ok(outcome) => outcome,
        Err(e) => {
            if e.is_panic() {
                tracing::error!("a warm-session filler panicked: {e}");
            }
            Ok(())
        }
    }
}

/// One filler: makes warm sessions one after the other while the pool is under its target.
async fn fill(inner: Arc<ManagerState>) -> Result<(), ManagerError> {
    loop {
        if inner.shut.load(Ordering::Acquire) {
            return Ok(());
        }
        let grow = memory_allows_growth(&inner);
        let (unusable, surplus, place) = {
            let mut guard = inner.table();
            let table = &mut *guard;
            let unusable = table.pool.take_unusable();
            let floor = inner.config.warm_sessions;
            let target = table.pool.target(&inner.config, Instant::now());
            let target = if grow { target } else { target.min(floor) };
            let surplus = table.pool.take_surplus(target);
            let have = table.pool.ready.len() + table.pool.filling;
            let (base, count) = (inner.config.uid_base, inner.config.uid_count);
            // the last `target` free uids are left to sessions made on demand
            let uid = (have < target)
                .then(|| table.take_warm_uid(base, count, target))
                .flatten();
            let place = uid.map(|uid| {
                table.pool.filling += 1;
                table.pool.next += 1;
                warm_place(&inner, table.pool.next, uid)
            });
            (unusable, surplus, place)
        };
        for warm in unusable.into_iter().chain(surplus) {
            discard(Arc::clone(&inner), warm).await;
        }
        let Some(place) = place else {
            return Ok(());
        };
        // made ahead of demand: a caller's own fork goes before the pool's next
        let opened = Live::open(&inner, &place, &inner.config.warm_limits, true).await;
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
            Some(Ok(warm)) => discard(Arc::clone(&inner), warm).await,
            Some(Err((place, e))) => {
                forget_place(&inner, &place).await;
                return Err(e);
            }
        }
    }
}

/// Whether the pool may grow past its floor: the host has at least a quarter of its memory
/// available, and sessions use under half of the budget's memory (when there is one), so that
/// warm sessions never take the room of sessions that run. Two small reads.
fn memory_allows_growth(inner: &ManagerState) -> bool {
    let host = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| host_has_room(&text));
    let budget = inner.config.budget.memory_bytes;
    let sessions = match &inner.cgroups {
        Some(cgroups) if budget > 0 => cgroups
            .in_use()
            .0
            .is_none_or(|used| used.saturating_mul(2) < budget),
        _ => true,
    };
    host.unwrap_or(false) && sessions
}

/// Whether `/proc/meminfo` says at least a quarter of the memory is available (`None`: it does
/// not say).
fn host_has_room(meminfo: &str) -> Option<bool> {
    let field = |name: &str| -> Option<u64> {
        meminfo
            .lines()
            .find_map(|line| line.strip_prefix(name))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    let (total, available) = (field("MemTotal:")?, field("MemAvailable:")?);
    Some(available.saturating_mul(4) >= total)
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
/// ends (its warm sessions died with it; the top-up starts a new zygote). Each of these wakes
/// starts fillers up to [`fillers_at_once`], also while others still run: a burst's demand grows
/// while the first fillers work, and a round that waited for all of its fillers to end went on
/// with the one left (the others had found the pool full for the moment and ended). After a
/// failure it waits before trying again, longer each time. Ends with the manager (its stop
/// token, or the last strong reference gone), once its fillers have ended.
pub(super) async fn fill_loop(inner: Weak<ManagerState>) {
    // the wait after the last failure (zero after a success), and whether it is being waited out
    let mut backoff = Duration::ZERO;
    let mut waiting = false;
    // the zygote whose end was already handled (a dead one is not waited for again)
    let mut handled_end: Option<i32> = None;
    let mut fillers = JoinSet::new();
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let stop = strong.stopping.clone();
        let zygote: Option<Zygote> = strong
            .zygote
            .lock()
            .await
            .clone()
            .filter(|zygote| Some(zygote.pid()) != handled_end);
        let kick = async { strong.pool_kick.notified().await };
        // above its floor, the pool looks again as demand passes out of its window, to close
        // the warm sessions it no longer needs
        let above_floor = strong.table().pool.above_floor(&strong.config);
        let shrink = async {
            if above_floor {
                tokio::time::sleep(DEMAND_WINDOW / 2).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let zygote_ended = async {
            match &zygote {
                Some(zygote) => zygote.ended().await,
                None => std::future::pending().await,
            }
        };
        let retry = async {
            if waiting {
                tokio::time::sleep(backoff).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let ended = async {
            match fillers.join_next().await {
                Some(done) => filler_outcome(done),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            outcome = ended => {
                match outcome {
                    Ok(()) if !waiting => backoff = Duration::ZERO,
                    Ok(()) => {}
                    Err(e) => {
                        backoff = failed(&strong, backoff, &e);
                        waiting = true;
                    }
                }
                // a filler's end starts no other: it ended because the pool was full
                continue;
            }
            () = retry => waiting = false,
            () = kick, if !waiting => {}
            () = shrink, if !waiting => {}
            () = zygote_ended => handled_end = zygote.as_ref().map(Zygote::pid),
            () = stop.cancelled() => {
                // fillers see `shut` and end after the session they are making
                while fillers.join_next().await.is_some() {}
                return;
            }
        }
        if !waiting {
            spawn_fillers(&strong, &mut fillers);
        }
    }
}

/// Logs a filler's failure; the wait before the next attempt, longer each time.
fn failed(inner: &ManagerState, backoff: Duration, e: &ManagerError) -> Duration {
    let next = (backoff * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF);
    if !inner.shut.load(Ordering::Acquire) {
        tracing::warn!(
            "could not start a warm session (new sessions start without one; trying again in \
             {} ms): {e}",
            next.as_millis()
        );
    }
    next
}

/// Closes every ready warm session (shutdown, after the filler has stopped).
pub(super) async fn close_all(inner: &Arc<ManagerState>) {
    let ready = inner.table().pool.drain();
    inner.discard_later(ready);
    inner.discard_set_aside();
    inner.background_done().await;
}

impl ManagerState {
    /// Discards warm sessions in the background (see [`discard`]); shutdown waits
    /// for them.
    pub(super) fn discard_later(self: &Arc<Self>, warm: Vec<Warm>) {
        if warm.is_empty() {
            return;
        }
        let mut background = self.background.lock().unwrap_or_else(|p| p.into_inner());
        background.retain(|task| !task.is_finished());
        for warm in warm {
            background.push(tokio::spawn(discard(Arc::clone(self), warm)));
        }
    }

    /// Waits for the discards started by [`ManagerState::discard_later`] (and any they started).
    pub(super) async fn background_done(&self) {
        loop {
            let tasks =
                std::mem::take(&mut *self.background.lock().unwrap_or_else(|p| p.into_inner()));
            if tasks.is_empty() {
                return;
            }
            for task in tasks {
                let _ = task.await;
            }
        }
    }

    /// Discards in the background what a claim set aside (warm sessions found unusable while
    /// it held the table).
    pub(super) fn discard_set_aside(self: &Arc<Self>) {
        let set_aside = self.take_set_aside();
        self.discard_later(set_aside);
    }
}

#[cfg(test)]
mod tests {
    use super::host_has_room;

    #[test]
    fn room_is_a_quarter_of_the_memory_available() {
        let meminfo = |available: u64| {
            format!("MemTotal:       16000000 kB\nMemFree:  1 kB\nMemAvailable:   {available} kB\n")
        };
        assert_eq!(host_has_room(&meminfo(4_000_000)), Some(true));
        assert_eq!(host_has_room(&meminfo(3_999_999)), Some(false));
        assert_eq!(host_has_room("MemTotal: 10 kB\n"), None, "no MemAvailable");
        assert_eq!(host_has_room("garbage"), None);
    }
}
