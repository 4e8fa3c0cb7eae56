//! Sessions by (account, caller's session id), with their workspaces, idle expiry and a cap per
//! account.
//!
//! Locking: one short synchronous lock over the table (never held across an await), and one async
//! lock per session (held for a whole call, so a session runs one call at a time while calls to
//! different sessions run in parallel). A session being retired (expired, dead, closed) keeps its
//! lock until its process is gone and its directories are removed, and only then leaves the
//! table; a call that was waiting for it finds it closed and starts a fresh one, so a new session
//! never shares a workspace path with one being torn down.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::OwnedMutexGuard;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::manager_types::{CallOutcome, MAX_SESSION_ID_BYTES, ManagerConfig, ManagerError};
use super::session::{Request, Session};
use super::wire::OutputChunk;
use super::workspace::{account_dir_name, make_private_dir, remove_tree, session_dir_name};
use super::zygote::{DEFAULT_MAX_FILE_BYTES, ForkOptions, Zygote, ZygoteError};
use crate::policy::Limits;

/// How long an expired session id is remembered, so that a late call learns it expired.
const TOMBSTONE_TTL: Duration = Duration::from_secs(24 * 3600);

/// Sessions of every account, forked from one zygote (restarted when it dies).
#[derive(Debug)]
pub struct SessionManager {
    inner: Arc<Inner>,
    sweeper: JoinHandle<()>,
}

impl Drop for SessionManager {
    fn drop(&mut self) {
        self.sweeper.abort();
    }
}

#[derive(Debug)]
struct Inner {
    config: ManagerConfig,
    zygote: tokio::sync::Mutex<Option<Zygote>>,
    table: Mutex<Table>,
    next_call: AtomicU64,
    /// Makes the directory names of calls without a session id unique across restarts.
    call_prefix: String,
    shut: AtomicBool,
    /// Cancelled by shutdown: interrupts every running call.
    stopping: CancellationToken,
}

#[derive(Debug, Default)]
struct Table {
    accounts: HashMap<String, HashMap<Name, Arc<Entry>>>,
    /// (account, session id) -> when it expired
    tombstones: HashMap<(String, String), Instant>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Name {
    /// the caller's session id
    Caller(String),
    /// a call without a session id
    Call(u64),
}

#[derive(Debug)]
struct Entry {
    account: String,
    name: Name,
    workspace: PathBuf,
    tmpdir: PathBuf,
    /// What the zygote calls the session (never the caller's id).
    label: String,
    last_used: Mutex<Instant>,
    slot: Arc<tokio::sync::Mutex<Slot>>,
}

#[derive(Debug, Default)]
struct Slot {
    session: Option<Session>,
    /// retired: the entry is leaving the table; look it up again
    closed: bool,
}

impl Entry {
    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn idle_since(&self) -> Instant {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner())
    }
}

enum Admit {
    /// a live entry: lock its slot and use it
    Existing(Arc<Entry>),
    /// a new entry, its slot already locked by us; `bool`: the id had expired before
    New(Arc<Entry>, OwnedMutexGuard<Slot>, bool),
    /// an idle entry past its time: retire it, then look up again
    Expired(Arc<Entry>, OwnedMutexGuard<Slot>),
}

impl SessionManager {
    /// Starts the zygote (so a broken runtime shows at once) and the idle sweeper.
    pub async fn start(config: ManagerConfig) -> Result<Self, ManagerError> {
        let zygote = Zygote::start(config.zygote.clone()).await?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let period =
            (config.idle_ttl / 4).clamp(Duration::from_millis(20), Duration::from_secs(30));
        let inner = Arc::new(Inner {
            config,
            zygote: tokio::sync::Mutex::new(Some(zygote)),
            table: Mutex::new(Table::default()),
            next_call: AtomicU64::new(1),
            call_prefix: format!("{:x}-{nanos:x}", std::process::id()),
            shut: AtomicBool::new(false),
            stopping: CancellationToken::new(),
        });
        let sweeper = tokio::spawn(sweep_loop(Arc::downgrade(&inner), period));
        Ok(Self { inner, sweeper })
    }

    /// Runs Python code; see [`SessionManager::run`].
    pub async fn exec(
        &self,
        account: &str,
        session_id: Option<&str>,
        code: &str,
        limits: &Limits,
        on_output: Option<&mut (dyn FnMut(OutputChunk) + Send)>,
    ) -> Result<CallOutcome, ManagerError> {
        let request = Request::Exec {
            code: code.to_owned(),
        };
        self.run(account, session_id, request, limits, on_output, None)
            .await
    }

    /// Runs a bash command line; see [`SessionManager::run`].
    pub async fn bash(
        &self,
        account: &str,
        session_id: Option<&str>,
        command: &str,
        limits: &Limits,
        on_output: Option<&mut (dyn FnMut(OutputChunk) + Send)>,
    ) -> Result<CallOutcome, ManagerError> {
        let request = Request::Bash {
            command: command.to_owned(),
        };
        self.run(account, session_id, request, limits, on_output, None)
            .await
    }

    /// Runs one call in the account's session `session_id` (created if needed), or, without an
    /// id, in a fresh session that is closed afterwards. Time limits, streaming and cancellation
    /// work as in [`Session::run`]. A session that dies or is killed during the call is removed;
    /// the next call with its id starts fresh.
    pub async fn run(
        &self,
        account: &str,
        session_id: Option<&str>,
        request: Request,
        limits: &Limits,
        on_output: Option<&mut (dyn FnMut(OutputChunk) + Send)>,
        cancel: Option<&CancellationToken>,
    ) -> Result<CallOutcome, ManagerError> {
        if account.is_empty() {
            return Err(ManagerError::InvalidAccount);
        }
        if self.inner.shut.load(Ordering::Acquire) {
            return Err(ManagerError::ShutDown);
        }
        let Some(id) = session_id else {
            let n = self.inner.next_call.fetch_add(1, Ordering::Relaxed);
            let Admit::New(entry, slot, _) = self.admit(account, Name::Call(n))? else {
                return Err(ManagerError::ShutDown); // admit makes a new entry for a new name
            };
            // retired in the background when this call ends, however it ends
            let _retire = RetireOnDrop {
                inner: Arc::clone(&self.inner),
                entry: Some(Arc::clone(&entry)),
            };
            return self
                .call_in(entry, slot, true, false, request, limits, on_output, cancel)
                .await;
        };
        if id.is_empty() || id.len() > MAX_SESSION_ID_BYTES {
            return Err(ManagerError::InvalidSessionId);
        }
        loop {
            match self.admit(account, Name::Caller(id.to_owned()))? {
                Admit::Existing(entry) => {
                    let slot = Arc::clone(&entry.slot).lock_owned().await;
                    if slot.closed {
                        continue; // retired while we waited: look up again
                    }
                    return self
                        .call_in(
                            entry, slot, false, false, request, limits, on_output, cancel,
                        )
                        .await;
                }
                Admit::New(entry, slot, expired) => {
                    return self
                        .call_in(
                            entry, slot, true, expired, request, limits, on_output, cancel,
                        )
                        .await;
                }
                Admit::Expired(entry, slot) => {
                    retire(Arc::clone(&self.inner), entry, slot, true).await;
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)] // the call's own parameters, plus what admit decided
    async fn call_in(
        &self,
        entry: Arc<Entry>,
        mut slot: OwnedMutexGuard<Slot>,
        created: bool,
        expired: bool,
        request: Request,
        limits: &Limits,
        on_output: Option<&mut (dyn FnMut(OutputChunk) + Send)>,
        cancel: Option<&CancellationToken>,
    ) -> Result<CallOutcome, ManagerError> {
        let mut fresh = created;
        if slot.session.as_ref().is_some_and(|s| !s.is_alive()) {
            // died between calls (e.g. with the zygote): a new interpreter, an empty workspace
            if let Some(old) = slot.session.take() {
                old.close().await;
            }
        }
        let session = match slot.session.take() {
            Some(session) => session,
            None => {
                fresh = true;
                match self.open(&entry, limits).await {
                    Ok(session) => session,
                    Err(e) => {
                        if created {
                            retire(Arc::clone(&self.inner), entry, slot, false).await;
                        }
                        return Err(e);
                    }
                }
            }
        };
        let session = &*slot.session.insert(session);
        let pid = session.pid();
        // interrupted by the caller's token or by the manager's shutdown, whichever comes first
        let token = self.inner.stopping.child_token();
        let run = session.run(request, limits, on_output, Some(&token));
        let result = match cancel {
            None => run.await,
            Some(caller) => {
                tokio::pin!(run);
                tokio::select! {
                    result = &mut run => result,
                    () = caller.cancelled() => {
                        token.cancel();
                        run.await
                    }
                }
            }
        };
        let alive = session.is_alive();
        entry.touch();
        if !alive {
            retire(Arc::clone(&self.inner), Arc::clone(&entry), slot, false).await;
        }
        Ok(CallOutcome {
            outcome: result?,
            fresh,
            expired,
            pid,
            workspace: entry.workspace.clone(),
        })
    }

    /// Finds or makes the table entry of a session, enforcing the cap.
    fn admit(&self, account: &str, name: Name) -> Result<Admit, ManagerError> {
        let inner = &self.inner;
        let now = Instant::now();
        let mut table = inner.table();
        let sessions = table.accounts.entry(account.to_owned()).or_default();
        if let Some(entry) = sessions.get(&name) {
            let idle_too_long = now.duration_since(entry.idle_since()) >= inner.config.idle_ttl;
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
        let limit = inner.config.max_sessions_per_account;
        if sessions.len() >= limit {
            return Err(ManagerError::TooManySessions {
                limit,
                idle_ttl: inner.config.idle_ttl,
            });
        }
        let account_dir = inner.config.root.join(account_dir_name(account));
        let dir_name = match &name {
            Name::Caller(id) => session_dir_name(id),
            Name::Call(n) => format!("call-{}-{n}", inner.call_prefix),
        };
        let entry = Arc::new(Entry {
            account: account.to_owned(),
            name: name.clone(),
            workspace: account_dir.join(&dir_name),
            tmpdir: account_dir.join(format!("{dir_name}.tmp")),
            label: format!("{}/{dir_name}", account_dir_name(account)),
            last_used: Mutex::new(now),
            slot: Arc::new(tokio::sync::Mutex::new(Slot::default())),
        });
        let Ok(slot) = Arc::clone(&entry.slot).try_lock_owned() else {
            return Err(ManagerError::ShutDown); // a new mutex is never locked
        };
        sessions.insert(name.clone(), Arc::clone(&entry));
        let expired = match name {
            Name::Caller(id) => table.tombstones.remove(&(account.to_owned(), id)).is_some(),
            Name::Call(_) => false,
        };
        Ok(Admit::New(entry, slot, expired))
    }

    /// Prepares the workspace and forks the session. With a hardening library the session is
    /// confined to its workspace and `.tmp` sibling, and may write files of up to the call's
    /// workspace size (512 MiB when that is 0); see [`Zygote::fork_session_with`].
    async fn open(&self, entry: &Entry, limits: &Limits) -> Result<Session, ManagerError> {
        for dir in [&entry.workspace, &entry.tmpdir] {
            make_private_dir(dir).await?;
        }
        let max_file_bytes = match limits.workspace_bytes {
            0 => DEFAULT_MAX_FILE_BYTES,
            bytes => bytes,
        };
        let fork = |zygote: Zygote| async move {
            zygote
                .fork_session_with(
                    &entry.label,
                    &entry.workspace,
                    Some(&entry.tmpdir),
                    &ForkOptions {
                        max_file_bytes,
                        ..ForkOptions::default()
                    },
                )
                .await
        };
        match fork(self.zygote().await?).await {
            // it died since we looked: once more, with a new one
            Err(ZygoteError::Gone { .. }) => Ok(fork(self.zygote().await?).await?),
            other => Ok(other?),
        }
    }

    /// Makes sure a zygote runs, starting a new one if the last one died. Sessions forked from a
    /// dead zygote died with it; their next call starts fresh.
    pub async fn ensure_running(&self) -> Result<(), ManagerError> {
        self.zygote().await.map(drop)
    }

    async fn zygote(&self) -> Result<Zygote, ManagerError> {
        if self.inner.shut.load(Ordering::Acquire) {
            return Err(ManagerError::ShutDown);
        }
        let mut current = self.inner.zygote.lock().await;
        if let Some(zygote) = current.as_ref()
            && zygote.is_alive()
        {
            return Ok(zygote.clone());
        }
        if let Some(old) = current.take() {
            old.shutdown().await;
        }
        let zygote = Zygote::start(self.inner.config.zygote.clone()).await?;
        *current = Some(zygote.clone());
        Ok(zygote)
    }

    /// The running zygote, if any (for health checks and tests).
    pub async fn current_zygote(&self) -> Option<Zygote> {
        self.inner.zygote.lock().await.clone()
    }

    /// Live sessions of an account (including calls without a session id that are running).
    pub fn live_sessions(&self, account: &str) -> usize {
        self.inner
            .table()
            .accounts
            .get(account)
            .map_or(0, HashMap::len)
    }

    /// Closes one session now; false if there was none.
    pub async fn close_session(&self, account: &str, session_id: &str) -> bool {
        let entry = self
            .inner
            .table()
            .accounts
            .get(account)
            .and_then(|sessions| sessions.get(&Name::Caller(session_id.to_owned())))
            .cloned();
        let Some(entry) = entry else { return false };
        let slot = Arc::clone(&entry.slot).lock_owned().await;
        if slot.closed {
            return false;
        }
        retire(Arc::clone(&self.inner), entry, slot, false).await;
        true
    }

    /// Interrupts running calls (as a cancellation: SIGINT, then SIGKILL after the grace),
    /// closes every session, removes the workspaces and stops the zygote. Calls after this fail
    /// with [`ManagerError::ShutDown`]. Dropping the manager without this stops the processes
    /// too, but leaves the workspaces on disk.
    pub async fn shutdown(&self) {
        self.inner.shut.store(true, Ordering::Release);
        self.inner.stopping.cancel();
        // calls that were past the checks may still add entries; each round retires what is there
        for _ in 0..10 {
            let entries: Vec<Arc<Entry>> = self
                .inner
                .table()
                .accounts
                .values()
                .flat_map(|sessions| sessions.values().cloned())
                .collect();
            if entries.is_empty() {
                break;
            }
            let mut tasks = Vec::new();
            for entry in entries {
                let inner = Arc::clone(&self.inner);
                tasks.push(tokio::spawn(async move {
                    let slot = Arc::clone(&entry.slot).lock_owned().await;
                    if !slot.closed {
                        retire(inner, entry, slot, false).await;
                    }
                }));
            }
            for task in tasks {
                let _ = task.await;
            }
        }
        if let Some(zygote) = self.inner.zygote.lock().await.take() {
            zygote.shutdown().await;
        }
    }
}

impl Inner {
    fn table(&self) -> MutexGuard<'_, Table> {
        // every change to the table is a single insert or remove: still consistent after a panic
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Closes a session, removes its directories, and only then takes it out of the table (so the
/// same id cannot get a new session on these paths before they are gone). `tombstone`: remember
/// that the id expired.
async fn retire(
    inner: Arc<Inner>,
    entry: Arc<Entry>,
    mut slot: OwnedMutexGuard<Slot>,
    tombstone: bool,
) {
    slot.closed = true;
    if let Some(session) = slot.session.take() {
        session.close().await;
    }
    for dir in [&entry.workspace, &entry.tmpdir] {
        remove_tree(dir).await;
    }
    {
        let mut table = inner.table();
        if let Some(sessions) = table.accounts.get_mut(&entry.account) {
            if sessions
                .get(&entry.name)
                .is_some_and(|e| Arc::ptr_eq(e, &entry))
            {
                sessions.remove(&entry.name);
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
struct RetireOnDrop {
    inner: Arc<Inner>,
    entry: Option<Arc<Entry>>,
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

async fn sweep_loop(inner: Weak<Inner>, period: Duration) {
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
