//! Sessions by (account, caller's session id), with their workspaces, idle expiry, a cap per
//! account, files in and out, and what confines each one (cgroups, a size-capped workspace, a
//! uid of its own). The table and its locking are in `session_table.rs`; one session's resources in
//! `incarnation.rs`; the warm sessions new ones take in `warm.rs`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{Notify, OwnedMutexGuard};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use toolgate_egress_proxy::{EgressGrant, RunEgress};
use toolgate_sandbox::policy::Limits;
use toolgate_sandbox::upcall::UpcallOrigin;
use toolgate_sandbox::{
    ExecOutcome, MAX_SESSION_ID_BYTES, MAX_UPLOAD_FILES, OutputChunk, RunOutcome, RunRequest, Work,
    WorkspaceFile, check_env,
};

use crate::cgroup::{CgroupVersion, Cgroups};
use crate::driver::Call;
use crate::files;
use crate::hibernation::{self, Restoring};
use crate::incarnation::{Live, blocking};
use crate::manager_types::{Isolation, ManagerConfig, ManagerError};
use crate::session::relay_output;
use crate::session_error::SessionError;
use crate::session_table::{Claim, Entry, ManagerState, Name, RetireOnDrop, Slot, Table, retire};
use crate::sweep::sweep_loop;
use crate::upcalls::Upcalls;
use crate::warm::WARM_DIR;
use crate::warming;
use crate::workspace::{
    can_give_away, can_mount, detach_stale_mounts, remove_tree, remove_tree_now,
};
use crate::zygote::{DEFAULT_MAX_FILE_BYTES, Zygote};

/// Checkpoints and restores the server works on at once (each holds an image in memory).
const IMAGES_AT_ONCE: usize = 2;

/// Sessions of every account, forked from one zygote (restarted when it dies).
#[derive(Debug)]
pub struct SandboxManager {
    pub(crate) inner: Arc<ManagerState>,
    sweeper: JoinHandle<()>,
    /// The pool's filler; taken (and awaited) by shutdown.
    filler: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for SandboxManager {
    fn drop(&mut self) {
        self.sweeper.abort();
        if let Some(filler) = self.filler.lock().unwrap_or_else(|p| p.into_inner()).take() {
            filler.abort();
        }
    }
}

impl SandboxManager {
    /// Starts the zygote (so a broken runtime shows at once) and the idle sweeper, finds what
    /// can confine sessions here (see [`SandboxManager::isolation`]; a missing piece is logged
    /// once, or is an error for [`CgroupMode::Required`]), and makes the warm sessions
    /// ([`ManagerConfig::warm_sessions`]) before it returns (one that cannot be made is logged;
    /// new sessions then start without).
    ///
    /// [`CgroupMode::Required`]: crate::CgroupMode::Required
    pub async fn start(config: ManagerConfig) -> Result<Self, ManagerError> {
        let zygote = Zygote::start(config.zygote.clone()).await?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let call_prefix = format!("{:x}-{nanos:x}", std::process::id());
        let (mode, cpu, root, prefix, uid) = (
            config.cgroups,
            config.cpu_quota_millis,
            config.root.clone(),
            call_prefix.clone(),
            config.uid_base,
        );
        let budget = config.budget;
        let (cgroups, quota, give_away) = blocking(move || {
            let cgroups = Cgroups::detect(mode, &prefix, cpu)?;
            if let Some(cgroups) = &cgroups
                && let Err(e) = cgroups.limit_all(budget.memory_bytes, budget.pids)
            {
                // admissions still hold the budget; the kernel's back-stop is missing
                tracing::warn!(
                    "cannot set the sessions' total budget on their parent cgroups: {e}"
                );
            }
            let probe = format!(".probe-{prefix}");
            let quota = can_mount(&root, &probe);
            if quota {
                detach_stale_mounts(&root);
            }
            // warm sessions of a crashed run (their mounts detached just above)
            remove_tree_now(&root.join(WARM_DIR));
            let give_away = can_give_away(&root, &probe, uid);
            Ok::<_, ManagerError>((cgroups, quota, give_away))
        })
        .await??;
        let isolation = Isolation {
            cgroups: cgroups
                .as_ref()
                .map_or(CgroupVersion::None, Cgroups::version),
            workspace_quota: quota,
        };
        // a kept session hibernates within about a second of its time
        let period = match &config.keeping {
            Some(keeping) => (config.idle_ttl.min(keeping.hibernate_after) / 4)
                .clamp(Duration::from_millis(20), Duration::from_secs(1)),
            None => (config.idle_ttl / 4).clamp(Duration::from_millis(20), Duration::from_secs(30)),
        };
        let inner = Arc::new(ManagerState {
            config,
            zygote: tokio::sync::Mutex::new(Some(zygote)),
            table: std::sync::Mutex::new(Table::default()),
            next_call: AtomicU64::new(1),
            call_prefix,
            shut: AtomicBool::new(false),
            stopping: CancellationToken::new(),
            isolation,
            give_away,
            pool_kick: Notify::new(),
            background: Mutex::new(Vec::new()),
            set_aside: Mutex::new(Vec::new()),
            image_work: tokio::sync::Semaphore::new(IMAGES_AT_ONCE),
            dropped: Mutex::new(std::collections::HashMap::new()),
            cgroups,
        });
        let sweeper = tokio::spawn(sweep_loop(Arc::downgrade(&inner), period));
        if inner.config.warm_sessions > 0
            && let Err(e) = warming::top_up(&inner).await
        {
            tracing::warn!("could not start the warm sessions (new sessions start without): {e}");
        }
        let filler = tokio::spawn(warming::fill_loop(Arc::downgrade(&inner)));
        Ok(Self {
            inner,
            sweeper,
            filler: Mutex::new(Some(filler)),
        })
    }

    /// What confines sessions on this host: the cgroup version (or none) and whether
    /// workspaces are size-capped.
    pub fn isolation(&self) -> Isolation {
        self.inner.isolation
    }

    /// How long a session may sit idle before it expires (the operator's setting).
    pub fn idle_ttl(&self) -> std::time::Duration {
        self.inner.config.idle_ttl
    }

    /// Runs Python code; see [`SandboxManager::run`].
    pub async fn exec(
        &self,
        account: &str,
        session_id: Option<&str>,
        code: &str,
        limits: &Limits,
        files: &[WorkspaceFile],
        on_output: Option<&mut (dyn FnMut(OutputChunk) + Send)>,
    ) -> Result<RunOutcome, ManagerError> {
        let work = Work::Python {
            code: code.to_owned(),
        };
        self.run_relayed(account, session_id, work, limits, files, on_output)
            .await
    }

    /// Runs a bash command line; see [`SandboxManager::run`].
    pub async fn bash(
        &self,
        account: &str,
        session_id: Option<&str>,
        command: &str,
        limits: &Limits,
        files: &[WorkspaceFile],
        on_output: Option<&mut (dyn FnMut(OutputChunk) + Send)>,
    ) -> Result<RunOutcome, ManagerError> {
        let work = Work::Bash {
            command: command.to_owned(),
        };
        self.run_relayed(account, session_id, work, limits, files, on_output)
            .await
    }

    /// [`SandboxManager::run`] with output passed to a callback as it comes.
    async fn run_relayed(
        &self,
        account: &str,
        session_id: Option<&str>,
        work: Work,
        limits: &Limits,
        files: &[WorkspaceFile],
        on_output: Option<&mut (dyn FnMut(OutputChunk) + Send)>,
    ) -> Result<RunOutcome, ManagerError> {
        let mut request =
            RunRequest::new(account, session_id.map(str::to_owned), work, limits.clone());
        request.files = files.to_vec();
        relay_output(on_output, |output| {
            request.output = output;
            self.run(request)
        })
        .await
    }

    /// Runs one call in the account's session `session_id` (created if needed), or, without an
    /// id, in a fresh session that is closed afterwards. `files` are written into the workspace
    /// first (at most [`MAX_UPLOAD_FILES`], relative paths, replacing what is there; see
    /// [`WorkspaceFile`]); if one cannot be, nothing runs. Time limits, streaming and
    /// cancellation work as in [`Session::run`](crate::Session::run). A session that dies or is
    /// killed during the call is removed; the next call with its id starts fresh. With
    /// `existing_only` the call runs only in the session as it lives now, and is refused
    /// ([`ManagerError::NoSuchSession`]) rather than start one.
    pub async fn run(&self, request: RunRequest) -> Result<RunOutcome, ManagerError> {
        let RunRequest {
            account,
            session_id,
            work,
            limits,
            files,
            env,
            output,
            upcalls,
            cancel,
            existing_only,
            spill,
            egress,
        } = request;
        if account.is_empty() {
            return Err(ManagerError::InvalidAccount);
        }
        if self.inner.shut.load(Ordering::Acquire) {
            return Err(ManagerError::ShutDown);
        }
        check_upload(&files, &limits)?;
        check_env(&env)?;
        if let Work::Sqlite(sqlite) = &work {
            // the session opens it relative to its workspace, by the rules of an upload's path
            files::check_paths(&[WorkspaceFile {
                path: sqlite.path.clone(),
                content: Vec::new(),
            }])?;
        }
        // who the session is, as this manager knows it: attached to each of its upcalls
        let upcalls = upcalls.map(|handler| Upcalls {
            handler,
            origin: UpcallOrigin {
                account: account.clone(),
                session_id: session_id.clone(),
            },
        });
        let call = Call {
            work: Arc::new(work),
            env,
            timeout: limits.timeout,
            output,
            upcalls,
            cancel,
            spill,
        };
        let account = account.as_str();
        let limits = &limits;
        let mut call = Some((call, files, egress));
        let Some(id) = session_id.as_deref() else {
            if existing_only {
                return Err(ManagerError::NoSuchSession);
            }
            let n = self.inner.next_call.fetch_add(1, Ordering::Relaxed);
            let (entry, slot) = loop {
                match self.claim(account, Name::Call(n), limits)? {
                    Claim::New(entry, slot, _) => break (entry, slot),
                    Claim::Evict(warm) => warming::discard(Arc::clone(&self.inner), *warm).await,
                    // a new name has no entry yet
                    Claim::Existing(_) | Claim::Expired(..) => return Err(ManagerError::ShutDown),
                }
            };
            // retired in the background when this call ends, however it ends
            let _retire = RetireOnDrop {
                inner: Arc::clone(&self.inner),
                entry: Some(Arc::clone(&entry)),
            };
            let call = call.take().ok_or(ManagerError::ShutDown)?;
            return self.call_in(entry, slot, true, false, call, limits).await;
        };
        if id.is_empty() || id.len() > MAX_SESSION_ID_BYTES {
            return Err(ManagerError::InvalidSessionId);
        }
        // looked up first, so that a refused read takes no warm session; a hibernated session
        // exists too (the read restores it)
        let hibernated = existing_only
            && self.inner.lookup(account, id).is_none()
            && hibernation::has_checkpoint(&self.inner, account, id).await;
        if existing_only && self.inner.lookup(account, id).is_none() && !hibernated {
            return Err(ManagerError::NoSuchSession);
        }
        loop {
            match self.claim(account, Name::Caller(id.to_owned()), limits)? {
                Claim::Existing(entry) => {
                    let slot = Arc::clone(&entry.slot).lock_owned().await;
                    if slot.closed {
                        if existing_only {
                            return Err(ManagerError::NoSuchSession);
                        }
                        continue; // retired while we waited: look up again
                    }
                    let alive = slot.live.as_ref().is_some_and(|l| l.session.is_alive());
                    if existing_only && !alive {
                        return Err(ManagerError::NoSuchSession);
                    }
                    let call = call.take().ok_or(ManagerError::ShutDown)?;
                    return self.call_in(entry, slot, false, false, call, limits).await;
                }
                Claim::New(entry, slot, expired) => {
                    if existing_only && !hibernated {
                        // it went between the look-up and the claim
                        retire(Arc::clone(&self.inner), entry, slot, false).await;
                        return Err(ManagerError::NoSuchSession);
                    }
                    let call = call.take().ok_or(ManagerError::ShutDown)?;
                    return self.call_in(entry, slot, true, expired, call, limits).await;
                }
                Claim::Expired(entry, slot) => {
                    retire(Arc::clone(&self.inner), entry, slot, true).await;
                    if existing_only {
                        return Err(ManagerError::NoSuchSession);
                    }
                }
                Claim::Evict(warm) => warming::discard(Arc::clone(&self.inner), *warm).await,
            }
        }
    }

    async fn call_in(
        &self,
        entry: Arc<Entry>,
        mut slot: OwnedMutexGuard<Slot>,
        created: bool,
        expired: bool,
        (mut call, files, egress): (Call, Vec<WorkspaceFile>, Option<EgressGrant>),
        limits: &Limits,
    ) -> Result<RunOutcome, ManagerError> {
        let mut reached = Vec::new();
        entry.given_env(call.env.keys());
        let mut fresh = created;
        // a new entry with a session already: it took a warm one
        let took_warm = created && slot.live.is_some();
        let mut attempts = 0;
        let mut restoring = None;
        let (pid, oom_kills, result) = loop {
            attempts += 1;
            if slot.live.as_ref().is_some_and(|l| !l.session.is_alive()) {
                // died between calls (e.g. with the zygote): a new interpreter, an empty workspace
                if let Some(old) = slot.live.take() {
                    old.close().await;
                }
            }
            let live = match slot.live.take() {
                Some(live) => live,
                None => {
                    fresh = true;
                    match Live::open(&self.inner, &entry.place, limits, false).await {
                        Ok(live) => live,
                        Err(e) => {
                            if created {
                                retire(Arc::clone(&self.inner), entry, slot, false).await;
                            }
                            return Err(e);
                        }
                    }
                }
            };
            let live = &*slot.live.insert(live);
            if created && attempts == 1 {
                // a session this process does not hold may have a checkpoint: restored first
                restoring = hibernation::restore(&self.inner, &entry, live).await;
                if let Some(Restoring::Done(restored)) = &restoring
                    && !restored.env_names.is_empty()
                {
                    // it may show values it was given before: the caller learns their names
                    // with the outcome, so nothing of this run streams before it can redact
                    call.output = None;
                }
            }
            if !files.is_empty() {
                let (workspace, files) = (entry.place.workspace.clone(), files.clone());
                let owner = self.inner.give_away.then_some(entry.place.uid);
                // written by a process in the session's memory group: the session pays for them
                let charge = live.charge_dir();
                blocking(move || files::write_files(&workspace, &files, owner, charge.as_deref()))
                    .await??;
            }
            let before = live.memory_events();
            let run_egress = live.begin_egress(egress.clone());
            let result = self.run_in(live, call.clone()).await;
            reached.extend(run_egress.map(RunEgress::finish).unwrap_or_default());
            if matches!(result, Err(SessionError::Ended(_))) && attempts == 1 {
                // It had died unnoticed (idle, or in the pool) and nothing of this call reached
                // it: the call runs in a new interpreter instead, as after a death we knew of.
                continue;
            }
            let oom_kills = before.oom_since(&live.memory_events());
            let result = match result {
                // the OOM killer's SIGKILL: say so, rather than "killed by signal SIGKILL"
                Err(SessionError::Died(info))
                    if oom_kills > 0 && info.signal.as_deref() == Some("SIGKILL") =>
                {
                    Err(SessionError::OutOfMemory {
                        limit_bytes: live.memory_limit(),
                    })
                }
                other => other,
            };
            break (live.session.pid(), oom_kills, result);
        };
        if took_warm {
            // the replacement is made now that this first result is out, not while it ran
            self.inner.pool_kick.notify_one();
        }
        let alive = slot.live.as_ref().is_some_and(|l| l.session.is_alive());
        entry.touch();
        if !alive {
            retire(Arc::clone(&self.inner), Arc::clone(&entry), slot, false).await;
        } else if hibernation::due_for_checkpoint(&self.inner, &entry) {
            // taken once this call's result is out (the slot is let go when this returns)
            let (inner, entry) = (Arc::clone(&self.inner), Arc::clone(&entry));
            entry.checkpointed(); // one at a time, not one per call while it is written
            tokio::spawn(async move {
                let slot = Arc::clone(&entry.slot).lock_owned().await;
                if !slot.closed
                    && let Err(e) = hibernation::checkpoint(&inner, &entry, &slot).await
                {
                    tracing::warn!("a session's periodic checkpoint failed: {e}");
                }
            });
        }
        let (restored, lost_checkpoint) = match restoring {
            Some(Restoring::Done(restored)) => (Some(restored), None),
            Some(Restoring::Lost(why)) => (None, Some(why)),
            None => (None, None),
        };
        Ok(RunOutcome {
            outcome: result?,
            fresh: fresh && restored.is_none(),
            expired,
            pid,
            workspace: entry.place.workspace.clone(),
            oom_kills,
            restored,
            lost_checkpoint,
            node_lost: false,
            egress: reached,
        })
    }

    /// Runs `call` in `live`'s session, interrupted by the caller's cancellation or by the
    /// manager's shutdown, whichever comes first.
    async fn run_in(&self, live: &Live, call: Call) -> Result<ExecOutcome, SessionError> {
        let token = self.inner.stopping.child_token();
        let caller = call.cancel.clone();
        let run = live.session.call(Call {
            cancel: Some(token.clone()),
            ..call
        });
        match caller {
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
        }
    }

    /// Makes sure a zygote runs, starting a new one if the last one died. Sessions forked from a
    /// dead zygote died with it; their next call starts fresh.
    pub async fn ensure_running(&self) -> Result<(), ManagerError> {
        self.inner.zygote().await.map(drop)
    }

    /// The running zygote, if any (for health checks and tests).
    pub async fn current_zygote(&self) -> Option<Zygote> {
        self.inner.zygote.lock().await.clone()
    }

    /// Finds or makes the entry of `name` (see [`ManagerState::claim`]), then discards in the
    /// background the warm sessions the claim found unusable.
    fn claim(&self, account: &str, name: Name, limits: &Limits) -> Result<Claim, ManagerError> {
        let claimed = self.inner.claim(account, name, limits);
        self.inner.discard_set_aside();
        claimed
    }

    /// Interrupts running calls (as a cancellation: SIGINT, then SIGKILL after the grace; with
    /// [`ManagerConfig::keeping`], only after [`Keeping::shutdown_grace`](crate::Keeping::shutdown_grace), and each session with
    /// a caller's id is checkpointed first), closes every session, warm ones included (killing what is left in its cgroup, detaching
    /// its workspace), removes the workspaces and stops the zygote. Calls after this fail with
    /// [`ManagerError::ShutDown`]. Dropping the manager without this stops the processes,
    /// removes the cgroups and detaches the mounts too, but leaves the workspace directories.
    pub async fn shutdown(&self) {
        self.shutdown_with(true).await;
    }

    /// Shuts down as [`Self::shutdown`] does, but writes nothing out: running calls are
    /// interrupted at once and every session ends as it is. For a node that lost its lease:
    /// its sessions may already live elsewhere, and a checkpoint written now would overwrite
    /// theirs.
    pub async fn shutdown_abandoning(&self) {
        self.shutdown_with(false).await;
    }

    async fn shutdown_with(&self, keep: bool) {
        self.inner.shut.store(true, Ordering::Release);
        let keeping = self.inner.config.keeping.as_ref().filter(|_| keep);
        // kept sessions are written out: a running call may finish first, up to the grace
        match keeping.map(|k| k.shutdown_grace) {
            Some(grace) if !grace.is_zero() => {
                let stopping = self.inner.stopping.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(grace).await;
                    stopping.cancel();
                });
            }
            _ => self.inner.stopping.cancel(),
        }
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
                    if slot.closed {
                        return;
                    }
                    if keep
                        && inner.config.keeping.is_some()
                        && matches!(entry.name, Name::Caller(_))
                        && let Err(e) = hibernation::checkpoint(&inner, &entry, &slot).await
                    {
                        tracing::warn!("a session could not be written out at shutdown: {e}");
                    }
                    retire(inner, entry, slot, false).await;
                }));
            }
            for task in tasks {
                let _ = task.await;
            }
        }
        self.inner.stopping.cancel();
        // the filler ends at the stop token, after the warm session it may be making (which it
        // then closes itself); then nothing adds to the pool any more
        let filler = self.filler.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(filler) = filler {
            let _ = filler.await;
        }
        warming::close_all(&self.inner).await;
        remove_tree(&self.inner.config.root.join(WARM_DIR)).await;
        if let Some(cgroups) = &self.inner.cgroups {
            cgroups.remove_instance();
        }
        if let Some(zygote) = self.inner.zygote.lock().await.take() {
            zygote.shutdown().await;
        }
    }
}

/// Refuses an upload with too many files, a bad path, or more bytes than the workspace holds,
/// before anything is started or written.
fn check_upload(files: &[WorkspaceFile], limits: &Limits) -> Result<(), ManagerError> {
    if files.len() > MAX_UPLOAD_FILES {
        return Err(ManagerError::TooManyFiles { count: files.len() });
    }
    files::check_paths(files)?;
    let bytes = files
        .iter()
        .map(|f| u64::try_from(f.content.len()).unwrap_or(u64::MAX))
        .fold(0u64, u64::saturating_add);
    let max = match limits.workspace_bytes {
        0 => DEFAULT_MAX_FILE_BYTES,
        max => max,
    };
    if bytes > max {
        return Err(ManagerError::UploadTooLarge { bytes, max });
    }
    Ok(())
}
