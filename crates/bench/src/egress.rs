//! `toolgate-bench --egress`: what the sessions' network proxy adds. In this process: a site on
//! loopback, and one session's proxy gate (the same code a session's connections reach, here
//! listening on the host's loopback instead of inside a session's namespace), under a grant with
//! no byte or rate limit. Each figure is measured against the same request made directly, in the
//! same run, alternating:
//!
//! 1. A small GET on a new connection (as `requests.get` without a session does): direct, as a
//!    plain proxied request (`GET http://…`), and through a `CONNECT` tunnel. p50 and p99, and
//!    the p50 the proxy adds.
//! 2. One large download (256 MiB), direct and through a `CONNECT` tunnel: MiB/s.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use toolgate_egress::EgressPolicy;
use toolgate_egress_proxy::{EgressGrant, EgressLimits, EgressProxy, ProxySettings};

use crate::progress;
use crate::sandbox::Timings;

/// Small GETs timed per path.
const GETS: usize = 2000;
/// The large download.
const LARGE: usize = 256 << 20;

/// Measures and prints the figures.
pub fn run() -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(measure())
}

async fn measure() -> Result<()> {
    let site = site().await?;
    let policy = EgressPolicy::new(&["127.0.0.1".to_owned()]).map_err(anyhow::Error::msg)?;
    let proxy = EgressProxy::new(ProxySettings {
        policy: Arc::new(policy),
        extra_roots: Vec::new(),
        index: None,
    });
    let mut gate = proxy.gate();
    gate.serve(toolgate_egress_proxy::listen_on_loopback()?)?;
    let proxy_url = gate.env()["HTTP_PROXY"].clone();
    let proxy_addr: SocketAddr = proxy_url.trim_start_matches("http://").parse()?;
    let grant = EgressGrant {
        limits: EgressLimits {
            max_connections: 64,
            max_bytes: 0,
            bytes_per_second: 0,
        },
        ..EgressGrant::default()
    };
    progress(&format!("small GETs: {GETS} per path, alternating"));
    let (mut direct, mut plain, mut tunnel) =
        (Timings::default(), Timings::default(), Timings::default());
    for i in 0..GETS + 100 {
        // a run's records are capped: a fresh run every so often, as calls are
        let run = gate.begin(Some(grant.clone()));
        let d = get_direct(site).await?;
        let p = get_plain(proxy_addr, site).await?;
        let t = get_tunnel(proxy_addr, site).await?;
        drop(run);
        if i >= 100 {
            direct.push(d);
            plain.push(p);
            tunnel.push(t);
        }
    }
    let (direct, plain, tunnel) = (direct.sorted(), plain.sorted(), tunnel.sorted());
    let p = |t: &Timings, pct| t.percentile_ms(pct).unwrap_or(f64::NAN);
    println!("egress proxy, small GET on a new connection ({GETS} each, loopback):");
    for (name, t) in [
        ("direct", &direct),
        ("proxied GET http://", &plain),
        ("CONNECT tunnel", &tunnel),
    ] {
        println!(
            "  {name:<20} p50 {:.3} ms  p99 {:.3} ms  (added at p50: {:+.3} ms)",
            p(t, 50.0),
            p(t, 99.0),
            p(t, 50.0) - p(&direct, 50.0)
        );
    }
    progress("large download: 256 MiB, direct and through a tunnel, three times each");
    let mut best_direct = 0.0f64;
    let mut best_tunnel = 0.0f64;
    for _ in 0..3 {
        let _run = gate.begin(Some(grant.clone()));
        best_direct = best_direct.max(download(site, None).await?);
        best_tunnel = best_tunnel.max(download(site, Some(proxy_addr)).await?);
    }
    println!(
        "egress proxy, one 256 MiB download: direct {best_direct:.0} MiB/s, through a tunnel \
         {best_tunnel:.0} MiB/s ({:.0} % of direct; best of three)",
        best_tunnel / best_direct * 100.0
    );
    Ok(())
}

/// A loopback site: `/small` 13 bytes, `/large` [`LARGE`] bytes; one request per connection.
async fn site() -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let large: Arc<Vec<u8>> = Arc::new(vec![b'x'; LARGE]);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let large = Arc::clone(&large);
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let body: &[u8] = if head.starts_with(b"GET /large") {
                    &large
                } else {
                    b"hello, proxy!"
                };
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.write_all(body).await;
            });
        }
    });
    Ok(addr)
}

/// Reads an answer to its end (the server closes); the bytes read.
async fn read_all(stream: &mut TcpStream) -> Result<usize> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0;
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(total);
        }
        total += n;
    }
}

async fn get_direct(site: SocketAddr) -> Result<Duration> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(site).await?;
    stream.set_nodelay(true)?;
    stream
        .write_all(format!("GET /small HTTP/1.1\r\nHost: {site}\r\n\r\n").as_bytes())
        .await?;
    check(read_all(&mut stream).await?, 13)?;
    Ok(started.elapsed())
}

async fn get_plain(proxy: SocketAddr, site: SocketAddr) -> Result<Duration> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(proxy).await?;
    stream.set_nodelay(true)?;
    stream
        .write_all(format!("GET http://{site}/small HTTP/1.1\r\nHost: {site}\r\n\r\n").as_bytes())
        .await?;
    check(read_all(&mut stream).await?, 13)?;
    Ok(started.elapsed())
}

/// Opens a tunnel to `site` through `proxy`.
async fn tunnel(proxy: SocketAddr, site: SocketAddr) -> Result<TcpStream> {
    let mut stream = TcpStream::connect(proxy).await?;
    stream.set_nodelay(true)?;
    stream
        .write_all(format!("CONNECT {site} HTTP/1.1\r\nHost: {site}\r\n\r\n").as_bytes())
        .await?;
    let mut answer = [0u8; 39];
    stream
        .read_exact(&mut answer)
        .await
        .context("the proxy's answer to CONNECT")?;
    if !answer.starts_with(b"HTTP/1.1 200") {
        bail!("CONNECT refused: {}", String::from_utf8_lossy(&answer));
    }
    Ok(stream)
}

async fn get_tunnel(proxy: SocketAddr, site: SocketAddr) -> Result<Duration> {
    let started = Instant::now();
    let mut stream = tunnel(proxy, site).await?;
    stream
        .write_all(format!("GET /small HTTP/1.1\r\nHost: {site}\r\n\r\n").as_bytes())
        .await?;
    check(read_all(&mut stream).await?, 13)?;
    Ok(started.elapsed())
}

/// MiB/s of one download of `/large`, through `proxy` when given.
async fn download(site: SocketAddr, proxy: Option<SocketAddr>) -> Result<f64> {
    let started = Instant::now();
    let mut stream = match proxy {
        Some(proxy) => tunnel(proxy, site).await?,
        None => TcpStream::connect(site).await?,
    };
    stream
        .write_all(format!("GET /large HTTP/1.1\r\nHost: {site}\r\n\r\n").as_bytes())
        .await?;
    let read = read_all(&mut stream).await?;
    check(read, LARGE)?;
    Ok(read as f64 / (1 << 20) as f64 / started.elapsed().as_secs_f64())
}

/// An answer must carry at least its body.
fn check(read: usize, body: usize) -> Result<()> {
    if read < body {
        bail!("an answer of {read} bytes, short of its {body}-byte body");
    }
    Ok(())
}
