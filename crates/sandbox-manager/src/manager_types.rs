//! The session manager's public values: its settings, its errors, a call's outcome.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use toolgate_sandbox::policy::{LimitSettings, Limits};
use toolgate_sandbox::{CheckpointStore, EnvError, MAX_SESSION_ID_BYTES, MAX_UPLOAD_FILES};

use crate::cgroup::{CgroupError, CgroupMode, CgroupVersion};
use crate::files::FileError;
use crate::session_error::{SessionError, human_bytes};
use crate::zygote::{DEFAULT_MAX_FILE_BYTES, DEFAULT_SANDBOX_UID, ZygoteConfig, ZygoteError};

/// What all sessions together may take of the host, and one account of that. A new session is
/// refused with a clear error when what all sessions use now plus its full limits would pass the
/// total, or when its account's sessions times their limit would pass the account's share; the
/// totals are also the kernel's limits on the manager's parent cgroups, which hold them hard
/// (a session that then runs the parent out of memory is the one the kernel kills). 0: none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Memory of all live sessions together, in bytes.
    pub memory_bytes: u64,
    /// Processes and threads of all live sessions together.
    pub pids: u64,
    /// Memory one account's live sessions may reserve together (each its limit), in bytes.
    pub account_memory_bytes: u64,
}

impl Default for Budget {
    /// Three quarters of the host's memory, half the host's `pid_max` for processes (none where
    /// the host's figures cannot be read), and no account share (the server sets one).
    fn default() -> Self {
        let memory = host_memory_bytes().map_or(0, |total| total / 4 * 3);
        let pids = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .map_or(0, |max| max / 2);
        Self {
            memory_bytes: memory,
            pids,
            account_memory_bytes: 0,
        }
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn host_memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// The manager's settings.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// How to start the zygote.
    pub zygote: ZygoteConfig,
    /// Where session workspaces live: `<root>/<account>/<sha256 of the session id>`.
    pub root: PathBuf,
    /// A session without a call for this long is closed.
    pub idle_ttl: Duration,
    /// Live sessions one account may have (calls without a session id count while they run).
    pub max_sessions_per_account: usize,
    /// Whether each session gets its own memory, pids and cpu cgroup.
    pub cgroups: CgroupMode,
    /// A hard CPU cap per session, in milliseconds of CPU time per second (1000: one core);
    /// `None`: no cap, sessions only share a busy CPU in equal parts.
    pub cpu_quota_millis: Option<u32>,
    /// The first host uid given to sessions: each live session has its own, the lowest free one
    /// of `uid_base..uid_base + uid_count` (see [`ForkOptions::uid`]).
    ///
    /// [`ForkOptions::uid`]: crate::ForkOptions::uid
    pub uid_base: u32,
    /// How many uids sessions may use (at most this many live and warm sessions in all).
    pub uid_count: u32,
    /// Warm sessions kept ready at least: started, confined and idle, with their cgroups,
    /// workspace and uid made. A new session whose limits are [`ManagerConfig::warm_limits`]
    /// takes one (its first result then comes in about a millisecond instead of after the 10 to
    /// 30 ms of a start), and another is made in the background. 0: none (and no pool at all).
    /// Each idle one costs a process (a few MiB of its own: the rest is shared with the zygote)
    /// and a uid.
    pub warm_sessions: usize,
    /// The most warm sessions the pool grows to under demand: it keeps as many ready as new
    /// sessions wanted one in the last ten seconds, between [`ManagerConfig::warm_sessions`]
    /// and this, and past the floor only while the host has a quarter of its memory available
    /// and sessions use under half of [`Budget::memory_bytes`]. At or below the floor: a pool of
    /// fixed size.
    pub warm_sessions_max: usize,
    /// What all sessions together may take of the host, and one account of that (see
    /// [`Budget`]).
    pub budget: Budget,
    /// The limits warm sessions are made with: a call takes one only when its `memory_bytes`,
    /// `max_pids` and `workspace_bytes` are these (its `timeout` and `output_bytes` do not
    /// matter). Set it to the server's own defaults ([`LimitSettings::for_call`]`(None)`).
    ///
    /// [`LimitSettings::for_call`]: toolgate_sandbox::LimitSettings::for_call
    pub warm_limits: Limits,
    /// Where and when sessions are checkpointed, so that they outlive their process
    /// (hibernation, restarts, crashes); `None`: a session lives only as long as its process.
    pub keeping: Option<Keeping>,
    /// Sessions' way out: each session reaches the network only through this proxy, under the
    /// grant of the run it is in; `None`: sessions have no network at all.
    pub egress: Option<toolgate_egress_proxy::EgressProxy>,
}

impl ManagerConfig {
    /// The defaults: 20 minutes idle, 10 sessions per account, cgroups when the host has them,
    /// no CPU cap, 65536 uids from [`DEFAULT_SANDBOX_UID`], 2 to 256 warm sessions (by demand)
    /// with the limits of [`LimitSettings::default`].
    pub fn new(zygote: ZygoteConfig, root: impl Into<PathBuf>) -> Self {
        let defaults = LimitSettings::default();
        Self {
            zygote,
            root: root.into(),
            idle_ttl: Duration::from_secs(20 * 60),
            max_sessions_per_account: 10,
            cgroups: CgroupMode::Auto,
            cpu_quota_millis: None,
            uid_base: DEFAULT_SANDBOX_UID,
            uid_count: 65536,
            warm_sessions: 2,
            warm_sessions_max: 256,
            budget: Budget::default(),
            warm_limits: Limits {
                timeout: defaults.default_timeout,
                memory_bytes: defaults.memory_bytes,
                max_pids: defaults.max_pids,
                output_bytes: defaults.output_bytes,
                workspace_bytes: defaults.workspace_bytes,
            },
            keeping: None,
            egress: None,
        }
    }
}

/// Where and when sessions are checkpointed.
#[derive(Debug, Clone)]
pub struct Keeping {
    /// Where images are kept.
    pub store: Arc<dyn CheckpointStore>,
    /// A session idle this long is written out and its processes end.
    pub hibernate_after: Duration,
    /// After a call, a session whose last checkpoint is this old is checkpointed again (in the
    /// background, the call's result already out).
    pub checkpoint_every: Duration,
    /// At shutdown, how long a running call may go on before it is interrupted.
    pub shutdown_grace: Duration,
    /// The most bytes of files an image holds.
    pub max_image_bytes: u64,
    /// A session's checkpoints are deleted once its newest is this old.
    pub retention: Duration,
    /// What one account's checkpoints may take in the store (each session's newest), in
    /// bytes: past it, its oldest hibernated sessions are dropped. 0: no quota.
    pub account_quota_bytes: u64,
}

impl Keeping {
    /// Checkpoints in `store`: hibernation after 5 idle minutes, a checkpoint every 5 minutes
    /// of use, 10 s for a running call at shutdown, kept 7 days, 2 GiB per account.
    pub fn new(store: Arc<dyn CheckpointStore>) -> Self {
        Self {
            store,
            hibernate_after: Duration::from_secs(300),
            checkpoint_every: Duration::from_secs(300),
            shutdown_grace: Duration::from_secs(10),
            max_image_bytes: DEFAULT_MAX_FILE_BYTES,
            retention: Duration::from_secs(7 * 24 * 3600),
            account_quota_bytes: 2 << 30,
        }
    }
}

/// What confines sessions on this host, as found at start (for health checks and the README).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Isolation {
    /// The cgroup hierarchy that limits each session's memory, processes and CPU ("none": none).
    pub cgroups: CgroupVersion,
    /// Whether each workspace (with its `.tmp`) is a tmpfs capped at `workspace_bytes`; false: a
    /// plain directory, bounded only by the per-file limit of hardened sessions.
    pub workspace_quota: bool,
}

/// Why a call could not run (its own failures are [`ManagerError::Session`]).
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// the account is at its cap of live sessions
    #[error(
        "this account already has {limit} live sessions, the most it may have: close one, or \
         wait until an idle one expires ({} s without a call)",
        .idle_ttl.as_secs()
    )]
    TooManySessions {
        /// the cap
        limit: usize,
        /// the idle time after which a session is closed
        idle_ttl: Duration,
    },
    /// the sessions of all accounts hold the service's budget
    #[error(
        "the service is at capacity: its sessions hold all the {what} it may give them; try again in a minute"
    )]
    AtCapacity {
        /// "memory" or "processes"
        what: &'static str,
    },
    /// the account's sessions hold its share of the service's memory
    #[error(
        "this account's live sessions hold its share of the service's memory ({}); close one, or wait until an idle one expires",
        human_bytes(*.limit)
    )]
    AccountBudget {
        /// the account's share, in bytes
        limit: u64,
    },
    /// the session id is empty or too long
    #[error("session_id must be 1 to {MAX_SESSION_ID_BYTES} bytes long")]
    InvalidSessionId,
    /// the account id is empty
    #[error("the account id is empty")]
    InvalidAccount,
    /// a run's environment has a bad name or value, or is too large
    #[error(transparent)]
    InvalidEnv(#[from] EnvError),
    /// a read named a session that does not exist (never created, closed or expired)
    #[error("no such session: it was never started, or it was closed or expired")]
    NoSuchSession,
    /// an upload has too many files
    #[error("{count} files were given; at most {MAX_UPLOAD_FILES} may be uploaded at once")]
    TooManyFiles {
        /// how many were given
        count: usize,
    },
    /// an upload is larger than the workspace
    #[error(
        "the files add up to {bytes} bytes, more than the workspace holds ({})",
        human_bytes(*.max)
    )]
    UploadTooLarge {
        /// their total size
        bytes: u64,
        /// the workspace's size
        max: u64,
    },
    /// a workspace file could not be written or read (nothing of the call ran)
    #[error(transparent)]
    File(#[from] FileError),
    /// every session uid is taken
    #[error("the server is at its limit of {0} live sessions; try again later")]
    NoFreeUid(u32),
    /// cgroups are required and unusable, or a session's cgroup could not be made
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// the zygote could not be started or could not fork
    #[error(transparent)]
    Zygote(#[from] ZygoteError),
    /// the session's network proxy could not be set up (nothing of the call ran)
    #[error("the session's network proxy could not be set up: {0}")]
    Egress(#[source] io::Error),
    /// the workspace directory could not be prepared
    #[error("could not prepare the session workspace {path}: {source}")]
    Workspace {
        /// the directory
        path: PathBuf,
        /// what failed
        source: io::Error,
    },
    /// the call ran and failed (killed, died, rejected)
    #[error(transparent)]
    Session(#[from] SessionError),
    /// the manager was shut down
    #[error("the session manager has shut down")]
    ShutDown,
}

/// What a manager holds now ([`SandboxManager::load`](crate::SandboxManager::load)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    /// Live sessions.
    pub sessions: usize,
    /// Memory their processes use.
    pub memory_bytes: u64,
    /// Memory all sessions may take together (0: no budget).
    pub memory_budget: u64,
}
