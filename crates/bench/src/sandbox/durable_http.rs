//! The restore figure through HTTP: the release server with checkpoints on (in its data
//! directory, as `serve` defaults) and a hibernation time of one second; small sessions are
//! made, left to hibernate, and each one's next call is timed from send to the last byte of
//! its answer (the restore included).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;

use super::http::write_call;
use super::{Files, Timings};
use crate::load::{self, Endpoint, Workload};
use crate::server::Toolgate;
use crate::{personal_path, progress, wait_healthy};

/// The small session's cell, as the server-side figure runs it.
const SMALL: &str = "import pandas as pd\nx = 41\nopen('note.txt', 'w').write('n' * 1024)\nx";

/// Restores of `samples` small sessions through HTTP.
pub fn measure(
    runtime: &tokio::runtime::Runtime,
    binary: &Path,
    files: &Files,
    dir: &Path,
    samples: usize,
) -> Result<Timings> {
    let mut settings = files.server_settings(&dir.join("durable-sessions"), samples + 1);
    settings.push(("--sandbox-hibernate-after-s".to_owned(), "1".to_owned()));
    let toolgate = Toolgate {
        binary: binary.to_owned(),
        data_dir: dir.join("durable-data"),
        database_url: None,
        settings,
    };
    progress("starting serve with checkpoints and a 1 s hibernation time");
    let mut server = toolgate.serve(Some("warn"), &dir.join("durable-serve.log"))?;
    let endpoint = Endpoint::new(server.addr)?;
    let outcome = (|| {
        wait_healthy(runtime, &mut server, &endpoint)?;
        let personal = personal_path(&toolgate)?;
        runtime.block_on(restores(&endpoint, &personal, samples))
    })();
    if outcome.is_err() {
        progress(&format!("server log ends:\n{}", server.log_tail(20)));
    }
    let stopped = server.stop();
    let timings = outcome?;
    stopped?;
    Ok(timings)
}

async fn restores(endpoint: &Endpoint, personal: &str, samples: usize) -> Result<Timings> {
    let mut sender = load::connect(endpoint).await?;
    for i in 0..samples {
        let made = Workload::post(
            personal,
            write_call(SMALL, &format!("d-{i}")),
            vec![b"\"isError\":false", b"\"text\":\"41\""],
        )?;
        load::call(&mut sender, endpoint, &made)
            .await
            .with_context(|| format!("making session {i}"))?;
    }
    let listing = Workload::post(
        personal,
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
               "params": {"name": "svc_read", "arguments": {"sessions": true}}})
        .to_string(),
        vec![b"\"isError\":false"],
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = load::call(&mut sender, endpoint, &listing).await?;
        let needle = b"\"state\":\"hibernated\"";
        let hibernated = answer
            .windows(needle.len())
            .filter(|w| *w == needle.as_slice())
            .count();
        if hibernated == samples {
            break;
        }
        if Instant::now() > deadline {
            bail!("{hibernated} of {samples} sessions hibernated within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut timings = Timings::default();
    for i in 0..samples {
        let back = Workload::post(
            personal,
            write_call("x", &format!("d-{i}")),
            vec![
                b"\"isError\":false",
                b"\"restored\":true",
                b"\"text\":\"41\"",
            ],
        )?;
        let started = Instant::now();
        load::call(&mut sender, endpoint, &back)
            .await
            .with_context(|| format!("restoring session {i}"))?;
        timings.push(started.elapsed());
    }
    Ok(timings.sorted())
}
