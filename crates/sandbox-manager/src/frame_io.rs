//! Frames read and written by the server's async side: whole frames on the zygote's control
//! channel, and a cancel-safe reader for a session's socket. The framing itself is the
//! protocol's ([`toolgate_sandbox::frame`]).

use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt};
use toolgate_sandbox::frame::{FrameError, MAX_FRAME_BYTES, check_len, decode};

/// Reads and decodes one frame. `Err(Closed)` at a clean end of stream.
pub async fn read<T: DeserializeOwned>(
    input: &mut (impl AsyncRead + Unpin),
) -> Result<T, FrameError> {
    let mut header = [0u8; 4];
    match input.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(FrameError::Closed);
        }
        Err(e) => return Err(e.into()),
    }
    let mut body = vec![0u8; check_len(header)?];
    input
        .read_exact(&mut body)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => FrameError::Truncated,
            _ => FrameError::Io(e),
        })?;
    decode(&body)
}

/// Splits a byte stream into frame bodies. Unlike `frame_io::read`, dropping a pending
/// `next()` loses nothing (the bytes read so far stay in the buffer), so it can sit in a
/// `select!` next to a deadline. A frame's length, once checked against the caller's limit, is
/// reserved at once: that is address space, whose pages become memory only as bytes arrive (a
/// frame announced at 60 MiB whose bytes never come costs what came), and the buffer is never
/// copied to grow (growing it by doubling cost the old and the new buffer at once: +100 MiB of
/// peak memory for a 60 MiB frame, against +60 MiB).
#[derive(Debug, Default)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
}

/// What the reader keeps allocated between frames; a larger buffer (after a big result) is
/// given back.
const KEEP_CAPACITY: usize = 64 * 1024;

impl FrameReader {
    /// The next frame body, of at most `limit` bytes (a longer one is `Oversized`, refused from
    /// its header); `Ok(None)` at a clean end of stream (between frames).
    pub(crate) async fn next(
        &mut self,
        input: &mut (impl AsyncRead + Unpin),
        limit: u32,
    ) -> Result<Option<Vec<u8>>, FrameError> {
        loop {
            if let Some(body) = self.take(limit)? {
                return Ok(Some(body));
            }
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve_exact(KEEP_CAPACITY);
            }
            // read_buf is cancel-safe: when it has not completed, no byte was consumed
            let n = input.read_buf(&mut self.buf).await?;
            if n == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(FrameError::Truncated)
                };
            }
        }
    }

    /// Reads what `stream` holds now into the buffer, without waiting (`WouldBlock` when it
    /// holds nothing); [`Self::take`] then gives the frames read whole.
    pub(crate) fn try_fill(&mut self, stream: &tokio::net::UnixStream) -> std::io::Result<usize> {
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve_exact(KEEP_CAPACITY);
        }
        stream.try_read_buf(&mut self.buf)
    }

    /// Whether bytes of a next frame were read already.
    pub(crate) fn has_pending(&self) -> bool {
        !self.buf.is_empty()
    }

    /// The next frame body if the buffer holds all of it, of at most `limit` bytes.
    pub(crate) fn take(&mut self, limit: u32) -> Result<Option<Vec<u8>>, FrameError> {
        let Some(header) = self.buf.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*header);
        if len > limit.min(MAX_FRAME_BYTES) {
            // checked before reading on, so a forged length cannot make us allocate 4 GiB
            return Err(FrameError::Oversized(u64::from(len)));
        }
        let total = 4 + len as usize;
        if self.buf.len() < total {
            self.buf.reserve_exact(total - self.buf.len());
            return Ok(None);
        }
        if total < KEEP_CAPACITY {
            // a small frame (most are): copied out, the buffer kept for the next ones
            let body = self.buf[4..total].to_vec();
            self.buf.drain(..total);
            return Ok(Some(body));
        }
        // a large one is handed over whole rather than copied; what follows it gets a new buffer
        let rest = self.buf.get(total..).unwrap_or_default().to_vec();
        let mut body = std::mem::replace(&mut self.buf, rest);
        body.truncate(total);
        body.drain(..4);
        if self.buf.capacity() < KEEP_CAPACITY {
            self.buf.reserve_exact(KEEP_CAPACITY - self.buf.len());
        }
        Ok(Some(body))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::{Value, json};
    use toolgate_sandbox::frame::encode;

    #[tokio::test]
    async fn async_side_speaks_the_same_frames() {
        let wire = encode(&json!({"op": "pong"})).unwrap();
        let blocking: Value = toolgate_sandbox::frame::read(&mut wire.as_slice()).unwrap();
        assert_eq!(blocking, json!({"op": "pong"}));
        let again: Value = read(&mut wire.as_slice()).await.unwrap();
        assert_eq!(again, blocking);
        assert!(matches!(
            read::<Value>(&mut &[0u8; 0][..]).await,
            Err(FrameError::Closed)
        ));
    }

    #[tokio::test]
    async fn reader_splits_frames_and_refuses_forged_lengths() {
        let mut wire = encode(&json!({"op": "pong", "id": 1})).unwrap();
        wire.extend(
            encode(&json!({"op": "output", "id": 2, "stream": "stdout", "data": "x"})).unwrap(),
        );
        let mut reader = FrameReader::default();
        let mut input = wire.as_slice();
        let first = reader
            .next(&mut input, MAX_FRAME_BYTES)
            .await
            .unwrap()
            .unwrap();
        let first: serde_json::Value = serde_json::from_slice(&first).unwrap();
        assert_eq!(first["op"], "pong");
        // the second frame is longer than 16 bytes: refused from its header
        assert!(matches!(
            reader.next(&mut input, 16).await,
            Err(FrameError::Oversized(_))
        ));
        let body = reader.next(&mut input, 64).await.unwrap().unwrap();
        assert!(body.starts_with(b"{"));
        assert!(!reader.has_pending());
        assert!(
            reader
                .next(&mut input, MAX_FRAME_BYTES)
                .await
                .unwrap()
                .is_none()
        );

        let mut forged = FrameReader::default();
        let bytes = [0xffu8, 0xff, 0xff, 0xff, b'{'];
        assert!(matches!(
            forged.next(&mut &bytes[..], MAX_FRAME_BYTES).await,
            Err(FrameError::Oversized(_))
        ));
        let mut short = FrameReader::default();
        assert!(matches!(
            short
                .next(&mut &[0u8, 0, 0, 5, b'{'][..], MAX_FRAME_BYTES)
                .await,
            Err(FrameError::Truncated)
        ));
    }
}
