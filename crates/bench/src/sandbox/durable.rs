//! `toolgate-bench --sandbox-durable`: sessions that outlive their process, server side. A
//! manager as `serve` configures it, with its checkpoints in a directory sealed under a fresh
//! master key: hibernation and restore of a small session (`x = 41`, pandas imported, a 1 KiB
//! file) and of a large one (100 MiB of numpy arrays, 100 MiB of files), and many sessions
//! created and hibernated with the disk their checkpoints take.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use toolgate_checkpoints::ObjectCheckpoints;
use toolgate_sandbox::{LimitSettings, Limits};
use toolgate_sandbox_manager::{Keeping, ManagerConfig, SandboxManager, ZygoteConfig};
use toolgate_vault::{KeySource, MasterKeys, Vault};

use super::{Files, Timings};
use crate::{progress, wait_for_quiet};

/// The small session's cell.
const SMALL: &str = "import pandas as pd\nx = 41\nopen('note.txt', 'w').write('n' * 1024)\nx";
/// The large session's cell: four arrays of 25 MiB of random floats, four files of 25 MiB of
/// random bytes (neither compresses).
const LARGE: &str = "import numpy as np, os\n\
    arrays = [np.random.rand(25 << 17) for _ in range(4)]\n\
    for i in range(4):\n    open(f'blob{i}', 'wb').write(os.urandom(25 << 20))\n\
    sum(a.nbytes for a in arrays) >> 20";

/// What was measured.
#[derive(Debug)]
pub struct Durable {
    pub hibernate_small: Timings,
    pub restore_small: Timings,
    pub hibernate_large: Timings,
    pub restore_large: Timings,
    /// Sessions created and hibernated, the time it took, and the bytes their checkpoints
    /// take on disk (blocks of files and directories, as `du` counts them).
    pub mass: (usize, Duration, u64),
}

/// Runs the figures: `small` samples of the small session, `large` of the large one, and
/// `mass` sessions created and hibernated.
pub async fn measure(
    files: &Files,
    root: &Path,
    (small, large, mass): (usize, usize, usize),
    quiet: Duration,
) -> Result<Durable> {
    let mut zygote = ZygoteConfig::new(&files.runtime, &files.zygote);
    zygote.harden_lib = Some(files.harden_lib.clone());
    let mut config = ManagerConfig::new(zygote, root.join("sessions"));
    let vault = Arc::new(Vault::open_source(KeySource::Given(
        MasterKeys::generate()?
    ))?);
    let store = ObjectCheckpoints::open_directory(root.join("checkpoints"), vault)
        .await
        .context("the checkpoint store")?;
    let mut keeping = Keeping::new(Arc::new(store));
    // the figures hibernate on purpose; the mass figure's quota must not drop any
    keeping.hibernate_after = Duration::from_secs(3600);
    keeping.account_quota_bytes = 0;
    config.keeping = Some(keeping);
    config.max_sessions_per_account = 1000;
    config.budget.account_memory_bytes = 0;
    let limits = LimitSettings::default().for_call(None)?;
    progress("starting a session manager with checkpoints in this process (confined)");
    let manager = SandboxManager::start(config)
        .await
        .context("the session manager could not start")?;
    let outcome = figures(&manager, &limits, (small, large, mass), quiet, root).await;
    progress("shutting the session manager down");
    manager.shutdown().await;
    outcome
}

async fn figures(
    manager: &SandboxManager,
    limits: &Limits,
    (small, large, mass): (usize, usize, usize),
    quiet: Duration,
    root: &Path,
) -> Result<Durable> {
    quiet_now(quiet).await?;
    progress(&format!(
        "small session (x = 41, pandas, a 1 KiB file): {small} hibernations and restores"
    ));
    let (hibernate_small, restore_small) =
        cycle(manager, limits, "small", SMALL, "41", "x", small).await?;
    quiet_now(quiet).await?;
    progress(&format!(
        "large session (100 MiB of arrays, 100 MiB of files): {large} hibernations and restores"
    ));
    let (hibernate_large, restore_large) = cycle(
        manager,
        limits,
        "large",
        LARGE,
        "100",
        "sum(a.nbytes for a in arrays) >> 20",
        large,
    )
    .await?;
    quiet_now(quiet).await?;
    progress(&format!("{mass} sessions created and hibernated"));
    let started = Instant::now();
    for i in 0..mass {
        let (account, id) = (format!("bench-mass-{:03}", i / 1000), format!("m-{i}"));
        manager
            .exec(&account, Some(&id), "x = 41", limits, &[], None)
            .await
            .with_context(|| format!("mass session {i}"))?;
        if !manager
            .hibernate(&account, &id)
            .await
            .map_err(anyhow::Error::msg)?
        {
            bail!("mass session {i} was gone before it hibernated");
        }
    }
    let took = started.elapsed();
    let disk = disk_bytes(&root.join("checkpoints"));
    progress(&format!(
        "  {mass} in {:.1} s, {:.1} MiB on disk ({:.1} KiB each)",
        took.as_secs_f64(),
        disk as f64 / 1_048_576.0,
        disk as f64 / 1024.0 / mass.max(1) as f64
    ));
    Ok(Durable {
        hibernate_small,
        restore_small,
        hibernate_large,
        restore_large,
        mass: (mass, took, disk),
    })
}

/// `samples` rounds of: a new session runs `setup` (answering `expect`), is hibernated (timed),
/// and its next call runs `check` (timed: restore → first result), answering `expect` again.
async fn cycle(
    manager: &SandboxManager,
    limits: &Limits,
    name: &str,
    setup: &str,
    expect: &str,
    check: &str,
    samples: usize,
) -> Result<(Timings, Timings)> {
    let (mut hibernate, mut restore) = (Timings::default(), Timings::default());
    for i in 0..samples {
        let id = format!("{name}-{i}");
        let first = manager
            .exec("bench-durable", Some(&id), setup, limits, &[], None)
            .await?;
        answers(&first, expect)?;
        let started = Instant::now();
        if !manager
            .hibernate("bench-durable", &id)
            .await
            .map_err(anyhow::Error::msg)?
        {
            bail!("{id} was gone before it hibernated");
        }
        hibernate.push(started.elapsed());
        let started = Instant::now();
        let back = manager
            .exec("bench-durable", Some(&id), check, limits, &[], None)
            .await?;
        restore.push(started.elapsed());
        answers(&back, expect)?;
        if back.restored.is_none() {
            bail!("{id} was not restored");
        }
        manager.close_session("bench-durable", &id).await;
    }
    let (hibernate, restore) = (hibernate.sorted(), restore.sorted());
    progress(&format!(
        "  hibernate p50 {:.1} ms, restore → first result p50 {:.1} ms",
        hibernate.percentile_ms(50.0).unwrap_or(0.0),
        restore.percentile_ms(50.0).unwrap_or(0.0)
    ));
    Ok((hibernate, restore))
}

fn answers(call: &toolgate_sandbox::RunOutcome, expect: &str) -> Result<()> {
    let got = call.outcome.result.as_ref().map(|r| r.text_plain.as_str());
    if got != Some(expect) {
        bail!(
            "expected {expect}, got {got:?} (error {:?})",
            call.outcome.error
        );
    }
    Ok(())
}

/// What `dir` takes on disk: the blocks of its files and directories (as `du` counts them).
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if let Ok(meta) = entry.metadata() {
                total += meta.blocks() * 512;
                if meta.is_dir() {
                    stack.push(entry.path());
                }
            }
        }
    }
    total
}

async fn quiet_now(quiet: Duration) -> Result<()> {
    tokio::task::spawn_blocking(move || wait_for_quiet(quiet))
        .await
        .context("the quiet wait panicked")
}
