//! The reviewed policy data: which syscalls the seccomp filter refuses and why, and which Landlock
//! ABI the rules are written for. Every entry names who would otherwise abuse it; a change here is
//! a security change and should be reviewed as one.

use landlock::ABI;

/// The Landlock ABI whose rights the ruleset asks for. ABI 7 (Linux 6.15) is what the project's
/// machines run and what the tests prove; its rights are those of ABI 5 (filesystem, including
/// `IOCTL_DEV`) and ABI 4 (TCP bind/connect) plus ABI 6's scopes (signals and abstract UNIX
/// sockets). ABI 9 adds `RESOLVE_UNIX` (connecting to pathname UNIX sockets): raise this after
/// testing on a kernel that has it. On an older kernel the crate drops what the kernel lacks
/// (best effort) and [`crate::HardenReport`] says so.
pub(crate) const LANDLOCK_ABI: ABI = ABI::V7;

/// A syscall refused with `EPERM` whatever its arguments, and why. `name` and `reason` are read
/// by reviewers and checked by the unit tests; only `number` reaches the filter.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct Denied {
    /// The syscall number on the build's architecture.
    pub(crate) number: libc::c_long,
    /// Its name, for tests and reports.
    pub(crate) name: &'static str,
    /// Why no session needs it, or what it would be abused for.
    pub(crate) reason: &'static str,
}

/// Shorthand for a table entry.
macro_rules! denied {
    ($name:ident, $reason:literal) => {
        Denied {
            number: libc::$name,
            name: stringify!($name),
            reason: $reason,
        }
    };
}

/// Syscalls refused outright. Everything not listed is allowed (see the crate docs for why this
/// is a deny-list). Argument-filtered rules (`clone`, `socket`) and `clone3` are in
/// [`crate::seccomp_filter`].
pub(crate) const DENIED: &[Denied] = &[
    // Reading or steering another process.
    denied!(
        SYS_ptrace,
        "attach to and rewrite another process (the zygote, a sibling session)"
    ),
    denied!(SYS_process_vm_readv, "read another process's memory"),
    denied!(SYS_process_vm_writev, "write another process's memory"),
    denied!(
        SYS_pidfd_getfd,
        "steal a file descriptor from another process"
    ),
    denied!(
        SYS_process_madvise,
        "influence another process's memory management"
    ),
    // Changing the filesystem view: the session's mounts are fixed by the supervisor.
    denied!(
        SYS_mount,
        "mount over Landlock-checked paths or remount read-only ones writable"
    ),
    denied!(
        SYS_umount2,
        "unmount the supervisor's private mounts and reveal what lies beneath"
    ),
    denied!(SYS_pivot_root, "replace the root filesystem"),
    denied!(
        SYS_chroot,
        "change root: needless for a session, a classic escape ingredient"
    ),
    denied!(
        SYS_open_tree,
        "new mount API: clone a mount, same power as mount(2)"
    ),
    denied!(
        SYS_move_mount,
        "new mount API: attach a mount, same power as mount(2)"
    ),
    denied!(SYS_fsopen, "new mount API: create a filesystem context"),
    denied!(
        SYS_fsconfig,
        "new mount API: configure a filesystem context"
    ),
    denied!(SYS_fsmount, "new mount API: create a mount from a context"),
    denied!(
        SYS_fspick,
        "new mount API: reconfigure an existing superblock"
    ),
    denied!(
        SYS_mount_setattr,
        "new mount API: change mount flags (e.g. drop read-only)"
    ),
    // Namespaces: the supervisor chose them; new ones expose more kernel surface.
    denied!(
        SYS_unshare,
        "new namespaces (a user namespace grants capabilities inside it)"
    ),
    denied!(SYS_setns, "join another process's namespaces"),
    // Large kernel attack surfaces that no notebook code needs.
    denied!(
        SYS_bpf,
        "load eBPF programs: a frequent kernel-exploit vector"
    ),
    denied!(
        SYS_io_uring_setup,
        "io_uring: bypasses seccomp for the operations it performs"
    ),
    denied!(
        SYS_io_uring_enter,
        "io_uring: bypasses seccomp for the operations it performs"
    ),
    denied!(
        SYS_io_uring_register,
        "io_uring: bypasses seccomp for the operations it performs"
    ),
    denied!(
        SYS_perf_event_open,
        "performance counters: side channels and kernel bugs"
    ),
    denied!(
        SYS_userfaultfd,
        "stall the kernel mid-copy: a staple of race exploits"
    ),
    denied!(
        SYS_keyctl,
        "kernel keyrings are not namespaced: other tenants' keys"
    ),
    denied!(SYS_add_key, "kernel keyrings are not namespaced"),
    denied!(SYS_request_key, "kernel keyrings are not namespaced"),
    denied!(
        SYS_open_by_handle_at,
        "open any inode by handle, bypassing path checks (shocker)"
    ),
    denied!(
        SYS_name_to_handle_at,
        "produce handles for open_by_handle_at"
    ),
    denied!(
        SYS_fanotify_init,
        "watch filesystem events of the whole host"
    ),
    denied!(
        SYS_syslog,
        "read the kernel log: addresses, other tenants' messages"
    ),
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
    denied!(
        SYS_settimeofday,
        "set the host clock (the clock is not namespaced)"
    ),
    denied!(SYS_clock_settime, "set the host clock"),
    denied!(SYS_clock_adjtime, "steer the host clock"),
    denied!(SYS_adjtimex, "steer the host clock"),
    #[cfg(target_arch = "x86_64")]
    denied!(SYS_iopl, "raw I/O port access"),
    #[cfg(target_arch = "x86_64")]
    denied!(SYS_ioperm, "raw I/O port access"),
];

/// `CLONE_NEW*` flags refused in `clone(2)`'s first argument: creating namespaces by `clone`
/// instead of `unshare`. (`CLONE_NEWTIME` is not listed: `clone` reads that bit as part of the
/// exit signal; only `clone3` and `unshare` accept it, and both are refused.)
pub(crate) const CLONE_NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
];
