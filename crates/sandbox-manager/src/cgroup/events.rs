//! The evidence of an out-of-memory kill in a session's memory group, read before and after
//! every call. The files stay open for the group's life and are re-read at offset 0 (cgroupfs
//! regenerates them on each read), so a call costs two reads instead of two path walks, opens
//! and closes per file.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use super::Controller;

/// Longest counter file read; all of them are a few lines of `key value`.
const COUNTER_BYTES: usize = 1024;

/// The OOM evidence of a session's memory group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemoryEvents {
    /// Processes the OOM killer killed (None: this kernel does not say).
    pub oom_kills: Option<u64>,
    /// Times the usage hit the limit (v1 `memory.failcnt`, v2 `memory.events` max).
    pub limit_hits: u64,
}

impl MemoryEvents {
    /// Whether the OOM killer struck between `self` and `later`: its count, or, on kernels
    /// without one, the limit being hit.
    pub(crate) fn oom_since(&self, later: &Self) -> u64 {
        match (self.oom_kills, later.oom_kills) {
            (Some(before), Some(after)) => after.saturating_sub(before),
            _ => u64::from(later.limit_hits > self.limit_hits),
        }
    }
}

/// Open handles on a group's counter files; a file that could not be opened reads as zero.
#[derive(Debug, Default)]
pub(super) struct EventFiles {
    /// v1 `memory.oom_control` (its `oom_kill` line).
    oom_control: Option<File>,
    /// v1 `memory.failcnt`.
    failcnt: Option<File>,
    /// v2 `memory.events` (`oom_kill` and `max`).
    events: Option<File>,
}

impl EventFiles {
    /// Opens the counters of the memory (v1) or unified (v2) group among `dirs`.
    pub(super) fn open(dirs: &[(Controller, PathBuf)]) -> Self {
        let mut files = Self::default();
        for (controller, dir) in dirs {
            match controller {
                Controller::Memory => {
                    files.oom_control = File::open(dir.join("memory.oom_control")).ok();
                    files.failcnt = File::open(dir.join("memory.failcnt")).ok();
                }
                Controller::Unified => {
                    files.events = File::open(dir.join("memory.events")).ok();
                }
                _ => {}
            }
        }
        files
    }

    /// The counters as they stand now.
    pub(super) fn read(&self) -> MemoryEvents {
        let mut events = MemoryEvents::default();
        if let Some(text) = self.oom_control.as_ref().and_then(read_from_start) {
            events.oom_kills = keyed(&text, "oom_kill");
        }
        if let Some(text) = self.failcnt.as_ref().and_then(read_from_start) {
            events.limit_hits = text.trim().parse().unwrap_or(0);
        }
        if let Some(text) = self.events.as_ref().and_then(read_from_start) {
            events.oom_kills = keyed(&text, "oom_kill");
            events.limit_hits = keyed(&text, "max").unwrap_or(0);
        }
        events
    }
}

fn read_from_start(file: &File) -> Option<String> {
    let mut buf = [0u8; COUNTER_BYTES];
    let len = file.read_at(&mut buf, 0).ok()?;
    Some(String::from_utf8_lossy(buf.get(..len)?).into_owned())
}

/// The number after `key ` on a line of a flat-keyed cgroup file.
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(' ')?;
        (name == key).then(|| value.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn flat_keyed_files_give_the_oom_count() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(keyed(v1, "oom_kill"), Some(3));
        let v2 = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(keyed(v2, "oom_kill"), Some(1));
        assert_eq!(keyed(v2, "max"), Some(12));
        assert_eq!(keyed("oom_kill_disable 0\n", "oom_kill"), None);
        let before = MemoryEvents {
            oom_kills: Some(1),
            limit_hits: 5,
        };
        let after = MemoryEvents {
            oom_kills: Some(2),
            limit_hits: 9,
        };
        assert_eq!(before.oom_since(&after), 1);
        // without the counter, hitting the limit is the evidence
        let old_kernel = |hits| MemoryEvents {
            oom_kills: None,
            limit_hits: hits,
        };
        assert_eq!(old_kernel(0).oom_since(&old_kernel(4)), 1);
        assert_eq!(old_kernel(4).oom_since(&old_kernel(4)), 0);
    }

    #[test]
    fn open_counters_are_read_again_from_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let group = dir.path().to_path_buf();
        std::fs::write(
            group.join("memory.oom_control"),
            "under_oom 0\noom_kill 0\n",
        )
        .unwrap();
        std::fs::write(group.join("memory.failcnt"), "0\n").unwrap();
        let files = EventFiles::open(&[(Controller::Memory, group.clone())]);
        let before = files.read();
        assert_eq!(before.oom_kills, Some(0));
        // rewritten in place, as the kernel's counters change under an open handle
        std::fs::write(
            group.join("memory.oom_control"),
            "under_oom 0\noom_kill 2\n",
        )
        .unwrap();
        std::fs::write(group.join("memory.failcnt"), "17\n").unwrap();
        let after = files.read();
        assert_eq!(
            after,
            MemoryEvents {
                oom_kills: Some(2),
                limit_hits: 17
            }
        );
        assert_eq!(before.oom_since(&after), 2);
        let missing = EventFiles::open(&[(Controller::Memory, group.join("gone"))]);
        assert_eq!(missing.read(), MemoryEvents::default());
    }
}
