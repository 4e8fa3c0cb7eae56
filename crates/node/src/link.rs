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
use tokio::net::TcpStream;

use crate::serve::{PING_EVERY, PING_TIMEOUT};
use crate::token::NodeToken;
use crate::wire::{DrainAnswer, LeaseAnswer, LeaseRequest, PREFIX};

/// How long a lease request may take.
const LEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long dialling a node may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The body of every request to a node.
pub(crate) type RequestBody = BoxBody<Bytes, std::convert::Infallible>;

/// Why a node could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// the node's address is not `http://host:port`
    #[error("a node's address must be http://HOST:PORT, got {0:?}")]
    Address(String),
    /// it could not be dialled or its connection broke before an answer
    #[error("the node at {node} cannot be reached: {reason}")]
    Unreachable {
        /// the node's address
        node: String,
        /// why
        reason: String,
    },
}

/// One node, as a front end reaches it.
pub struct NodeLink {
    authority: String,
    token: NodeToken,
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
    /// The node at `url` (`http://HOST:PORT`), reached with `token`. Nothing is dialled yet.
    pub fn new(url: &str, token: NodeToken) -> Result<Self, LinkError> {
        Ok(Self {
            authority: node_address(url)?,
            token,
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
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.authority))
            .await
            .map_err(|_| self.unreachable("timed out"))?
            .map_err(|e| self.unreachable(e))?;
        let _ = stream.set_nodelay(true);
        let (sender, driver) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(PING_EVERY)
            .keep_alive_timeout(PING_TIMEOUT)
            .keep_alive_while_idle(true)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| self.unreachable(e))?;
        let node = self.authority.clone();
        tokio::spawn(async move {
            if let Err(error) = driver.await {
                tracing::warn!(%node, %error, "the connection to a node ended");
            }
        });
        *connection = Some(sender.clone());
        Ok(sender)
    }

    fn unreachable(&self, reason: impl std::fmt::Display) -> LinkError {
        LinkError::Unreachable {
            node: self.authority.clone(),
            reason: reason.to_string(),
        }
    }
}

/// The `HOST:PORT` of a node's address `http://HOST:PORT` (a `/` after it is allowed, nothing
/// else).
pub fn node_address(url: &str) -> Result<String, LinkError> {
    let bad = || LinkError::Address(url.to_owned());
    let uri: Uri = url.parse().map_err(|_| bad())?;
    let authority = uri.authority().ok_or_else(bad)?;
    let plain_path = matches!(uri.path(), "" | "/") && uri.query().is_none();
    if uri.scheme_str() != Some("http") || authority.port_u16().is_none() || !plain_path {
        return Err(bad());
    }
    Ok(authority.as_str().to_owned())
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
        let link = NodeLink::new("http://10.0.0.2:7001", token.clone()).unwrap();
        assert_eq!(link.address(), "10.0.0.2:7001");
        NodeLink::new("http://[::1]:7001/", token.clone()).unwrap();
        for bad in [
            "10.0.0.2:7001",
            "https://a:1",
            "http://a",
            "http://a:1/x",
            "http://a:1?q",
            "",
            "ftp://a:1",
        ] {
            assert!(NodeLink::new(bad, token.clone()).is_err(), "{bad}");
        }
    }
}
