//! The fairness figure (part of `--web`): eight accounts each ask for five pages that drip a
//! byte a second, and a ninth account's fetch of a fast page is timed while they run. Turns
//! of web requests are fair across accounts (crates/app/src/turns.rs), so the ninth need not
//! wait for the slow ones; the goal is under 1 s.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::json;

use crate::load::{Endpoint, Workload};
use crate::sandbox::Timings;
use crate::server::Toolgate;
use crate::{personal_path_of_account, progress};

/// Accounts with slow fetches, and fetches each.
const BUSY_ACCOUNTS: usize = 8;
const FETCHES_EACH: usize = 5;
/// How long a dripping page takes.
const DRIP: Duration = Duration::from_secs(20);
/// Fast fetches of the ninth account timed while the slow ones run.
const FAST_FETCHES: usize = 20;

/// A page that sends a byte a second for [`DRIP`] (served by the floor server).
pub async fn drip() -> axum::body::Body {
    let seconds = DRIP.as_secs();
    let body = futures::stream::unfold(0, move |n| async move {
        if n == seconds {
            return None;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        Some((Ok::<_, std::io::Error>(vec![b'.']), n + 1))
    });
    axum::body::Body::from_stream(body)
}

/// What was measured.
pub struct Fairness {
    fast: Timings,
}

impl Fairness {
    /// Prints the figure beside the web figures.
    pub fn print(&self) {
        println!(
            "\nfairness: a ninth account's svc_read url of a fast page while {BUSY_ACCOUNTS} \
             accounts have {FETCHES_EACH} fetches each of a page dripping a byte a second \
             ({} fetches): p50 {:.3} ms, max {:.3} ms (goal: under 1000 ms)",
            self.fast.len(),
            self.fast.percentile_ms(50.0).unwrap_or(f64::NAN),
            self.fast.percentile_ms(100.0).unwrap_or(f64::NAN),
        );
    }
}

fn fetch_call(url: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "svc_read", "arguments": {"url": url}}})
    .to_string()
}

/// Runs the figure against the server at `endpoint`, with `site` serving `/drip` and `/healthz`.
pub fn measure(
    runtime: &tokio::runtime::Runtime,
    toolgate: &Toolgate,
    endpoint: &Endpoint,
    site: SocketAddr,
) -> Result<Fairness> {
    progress(&format!(
        "fairness: {BUSY_ACCOUNTS} accounts × {FETCHES_EACH} dripping fetches, then a ninth \
         account's fast fetch, {FAST_FETCHES} times"
    ));
    let drip = fetch_call(&format!("http://{site}/drip"));
    let mut slow = Vec::new();
    for n in 0..BUSY_ACCOUNTS {
        let path = personal_path_of_account(toolgate, &format!("busy{n}@example.org"))?;
        for _ in 0..FETCHES_EACH {
            let workload = Workload::post(&path, drip.clone(), vec![])?;
            let endpoint = endpoint.clone();
            slow.push(runtime.spawn(async move { workload.send_once(&endpoint).await }));
        }
    }
    let ninth = personal_path_of_account(toolgate, "ninth@example.org")?;
    let fast = Workload::post(
        &ninth,
        fetch_call(&format!("http://{site}/healthz")),
        vec![b"\"isError\":false"],
    )?;
    let started = Instant::now();
    let mut times = Timings::default();
    runtime.block_on(async {
        // the slow fetches are all asked for and have their turns by now
        tokio::time::sleep(Duration::from_secs(1)).await;
        for _ in 0..FAST_FETCHES {
            let asked = Instant::now();
            let (status, _, body) = fast.send_once(endpoint).await?;
            let ok: &[u8] = b"\"isError\":false";
            if !status.is_success() || !body.windows(ok.len()).any(|w| w == ok) {
                bail!(
                    "the ninth account's fetch failed: {}",
                    String::from_utf8_lossy(&body)
                );
            }
            times.push(asked.elapsed());
        }
        Ok(())
    })?;
    if started.elapsed() >= DRIP {
        bail!("the fast fetches outlasted the slow ones: the figure would mean nothing");
    }
    for call in slow {
        // the slow ones end (or are told busy) on their own; their answers are not the figure
        let _ = runtime.block_on(call);
    }
    Ok(Fairness {
        fast: times.sorted(),
    })
}
