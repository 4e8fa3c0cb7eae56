//! `toolgate-bench --sandbox-bursts`: new sessions in bursts through HTTP, the release server
//! with the sandbox on. Each figure is `svc_write` `1+1` with a new `session_id`, timed from
//! send to the last byte of its first result.
//!
//! 1. 200 back to back on one keep-alive connection (`--sandbox-sessions`), twice: first with
//!    the warm pool at its floor (the server just started), then again once the pool has grown
//!    to the demand the first burst showed and the machine is quiet.
//! 2. 50 at once (`--sandbox-burst-at-once`), each on a connection of its own, twice the same
//!    way, after the pool has fallen back to its floor (the server's demand window is 10 s, and
//!    the pool looks again every 5 s: the bench waits [`SHRINK_WAIT`]).
//! 3. The last 50 sessions called again at once: no new session in it, the same burst's floor.
//!
//! Every call takes one client path (`--sandbox-bursts-path`): the bare POST, a 2025-11-25
//! session with SSE accepted (the path most clients take; one session for all the calls, opened
//! before the first burst), or 2026-07-28.
//!
//! Between bursts the bench waits for the machine to be quiet (the pool's refill is the work
//! it waits for); the new sessions stay open until the server stops. Each burst also says how
//! much CPU the service spent while it ran (the server, the zygote, the sessions) and that CPU
//! divided by the cores: the least time the burst could take on this machine.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::http::write_call;
use super::throughput::Cpu;
use super::{Files, Timings};
use crate::load::{self, Endpoint, Workload};
use crate::server::Toolgate;
use crate::{personal_path, progress, wait_for_quiet, wait_healthy};

/// Long enough for the server's warm pool to fall back to its floor after a burst.
const SHRINK_WAIT: Duration = Duration::from_secs(20);

/// What the bursts measured.
#[derive(Debug)]
pub struct Bursts {
    /// The client path every call took.
    pub path: BurstPath,
    /// Back to back, the pool at its floor.
    pub back_to_back_first: Burst,
    /// Back to back again, the pool grown to the first burst's demand.
    pub back_to_back_again: Burst,
    /// All at once, after the back-to-back bursts.
    pub at_once_first: Burst,
    /// All at once again.
    pub at_once_again: Burst,
    /// The sessions of `at_once_again` called again, all at once: the same burst with no new
    /// session in it, what the machine's cores allow for that many calls.
    pub at_once_warm: Burst,
}

/// One burst: its sessions' times, and the CPU the service spent from its first request to
/// its last answer.
#[derive(Debug)]
pub struct Burst {
    pub timings: Timings,
    /// CPU seconds of the server, the zygote and the sessions, the pool's refill included.
    pub cpu: Cpu,
}

impl Burst {
    /// CPU milliseconds per new session of `seconds`.
    fn per_session_ms(&self, seconds: f64) -> f64 {
        seconds * 1e3 / self.timings.len().max(1) as f64
    }

    fn cpu_total(&self) -> f64 {
        self.cpu.serve + self.cpu.zygote + self.cpu.sessions
    }

    /// The burst's CPU spread over every core: no schedule could end it sooner.
    fn least_ms(&self) -> f64 {
        self.cpu_total() * 1e3 / crate::cores().max(1) as f64
    }
}

/// What a run of the bursts needs.
#[derive(Debug)]
pub struct Plan<'a> {
    pub binary: &'a std::path::Path,
    pub files: &'a Files,
    pub dir: &'a std::path::Path,
    pub back_to_back: usize,
    pub at_once: usize,
    pub quiet: Duration,
    /// Flags added to the server's command line (after the bench's own, so they win).
    pub server_flags: &'a [(String, String)],
    /// The client path every call takes.
    pub path: BurstPath,
}

/// The client path of the bursts' calls (see `paths.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BurstPath {
    /// No session, no protocol headers.
    Bare,
    /// One 2025-11-25 session with SSE accepted, opened before the first burst.
    LegacySse,
    /// 2026-07-28: `_meta` and the `Mcp-*` headers on every request.
    Modern,
}

impl BurstPath {
    fn label(self) -> &'static str {
        match self {
            BurstPath::Bare => "bare POST",
            BurstPath::LegacySse => "2025-11-25 session, SSE accepted",
            BurstPath::Modern => "2026-07-28",
        }
    }
}

/// How every call of a run is sent: the path's headers, and whether the body carries the
/// 2026-07-28 `_meta`.
#[derive(Debug, Clone)]
struct Style {
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    modern: bool,
}

impl Style {
    async fn open(path: BurstPath, endpoint: &Endpoint, personal: &str) -> Result<Self> {
        Ok(match path {
            BurstPath::Bare => Style {
                headers: Vec::new(),
                modern: false,
            },
            BurstPath::LegacySse => Style {
                headers: crate::paths::legacy_session(endpoint, personal).await?,
                modern: false,
            },
            BurstPath::Modern => Style {
                headers: crate::paths::modern_call_headers("svc_write"),
                modern: true,
            },
        })
    }
}

/// Starts the server with the sandbox on, measures the bursts, and stops it whatever the
/// outcome.
pub fn measure(runtime: &tokio::runtime::Runtime, plan: &Plan<'_>) -> Result<Bursts> {
    if plan.back_to_back == 0 || plan.at_once == 0 || plan.back_to_back > 1000 || plan.at_once > 200
    {
        bail!("1 to 1,000 sessions back to back and 1 to 200 at once");
    }
    let live = 2 * (plan.back_to_back + plan.at_once) + 10;
    // hundreds of sessions of one account, all open until the end
    let mut settings = plan
        .files
        .server_settings(&plan.dir.join("burst-sessions"), live);
    // at once: every session on a connection of its own
    settings.push((
        "--max-connections".to_owned(),
        (plan.at_once + 64).to_string(),
    ));
    settings.extend(plan.server_flags.iter().cloned());
    let toolgate = Toolgate {
        binary: plan.binary.to_owned(),
        data_dir: plan.dir.join("burst-data"),
        database_url: None,
        settings,
    };
    let mut server = toolgate.serve(Some("warn"), &plan.dir.join("bursts.log"))?;
    let outcome = (|| -> Result<Bursts> {
        let endpoint = Endpoint::new(server.addr)?;
        wait_healthy(runtime, &mut server, &endpoint)?;
        let personal = personal_path(&toolgate)?;
        let style = runtime.block_on(Style::open(plan.path, &endpoint, &personal))?;
        // the pool's floor made at start, nothing else running
        wait_for_quiet(plan.quiet);
        let mut next = 0;
        let mut burst = |name: &str, kind: Kind| -> Result<Burst> {
            progress(&format!("new sessions through HTTP: {name}"));
            let count = match kind {
                Kind::BackToBack => plan.back_to_back,
                Kind::AtOnce | Kind::AtOnceWarm => plan.at_once,
            };
            let first = match kind {
                // the sessions the last burst opened
                Kind::AtOnceWarm => next - count,
                Kind::BackToBack | Kind::AtOnce => {
                    next += count;
                    next - count
                }
            };
            let before = Cpu::read(server.pid())?;
            let timings = match kind {
                Kind::BackToBack => {
                    runtime.block_on(back_to_back(&endpoint, &personal, &style, first, count))?
                }
                Kind::AtOnce | Kind::AtOnceWarm => runtime.block_on(at_once_burst(
                    &endpoint,
                    &personal,
                    &style,
                    first..first + count,
                    kind == Kind::AtOnce,
                ))?,
            };
            let cpu = Cpu::read(server.pid())?.since(before);
            server.check_running()?;
            super::http::report(name, &timings);
            // what the burst asked of the pool is made before the next one
            wait_for_quiet(plan.quiet);
            Ok(Burst { timings, cpu })
        };
        let back_to_back_first = burst("back to back, the pool at its floor", Kind::BackToBack)?;
        let back_to_back_again = burst(
            "back to back again, the pool sized by demand",
            Kind::BackToBack,
        )?;
        progress("waiting for the warm pool to fall back to its floor");
        std::thread::sleep(SHRINK_WAIT);
        Ok(Bursts {
            path: plan.path,
            back_to_back_first,
            back_to_back_again,
            at_once_first: burst("at once, the pool at its floor", Kind::AtOnce)?,
            at_once_again: burst("at once again, the pool sized by demand", Kind::AtOnce)?,
            at_once_warm: burst("at once, the same sessions again (warm)", Kind::AtOnceWarm)?,
        })
    })();
    if outcome.is_err() {
        progress(&format!("server log ends:\n{}", server.log_tail(20)));
    }
    let stopped = server.stop();
    let bursts = outcome?;
    stopped?;
    Ok(bursts)
}

/// What a burst sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// new sessions one after the other
    BackToBack,
    /// new sessions all at once
    AtOnce,
    /// the last burst's sessions called again, all at once
    AtOnceWarm,
}

/// `1+1` in session `n`, which must say whether it is `fresh`, sent in `style`.
fn call_in(personal: &str, style: &Style, n: usize, fresh: bool) -> Result<Workload> {
    let fresh: &'static [u8] = if fresh {
        b"\"fresh\":true"
    } else {
        b"\"fresh\":false"
    };
    let mut body = write_call("1+1", &format!("burst-{n}"));
    if style.modern {
        body = crate::paths::with_modern_meta(&body)?;
    }
    Ok(Workload::post(
        personal,
        body,
        vec![b"\"isError\":false", fresh, b"\"text\":\"2\""],
    )?
    .with_headers(style.headers.clone()))
}

/// `count` new sessions one after the other on one connection.
async fn back_to_back(
    endpoint: &Endpoint,
    personal: &str,
    style: &Style,
    first: usize,
    count: usize,
) -> Result<Timings> {
    let mut sender = load::connect(endpoint).await?;
    let mut timings = Timings::default();
    for n in first..first + count {
        let workload = call_in(personal, style, n, true)?;
        let started = Instant::now();
        load::call(&mut sender, endpoint, &workload)
            .await
            .with_context(|| format!("new session {n}"))?;
        timings.push(started.elapsed());
    }
    Ok(timings.sorted())
}

/// Calls in `sessions` at once (new ones when `fresh`), each on its own connection opened
/// beforehand, all sent together.
async fn at_once_burst(
    endpoint: &Endpoint,
    personal: &str,
    style: &Style,
    sessions: std::ops::Range<usize>,
    fresh: bool,
) -> Result<Timings> {
    let (first, count) = (sessions.start, sessions.len());
    let mut senders = Vec::with_capacity(count);
    for _ in 0..count {
        senders.push(load::connect(endpoint).await?);
    }
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(count));
    let mut calls = tokio::task::JoinSet::new();
    for (i, mut sender) in senders.into_iter().enumerate() {
        let workload = call_in(personal, style, first + i, fresh)?;
        let (endpoint, start) = (endpoint.clone(), std::sync::Arc::clone(&start));
        calls.spawn(async move {
            start.wait().await;
            let started = Instant::now();
            load::call(&mut sender, &endpoint, &workload)
                .await
                .with_context(|| format!("new session {}", first + i))?;
            Ok::<_, anyhow::Error>(started.elapsed())
        });
    }
    let mut timings = Timings::default();
    while let Some(done) = calls.join_next().await {
        timings.push(done.context("a burst call panicked")??);
    }
    Ok(timings.sorted())
}

/// The bursts as a table.
pub fn table(bursts: &Bursts) -> String {
    let row = |name: &str, b: &Burst| {
        let ms = |pct: f64| b.timings.percentile_ms(pct).unwrap_or(0.0);
        format!(
            "| {name} | {} | {:.2} | {:.2} | {:.2} | {:.2} ({:.2} / {:.2} / {:.2}) | {:.1} |\n",
            b.timings.len(),
            ms(50.0),
            ms(99.0),
            ms(100.0),
            b.per_session_ms(b.cpu_total()),
            b.per_session_ms(b.cpu.serve),
            b.per_session_ms(b.cpu.zygote),
            b.per_session_ms(b.cpu.sessions),
            b.least_ms()
        )
    };
    let mut out = format!(
        "\nnew session → first result through HTTP, in bursts, {} (goal: p99 ≤ 10 ms; {} cores)\n\n\
         | burst | sessions | p50 ms | p99 ms | max ms | CPU per session ms (serve / zygote / sessions) | CPU ÷ cores ms |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
        bursts.path.label(),
        crate::cores()
    );
    for (name, burst) in named(bursts) {
        out.push_str(&row(name, burst));
    }
    out
}

/// Each burst with its name in the table.
fn named(bursts: &Bursts) -> [(&'static str, &Burst); 5] {
    [
        (
            "back to back, pool at its floor",
            &bursts.back_to_back_first,
        ),
        (
            "back to back again, pool sized by demand",
            &bursts.back_to_back_again,
        ),
        ("at once, pool at its floor", &bursts.at_once_first),
        ("at once again, pool sized by demand", &bursts.at_once_again),
        (
            "at once, the same sessions again (no new one)",
            &bursts.at_once_warm,
        ),
    ]
}

/// The bursts as JSON (milliseconds).
pub fn to_json(bursts: &Bursts) -> serde_json::Value {
    let figure = |b: &Burst| {
        let t = &b.timings;
        serde_json::json!({
            "sessions": t.len(),
            "p50_ms": t.percentile_ms(50.0),
            "p99_ms": t.percentile_ms(99.0),
            "max_ms": t.percentile_ms(100.0),
            "cpu_per_session_ms": b.per_session_ms(b.cpu_total()),
            "serve_cpu_per_session_ms": b.per_session_ms(b.cpu.serve),
            "zygote_cpu_per_session_ms": b.per_session_ms(b.cpu.zygote),
            "sessions_cpu_per_session_ms": b.per_session_ms(b.cpu.sessions),
            "cpu_over_cores_ms": b.least_ms(),
        })
    };
    serde_json::json!({
        "path": bursts.path.label(),
        "cores": crate::cores(),
        "back_to_back_first": figure(&bursts.back_to_back_first),
        "back_to_back_again": figure(&bursts.back_to_back_again),
        "at_once_first": figure(&bursts.at_once_first),
        "at_once_again": figure(&bursts.at_once_again),
        "at_once_warm": figure(&bursts.at_once_warm),
    })
}
