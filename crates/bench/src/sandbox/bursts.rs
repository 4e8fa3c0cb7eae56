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
//!
//! Between bursts the bench waits for the machine to be quiet (the pool's refill is the work
//! it waits for); the new sessions stay open until the server stops.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::http::write_call;
use super::{Files, Timings};
use crate::load::{self, Endpoint, Workload};
use crate::server::Toolgate;
use crate::{personal_path, progress, wait_for_quiet, wait_healthy};

/// Long enough for the server's warm pool to fall back to its floor after a burst.
const SHRINK_WAIT: Duration = Duration::from_secs(20);

/// What the bursts measured.
#[derive(Debug)]
pub struct Bursts {
    /// Back to back, the pool at its floor.
    pub back_to_back_first: Timings,
    /// Back to back again, the pool grown to the first burst's demand.
    pub back_to_back_again: Timings,
    /// All at once, after the back-to-back bursts.
    pub at_once_first: Timings,
    /// All at once again.
    pub at_once_again: Timings,
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
        // the pool's floor made at start, nothing else running
        wait_for_quiet(plan.quiet);
        let mut next = 0;
        let mut burst = |name: &str, at_once: bool| -> Result<Timings> {
            progress(&format!("new sessions through HTTP: {name}"));
            let count = if at_once {
                plan.at_once
            } else {
                plan.back_to_back
            };
            let first = next;
            next += count;
            let timings = if at_once {
                runtime.block_on(at_once_burst(&endpoint, &personal, first, count))?
            } else {
                runtime.block_on(back_to_back(&endpoint, &personal, first, count))?
            };
            server.check_running()?;
            super::http::report(name, &timings);
            // what the burst asked of the pool is made before the next one
            wait_for_quiet(plan.quiet);
            Ok(timings)
        };
        let back_to_back_first = burst("back to back, the pool at its floor", false)?;
        let back_to_back_again = burst("back to back again, the pool sized by demand", false)?;
        progress("waiting for the warm pool to fall back to its floor");
        std::thread::sleep(SHRINK_WAIT);
        Ok(Bursts {
            back_to_back_first,
            back_to_back_again,
            at_once_first: burst("at once, the pool at its floor", true)?,
            at_once_again: burst("at once again, the pool sized by demand", true)?,
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

/// A new session's first call: `1+1`, which must say it is fresh.
fn first_call(personal: &str, n: usize) -> Result<Workload> {
    Workload::post(
        personal,
        write_call("1+1", &format!("burst-{n}")),
        vec![b"\"isError\":false", b"\"fresh\":true", b"\"text\":\"2\""],
    )
}

/// `count` new sessions one after the other on one connection.
async fn back_to_back(
    endpoint: &Endpoint,
    personal: &str,
    first: usize,
    count: usize,
) -> Result<Timings> {
    let mut sender = load::connect(endpoint).await?;
    let mut timings = Timings::default();
    for n in first..first + count {
        let workload = first_call(personal, n)?;
        let started = Instant::now();
        load::call(&mut sender, endpoint, &workload)
            .await
            .with_context(|| format!("new session {n}"))?;
        timings.push(started.elapsed());
    }
    Ok(timings.sorted())
}

/// `count` new sessions at once, each on its own connection opened beforehand, all sent
/// together.
async fn at_once_burst(
    endpoint: &Endpoint,
    personal: &str,
    first: usize,
    count: usize,
) -> Result<Timings> {
    let mut senders = Vec::with_capacity(count);
    for _ in 0..count {
        senders.push(load::connect(endpoint).await?);
    }
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(count));
    let mut calls = tokio::task::JoinSet::new();
    for (i, mut sender) in senders.into_iter().enumerate() {
        let workload = first_call(personal, first + i)?;
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
    let row = |name: &str, t: &Timings| {
        let ms = |pct: f64| t.percentile_ms(pct).unwrap_or(0.0);
        format!(
            "| {name} | {} | {:.2} | {:.2} | {:.2} |\n",
            t.len(),
            ms(50.0),
            ms(99.0),
            ms(100.0)
        )
    };
    let mut out = String::from(
        "\nnew session → first result through HTTP, in bursts (goal: p99 ≤ 10 ms)\n\n\
         | burst | sessions | p50 ms | p99 ms | max ms |\n| --- | --- | --- | --- | --- |\n",
    );
    out.push_str(&row(
        "back to back, pool at its floor",
        &bursts.back_to_back_first,
    ));
    out.push_str(&row(
        "back to back again, pool sized by demand",
        &bursts.back_to_back_again,
    ));
    out.push_str(&row("at once, pool at its floor", &bursts.at_once_first));
    out.push_str(&row(
        "at once again, pool sized by demand",
        &bursts.at_once_again,
    ));
    out
}

/// The bursts as JSON (milliseconds).
pub fn to_json(bursts: &Bursts) -> serde_json::Value {
    let figure = |t: &Timings| {
        serde_json::json!({
            "sessions": t.len(),
            "p50_ms": t.percentile_ms(50.0),
            "p99_ms": t.percentile_ms(99.0),
            "max_ms": t.percentile_ms(100.0),
        })
    };
    serde_json::json!({
        "back_to_back_first": figure(&bursts.back_to_back_first),
        "back_to_back_again": figure(&bursts.back_to_back_again),
        "at_once_first": figure(&bursts.at_once_first),
        "at_once_again": figure(&bursts.at_once_again),
    })
}
