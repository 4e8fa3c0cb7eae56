//! Tunnels of a run that holds secrets bound to hosts. Every HTTPS tunnel of such a run is
//! terminated (not only those to a bound host), so that a placeholder sent anywhere is seen:
//! the session's TLS ends here with a leaf of the session's CA for the tunnel's host, each
//! HTTP/1.1 request inside has its placeholders replaced (or is refused, and not sent), and
//! goes on to the host over the proxy's own TLS client, which verifies the host's certificate.
//! Without bound secrets tunnels stay raw bytes (see `gate.rs`).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use zeroize::Zeroize;

use crate::ca::SessionCa;
use crate::head::HEAD_TIMEOUT;
use crate::http1::{self, Body, Buffered};
use crate::placeholder::{self, BoundSecret};
use crate::pump::{self, Budget};
use crate::traffic::{Traffic, refuse_recorded};

/// What a run with bound secrets needs to see inside its tunnels.
#[derive(Debug)]
pub(crate) struct Edge {
    /// The session's CA; `None` if it could not be made (its tunnels are then refused).
    pub(crate) ca: Option<Arc<SessionCa>>,
    pub(crate) secrets: Vec<BoundSecret>,
}

/// What follows a response.
enum Next {
    KeepAlive,
    Close,
    Upgrade,
}

/// Serves one terminated tunnel to `traffic.host` until either side closes it; `Err` is the
/// refusal the code got.
pub(crate) async fn tunnel(
    client: TcpStream,
    early: Vec<u8>,
    upstream: TcpStream,
    budget: &Budget,
    edge: &Edge,
    upstream_tls: &Arc<rustls::ClientConfig>,
    traffic: &Traffic,
) -> Result<(), String> {
    let host = traffic.host.as_str();
    let client = Rewind {
        early,
        inner: client,
    };
    let Some(ca) = &edge.ca else {
        return Err("this session's certificate authority could not be made".to_owned());
    };
    let server = ca.server_config(host).map_err(|e| e.to_string())?;
    let client = tokio::time::timeout(HEAD_TIMEOUT, TlsAcceptor::from(server).accept(client))
        .await
        .map_err(|_| "the session's TLS handshake did not finish in time".to_owned())?
        // the code does not trust the session's CA (it replaced the bundle): nothing to answer
        .map_err(|e| format!("the session's TLS handshake failed: {e}"))?;
    let (client_read, mut client_write) = tokio::io::split(client);
    let mut client_read = Buffered::new(client_read);

    let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    let connected = tokio::time::timeout(
        crate::connect::CONNECT_TIMEOUT,
        TlsConnector::from(Arc::clone(upstream_tls)).connect(name, upstream),
    )
    .await;
    let upstream = match connected {
        Ok(Ok(upstream)) => upstream,
        failed => {
            let why = match failed {
                Ok(Err(e)) => e.to_string(),
                _ => "it did not finish in time".to_owned(),
            };
            let message = format!("the TLS connection to {host} failed: {why}");
            // read what the code sent, so that it sees the answer rather than a reset
            let _ = client_read.request_head().await;
            return refuse_recorded(&mut client_write, "502 Bad Gateway", message, traffic).await;
        }
    };
    let (upstream_read, mut upstream_write) = tokio::io::split(upstream);
    let mut upstream_read = Buffered::new(upstream_read);

    loop {
        let mut head = match client_read.request_head().await {
            Ok(Some(head)) => head,
            Ok(None) => return Ok(()),
            Err(e) => {
                let (status, message) = ("400 Bad Request", e.to_string());
                return refuse_recorded(&mut client_write, status, message, traffic).await;
            }
        };
        let checked = placeholder::substitute(&mut head.headers, host, &edge.secrets)
            .map_err(|e| ("403 Forbidden", e.to_string()))
            .and_then(|_| http1::request_body(&head).map_err(|m| ("400 Bad Request", m)));
        let body = match checked {
            Ok(body) => body,
            Err((status, message)) => {
                return refuse_recorded(&mut client_write, status, message, traffic).await;
            }
        };
        let close_after = http1::wants_close(&head.headers);
        let method = head.method.clone();
        let mut request = http1::request_bytes(&head);
        for (_, value) in &mut head.headers {
            value.zeroize();
        }
        let sent = send_head(&request, &mut upstream_write, budget, traffic).await;
        request.zeroize();
        ended(sent)?;

        let send_body = async {
            client_read
                .copy_body(body, &mut upstream_write, budget, &traffic.sent)
                .await
        };
        let answer = relay_response(
            &mut upstream_read,
            &mut client_write,
            &method,
            budget,
            traffic,
        );
        let next = match tokio::try_join!(send_body, answer) {
            Ok(((), next)) => next,
            Err(e) => return ended(Err(e)),
        };
        match next {
            Next::KeepAlive if !close_after => {}
            Next::KeepAlive | Next::Close => {
                let _ = client_write.shutdown().await;
                return Ok(());
            }
            Next::Upgrade => {
                let up = client_read.copy_rest(&mut upstream_write, budget, &traffic.sent);
                let down = upstream_read.copy_rest(&mut client_write, budget, &traffic.received);
                return ended(tokio::try_join!(up, down).map(|_| ()));
            }
        }
    }
}

async fn send_head(
    request: &[u8],
    to: &mut (impl AsyncWrite + Unpin),
    budget: &Budget,
    traffic: &Traffic,
) -> io::Result<()> {
    budget
        .charge(request.len())
        .await
        .map_err(io::Error::other)?;
    to.write_all(request).await?;
    traffic
        .sent
        .fetch_add(request.len() as u64, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// Passes the host's answer to one request on: interim (1xx) heads, the final head, its body.
async fn relay_response<R, W>(
    from: &mut Buffered<R>,
    to: &mut W,
    method: &str,
    budget: &Budget,
    traffic: &Traffic,
) -> io::Result<Next>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        let head = from
            .response_head()
            .await
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        budget
            .charge(head.raw.len())
            .await
            .map_err(io::Error::other)?;
        to.write_all(&head.raw).await?;
        traffic
            .received
            .fetch_add(head.raw.len() as u64, std::sync::atomic::Ordering::Relaxed);
        if head.status == 101 {
            to.flush().await?;
            return Ok(Next::Upgrade);
        }
        if head.status < 200 {
            continue;
        }
        let body = http1::response_body(method, &head);
        from.copy_body(body, to, budget, &traffic.received).await?;
        to.flush().await?;
        let close = body == Body::ToEnd || head.http10 || http1::wants_close(&head.headers);
        return Ok(if close { Next::Close } else { Next::KeepAlive });
    }
}

/// A tunnel's end: over the budget is a refusal, a peer going away is how tunnels end.
fn ended(result: io::Result<()>) -> Result<(), String> {
    match result {
        Ok(()) => Ok(()),
        Err(e)
            if e.get_ref()
                .is_some_and(|inner| inner.is::<pump::OverLimit>()) =>
        {
            Err(e.to_string())
        }
        Err(_) => Ok(()),
    }
}

/// The client's stream with the bytes already read past the CONNECT head in front.
struct Rewind {
    early: Vec<u8>,
    inner: TcpStream,
}

impl AsyncRead for Rewind {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.early.is_empty() {
            let n = self.early.len().min(buf.remaining());
            buf.put_slice(&self.early[..n]);
            self.early.drain(..n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[path = "intercept_tests.rs"]
mod tests;
