//! What a session child is confined to: the public policy value, separate from the code that
//! enforces it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::HardenError;

/// The longest host name the kernel accepts (`HOST_NAME_MAX`).
const HOST_NAME_MAX: usize = 64;

/// The user and group id a session has inside its user namespace, mapped to [`HardenSpec::uid`].
pub const SESSION_ID_INSIDE: u32 = 1000;

/// Where a session finds its workspace (and starts, in it), whatever its path on the host.
pub const WORKSPACE_INSIDE: &str = "/workspace";

/// The directory a session sees as its own empty tmpfs, beneath which read-only paths of the
/// host's `/tmp` are still shown (bound back).
pub(crate) const SHOWN_IN_TMP: &str = "/tmp";

/// Directories a session sees as its own (or not at all): a path of the host beneath them
/// (other than the directory itself) cannot be shown there.
pub(crate) const MASKED: [&str; 5] = ["/tmp", "/dev/shm", "/run", "/var/run", "/proc"];

/// The confinement of one session child, as the zygote sends it (JSON).
///
/// Unknown fields are refused, so a misspelt `"netwrok": true` is an error rather than a silently
/// ignored wish.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardenSpec {
    /// The session's workspace on the host, shown to the session at [`WORKSPACE_INSIDE`]: full
    /// access (read, write, create, remove, execute), except creating device nodes.
    pub workspace: PathBuf,
    /// The session's temporary directory, with the same access as the workspace: `/tmp` or
    /// `/dev/shm`, both the session's own tmpfs (nothing else of the host is in its root).
    pub tmp: PathBuf,
    /// Read and execute only: the Python runtime, `/usr`, `/lib`, `/etc/ssl`, … Every path must
    /// exist; a file grants access to that file, a directory to everything beneath it. Each is
    /// shown (read-only) at its own path in the session's root, with nothing of its ancestors
    /// but the way to it. The session's own `/proc` is granted (read-only) without being listed.
    pub read_only: Vec<PathBuf>,
    /// `RLIMIT_NOFILE`, soft and hard.
    pub max_open_files: u64,
    /// `RLIMIT_FSIZE`, soft and hard: the largest file the session may write, in bytes.
    pub max_file_bytes: u64,
    /// The host name seen inside (its own UTS namespace).
    pub hostname: String,
    /// `false`: a new, empty network namespace, no socket but `AF_UNIX`, no TCP bind or connect.
    /// `true`: the caller's network namespace and sockets.
    pub network: bool,
    /// Without `network` only: the port of the server's proxy inside the new network namespace.
    /// Loopback is brought up, TCP sockets (IPv4 and IPv6 streams, never UDP or raw) are allowed,
    /// and Landlock lets them connect to this port of loopback only and bind nothing: the one way
    /// out is the proxy's listener, which the server makes in the namespace and serves itself.
    #[serde(default)]
    pub proxy_port: Option<u16>,
    /// The unprivileged host user id the session runs as, also its group id: user and group
    /// [`SESSION_ID_INSIDE`] of its own user namespace map to it. Never 0.
    pub uid: u32,
    /// cgroup directories (one per controller on cgroup v1, one on v2) the child is moved into
    /// before it runs any of the session's code (on v1 it moves itself, see
    /// [`crate::release`]; on v2 the zygote moves it); may be empty.
    #[serde(default)]
    pub cgroups: Vec<PathBuf>,
    /// The size of the session's `/tmp` (a tmpfs), in bytes; at least 1.
    pub tmp_bytes: u64,
}

impl HardenSpec {
    /// Checks what the kernel would refuse late or, worse, accept with a surprising meaning
    /// (a relative path resolved against whatever the current directory happens to be).
    pub(crate) fn validate(&self) -> Result<(), HardenError> {
        let invalid = |reason: String| Err(HardenError::InvalidSpec(reason));
        for (field, path) in [("workspace", &self.workspace), ("tmp", &self.tmp)]
            .into_iter()
            .chain(self.read_only.iter().map(|path| ("read_only", path)))
        {
            if !path.is_absolute() {
                return invalid(format!("{field} path {} is not absolute", path.display()));
            }
        }
        if self.proxy_port == Some(0) || (self.network && self.proxy_port.is_some()) {
            return invalid(
                "proxy_port must be a port (1 to 65535), and only without network".to_owned(),
            );
        }
        if self.hostname.is_empty() || self.hostname.len() > HOST_NAME_MAX {
            return invalid(format!("hostname must have 1 to {HOST_NAME_MAX} bytes"));
        }
        if self.hostname.contains('\0') {
            return invalid("hostname contains a NUL byte".to_owned());
        }
        if self.max_open_files == 0 {
            return invalid("max_open_files must be at least 1".to_owned());
        }
        if self.max_file_bytes == 0 {
            return invalid("max_file_bytes must be at least 1".to_owned());
        }
        if self.uid == 0 {
            return invalid("uid 0 would map the session to the host's root".to_owned());
        }
        if self.tmp_bytes == 0 {
            // tmpfs reads size=0 as "no limit"
            return invalid("tmp_bytes must be at least 1".to_owned());
        }
        if let Some(cgroup) = self.cgroups.iter().find(|path| !path.is_absolute()) {
            return invalid(format!("cgroup path {} is not absolute", cgroup.display()));
        }
        // A read-only path beneath /tmp (a checkout there) is bound back into the session's own
        // /tmp (see `mounts`); beneath the other masked directories it is refused.
        let read_only = self
            .read_only
            .iter()
            .filter(|path| !path.starts_with(SHOWN_IN_TMP));
        for (field, path) in [("workspace", &self.workspace), ("tmp", &self.tmp)]
            .into_iter()
            .chain(read_only.map(|path| ("read_only path", path)))
        {
            if let Some(mask) = masked_ancestor(path) {
                return invalid(format!(
                    "{field} {} lies beneath {mask}, which the session sees as its own empty mount",
                    path.display()
                ));
            }
        }
        if MASKED.iter().any(|mask| self.workspace == Path::new(mask)) {
            return invalid(
                "workspace names a directory the session gets its own mount of".to_owned(),
            );
        }
        // Only the session's own tmpfs mounts exist in its root to be written to.
        if !["/tmp", "/dev/shm"]
            .iter()
            .any(|own| self.tmp == Path::new(own))
        {
            return invalid(format!(
                "tmp {} is neither /tmp nor /dev/shm, the session's own",
                self.tmp.display()
            ));
        }
        // The root, /dev and the workspace's place are the session's own too.
        if let Some(path) = self.read_only.iter().find(|path| {
            path.parent().is_none()
                || path.starts_with("/dev")
                || path.starts_with(WORKSPACE_INSIDE)
        }) {
            return invalid(format!(
                "read_only path {} would cover the session's own root, /dev or {WORKSPACE_INSIDE}",
                path.display()
            ));
        }
        Ok(())
    }
}

/// The masked directory `path` lies strictly beneath, as written and with symlinks resolved
/// (`/var/run` is often a link to `/run`); `None` for a masked directory itself.
fn masked_ancestor(path: &Path) -> Option<&'static str> {
    let resolved = std::fs::canonicalize(path).ok();
    [Some(path), resolved.as_deref()]
        .into_iter()
        .flatten()
        .find_map(|path| {
            MASKED.into_iter().find(|mask| {
                let mask = Path::new(mask);
                path != mask && path.starts_with(mask)
            })
        })
}

/// How far Landlock could be enforced by the running kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LandlockEnforcement {
    /// Every requested restriction is enforced.
    Full,
    /// The kernel lacks some requested rights; the others are enforced (best effort).
    Partial,
}

/// What [`crate::harden_session_with_report`] achieved, for the caller's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HardenReport {
    /// Landlock's enforcement.
    pub landlock: LandlockEnforcement,
    /// The running kernel's Landlock ABI (capped at the newest the `landlock` crate knows). The
    /// rights asked for are those of ABI 7 whatever this says.
    pub landlock_abi: u32,
    /// How many syscalls the seccomp policy refuses by name: outright (`EPERM`), for some
    /// arguments, extended-attribute writes (`EOPNOTSUPP`) and `clone3` (`ENOSYS`). Every
    /// syscall the allow-list does not name is refused too.
    pub seccomp_denied_syscalls: usize,
    /// Of [`HardenReport::elapsed`], the time spent waiting for the zygote to write the id maps
    /// and the cgroups.
    pub admission: Duration,
    /// Wall-clock time of the whole checklist.
    pub elapsed: Duration,
    /// Wall-clock time of each step, in order (`precheck`, `unshare`, `mounts`, `hostname`,
    /// `user_namespace` (admission included), `rlimits`, `no_new_privs`, `landlock`, `seccomp`).
    pub steps: Vec<(&'static str, Duration)>,
}

impl fmt::Display for HardenReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let landlock = match self.landlock {
            LandlockEnforcement::Full => "fully_enforced",
            LandlockEnforcement::Partial => "partially_enforced",
        };
        write!(
            f,
            "hardened: landlock={landlock} kernel_landlock_abi={} seccomp_denied_syscalls={} admission_us={} elapsed_us={}",
            self.landlock_abi,
            self.seccomp_denied_syscalls,
            self.admission.as_micros(),
            self.elapsed.as_micros()
        )?;
        for (i, (step, took)) in self.steps.iter().enumerate() {
            let lead = if i == 0 { " steps_us=" } else { "," };
            write!(f, "{lead}{step}:{}", took.as_micros())?;
        }
        Ok(())
    }
}

/// What network a session has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Net {
    /// A new network namespace with nothing up: no socket but `AF_UNIX`.
    Closed,
    /// A new network namespace with loopback up; TCP connects to this port only.
    Proxy(u16),
    /// The caller's network namespace and sockets.
    Host,
}

impl Net {
    /// The index of its seccomp programs.
    pub(crate) fn index(self) -> usize {
        match self {
            Self::Closed => 0,
            Self::Host => 1,
            Self::Proxy(_) => 2,
        }
    }
}

impl HardenSpec {
    /// The session's network, as the spec asks.
    pub(crate) fn net(&self) -> Net {
        match (self.network, self.proxy_port) {
            (true, _) => Net::Host,
            (false, Some(port)) => Net::Proxy(port),
            (false, None) => Net::Closed,
        }
    }
}
