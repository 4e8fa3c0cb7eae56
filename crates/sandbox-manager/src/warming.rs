//! Keeping warm sessions (`warm.rs`) ready: the filler task that tops the pool up in the
//! background, and discarding the ones that can no longer serve (their process or zygote died,
//! or the manager shuts down), off the caller's path; shutdown waits for those discards.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::incarnation::{Live, Place};
use crate::manager_types::ManagerError;
use crate::session_table::ManagerState;
use crate::warm::{WARM_DIR, Warm};
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
