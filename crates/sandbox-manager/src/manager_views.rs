//! What the manager shows and ends on request, beside running calls: a workspace file read
//! back, an account's sessions listed (for `sessions` and the dashboard), one session closed.

use std::collections::HashMap;
use std::sync::Arc;

use toolgate_sandbox::{
    MAX_SESSION_ID_BYTES, RunRequest, SessionState, Work, WorkspaceFile, WorkspaceRead,
};

use crate::files;
use crate::hibernation;
use crate::incarnation::blocking;
use crate::manager::SandboxManager;
use crate::manager_types::ManagerError;
use crate::session_table::{Name, retire};

impl SandboxManager {
    /// Reads one regular file of the account's session `session_id` (which must exist: this
    /// never starts one, but restores a hibernated one), of at most `max_bytes`. The path follows the rules of uploads; links
    /// are not followed; a directory, FIFO, socket or device is refused. It does not wait for a
    /// running call (it reads what is there now).
    pub async fn read_file(
        &self,
        account: &str,
        session_id: &str,
        path: &str,
        max_bytes: u64,
    ) -> Result<WorkspaceRead, ManagerError> {
        if account.is_empty() {
            return Err(ManagerError::InvalidAccount);
        }
        if session_id.is_empty() || session_id.len() > MAX_SESSION_ID_BYTES {
            return Err(ManagerError::InvalidSessionId);
        }
        files::check_paths(&[WorkspaceFile {
            path: path.to_owned(),
            content: Vec::new(),
        }])?;
        if self.inner.lookup(account, session_id).is_none()
            && hibernation::has_checkpoint(&self.inner, account, session_id).await
        {
            // a hibernated session exists too: restored (by an empty cell) to be read
            let mut wake = RunRequest::new(
                account,
                Some(session_id.to_owned()),
                Work::Python {
                    code: String::new(),
                },
                self.inner.config.warm_limits.clone(),
            );
            wake.existing_only = true;
            self.run(wake).await?;
        }
        let entry = self
            .inner
            .lookup(account, session_id)
            .ok_or(ManagerError::NoSuchSession)?;
        // a glance at the slot only when it is free: a call holding it is no reason to wait
        if let Ok(slot) = entry.slot.try_lock()
            && (slot.closed || slot.live.is_none())
        {
            return Err(ManagerError::NoSuchSession);
        }
        let (workspace, path) = (entry.place.workspace.clone(), path.to_owned());
        Ok(blocking(move || files::read_file(&workspace, &path, max_bytes)).await??)
    }

    /// The process ids of the warm sessions ready to be taken (for health checks and tests).
    pub fn warm_pids(&self) -> Vec<i32> {
        self.inner.table().pool.pids()
    }

    /// How many warm sessions are being made now (for health checks and tests).
    pub fn warm_being_made(&self) -> usize {
        self.inner.table().pool.filling
    }

    /// What the manager holds now, for placing sessions among hosts: its live sessions (every
    /// account's, calls without an id included), what their processes use of memory (from the
    /// sessions' groups; 0 without cgroups) and the memory all sessions may take together.
    pub fn load(&self) -> crate::Load {
        let sessions = self.inner.table().accounts.values().map(HashMap::len).sum();
        let memory_bytes = self
            .inner
            .cgroups
            .as_ref()
            .and_then(|cgroups| cgroups.in_use().0)
            .unwrap_or(0);
        crate::Load {
            sessions,
            memory_bytes,
            memory_budget: self.inner.config.budget.memory_bytes,
        }
    }

    /// Live sessions of an account (including calls without a session id that are running).
    pub fn live_sessions(&self, account: &str) -> usize {
        self.inner
            .table()
            .accounts
            .get(account)
            .map_or(0, HashMap::len)
    }

    /// The account's live sessions with a caller's id, ordered by id.
    pub async fn sessions_of(&self, account: &str) -> Vec<toolgate_sandbox::SandboxSessionInfo> {
        let entries: Vec<Arc<crate::session_table::Entry>> = self
            .inner
            .table()
            .accounts
            .get(account)
            .map(|sessions| sessions.values().cloned().collect())
            .unwrap_or_default();
        let inner = Arc::clone(&self.inner);
        let listed = blocking(move || {
            let now = std::time::Instant::now();
            let mut listed: Vec<toolgate_sandbox::SandboxSessionInfo> = entries
                .iter()
                .filter_map(|entry| {
                    let crate::session_table::Name::Caller(id) = &entry.name else {
                        return None;
                    };
                    Some(toolgate_sandbox::SandboxSessionInfo {
                        id: id.clone(),
                        age: now.saturating_duration_since(entry.opened),
                        idle: now.saturating_duration_since(entry.idle_since()),
                        memory_bytes: inner
                            .cgroups
                            .as_ref()
                            .and_then(|c| c.session_memory(&entry.place.cgroup_name)),
                        busy: entry.slot.try_lock().is_err(),
                        checkpoint: None,
                        state: SessionState::Live,
                    })
                })
                .collect();
            listed.sort_by(|a, b| a.id.cmp(&b.id));
            listed
        })
        .await;
        let mut listed = listed.unwrap_or_default();
        self.add_checkpoints(account, &mut listed).await;
        listed
    }

    /// Adds each kept session's newest checkpoint to `listed`, and the hibernated ones (kept,
    /// not live here) as sessions of their own.
    async fn add_checkpoints(
        &self,
        account: &str,
        listed: &mut Vec<toolgate_sandbox::SandboxSessionInfo>,
    ) {
        let Some(keeping) = self.inner.config.keeping.as_ref() else {
            return;
        };
        let kept = match keeping.store.list(account).await {
            Ok(kept) => kept,
            Err(e) => {
                tracing::warn!("the account's checkpoints could not be listed: {e}");
                return;
            }
        };
        for info in kept {
            match listed.iter_mut().find(|s| s.id == info.session_id) {
                Some(live) => live.checkpoint = Some(info),
                None => {
                    let age = hibernation::age(info.saved_at);
                    listed.push(toolgate_sandbox::SandboxSessionInfo {
                        id: info.session_id.clone(),
                        age,
                        idle: age,
                        memory_bytes: Some(0),
                        busy: false,
                        checkpoint: Some(info),
                        state: SessionState::Hibernated,
                    });
                }
            }
        }
        for (id, dropped_at) in hibernation::dropped_of(&self.inner, account) {
            if listed.iter().all(|s| s.id != id) {
                let age = hibernation::age(dropped_at);
                listed.push(toolgate_sandbox::SandboxSessionInfo {
                    id,
                    age,
                    idle: age,
                    memory_bytes: Some(0),
                    busy: false,
                    checkpoint: None,
                    state: SessionState::Dropped,
                });
            }
        }
        listed.sort_by(|a, b| a.id.cmp(&b.id));
    }

    /// Hibernates one live session now (after the call running in it, if any): its image is
    /// written to the checkpoint store and its processes end. `Ok(false)`: no such live
    /// session. An error when checkpoints are off or the image could not be written (the
    /// session then lives on).
    pub async fn hibernate(&self, account: &str, session_id: &str) -> Result<bool, String> {
        if self.inner.config.keeping.is_none() {
            return Err("checkpoints are off".to_owned());
        }
        let Some(entry) = self.inner.lookup(account, session_id) else {
            return Ok(false);
        };
        let slot = Arc::clone(&entry.slot).lock_owned().await;
        if slot.closed || slot.live.is_none() {
            return Ok(false);
        }
        hibernation::checkpoint(&self.inner, &entry, &slot).await?;
        retire(Arc::clone(&self.inner), entry, slot, false).await;
        Ok(true)
    }

    /// Hibernates every live session with a caller's id (each after the call running in it):
    /// a node being drained. With checkpoints off each is closed instead; one whose image could
    /// not be written lives on (its older checkpoint, if any, is kept). How many were
    /// hibernated.
    pub async fn hibernate_all(&self) -> usize {
        let live: Vec<(String, String)> = self
            .inner
            .table()
            .accounts
            .iter()
            .flat_map(|(account, sessions)| {
                sessions.keys().filter_map(move |name| match name {
                    Name::Caller(id) => Some((account.clone(), id.clone())),
                    Name::Call(_) => None,
                })
            })
            .collect();
        let mut hibernated = 0;
        for (account, id) in live {
            match self.hibernate(&account, &id).await {
                Ok(true) => hibernated += 1,
                Ok(false) => {}
                Err(_) if self.inner.config.keeping.is_none() => {
                    self.close_session(&account, &id).await;
                }
                Err(why) => {
                    tracing::warn!("a session could not be written out while draining: {why}");
                }
            }
        }
        hibernated
    }

    /// Closes one session now, and deletes its checkpoints; false if there was neither.
    pub async fn close_session(&self, account: &str, session_id: &str) -> bool {
        let mut closed = false;
        if let Some(entry) = self.inner.lookup(account, session_id) {
            let slot = Arc::clone(&entry.slot).lock_owned().await;
            if !slot.closed {
                retire(Arc::clone(&self.inner), entry, slot, false).await;
                closed = true;
            }
        }
        hibernation::forget(&self.inner, account, session_id).await || closed
    }
}
