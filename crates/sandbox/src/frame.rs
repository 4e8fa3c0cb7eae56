//! Frames: a 4-byte big-endian length, then that many bytes of UTF-8 JSON. The length is checked
//! against a ceiling before anything is allocated, so a forged length cannot exhaust memory.

use std::io::{Read, Write};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The largest frame any party accepts: enough for 1 MiB of output per stream, images and files.
pub const MAX_FRAME_BYTES: u32 = 64 * 1024 * 1024;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// the peer announced more bytes than allowed
    #[error("frame of {0} bytes exceeds the limit of {MAX_FRAME_BYTES}")]
    Oversized(u64),
    /// the stream ended inside a frame
    #[error("the stream ended inside a frame")]
    Truncated,
    /// the stream ended cleanly between frames
    #[error("the peer closed the stream")]
    Closed,
    /// the bytes are not the expected JSON
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// reading or writing failed
    #[error("frame I/O failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Serialises `message` into one frame.
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    let body = serde_json::to_vec(message).map_err(|e| FrameError::Malformed(e.to_string()))?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|len| *len <= MAX_FRAME_BYTES)
        .ok_or(FrameError::Oversized(body.len() as u64))?;
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Decodes one frame body.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    serde_json::from_slice(body).map_err(|e| FrameError::Malformed(e.to_string()))
}

/// Writes `message` as one frame (blocking).
pub fn write<T: Serialize>(out: &mut impl Write, message: &T) -> Result<(), FrameError> {
    out.write_all(&encode(message)?)?;
    out.flush()?;
    Ok(())
}

/// Reads one frame body (blocking). `Err(Closed)` at a clean end of stream.
pub fn read_body(input: &mut impl Read) -> Result<Vec<u8>, FrameError> {
    let mut header = [0u8; 4];
    match read_full(input, &mut header)? {
        0 => return Err(FrameError::Closed),
        4 => {}
        _ => return Err(FrameError::Truncated),
    }
    let len = check_len(header)?;
    let mut body = vec![0u8; len];
    if read_full(input, &mut body)? != len {
        return Err(FrameError::Truncated);
    }
    Ok(body)
}

/// Reads and decodes one frame (blocking).
pub fn read<T: DeserializeOwned>(input: &mut impl Read) -> Result<T, FrameError> {
    decode(&read_body(input)?)
}

/// The body length a frame header announces, refused above [`MAX_FRAME_BYTES`] before anything
/// is allocated.
pub fn check_len(header: [u8; 4]) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(header);
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::Oversized(u64::from(len)));
    }
    usize::try_from(len).map_err(|_| FrameError::Oversized(u64::from(len)))
}

/// Fills `buf` as far as the stream allows; returns how many bytes were read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn round_trips_and_reports_clean_close() {
        let mut wire = Vec::new();
        write(&mut wire, &json!({"op": "ping"})).unwrap();
        write(&mut wire, &json!({"op": "exec", "code": "1+1"})).unwrap();
        let mut input = wire.as_slice();
        assert_eq!(read::<Value>(&mut input).unwrap(), json!({"op": "ping"}));
        assert_eq!(read::<Value>(&mut input).unwrap()["code"], "1+1");
        assert!(matches!(read::<Value>(&mut input), Err(FrameError::Closed)));
    }

    #[test]
    fn forged_and_broken_frames_are_refused_without_allocating() {
        let forged = [0xff, 0xff, 0xff, 0xff, b'{'];
        assert!(matches!(
            read_body(&mut &forged[..]),
            Err(FrameError::Oversized(4_294_967_295))
        ));
        let short_header = [0u8, 0];
        assert!(matches!(
            read_body(&mut &short_header[..]),
            Err(FrameError::Truncated)
        ));
        let short_body = [0u8, 0, 0, 9, b'{', b'}'];
        assert!(matches!(
            read_body(&mut &short_body[..]),
            Err(FrameError::Truncated)
        ));
        let not_json = [0u8, 0, 0, 3, b'a', b'b', b'c'];
        assert!(matches!(
            read::<Value>(&mut &not_json[..]),
            Err(FrameError::Malformed(_))
        ));
        let invalid_utf8 = [0u8, 0, 0, 3, b'"', 0xff, b'"'];
        assert!(matches!(
            read::<Value>(&mut &invalid_utf8[..]),
            Err(FrameError::Malformed(_))
        ));
    }
}
