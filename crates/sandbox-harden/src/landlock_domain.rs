//! Step (g): the Landlock domain, through the `landlock` crate's safe API.
//!
//! Handled (denied unless a rule grants it): every filesystem right of [`LANDLOCK_ABI`], both
//! scopes (signals to, and abstract UNIX sockets of, processes outside the domain), and, without
//! network, TCP bind and connect. Granted: read and execute beneath each `read_only` path; read
//! (files and directories, no execute) beneath the session's own `/proc`, which shows its pid
//! namespace only; every right but creating device nodes beneath the workspace, `tmp` and the
//! session's `/dev/shm`; the device nodes of [`DEVICES`](crate::policy::DEVICES). Nothing else: the host's files, other sessions' workspaces and the
//! server's data directory are unreachable, whatever the process's uid or capabilities.

use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, NetPort,
    PathBeneath, PathFd, PathFdError, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr,
    RulesetStatus, Scope,
};

use crate::error::HardenError;
use crate::mounts::SessionMounts;
use crate::policy::{DEVICES, LANDLOCK_ABI};
use crate::spec::{HardenSpec, LandlockEnforcement};

/// What the kernel enforced.
pub(crate) struct Enforced {
    /// Full or partial.
    pub(crate) enforcement: LandlockEnforcement,
    /// The ABI in force.
    pub(crate) abi: u32,
}

/// Builds the ruleset and restricts the calling thread (and its future children) with it.
pub(crate) fn restrict_self(
    spec: &HardenSpec,
    mounts: &SessionMounts,
) -> Result<Enforced, HardenError> {
    let abi = LANDLOCK_ABI;
    let read_execute = AccessFs::from_read(abi);
    // Defence in depth: with CAP_MKNOD (which the session no longer holds) a device node of the
    // host's disk could be made.
    let read_write = AccessFs::from_all(abi) & !(AccessFs::MakeChar | AccessFs::MakeBlock);

    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))?
        .scope(Scope::from_all(abi))?;
    if !spec.network {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    let proxy_port = match spec.net() {
        crate::spec::Net::Proxy(port) => Some(port),
        _ => None,
    };
    // no_new_privs is step (f)'s own call; not repeated here.
    let mut created = ruleset.create()?.no_new_privs(false);
    for path in &spec.read_only {
        created = add_path(created, path, read_execute)?;
    }
    created = add_path(
        created,
        &mounts.proc,
        AccessFs::ReadFile | AccessFs::ReadDir,
    )?;
    for path in [&mounts.workspace, &spec.tmp, &mounts.shm] {
        created = add_path(created, path, read_write)?;
    }
    // The character devices every shell and runtime expects: `> /dev/null` in bash, git and
    // perl write there; random and zero are read. Each is one node, not the host's /dev.
    for (device, access) in DEVICES {
        let path = Path::new(device);
        if path.exists() {
            created = add_path(created, path, access.iter().copied().collect())?;
        }
    }

    if let Some(port) = proxy_port {
        created = created.add_rule(NetPort::new(port, AccessNet::ConnectTcp))?;
    }

    let status = created.restrict_self()?;
    let enforcement = match status.ruleset {
        RulesetStatus::FullyEnforced => LandlockEnforcement::Full,
        RulesetStatus::PartiallyEnforced => LandlockEnforcement::Partial,
        RulesetStatus::NotEnforced => {
            return Err(HardenError::LandlockNotEnforced(format!(
                "{:?}",
                status.landlock
            )));
        }
    };
    let abi = match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => abi_number(effective_abi),
        LandlockStatus::NotEnabled | LandlockStatus::NotImplemented => 0,
    };
    Ok(Enforced { enforcement, abi })
}

/// Grants `access` beneath `path`: a file gets only the rights that apply to files.
fn add_path(
    ruleset: RulesetCreated,
    path: &Path,
    access: BitFlags<AccessFs>,
) -> Result<RulesetCreated, HardenError> {
    let path_error = |source| HardenError::LandlockPath {
        path: path.to_owned(),
        source,
    };
    let metadata = std::fs::metadata(path).map_err(path_error)?;
    let access = if metadata.is_dir() {
        access
    } else {
        access & AccessFs::from_file(LANDLOCK_ABI)
    };
    let fd = PathFd::new(path).map_err(|error| match error {
        PathFdError::OpenCall { source, .. } => path_error(source),
        other => path_error(std::io::Error::other(other.to_string())),
    })?;
    Ok(ruleset.add_rule(PathBeneath::new(fd, access))?)
}

/// The ABI's number (the crate's enum is non-exhaustive and has no stable conversion).
fn abi_number(abi: ABI) -> u32 {
    match abi {
        ABI::Unsupported => 0,
        ABI::V1 => 1,
        ABI::V2 => 2,
        ABI::V3 => 3,
        ABI::V4 => 4,
        ABI::V5 => 5,
        ABI::V6 => 6,
        ABI::V7 => 7,
        ABI::V8 => 8,
        ABI::V9 => 9,
        _ => 10,
    }
}
