//! Two release servers side by side, a warm `1+1` through HTTP on each, their calls alternated
//! (one keep-alive connection each), so that whatever else the machine does touches both
//! alike. `toolgate-bench --sandbox-history`: what recording each call in the call history adds
//! (the default `history_days` against `history_days = 0`); `--sandbox-compare`: the defaults
//! against the `--sandbox-server-flag`s given, or this build against another
//! (`--sandbox-compare-toolgate`). Each client path is measured: the bare POST, a
//! 2025-11-25 session with SSE accepted (what Claude Desktop, Cursor, VS Code and the SDKs'
//! default mode take), and 2026-07-28.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};

use super::http::write_call;
use super::{Files, Timings};
use crate::load::{self, Endpoint, Workload};
use crate::server::{Server, Toolgate};
use crate::{personal_path, progress, wait_healthy};

/// Untimed calls on each server before the timed ones.
const WARMUP_CALLS: usize = 300;

/// The two servers compared: each one's label and the flags it gets beyond the bench's own.
pub struct Pair {
    /// What the lines call the first and the second server.
    pub labels: [String; 2],
    /// The flags of the first and the second server.
    pub flags: [Vec<(String, String)>; 2],
    /// The second server's binary, when it is not the first's.
    pub second_binary: Option<PathBuf>,
    /// What the difference (first − second) is held against, printed after it.
    pub goal: &'static str,
}

impl Pair {
    /// The call history on (the default) and off.
    pub fn history() -> Self {
        Self {
            labels: [
                "history on  (history_days 30)".to_owned(),
                "history off (history_days 0)".to_owned(),
            ],
            flags: [
                Vec::new(),
                vec![("--history-days".to_owned(), "0".to_owned())],
            ],
            second_binary: None,
            goal: " (goal: ≤ +0.02 ms at p50)",
        }
    }

    /// The defaults against `flags`, the second server run from `second_binary` if given.
    pub fn compare(flags: &[(String, String)], second_binary: Option<&Path>) -> Self {
        let mut named: Vec<String> = second_binary
            .map(|binary| binary.display().to_string())
            .into_iter()
            .collect();
        named.extend(flags.iter().map(|(f, v)| format!("{f}={v}")));
        Self {
            labels: ["defaults".to_owned(), named.join(" ")],
            flags: [Vec::new(), flags.to_vec()],
            second_binary: second_binary.map(Path::to_owned),
            goal: "",
        }
    }
}

/// Measures and prints the figures: `calls` timed calls on each server.
pub fn run(files: &Files, binary: &Path, dir: &Path, calls: usize, pair: &Pair) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let on = toolgate(files, binary, dir, "a", &pair.flags[0]);
    let second = pair.second_binary.as_deref().unwrap_or(binary);
    let off = toolgate(files, second, dir, "b", &pair.flags[1]);
    let mut servers = Vec::new();
    for toolgate in [&on, &off] {
        let log = dir.join(format!(
            "{}.log",
            toolgate.data_dir.display().to_string().replace('/', "_")
        ));
        servers.push(toolgate.serve(Some("warn"), &log)?);
    }
    let outcome = measure(&runtime, [&on, &off], &mut servers, calls);
    for server in servers {
        let _ = server.stop();
    }
    let p50 = |t: &Timings| t.percentile_ms(50.0).unwrap_or(0.0);
    let p99 = |t: &Timings| t.percentile_ms(99.0).unwrap_or(0.0);
    let [first, second] = &pair.labels;
    println!("warm 1+1 through HTTP, {first} against {second}, {calls} calls each, alternated:");
    for (path, with, without) in outcome? {
        println!("  {path}:");
        for (label, timings) in [(first, &with), (second, &without)] {
            println!(
                "    {label}: p50 {:.3} ms, p99 {:.3} ms",
                p50(timings),
                p99(timings)
            );
        }
        println!(
            "    difference: p50 {:+.3} ms, p99 {:+.3} ms{}",
            p50(&with) - p50(&without),
            p99(&with) - p99(&without),
            pair.goal
        );
    }
    Ok(())
}

fn toolgate(
    files: &Files,
    binary: &Path,
    dir: &Path,
    name: &str,
    flags: &[(String, String)],
) -> Toolgate {
    let path = |p: &Path| p.display().to_string();
    let mut settings = vec![
        ("--free-monthly-calls".to_owned(), "1000000000".to_owned()),
        ("--sandbox".to_owned(), "on".to_owned()),
        ("--sandbox-runtime".to_owned(), path(&files.runtime)),
        ("--sandbox-zygote".to_owned(), path(&files.zygote)),
        ("--sandbox-harden-lib".to_owned(), path(&files.harden_lib)),
        (
            "--sandbox-root".to_owned(),
            path(&dir.join(format!("{name}-sessions"))),
        ),
    ];
    // a flag given replaces the bench's own (a zygote script of another checkout, say)
    settings.retain(|(flag, _)| !flags.iter().any(|(given, _)| given == flag));
    settings.extend(flags.iter().cloned());
    Toolgate {
        binary: binary.to_owned(),
        data_dir: dir.join(format!("server-{name}")),
        database_url: None,
        settings,
    }
}

/// The client paths measured, as the lines print them.
const PATHS: [&str; 3] = [
    "bare POST",
    "2025-11-25 session, SSE accepted",
    "2026-07-28",
];

/// The two servers' warm calls on each client path, alternated: (path, first, second).
fn measure(
    runtime: &tokio::runtime::Runtime,
    toolgates: [&Toolgate; 2],
    servers: &mut [Server],
    calls: usize,
) -> Result<Vec<(&'static str, Timings, Timings)>> {
    let mut endpoints = Vec::new();
    for server in servers.iter_mut() {
        let endpoint = Endpoint::new(server.addr)?;
        wait_healthy(runtime, server, &endpoint)?;
        endpoints.push(endpoint);
    }
    let mut figures = Vec::new();
    for path in PATHS {
        let mut targets = Vec::new();
        for (toolgate, endpoint) in toolgates.iter().zip(&endpoints) {
            let personal = personal_path(toolgate)?;
            targets.push((
                endpoint,
                runtime.block_on(workload(path, endpoint, &personal))?,
            ));
        }
        progress(&format!(
            "warm 1+1 ({path}), the two servers alternated: {calls} calls each after \
             {WARMUP_CALLS} untimed"
        ));
        let (on, off) = runtime.block_on(alternate(&targets, calls))?;
        figures.push((path, on, off));
    }
    Ok(figures)
}

/// A warm `1+1` as a client on `path` sends it to `personal` (opening its session first).
async fn workload(path: &str, endpoint: &Endpoint, personal: &str) -> Result<Workload> {
    let needles = || vec![&b"\"isError\":false"[..], &b"\"text\":\"2\""[..]];
    let call = write_call("1+1", "warm");
    Ok(match path {
        "bare POST" => Workload::post(personal, call, needles())?,
        "2026-07-28" => {
            Workload::post(personal, crate::paths::with_modern_meta(&call)?, needles())?
                .with_headers(crate::paths::modern_call_headers("svc_write"))
        }
        _ => Workload::post(personal, call, needles())?
            .with_headers(crate::paths::legacy_session(endpoint, personal).await?),
    })
}

/// Times `calls` calls on each target after the untimed ones, call by call in turn.
async fn alternate(targets: &[(&Endpoint, Workload)], calls: usize) -> Result<(Timings, Timings)> {
    let mut senders = Vec::new();
    for (endpoint, _) in targets {
        senders.push(load::connect(endpoint).await?);
    }
    let mut timings = [Timings::default(), Timings::default()];
    for i in 0..WARMUP_CALLS + calls {
        for (n, ((endpoint, workload), sender)) in targets.iter().zip(&mut senders).enumerate() {
            let started = Instant::now();
            load::call(sender, endpoint, workload)
                .await
                .with_context(|| format!("call {i}"))?;
            if i >= WARMUP_CALLS {
                timings[n].push(started.elapsed());
            }
        }
    }
    let [on, off] = timings;
    Ok((on.sorted(), off.sorted()))
}
