//! One connection as the proxy accounts for it: its record, filled in as it goes, and the
//! answer the session's code gets when it is refused.

use std::sync::atomic::AtomicU64;
use std::time::Instant;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use toolgate_sandbox::Destination;

/// One connection's record, filled in as it goes.
pub(crate) struct Traffic {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) kind: &'static str,
    pub(crate) sent: AtomicU64,
    pub(crate) received: AtomicU64,
    started: Instant,
}

impl Traffic {
    pub(crate) fn new(host: &str, port: u16, kind: &'static str) -> Self {
        Self {
            host: host.chars().take(253).collect(),
            port,
            kind,
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            started: Instant::now(),
        }
    }

    pub(crate) fn into_destination(self, refused: Option<String>) -> Destination {
        Destination {
            host: self.host,
            port: self.port,
            kind: self.kind.to_owned(),
            bytes_sent: self.sent.into_inner(),
            bytes_received: self.received.into_inner(),
            duration_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            refused,
        }
    }
}

/// Answers an error to the session's code: a status line and a one-line text body.
pub(crate) async fn refuse(client: &mut (impl AsyncWrite + Unpin), status: &str, message: &str) {
    let body = format!("toolgate network proxy: {message}\n");
    let answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\nX-Toolgate-Refused: 1\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(answer.as_bytes()).await;
    let _ = client.shutdown().await;
}
