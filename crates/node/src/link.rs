//! A front end's connection to one node: one HTTP/2 connection, dialled when first needed and
//! again after it broke, every request one stream of it. Pings find a node cut off from the
//! network: the connection, and every run on it, ends within [`PING_TIMEOUT`] after the last
//! answered ping.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::serve::{PING_EVERY, PING_TIMEOUT};
use crate::tls::ClientTls;
use crate::token::NodeToken;
use crate::wire::{DrainAnswer, LeaseAnswer, LeaseRequest, PREFIX};

/// How long a lease request may take.
const LEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long dialling a node may take (the TLS handshake included).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The body of every request to a node.
pub(crate) type RequestBody = BoxBody<Bytes, std::convert::Infallible>;

/// Why a node could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// the node's address is not `http://HOST:PORT` (`https://HOST:PORT` with mutual TLS)
    #[error(
        "a node's address must be http://HOST:PORT, or https://HOST:PORT with mutual TLS, got {0:?}"
    )]
    Address(String),
    /// an `https://` address without the TLS settings, or an `http://` one with them
    #[error(
        "{url}: with mutual TLS (node_tls_cert, node_tls_key, node_tls_ca) every node's address is https://HOST:PORT, without it http://HOST:PORT"
    )]
    Scheme {
        /// the address given
        url: String,
    },
    /// it could not be dialled or its connection broke before an answer
    #[error("the node at {node} cannot be reached: {reason}")]
    Unreachable {
        /// the node's address
        node: String,
        /// why
        reason: String,
    },
}

/// A node's address as a front end gives it: `http://HOST:PORT`, or `https://HOST:PORT` on
/// mutual TLS. Its `HOST:PORT` names the node, whatever the scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeUrl {
    authority: String,
    host: String,
}

impl NodeUrl {
    /// `url` checked: `https://` exactly when `tls` (the channel's TLS is set), a port, and
    /// nothing after it but a `/`.
    pub fn parse(url: &str, tls: bool) -> Result<Self, LinkError> {
        let bad = || LinkError::Address(url.to_owned());
        let uri: Uri = url.parse().map_err(|_| bad())?;
        let authority = uri.authority().ok_or_else(bad)?;
        let plain_path = matches!(uri.path(), "" | "/") && uri.query().is_none();
        let secure = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(bad()),
        };
        if authority.port_u16().is_none() || !plain_path {
            return Err(bad());
        }
        if secure != tls {
            return Err(LinkError::Scheme {
                url: url.to_owned(),
            });
        }
        Ok(Self {
            authority: authority.as_str().to_owned(),
            host: authority.host().to_owned(),
        })
    }

    /// Its `HOST:PORT`.
    pub fn address(&self) -> &str {
        &self.authority
    }
}

/// How a link reaches its node over TLS: the connector, and the name the node's certificate
/// must carry.
struct LinkTls {
    connector: ClientTls,
    name: ServerName<'static>,
}

/// One node, as a front end reaches it.
pub struct NodeLink {
    authority: String,
    token: NodeToken,
    tls: Option<LinkTls>,
    connection: tokio::sync::Mutex<Option<SendRequest<RequestBody>>>,
}

impl std::fmt::Debug for NodeLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeLink")
            .field("node", &self.authority)
            .finish_non_exhaustive()
    }
}

impl NodeLink {
    /// The node at `url` (`http://HOST:PORT`, or `https://HOST:PORT` when `tls` is given),
    /// reached with `token`. Nothing is dialled yet.
    pub fn new(url: &str, token: NodeToken, tls: Option<ClientTls>) -> Result<Self, LinkError> {
        let url = NodeUrl::parse(url, tls.is_some())?;
        let tls = match tls {
            Some(connector) => Some(LinkTls {
                name: ClientTls::server_name(&url.host)
                    .ok_or_else(|| LinkError::Address(url.authority.clone()))?,
                connector,
            }),
            None => None,
        };
        Ok(Self {
            authority: url.authority,
            token,
            tls,
            connection: tokio::sync::Mutex::new(None),
        })
    }

    /// Its `host:port`.
    pub fn address(&self) -> &str {
        &self.authority
    }

    /// Sends `body` to `what` (`run`, `read`, …) and waits for the answer's head.
    pub(crate) async fn request(
        &self,
        what: &str,
        body: RequestBody,
    ) -> Result<Response<Incoming>, LinkError> {
        let mut sender = self.sender().await?;
        let request = Request::post(format!("http://{}{PREFIX}{what}", self.authority))
            .header(http::header::AUTHORIZATION, self.token.bearer())
            .body(body)
            .map_err(|e| self.unreachable(e))?;
        let answer = sender.send_request(request).await;
        if answer.is_err() {
            // the next request dials again
            self.connection.lock().await.take();
        }
        answer.map_err(|e| self.unreachable(e))
    }

    /// A lease request, answered within [`LEASE_TIMEOUT`] (a node cut off answers nothing).
    pub(crate) async fn lease(&self, asked: &LeaseRequest) -> Result<LeaseAnswer, LinkError> {
        let body = serde_json::to_vec(asked).unwrap_or_default();
        tokio::time::timeout(LEASE_TIMEOUT, self.json("lease", body))
            .await
            .map_err(|_| self.unreachable("no answer in time"))?
    }

    /// Drains the node: it takes no new sessions and hibernates those it has. Waits for the
    /// end (each session's call first, then its checkpoint).
    pub async fn drain(&self) -> Result<DrainAnswer, LinkError> {
        self.json("drain", Vec::new()).await
    }

    /// Sends `body` to `what` and reads its answer, a small JSON value, which must come with 200.
    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        body: Vec<u8>,
    ) -> Result<T, LinkError> {
        let answer = self.request(what, whole(body)).await?;
        if answer.status() != http::StatusCode::OK {
            return Err(self.unreachable(format!("it answered {}", answer.status())));
        }
        let bytes = http_body_util::Limited::new(answer.into_body(), 64 * 1024)
            .collect()
            .await
            .map_err(|e| self.unreachable(e))?
            .to_bytes();
        serde_json::from_slice(&bytes).map_err(|e| self.unreachable(e))
    }

    async fn sender(&self) -> Result<SendRequest<RequestBody>, LinkError> {
        let mut connection = self.connection.lock().await;
        if let Some(sender) = connection.as_ref().filter(|s| !s.is_closed()) {
            return Ok(sender.clone());
        }
        let sender = tokio::time::timeout(CONNECT_TIMEOUT, self.dial())
            .await
            .map_err(|_| self.unreachable("timed out"))??;
        *connection = Some(sender.clone());
        Ok(sender)
    }

    /// A new connection: TCP, then TLS when the link has it, then HTTP/2.
    async fn dial(&self) -> Result<SendRequest<RequestBody>, LinkError> {
        let stream = TcpStream::connect(&self.authority)
            .await
            .map_err(|e| self.unreachable(e))?;
        let _ = stream.set_nodelay(true);
        let Some(tls) = &self.tls else {
            return self.handshake(stream).await;
        };
        let stream = tls
            .connector
            .0
            .connect(tls.name.clone(), stream)
            .await
            .map_err(|e| self.unreachable(format!("TLS: {e}")))?;
        self.handshake(stream).await
    }

    /// HTTP/2 over `io`, its connection driven by a task of its own.
    async fn handshake<I>(&self, io: I) -> Result<SendRequest<RequestBody>, LinkError>
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, driver) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(PING_EVERY)
            .keep_alive_timeout(PING_TIMEOUT)
            .keep_alive_while_idle(true)
            .handshake(TokioIo::new(io))
            .await
            .map_err(|e| self.unreachable(e))?;
        let node = self.authority.clone();
        tokio::spawn(async move {
            if let Err(error) = driver.await {
                tracing::warn!(%node, %error, "the connection to a node ended");
            }
        });
        Ok(sender)
    }

    fn unreachable(&self, reason: impl std::fmt::Display) -> LinkError {
        LinkError::Unreachable {
            node: self.authority.clone(),
            reason: reason.to_string(),
        }
    }
}

/// A whole body of bytes.
pub(crate) fn whole(bytes: impl Into<Bytes>) -> RequestBody {
    http_body_util::Full::new(bytes.into()).boxed()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_plain_http_addresses_with_a_port_name_a_node() {
        let token = NodeToken::parse(&"t".repeat(40)).unwrap();
        let link = NodeLink::new("http://10.0.0.2:7001", token.clone(), None).unwrap();
        assert_eq!(link.address(), "10.0.0.2:7001");
        NodeLink::new("http://[::1]:7001/", token.clone(), None).unwrap();
        for bad in [
            "10.0.0.2:7001",
            "http://a",
            "http://a:1/x",
            "http://a:1?q",
            "",
            "ftp://a:1",
            "https://a",
        ] {
            assert!(
                matches!(
                    NodeLink::new(bad, token.clone(), None),
                    Err(LinkError::Address(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_scheme_says_whether_the_channel_is_tls_and_the_name_stays_the_same() {
        let plain = NodeUrl::parse("http://Node-A.example:7001", false).unwrap();
        let secure = NodeUrl::parse("https://Node-A.example:7001/", true).unwrap();
        assert_eq!(plain.address(), secure.address());
        assert_eq!(secure.address(), "Node-A.example:7001");
        for (url, tls) in [("https://a:1", false), ("http://a:1", true)] {
            assert!(
                matches!(NodeUrl::parse(url, tls), Err(LinkError::Scheme { .. })),
                "{url} with tls {tls}"
            );
        }
        assert_eq!(
            NodeUrl::parse("https://[::1]:7001", true).unwrap().host,
            "[::1]"
        );
        assert!(ClientTls::server_name("[::1]").is_some());
        assert!(ClientTls::server_name("10.0.0.2").is_some());
        assert!(ClientTls::server_name("node-a.example").is_some());
        assert!(ClientTls::server_name("not a name").is_none());
    }
}
