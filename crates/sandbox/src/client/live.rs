//! One incarnation of a session: the process forked from the zygote, with its cgroups and its
//! workspace mounts. A table entry keeps its paths and uid across incarnations (a session that
//! died between calls is replaced by a fresh one in the same place).

use std::sync::Arc;

use super::cgroup::{MemoryEvents, SessionCgroup};
use super::manager_types::ManagerError;
use super::session::Session;
use super::table::{Entry, Inner};
use super::workspace::{QuotaMounts, detach, give_to, make_private_dir};
use super::zygote::{DEFAULT_MAX_FILE_BYTES, ForkOptions, Zygote, ZygoteError};
use crate::policy::Limits;

/// A running session and what confines it. Dropping it (only when the manager itself is dropped
/// without a shutdown) still kills its processes and detaches its mounts, by the fields' own
/// `Drop`s, in this order.
#[derive(Debug)]
pub(super) struct Live {
    pub(super) session: Session,
    cgroup: Option<SessionCgroup>,
    mounts: Option<QuotaMounts>,
}

/// Runs blocking work off the async threads; a runtime shutting down reads as the manager's.
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ManagerError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| ManagerError::ShutDown)
}

impl Live {
    /// Prepares the workspace (a size-capped tmpfs when the manager may mount, else a plain
    /// directory given to the session's uid), makes the cgroups and forks the session into them.
    /// With a hardening library the session is confined to its workspace and `.tmp` sibling, and
    /// may write files of up to the call's workspace size (512 MiB when that is 0); see
    /// [`Zygote::fork_session_with`].
    pub(super) async fn open(
        inner: &Arc<Inner>,
        entry: &Entry,
        limits: &Limits,
    ) -> Result<Self, ManagerError> {
        let quota = inner.isolation.workspace_quota;
        for dir in [&entry.workspace, &entry.tmpdir] {
            if quota {
                // a mount left there by a crashed run would make the directory undeletable
                detach(dir);
            }
            make_private_dir(dir).await?;
        }
        let size = match limits.workspace_bytes {
            0 => DEFAULT_MAX_FILE_BYTES,
            bytes => bytes,
        };
        let mounts = if quota {
            let (workspace, tmpdir, uid) =
                (entry.workspace.clone(), entry.tmpdir.clone(), entry.uid);
            let mounted = blocking(move || QuotaMounts::mount(&workspace, &tmpdir, size, uid))
                .await?
                .map_err(|source| ManagerError::Workspace {
                    path: entry.workspace.clone(),
                    source,
                })?;
            Some(mounted)
        } else {
            if inner.give_away {
                give_to(&entry.workspace, entry.uid)?;
                give_to(&entry.tmpdir, entry.uid)?;
            }
            None
        };
        let cgroup = if inner.cgroups.is_some() {
            let (inner, name, limits) =
                (Arc::clone(inner), entry.cgroup_name.clone(), limits.clone());
            let made = blocking(move || match &inner.cgroups {
                Some(cgroups) => cgroups.create(&name, &limits).map(Some),
                None => Ok(None),
            });
            made.await??
        } else {
            None
        };
        let options = ForkOptions {
            max_file_bytes: size,
            cgroups: cgroup.as_ref().map(SessionCgroup::dirs).unwrap_or_default(),
            uid: entry.uid,
        };
        let fork = |zygote: Zygote| {
            let options = &options;
            async move {
                zygote
                    .fork_session_with(&entry.label, &entry.workspace, Some(&entry.tmpdir), options)
                    .await
            }
        };
        let session = match fork(inner.zygote().await?).await {
            // it died since we looked: once more, with a new one
            Err(ZygoteError::Gone { .. }) => fork(inner.zygote().await?).await?,
            other => other?,
        };
        // The child may have joined by itself (the zygote does so before any code runs); this
        // covers a zygote without that. It runs nothing before its first request, which comes
        // after this.
        if let Some(group) = &cgroup
            && let Err(e) = group.add(session.pid())
        {
            session.close().await;
            return Err(e.into());
        }
        Ok(Self {
            session,
            cgroup,
            mounts,
        })
    }

    /// The memory group's OOM evidence so far (zeros without cgroups).
    pub(super) fn memory_events(&self) -> MemoryEvents {
        self.cgroup
            .as_ref()
            .map(SessionCgroup::memory_events)
            .unwrap_or_default()
    }

    /// The session's memory limit in bytes (0: none known).
    pub(super) fn memory_limit(&self) -> u64 {
        self.cgroup.as_ref().map_or(0, SessionCgroup::memory_limit)
    }

    /// Closes the session, kills whatever it left running (daemons, the rest of a fork bomb),
    /// removes its cgroups and detaches its mounts.
    pub(super) async fn close(mut self) {
        let session = self.session;
        session.close().await;
        if let Some(mut group) = self.cgroup.take() {
            let destroyed = blocking(move || group.destroy()).await;
            if let Ok(Err(e)) = destroyed {
                tracing::warn!("a session's cgroup was not cleaned up: {e}");
            }
        }
        drop(self.mounts.take());
    }
}

impl Inner {
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
