//! `toolgate-bench --sandbox`: the sandbox figures the product asks for, printed beside their
//! targets (not judged).
//!
//! 1. New session → first result: timed around `SandboxManager::exec` in this process, with the
//!    configuration `serve` uses (confined, cgroups when the host has them, tmpfs workspaces), and
//!    the same through HTTP for comparison.
//! 2. A warm `1+1` round trip through HTTP on one keep-alive connection (and, for the split,
//!    the same call to the manager in this process).
//! 3. Memory per idle session with many sessions live (PSS of the session processes).
//! 4. The time to return a matplotlib figure through HTTP, and the PNG's size.
//!
//! The in-process manager runs first and is shut down before the server starts, so the two
//! never share the machine. Everything lives in one temporary directory under `target/` (not
//! `/tmp`: each session mounts its own empty `/tmp`), removed at the end.

mod bursts;
mod direct;
mod durable;
mod durable_http;
mod http;
mod memory;
mod nodes;
mod pip;
mod plain_figure;
mod report;
mod side_by_side;
mod stages;
mod throughput;
mod timed;

pub(crate) use timed::{timed, timed_pair};

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::{Args, progress, wait_for_quiet};

/// The confinement library's file name, as cargo builds it (`serve` looks for it beside itself).
const HARDEN_LIB: &str = "libtoolgate_sandbox_harden.so";
/// Where the runtime and the zygote script are, relative to a checkout.
const RUNTIME: &str = ".deps/python-runtime";
const ZYGOTE: &str = "runtime/toolgate_zygote.py";

/// The sandbox figures' own options (the shared ones, such as `--toolgate`, `--json` and
/// `--quiet-wait-secs`, apply too).
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxArgs {
    /// Measure the sandbox figures (new session, warm call, memory per session, matplotlib)
    /// instead of the HTTP throughput figures
    #[arg(long)]
    pub sandbox: bool,
    /// New sessions timed per new-session figure, and sessions live for the memory figure
    #[arg(long, default_value_t = 200)]
    pub sandbox_sessions: usize,
    /// Pause between two new sessions of the new-session figures, in milliseconds (untimed):
    /// lets the previous session's close and any refill of pre-started sessions finish first
    #[arg(long, default_value_t = 0)]
    pub sandbox_gap_ms: u64,
    /// Warm `1+1` calls timed through HTTP
    #[arg(long, default_value_t = 2000)]
    pub sandbox_calls: usize,
    /// matplotlib figures timed through HTTP
    #[arg(long, default_value_t = 200)]
    pub sandbox_plots: usize,
    /// Measure `pip install` in new sessions: from the operator's index, then from the host's
    /// wheel cache (needs `.deps/venv/bin/pypi-server`, from scripts/deps.sh)
    #[arg(long)]
    pub sandbox_pip: bool,
    /// Measure what the call history adds to a warm `1+1` through HTTP: two servers, history on
    /// and off, their calls alternated (--sandbox-calls each)
    #[arg(long)]
    pub sandbox_history: bool,
    /// Compare two servers on a warm `1+1` through HTTP, their calls alternated
    /// (--sandbox-calls each): the defaults against the --sandbox-server-flag's, or this
    /// build against --sandbox-compare-toolgate's
    #[arg(long)]
    pub sandbox_compare: bool,
    /// The second server's binary of --sandbox-compare (another build, say of the commit
    /// before), the first being --toolgate's
    #[arg(long)]
    pub sandbox_compare_toolgate: Option<PathBuf>,
    /// The Python runtime [default: .deps/python-runtime of the working directory, else of the
    /// checkout this program was built in]
    #[arg(long)]
    pub sandbox_runtime: Option<PathBuf>,
    /// Measure sessions that outlive their process instead (hibernation and restore of a small
    /// and a large session, and many sessions hibernated), server side
    #[arg(long)]
    pub sandbox_durable: bool,
    /// Small sessions hibernated and restored (--sandbox-durable)
    #[arg(long, default_value_t = 20)]
    pub sandbox_durable_small: usize,
    /// Large sessions (100 MiB of arrays, 100 MiB of files) hibernated and restored
    #[arg(long, default_value_t = 3)]
    pub sandbox_durable_large: usize,
    /// Sessions created and hibernated for the disk figure
    #[arg(long, default_value_t = 200)]
    pub sandbox_hibernated: usize,
    /// Measure throughput of real work instead: 16 clients each running `1+1` in their own
    /// session, and a 50 ms CPU-bound cell with 1 client, one per core and 16; calls/s, latency
    /// and the service's CPU per call
    #[arg(long)]
    pub sandbox_throughput: bool,
    /// The longest each throughput figure runs, in seconds (at most 100,000 calls each)
    #[arg(long, default_value_t = 10)]
    pub sandbox_throughput_secs: u64,
    /// Measure many hosts on this machine instead: warm calls through a front end and a node
    /// beside a single process, CPU per call, and a session's return after its node is killed
    #[arg(long)]
    pub sandbox_nodes: bool,
    /// Measure new sessions in bursts through HTTP instead: --sandbox-sessions back to back
    /// and --sandbox-burst-at-once at once, each twice (the warm pool at its floor, then sized
    /// by the demand it saw)
    #[arg(long)]
    pub sandbox_bursts: bool,
    /// New sessions sent at once in the at-once bursts (--sandbox-bursts)
    #[arg(long, default_value_t = 50)]
    pub sandbox_burst_at_once: usize,
    /// The client path of the bursts' calls (--sandbox-bursts): bare POST, a 2025-11-25
    /// session with SSE accepted (one session for every call, as a client keeps it), or
    /// 2026-07-28
    #[arg(long, value_enum, default_value_t = bursts::BurstPath::Bare)]
    pub sandbox_bursts_path: bursts::BurstPath,
    /// A flag for the bursts' server (not one the bench sets) or the second server of
    /// --sandbox-compare (where it replaces the bench's own), as FLAG=VALUE (repeatable), e.g.
    /// --sandbox-server-flag=--sandbox-warm-sessions=200: the server gets no TOOLGATE_*
    /// variable of this program's environment
    #[arg(long, value_parser = server_flag)]
    pub sandbox_server_flag: Vec<(String, String)>,
}

/// `--FLAG=VALUE` split at its first `=` after the name; the flag must start with `--`.
fn server_flag(text: &str) -> std::result::Result<(String, String), String> {
    match text.split_once('=') {
        Some((flag, value)) if flag.starts_with("--") && flag.len() > 2 => {
            Ok((flag.to_owned(), value.to_owned()))
        }
        _ => Err(format!("{text:?} is not --FLAG=VALUE")),
    }
}

/// Runs the burst figures and prints them.
pub fn run_bursts(args: &Args, binary: &Path) -> Result<()> {
    let files = locate(args.sandbox.sandbox_runtime.as_deref(), binary)?;
    let dir = scratch_dir()?;
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let figures = bursts::measure(
        &client,
        &bursts::Plan {
            binary,
            files: &files,
            dir: dir.path(),
            back_to_back: args.sandbox.sandbox_sessions,
            at_once: args.sandbox.sandbox_burst_at_once,
            quiet: Duration::from_secs(args.quiet_wait_secs),
            server_flags: &args.sandbox.sandbox_server_flag,
            path: args.sandbox.sandbox_bursts_path,
        },
    )?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&bursts::to_json(&figures))?
        );
    } else {
        print!("{}", bursts::table(&figures));
    }
    Ok(())
}

/// Runs the many-hosts figures and prints them.
pub fn run_nodes(args: &Args, binary: &Path) -> Result<()> {
    let files = locate(args.sandbox.sandbox_runtime.as_deref(), binary)?;
    let dir = scratch_dir()?;
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let figures = nodes::measure(
        &client,
        binary,
        &files,
        dir.path(),
        args.sandbox.sandbox_calls,
    )?;
    print!("{}", nodes::table(&figures));
    Ok(())
}

/// Runs the throughput figures and prints them.
pub fn run_throughput(args: &Args, binary: &Path) -> Result<()> {
    let files = locate(args.sandbox.sandbox_runtime.as_deref(), binary)?;
    let dir = scratch_dir()?;
    throughput::run(
        &files,
        binary,
        dir.path(),
        args.sandbox.sandbox_throughput_secs,
    )
}

/// The files a sandbox needs, found once and given to both the in-process manager and `serve`.
#[derive(Debug, Clone)]
pub(crate) struct Files {
    pub(crate) runtime: PathBuf,
    pub(crate) zygote: PathBuf,
    pub(crate) harden_lib: PathBuf,
}

impl Files {
    /// The settings of a release server for a sandbox figure: no call refused for the allowance,
    /// the sandbox on with these files and its sessions under `root`, no account share of memory
    /// (one account holds every session), and up to `max_sessions` of them.
    pub(crate) fn server_settings(
        &self,
        root: &Path,
        max_sessions: usize,
    ) -> Vec<(String, String)> {
        let path = |p: &Path| p.display().to_string();
        [
            ("--free-monthly-calls", "1000000000".to_owned()),
            ("--sandbox", "on".to_owned()),
            ("--sandbox-runtime", path(&self.runtime)),
            ("--sandbox-zygote", path(&self.zygote)),
            ("--sandbox-harden-lib", path(&self.harden_lib)),
            ("--sandbox-root", path(root)),
            ("--sandbox-account-memory-mib", "0".to_owned()),
            ("--sandbox-max-sessions", max_sessions.to_string()),
        ]
        .into_iter()
        .map(|(flag, value)| (flag.to_owned(), value))
        .collect()
    }
}

/// Runs the sandbox figures and prints them.
pub fn run(args: &Args, binary: &Path) -> Result<()> {
    let sandbox = &args.sandbox;
    if sandbox.sandbox_pip {
        let files = locate(sandbox.sandbox_runtime.as_deref(), binary)?;
        let dir = scratch_dir()?;
        return pip::run(&files, binary, dir.path());
    }
    if sandbox.sandbox_history || sandbox.sandbox_compare {
        let pair = if sandbox.sandbox_history {
            side_by_side::Pair::history()
        } else if sandbox.sandbox_server_flag.is_empty()
            && sandbox.sandbox_compare_toolgate.is_none()
        {
            bail!(
                "--sandbox-compare needs a --sandbox-server-flag=--FLAG=VALUE or a \
                 --sandbox-compare-toolgate=BINARY"
            );
        } else {
            side_by_side::Pair::compare(
                &sandbox.sandbox_server_flag,
                sandbox.sandbox_compare_toolgate.as_deref(),
            )
        };
        let files = locate(sandbox.sandbox_runtime.as_deref(), binary)?;
        let dir = scratch_dir()?;
        let calls = sandbox.sandbox_calls.clamp(1, 100_000);
        return side_by_side::run(&files, binary, dir.path(), calls, &pair);
    }
    if sandbox.sandbox_sessions == 0 || sandbox.sandbox_calls == 0 || sandbox.sandbox_plots == 0 {
        bail!("--sandbox-sessions, --sandbox-calls and --sandbox-plots must be at least 1");
    }
    // bounds, so a typo cannot start a run of hours or thousands of processes
    if sandbox.sandbox_gap_ms > 1000
        || sandbox.sandbox_sessions > 1000
        || sandbox.sandbox_calls > 100_000
        || sandbox.sandbox_plots > 10_000
    {
        bail!(
            "at most 1,000 sessions, 100,000 calls, 10,000 plots and a 1 s gap (--sandbox-sessions, --sandbox-calls, --sandbox-plots, --sandbox-gap-ms)"
        );
    }
    let files = locate(sandbox.sandbox_runtime.as_deref(), binary)?;
    let dir = scratch_dir()?;
    progress(&format!(
        "sandbox figures: runtime {}, confinement {}, scratch {}",
        files.runtime.display(),
        files.harden_lib.display(),
        dir.path().display()
    ));
    let quiet = Duration::from_secs(args.quiet_wait_secs);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let direct = runtime.block_on(direct::measure(
        &files,
        &dir.path().join("direct-sessions"),
        (sandbox.sandbox_sessions, sandbox.sandbox_calls),
        Duration::from_millis(sandbox.sandbox_gap_ms),
        quiet,
    ))?;
    drop(runtime);

    wait_for_quiet(quiet);
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let through_http = http::measure(
        &client,
        &http::Plan {
            binary,
            files: &files,
            dir: dir.path(),
            sessions: sandbox.sandbox_sessions,
            gap: Duration::from_millis(sandbox.sandbox_gap_ms),
            calls: sandbox.sandbox_calls,
            plots: sandbox.sandbox_plots,
            sqlite_synchronous: args.sqlite_synchronous.as_deref(),
            database_url: args.database_url.as_deref(),
            quiet,
        },
    )?;
    drop(client);

    let report = report::SandboxReport {
        binary: binary.display().to_string(),
        sqlite_synchronous: args.sqlite_synchronous.clone(),
        backend: if args.database_url.is_some() {
            "postgres"
        } else {
            "sqlite"
        },
        gap_ms: sandbox.sandbox_gap_ms,
        direct,
        http: through_http,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.table());
    }
    if args.keep_data {
        let kept = dir.keep();
        progress(&format!("data and server logs kept in {}", kept.display()));
    } else {
        let path = dir.path().to_owned();
        if let Err(err) = dir.close() {
            progress(&format!("could not remove {}: {err}", path.display()));
        }
    }
    Ok(())
}

/// Runs the durable-session figures and prints them.
pub fn run_durable(args: &Args, binary: &Path) -> Result<()> {
    let sandbox = &args.sandbox;
    if sandbox.sandbox_durable_small == 0
        || sandbox.sandbox_durable_small > 1000
        || sandbox.sandbox_durable_large > 20
        || sandbox.sandbox_hibernated > 20_000
    {
        bail!(
            "1 to 1,000 small sessions, at most 20 large ones and 20,000 hibernated ones \
             (--sandbox-durable-small, --sandbox-durable-large, --sandbox-hibernated)"
        );
    }
    let files = locate(sandbox.sandbox_runtime.as_deref(), binary)?;
    let dir = scratch_dir()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let figures = runtime.block_on(durable::measure(
        &files,
        dir.path(),
        (
            sandbox.sandbox_durable_small,
            sandbox.sandbox_durable_large,
            sandbox.sandbox_hibernated,
        ),
        Duration::from_secs(args.quiet_wait_secs),
    ))?;
    drop(runtime);
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let through_http = durable_http::measure(
        &client,
        binary,
        &files,
        dir.path(),
        sandbox.sandbox_durable_small,
    )?;
    print!("{}", report::durable_table(&figures, &through_http));
    Ok(())
}

/// A temporary directory under `target/` (beside this program's profile directory), mode 0711:
/// the sessions' uids must be able to pass through it to their workspaces, and it must not be
/// under `/tmp`.
pub(crate) fn scratch_dir() -> Result<tempfile::TempDir> {
    let exe = std::env::current_exe().context("cannot find this program's path")?;
    let target = exe
        .parent()
        .and_then(Path::parent)
        .map_or_else(|| PathBuf::from("target"), Path::to_owned);
    let target = std::path::absolute(&target)?;
    if target.starts_with("/tmp") {
        bail!(
            "{} is under /tmp, where sessions cannot have their workspaces: run the bench from a checkout's target/",
            target.display()
        );
    }
    let dir = tempfile::Builder::new()
        .prefix("toolgate-sandbox-bench-")
        .tempdir_in(&target)
        .with_context(|| format!("cannot make a temporary directory in {}", target.display()))?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))?;
    for ancestor in dir.path().ancestors().skip(1) {
        let mode = std::fs::metadata(ancestor)?.permissions().mode();
        if mode & 0o001 == 0 {
            bail!(
                "{} is not searchable by others (mode {mode:o}): session uids could not reach their workspaces",
                ancestor.display()
            );
        }
    }
    Ok(dir)
}

/// The runtime and zygote script as `serve` finds them (working directory, else the checkout
/// this program was built in), and the confinement library beside the toolgate binary.
pub(crate) fn locate(runtime: Option<&Path>, binary: &Path) -> Result<Files> {
    let runtime = match runtime {
        Some(path) => path.to_owned(),
        None => in_checkout(RUNTIME).with_context(|| {
            format!("no Python runtime: build one with `scripts/python-runtime.sh {RUNTIME}` or name it with --sandbox-runtime")
        })?,
    };
    if !runtime.join("bin/python").exists() {
        bail!("{} has no bin/python", runtime.display());
    }
    let zygote = in_checkout(ZYGOTE).context("no zygote script (runtime/toolgate_zygote.py)")?;
    let harden_lib = binary
        .parent()
        .map(|dir| dir.join(HARDEN_LIB))
        .filter(|path| path.is_file())
        .with_context(|| {
            format!(
                "no {HARDEN_LIB} beside {}: cargo build --release -p toolgate-sandbox-harden",
                binary.display()
            )
        })?;
    Ok(Files {
        runtime: std::path::absolute(runtime)?,
        zygote: std::path::absolute(zygote)?,
        harden_lib: std::path::absolute(harden_lib)?,
    })
}

/// `relative` under the working directory, else under the checkout of this program
/// (`<checkout>/target/<profile>/toolgate-bench`).
pub(crate) fn in_checkout(relative: &str) -> Option<PathBuf> {
    let here = Path::new(relative);
    if here.exists() {
        return Some(here.to_owned());
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(|root| root.join(relative)))
        .filter(|path| path.exists())
}

/// Latencies in nanoseconds, kept sorted.
#[derive(Debug, Default, Clone)]
pub struct Timings(Vec<u64>);

impl Timings {
    pub(crate) fn push(&mut self, elapsed: Duration) {
        self.0
            .push(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
    }

    pub(crate) fn extend(&mut self, other: Timings) {
        self.0.extend(other.0);
    }

    pub(crate) fn sorted(mut self) -> Self {
        self.0.sort_unstable();
        self
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Nearest-rank percentile in milliseconds; `None` when nothing was measured.
    pub fn percentile_ms(&self, pct: f64) -> Option<f64> {
        let n = self.0.len();
        if n == 0 {
            return None;
        }
        let rank = ((pct / 100.0) * n as f64).ceil() as usize;
        self.0.get(rank.clamp(1, n) - 1).map(|ns| *ns as f64 / 1e6)
    }

    pub fn mean_ms(&self) -> Option<f64> {
        if self.0.is_empty() {
            return None;
        }
        let sum: u128 = self.0.iter().map(|ns| u128::from(*ns)).sum();
        Some(sum as f64 / self.0.len() as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_use_nearest_rank() {
        let mut timings = Timings::default();
        for ms in (1..=200).rev() {
            timings.push(Duration::from_millis(ms));
        }
        let timings = timings.sorted();
        assert_eq!(timings.len(), 200);
        assert_eq!(timings.percentile_ms(50.0), Some(100.0));
        assert_eq!(timings.percentile_ms(99.0), Some(198.0));
        assert_eq!(timings.mean_ms(), Some(100.5));
        assert_eq!(Timings::default().percentile_ms(50.0), None);
    }

    #[test]
    fn server_flags_are_a_flag_and_its_value() {
        assert_eq!(
            server_flag("--sandbox-warm-sessions=200"),
            Ok(("--sandbox-warm-sessions".to_owned(), "200".to_owned()))
        );
        assert_eq!(
            server_flag("--x=a=b"),
            Ok(("--x".to_owned(), "a=b".to_owned())),
            "split at the first ="
        );
        for bad in ["--sandbox-warm-sessions", "sandbox=1", "--=1", ""] {
            assert!(server_flag(bad).is_err(), "{bad:?}");
        }
    }
}
