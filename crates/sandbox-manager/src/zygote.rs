//! The zygote (the Python fork server of `runtime/toolgate_zygote.py`) seen from the server: start
//! it, fork sessions from it, and keep its control channel drained.
//!
//! Three tasks per zygote (in `control.rs`): a reader that dispatches `forked` / `exited` /
//! `error` frames to whoever waits for them (it never blocks, so the zygote never stalls on a full
//! socket), a writer that owns the sending side (a frame is never cut by a cancelled caller), and
//! a watcher that owns the process (to name how it ended, and to kill it when the last handle
//! goes).

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::net::UnixStream;
use tokio::process::Command;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::session::SandboxSession;
use toolgate_sandbox::frame;
use toolgate_sandbox::protocol::{ControlEvent, ControlRequest, ExitInfo, ForkRequest, Hello};

use crate::frame_io;

mod control;
mod harden;

use control::{describe_status, forward_stderr, read_control, watch_process, write_control};
use harden::{HARDEN_TMP, HARDEN_WORKSPACE, HardenBase, detached_workspace, prepare_workspace};

/// The source name of every workspace tmpfs (what `mountinfo` shows of it, and of its binds):
/// a hardened zygote detaches the mounts of this source in its own mount namespace at start
/// (`--own-mounts`), so no session's namespace copies another's workspace.
pub(crate) const WORKSPACE_MOUNT_SOURCE: &str = "toolgate-workspace";

/// How to start a zygote.
#[derive(Debug, Clone)]
pub struct ZygoteConfig {
    /// The runtime made by `scripts/python-runtime.sh` (its `bin/python` runs the zygote).
    pub runtime: PathBuf,
    /// `runtime/toolgate_zygote.py`.
    pub script: PathBuf,
    /// Modules to import before forking; `None` keeps the zygote's default (numpy, pandas,
    /// matplotlib.pyplot), `Some(vec![])` preloads nothing (fast start, slow first import).
    pub preload: Option<Vec<String>>,
    /// The hardening library the zygote and each child call around the fork (`--harden-lib`).
    /// When set, every fork carries a confinement spec (see [`Zygote::fork_session_with`]): the
    /// child is pid 1 of its own pid namespace and an unprivileged uid of its own user
    /// namespace, may write only its workspace and its own `/tmp`, read only the runtime, the
    /// system's libraries and its own `/proc`, and has no network. The zygote must run as root;
    /// it forks from a private mount namespace of its own without any session's workspace
    /// (`--own-mounts`), and each child gets its workspace as a detached mount.
    pub harden_lib: Option<PathBuf>,
    /// How long the zygote may take to send `hello` (the preload dominates).
    pub startup_timeout: Duration,
    /// How long a `fork` may wait for `forked`.
    pub fork_timeout: Duration,
    /// After SIGINT, how long a session has to answer before it is killed.
    pub interrupt_grace: Duration,
}

impl ZygoteConfig {
    /// The defaults for a runtime directory and the zygote script.
    pub fn new(runtime: impl Into<PathBuf>, script: impl Into<PathBuf>) -> Self {
        Self {
            runtime: runtime.into(),
            script: script.into(),
            preload: None,
            harden_lib: None,
            startup_timeout: Duration::from_secs(60),
            fork_timeout: Duration::from_secs(30),
            interrupt_grace: Duration::from_secs(2),
        }
    }
}

/// Why the zygote could not start or fork.
#[derive(Debug, thiserror::Error)]
pub enum ZygoteError {
    /// the interpreter could not be executed
    #[error("could not start the zygote with {python}: {source}")]
    Spawn {
        /// the interpreter
        python: PathBuf,
        /// what exec said
        source: io::Error,
    },
    /// no `hello` in time
    #[error("the zygote sent no hello within {0:?}{stderr}", stderr = tail_note(.1))]
    StartupTimeout(Duration, String),
    /// it ended (or broke the protocol) before `hello`
    #[error("the zygote failed to start: {0}{stderr}", stderr = tail_note(.1))]
    StartupFailed(String, String),
    /// the zygote process is gone; sessions must be forked from a new one
    #[error("the zygote (pid {pid}) is gone: {detail}")]
    Gone {
        /// its process id
        pid: i32,
        /// how it ended, as far as known
        detail: String,
    },
    /// the zygote refused the fork (an error frame)
    #[error("the zygote refused to fork a session ({code}): {message}")]
    Refused {
        /// the error frame's code
        code: String,
        /// its message
        message: String,
    },
    /// no `forked` in time
    #[error("the zygote did not answer a fork within {0:?}")]
    ForkTimeout(Duration),
    /// a path the zygote cannot take (JSON carries UTF-8 text only)
    #[error("path is not valid UTF-8: {0}")]
    NonUtf8Path(PathBuf),
    /// a hardened session's uid could not reach its workspace: an ancestor lacks o+x
    #[error(
        "the workspace {workspace} is out of reach of the session's uid: its ancestor {ancestor} \
         has mode {mode:o}, without search permission for others (o+x); make it 0711 or 0755"
    )]
    WorkspaceNotTraversable {
        /// the workspace
        workspace: PathBuf,
        /// the first ancestor without o+x
        ancestor: PathBuf,
        /// its permission bits
        mode: u32,
    },
    /// the workspace could not be inspected or given to the session's uid
    #[error("cannot prepare the workspace {path} for uid {uid}: {source}")]
    Workspace {
        /// the directory
        path: PathBuf,
        /// the session's host uid
        uid: u32,
        /// what the system said
        source: io::Error,
    },
    /// local I/O (socketpair, non-blocking mode)
    #[error("zygote I/O: {0}")]
    Io(#[from] io::Error),
}

fn tail_note(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        format!("; its stderr ended with:\n{}", stderr.trim_end())
    }
}

/// A running zygote. Cheap to clone; the process is stopped when the last clone is dropped (its
/// control channel reaches end of file) or by [`Zygote::shutdown`], and every session child dies
/// with it (PR_SET_PDEATHSIG).
#[derive(Debug, Clone)]
pub struct Zygote {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    hello: Hello,
    dispatch: Arc<Dispatch>,
    outgoing: mpsc::UnboundedSender<Outgoing>,
    next_fork: AtomicU64,
    /// One fork made ahead of demand at a time in the zygote (see [`ForkOptions::ahead`]).
    ahead: tokio::sync::Semaphore,
    fork_timeout: Duration,
    interrupt_grace: Duration,
    /// With a hardening library: what every session may read (and execute), no more.
    harden: Option<HardenBase>,
    /// How the process ended, once it has (set by the watcher task).
    status: watch::Receiver<Option<String>>,
    /// Cancelled on drop or shutdown: the writer closes the channel, the watcher reaps or kills.
    stop: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// `RLIMIT_FSIZE` of a hardened session when the caller names none.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 512 * 1024 * 1024;

/// Per-session choices of a fork beyond its directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkOptions {
    /// `RLIMIT_FSIZE` of a hardened session: the largest file it may write.
    pub max_file_bytes: u64,
    /// cgroup directories (one per controller on cgroup v1, one on v2) the child joins before it
    /// runs any of the session's code; empty: none.
    pub cgroups: Vec<PathBuf>,
    /// The unprivileged host user (and group) id a hardened session runs as, through its own
    /// user namespace; the manager gives each live session its own.
    pub uid: u32,
    /// A hardened session's network: loopback up and TCP connects to this port only (the
    /// server's proxy listens there); `None`: no network at all.
    pub proxy_port: Option<u16>,
    /// Variables of the session's environment for its whole life (its proxy's).
    pub env: std::collections::BTreeMap<String, String>,
    /// A session made ahead of demand (the warm pool's): its fork is sent only once the
    /// zygote is done with the last such fork (its `spawned`), so a caller's own fork waits
    /// behind at most one of them; the zygote forks one at a time, in the order it is asked.
    pub ahead: bool,
}

/// The host user id of a hardened session when the caller names none.
pub const DEFAULT_SANDBOX_UID: u32 = 1_000_000_000;

impl Default for ForkOptions {
    fn default() -> Self {
        Self {
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            cgroups: Vec::new(),
            uid: DEFAULT_SANDBOX_UID,
            proxy_port: None,
            ahead: false,
            env: std::collections::BTreeMap::new(),
        }
    }
}

/// Waiters for control frames, shared by the handles and the reader task.
#[derive(Debug, Default)]
struct Dispatch {
    state: Mutex<DispatchState>,
}

#[derive(Debug, Default)]
struct DispatchState {
    /// Why the control channel ended, once it has.
    closed: Option<String>,
    /// fork tag -> the fork_session call waiting for `forked` / `error`
    forks: HashMap<String, oneshot::Sender<Result<Forked, ZygoteError>>>,
    /// fork tag -> a fork made ahead of demand, waiting until the zygote is free again
    /// (`spawned`; `forked` or an error end the wait too, by dropping the sender)
    spawned: HashMap<String, oneshot::Sender<()>>,
    /// child pid -> where its `exited` frame goes
    exits: HashMap<i32, watch::Sender<Option<ExitInfo>>>,
}

#[derive(Debug)]
struct Forked {
    pid: i32,
    exit: watch::Receiver<Option<ExitInfo>>,
}

/// One frame for the writer task, with the descriptors that must travel with its first byte.
#[derive(Debug)]
struct Outgoing {
    bytes: Vec<u8>,
    fds: Vec<OwnedFd>,
}

impl Dispatch {
    fn lock(&self) -> MutexGuard<'_, DispatchState> {
        // a panic while holding this lock leaves maps that are still consistent
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Zygote {
    /// Starts `<runtime>/bin/python -I <script> 0` with an empty environment and waits for its
    /// `hello`.
    ///
    /// The control socket is the child's fd 0: `Stdio::from(OwnedFd)` makes std dup2 it there in
    /// the child, which is race-free and safe. Clearing CLOEXEC on a socketpair end instead (the
    /// obvious alternative) leaves a window in which any other thread's fork+exec inherits that
    /// end too, and a leaked end would hide the zygote's death from the reader.
    pub async fn start(config: ZygoteConfig) -> Result<Self, ZygoteError> {
        let python = config.runtime.join("bin").join("python");
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        let mut command = Command::new(&python);
        command.arg("-I").arg(&config.script).arg("0");
        if let Some(preload) = &config.preload {
            command.arg(format!("--preload={}", preload.join(",")));
        }
        if let Some(lib) = &config.harden_lib {
            let mut arg = std::ffi::OsString::from("--harden-lib=");
            arg.push(lib);
            command.arg(arg);
            // a mount namespace of its own, without any session's workspace: each new session's
            // namespace is a copy of it, which would otherwise grow with the sessions alive
            command.arg(format!("--own-mounts={WORKSPACE_MOUNT_SOURCE}"));
        }
        // Nothing of the server's environment: the zygote adds its own few variables (it then
        // re-executes itself once, so that its exec-time environment block is the clean one).
        command
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|source| ZygoteError::Spawn {
            python: python.clone(),
            source,
        })?;
        // the Command still holds our copy of the child's end: close it, or the zygote's death
        // would never show as end of file here
        drop(command);

        let stderr_tail = Arc::new(Mutex::new(String::new()));
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(forward_stderr(stderr, Arc::clone(&stderr_tail)));
        }
        let tail = || {
            stderr_tail
                .lock()
                .map(|t| t.clone())
                .unwrap_or_else(|p| p.into_inner().clone())
        };

        ours.set_nonblocking(true)?;
        let (mut read_half, write_half) = UnixStream::from_std(ours)?.into_split();
        let hello = match tokio::time::timeout(
            config.startup_timeout,
            frame_io::read::<ControlEvent>(&mut read_half),
        )
        .await
        {
            Ok(Ok(ControlEvent::Hello(hello))) => hello,
            Ok(Ok(other)) => {
                let why = format!("its first frame was {other:?}, not hello");
                return Err(ZygoteError::StartupFailed(why, tail()));
            }
            Ok(Err(e)) => {
                let status = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
                // give the stderr forwarder a moment to read the last lines
                tokio::time::sleep(Duration::from_millis(50)).await;
                let why = match status {
                    Ok(Ok(status)) => describe_status(status),
                    _ => format!("its control channel failed: {e}"),
                };
                return Err(ZygoteError::StartupFailed(why, tail()));
            }
            Err(_) => {
                return Err(ZygoteError::StartupTimeout(config.startup_timeout, tail()));
            }
        };

        let harden = config
            .harden_lib
            .as_ref()
            .map(|_| HardenBase::new(&config.runtime, &hello));
        let dispatch = Arc::new(Dispatch::default());
        let stop = CancellationToken::new();
        let (outgoing, outgoing_rx) = mpsc::unbounded_channel();
        let (status_tx, status) = watch::channel(None);
        tokio::spawn(read_control(read_half, Arc::clone(&dispatch)));
        tokio::spawn(write_control(write_half, outgoing_rx, stop.clone()));
        tokio::spawn(watch_process(child, status_tx, stop.clone()));
        Ok(Self {
            inner: Arc::new(Inner {
                hello,
                dispatch,
                outgoing,
                next_fork: AtomicU64::new(1),
                ahead: tokio::sync::Semaphore::new(1),
                fork_timeout: config.fork_timeout,
                interrupt_grace: config.interrupt_grace,
                harden,
                status,
                stop,
            }),
        })
    }

    /// The zygote's `hello` frame.
    pub fn hello(&self) -> &Hello {
        &self.inner.hello
    }

    /// The zygote's process id.
    pub fn pid(&self) -> i32 {
        self.inner.hello.pid
    }

    /// Whether forks carry a confinement spec (a hardening library is loaded): such a child is
    /// in its cgroups before the zygote announces it.
    pub(crate) fn is_hardened(&self) -> bool {
        self.inner.harden.is_some()
    }

    /// Resolves once the zygote process has ended (been reaped).
    pub(crate) async fn ended(&self) {
        let mut status = self.inner.status.clone();
        let _ = status.wait_for(Option::is_some).await;
    }

    /// Whether the zygote is still there (its control channel open, its process not reaped).
    pub fn is_alive(&self) -> bool {
        self.inner.dispatch.lock().closed.is_none() && self.inner.status.borrow().is_none()
    }

    fn gone(&self) -> ZygoteError {
        let detail = match (
            self.inner.status.borrow().clone(),
            self.inner.dispatch.lock().closed.clone(),
        ) {
            (Some(status), _) => status,
            (None, Some(closed)) => closed,
            (None, None) => "it is shutting down".to_owned(),
        };
        ZygoteError::Gone {
            pid: self.pid(),
            detail,
        }
    }

    /// Forks a session child working in `cwd` (which must exist), with `TMPDIR=tmpdir`; a
    /// hardened one may write files of up to [`DEFAULT_MAX_FILE_BYTES`].
    ///
    /// `session_key` labels the child in the zygote (and in the hardening hook's request); a
    /// counter is appended, so two forks with one key never answer each other's waiter.
    pub async fn fork_session(
        &self,
        session_key: &str,
        cwd: &Path,
        tmpdir: Option<&Path>,
    ) -> Result<SandboxSession, ZygoteError> {
        self.fork_session_with(session_key, cwd, tmpdir, &ForkOptions::default())
            .await
    }

    /// [`Zygote::fork_session`], with the per-session choices of `options`.
    ///
    /// With a hardening library ([`ZygoteConfig::harden_lib`]) the fork request carries the
    /// session's confinement: pid 1 of its own pid namespace, user and group 1000 of its own user
    /// namespace mapped to `options.uid` on the host (no capability), joined to
    /// `options.cgroups` before it runs anything; write access to `cwd` and to its own empty
    /// `/tmp` (256 MiB, also its `TMPDIR`: `tmpdir` is not used) and `/dev/shm`;
    /// read access to its own `/proc`; read and execute access to the runtime, the base
    /// interpreter and `/usr`, `/lib`, `/lib64`, `/bin`, `/etc/ld.so.cache`, `/etc/alternatives`
    /// (those that exist), each at its own path in a root of its own, the workspace at
    /// `/workspace` (its working directory);
    /// 1024 open files, `options.max_file_bytes` per file, host name "sandbox", no network.
    /// Right before the fork `cwd` is given to `options.uid`, and every ancestor of it must be
    /// searchable by others (o+x), else [`ZygoteError::WorkspaceNotTraversable`]. Without a
    /// library, `options` is not used.
    pub async fn fork_session_with(
        &self,
        session_key: &str,
        cwd: &Path,
        tmpdir: Option<&Path>,
        options: &ForkOptions,
    ) -> Result<SandboxSession, ZygoteError> {
        let mut cwd_text = utf8(cwd)?;
        let mut tmp_text = tmpdir.map(utf8).transpose()?;
        let harden = self
            .inner
            .harden
            .as_ref()
            .map(|base| base.spec(cwd, options))
            .transpose()?;
        let mut workspace_mount = None;
        if harden.is_some() {
            prepare_workspace(cwd, options.uid)?;
            workspace_mount = Some(detached_workspace(cwd, options.uid)?);
            cwd_text = HARDEN_WORKSPACE;
            tmp_text = Some(HARDEN_TMP);
        }
        // held from the fork's request until the zygote is free again (see `ahead`)
        let ahead = if options.ahead {
            Some(self.inner.ahead.acquire().await.map_err(|_| self.gone())?)
        } else {
            None
        };
        let n = self.inner.next_fork.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{session_key}#{n}");
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        let (tx, rx) = oneshot::channel();
        let (spawned_tx, spawned) = oneshot::channel();
        {
            let mut state = self.inner.dispatch.lock();
            if state.closed.is_some() {
                drop(state);
                return Err(self.gone());
            }
            state.forks.insert(tag.clone(), tx);
            if ahead.is_some() {
                state.spawned.insert(tag.clone(), spawned_tx);
            }
        }
        // if this call is dropped, nobody waits any more: forget the waiter (the child, if one is
        // forked, reads end of file on its socket, since `ours` is gone, and exits)
        let _waiter = ForkWaiter {
            dispatch: &self.inner.dispatch,
            tag: &tag,
        };
        let request = ControlRequest::Fork(ForkRequest {
            session: &tag,
            cwd: cwd_text,
            tmpdir: tmp_text,
            fd: theirs.as_raw_fd(),
            harden,
            env: (!options.env.is_empty()).then_some(&options.env),
        });
        let bytes = frame::encode(&request).map_err(|e| io::Error::other(e.to_string()))?;
        // the session's socket first, then (hardened) its workspace: the zygote's order
        let fds = std::iter::once(OwnedFd::from(theirs))
            .chain(workspace_mount)
            .collect();
        let message = Outgoing { bytes, fds };
        if self.inner.outgoing.send(message).is_err() {
            return Err(self.gone());
        }
        if let Some(permit) = ahead {
            // `forked`, an error or the channel's end drop the sender: the wait ends as well
            let _ = tokio::time::timeout(self.inner.fork_timeout, spawned).await;
            drop(permit);
        }
        let forked = match tokio::time::timeout(self.inner.fork_timeout, rx).await {
            Ok(Ok(result)) => result?,
            Ok(Err(_)) => return Err(self.gone()),
            Err(_) => return Err(ZygoteError::ForkTimeout(self.inner.fork_timeout)),
        };
        ours.set_nonblocking(true)?;
        let stream = UnixStream::from_std(ours)?;
        Ok(SandboxSession::start(
            forked.pid,
            stream,
            forked.exit,
            self.inner.interrupt_grace,
        ))
    }

    /// Closes the control channel (the zygote exits, and its children with it), kills the
    /// process if it has not exited within two seconds, and waits until it is reaped.
    pub async fn shutdown(&self) {
        self.inner.stop.cancel();
        let mut status = self.inner.status.clone();
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            status.wait_for(|status| status.is_some()),
        )
        .await;
    }
}

fn utf8(path: &Path) -> Result<&str, ZygoteError> {
    path.to_str()
        .ok_or_else(|| ZygoteError::NonUtf8Path(path.to_path_buf()))
}

/// Removes a fork waiter when its call ends, whichever way.
struct ForkWaiter<'a> {
    dispatch: &'a Dispatch,
    tag: &'a str,
}

impl Drop for ForkWaiter<'_> {
    fn drop(&mut self) {
        let mut state = self.dispatch.lock();
        state.forks.remove(self.tag);
        state.spawned.remove(self.tag);
    }
}
