//! `toolgate-bench --sandbox-throughput`: how much real work the service gets through with many
//! clients at once. The release server with the sandbox on, on 127.0.0.1; each client a bare
//! POST on its own keep-alive connection, running its calls in its own session, back to back.
//! Figures: `1+1` with 16 clients, and a CPU-bound cell (50 ms of CPU, counted by the session's
//! own `time.process_time()`) with 1 client, with as many clients as the machine has cores and
//! with 16: calls per second, latency, and the CPU each process spent per call (the server, the
//! zygote, the sessions), so the table shows how CPU-bound work scales against the cores.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::http::write_call;
use super::{Files, Timings};
use crate::load::{self, Endpoint, Workload};
use crate::proc::cpu_seconds;
use crate::server::Toolgate;
use crate::{personal_path, progress, wait_healthy};

/// The many-clients figure's clients (the number).
const CLIENTS: usize = 16;
/// The CPU-bound cell: a loop until the session's process has spent 50 ms of CPU.
const CPU_CELL: &str =
    "import time\n_t = time.process_time()\nwhile time.process_time() - _t < 0.05:\n    pass";
/// The CPU one run of [`CPU_CELL`] spends, in seconds.
const CPU_CELL_S: f64 = 0.05;
/// Calls each client makes in its session before the timed run (start, imports).
const WARMUP_CALLS: usize = 3;
/// The most calls of one figure, whatever the time allows.
const MAX_CALLS: usize = 100_000;

/// What one figure measured.
#[derive(Debug)]
pub struct Figure {
    pub name: String,
    pub clients: usize,
    pub timings: Timings,
    pub elapsed: Duration,
    /// CPU seconds spent during the run: the server process, the zygote(s), the sessions.
    pub cpu: Cpu,
    /// Calls per second the cores could do at best, for a CPU-bound cell.
    pub ideal_per_s: Option<f64>,
}

impl Figure {
    fn per_s(&self) -> f64 {
        self.timings.len() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// CPU milliseconds per call of `seconds`.
    fn per_call_ms(&self, seconds: f64) -> f64 {
        seconds * 1e3 / self.timings.len().max(1) as f64
    }
}

/// CPU seconds of the service's processes.
#[derive(Debug, Default, Clone, Copy)]
pub struct Cpu {
    pub serve: f64,
    pub zygote: f64,
    pub sessions: f64,
}

impl Cpu {
    /// Read now: `serve` itself, its direct children (the zygote), and everything below them
    /// (sessions and what they started).
    pub(crate) fn read(serve: u32) -> Result<Self> {
        let mut cpu = Cpu {
            serve: cpu_seconds(&serve.to_string())?,
            ..Cpu::default()
        };
        let zygotes = children(serve);
        let mut below: Vec<u32> = zygotes.iter().flat_map(|z| children(*z)).collect();
        for zygote in zygotes {
            cpu.zygote += cpu_seconds(&zygote.to_string()).unwrap_or(0.0);
        }
        while let Some(pid) = below.pop() {
            // a process may end between the listing and the reading
            cpu.sessions += cpu_seconds(&pid.to_string()).unwrap_or(0.0);
            below.extend(children(pid));
        }
        Ok(cpu)
    }

    pub(crate) fn since(self, before: Cpu) -> Cpu {
        Cpu {
            serve: self.serve - before.serve,
            zygote: self.zygote - before.zygote,
            sessions: self.sessions - before.sessions,
        }
    }
}

/// The children of `pid`, from every thread's list.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut found: Vec<u32> = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    found.sort_unstable();
    found.dedup();
    found
}

/// Runs the throughput figures and prints them.
pub fn run(files: &Files, binary: &Path, dir: &Path, seconds: u64) -> Result<()> {
    if !(1..=120).contains(&seconds) {
        bail!("--sandbox-throughput-secs must be 1 to 120");
    }
    let cores = crate::cores().max(1);
    let settings = files.server_settings(&dir.join("server-sessions"), CLIENTS.max(cores) + 8);
    let toolgate = Toolgate {
        binary: binary.to_owned(),
        data_dir: dir.join("data"),
        database_url: None,
        settings,
    };
    progress(&format!(
        "throughput: {} serve, {cores} cores, each figure at most {seconds} s",
        binary.display()
    ));
    let mut server = toolgate.serve(Some("warn"), &dir.join("serve.log"))?;
    // one thread drives every client, as one load generator would: it leaves the other cores
    // to the service
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let outcome = (|| {
        let endpoint = Endpoint::new(server.addr)?;
        wait_healthy(&runtime, &mut server, &endpoint)?;
        let personal = personal_path(&toolgate)?;
        let limit = Duration::from_secs(seconds);
        let mut plans = vec![(format!("1+1, {CLIENTS} clients"), "1+1", CLIENTS, None)];
        let ideal = |clients: usize| Some(clients.min(cores) as f64 / CPU_CELL_S);
        for clients in [1, cores, CLIENTS] {
            let name = format!("50 ms CPU cell, {clients} client(s)");
            if !plans.iter().any(|(n, ..)| *n == name) {
                plans.push((name, CPU_CELL, clients, ideal(clients)));
            }
        }
        let mut figures = Vec::new();
        for (name, code, clients, ideal_per_s) in plans {
            progress(&format!("  {name}"));
            let figure = runtime.block_on(measure(
                &endpoint,
                &personal,
                server.pid(),
                (code, clients, limit),
            ))?;
            server.check_running()?;
            figures.push(Figure {
                name,
                ideal_per_s,
                ..figure
            });
        }
        Ok::<_, anyhow::Error>(figures)
    })();
    if outcome.is_err() {
        progress(&format!("server log ends:\n{}", server.log_tail(20)));
    }
    let stopped = server.stop();
    let figures = outcome?;
    stopped?;
    print!("{}", table(&figures, cores, seconds));
    Ok(())
}

/// `clients` clients, each in session `tp-<n>` on its own connection, calling `code` back to
/// back until `limit` has passed or [`MAX_CALLS`] were made.
async fn measure(
    endpoint: &Endpoint,
    personal: &str,
    serve: u32,
    (code, clients, limit): (&str, usize, Duration),
) -> Result<Figure> {
    let mut connections = Vec::with_capacity(clients);
    for n in 0..clients {
        let workload = Workload::post(
            personal,
            write_call(code, &format!("tp-{n}")),
            vec![b"\"isError\":false"],
        )?;
        let mut sender = load::connect(endpoint).await?;
        for _ in 0..WARMUP_CALLS {
            load::call(&mut sender, endpoint, &workload)
                .await
                .context("a warm-up call")?;
        }
        connections.push((sender, Arc::new(workload)));
    }
    let made = Arc::new(AtomicUsize::new(0));
    let before = Cpu::read(serve)?;
    let started = Instant::now();
    let deadline = started + limit;
    let mut running = tokio::task::JoinSet::new();
    for (mut sender, workload) in connections {
        let (endpoint, made) = (endpoint.clone(), made.clone());
        running.spawn(async move {
            let mut timings = Timings::default();
            while Instant::now() < deadline && made.fetch_add(1, Ordering::Relaxed) < MAX_CALLS {
                let call = Instant::now();
                load::call(&mut sender, &endpoint, &workload).await?;
                timings.push(call.elapsed());
            }
            Ok::<_, anyhow::Error>(timings)
        });
    }
    let mut all = Timings::default();
    while let Some(joined) = running.join_next().await {
        all.extend(joined.context("a client failed")??);
    }
    let elapsed = started.elapsed();
    let cpu = Cpu::read(serve)?.since(before);
    Ok(Figure {
        name: String::new(),
        clients,
        timings: all.sorted(),
        elapsed,
        cpu,
        ideal_per_s: None,
    })
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"))
}

/// The figures as a table.
pub fn table(figures: &[Figure], cores: usize, seconds: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "toolgate-bench --sandbox-throughput: {cores} cores, bare POST, each client its own session and keep-alive connection, {seconds} s per figure"
    );
    let _ = writeln!(
        out,
        "\n{:<30} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9}  {:>10} {:>10} {:>10}",
        "figure",
        "clients",
        "calls",
        "calls/s",
        "p50 ms",
        "p99 ms",
        "best/s",
        "serve ms",
        "zygote ms",
        "session ms"
    );
    for f in figures {
        let _ = writeln!(
            out,
            "{:<30} {:>7} {:>7} {:>9.1} {:>9} {:>9} {:>9}  {:>10.3} {:>10.3} {:>10.3}",
            f.name,
            f.clients,
            f.timings.len(),
            f.per_s(),
            ms(f.timings.percentile_ms(50.0)),
            ms(f.timings.percentile_ms(99.0)),
            f.ideal_per_s
                .map_or_else(|| "-".to_owned(), |v| format!("{v:.1}")),
            f.per_call_ms(f.cpu.serve),
            f.per_call_ms(f.cpu.zygote),
            f.per_call_ms(f.cpu.sessions),
        );
    }
    let _ = writeln!(
        out,
        "(best/s: min(clients, cores) / 50 ms; CPU per call from /proc/<pid>/stat utime+stime before and after, 10 ms ticks: the serve process, its zygote, and every process below it)"
    );
    out
}
