//! The figures through HTTP: the real release server with the sandbox on, `tools/call
//! svc_write` on one keep-alive connection per figure, each call timed from send to the last
//! byte of the answer.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::plain_figure::{self, PlainFigure};
use super::timed::{timed, timed_across, timed_pair};
use super::{Files, Timings, stages};
use crate::load::{self, Endpoint, Workload};
use crate::server::{Server, Toolgate};
use crate::{personal_path, progress, wait_for_quiet, wait_healthy};

/// Untimed calls before the timed ones of the warm figures (session start, caches, imports).
const WARMUP_CALLS: usize = 200;
const WARMUP_PLOTS: usize = 3;
/// New sessions started before the timed ones of the HTTP new-session figure.
const WARMUP_SESSIONS: usize = 5;
/// The code of the matplotlib figure, as the product brief gives it.
const PLOT_CODE: &str = "import matplotlib.pyplot as plt\nplt.plot([1,2,3])\nNone";
/// A small DataFrame as a cell's value: the runtime renders it as text/plain and text/html.
const TABLE_CODE: &str =
    "import pandas as pd\npd.DataFrame({'a': range(10), 'b': list('abcdefghij')})";

/// What one run of the server needs.
#[derive(Debug)]
pub struct Plan<'a> {
    pub binary: &'a Path,
    pub files: &'a Files,
    pub dir: &'a Path,
    pub sessions: usize,
    /// Pause between two new sessions (untimed).
    pub gap: Duration,
    pub calls: usize,
    pub plots: usize,
    /// Given to the server as --sqlite-synchronous (metering commits once per call).
    pub sqlite_synchronous: Option<&'a str>,
    /// PostgreSQL instead of SQLite, as for the other figures.
    pub database_url: Option<&'a str>,
    pub quiet: Duration,
}

/// What was measured through HTTP.
#[derive(Debug)]
pub struct Http {
    /// svc_write `1+1` with a new session_id.
    pub new_session: Timings,
    /// svc_write `1+1` in the warm session, bare POST (no MCP session).
    pub warm: Timings,
    /// The machine's floor under a warm call: a bare HTTP server answering through a Python
    /// echo process on a pipe (`floor.rs`), alternated call by call with `warm_beside_floor`.
    pub floor: Timings,
    /// Warm `1+1` on the bare POST, the calls between those of `floor`.
    pub warm_beside_floor: Timings,
    /// The least a service running the cell in Python does: the same bare server parsing the
    /// call, a Python process compiling and evaluating `1+1` and answering a JSON line
    /// (`floor.rs`), alternated call by call with `warm_beside_cell_floor`.
    pub cell_floor: Timings,
    /// Warm `1+1` on the bare POST, the calls between those of `cell_floor`.
    pub warm_beside_cell_floor: Timings,
    /// The same naming five vault secrets (opened, set as the run's environment, redacted),
    /// alternated call by call with `warm_secrets_base`.
    pub warm_secrets: Timings,
    /// `1+1` naming none, the calls between those of `warm_secrets`.
    pub warm_secrets_base: Timings,
    /// The same naming five secrets, in the legacy session, alternated with its base.
    pub warm_secrets_legacy: Timings,
    /// `1+1` naming none in the legacy session, between those of `warm_secrets_legacy`.
    pub warm_secrets_legacy_base: Timings,
    /// The same in a 2025-11-25 legacy session with SSE accepted (the path most clients take).
    pub warm_legacy: Timings,
    /// Warm `1+1` as a 2026-07-28 client sends it (stateless, `_meta` and headers).
    pub warm_modern: Timings,
    /// Three printed lines streamed as progress (an SSE answer), in a legacy session.
    pub progress: Timings,
    /// svc_write of the matplotlib figure in a warm session.
    pub plot: Timings,
    /// The same figure drawn and saved by a plain Python process (`plain_figure.rs`), alternated
    /// figure by figure with `plot`: what the machine itself needs for it.
    pub plain_plot: Timings,
    /// The same figure made and only drawn on its canvas by that process: the least any
    /// rendering of it costs on this machine.
    pub plain_drawn: Timings,
    /// The size of the plain process's PNG (savefig's own, for comparison).
    pub plain_png_bytes: usize,
    /// The decoded size of the figure's PNG.
    pub png_bytes: usize,
    /// The size of the whole HTTP answer carrying it (base64 inside JSON).
    pub plot_answer_bytes: usize,
    /// svc_write of a 10-row DataFrame as the value (its text and HTML table), in a warm
    /// session, as many calls as the matplotlib figure.
    pub table: Timings,
    /// The size of the whole HTTP answer carrying the table.
    pub table_answer_bytes: usize,
    /// The warm calls' per-stage breakdown on each client path (the server's Server-Timing).
    pub stages: Vec<stages::Breakdown>,
}

/// A `tools/call` of svc_write with `code` in session `session_id`.
pub(super) fn write_call(code: &str, session_id: &str) -> String {
    json!({
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {
            "name": "svc_write",
            "arguments": {"code": code, "session_id": session_id},
        },
    })
    .to_string()
}

/// A `tools/call` of svc_write with `code` in session `session_id` that names `secrets`.
fn write_call_with_secrets(code: &str, session_id: &str, secrets: &[String]) -> String {
    json!({
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {
            "name": "svc_write",
            "arguments": {"code": code, "session_id": session_id, "secrets": secrets},
        },
    })
    .to_string()
}

/// Stores `names` in the vault (each value 40 characters, like an API key).
async fn store_secrets(endpoint: &Endpoint, personal: &str, names: &[String]) -> Result<()> {
    for name in names {
        let call = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {
            "name": "svc_write",
            "arguments": {"secret_set": {"name": name, "value": format!("{name}-{}", "k".repeat(36))}},
        }})
        .to_string();
        let stored = Workload::post(personal, call, vec![b"\"isError\":false"])?;
        let (status, _, body) = stored.send_once(endpoint).await?;
        let stored_ok = b"\"isError\":false";
        if !status.is_success() || !body.windows(stored_ok.len()).any(|w| w == stored_ok) {
            bail!("cannot store the bench's secret {name}: {status}");
        }
    }
    Ok(())
}

/// svc_write printing three lines with a progress token: the answer is an SSE stream of three
/// `notifications/progress` and the result.
fn progress_call() -> String {
    json!({
        "jsonrpc": "2.0",
        "id": 4,
        "method": "tools/call",
        "params": {
            "name": "svc_write",
            "arguments": {"code": "for i in range(3):\n    print(i, flush=True)", "session_id": "warm"},
            "_meta": {"progressToken": "bench"},
        },
    })
    .to_string()
}

/// Starts the server with the sandbox on, measures, and stops it whatever the outcome.
pub fn measure(runtime: &tokio::runtime::Runtime, plan: &Plan<'_>) -> Result<Http> {
    let path = |p: &Path| p.display().to_string();
    let settings = [
        // every svc_write call is metered: enough free calls that none is refused
        ("--free-monthly-calls", "1000000000".to_owned()),
        ("--sandbox", "on".to_owned()),
        // each tool call's answer says where its time went (the per-stage breakdown)
        ("--server-timing", "on".to_owned()),
        ("--sandbox-runtime", path(&plan.files.runtime)),
        ("--sandbox-zygote", path(&plan.files.zygote)),
        ("--sandbox-harden-lib", path(&plan.files.harden_lib)),
        ("--sandbox-root", path(&plan.dir.join("server-sessions"))),
        // hundreds of sessions of one account: no account share
        ("--sandbox-account-memory-mib", "0".to_owned()),
        // the new-session figure cannot close sessions through HTTP: they stay until the end
        (
            "--sandbox-max-sessions",
            (plan.sessions + WARMUP_SESSIONS + 10).to_string(),
        ),
    ];
    let mut settings: Vec<(String, String)> = settings
        .into_iter()
        .map(|(flag, value)| (flag.to_owned(), value))
        .collect();
    if let Some(mode) = plan.sqlite_synchronous {
        settings.push(("--sqlite-synchronous".to_owned(), mode.to_owned()));
    }
    let toolgate = Toolgate {
        binary: plan.binary.to_owned(),
        data_dir: plan.dir.join("data"),
        database_url: plan.database_url.map(str::to_owned),
        settings,
    };
    progress(&format!(
        "starting {} serve with the sandbox on (TOOLGATE_LOG=warn)",
        plan.binary.display()
    ));
    let mut server = toolgate.serve(Some("warn"), &plan.dir.join("serve.log"))?;
    let outcome = figures(runtime, plan, &toolgate, &mut server);
    if outcome.is_err() {
        progress(&format!("server log ends:\n{}", server.log_tail(20)));
    }
    progress("stopping the server");
    let stopped = server.stop();
    let http = outcome?;
    stopped?;
    Ok(http)
}

fn figures(
    runtime: &tokio::runtime::Runtime,
    plan: &Plan<'_>,
    toolgate: &Toolgate,
    server: &mut Server,
) -> Result<Http> {
    let endpoint = Endpoint::new(server.addr)?;
    wait_healthy(runtime, server, &endpoint)?;
    let personal = personal_path(toolgate)?;

    let warm = Workload::post(
        &personal,
        write_call("1+1", "warm"),
        vec![b"\"isError\":false", b"\"text\":\"2\""],
    )?;
    let session = runtime.block_on(crate::paths::legacy_session(&endpoint, &personal))?;
    let in_session = |body: String, needles| -> Result<Workload> {
        Ok(Workload::post(&personal, body, needles)?.with_headers(session.clone()))
    };
    let warm_legacy = in_session(
        write_call("1+1", "warm"),
        vec![b"\"isError\":false", b"\"text\":\"2\""],
    )?;
    let warm_modern = Workload::post(
        &personal,
        crate::paths::with_modern_meta(&write_call("1+1", "warm"))?,
        vec![b"\"isError\":false", b"\"text\":\"2\""],
    )?
    .with_headers(crate::paths::modern_call_headers("svc_write"));

    wait_for_quiet(plan.quiet);
    progress(&format!(
        "warm 1+1 through HTTP: {} calls after {WARMUP_CALLS} untimed on each client path (the \
         bare POST, a 2025-11-25 session with SSE accepted, 2026-07-28), alternated call by \
         call on one keep-alive connection",
        plan.calls
    ));
    let breakdowns = runtime.block_on(stages::alternated(
        &endpoint,
        &[
            ("bare POST", &warm),
            ("legacy + SSE", &warm_legacy),
            ("2026-07-28", &warm_modern),
        ],
        (WARMUP_CALLS, plan.calls),
    ))?;
    server.check_running()?;
    let [bare_stages, legacy, modern]: [stages::Breakdown; 3] = breakdowns
        .try_into()
        .map_err(|_| anyhow::anyhow!("three client paths measured, three breakdowns expected"))?;
    let (warm, warm_legacy, warm_modern) = (
        bare_stages.client.clone(),
        legacy.client.clone(),
        modern.client.clone(),
    );
    report("warm 1+1", &warm);
    report("warm 1+1 (legacy session)", &warm_legacy);
    report("warm 1+1 (2026-07-28)", &warm_modern);

    wait_for_quiet(plan.quiet);
    let floors = floor_pairs(runtime, plan, &endpoint, &personal)?;
    let ((floor, warm_beside_floor), (cell_floor, warm_beside_cell_floor)) = floors;
    server.check_running()?;
    report("floor (the same hops, no service)", &floor);
    report("warm 1+1 (alternated with it)", &warm_beside_floor);
    report("floor with the cell run in Python", &cell_floor);
    report("warm 1+1 (alternated with it)", &warm_beside_cell_floor);

    wait_for_quiet(plan.quiet);
    progress("warm 1+1 naming five vault secrets");
    let names: Vec<String> = (1..=5).map(|n| format!("BENCH_SECRET_{n}")).collect();
    runtime.block_on(store_secrets(&endpoint, &personal, &names))?;
    let with_secrets = Workload::post(
        &personal,
        write_call_with_secrets("1+1", "warm", &names),
        vec![b"\"isError\":false", b"\"text\":\"2\""],
    )?;
    let bare = Workload::post(
        &personal,
        write_call("1+1", "warm"),
        vec![b"\"isError\":false", b"\"text\":\"2\""],
    )?;
    let (warm_secrets, warm_secrets_base) = runtime.block_on(timed_pair(
        &endpoint,
        &with_secrets,
        &bare,
        WARMUP_CALLS,
        plan.calls,
    ))?;
    report("warm 1+1 (5 secrets)", &warm_secrets);
    report("warm 1+1 (none, alternated with it)", &warm_secrets_base);

    wait_for_quiet(plan.quiet);
    progress("a progress stream and 5 secrets in the legacy session (SSE accepted)");
    let names: Vec<String> = (1..=5).map(|n| format!("BENCH_SECRET_{n}")).collect();
    let with_secrets_legacy = in_session(
        write_call_with_secrets("1+1", "warm", &names),
        vec![b"\"isError\":false", b"\"text\":\"2\""],
    )?;
    let bare_legacy = in_session(
        write_call("1+1", "warm"),
        vec![b"\"isError\":false", b"\"text\":\"2\""],
    )?;
    let (warm_secrets_legacy, warm_secrets_legacy_base) = runtime.block_on(timed_pair(
        &endpoint,
        &with_secrets_legacy,
        &bare_legacy,
        WARMUP_CALLS,
        plan.calls,
    ))?;
    report("warm 1+1 (legacy session, 5 secrets)", &warm_secrets_legacy);
    report(
        "warm 1+1 (legacy session, none, alternated with it)",
        &warm_secrets_legacy_base,
    );
    let streamed = in_session(
        progress_call(),
        vec![b"notifications/progress", b"\"isError\":false"],
    )?;
    let (progress_stream, _) = runtime.block_on(timed(
        &endpoint,
        &streamed,
        WARMUP_CALLS / 10,
        (plan.calls / 10).max(10),
    ))?;
    server.check_running()?;
    report("progress stream", &progress_stream);

    wait_for_quiet(plan.quiet);
    progress(&format!(
        "matplotlib figure through HTTP: {} calls after {WARMUP_PLOTS} untimed",
        plan.plots
    ));
    let plot = Workload::post(
        &personal,
        write_call(PLOT_CODE, "plot"),
        vec![b"\"isError\":false", b"\"image/png\""],
    )?;
    let mut plain = PlainFigure::start(&plan.files.runtime)?;
    let figures = runtime.block_on(plain_figure::alternated(
        &endpoint,
        &plot,
        &mut plain,
        WARMUP_PLOTS,
        plan.plots,
    ))?;
    drop(plain);
    server.check_running()?;
    report("matplotlib", &figures.http);
    report(
        "matplotlib, plain Python, saved (alternated)",
        &figures.plain,
    );
    report("matplotlib, plain Python, drawn only", &figures.plain_drawn);
    let png_bytes = png_size(&figures.answer).context("no PNG in the matplotlib answer")?;
    let plain_png_bytes = figures.plain_png_bytes;
    let (plot, plain_plot, plain_drawn, answer) = (
        figures.http,
        figures.plain,
        figures.plain_drawn,
        figures.answer,
    );

    wait_for_quiet(plan.quiet);
    progress(&format!(
        "pandas table through HTTP: {} calls after {WARMUP_PLOTS} untimed",
        plan.plots
    ));
    let table = Workload::post(
        &personal,
        write_call(TABLE_CODE, "table"),
        vec![b"\"isError\":false", b"\"html\":\"<table"],
    )?;
    let (table, table_answer) =
        runtime.block_on(timed(&endpoint, &table, WARMUP_PLOTS, plan.plots))?;
    server.check_running()?;
    report("pandas table", &table);

    wait_for_quiet(plan.quiet);
    progress(&format!(
        "new session → first result through HTTP: {} sessions after {WARMUP_SESSIONS} untimed, {} ms apart",
        plan.sessions,
        plan.gap.as_millis()
    ));
    let new_session =
        runtime.block_on(new_sessions(&endpoint, &personal, plan.sessions, plan.gap))?;
    server.check_running()?;
    report("new session", &new_session);
    Ok(Http {
        new_session,
        warm,
        floor,
        warm_beside_floor,
        cell_floor,
        warm_beside_cell_floor,
        warm_secrets,
        warm_secrets_base,
        warm_secrets_legacy,
        warm_secrets_legacy_base,
        warm_legacy,
        warm_modern,
        progress: progress_stream,
        plot,
        plain_plot,
        plain_drawn,
        plain_png_bytes,
        png_bytes,
        plot_answer_bytes: answer.len(),
        table,
        table_answer_bytes: table_answer.len(),
        stages: vec![bare_stages, legacy, modern],
    })
}

/// The floors of a warm call on this machine, each alternated call by call with a warm `1+1`
/// through the service: the bench's bare HTTP server answering each POST through a Python
/// process that echoes a line on a pipe, then through one that runs the cell. What the service
/// adds to a warm call is the difference.
fn floor_pairs(
    runtime: &tokio::runtime::Runtime,
    plan: &Plan<'_>,
    endpoint: &Endpoint,
    personal: &str,
) -> Result<((Timings, Timings), (Timings, Timings))> {
    progress(&format!(
        "the machine's floors: {} calls through a bare HTTP server and a Python echo, then as \
         many with a Python running the cell, each alternated with warm 1+1",
        plan.calls
    ));
    let python = plan.files.runtime.join("bin").join("python3");
    let limit = Duration::from_secs(600);
    let mut floor = crate::server::spawn_floor(&plan.dir.join("floor.log"), limit, Some(&python))?;
    let floor_endpoint = Endpoint::new(floor.addr)?;
    wait_healthy(runtime, &mut floor, &floor_endpoint)?;
    let needles = || {
        vec![
            b"\"isError\":false".as_slice(),
            b"\"text\":\"2\"".as_slice(),
        ]
    };
    let echo = Workload::post("/echo/floor", write_call("1+1", "warm"), needles())?;
    let cell = Workload::post("/cell/floor", write_call("1+1", "warm"), needles())?;
    let warm = Workload::post(personal, write_call("1+1", "warm"), needles())?;
    let beside = |floor: &Workload| {
        let floor_side = (&floor_endpoint, floor);
        runtime.block_on(timed_across(
            floor_side,
            (endpoint, &warm),
            WARMUP_CALLS,
            plan.calls,
        ))
    };
    let timed = beside(&echo).and_then(|echoed| Ok((echoed, beside(&cell)?)));
    floor.check_running()?;
    floor.stop()?;
    timed
}

pub(super) fn report(name: &str, timings: &Timings) {
    progress(&format!(
        "  {name}: p50 {:.3} ms, p99 {:.3} ms",
        timings.percentile_ms(50.0).unwrap_or(0.0),
        timings.percentile_ms(99.0).unwrap_or(0.0)
    ));
}

/// `1+1` with a new session id each time, on one connection.
async fn new_sessions(
    endpoint: &Endpoint,
    personal: &str,
    count: usize,
    gap: Duration,
) -> Result<Timings> {
    let mut sender = load::connect(endpoint).await?;
    let mut timings = Timings::default();
    for i in 0..WARMUP_SESSIONS + count {
        tokio::time::sleep(gap).await;
        let workload = Workload::post(
            personal,
            write_call("1+1", &format!("new-{i}")),
            vec![b"\"isError\":false", b"\"fresh\":true", b"\"text\":\"2\""],
        )?;
        let started = Instant::now();
        load::call(&mut sender, endpoint, &workload)
            .await
            .with_context(|| format!("new session {i}"))?;
        if i >= WARMUP_SESSIONS {
            timings.push(started.elapsed());
        }
    }
    Ok(timings.sorted())
}

/// The decoded size of the first image in a `tools/call` answer (JSON, or one SSE event).
fn png_size(answer: &[u8]) -> Result<usize> {
    let text = std::str::from_utf8(answer).context("the answer is not UTF-8")?;
    let message: Value = serde_json::from_str(text).or_else(|_| {
        text.lines()
            .find_map(|line| line.strip_prefix("data:"))
            .map_or_else(
                || Err(anyhow::anyhow!("neither JSON nor an SSE event")),
                |data| Ok(serde_json::from_str(data.trim())?),
            )
    })?;
    let content = message["result"]["content"]
        .as_array()
        .context("no result.content")?;
    let image = content
        .iter()
        .find(|item| item["type"] == "image" && item["mimeType"] == "image/png")
        .context("no image/png item")?;
    let data = image["data"].as_str().context("the image has no data")?;
    base64_decoded_len(data)
}

/// The number of bytes a padded base64 text decodes to.
fn base64_decoded_len(data: &str) -> Result<usize> {
    let data = data.trim();
    if !data.len().is_multiple_of(4) {
        bail!("base64 of {} characters is not padded", data.len());
    }
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    Ok(data.len() / 4 * 3 - padding.min(2))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn base64_sizes() {
        assert_eq!(base64_decoded_len("").unwrap(), 0);
        assert_eq!(base64_decoded_len("YQ==").unwrap(), 1);
        assert_eq!(base64_decoded_len("YWI=").unwrap(), 2);
        assert_eq!(base64_decoded_len("YWJj").unwrap(), 3);
        assert!(base64_decoded_len("YWJ").is_err());
    }

    #[test]
    fn png_found_in_json_and_sse() {
        let json = r#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"x"},{"type":"image","mimeType":"image/png","data":"YWJj"}]}}"#;
        assert_eq!(png_size(json.as_bytes()).unwrap(), 3);
        let sse = format!("event: message\ndata: {json}\n\n");
        assert_eq!(png_size(sse.as_bytes()).unwrap(), 3);
        assert!(png_size(br#"{"result":{"content":[]}}"#).is_err());
    }

    #[test]
    fn calls_carry_code_and_session() {
        let body: Value = serde_json::from_str(&write_call(PLOT_CODE, "plot")).unwrap();
        assert_eq!(body["params"]["arguments"]["code"], PLOT_CODE);
        assert_eq!(body["params"]["arguments"]["session_id"], "plot");
    }
}
