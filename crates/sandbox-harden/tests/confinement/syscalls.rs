//! The seccomp deny-list, called through ctypes as hostile code would.

use serde_json::{Value, json};

use crate::{Session, run_hardened, run_plain, succeeded};

#[test]
fn dangerous_syscalls_answer_eperm() {
    // Arguments are chosen so that each call is harmless when it is NOT filtered (the control).
    let code = r#"
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(number, *args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    return (result, ctypes.get_errno() if result == -1 else 0)
results = {}
for name, (number, args) in P["calls"].items():
    results[name] = call(number, *args)
print(json.dumps(results))
"#;
    let getpid = libc::SYS_getpid;
    let calls = json!({
        // ptrace(PTRACE_GETREGS, self): ESRCH when allowed (not traced).
        "ptrace": [libc::SYS_ptrace, [libc::PTRACE_GETREGS, 0, 0, 0]],
        "process_vm_readv": [libc::SYS_process_vm_readv, [0, 0, 0, 0, 0, 0]],
        "unshare": [libc::SYS_unshare, [0]],
        "setns": [libc::SYS_setns, [-1, 0]],
        "mount": [libc::SYS_mount, [0, 0, 0, 0, 0]],
        "umount2": [libc::SYS_umount2, [0, 0]],
        "pivot_root": [libc::SYS_pivot_root, [0, 0]],
        "bpf": [libc::SYS_bpf, [-1, 0, 0]],
        "io_uring_setup": [libc::SYS_io_uring_setup, [1, 0]],
        "io_uring_enter": [libc::SYS_io_uring_enter, [-1, 0, 0, 0, 0, 0]],
        "perf_event_open": [libc::SYS_perf_event_open, [0, 0, -1, -1, 0]],
        "keyctl": [libc::SYS_keyctl, [-1, 0, 0, 0, 0]],
        "add_key": [libc::SYS_add_key, [0, 0, 0, 0, 0]],
        "userfaultfd": [libc::SYS_userfaultfd, [-1]],
        "open_by_handle_at": [libc::SYS_open_by_handle_at, [-1, 0, 0]],
        "init_module": [libc::SYS_init_module, [0, 0, 0]],
        "finit_module": [libc::SYS_finit_module, [-1, 0, 0]],
        "delete_module": [libc::SYS_delete_module, [0, 0]],
        "kexec_load": [libc::SYS_kexec_load, [0, 0, 0, -1]],
        // A wrong magic number: EINVAL when allowed.
        "reboot": [libc::SYS_reboot, [0, 0, 0, 0]],
        "swapoff": [libc::SYS_swapoff, [0]],
        "clock_settime": [libc::SYS_clock_settime, [-1, 0]],
        "open_tree": [libc::SYS_open_tree, [-1, 0, -1]],
        // clone with a namespace flag (and an invalid combination, EINVAL when allowed).
        "clone_newuser": [libc::SYS_clone, [libc::CLONE_NEWUSER | libc::CLONE_FS, 0, 0, 0, 0]],
        "clone3": [libc::SYS_clone3, [0, 0]],
        // The x32 ABI's getpid: ENOSYS without the guard on this kernel (x32 disabled).
        "x32_getpid": [getpid | 0x4000_0000, []],
    });
    let params = json!({ "calls": calls });
    let session = Session::new();
    let hardened: Value = serde_json::from_str(&succeeded(run_hardened(
        &session.spec(false),
        code,
        &params,
    )))
    .unwrap();
    let plain: Value = serde_json::from_str(&succeeded(run_plain(code, &params))).unwrap();

    let eperm = json!([-1, libc::EPERM]);
    for name in calls.as_object().unwrap().keys() {
        eprintln!(
            "{name:>18}: hardened {} / unconfined {}",
            hardened[name], plain[name]
        );
        let expected = if name == "clone3" {
            // ENOSYS, so that glibc falls back to clone, whose flags the filter can read.
            json!([-1, libc::ENOSYS])
        } else {
            eperm.clone()
        };
        assert_eq!(
            hardened[name], expected,
            "{name}: hardened {} (unconfined {})",
            hardened[name], plain[name]
        );
    }
    // The controls: without the filter these fail differently (or succeed), so the EPERMs above
    // are the filter's.
    for name in [
        "bpf",
        "mount",
        "io_uring_setup",
        "clone_newuser",
        "clone3",
        "reboot",
    ] {
        assert_ne!(
            plain[name], hardened[name],
            "{name} unconfined: {}",
            plain[name]
        );
    }
}
