//! `--dashboard`: how fast the owner's pages answer. Signs in as a real owner would (asks for a
//! link, reads it from the outbox, confirms it), makes a few metered calls so the usage and
//! wallet pages have rows, then times each page on one keep-alive connection with the session
//! cookie: the time to the first byte of the page and to its end.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use http::{HeaderValue, StatusCode, header};

use crate::load::{self, Endpoint, Workload};
use crate::sandbox::Timings;
use crate::server::Toolgate;
use crate::{progress, wait_healthy};

/// Timed requests per page, after a tenth as many untimed ones.
const REQUESTS: usize = 2000;
const PAGES: [&str; 5] = [
    "/dashboard",
    "/dashboard/secrets",
    "/dashboard/usage",
    "/dashboard/wallet",
    "/dashboard/sessions",
];

/// Runs the figures and prints them.
pub fn run(binary: &Path) -> Result<()> {
    let rows = with_plain_server(binary, "dashboard", "20", |toolgate, endpoint| {
        Box::pin(measure(toolgate, endpoint))
    })?;
    println!("toolgate-bench --dashboard: signed-in pages, one keep-alive connection\n");
    println!(
        "{:<24} {:>6} {:>14} {:>14} {:>12}",
        "page", "n", "TTFB p50 ms", "TTFB p99 ms", "whole p50"
    );
    for (page, first, whole) in &rows {
        println!(
            "{page:<24} {:>6} {:>14.3} {:>14.3} {:>12.3}",
            first.len(),
            first.percentile_ms(50.0).unwrap_or(f64::NAN),
            first.percentile_ms(99.0).unwrap_or(f64::NAN),
            whole.percentile_ms(50.0).unwrap_or(f64::NAN),
        );
    }
    println!("\ngoal: time to first byte p50 <= 2 ms on every page");
    Ok(())
}

/// The future a [`with_plain_server`] body returns.
pub(crate) type Body<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T>> + 'a>>;

/// Starts the release server without the sandbox (and `free` free calls a month) in a
/// temporary directory, runs `body` against it on a current-thread runtime, and stops it.
pub(crate) fn with_plain_server<T>(
    binary: &Path,
    name: &str,
    free: &str,
    body: impl for<'a> FnOnce(&'a Toolgate, &'a Endpoint) -> Body<'a, T>,
) -> Result<T> {
    let dir = tempfile::Builder::new()
        .prefix(&format!("toolgate-bench-{name}-"))
        .tempdir()
        .context("cannot make a temporary directory")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let toolgate = Toolgate {
        binary: binary.to_owned(),
        data_dir: dir.path().join("data"),
        database_url: None,
        settings: vec![
            ("--sandbox".to_owned(), "off".to_owned()),
            ("--free-monthly-calls".to_owned(), free.to_owned()),
        ],
    };
    let mut server = toolgate.serve(Some("warn"), &dir.path().join("serve.log"))?;
    let endpoint = Endpoint::new(server.addr)?;
    wait_healthy(&runtime, &mut server, &endpoint)?;
    let result = runtime.block_on(body(&toolgate, &endpoint));
    server.stop()?;
    result
}

async fn measure(
    toolgate: &Toolgate,
    endpoint: &Endpoint,
) -> Result<Vec<(String, Timings, Timings)>> {
    let cookie = sign_in(toolgate, endpoint).await?;
    calls_for_history(toolgate, endpoint, &cookie).await?;
    let mut rows = Vec::new();
    for page in PAGES {
        progress(&format!("{page}: {REQUESTS} requests"));
        let workload = Workload::get(page, vec![b"</html>"])?
            .with_headers(vec![(header::COOKIE, cookie.clone())]);
        let mut sender = load::connect(endpoint).await?;
        for _ in 0..REQUESTS / 10 {
            load::call_streamed(&mut sender, endpoint, &workload, b"<!DOCTYPE html>").await?;
        }
        let (mut first, mut whole) = (Timings::default(), Timings::default());
        for _ in 0..REQUESTS {
            let (to_first, to_end) =
                load::call_streamed(&mut sender, endpoint, &workload, b"<!DOCTYPE html>").await?;
            first.push(to_first);
            whole.push(to_end);
        }
        rows.push((page.to_owned(), first.sorted(), whole.sorted()));
    }
    Ok(rows)
}

/// Asks for a link, reads it from the outbox, confirms it; returns the `Cookie` header value.
pub(crate) async fn sign_in(toolgate: &Toolgate, endpoint: &Endpoint) -> Result<HeaderValue> {
    let ask = Workload::post("/magic-link", r#"{"email":"owner@example.org"}"#, vec![])?;
    let (status, _, body) = ask.send_once(endpoint).await?;
    if status != StatusCode::ACCEPTED {
        bail!(
            "POST /magic-link answered {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let token = outbox_token(&toolgate.data_dir.join("outbox")).await?;
    let confirm = Workload::post(
        "/dashboard/sign-in/confirm",
        format!("token={token}"),
        vec![],
    )?
    .with_headers(vec![(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-www-form-urlencoded"),
    )]);
    let (status, headers, _) = confirm.send_once(endpoint).await?;
    if status != StatusCode::SEE_OTHER {
        bail!("confirming the link answered {status}");
    }
    let set = headers
        .get(header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .context("no session cookie")?;
    let pair = set.split(';').next().unwrap_or(set).to_owned();
    Ok(HeaderValue::from_str(&pair)?)
}

/// The token of the (only) link in the outbox, once the mail is written.
async fn outbox_token(dir: &Path) -> Result<String> {
    for _ in 0..100 {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                let text = text.replace("=\r\n", "").replace("=\n", "");
                if let Some(at) = text.find("token=") {
                    let token: String = text[at + 6..]
                        .chars()
                        .take_while(char::is_ascii_hexdigit)
                        .collect();
                    if token.len() == 64 {
                        return Ok(token);
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("no sign-in link arrived in {}", dir.display())
}

/// The `/u/<key>` path of the signed-in owner, read from the overview's revealed URL.
pub(crate) async fn personal_path_of(endpoint: &Endpoint, cookie: &HeaderValue) -> Result<String> {
    let overview =
        Workload::get("/dashboard", vec![])?.with_headers(vec![(header::COOKIE, cookie.clone())]);
    let (_, _, page) = overview.send_once(endpoint).await?;
    let page = String::from_utf8_lossy(&page);
    let marker = "id=\"personal-url-full\">";
    let start = page
        .find(marker)
        .context("the overview shows no personal URL")?
        + marker.len();
    let url = &page[start..];
    let url = &url[..url.find('<').context("unterminated URL")?];
    Ok(url[url.find("/u/").context("no /u/ in the URL")?..].to_owned())
}

/// 30 metered calls (20 free, 10 paid after a credit) with the URL the overview shows, so the
/// usage and wallet pages draw rows as an active account's would.
async fn calls_for_history(
    toolgate: &Toolgate,
    endpoint: &Endpoint,
    cookie: &HeaderValue,
) -> Result<()> {
    let overview =
        Workload::get("/dashboard", vec![])?.with_headers(vec![(header::COOKIE, cookie.clone())]);
    let (_, _, page) = overview.send_once(endpoint).await?;
    let page = String::from_utf8_lossy(&page);
    let marker = "id=\"personal-url-full\">";
    let start = page
        .find(marker)
        .context("the overview shows no personal URL")?
        + marker.len();
    let url = &page[start..];
    let url = &url[..url.find('<').context("unterminated URL")?];
    let path = &url[url.find("/u/").context("no /u/ in the URL")?..];
    toolgate.cli(&[
        "wallet",
        "credit",
        "--email",
        "owner@example.org",
        "--usd",
        "5.00",
    ])?;
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"svc_read","arguments":{"billing":true}}}"#;
    let workload = Workload::post(path, call, vec![b"\"isError\":false"])?;
    let mut sender = load::connect(endpoint).await?;
    for _ in 0..30 {
        load::call(&mut sender, endpoint, &workload).await?;
    }
    Ok(())
}
