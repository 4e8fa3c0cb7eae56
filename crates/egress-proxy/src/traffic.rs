//! One connection as the proxy accounts for it: its record, kept from its start (so that a run
//! that ends with connections open still reports them), and the answer the session's code gets
//! when it is refused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use toolgate_sandbox::Destination;

/// One connection's record, filled in as it goes.
#[derive(Debug)]
pub(crate) struct Traffic {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) kind: &'static str,
    pub(crate) sent: AtomicU64,
    pub(crate) received: AtomicU64,
    started: Instant,
    /// Milliseconds from the start to the end; `u64::MAX` while it is open.
    ended_ms: AtomicU64,
    refused: Mutex<Option<String>>,
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
            ended_ms: AtomicU64::new(u64::MAX),
            refused: Mutex::new(None),
        }
    }

    /// The connection ended, refused with `refused` if it was.
    pub(crate) fn end(&self, refused: Option<String>) {
        *self.refused.lock().unwrap_or_else(PoisonError::into_inner) = refused;
        self.ended_ms.store(self.elapsed_ms(), Ordering::Release);
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    /// What the record says now (an open connection: its time so far).
    pub(crate) fn destination(&self) -> Destination {
        let ended = self.ended_ms.load(Ordering::Acquire);
        Destination {
            host: self.host.clone(),
            port: self.port,
            kind: self.kind.to_owned(),
            bytes_sent: self.sent.load(Ordering::Relaxed),
            bytes_received: self.received.load(Ordering::Relaxed),
            duration_ms: if ended == u64::MAX {
                self.elapsed_ms()
            } else {
                ended
            },
            refused: self
                .refused
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }
}

/// Answers an error to the session's code: a status line and a one-line text body.
pub(crate) async fn refuse(client: &mut (impl AsyncWrite + Unpin), status: &str, message: &str) {
    let _ = client.write_all(refusal(status, message).as_bytes()).await;
    let _ = client.shutdown().await;
}

/// Records that `traffic` was refused with `message`, then answers the session's code: the record
/// comes first, so a run that ends as soon as its code read the answer (and stops this
/// connection's task with it) still says why.
pub(crate) async fn refuse_recorded(
    client: &mut (impl AsyncWrite + Unpin),
    status: &str,
    message: String,
    traffic: &Traffic,
) -> Result<(), String> {
    traffic.end(Some(message.clone()));
    refuse(client, status, &message).await;
    Err(message)
}

/// The answer [`refuse`] writes.
pub(crate) fn refusal(status: &str, message: &str) -> String {
    let body = format!("toolgate network proxy: {message}\n");
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\nX-Toolgate-Refused: 1\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    /// The record comes before the answer: a session's code that has read the refusal's first
    /// bytes (and returned, ending its run) finds the reason on the run's record. The pipe holds
    /// 8 bytes, so the refusal cannot be written whole before the reader takes them.
    #[tokio::test]
    async fn a_refusal_is_recorded_before_the_code_can_read_it() {
        let traffic = std::sync::Arc::new(Traffic::new("169.254.169.254", 80, "http"));
        let (mut code_side, mut proxy_side) = tokio::io::duplex(8);
        let refusing = std::sync::Arc::clone(&traffic);
        let writer = tokio::spawn(async move {
            refuse_recorded(&mut proxy_side, "403 Forbidden", "no".to_owned(), &refusing).await
        });
        let mut first = [0u8; 8];
        code_side.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"HTTP/1.1");
        assert_eq!(traffic.destination().refused.as_deref(), Some("no"));
        let mut rest = Vec::new();
        code_side.read_to_end(&mut rest).await.unwrap();
        assert_eq!(writer.await.unwrap(), Err("no".to_owned()));
        assert!(String::from_utf8_lossy(&rest).ends_with("toolgate network proxy: no\n"));
    }
}
