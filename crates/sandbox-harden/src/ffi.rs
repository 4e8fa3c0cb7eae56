//! The C ABI the zygote calls through ctypes, around each hardened fork:
//!
//! ```python
//! lib = ctypes.CDLL(path_to_libtoolgate_sandbox_harden_so)
//! assert lib.toolgate_harden_abi_version() == 4
//! lib.toolgate_zygote_init(err, len(err))                  # once, at start-up
//! lib.toolgate_zygote_own_mounts(b"toolgate-workspace", 18, err, len(err))   # once, optional
//! status_r, status_w = os.pipe(); release_r, release_w = os.pipe()
//! lib.toolgate_before_session_fork(err, len(err))          # unshare(CLONE_NEWPID)
//! try:
//!     pid = os.fork()
//! finally:
//!     if pid != 0: lib.toolgate_after_session_fork(err, len(err))   # setns back; exit if -1
//! if pid == 0:   # the child: pid 1 of its namespace
//!     rc = lib.toolgate_harden_session(spec, len(spec), status_w, release_r, workspace_fd,
//!                                      err, len(err))     # workspace_fd: a detached mount, or -1
//!     if rc != 0: os._exit(121)            # never run session code half-confined
//! else:          # the zygote: cgroups, then id maps; -1 means the child was killed
//!     rc = lib.toolgate_release_begin(pid, spec, len(spec), err, len(err))
//!     released = 0
//!     while rc >= 0:                       # in the zygote's own event loop, status_r readable
//!         message = os.read(status_r, 4096)
//!         rc = lib.toolgate_release_advance(pid, spec, len(spec), released, message,
//!                                           len(message), release_w, err, len(err))
//!         if rc == 1: released = 1         # id maps written, child released
//!         elif rc == 0: break              # checklist complete: err holds its report line
//!     # then close status_r and release_w (after reaping the child if rc == -1)
//! ```
//!
//! Every function returns 0 on success and -1 otherwise (`toolgate_release_advance` also 1, for
//! "released, not done yet"). When `err_buf` is not null and `err_len` is not 0, a
//! NUL-terminated UTF-8 message is written there either way, cut at a character boundary to fit:
//! the error (naming the step that failed), or on success the report line of the child
//! (`hardened: landlock=fully_enforced …`) or nothing. No panic crosses the boundary: it becomes
//! -1 and `internal panic: …` (with the default `panic = "unwind"`), and a panic in either
//! release function kills the child as any other failure does.
//!
//! `toolgate_harden_session` takes ownership of the descriptors it is given: all are closed
//! before it returns, in every case. The release functions take none: the zygote keeps its
//! pipe ends open until the child's last word (the child reads end of file on its release pipe
//! as the zygote's death).
#![allow(unsafe_code)]

use std::any::Any;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};
use std::panic::{self, AssertUnwindSafe};
use std::ptr;

use crate::channel::{ChildChannel, fitting};
use crate::release::kill_unreaped;
use crate::{
    HardenSpec, ReleaseProgress, advance_release, after_session_fork, before_session_fork,
    begin_release, enter_own_mount_namespace, harden_session_in, prepare_seccomp,
    remember_pid_namespace,
};

/// A spec larger than this is refused before it is read (a real one is well under 4 KiB).
const MAX_SPEC_BYTES: usize = 1 << 20;

/// The version of this C ABI; the zygote refuses a library with another one, since calling a
/// function with the wrong arguments through ctypes is undefined behaviour, not an error.
pub const TOOLGATE_HARDEN_ABI_VERSION: u32 = 4;

/// [`TOOLGATE_HARDEN_ABI_VERSION`].
#[unsafe(no_mangle)]
pub extern "C" fn toolgate_harden_abi_version() -> u32 {
    TOOLGATE_HARDEN_ABI_VERSION
}

/// At the zygote's start-up: opens its own pid namespace (`/proc/self/ns/pid`, close-on-exec),
/// which [`toolgate_after_session_fork`] returns to, and compiles the seccomp programs once
/// ([`crate::prepare_seccomp`]: its children only install them). Idempotent.
///
/// # Safety
///
/// `err_buf` must be null or point to `err_len` writable bytes not otherwise accessed during the
/// call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn toolgate_zygote_init(err_buf: *mut u8, err_len: usize) -> i32 {
    let outcome = guarded(|| {
        remember_pid_namespace()
            .map_err(|error| format!("cannot open /proc/self/ns/pid: {error}"))?;
        prepare_seccomp().map_err(|error| error.to_string())?;
        Ok(String::new())
    });
    // SAFETY: passed on under the caller's guarantee (null, or `err_len` writable bytes).
    unsafe { report(outcome, err_buf, err_len) }
}

/// At the zygote's start-up, when the server asks for it: a mount namespace of its own, private,
/// without the mounts whose source is the `source_len` bytes at `source` (the workspaces mounted
/// before it started): see [`enter_own_mount_namespace`]. Its hardened children then get their
/// workspace as a descriptor ([`toolgate_harden_session`]'s `workspace_fd`). On success `err_buf`
/// says how many mounts were detached. Once; later calls do nothing.
///
/// # Safety
///
/// `source` must point to `source_len` initialised, readable bytes (or be null, an error);
/// `err_buf` as for [`toolgate_zygote_init`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn toolgate_zygote_own_mounts(
    source: *const u8,
    source_len: usize,
    err_buf: *mut u8,
    err_len: usize,
) -> i32 {
    let outcome = guarded(|| {
        if source.is_null() || source_len > MAX_SPEC_BYTES {
            return Err("the mount source is a null pointer or too long".to_owned());
        }
        // SAFETY: not null (checked), `source_len` readable initialised bytes (contract), at
        // most 1 MiB. The slice does not outlive this closure.
        let bytes = unsafe { std::slice::from_raw_parts(source, source_len) };
        let source =
            std::str::from_utf8(bytes).map_err(|_| "the mount source is not UTF-8".to_owned())?;
        enter_own_mount_namespace(source)
            .map(|detached| format!("detached {detached}"))
            .map_err(|error| format!("a mount namespace of its own: {error}"))
    });
    // SAFETY: passed on under the caller's guarantee (null, or `err_len` writable bytes).
    unsafe { report(outcome, err_buf, err_len) }
}

/// In the zygote, right before `fork`: `unshare(CLONE_NEWPID)`, so the child is pid 1 of a new
/// pid namespace. [`toolgate_after_session_fork`] must follow in the zygote, whether the fork
/// succeeded or not.
///
/// # Safety
///
/// As [`toolgate_zygote_init`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn toolgate_before_session_fork(err_buf: *mut u8, err_len: usize) -> i32 {
    // SAFETY: passed on under the caller's guarantee (null, or `err_len` writable bytes).
    unsafe {
        zygote_step(
            before_session_fork,
            "unshare(CLONE_NEWPID)",
            err_buf,
            err_len,
        )
    }
}

/// In the zygote, right after `fork` (or its failure): its children's pid namespace is its own
/// again. On -1 the zygote must exit rather than fork again.
///
/// # Safety
///
/// As [`toolgate_zygote_init`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn toolgate_after_session_fork(err_buf: *mut u8, err_len: usize) -> i32 {
    let what = "setns(CLONE_NEWPID) back to the own namespace";
    // SAFETY: passed on under the caller's guarantee (null, or `err_len` writable bytes).
    unsafe { zygote_step(after_session_fork, what, err_buf, err_len) }
}

/// In the zygote, right after a successful fork: [`crate::begin_release`] (the spec checked, the
/// child added to the cgroups it does not join itself). On -1 the child has been sent SIGKILL
/// (the caller still reaps it).
///
/// # Safety
///
/// - `spec_json` must point to `spec_len` initialised, readable bytes (or be null, which is
///   reported as an error), not mutated during the call.
/// - `err_buf` must be null or point to `err_len` writable bytes not otherwise accessed during
///   the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn toolgate_release_begin(
    pid: i32,
    spec_json: *const u8,
    spec_len: usize,
    err_buf: *mut u8,
    err_len: usize,
) -> i32 {
    let outcome = guarded(|| {
        // SAFETY: the caller's guarantee on `spec_json`/`spec_len` (see `# Safety`).
        let spec = unsafe { parse_spec(spec_json, spec_len) }?;
        begin_release(pid, &spec)
            .map(|()| String::new())
            .map_err(|error| error.to_string())
    });
    if outcome.is_err() {
        // Covers a panic too. The child waits on its pipes, which the caller still holds, so it
        // cannot take their end of file for its cue to report on its own first.
        kill_unreaped(pid);
    }
    // SAFETY: passed on under the caller's guarantee (null, or `err_len` writable bytes).
    unsafe { report(outcome, err_buf, err_len) }
}

/// In the zygote, for each message read from the child's status pipe (one read; empty at end of
/// file): [`crate::advance_release`]. `released` is 0 until this function has returned 1 for
/// the child. Returns 1 when the child has been released (its id maps written; its last word is
/// still to come), 0 when its checklist is complete (`err_buf` holds its report line), -1 on any
/// error, after which the child has been sent SIGKILL (the caller still reaps it, and only then
/// closes the pipes).
///
/// # Safety
///
/// - `spec_json` and `err_buf` as for [`toolgate_release_begin`].
/// - `message` must point to `message_len` initialised, readable bytes, or be null with
///   `message_len` 0.
/// - `release_fd` (the release pipe's write end) must be an open descriptor during the call; it
///   stays the caller's.
/// - `pid` must be the caller's child, not yet reaped.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // a C ABI: plain arguments, not a struct across ctypes
pub unsafe extern "C" fn toolgate_release_advance(
    pid: i32,
    spec_json: *const u8,
    spec_len: usize,
    released: i32,
    message: *const u8,
    message_len: usize,
    release_fd: i32,
    err_buf: *mut u8,
    err_len: usize,
) -> i32 {
    let outcome = guarded(|| {
        // SAFETY: the caller's guarantee on `spec_json`/`spec_len` (see `# Safety`).
        let spec = unsafe { parse_spec(spec_json, spec_len) }?;
        let message: &[u8] = match (message.is_null(), message_len) {
            (true, 0) => &[],
            (true, _) => return Err("message is a null pointer".to_owned()),
            // SAFETY: the caller's guarantee: `message_len` readable bytes at `message`.
            (false, _) => unsafe { std::slice::from_raw_parts(message, message_len) },
        };
        if release_fd < 0 {
            return Err(format!("invalid release descriptor {release_fd}"));
        }
        // SAFETY: an open descriptor for the whole call (see `# Safety`), only borrowed.
        let release = unsafe { BorrowedFd::borrow_raw(release_fd) };
        advance_release(pid, &spec, released != 0, message, release)
            .map_err(|error| error.to_string())
    });
    let (code, text) = match outcome {
        Ok(ReleaseProgress::Released) => (1, String::new()),
        Ok(ReleaseProgress::Done(report)) => (0, report),
        Err(error) => {
            kill_unreaped(pid);
            (-1, error)
        }
    };
    // SAFETY: passed on under the caller's guarantee (null, or `err_len` writable bytes).
    unsafe { write_message(err_buf, err_len, &text) };
    code
}

/// In the session child, right after the fork: hardens the calling process as
/// [`crate::harden_session`] does, from a JSON [`HardenSpec`], released by the zygote through
/// the pipes, its workspace being the detached mount `workspace_fd` (see
/// [`crate::harden_session_in`]) or, with -1, `spec.workspace` as this process sees it. On
/// success `err_buf` holds the report line; after -1 the process may be partly confined: exit
/// without running session code.
///
/// # Safety
///
/// - `spec_json` as for [`toolgate_release_begin`].
/// - `status_fd` (the status pipe's write end) and `release_fd` (the release pipe's read end)
///   must be open descriptors the caller owns, and so must `workspace_fd` unless it is -1;
///   ownership passes to this function.
/// - `err_buf` as for [`toolgate_release_begin`].
/// - The process must be single-threaded (checked; a multi-threaded caller gets -1).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn toolgate_harden_session(
    spec_json: *const u8,
    spec_len: usize,
    status_fd: i32,
    release_fd: i32,
    workspace_fd: i32,
    err_buf: *mut u8,
    err_len: usize,
) -> i32 {
    let workspace = (workspace_fd >= 0 && workspace_fd != status_fd && workspace_fd != release_fd)
        // SAFETY: an open descriptor the caller owns and passes on (see `# Safety`), not one of
        // the two owned below.
        .then(|| unsafe { OwnedFd::from_raw_fd(workspace_fd) });
    // SAFETY: the caller passes ownership of both descriptors (see `# Safety`).
    let fds = unsafe { own_fds(status_fd, release_fd) };
    let outcome = guarded(move || {
        let (status, release) = fds?;
        if workspace.is_none() && workspace_fd != -1 {
            let message = format!("invalid workspace descriptor {workspace_fd}");
            ChildChannel::from_fds(status, release).finish(Err(&message));
            return Err(message);
        }
        let channel = ChildChannel::from_fds(status, release);
        // SAFETY: the caller's guarantee on `spec_json`/`spec_len` (see `# Safety`).
        let spec = match unsafe { parse_spec(spec_json, spec_len) } {
            Ok(spec) => spec,
            Err(message) => {
                // The zygote waits for a word from this child: tell it why there is none.
                channel.finish(Err(&message));
                return Err(message);
            }
        };
        harden_session_in(&spec, workspace, channel)
            .map(|report| report.to_string())
            .map_err(|error| error.to_string())
    });
    // SAFETY: passed on under the caller's guarantee (null, or `err_len` writable bytes).
    unsafe { report(outcome, err_buf, err_len) }
}

/// Runs `body`, turning a panic into an error message.
fn guarded<T>(body: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    // AssertUnwindSafe: nothing the closure touches is observed after a panic except the message
    // built from the payload (descriptors it owns are closed while unwinding).
    panic::catch_unwind(AssertUnwindSafe(body))
        .unwrap_or_else(|payload| Err(format!("internal panic: {}", panic_text(&*payload))))
}

/// Runs one of the zygote's own fork steps under [`guarded`] and reports it, its failure named
/// by `what`.
///
/// # Safety
///
/// As [`report`].
unsafe fn zygote_step(
    step: fn() -> std::io::Result<()>,
    what: &str,
    buf: *mut u8,
    len: usize,
) -> i32 {
    let outcome = guarded(|| {
        step()
            .map(|()| String::new())
            .map_err(|error| format!("{what}: {error}"))
    });
    // SAFETY: passed on under this function's own contract.
    unsafe { report(outcome, buf, len) }
}

/// Writes the outcome's message into the caller's buffer and returns 0 or -1.
///
/// # Safety
///
/// `buf` must be null or valid for writes of `len` bytes.
unsafe fn report(outcome: Result<String, String>, buf: *mut u8, len: usize) -> i32 {
    let (code, message) = match outcome {
        Ok(message) => (0, message),
        Err(message) => (-1, message),
    };
    // SAFETY: passed on under this function's own contract.
    unsafe { write_message(buf, len, &message) };
    code
}

/// Takes ownership of two descriptors; a negative or repeated number is an error (and the other,
/// valid one is still closed, as promised).
///
/// # Safety
///
/// Each non-negative number must be an open descriptor the caller owns and no longer uses.
unsafe fn own_fds(first: i32, second: i32) -> Result<(OwnedFd, OwnedFd), String> {
    if first == second {
        if first >= 0 {
            // SAFETY: an open descriptor the caller owns (contract above), owned here once.
            drop(unsafe { OwnedFd::from_raw_fd(first) });
        }
        return Err(format!("both descriptors are {first}"));
    }
    // SAFETY: non-negative numbers are open descriptors whose ownership the caller passes on
    // (contract above); they differ, so each is owned once.
    let own = |fd: i32| (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
    match (own(first), own(second)) {
        (Some(first), Some(second)) => Ok((first, second)),
        _ => Err(format!("invalid descriptors {first} and {second}")),
    }
}

/// The spec from the caller's JSON bytes.
///
/// # Safety
///
/// `spec_json` must be null or point to `spec_len` initialised bytes, unchanged during the call.
unsafe fn parse_spec(spec_json: *const u8, spec_len: usize) -> Result<HardenSpec, String> {
    if spec_json.is_null() {
        return Err("spec_json is a null pointer".to_owned());
    }
    if spec_len > MAX_SPEC_BYTES {
        return Err(format!(
            "spec is {spec_len} bytes, more than {MAX_SPEC_BYTES}"
        ));
    }
    // SAFETY: not null (checked), `spec_len` readable initialised bytes (contract), at most 1 MiB,
    // far below isize::MAX. The slice does not outlive this function.
    let bytes = unsafe { std::slice::from_raw_parts(spec_json, spec_len) };
    serde_json::from_slice(bytes).map_err(|error| format!("invalid harden spec JSON: {error}"))
}

/// The text of a panic payload (`&str` or `String`), or a placeholder.
fn panic_text(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-string payload)")
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
    let text = fitting(message, len - 1);
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
    use std::os::fd::IntoRawFd;

    use super::*;

    #[test]
    fn messages_are_cut_at_character_boundaries() {
        assert_eq!(fitting("abc", 10), "abc");
        assert_eq!(fitting("abc", 2), "ab");
        // "é" is two bytes: a cut inside it drops the whole character.
        assert_eq!(fitting("aé", 2), "a");
        assert_eq!(fitting("aé", 0), "");
    }

    fn message(buf: &[u8]) -> &str {
        let end = buf.iter().position(|&b| b == 0).expect("NUL-terminated");
        std::str::from_utf8(&buf[..end]).expect("UTF-8")
    }

    #[test]
    fn bad_json_is_an_error_message_and_reaches_the_zygote() {
        let (mut parent, child) = crate::session_channel().unwrap();
        let (status, release) = child.into_fds();
        let spec = b"{not json";
        let mut buf = [0xffu8; 64];
        // SAFETY: `spec` and `buf` are live local arrays of exactly the lengths passed; the two
        // descriptors are ours and handed over.
        let code = unsafe {
            toolgate_harden_session(
                spec.as_ptr(),
                spec.len(),
                status.into_raw_fd(),
                release.into_raw_fd(),
                -1,
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        assert_eq!(code, -1);
        assert!(message(&buf).starts_with("invalid harden spec JSON"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let sent = parent.receive(deadline).unwrap().unwrap();
        assert_eq!(sent[0], crate::channel::FAILED);
        assert!(String::from_utf8_lossy(&sent[1..]).starts_with("invalid harden spec JSON"));
    }

    #[test]
    fn a_workspace_descriptor_that_is_not_its_own_is_refused_and_the_zygote_told() {
        let (mut parent, child) = crate::session_channel().unwrap();
        let (status, release) = child.into_fds();
        let spec = b"{}";
        let mut buf = [0xffu8; 64];
        let status = status.into_raw_fd();
        // SAFETY: `spec` and `buf` are live local arrays of exactly the lengths passed; the two
        // descriptors are ours and handed over; the workspace number repeats one of them, which
        // must not be owned twice.
        let code = unsafe {
            toolgate_harden_session(
                spec.as_ptr(),
                spec.len(),
                status,
                release.into_raw_fd(),
                status,
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        assert_eq!(code, -1);
        assert_eq!(
            message(&buf),
            format!("invalid workspace descriptor {status}")
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let sent = parent.receive(deadline).unwrap().unwrap();
        assert_eq!(sent[0], crate::channel::FAILED);
    }

    #[test]
    fn null_spec_null_buffer_and_bad_descriptors_are_tolerated() {
        // SAFETY: a null spec is reported, a null buffer is never written, -1 is never closed.
        let code =
            unsafe { toolgate_harden_session(ptr::null(), 0, -1, -1, -1, ptr::null_mut(), 0) };
        assert_eq!(code, -1);
        let mut buf = [0u8; 64];
        // SAFETY: as above; pid 0 is refused before any signal.
        let code =
            unsafe { toolgate_release_begin(0, ptr::null(), 0, buf.as_mut_ptr(), buf.len()) };
        assert_eq!(code, -1);
        assert_eq!(message(&buf), "spec_json is a null pointer");
        let spec = crate::tests::spec_json("");
        // A null message of `len` bytes and no release descriptor, for pid 0.
        let mut advance = |len: usize| {
            // SAFETY: `spec` and `buf` live across the call with exactly the lengths passed; a
            // null message with a length is refused before it is read, one of length 0 is end
            // of file; -1 is never used as a descriptor; pid 0 is never signalled.
            let code = unsafe {
                toolgate_release_advance(
                    0,
                    spec.as_ptr(),
                    spec.len(),
                    0,
                    ptr::null(),
                    len,
                    -1,
                    buf.as_mut_ptr(),
                    buf.len(),
                )
            };
            (code, message(&buf).to_owned())
        };
        assert_eq!(advance(1), (-1, "message is a null pointer".to_owned()));
        assert_eq!(advance(0), (-1, "invalid release descriptor -1".to_owned()));
    }

    #[test]
    fn the_abi_version_is_exported() {
        assert_eq!(toolgate_harden_abi_version(), 4);
    }
}
