//! Every raw syscall of the checklist and of the zygote's side, each behind a safe function that
//! returns the kernel's `errno` as an [`io::Error`]. This module and `ffi` are the only ones
//! allowed `unsafe`. (Landlock and seccomp go through their crates' safe APIs.)
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;

/// Turns a libc return value into a `Result`, reading `errno` on `-1`.
fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A path or mount option as a C string; an interior NUL is `InvalidInput`.
fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte"))
}

/// `unshare(2)`: moves the calling process into new namespaces of the given `CLONE_NEW*` kinds.
/// With `CLONE_NEWPID` only the children created afterwards enter the new pid namespace.
pub(crate) fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare(2) takes one integer and reads or writes no memory of this process. The
    // namespaces it replaces are kernel objects no Rust value refers to; CLONE_NEWNS also
    // unshares the fs_struct (root and cwd), which std does not cache.
    check(unsafe { libc::unshare(flags) })
}

/// `setns(2)`: with `CLONE_NEWPID`, sets the pid namespace of the caller's future children to
/// the one `fd` refers to (the caller's own pid namespace never changes).
pub(crate) fn setns(fd: BorrowedFd<'_>, nstype: libc::c_int) -> io::Result<()> {
    // SAFETY: `fd` is a live descriptor for the whole call (borrowed); setns(2) reads no memory.
    check(unsafe { libc::setns(fd.as_raw_fd(), nstype) })
}

/// Brings the loopback interface of the caller's (new) network namespace up, as `ip link set lo
/// up` does: `SIOCGIFFLAGS`, then `SIOCSIFFLAGS` with `IFF_UP`. The kernel then gives it
/// `127.0.0.1` and `::1`.
pub(crate) fn loopback_up() -> io::Result<()> {
    // SAFETY: socket(2) reads no memory; the returned descriptor is owned at once.
    let rc = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    check(rc)?;
    // SAFETY: `rc` is a descriptor just made and owned by nothing else.
    let socket = unsafe { OwnedFd::from_raw_fd(rc) };
    // SAFETY: ifreq is plain old data; all zeroes is a valid value (an empty name, no flags).
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: `request` is a valid ifreq that lives across the call; SIOCGIFFLAGS writes only
    // its flags member.
    check(unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut request) })?;
    // SAFETY: reading and writing the flags member of the union SIOCGIFFLAGS just filled.
    unsafe {
        request.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: as above; SIOCSIFFLAGS only reads `request`.
    check(unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &request) })
}

/// `mount(2)`. `None` passes a null pointer, which the kernel accepts for the arguments it
/// ignores (the source and type of a propagation change or a remount, the data of a bind).
pub(crate) fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let source = source
        .map(|path| c_string(path.as_os_str().as_bytes()))
        .transpose()?;
    let target = c_string(target.as_os_str().as_bytes())?;
    let fstype = fstype.map(|kind| c_string(kind.as_bytes())).transpose()?;
    let data = data.map(|text| c_string(text.as_bytes())).transpose()?;
    let pointer = |text: &Option<CString>| text.as_ref().map_or(ptr::null(), |t| t.as_ptr());
    // SAFETY: every pointer is either null (accepted where the kernel ignores the argument, see
    // mount(2)) or points to a NUL-terminated CString that lives until the end of this function.
    // The kernel only reads them; `data` is a string, as tmpfs and proc expect.
    check(unsafe {
        libc::mount(
            pointer(&source),
            target.as_ptr(),
            pointer(&fstype),
            flags,
            pointer(&data).cast(),
        )
    })
}

/// `mount(NULL, "/", NULL, MS_REC | MS_PRIVATE)`: no mount event crosses between the caller's
/// (new) mount namespace and the one it was copied from, in either direction.
pub(crate) fn make_mounts_private() -> io::Result<()> {
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
}

/// `umount2(target, MNT_DETACH)`: takes the mount (and those beneath it) out of this mount
/// namespace at once.
pub(crate) fn detach(target: &Path) -> io::Result<()> {
    let target = c_string(target.as_os_str().as_bytes())?;
    // SAFETY: `target` is a NUL-terminated CString that lives until the end of this call; the
    // kernel only reads it.
    check(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) })
}

/// `pivot_root(".", ".")`: the current directory becomes the root of this mount namespace,
/// and the old root is mounted on top of it (to be detached).
pub(crate) fn pivot_root_here() -> io::Result<()> {
    let here = c".";
    // SAFETY: both arguments point to the same NUL-terminated static string, which the kernel
    // only reads; pivot_root(2) has no libc wrapper.
    let rc = unsafe { libc::syscall(libc::SYS_pivot_root, here.as_ptr(), here.as_ptr()) };
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `fchdir(2)`: enters the directory `dir` names.
pub(crate) fn fchdir(dir: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: the descriptor is borrowed for the whole call; fchdir(2) reads no memory.
    check(unsafe { libc::fchdir(dir.as_raw_fd()) })
}

/// The per-mount flags of the mount `path` is on, which a bind remount must repeat (it
/// replaces them): `MS_NOEXEC` and the access-time flags, from `statvfs(3)`.
pub(crate) fn mount_flags(path: &Path) -> io::Result<libc::c_ulong> {
    let path = c_string(path.as_os_str().as_bytes())?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated CString alive for the call; `stats` is a properly
    // sized and aligned buffer the kernel fills completely on success, read only then.
    check(unsafe { libc::statvfs(path.as_ptr(), stats.as_mut_ptr()) })?;
    // SAFETY: statvfs returned 0, so it wrote the whole struct.
    let flags = unsafe { stats.assume_init() }.f_flag;
    let mut kept = 0;
    for (st, ms) in [
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if flags & st != 0 {
            kept |= ms;
        }
    }
    Ok(kept)
}

/// `sethostname(2)` in the current UTS namespace.
pub(crate) fn set_hostname(name: &str) -> io::Result<()> {
    // SAFETY: the pointer and length describe the bytes of a live `&str`; sethostname(2) copies
    // exactly `len` bytes (no NUL terminator is read) and refuses a length over HOST_NAME_MAX with
    // EINVAL before touching the buffer.
    check(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) })
}

/// `setgroups(0, NULL)`: no supplementary group left.
pub(crate) fn clear_supplementary_groups() -> io::Result<()> {
    // SAFETY: a size of 0 makes setgroups(2) read nothing through the (null) list pointer.
    check(unsafe { libc::setgroups(0, ptr::null()) })
}

/// `setresgid(2)` with the real, effective and saved group id all set to `gid`.
pub(crate) fn set_all_gids(gid: libc::gid_t) -> io::Result<()> {
    // SAFETY: plain integers; no memory is passed.
    check(unsafe { libc::setresgid(gid, gid, gid) })
}

/// `setresuid(2)` with the real, effective and saved user id all set to `uid`.
pub(crate) fn set_all_uids(uid: libc::uid_t) -> io::Result<()> {
    // SAFETY: plain integers; no memory is passed.
    check(unsafe { libc::setresuid(uid, uid, uid) })
}

/// `prctl(2)` with an option that takes integers only.
fn prctl(option: libc::c_int, arg: libc::c_ulong) -> io::Result<libc::c_int> {
    let zero: libc::c_ulong = 0;
    // SAFETY: prctl(2) is variadic; every option used here (PR_CAPBSET_DROP, PR_SET_PDEATHSIG,
    // PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT) reads at most four further unsigned
    // long arguments, passed here with that type; none of them is a pointer.
    let rc = unsafe { libc::prctl(option, arg, zero, zero, zero) };
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Removes every capability from the bounding set (needs `CAP_SETPCAP`), so no later `execve`
/// could ever grant one. Stops at the first number the kernel does not know.
pub(crate) fn drop_bounding_set() -> io::Result<()> {
    for cap in 0..64 {
        match prctl(libc::PR_CAPBSET_DROP, cap) {
            Ok(_) => {}
            Err(error) if error.raw_os_error() == Some(libc::EINVAL) && cap > 0 => return Ok(()),
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// `capget`/`capset`'s header (`struct __user_cap_header_struct`).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// One half of `capset`'s data (`struct __user_cap_data_struct`); version 3 takes two.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit sets, as two `CapData`.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Empties the permitted, effective and inheritable capability sets (`capset(2)`) and the
/// ambient set. Lowering is always allowed.
pub(crate) fn clear_capabilities() -> io::Result<()> {
    prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
    )?;
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset(2) with version 3 reads one header and two data structs, which are
    // `repr(C)` values matching the kernel's layout, alive on this stack frame for the call. The
    // kernel may write the preferred version into the header, which is mutable here. pid 0 is
    // the calling thread.
    let rc = unsafe { libc::syscall(libc::SYS_capset, ptr::from_mut(&mut header), data.as_ptr()) };
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The parent-death signal of the calling process (`PR_GET_PDEATHSIG`), 0 when none.
pub(crate) fn parent_death_signal() -> io::Result<libc::c_int> {
    let mut signal: libc::c_int = 0;
    let zero: libc::c_ulong = 0;
    // SAFETY: PR_GET_PDEATHSIG writes one int through its second argument, which points to
    // `signal`, alive and writable on this stack frame for the call.
    check(unsafe {
        libc::prctl(
            libc::PR_GET_PDEATHSIG,
            ptr::from_mut(&mut signal),
            zero,
            zero,
            zero,
        )
    })?;
    Ok(signal)
}

/// `PR_SET_PDEATHSIG`: `signal` is sent to this process when the thread that forked it ends.
/// The kernel clears it on every change of uid or gid, hence a setter.
pub(crate) fn set_parent_death_signal(signal: libc::c_int) -> io::Result<()> {
    prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong).map(drop)
}

/// `PR_SET_DUMPABLE` 1. The kernel resets it to 0 on a uid change, which makes `/proc/<pid>`
/// owned by the host's root and the session's own `/proc/1/environ` unreadable to it.
pub(crate) fn set_dumpable() -> io::Result<()> {
    prctl(libc::PR_SET_DUMPABLE, 1).map(drop)
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)`: execve can no longer grant privileges (set-user-ID and
/// file capabilities are ignored). Irreversible, inherited by children.
pub(crate) fn set_no_new_privs() -> io::Result<()> {
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map(drop)
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
/// raise it again (that would need CAP_SYS_RESOURCE, which it no longer has).
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

/// `pipe2(O_CLOEXEC)`: (read end, write end).
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as libc::c_int; 2];
    // SAFETY: pipe2(2) writes two ints into the array, which is alive and writable for the call.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: on success both numbers are new descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `write(2)` of all of `bytes` to a borrowed descriptor (a pipe's write end), retried when
/// interrupted.
pub(crate) fn write_all(fd: BorrowedFd<'_>, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a live slice readable for its length during the call; `fd` is a
        // live borrowed descriptor.
        let rc = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
        match usize::try_from(rc) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(written) => bytes = &bytes[written.min(bytes.len())..],
            Err(_) => {
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
        }
    }
    Ok(())
}

/// `poll(2)` on one descriptor: the returned events, or 0 when `timeout_ms` passed first.
pub(crate) fn poll_one(fd: BorrowedFd<'_>, events: i16, timeout_ms: i32) -> io::Result<i16> {
    let mut entry = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    loop {
        // SAFETY: one `pollfd`, alive and writable on this stack frame for the call; `fd` is a
        // live borrowed descriptor.
        let rc = unsafe { libc::poll(ptr::from_mut(&mut entry), 1, timeout_ms) };
        match rc {
            -1 => {
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
            0 => return Ok(0),
            _ => return Ok(entry.revents),
        }
    }
}

/// `kill(2)` of one process. Refuses `pid <= 0`, which would signal a process group or every
/// process the caller may signal.
pub(crate) fn kill(pid: libc::pid_t, signal: libc::c_int) -> io::Result<()> {
    if pid <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal pid {pid}"),
        ));
    }
    // SAFETY: plain integers; `pid` is positive, so exactly one process is addressed.
    check(unsafe { libc::kill(pid, signal) })
}

/// What [`fork`] returned in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forked {
    /// The new process.
    Child,
    /// The caller, with the child's pid (as seen from the caller's pid namespace).
    Parent(libc::pid_t),
}

/// `fork(2)`, only in a single-threaded process: there the child's copy of the heap is
/// consistent (no other thread held the allocator's lock), so Rust code may run in it.
pub(crate) fn fork() -> io::Result<Forked> {
    let threads = thread_count()?;
    if threads != 1 {
        return Err(io::Error::other(format!(
            "fork refused: the process has {threads} threads"
        )));
    }
    // SAFETY: the process has one thread (checked above), so no lock can be held by a thread that
    // does not exist in the child; fork(2) itself takes no pointer.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

/// `waitpid(pid, 0)`: the raw wait status of a child once it has ended.
pub(crate) fn wait_for(pid: libc::pid_t) -> io::Result<libc::c_int> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: waitpid(2) writes one int through the pointer, which points to `status`, alive
        // and writable on this stack frame.
        let rc = unsafe { libc::waitpid(pid, ptr::from_mut(&mut status), 0) };
        if rc != -1 {
            return Ok(status);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
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

/// `move_mount(2)` flag: the source is the descriptor itself (`from_path` is empty).
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x0000_0004;

/// `move_mount(fd, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH)`: attaches the detached mount
/// `fd` (made by `open_tree(OPEN_TREE_CLONE)` or `fsmount`, in any mount namespace) at `target`
/// in the caller's.
pub(crate) fn move_mount_here(fd: BorrowedFd<'_>, target: &Path) -> io::Result<()> {
    let target = c_string(target.as_os_str().as_bytes())?;
    // SAFETY: `fd` is a live descriptor for the whole call (borrowed); both paths are
    // NUL-terminated strings that live until the end of this call, and the kernel only reads
    // them. move_mount(2) writes no memory of this process.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
