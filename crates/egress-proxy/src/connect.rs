//! Opening a connection for a session: the name resolved here (never by the session), every
//! address checked by the egress guard, the first allowed one that answers used.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpStream;
use toolgate_egress::EgressPolicy;

/// How long resolving and connecting may take together.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a destination was not connected to. The message is for the session's code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// the guard refuses it (HTTP 403)
    #[error("{0}")]
    Refused(String),
    /// it could not be reached (HTTP 502)
    #[error("{0}")]
    Unreachable(String),
}

/// A connection to `host:port`, if the guard allows it.
pub(crate) async fn open(
    policy: &EgressPolicy,
    host: &str,
    port: u16,
) -> Result<TcpStream, ConnectError> {
    tokio::time::timeout(CONNECT_TIMEOUT, open_now(policy, host, port))
        .await
        .map_err(|_| {
            ConnectError::Unreachable(format!(
                "{host}:{port} did not answer within {} s",
                CONNECT_TIMEOUT.as_secs()
            ))
        })?
}

async fn open_now(policy: &EgressPolicy, host: &str, port: u16) -> Result<TcpStream, ConnectError> {
    let addresses: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host, port))
            .await
            .map_err(|_| ConnectError::Unreachable(format!("{host} could not be resolved")))?
            .collect(),
    };
    let allowed = policy.allowed(addresses).map_err(|refusal| match refusal {
        Some(refusal) => ConnectError::Refused(format!(
            "{host}:{port} is not reachable from a session: {refusal}"
        )),
        None => ConnectError::Unreachable(format!("{host} has no address")),
    })?;
    let mut last = None;
    for address in allowed {
        match TcpStream::connect(address).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(ConnectError::Unreachable(format!(
        "could not connect to {host}:{port}: {}",
        last.map_or_else(|| "no address".to_owned(), |e| e.kind().to_string())
    )))
}
