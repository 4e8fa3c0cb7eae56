//! What crosses the channel between a front end and a node: frames of a run (both ways, on one
//! HTTP/2 stream) and the plain JSON of the other requests.
//!
//! A frame is a 4-byte big-endian length, a one-byte tag and the payload: JSON, except a file's
//! bytes, which travel raw. The length is checked against [`MAX_FRAME_BYTES`] before anything is
//! kept, and the reader holds at most one frame, so a peer cannot make the other side allocate
//! more than that.

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use serde::{Deserialize, Serialize};
use toolgate_sandbox::upcall::{Upcall, UpcallAnswer};
use toolgate_sandbox::{
    EgressGrant, Interruption, Limits, MAX_FRAME_BYTES, RunOutcome, SandboxSessionsError, Work,
};

/// The path prefix of every request a node serves.
pub const PREFIX: &str = "/node/v1/";

/// The header of a `read` answer holding the file's whole size.
pub const SIZE_HEADER: &str = "x-toolgate-size";

/// Which kind of frame follows its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    /// front end → node, first: the [`RunHeader`]
    Start = 1,
    /// front end → node, after the start, one per file: a path length (u32), the path, the bytes
    File = 2,
    /// front end → node: an [`UpcallReply`]
    UpcallAnswer = 3,
    /// front end → node: an [`UpcallPiece`] of a streamed answer
    UpcallPiece = 4,
    /// front end → node: interrupt the run (no payload)
    Cancel = 5,
    /// node → front end: an [`OutputChunk`]
    Output = 10,
    /// node → front end: an [`UpcallCall`]
    Upcall = 11,
    /// node → front end, last: a [`Done`]
    Done = 12,
}

impl Tag {
    fn from_byte(byte: u8) -> Option<Self> {
        Some(match byte {
            1 => Self::Start,
            2 => Self::File,
            3 => Self::UpcallAnswer,
            4 => Self::UpcallPiece,
            5 => Self::Cancel,
            10 => Self::Output,
            11 => Self::Upcall,
            12 => Self::Done,
            _ => return None,
        })
    }
}

/// A run as it travels, without its files (which follow as [`Tag::File`] frames), its output
/// channel, upcall handler and cancellation (which become frames). The environment's values
/// may be secrets: they go to the node running the call and nowhere else, and `Debug` shows
/// only their names.
#[derive(Clone, Serialize, Deserialize)]
pub struct RunHeader {
    /// the account the session belongs to
    pub account: String,
    /// the caller's session id, or none for a fresh session closed after the run
    pub session_id: Option<String>,
    /// what to run
    pub work: Work,
    /// the run's limits
    pub limits: Limits,
    /// how many [`Tag::File`] frames follow
    pub files: u32,
    /// the run's own environment
    pub env: BTreeMap<String, String>,
    /// the front end wants output while the run goes on
    pub output: bool,
    /// the front end answers upcalls
    pub upcalls: bool,
    /// never start a session
    pub existing_only: bool,
    /// keep a stream's whole in a workspace file once it passes its inline limit (absent from
    /// an older front end's header: no)
    #[serde(default)]
    pub spill: bool,
    /// what the run's code may reach through the node's egress proxy (absent: nothing)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressGrant>,
    /// the node's incarnation the front end placed the run on: a node that is no longer it
    /// refuses the run as [`ErrorKind::Stale`], running nothing
    pub incarnation: i64,
}

impl std::fmt::Debug for RunHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHeader")
            .field("account", &self.account)
            .field("session_id", &self.session_id)
            .field("files", &self.files)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// An upcall the code made. Its origin is the run's own session, which the front end knows
/// already: the node does not say it again.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpcallCall {
    /// its number within the run
    pub id: u32,
    /// what was asked
    pub upcall: Upcall,
}

/// The answer to the upcall `id`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpcallReply {
    /// the upcall's number
    pub id: u32,
    /// value or error
    pub answer: UpcallAnswer,
}

/// A piece of the streamed answer to the upcall `id`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpcallPiece {
    /// the upcall's number
    pub id: u32,
    /// the text
    pub piece: String,
}

/// How a run ended, or why nothing ran.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Done {
    /// the outcome, with the interruption the node made (which the session's own frames never
    /// carry, so its outcome's serde skips reading it)
    Ran {
        /// what came of the run
        outcome: Box<RunOutcome>,
        /// why the node interrupted it, if it did
        interrupted: Option<Interruption>,
    },
    /// the seam's error, in words for the caller
    Error(WireError),
}

/// [`SandboxSessionsError`] as it travels: its kind and its caller-facing message (the source
/// of an `unavailable` stays in the node's log).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    /// which error
    pub kind: ErrorKind,
    /// what the caller reads
    pub message: String,
}

/// The kinds of [`SandboxSessionsError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// nothing ran; the message says what to change
    Refused,
    /// the run started and its session was lost
    Failed,
    /// the node could not serve it; nothing ran
    Unavailable,
    /// the node is not the incarnation the run was placed on (it restarted, or lost its lease
    /// and fenced itself); nothing ran, and the front end places the run again
    Stale,
}

impl From<&SandboxSessionsError> for WireError {
    fn from(error: &SandboxSessionsError) -> Self {
        let kind = match error {
            SandboxSessionsError::Refused(_) => ErrorKind::Refused,
            SandboxSessionsError::Failed(_) => ErrorKind::Failed,
            SandboxSessionsError::Unavailable(_) => ErrorKind::Unavailable,
        };
        Self {
            kind,
            message: error.to_string(),
        }
    }
}

impl From<WireError> for SandboxSessionsError {
    fn from(error: WireError) -> Self {
        match error.kind {
            ErrorKind::Refused => Self::Refused(error.message),
            ErrorKind::Failed => Self::Failed(error.message),
            ErrorKind::Unavailable | ErrorKind::Stale => Self::Unavailable(error.message.into()),
        }
    }
}

/// A front end's word on the node's lease (`lease`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaseRequest {
    /// the incarnation renewed or revoked; `None`: only asking which the node is
    pub incarnation: Option<i64>,
    /// how long from now the node may count on it
    pub valid_for_ms: u64,
    /// the incarnation's lease lapsed in the database: fence now
    pub revoke: bool,
}

/// The node's answer to a [`LeaseRequest`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaseAnswer {
    /// the incarnation the node is now (after the request), if any
    pub incarnation: Option<i64>,
    /// what it holds
    pub load: crate::NodeLoad,
    /// it takes no new sessions
    pub draining: bool,
    /// its drain ended: its sessions are in their checkpoints, and front ends give them up
    #[serde(default)]
    pub drained: bool,
}

/// What a drain did (`drain`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DrainAnswer {
    /// sessions hibernated
    pub hibernated: u64,
}

/// A `read_file` request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadFile {
    /// the account
    pub account: String,
    /// its session
    pub session_id: String,
    /// the file, relative to the workspace
    pub path: String,
    /// the most bytes wanted
    pub max_bytes: u64,
}

/// A session named by its account and id (`close`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionRef {
    /// the account
    pub account: String,
    /// its session
    pub session_id: String,
}

/// An account (`list`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AccountRef {
    /// the account
    pub account: String,
}

/// Why frames could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WireReadError {
    /// a frame longer than allowed was announced
    #[error("a frame of {0} bytes is over the limit")]
    Oversized(u64),
    /// an unknown tag, an empty frame or a payload that is not what its tag says
    #[error("a malformed frame: {0}")]
    Malformed(String),
    /// the stream broke (reset, connection lost)
    #[error("the stream broke: {0}")]
    Broken(String),
    /// the stream ended inside a frame
    #[error("the stream ended inside a frame")]
    Truncated,
}

/// One frame of `tag` with `payload`.
pub fn frame(tag: Tag, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(payload.len() + 5);
    // a payload is bounded by what made it (the seam's caps), far below 4 GiB
    out.put_u32(u32::try_from(payload.len() + 1).unwrap_or(u32::MAX));
    out.put_u8(tag as u8);
    out.put_slice(payload);
    out.freeze()
}

/// One frame of `tag` holding `message` as JSON.
pub fn json_frame<T: Serialize>(tag: Tag, message: &T) -> Bytes {
    // the wire's types always serialise (no maps with non-string keys, no failing impls)
    let payload = serde_json::to_vec(message).unwrap_or_default();
    frame(tag, &payload)
}

/// A file's frame: its path's length, its path, its bytes.
pub fn file_frame(path: &str, content: &[u8]) -> Bytes {
    let mut payload = Vec::with_capacity(4 + path.len() + content.len());
    payload.extend_from_slice(&u32::try_from(path.len()).unwrap_or(u32::MAX).to_be_bytes());
    payload.extend_from_slice(path.as_bytes());
    payload.extend_from_slice(content);
    frame(Tag::File, &payload)
}

/// Splits a file frame's payload into its path and bytes.
pub fn split_file(payload: &Bytes) -> Result<(String, Vec<u8>), WireReadError> {
    let bad = || WireReadError::Malformed("a file frame".to_owned());
    let mut rest = payload.clone();
    if rest.len() < 4 {
        return Err(bad());
    }
    let path_len = usize::try_from(rest.get_u32()).map_err(|_| bad())?;
    if rest.len() < path_len {
        return Err(bad());
    }
    let path = String::from_utf8(rest.split_to(path_len).to_vec()).map_err(|_| bad())?;
    Ok((path, rest.to_vec()))
}

/// Parses a frame's JSON payload as `T`.
pub fn parse<T: serde::de::DeserializeOwned>(tag: Tag, payload: &[u8]) -> Result<T, WireReadError> {
    serde_json::from_slice(payload).map_err(|e| WireReadError::Malformed(format!("{tag:?}: {e}")))
}

/// Reads frames from an HTTP body, one at a time, holding at most one frame's bytes.
pub struct FrameReader<B> {
    body: B,
    buffer: BytesMut,
    ended: bool,
}

impl<B> FrameReader<B>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    /// Frames of `body`.
    pub fn new(body: B) -> Self {
        Self {
            body,
            buffer: BytesMut::new(),
            ended: false,
        }
    }

    /// The next frame; `Ok(None)` at a clean end between frames.
    pub async fn next(&mut self) -> Result<Option<(Tag, Bytes)>, WireReadError> {
        loop {
            if let Some(frame) = self.take()? {
                return Ok(Some(frame));
            }
            if self.ended {
                return if self.buffer.is_empty() {
                    Ok(None)
                } else {
                    Err(WireReadError::Truncated)
                };
            }
            match self.body.frame().await {
                None => self.ended = true,
                Some(Err(e)) => return Err(WireReadError::Broken(e.to_string())),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    fn take(&mut self) -> Result<Option<(Tag, Bytes)>, WireReadError> {
        if self.buffer.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([
            self.buffer[0],
            self.buffer[1],
            self.buffer[2],
            self.buffer[3],
        ]);
        // a file's frame may carry a path and its header beside the largest frame's payload
        if len > MAX_FRAME_BYTES + 8192 {
            return Err(WireReadError::Oversized(u64::from(len)));
        }
        if len == 0 {
            return Err(WireReadError::Malformed("an empty frame".to_owned()));
        }
        let len = len as usize;
        if self.buffer.len() < 4 + len {
            self.buffer.reserve(4 + len - self.buffer.len());
            return Ok(None);
        }
        self.buffer.advance(4);
        let mut body = self.buffer.split_to(len).freeze();
        let byte = body.get_u8();
        let tag = Tag::from_byte(byte)
            .ok_or_else(|| WireReadError::Malformed(format!("unknown tag {byte}")))?;
        Ok(Some((tag, body)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::Frame;

    fn body_of(
        chunks: Vec<Vec<u8>>,
    ) -> impl hyper::body::Body<Data = Bytes, Error = std::convert::Infallible> + Unpin {
        let frames = chunks
            .into_iter()
            .map(|c| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(c))));
        StreamBody::new(futures::stream::iter(frames)).boxed_unsync()
    }

    #[tokio::test]
    async fn frames_split_anywhere_come_back_whole() {
        let mut all = Vec::new();
        all.extend_from_slice(&json_frame(Tag::Output, &"hello"));
        all.extend_from_slice(&file_frame("a/b.txt", b"\x00\x01bytes"));
        all.extend_from_slice(&frame(Tag::Cancel, &[]));
        for cut in [1usize, 3, 7, all.len()] {
            let chunks: Vec<Vec<u8>> = all.chunks(cut).map(<[u8]>::to_vec).collect();
            let mut reader = FrameReader::new(body_of(chunks));
            let (tag, payload) = reader.next().await.unwrap().unwrap();
            assert_eq!(tag, Tag::Output);
            assert_eq!(parse::<String>(tag, &payload).unwrap(), "hello");
            let (tag, payload) = reader.next().await.unwrap().unwrap();
            assert_eq!(tag, Tag::File);
            assert_eq!(
                split_file(&payload).unwrap(),
                ("a/b.txt".to_owned(), b"\x00\x01bytes".to_vec())
            );
            assert_eq!(reader.next().await.unwrap().unwrap().0, Tag::Cancel);
            assert!(reader.next().await.unwrap().is_none());
        }
    }

    #[tokio::test]
    async fn hostile_frames_are_refused_before_anything_is_kept() {
        let huge = (MAX_FRAME_BYTES + 10_000).to_be_bytes().to_vec();
        let mut reader = FrameReader::new(body_of(vec![huge]));
        assert!(matches!(
            reader.next().await,
            Err(WireReadError::Oversized(_))
        ));
        let mut reader = FrameReader::new(body_of(vec![vec![0, 0, 0, 0]]));
        assert!(matches!(
            reader.next().await,
            Err(WireReadError::Malformed(_))
        ));
        let mut reader = FrameReader::new(body_of(vec![vec![0, 0, 0, 1, 99]]));
        assert!(matches!(
            reader.next().await,
            Err(WireReadError::Malformed(_))
        ));
        let mut reader = FrameReader::new(body_of(vec![vec![0, 0, 0, 9, 10, 1]]));
        assert!(matches!(reader.next().await, Err(WireReadError::Truncated)));
        for bad in [vec![0u8, 0, 0], vec![0, 0, 0, 200, b'x'], vec![]] {
            assert!(split_file(&Bytes::from(bad)).is_err());
        }
        assert!(parse::<RunHeader>(Tag::Start, b"{\"account\":1}").is_err());
    }

    /// The upcalls of the web, databases and the vault, and their typed answers, cross the
    /// node channel as they left: what a node asks is what the front end answers.
    #[test]
    fn the_web_database_and_vault_upcalls_cross_the_channel_unchanged() {
        use toolgate_sandbox::upcall::{HttpAnswer, SqlAnswer, SqlColumn, SqlValue, UpcallValue};
        let calls = [
            Upcall::Fetch {
                url: "https://example.com/".into(),
                headers: [("A".to_owned(), "{{secret:K}}".to_owned())].into(),
                max_bytes: Some(9),
            },
            Upcall::Http {
                method: "PUT".into(),
                url: "https://example.com/x".into(),
                headers: Default::default(),
                body: Some("b".into()),
                max_bytes: None,
            },
            Upcall::Sql {
                database: "PG".into(),
                query: "select $1".into(),
                params: vec![
                    SqlValue::Integer(1),
                    SqlValue::Null,
                    SqlValue::Text("a".into()),
                ],
                write: true,
                max_rows: None,
            },
            Upcall::Secrets {},
        ];
        for (id, upcall) in (1..).zip(calls) {
            let sent = json_frame(
                Tag::Upcall,
                &UpcallCall {
                    id,
                    upcall: upcall.clone(),
                },
            );
            let read: UpcallCall = parse(Tag::Upcall, &sent[5..]).unwrap();
            assert_eq!((read.id, read.upcall), (id, upcall));
        }
        let page = HttpAnswer {
            status: 500,
            url: "https://example.com/".into(),
            content_type: "text/plain".into(),
            format: "text".into(),
            text: "oops".into(),
            bytes: 4,
            truncated: true,
            headers: vec![("x".into(), "y".into())],
        };
        let table = SqlAnswer {
            database: "mysql".into(),
            columns: vec![SqlColumn {
                name: "j".into(),
                type_name: "json".into(),
            }],
            rows: vec![vec![SqlValue::Json(r#"{"a":[1,{"b":null}]}"#.into())]],
            row_count: 1,
            truncated: false,
            changes: 0,
        };
        let values = [
            UpcallValue::Fetch(page.clone()),
            UpcallValue::Http(page),
            UpcallValue::Sql(table),
            UpcallValue::Secrets(vec!["PG".into()]),
        ];
        for value in values {
            let reply = UpcallReply {
                id: 1,
                answer: UpcallAnswer::Value(value.clone()),
            };
            let sent = json_frame(Tag::UpcallAnswer, &reply);
            let read: UpcallReply = parse(Tag::UpcallAnswer, &sent[5..]).unwrap();
            assert_eq!(read.answer, UpcallAnswer::Value(value));
        }
    }

    #[test]
    fn a_headers_debug_never_shows_an_environment_value() {
        let header = RunHeader {
            account: "a".into(),
            session_id: None,
            work: Work::Bash {
                command: "env".into(),
            },
            limits: toolgate_sandbox::LimitSettings::default()
                .for_call(None)
                .unwrap(),
            files: 0,
            env: BTreeMap::from([("API_KEY".to_owned(), "s3cret-value".to_owned())]),
            output: false,
            upcalls: false,
            existing_only: false,
            spill: false,
            egress: Some(EgressGrant {
                secrets: vec![toolgate_sandbox::EdgeSecret {
                    name: "EDGE".into(),
                    value: "edge-s3cret".into(),
                    hosts: vec!["api.example.org".into()],
                }],
                ..EgressGrant::default()
            }),
            incarnation: 1,
        };
        let shown = format!("{header:?}");
        assert!(
            shown.contains("API_KEY") && !shown.contains("s3cret-value"),
            "{shown}"
        );
        assert!(!format!("{:?}", header.egress).contains("edge-s3cret"));
        // the grant travels whole, value included, to the node that needs it
        let bytes = serde_json::to_vec(&header).unwrap();
        let back: RunHeader = parse(Tag::Start, &bytes).unwrap();
        assert_eq!(back.egress, header.egress);
    }
}
