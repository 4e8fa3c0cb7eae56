//! The node's side of the channel: an HTTP/2 server (cleartext with prior knowledge, or over
//! mutual TLS) in front of the node's own [`SandboxSessions`], for front ends holding the node
//! token (and, on TLS, a certificate of the deployment's CA) and nobody else.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use toolgate_sandbox::{SandboxSessions, SandboxSessionsError};

use crate::lease::{NodeControl, NodeLease};
use crate::node_run::AnswerBody;
use crate::tls::ServerTls;
use crate::token::NodeToken;
use crate::wire::{
    AccountRef, DrainAnswer, ErrorKind, LeaseAnswer, LeaseRequest, PREFIX, ReadFile, SessionRef,
    WireError,
};

/// Runs in flight on one connection at most (each is one HTTP/2 stream).
pub(crate) const MAX_STREAMS: u32 = 4096;
/// The largest body of a request other than a run.
const MAX_SMALL_BODY: usize = 64 * 1024;
/// How often an idle connection is pinged, and how long a ping may go unanswered before the
/// connection is dropped (a front end cut off from the network).
pub(crate) const PING_EVERY: Duration = Duration::from_secs(1);
/// See [`PING_EVERY`].
pub(crate) const PING_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a TLS handshake may take: a peer that stalls in it holds a task no longer.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest a front end may extend a node's lease at once.
const MAX_VALID_FOR: Duration = Duration::from_secs(60);
/// How often the node looks whether its lease ran out.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// What a node serves: its sessions, to holders of its token, while a front end keeps its
/// lease.
pub struct NodeServer {
    sessions: Arc<dyn SandboxSessions>,
    token: NodeToken,
    tls: Option<ServerTls>,
    control: Arc<dyn NodeControl>,
    lease: Arc<NodeLease>,
}

impl NodeServer {
    /// Serves `sessions` to callers presenting `token` (over mutual TLS when `tls` is given:
    /// then both are required); `control` reports the node's load and drops every session when
    /// the lease lapses.
    pub fn new(
        sessions: Arc<dyn SandboxSessions>,
        token: NodeToken,
        tls: Option<ServerTls>,
        control: Arc<dyn NodeControl>,
    ) -> Arc<Self> {
        Arc::new(Self {
            sessions,
            token,
            tls,
            control,
            lease: Arc::new(NodeLease::default()),
        })
    }

    /// Takes no new sessions from now on (`toolgate node --drain`, or SIGTERM's first step).
    pub fn drain(&self) {
        self.lease.drain();
    }

    /// Fences the node whenever its lease runs out: every session ends, nothing is written.
    async fn watch(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(WATCH_EVERY) => {}
            }
            if let Some(incarnation) = self.lease.take_lapsed() {
                tracing::warn!(
                    incarnation,
                    "node: no front end renewed this node's lease in time; every session is \
                     dropped (they may live elsewhere now) until a front end registers it again"
                );
                self.control.fence().await;
            }
        }
    }

    /// Accepts connections on `listener` until `shutdown`; each connection's runs go on until
    /// they end or the connection does.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: CancellationToken) {
        tokio::spawn(Arc::clone(&self).watch(shutdown.clone()));
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "node: accept failed");
                    // out of descriptors and the like: do not spin
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let server = Arc::clone(&self);
            // the handshake runs in the connection's own task: a peer that fails or stalls in
            // it never holds up the accept loop
            tokio::spawn(async move {
                let Some(tls) = &server.tls else {
                    return Arc::clone(&server).connection(stream, peer).await;
                };
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.0.accept(stream)).await {
                    Ok(Ok(stream)) => Arc::clone(&server).connection(stream, peer).await,
                    Ok(Err(error)) => {
                        tracing::warn!(%peer, %error, "node: a TLS handshake was refused");
                    }
                    Err(_) => {
                        tracing::warn!(%peer, "node: a TLS handshake took too long; dropped");
                    }
                }
            });
        }
    }

    /// One front end's connection, its requests each a stream, until it ends.
    async fn connection<I>(self: Arc<Self>, io: I, peer: std::net::SocketAddr)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let service = hyper::service::service_fn(move |request| {
            let server = Arc::clone(&self);
            async move { Ok::<_, Infallible>(server.answer(request).await) }
        });
        let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .max_concurrent_streams(MAX_STREAMS)
            .keep_alive_interval(Some(PING_EVERY))
            .keep_alive_timeout(PING_TIMEOUT)
            .serve_connection(TokioIo::new(io), service);
        if let Err(error) = connection.await {
            tracing::debug!(%peer, %error, "node: a front end's connection ended");
        }
    }

    fn lease_answer(&self, asked: &LeaseRequest) -> LeaseAnswer {
        if let Some(incarnation) = asked.incarnation {
            if asked.revoke {
                self.lease.revoke(incarnation);
            } else {
                let valid_for = Duration::from_millis(asked.valid_for_ms).min(MAX_VALID_FOR);
                self.lease.renew(incarnation, valid_for);
            }
        }
        LeaseAnswer {
            incarnation: self.lease.incarnation(),
            load: self.control.load(),
            draining: self.lease.draining(),
            drained: self.lease.drained(),
        }
    }

    async fn answer(&self, request: Request<Incoming>) -> Response<AnswerBody> {
        if !self
            .token
            .admits(request.headers().get(http::header::AUTHORIZATION))
        {
            return error(
                StatusCode::UNAUTHORIZED,
                "the node token is missing or wrong",
            );
        }
        if request.method() != Method::POST {
            return error(StatusCode::METHOD_NOT_ALLOWED, "POST only");
        }
        let Some(what) = request.uri().path().strip_prefix(PREFIX) else {
            return error(StatusCode::NOT_FOUND, "no such request");
        };
        match what {
            "run" => crate::node_run::start(
                Arc::clone(&self.sessions),
                Arc::clone(&self.lease),
                request.into_body(),
            ),
            "lease" => match small::<LeaseRequest>(request.into_body()).await {
                Ok(asked) => json(StatusCode::OK, &self.lease_answer(&asked)),
                Err(answer) => answer,
            },
            "drain" => {
                self.lease.drain();
                let hibernated = self.control.drain().await;
                self.lease.set_drained();
                tracing::info!(
                    hibernated,
                    "node drained: its sessions are in their checkpoints"
                );
                json(StatusCode::OK, &DrainAnswer { hibernated })
            }
            "read" => match small::<ReadFile>(request.into_body()).await {
                Ok(read) => self.read_file(read).await,
                Err(answer) => answer,
            },
            "close" => match small::<SessionRef>(request.into_body()).await {
                Ok(session) => json(
                    StatusCode::OK,
                    &self
                        .sessions
                        .close(&session.account, &session.session_id)
                        .await,
                ),
                Err(answer) => answer,
            },
            "list" => match small::<AccountRef>(request.into_body()).await {
                Ok(account) => json(StatusCode::OK, &self.sessions.list(&account.account).await),
                Err(answer) => answer,
            },
            _ => error(StatusCode::NOT_FOUND, "no such request"),
        }
    }

    async fn read_file(&self, read: ReadFile) -> Response<AnswerBody> {
        match self
            .sessions
            .read_file(&read.account, &read.session_id, &read.path, read.max_bytes)
            .await
        {
            Ok(file) => {
                let mut answer = Response::new(Full::new(Bytes::from(file.bytes)).boxed());
                answer
                    .headers_mut()
                    .insert(crate::wire::SIZE_HEADER, http::HeaderValue::from(file.size));
                answer
            }
            Err(failure) => seam_error(&failure),
        }
    }
}

/// A small JSON request body, read within [`MAX_SMALL_BODY`].
async fn small<T: serde::de::DeserializeOwned>(body: Incoming) -> Result<T, Response<AnswerBody>> {
    let bytes = Limited::new(body, MAX_SMALL_BODY)
        .collect()
        .await
        .map_err(|_| {
            error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the request is too large or broke",
            )
        })?
        .to_bytes();
    serde_json::from_slice(&bytes).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            &format!("a malformed request: {e}"),
        )
    })
}

/// The seam's error as an answer: its kind and the caller's message; the source stays here.
pub(crate) fn seam_error(failure: &SandboxSessionsError) -> Response<AnswerBody> {
    if let SandboxSessionsError::Unavailable(source) = failure {
        tracing::warn!(error = %source, "node: the sandbox could not serve a request");
    }
    json(StatusCode::CONFLICT, &WireError::from(failure))
}

fn error(status: StatusCode, message: &str) -> Response<AnswerBody> {
    let kind = if status.is_client_error() {
        ErrorKind::Refused
    } else {
        ErrorKind::Unavailable
    };
    json(
        status,
        &WireError {
            kind,
            message: message.to_owned(),
        },
    )
}

fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> Response<AnswerBody> {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut answer = Response::new(Full::new(Bytes::from(body)).boxed());
    *answer.status_mut() = status;
    answer.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    answer
}
