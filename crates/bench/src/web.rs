//! `--web`: what a `url` fetch through toolgate costs over fetching the same page directly. A
//! loopback site (this program's floor server, `/healthz`) is fetched (1) by `svc_read url`
//! through the release server, (2) directly by this program's HTTP client on a keep-alive
//! connection, and (3) by `curl` (its own `time_total`, without process start-up).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::load::{self, Endpoint, Workload};
use crate::server::{self, Toolgate};
use crate::{personal_path, progress, wait_healthy};

/// Timed requests per figure, after as many untimed ones as a tenth of them.
const CALLS: usize = 2000;
const CURL_RUNS: usize = 200;

/// Runs the three figures and prints them.
pub fn run(binary: &Path) -> Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("toolgate-bench-web-")
        .tempdir()
        .context("cannot make a temporary directory")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut site = server::spawn_floor(&dir.path().join("site.log"), Duration::from_secs(600))?;
    let site_endpoint = Endpoint::new(site.addr)?;
    wait_healthy(&runtime, &mut site, &site_endpoint)?;
    let url = format!("http://{}/healthz", site.addr);
    let toolgate = Toolgate {
        binary: binary.to_owned(),
        data_dir: dir.path().join("data"),
        database_url: None,
        settings: vec![
            ("--sandbox".to_owned(), "off".to_owned()),
            ("--free-monthly-calls".to_owned(), "1000000000".to_owned()),
            (
                "--egress-allow-private".to_owned(),
                "127.0.0.1/32".to_owned(),
            ),
        ],
    };
    let mut server = toolgate.serve(Some("warn"), &dir.path().join("serve.log"))?;
    let endpoint = Endpoint::new(server.addr)?;
    wait_healthy(&runtime, &mut server, &endpoint)?;
    let personal = personal_path(&toolgate)?;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "svc_read", "arguments": {"url": url}}})
    .to_string();
    let through = Workload::post(
        &personal,
        call,
        vec![b"\"isError\":false", b"\"status\":200"],
    )?;
    progress(&format!("svc_read url of {url}: {CALLS} calls"));
    let through = runtime.block_on(timed(&endpoint, &through))?;
    let direct = Workload::get("/healthz", vec![b"ok"])?;
    progress(&format!("the same page directly: {CALLS} requests"));
    let direct = runtime.block_on(timed(&site_endpoint, &direct))?;
    progress(&format!("curl: {CURL_RUNS} runs"));
    let curl = curl_times(&url)?;
    server.stop()?;
    site.stop()?;
    println!("toolgate-bench --web: a loopback page fetched through `svc_read url` and directly\n");
    println!(
        "{:<44} {:>6} {:>8} {:>8}",
        "figure", "n", "p50 ms", "p99 ms"
    );
    for (name, times) in [
        ("svc_read url through toolgate (metered)", &through),
        ("direct GET, keep-alive (this program)", &direct),
        ("curl, its own time_total (new connection)", &curl),
    ] {
        println!(
            "{name:<44} {:>6} {:>8.3} {:>8.3}",
            times.len(),
            percentile(times, 50.0),
            percentile(times, 99.0)
        );
    }
    println!(
        "\ntoolgate adds {:.3} ms at the median over a direct keep-alive GET (the MCP call, its \
         metering, the guarded client, rendering)",
        percentile(&through, 50.0) - percentile(&direct, 50.0)
    );
    Ok(())
}

/// Sends `workload` `CALLS` times on one keep-alive connection (after a tenth untimed).
async fn timed(endpoint: &Endpoint, workload: &Workload) -> Result<Vec<f64>> {
    let mut sender = load::connect(endpoint).await?;
    for _ in 0..CALLS / 10 {
        load::call(&mut sender, endpoint, workload).await?;
    }
    let mut times = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        load::call(&mut sender, endpoint, workload).await?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

fn curl_times(url: &str) -> Result<Vec<f64>> {
    let mut times = Vec::with_capacity(CURL_RUNS);
    for _ in 0..CURL_RUNS {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{time_total}", url])
            .output()
            .context("cannot run curl")?;
        if !out.status.success() {
            bail!("curl failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let seconds: f64 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .context("curl printed no time")?;
        times.push(seconds * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

/// The `pct` percentile of sorted `times`.
fn percentile(times: &[f64], pct: f64) -> f64 {
    if times.is_empty() {
        return f64::NAN;
    }
    let rank = ((pct / 100.0) * times.len() as f64).ceil() as usize;
    times[rank.clamp(1, times.len()) - 1]
}
