//! The accept loop: every accepted socket gets `TCP_NODELAY` (an SSE answer is several small
//! writes; without it the second waits for the client's delayed ACK, ~40 ms), a header-read
//! timeout, an idle limit between requests, and a place under a connection limit. At the limit
//! the connection idle the longest is closed to make room, so idle or half-sent connections can
//! never lock real requests out.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// `errno` values of a process (EMFILE) or system (ENFILE) out of file descriptors.
const EMFILE: i32 = 24;
const ENFILE: i32 = 23;

/// How connections are bounded.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Open connections at most; at the limit the longest-idle one is closed for a new one.
    pub max_connections: usize,
    /// A request's headers must arrive within this.
    pub header_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    pub idle_timeout: Duration,
}

impl ConnectionLimits {
    /// Defaults for a process allowed `open_files` descriptors: a quarter of them (at least 64)
    /// stay free for the database, sessions and log files.
    pub fn for_open_files(open_files: u64) -> Self {
        let spare = (open_files / 4).max(64);
        let max = open_files.saturating_sub(spare).clamp(16, 65_536);
        Self {
            max_connections: usize::try_from(max).unwrap_or(65_536),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// One open connection, as the limit sees it.
struct Tracked {
    in_flight: Arc<AtomicUsize>,
    /// Milliseconds since `epoch` of its last request's end (or its accept).
    last_done: Arc<AtomicU64>,
    close: CancellationToken,
}

/// The open connections.
struct Table {
    epoch: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Tracked>>,
}

impl Table {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Tracked>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Makes room for one more connection: `false` when every open one is busy.
    fn make_room(&self, limit: usize) -> bool {
        let open = self.lock();
        if open.len() < limit {
            return true;
        }
        // evicted connections stay listed until their task ends; they no longer count
        if open.values().filter(|c| !c.close.is_cancelled()).count() < limit {
            return true;
        }
        evict_longest_idle(&open)
    }

    /// Closes the connection idle the longest, when the process has run out of descriptors:
    /// `false` when every open one is busy.
    fn free_a_descriptor(&self) -> bool {
        evict_longest_idle(&self.lock())
    }
}

/// Closes the open connection with nothing in flight that has been idle the longest.
fn evict_longest_idle(open: &HashMap<u64, Tracked>) -> bool {
    let idle = open
        .values()
        .filter(|c| c.in_flight.load(Ordering::Acquire) == 0 && !c.close.is_cancelled())
        .min_by_key(|c| c.last_done.load(Ordering::Acquire));
    match idle {
        Some(oldest) => {
            oldest.close.cancel();
            true
        }
        None => false,
    }
}

/// Serves `router` on `listener` until `shutdown`, then waits for open connections to finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    let table = Arc::new(Table {
        epoch: Instant::now(),
        next_id: AtomicU64::new(0),
        open: Mutex::new(HashMap::new()),
    });
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    let mut tasks = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) => {
                // Out of descriptors (evicted connections hold theirs until their task ends):
                // close an idle connection and retry at once. Otherwise wait a moment rather
                // than spin on the same error.
                let exhausted = matches!(err.raw_os_error(), Some(EMFILE | ENFILE));
                if exhausted && table.free_a_descriptor() {
                    tokio::task::yield_now().await;
                    continue;
                }
                tracing::warn!(error = %err, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if !table.make_room(limits.max_connections) {
            tracing::warn!(
                limit = limits.max_connections,
                "connection refused: every open connection is busy"
            );
            continue;
        }
        prepare(&stream);
        let connection = Connection {
            table: table.clone(),
            router: router.clone(),
            builder: builder.clone(),
            idle: limits.idle_timeout,
            shutdown: shutdown.clone(),
        };
        tasks.spawn(connection.run(stream));
    }
    drop(listener);
    while tasks.join_next().await.is_some() {}
}

/// Small writes go out at once: an SSE answer is several, and with Nagle's algorithm the
/// second waited for the client's delayed ACK (~40 ms on every legacy-session request).
fn prepare(stream: &TcpStream) {
    if let Err(err) = stream.set_nodelay(true) {
        tracing::debug!(error = %err, "cannot set TCP_NODELAY");
    }
}

struct Connection {
    table: Arc<Table>,
    router: Router,
    builder: Arc<Builder<TokioExecutor>>,
    idle: Duration,
    shutdown: CancellationToken,
}

impl Connection {
    async fn run(self, stream: TcpStream) {
        let id = self.table.next_id.fetch_add(1, Ordering::Relaxed);
        let in_flight = Arc::new(AtomicUsize::new(0));
        let last_done = Arc::new(AtomicU64::new(self.table.now_ms()));
        let close = CancellationToken::new();
        self.table.lock().insert(
            id,
            Tracked {
                in_flight: in_flight.clone(),
                last_done: last_done.clone(),
                close: close.clone(),
            },
        );
        // the client's address, for per-client limits (the sign-in form's)
        let peer = stream
            .peer_addr()
            .unwrap_or_else(|_| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
        let service = counted(
            self.router,
            self.table.clone(),
            in_flight.clone(),
            last_done.clone(),
            peer,
        );
        let conn = self
            .builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service);
        tokio::pin!(conn);
        let mut tick = tokio::time::interval(self.idle / 4);
        let mut draining = false;
        loop {
            tokio::select! {
                _ = conn.as_mut() => break,
                // evicted to make room: nothing is in flight, so dropping loses no answer
                () = close.cancelled() => break,
                () = self.shutdown.cancelled(), if !draining => {
                    draining = true;
                    conn.as_mut().graceful_shutdown();
                }
                _ = tick.tick() => {
                    let idle_ms = self.table.now_ms().saturating_sub(last_done.load(Ordering::Acquire));
                    if in_flight.load(Ordering::Acquire) == 0 && idle_ms >= millis(self.idle) {
                        break;
                    }
                }
            }
        }
        self.table.lock().remove(&id);
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The router as a hyper service, counting requests in flight until each answer's body is
/// finished or dropped.
fn counted(
    router: Router,
    table: Arc<Table>,
    in_flight: Arc<AtomicUsize>,
    last_done: Arc<AtomicU64>,
    peer: std::net::SocketAddr,
) -> impl hyper::service::Service<
    http::Request<Incoming>,
    Response = http::Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<http::Response<Body>, Infallible>> + Send,
> + Clone {
    hyper::service::service_fn(move |mut request: http::Request<Incoming>| {
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        let guard = InFlight::begin(table.clone(), in_flight.clone(), last_done.clone());
        let router = router.clone();
        async move {
            let response = router.oneshot(request.map(Body::new)).await?;
            Ok::<_, Infallible>(response.map(move |body| {
                Body::new(body.map_frame(move |frame| {
                    let _held = &guard;
                    frame
                }))
            }))
        }
    })
}

/// One request in flight; its drop marks the connection's last activity.
struct InFlight {
    table: Arc<Table>,
    in_flight: Arc<AtomicUsize>,
    last_done: Arc<AtomicU64>,
}

impl InFlight {
    fn begin(table: Arc<Table>, in_flight: Arc<AtomicUsize>, last_done: Arc<AtomicU64>) -> Self {
        in_flight.fetch_add(1, Ordering::AcqRel);
        Self {
            table,
            in_flight,
            last_done,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.last_done.store(self.table.now_ms(), Ordering::Release);
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn accepted_sockets_send_small_writes_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let _client = TcpStream::connect(address).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert!(
            !accepted.nodelay().unwrap(),
            "the kernel's default is Nagle"
        );
        prepare(&accepted);
        assert!(accepted.nodelay().unwrap());
    }

    #[test]
    fn limits_leave_room_for_other_files() {
        let limits = ConnectionLimits::for_open_files(1024);
        assert_eq!(limits.max_connections, 768);
        assert_eq!(ConnectionLimits::for_open_files(100).max_connections, 36);
        assert_eq!(
            ConnectionLimits::for_open_files(1 << 20).max_connections,
            65_536
        );
    }

    #[test]
    fn at_the_limit_the_longest_idle_connection_makes_room() {
        let table = Table {
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        };
        let add = |id: u64, in_flight: usize, last_done: u64| {
            let close = CancellationToken::new();
            table.lock().insert(
                id,
                Tracked {
                    in_flight: Arc::new(AtomicUsize::new(in_flight)),
                    last_done: Arc::new(AtomicU64::new(last_done)),
                    close: close.clone(),
                },
            );
            close
        };
        let busy = add(1, 1, 0);
        let recent = add(2, 0, 50);
        let oldest = add(3, 0, 10);
        assert!(table.make_room(4), "below the limit");
        assert!(table.make_room(3));
        assert!(oldest.is_cancelled() && !recent.is_cancelled() && !busy.is_cancelled());
        assert!(table.make_room(3), "an evicted connection no longer counts");
        table.lock().remove(&3);
        let _newest = add(4, 0, 70);
        assert!(table.make_room(3));
        assert!(recent.is_cancelled() && !busy.is_cancelled());
        table.lock().remove(&2);
        let _busy_too = add(5, 2, 0);
        table
            .lock()
            .get(&4)
            .unwrap()
            .in_flight
            .store(1, Ordering::Release);
        assert!(!table.make_room(3), "only busy connections are left");
    }
}
