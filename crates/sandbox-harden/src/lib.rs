//! # toolgate-sandbox-harden
//!
//! Confines a freshly forked session child, in place, with the help of the process that forked
//! it (the zygote). Around each hardened fork the Python zygote calls this crate's C ABI through
//! ctypes: [`before_session_fork`] (`unshare(CLONE_NEWPID)`, so the child is pid 1 of a new pid
//! namespace), `os.fork()`, [`after_session_fork`] (`setns` back to its own pid namespace);
//! then the child runs [`harden_session`] while the zygote runs [`release_session`] (or its two
//! steps, [`begin_release`] and [`advance_release`], from its own event loop), the two talking
//! over two pipes ([`session_channel`]). The child runs no line of the session's code
//! before the whole checklist succeeded. The probe binary `toolgate-harden-probe` is a one-shot
//! zygote doing the same in Rust ([`fork_session_child`]) before it `exec`s a command, and the
//! tests run real Python under it.
//!
//! ## The checklist
//!
//! [`harden_session_with_report`] applies, in this order, in the child (which starts as pid 1
//! of its own pid namespace and as the host's root):
//!
//! 0. **Precondition**: the spec is valid (no path beneath a directory the session sees as its
//!    own empty mount, `tmp` the session's `/tmp` or `/dev/shm`, uid not 0, `tmp_bytes` not 0),
//!    every ancestor of the workspace is searchable by the session's uid on the host (the
//!    server reads and writes its files as that uid; not checked for a workspace given as a
//!    detached mount, which is not reached through them), and the process has one thread (a user
//!    namespace, Landlock and seccomp need or bind only the calling thread). Then, on cgroup
//!    v1, it joins its cgroups itself (`0` into each group's `tasks` file), which costs no RCU
//!    grace period, unlike a move by the zygote (see `release`).
//! 1. **(a) Namespaces**: `unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)`,
//!    without `CLONE_NEWNET` when the spec allows network. Nothing is brought up in a new network
//!    namespace: its only interface, loopback, stays down (tested: no `::1` address), so there is
//!    no route anywhere, not even to `127.0.0.1`. `AF_UNIX` sockets still work. (A profile that
//!    needs loopback would set `IFF_UP` on `lo` with `ioctl(SIOCSIFFLAGS)` here.)
//! 2. **(b) A minimal root** (see `mounts`), made as the host's root in a mount namespace owned
//!    by the host's user namespace: `MS_REC | MS_PRIVATE` on `/`; then an empty tmpfs is filled
//!    with each `read_only` path bound read-only (nosuid, nodev) at its own path, the host's
//!    links in `/` that lead into them (`/bin` → `usr/bin`), the workspace at `/workspace` (a
//!    detached mount of it moved there, or the host's directory bound), a
//!    fresh `proc` on `/proc` (nosuid, nodev, noexec; it lists the session's pid namespace
//!    only), an empty tmpfs of `tmp_bytes` on `/tmp` and of 64 MiB on `/dev/shm`, mode 0700,
//!    owned by the session's host uid (a full `/tmp` is `ENOSPC`), and a `/dev` of five nodes
//!    (`null`, `zero`, `full`, `random`, `urandom`) and the `fd` links; made read-only;
//!    `pivot_root` into it, the host's tree detached, and the working directory `/workspace`.
//!    Nothing else of the host exists for the session: not other sessions' workspaces, not the
//!    data directory, not a host's UNIX socket, not the host's mounts in `mountinfo`.
//! 3. **(c) Host name** in the new UTS namespace.
//! 4. **(d) User namespace** (see `identity`): `setgroups(0)` (root's supplementary groups would
//!    otherwise survive, and after `deny` can never be dropped), `unshare(CLONE_NEWUSER)`, then
//!    `U` to the zygote and wait: it writes `setgroups` `deny`, `uid_map` and `gid_map`
//!    `1000 <uid> 1`, then releases it (on cgroup v2 it wrote the child's pid into the spec's
//!    cgroup right after the fork, before waiting for `U`: see `release`). Then
//!    `setresgid(1000)`, the capability bounding set emptied, `setresuid(1000)`, `capset` to
//!    empty sets (the kernel does not clear them here: uid 0 of this namespace is not mapped, so
//!    `setresuid` is no "root to non-root" change), `PR_SET_DUMPABLE` 1 (reset by the uid
//!    change; without it `/proc/1` belongs to the host's root and the session cannot read its own
//!    `/proc/self/environ`), and the parent-death signal set again (the id change cleared it). The
//!    mount, network, IPC, UTS and pid namespaces stay owned by the host's user namespace, where
//!    the child now has no capability: it can change none of the mounts of step (b).
//! 5. **(e) Resource limits**, soft = hard: `RLIMIT_CORE` 0 (no core file with the session's
//!    memory in it), `RLIMIT_NOFILE`, `RLIMIT_FSIZE` (Python ignores `SIGXFSZ`, so an oversized
//!    write is an `OSError` `EFBIG`). Not `RLIMIT_AS`: it counts address space, not memory, and
//!    breaks threads (each reserves its stack and malloc arena); memory is the cgroup's job.
//! 6. **(f) `no_new_privs`**: execve can no longer grant privileges (set-user-ID binaries and
//!    file capabilities have no effect); also the precondition of Landlock and seccomp without
//!    `CAP_SYS_ADMIN`.
//! 7. **(g) Landlock** (see `landlock_domain`): read and execute beneath `read_only`, read beneath
//!    the session's own `/proc`, everything but device nodes beneath `workspace`, `tmp` and
//!    `/dev/shm`, nothing elsewhere; no signals to processes outside the domain; without network,
//!    no TCP bind or connect. Best effort across kernel versions, but a kernel with no Landlock at
//!    all is an error (fail closed), and [`HardenReport`] says whether enforcement was full or
//!    partial.
//! 8. **(h) seccomp** (see `policy` for the reviewed allow-list, `seccomp_filter` for how it is
//!    compiled): an allow-list. Syscalls it does not name answer `ENOSYS`, so libraries take the
//!    fallback they carry for older kernels (glibc's `clone3` → `clone`); the known routes to a
//!    kernel exploit or to the host answer `EPERM`, extended-attribute writes `EOPNOTSUPP`: Python
//!    gets a clean exception instead of dying. Last, because the steps above use syscalls it
//!    refuses. The programs are compiled once, in the zygote before it forks
//!    ([`prepare_seccomp`]); the child only installs its inherited copy.
//!
//! Then the child sends `D` and its report line (with each step's time), and the zygote announces
//! it (`forked`). Any error leaves the process partly confined: the child sends `E` and the error,
//! the caller must exit without running session code, and the zygote kills it. Every error names
//! its step ([`HardenError`]); the zygote's side has its own ([`ReleaseError`]), and kills the child
//! on any of them (before the pipes close, so the child never acts on their end of file).
//!
//! ## The session as pid 1
//!
//! SIGKILL of the child (from the zygote's pid namespace) ends the whole namespace: the kernel
//! kills every process the session started, `setsid` daemons included, and so does the child's
//! own exit. The kernel delivers to a namespace's init only the signals it has a handler for
//! (SIGKILL and SIGSTOP aside): the zygote's SIGINT handler is installed, so SIGINT interrupts a
//! run; SIGTERM, left at its default, is ignored. Orphans of the session's processes are
//! reparented to the child. Their zombies are reaped only when the session ends, bounded by the
//! pids cgroup: the executor cannot tell an orphan from a child that a cell still means to
//! `waitpid` for (both are the child's children with the same parent pid), and reaping the
//! latter would hand the cell `ECHILD` or a wrong exit status.
//!
//! ## The C ABI
//!
//! Version [`TOOLGATE_HARDEN_ABI_VERSION`] (4), from [`toolgate_harden_abi_version`]; each call
//! returns 0 or -1 (`toolgate_release_advance` also 1) and writes a NUL-terminated message into
//! `err_buf` (cut to fit); no panic crosses the boundary (see `ffi` for a Python example):
//!
//! - [`toolgate_zygote_init`]`(err, err_len)`: opens the zygote's own pid namespace and compiles
//!   the seccomp programs ([`prepare_seccomp`]), once.
//! - [`toolgate_zygote_own_mounts`]`(source, source_len, err, err_len)`: a private mount
//!   namespace of the zygote's own, without the mounts of that source (the workspaces mounted
//!   before it started), once ([`enter_own_mount_namespace`]).
//! - [`toolgate_before_session_fork`]`(err, err_len)`: `unshare(CLONE_NEWPID)`.
//! - [`toolgate_after_session_fork`]`(err, err_len)`: `setns` back; on -1 the zygote must exit.
//! - [`toolgate_harden_session`]`(spec_json, spec_len, status_fd, release_fd, workspace_fd, err,
//!   err_len)`: the child's checklist, the workspace a detached mount (or -1: `spec.workspace`
//!   as the child sees it); on success `err` holds the [`HardenReport`] line.
//! - [`toolgate_release_begin`]`(pid, spec_json, spec_len, err, err_len)` and
//!   [`toolgate_release_advance`]`(pid, spec_json, spec_len, released, message, message_len,
//!   release_fd, err, err_len)`: the zygote's side, one step right after the fork and one for
//!   each message of the child, so that the zygote waits for them in its own event loop and
//!   forks the next session meanwhile; on 0 `err` holds the child's report line, on -1 the child
//!   has been killed.
//!
//! [`toolgate_harden_session`] takes ownership of its descriptors and closes them; the release
//! functions only borrow the release pipe's write end. The library is
//! `target/<profile>/libtoolgate_sandbox_harden.so`.
//!
//! ## The seccomp allow-list
//!
//! The session may make the syscalls `policy::ALLOWED` lists (about 230 on x86_64, in groups,
//! each with its reason) and those of `policy::FILTERED` for the arguments their rules accept:
//! `clone` without any `CLONE_NEW*` flag, `socket` for `AF_UNIX` (plus TCP and UDP over IPv4 and
//! IPv6 when the spec allows network), `socketpair` for `AF_UNIX`, `ioctl` but not `TIOCSTI`,
//! `TIOCLINUX` or `TIOCSETD`, `prctl` for a short list of options, `personality` only to query,
//! `madvise` but not `MADV_HWPOISON`/`MADV_SOFT_OFFLINE`, `prlimit64` and `setpriority` of the
//! caller only, `mknod` of no device, `chmod` without set-ID bits. Everything else is refused,
//! and the errno says how:
//!
//! - `EPERM` (Python's `PermissionError`) for the well-known routes to a kernel exploit or to the
//!   host, named in `policy::DENIED` (ptrace, mount and the new mount API, namespaces, bpf,
//!   io_uring, keyrings, userfaultfd, modules, handles, clocks, real-time scheduling, …), and for
//!   a filtered call whose arguments its rule refuses;
//! - `EOPNOTSUPP` for writing extended attributes, which Landlock does not check: what a
//!   filesystem without them answers, and what both `cp -p` and `shutil.copy2` shrug off;
//! - `ENOSYS` for everything else, `clone3` included: the answer of a kernel too old for the
//!   call, so glibc, CPython and coreutils take the fallback they already carry (`clone3` →
//!   `clone`, whose flags BPF can read; `fchmodat2` → `fchmodat`; `inotify` → polling). A gap in
//!   the list thus degrades like an old kernel instead of surfacing as a mysterious
//!   `PermissionError` deep inside a C extension.
//!
//! The list was made by tracing (`strace -f`) the runtime importing numpy, pandas and matplotlib
//! and running a notebook-like workload, bash with coreutils and common tools, the zygote's tests
//! and this crate's, then running them again hardened and listing every refusal; `policy`
//! records how. It is reviewed data: re-trace after a glibc, CPython or package upgrade, and
//! before relying on the aarch64 list, which is compiled but not yet traced; other architectures
//! fail closed at step (h). The kernel caches "always allowed" per syscall number, so the
//! unconditional entries cost nothing after a syscall's first call.
//!
//! ## What this crate does not do
//!
//! - Hide the host's kernel-wide `/proc` files (`/proc/cpuinfo`, `/proc/meminfo`, `/proc/sys`
//!   read-only), or the options of the session's own mounts in `/proc/self/mountinfo` (its host
//!   uid among them, and the host paths of the read-only paths, which are shown at their own
//!   place). Writes to `/proc` are refused by Landlock.
//! - Reap orphaned zombies before the session ends (see "The session as pid 1").
//! - Memory, process count and CPU: the cgroup's job; this crate only writes the child's pid
//!   into the cgroups it is given, before the child runs anything.
//! - Size-cap the workspace (the server mounts it), or make it reachable: its ancestors must be
//!   searchable by the session's uid on the host (checked, never changed here), and the server
//!   gives the workspace to that uid.

mod channel;
mod error;
mod ffi;
mod identity;
mod landlock_domain;
mod mounts;
mod own_mounts;
mod pid_namespace;
mod policy;
mod release;
mod seccomp_filter;
mod spec;
mod sys;

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

pub use channel::{ChildChannel, ParentChannel, session_channel};
pub use error::{HardenError, ReleaseError};
pub use ffi::{
    TOOLGATE_HARDEN_ABI_VERSION, toolgate_after_session_fork, toolgate_before_session_fork,
    toolgate_harden_abi_version, toolgate_harden_session, toolgate_release_advance,
    toolgate_release_begin, toolgate_zygote_init, toolgate_zygote_own_mounts,
};
pub use own_mounts::enter_own_mount_namespace;
pub use pid_namespace::{
    SessionFork, after_session_fork, before_session_fork, fork_session_child,
    remember_pid_namespace, wait_for_child,
};
pub use release::{ReleaseProgress, advance_release, begin_release, release_session};
pub use spec::{HardenReport, HardenSpec, LandlockEnforcement, SESSION_ID_INSIDE};

/// Compiles the seccomp programs of step (h) once, in the zygote, before it forks: every child
/// forked afterwards inherits them and only installs them (compiling takes about 1.5 ms, which
/// each child would otherwise spend). Idempotent; [`toolgate_zygote_init`] and
/// [`before_session_fork`] call it. An error (an architecture without a reviewed allow-list)
/// is the one step (h) would report.
pub fn prepare_seccomp() -> Result<(), HardenError> {
    seccomp_filter::prepare()
}

/// Confines the calling process (the freshly forked session child) as `spec` says, released by
/// the zygote through `channel`. See the crate docs for the checklist.
///
/// On error the process is partly confined and must exit without running the session's code.
pub fn harden_session(spec: &HardenSpec, channel: ChildChannel) -> Result<(), HardenError> {
    harden_session_with_report(spec, channel).map(drop)
}

/// [`harden_session`], returning what was achieved (Landlock's enforcement, timing). The
/// outcome is also sent to the zygote (`D` + report, or `E` + error) and both pipe ends closed.
pub fn harden_session_with_report(
    spec: &HardenSpec,
    channel: ChildChannel,
) -> Result<HardenReport, HardenError> {
    harden_session_in(spec, None, channel)
}

/// [`harden_session_with_report`], the workspace shown at `/workspace` being `workspace` when
/// given: a detached mount of it (`open_tree(OPEN_TREE_CLONE)` where it is mounted), moved into
/// the session's root, rather than `spec.workspace` as this process sees it (a zygote in its own
/// mount namespace, [`enter_own_mount_namespace`], does not see workspaces mounted later).
pub fn harden_session_in(
    spec: &HardenSpec,
    workspace: Option<OwnedFd>,
    mut channel: ChildChannel,
) -> Result<HardenReport, HardenError> {
    let outcome = checklist(spec, workspace, &mut channel);
    match &outcome {
        Ok(report) => channel.finish(Ok(&report.to_string())),
        Err(error) => channel.finish(Err(&error.to_string())),
    }
    outcome
}

/// The checklist, in order.
fn checklist(
    spec: &HardenSpec,
    workspace: Option<OwnedFd>,
    channel: &mut ChildChannel,
) -> Result<HardenReport, HardenError> {
    let started = Instant::now();
    let mut steps = Steps::new(started);

    // (0) Precondition: a sane spec, a reachable workspace, and one thread, because unshare of a
    // user namespace, Landlock and seccomp below need or bind only the calling thread.
    spec.validate()?;
    if workspace.is_none() {
        // a detached workspace is not reached through the host's directories
        mounts::check_workspace_reachable(spec)?;
    }
    ensure_single_threaded()?;
    steps.lap("precheck");
    // One thread, nothing of the session run yet: it joins its v1 cgroups itself, which unlike
    // a move by the zygote waits for no RCU grace period (see `release`).
    release::join_own_cgroups(&spec.cgroups)?;
    steps.lap("cgroups");

    // (a) Private network, IPC, host name and mount table. NEWNET only without network; nothing
    // is brought up in a new network namespace.
    sys::unshare(namespace_flags(spec.network)).map_err(HardenError::Unshare)?;
    if let spec::Net::Proxy(_) = spec.net() {
        // the proxy's listener, made by the server, needs 127.0.0.1 to exist
        sys::loopback_up().map_err(HardenError::Unshare)?;
    }
    steps.lap("unshare");

    // (b) Private propagation; the session's own root: read-only paths, workspace, /proc, /tmp,
    // /dev; pivot_root into it.
    let mounts = mounts::make_session_mounts(spec, workspace)?;
    steps.lap("mounts");

    // (c) The session's own host name, in its own UTS namespace (before step (d), which takes
    // the right to change it away).
    sys::set_hostname(&spec.hostname).map_err(HardenError::Hostname)?;
    steps.lap("hostname");

    // (d) Own user namespace, released by the zygote (id maps), then uid and gid 1000
    // with no capability.
    let admission = identity::enter_user_namespace(channel)?;
    steps.lap("user_namespace");

    // (e) Back-stop limits: no core dumps, bounded descriptors and file size. Not RLIMIT_AS.
    apply_rlimits(spec)?;
    steps.lap("rlimits");

    // (f) execve can no longer grant privileges; required by Landlock and seccomp below.
    sys::set_no_new_privs().map_err(HardenError::NoNewPrivs)?;
    steps.lap("no_new_privs");

    // (g) Filesystem, signal and TCP confinement by Landlock.
    let landlock = landlock_domain::restrict_self(spec, &mounts)?;
    steps.lap("landlock");

    // (h) The seccomp allow-list; refusals answer EPERM, EOPNOTSUPP or ENOSYS. Last, because the steps
    // above use syscalls it refuses.
    let seccomp_denied_syscalls = seccomp_filter::install(spec.net())?;
    steps.lap("seccomp");

    Ok(HardenReport {
        landlock: landlock.enforcement,
        landlock_abi: landlock.abi,
        seccomp_denied_syscalls,
        admission,
        elapsed: started.elapsed(),
        steps: steps.done,
    })
}

/// The wall-clock time of each step of the checklist, for the report (where the time of a new
/// session goes).
struct Steps {
    last: Instant,
    done: Vec<(&'static str, Duration)>,
}

impl Steps {
    fn new(started: Instant) -> Self {
        Self {
            last: started,
            done: Vec::with_capacity(9),
        }
    }

    /// Ends step `name` now.
    fn lap(&mut self, name: &'static str) {
        let now = Instant::now();
        self.done.push((name, now.duration_since(self.last)));
        self.last = now;
    }
}

/// Step (0): refuses a multi-threaded caller.
fn ensure_single_threaded() -> Result<(), HardenError> {
    match sys::thread_count().map_err(HardenError::ThreadCount)? {
        1 => Ok(()),
        threads => Err(HardenError::NotSingleThreaded { threads }),
    }
}

/// Step (a)'s flags.
fn namespace_flags(network: bool) -> libc::c_int {
    let flags = libc::CLONE_NEWIPC | libc::CLONE_NEWUTS | libc::CLONE_NEWNS;
    if network {
        flags
    } else {
        flags | libc::CLONE_NEWNET
    }
}

/// Step (e): the three limits, soft = hard.
fn apply_rlimits(spec: &HardenSpec) -> Result<(), HardenError> {
    use sys::Rlimit;
    for (resource, limit) in [
        (Rlimit::Core, 0),
        (Rlimit::OpenFiles, spec.max_open_files),
        (Rlimit::FileSize, spec.max_file_bytes),
    ] {
        sys::set_rlimit(resource, limit).map_err(|source| HardenError::Rlimit {
            resource: resource.name(),
            source,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
