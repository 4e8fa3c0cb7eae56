//! Finding the hierarchy to use: the server's own group (from `/proc/self/cgroup`) under a
//! cgroup mount (from `/proc/self/mountinfo`), checked by membership, and for v2 the controllers
//! handed down to it.

use crate::mountinfo::unescape;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{Controller, SessionCgroup, TOOLGATE_DIR, V2_SERVER_LEAF, write_file};

/// A line of `/proc/self/cgroup`: hierarchy id, controllers, path.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Membership {
    id: String,
    controllers: Vec<String>,
    path: String,
}

pub(super) fn parse_proc_cgroup(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let id = parts.next()?.to_owned();
            let controllers = parts
                .next()?
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect();
            let path = parts.next()?.to_owned();
            Some(Membership {
                id,
                controllers,
                path,
            })
        })
        .collect()
}

/// A line of `/proc/self/mountinfo`, the fields this module needs.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Mount {
    /// the subtree of the filesystem mounted here
    root: String,
    point: PathBuf,
    fstype: String,
    super_options: Vec<String>,
}

pub(super) fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (head, tail) = line.split_once(" - ")?;
            let head: Vec<&str> = head.split(' ').collect();
            let mut tail = tail.split(' ');
            let fstype = tail.next()?.to_owned();
            let _source = tail.next()?;
            let super_options = tail
                .next()
                .unwrap_or_default()
                .split(',')
                .map(str::to_owned)
                .collect();
            Some(Mount {
                root: unescape(head.get(3)?).to_string_lossy().into_owned(),
                point: PathBuf::from(unescape(head.get(4)?)),
                fstype,
                super_options,
            })
        })
        .collect()
}

/// The directory of our group `own` (as `/proc/self/cgroup` names it) under `mount`, if it is
/// there and lists `pid` as a member (a cgroup namespace or a bind mount of a subtree can make
/// the two views differ; membership is the proof).
fn own_dir(mount: &Mount, own: &str, pid: u32) -> Option<PathBuf> {
    let relative = if mount.root == "/" {
        own
    } else {
        let rest = own.strip_prefix(mount.root.as_str())?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest
    };
    let dir = mount.point.join(relative.trim_start_matches('/'));
    let procs = fs::read_to_string(dir.join("cgroup.procs")).ok()?;
    let pid = pid.to_string();
    procs
        .split_whitespace()
        .any(|member| member == pid)
        .then_some(dir)
}

const V2_CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// `<own v2 group>/toolgate`, with memory, pids and cpu enabled down to it.
pub(super) fn find_v2(
    memberships: &[Membership],
    mounts: &[Mount],
    pid: u32,
) -> Result<PathBuf, String> {
    let own = memberships
        .iter()
        .find(|m| m.id == "0" && m.controllers.is_empty())
        .ok_or("v2: the server is in no unified group")?;
    let mut dir = mounts
        .iter()
        .filter(|m| m.fstype == "cgroup2")
        .find_map(|m| own_dir(m, &own.path, pid))
        .ok_or("v2: no cgroup2 mount shows the server's group")?;
    let available = fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let available: Vec<&str> = available.split_whitespace().collect();
    let missing: Vec<&str> = V2_CONTROLLERS
        .into_iter()
        .filter(|c| !available.contains(c))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "v2: the server's group lacks the {} controller(s) (bound to v1 hierarchies?)",
            missing.join(", ")
        ));
    }
    // a manager that moved the server into its leaf before: hand out controllers from above it
    if dir.file_name().is_some_and(|name| name == V2_SERVER_LEAF)
        && let Some(parent) = dir.parent()
    {
        dir = parent.to_path_buf();
    }
    if let Err(e) = enable_controllers(&dir) {
        if e.raw_os_error() != Some(rustix::io::Errno::BUSY.raw_os_error()) {
            return Err(format!(
                "v2: cannot enable controllers in {}: {e}",
                dir.display()
            ));
        }
        // our group has processes (ours at least): move them into a leaf, then enable
        move_into_leaf(&dir).map_err(|e| {
            format!(
                "v2: cannot move the server into a leaf of {}: {e}",
                dir.display()
            )
        })?;
        enable_controllers(&dir)
            .map_err(|e| format!("v2: cannot enable controllers in {}: {e}", dir.display()))?;
    }
    let top = dir.join(TOOLGATE_DIR);
    fs::create_dir_all(&top).map_err(|e| format!("v2: cannot create {}: {e}", top.display()))?;
    enable_controllers(&top).map_err(|e| format!("v2: {}: {e}", top.display()))?;
    Ok(top)
}

/// Adds memory, pids and cpu to a v2 group's `cgroup.subtree_control` where missing.
pub(super) fn enable_controllers(dir: &Path) -> io::Result<()> {
    let enabled = fs::read_to_string(dir.join("cgroup.subtree_control"))?;
    let enabled: Vec<&str> = enabled.split_whitespace().collect();
    let wanted: Vec<String> = V2_CONTROLLERS
        .into_iter()
        .filter(|c| !enabled.contains(c))
        .map(|c| format!("+{c}"))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    write_file(dir, "cgroup.subtree_control", &wanted.join(" "))
}

/// Moves every process of a v2 group into its child `toolgate-server`.
fn move_into_leaf(dir: &Path) -> io::Result<()> {
    let leaf = dir.join(V2_SERVER_LEAF);
    match fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    for pid in fs::read_to_string(dir.join("cgroup.procs"))?.split_whitespace() {
        match write_file(&leaf, "cgroup.procs", pid) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `<own group>/toolgate` in the memory, pids, and (where mounted) cpu and freezer hierarchies.
pub(super) fn find_v1(
    memberships: &[Membership],
    mounts: &[Mount],
    pid: u32,
) -> Result<Vec<(Controller, PathBuf)>, String> {
    let mut tops = Vec::new();
    for controller in [
        Controller::Memory,
        Controller::Pids,
        Controller::Cpu,
        Controller::Freezer,
    ] {
        let name = controller.v1_name();
        let dir = memberships
            .iter()
            .find(|m| m.controllers.iter().any(|c| c == name))
            .and_then(|own| {
                mounts
                    .iter()
                    .filter(|m| m.fstype == "cgroup" && m.super_options.iter().any(|o| o == name))
                    .find_map(|m| own_dir(m, &own.path, pid))
            });
        match dir {
            Some(dir) => tops.push((controller, dir.join(TOOLGATE_DIR))),
            None if matches!(controller, Controller::Memory | Controller::Pids) => {
                return Err(format!("v1: no {name} hierarchy shows the server's group"));
            }
            None => {}
        }
    }
    Ok(tops)
}

/// Makes a manager's instance directory under `top` (with the controllers handed down on v2).
/// Another manager's shutdown removes `top` when it looks empty, possibly just now: retried.
pub(super) fn make_instance(controller: Controller, top: &Path, base: &Path) -> io::Result<()> {
    let mut tries = 0;
    loop {
        let made = fs::create_dir_all(base).and_then(|()| {
            if controller == Controller::Unified {
                enable_controllers(top)?;
                enable_controllers(base)?;
            }
            for dir in [top, base] {
                weigh_as_the_cores(controller, dir);
            }
            Ok(())
        });
        match made {
            Err(e) if e.kind() == io::ErrorKind::NotFound && tries < 3 => tries += 1,
            other => return other,
        }
    }
}

/// Gives the group holding every session the CPU weight of as many ordinary processes as the
/// host has cores (v1 `cpu.shares` 1024 × cores, v2 `cpu.weight` 100 × cores): with the
/// default weight of one, all sessions together weigh as one process against the rest of the
/// host, and CPU-bound sessions on a busy host could not use more than a core's share between
/// them. Sessions still share it equally among themselves. Best effort: a group without the
/// file (no cpu controller there) keeps its weight.
fn weigh_as_the_cores(controller: Controller, dir: &Path) {
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as u64;
    let (file, weight) = match controller {
        Controller::Cpu => ("cpu.shares", 1024 * cores),
        Controller::Unified => ("cpu.weight", (100 * cores).min(10_000)),
        _ => return,
    };
    if dir.join(file).exists()
        && let Err(e) = write_file(dir, file, &weight.to_string())
    {
        tracing::warn!("cannot set {file} of {}: {e}", dir.display());
    }
}

/// Kills and removes the groups of managers whose process is gone (a crash leaves them).
pub(super) fn remove_stale_instances(controller: Controller, top: &Path) {
    let Ok(entries) = fs::read_dir(top) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name
            .to_str()
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| u32::from_str_radix(pid, 16).ok())
        else {
            continue;
        };
        if owner == std::process::id() || Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        let instance = entry.path();
        if let Ok(sessions) = fs::read_dir(&instance) {
            for session in sessions.flatten() {
                if session.file_type().is_ok_and(|t| t.is_dir()) {
                    let mut stale = SessionCgroup {
                        dirs: vec![(controller, session.path())],
                        memory_limit: 0,
                        removed: false,
                        counters: std::sync::OnceLock::new(),
                    };
                    let _ = stale.destroy();
                }
            }
        }
        tracing::info!(
            "removed the cgroups of an earlier run at {}",
            instance.display()
        );
        let _ = fs::remove_dir(&instance);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::cgroup::*;

    #[test]
    fn the_sessions_groups_weigh_as_the_cores() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cpu.shares"), "1024").unwrap();
        weigh_as_the_cores(Controller::Cpu, dir.path());
        let shares = std::fs::read_to_string(dir.path().join("cpu.shares")).unwrap();
        assert_eq!(shares, (1024 * cores).to_string());
        // a group without the file keeps its weight, and other controllers are left alone
        let none = tempfile::tempdir().unwrap();
        weigh_as_the_cores(Controller::Unified, none.path());
        assert!(!none.path().join("cpu.weight").exists());
        weigh_as_the_cores(Controller::Memory, dir.path());
        assert!(!dir.path().join("cpu.weight").exists());
    }

    #[test]
    fn proc_cgroup_and_mountinfo_parse() {
        let own = parse_proc_cgroup("4:memory:/process_api/abc\n1:cpu,cpuacct:/\n0::/\n");
        assert_eq!(own[0].controllers, ["memory"]);
        assert_eq!(own[0].path, "/process_api/abc");
        assert_eq!(own[1].controllers, ["cpu", "cpuacct"]);
        assert!(own[2].controllers.is_empty() && own[2].id == "0");
        let mounts = parse_mountinfo(
            "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
             41 31 0:38 /sub /sys/fs/cgroup/uni\\040fied rw - cgroup2 cgroup2 rw\n",
        );
        assert_eq!(mounts[0].fstype, "cgroup");
        assert!(mounts[0].super_options.contains(&"memory".to_owned()));
        assert_eq!(mounts[1].point, Path::new("/sys/fs/cgroup/uni fied"));
        assert_eq!(mounts[1].root, "/sub");
    }

    /// A fake cgroup2 tree in a temporary directory: detection, controllers enabled, limits
    /// written (the live v2 path cannot run on a v1 host).
    #[test]
    fn v2_is_detected_and_limits_are_written_in_a_fake_tree() {
        let root = tempfile::tempdir().unwrap();
        let own = root.path().join("svc");
        fs::create_dir_all(&own).unwrap();
        let pid = std::process::id();
        fs::write(own.join("cgroup.procs"), format!("{pid}\n")).unwrap();
        fs::write(
            own.join("cgroup.controllers"),
            "cpuset cpu io memory pids\n",
        )
        .unwrap();
        fs::write(own.join("cgroup.subtree_control"), "").unwrap();
        let top = own.join(TOOLGATE_DIR);
        fs::create_dir(&top).unwrap();
        fs::write(top.join("cgroup.subtree_control"), "").unwrap();
        let mountinfo = format!(
            "41 31 0:38 / {} rw - cgroup2 cgroup2 rw\n",
            root.path().display()
        );
        let instance_dir = top.join("1-2");
        fs::create_dir(&instance_dir).unwrap();
        fs::write(instance_dir.join("cgroup.subtree_control"), "").unwrap();
        let cgroups = Cgroups::detect_in("0::/svc\n", &mountinfo, pid, "1-2", Some(500)).unwrap();
        assert_eq!(cgroups.version(), CgroupVersion::V2);
        assert_eq!(
            fs::read_to_string(own.join("cgroup.subtree_control")).unwrap(),
            "+memory +pids +cpu"
        );
        let session = instance_dir.join("s");
        fs::create_dir(&session).unwrap();
        for file in [
            "memory.max",
            "memory.swap.max",
            "pids.max",
            "cpu.weight",
            "cpu.max",
        ] {
            fs::write(session.join(file), "").unwrap();
        }
        let group = SessionCgroup {
            dirs: vec![(Controller::Unified, session.clone())],
            memory_limit: 1 << 30,
            removed: true, // a fake tree cannot be removed as cgroupfs would
            counters: std::sync::OnceLock::new(),
        };
        let limits = toolgate_sandbox::LimitSettings::default()
            .for_call(None)
            .unwrap();
        group.set_limits(&limits, Some(500)).unwrap();
        let read = |file: &str| fs::read_to_string(session.join(file)).unwrap();
        assert_eq!(read("memory.max"), (1u64 << 30).to_string());
        assert_eq!(read("memory.swap.max"), "0");
        assert_eq!(read("pids.max"), "256");
        assert_eq!(read("cpu.weight"), "100");
        assert_eq!(read("cpu.max"), "50000 100000");
        fs::write(session.join("memory.events"), "max 3\noom 1\noom_kill 1\n").unwrap();
        assert_eq!(
            group.memory_events(),
            MemoryEvents {
                oom_kills: Some(1),
                limit_hits: 3
            }
        );
        drop(cgroups); // removes nothing it cannot
    }

    #[test]
    fn a_unified_hierarchy_without_controllers_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let pid = std::process::id();
        fs::write(root.path().join("cgroup.procs"), format!("{pid}\n")).unwrap();
        fs::write(root.path().join("cgroup.controllers"), "").unwrap();
        let mountinfo = format!(
            "41 31 0:38 / {} rw - cgroup2 cgroup2 rw\n",
            root.path().display()
        );
        let found = Cgroups::detect_in("0::/\n", &mountinfo, pid, "1-2", None);
        let Err(CgroupError::Unavailable(why)) = found else {
            panic!("expected Unavailable, got {found:?}");
        };
        assert!(why.contains("lacks the memory, pids, cpu"), "{why}");
        assert!(why.contains("v1: no memory hierarchy"), "{why}");
    }
}
