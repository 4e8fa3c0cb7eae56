//! The load generator: N simulated clients, each one HTTP/1.1 keep-alive connection sending
//! requests back to back, with latencies kept for percentiles.
//!
//! Everything that can be prepared before the clock starts is: the body is a shared `Bytes`, the
//! URI and header values are parsed once, and a client owns its connection outright (no pool, no
//! locks), so the generator spends its CPU on little more than the socket.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::proc;

/// A request that outlives this is counted as an error and its connection dropped, so a stuck
/// server cannot stretch the run beyond its bound.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// At most this many characters of a failed response are kept to describe it.
const SNIPPET: usize = 160;

pub type Sender = SendRequest<Full<Bytes>>;

/// Where the server listens.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub addr: SocketAddr,
    /// `Host` header: hyper's bare connection does not add one, and the server checks it.
    pub host: HeaderValue,
}

impl Endpoint {
    pub fn new(addr: SocketAddr) -> Result<Self> {
        let host = HeaderValue::from_str(&addr.to_string()).context("host header")?;
        Ok(Self { addr, host })
    }
}

/// One kind of request and what a good answer to it contains.
#[derive(Debug)]
pub struct Workload {
    method: Method,
    uri: Uri,
    body: Bytes,
    /// Every needle must occur in a 200 response's body for it to count as a success.
    needles: Vec<&'static [u8]>,
    /// Headers of the client path measured (`Accept`, session, protocol version, …).
    headers: Vec<(header::HeaderName, HeaderValue)>,
}

impl Workload {
    pub fn post(path: &str, body: impl Into<Bytes>, needles: Vec<&'static [u8]>) -> Result<Self> {
        let uri: Uri = path
            .parse()
            .with_context(|| format!("bad request path {path:?}"))?;
        Ok(Self {
            method: Method::POST,
            uri,
            body: body.into(),
            needles,
            headers: Vec::new(),
        })
    }

    /// A GET of `path` (no body).
    pub fn get(path: &str, needles: Vec<&'static [u8]>) -> Result<Self> {
        Ok(Self {
            method: Method::GET,
            ..Self::post(path, Bytes::new(), needles)?
        })
    }

    /// The same request with these headers (an `Accept` here replaces the default one).
    pub fn with_headers(mut self, headers: Vec<(header::HeaderName, HeaderValue)>) -> Self {
        self.headers = headers;
        self
    }

    pub(crate) fn request(&self, endpoint: &Endpoint) -> Result<Request<Full<Bytes>>> {
        let mut request = Request::builder()
            .method(self.method.clone())
            .uri(self.uri.clone())
            .header(header::HOST, endpoint.host.clone())
            .header(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )
            .body(Full::new(self.body.clone()))?;
        let headers = request.headers_mut();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
        Ok(request)
    }

    /// Sends this request once on a fresh connection: the status, the response's headers and
    /// its body, for setting up a client path (opening a session) and for probes.
    pub async fn send_once(
        &self,
        endpoint: &Endpoint,
    ) -> Result<(StatusCode, http::HeaderMap, Bytes)> {
        let mut sender = connect(endpoint).await?;
        let request = self.request(endpoint)?;
        let send = async {
            sender.ready().await?;
            let response = sender.send_request(request).await?;
            let (parts, body) = response.into_parts();
            let body = body.collect().await?.to_bytes();
            Ok::<_, hyper::Error>((parts.status, parts.headers, body))
        };
        Ok(tokio::time::timeout(REQUEST_TIMEOUT, send)
            .await
            .context("request timed out")??)
    }
}

/// The figures of one load phase.
#[derive(Debug)]
pub struct Outcome {
    pub clients: usize,
    /// Successful requests started after the warm-up.
    pub measured: u64,
    /// Requests answered (any status) over the whole phase, warm-up included.
    pub answered: u64,
    /// From the end of the warm-up to the moment the last client finished.
    pub elapsed: Duration,
    /// Latencies of the measured requests, in nanoseconds, sorted.
    pub latencies: Vec<u64>,
    /// Failures over the whole phase, warm-up included: any failure is worth seeing.
    pub errors: BTreeMap<String, u64>,
    /// CPU time over the measured window, as a share of one core (1.0 = one core busy).
    pub server_cores: f64,
    pub bench_cores: f64,
    /// Everything else running on the machine meanwhile: other programs' load skews the figures.
    pub other_cores: f64,
}

impl Outcome {
    pub fn per_second(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.measured as f64 / secs
        } else {
            0.0
        }
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Nearest-rank percentile in milliseconds; `None` when nothing was measured.
    pub fn percentile_ms(&self, pct: f64) -> Option<f64> {
        let n = self.latencies.len();
        if n == 0 {
            return None;
        }
        let rank = ((pct / 100.0) * n as f64).ceil() as usize;
        let index = rank.clamp(1, n) - 1;
        self.latencies.get(index).map(|ns| *ns as f64 / 1e6)
    }
}

#[derive(Debug, Default)]
struct ClientResult {
    latencies: Vec<u64>,
    answered: u64,
    errors: BTreeMap<String, u64>,
    finished: Option<Instant>,
}

impl ClientResult {
    fn fail(&mut self, message: String) {
        *self.errors.entry(message).or_default() += 1;
    }
}

/// Opens one keep-alive connection with Nagle off (small requests must leave at once).
pub async fn connect(endpoint: &Endpoint) -> Result<Sender> {
    let stream = TcpStream::connect(endpoint.addr)
        .await
        .with_context(|| format!("connect {}", endpoint.addr))?;
    stream.set_nodelay(true)?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    // The connection future drives the socket; it ends when the sender is dropped or the peer closes.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// A failure, and whether the connection is still usable after it.
struct Failure {
    message: String,
    reconnect: bool,
}

fn snippet(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .chars()
        .take(SNIPPET)
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || haystack
            .windows(needle.len())
            .any(|window| window == needle)
}

async fn exchange(
    sender: &mut Sender,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, Bytes), Failure> {
    let io = |err: hyper::Error| Failure {
        message: format!("transport: {err}"),
        reconnect: true,
    };
    let work = async {
        sender.ready().await.map_err(io)?;
        let response = sender.send_request(request).await.map_err(io)?;
        let status = response.status();
        let body = response.into_body().collect().await.map_err(io)?.to_bytes();
        Ok((status, body))
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, work).await {
        Ok(result) => result,
        Err(_) => Err(Failure {
            message: format!("no response within {REQUEST_TIMEOUT:?}"),
            reconnect: true,
        }),
    }
}

async fn one_request(
    sender: &mut Sender,
    endpoint: &Endpoint,
    workload: &Workload,
) -> Result<Bytes, Failure> {
    let request = workload.request(endpoint).map_err(|err| Failure {
        message: format!("cannot build request: {err}"),
        reconnect: false,
    })?;
    let (status, body) = exchange(sender, request).await?;
    if status != StatusCode::OK {
        return Err(Failure {
            message: format!("HTTP {status}: {}", snippet(&body)),
            reconnect: false,
        });
    }
    if let Some(missing) = workload
        .needles
        .iter()
        .find(|needle| !contains(&body, needle))
    {
        let message = format!(
            "200 without {}: {}",
            String::from_utf8_lossy(missing),
            snippet(&body)
        );
        return Err(Failure {
            message,
            reconnect: false,
        });
    }
    Ok(body)
}

/// One request of `workload` on an open connection: the body of a 200 that holds every needle.
/// Sends `workload` on `sender` and reads its answer as it streams: the time until `first`
/// appears in the body, and the time until the body ends.
pub async fn call_streamed(
    sender: &mut Sender,
    endpoint: &Endpoint,
    workload: &Workload,
    first: &[u8],
) -> Result<(Duration, Duration)> {
    let started = Instant::now();
    sender.ready().await?;
    let response = sender.send_request(workload.request(endpoint)?).await?;
    if response.status() != StatusCode::OK {
        anyhow::bail!("status {}", response.status());
    }
    let mut body = response.into_body();
    let mut seen = Vec::new();
    let mut first_at = None;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            seen.extend_from_slice(&data);
            if first_at.is_none() && seen.windows(first.len()).any(|w| w == first) {
                first_at = Some(started.elapsed());
            }
        }
    }
    let whole = started.elapsed();
    let first_at = first_at
        .with_context(|| format!("the answer never held the first piece: {}", snippet(&seen)))?;
    Ok((first_at, whole))
}

pub async fn call(sender: &mut Sender, endpoint: &Endpoint, workload: &Workload) -> Result<Bytes> {
    one_request(sender, endpoint, workload)
        .await
        .map_err(|failure| anyhow::anyhow!(failure.message))
}

async fn client(
    endpoint: Endpoint,
    workload: Arc<Workload>,
    warm_until: Instant,
    end: Instant,
) -> ClientResult {
    let mut result = ClientResult::default();
    let mut sender: Option<Sender> = None;
    loop {
        let started = Instant::now();
        if started >= end {
            break;
        }
        let live = match sender.as_mut() {
            Some(live) => live,
            None => match connect(&endpoint).await {
                Ok(fresh) => sender.insert(fresh),
                Err(err) => {
                    result.fail(format!("{err:#}"));
                    // Back off a little so a refused connection does not become a busy loop.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let answer = one_request(live, &endpoint, &workload).await.map(drop);
        // A failure that keeps the connection came with a response (a bad status or body).
        if answer
            .as_ref()
            .map_or_else(|failure| !failure.reconnect, |()| true)
        {
            result.answered += 1;
        }
        match answer {
            Ok(()) if started >= warm_until => {
                result
                    .latencies
                    .push(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
            }
            Ok(()) => {}
            Err(failure) => {
                result.fail(failure.message);
                if failure.reconnect {
                    sender = None;
                }
            }
        }
    }
    result.finished = Some(Instant::now());
    result
}

/// CPU seconds of the servers, of this process and of the whole machine, read together.
fn cpu_sample(server_pids: &[u32]) -> Result<(f64, f64, f64)> {
    let mut servers = 0.0;
    for pid in server_pids {
        servers += proc::cpu_seconds(&pid.to_string())?;
    }
    Ok((
        servers,
        proc::cpu_seconds("self")?,
        proc::machine_busy_seconds()?,
    ))
}

/// Runs `clients` clients for `warmup + measure`, counting only requests started after the warm-up;
/// client `n` talks to `endpoints[n % endpoints.len()]` (several front ends share the clients).
pub async fn run(
    endpoints: &[Endpoint],
    workloads: &[Arc<Workload>],
    clients: usize,
    warmup: Duration,
    measure: Duration,
    server_pids: &[u32],
) -> Result<Outcome> {
    let start = Instant::now();
    let warm_until = start + warmup;
    let end = warm_until + measure;
    if workloads.is_empty() {
        bail!("no workload to run");
    }
    // client n: endpoint n and workload n, each list taken in turn
    let handles: Vec<_> = endpoints
        .iter()
        .cycle()
        .zip(workloads.iter().cycle())
        .take(clients)
        .map(|(endpoint, workload)| {
            tokio::spawn(client(endpoint.clone(), workload.clone(), warm_until, end))
        })
        .collect();
    tokio::time::sleep_until(warm_until.into()).await;
    let cpu_before = cpu_sample(server_pids)?;
    let mut latencies = Vec::new();
    let mut answered = 0;
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut last = warm_until;
    for handle in handles {
        let result = handle.await.context("a load client panicked")?;
        latencies.extend(result.latencies);
        answered += result.answered;
        for (message, count) in result.errors {
            *errors.entry(message).or_default() += count;
        }
        last = last.max(result.finished.unwrap_or(last));
    }
    let cpu_after = cpu_sample(server_pids)?;
    let elapsed = last.saturating_duration_since(warm_until);
    let wall = elapsed.as_secs_f64().max(1e-9);
    latencies.sort_unstable();
    Ok(Outcome {
        clients,
        measured: latencies.len() as u64,
        answered,
        elapsed,
        latencies,
        errors,
        server_cores: (cpu_after.0 - cpu_before.0) / wall,
        bench_cores: (cpu_after.1 - cpu_before.1) / wall,
        other_cores: ((cpu_after.2 - cpu_before.2)
            - (cpu_after.0 - cpu_before.0)
            - (cpu_after.1 - cpu_before.1))
            .max(0.0)
            / wall,
    })
}

/// One request, for probing: status, content type and body.
pub async fn probe(
    endpoint: &Endpoint,
    method: Method,
    path: &str,
    body: Bytes,
) -> Result<(StatusCode, String, Bytes)> {
    let mut sender = connect(endpoint).await?;
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, endpoint.host.clone())
        .header(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )
        .header(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        )
        .body(Full::new(body))?;
    let send = async {
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let kind = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let body = response.into_body().collect().await?.to_bytes();
        Ok::<_, hyper::Error>((status, kind, body))
    };
    Ok(tokio::time::timeout(REQUEST_TIMEOUT, send)
        .await
        .context("probe timed out")??)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let outcome = Outcome {
            clients: 1,
            measured: 100,
            answered: 100,
            elapsed: Duration::from_secs(1),
            latencies: (1..=100).map(|ms| ms * 1_000_000).collect(),
            errors: BTreeMap::new(),
            server_cores: 0.0,
            bench_cores: 0.0,
            other_cores: 0.0,
        };
        assert_eq!(outcome.percentile_ms(50.0), Some(50.0));
        assert_eq!(outcome.percentile_ms(99.0), Some(99.0));
        assert_eq!(outcome.percentile_ms(100.0), Some(100.0));
        assert!((outcome.per_second() - 100.0).abs() < 1e-9);
    }

    #[test]
    fn needles_are_found_anywhere() {
        assert!(contains(br#"{"name":"svc_read"}"#, b"\"svc_read\""));
        assert!(!contains(br#"{"name":"svc_write"}"#, b"\"svc_read\""));
        assert!(contains(b"abc", b""));
    }
}
