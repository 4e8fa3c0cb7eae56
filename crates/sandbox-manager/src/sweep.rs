//! The idle sweep: every kept session idle for its time hibernates, every session idle past the
//! time-to-live is retired, and old checkpoints are deleted hourly.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::hibernation;
use crate::session_table::{ManagerState, TOMBSTONE_TTL, retire};

/// How often old checkpoints are looked for.
const EXPIRE_EVERY: Duration = Duration::from_secs(3600);

pub(super) async fn sweep_loop(inner: Weak<ManagerState>, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut expired_at: Option<Instant> = None;
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        sweep(&inner);
        if expired_at.is_none_or(|at| at.elapsed() >= EXPIRE_EVERY) {
            expired_at = Some(Instant::now());
            let inner = Arc::clone(&inner);
            tokio::spawn(async move { hibernation::expire_old(&inner).await });
        }
    }
}

/// Hibernates every kept session idle for its time, and retires every session idle for longer
/// than the time-to-live (busy ones are skipped).
fn sweep(inner: &Arc<ManagerState>) {
    let now = Instant::now();
    let ttl = inner.config.idle_ttl;
    let mut due = Vec::new();
    let mut sleepy = Vec::new();
    {
        let mut table = inner.table();
        for entry in table.accounts.values().flat_map(HashMap::values) {
            let hibernate = hibernation::due_to_hibernate(inner, entry, now);
            if !hibernate && now.duration_since(entry.idle_since()) < ttl {
                continue;
            }
            if let Ok(slot) = Arc::clone(&entry.slot).try_lock_owned()
                && !slot.closed
            {
                if hibernate && now.duration_since(entry.idle_since()) < ttl {
                    sleepy.push((Arc::clone(entry), slot));
                } else {
                    due.push((Arc::clone(entry), slot));
                }
            }
        }
        table
            .tombstones
            .retain(|_, at| now.duration_since(*at) < TOMBSTONE_TTL);
    }
    for (entry, slot) in due {
        tokio::spawn(retire(Arc::clone(inner), entry, slot, true));
    }
    for (entry, slot) in sleepy {
        tokio::spawn(hibernation::hibernate(Arc::clone(inner), entry, slot));
    }
}
