//! `toolgate-bench --sandbox-pip`: `pip install` of a pure-Python wheel in new confined sessions
//! through the release server, first from the operator's index (a loopback pypiserver serving a
//! wheel built here), then, with that index stopped, from the host's wheel cache. Each install is
//! timed inside the cell (pip's own process, start to end) and around the whole call.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::Files;
use super::http::write_call;
use crate::load::{Endpoint, Workload};
use crate::server::Toolgate;
use crate::{personal_path, progress, wait_healthy};

/// Installs timed from the cache.
const CACHED_INSTALLS: usize = 5;
/// The wheel's project name.
const PROJECT: &str = "tgbench_demo";

/// The cell that installs the wheel and prints the time pip took.
fn install_cell() -> String {
    format!(
        "import subprocess, sys, time\n\
         t0 = time.perf_counter()\n\
         r = subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '{PROJECT}'], capture_output=True, text=True)\n\
         took = time.perf_counter() - t0\n\
         assert r.returncode == 0, r.stderr[-500:]\n\
         print(f'pip-took {{took:.4f}}')"
    )
}

/// Measures and prints the figures.
pub fn run(files: &Files, binary: &Path, dir: &Path) -> Result<()> {
    let wheels = dir.join("wheels-upstream");
    std::fs::create_dir_all(&wheels)?;
    build_wheel(&files.runtime, &wheels)?;
    let pypi = Path::new(".deps/venv/bin/pypi-server");
    if !pypi.is_file() {
        bail!(
            "no {}: run scripts/deps.sh from the checkout",
            pypi.display()
        );
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut index = Command::new(pypi)
        .args(["run", "-i", "127.0.0.1", "-p", &port.to_string()])
        .args(["-a", ".", "-P", ".", "--hash-algo", "sha256"])
        .arg(&wheels)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting pypi-server")?;
    let path = |p: &Path| p.display().to_string();
    let toolgate = Toolgate {
        binary: binary.to_owned(),
        data_dir: dir.join("pip-data"),
        database_url: None,
        settings: vec![
            ("--free-monthly-calls".to_owned(), "1000000".to_owned()),
            ("--sandbox".to_owned(), "on".to_owned()),
            ("--sandbox-runtime".to_owned(), path(&files.runtime)),
            ("--sandbox-zygote".to_owned(), path(&files.zygote)),
            ("--sandbox-harden-lib".to_owned(), path(&files.harden_lib)),
            ("--sandbox-root".to_owned(), path(&dir.join("pip-sessions"))),
            ("--sandbox-max-sessions".to_owned(), "20".to_owned()),
            (
                "--pip-index-url".to_owned(),
                format!("http://127.0.0.1:{port}/simple/"),
            ),
        ],
    };
    let mut server = toolgate.serve(Some("warn"), &dir.join("pip-serve.log"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let outcome = (|| -> Result<()> {
        let endpoint = Endpoint::new(server.addr)?;
        wait_healthy(&runtime, &mut server, &endpoint)?;
        let personal = personal_path(&toolgate)?;
        let install = |session: String| -> Result<(f64, f64)> {
            let workload = Workload::post(
                &personal,
                write_call(&install_cell(), &session),
                vec![b"\"isError\":false", b"pip-took"],
            )?;
            let started = Instant::now();
            let (_, _, body) = runtime.block_on(workload.send_once(&endpoint))?;
            let call = started.elapsed().as_secs_f64();
            let text = String::from_utf8_lossy(&body);
            let took = text
                .split("pip-took ")
                .nth(1)
                .and_then(|rest| {
                    rest.split(|c: char| !(c.is_ascii_digit() || c == '.'))
                        .next()
                })
                .and_then(|n| n.parse::<f64>().ok())
                .with_context(|| format!("no pip time in {}", &text[..text.len().min(600)]))?;
            Ok((took, call))
        };
        progress("pip install from the operator's index (a cache miss)");
        let (miss, miss_call) = install("pip-miss".to_owned())?;
        let _ = index.kill();
        let _ = index.wait();
        progress(&format!(
            "pip install from the host's cache, {CACHED_INSTALLS} new sessions, the index stopped"
        ));
        let mut cached = Vec::new();
        for n in 0..CACHED_INSTALLS {
            cached.push(install(format!("pip-hit-{n}"))?);
        }
        let mut pip: Vec<f64> = cached.iter().map(|(p, _)| *p).collect();
        let mut calls: Vec<f64> = cached.iter().map(|(_, c)| *c).collect();
        pip.sort_by(f64::total_cmp);
        calls.sort_by(f64::total_cmp);
        println!("pip install of a pure-Python wheel in a new confined session (release server):");
        println!(
            "  from the operator's index (miss): pip {miss:.3} s, whole call {miss_call:.3} s"
        );
        println!(
            "  from the host's cache ({CACHED_INSTALLS}, index stopped): pip p50 {:.3} s, max {:.3} s; \
             whole call p50 {:.3} s, max {:.3} s (goal: ≤ 1 s)",
            pip[pip.len() / 2],
            pip[pip.len() - 1],
            calls[calls.len() / 2],
            calls[calls.len() - 1]
        );
        Ok(())
    })();
    let _ = index.kill();
    let _ = index.wait();
    let stopped = server.stop();
    outcome?;
    stopped?;
    std::thread::sleep(Duration::from_millis(10));
    Ok(())
}

/// Builds `tgbench_demo-1.0-py3-none-any.whl` in `dir` with the runtime's Python (zipfile).
fn build_wheel(runtime: &Path, dir: &Path) -> Result<()> {
    /// One script for the suite and the bench.
    const BUILD: &str = include_str!("../../../../tests/fixtures/build_wheel.py");
    let status = Command::new(runtime.join("bin/python"))
        .args(["-c", BUILD])
        .arg(dir)
        .arg(PROJECT)
        .status()
        .context("building the wheel")?;
    if !status.success() {
        bail!("building the wheel failed");
    }
    Ok(())
}
