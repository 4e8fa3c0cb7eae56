//! What the server accepts from a session, whose process the code in it fully controls: the
//! session's own limits (1 MiB per stream, 1 Mi characters of a value's text, 24 MiB of PNG, …)
//! enforced again on what the server reads, while it decodes.
//!
//! A cell can reach its session's socket (it is a descriptor of the same process) and write any
//! frame it likes, so every frame is hostile input. Strings are checked against their cap before
//! they are copied, lists are counted as they are read (no preallocation from a claimed size), and
//! a call may read at most [`CALL_FRAME_BYTES`] of frames besides its streamed output. Anything
//! over a cap is a protocol violation: the session is killed and the call fails saying why.

mod frames;

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};

pub(crate) use frames::{
    FrameId, SessionErrorFrame, SessionFrameHead, SessionOutputFrame, SessionUpcallFrame,
};

use toolgate_sandbox::{ExecOutcome, OutputStream};

/// Output kept per stream and call, in characters: the session keeps the first 1 MiB (bytes) of
/// each stream, and decoding with replacement never makes more characters than bytes.
pub const MAX_OUTPUT_CHARS: usize = 1 << 20;

/// A value's `text/plain` or `text/html`: the session keeps 1 Mi characters, plus a short note
/// saying how many more there were.
pub const MAX_TEXT_CHARS: usize = (1 << 20) + 256;

/// Base64 of the session's 24 MiB of PNG per call (`image/png` of a value, and all of `images`).
pub const MAX_PNG_CHARS: usize = (24 << 20) / 3 * 4;

/// All of `images` (each figure's base64 may round its PNG's size up by up to 4 characters).
pub const MAX_IMAGES_CHARS: usize = MAX_PNG_CHARS + 4 * MAX_IMAGES;

/// Figures per call (`images`); the session leaves out any beyond.
pub const MAX_IMAGES: usize = 64;

/// An exception's message or traceback: the session keeps 64 Ki characters, plus a short note.
pub const MAX_ERROR_CHARS: usize = (64 << 10) + 256;

/// An exception's type name (the session cuts a longer one).
pub const MAX_ERROR_TYPE_CHARS: usize = 256;

/// A sqlite statement's `table`, as JSON text: the server asks for at most 1 MiB of values
/// (the session stops before a row would pass that), and a value's JSON adds quotes and
/// escapes. Decoded only once its size is known, so its parsed form stays within a few tens of
/// MiB.
pub const MAX_TABLE_BYTES: usize = 4 << 20;

/// The most frame bytes one call reads, apart from `output` frames (which are bounded by
/// [`MAX_OUTPUT_CHARS`] per stream instead): the largest frame the session may send.
pub const CALL_FRAME_BYTES: u32 = toolgate_sandbox::frame::MAX_FRAME_BYTES;

/// The largest `upcall` frame, in bytes: a request to the service is small, a model's prompt
/// its largest part (a larger one is a protocol violation).
pub const MAX_UPCALL_FRAME_BYTES: usize = 2 << 20;

/// Upcalls of one call that may wait for their answers at once (the seam's one bound).
pub use toolgate_sandbox::upcall::MAX_UPCALLS_IN_FLIGHT;

/// A cap on a string: what it is, and how many characters it may have.
pub(crate) trait Cap {
    const WHAT: &'static str;
    const MAX_CHARS: usize;
}

macro_rules! cap {
    ($($name:ident = $what:literal, $max:expr;)*) => {$(
        #[derive(Debug)]
        pub(crate) struct $name;
        impl Cap for $name {
            const WHAT: &'static str = $what;
            const MAX_CHARS: usize = $max;
        }
    )*};
}

cap! {
    Stdout = "stdout", MAX_OUTPUT_CHARS;
    Stderr = "stderr", MAX_OUTPUT_CHARS;
    TextPlain = "the value's text/plain", MAX_TEXT_CHARS;
    TextHtml = "the value's text/html", MAX_TEXT_CHARS;
    ValuePng = "the value's image/png", MAX_PNG_CHARS;
    Image = "an image", MAX_PNG_CHARS;
    ErrorType = "the exception's type", MAX_ERROR_TYPE_CHARS;
    ErrorText = "the exception's message or traceback", MAX_ERROR_CHARS;
    SignalName = "the signal's name", 32;
    Op = "a frame's op", 32;
    ErrorCode = "an error frame's code", 64;
    OutputData = "an output frame's data", MAX_OUTPUT_CHARS;
    GlobalName = "a global's name", 256;
    TypeName = "a global's type name", 256;
    NotRestoredReason = "why a global was not restored", 256;
    SpillPath = "a kept stream's path", toolgate_sandbox::MAX_WORKSPACE_PATH_BYTES;
    SpillTail = "a kept stream's tail", MAX_SPILL_TAIL_CHARS;
}

/// The last bytes of a stream kept in a file, which the session sends with its path.
pub const MAX_SPILL_TAIL_CHARS: usize = 256 << 10;

/// A string of at most `C::MAX_CHARS` characters, checked before it is copied.
pub(crate) struct Capped<C> {
    pub(crate) text: String,
    cap: PhantomData<C>,
}

impl<C> fmt::Debug for Capped<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl<C> Capped<C> {
    pub(crate) fn into_string(self) -> String {
        self.text
    }
}

/// Whether `text` has more than `max` characters (counted only when its bytes could be more).
fn over(text: &str, max: usize) -> bool {
    text.len() > max && text.chars().count() > max
}

fn over_cap<E: de::Error>(what: &str, max: usize) -> E {
    E::custom(format!("{what} is over its limit of {max} characters"))
}

struct CappedVisitor<C>(PhantomData<C>);

impl<C: Cap> Visitor<'_> for CappedVisitor<C> {
    type Value = Capped<C>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a string of at most {} characters", C::MAX_CHARS)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        if over(text, C::MAX_CHARS) {
            return Err(over_cap(C::WHAT, C::MAX_CHARS));
        }
        Ok(Capped {
            text: text.to_owned(),
            cap: PhantomData,
        })
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
        if over(&text, C::MAX_CHARS) {
            return Err(over_cap(C::WHAT, C::MAX_CHARS));
        }
        Ok(Capped {
            text,
            cap: PhantomData,
        })
    }
}

impl<'de, C: Cap> Deserialize<'de> for Capped<C> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(CappedVisitor(PhantomData))
    }
}

/// `images`: at most [`MAX_IMAGES`] strings of at most [`MAX_PNG_CHARS`] characters in all,
/// counted while the list is read.
#[derive(Debug, Default)]
pub(crate) struct Images(pub(crate) Vec<String>);

struct ImagesVisitor;

impl<'de> Visitor<'de> for ImagesVisitor {
    type Value = Images;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a list of at most {MAX_IMAGES} base64 PNGs")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Images, A::Error> {
        let mut images = Vec::new();
        let mut bytes = 0usize;
        while let Some(image) = seq.next_element::<Capped<Image>>()? {
            if images.len() == MAX_IMAGES {
                return Err(de::Error::custom(format!(
                    "images has more than {MAX_IMAGES} entries"
                )));
            }
            bytes += image.text.len();
            if bytes > MAX_IMAGES_CHARS {
                return Err(over_cap("images", MAX_IMAGES_CHARS));
            }
            images.push(image.into_string());
        }
        Ok(Images(images))
    }
}

impl<'de> Deserialize<'de> for Images {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(ImagesVisitor)
    }
}

/// Decodes a session's `result` frame within the caps.
pub(crate) fn decode_result(body: &[u8]) -> Result<ExecOutcome, String> {
    serde_json::from_slice::<frames::ResultFrame>(body)
        .map_err(|e| e.to_string())
        .and_then(frames::ResultFrame::into_outcome)
        .map_err(|e| format!("bad result frame: {e}"))
}

/// What one call has read so far, against its caps.
#[derive(Debug)]
pub(crate) struct CallBudget {
    /// frame bytes the call may still read (output frames are refunded)
    frame_bytes_left: u32,
    /// characters streamed so far, stdout and stderr
    streamed: [usize; 2],
}

impl Default for CallBudget {
    fn default() -> Self {
        Self {
            frame_bytes_left: CALL_FRAME_BYTES,
            streamed: [0, 0],
        }
    }
}

impl CallBudget {
    /// The largest frame the call may read next.
    pub(crate) fn frame_limit(&self) -> u32 {
        self.frame_bytes_left
    }

    /// A frame of `len` bytes was read (`len` is at most [`CallBudget::frame_limit`]).
    pub(crate) fn charge_frame(&mut self, len: usize) {
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        self.frame_bytes_left = self.frame_bytes_left.saturating_sub(len);
    }

    /// The frame of `len` bytes just charged was an `output` frame, bounded by its characters
    /// instead: gives its bytes back and counts `chars` against its stream.
    pub(crate) fn charge_output(
        &mut self,
        len: usize,
        stream: OutputStream,
        chars: usize,
    ) -> Result<(), String> {
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        self.frame_bytes_left = self
            .frame_bytes_left
            .saturating_add(len)
            .min(CALL_FRAME_BYTES);
        if chars == 0 {
            // the session never sends an empty one; counted as nothing, they would be free
            return Err("an empty output frame".to_owned());
        }
        let (index, name) = match stream {
            OutputStream::Stdout => (0, "stdout"),
            OutputStream::Stderr => (1, "stderr"),
        };
        self.streamed[index] += chars;
        if self.streamed[index] > MAX_OUTPUT_CHARS {
            return Err(format!(
                "streamed {name} is over its limit of {MAX_OUTPUT_CHARS} characters"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
