//! Every raw syscall of the checklist, each behind a safe function that returns the kernel's
//! `errno` as an [`io::Error`]. This module and `ffi` are the only ones allowed `unsafe`.
//! (Landlock and seccomp go through their crates' safe APIs.)
#![allow(unsafe_code)]

use std::io;
use std::ptr;

/// Turns a libc return value into a `Result`, reading `errno` on `-1`.
fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `unshare(2)`: moves the calling process into new namespaces of the given `CLONE_NEW*` kinds.
pub(crate) fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare(2) takes one integer and reads or writes no memory of this process. The
    // namespaces it replaces are kernel objects no Rust value refers to; CLONE_NEWNS also
    // unshares the fs_struct (root and cwd), which std does not cache.
    check(unsafe { libc::unshare(flags) })
}

/// `mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)`: no mount event crosses between this
/// mount namespace and the one it was copied from, in either direction.
pub(crate) fn make_all_mounts_private() -> io::Result<()> {
    let root = c"/";
    // SAFETY: `root` is a NUL-terminated static string that outlives the call. For a change of
    // propagation type mount(2) ignores source, filesystem type and data, so null pointers are
    // valid there ("the source, filesystemtype, and data arguments are ignored"). The kernel only
    // reads the strings.
    check(unsafe {
        libc::mount(
            ptr::null(),
            root.as_ptr(),
            ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            ptr::null(),
        )
    })
}

/// `sethostname(2)` in the current UTS namespace.
pub(crate) fn set_hostname(name: &str) -> io::Result<()> {
    // SAFETY: the pointer and length describe the bytes of a live `&str`; sethostname(2) copies
    // exactly `len` bytes (no NUL terminator is read) and refuses a length over HOST_NAME_MAX with
    // EINVAL before touching the buffer.
    check(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) })
}

/// The resource limits the checklist sets.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Rlimit {
    /// `RLIMIT_CORE`: largest core dump.
    Core,
    /// `RLIMIT_NOFILE`: one more than the highest file descriptor number.
    OpenFiles,
    /// `RLIMIT_FSIZE`: largest file written.
    FileSize,
}

impl Rlimit {
    /// The name as in setrlimit(2), for error messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Core => "RLIMIT_CORE",
            Self::OpenFiles => "RLIMIT_NOFILE",
            Self::FileSize => "RLIMIT_FSIZE",
        }
    }
}

/// `setrlimit(2)` with the soft and the hard limit both set to `limit`, so the session cannot
/// raise it again (that would need CAP_SYS_RESOURCE, which a user-namespace root lacks on the
/// host's resources).
pub(crate) fn set_rlimit(resource: Rlimit, limit: u64) -> io::Result<()> {
    let value = libc::rlimit {
        rlim_cur: limit as libc::rlim_t,
        rlim_max: limit as libc::rlim_t,
    };
    let resource = match resource {
        Rlimit::Core => libc::RLIMIT_CORE,
        Rlimit::OpenFiles => libc::RLIMIT_NOFILE,
        Rlimit::FileSize => libc::RLIMIT_FSIZE,
    };
    // SAFETY: `&value` points to an initialised `rlimit` on this stack frame that lives across
    // the call; setrlimit(2) only reads it. `resource` is one of libc's own constants.
    check(unsafe { libc::setrlimit(resource, &value) })
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)`: execve can no longer grant privileges (set-user-ID and
/// file capabilities are ignored). Irreversible, inherited by children.
pub(crate) fn set_no_new_privs() -> io::Result<()> {
    let one: libc::c_ulong = 1;
    let zero: libc::c_ulong = 0;
    // SAFETY: prctl(2) is variadic; PR_SET_NO_NEW_PRIVS reads exactly four further unsigned long
    // arguments, passed here with that type (the kernel requires the three unused ones to be 0).
    // No memory is passed.
    check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, one, zero, zero, zero) })
}

/// The number of threads of this process, from `/proc/self/status` (no syscall of its own).
pub(crate) fn thread_count() -> io::Result<usize> {
    use std::io::Read;
    // One buffer big enough for the whole file (about 1.5 KiB), so procfs answers in one read
    // instead of `read_to_string`'s growing 32, 64, 128… byte reads.
    let mut buffer = [0u8; 8192];
    let mut file = std::fs::File::open("/proc/self/status")?;
    let mut filled = 0;
    loop {
        match file.read(&mut buffer[filled..])? {
            0 => break,
            read => filled += read,
        }
        if filled == buffer.len() {
            break;
        }
    }
    String::from_utf8_lossy(&buffer[..filled])
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|count| count.trim().parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no Threads: line"))
}
