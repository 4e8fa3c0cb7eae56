//! # toolgate-sandbox-harden
//!
//! Confines the process that calls it, in place: the child that the Python zygote has just
//! forked for a session calls [`harden_session`] (through the C ABI `toolgate_harden_session`,
//! loaded with ctypes) before it runs a line of the session's code. The same function serves
//! the probe binary `toolgate-harden-probe`, which hardens itself and then `exec`s a command, and
//! the tests, which run real Python under it.
//!
//! ## The checklist
//!
//! [`harden_session_with_report`] applies, in this order, one call per step:
//!
//! 0. **Precondition**: the spec is valid and the process has one thread. Landlock and seccomp
//!    bind only the calling thread (and what it later forks); another thread would stay free.
//! 1. **(a) Namespaces**: `unshare(CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNS)`,
//!    without `CLONE_NEWNET` when the spec allows network. The user and pid namespaces are not
//!    made here: they must be chosen when the child is created (`clone`), which is the zygote's
//!    or the supervisor's job.
//! 2. **(b) Private mounts**: `MS_REC | MS_PRIVATE` on `/`, so nothing mounted on the host later
//!    appears here and nothing done here propagates back.
//! 3. **(c) Host name** in the new UTS namespace.
//! 4. **(d) Network**: nothing is brought up in the new network namespace: its only interface,
//!    loopback, stays down (tested: no `::1` address), so there is no route anywhere, not even to
//!    `127.0.0.1`; seccomp and Landlock refuse inet sockets and TCP anyway. `AF_UNIX` sockets
//!    still work. A profile that needs loopback (a local server inside the session) would set
//!    `IFF_UP` on `lo` with `ioctl(SIOCSIFFLAGS)` here and allow `AF_INET` in seccomp.
//! 5. **(e) Resource limits**, soft = hard: `RLIMIT_CORE` 0 (no core file with the session's
//!    memory in it), `RLIMIT_NOFILE`, `RLIMIT_FSIZE` (Python ignores `SIGXFSZ`, so an oversized
//!    write is an `OSError` `EFBIG`). Not `RLIMIT_AS`: it counts address space, not memory, and
//!    breaks threads (each reserves its stack and malloc arena); memory is the cgroup's job.
//! 6. **(f) `no_new_privs`**: execve can no longer grant privileges (set-user-ID binaries and
//!    file capabilities have no effect); also the precondition of Landlock and seccomp without
//!    `CAP_SYS_ADMIN`.
//! 7. **(g) Landlock** (see `landlock_domain`): read and execute beneath `read_only`, everything
//!    but device nodes beneath `workspace` and `tmp`, nothing elsewhere; no signals to processes
//!    outside the domain; without network, no TCP bind or connect. Best effort across kernel
//!    versions, but a kernel with no Landlock at all is an error (fail closed), and
//!    [`HardenReport`] says whether enforcement was full or partial.
//! 8. **(h) seccomp** (see `seccomp_filter` and `policy`): a deny-list answering `EPERM`, so
//!    Python gets a clean `PermissionError` instead of dying.
//!
//! Any error leaves the process partly confined: the caller must exit without running session
//! code. Every error names its step ([`HardenError`]).
//!
//! ## The C ABI
//!
//! [`toolgate_harden_session`]`(spec_json, spec_len, err_buf, err_len) -> i32` takes the
//! [`HardenSpec`] as JSON bytes and returns 0 or -1. Either way a NUL-terminated message is
//! written into `err_buf` (cut to fit): the error naming the failing step, or on success the
//! [`HardenReport`] line. No panic crosses the boundary. The library is
//! `target/<profile>/libtoolgate_sandbox_harden.so`.
//!
//! ## Why a seccomp deny-list, and what an allow-list would take
//!
//! The session runs CPython with numpy, pandas, matplotlib and whatever else an operator
//! installs, plus `bash` and the programs it starts. That surface (threads, `mmap` tricks of
//! allocators, `epoll`, `inotify`, `prctl`s, `statx`, `rseq`, `close_range`, `memfd_create`,
//! vectored I/O, new syscalls that a future glibc starts using) is large and moves with every
//! upgrade; an allow-list that misses one call turns a working notebook into a mysterious
//! `PermissionError` deep inside a C extension. The filesystem, the network, signals and
//! resources are already contained by namespaces, Landlock, rlimits and the cgroup, so seccomp's
//! job here is narrower: take away the kernel interfaces that no notebook needs and that are
//! the usual routes to a kernel exploit or to the host (ptrace, mount, namespaces, bpf,
//! io_uring, keyrings, userfaultfd, modules, handles, clocks).
//!
//! An allow-list would take: tracing every syscall (with arguments, for `ioctl`, `prctl`,
//! `clone`, `socket`, `fcntl`) of the whole runtime under a representative workload (imports of
//! every installed package, plotting, subprocesses, threads, `bash` with coreutils) with
//! `strace -f -c` or seccomp's `SECCOMP_RET_LOG`; keeping that list as reviewed data per
//! runtime profile and architecture; re-tracing on every glibc, Python or package upgrade; and
//! a logging mode in production to catch what the tests missed. Firecracker can afford one
//! because its VMM is a single small program; a general-purpose interpreter cannot cheaply.
//!
//! ## What this crate does not do
//!
//! - Drop capabilities, or create user and pid namespaces: a child of a zygote running as real
//!   root stays root with every capability. It cannot use most of them (Landlock applies to
//!   root, seccomp refuses the dangerous syscalls, Landlock's signal scope stops `kill` of
//!   outside processes), but production must start session children in a user namespace
//!   (mapped root, no capability on the host) and a pid namespace.
//! - Hide host processes in `/proc`. Never put `/proc` in `read_only` unless the child has its
//!   own pid namespace and a `/proc` mounted for it: measured on Linux 6.18 (Landlock ABI 7),
//!   Landlock's ptrace check refuses `/proc/PID/mem` and `ptrace` of outside processes but lets
//!   a root session read the `environ`, `maps` and `fd` list of other root processes (the
//!   server's secrets). Without `/proc` CPython, threads and subprocesses work (tested);
//!   `/proc/self` is unreadable too. Granting `/proc/self` alone is no fix: it names one pid's
//!   directory, and procfs may hand out a new inode for it later.
//! - Connecting to pathname UNIX sockets outside the allowed paths is not mediated before
//!   Landlock ABI 9 (`RESOLVE_UNIX`): measured here, a hardened session connected to a socket the
//!   host had bound in `/tmp` and read from it. The host's sockets (`/run/...`, the server's and
//!   the zygote's) stay reachable by path unless the mount namespace hides them: the supervisor
//!   must give the child a minimal root (or empty mounts over `/run`, `/var/run`, `/tmp` and
//!   the server's directories) before calling this, until kernels with ABI 9 are the floor.
//! - Memory, process count and CPU: the cgroup's job.

mod error;
mod ffi;
mod landlock_domain;
mod policy;
mod seccomp_filter;
mod spec;
mod sys;

use std::time::Instant;

pub use error::HardenError;
pub use ffi::toolgate_harden_session;
pub use spec::{HardenReport, HardenSpec, LandlockEnforcement};

/// Confines the calling process as `spec` says. See the crate docs for the checklist.
///
/// On error the process is partly confined and must not run the session's code.
pub fn harden_session(spec: &HardenSpec) -> Result<(), HardenError> {
    harden_session_with_report(spec).map(drop)
}

/// [`harden_session`], returning what was achieved (Landlock's enforcement, timing).
pub fn harden_session_with_report(spec: &HardenSpec) -> Result<HardenReport, HardenError> {
    let started = Instant::now();

    // (0) Precondition: a sane spec, and one thread, because Landlock and seccomp below bind only
    // the calling thread.
    spec.validate()?;
    ensure_single_threaded()?;

    // (a) Private network, IPC, host name and mount table. NEWNET only without network.
    sys::unshare(namespace_flags(spec.network)).map_err(HardenError::Unshare)?;

    // (b) No mount propagation in either direction between the host and this mount namespace.
    sys::make_all_mounts_private().map_err(HardenError::MountsPrivate)?;

    // (c) The session's own host name, in its own UTS namespace.
    sys::set_hostname(&spec.hostname).map_err(HardenError::Hostname)?;

    // (d) Nothing is brought up in the new network namespace: no interface, not even loopback,
    // so there is no route anywhere. Deliberately no call.

    // (e) Back-stop limits: no core dumps, bounded descriptors and file size. Not RLIMIT_AS.
    apply_rlimits(spec)?;

    // (f) execve can no longer grant privileges; required by Landlock and seccomp below.
    sys::set_no_new_privs().map_err(HardenError::NoNewPrivs)?;

    // (g) Filesystem, signal and TCP confinement by Landlock.
    let landlock = landlock_domain::restrict_self(spec)?;

    // (h) Dangerous syscalls answer EPERM. Last, because the steps above use some of them.
    let seccomp_denied_syscalls = seccomp_filter::install(spec.network)?;

    Ok(HardenReport {
        landlock: landlock.enforcement,
        landlock_abi: landlock.abi,
        seccomp_denied_syscalls,
        elapsed: started.elapsed(),
    })
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
