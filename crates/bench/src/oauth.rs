//! `--oauth`: what a `tools/call` on `/mcp` with an OAuth access token costs over the same call
//! on the personal URL. Signs in like an owner, registers a client, consents, exchanges the code
//! (PKCE S256) for a token, then alternates the two calls on one keep-alive connection.

use std::path::Path;

use anyhow::{Context, Result, bail};
use base64::Engine;
use http::{HeaderValue, StatusCode, header};
use sha2::{Digest, Sha256};

use crate::load::{Endpoint, Workload};
use crate::paths::legacy_session_with;
use crate::progress;
use crate::sandbox::{Timings, timed_pair};
use crate::server::Toolgate;

/// Timed calls per path, after a tenth as many untimed ones.
const CALLS: usize = 3000;
const CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"svc_read","arguments":{"billing":true}}}"#;
const REDIRECT: &str = "http://127.0.0.1:9/callback";

/// Runs the figure and prints it.
pub fn run(binary: &Path) -> Result<()> {
    let figures = crate::dashboard::with_plain_server(
        binary,
        "oauth",
        "1000000000",
        |toolgate, endpoint| Box::pin(measure(toolgate, endpoint)),
    )?;
    let p = |t: &Timings, pct| t.percentile_ms(pct).unwrap_or(f64::NAN);
    println!("toolgate-bench --oauth: svc_read billing, alternated call by call, one connection\n");
    println!("{:<52} {:>6} {:>8} {:>8}", "path", "n", "p50 ms", "p99 ms");
    for (label, (token, key)) in [
        ("bare POST", &figures.bare),
        ("legacy session + SSE", &figures.legacy),
    ] {
        for (name, times) in [("/mcp, Bearer access token", token), ("/u/<key>", key)] {
            println!(
                "{:<52} {:>6} {:>8.3} {:>8.3}",
                format!("{label}: {name}"),
                times.len(),
                p(times, 50.0),
                p(times, 99.0)
            );
        }
        println!(
            "  {label}: the token adds {:+.3} ms at the median (goal <= 0.05 ms)",
            p(token, 50.0) - p(key, 50.0)
        );
    }
    Ok(())
}

async fn measure(toolgate: &Toolgate, endpoint: &Endpoint) -> Result<Figures> {
    let cookie = crate::dashboard::sign_in(toolgate, endpoint).await?;
    let key_path = crate::dashboard::personal_path_of(endpoint, &cookie).await?;
    let token = access_token(endpoint, &cookie).await?;
    let bearer = bearer_value(&token)?;
    let with_token = Workload::post("/mcp", CALL, vec![b"\"isError\":false"])?
        .with_headers(vec![(header::AUTHORIZATION, bearer)]);
    let with_key = Workload::post(&key_path, CALL, vec![b"\"isError\":false"])?;
    progress(&format!("{CALLS} calls each way, alternated: bare POST"));
    let bare = timed_pair(endpoint, &with_token, &with_key, CALLS / 10, CALLS).await?;
    // the path real clients take: a 2025-11-25 session with SSE accepted, on each side
    progress(&format!(
        "{CALLS} calls each way, alternated: legacy sessions with SSE"
    ));
    let credential = vec![(header::AUTHORIZATION, bearer_value(&token)?)];
    let token_session = legacy_session_with(endpoint, "/mcp", credential).await?;
    let key_session = legacy_session_with(endpoint, &key_path, Vec::new()).await?;
    let with_token =
        Workload::post("/mcp", CALL, vec![b"\"isError\":false"])?.with_headers(token_session);
    let with_key =
        Workload::post(&key_path, CALL, vec![b"\"isError\":false"])?.with_headers(key_session);
    let legacy = timed_pair(endpoint, &with_token, &with_key, CALLS / 10, CALLS).await?;
    Ok(Figures { bare, legacy })
}

fn bearer_value(token: &str) -> Result<HeaderValue> {
    Ok(HeaderValue::from_str(&format!("Bearer {token}"))?)
}

/// Token and key timings, on the bare path and in legacy sessions.
struct Figures {
    bare: (Timings, Timings),
    legacy: (Timings, Timings),
}

/// Registers a client, consents as the signed-in owner, and exchanges the code.
async fn access_token(endpoint: &Endpoint, cookie: &HeaderValue) -> Result<String> {
    let registration = format!(r#"{{"redirect_uris":["{REDIRECT}"],"client_name":"bench"}}"#);
    let (status, _, body) = Workload::post("/oauth/register", registration, vec![])?
        .send_once(endpoint)
        .await?;
    if status != StatusCode::CREATED {
        bail!(
            "registration answered {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let client: serde_json::Value = serde_json::from_slice(&body)?;
    let client_id = client["client_id"]
        .as_str()
        .context("no client_id")?
        .to_owned();
    let verifier = "bench-verifier-0123456789-0123456789-0123456789";
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(Sha256::digest(verifier.as_bytes()));
    let params = serde_urlencoded::to_string([
        ("response_type", "code"),
        ("client_id", &client_id),
        ("redirect_uri", REDIRECT),
        ("code_challenge", &challenge),
        ("code_challenge_method", "S256"),
        ("state", "s"),
    ])?;
    let consent = Workload::get(&format!("/dashboard/oauth/authorize?{params}"), vec![])?
        .with_headers(vec![(header::COOKIE, cookie.clone())]);
    let (status, _, page) = consent.send_once(endpoint).await?;
    if status != StatusCode::OK {
        bail!("the consent page answered {status}");
    }
    let page = String::from_utf8_lossy(&page);
    let csrf = hidden(&page, "csrf").context("no csrf on the consent page")?;
    let form = format!("{params}&csrf={csrf}&decision=allow");
    let (status, headers, _) = Workload::post("/dashboard/oauth/authorize", form, vec![])?
        .with_headers(vec![
            (header::COOKIE, cookie.clone()),
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-www-form-urlencoded"),
            ),
        ])
        .send_once(endpoint)
        .await?;
    let location = headers
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .with_context(|| format!("consent answered {status} without a redirect"))?;
    let code = location
        .split(['?', '&'])
        .find_map(|pair| pair.strip_prefix("code="))
        .context("no code in the redirect")?
        .to_owned();
    let exchange = serde_urlencoded::to_string([
        ("grant_type", "authorization_code"),
        ("code", &code),
        ("redirect_uri", REDIRECT),
        ("client_id", &client_id),
        ("code_verifier", verifier),
    ])?;
    let (status, _, body) = Workload::post("/oauth/token", exchange, vec![])?
        .with_headers(vec![(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        )])
        .send_once(endpoint)
        .await?;
    if status != StatusCode::OK {
        bail!(
            "the token endpoint answered {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let answer: serde_json::Value = serde_json::from_slice(&body)?;
    Ok(answer["access_token"]
        .as_str()
        .context("no access_token")?
        .to_owned())
}

/// The value of the hidden input `name` in a page.
fn hidden(page: &str, name: &str) -> Option<String> {
    let marker = format!(r#"name="{name}" value=""#);
    let start = page.find(&marker)? + marker.len();
    Some(page[start..].split('"').next()?.to_owned())
}
