//! HTTP/1.1 as the proxy reads it inside a terminated tunnel: heads read within the bounds of
//! [`crate::head`], and bodies moved by their framing (a length, chunks, or to the end), every
//! byte charged to the run's budget and counted.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::head::{self, HEAD_TIMEOUT, Head, HeadError, MAX_HEAD_BYTES, MAX_HEADERS};
use crate::pump::Budget;

/// Bytes read at once.
const CHUNK: usize = 64 * 1024;
/// Longest chunk-size line or trailer line.
const MAX_LINE: usize = 4096;

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Body {
    None,
    Length(u64),
    Chunked,
    /// Until the connection closes (a response only).
    ToEnd,
}

/// A response head: its status and the bytes to pass on as they came.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    pub(crate) status: u16,
    pub(crate) http10: bool,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
    pub(crate) raw: Vec<u8>,
}

/// A reader that keeps what it read past the last message part it gave out.
pub(crate) struct Buffered<R> {
    inner: R,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Buffered<R> {
    pub(crate) fn new(inner: R) -> Self {
        Self {
            inner,
            buf: Vec::new(),
        }
    }

    async fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = vec![0u8; CHUNK];
        let n = self.inner.read(&mut chunk).await?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// The next request head; `None` when the peer closed between requests.
    pub(crate) async fn request_head(&mut self) -> Result<Option<Head>, HeadError> {
        tokio::time::timeout(HEAD_TIMEOUT, async {
            loop {
                if let Some((head, used)) = head::parse(&self.buf)? {
                    self.buf.drain(..used);
                    return Ok(Some(head));
                }
                if self.buf.len() > MAX_HEAD_BYTES {
                    return Err(HeadError::TooLong);
                }
                let read = match self.fill().await {
                    // a TLS peer that closes without close_notify between requests is done
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
                    read => read?,
                };
                if read == 0 {
                    return if self.buf.is_empty() {
                        Ok(None)
                    } else {
                        Err(HeadError::Closed)
                    };
                }
            }
        })
        .await
        .map_err(|_| HeadError::Slow)?
    }

    /// The next response head.
    pub(crate) async fn response_head(&mut self) -> Result<ResponseHead, HeadError> {
        loop {
            if let Some(head) = parse_response(&mut self.buf)? {
                return Ok(head);
            }
            if self.buf.len() > MAX_HEAD_BYTES {
                return Err(HeadError::TooLong);
            }
            if self.fill().await? == 0 {
                return Err(HeadError::Closed);
            }
        }
    }

    /// Moves one body framed as `body` to `to`.
    pub(crate) async fn copy_body(
        &mut self,
        body: Body,
        to: &mut (impl AsyncWrite + Unpin),
        budget: &Budget,
        moved: &AtomicU64,
    ) -> io::Result<()> {
        match body {
            Body::None => Ok(()),
            Body::Length(n) => self.copy_exact(n, to, budget, moved).await,
            Body::Chunked => self.copy_chunked(to, budget, moved).await,
            Body::ToEnd => {
                loop {
                    if self.buf.is_empty() && self.fill().await? == 0 {
                        break;
                    }
                    let taken = std::mem::take(&mut self.buf);
                    pass(&taken, to, budget, moved).await?;
                }
                to.flush().await
            }
        }
    }

    /// Moves what is left unread and then everything else, both ways being the caller's.
    pub(crate) async fn copy_rest(
        &mut self,
        to: &mut (impl AsyncWrite + Unpin),
        budget: &Budget,
        moved: &AtomicU64,
    ) -> io::Result<()> {
        self.copy_body(Body::ToEnd, to, budget, moved).await?;
        let _ = to.shutdown().await;
        Ok(())
    }

    async fn copy_exact(
        &mut self,
        mut left: u64,
        to: &mut (impl AsyncWrite + Unpin),
        budget: &Budget,
        moved: &AtomicU64,
    ) -> io::Result<()> {
        while left > 0 {
            if self.buf.is_empty() && self.fill().await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let take = usize::try_from(left)
                .unwrap_or(usize::MAX)
                .min(self.buf.len());
            let part: Vec<u8> = self.buf.drain(..take).collect();
            pass(&part, to, budget, moved).await?;
            left -= take as u64;
        }
        to.flush().await
    }

    async fn copy_chunked(
        &mut self,
        to: &mut (impl AsyncWrite + Unpin),
        budget: &Budget,
        moved: &AtomicU64,
    ) -> io::Result<()> {
        loop {
            let line = self.line().await?;
            let size = chunk_size(&line)?;
            pass(&line, to, budget, moved).await?;
            if size == 0 {
                // trailers, then the empty line that ends the message
                loop {
                    let trailer = self.line().await?;
                    pass(&trailer, to, budget, moved).await?;
                    if trailer == b"\r\n" || trailer == b"\n" {
                        return to.flush().await;
                    }
                }
            }
            self.copy_exact(size + 2, to, budget, moved).await?;
        }
    }

    /// One line, its line end included, at most [`MAX_LINE`] bytes.
    async fn line(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                return Ok(self.buf.drain(..=end).collect());
            }
            if self.buf.len() > MAX_LINE {
                return Err(invalid("a chunk line is too long"));
            }
            if self.fill().await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }
}

async fn pass(
    bytes: &[u8],
    to: &mut (impl AsyncWrite + Unpin),
    budget: &Budget,
    moved: &AtomicU64,
) -> io::Result<()> {
    budget.charge(bytes.len()).await.map_err(io::Error::other)?;
    to.write_all(bytes).await?;
    moved.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    Ok(())
}

fn chunk_size(line: &[u8]) -> io::Result<u64> {
    let text = std::str::from_utf8(line).map_err(|_| invalid("a chunk size is not text"))?;
    let digits = text.trim_end().split(';').next().unwrap_or_default().trim();
    if digits.is_empty() || digits.len() > 15 {
        return Err(invalid("a chunk size is malformed"));
    }
    u64::from_str_radix(digits, 16).map_err(|_| invalid("a chunk size is malformed"))
}

fn invalid(message: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

fn parse_response(buf: &mut Vec<u8>) -> Result<Option<ResponseHead>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let used = match response.parse(buf) {
        Ok(httparse::Status::Complete(used)) => used,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(HeadError::Malformed(e.to_string())),
    };
    let head = ResponseHead {
        status: response.code.unwrap_or_default(),
        http10: response.version == Some(0),
        headers: response
            .headers
            .iter()
            .map(|h| (h.name.to_owned(), h.value.to_vec()))
            .collect(),
        raw: Vec::new(),
    };
    let raw = buf.drain(..used).collect();
    Ok(Some(ResponseHead { raw, ..head }))
}

/// A request's body framing; `Err` for one the proxy will not pass on (both a length and
/// chunks, a malformed length, an encoding other than chunked).
pub(crate) fn request_body(head: &Head) -> Result<Body, String> {
    match framing(&head.headers)? {
        Body::ToEnd => Err("a request's Transfer-Encoding must end with chunked".to_owned()),
        body => Ok(body),
    }
}

/// A response's body framing, given the request's method.
pub(crate) fn response_body(request_method: &str, response: &ResponseHead) -> Body {
    let bodiless = request_method.eq_ignore_ascii_case("HEAD")
        || response.status < 200
        || response.status == 204
        || response.status == 304;
    if bodiless {
        return Body::None;
    }
    framing(&response.headers).unwrap_or(Body::ToEnd)
}

fn framing(headers: &[(String, Vec<u8>)]) -> Result<Body, String> {
    let values = |name: &'static str| -> Vec<String> {
        headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| String::from_utf8_lossy(v).trim().to_ascii_lowercase())
            .collect()
    };
    let encodings = values("transfer-encoding");
    let lengths = values("content-length");
    if !encodings.is_empty() {
        if !lengths.is_empty() {
            return Err("a message with both Content-Length and Transfer-Encoding".to_owned());
        }
        let last = encodings.join(",");
        let chunked = last
            .rsplit(',')
            .next()
            .is_some_and(|e| e.trim() == "chunked");
        return Ok(if chunked { Body::Chunked } else { Body::ToEnd });
    }
    let Some(first) = lengths.first() else {
        return Ok(Body::None);
    };
    if lengths.iter().any(|l| l != first) {
        return Err("a message with differing Content-Length headers".to_owned());
    }
    first
        .parse::<u64>()
        .ok()
        .filter(|_| first.bytes().all(|b| b.is_ascii_digit()))
        .map(|n| if n == 0 { Body::None } else { Body::Length(n) })
        .ok_or_else(|| "a malformed Content-Length".to_owned())
}

/// Whether a message asks for its connection to close after it.
pub(crate) fn wants_close(headers: &[(String, Vec<u8>)]) -> bool {
    headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("connection")
            && String::from_utf8_lossy(v)
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("close"))
    })
}

/// A request head as it goes to the host (HTTP/1.1, headers as given).
pub(crate) fn request_bytes(head: &Head) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(head.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(head.target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &head.headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}
