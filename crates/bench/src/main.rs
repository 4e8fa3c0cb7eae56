//! `toolgate-bench`: starts the real `toolgate` binary on loopback and prints throughput, latency
//! and memory figures for it, next to the project's targets. It reports figures, not pass/fail.
//! With `--sandbox` it measures the sandbox's figures instead (see `sandbox/`).

mod ai;
mod dashboard;
mod egress;
mod fairness;
mod floor;
mod fronts;
mod load;
mod oauth;
mod paths;
mod proc;
mod report;
mod sandbox;
mod server;
mod stand_in;
mod web;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Parser;
use http::{Method, StatusCode, Uri};

use crate::load::{Endpoint, Workload};
use crate::paths::{Ask, ClientPath};
use crate::report::{METERED_TARGET, Memory, Phase, Report, TOOLS_LIST_TARGET};
use crate::server::{STARTUP_LIMIT, Server, Toolgate};

const EMAIL: &str = "bench@example.org";
const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

/// Throughput, latency and memory of a real toolgate server, measured over loopback.
#[derive(Debug, Parser)]
#[command(name = "toolgate-bench")]
struct Args {
    /// The toolgate binary [default: `toolgate` next to this program, else target/release/toolgate]
    #[arg(long)]
    toolgate: Option<PathBuf>,
    /// Seconds measured for each figure, after the warm-up
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Warm-up before each figure, in milliseconds (requests then are checked but not counted)
    #[arg(long, default_value_t = 1000)]
    warmup_ms: u64,
    /// Concurrent clients for the loaded figures (each one keep-alive connection)
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Worker threads of the load generator (1 = a current-thread runtime, the cheapest)
    #[arg(long, default_value_t = 1)]
    client_threads: usize,
    /// postgres://… to measure on PostgreSQL; given to `serve` and to the operator commands
    #[arg(long)]
    database_url: Option<String>,
    /// Measure only the metered figure (bare POST) through this many serve processes on the one
    /// --database-url, the clients spread over them in turn
    #[arg(long)]
    front_ends: Option<usize>,
    /// Passed to the server as --sqlite-synchronous (`full` or `normal`) [default: the server's]
    #[arg(long)]
    sqlite_synchronous: Option<String>,
    /// Price per paid call given to the server: low, so the $500 credit cannot run dry however
    /// many calls a run makes (the code path is the same at any price)
    #[arg(long, default_value = "0.0001")]
    paid_call_cost_usd: String,
    /// Skip the second server run at the default log level
    #[arg(long)]
    skip_default_log: bool,
    /// Before each figure, wait up to this many seconds for other programs on the machine to go
    /// quiet (under a quarter of a core busy); then measure anyway, and the table shows the load
    #[arg(long, default_value_t = 30)]
    quiet_wait_secs: u64,
    /// Print the figures as JSON instead of the table
    #[arg(long)]
    json: bool,
    /// Also measure a bare axum server with a fixed body, with the same generator and clients:
    /// the floor of this machine's HTTP stack, and proof the generator is not the limit
    #[arg(long)]
    measure_floor: bool,
    /// Internal: run the bare axum floor server on this address (used by --measure-floor)
    #[arg(long, hide = true)]
    floor_server: Option<SocketAddr>,
    /// Internal: how long the floor server may live, in seconds
    #[arg(long, hide = true, default_value_t = 60)]
    floor_limit_secs: u64,
    /// Internal: the Python of the floor server's echo process (`/echo/…`)
    #[arg(long, hide = true)]
    floor_echo: Option<PathBuf>,
    /// Keep the temporary data directory and server logs, and print where they are
    #[arg(long)]
    keep_data: bool,
    /// Measure a `url` fetch through toolgate against fetching the same loopback page directly
    /// and with curl (needs curl)
    #[arg(long)]
    web: bool,
    /// Measure svc_ai (a model call, its first streamed piece, the same from code, a search)
    /// against the same stand-ins asked directly (as root, with the sandbox's runtime; search
    /// figures need Debian's searx)
    #[arg(long)]
    ai: bool,
    /// Measure the owner's dashboard pages: time to first byte with a signed-in cookie
    #[arg(long)]
    dashboard: bool,
    /// Measure a tools/call on /mcp with an OAuth access token against the personal URL
    #[arg(long)]
    oauth: bool,
    /// Measure what the sessions' network proxy adds: a small GET and a large download through
    /// it against the same made directly (in this process, on loopback)
    #[arg(long)]
    egress: bool,
    #[command(flatten)]
    sandbox: sandbox::SandboxArgs,
}

/// The cores this process may run on (0 when unknown).
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(0, usize::from)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let outcome = match args.floor_server {
        Some(addr) => floor::serve(
            addr,
            Duration::from_secs(args.floor_limit_secs),
            args.floor_echo.clone(),
        ),
        None => run(&args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Progress goes to stderr so that stdout holds only the figures.
fn progress(message: &str) {
    eprintln!("[bench] {message}");
}

fn default_binary() -> PathBuf {
    let sibling = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("toolgate")));
    match sibling {
        Some(path) if path.is_file() => path,
        _ => PathBuf::from("target/release/toolgate"),
    }
}

fn run(args: &Args) -> Result<()> {
    if args.egress {
        return egress::run();
    }
    if args.seconds == 0
        || args.clients == 0
        || args.client_threads == 0
        || args.front_ends == Some(0)
    {
        bail!("--seconds, --clients, --client-threads and --front-ends must be at least 1");
    }
    let binary = args.toolgate.clone().unwrap_or_else(default_binary);
    if !binary.is_file() {
        bail!(
            "no toolgate binary at {} (build it: cargo build --release -p toolgate)",
            binary.display()
        );
    }
    if args.web {
        return web::run(&binary);
    }
    if args.dashboard {
        return dashboard::run(&binary);
    }
    if args.oauth {
        return oauth::run(&binary);
    }
    if args.ai {
        return ai::run(&binary, args.sandbox.sandbox_runtime.as_deref());
    }
    if let Some(front_ends) = args.front_ends {
        return fronts::run(args, &binary, front_ends);
    }
    if args.sandbox.sandbox_durable {
        return sandbox::run_durable(args, &binary);
    }
    if args.sandbox.sandbox_throughput {
        return sandbox::run_throughput(args, &binary);
    }
    if args.sandbox.sandbox_nodes {
        return sandbox::run_nodes(args, &binary);
    }
    if args.sandbox.sandbox_bursts {
        return sandbox::run_bursts(args, &binary);
    }
    if args.sandbox.sandbox {
        return sandbox::run(args, &binary);
    }
    let dir = tempfile::Builder::new()
        .prefix("toolgate-bench-")
        .tempdir()
        .context("cannot make a temporary directory")?;
    let mut settings = vec![(
        "--paid-call-cost-usd".to_owned(),
        args.paid_call_cost_usd.clone(),
    )];
    if let Some(mode) = &args.sqlite_synchronous {
        settings.push(("--sqlite-synchronous".to_owned(), mode.clone()));
    }
    // the spine's figures: no zygote beside the server (`--sandbox` measures the sandbox)
    settings.push(("--sandbox".to_owned(), "off".to_owned()));
    let toolgate = Toolgate {
        binary,
        data_dir: dir.path().join("data"),
        database_url: args.database_url.clone(),
        settings,
    };
    // One thread by default: on a 2-core machine every core the generator takes is one the server
    // does not get, and a single thread drives 16 idle-waiting connections easily.
    let runtime = if args.client_threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.client_threads)
            .enable_all()
            .build()?
    };
    let warmup = Duration::from_millis(args.warmup_ms);
    let measure = Duration::from_secs(args.seconds);
    let mut report = Report {
        backend: if args.database_url.is_some() {
            "postgres"
        } else {
            "sqlite"
        },
        binary: toolgate.binary.display().to_string(),
        seconds: args.seconds,
        warmup_ms: args.warmup_ms,
        client_threads: args.client_threads,
        paid_call_cost_usd: args.paid_call_cost_usd.clone(),
        sqlite_synchronous: args.sqlite_synchronous.clone(),
        phases: Vec::new(),
        memory: None,
        default_log_bytes_per_request: None,
    };

    progress(&format!(
        "starting {} serve (TOOLGATE_LOG=warn), data in {}",
        toolgate.binary.display(),
        dir.path().display()
    ));
    let mut server = toolgate.serve(Some("warn"), &dir.path().join("serve-warn.log"))?;
    let endpoint = Endpoint::new(server.addr)?;
    wait_healthy(&runtime, &mut server, &endpoint)?;
    let path = personal_path(&toolgate)?;
    toolgate.cli(&["wallet", "credit", "--email", EMAIL, "--usd", "500"])?;
    let idle_before = proc::status_mib(server.pid(), "VmRSS")?;
    progress(&format!(
        "server pid {} on {}, idle VmRSS {idle_before:.1} MiB",
        server.pid(),
        server.addr
    ));

    let list = Arc::new(Workload::post(&path, TOOLS_LIST, vec![b"\"svc_read\""])?);
    let loaded = |clients: usize, target: f64| (clients > 1).then_some(target);
    let mut plan = Vec::new();
    for (asks, target) in [
        (&ClientPath::ALL[..], TOOLS_LIST_TARGET),
        (
            &[ClientPath::LegacySse, ClientPath::Modern, ClientPath::Bare][..],
            METERED_TARGET,
        ),
    ] {
        let ask = if target == TOOLS_LIST_TARGET {
            Ask::ToolsList
        } else {
            Ask::Billing
        };
        for client_path in asks {
            let workload = runtime.block_on(client_path.workload(&endpoint, &path, ask))?;
            show_probe(&runtime, &endpoint, client_path.label(ask), &workload)?;
            let workload = Arc::new(workload);
            let name = client_path.label(ask);
            plan.push((name, workload.clone(), 1, None));
            plan.push((name, workload, args.clients, loaded(args.clients, target)));
        }
    }
    let bench = Bench {
        runtime: &runtime,
        warmup,
        measure,
        quiet_wait: Duration::from_secs(args.quiet_wait_secs),
    };
    for (name, workload, clients, target) in plan {
        let phase = bench.phase(
            std::slice::from_mut(&mut server),
            std::slice::from_ref(&endpoint),
            &workload,
            clients,
            (name, "warn"),
            target,
        )?;
        report.phases.push(phase);
    }
    server.check_running()?;
    // Let in-flight work, buffers and allocator caches settle before reading memory "when idle".
    std::thread::sleep(Duration::from_secs(1));
    report.memory = Some(Memory {
        idle_before_mib: idle_before,
        idle_after_mib: proc::status_mib(server.pid(), "VmRSS")?,
        peak_mib: proc::status_mib(server.pid(), "VmHWM")?,
    });
    server.stop()?;

    if !args.skip_default_log {
        progress("starting a second server at the default log level (access log on)");
        let mut server = toolgate.serve(None, &dir.path().join("serve-default.log"))?;
        let endpoint = Endpoint::new(server.addr)?;
        wait_healthy(&runtime, &mut server, &endpoint)?;
        let log_start = server.log_bytes();
        let mut answered = 0_u64;
        for clients in [1, args.clients] {
            let target = loaded(clients, TOOLS_LIST_TARGET);
            let phase = bench.phase(
                std::slice::from_mut(&mut server),
                std::slice::from_ref(&endpoint),
                &list,
                clients,
                ("tools/list [bare POST]", "default"),
                target,
            )?;
            answered += phase.outcome.answered;
            report.phases.push(phase);
        }
        if answered > 0 {
            let written = server.log_bytes().saturating_sub(log_start);
            report.default_log_bytes_per_request = Some(written as f64 / answered as f64);
        }
        server.stop()?;
    }

    if args.measure_floor {
        progress("starting the bare axum floor server");
        // Its own time limit must cover the wait for a quiet machine that precedes the phase.
        let limit = bench.quiet_wait + warmup + measure + Duration::from_secs(30);
        let mut floor = server::spawn_floor(&dir.path().join("floor.log"), limit, None)?;
        let endpoint = Endpoint::new(floor.addr)?;
        wait_healthy(&runtime, &mut floor, &endpoint)?;
        let fixed = Arc::new(Workload::post(
            "/u/floor",
            TOOLS_LIST,
            vec![b"\"svc_read\""],
        )?);
        let name = (report::FLOOR_PHASE, "-");
        let floors = (
            std::slice::from_mut(&mut floor),
            std::slice::from_ref(&endpoint),
        );
        report
            .phases
            .push(bench.phase(floors.0, floors.1, &fixed, args.clients, name, None)?);
        floor.stop()?;
    }

    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.table());
    }
    if args.keep_data {
        let kept = dir.keep();
        progress(&format!("data and server logs kept in {}", kept.display()));
    }
    Ok(())
}

/// What every measured phase shares.
struct Bench<'a> {
    runtime: &'a tokio::runtime::Runtime,
    warmup: Duration,
    measure: Duration,
    quiet_wait: Duration,
}

impl Bench<'_> {
    /// Runs one load phase against `servers` (the clients spread over them) and labels it
    /// (`label` is figure name and log level).
    fn phase(
        &self,
        servers: &mut [Server],
        endpoints: &[Endpoint],
        workload: &Arc<Workload>,
        clients: usize,
        label: (&'static str, &'static str),
        target: Option<f64>,
    ) -> Result<Phase> {
        let workloads = std::slice::from_ref(workload);
        self.phase_of(servers, endpoints, workloads, clients, label, target)
    }

    /// The same, client n running workload n (the list taken in turn).
    fn phase_of(
        &self,
        servers: &mut [Server],
        endpoints: &[Endpoint],
        workloads: &[Arc<Workload>],
        clients: usize,
        label: (&'static str, &'static str),
        target: Option<f64>,
    ) -> Result<Phase> {
        let (name, log) = label;
        progress(&format!(
            "{name}, {clients} client(s), log={log}: {:?} after {:?} warm-up",
            self.measure, self.warmup
        ));
        wait_for_quiet(self.quiet_wait);
        let pids: Vec<u32> = servers.iter().map(Server::pid).collect();
        for server in servers.iter_mut() {
            server.check_running()?;
        }
        let run = load::run(
            endpoints,
            workloads,
            clients,
            self.warmup,
            self.measure,
            &pids,
        );
        let outcome = self.runtime.block_on(run)?;
        for server in servers.iter_mut() {
            server.check_running()?;
        }
        progress(&format!(
            "  {:.0}/s, {} error(s)",
            outcome.per_second(),
            outcome.error_count()
        ));
        Ok(Phase {
            name,
            log,
            outcome,
            target,
        })
    }
}

/// Waits, at most `limit`, for a one-second window in which the machine's tasks use less than a
/// quarter of a core. The machine is shared (builds and tests of other work run on it), and every
/// core they take is one the server and the generator do not get.
fn wait_for_quiet(limit: Duration) {
    const WINDOW: Duration = Duration::from_secs(1);
    const QUIET_CORES: f64 = 0.25;
    if limit.is_zero() {
        return;
    }
    let deadline = Instant::now() + limit;
    let mut busy = 0.0;
    while Instant::now() < deadline {
        let Ok(before) = proc::machine_busy_seconds() else {
            return;
        };
        std::thread::sleep(WINDOW);
        let Ok(after) = proc::machine_busy_seconds() else {
            return;
        };
        busy = (after - before) / WINDOW.as_secs_f64();
        if busy < QUIET_CORES {
            return;
        }
    }
    progress(&format!(
        "the machine is still busy ({busy:.2} cores used by other programs); measuring anyway"
    ));
}

/// Polls /healthz until it answers 200, failing early if the server exits.
fn wait_healthy(
    runtime: &tokio::runtime::Runtime,
    server: &mut Server,
    endpoint: &Endpoint,
) -> Result<()> {
    let deadline = Instant::now() + STARTUP_LIMIT;
    let mut last = String::from("no answer yet");
    while Instant::now() < deadline {
        server.check_running()?;
        match runtime.block_on(load::probe(endpoint, Method::GET, "/healthz", Bytes::new())) {
            Ok((StatusCode::OK, _, _)) => return Ok(()),
            Ok((status, _, body)) => {
                last = format!("HTTP {status}: {}", String::from_utf8_lossy(&body))
            }
            Err(err) => last = format!("{err:#}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!(
        "/healthz did not answer 200 within {STARTUP_LIMIT:?} ({last}); server log ends:\n{}",
        server.log_tail(20)
    )
}

/// Creates the bench account (or, if a reused PostgreSQL database already has it, rotates its key)
/// and returns the path part of its personal URL.
fn personal_path(toolgate: &Toolgate) -> Result<String> {
    personal_path_of_account(toolgate, EMAIL)
}

/// The same for the account of `email`.
fn personal_path_of_account(toolgate: &Toolgate, email: &str) -> Result<String> {
    let printed = match toolgate.cli(&["account", "create", "--email", email]) {
        Ok(printed) => printed,
        Err(create_err) => toolgate
            .cli(&["account", "rotate-key", "--email", email])
            .with_context(|| {
                format!("account create failed ({create_err:#}), and so did rotate-key")
            })?,
    };
    let issued: serde_json::Value = serde_json::from_str(printed.trim())
        .with_context(|| format!("account command printed {printed:?}"))?;
    let url = issued
        .get("personal_url")
        .and_then(serde_json::Value::as_str)
        .context("no personal_url in the account command's output")?;
    let uri: Uri = url
        .parse()
        .with_context(|| format!("personal_url {url:?}"))?;
    let path = uri
        .path_and_query()
        .map(|pq| pq.as_str().to_owned())
        .context("personal_url has no path")?;
    Ok(path)
}

/// Sends one request of a workload and shows what came back, so the report says what was
/// actually measured (JSON or SSE, how big).
fn show_probe(
    runtime: &tokio::runtime::Runtime,
    endpoint: &Endpoint,
    label: &str,
    workload: &Workload,
) -> Result<()> {
    let (status, headers, answer) = runtime.block_on(workload.send_once(endpoint))?;
    let kind = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let shown: String = String::from_utf8_lossy(&answer).chars().take(120).collect();
    progress(&format!(
        "probe {label}\n        -> HTTP {status}, {kind:?}, {} bytes: {shown}",
        answer.len()
    ));
    Ok(())
}
