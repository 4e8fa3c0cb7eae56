//! The reviewed policy data: the seccomp allow-list (which syscalls a session may make, with which
//! arguments, and why), the syscalls refused by name, the device nodes a session may use, and the
//! Landlock ABI the rules are written for. A change here is a security change and should be
//! reviewed as one.
//!
//! The seccomp answer to a syscall is decided in this order (see `seccomp_filter`):
//!
//! 1. listed in [`ALLOWED`]: allowed, whatever its arguments;
//! 2. listed in [`FILTERED`]: allowed when its arguments pass the entry's rule, else `EPERM`;
//! 3. listed in [`DENIED`]: `EPERM` (a clean `PermissionError` in Python);
//! 4. listed in [`ANSWERED_EOPNOTSUPP`] (writing extended attributes): `EOPNOTSUPP`, as on a
//!    filesystem without them, the one answer both `cp -p` (libacl) and `shutil.copy2` shrug off;
//! 5. anything else, [`ANSWERED_ENOSYS`] included: `ENOSYS`, as if the kernel were too old for
//!    it, so glibc, CPython and coreutils take the fallback they already carry for old kernels
//!    (`clone3` → `clone`, `fchmodat2` → `fchmodat`, `inotify` → polling, …). That includes the
//!    x32 ABI's numbers (bit 30 set), which match no entry.
//!
//! How the list was made (Linux 6.18, glibc 2.36, CPython 3.11, x86_64): `strace -f` of the
//! runtime's CPython importing numpy, pandas and matplotlib and running a notebook-like workload
//! (BLAS with 4 threads, thread pools, `subprocess`, bash with coreutils, tar, gzip, git, gcc,
//! make, node, perl, `fork`, `multiprocessing`, AF_UNIX sockets, sqlite3, timers, signals,
//! `mmap`, epoll, eventfd, memfd, asyncio), of the zygote's pytest suite and of this crate's
//! confinement tests, the syscalls and the arguments of the filtered ones tallied; then the same
//! runs hardened with the finished filter under `strace -f`, listing every call that came back
//! `ENOSYS` or `EPERM`: only `clone3` (by design: glibc fell back to `clone`), urllib3's probe
//! for IPv6 (a socket it expects to fail without network) and the tests' deliberate calls.
//! (That step found `mincore`, now allowed, and the tests found that `EPERM` on `fsetxattr`
//! breaks `cp -p`: hence [`ANSWERED_EOPNOTSUPP`].) Re-trace after a glibc, CPython or package
//! upgrade, and on aarch64, whose list is the generic part of this one: compiled, not traced.
//!
//! Deliberately absent (answer `ENOSYS`): `inotify_*` (watches need only path lookup, which
//! Landlock does not check: they would report file names in other tenants' directories; `tail -f`
//! falls back to polling), `io_setup` and the other Linux AIO calls, `vmsplice`, `cachestat`
//! (page-cache side channel), `sync` and `syncfs` (host-wide I/O stalls), `get_robust_list`
//! (another task's pointers), `modify_ldt`, `ioprio_set`, `move_pages`, `migrate_pages`, `mq_*`,
//! `msg*`, `sethostname`, `setdomainname`, `landlock_*`, `memfd_secret`, and every syscall newer
//! than this list.

use landlock::{ABI, AccessFs};

/// The Landlock ABI whose rights the ruleset asks for. ABI 7 (Linux 6.15) is what the project's
/// machines run and what the tests prove; its rights are those of ABI 5 (filesystem, including
/// `IOCTL_DEV`) and ABI 4 (TCP bind/connect) plus ABI 6's scopes (signals and abstract UNIX
/// sockets). ABI 9 adds `RESOLVE_UNIX` (connecting to pathname UNIX sockets): raise this after
/// testing on a kernel that has it. On an older kernel the crate drops what the kernel lacks
/// (best effort) and [`crate::HardenReport`] says so.
pub(crate) const LANDLOCK_ABI: ABI = ABI::V7;

/// Device nodes a session may use, and how; step (b) shows exactly these in its `/dev`.
pub(crate) const DEVICES: [(&str, &[AccessFs]); 5] = [
    ("/dev/null", &[AccessFs::ReadFile, AccessFs::WriteFile]),
    ("/dev/full", &[AccessFs::ReadFile, AccessFs::WriteFile]),
    ("/dev/zero", &[AccessFs::ReadFile]),
    ("/dev/urandom", &[AccessFs::ReadFile]),
    ("/dev/random", &[AccessFs::ReadFile]),
];

/// A syscall number on the build's architecture, with its name for tests and reviewers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Syscall {
    /// The number the filter matches.
    pub(crate) number: libc::c_long,
    /// `SYS_<name>`, as in libc.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) name: &'static str,
}

/// `sys!(SYS_read)`, or `sys!(SYS_fchmodat2 = 452)` for a syscall libc does not name yet.
macro_rules! sys {
    ($name:ident) => {
        Syscall {
            number: libc::$name,
            name: stringify!($name),
        }
    };
    ($name:ident = $number:literal) => {
        Syscall {
            number: $number,
            name: stringify!($name),
        }
    };
}

/// Syscalls allowed whatever their arguments, for one reason.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct Group {
    /// Why a session needs them, and what keeps them harmless.
    pub(crate) reason: &'static str,
    /// The syscalls.
    pub(crate) syscalls: &'static [Syscall],
}

/// `group!("reason", [SYS_a, SYS_b])`.
macro_rules! group {
    ($reason:literal, [$($name:ident $(= $number:literal)?),+ $(,)?]) => {
        Group {
            reason: $reason,
            syscalls: &[$(sys!($name $(= $number)?)),+],
        }
    };
}

/// The allow-list proper: syscalls allowed with any arguments. Paths are Landlock's business,
/// memory the cgroup's, signals Landlock's scope's; what is listed here is what a notebook, bash
/// and the programs it starts were seen to use, plus the obvious siblings of those calls (the
/// `*at` form of a call seen, the getter of a setter seen) so that a library's choice between
/// equivalent calls does not break it.
#[rustfmt::skip]
pub(crate) const ALLOWED: &[Group] = &[
    group!("descriptors: read, write, seek, duplicate, lock and close", [
        SYS_read, SYS_write, SYS_readv, SYS_writev, SYS_pread64, SYS_pwrite64, SYS_preadv,
        SYS_pwritev, SYS_preadv2, SYS_pwritev2, SYS_lseek, SYS_dup, SYS_dup3, SYS_fcntl,
        SYS_flock, SYS_close, SYS_close_range,
    ]),
    group!("open, stat and list files and directories: Landlock decides which paths", [
        SYS_openat, SYS_openat2, SYS_fstat, SYS_newfstatat, SYS_statx, SYS_statfs, SYS_fstatfs,
        SYS_faccessat, SYS_faccessat2, SYS_getdents64, SYS_readlinkat, SYS_getcwd, SYS_chdir,
        SYS_fchdir,
    ]),
    group!("create, rename, link, truncate and remove files: Landlock checks each path", [
        SYS_mkdirat, SYS_unlinkat, SYS_renameat2, SYS_linkat, SYS_symlinkat, SYS_truncate,
        SYS_ftruncate, SYS_fallocate, SYS_umask,
    ]),
    group!("ownership and times set by cp -p, tar and touch (chmod's modes are filtered)", [
        SYS_fchown, SYS_fchownat, SYS_utimensat,
    ]),
    group!("read extended attributes (ls, cp -a, tar); writing them: ANSWERED_EOPNOTSUPP", [
        SYS_getxattr, SYS_lgetxattr, SYS_fgetxattr, SYS_listxattr, SYS_llistxattr,
        SYS_flistxattr,
    ]),
    group!("flush and advise the page cache for the session's own files (sqlite3, numpy.save)", [
        SYS_fsync, SYS_fdatasync, SYS_sync_file_range, SYS_fadvise64, SYS_readahead,
    ]),
    group!("copy between descriptors inside the kernel (cp, shutil, cat)", [
        SYS_copy_file_range, SYS_sendfile, SYS_splice, SYS_tee,
    ]),
    group!("pipes, eventfd and memfd: plumbing inside the process (memfd memory is the cgroup's)", [
        SYS_pipe2, SYS_eventfd2, SYS_memfd_create,
    ]),
    group!("wait for descriptors: select, poll, epoll (asyncio, subprocess, the zygote)", [
        SYS_pselect6, SYS_ppoll, SYS_epoll_create1, SYS_epoll_ctl, SYS_epoll_pwait,
        SYS_epoll_pwait2,
    ]),
    // mincore: GNU grep's stack-overflow handler probes its stack with it when /proc/self/maps
    // is unreadable; since Linux 5.0 it reports page-cache residency only for files the caller
    // may write, which closed its side channel.
    group!("the process's own address space: allocators, mmap of files, mlock (madvise filtered)", [
        SYS_brk, SYS_mmap, SYS_munmap, SYS_mprotect, SYS_mremap, SYS_msync, SYS_mincore,
        SYS_mlock, SYS_mlock2, SYS_munlock, SYS_mlockall, SYS_munlockall, SYS_membarrier,
        SYS_pkey_alloc, SYS_pkey_free, SYS_pkey_mprotect, SYS_mseal,
    ]),
    group!("NUMA placement of the process's own memory (OpenBLAS threads)", [
        SYS_mbind, SYS_set_mempolicy, SYS_get_mempolicy,
    ]),
    group!("threads: futexes, robust lists, rseq, thread ids (clone's flags are filtered)", [
        SYS_futex, SYS_futex_waitv, SYS_set_robust_list, SYS_set_tid_address, SYS_rseq,
        SYS_gettid, SYS_sched_yield,
    ]),
    group!("processes: exec, wait, exit, sessions and process groups (bash job control)", [
        SYS_execve, SYS_execveat, SYS_exit, SYS_exit_group, SYS_wait4, SYS_waitid,
        SYS_restart_syscall, SYS_getpid, SYS_getppid, SYS_getpgid, SYS_setpgid, SYS_getsid,
        SYS_setsid,
    ]),
    group!("credentials: read them, or drop them (setuid to nobody); no_new_privs stays set", [
        SYS_getuid, SYS_geteuid, SYS_getgid, SYS_getegid, SYS_getresuid, SYS_getresgid,
        SYS_getgroups, SYS_setuid, SYS_setgid, SYS_setreuid, SYS_setregid, SYS_setresuid,
        SYS_setresgid, SYS_setfsuid, SYS_setfsgid, SYS_setgroups, SYS_capget, SYS_capset,
    ]),
    group!("signals: Landlock's scope keeps every way of sending one inside the session", [
        SYS_rt_sigaction, SYS_rt_sigprocmask, SYS_rt_sigreturn, SYS_rt_sigpending,
        SYS_rt_sigsuspend, SYS_rt_sigtimedwait, SYS_rt_sigqueueinfo, SYS_rt_tgsigqueueinfo,
        SYS_sigaltstack, SYS_kill, SYS_tkill, SYS_tgkill, SYS_signalfd4, SYS_pidfd_open,
        SYS_pidfd_send_signal,
    ]),
    group!("clocks, sleeps and timers, read-only (setting the clock is refused)", [
        SYS_clock_gettime, SYS_clock_getres, SYS_clock_nanosleep, SYS_nanosleep,
        SYS_gettimeofday, SYS_getitimer, SYS_setitimer, SYS_timer_create, SYS_timer_settime,
        SYS_timer_gettime, SYS_timer_getoverrun, SYS_timer_delete, SYS_timerfd_create,
        SYS_timerfd_settime, SYS_timerfd_gettime,
    ]),
    group!("scheduling queries, and CPU affinity (pthread_setaffinity_np passes a thread id)", [
        SYS_sched_getaffinity, SYS_sched_setaffinity, SYS_sched_getparam,
        SYS_sched_getscheduler, SYS_sched_getattr, SYS_sched_get_priority_max,
        SYS_sched_get_priority_min, SYS_sched_rr_get_interval, SYS_getpriority, SYS_getcpu,
    ]),
    group!("own limits, usage and system facts (resource, os.cpu_count, uname, getrandom)", [
        SYS_getrlimit, SYS_setrlimit, SYS_getrusage, SYS_times, SYS_sysinfo, SYS_uname,
        SYS_getrandom,
    ]),
    group!("sockets once created: socket and socketpair filter the domain, below", [
        SYS_bind, SYS_listen, SYS_accept, SYS_accept4, SYS_connect, SYS_getsockname,
        SYS_getpeername, SYS_sendto, SYS_recvfrom, SYS_sendmsg, SYS_recvmsg, SYS_sendmmsg,
        SYS_recvmmsg, SYS_shutdown, SYS_getsockopt, SYS_setsockopt,
    ]),
    group!("System V shared memory and semaphores: private to the session's IPC namespace", [
        SYS_shmget, SYS_shmat, SYS_shmdt, SYS_shmctl, SYS_semget, SYS_semop, SYS_semtimedop,
        SYS_semctl,
    ]),
    group!("stack more seccomp filters: they only narrow this one (and install its later parts)", [
        SYS_seccomp,
    ]),
    #[cfg(target_arch = "x86_64")]
    group!("x86_64's older forms of calls above, still used by glibc, bash and static binaries", [
        SYS_open, SYS_creat, SYS_stat, SYS_lstat, SYS_access, SYS_getdents, SYS_readlink,
        SYS_mkdir, SYS_rmdir, SYS_unlink, SYS_rename, SYS_link, SYS_symlink, SYS_chown,
        SYS_lchown, SYS_utime, SYS_utimes, SYS_futimesat, SYS_pipe, SYS_dup2, SYS_poll,
        SYS_select, SYS_epoll_create, SYS_epoll_wait, SYS_eventfd, SYS_signalfd, SYS_fork,
        SYS_vfork, SYS_getpgrp, SYS_pause, SYS_alarm, SYS_time,
    ]),
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    group!("renameat: superseded by renameat2, still called by glibc's rename on these arches", [
        SYS_renameat,
    ]),
    #[cfg(target_arch = "x86_64")]
    // map_shadow_stack: not in libc 0.2.191 yet.
    group!("x86_64: the thread pointer (every thread), AMX permission, CET shadow stacks", [
        SYS_arch_prctl, SYS_map_shadow_stack = 453,
    ]),
];

/// A condition on one argument, always on its low 32 bits: every argument filtered here is an
/// `int` or `unsigned int` that the kernel itself truncates, so the high half is ignored by the
/// kernel and must be ignored by the filter too (`ioctl(fd, TIOCSTI | 1 << 32)` is `TIOCSTI`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum ArgRule {
    /// Allowed when argument `arg`, masked with `mask`, equals one of `values`.
    Allowed {
        /// Argument index, from 0.
        arg: u8,
        /// Bits compared (`u32::MAX`: the whole argument).
        mask: u32,
        /// Accepted values of the masked argument.
        values: &'static [u32],
    },
    /// Allowed unless argument `arg` equals one of `values`.
    Refused {
        /// Argument index, from 0.
        arg: u8,
        /// Refused values.
        values: &'static [u32],
    },
    /// Allowed when, for one of the alternatives, every `(arg, mask, value)` matches.
    Alternatives(&'static [&'static [(u8, u32, u32)]]),
}

/// A syscall allowed only for some arguments; a call the rule refuses answers `EPERM`.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct Filtered {
    /// The syscall.
    pub(crate) syscall: Syscall,
    /// What the rule keeps out.
    pub(crate) reason: &'static str,
    /// The arguments allowed.
    pub(crate) allow: ArgRule,
    /// Arguments allowed in addition when the spec allows network.
    pub(crate) with_network: Option<ArgRule>,
}

/// Every bit of the whole argument.
const ALL: u32 = u32::MAX;
/// `SOCK_TYPE_MASK` from `linux/net.h`: the type without `SOCK_NONBLOCK` and `SOCK_CLOEXEC`.
const SOCK_TYPE_MASK: u32 = 0xf;
/// The `CLONE_NEW*` flags `clone(2)` accepts. (`CLONE_NEWTIME` is absent: `clone` reads that bit
/// as part of the exit signal; only `clone3` and `unshare` take it, and neither is allowed.)
const CLONE_NEW_ANY: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;
/// File types `mknod` may create: regular (0 or `S_IFREG`), FIFO (`mkfifo`), UNIX socket.
const MKNOD_TYPES: &[u32] = &[0, libc::S_IFREG, libc::S_IFIFO, libc::S_IFSOCK];
/// `PRIO_PROCESS`, which libc types `c_uint` for glibc and `c_int` elsewhere.
#[allow(clippy::unnecessary_cast)]
const PRIO_PROCESS: u32 = libc::PRIO_PROCESS as u32;
/// The set-user-ID and set-group-ID bits.
const SET_ID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;
/// `chmod` family: the mode without set-ID bits.
const NO_SET_ID: ArgRule = ArgRule::Allowed {
    arg: 1,
    mask: SET_ID_BITS,
    values: &[0],
};
/// The same, for the `*at` forms whose mode is argument 2.
const NO_SET_ID_AT: ArgRule = ArgRule::Allowed {
    arg: 2,
    mask: SET_ID_BITS,
    values: &[0],
};

/// `PR_GET_SPECULATION_CTRL` and `PR_SET_SPECULATION_CTRL` from `linux/prctl.h` (libc names them
/// on x86_64 only).
const PR_GET_SPECULATION_CTRL: u32 = 52;
/// See [`PR_GET_SPECULATION_CTRL`].
const PR_SET_SPECULATION_CTRL: u32 = 53;

/// The `prctl` options allowed: those seen in the traces (`PR_SET_PDEATHSIG`, `PR_SET_NAME`,
/// `PR_CAPBSET_READ` from `ps`, the no_new_privs and seccomp getters) and their harmless
/// siblings (getters; settings that bind only the caller). Absent on purpose: `PR_SET_MM`
/// (rewrites the memory map's metadata with `CAP_SYS_RESOURCE`), `PR_SET_IO_FLUSHER`,
/// `PR_CAP_AMBIENT`, `PR_SET_SECCOMP` (the `seccomp` syscall does the same).
#[rustfmt::skip]
const PRCTL_OPTIONS: &[u32] = &[
    libc::PR_SET_PDEATHSIG as u32, libc::PR_GET_PDEATHSIG as u32,
    libc::PR_SET_NAME as u32, libc::PR_GET_NAME as u32,
    libc::PR_SET_DUMPABLE as u32, libc::PR_GET_DUMPABLE as u32,
    libc::PR_SET_NO_NEW_PRIVS as u32, libc::PR_GET_NO_NEW_PRIVS as u32,
    libc::PR_GET_SECCOMP as u32, libc::PR_CAPBSET_READ as u32,
    libc::PR_SET_TIMERSLACK as u32, libc::PR_GET_TIMERSLACK as u32,
    libc::PR_SET_CHILD_SUBREAPER as u32, libc::PR_GET_CHILD_SUBREAPER as u32,
    libc::PR_SET_THP_DISABLE as u32, libc::PR_GET_THP_DISABLE as u32,
    PR_SET_SPECULATION_CTRL, PR_GET_SPECULATION_CTRL,
    libc::PR_SET_VMA as u32, libc::PR_SET_PTRACER as u32,
    // arm64: SVE vector length (PR_SVE_SET_VL, PR_SVE_GET_VL) and MTE tagged addresses
    // (PR_SET_TAGGED_ADDR_CTRL, PR_GET_TAGGED_ADDR_CTRL); not in libc's gnu module.
    #[cfg(target_arch = "aarch64")] 50,
    #[cfg(target_arch = "aarch64")] 51,
    #[cfg(target_arch = "aarch64")] 55,
    #[cfg(target_arch = "aarch64")] 56,
];

/// What `socket` also allows for a session whose only way out is the proxy: TCP streams over
/// IPv4 and IPv6 (Landlock then lets them connect to the proxy's port only). Never UDP, so no
/// DNS: names are resolved by the proxy.
#[rustfmt::skip]
pub(crate) const TCP_SOCKETS: (i64, ArgRule) = (
    sys!(SYS_socket).number,
    ArgRule::Alternatives(&[
        &[(0, ALL, libc::AF_INET as u32), (1, SOCK_TYPE_MASK, libc::SOCK_STREAM as u32)],
        &[(0, ALL, libc::AF_INET6 as u32), (1, SOCK_TYPE_MASK, libc::SOCK_STREAM as u32)],
    ]),
);

/// Syscalls allowed only for some arguments.
#[rustfmt::skip]
pub(crate) const FILTERED: &[Filtered] = &[
    Filtered {
        syscall: sys!(SYS_clone),
        reason: "threads and fork, but no CLONE_NEW* flag: a user namespace grants every \
                 capability inside it, and the others expose more kernel",
        allow: ArgRule::Allowed { arg: 0, mask: CLONE_NEW_ANY, values: &[0] },
        with_network: None,
    },
    Filtered {
        syscall: sys!(SYS_socket),
        reason: "AF_UNIX always; TCP and UDP over IPv4 and IPv6 only when the spec allows \
                 network; never raw, packet or netlink sockets (with network capabilities they \
                 sniff or reconfigure the network, and each family is more kernel)",
        allow: ArgRule::Allowed { arg: 0, mask: ALL, values: &[libc::AF_UNIX as u32] },
        with_network: Some(ArgRule::Alternatives(&[
            &[(0, ALL, libc::AF_INET as u32), (1, SOCK_TYPE_MASK, libc::SOCK_STREAM as u32)],
            &[(0, ALL, libc::AF_INET as u32), (1, SOCK_TYPE_MASK, libc::SOCK_DGRAM as u32)],
            &[(0, ALL, libc::AF_INET6 as u32), (1, SOCK_TYPE_MASK, libc::SOCK_STREAM as u32)],
            &[(0, ALL, libc::AF_INET6 as u32), (1, SOCK_TYPE_MASK, libc::SOCK_DGRAM as u32)],
        ])),
    },
    Filtered {
        syscall: sys!(SYS_socketpair),
        reason: "AF_UNIX pairs (multiprocessing, subprocess); no other family makes pairs",
        allow: ArgRule::Allowed { arg: 0, mask: ALL, values: &[libc::AF_UNIX as u32] },
        with_network: None,
    },
    Filtered {
        syscall: sys!(SYS_ioctl),
        reason: "terminal and descriptor ioctls (TCGETS, FIONBIO, FIOCLEX, TIOCGWINSZ), but not \
                 TIOCSTI or TIOCLINUX (typing into a terminal someone else reads) nor TIOCSETD \
                 (line disciplines: a staple of kernel exploits)",
        allow: ArgRule::Refused {
            arg: 1,
            values: &[libc::TIOCSTI as u32, libc::TIOCLINUX as u32, libc::TIOCSETD as u32],
        },
        with_network: None,
    },
    Filtered {
        syscall: sys!(SYS_prctl),
        reason: "the options in PRCTL_OPTIONS, each binding only the caller",
        allow: ArgRule::Allowed { arg: 0, mask: ALL, values: PRCTL_OPTIONS },
        with_network: None,
    },
    Filtered {
        syscall: sys!(SYS_personality),
        reason: "query (0xffffffff) or PER_LINUX only: other personalities switch off ASLR or \
                 make readable memory executable",
        allow: ArgRule::Allowed { arg: 0, mask: ALL, values: &[0, 0xffff_ffff] },
        with_network: None,
    },
    Filtered {
        syscall: sys!(SYS_madvise),
        reason: "memory advice (malloc trims with it), but not MADV_HWPOISON or \
                 MADV_SOFT_OFFLINE: with CAP_SYS_ADMIN they take physical pages offline",
        allow: ArgRule::Refused {
            arg: 2,
            values: &[libc::MADV_HWPOISON as u32, libc::MADV_SOFT_OFFLINE as u32],
        },
        with_network: None,
    },
    Filtered {
        syscall: sys!(SYS_prlimit64),
        reason: "the caller's own limits (pid 0, as glibc and bash pass): never another \
                 process's, which real root could change (the server's, the zygote's)",
        allow: ArgRule::Allowed { arg: 0, mask: ALL, values: &[0] },
        with_network: None,
    },
    Filtered {
        syscall: sys!(SYS_setpriority),
        reason: "nice of the caller (PRIO_PROCESS, 0), as nice(1) and os.nice do: never \
                 another process's, which real root could renice",
        allow: ArgRule::Alternatives(&[&[(0, ALL, PRIO_PROCESS), (1, ALL, 0)]]),
        with_network: None,
    },
    Filtered {
        syscall: sys!(SYS_mknodat),
        reason: "FIFOs, sockets and regular files (mkfifo), never device nodes",
        allow: ArgRule::Allowed { arg: 2, mask: libc::S_IFMT, values: MKNOD_TYPES },
        with_network: None,
    },
    Filtered {
        syscall: sys!(SYS_fchmod),
        reason: "no set-user-ID or set-group-ID bit: Landlock does not check chmod, so a \
                 session running as real root could make any host binary set-user-ID",
        allow: NO_SET_ID,
        with_network: None,
    },
    Filtered {
        syscall: sys!(SYS_fchmodat),
        reason: "as fchmod",
        allow: NO_SET_ID_AT,
        with_network: None,
    },
    // chmod of a symbolic link itself (glibc 2.39+, falling back to fchmodat); libc 0.2.191 does
    // not name it yet, and syscalls from 424 on have the same number on every architecture.
    Filtered {
        syscall: sys!(SYS_fchmodat2 = 452),
        reason: "as fchmod",
        allow: NO_SET_ID_AT,
        with_network: None,
    },
    #[cfg(target_arch = "x86_64")]
    Filtered {
        syscall: sys!(SYS_chmod),
        reason: "as fchmod",
        allow: NO_SET_ID,
        with_network: None,
    },
    #[cfg(target_arch = "x86_64")]
    Filtered {
        syscall: sys!(SYS_mknod),
        reason: "as mknodat",
        allow: ArgRule::Allowed { arg: 1, mask: libc::S_IFMT, values: MKNOD_TYPES },
        with_network: None,
    },
];

/// A syscall refused whatever its arguments, and why.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct Denied {
    /// The syscall number on the build's architecture.
    pub(crate) number: libc::c_long,
    /// Its name, for tests and reports.
    pub(crate) name: &'static str,
    /// Why no session needs it, or what it would be abused for.
    pub(crate) reason: &'static str,
}

/// `denied!(SYS_name, "reason")`.
macro_rules! denied {
    ($name:ident, $reason:literal) => {
        Denied {
            number: libc::$name,
            name: stringify!($name),
            reason: $reason,
        }
    };
}

/// Refused with `EPERM` (Python's `PermissionError`) rather than the default `ENOSYS`: the
/// well-known routes to a kernel exploit or to the host, named so that a caller learns "not
/// permitted" instead of "not implemented" and so that the tests can prove each refusal.
#[rustfmt::skip]
pub(crate) const DENIED: &[Denied] = &[
    // Reading or steering another process.
    denied!(SYS_ptrace, "attach to and rewrite another process (the zygote, a sibling session)"),
    denied!(SYS_process_vm_readv, "read another process's memory"),
    denied!(SYS_process_vm_writev, "write another process's memory"),
    denied!(SYS_pidfd_getfd, "steal a file descriptor from another process"),
    denied!(SYS_process_madvise, "influence another process's memory management"),
    denied!(SYS_kcmp, "compare kernel objects of two processes: kernel pointer ordering leaks"),
    // Changing the filesystem view: the session's mounts are fixed by the supervisor.
    denied!(SYS_mount, "mount over Landlock-checked paths or remount read-only ones writable"),
    denied!(SYS_umount2, "unmount the supervisor's private mounts and reveal what lies beneath"),
    denied!(SYS_pivot_root, "replace the root filesystem"),
    denied!(SYS_chroot, "change root: needless for a session, a classic escape ingredient"),
    denied!(SYS_open_tree, "new mount API: clone a mount, same power as mount(2)"),
    denied!(SYS_move_mount, "new mount API: attach a mount, same power as mount(2)"),
    denied!(SYS_fsopen, "new mount API: create a filesystem context"),
    denied!(SYS_fsconfig, "new mount API: configure a filesystem context"),
    denied!(SYS_fsmount, "new mount API: create a mount from a context"),
    denied!(SYS_fspick, "new mount API: reconfigure an existing superblock"),
    denied!(SYS_mount_setattr, "new mount API: change mount flags (e.g. drop read-only)"),
    // Namespaces: the supervisor chose them; new ones expose more kernel surface.
    denied!(SYS_unshare, "new namespaces (a user namespace grants capabilities inside it)"),
    denied!(SYS_setns, "join another process's namespaces"),
    // Large kernel attack surfaces that no notebook code needs.
    denied!(SYS_bpf, "load eBPF programs: a frequent kernel-exploit vector"),
    denied!(SYS_io_uring_setup, "io_uring: bypasses seccomp for the operations it performs"),
    denied!(SYS_io_uring_enter, "io_uring: bypasses seccomp for the operations it performs"),
    denied!(SYS_io_uring_register, "io_uring: bypasses seccomp for the operations it performs"),
    denied!(SYS_perf_event_open, "performance counters: side channels and kernel bugs"),
    denied!(SYS_userfaultfd, "stall the kernel mid-copy: a staple of race exploits"),
    denied!(SYS_keyctl, "kernel keyrings are not namespaced: other tenants' keys"),
    denied!(SYS_add_key, "kernel keyrings are not namespaced"),
    denied!(SYS_request_key, "kernel keyrings are not namespaced"),
    denied!(SYS_open_by_handle_at, "open any inode by handle, bypassing path checks (shocker)"),
    denied!(SYS_name_to_handle_at, "produce handles for open_by_handle_at"),
    denied!(SYS_fanotify_init, "watch filesystem events of the whole host"),
    denied!(SYS_syslog, "read the kernel log: addresses, other tenants' messages"),
    denied!(SYS_lookup_dcookie, "oprofile: resolve kernel cookies to paths"),
    // Scheduling classes: real-time priority binds no root process by rlimit.
    denied!(SYS_sched_setscheduler, "real-time priority: real root could starve the host"),
    denied!(SYS_sched_setparam, "as sched_setscheduler"),
    denied!(SYS_sched_setattr, "as sched_setscheduler (and deadline scheduling)"),
    // The machine itself.
    denied!(SYS_kexec_load, "boot another kernel"),
    denied!(SYS_kexec_file_load, "boot another kernel"),
    denied!(SYS_init_module, "load a kernel module"),
    denied!(SYS_finit_module, "load a kernel module"),
    denied!(SYS_delete_module, "unload a kernel module"),
    denied!(SYS_reboot, "reboot or halt the host"),
    denied!(SYS_swapon, "add swap: host-wide memory behaviour"),
    denied!(SYS_swapoff, "remove swap"),
    denied!(SYS_acct, "switch process accounting on the host"),
    denied!(SYS_quotactl, "change disk quotas"),
    denied!(SYS_quotactl_fd, "change disk quotas"),
    denied!(SYS_settimeofday, "set the host clock (the clock is not namespaced)"),
    denied!(SYS_clock_settime, "set the host clock"),
    denied!(SYS_clock_adjtime, "steer the host clock"),
    denied!(SYS_adjtimex, "steer the host clock"),
    #[cfg(target_arch = "x86_64")]
    denied!(SYS_iopl, "raw I/O port access"),
    #[cfg(target_arch = "x86_64")]
    denied!(SYS_ioperm, "raw I/O port access"),
];

/// Writing extended attributes, refused with `EOPNOTSUPP` ("this filesystem has none"): Landlock
/// does not check them, so any path the session can name would do (`security.capability` on a
/// host binary, `trusted.*` on overlayfs, ACLs of host files, for a session running as real root).
/// `EOPNOTSUPP` because it is the answer every copier handles: coreutils' `cp -p`/`cp -a` (through
/// libacl) fall back to `chmod` on it (and on `ENOSYS`, but fail on `EPERM`), Python's
/// `shutil.copy2` skips the attribute on it (and on `EPERM`, but raises on `ENOSYS`).
#[rustfmt::skip]
pub(crate) const ANSWERED_EOPNOTSUPP: &[Denied] = &[
    denied!(SYS_setxattr, "security.capability on a host binary, trusted.* on overlayfs"),
    denied!(SYS_lsetxattr, "as setxattr"),
    denied!(SYS_fsetxattr, "as setxattr (cp -p sets system.posix_acl_access with it)"),
    denied!(SYS_removexattr, "strip security labels or ACLs from host files"),
    denied!(SYS_lremovexattr, "as removexattr"),
    denied!(SYS_fremovexattr, "as removexattr"),
];

/// Refused with `ENOSYS` on purpose (as every syscall on no list is), named here because the
/// answer matters: glibc's `pthread_create` and `posix_spawn` try `clone3` first and fall back to
/// `clone` on `ENOSYS` only. `clone3` takes its flags in a struct in memory, which BPF
/// cannot read, so namespace flags could not be refused; `clone`'s are in a register.
pub(crate) const ANSWERED_ENOSYS: &[Denied] = &[denied!(
    SYS_clone3,
    "flags in memory, beyond seccomp's reach; glibc falls back to clone"
)];

#[cfg(test)]
mod tests;
