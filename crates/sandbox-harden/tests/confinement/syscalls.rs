//! The seccomp allow-list, called through ctypes as hostile code would: refused syscalls answer
//! `EPERM`, extended-attribute writes `EOPNOTSUPP`, syscalls on no list `ENOSYS`,
//! argument-filtered ones refuse only what their rule names. Every call's arguments are chosen
//! so that it is harmless when NOT filtered, because the controls run the same calls unconfined.

use serde_json::{Map, Value, json};

use crate::{Session, is_root, run_hardened, run_plain, succeeded};

/// Runs each `name: [number, [args...]]` as a raw syscall and prints `name: errno` (0 for
/// success). A string argument is passed as a C string, anything else as a `long`.
const RAW_SYSCALLS: &str = r#"
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def arg(a):
    return ctypes.c_char_p(a.encode()) if isinstance(a, str) else ctypes.c_long(a)
def call(number, *args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(number), *[arg(a) for a in args])
    return ctypes.get_errno() if result == -1 else 0
print(json.dumps({name: call(number, *args) for name, (number, args) in P["calls"].items()}))
"#;

/// The errno of each call, hardened with `network` (or unconfined for `None`).
fn errnos(network: Option<bool>, calls: &Map<String, Value>) -> Map<String, Value> {
    let params = json!({ "calls": calls });
    let stdout = match network {
        Some(network) => {
            let session = Session::new();
            succeeded(run_hardened(&session.spec(network), RAW_SYSCALLS, &params))
        }
        None => succeeded(run_plain(RAW_SYSCALLS, &params)),
    };
    serde_json::from_str(&stdout).unwrap()
}

/// `calls` as a JSON object.
fn calls(entries: &[(&str, libc::c_long, Value)]) -> Map<String, Value> {
    entries
        .iter()
        .map(|(name, number, args)| ((*name).to_owned(), json!([number, args])))
        .collect()
}

/// Asserts that every call answered `expected` hardened, and that the unconfined control of
/// those in `controls` answered something else (so the answer is the filter's).
fn assert_refused(
    entries: &[(&str, libc::c_long, Value)],
    network: bool,
    expected: i32,
    controls: &[&str],
) {
    let calls = calls(entries);
    let hardened = errnos(Some(network), &calls);
    let plain = errnos(None, &calls);
    for name in calls.keys() {
        eprintln!(
            "{name:>22}: hardened {} / unconfined {}",
            hardened[name], plain[name]
        );
        assert_eq!(hardened[name], json!(expected), "{name}");
    }
    for name in controls {
        assert_ne!(plain[*name], hardened[*name], "{name}: the control too");
    }
}

const NOWHERE: &str = "/nonexistent/toolgate";

#[test]
fn dangerous_syscalls_answer_eperm() {
    let entries = [
        // ptrace(PTRACE_GETSIGINFO, self): ESRCH when allowed (not traced).
        (
            "ptrace",
            libc::SYS_ptrace,
            json!([libc::PTRACE_GETSIGINFO, 0, 0, 0]),
        ),
        (
            "process_vm_readv",
            libc::SYS_process_vm_readv,
            json!([0, 0, 0, 0, 0, 0]),
        ),
        (
            "process_vm_writev",
            libc::SYS_process_vm_writev,
            json!([0, 0, 0, 0, 0, 0]),
        ),
        ("pidfd_getfd", libc::SYS_pidfd_getfd, json!([-1, 0, 0])),
        // kcmp of pid 0 (no such process): ESRCH when allowed.
        ("kcmp", libc::SYS_kcmp, json!([0, 0, 1, 0, 0])),
        ("unshare", libc::SYS_unshare, json!([0])),
        ("setns", libc::SYS_setns, json!([-1, 0])),
        ("mount", libc::SYS_mount, json!([0, 0, 0, 0, 0])),
        ("umount2", libc::SYS_umount2, json!([0, 0])),
        ("pivot_root", libc::SYS_pivot_root, json!([0, 0])),
        ("chroot", libc::SYS_chroot, json!([NOWHERE])),
        ("open_tree", libc::SYS_open_tree, json!([-1, 0, -1])),
        (
            "fsopen",
            libc::SYS_fsopen,
            json!(["toolgate-no-such-fs", 0]),
        ),
        ("bpf", libc::SYS_bpf, json!([-1, 0, 0])),
        ("io_uring_setup", libc::SYS_io_uring_setup, json!([1, 0])),
        (
            "io_uring_enter",
            libc::SYS_io_uring_enter,
            json!([-1, 0, 0, 0, 0, 0]),
        ),
        (
            "perf_event_open",
            libc::SYS_perf_event_open,
            json!([0, 0, -1, -1, 0]),
        ),
        ("keyctl", libc::SYS_keyctl, json!([-1, 0, 0, 0, 0])),
        ("add_key", libc::SYS_add_key, json!([0, 0, 0, 0, 0])),
        ("userfaultfd", libc::SYS_userfaultfd, json!([-1])),
        (
            "open_by_handle_at",
            libc::SYS_open_by_handle_at,
            json!([-1, 0, 0]),
        ),
        ("fanotify_init", libc::SYS_fanotify_init, json!([-1, 0])),
        // SYSLOG_ACTION_SIZE_BUFFER: the log's size when allowed.
        ("syslog", libc::SYS_syslog, json!([10, 0, 0])),
        // SCHED_OTHER without a parameter: EINVAL when allowed.
        (
            "sched_setscheduler",
            libc::SYS_sched_setscheduler,
            json!([0, 0, 0]),
        ),
        ("init_module", libc::SYS_init_module, json!([0, 0, 0])),
        ("finit_module", libc::SYS_finit_module, json!([-1, 0, 0])),
        ("delete_module", libc::SYS_delete_module, json!([0, 0])),
        ("kexec_load", libc::SYS_kexec_load, json!([0, 0, 0, -1])),
        // A wrong magic number: EINVAL when allowed.
        ("reboot", libc::SYS_reboot, json!([0, 0, 0, 0])),
        ("swapoff", libc::SYS_swapoff, json!([0])),
        ("acct", libc::SYS_acct, json!([NOWHERE])),
        ("clock_settime", libc::SYS_clock_settime, json!([-1, 0])),
        // clone with a namespace flag (and an invalid combination: EINVAL when allowed).
        (
            "clone_newuser",
            libc::SYS_clone,
            json!([libc::CLONE_NEWUSER | libc::CLONE_FS, 0, 0, 0, 0]),
        ),
    ];
    let controls = [
        "bpf",
        "mount",
        "io_uring_setup",
        "clone_newuser",
        "reboot",
        "kcmp",
        "syslog",
        "fsopen",
        "sched_setscheduler",
    ];
    assert_refused(&entries, false, libc::EPERM, &controls);
}

#[test]
fn extended_attribute_writes_answer_eopnotsupp_as_on_a_filesystem_without_them() {
    // Not EPERM: cp -p and cp -a (through libacl) fail on it; not ENOSYS: shutil.copy2 raises.
    let entries = [
        (
            "setxattr",
            libc::SYS_setxattr,
            json!([NOWHERE, "user.toolgate", 0, 0, 0]),
        ),
        (
            "lsetxattr",
            libc::SYS_lsetxattr,
            json!([NOWHERE, "user.toolgate", 0, 0, 0]),
        ),
        (
            "fsetxattr",
            libc::SYS_fsetxattr,
            json!([-1, "user.toolgate", 0, 0, 0]),
        ),
        (
            "removexattr",
            libc::SYS_removexattr,
            json!([NOWHERE, "user.toolgate"]),
        ),
        (
            "lremovexattr",
            libc::SYS_lremovexattr,
            json!([NOWHERE, "user.toolgate"]),
        ),
        (
            "fremovexattr",
            libc::SYS_fremovexattr,
            json!([-1, "user.toolgate"]),
        ),
    ];
    let controls = ["setxattr", "fsetxattr", "removexattr"];
    assert_refused(&entries, false, libc::EOPNOTSUPP, &controls);
}

#[test]
fn syscalls_on_no_list_answer_enosys_so_libraries_fall_back() {
    let entries = [
        // clone3's flags are in memory, out of the filter's reach: ENOSYS makes glibc use clone.
        ("clone3", libc::SYS_clone3, json!([0, 0])),
        // Harmless and unused by the traced workload: EFAULT, a descriptor, EBADF when allowed.
        (
            "get_robust_list",
            libc::SYS_get_robust_list,
            json!([0, 0, 0]),
        ),
        ("inotify_init1", libc::SYS_inotify_init1, json!([0])),
        ("io_setup", libc::SYS_io_setup, json!([1, 0])),
        ("vmsplice", libc::SYS_vmsplice, json!([-1, 0, 0, 0])),
        // A number no kernel has yet.
        ("future", 1000, json!([])),
        // The x32 ABI's getpid (x86_64 numbers with bit 30 set): on no list either. (The kernel
        // here has x32 disabled, so the control answers ENOSYS too.)
        ("x32_getpid", libc::SYS_getpid | 0x4000_0000, json!([])),
    ];
    let controls = ["clone3", "get_robust_list", "inotify_init1", "io_setup"];
    assert_refused(&entries, false, libc::ENOSYS, &controls);
}

/// `TIOCSTI` with garbage in the high half, which the kernel drops (`cmd` is an `unsigned int`).
const TIOCSTI_HIGH: i64 = libc::TIOCSTI as i64 | 1 << 32;

#[test]
fn argument_filters_refuse_only_what_they_name() {
    let at = libc::AT_FDCWD;
    let char_device = libc::S_IFCHR | 0o600;
    // Refused: EPERM hardened; the controls are the harmless ones to run unconfined.
    let refused = [
        (
            "socket_inet",
            libc::SYS_socket,
            json!([libc::AF_INET, libc::SOCK_STREAM, 0]),
        ),
        (
            "socket_netlink",
            libc::SYS_socket,
            json!([libc::AF_NETLINK, libc::SOCK_RAW, 0]),
        ),
        (
            "socketpair_inet",
            libc::SYS_socketpair,
            json!([libc::AF_INET, libc::SOCK_STREAM, 0, 0]),
        ),
        (
            "ioctl_tiocsti",
            libc::SYS_ioctl,
            json!([-1, libc::TIOCSTI, 0]),
        ),
        (
            "ioctl_tiocsti_high",
            libc::SYS_ioctl,
            json!([-1, TIOCSTI_HIGH, 0]),
        ),
        (
            "ioctl_tioclinux",
            libc::SYS_ioctl,
            json!([-1, libc::TIOCLINUX, 0]),
        ),
        (
            "ioctl_tiocsetd",
            libc::SYS_ioctl,
            json!([-1, libc::TIOCSETD, 0]),
        ),
        // PR_SET_MM with an invalid sub-option; PR_MCE_KILL_GET: 0 when allowed.
        (
            "prctl_set_mm",
            libc::SYS_prctl,
            json!([libc::PR_SET_MM, 0xffff, 0, 0, 0]),
        ),
        (
            "prctl_mce_kill_get",
            libc::SYS_prctl,
            json!([libc::PR_MCE_KILL_GET, 0, 0, 0, 0]),
        ),
        (
            "personality_no_aslr",
            libc::SYS_personality,
            json!([libc::ADDR_NO_RANDOMIZE]),
        ),
        // An empty range: 0 when allowed (no page is poisoned).
        (
            "madvise_hwpoison",
            libc::SYS_madvise,
            json!([0, 0, libc::MADV_HWPOISON]),
        ),
        // Another process's limits (read only, NULL new limit): 0 when allowed.
        (
            "prlimit_pid1",
            libc::SYS_prlimit64,
            json!([1, libc::RLIMIT_NOFILE, 0, 0]),
        ),
        // Every process of a uid that has none: ESRCH when allowed.
        (
            "setpriority_user",
            libc::SYS_setpriority,
            json!([libc::PRIO_USER, -2, 0]),
        ),
        (
            "mknodat_char",
            libc::SYS_mknodat,
            json!([at, NOWHERE, char_device, 0x103]),
        ),
        (
            "fchmodat_setuid",
            libc::SYS_fchmodat,
            json!([at, NOWHERE, 0o4755]),
        ),
        (
            "fchmodat_setgid",
            libc::SYS_fchmodat,
            json!([at, NOWHERE, 0o2755]),
        ),
        ("fchmod_setuid", libc::SYS_fchmod, json!([-1, 0o4755])),
    ];
    let controls = [
        "socket_netlink",
        "ioctl_tiocsti",
        "ioctl_tiocsti_high",
        "prctl_mce_kill_get",
        "prlimit_pid1",
        "setpriority_user",
        "mknodat_char",
        "fchmodat_setuid",
    ];
    assert_refused(&refused, false, libc::EPERM, &controls);

    // Allowed: the kernel's own answer, the same as unconfined.
    let allowed = calls(&[
        (
            "socket_unix",
            libc::SYS_socket,
            json!([libc::AF_UNIX, libc::SOCK_STREAM, 0]),
        ),
        (
            "ioctl_fionbio",
            libc::SYS_ioctl,
            json!([-1, libc::FIONBIO, 0]),
        ),
        (
            "ioctl_tcgets",
            libc::SYS_ioctl,
            json!([-1, libc::TCGETS, 0]),
        ),
        (
            "prctl_get_nnp",
            libc::SYS_prctl,
            json!([libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0]),
        ),
        (
            "personality_query",
            libc::SYS_personality,
            json!([0xffff_ffff_u32]),
        ),
        (
            "madvise_normal",
            libc::SYS_madvise,
            json!([0, 0, libc::MADV_NORMAL]),
        ),
        (
            "prlimit_self",
            libc::SYS_prlimit64,
            json!([0, libc::RLIMIT_NOFILE, 0, 0]),
        ),
        (
            "setpriority_self",
            libc::SYS_setpriority,
            json!([libc::PRIO_PROCESS, 0, 0]),
        ),
        (
            "mknodat_fifo",
            libc::SYS_mknodat,
            json!([at, NOWHERE, libc::S_IFIFO | 0o600, 0]),
        ),
        (
            "fchmodat_plain",
            libc::SYS_fchmodat,
            json!([at, NOWHERE, 0o1777]),
        ),
        // clone without a namespace flag reaches the kernel (EINVAL: CLONE_FS without CLONE_VM
        // is fine, CLONE_SIGHAND without CLONE_VM is not).
        (
            "clone_invalid",
            libc::SYS_clone,
            json!([libc::CLONE_SIGHAND, 0, 0, 0, 0]),
        ),
    ]);
    let hardened = errnos(Some(false), &allowed);
    let plain = errnos(None, &allowed);
    for name in allowed.keys() {
        assert_eq!(hardened[name], plain[name], "{name}: hardened / unconfined");
    }
}

#[test]
fn with_network_only_tcp_and_udp_inet_sockets_are_added() {
    let inet = |domain: i32, kind: i32| {
        // A raw socket needs a protocol (EPROTONOSUPPORT without one, filtered or not).
        let protocol = if kind == libc::SOCK_RAW && domain == libc::AF_INET {
            libc::IPPROTO_ICMP
        } else {
            0
        };
        json!([domain, kind | libc::SOCK_CLOEXEC, protocol])
    };
    let entries = calls(&[
        (
            "inet_stream",
            libc::SYS_socket,
            inet(libc::AF_INET, libc::SOCK_STREAM),
        ),
        (
            "inet_dgram",
            libc::SYS_socket,
            inet(libc::AF_INET, libc::SOCK_DGRAM),
        ),
        (
            "inet6_stream",
            libc::SYS_socket,
            inet(libc::AF_INET6, libc::SOCK_STREAM),
        ),
        (
            "inet6_dgram",
            libc::SYS_socket,
            inet(libc::AF_INET6, libc::SOCK_DGRAM),
        ),
        (
            "inet_raw",
            libc::SYS_socket,
            inet(libc::AF_INET, libc::SOCK_RAW),
        ),
        (
            "inet_seqpacket",
            libc::SYS_socket,
            inet(libc::AF_INET, libc::SOCK_SEQPACKET),
        ),
        (
            "packet",
            libc::SYS_socket,
            inet(libc::AF_PACKET, libc::SOCK_RAW),
        ),
        (
            "netlink",
            libc::SYS_socket,
            inet(libc::AF_NETLINK, libc::SOCK_RAW),
        ),
    ]);
    let hardened = errnos(Some(true), &entries);
    let plain = errnos(None, &entries);
    for (name, expected) in [
        ("inet_stream", 0),
        ("inet_dgram", 0),
        ("inet6_stream", 0),
        ("inet6_dgram", 0),
        ("inet_raw", libc::EPERM),
        ("inet_seqpacket", libc::EPERM),
        ("packet", libc::EPERM),
        ("netlink", libc::EPERM),
    ] {
        assert_eq!(hardened[name], json!(expected), "{name}");
    }
    // Root creates raw and packet sockets unconfined: the refusals above are the filter's.
    if is_root() {
        assert_eq!(plain["inet_raw"], json!(0));
        assert_eq!(plain["packet"], json!(0));
    }
}
