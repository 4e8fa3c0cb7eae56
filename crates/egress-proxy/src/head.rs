//! A request head as a session's code sends it to the proxy, read within bounds: at most
//! [`MAX_HEAD_BYTES`] and [`MAX_HEADERS`] headers, within [`HEAD_TIMEOUT`].

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Longest request head read.
pub(crate) const MAX_HEAD_BYTES: usize = 32 * 1024;
/// Most headers in one head.
pub(crate) const MAX_HEADERS: usize = 100;
/// How long a head may take to arrive.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) method: String,
    pub(crate) target: String,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
}

/// Why a head could not be read. The message is for the session's code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeadError {
    #[error("the request head is longer than {MAX_HEAD_BYTES} bytes")]
    TooLong,
    #[error("the request head did not arrive within {} s", HEAD_TIMEOUT.as_secs())]
    Slow,
    #[error("the connection closed before a whole request head arrived")]
    Closed,
    #[error("not an HTTP/1.x request head: {0}")]
    Malformed(String),
    #[error("reading the request failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads one head from `stream`; also returns the bytes read past its end (the start of a
/// body or of a tunnel's traffic), which belong to what follows.
pub(crate) async fn read_head(
    stream: &mut (impl AsyncRead + Unpin),
) -> Result<(Head, Vec<u8>), HeadError> {
    tokio::time::timeout(HEAD_TIMEOUT, read_head_now(stream))
        .await
        .map_err(|_| HeadError::Slow)?
}

async fn read_head_now(
    stream: &mut (impl AsyncRead + Unpin),
) -> Result<(Head, Vec<u8>), HeadError> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some((head, used)) = parse(&buffer)? {
            let rest = buffer.split_off(used);
            return Ok((head, rest));
        }
        if buffer.len() > MAX_HEAD_BYTES {
            return Err(HeadError::TooLong);
        }
    }
}

/// The head at the start of `bytes`, and its length; `None` while it is incomplete.
pub(crate) fn parse(bytes: &[u8]) -> Result<Option<(Head, usize)>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let used = match request.parse(bytes) {
        Ok(httparse::Status::Complete(used)) => used,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(HeadError::Malformed(e.to_string())),
    };
    if used > MAX_HEAD_BYTES {
        return Err(HeadError::TooLong);
    }
    let head = Head {
        method: request.method.unwrap_or_default().to_owned(),
        target: request.path.unwrap_or_default().to_owned(),
        headers: request
            .headers
            .iter()
            .map(|h| (h.name.to_owned(), h.value.to_vec()))
            .collect(),
    };
    Ok(Some((head, used)))
}

impl Head {
    /// The value of header `name` (the first), if it is there.
    #[allow(dead_code)] // read by the interception of bound secrets
    pub(crate) fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

/// `host:port` of a `CONNECT` target or of an absolute URL's authority (`[v6]:port` too);
/// `default_port` when it has none.
pub(crate) fn host_port(authority: &str, default_port: u16) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(port) => port.parse().ok()?,
            None if after.is_empty() => default_port,
            None => return None,
        };
        (host.to_owned(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), port.parse().ok()?),
            None => (authority.to_owned(), default_port),
        }
    };
    let valid = !host.is_empty()
        && host.len() <= 253
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':'));
    (valid && port != 0).then_some((host, port))
}

/// An absolute-form `http://` target split into its host, port and origin-form path.
pub(crate) fn absolute_http(target: &str) -> Option<(String, u16, String)> {
    let rest = target
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case("http://"))
        .map(|_| &target[7..])?;
    let (authority, path) = match rest.find(['/', '?']) {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    if authority.contains('@') {
        return None;
    }
    let (host, port) = host_port(authority, 80)?;
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    Some((host, port, path))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_head_and_what_follows_it_are_read_apart() {
        let bytes =
            b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n\x16\x03\x01";
        let (head, rest) = read_head(&mut &bytes[..]).await.unwrap();
        assert_eq!(head.method, "CONNECT");
        assert_eq!(head.target, "example.org:443");
        assert_eq!(head.header("host"), Some(&b"example.org:443"[..]));
        assert_eq!(rest, b"\x16\x03\x01");
    }

    #[tokio::test]
    async fn hostile_heads_get_errors_not_hangs() {
        let long = format!(
            "GET http://x/ HTTP/1.1\r\nA: {}\r\n\r\n",
            "a".repeat(40_000)
        );
        assert!(matches!(
            read_head(&mut long.as_bytes()).await,
            Err(HeadError::TooLong)
        ));
        let endless = "a".repeat(40_000);
        assert!(read_head(&mut endless.as_bytes()).await.is_err());
        assert!(matches!(
            read_head(&mut &b"GET / HTTP/1.1\r\n"[..]).await,
            Err(HeadError::Closed)
        ));
        assert!(matches!(
            read_head(&mut &b"\x00\x01\x02 junk\r\n\r\n"[..]).await,
            Err(HeadError::Malformed(_))
        ));
        let many: String = (0..200).map(|i| format!("H{i}: v\r\n")).collect();
        let many = format!("GET http://x/ HTTP/1.1\r\n{many}\r\n");
        assert!(read_head(&mut many.as_bytes()).await.is_err());
    }

    #[test]
    fn targets_are_split_strictly() {
        assert_eq!(
            host_port("example.org:443", 80),
            Some(("example.org".into(), 443))
        );
        assert_eq!(host_port("[::1]:8080", 80), Some(("::1".into(), 8080)));
        assert_eq!(
            host_port("example.org", 80),
            Some(("example.org".into(), 80))
        );
        assert_eq!(host_port("example.org:0", 80), None);
        assert_eq!(host_port("example.org:99999", 80), None);
        assert_eq!(host_port("exa mple.org:80", 80), None);
        assert_eq!(host_port(":80", 80), None);
        assert_eq!(
            absolute_http("http://Example.org:8080/a?b=c"),
            Some(("Example.org".into(), 8080, "/a?b=c".into()))
        );
        assert_eq!(
            absolute_http("http://example.org"),
            Some(("example.org".into(), 80, "/".into()))
        );
        assert_eq!(absolute_http("http://user:pw@example.org/"), None);
        assert_eq!(absolute_http("https://example.org/"), None);
        assert_eq!(absolute_http("/relative"), None);
    }
}
