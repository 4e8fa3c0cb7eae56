//! The manager's shared state: the table of sessions by (account, name), admission with the
//! per-account cap and the per-session uid, retirement, and the idle sweep.
//!
//! Locking: one short synchronous lock over the table (never held across an await), and one async
//! lock per session (held for a whole call, so a session runs one call at a time while calls to
//! different sessions run in parallel). A session being retired (expired, dead, closed) keeps its
//! lock until its processes are gone and its directories are removed, and only then leaves the
//! table (giving back its uid); a call that was waiting for it finds it closed and starts a fresh
//! one, so a new session never shares a workspace path, cgroup or uid with one being torn down.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use tokio::sync::OwnedMutexGuard;
use tokio_util::sync::CancellationToken;

use super::cgroup::Cgroups;
use super::live::Live;
use super::manager_types::{Isolation, ManagerConfig, ManagerError};
use super::workspace::{account_dir_name, remove_tree, session_dir_name};
use super::zygote::Zygote;

/// How long an expired session id is remembered, so that a late call learns it expired.
const TOMBSTONE_TTL: Duration = Duration::from_secs(24 * 3600);

/// What the manager's handle, its calls and its background tasks share.
#[derive(Debug)]
pub(super) struct Inner {
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
    /// Declared after `table`, so that on drop the sessions' groups go before the manager's.
    pub(super) cgroups: Option<Cgroups>,
}

#[derive(Debug, Default)]
pub(super) struct Table {
    pub(super) accounts: HashMap<String, HashMap<Name, Arc<Entry>>>,
    /// (account, session id) -> when it expired
    tombstones: HashMap<(String, String), Instant>,
    /// The uids of the entries in `accounts`.
    uids: BTreeSet<u32>,
}

impl Table {
    /// The lowest uid of `base..base + count` no entry has.
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
    pub(super) workspace: PathBuf,
    pub(super) tmpdir: PathBuf,
    /// What the zygote calls the session (never the caller's id).
    pub(super) label: String,
    /// The name of its cgroups (the label as one path component).
    pub(super) cgroup_name: String,
    /// Its host uid, its own among the live sessions.
    pub(super) uid: u32,
    last_used: Mutex<Instant>,
    pub(super) slot: Arc<tokio::sync::Mutex<Slot>>,
}

#[derive(Debug, Default)]
pub(super) struct Slot {
    pub(super) live: Option<Live>,
    /// retired: the entry is leaving the table; look it up again
    pub(super) closed: bool,
}

impl Entry {
    pub(super) fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn idle_since(&self) -> Instant {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(super) enum Admit {
    /// a live entry: lock its slot and use it
    Existing(Arc<Entry>),
    /// a new entry, its slot already locked by us; `bool`: the id had expired before
    New(Arc<Entry>, OwnedMutexGuard<Slot>, bool),
    /// an idle entry past its time: retire it, then look up again
    Expired(Arc<Entry>, OwnedMutexGuard<Slot>),
}

impl Inner {
    pub(super) fn table(&self) -> MutexGuard<'_, Table> {
        // every change to the table is a single insert or remove: still consistent after a panic
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The entry of an account's session id, if it is in the table.
    pub(super) fn lookup(&self, account: &str, session_id: &str) -> Option<Arc<Entry>> {
        self.table()
            .accounts
            .get(account)
            .and_then(|sessions| sessions.get(&Name::Caller(session_id.to_owned())))
            .cloned()
    }

    /// Finds or makes the table entry of a session, enforcing the cap and giving it a uid.
    pub(super) fn admit(&self, account: &str, name: Name) -> Result<Admit, ManagerError> {
        let now = Instant::now();
        let mut guard = self.table();
        let table = &mut *guard;
        let sessions = table.accounts.entry(account.to_owned()).or_default();
        if let Some(entry) = sessions.get(&name) {
            let idle_too_long = now.duration_since(entry.idle_since()) >= self.config.idle_ttl;
            if idle_too_long
                && let Ok(slot) = Arc::clone(&entry.slot).try_lock_owned()
                && !slot.closed
            {
                return Ok(Admit::Expired(Arc::clone(entry), slot));
            }
            // in use (or being retired, which the caller finds out under its lock)
            entry.touch();
            return Ok(Admit::Existing(Arc::clone(entry)));
        }
        let limit = self.config.max_sessions_per_account;
        if sessions.len() >= limit {
            if sessions.is_empty() {
                table.accounts.remove(account);
            }
            return Err(ManagerError::TooManySessions {
                limit,
                idle_ttl: self.config.idle_ttl,
            });
        }
        let Some(uid) = table.take_uid(self.config.uid_base, self.config.uid_count) else {
            if table.accounts.get(account).is_some_and(HashMap::is_empty) {
                table.accounts.remove(account);
            }
            return Err(ManagerError::NoFreeUid(self.config.uid_count));
        };
        let account_dir = self.config.root.join(account_dir_name(account));
        let dir_name = match &name {
            Name::Caller(id) => session_dir_name(id),
            Name::Call(n) => format!("call-{}-{n}", self.call_prefix),
        };
        // account directory names have no '.' or one after "h", session ones none: the joined
        // name is still unique
        let cgroup_name = format!("{}.{dir_name}", account_dir_name(account));
        let entry = Arc::new(Entry {
            account: account.to_owned(),
            name: name.clone(),
            workspace: account_dir.join(&dir_name),
            tmpdir: account_dir.join(format!("{dir_name}.tmp")),
            label: format!("{}/{dir_name}", account_dir_name(account)),
            cgroup_name,
            uid,
            last_used: Mutex::new(now),
            slot: Arc::new(tokio::sync::Mutex::new(Slot::default())),
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
        Ok(Admit::New(entry, slot, expired))
    }
}

/// Closes a session (its processes, cgroups and mounts), removes its directories, and only then
/// takes it out of the table and frees its uid (so the same id cannot get a new session on
/// these paths before they are gone). `tombstone`: remember that the id expired.
pub(super) async fn retire(
    inner: Arc<Inner>,
    entry: Arc<Entry>,
    mut slot: OwnedMutexGuard<Slot>,
    tombstone: bool,
) {
    slot.closed = true;
    if let Some(live) = slot.live.take() {
        live.close().await;
    }
    for dir in [&entry.workspace, &entry.tmpdir] {
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
                table.uids.remove(&entry.uid);
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
    pub(super) inner: Arc<Inner>,
    pub(super) entry: Option<Arc<Entry>>,
}

impl Drop for RetireOnDrop {
    fn drop(&mut self) {
        let (Some(entry), Ok(runtime)) = (self.entry.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let inner = Arc::clone(&self.inner);
        runtime.spawn(async move {
            let slot = Arc::clone(&entry.slot).lock_owned().await;
            if !slot.closed {
                retire(inner, entry, slot, false).await;
            }
        });
    }
}

pub(super) async fn sweep_loop(inner: Weak<Inner>, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        sweep(&inner);
    }
}

/// Retires every session idle for longer than the time-to-live (busy ones are skipped).
fn sweep(inner: &Arc<Inner>) {
    let now = Instant::now();
    let ttl = inner.config.idle_ttl;
    let mut due = Vec::new();
    {
        let mut table = inner.table();
        for entry in table.accounts.values().flat_map(HashMap::values) {
            if now.duration_since(entry.idle_since()) < ttl {
                continue;
            }
            if let Ok(slot) = Arc::clone(&entry.slot).try_lock_owned()
                && !slot.closed
            {
                due.push((Arc::clone(entry), slot));
            }
        }
        table
            .tombstones
            .retain(|_, at| now.duration_since(*at) < TOMBSTONE_TTL);
    }
    for (entry, slot) in due {
        tokio::spawn(retire(Arc::clone(inner), entry, slot, true));
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
}
