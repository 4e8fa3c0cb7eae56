//! Per-session cgroups: memory, process and CPU limits, a kill of everything a session started
//! (double-forked daemons included), and the evidence of an out-of-memory kill.
//!
//! Layout: `<mount>/<the server's own group>/toolgate/<instance>/<session>` in each hierarchy
//! used (the unified one on v2; memory, pids, and cpu and freezer where mounted, on v1).
//! `<instance>` names one manager (its pid and start time), so two managers in one process or on
//! one host never touch each other's groups, and the groups of a crashed run are found (its pid
//! is gone) and removed by the next start.
//!
//! Choices:
//! - memory: v1 `memory.limit_in_bytes` and `memory.memsw.limit_in_bytes` (memory plus swap, so
//!   swapping out does not stretch the limit); v2 `memory.max` and `memory.swap.max` 0. The OOM
//!   killer takes the largest process of the group, not the whole group (no `memory.oom.group`):
//!   a bash command that blows up should not take the interpreter's variables with it.
//! - pids: `pids.max` = [`Limits::max_pids`] (processes and threads alike), so fork and thread
//!   bombs fail inside the session.
//! - cpu: equal weights (v1 `cpu.shares` 1024, v2 `cpu.weight` 100): sessions share a busy CPU
//!   fairly and use an idle one fully. The groups above them weigh as many processes as the
//!   host has cores, so that together they can claim every core on a busy host. A hard quota (`cpu.cfs_quota_us` / `cpu.max`) would slow a
//!   lone session on an idle host, so it is optional ([`ManagerConfig::cpu_quota_millis`]).
//!
//! A limit of 0 in [`Limits`] means "no limit" for memory and pids.
//!
//! [`ManagerConfig::cpu_quota_millis`]: crate::ManagerConfig::cpu_quota_millis

use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use toolgate_sandbox::policy::Limits;

mod detect;
mod events;

use detect::{
    find_v1, find_v2, make_instance, parse_mountinfo, parse_proc_cgroup, remove_stale_instances,
};
use events::EventFiles;
pub(super) use events::MemoryEvents;

/// Whether the manager puts sessions in cgroups.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CgroupMode {
    /// Use cgroups when the host has a usable hierarchy; without one, warn once and go on.
    #[default]
    Auto,
    /// Refuse to start without a usable hierarchy.
    Required,
    /// Never use cgroups.
    Off,
}

/// The cgroup hierarchy that confines sessions, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersion {
    /// no cgroups: sessions share the server's limits
    None,
    /// separate memory, pids and cpu hierarchies
    V1,
    /// the unified hierarchy
    V2,
}

impl fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::V1 => "v1",
            Self::V2 => "v2",
        })
    }
}

/// Why cgroups could not be used or set up.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// the host has no hierarchy this manager can use
    #[error("no usable cgroup hierarchy: {0}")]
    Unavailable(String),
    /// a cgroup file operation failed
    #[error("could not set up the session's cgroup ({what}): {source}")]
    Io {
        /// the step, e.g. "writing memory.max" (no host paths: callers may see this)
        what: String,
        /// what failed
        source: io::Error,
    },
    /// processes of a session were still there after the kill
    #[error("{left} process(es) of the session survived the kill")]
    Survivors {
        /// how many
        left: usize,
    },
}

fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> CgroupError {
    move |source| CgroupError::Io {
        what: what.into(),
        source,
    }
}

/// The directory under the server's own group that holds every manager's groups.
const TOOLGATE_DIR: &str = "toolgate";
/// On v2, the leaf the server moves itself into when its own group has processes (a group with
/// processes cannot hand controllers to children: the "no internal processes" rule).
const V2_SERVER_LEAF: &str = "toolgate-server";
/// How long a kill may take before it is reported as failed.
const KILL_DEADLINE: Duration = Duration::from_secs(5);
/// The CFS period of a CPU quota: 100 ms, the kernel's default.
const CPU_PERIOD_US: u64 = 100_000;

/// One controller's directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Controller {
    /// v2: every controller in one directory
    Unified,
    Memory,
    Pids,
    Cpu,
    Freezer,
}

impl Controller {
    fn v1_name(self) -> &'static str {
        match self {
            Self::Unified => "",
            Self::Memory => "memory",
            Self::Pids => "pids",
            Self::Cpu => "cpu",
            Self::Freezer => "freezer",
        }
    }
}

/// The cgroup hierarchies of this manager: one instance directory per controller.
#[derive(Debug)]
pub(super) struct Cgroups {
    version: CgroupVersion,
    /// `<mount>/<own group>/toolgate/<instance>` per controller
    bases: Vec<(Controller, PathBuf)>,
    cpu_quota_millis: Option<u32>,
}

impl Cgroups {
    /// Finds the hierarchy to use (v2 when its memory, pids and cpu controllers are usable, else
    /// v1) and makes this manager's instance directories. `Ok(None)`: no cgroups (mode `Off`, or
    /// `Auto` on a host without them, with one warning logged).
    pub(super) fn detect(
        mode: CgroupMode,
        instance: &str,
        cpu_quota_millis: Option<u32>,
    ) -> Result<Option<Self>, CgroupError> {
        if mode == CgroupMode::Off {
            return Ok(None);
        }
        let found = (|| {
            let own = fs::read_to_string("/proc/self/cgroup")
                .map_err(|e| CgroupError::Unavailable(format!("/proc/self/cgroup: {e}")))?;
            let mounts = fs::read_to_string("/proc/self/mountinfo")
                .map_err(|e| CgroupError::Unavailable(format!("/proc/self/mountinfo: {e}")))?;
            Self::detect_in(
                &own,
                &mounts,
                std::process::id(),
                instance,
                cpu_quota_millis,
            )
        })();
        match found {
            Ok(cgroups) => Ok(Some(cgroups)),
            Err(e) if mode == CgroupMode::Auto => {
                tracing::warn!(
                    "sessions run without cgroups (no memory, process or CPU limit per \
                     session): {e}"
                );
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// [`Cgroups::detect`] from the texts of `/proc/self/cgroup` and `/proc/self/mountinfo`.
    fn detect_in(
        own: &str,
        mountinfo: &str,
        pid: u32,
        instance: &str,
        cpu_quota_millis: Option<u32>,
    ) -> Result<Self, CgroupError> {
        let memberships = parse_proc_cgroup(own);
        let mounts = parse_mountinfo(mountinfo);
        let (version, tops) = match find_v2(&memberships, &mounts, pid) {
            Ok(top) => (CgroupVersion::V2, vec![(Controller::Unified, top)]),
            Err(v2) => match find_v1(&memberships, &mounts, pid) {
                Ok(tops) => (CgroupVersion::V1, tops),
                Err(v1) => return Err(CgroupError::Unavailable(format!("{v2}; {v1}"))),
            },
        };
        // made up front, so that a failure half-way removes what was made (its Drop)
        let mut cgroups = Self {
            version,
            bases: Vec::new(),
            cpu_quota_millis,
        };
        for (controller, top) in tops {
            remove_stale_instances(controller, &top);
            let base = top.join(instance);
            make_instance(controller, &top, &base).map_err(|e| {
                CgroupError::Unavailable(format!("cannot create {}: {e}", base.display()))
            })?;
            cgroups.bases.push((controller, base));
        }
        Ok(cgroups)
    }

    /// Sets the budget of all sessions together on this manager's own groups, the parents of
    /// every session's: the kernel then holds the total even if an admission were wrong. 0: no
    /// limit. Blocking.
    pub(super) fn limit_all(&self, memory_bytes: u64, pids: u64) -> Result<(), CgroupError> {
        let set = |dir: &Path, file: &str, value: u64| {
            write_file(dir, file, &value.to_string()).map_err(io_error(format!("writing {file}")))
        };
        for (controller, dir) in &self.bases {
            match controller {
                Controller::Memory if memory_bytes > 0 => {
                    set(dir, "memory.limit_in_bytes", memory_bytes)?;
                    if dir.join("memory.memsw.limit_in_bytes").exists() {
                        set(dir, "memory.memsw.limit_in_bytes", memory_bytes)?;
                    }
                }
                Controller::Pids if pids > 0 => set(dir, "pids.max", pids)?,
                Controller::Unified => {
                    if memory_bytes > 0 {
                        set(dir, "memory.max", memory_bytes)?;
                    }
                    if pids > 0 {
                        set(dir, "pids.max", pids)?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Memory and processes all sessions use now, read from this manager's own groups (`None`
    /// for what cannot be read). Blocking (two small cgroupfs reads).
    pub(super) fn in_use(&self) -> (Option<u64>, Option<u64>) {
        let read = |dir: &Path, file: &str| -> Option<u64> {
            fs::read_to_string(dir.join(file)).ok()?.trim().parse().ok()
        };
        let (mut memory, mut pids) = (None, None);
        for (controller, dir) in &self.bases {
            match controller {
                Controller::Memory => memory = read(dir, "memory.usage_in_bytes"),
                Controller::Pids => pids = read(dir, "pids.current"),
                Controller::Unified => {
                    memory = read(dir, "memory.current");
                    pids = read(dir, "pids.current");
                }
                _ => {}
            }
        }
        (memory, pids)
    }

    /// What the session whose groups are called `name` uses now (`None` if unreadable).
    /// Blocking (one small cgroupfs read).
    pub(super) fn session_memory(&self, name: &str) -> Option<u64> {
        self.bases.iter().find_map(|(controller, dir)| {
            let file = match controller {
                Controller::Memory => "memory.usage_in_bytes",
                Controller::Unified => "memory.current",
                _ => return None,
            };
            fs::read_to_string(dir.join(name).join(file))
                .ok()?
                .trim()
                .parse()
                .ok()
        })
    }

    /// v1 or v2.
    pub(super) fn version(&self) -> CgroupVersion {
        self.version
    }

    /// Makes a session's groups (a leftover of the same name is emptied and replaced) and sets
    /// their limits. Blocking (cgroupfs calls).
    pub(super) fn create(&self, name: &str, limits: &Limits) -> Result<SessionCgroup, CgroupError> {
        let mut group = SessionCgroup {
            dirs: Vec::new(),
            memory_limit: limits.memory_bytes,
            removed: false,
            counters: OnceLock::new(),
        };
        for (controller, base) in &self.bases {
            let dir = base.join(name);
            match fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let mut old = SessionCgroup {
                        dirs: vec![(*controller, dir.clone())],
                        memory_limit: 0,
                        removed: false,
                        counters: OnceLock::new(),
                    };
                    old.destroy()?;
                    fs::create_dir(&dir).map_err(io_error("creating the session's group"))?;
                }
                Err(e) => return Err(io_error("creating the session's group")(e)),
            }
            // from here on, a failure removes the directory (the group's Drop)
            group.dirs.push((*controller, dir));
        }
        group.set_limits(limits, self.cpu_quota_millis)?;
        Ok(group)
    }

    /// Removes this manager's (empty) instance directories; best effort.
    pub(super) fn remove_instance(&self) {
        for (_, base) in &self.bases {
            let _ = fs::remove_dir(base);
            // shared with other managers: removed only when none is left
            if let Some(top) = base.parent() {
                let _ = fs::remove_dir(top);
            }
        }
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        self.remove_instance();
    }
}

/// One session's groups. Dropping it kills what is left in them and removes them (blocking);
/// [`SessionCgroup::destroy`] does the same and says how it went.
#[derive(Debug)]
pub(super) struct SessionCgroup {
    dirs: Vec<(Controller, PathBuf)>,
    /// The memory limit it was made with, in bytes (0: none).
    memory_limit: u64,
    removed: bool,
    /// The OOM counters, opened on first use.
    counters: OnceLock<EventFiles>,
}

impl SessionCgroup {
    /// The directories a process joins (for `ForkOptions::cgroups`).
    pub(super) fn dirs(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|(_, dir)| dir.clone()).collect()
    }

    /// The group whose memory limit a process joining it is charged to: v1's memory group,
    /// v2's unified one.
    pub(super) fn memory_dir(&self) -> Option<PathBuf> {
        self.dirs
            .iter()
            .find(|(controller, _)| matches!(controller, Controller::Memory | Controller::Unified))
            .map(|(_, dir)| dir.clone())
    }

    /// The memory limit of the group, in bytes (0: none).
    pub(super) fn memory_limit(&self) -> u64 {
        self.memory_limit
    }

    /// Moves `pid` into every group. Writing a member's pid again is harmless, so this is done
    /// after every fork even when the child joined by itself.
    pub(super) fn add(&self, pid: i32) -> Result<(), CgroupError> {
        for (_, dir) in &self.dirs {
            match write_file(dir, "cgroup.procs", &pid.to_string()) {
                Ok(()) => {}
                // it has exited already: the caller learns that from the zygote
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) => {}
                Err(e) => return Err(io_error("adding the session's process")(e)),
            }
        }
        Ok(())
    }

    /// The OOM evidence so far (all zero without a memory controller). The counter files are
    /// opened once and read again from their start on every call, not looked up by path.
    pub(super) fn memory_events(&self) -> MemoryEvents {
        self.counters
            .get_or_init(|| EventFiles::open(&self.dirs))
            .read()
    }

    fn set_limits(
        &self,
        limits: &Limits,
        cpu_quota_millis: Option<u32>,
    ) -> Result<(), CgroupError> {
        let set = |dir: &Path, file: &str, value: &str| {
            write_file(dir, file, value).map_err(io_error(format!("writing {file}")))
        };
        let memory = limits.memory_bytes.to_string();
        let pids = limits.max_pids.to_string();
        let quota = cpu_quota_millis.map(|millis| u64::from(millis) * CPU_PERIOD_US / 1000);
        for (controller, dir) in &self.dirs {
            match controller {
                Controller::Memory if limits.memory_bytes > 0 => {
                    // the plain limit first: memsw may never be below it
                    set(dir, "memory.limit_in_bytes", &memory)?;
                    if dir.join("memory.memsw.limit_in_bytes").exists() {
                        set(dir, "memory.memsw.limit_in_bytes", &memory)?;
                    } else {
                        // no swap accounting (swapaccount=0): at least do not prefer swapping
                        let _ = set(dir, "memory.swappiness", "0");
                    }
                }
                Controller::Pids if limits.max_pids > 0 => set(dir, "pids.max", &pids)?,
                Controller::Cpu => {
                    set(dir, "cpu.shares", "1024")?;
                    if let Some(quota) = quota {
                        set(dir, "cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
                        set(dir, "cpu.cfs_quota_us", &quota.max(1000).to_string())?;
                    }
                }
                Controller::Unified => {
                    if limits.memory_bytes > 0 {
                        set(dir, "memory.max", &memory)?;
                        if dir.join("memory.swap.max").exists() {
                            set(dir, "memory.swap.max", "0")?;
                        }
                    }
                    if limits.max_pids > 0 {
                        set(dir, "pids.max", &pids)?;
                    }
                    set(dir, "cpu.weight", "100")?;
                    if let Some(quota) = quota {
                        set(
                            dir,
                            "cpu.max",
                            &format!("{} {CPU_PERIOD_US}", quota.max(1000)),
                        )?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Kills every process in the groups and removes them. Blocking: up to a few seconds when
    /// processes are slow to die.
    pub(super) fn destroy(&mut self) -> Result<(), CgroupError> {
        if self.removed {
            return Ok(());
        }
        // handles on the group's files are let go before the group is removed
        self.counters.take();
        let killed = self.kill_all();
        let deadline = Instant::now() + KILL_DEADLINE;
        let mut removed = Ok(());
        for (_, dir) in self.dirs.iter().rev() {
            loop {
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    // exited processes leave a moment later
                    Err(e)
                        if e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error())
                            && Instant::now() < deadline =>
                    {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => {
                        tracing::warn!("could not remove the cgroup {}: {e}", dir.display());
                        removed = Err(io_error("removing the session's group")(e));
                        break;
                    }
                }
            }
        }
        // once tried, Drop does not try again
        self.removed = true;
        killed.and(removed)
    }

    /// SIGKILL to every member until none is left. v2: `cgroup.kill` does it at once. v1: the
    /// freezer (when mounted) stops the group first, so nothing forks between reading the list
    /// and the kill; without it the list is read and killed again until it is empty (a fork bomb
    /// is bounded by `pids.max`).
    fn kill_all(&self) -> Result<(), CgroupError> {
        let deadline = Instant::now() + KILL_DEADLINE;
        for (controller, dir) in &self.dirs {
            if *controller == Controller::Unified && dir.join("cgroup.kill").exists() {
                let _ = write_file(dir, "cgroup.kill", "1");
            }
        }
        let freezer = self
            .dirs
            .iter()
            .find(|(controller, _)| *controller == Controller::Freezer)
            .map(|(_, dir)| dir.as_path());
        let mut frozen = freezer.filter(|dir| freeze(dir));
        loop {
            let members = self.members();
            if members.is_empty() {
                break;
            }
            for pid in &members {
                if let Some(pid) = Pid::from_raw(*pid) {
                    let _ = rustix::process::kill_process(pid, Signal::KILL);
                }
            }
            // frozen processes die when thawed; the next round checks that they did
            if let Some(dir) = frozen.take() {
                let _ = write_file(dir, "freezer.state", "THAWED");
            }
            if Instant::now() >= deadline {
                return Err(CgroupError::Survivors {
                    left: members.len(),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(dir) = frozen {
            let _ = write_file(dir, "freezer.state", "THAWED");
        }
        Ok(())
    }

    /// Every process in any of the groups.
    fn members(&self) -> BTreeSet<i32> {
        self.dirs
            .iter()
            .filter_map(|(_, dir)| fs::read_to_string(dir.join("cgroup.procs")).ok())
            .flat_map(|text| {
                text.split_whitespace()
                    .filter_map(|pid| pid.parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect()
    }
}

impl Drop for SessionCgroup {
    fn drop(&mut self) {
        if let Err(e) = self.destroy() {
            tracing::warn!("a session's cgroup was not cleaned up: {e}");
        }
    }
}

/// Freezes a v1 freezer group and waits (a little) until it is frozen; false if it did not get
/// there (the kill then goes on without it).
fn freeze(dir: &Path) -> bool {
    if write_file(dir, "freezer.state", "FROZEN").is_err() {
        return false;
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let state = fs::read_to_string(dir.join("freezer.state")).unwrap_or_default();
        if state.trim() == "FROZEN" {
            return true;
        }
        if Instant::now() >= deadline {
            return true; // partly frozen still helps; it is thawed after the kill
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Writes a control file (never creating one: cgroupfs has them all).
fn write_file(dir: &Path, file: &str, value: &str) -> io::Result<()> {
    let mut handle = fs::OpenOptions::new().write(true).open(dir.join(file))?;
    handle.write_all(value.as_bytes())
}
