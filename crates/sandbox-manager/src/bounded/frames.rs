//! The frames a session sends, decoded within the caps of [`super`]. Unknown fields are skipped
//! without being kept (serde's `IgnoredAny`); a field given twice is an error, so nothing is
//! decoded twice.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{
    Capped, ErrorCode, ErrorText, ErrorType, Images, MAX_TABLE_BYTES, Op, OutputData, SignalName,
    SpillPath, SpillTail, Stderr, Stdout, TextHtml, TextPlain, ValuePng,
};
use toolgate_sandbox::{
    DisplayData, ExecOutcome, OutputStream, PyError, RequestKind, SpilledStream,
};

/// A frame's `id`, as far as the server cares: whether it is a given request's number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameId {
    /// `null` or absent
    Null,
    /// a non-negative integer
    Number(u64),
    /// anything else (skipped without being kept)
    Other,
}

struct FrameIdVisitor;

impl<'de> Visitor<'de> for FrameIdVisitor {
    type Value = FrameId;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<FrameId, E> {
        Ok(FrameId::Number(n))
    }
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<FrameId, E> {
        Ok(u64::try_from(n).map_or(FrameId::Other, FrameId::Number))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<FrameId, E> {
        Ok(FrameId::Other)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<FrameId, E> {
        Ok(FrameId::Other)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<FrameId, E> {
        Ok(FrameId::Other)
    }
    fn visit_unit<E: de::Error>(self) -> Result<FrameId, E> {
        Ok(FrameId::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<FrameId, E> {
        Ok(FrameId::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<FrameId, D::Error> {
        deserializer.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FrameId, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(FrameId::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FrameId, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(FrameId::Other)
    }
}

impl<'de> Deserialize<'de> for FrameId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(FrameIdVisitor)
    }
}

fn null_id() -> FrameId {
    FrameId::Null
}

/// What a frame on a session socket is about, read first: a frame of another request or of an
/// op this server does not know is skipped without decoding the rest.
#[derive(Debug, Deserialize)]
pub(crate) struct SessionFrameHead {
    pub op: Capped<Op>,
    #[serde(default = "null_id")]
    pub id: FrameId,
}

/// An `output` frame.
#[derive(Debug, Deserialize)]
pub(crate) struct SessionOutputFrame {
    pub stream: OutputStream,
    pub data: Capped<OutputData>,
}

/// An `upcall` frame: the session's number for the upcall, and its request, decoded into a
/// typed one only after the frame was found small (at most
/// [`MAX_UPCALL_FRAME_BYTES`](super::MAX_UPCALL_FRAME_BYTES)), so that the value cannot be large.
#[derive(Debug, Deserialize)]
pub(crate) struct SessionUpcallFrame {
    pub upcall: u64,
    pub request: serde_json::Value,
}

/// An `error` frame from a session.
#[derive(Debug, Deserialize)]
pub(crate) struct SessionErrorFrame {
    pub code: Capped<ErrorCode>,
    pub message: Capped<ErrorText>,
}

#[derive(Debug, Deserialize)]
struct BoundedDisplay {
    #[serde(rename = "text/plain", default)]
    text_plain: Option<Capped<TextPlain>>,
    #[serde(rename = "text/html", default)]
    text_html: Option<Capped<TextHtml>>,
    #[serde(rename = "image/png", default)]
    image_png: Option<Capped<ValuePng>>,
}

#[derive(Debug, Deserialize)]
struct BoundedError {
    #[serde(rename = "type")]
    error_type: Capped<ErrorType>,
    message: Capped<ErrorText>,
    traceback: Capped<ErrorText>,
}

/// Where a stream's whole was kept: a workspace path and the stream's last bytes.
#[derive(Debug, Deserialize)]
struct BoundedSpill {
    path: Capped<SpillPath>,
    tail: Capped<SpillTail>,
}

impl BoundedSpill {
    fn into_spilled(self) -> SpilledStream {
        SpilledStream {
            path: self.path.into_string(),
            tail: self.tail.into_string(),
        }
    }
}

/// A `result` frame; the same fields as [`ExecOutcome`], each within its cap.
#[derive(Debug, Deserialize)]
pub(super) struct ResultFrame {
    kind: RequestKind,
    stdout: Capped<Stdout>,
    stderr: Capped<Stderr>,
    stdout_truncated: bool,
    stderr_truncated: bool,
    stdout_bytes: u64,
    stderr_bytes: u64,
    result: Option<BoundedDisplay>,
    images: Images,
    images_truncated: bool,
    error: Option<BoundedError>,
    exit_status: Option<i32>,
    signal: Option<Capped<SignalName>>,
    timed_out: bool,
    execution_count: u64,
    duration_ms: f64,
    #[serde(default)]
    stdout_file: Option<BoundedSpill>,
    #[serde(default)]
    stderr_file: Option<BoundedSpill>,
    /// sqlite only: kept as its text until its size is checked
    #[serde(default)]
    table: Option<Box<serde_json::value::RawValue>>,
}

impl ResultFrame {
    pub(super) fn into_outcome(self) -> Result<ExecOutcome, String> {
        let table = match self.table {
            None => None,
            Some(raw) if raw.get().len() > MAX_TABLE_BYTES => {
                return Err(format!(
                    "the sqlite table is over its limit of {MAX_TABLE_BYTES} bytes"
                ));
            }
            // serde_json's recursion limit bounds the nesting; the size bounds the rest
            Some(raw) => Some(serde_json::from_str(raw.get()).map_err(|e| e.to_string())?),
        };
        Ok(ExecOutcome {
            kind: self.kind,
            stdout: self.stdout.into_string(),
            stderr: self.stderr.into_string(),
            stdout_truncated: self.stdout_truncated,
            stderr_truncated: self.stderr_truncated,
            stdout_bytes: self.stdout_bytes,
            stderr_bytes: self.stderr_bytes,
            result: self.result.map(|value| DisplayData {
                text_plain: value
                    .text_plain
                    .map(Capped::into_string)
                    .unwrap_or_default(),
                text_html: value.text_html.map(Capped::into_string),
                image_png: value.image_png.map(Capped::into_string),
            }),
            images: self.images.0,
            images_truncated: self.images_truncated,
            error: self.error.map(|e| PyError {
                error_type: e.error_type.into_string(),
                message: e.message.into_string(),
                traceback: e.traceback.into_string(),
            }),
            exit_status: self.exit_status,
            signal: self.signal.map(Capped::into_string),
            timed_out: self.timed_out,
            execution_count: self.execution_count,
            duration_ms: self.duration_ms,
            stdout_file: self.stdout_file.map(BoundedSpill::into_spilled),
            stderr_file: self.stderr_file.map(BoundedSpill::into_spilled),
            table,
            interrupted: None,
        })
    }
}
