//! Step (h): compiles [`crate::policy`] into seccomp-BPF programs with `seccompiler` and installs
//! them on the calling thread. One seccompiler program has one match and one mismatch action, and
//! the kernel runs every installed program, so the policy's answers take three programs,
//! installed in this order:
//!
//! 1. **the allow-list**: [`ALLOWED`] whatever the arguments and [`FILTERED`] for the arguments
//!    their rules accept are allowed; everything else answers `EPERM`. This program alone is the
//!    whole security boundary: nothing it refuses can be allowed by the others, which can only
//!    change the errno of a refusal.
//! 2. **the known-syscall program**: every syscall the policy names ([`ALLOWED`], [`FILTERED`],
//!    [`DENIED`], [`ANSWERED_EOPNOTSUPP`]) passes; everything else answers `ENOSYS`.
//! 3. **the xattr program**: [`ANSWERED_EOPNOTSUPP`] answers `EOPNOTSUPP`; everything else passes.
//!
//! Which errno wins: seccomp(2) returns "the first-seen action value of highest precedence (along
//! with its accompanying data)", running the newest program first. All three refuse with
//! `SECCOMP_RET_ERRNO`, so the newest refusal's errno wins: a syscall on no list gets program 2's
//! `ENOSYS` over program 1's `EPERM`, an xattr write program 3's `EOPNOTSUPP`, while a denied or
//! ill-argued call, which programs 2 and 3 let pass, keeps program 1's `EPERM`.
//!
//! Each program first checks the architecture and kills the process on any other (seccompiler's
//! check): no 32-bit `int 0x80` detour around the tables. The x32 ABI (same architecture, syscall
//! numbers with bit 30 set) needs no guard of its own: its numbers are on no list. The kernel
//! caches "always allowed" per syscall number across all programs, so unconditional entries cost
//! nothing after the first call; only the argument-filtered ones and refusals run BPF.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use seccompiler::{
    BackendError, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

use crate::error::HardenError;
use crate::policy::{
    ALLOWED, ANSWERED_ENOSYS, ANSWERED_EOPNOTSUPP, ArgRule, DENIED, FILTERED, TCP_SOCKETS,
};
use crate::spec::Net;

/// The programs compiled by [`prepare`], per network ([`Net::index`]: closed, host, proxy). Compiling
/// takes about 1.5 ms, a tenth of a new session's start: the zygote does it once, and every
/// child it forks afterwards inherits the result in its (copy-on-write) memory and only installs
/// it. A child's own copy cannot change the zygote's.
static PREPARED: [OnceLock<Programs>; 3] = [const { OnceLock::new() }; 3];

/// The variants compiled, one per [`Net::index`] (the proxy's port does not change them).
const VARIANTS: [Net; 3] = [Net::Closed, Net::Host, Net::Proxy(1)];

/// Compiles both variants of the programs once, for [`install`] in the children forked later.
/// Idempotent.
pub(crate) fn prepare() -> Result<(), HardenError> {
    for net in VARIANTS {
        let slot = &PREPARED[net.index()];
        if slot.get().is_none() {
            // a concurrent first call may have won; both compiled the same programs
            let _ = slot.set(build(net)?);
        }
    }
    Ok(())
}

/// The programs [`prepare`] compiled for `net`, if it ran.
pub(crate) fn prepared(net: Net) -> Option<&'static Programs> {
    PREPARED[net.index()].get()
}

/// Installs the programs ([`prepare`]d ones when there are, else compiled now). Returns how many
/// syscalls the policy refuses by name: the [`DENIED`] table, the argument-filtered ones (refused
/// for some arguments), [`ANSWERED_EOPNOTSUPP`] and [`ANSWERED_ENOSYS`]. (Every syscall on no
/// list is refused too.)
pub(crate) fn install(net: Net) -> Result<usize, HardenError> {
    let compiled;
    let programs = match prepared(net) {
        Some(prepared) => prepared,
        None => {
            compiled = build(net)?;
            &compiled
        }
    };
    // Program 1 allows `prctl(PR_SET_NO_NEW_PRIVS)` and `seccomp`, which apply_filter calls, so
    // the later programs can still be installed after it.
    for program in &programs.programs {
        seccompiler::apply_filter(program).map_err(HardenError::SeccompInstall)?;
    }
    Ok(programs.denied_syscalls)
}

/// The compiled programs, in installation order.
pub(crate) struct Programs {
    /// BPF programs.
    pub(crate) programs: Vec<BpfProgram>,
    /// Syscalls refused by name: outright, for some arguments, or with `ENOSYS` on purpose.
    pub(crate) denied_syscalls: usize,
}

/// Compiles the programs without installing them.
pub(crate) fn build(net: Net) -> Result<Programs, HardenError> {
    let arch = target_arch()?;

    let mut allowed: BTreeMap<i64, Vec<SeccompRule>> = ALLOWED
        .iter()
        .flat_map(|group| group.syscalls)
        .map(|syscall| (syscall.number, Vec::new()))
        .collect();
    for filtered in FILTERED {
        let mut rules = seccomp_rules(&filtered.allow)?;
        match (net, &filtered.with_network) {
            (Net::Host, Some(extra)) => rules.extend(seccomp_rules(extra)?),
            (Net::Proxy(_), Some(_)) if filtered.syscall.number == TCP_SOCKETS.0 => {
                rules.extend(seccomp_rules(&TCP_SOCKETS.1)?);
            }
            _ => {}
        }
        allowed.insert(filtered.syscall.number, rules);
    }
    let allow_list = compile(allowed, SeccompAction::Allow, errno(libc::EPERM), arch)?;

    let known: BTreeMap<i64, Vec<SeccompRule>> = ALLOWED
        .iter()
        .flat_map(|group| group.syscalls)
        .map(|syscall| syscall.number)
        .chain(FILTERED.iter().map(|filtered| filtered.syscall.number))
        .chain(DENIED.iter().map(|denied| denied.number))
        .chain(ANSWERED_EOPNOTSUPP.iter().map(|denied| denied.number))
        .map(|number| (number, Vec::new()))
        .collect();
    let known = compile(known, SeccompAction::Allow, errno(libc::ENOSYS), arch)?;

    let xattr_writes: BTreeMap<i64, Vec<SeccompRule>> = ANSWERED_EOPNOTSUPP
        .iter()
        .map(|denied| (denied.number, Vec::new()))
        .collect();
    let xattr_writes = compile(
        xattr_writes,
        errno(libc::EOPNOTSUPP),
        SeccompAction::Allow,
        arch,
    )?;

    Ok(Programs {
        programs: vec![allow_list, known, xattr_writes],
        denied_syscalls: DENIED.len()
            + FILTERED.len()
            + ANSWERED_EOPNOTSUPP.len()
            + ANSWERED_ENOSYS.len(),
    })
}

/// The alternatives of an argument rule as seccompiler rules, which a syscall's entry ORs
/// together (the conditions within one rule being ANDed). Every comparison is on the argument's
/// low 32 bits (`Dword`), as [`ArgRule`] explains.
fn seccomp_rules(rule: &ArgRule) -> Result<Vec<SeccompRule>, HardenError> {
    match *rule {
        ArgRule::Allowed { arg, mask, values } => values
            .iter()
            .map(|&value| seccomp_rule(&[(arg, mask, value)]))
            .collect(),
        ArgRule::Refused { arg, values } => {
            let conditions = values
                .iter()
                .map(|&value| condition(arg, SeccompCmpOp::Ne, value))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(vec![
                SeccompRule::new(conditions).map_err(HardenError::SeccompBuild)?,
            ])
        }
        ArgRule::Alternatives(alternatives) => alternatives
            .iter()
            .map(|checks| seccomp_rule(checks))
            .collect(),
    }
}

/// One rule: every `(arg, mask, value)` must match.
fn seccomp_rule(checks: &[(u8, u32, u32)]) -> Result<SeccompRule, HardenError> {
    let conditions = checks
        .iter()
        .map(|&(arg, mask, value)| {
            let op = if mask == u32::MAX {
                SeccompCmpOp::Eq
            } else {
                SeccompCmpOp::MaskedEq(u64::from(mask))
            };
            condition(arg, op, value)
        })
        .collect::<Result<Vec<_>, _>>()?;
    SeccompRule::new(conditions).map_err(HardenError::SeccompBuild)
}

/// A comparison of argument `arg`'s low 32 bits.
fn condition(arg: u8, op: SeccompCmpOp, value: u32) -> Result<SeccompCondition, HardenError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, u64::from(value))
        .map_err(HardenError::SeccompBuild)
}

/// One seccompiler program: the syscalls in `rules` (for the arguments their rules accept) get
/// `on_match`, every other call `otherwise`.
fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    on_match: SeccompAction,
    otherwise: SeccompAction,
    arch: TargetArch,
) -> Result<BpfProgram, HardenError> {
    let filter =
        SeccompFilter::new(rules, otherwise, on_match, arch).map_err(HardenError::SeccompBuild)?;
    BpfProgram::try_from(filter).map_err(HardenError::SeccompBuild)
}

/// A refusal with `errno`.
fn errno(errno: libc::c_int) -> SeccompAction {
    SeccompAction::Errno(errno as u32)
}

/// The architecture this crate is built for, if the policy has been traced and reviewed for it.
/// Elsewhere hardening fails (closed) rather than install a list made for other syscall numbers
/// and another libc's habits.
fn target_arch() -> Result<TargetArch, HardenError> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else {
        Err(HardenError::SeccompBuild(BackendError::InvalidTargetArch(
            format!(
                "{}: the syscall allow-list in policy.rs is written for x86_64 and aarch64 only",
                std::env::consts::ARCH
            ),
        )))
    }
}
