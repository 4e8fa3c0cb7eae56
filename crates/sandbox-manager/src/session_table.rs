//! The manager's shared state: the table of sessions by (account, name), admission with the
//! per-account cap and the per-session uid (or a warm session of the pool, `warm.rs`), retirement,
//! and the idle sweep.
//!
//! Locking: one short synchronous lock over the table (never held across an await), and one async
//! lock per session (held for a whole call, so a session runs one call at a time while calls to
//! different sessions run in parallel). A session being retired (expired, dead, closed) keeps its
//! lock until its processes are gone and its directories are removed, and only then leaves the
//! table (giving back its uid); a call that was waiting for it finds it closed and starts a fresh
//! one, so a new session never shares a workspace path, cgroup or uid with one being torn down.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedMutexGuard};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cgroup::Cgroups;
use crate::incarnation::{Host, Live, Place};
use crate::manager_types::{Isolation, ManagerConfig, ManagerError};
use crate::warm::{Pool, Warm};
use crate::workspace::{account_dir_name, remove_tree, session_dir_name};
use crate::zygote::Zygote;
use toolgate_sandbox::policy::Limits;

/// How long an expired session id is remembered, so that a late call learns it expired.
pub(super) const TOMBSTONE_TTL: Duration = Duration::from_secs(24 * 3600);

/// After a warm session is taken, the longest the pool waits before making its replacement.
const REFILL_AFTER: Duration = Duration::from_millis(100);

/// What the manager's handle, its calls and its background tasks share.
#[derive(Debug)]
pub(super) struct ManagerState {
    pub(super) config: ManagerConfig,
    pub(super) zygote: tokio::sync::Mutex<Option<Zygote>>,
    pub(super) table: Mutex<Table>,
    pub(super) next_call: AtomicU64,
    /// Makes the directory names of calls without a session id unique across restarts, and
    /// names this manager's cgroups.
    pub(super) call_prefix: String,
    pub(super) shut: AtomicBool,
    /// Cancelled by shutdown: interrupts every running call.
    pub(super) stopping: CancellationToken,
    /// What was found at start.
    pub(super) isolation: Isolation,
    /// The server may chown (root with CAP_CHOWN): workspaces and uploaded files are given to
    /// the session's uid.
    pub(super) give_away: bool,
    /// Wakes the pool's filler: a warm session was taken, or one was wanted and there was none.
    pub(super) pool_kick: Notify,
    /// Discards of warm sessions under way, which shutdown waits for.
    pub(super) background: Mutex<Vec<JoinHandle<()>>>,
    /// Warm sessions a claim found unusable under the table's lock, discarded once it is let
    /// go (`warming.rs`).
    pub(super) set_aside: Mutex<Vec<Warm>>,
    /// Checkpoints and restores under way hold a permit each: an image is held whole in this
    /// process's memory while it is archived and sealed (or opened and unpacked), so only a
    /// few are, whatever the number of sessions hibernating at once.
    pub(super) image_work: tokio::sync::Semaphore,
    /// Sessions whose checkpoint was dropped for their account's quota, with when:
    /// (account, session id).
    pub(super) dropped: Mutex<HashMap<(String, String), std::time::SystemTime>>,
    /// Declared after `table`, so that on drop the sessions' groups go before the manager's.
    pub(super) cgroups: Option<Cgroups>,
}

#[derive(Debug, Default)]
pub(super) struct Table {
    pub(super) accounts: HashMap<String, HashMap<Name, Arc<Entry>>>,
    /// (account, session id) -> when it expired
    pub(super) tombstones: HashMap<(String, String), Instant>,
    /// The uids of the entries in `accounts` and of the pool's sessions (ready or being made).
    uids: BTreeSet<u32>,
    /// Warm sessions, ready to be taken.
    pub(super) pool: Pool,
}

impl Table {
    /// The lowest uid of `base..base + count` no entry (and no warm session) has.
    fn take_uid(&mut self, base: u32, count: u32) -> Option<u32> {
        let end = u64::from(base) + u64::from(count);
        let mut candidate = base;
        for used in self.uids.range(base..) {
            if *used != candidate {
                break;
            }
            candidate = candidate.checked_add(1)?;
        }
        if u64::from(candidate) >= end {
            return None;
        }
        self.uids.insert(candidate);
        Some(candidate)
    }

    /// For a warm session: the highest free uid of `base..base + count`, if more than
    /// `keep_free` would still be free after it. Sessions made on demand take the lowest (see
    /// [`Table::take_uid`]), so their uids stay dense from the base and out of the way of the
    /// warm ones, and the last free uids are left to them (near the limit a warm session would
    /// only hold a uid a session of other limits needs).
    pub(super) fn take_warm_uid(&mut self, base: u32, count: u32, keep_free: usize) -> Option<u32> {
        let end = base.checked_add(count.checked_sub(1)?)?;
        let used = self.uids.range(base..=end).count();
        let free = usize::try_from(count).ok()?.saturating_sub(used);
        if free <= keep_free {
            return None;
        }
        let mut candidate = end;
        for used in self.uids.range(base..=end).rev() {
            if *used != candidate {
                break;
            }
            candidate = candidate.checked_sub(1)?;
        }
        self.uids.insert(candidate);
        Some(candidate)
    }

    /// Gives back a uid whose session is gone (its processes, cgroups and directories).
    pub(super) fn free_uid(&mut self, uid: u32) {
        self.uids.remove(&uid);
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Name {
    /// the caller's session id
    Caller(String),
    /// a call without a session id
    Call(u64),
}

#[derive(Debug)]
pub(super) struct Entry {
    pub(super) account: String,
    pub(super) name: Name,
    /// Its workspace, cgroup name and uid: made for it, or those of the warm session it took.
    pub(super) place: Place,
    /// When the session was opened under this name.
    pub(super) opened: Instant,
    last_used: Mutex<Instant>,
    /// When its last checkpoint was written or read (or it was opened).
    last_checkpoint: Mutex<Instant>,
    /// The names of the environment variables its runs were given (the vault's secrets), kept
    /// with its checkpoints: never their values.
    env_names: Mutex<BTreeSet<String>>,
    /// When its last hibernation failed (it is tried again a hibernation time later).
    hibernation_failed: Mutex<Option<Instant>>,
    pub(super) slot: Arc<tokio::sync::Mutex<Slot>>,
    /// A call's one-off session whose call has ended: it is being cleaned up in the background
    /// and no longer counts against the account's sessions (its uid stays taken until it goes).
    leaving: AtomicBool,
}

#[derive(Debug, Default)]
pub(super) struct Slot {
    pub(super) live: Option<Live>,
    /// retired: the entry is leaving the table; look it up again
    pub(super) closed: bool,
}

impl Entry {
    /// Whether it counts against its account's limits.
    fn counts(&self) -> bool {
        !self.leaving.load(Ordering::Acquire)
    }

    pub(super) fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    pub(super) fn idle_since(&self) -> Instant {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Its state is in the store as of now.
    pub(super) fn checkpointed(&self) {
        *self
            .last_checkpoint
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    pub(super) fn last_checkpoint(&self) -> Instant {
        *self
            .last_checkpoint
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Its hibernation failed now (or, with `None`, the failure is forgotten).
    pub(super) fn set_hibernation_failed(&self, at: Option<Instant>) {
        *self
            .hibernation_failed
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = at;
    }

    /// When its last hibernation failed.
    pub(super) fn hibernation_failed(&self) -> Option<Instant> {
        *self
            .hibernation_failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers the names of variables a run of it is given.
    pub(super) fn given_env<'a>(&self, names: impl Iterator<Item = &'a String>) {
        let mut kept = self.env_names.lock().unwrap_or_else(|p| p.into_inner());
        kept.extend(names.cloned());
    }

    /// The names of the variables its runs were given.
    pub(super) fn env_names(&self) -> Vec<String> {
        let kept = self.env_names.lock().unwrap_or_else(|p| p.into_inner());
        kept.iter().cloned().collect()
    }
}

/// What looking up (or making) a session's entry found.
pub(super) enum Claim {
    /// a live entry: lock its slot and use it
    Existing(Arc<Entry>),
    /// a new entry, its slot already locked by us (holding a warm session when one was taken);
    /// `bool`: the id had expired before
    New(Arc<Entry>, OwnedMutexGuard<Slot>, bool),
    /// an idle entry past its time: retire it, then look up again
    Expired(Arc<Entry>, OwnedMutexGuard<Slot>),
    /// every uid is taken, some by a warm session of other limits: discard it (which gives its
    /// uid back), then look up again
    Evict(Box<Warm>),
}

impl ManagerState {
    pub(super) fn table(&self) -> MutexGuard<'_, Table> {
        // every change to the table is a single insert or remove: still consistent after a panic
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `name` of `account` has an entry now.
    fn has_entry(&self, account: &str, name: &Name) -> bool {
        self.table()
            .accounts
            .get(account)
            .is_some_and(|sessions| sessions.contains_key(name))
    }

    /// The sessions dropped for their account's checkpoint quota.
    pub(super) fn dropped(
        &self,
    ) -> MutexGuard<'_, HashMap<(String, String), std::time::SystemTime>> {
        self.dropped.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers that a session was dropped for its account's quota.
    pub(super) fn note_dropped(&self, account: &str, session_id: &str) {
        self.dropped().insert(
            (account.to_owned(), session_id.to_owned()),
            std::time::SystemTime::now(),
        );
    }

    /// The entry of an account's session id, if it is in the table.
    pub(super) fn lookup(&self, account: &str, session_id: &str) -> Option<Arc<Entry>> {
        self.table()
            .accounts
            .get(account)
            .and_then(|sessions| sessions.get(&Name::Caller(session_id.to_owned())))
            .cloned()
    }

    /// Finds or makes the table entry of a session, enforcing the cap. A new one takes a warm
    /// session when the pool has one made with `limits` (its place, uid and process), else gets
    /// a uid and a place of its own.
    /// Refuses a new session that would pass the budget. The service's total is judged by use
    /// (what all sessions hold now, from the manager's groups, plus the new one's full limit):
    /// idle sessions cost a few MiB, so reserving every limit would cap a host at a handful of
    /// sessions; the kernel's limit on the parent groups holds the total hard. An account's
    /// share is judged by reservation (its sessions times their limit).
    /// `usage`: what sessions use, read before the table was locked; read here (under the
    /// lock) only in the rare race where the entry went away in between.
    fn check_budget(
        &self,
        table: &Table,
        account: &str,
        limits: &Limits,
        usage: Option<(Option<u64>, Option<u64>)>,
    ) -> Result<(), ManagerError> {
        let budget = self.config.budget;
        let passes =
            |limit: u64, used: u64, more: u64| limit > 0 && used.saturating_add(more) > limit;
        if let Some(cgroups) = &self.cgroups {
            let (memory, pids) = usage.unwrap_or_else(|| cgroups.in_use());
            if passes(
                budget.memory_bytes,
                memory.unwrap_or(0),
                limits.memory_bytes,
            ) {
                return Err(ManagerError::AtCapacity { what: "memory" });
            }
            if passes(budget.pids, pids.unwrap_or(0), u64::from(limits.max_pids)) {
                return Err(ManagerError::AtCapacity { what: "processes" });
            }
        }
        let own = table.accounts.get(account).map_or(0, |sessions| {
            sessions.values().filter(|e| e.counts()).count()
        }) as u64;
        let reserved = limits.memory_bytes.saturating_mul(own);
        if passes(budget.account_memory_bytes, reserved, limits.memory_bytes) {
            return Err(ManagerError::AccountBudget {
                limit: budget.account_memory_bytes,
            });
        }
        Ok(())
    }

    /// Keeps unusable warm sessions for [`ManagerState::take_set_aside`].
    fn set_aside(&self, warm: Vec<Warm>) {
        if !warm.is_empty() {
            self.set_aside
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(warm);
        }
    }

    /// The warm sessions set aside since the last call.
    pub(super) fn take_set_aside(&self) -> Vec<Warm> {
        std::mem::take(&mut *self.set_aside.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Finds `name`'s entry of `account`, or makes one within the caps and the budget.
    pub(super) fn claim(
        self: &Arc<Self>,
        account: &str,
        name: Name,
        limits: &Limits,
    ) -> Result<Claim, ManagerError> {
        // What sessions use now is read before the table is locked (two cgroupfs reads), and
        // only when a new session is likely: a warm call finds its entry and reads nothing.
        let usage = (!self.has_entry(account, &name))
            .then(|| self.cgroups.as_ref().map(|cgroups| cgroups.in_use()))
            .flatten();
        let now = Instant::now();
        let mut guard = self.table();
        let table = &mut *guard;
        let sessions = table.accounts.entry(account.to_owned()).or_default();
        if let Some(entry) = sessions.get(&name) {
            // a session that is kept hibernates rather than expires (the sweep's business)
            let kept = self.config.keeping.is_some() && matches!(name, Name::Caller(_));
            let idle_too_long =
                !kept && now.duration_since(entry.idle_since()) >= self.config.idle_ttl;
            if idle_too_long
                && let Ok(slot) = Arc::clone(&entry.slot).try_lock_owned()
                && !slot.closed
            {
                return Ok(Claim::Expired(Arc::clone(entry), slot));
            }
            // in use (or being retired, which the caller finds out under its lock)
            entry.touch();
            return Ok(Claim::Existing(Arc::clone(entry)));
        }
        let limit = self.config.max_sessions_per_account;
        if sessions.values().filter(|e| e.counts()).count() >= limit {
            if sessions.is_empty() {
                table.accounts.remove(account);
            }
            return Err(ManagerError::TooManySessions {
                limit,
                idle_ttl: self.config.idle_ttl,
            });
        }
        self.check_budget(table, account, limits, usage)?;
        let (warm, unusable) = table.pool.take(limits, &self.config);
        // discarded by the caller once the table is let go (`warming.rs`)
        self.set_aside(unusable);
        let (place, live) = match warm {
            Some(warm) => {
                // The replacement is made once the taking call's result is out (see call_in), or
                // after REFILL_AFTER if that call runs longer: on two cores a fork of the zygote
                // beside the call it is taken for doubles that call's tail latency.
                let inner = Arc::downgrade(self);
                tokio::spawn(async move {
                    tokio::time::sleep(REFILL_AFTER).await;
                    if let Some(inner) = inner.upgrade() {
                        inner.pool_kick.notify_one();
                    }
                });
                (warm.place, Some(warm.live))
            }
            None => {
                if table.pool.serves(limits, &self.config) {
                    // none was ready: a filler that gave up after an error tries again
                    self.pool_kick.notify_one();
                }
                let Some(uid) = table.take_uid(self.config.uid_base, self.config.uid_count) else {
                    if table.accounts.get(account).is_some_and(HashMap::is_empty) {
                        table.accounts.remove(account);
                    }
                    return match table.pool.evict() {
                        Some(warm) => Ok(Claim::Evict(Box::new(warm))),
                        None => Err(ManagerError::NoFreeUid(self.config.uid_count)),
                    };
                };
                (self.place_of(account, &name, uid), None)
            }
        };
        let uid = place.uid;
        let entry = Arc::new(Entry {
            account: account.to_owned(),
            name: name.clone(),
            place,
            opened: now,
            last_used: Mutex::new(now),
            last_checkpoint: Mutex::new(now),
            env_names: Mutex::new(BTreeSet::new()),
            hibernation_failed: Mutex::new(None),
            slot: Arc::new(tokio::sync::Mutex::new(Slot {
                live,
                closed: false,
            })),
            leaving: AtomicBool::new(false),
        });
        let Ok(slot) = Arc::clone(&entry.slot).try_lock_owned() else {
            table.uids.remove(&uid);
            return Err(ManagerError::ShutDown); // a new mutex is never locked
        };
        table
            .accounts
            .entry(account.to_owned())
            .or_default()
            .insert(name.clone(), Arc::clone(&entry));
        let expired = match name {
            Name::Caller(id) => table.tombstones.remove(&(account.to_owned(), id)).is_some(),
            Name::Call(_) => false,
        };
        Ok(Claim::New(entry, slot, expired))
    }

    /// The place of a session made for its entry: `<root>/<account>/<name>` and its `.tmp`.
    fn place_of(&self, account: &str, name: &Name, uid: u32) -> Place {
        let account_dir = self.config.root.join(account_dir_name(account));
        let dir_name = match name {
            Name::Caller(id) => session_dir_name(id),
            Name::Call(n) => format!("call-{}-{n}", self.call_prefix),
        };
        Place {
            workspace: account_dir.join(&dir_name),
            tmpdir: account_dir.join(format!("{dir_name}.tmp")),
            label: format!("{}/{dir_name}", account_dir_name(account)),
            // account directory names have no '.' or one after "h", session ones none: the
            // joined name is still unique (and never a warm session's, which has no '.')
            cgroup_name: format!("{}.{dir_name}", account_dir_name(account)),
            uid,
        }
    }
}

/// Closes a session (its processes, cgroups and mounts), removes its directories, and only then
/// takes it out of the table and frees its uid (so the same id cannot get a new session on
/// these paths before they are gone). `tombstone`: remember that the id expired.
pub(super) async fn retire(
    inner: Arc<ManagerState>,
    entry: Arc<Entry>,
    mut slot: OwnedMutexGuard<Slot>,
    tombstone: bool,
) {
    slot.closed = true;
    if let Some(live) = slot.live.take() {
        live.close().await;
    }
    for dir in [&entry.place.workspace, &entry.place.tmpdir] {
        remove_tree(dir).await;
    }
    {
        let mut guard = inner.table();
        let table = &mut *guard;
        if let Some(sessions) = table.accounts.get_mut(&entry.account) {
            if sessions
                .get(&entry.name)
                .is_some_and(|e| Arc::ptr_eq(e, &entry))
            {
                sessions.remove(&entry.name);
                table.uids.remove(&entry.place.uid);
            }
            if sessions.is_empty() {
                table.accounts.remove(&entry.account);
            }
        }
        if let (true, Name::Caller(id)) = (tombstone, &entry.name) {
            table
                .tombstones
                .insert((entry.account.clone(), id.clone()), Instant::now());
        }
    }
    drop(slot);
}

/// Retires a call's one-off session when the call ends, also when its future is dropped.
pub(super) struct RetireOnDrop {
    pub(super) inner: Arc<ManagerState>,
    pub(super) entry: Option<Arc<Entry>>,
}

impl Drop for RetireOnDrop {
    fn drop(&mut self) {
        let (Some(entry), Ok(runtime)) = (self.entry.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        // the caller has its answer: the next call must not find this one in its way
        entry.leaving.store(true, Ordering::Release);
        let inner = Arc::clone(&self.inner);
        runtime.spawn(async move {
            let slot = Arc::clone(&entry.slot).lock_owned().await;
            if !slot.closed {
                retire(inner, entry, slot, false).await;
            }
        });
    }
}

impl Host for ManagerState {
    fn workspace_quota(&self) -> bool {
        self.isolation.workspace_quota
    }

    fn give_away(&self) -> bool {
        self.give_away
    }

    fn cgroups(&self) -> Option<&Cgroups> {
        self.cgroups.as_ref()
    }

    async fn running_zygote(&self) -> Result<Zygote, ManagerError> {
        self.zygote().await
    }

    fn egress(&self) -> Option<&toolgate_egress_proxy::EgressProxy> {
        self.config.egress.as_ref()
    }
}

impl ManagerState {
    /// Makes sure a zygote runs, starting a new one if the last one died. Sessions forked from a
    /// dead zygote died with it; their next call starts fresh.
    pub(super) async fn zygote(&self) -> Result<Zygote, ManagerError> {
        if self.shut.load(std::sync::atomic::Ordering::Acquire) {
            return Err(ManagerError::ShutDown);
        }
        let mut current = self.zygote.lock().await;
        if let Some(zygote) = current.as_ref()
            && zygote.is_alive()
        {
            return Ok(zygote.clone());
        }
        if let Some(old) = current.take() {
            old.shutdown().await;
        }
        let zygote = Zygote::start(self.config.zygote.clone()).await?;
        *current = Some(zygote.clone());
        Ok(zygote)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_the_lowest_free_and_bounded() {
        let mut table = Table::default();
        assert_eq!(table.take_uid(100, 3), Some(100));
        assert_eq!(table.take_uid(100, 3), Some(101));
        assert_eq!(table.take_uid(100, 3), Some(102));
        assert_eq!(table.take_uid(100, 3), None);
        table.uids.remove(&101);
        assert_eq!(table.take_uid(100, 3), Some(101));
        assert_eq!(table.take_uid(u32::MAX, 5), Some(u32::MAX));
        assert_eq!(table.take_uid(u32::MAX, 5), None);
    }

    #[test]
    fn warm_uids_are_the_highest_free_and_leave_some_free() {
        let mut table = Table::default();
        assert_eq!(table.take_warm_uid(100, 5, 2), Some(104));
        assert_eq!(table.take_uid(100, 5), Some(100));
        assert_eq!(table.take_warm_uid(100, 5, 2), Some(103));
        // two left free (101, 102): kept for sessions made on demand
        assert_eq!(table.take_warm_uid(100, 5, 2), None);
        table.free_uid(104);
        assert_eq!(table.take_warm_uid(100, 5, 2), Some(104));
        assert_eq!(table.take_warm_uid(100, 0, 0), None);
        assert_eq!(table.take_warm_uid(u32::MAX, 1, 0), Some(u32::MAX));
    }
}
