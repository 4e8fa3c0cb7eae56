//! Checks of the policy tables that need no kernel: every entry justified, no syscall on two
//! lists, argument rules that can match, and the programs within the kernel's limits. What the
//! kernel makes of them is proven by `tests/confinement/syscalls.rs`.

use std::collections::BTreeMap;

use super::*;
use crate::seccomp_filter;
use crate::spec::Net;

/// Every syscall the tables name, with the list it is on.
fn every_entry() -> Vec<(libc::c_long, &'static str, &'static str)> {
    let allowed = ALLOWED
        .iter()
        .flat_map(|group| group.syscalls)
        .map(|syscall| (syscall.number, syscall.name, "ALLOWED"));
    let filtered = FILTERED
        .iter()
        .map(|filtered| (filtered.syscall.number, filtered.syscall.name, "FILTERED"));
    let denied = DENIED
        .iter()
        .map(|denied| (denied.number, denied.name, "DENIED"));
    let eopnotsupp = ANSWERED_EOPNOTSUPP
        .iter()
        .map(|denied| (denied.number, denied.name, "ANSWERED_EOPNOTSUPP"));
    let enosys = ANSWERED_ENOSYS
        .iter()
        .map(|denied| (denied.number, denied.name, "ANSWERED_ENOSYS"));
    allowed
        .chain(filtered)
        .chain(denied)
        .chain(eopnotsupp)
        .chain(enosys)
        .collect()
}

#[test]
fn no_syscall_is_on_two_lists_or_twice_on_one() {
    let mut seen: BTreeMap<libc::c_long, (&str, &str)> = BTreeMap::new();
    for (number, name, list) in every_entry() {
        if let Some((other_name, other_list)) = seen.insert(number, (name, list)) {
            panic!("{name} ({list}) and {other_name} ({other_list}) are both syscall {number}");
        }
    }
}

#[test]
fn every_entry_is_justified() {
    for group in ALLOWED {
        assert!(!group.reason.is_empty() && !group.syscalls.is_empty());
    }
    for filtered in FILTERED {
        assert!(!filtered.reason.is_empty(), "{}", filtered.syscall.name);
    }
    for denied in DENIED
        .iter()
        .chain(ANSWERED_EOPNOTSUPP)
        .chain(ANSWERED_ENOSYS)
    {
        assert!(!denied.reason.is_empty(), "{}", denied.name);
    }
    for (_, name, _) in every_entry() {
        assert!(name.starts_with("SYS_"), "{name}");
    }
}

#[test]
fn the_well_known_dangerous_syscalls_answer_eperm() {
    let denied: Vec<&str> = DENIED.iter().map(|denied| denied.name).collect();
    let mut expected = vec![
        "ptrace",
        "mount",
        "umount2",
        "unshare",
        "setns",
        "bpf",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "perf_event_open",
        "keyctl",
        "add_key",
        "request_key",
        "userfaultfd",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "open_by_handle_at",
        "name_to_handle_at",
        "clock_settime",
        "clock_adjtime",
        "adjtimex",
        "settimeofday",
        "swapon",
        "swapoff",
        "reboot",
        "acct",
        "quotactl",
        "pivot_root",
        "chroot",
        "process_vm_readv",
        "process_vm_writev",
        "kcmp",
        "lookup_dcookie",
        "fanotify_init",
        "move_mount",
        "open_tree",
        "fsopen",
        "fsmount",
        "fspick",
        "fsconfig",
        "mount_setattr",
        "pidfd_getfd",
        "syslog",
    ];
    if cfg!(target_arch = "x86_64") {
        expected.extend(["iopl", "ioperm"]);
    }
    for name in expected {
        assert!(
            denied.contains(&format!("SYS_{name}").as_str()),
            "{name} is not in DENIED"
        );
    }
}

#[test]
fn clone3_is_refused_and_what_install_needs_is_allowed() {
    let allowed: Vec<&str> = ALLOWED
        .iter()
        .flat_map(|group| group.syscalls)
        .map(|syscall| syscall.name)
        .collect();
    assert!(!allowed.contains(&"SYS_clone3"));
    assert_eq!(ANSWERED_ENOSYS[0].number, libc::SYS_clone3);
    // seccompiler's apply_filter calls prctl(PR_SET_NO_NEW_PRIVS) and seccomp(2) for each
    // program after the first.
    assert!(allowed.contains(&"SYS_seccomp"));
    let prctl = FILTERED
        .iter()
        .find(|filtered| filtered.syscall.number == libc::SYS_prctl)
        .unwrap();
    let ArgRule::Allowed { values, .. } = prctl.allow else {
        panic!("prctl's rule is a list of options");
    };
    assert!(values.contains(&(libc::PR_SET_NO_NEW_PRIVS as u32)));
}

#[test]
fn every_argument_rule_can_match() {
    // A value with bits outside its mask could never equal the masked argument.
    let check = |name: &str, mask: u32, value: u32| {
        assert_eq!(
            value & !mask,
            0,
            "{name}: value {value:#x} outside mask {mask:#x}"
        );
    };
    for filtered in FILTERED {
        let name = filtered.syscall.name;
        for rule in std::iter::once(&filtered.allow).chain(&filtered.with_network) {
            match *rule {
                ArgRule::Allowed { arg, mask, values } => {
                    assert!(arg < 6 && !values.is_empty(), "{name}");
                    values.iter().for_each(|&value| check(name, mask, value));
                }
                ArgRule::Refused { arg, values } => assert!(arg < 6 && !values.is_empty()),
                ArgRule::Alternatives(alternatives) => {
                    assert!(!alternatives.is_empty(), "{name}");
                    for &(arg, mask, value) in alternatives.iter().copied().flatten() {
                        assert!(arg < 6, "{name}");
                        check(name, mask, value);
                    }
                }
            }
        }
    }
}

#[test]
fn only_socket_depends_on_network() {
    for filtered in FILTERED {
        assert_eq!(
            filtered.with_network.is_some(),
            filtered.syscall.number == libc::SYS_socket,
            "{}",
            filtered.syscall.name
        );
    }
}

#[test]
fn programs_fit_the_kernel_limits() {
    for network in [Net::Closed, Net::Host, Net::Proxy(3128)] {
        let programs = seccomp_filter::build(network).unwrap();
        assert_eq!(programs.programs.len(), 3);
        let mut total = 0;
        for program in &programs.programs {
            // BPF_MAXINSNS per program.
            assert!(program.len() <= 4096, "{} instructions", program.len());
            // The kernel adds 4 per program to the path length it bounds.
            total += program.len() + 4;
        }
        // MAX_INSNS_PER_PATH, shared with any filter the session stacks later: keep headroom.
        assert!(total <= 32768 / 4, "{total} instructions in all");
        eprintln!(
            "network={network:?}: {} allowed, {} argument-filtered, {} EPERM, {total} instructions",
            ALLOWED
                .iter()
                .map(|group| group.syscalls.len())
                .sum::<usize>(),
            FILTERED.len(),
            DENIED.len()
        );
    }
}

#[test]
fn prepared_programs_are_those_compiled_on_the_spot() {
    crate::prepare_seccomp().unwrap();
    crate::prepare_seccomp().unwrap(); // idempotent
    for network in [Net::Closed, Net::Host, Net::Proxy(3128)] {
        let prepared = seccomp_filter::prepared(network).unwrap();
        let fresh = seccomp_filter::build(network).unwrap();
        assert_eq!(prepared.programs, fresh.programs, "network={network:?}");
        assert_eq!(prepared.denied_syscalls, fresh.denied_syscalls);
    }
    let programs = |net| &seccomp_filter::prepared(net).unwrap().programs;
    assert_ne!(programs(Net::Closed), programs(Net::Host));
    assert_ne!(programs(Net::Closed), programs(Net::Proxy(1)));
    assert_ne!(programs(Net::Proxy(1)), programs(Net::Host));
}
