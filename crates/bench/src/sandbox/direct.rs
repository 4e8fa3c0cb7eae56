//! The server-side figures: the session manager in this process, configured as `serve`
//! configures it, with no HTTP in the way. New session → first result, and memory per idle
//! session with many sessions live.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use toolgate_sandbox::LimitSettings;
use toolgate_sandbox::Limits;
use toolgate_sandbox_manager::{
    Isolation, ManagerConfig, RunOutcome, SandboxManager, ZygoteConfig,
};

use super::memory::{self, SessionMemory};
use super::{Files, Timings};
use crate::{progress, wait_for_quiet};

/// The account of the new-session figure.
const ACCOUNT: &str = "bench-new";
/// New sessions started and closed before the timed ones (page cache, the zygote's first forks).
const WARMUP_SESSIONS: usize = 5;
/// Untimed calls in the warm session before the timed ones.
const WARMUP_CALLS: usize = 200;
/// Let the idle sessions settle (allocator, output buffers) before their memory is read.
const SETTLE: Duration = Duration::from_secs(1);

/// What was measured in this process.
#[derive(Debug)]
pub struct Direct {
    /// What confines the sessions here: cgroups and the workspace quota.
    pub isolation: Isolation,
    /// `exec` of `1+1` with a fresh session id, from the call to its result.
    pub new_session: Timings,
    /// `close_session` of each of those (not part of the figure; shown for context).
    pub close: Timings,
    /// `exec` of `1+1` in a warm session: the sandbox's share of the HTTP round trip.
    pub warm: Timings,
    pub memory: SessionMemory,
}

/// Starts a manager as `serve` does, measures, and shuts it down (sessions closed, workspaces
/// removed, zygote stopped) whatever the outcome.
pub async fn measure(
    files: &Files,
    root: &Path,
    (sessions, calls): (usize, usize),
    gap: Duration,
    quiet: Duration,
) -> Result<Direct> {
    let mut zygote = ZygoteConfig::new(&files.runtime, &files.zygote);
    zygote.harden_lib = Some(files.harden_lib.clone());
    // serve's configuration: ManagerConfig's defaults (20 min idle, 10 sessions per account,
    // cgroups when the host has them, one uid per session) and LimitSettings' defaults
    let config = ManagerConfig::new(zygote, root);
    let per_account = config.max_sessions_per_account.max(1);
    let limits = LimitSettings::default()
        .for_call(None)
        .context("the default limits")?;
    progress("starting the session manager in this process (confined, as serve does)");
    let manager = SandboxManager::start(config)
        .await
        .context("the session manager could not start")?;
    let isolation = manager.isolation();
    progress(&format!(
        "  cgroups {}, workspace tmpfs {}",
        isolation.cgroups, isolation.workspace_quota
    ));
    let outcome = figures(
        &manager,
        &limits,
        (sessions, calls),
        per_account,
        (gap, quiet),
    )
    .await;
    progress("shutting the session manager down");
    manager.shutdown().await;
    let (new_session, close, warm, memory) = outcome?;
    Ok(Direct {
        isolation,
        new_session,
        close,
        warm,
        memory,
    })
}

async fn figures(
    manager: &SandboxManager,
    limits: &Limits,
    (sessions, calls): (usize, usize),
    per_account: usize,
    (gap, quiet): (Duration, Duration),
) -> Result<(Timings, Timings, Timings, SessionMemory)> {
    quiet_now(quiet).await?;
    progress(&format!(
        "new session → first result, server side: {sessions} sessions after {WARMUP_SESSIONS} untimed, each closed before the next, {} ms apart",
        gap.as_millis()
    ));
    let mut new_session = Timings::default();
    let mut close = Timings::default();
    for i in 0..WARMUP_SESSIONS + sessions {
        tokio::time::sleep(gap).await;
        let id = format!("new-{i}");
        let started = Instant::now();
        let call = manager
            .exec(ACCOUNT, Some(&id), "1+1", limits, &[], None)
            .await;
        let elapsed = started.elapsed();
        let call = call.with_context(|| format!("new session {id}"))?;
        check(&call, true)?;
        let closing = Instant::now();
        if !manager.close_session(ACCOUNT, &id).await {
            bail!("session {id} was gone before it was closed");
        }
        if i >= WARMUP_SESSIONS {
            new_session.push(elapsed);
            close.push(closing.elapsed());
        }
    }
    let new_session = new_session.sorted();
    progress(&format!(
        "  p50 {:.2} ms, p99 {:.2} ms",
        new_session.percentile_ms(50.0).unwrap_or(0.0),
        new_session.percentile_ms(99.0).unwrap_or(0.0)
    ));

    quiet_now(quiet).await?;
    progress(&format!(
        "warm 1+1, server side: {calls} calls after {WARMUP_CALLS} untimed"
    ));
    let mut warm = Timings::default();
    for i in 0..WARMUP_CALLS + calls {
        let started = Instant::now();
        let call = manager
            .exec(ACCOUNT, Some("warm"), "1+1", limits, &[], None)
            .await;
        let elapsed = started.elapsed();
        check(&call.context("a warm call")?, i == 0)?;
        if i >= WARMUP_CALLS {
            warm.push(elapsed);
        }
    }
    manager.close_session(ACCOUNT, "warm").await;
    let warm = warm.sorted();
    progress(&format!(
        "  p50 {:.3} ms, p99 {:.3} ms",
        warm.percentile_ms(50.0).unwrap_or(0.0),
        warm.percentile_ms(99.0).unwrap_or(0.0)
    ));

    quiet_now(quiet).await?;
    let accounts = sessions.div_ceil(per_account);
    progress(&format!(
        "memory: starting {sessions} sessions over {accounts} accounts ({per_account} each, serve's cap), each running 1+1"
    ));
    let mut pids = Vec::with_capacity(sessions);
    for i in 0..sessions {
        let account = format!("bench-idle-{:03}", i / per_account);
        let id = format!("idle-{i}");
        let call = manager
            .exec(&account, Some(&id), "1+1", limits, &[], None)
            .await
            .with_context(|| format!("idle session {i} of {sessions}"))?;
        check(&call, true)?;
        pids.push(call.pid);
    }
    tokio::time::sleep(SETTLE).await;
    let zygote = manager.current_zygote().await.map(|z| z.pid());
    let memory = tokio::task::spawn_blocking(move || memory::measure(&pids, zygote))
        .await
        .context("the memory reading panicked")??;
    progress(&format!(
        "  {} process(es), PSS {:.2} MiB per session; zygote PSS {:.1} MiB",
        memory.processes,
        memory.pss_per_session_mib(),
        memory.zygote_pss_mib().unwrap_or(0.0)
    ));
    Ok((new_session, close.sorted(), warm, memory))
}

/// Waits for a quiet machine without holding up the runtime's workers.
async fn quiet_now(quiet: Duration) -> Result<()> {
    tokio::task::spawn_blocking(move || wait_for_quiet(quiet))
        .await
        .context("the quiet wait panicked")
}

/// A `1+1` call must have answered 2, in a new interpreter when `fresh`.
fn check(call: &RunOutcome, fresh: bool) -> Result<()> {
    let result = call.outcome.result.as_ref().map(|r| r.text_plain.as_str());
    if result != Some("2") || call.outcome.error.is_some() {
        bail!(
            "1+1 gave {result:?} (error {:?}, stderr {:?})",
            call.outcome.error,
            call.outcome.stderr
        );
    }
    if call.fresh != fresh {
        bail!("expected fresh = {fresh}, the manager said {}", call.fresh);
    }
    Ok(())
}
