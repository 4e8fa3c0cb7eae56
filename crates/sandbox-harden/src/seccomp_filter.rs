//! Step (h): compiles [`crate::policy`] into seccomp-BPF programs with `seccompiler` and installs
//! them on the calling thread. Three small programs, because one seccompiler filter has one
//! match action and the kernel runs every installed filter, keeping the most severe answer:
//!
//! 1. the deny-list: the table in [`crate::policy`], `clone` with a namespace flag, and (without
//!    network) `socket` for any domain but `AF_UNIX`, all answered `EPERM`; any other
//!    architecture than the build's is killed (seccompiler's arch check: no 32-bit `int 0x80`
//!    detour around the table);
//! 2. `clone3` answered `ENOSYS`: its flags sit in a struct that BPF cannot read, and `ENOSYS`
//!    (not `EPERM`) makes glibc fall back to `clone`, whose flags the first program checks;
//! 3. on x86_64, every x32-ABI syscall number (bit 30 set) answered `EPERM`: the same syscalls
//!    under other numbers would walk around the table. (This kernel has x32 disabled; the guard
//!    is for hosts that boot with it.)

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::error::HardenError;
use crate::policy::{CLONE_NAMESPACE_FLAGS, DENIED};

/// Builds and installs the three programs; returns how many syscalls are refused.
pub(crate) fn install(network: bool) -> Result<usize, HardenError> {
    let programs = build(network)?;
    for program in &programs.programs {
        seccompiler::apply_filter(program).map_err(HardenError::SeccompInstall)?;
    }
    Ok(programs.denied_syscalls)
}

/// The compiled programs, in installation order.
pub(crate) struct Programs {
    /// BPF programs.
    pub(crate) programs: Vec<BpfProgram>,
    /// Syscalls refused outright or for some arguments (`clone3` included).
    pub(crate) denied_syscalls: usize,
}

/// Compiles the programs without installing them.
pub(crate) fn build(network: bool) -> Result<Programs, HardenError> {
    let arch = target_arch();
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED
        .iter()
        .map(|denied| (denied.number, Vec::new()))
        .collect();
    // clone(2) creating namespaces: one rule per flag, the rules of a syscall being ORed.
    let clone_rules = CLONE_NAMESPACE_FLAGS
        .iter()
        .map(|&flag| flag_set_rule(0, flag as u64))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    if !network {
        // socket(2) for any domain but AF_UNIX. (socketpair(2) of other domains fails anyway.)
        let not_unix = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )
        .map_err(HardenError::SeccompBuild)?;
        let rule = SeccompRule::new(vec![not_unix]).map_err(HardenError::SeccompBuild)?;
        rules.insert(libc::SYS_socket, vec![rule]);
    }
    let deny_list_len = rules.len();
    let deny_list = compile(rules, SeccompAction::Errno(libc::EPERM as u32), arch)?;

    let clone3 = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    let clone3 = compile(clone3, SeccompAction::Errno(libc::ENOSYS as u32), arch)?;

    let mut programs = vec![deny_list, clone3];
    #[cfg(target_arch = "x86_64")]
    programs.push(x32_guard());
    Ok(Programs {
        programs,
        denied_syscalls: deny_list_len + 1,
    })
}

/// A rule matching when `flag`'s bits are all set in argument `arg`.
fn flag_set_rule(arg: u8, flag: u64) -> Result<SeccompRule, HardenError> {
    let condition = SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(flag),
        flag,
    )
    .map_err(HardenError::SeccompBuild)?;
    SeccompRule::new(vec![condition]).map_err(HardenError::SeccompBuild)
}

/// One seccompiler filter: `rules` answered with `on_match`, everything else allowed.
fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    on_match: SeccompAction,
    arch: TargetArch,
) -> Result<BpfProgram, HardenError> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, on_match, arch)
        .map_err(HardenError::SeccompBuild)?;
    BpfProgram::try_from(filter).map_err(HardenError::SeccompBuild)
}

/// The architecture this crate is built for; seccompiler knows x86_64, aarch64 and riscv64.
fn target_arch() -> TargetArch {
    #[cfg(target_arch = "x86_64")]
    return TargetArch::x86_64;
    #[cfg(target_arch = "aarch64")]
    return TargetArch::aarch64;
    #[cfg(target_arch = "riscv64")]
    return TargetArch::riscv64;
}

/// `EPERM` for every syscall number with `__X32_SYSCALL_BIT` set, written by hand because
/// seccompiler matches syscall numbers by equality only.
#[cfg(target_arch = "x86_64")]
fn x32_guard() -> BpfProgram {
    use seccompiler::sock_filter;
    /// `__X32_SYSCALL_BIT` from `asm/unistd.h`.
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    /// Offset of `nr` in `struct seccomp_data`.
    const SECCOMP_DATA_NR: u32 = 0;
    let instruction = |code: u32, jt: u8, jf: u8, k: u32| sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    vec![
        // A = seccomp_data.nr
        instruction(
            libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
            0,
            0,
            SECCOMP_DATA_NR,
        ),
        // if A >= X32_SYSCALL_BIT fall through to EPERM, else skip to ALLOW
        instruction(
            libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K,
            0,
            1,
            X32_SYSCALL_BIT,
        ),
        instruction(
            libc::BPF_RET | libc::BPF_K,
            0,
            0,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
        instruction(libc::BPF_RET | libc::BPF_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
}
