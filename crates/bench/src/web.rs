//! `--web`: what a `url` fetch through toolgate costs over fetching the same page directly. A
//! loopback site (this program's floor server, `/healthz`) is fetched (1) by `svc_read url`
//! through the release server, (2) directly by this program's HTTP client on a keep-alive
//! connection, and (3) by `curl` (its own `time_total`, without process start-up).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::load::{Endpoint, Workload};
use crate::sandbox::Timings;
use crate::sandbox::timed;
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
    let mut site =
        server::spawn_floor(&dir.path().join("site.log"), Duration::from_secs(600), None)?;
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
    progress(&format!(
        "svc_read url of {url}: {CALLS} calls, bare POST and in a legacy session"
    ));
    let (bare, _) = runtime.block_on(timed(&endpoint, &through, CALLS / 10, CALLS))?;
    let session = runtime.block_on(crate::paths::legacy_session(&endpoint, &personal))?;
    let in_session = through.with_headers(session);
    let (legacy, _) = runtime.block_on(timed(&endpoint, &in_session, CALLS / 10, CALLS))?;
    let direct = Workload::get("/healthz", vec![b"ok"])?;
    progress(&format!("the same page directly: {CALLS} requests"));
    let (direct, _) = runtime.block_on(timed(&site_endpoint, &direct, CALLS / 10, CALLS))?;
    progress(&format!("curl: {CURL_RUNS} runs"));
    let curl = curl_times(&url)?;
    let fairness = crate::fairness::measure(&runtime, &toolgate, &endpoint, site.addr)?;
    server.stop()?;
    site.stop()?;
    println!("toolgate-bench --web: a loopback page fetched through `svc_read url` and directly\n");
    println!(
        "{:<52} {:>6} {:>8} {:>8}",
        "figure", "n", "p50 ms", "p99 ms"
    );
    for (name, times) in [
        ("svc_read url, bare POST (metered)", &bare),
        ("svc_read url, legacy session + SSE accepted", &legacy),
        ("direct GET, keep-alive (this program)", &direct),
        ("curl, its own time_total (new connection)", &curl),
    ] {
        println!(
            "{name:<52} {:>6} {:>8.3} {:>8.3}",
            times.len(),
            ms(times, 50.0),
            ms(times, 99.0)
        );
    }
    println!(
        "\ntoolgate adds {:.3} ms at the median over a direct keep-alive GET (the MCP call, its \
         metering, the guarded client, rendering)",
        ms(&bare, 50.0) - ms(&direct, 50.0)
    );
    fairness.print();
    Ok(())
}

fn ms(times: &Timings, pct: f64) -> f64 {
    times.percentile_ms(pct).unwrap_or(f64::NAN)
}

fn curl_times(url: &str) -> Result<Timings> {
    let mut times = Timings::default();
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
        times.push(Duration::from_secs_f64(seconds));
    }
    Ok(times.sorted())
}
