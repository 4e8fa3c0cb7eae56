//! One session's gate: its listener, accepted on by the server, and the grant of the run it is
//! in (if any). Every connection is served by a task of its own, which ends with the run.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use toolgate_sandbox::{Destination, EgressGrant};

use crate::ca::SessionCa;
use crate::connect::{self, ConnectError};
use crate::head::{self, Head};
use crate::index::{self, INDEX_HOST};
use crate::intercept;
use crate::placeholder;
use crate::pump;
use crate::run::{Run, Slot};
use crate::traffic::{Traffic, refuse, refuse_recorded};
use crate::{SESSION_PROXY_PORT, Shared};

/// A session's way out. Dropping it stops accepting and ends every connection.
#[derive(Debug)]
pub struct SessionGate {
    shared: Arc<Shared>,
    state: Arc<GateState>,
    stop: CancellationToken,
    address: Option<SocketAddr>,
    /// The session's CA, for runs with bound secrets; `None` only if it could not be made.
    ca: Option<Arc<SessionCa>>,
}

#[derive(Debug, Default)]
struct GateState {
    run: Mutex<Option<Arc<Run>>>,
}

/// The proxy's side of one run: ends the run's connections when finished or dropped.
#[derive(Debug)]
pub struct RunEgress {
    state: Arc<GateState>,
    run: Arc<Run>,
}

impl SessionGate {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let ca = match SessionCa::new() {
            Ok(ca) => Some(Arc::new(ca)),
            Err(e) => {
                tracing::error!(error = %e, "cannot make a session's egress CA");
                None
            }
        };
        Self {
            shared,
            state: Arc::default(),
            stop: CancellationToken::new(),
            address: None,
            ca,
        }
    }

    /// The session's CA certificate (PEM), trusted inside the session only; its key never
    /// leaves this process.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca.as_deref().map(SessionCa::pem)
    }

    /// Accepts on `listener` (see [`crate::listen_in_netns`]) until the gate is dropped.
    /// Must be called within a tokio runtime.
    pub fn serve(&mut self, listener: std::net::TcpListener) -> std::io::Result<()> {
        let listener = TcpListener::from_std(listener)?;
        self.address = listener.local_addr().ok();
        let (shared, state, stop) = (
            Arc::clone(&self.shared),
            Arc::clone(&self.state),
            self.stop.clone(),
        );
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = stop.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((stream, _)) = accepted else {
                    // out of descriptors, say: the session's code gets a refused connection
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                };
                let run = state.current();
                let shared = Arc::clone(&shared);
                let stop = stop.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        () = stop.cancelled() => {}
                        () = serve_connection(stream, run, &shared) => {}
                    }
                });
            }
        });
        Ok(())
    }

    /// The variables that send a session's HTTP clients through the proxy: `HTTP_PROXY` and
    /// `HTTPS_PROXY` (upper and lower case, as clients read either), an empty `NO_PROXY`,
    /// `TOOLGATE_EGRESS_CA`, the session's CA (PEM), which the runtime adds to the session's
    /// CA bundle and then drops from the environment, and with a package index,
    /// `PIP_INDEX_URL` and `PIP_TRUSTED_HOST` pointing pip at it.
    pub fn env(&self) -> BTreeMap<String, String> {
        let address = self.address.map_or_else(
            || format!("127.0.0.1:{SESSION_PROXY_PORT}"),
            |a| a.to_string(),
        );
        let url = format!("http://{address}");
        let mut env = BTreeMap::new();
        for name in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "http_proxy",
            "https_proxy",
            "ALL_PROXY",
        ] {
            env.insert(name.to_owned(), url.clone());
        }
        env.insert("NO_PROXY".to_owned(), String::new());
        env.insert("no_proxy".to_owned(), String::new());
        if let Some(pem) = self.ca_pem() {
            env.insert("TOOLGATE_EGRESS_CA".to_owned(), pem.to_owned());
        }
        if self.shared.index.is_some() {
            // plain HTTP to a name only the proxy answers: the hop never leaves the host
            env.insert(
                "PIP_INDEX_URL".to_owned(),
                format!("http://{INDEX_HOST}/simple/"),
            );
            env.insert("PIP_TRUSTED_HOST".to_owned(), INDEX_HOST.to_owned());
        }
        env
    }

    /// Opens the session's network for a run under `grant` (`None`: every connection of the
    /// run is refused). A run already open is ended first.
    pub fn begin(&self, grant: Option<EgressGrant>) -> Option<RunEgress> {
        let grant = grant?;
        let run = Arc::new(Run::new(grant, self.ca.clone()));
        let previous = self.state.set(Some(Arc::clone(&run)));
        if let Some(previous) = previous {
            previous.ended.cancel();
        }
        Some(RunEgress {
            state: Arc::clone(&self.state),
            run,
        })
    }
}

impl Drop for SessionGate {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(run) = self.state.set(None) {
            run.ended.cancel();
        }
    }
}

impl GateState {
    fn current(&self) -> Option<Arc<Run>> {
        self.run
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, run: Option<Arc<Run>>) -> Option<Arc<Run>> {
        std::mem::replace(
            &mut *self.run.lock().unwrap_or_else(PoisonError::into_inner),
            run,
        )
    }
}

impl RunEgress {
    /// Ends the run's network: no new connection, every open one closed; what it reached.
    pub fn finish(self) -> Vec<Destination> {
        self.end();
        std::mem::take(&mut *self.run.lock_records())
            .iter()
            .map(|traffic| traffic.destination())
            .collect()
    }

    /// How many connections the run has recorded so far (tests wait for a connection's end).
    #[cfg(test)]
    pub(crate) fn recorded(&self) -> usize {
        self.run.lock_records().len()
    }

    fn end(&self) {
        self.run.ended.cancel();
        let mut current = self
            .state
            .run
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if current
            .as_ref()
            .is_some_and(|run| Arc::ptr_eq(run, &self.run))
        {
            *current = None;
        }
    }
}

impl Drop for RunEgress {
    fn drop(&mut self) {
        self.end();
    }
}

async fn serve_connection(mut client: TcpStream, run: Option<Arc<Run>>, shared: &Shared) {
    let _ = client.set_nodelay(true);
    let Some(run) = run else {
        refuse(
            &mut client,
            "403 Forbidden",
            "no call of the service is running in this session; the network is open only \
             while a call runs",
        )
        .await;
        return;
    };
    tokio::select! {
        () = run.ended.cancelled() => {}
        () = serve_in_run(client, &run, shared) => {}
    }
}

async fn serve_in_run(mut client: TcpStream, run: &Run, shared: &Shared) {
    let (head, rest) = match head::read_head(&mut client).await {
        Ok(read) => read,
        Err(e) => {
            refuse(&mut client, "400 Bad Request", &e.to_string()).await;
            return;
        }
    };
    let (host, port, kind, path) = match target(&head) {
        Ok(target) => target,
        Err(message) => {
            refuse(&mut client, "400 Bad Request", &message).await;
            return;
        }
    };
    // a run with bound secrets has its tunnels terminated: they are HTTPS requests to it
    let kind = if kind == "connect" && run.edge.is_some() {
        "https"
    } else {
        kind
    };
    let traffic = run.traffic(&host, port, kind);
    let max = run.grant.limits.max_connections;
    if run.open.fetch_add(1, Ordering::AcqRel) >= max {
        run.open.fetch_sub(1, Ordering::AcqRel);
        let message = format!("this run already has {max} connections open, the most it may");
        let _ = refuse_recorded(&mut client, "429 Too Many Requests", message, &traffic).await;
        return;
    }
    let _slot = Slot(run);
    if let ("index", Some(path)) = (traffic.kind, &path) {
        // the service's own package index, whatever the run's host lists say; recorded before
        // the connection closes, so a run that ends when its code saw the answer has the record
        let refused = index::serve(
            shared.index.as_ref(),
            &mut client,
            &head,
            path,
            run,
            &traffic,
        )
        .await
        .err();
        traffic.end(refused);
        let _ = client.shutdown().await;
        return;
    }
    let refused = forward(client, head, rest, path, run, shared, &traffic)
        .await
        .err();
    traffic.end(refused);
}

/// Where a request goes: host, port, kind (`connect` or `http`), and the origin-form path of
/// a plain request.
fn target(head: &Head) -> Result<(String, u16, &'static str, Option<String>), String> {
    if head.method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = head::host_port(&head.target, 443).ok_or_else(|| {
            format!(
                "CONNECT needs host:port, not {:?}",
                head.target.chars().take(100).collect::<String>()
            )
        })?;
        return Ok((host, port, "connect", None));
    }
    match head::absolute_http(&head.target) {
        Some((host, port, path)) if host.eq_ignore_ascii_case(INDEX_HOST) => {
            Ok((host, port, "index", Some(path)))
        }
        Some((host, port, path)) => Ok((host, port, "http", Some(path))),
        None => Err(
            "this is the session's network proxy: send CONNECT host:port, or a request with an \
             absolute http:// URL (HTTP clients do this when HTTP_PROXY and HTTPS_PROXY are set, \
             as they are in every session)"
                .to_owned(),
        ),
    }
}

/// Checks, connects and moves the bytes; `Err` is the refusal the code got.
async fn forward(
    mut client: TcpStream,
    mut head: Head,
    rest: Vec<u8>,
    path: Option<String>,
    run: &Run,
    shared: &Shared,
    traffic: &Traffic,
) -> Result<(), String> {
    if let Err(message) = run.check_host(&traffic.host) {
        return refuse_recorded(&mut client, "403 Forbidden", message, traffic).await;
    }
    if path.is_some() {
        let secrets = run.edge.as_ref().map_or(&[][..], |edge| &edge.secrets);
        if let Err(e) = placeholder::substitute(&mut head.headers, &traffic.host, secrets) {
            return refuse_recorded(&mut client, "403 Forbidden", e.to_string(), traffic).await;
        }
    }
    let upstream = match connect::open(&shared.settings.policy, &traffic.host, traffic.port).await {
        Ok(upstream) => upstream,
        Err(e) => {
            let status = match e {
                ConnectError::Refused(_) => "403 Forbidden",
                ConnectError::Unreachable(_) => "502 Bad Gateway",
            };
            return refuse_recorded(&mut client, status, e.to_string(), traffic).await;
        }
    };
    let mut upstream = upstream;
    match path {
        None => {
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .map_err(|e| e.to_string())?;
            if let Some(edge) = &run.edge {
                let tls = &shared.upstream_tls;
                let budget = &run.budget;
                return intercept::tunnel(client, rest, upstream, budget, edge, tls, traffic).await;
            }
            if !rest.is_empty() {
                run.budget
                    .charge(rest.len())
                    .await
                    .map_err(|e| e.to_string())?;
                upstream.write_all(&rest).await.map_err(|e| e.to_string())?;
                traffic.sent.fetch_add(rest.len() as u64, Ordering::Relaxed);
            }
        }
        Some(path) => {
            let mut request = origin_form(&head, &path);
            request.extend_from_slice(&rest);
            run.budget
                .charge(request.len())
                .await
                .map_err(|e| e.to_string())?;
            upstream
                .write_all(&request)
                .await
                .map_err(|e| e.to_string())?;
            traffic
                .sent
                .fetch_add(request.len() as u64, Ordering::Relaxed);
        }
    }
    match pump::both_ways(
        client,
        upstream,
        &run.budget,
        &traffic.sent,
        &traffic.received,
    )
    .await
    {
        Ok(()) => Ok(()),
        Err(e)
            if e.get_ref()
                .is_some_and(|inner| inner.is::<pump::OverLimit>()) =>
        {
            Err(e.to_string())
        }
        // a peer closing abruptly is how many connections end: not a refusal
        Err(_) => Ok(()),
    }
}

/// The head of a plain request as the origin server wants it: origin-form target, the
/// proxy's own headers dropped, one request per connection.
fn origin_form(head: &Head, path: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(head.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &head.headers {
        let hop = [
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h));
        if hop {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}
