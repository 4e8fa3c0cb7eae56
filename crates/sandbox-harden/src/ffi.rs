//! The C ABI the zygote's children call through ctypes:
//!
//! ```python
//! lib = ctypes.CDLL(path_to_libtoolgate_sandbox_harden_so)
//! err = ctypes.create_string_buffer(1024)
//! rc = lib.toolgate_harden_session(spec_json, len(spec_json), err, len(err))
//! if rc != 0:
//!     os.write(2, err.value + b"\n"); os._exit(125)   # never run session code half-confined
//! ```
//!
//! Returns 0 when every step succeeded, -1 otherwise. In both cases, when `err_buf` is not null
//! and `err_len` is not 0, a NUL-terminated UTF-8 message is written there, cut (at a character
//! boundary) to fit: the error naming the failing step, or on success the report
//! (`hardened: landlock=fully_enforced …`) for the caller's log. No panic crosses the boundary
//! (it becomes -1 and `internal panic: …`) as long as the library is built with `panic =
//! "unwind"`, the default.
#![allow(unsafe_code)]

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::ptr;

use crate::{HardenSpec, harden_session_with_report};

/// A spec larger than this is refused before it is read (a real one is well under 4 KiB).
const MAX_SPEC_BYTES: usize = 1 << 20;

/// Hardens the calling process as [`crate::harden_session`] does, from a JSON [`HardenSpec`].
///
/// Returns 0 when every step succeeded, -1 otherwise. When `err_buf` is not null and `err_len`
/// is not 0, a NUL-terminated UTF-8 message is written there either way, cut at a character
/// boundary to fit: the error naming the failing step (`step (g) landlock: …`), or on success
/// the [`crate::HardenReport`] line (`hardened: landlock=fully_enforced …`). A panic becomes -1
/// and `internal panic: …` (with the default `panic = "unwind"`). After -1 the process may be
/// partly confined: exit without running session code.
///
/// # Safety
///
/// - `spec_json` must point to `spec_len` initialised, readable bytes (or be null, which is
///   reported as an error), not mutated during the call.
/// - `err_buf` must be null or point to `err_len` writable bytes not otherwise accessed during
///   the call.
/// - The process must be single-threaded (checked; a multi-threaded caller gets -1).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn toolgate_harden_session(
    spec_json: *const u8,
    spec_len: usize,
    err_buf: *mut u8,
    err_len: usize,
) -> i32 {
    // AssertUnwindSafe: the closure only reads the caller's bytes; nothing it touches is observed
    // after a panic except the message built from the panic payload.
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        if spec_json.is_null() {
            return Err("spec_json is a null pointer".to_owned());
        }
        if spec_len > MAX_SPEC_BYTES {
            return Err(format!(
                "spec is {spec_len} bytes, more than {MAX_SPEC_BYTES}"
            ));
        }
        // SAFETY: the caller guarantees `spec_json` points to `spec_len` readable, initialised
        // bytes that stay unchanged during the call (see `# Safety`); it is not null (checked
        // above) and `spec_len` is at most 1 MiB, far below isize::MAX. The slice does not outlive
        // this closure.
        let bytes = unsafe { std::slice::from_raw_parts(spec_json, spec_len) };
        let spec: HardenSpec = serde_json::from_slice(bytes)
            .map_err(|error| format!("invalid harden spec JSON: {error}"))?;
        harden_session_with_report(&spec)
            .map(|report| report.to_string())
            .map_err(|error| error.to_string())
    }));
    let (code, message) = match outcome {
        Ok(Ok(report)) => (0, report),
        Ok(Err(message)) => (-1, message),
        Err(payload) => (-1, format!("internal panic: {}", panic_text(&*payload))),
    };
    // SAFETY: `err_buf`/`err_len` are passed on unchanged under the caller's guarantee (null, or
    // `err_len` writable bytes).
    unsafe { write_message(err_buf, err_len, &message) };
    code
}

/// The text of a panic payload (`&str` or `String`), or a placeholder.
fn panic_text(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-string payload)")
}

/// The longest prefix of `message` that has at most `max` bytes and ends on a char boundary.
fn fitting_prefix(message: &str, max: usize) -> &str {
    let mut end = message.len().min(max);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

/// Writes `message`, cut to fit, and a NUL into `buf`.
///
/// # Safety
///
/// `buf` must be null or valid for writes of `len` bytes.
unsafe fn write_message(buf: *mut u8, len: usize, message: &str) {
    if buf.is_null() || len == 0 {
        return;
    }
    let text = fitting_prefix(message, len - 1);
    // SAFETY: `buf` is not null and valid for `len` writes (the function's contract); `text` has
    // at most `len - 1` bytes, so the copy and the NUL after it stay inside those `len` bytes.
    // `text` lives in Rust memory that cannot overlap a buffer the caller lent us for writing.
    unsafe {
        ptr::copy_nonoverlapping(text.as_ptr(), buf, text.len());
        buf.add(text.len()).write(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_cut_at_character_boundaries() {
        assert_eq!(fitting_prefix("abc", 10), "abc");
        assert_eq!(fitting_prefix("abc", 2), "ab");
        // "é" is two bytes: a cut inside it drops the whole character.
        assert_eq!(fitting_prefix("aé", 2), "a");
        assert_eq!(fitting_prefix("aé", 0), "");
    }

    #[test]
    fn bad_json_is_an_error_message_not_a_crash() {
        let spec = b"{not json";
        let mut buf = [0xffu8; 64];
        // SAFETY: `spec` and `buf` are live local arrays of exactly the lengths passed.
        let code = unsafe {
            toolgate_harden_session(spec.as_ptr(), spec.len(), buf.as_mut_ptr(), buf.len())
        };
        assert_eq!(code, -1);
        let end = buf.iter().position(|&b| b == 0).expect("NUL-terminated");
        let text = std::str::from_utf8(&buf[..end]).expect("UTF-8");
        assert!(text.starts_with("invalid harden spec JSON"), "{text}");
    }

    #[test]
    fn null_spec_and_null_buffer_are_tolerated() {
        // SAFETY: a null spec is reported, a null buffer is never written.
        let code = unsafe { toolgate_harden_session(ptr::null(), 0, ptr::null_mut(), 0) };
        assert_eq!(code, -1);
    }
}
