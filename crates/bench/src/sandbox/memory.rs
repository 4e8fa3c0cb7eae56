//! Memory of idle sessions: the proportional set size (PSS, shared pages divided among the
//! processes that share them) of every process in each session's cgroup, from
//! `/proc/<pid>/smaps_rollup`, and where their private pages are (per mapping, from
//! `/proc/<pid>/smaps`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};

/// What the sessions' processes use, in KiB.
#[derive(Debug, Clone, Default)]
pub struct SessionMemory {
    pub sessions: usize,
    /// Processes summed (each session's cgroup, or the session process where no cgroup was found).
    pub processes: usize,
    /// Sessions whose processes came from their cgroup.
    pub from_cgroup: usize,
    pub pss_kib: u64,
    /// Pages of these processes no other process maps (USS).
    pub private_kib: u64,
    pub rss_kib: u64,
    pub zygote: Option<Rollup>,
    /// Other children of the zygote (pre-started sessions not yet given out): how many, and
    /// their PSS. Not part of the per-session figure; they take a share of the shared pages.
    pub spare: (usize, u64),
    /// The mappings holding the most private pages (Private_Clean + Private_Dirty), summed per
    /// mapping name over the sessions' processes, largest first: (name, KiB per session).
    pub top_private: Vec<(String, f64)>,
}

impl SessionMemory {
    fn per_session_mib(&self, kib: u64) -> f64 {
        kib as f64 / 1024.0 / self.sessions.max(1) as f64
    }

    pub fn pss_per_session_mib(&self) -> f64 {
        self.per_session_mib(self.pss_kib)
    }

    pub fn private_per_session_mib(&self) -> f64 {
        self.per_session_mib(self.private_kib)
    }

    pub fn rss_per_session_mib(&self) -> f64 {
        self.per_session_mib(self.rss_kib)
    }

    pub fn zygote_pss_mib(&self) -> Option<f64> {
        self.zygote.map(|z| z.pss_kib as f64 / 1024.0)
    }

    pub fn zygote_rss_mib(&self) -> Option<f64> {
        self.zygote.map(|z| z.rss_kib as f64 / 1024.0)
    }
}

/// The lines of `smaps_rollup` this figure uses, in KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rollup {
    pub rss_kib: u64,
    pub pss_kib: u64,
    pub private_kib: u64,
}

/// Sums the memory of every process of the sessions whose main processes are `pids`.
pub fn measure(pids: &[i32], zygote: Option<i32>) -> Result<SessionMemory> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|text| parse_mountinfo(&text))
        .unwrap_or_default();
    let mut all = BTreeSet::new();
    let mut memory = SessionMemory {
        sessions: pids.len(),
        ..SessionMemory::default()
    };
    for &pid in pids {
        match cgroup_processes(pid, &mounts) {
            Some(members) if members.contains(&pid) => {
                memory.from_cgroup += 1;
                all.extend(members);
            }
            _ => {
                all.insert(pid);
            }
        }
    }
    let mut by_mapping = BTreeMap::new();
    for pid in &all {
        // a process that ended meanwhile has no memory left to count
        let Ok(rollup) = rollup(*pid) else { continue };
        memory.processes += 1;
        memory.pss_kib += rollup.pss_kib;
        memory.private_kib += rollup.private_kib;
        memory.rss_kib += rollup.rss_kib;
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/smaps")) {
            private_by_mapping(&text, &mut by_mapping);
        }
    }
    memory.top_private = top(by_mapping, pids.len(), TOP_MAPPINGS);
    for (name, kib) in &memory.top_private {
        crate::progress(&format!("  private per session {kib:>8.1} KiB  {name}"));
    }
    if memory.processes < pids.len() {
        bail!(
            "only {} of {} session processes could be read",
            memory.processes,
            pids.len()
        );
    }
    memory.zygote = zygote.map(rollup).transpose()?;
    if let Some(zygote) = zygote {
        for child in children(zygote) {
            if all.contains(&child) {
                continue;
            }
            if let Ok(rollup) = rollup(child) {
                memory.spare.0 += 1;
                memory.spare.1 += rollup.pss_kib;
            }
        }
    }
    Ok(memory)
}

/// The direct children of `pid`, from every thread's `children` list.
fn children(pid: i32) -> BTreeSet<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return BTreeSet::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

fn rollup(pid: i32) -> Result<Rollup> {
    let path = format!("/proc/{pid}/smaps_rollup");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    parse_rollup(&text).with_context(|| format!("no Pss line in {path}"))
}

fn parse_rollup(text: &str) -> Option<Rollup> {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
    };
    Some(Rollup {
        rss_kib: field("Rss").unwrap_or(0),
        pss_kib: field("Pss")?,
        private_kib: field("Private_Clean").unwrap_or(0) + field("Private_Dirty").unwrap_or(0),
    })
}

/// How many mappings the private-pages breakdown lists.
const TOP_MAPPINGS: usize = 10;

/// Adds the private KiB of each mapping in one `smaps` text to `sums`, by mapping name:
/// the file's path, `[heap]`, `[stack]`, or for an anonymous mapping `[anon <perms>]` with
/// `+guard` when the mapping just below it is an inaccessible guard (a thread's stack, as glibc
/// makes them).
fn private_by_mapping(text: &str, sums: &mut BTreeMap<String, u64>) {
    let mut name: Option<String> = None;
    let mut private = 0u64;
    let mut previous_guard = false;
    let mut flush = |name: &mut Option<String>, private: &mut u64| {
        if let Some(name) = name.take()
            && *private > 0
        {
            *sums.entry(name).or_default() += *private;
        }
        *private = 0;
    };
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if first.contains('-') && !first.ends_with(':') {
            flush(&mut name, &mut private);
            let perms = fields.next().unwrap_or("");
            let path = fields.nth(3).map(str::to_owned);
            name = Some(match path {
                Some(path) => path,
                None if previous_guard => format!("[anon {perms} +guard]"),
                None => format!("[anon {perms}]"),
            });
            previous_guard = perms == "---p";
        } else if first == "Private_Clean:" || first == "Private_Dirty:" {
            private += fields
                .next()
                .and_then(|kib| kib.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    flush(&mut name, &mut private);
}

/// The `count` largest of `sums`, in KiB per session.
fn top(sums: BTreeMap<String, u64>, sessions: usize, count: usize) -> Vec<(String, f64)> {
    let mut items: Vec<(String, u64)> = sums.into_iter().collect();
    items.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    items
        .into_iter()
        .take(count)
        .map(|(name, kib)| (name, kib as f64 / sessions.max(1) as f64))
        .collect()
}

/// A cgroup filesystem mounted here: its root within the hierarchy, where, and its controllers
/// (`None`: the unified v2 hierarchy).
#[derive(Debug, Clone, PartialEq, Eq)]
struct CgroupMount {
    root: String,
    mount_point: PathBuf,
    controllers: Option<Vec<String>>,
}

fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    text.lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let fields: Vec<&str> = before.split_whitespace().collect();
            let mut after = after.split_whitespace();
            let fstype = after.next()?;
            let options = after.nth(1).unwrap_or("");
            let controllers = match fstype {
                "cgroup2" => None,
                "cgroup" => Some(options.split(',').map(str::to_owned).collect()),
                _ => return None,
            };
            Some(CgroupMount {
                root: (*fields.get(3)?).to_owned(),
                mount_point: PathBuf::from(*fields.get(4)?),
                controllers,
            })
        })
        .collect()
}

/// Every process in the memory cgroup (v1) or the unified cgroup (v2) of `pid`, if it is one of
/// the manager's session groups (`…/toolgate/<instance>/<session>`).
fn cgroup_processes(pid: i32, mounts: &[CgroupMount]) -> Option<Vec<i32>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let (mount, path) = session_group(&text, mounts)?;
    let relative = if mount.root == "/" {
        path.strip_prefix('/')?
    } else {
        path.strip_prefix(mount.root.as_str())?
            .trim_start_matches('/')
    };
    let procs = mount.mount_point.join(relative).join("cgroup.procs");
    let listed = std::fs::read_to_string(procs).ok()?;
    Some(
        listed
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect(),
    )
}

/// The mount and the group path of a session's memory (v1) or unified (v2) cgroup.
fn session_group<'a>(
    proc_cgroup: &'a str,
    mounts: &'a [CgroupMount],
) -> Option<(&'a CgroupMount, &'a str)> {
    let mut v1 = None;
    let mut v2 = None;
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if !path.contains("/toolgate/") {
            continue; // not a session group: this would count the whole host's group
        }
        if controllers.is_empty() {
            v2 = mounts
                .iter()
                .find(|m| m.controllers.is_none())
                .map(|m| (m, path));
        } else if controllers.split(',').any(|c| c == "memory") {
            v1 = mounts
                .iter()
                .find(|m| {
                    m.controllers
                        .as_ref()
                        .is_some_and(|c| c.iter().any(|c| c == "memory"))
                })
                .map(|m| (m, path));
        }
    }
    v1.or(v2)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn rollup_lines_are_read() {
        let text = "55d0-7ffd ---p 00000000 00:00 0  [rollup]\nRss:   10240 kB\nPss:    2048 kB\nPss_Anon: 1000 kB\nPrivate_Clean:  100 kB\nPrivate_Dirty:  900 kB\n";
        assert_eq!(
            parse_rollup(text),
            Some(Rollup {
                rss_kib: 10240,
                pss_kib: 2048,
                private_kib: 1000
            })
        );
        assert_eq!(parse_rollup("Rss: 1 kB\n"), None);
    }

    #[test]
    fn private_pages_are_summed_per_mapping() {
        let smaps = "\
5600-5700 r--p 00000000 08:01 12 /usr/bin/python3.11
Private_Clean:  16 kB
Private_Dirty:  0 kB
5700-5800 rw-p 00000000 00:00 0          [heap]
Private_Clean:  0 kB
Private_Dirty:  300 kB
7f00-7f01 ---p 00000000 00:00 0 
Private_Dirty:  0 kB
7f01-7f09 rw-p 00000000 00:00 0 
Private_Clean:  0 kB
Private_Dirty:  12 kB
7f09-7f0a rw-p 00000000 00:00 0 
Private_Dirty:  4 kB
7f0a-7f0b r-xp 00001000 08:01 13 /usr/lib/libpython3.11.so.1.0
Private_Clean:  0 kB
Private_Dirty:  0 kB
7f0b-7f0c rw-p 00002000 08:01 12 /usr/bin/python3.11
Private_Dirty:  4 kB
";
        let mut sums = BTreeMap::new();
        private_by_mapping(smaps, &mut sums);
        private_by_mapping(smaps, &mut sums);
        assert_eq!(sums.get("[heap]"), Some(&600));
        assert_eq!(sums.get("[anon rw-p +guard]"), Some(&24));
        assert_eq!(sums.get("[anon rw-p]"), Some(&8));
        assert_eq!(sums.get("/usr/bin/python3.11"), Some(&40));
        // nothing private: not listed
        assert!(!sums.contains_key("/usr/lib/libpython3.11.so.1.0"));
        let listed = top(sums, 2, 2);
        assert_eq!(
            listed,
            vec![
                ("[heap]".to_owned(), 300.0),
                ("/usr/bin/python3.11".to_owned(), 20.0)
            ]
        );
    }

    #[test]
    fn session_groups_are_found_on_v1_and_v2() {
        let mountinfo = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                         39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n\
                         41 31 0:38 /base /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                         22 1 0:21 / /proc rw - proc proc rw\n";
        let mounts = parse_mountinfo(mountinfo);
        assert_eq!(mounts.len(), 3);
        let v1 = "8:pids:/srv/toolgate/i1/s1\n4:memory:/srv/toolgate/i1/s1\n0::/\n";
        let (mount, path) = session_group(v1, &mounts).unwrap();
        assert_eq!(mount.mount_point, PathBuf::from("/sys/fs/cgroup/memory"));
        assert_eq!(path, "/srv/toolgate/i1/s1");
        let v2 = "0::/base/toolgate/i1/s1\n";
        let (mount, path) = session_group(v2, &mounts).unwrap();
        assert_eq!(mount.root, "/base");
        assert_eq!(path, "/base/toolgate/i1/s1");
        // the host's own group is never taken for a session's
        assert!(session_group("4:memory:/srv\n0::/\n", &mounts).is_none());
    }
}
