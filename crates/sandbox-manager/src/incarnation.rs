//! One incarnation of a session: the process forked from the zygote, with its cgroups and its
//! workspace mounts, made in a [`Place`]. A table entry keeps its place across incarnations (a
//! session that died between calls is replaced by a fresh one in the same place); a warm
//! session of the pool (`warm.rs`) is made in a place of its own, which the entry that takes it
//! then keeps.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cgroup::Cgroups;
use crate::cgroup::{MemoryEvents, SessionCgroup};
use crate::manager_types::ManagerError;
use crate::session::SandboxSession;
use crate::workspace::{QuotaMounts, prepare_workspace};
use crate::zygote::{DEFAULT_MAX_FILE_BYTES, ForkOptions, Zygote, ZygoteError};
use toolgate_egress_proxy::{
    EgressGrant, EgressProxy, RunEgress, SESSION_PROXY_PORT, SessionGate, listen_in_netns,
    listen_on_loopback,
};
use toolgate_sandbox::policy::Limits;

/// Where a session lives and who it is: what its incarnations share.
#[derive(Debug, Clone)]
pub(super) struct Place {
    pub(super) workspace: PathBuf,
    pub(super) tmpdir: PathBuf,
    /// What the zygote calls the session (never the caller's id).
    pub(super) label: String,
    /// The name of its cgroups (one path component).
    pub(super) cgroup_name: String,
    /// Its host uid, its own among the live sessions (and warm ones).
    pub(super) uid: u32,
}

/// A running session and what confines it. Dropping it (only when the manager itself is dropped
/// without a shutdown) still kills its processes and detaches its mounts, by the fields' own
/// `Drop`s, in this order.
#[derive(Debug)]
pub(super) struct Live {
    pub(super) session: SandboxSession,
    cgroup: Option<SessionCgroup>,
    mounts: Option<QuotaMounts>,
    /// The zygote it was forked from (a warm session whose zygote died is of no use).
    pub(super) zygote: Zygote,
    /// Its way out (with network): the proxy's listener in its namespace, served here.
    gate: Option<SessionGate>,
}

/// What opening a session needs of the manager: how workspaces are made, its cgroups, and a
/// running zygote (started again if the last one died).
pub(super) trait Host: Send + Sync + 'static {
    /// Workspaces are size-capped mounts.
    fn workspace_quota(&self) -> bool;
    /// Workspaces and files are given to the session's uid.
    fn give_away(&self) -> bool;
    /// The manager's cgroups, if it confines with them.
    fn cgroups(&self) -> Option<&Cgroups>;
    /// A running zygote.
    fn running_zygote(
        &self,
    ) -> impl std::future::Future<Output = Result<Zygote, ManagerError>> + Send;
    /// Sessions' way out, if they have network.
    fn egress(&self) -> Option<&EgressProxy>;
}

/// Runs blocking work off the async threads; a runtime shutting down reads as the manager's.
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ManagerError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| ManagerError::ShutDown)
}

/// Microseconds, for the timing events.
fn micros(took: Duration) -> u64 {
    u64::try_from(took.as_micros()).unwrap_or(u64::MAX)
}

impl Live {
    /// The group a process joins to charge what it writes to this session's memory.
    pub(super) fn charge_dir(&self) -> Option<std::path::PathBuf> {
        self.cgroup.as_ref()?.memory_dir()
    }

    /// Prepares the workspace (a size-capped tmpfs when the manager may mount, else a plain
    /// directory given to the session's uid) and, side by side with it, the cgroups, then forks
    /// the session into them. With a hardening library the session is confined to its workspace
    /// and `.tmp` sibling, and may write files of up to the call's workspace size (512 MiB when
    /// that is 0); see [`Zygote::fork_session_with`].
    ///
    /// `ahead`: a session made ahead of demand (the warm pool's), whose fork goes after any
    /// caller's own ([`crate::zygote::ForkOptions::ahead`]).
    ///
    /// Emits a `toolgate_sandbox::timing` debug event with the time of each step.
    pub(super) async fn open<H: Host>(
        inner: &Arc<H>,
        place: &Place,
        limits: &Limits,
        ahead: bool,
    ) -> Result<Self, ManagerError> {
        let started = Instant::now();
        let size = match limits.workspace_bytes {
            0 => DEFAULT_MAX_FILE_BYTES,
            bytes => bytes,
        };
        // The two are independent and each mostly waits for the kernel: made in parallel.
        let workspace = {
            let (place, quota, give_away) =
                (place.clone(), inner.workspace_quota(), inner.give_away());
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                let made = prepare_workspace(
                    &place.workspace,
                    &place.tmpdir,
                    quota,
                    give_away,
                    size,
                    place.uid,
                );
                (made, started.elapsed())
            })
        };
        let cgroup = {
            let (inner, name, limits) =
                (Arc::clone(inner), place.cgroup_name.clone(), limits.clone());
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                let made = match inner.cgroups() {
                    Some(cgroups) => cgroups.create(&name, &limits).map(Some),
                    None => Ok(None),
                };
                (made, started.elapsed())
            })
        };
        let (workspace, cgroup) = tokio::join!(workspace, cgroup);
        let ((mounts, workspace_took), (cgroup, cgroup_took)) = match (workspace, cgroup) {
            (Ok((Ok(mounts), w)), Ok((Ok(cgroup), c))) => ((mounts, w), (cgroup, c)),
            (workspace, cgroup) => {
                // what was made is undone by its Drop (blocking), off the async threads
                let error = match (workspace, cgroup) {
                    (Ok((Err(e), _)), other) => {
                        drop(tokio::task::spawn_blocking(move || drop(other)));
                        e
                    }
                    (other, Ok((Err(e), _))) => {
                        drop(tokio::task::spawn_blocking(move || drop(other)));
                        e.into()
                    }
                    _ => ManagerError::ShutDown, // a blocking task did not finish: shutting down
                };
                return Err(error);
            }
        };
        let prepared = started.elapsed();
        // one look-up of the zygote: it decides the session's network and forks it
        let zygote = inner.running_zygote().await?;
        let hardened = zygote.is_hardened();
        let mut gate = inner.egress().map(EgressProxy::gate);
        if let Some(gate) = gate.as_mut()
            && !hardened
        {
            // an unconfined session shares the host's network: its proxy listens there
            gate.serve(listen_on_loopback().map_err(ManagerError::Egress)?)
                .map_err(ManagerError::Egress)?;
        }
        let options = ForkOptions {
            max_file_bytes: size,
            cgroups: cgroup.as_ref().map(SessionCgroup::dirs).unwrap_or_default(),
            uid: place.uid,
            proxy_port: (hardened && gate.is_some()).then_some(SESSION_PROXY_PORT),
            env: gate.as_ref().map(SessionGate::env).unwrap_or_default(),
            ahead,
        };
        let fork = |zygote: Zygote| {
            let options = &options;
            async move {
                let session = zygote
                    .fork_session_with(&place.label, &place.workspace, Some(&place.tmpdir), options)
                    .await?;
                Ok::<_, ZygoteError>((session, zygote))
            }
        };
        let (session, zygote) = match fork(zygote).await {
            // it died since we looked: once more, with a new one
            Err(ZygoteError::Gone { .. }) => fork(inner.running_zygote().await?).await?,
            other => other?,
        };
        if let Some(gate) = gate.as_mut()
            && zygote.is_hardened()
        {
            // the proxy's listener, in the session's own network namespace (its loopback was
            // brought up before it was announced)
            let pid = session.pid();
            match blocking(move || listen_in_netns(pid)).await? {
                Ok(listener) => gate.serve(listener).map_err(ManagerError::Egress)?,
                Err(e) => {
                    session.close().await;
                    return Err(ManagerError::Egress(e));
                }
            }
        }
        let forked = started.elapsed();
        // A hardened child joined its groups before it was announced (the zygote moves it in
        // right after the fork); a plain one is moved here. It runs nothing before its first
        // request, which comes after this.
        if !zygote.is_hardened()
            && let Some(group) = &cgroup
            && let Err(e) = group.add(session.pid())
        {
            session.close().await;
            return Err(e.into());
        }
        tracing::debug!(
            target: "toolgate_sandbox::timing",
            pid = session.pid(),
            workspace_us = micros(workspace_took),
            cgroup_us = micros(cgroup_took),
            prepare_us = micros(prepared),
            fork_us = micros(forked - prepared),
            join_us = micros(started.elapsed() - forked),
            total_us = micros(started.elapsed()),
            "session opened"
        );
        Ok(Self {
            session,
            cgroup,
            mounts,
            zygote,
            gate,
        })
    }

    /// Opens the session's network for one run under `grant` (nothing without a gate or a
    /// grant); the run's connections end when the returned value is finished or dropped.
    pub(super) fn begin_egress(&self, grant: Option<EgressGrant>) -> Option<RunEgress> {
        self.gate.as_ref()?.begin(grant)
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
        drop(self.gate.take());
        let session = self.session;
        session.close().await;
        if let Some(mut group) = self.cgroup.take() {
            let destroyed = blocking(move || group.destroy()).await;
            if let Ok(Err(e)) = destroyed {
                tracing::warn!("a session's cgroup was not cleaned up: {e}");
            }
        }
        if let Some(mounts) = self.mounts.take() {
            // unmounting waits for the kernel: not on the async threads
            let _ = blocking(move || drop(mounts)).await;
        }
    }
}
