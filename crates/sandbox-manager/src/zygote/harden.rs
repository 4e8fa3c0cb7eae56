//! A hardened fork's side in the server: the confinement spec sent with each fork request
//! (`HardenSpec` of crates/sandbox-harden), and the workspace made reachable for the session's
//! unprivileged uid.

use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::mount::OpenTreeFlags;

use toolgate_sandbox::protocol::HardenSpec;

use super::{ForkOptions, Hello, ZygoteError, utf8};

/// The parts of a session's confinement spec (`HardenSpec` of crates/sandbox-harden) that are
/// the same for every session of one zygote.
#[derive(Debug)]
pub(super) struct HardenBase {
    /// Absolute paths that exist: the runtime, the base interpreter, the system's libraries.
    read_only: Vec<String>,
}

/// The size of a hardened session's own `/tmp` (a tmpfs; its pages count towards the session's
/// memory cgroup).
pub(super) const HARDEN_TMP_BYTES: u64 = 256 * 1024 * 1024;
/// A hardened session's temporary directory: its own empty tmpfs, mounted by the library.
pub(super) const HARDEN_TMP: &str = "/tmp";
/// Where a hardened session finds its workspace, and starts (`WORKSPACE_INSIDE` of
/// crates/sandbox-harden): its own root shows nothing of the host's path.
pub(super) const HARDEN_WORKSPACE: &str = "/workspace";
/// `RLIMIT_NOFILE` of a hardened session.
const HARDEN_MAX_OPEN_FILES: u64 = 1024;
/// The host name a hardened session sees.
const HARDEN_HOSTNAME: &str = "sandbox";
/// System paths a session reads (shared libraries, the dynamic loader's cache, `/bin/bash`,
/// and the links Debian's alternatives put behind `awk`, `editor` and the like), where they
/// exist. Not `/proc` of the host, not `/etc` as a whole.
const SYSTEM_READ_ONLY: [&str; 6] = [
    "/usr",
    "/lib",
    "/lib64",
    "/bin",
    "/etc/ld.so.cache",
    "/etc/alternatives",
];

impl HardenBase {
    /// The runtime directory, the interpreter's prefix and base prefix, and the system paths:
    /// absolute, symlinks resolved, each once, only those that exist.
    pub(super) fn new(runtime: &Path, hello: &Hello) -> Self {
        let mut read_only: Vec<String> = Vec::new();
        let candidates = [
            runtime,
            Path::new(&hello.prefix),
            Path::new(&hello.base_prefix),
        ]
        .into_iter()
        .chain(SYSTEM_READ_ONLY.iter().map(Path::new));
        for path in candidates {
            let Ok(path) = path.canonicalize() else {
                continue; // does not exist (or cannot be reached): nothing to allow
            };
            let Some(text) = path.to_str() else {
                tracing::warn!(
                    "not allowing the non-UTF-8 path {} to hardened sessions",
                    path.display()
                );
                continue;
            };
            if !read_only.iter().any(|known| known == text) {
                read_only.push(text.to_owned());
            }
        }
        Self { read_only }
    }

    /// The spec of one session.
    pub(super) fn spec(
        &self,
        workspace: &Path,
        options: &ForkOptions,
    ) -> Result<HardenSpec, ZygoteError> {
        let workspace = std::path::absolute(workspace).map_err(ZygoteError::Io)?;
        let cgroups = options
            .cgroups
            .iter()
            .map(|cgroup| utf8(cgroup).map(str::to_owned))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(HardenSpec {
            workspace: utf8(&workspace)?.to_owned(),
            tmp: HARDEN_TMP.to_owned(),
            read_only: self.read_only.clone(),
            max_open_files: HARDEN_MAX_OPEN_FILES,
            max_file_bytes: options.max_file_bytes.max(1),
            hostname: HARDEN_HOSTNAME.to_owned(),
            network: false,
            proxy_port: options.proxy_port,
            uid: options.uid,
            cgroups,
            tmp_bytes: HARDEN_TMP_BYTES,
        })
    }
}

/// Makes `workspace` the session's: every ancestor must let others search it (o+x; a
/// directory of the host is never chmod'ed here), and the directory itself is given to `uid`
/// (user and group), which is user 1000 inside the session.
pub(super) fn prepare_workspace(workspace: &Path, uid: u32) -> Result<(), ZygoteError> {
    use std::os::unix::fs::PermissionsExt;
    let failed = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ZygoteError::Workspace { path, uid, source }
    };
    let resolved = workspace.canonicalize().map_err(failed(workspace))?;
    for ancestor in resolved.ancestors().skip(1) {
        let mode = std::fs::metadata(ancestor)
            .map_err(failed(ancestor))?
            .permissions()
            .mode();
        if mode & 0o001 == 0 {
            return Err(ZygoteError::WorkspaceNotTraversable {
                workspace: workspace.to_path_buf(),
                ancestor: ancestor.to_path_buf(),
                mode: mode & 0o7777,
            });
        }
    }
    std::os::unix::fs::chown(&resolved, Some(uid), Some(uid)).map_err(failed(&resolved))
}

/// A detached mount of `workspace` (`open_tree(OPEN_TREE_CLONE)`, never following a link), sent
/// with a hardened fork: the zygote's own mount namespace lacks the workspace mounts made after
/// it started, so the child moves this one into its root. It shares the workspace's
/// filesystem: what either side writes, the other sees.
pub(super) fn detached_workspace(workspace: &Path, uid: u32) -> Result<OwnedFd, ZygoteError> {
    let flags = OpenTreeFlags::OPEN_TREE_CLONE
        | OpenTreeFlags::OPEN_TREE_CLOEXEC
        | OpenTreeFlags::AT_SYMLINK_NOFOLLOW;
    rustix::mount::open_tree(rustix::fs::CWD, workspace, flags).map_err(|errno| {
        ZygoteError::Workspace {
            path: workspace.to_path_buf(),
            uid,
            source: errno.into(),
        }
    })
}
