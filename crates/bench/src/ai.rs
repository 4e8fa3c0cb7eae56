//! `--ai`: what `svc_ai` costs over asking the same stand-ins directly. The floor server plays
//! an OpenAI endpoint ([`crate::stand_in`]); the release server, sandbox on, is pointed at it.
//! Figures: a model call (whole answer) through toolgate against straight to the stand-in; the
//! time to the first streamed piece both ways; the same model call from code in a warm session
//! (its share over the same cell without it); and a search through a real SearXNG (Debian's
//! searx, `scripts/searxng-up.sh`) against asking that SearXNG directly.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::json;

use crate::load::{self, Endpoint, Workload};
use crate::sandbox::{Timings, timed, timed_pair};
use crate::server::{self, Toolgate};
use crate::{personal_path, progress, wait_healthy};

/// Timed calls per figure, after a tenth as many untimed; streamed ones (8 ms each) fewer.
const CALLS: usize = 1000;
const STREAMED: usize = 300;

fn tool_call(tool: &str, arguments: serde_json::Value, meta: Option<serde_json::Value>) -> String {
    let mut params = json!({"name": tool, "arguments": arguments});
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string()
}

/// Runs the figures and prints them.
pub fn run(binary: &Path, runtime_path: Option<&Path>) -> Result<()> {
    let files = crate::sandbox::locate(runtime_path, binary)?;
    let dir = crate::sandbox::scratch_dir()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut stand_in = server::spawn_floor(
        &dir.path().join("stand-in.log"),
        Duration::from_secs(900),
        None,
    )?;
    let stand_in_endpoint = Endpoint::new(stand_in.addr)?;
    wait_healthy(&rt, &mut stand_in, &stand_in_endpoint)?;
    let searx = Searx::start(dir.path(), &format!("http://{}", stand_in.addr));
    let path = |p: &Path| p.display().to_string();
    let mut settings = vec![
        ("--free-monthly-calls", "1000000000".to_owned()),
        ("--egress-allow-private", "127.0.0.1/32".to_owned()),
        ("--openai-base-url", format!("http://{}/v1", stand_in.addr)),
        ("--sandbox", "on".to_owned()),
        ("--sandbox-runtime", path(&files.runtime)),
        ("--sandbox-zygote", path(&files.zygote)),
        ("--sandbox-harden-lib", path(&files.harden_lib)),
        ("--sandbox-root", path(&dir.path().join("sessions"))),
    ];
    if let Ok(searx) = &searx {
        settings.push(("--searxng-url", searx.url.clone()));
    }
    let toolgate = Toolgate {
        binary: binary.to_owned(),
        data_dir: dir.path().join("data"),
        database_url: None,
        settings: settings
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    };
    let mut server = toolgate.serve(Some("warn"), &dir.path().join("serve.log"))?;
    let endpoint = Endpoint::new(server.addr)?;
    wait_healthy(&rt, &mut server, &endpoint)?;
    let personal = personal_path(&toolgate)?;
    let store = Workload::post(
        &personal,
        tool_call(
            "svc_write",
            json!({"secret_set": {"name": "OPENAI_API_KEY", "value": "sk-bench-0123456789"}}),
            None,
        ),
        vec![b"\"isError\":false"],
    )?;
    rt.block_on(timed(&endpoint, &store, 0, 1))?;

    let ask = json!({"model": "bench", "messages": [{"role": "user", "content": "hi"}]});
    let direct = Workload::post("/v1/chat/completions", ask.to_string(), vec![b"forty-two"])?;
    let through = Workload::post(
        &personal,
        tool_call(
            "svc_ai",
            json!({"model": "openai/bench", "prompt": "hi"}),
            None,
        ),
        vec![b"\"isError\":false", b"forty-two"],
    )?;
    progress(&format!(
        "a model call: {CALLS} straight to the stand-in, {CALLS} through toolgate"
    ));
    let (direct_times, _) = rt.block_on(timed(&stand_in_endpoint, &direct, CALLS / 10, CALLS))?;
    let (through_times, _) = rt.block_on(timed(&endpoint, &through, CALLS / 10, CALLS))?;
    // the path most clients take: a 2025-11-25 session with SSE accepted
    let session = rt.block_on(crate::paths::legacy_session(&endpoint, &personal))?;
    let through_legacy = Workload::post(
        &personal,
        tool_call(
            "svc_ai",
            json!({"model": "openai/bench", "prompt": "hi"}),
            None,
        ),
        vec![b"\"isError\":false", b"forty-two"],
    )?
    .with_headers(session.clone());
    let (legacy_times, _) = rt.block_on(timed(&endpoint, &through_legacy, CALLS / 10, CALLS))?;

    progress(&format!(
        "time to the first streamed piece: {STREAMED} each way"
    ));
    let mut streamed_ask = ask.clone();
    streamed_ask["stream"] = json!(true);
    let direct_stream = Workload::post("/v1/chat/completions", streamed_ask.to_string(), vec![])?;
    let streamed_call = || {
        Workload::post(
            &personal,
            tool_call(
                "svc_ai",
                json!({"model": "openai/bench", "prompt": "hi"}),
                Some(json!({"progressToken": "b"})),
            ),
            vec![],
        )
    };
    let through_stream = streamed_call()?.with_headers(session);
    let (direct_first, _) =
        rt.block_on(first_pieces(&stand_in_endpoint, &direct_stream, b"The "))?;
    let (through_first, _) = rt.block_on(first_pieces(
        &endpoint,
        &through_stream,
        b"notifications/progress",
    ))?;
    let (bare_first, _) = rt.block_on(first_pieces(
        &endpoint,
        &streamed_call()?,
        b"notifications/progress",
    ))?;

    progress(&format!(
        "from code in a warm session: {CALLS} cells with invoke_llm, alternated with 1+1"
    ));
    let code = |source: &str| {
        Workload::post(
            &personal,
            tool_call(
                "svc_write",
                json!({"code": source, "session_id": "bench"}),
                None,
            ),
            vec![b"\"isError\":false"],
        )
    };
    let with_llm = code("import toolgate\ntoolgate.invoke_llm('openai/bench', 'hi')")?;
    let plain = code("1+1")?;
    let (code_llm, code_plain) =
        rt.block_on(timed_pair(&endpoint, &with_llm, &plain, CALLS / 10, CALLS))?;

    let search = match &searx {
        Ok(searx) => Some(rt.block_on(search_figures(searx, &endpoint, &personal))?),
        Err(e) => {
            progress(&format!("no SearXNG, so no search figures: {e:#}"));
            None
        }
    };
    server.stop()?;
    stand_in.stop()?;
    print(&Figures {
        direct: direct_times,
        through: through_times,
        legacy: legacy_times,
        direct_first,
        through_first,
        bare_first,
        code_llm,
        code_plain,
        search,
    });
    Ok(())
}

/// The time to the first piece (and to the end) of `count` streamed answers, one at a time.
async fn first_pieces(
    endpoint: &Endpoint,
    workload: &Workload,
    first: &[u8],
) -> Result<(Timings, Timings)> {
    let mut sender = load::connect(endpoint).await?;
    let (mut firsts, mut wholes) = (Timings::default(), Timings::default());
    for i in 0..STREAMED + STREAMED / 10 {
        let (at_first, whole) = load::call_streamed(&mut sender, endpoint, workload, first)
            .await
            .with_context(|| format!("streamed call {i}"))?;
        if i >= STREAMED / 10 {
            firsts.push(at_first);
            wholes.push(whole);
        }
    }
    Ok((firsts.sorted(), wholes.sorted()))
}

async fn search_figures(
    searx: &Searx,
    endpoint: &Endpoint,
    personal: &str,
) -> Result<(Timings, Timings)> {
    progress(&format!(
        "a search: {} straight to SearXNG, {} through toolgate",
        CALLS / 5,
        CALLS / 5
    ));
    let searx_endpoint = Endpoint::new(searx.addr)?;
    let direct = Workload::get("/search?q=bench&format=json", vec![b"bench.example"])?;
    let through = Workload::post(
        personal,
        tool_call("svc_ai", json!({"search": "bench"}), None),
        vec![b"\"isError\":false", b"bench.example"],
    )?;
    // searx's own server closes each connection after its answer: a new one per request
    let mut direct_times = Timings::default();
    for i in 0..10 + CALLS / 5 {
        let started = std::time::Instant::now();
        let mut sender = load::connect(&searx_endpoint).await?;
        load::call(&mut sender, &searx_endpoint, &direct)
            .await
            .with_context(|| format!("search {i}"))?;
        if i >= 10 {
            direct_times.push(started.elapsed());
        }
    }
    let direct = direct_times.sorted();
    let (through, _) = timed(endpoint, &through, 10, CALLS / 5).await?;
    Ok((direct, through))
}

struct Figures {
    direct: Timings,
    through: Timings,
    legacy: Timings,
    direct_first: Timings,
    through_first: Timings,
    bare_first: Timings,
    code_llm: Timings,
    code_plain: Timings,
    search: Option<(Timings, Timings)>,
}

fn ms(times: &Timings, pct: f64) -> f64 {
    times.percentile_ms(pct).unwrap_or(f64::NAN)
}

fn print(f: &Figures) {
    println!("toolgate-bench --ai: svc_ai against the same stand-ins asked directly\n");
    println!(
        "{:<58} {:>6} {:>8} {:>8}",
        "figure", "n", "p50 ms", "p99 ms"
    );
    let mut rows = vec![
        (
            "model call, straight to the stand-in (keep-alive)",
            &f.direct,
        ),
        ("model call through svc_ai, bare POST (metered)", &f.through),
        (
            "model call through svc_ai, legacy session + SSE accepted",
            &f.legacy,
        ),
        (
            "first streamed piece, straight to the stand-in",
            &f.direct_first,
        ),
        (
            "first progress notification through svc_ai (legacy+SSE)",
            &f.through_first,
        ),
        (
            "first progress notification through svc_ai (bare POST)",
            &f.bare_first,
        ),
        (
            "cell calling toolgate.invoke_llm, warm session",
            &f.code_llm,
        ),
        ("cell 1+1 alternated with it", &f.code_plain),
    ];
    if let Some((direct, through)) = &f.search {
        rows.push(("search, straight to SearXNG (a connection each)", direct));
        rows.push(("search through svc_ai (SearXNG)", through));
    }
    for (name, times) in rows {
        println!(
            "{name:<58} {:>6} {:>8.3} {:>8.3}",
            times.len(),
            ms(times, 50.0),
            ms(times, 99.0)
        );
    }
    let added = |a: &Timings, b: &Timings, pct| ms(a, pct) - ms(b, pct);
    println!(
        "\nadded by toolgate: model call p50 {:+.3} ms, p99 {:+.3} ms bare, p50 {:+.3} ms, p99 {:+.3} ms in a legacy session (goal ≤ 1 ms); first piece p50 {:+.3} ms legacy, {:+.3} ms bare (goal ≤ 1 ms)",
        added(&f.through, &f.direct, 50.0),
        added(&f.through, &f.direct, 99.0),
        added(&f.legacy, &f.direct, 50.0),
        added(&f.legacy, &f.direct, 99.0),
        added(&f.through_first, &f.direct_first, 50.0),
        added(&f.bare_first, &f.direct_first, 50.0),
    );
    println!(
        "from code: the cell's invoke_llm p50 {:+.3} ms over 1+1, of which the model itself {:.3} ms: the upcall path adds {:+.3} ms",
        added(&f.code_llm, &f.code_plain, 50.0),
        ms(&f.direct, 50.0),
        added(&f.code_llm, &f.code_plain, 50.0) - ms(&f.direct, 50.0),
    );
    if let Some((direct, through)) = &f.search {
        println!(
            "search: p50 {:+.3} ms over asking SearXNG directly",
            added(through, direct, 50.0)
        );
    }
}

/// A real searx from `scripts/searxng-up.sh`, stopped when dropped.
struct Searx {
    dir: std::path::PathBuf,
    url: String,
    addr: std::net::SocketAddr,
}

impl Searx {
    fn start(scratch: &Path, upstream: &str) -> Result<Self> {
        let script = crate::sandbox::in_checkout("scripts/searxng-up.sh")
            .context("no scripts/searxng-up.sh")?;
        let dir = scratch.join("searx");
        let out = std::process::Command::new(script)
            .arg(&dir)
            .arg(upstream)
            .output()?;
        if !out.status.success() {
            anyhow::bail!(
                "searx did not start: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let url = String::from_utf8(out.stdout)?.trim().to_owned();
        let addr = url
            .trim_start_matches("http://")
            .parse()
            .context("searx's address")?;
        Ok(Self { dir, url, addr })
    }
}

impl Drop for Searx {
    fn drop(&mut self) {
        if let Some(script) = crate::sandbox::in_checkout("scripts/searxng-down.sh") {
            let _ = std::process::Command::new(script).arg(&self.dir).status();
        }
    }
}
