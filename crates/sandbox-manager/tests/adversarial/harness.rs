//! Helpers of the adversarial suite (`tests/adversarial/`): a hardened manager with cgroups
//! required, small limits, the checks every attack ends with (the service is healthy, the
//! attacked session still works or says it is fresh, nothing of it is left on the host), and
//! host-side views of a session (its cgroups and processes).

// Test code: a panic is how a helper reports failure; not every test binary uses every helper.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use toolgate_sandbox::Limits;
use toolgate_sandbox_manager::{
    CgroupMode, ManagerConfig, ManagerError, RunOutcome, SandboxManager, SessionError,
};

use crate::common::{harden_lib, limits, outside_tmp, repo_root, zygote_config};

/// A hardened manager (the production confinement) with cgroups required, its workspaces in
/// a directory of its own; the directory goes when this is dropped.
pub struct Sandbox {
    pub m: SandboxManager,
    /// the directory that holds `root` (and whatever a test puts next to it)
    pub dir: TempDir,
    /// the sessions root (`ManagerConfig::root`)
    pub root: PathBuf,
}

impl Sandbox {
    pub async fn start(tweak: impl FnOnce(&mut ManagerConfig)) -> Self {
        let dir = outside_tmp();
        let root = dir.path().join("sessions");
        let mut config = ManagerConfig::new(zygote_config(Some(vec![])), &root);
        config.zygote.harden_lib = Some(harden_lib());
        config.cgroups = CgroupMode::Required;
        tweak(&mut config);
        let m = SandboxManager::start(config).await.unwrap();
        Self { m, dir, root }
    }

    pub async fn zygote_pid(&self) -> i32 {
        self.m.current_zygote().await.unwrap().pid()
    }

    /// Runs Python code in `account`'s session `id`.
    pub async fn exec(
        &self,
        account: &str,
        id: &str,
        code: &str,
        limits: &Limits,
    ) -> Result<RunOutcome, ManagerError> {
        self.m
            .exec(account, Some(id), code, limits, &[], None)
            .await
    }

    /// Runs Python code that must succeed, returning the call.
    pub async fn ok(&self, account: &str, id: &str, code: &str, limits: &Limits) -> RunOutcome {
        let call = self
            .exec(account, id, code, limits)
            .await
            .unwrap_or_else(|e| panic!("{code:?} failed: {e:?}"));
        assert!(
            call.outcome.error.is_none(),
            "{code:?} raised {:?}\nstderr: {}",
            call.outcome.error,
            call.outcome.stderr
        );
        call
    }

    /// Runs a bash command line in `account`'s session `id`.
    pub async fn bash(
        &self,
        account: &str,
        id: &str,
        command: &str,
        limits: &Limits,
    ) -> Result<RunOutcome, ManagerError> {
        self.m
            .bash(account, Some(id), command, limits, &[], None)
            .await
    }

    /// (c) The service is healthy: the same manager runs `1+1` in a new session of an account
    /// no attack used, with the same zygote as before the attack.
    pub async fn assert_healthy(&self, zygote_before: i32) {
        let call = self.ok("bystander", "healthy", "1+1", &limits(30)).await;
        assert_eq!(text(&call), "2");
        assert!(call.fresh);
        let zygote = self.m.current_zygote().await.unwrap();
        assert!(zygote.is_alive(), "the zygote died");
        assert_eq!(zygote.pid(), zygote_before, "the zygote was restarted");
        assert!(self.m.close_session("bystander", "healthy").await);
    }

    /// (c) The attacked session either still works (it kept `name`, set to the str `value`
    /// before the attack) or its next call says it is fresh (and `name` is gone). Returns
    /// whether it was fresh.
    pub async fn assert_survived_or_fresh(
        &self,
        account: &str,
        id: &str,
        name: &str,
        value: &str,
    ) -> bool {
        let code = format!("try:\n    _r = {name}\nexcept NameError:\n    _r = None\n_r");
        let call = self.ok(account, id, &code, &limits(30)).await;
        if call.fresh {
            assert_eq!(text(&call), "", "a fresh session still has {name}");
        } else {
            assert_eq!(text(&call), format!("'{value}'"), "{name} changed");
        }
        call.fresh
    }

    /// (c) The attacked session still works and kept its variables.
    pub async fn assert_survived(&self, account: &str, id: &str, name: &str, value: &str) {
        assert!(
            !self
                .assert_survived_or_fresh(account, id, name, value)
                .await,
            "the session {id} was expected to survive, but its next call was fresh"
        );
    }

    /// (c) The attacked session's next call is fresh.
    pub async fn assert_fresh(&self, account: &str, id: &str, name: &str) {
        assert!(
            self.assert_survived_or_fresh(account, id, name, "").await,
            "the session {id} was expected to be fresh"
        );
    }
}

/// Python that tries `attempt(name, fn)` for each probe and returns
/// `json.dumps({name: 'ok:<start of what it read>' | '<exception type>:<errno name>'})`.
pub const PROBE: &str = "import errno, json, os\n\
                     seen = {}\n\
                     def attempt(name, fn):\n    \
                         try:\n        \
                             seen[name] = 'ok:' + repr(fn())[:4000]\n    \
                         except Exception as e:\n        \
                             code = errno.errorcode.get(getattr(e, 'errno', None) or 0, '')\n        \
                             seen[name] = f'{type(e).__name__}:{code}'\n\
                     def read(path):\n    \
                         with open(path, 'rb') as f:\n        \
                             return f.read(4096)\n";

/// Small limits that keep attacks fast: 256 MiB memory, 64 pids, 64 MiB workspace.
pub fn small(timeout_s: u64) -> Limits {
    let mut limits = limits(timeout_s);
    limits.memory_bytes = 256 << 20;
    limits.max_pids = 64;
    limits.workspace_bytes = 64 << 20;
    limits
}

/// The value of the call's last expression (its `repr`), "" when none.
pub fn text(call: &RunOutcome) -> &str {
    call.outcome
        .result
        .as_ref()
        .map_or("", |value| value.text_plain.as_str())
}

/// The value of the call's last expression, a string, unquoted (`repr` of a plain ASCII str).
pub fn string(call: &RunOutcome) -> String {
    let text = text(call);
    let inner = text
        .strip_prefix('\'')
        .and_then(|t| t.strip_suffix('\''))
        .unwrap_or_else(|| panic!("not a str repr: {text}"));
    inner.replace("\\'", "'").replace("\\\\", "\\")
}

/// The value of the call's last expression, which must be `json.dumps(...)`.
pub fn json(call: &RunOutcome) -> serde_json::Value {
    serde_json::from_str(&string(call)).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(call)))
}

/// The type name of the exception the call raised, "" when none.
pub fn error_type(call: &RunOutcome) -> &str {
    call.outcome
        .error
        .as_ref()
        .map_or("", |e| e.error_type.as_str())
}

/// The session error of a failed call.
pub fn session_error(result: &Result<RunOutcome, ManagerError>) -> &SessionError {
    match result {
        Err(ManagerError::Session(error)) => error,
        other => panic!("expected a session error, got {other:?}"),
    }
}

/// A string unique to this test process and `name`, for command lines and files.
pub fn marker(name: &str) -> String {
    format!("tgadv-{}-{name}", std::process::id())
}

/// A host process, by pid and start time (so a reused pid is not mistaken for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostProcess {
    pub pid: i32,
    pub start: u64,
}

impl HostProcess {
    pub fn of(pid: i32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // after the command's ")": state is field 3, start time field 22
        let start = stat.rsplit_once(')')?.1.split(' ').nth(20)?.parse().ok()?;
        Some(Self { pid, start })
    }

    /// Still there (a zombie counts: not yet reaped).
    pub fn exists(&self) -> bool {
        Self::of(self.pid) == Some(*self)
    }
}

/// The pids of processes whose command line contains `marker`.
pub fn with_marker(marker: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(marker))
        })
        .collect()
}

/// Kills the processes carrying a marker when dropped: a failing test leaves nothing running.
pub struct KillMarked(pub String);

impl Drop for KillMarked {
    fn drop(&mut self) {
        for pid in with_marker(&self.0) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// Polls `cond` until it holds, failing after `within`.
pub async fn within(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < within, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A session as the host sees it: its cgroup directories and the processes seen in them.
#[derive(Debug)]
pub struct Traced {
    pub session: HostProcess,
    /// memory and pids (v1), or the unified group (v2)
    pub groups: Vec<PathBuf>,
    pub seen: Vec<HostProcess>,
}

/// The directory of `pid`'s group for a v1 `controller`, or its unified group (v2).
pub fn cgroup_dir(pid: i32, controller: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next()?, parts.next()?);
        if controllers.split(',').any(|c| c == controller) {
            return Some(PathBuf::from(format!("/sys/fs/cgroup/{controller}{path}")));
        }
    }
    let unified = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(PathBuf::from(format!("/sys/fs/cgroup{unified}")))
}

impl Traced {
    /// Finds the groups of the session process `pid` (which must be alive).
    pub fn of(pid: i32) -> Self {
        let session = HostProcess::of(pid).unwrap_or_else(|| panic!("no process {pid}"));
        let mut groups: Vec<PathBuf> = ["memory", "pids"]
            .iter()
            .filter_map(|c| cgroup_dir(pid, c))
            .collect();
        groups.dedup();
        for group in &groups {
            assert!(
                group.to_str().unwrap().contains("/toolgate/"),
                "{pid} is not in a session group: {}",
                group.display()
            );
        }
        let mut traced = Self {
            session,
            groups,
            seen: Vec::new(),
        };
        traced.look();
        traced
    }

    /// The processes in the session's groups now (tgids).
    pub fn members(&self) -> Vec<i32> {
        let Some(group) = self.groups.last() else {
            return Vec::new();
        };
        std::fs::read_to_string(group.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Remembers the processes in the session's groups now; returns how many there are.
    pub fn look(&mut self) -> usize {
        let members = self.members();
        for pid in &members {
            if let Some(process) = HostProcess::of(*pid)
                && !self.seen.contains(&process)
            {
                self.seen.push(process);
            }
        }
        members.len()
    }

    /// `pids.current` of the session's group.
    /// `pids.current` of the session's group; panics when it cannot be read, which would
    /// otherwise read as 0 and pass every upper bound.
    pub fn pids_current(&self) -> u64 {
        self.groups
            .iter()
            .find_map(|g| std::fs::read_to_string(g.join("pids.current")).ok())
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or_else(|| panic!("pids.current unreadable in {:?}", self.groups))
    }

    /// Within a few seconds, every process seen in the session's groups is gone (the groups
    /// themselves may stay until the session is retired).
    pub async fn assert_processes_gone(&self) {
        within(
            Duration::from_secs(5),
            "the session's processes gone",
            || self.seen.iter().all(|p| !p.exists()),
        )
        .await;
    }

    /// (d) Within a few seconds: the session's groups are gone (a v1 group cannot be removed
    /// while a process is in it) and so is every process seen in them.
    pub async fn assert_gone(&self) {
        within(
            Duration::from_secs(5),
            "the session's processes and groups gone",
            || self.groups.iter().all(|g| !g.exists()) && self.seen.iter().all(|p| !p.exists()),
        )
        .await;
    }
}

/// (d) Within a few seconds, no process carries `marker` in its command line.
pub async fn assert_no_marker(marker: &str) {
    within(
        Duration::from_secs(5),
        &format!("no process with {marker}"),
        || with_marker(marker).is_empty(),
    )
    .await;
}

/// A Python expression of a path, quoted.
pub fn py(path: &Path) -> String {
    format!("{:?}", path.to_str().unwrap())
}

/// The host pids of the processes in `session`'s pid namespace.
pub fn namespace_members(session: i32) -> Vec<i32> {
    let Ok(ns) = std::fs::read_link(format!("/proc/{session}/ns/pid")) else {
        return Vec::new();
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/ns/pid")).is_ok_and(|n| n == ns))
        .collect()
}

/// Whether `pid` is exiting (`PF_EXITING`: it may already have left its groups), a zombie, or
/// gone (from `/proc/<pid>/stat`).
pub fn is_exiting(pid: i32) -> bool {
    const PF_EXITING: u64 = 0x4;
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return true;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first().copied().unwrap_or("X");
    let flags: u64 = fields.get(6).and_then(|f| f.parse().ok()).unwrap_or(0);
    state == "Z" || state == "X" || flags & PF_EXITING != 0
}

/// What a [`Watch`] saw while an attack ran.
#[derive(Debug, Default)]
pub struct Watched {
    /// the highest `pids.current` of the session's group
    pub max_pids: u64,
    /// the most processes seen at once in the session's pid namespace
    pub max_in_namespace: usize,
    /// processes of the session's pid namespace that were outside its group (must be none)
    pub outside_group: Vec<i32>,
    /// every process seen in the namespace or the group
    pub seen: Vec<HostProcess>,
}

/// Samples a session from the host while an attack runs (a thread, every 50 ms).
pub struct Watch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Watched>,
}

impl Watch {
    pub fn start(traced: &Traced) -> Self {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (session, groups) = (traced.session, traced.groups.clone());
        let flag = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let traced = Traced {
                session,
                groups,
                seen: Vec::new(),
            };
            let mut watched = Watched::default();
            loop {
                let done = flag.load(Ordering::Acquire);
                watched.max_pids = watched.max_pids.max(traced.pids_current());
                let members = namespace_members(session.pid);
                watched.max_in_namespace = watched.max_in_namespace.max(members.len());
                for pid in members.iter().copied().chain(traced.members()) {
                    let Some(process) = HostProcess::of(pid) else {
                        continue;
                    };
                    if !watched.seen.contains(&process) {
                        watched.seen.push(process);
                    }
                }
                // On v1 a process shows the root groups from the moment it leaves its own on exit
                // (it still counts in pids.current until reaped): only a process that is not
                // exiting counts, if it is still outside a moment later.
                let outside = |pid: i32| {
                    !is_exiting(pid)
                        && ["memory", "pids"].iter().any(|controller| {
                            cgroup_dir(pid, controller)
                                .is_some_and(|dir| !traced.groups.contains(&dir))
                        })
                        && !is_exiting(pid)
                };
                let suspects: Vec<i32> = members.into_iter().filter(|pid| outside(*pid)).collect();
                if !suspects.is_empty() {
                    std::thread::sleep(Duration::from_millis(100));
                }
                for pid in suspects {
                    if outside(pid) && !watched.outside_group.contains(&pid) {
                        watched.outside_group.push(pid);
                    }
                }
                if done {
                    return watched;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Self { stop, thread }
    }

    /// Stops sampling (after one last look) and says what was seen.
    pub fn stop(self) -> Watched {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.thread.join().unwrap()
    }
}

impl Traced {
    /// Adds what a watch saw to the processes that must be gone at the end.
    pub fn add(&mut self, watched: &Watched) {
        for process in &watched.seen {
            if !self.seen.contains(process) {
                self.seen.push(*process);
            }
        }
    }
}

/// Runs the futures concurrently (on the calling task) and returns their outputs in order.
pub async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pending: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (future, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none()
                && let std::task::Poll::Ready(value) = future.as_mut().poll(cx)
            {
                *output = Some(value);
            }
        }
        if outputs.iter().all(Option::is_some) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// `/tmp` on the way to it, which every session's own `/tmp` then shows.
/// When the checkout (and so the runtime) lives beneath `/tmp`: the first directory below
pub fn runtime_path_in_tmp() -> Option<String> {
    let repo = repo_root();
    let below = repo.strip_prefix("/tmp").ok()?;
    below
        .components()
        .next()
        .map(|first| first.as_os_str().to_string_lossy().into_owned())
}
