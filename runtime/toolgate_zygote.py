"""toolgate's Python fork server ("zygote") and session executor.

Run with the runtime built by scripts/python-runtime.sh:

    DIR/bin/python -I runtime/toolgate_zygote.py FD [--preload=MOD,MOD,...] [--harden-lib=PATH]

FD is an inherited AF_UNIX SOCK_STREAM socket: the control channel to the supervisor.
Standard library only, apart from the packages it preloads. Python 3.11.

Framing (both directions, control and session sockets alike): a 4-byte big-endian unsigned length,
then that many bytes of UTF-8 JSON (an object with a string "op"). At most 64 MiB per frame. A frame
that is too long is answered with an error frame and its bytes are read and dropped (the stream
stays in step); a frame that is not JSON, not an object, without a string "op", with an unknown
op or with bad fields is answered with an error frame and otherwise ignored. Error frame:
    {"op":"error","id":<the request's id or null>,"code":C,"message":M}
    C: too_large | bad_json | bad_frame | unknown_op | bad_request | bad_fds | fork_failed
       | session_setup | harden_failed

Start-up: if its environment holds anything but a small allow-list, the zygote re-executes itself
once with a clean one, marked TOOLGATE_ZYGOTE_REEXECUTED=1 (the environment block a process was
exec'd with stays readable in /proc/PID/environ of every forked child, whatever os.environ says
later; the supervisor should still start it with a clean environment). It sets
OPENBLAS_NUM_THREADS=1 and MPLBACKEND=Agg (and MPLCONFIGDIR=<runtime>/mplconfig when that exists),
imports the preload modules (default numpy, pandas, matplotlib.pyplot; a module that fails to import
is skipped and named in the hello frame), warms them up (a DataFrame rendered, a figure saved as
PNG), then gc.collect(); gc.freeze(), and sends
    {"op":"hello","pid":P,"python":"3.11.x","preloaded":[..],"skipped":{module: error},
     "executable":sys.executable,"prefix":sys.prefix,"base_prefix":sys.base_prefix,
     "startup_ms":float}
(base_prefix: where the base interpreter's standard library lives, which a hardened child must be
allowed to read when the runtime is a virtual environment or links to another installation.)

Control channel requests (supervisor -> zygote):
    {"op":"ping"}                       -> {"op":"pong","pid":P}
    {"op":"fork","session":S,"cwd":DIR,"fd":N, "tmpdir":T?, "env":{..}?, "harden":any?}
        sent with exactly one descriptor (the session socket's other end) attached by SCM_RIGHTS
        to the same sendmsg that carries the frame's first byte (socket.send_fds). "fd" is
        informational (the sender's number for it). The zygote reads each frame with exact-size
        recvmsg calls, never past the frame's end, so a descriptor belongs to the frame whose
        bytes it arrived with; descriptors arriving with any other frame are closed.
        -> {"op":"forked","session":S,"pid":child_pid,"ready_ms":float,"fork_ms":float,
            "hardened":REPORT?}
        or an error frame with "session" (the descriptor is closed). child_pid is the pid in the
        zygote's (the host's) pid namespace, also for a hardened child that sees itself as pid 1.
        ready_ms: from the start of the fork to "forked"; fork_ms: of that, os.fork() itself (in
        the zygote); "hardened": the library's report line (with its per-step timings).
Unsolicited (zygote -> supervisor), when a session child ends (SIGCHLD, waitpid WNOHANG):
    {"op":"exited","pid":P,"session":S,"status":exit_code|null,"signal":"SIGKILL"|null,
     "core_dumped":bool}
The zygote ignores SIGINT and exits when the control socket reaches end of file.

The session child: closes every descriptor but 0/1/2, the session socket (and the hardening pipes),
resets signal handlers, sets PR_SET_PDEATHSIG=SIGKILL (it dies with the zygote), puts /dev/null on
fd 0 and pipes on fds 1 and 2, calls the hardening library if one was given (see below), changes to "cwd",
and replaces os.environ by PATH (the runtime's bin, then /usr/local/bin:/usr/bin:/bin), HOME=cwd,
LANG=C.UTF-8, MPLBACKEND=Agg, OPENBLAS_NUM_THREADS=1, MPLCONFIGDIR (the runtime's font cache),
TMPDIR (if "tmpdir" was given) and the request's "env". If setting up fails it sends an error frame
(session_setup / harden_failed) on the session socket and exits (codes 70 / 121); a hardening
failure is also reported by the zygote on the control channel, instead of "forked" (see below). Before
its first request it runs the exec path once on a throwaway cell (nothing sent, nothing kept: the
copy-on-write faults and lazy caches of a first run are paid before anyone waits). It exits 0 when
the session socket reaches end of file.

Session requests (supervisor -> child), served one at a time, in order:
    {"op":"ping","id":X?}                -> {"op":"pong","id":X}
    {"op":"exec","id":N,"code":SRC,"stream":bool?,"env":{..}?}
        runs SRC in the session's one namespace (a fresh __main__ module; variables and imports
        persist). Notebook semantics: parsed with ast; a last bare expression is evaluated on its
        own and its value shown (not when followed by ';', not when None). Top-level await works.
        The workspace is importable ('' first on sys.path). SystemExit is reported as an error and
        the session goes on; a process the cell forks that runs on to the cell's end exits there.
        "env" is added to os.environ for this run only (secrets).
    {"op":"bash","id":N,"command":CMD,"timeout_s":T?,"stream":bool?,"env":{..}?}
        runs /bin/bash -c CMD in the workspace ("cwd"), stdin /dev/null, its own process group,
        environment PATH, HOME=workspace, LANG=C.UTF-8 (+ TMPDIR if the session has one, + "env").
        After timeout_s (or SIGINT to the child) the group gets SIGTERM, then SIGKILL 0.2 s later.
While a request with "stream":true runs:
    {"op":"output","id":N,"stream":"stdout"|"stderr","data":TEXT}   (best effort, in order)
Then the reply (the same shape for exec and bash):
    {"op":"result","id":N,"kind":"exec"|"bash",
     "stdout":TEXT,"stderr":TEXT,"stdout_truncated":bool,"stderr_truncated":bool,
     "stdout_bytes":int,"stderr_bytes":int,               (bytes written, kept or not)
     "result":null|{"text/plain":..,"text/html":..?,"image/png":BASE64?},
     "images":[BASE64 PNG, ..],"images_truncated":bool,
     "error":null|{"type":NAME,"message":TEXT,"traceback":TEXT},
     "exit_status":int|null,"signal":NAME|null,"timed_out":bool,
     "execution_count":int,"duration_ms":float}
Output is captured at the descriptor level (fds 1 and 2 are pipes, drained by a reader thread), so C
extensions and subprocesses are captured too; each stream keeps its first 1 MiB per request and
sets the *_truncated flag beyond. Output written while no request runs is dropped. "images" holds a
PNG of every open matplotlib figure after the run (and of those shown by plt.show() during it),
which are then closed: at most 64 of them and 24 MiB of PNG, "images_truncated" beyond. The server
checks every such limit again on what it reads (the code of a cell can write on this socket too) and
kills a session whose frames break one, or that sends anything while no request runs. A pandas DataFrame value gets text/plain from to_string() and text/html
from to_html(), both at most 60 rows and 30 columns. SIGINT sent to the child while a request runs
raises KeyboardInterrupt there: error type "KeyboardInterrupt", the session and its variables
survive; SIGINT at any other moment is ignored. bash: exit_status is the exit code, or 128+N with
"signal" named when the command was killed by signal N; a time-out sets "timed_out" and error type
"Timeout".

Hardening (optional, production): with --harden-lib=PATH the zygote loads Rust's confinement
library (crates/sandbox-harden, a cdylib; its C ABI version must be 2) at start-up, opens its own
pid namespace and compiles the seccomp programs once (toolgate_zygote_init: every child inherits
them and only installs them). Every fork request must then carry "harden" (a HardenSpec:
workspace, tmp "/tmp", read_only, limits, hostname, network, uid, cgroups, tmp_bytes); one without
is refused with harden_failed on the control channel (fail closed). The workspace must lie outside
/tmp, /dev/shm and /run (the session sees its own empty ones there), every ancestor of it must be
searchable by the uid, and the workspace itself should belong to it. A hardened fork:
    zygote: two pipes (status child->zygote, release zygote->child); toolgate_before_session_fork
            (unshare CLONE_NEWPID); os.fork(); toolgate_after_session_fork (setns back to its own pid
            namespace, also when the fork failed; if that fails the zygote exits: its next children
            would land in a session's namespace); then toolgate_admit_session(pid, spec,
            status_r, release_w) adds PID to each cgroup's cgroup.procs at once (on cgroup v1
            the first move waits for an RCU grace period, 5-20 ms, overlapped with the child's
            set-up below) and waits for the child's "U";
    child:  after setting up its descriptors, before chdir and before any thread starts, calls
            toolgate_harden_session(spec, status_w, release_r): new mount/net/ipc/uts namespaces,
            a root of its own (pivot_root) holding only the read_only paths at their own place,
            the workspace at /workspace (the working directory; the fork request's "cwd" names
            it so), a private /proc (its own pid namespace only), empty /tmp (tmp_bytes) and
            /dev/shm (64 MiB) owned by the session's uid, a /dev of five nodes; host name; then
            its own user namespace, where it tells the zygote "U" and waits;
    zygote: writes /proc/PID/setgroups "deny", uid_map and gid_map "1000 <uid> 1", releases the
            child ("G") and waits for its last word;
    child:  uid and gid 1000, no capability, no supplementary group, then rlimits,
            no_new_privs, Landlock, seccomp; sends "D" + its report line (or "E" + the error).
Only then does the zygote send "forked" (with the report). If anything fails on either side, the
zygote kills the child and sends {"op":"error","code":"harden_failed","session":S,"pid":P,...}
on the control channel ("pid" when a child was forked; an "exited" frame for it follows). Before
"forked" no session code ran.

A hardened session is pid 1 of its pid namespace: SIGKILL of it (from the zygote's namespace) kills
every process the session started, setsid daemons included, and so does its exit. SIGINT still
arrives, because a handler is installed (the kernel drops signals to a namespace's init that has
none, SIGTERM included: use SIGINT, then SIGKILL). Orphans of the session's processes are
reparented to it; the executor does not reap them (it cannot tell them from the children a cell
still means to wait for), so their zombies stay until the session ends, bounded by the pids cgroup.
os.getppid() is 0 inside, os.getpid() is 1.
"""

import os
import sys

MAX_FRAME = 64 << 20          # 64 MiB, both directions
OUTPUT_LIMIT = 1 << 20        # per stream per request
TEXT_LIMIT = 1 << 20          # a result's text/plain or text/html
IMAGES_LIMIT = 24 << 20       # raw PNG bytes per reply (base64 keeps the frame under 64 MiB)
IMAGES_COUNT = 64             # figures per reply (the server refuses more)
ERROR_TYPE_LIMIT = 256        # characters of an exception's type name (the server refuses more)
DF_ROWS, DF_COLS = 60, 30
READ_CHUNK = 64 << 10         # below malloc's mmap threshold: reads reuse heap memory
DEFAULT_PRELOAD = ("numpy", "pandas", "matplotlib.pyplot")
HARDEN_FAILED_EXIT = 121
SETUP_FAILED_EXIT = 70

_ENV_KEEP = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")   # machine quirks, not secrets
_REEXEC_MARK = "TOOLGATE_ZYGOTE_REEXECUTED"


def _zygote_env():
    """The whole environment the zygote runs with."""
    prefix = sys.prefix
    env = {
        "PATH": f"{prefix}/bin:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "OPENBLAS_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }
    mplconfig = os.path.join(prefix, "mplconfig")
    if os.environ.get("MPLCONFIGDIR"):
        env["MPLCONFIGDIR"] = os.environ["MPLCONFIGDIR"]
    elif os.path.isdir(mplconfig):
        env["MPLCONFIGDIR"] = mplconfig
    for k in _ENV_KEEP:
        if k in os.environ:
            env[k] = os.environ[k]
    return env


def _reexec_if_dirty(ctrl_fd):
    """Re-executes this process with a clean environment unless it already has one."""
    env = _zygote_env()
    if dict(os.environ) == env or not sys.executable or os.environ.get(_REEXEC_MARK) == "1":
        return                       # clean already, or re-executed once (never loop)
    env[_REEXEC_MARK] = "1"
    os.set_inheritable(ctrl_fd, True)
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable] + sys.argv)
    os.execve(sys.executable, argv, env)


def _parse_args(argv):
    if len(argv) < 2:
        sys.exit("usage: toolgate_zygote.py FD [--preload=a,b] [--harden-lib=PATH]")
    try:
        fd = int(argv[1])
    except ValueError:
        sys.exit("toolgate_zygote.py: FD must be a descriptor number")
    preload, harden = list(DEFAULT_PRELOAD), None
    for a in argv[2:]:
        if a.startswith("--preload="):
            preload = [m for m in a.split("=", 1)[1].split(",") if m]
        elif a.startswith("--harden-lib="):
            harden = a.split("=", 1)[1]
        else:
            sys.exit(f"toolgate_zygote.py: unknown option {a}")
    return fd, preload, harden


if __name__ == "__main__":
    _CTRL_FD, _PRELOAD, _HARDEN_LIB = _parse_args(sys.argv)
    _reexec_if_dirty(_CTRL_FD)
    os.environ.update(_zygote_env())    # before any import that reads them

import ast              # noqa: E402  (after the environment is settled)
import base64           # noqa: E402
import codecs           # noqa: E402
import ctypes           # noqa: E402
import errno            # noqa: E402
import fcntl            # noqa: E402
import gc               # noqa: E402
import importlib        # noqa: E402
import io               # noqa: E402
import json             # noqa: E402
import linecache        # noqa: E402
import platform         # noqa: E402
import select           # noqa: E402
import signal           # noqa: E402
import _signal          # noqa: E402  (getsignal without the enum lookup, per cell)
import socket           # noqa: E402
import stat             # noqa: E402
import subprocess       # noqa: E402
import threading        # noqa: E402
import time             # noqa: E402
import traceback        # noqa: E402
import types            # noqa: E402

THIS_FILE = __file__
_SELF_MODULE = sys.modules[__name__]     # keeps this module's globals alive after __main__ is replaced
_LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


# ----------------------------------------------------------------------------------------- frames

class FrameDecoder:
    """Splits a byte stream into frames. feed() returns events: ("frame", bytes) or ("too_large", n)."""

    def __init__(self):
        self.buf = bytearray()
        self.body_len = None      # None: reading the 4-byte header
        self.discard = 0          # bytes of a too-long frame still to drop

    def want(self):
        """How many bytes finish the current header, body or discarded frame (never past it)."""
        if self.discard:
            return min(self.discard, READ_CHUNK)
        if self.body_len is None:
            return 4 - len(self.buf)
        return max(1, min(self.body_len - len(self.buf), READ_CHUNK))

    def feed(self, data):
        events = []
        mv = memoryview(data)
        i, n = 0, len(mv)
        while i < n:
            if self.discard:
                k = min(self.discard, n - i)
                self.discard -= k
                i += k
            elif self.body_len is None:
                k = min(4 - len(self.buf), n - i)
                self.buf += mv[i:i + k]
                i += k
                if len(self.buf) == 4:
                    length = int.from_bytes(self.buf, "big")
                    self.buf.clear()
                    if length > MAX_FRAME:
                        self.discard = length
                        events.append(("too_large", length))
                    elif length == 0:
                        events.append(("frame", b""))
                    else:
                        self.body_len = length
            else:
                need = self.body_len - len(self.buf)
                if not self.buf and n - i >= need:       # whole body in hand: no copy through buf
                    events.append(("frame", bytes(mv[i:i + need])))
                    i += need
                    self.body_len = None
                    continue
                k = min(need, n - i)
                self.buf += mv[i:i + k]
                i += k
                if len(self.buf) == self.body_len:
                    events.append(("frame", bytes(self.buf)))
                    self.buf.clear()
                    self.body_len = None
        return events


def encode_frame(obj):
    # 'replace' turns lone surrogates (from a user's repr or _repr_html_) into '?': always valid UTF-8
    body = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")
    return len(body).to_bytes(4, "big") + body


class BadRequest(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def parse_request(payload):
    """The request object of a frame, or BadRequest."""
    try:
        req = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise BadRequest("bad_json", f"frame is not UTF-8 JSON: {e}") from None
    if not isinstance(req, dict):
        raise BadRequest("bad_frame", "frame is not a JSON object")
    if not isinstance(req.get("op"), str):
        raise BadRequest("bad_frame", 'frame has no string "op"')
    return req


def request_id(req):
    rid = req.get("id") if isinstance(req, dict) else None
    return rid if isinstance(rid, (int, str)) and not isinstance(rid, bool) else None


def error_frame(code, message, rid=None, **extra):
    frame = {"op": "error", "id": rid, "code": code, "message": message}
    frame.update(extra)
    return frame


def check_env(env):
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise BadRequest("bad_request", '"env" must be an object of strings')
    for k, v in env.items():
        if not (isinstance(v, str) and k and "=" not in k and "\0" not in k and "\0" not in v):
            raise BadRequest("bad_request", f'"env" entry {k!r} is not a valid variable')
    return env


# ----------------------------------------------------------------------------------------- zygote

HARDEN_ABI_VERSION = 2


class HardenLib:
    """The confinement library's C ABI (crates/sandbox-harden/src/ffi.rs) through ctypes. Each
    call returns (rc, message): 0 or -1, and the library's NUL-terminated message."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)
        version = lib.toolgate_harden_abi_version
        version.argtypes, version.restype = (), ctypes.c_uint32
        if version() != HARDEN_ABI_VERSION:
            sys.exit(f"toolgate_zygote.py: {path} has C ABI version {version()}, "
                     f"this zygote speaks {HARDEN_ABI_VERSION}")
        err = (ctypes.c_char_p, ctypes.c_size_t)
        fd, spec = ctypes.c_int, (ctypes.c_char_p, ctypes.c_size_t)

        def function(name, *argtypes):
            f = getattr(lib, name)
            f.argtypes, f.restype = (*argtypes, *err), ctypes.c_int
            return f
        self._init = function("toolgate_zygote_init")
        self._before = function("toolgate_before_session_fork")
        self._after = function("toolgate_after_session_fork")
        self._admit = function("toolgate_admit_session", ctypes.c_int, *spec, fd, fd)
        self._harden = function("toolgate_harden_session", *spec, fd, fd)
        rc, message = self._call(self._init)
        if rc != 0:
            sys.exit(f"toolgate_zygote.py: {message}")

    @staticmethod
    def _call(f, *args):
        err = ctypes.create_string_buffer(4096)
        rc = f(*args, err, len(err))
        return rc, err.value.decode("utf-8", "replace") or ("" if rc == 0 else f"returned {rc}")

    def before_fork(self):
        """unshare(CLONE_NEWPID): the next child is pid 1 of a new pid namespace."""
        return self._call(self._before)

    def after_fork(self):
        """In the zygote: its children's pid namespace is its own again."""
        return self._call(self._after)

    def admit(self, pid, blob, status_r, release_w):
        """In the zygote: id maps, cgroups, release; waits for the child's checklist. Takes both
        descriptors. On failure the child has been killed."""
        return self._call(self._admit, pid, blob, len(blob), status_r, release_w)

    def harden(self, blob, status_w, release_r):
        """In the child: the whole checklist. Takes both descriptors."""
        return self._call(self._harden, blob, len(blob), status_w, release_r)


def _kill(pid):
    if pid <= 0:                 # 0 and -1 would signal a group or everyone
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


class Zygote:
    def __init__(self, ctrl_fd, preload, harden_lib):
        self.t0 = time.perf_counter()
        self.ctrl = socket.socket(fileno=ctrl_fd)
        if self.ctrl.family != socket.AF_UNIX or self.ctrl.type != socket.SOCK_STREAM:
            sys.exit("toolgate_zygote.py: FD is not a Unix stream socket")
        self.ctrl.setblocking(True)
        os.set_inheritable(ctrl_fd, False)
        self.children = {}            # pid -> session id
        self.decoder = FrameDecoder()
        self.frame_fds = []           # descriptors that arrived with the frame being read
        self.ctrunc = False
        self.preload = preload
        self.harden = HardenLib(harden_lib) if harden_lib else None

    # --- start-up
    def preload_modules(self):
        loaded, skipped = [], {}
        for name in self.preload:
            try:
                importlib.import_module(name)
                loaded.append(name)
            except BaseException as e:       # a missing or broken package is skipped, not fatal
                skipped[name] = f"{type(e).__name__}: {e}"
        self._warm_up()
        return loaded, skipped

    def _warm_up(self):
        """Touch what every session would otherwise load lazily (and copy) on first use."""
        numpy, pandas = sys.modules.get("numpy"), sys.modules.get("pandas")
        try:
            if numpy is not None:
                numpy.arange(4).reshape(2, 2).sum()
        except Exception:
            pass
        try:
            if pandas is None:
                raise ImportError
            df = pandas.DataFrame({"a": [1, 2], "b": ["x", "y"]})
            df.to_string(max_rows=DF_ROWS, max_cols=DF_COLS)
            df.to_html(max_rows=DF_ROWS, max_cols=DF_COLS)
            repr(df["a"])
        except Exception:
            pass
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is not None:
            try:
                fig = plt.figure()
                plt.plot([0, 1], [1, 0])
                fig.savefig(io.BytesIO(), format="png", bbox_inches="tight")
            except Exception:
                pass
            finally:
                plt.close("all")
            plt.show = notebook_show
            try:    # the warm-up's cached fonts hold open files; a child must not inherit them
                sys.modules["matplotlib.font_manager"]._get_font.cache_clear()
            except Exception:
                pass
        for name in ("asyncio", "tempfile"):    # top-level await in cells; tempdir reset in children
            try:
                importlib.import_module(name)
            except Exception:
                pass

    # --- I/O
    def send(self, obj):
        try:
            self.ctrl.sendall(encode_frame(obj))
        except OSError:
            os._exit(0)          # the supervisor is gone

    def serve(self):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        self.wake_r, self.wake_w = wake_r, wake_w
        signal.signal(signal.SIGCHLD, lambda *_: None)   # a Python handler, so the wake-up fd fires
        signal.set_wakeup_fd(wake_w)

        loaded, skipped = self.preload_modules()
        gc.collect()
        gc.freeze()
        self.send({"op": "hello", "pid": os.getpid(), "python": platform.python_version(),
                   "preloaded": loaded, "skipped": skipped, "executable": sys.executable,
                   "prefix": sys.prefix, "base_prefix": sys.base_prefix,
                   "startup_ms": round((time.perf_counter() - self.t0) * 1000, 3)})

        poller = select.poll()
        poller.register(self.ctrl.fileno(), select.POLLIN)
        poller.register(wake_r, select.POLLIN)
        while True:
            for fd, _ in poller.poll():
                if fd == wake_r:
                    try:
                        while os.read(wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                    self.reap()
                else:
                    self.read_control()
            self.reap()

    def read_control(self):
        try:
            data, fds, flags, _ = socket.recv_fds(self.ctrl, self.decoder.want(), 8)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            if e.errno != errno.ECONNRESET:
                print(f"toolgate zygote: control socket: {e}", file=sys.stderr)
            os._exit(0)
        if not data:
            for fd in fds:
                os.close(fd)
            os._exit(0)          # end of file: the supervisor closed the channel
        if flags & socket.MSG_CTRUNC:
            self.ctrunc = True
        self.frame_fds.extend(fds)
        events = self.decoder.feed(data)
        for kind, payload in events:
            if kind == "too_large":
                self.send(error_frame("too_large", f"frame of {payload} bytes exceeds the limit of "
                                      f"{MAX_FRAME} bytes; its bytes are dropped"))
                self._close_frame_fds()
            else:
                fds, self.frame_fds = self.frame_fds, []
                ctrunc, self.ctrunc = self.ctrunc, False
                try:
                    self.handle(payload, fds, ctrunc)
                except Exception as e:       # never let a frame stop the zygote
                    print(f"toolgate zygote: {type(e).__name__}: {e}", file=sys.stderr)
                finally:
                    for fd in fds:
                        if fd >= 0:
                            try:
                                os.close(fd)
                            except OSError:
                                pass
        if self.decoder.discard:
            self._close_frame_fds()

    def _close_frame_fds(self):
        for fd in self.frame_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.frame_fds = []

    def handle(self, payload, fds, ctrunc):
        """fds: the descriptors that came with this frame; any left in the list are closed after."""
        try:
            req = parse_request(payload)
        except BadRequest as e:
            self.send(error_frame(e.code, e.message))
            return
        op = req["op"]
        if op == "ping":
            self.send({"op": "pong", "pid": os.getpid(), "id": request_id(req)})
        elif op == "fork":
            self.fork(req, fds, ctrunc)
        else:
            self.send(error_frame("unknown_op", f"unknown op {op!r} on the control channel",
                                  request_id(req)))

    def fork(self, req, fds, ctrunc):
        session = req.get("session")
        try:
            if not isinstance(session, str) or not session or len(session) > 1024:
                raise BadRequest("bad_request", '"session" must be a non-empty string')
            cwd = req.get("cwd")
            if not isinstance(cwd, str) or not os.path.isabs(cwd) or "\0" in cwd:
                raise BadRequest("bad_request", '"cwd" must be an absolute path')
            tmpdir = req.get("tmpdir")
            if tmpdir is not None and (not isinstance(tmpdir, str) or not os.path.isabs(tmpdir)
                                       or "\0" in tmpdir):
                raise BadRequest("bad_request", '"tmpdir" must be an absolute path')
            check_env(req.get("env"))
            if "fd" in req and (not isinstance(req["fd"], int) or isinstance(req["fd"], bool)):
                raise BadRequest("bad_request", '"fd" must be an integer')
            if ctrunc or len(fds) != 1:
                raise BadRequest("bad_fds", f"a fork frame carries exactly one descriptor by "
                                 f"SCM_RIGHTS; this one carried {len(fds)}"
                                 + (" (truncated)" if ctrunc else ""))
            if not stat.S_ISSOCK(os.fstat(fds[0]).st_mode):
                raise BadRequest("bad_fds", "the descriptor is not a socket")
        except BadRequest as e:
            self.send(error_frame(e.code, e.message, request_id(req),
                                  session=session if isinstance(session, str) else None))
            return
        if self.harden is not None:
            self.fork_hardened(req, fds, session)
            return
        sess_fd = fds[0]
        t0 = time.perf_counter()
        try:
            pid = os.fork()
        except OSError as e:
            self.send(error_frame("fork_failed", f"fork: {e.strerror}", request_id(req),
                                  session=session))
            return
        if pid == 0:
            self._child(req, sess_fd, None)
        fork_ms = round((time.perf_counter() - t0) * 1000, 3)
        fds[0] = -1
        os.close(sess_fd)
        self.children[pid] = session
        self.send({"op": "forked", "session": session, "pid": pid, "fork_ms": fork_ms,
                   "ready_ms": round((time.perf_counter() - t0) * 1000, 3)})

    def fork_hardened(self, req, fds, session):
        """A child that is pid 1 of its own pid namespace, admitted (id maps, cgroups) and fully
        confined before "forked" is sent; any failure is a harden_failed error frame and no child."""
        rid = request_id(req)
        spec = req.get("harden")
        if not isinstance(spec, dict):
            self.send(error_frame("harden_failed", "the fork request carries no harden spec", rid,
                                  session=session))
            return
        blob = json.dumps(spec).encode("utf-8", "replace")
        t0 = time.perf_counter()
        status_r, status_w = os.pipe()
        release_r, release_w = os.pipe()
        ours = {status_r, status_w, release_r, release_w}   # closed below unless handed over
        try:
            rc, message = self.harden.before_fork()
            if rc != 0:
                self.send(error_frame("fork_failed", f"hardened fork: {message}", rid, session=session))
                return
            pid = -1
            t_fork = time.perf_counter()
            try:
                pid = os.fork()
            except OSError as e:
                self.send(error_frame("fork_failed", f"fork: {e.strerror}", rid, session=session))
                return
            finally:
                if pid != 0:                  # the zygote, whether the fork worked or not
                    self._restore_pid_namespace(pid)
            if pid == 0:
                self._child(req, fds[0], (status_w, release_r), blob)
            fork_ms = round((time.perf_counter() - t_fork) * 1000, 3)
            for fd in (status_w, release_r):
                os.close(fd)
                ours.discard(fd)
            self.children[pid] = session      # so the "exited" frame names it, failed or not
            ours -= {status_r, release_w}     # the library owns (and closes) them from here
            rc, message = self.harden.admit(pid, blob, status_r, release_w)
            if rc != 0:
                _kill(pid)                    # the library did already; never leave it running
                self.send(error_frame("harden_failed", f"hardening failed: {message}", rid,
                                      session=session, pid=pid))
                return
            sess_fd, fds[0] = fds[0], -1
            os.close(sess_fd)
            self.send({"op": "forked", "session": session, "pid": pid, "hardened": message,
                       "fork_ms": fork_ms,
                       "ready_ms": round((time.perf_counter() - t0) * 1000, 3)})
        finally:
            for fd in ours:
                os.close(fd)

    def _restore_pid_namespace(self, pid):
        """After a hardened fork (or its failure): the zygote's next children are in its own pid
        namespace again. If that cannot be done, the zygote must not fork again: it exits, and the
        supervisor starts a new one."""
        rc, message = self.harden.after_fork()
        if rc != 0:
            if pid > 0:
                _kill(pid)
            print(f"toolgate zygote: {message}; exiting", file=sys.stderr)
            os._exit(1)

    def _child(self, req, sess_fd, sync, blob=None):
        """In the new child: become the session; never returns."""
        try:
            self._become_child(req, sess_fd, sync, blob)
        except BaseException as e:
            try:
                os.write(sess_fd, encode_frame(error_frame(
                    "session_setup", f"session set-up failed: {type(e).__name__}: {e}")))
            except BaseException:
                pass
        finally:
            os._exit(SETUP_FAILED_EXIT)

    def reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if os.WIFEXITED(status):
                code, sig = os.WEXITSTATUS(status), None
            elif os.WIFSIGNALED(status):
                code, sig = None, signal_name(os.WTERMSIG(status))
            else:
                continue
            self.send({"op": "exited", "pid": pid, "session": self.children.pop(pid, None),
                       "status": code, "signal": sig,
                       "core_dumped": bool(os.WIFSIGNALED(status) and os.WCOREDUMP(status))})

    # --- in the child, right after fork
    def _become_child(self, req, sess_fd, sync, blob):
        """sync: the child's ends of the hardening pipes (status write end, release read end), or
        None without a hardening library; blob: the harden spec as the zygote encoded it."""
        zygote_pid = os.getppid()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
                    signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, on_sigint)
        # SIGPIPE stays ignored, as Python sets it: a write to a closed pipe raises, not kills
        self.ctrl.detach()                     # the socket object must not close a reused number
        # below 3 only if the zygote was started with 0/1/2 closed: moved, as 0/1/2 are replaced
        sess_fd, *sync = [fd if fd > 2 else fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
                          for fd in (sess_fd, *(sync or ()))]
        close_fds_except({0, 1, 2, sess_fd, *sync})
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # A hardened child is pid 1 of its own namespace, where getppid() is 0 whoever the parent
        # is: this check cannot see the zygote's death, but the release pipe does (end of file),
        # and the library sets the death signal again after the id change that clears it.
        if os.getppid() != zygote_pid:
            os._exit(0)                        # the zygote died before the line above
        sock = socket.socket(fileno=sess_fd)
        sock.setblocking(True)
        os.set_inheritable(sess_fd, False)
        chan = Channel(sock)
        try:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):               # 0 stays /dev/null; 1 and 2 become pipes below
                if fd != devnull:
                    os.dup2(devnull, fd)
            if devnull > 2:
                os.close(devnull)
            capture = Capture(chan)            # pipes on fds 1 and 2; the thread starts later
        except OSError as e:
            chan.send(error_frame("session_setup", f"stdio: {e}"))
            os._exit(SETUP_FAILED_EXIT)
        if sync:
            # the library owns (and closes) both pipe ends; the zygote learns the outcome from it
            rc, message = self.harden.harden(blob, *sync)
            if rc != 0:
                chan.send(error_frame("harden_failed", f"hardening failed: {message}"))
                os._exit(HARDEN_FAILED_EXIT)
        try:
            os.chdir(req["cwd"])
        except OSError as e:
            chan.send(error_frame("session_setup", f"cannot enter the workspace: {e.strerror}"))
            os._exit(SETUP_FAILED_EXIT)
        session = Session(chan, capture, req["cwd"], req.get("tmpdir"), req.get("env") or {})
        session.warm_up()
        session.serve()
        os._exit(0)


def signal_name(n):
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"SIG{n}"


def close_fds_except(keep):
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        fds = None
    if fds is None:
        lo = 0
        for k in sorted(keep) + [os.sysconf("SC_OPEN_MAX")]:
            os.closerange(lo, k)
            lo = k + 1
        return
    for fd in fds:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


# ------------------------------------------------------------------------------- session child

class _State:
    running = False       # a request is executing: SIGINT raises KeyboardInterrupt
    images = None         # the list plt.show() appends to during an exec


STATE = _State()


def on_sigint(signum, frame):
    if STATE.running:
        raise KeyboardInterrupt


class Channel:
    """The session socket: frames out (from the main and the reader thread), frames in."""

    def __init__(self, sock):
        self.sock = sock
        self.lock = threading.Lock()

    def send(self, obj):
        data = encode_frame(obj)
        with self.lock:
            try:
                self.sock.sendall(data)
            except OSError:
                os._exit(0)      # the supervisor closed the session


class _Stream:
    __slots__ = ("name", "buf", "total", "truncated", "decoder")

    def __init__(self, name):
        self.name = name
        self.reset()

    def reset(self, streaming=False):
        self.buf = bytearray()
        self.total = 0
        self.truncated = False
        # only streamed output is decoded as it comes
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace") if streaming else None


class Capture:
    """fds 1 and 2 are the write ends of two pipes for the life of the session; a reader thread
    drains them, keeping what a request writes (up to OUTPUT_LIMIT) and dropping the rest."""

    def __init__(self, chan):
        self.chan = chan
        self.lock = threading.Lock()
        self.active = False
        self.stream_id = None      # request id when streaming output frames
        self.read_fds = {}
        self.keep_w = {}           # a spare write end per pipe: fd 1/2 can be restored from it
        self.idents = {}
        self.streams = {1: _Stream("stdout"), 2: _Stream("stderr")}
        for target in (1, 2):
            r, w = os.pipe()                       # both ends close-on-exec
            os.set_blocking(r, False)
            os.dup2(w, target)                     # fd 1/2: inheritable, so subprocesses write here
            self.read_fds[r] = target
            self.keep_w[target] = w
            st = os.fstat(target)
            self.idents[target] = (st.st_dev, st.st_ino)
        for name, fd in (("stdout", 1), ("stderr", 2)):
            f = getattr(sys, name)
            if f is None:                  # the zygote was started with fd 1 or 2 closed
                f = open(fd, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
                setattr(sys, name, f)
                setattr(sys, "__" + name + "__", f)
            try:
                f.reconfigure(line_buffering=True)
            except Exception:
                pass
        self.ready = select.poll()
        for r in self.read_fds:
            self.ready.register(r, select.POLLIN)
        self.thread = None

    def start(self):
        self.thread = threading.Thread(target=self._loop, name="toolgate-output", daemon=True)
        self.thread.start()

    def _loop(self):
        poller = select.poll()
        for r in self.read_fds:
            poller.register(r, select.POLLIN)
        while True:
            try:
                events = poller.poll()
            except InterruptedError:
                continue
            with self.lock:
                for fd, ev in events:
                    if ev & select.POLLNVAL:        # someone closed our pipe: stop reading it
                        poller.unregister(fd)
                        continue
                    self._drain(fd, 256 << 10)

    def _drain_ready(self):
        """Drains the pipes that have data (one poll, rather than a failing read per pipe)."""
        for fd, _ in self.ready.poll(0):
            self._drain(fd, 4 << 20)

    def _drain(self, fd, budget):
        """Reads fd until it is empty or budget bytes were read. Caller holds self.lock."""
        target = self.read_fds.get(fd)
        while budget > 0:
            try:
                data = os.read(fd, 65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if not data:
                return
            budget -= len(data)
            if self.active and target is not None:
                self._take(self.streams[target], data)

    def _take(self, st, data):
        st.total += len(data)
        room = OUTPUT_LIMIT - len(st.buf)
        if room <= 0:
            st.truncated = True
            return
        part = data[:room] if len(data) > room else data
        if len(data) > room:
            st.truncated = True
        st.buf += part
        if self.stream_id is not None:
            text = st.decoder.decode(part)
            if text:
                self.chan.send({"op": "output", "id": self.stream_id, "stream": st.name,
                                "data": text})

    def begin(self, rid, stream):
        _flush_std()
        # a cell may have closed or replaced fd 1/2: put our pipes back
        for target, ident in self.idents.items():
            try:
                st = os.fstat(target)
                ok = (st.st_dev, st.st_ino) == ident
            except OSError:
                ok = False
            if not ok:
                os.dup2(self.keep_w[target], target)
        with self.lock:
            self._drain_ready()                    # what was written between requests: dropped
            for st in self.streams.values():
                st.reset(stream)
            self.stream_id = rid if stream else None
            self.active = True

    def end(self):
        _flush_std()
        with self.lock:
            self._drain_ready()
            self.active = False
            self.stream_id = None
            out = {}
            for st in self.streams.values():
                out[st.name] = _decode(st.buf, st.truncated)
                out[st.name + "_truncated"] = st.truncated
                out[st.name + "_bytes"] = st.total
                st.buf = bytearray()
            return out


def _flush_std():
    for f in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if f is not None:
                f.flush()
        except Exception:
            pass


def _decode(buf, truncated):
    b = bytes(buf)
    if truncated:                 # do not end on half a character
        n = len(b)
        for k in range(1, min(4, n) + 1):
            c = b[n - k]
            if c & 0xC0 != 0x80:
                need = 1 if c < 0x80 else 2 if c >> 5 == 6 else 3 if c >> 4 == 14 else 4 if c >> 3 == 30 else 1
                if need > k:
                    b = b[:n - k]
                break
    return b.decode("utf-8", "replace")


def _bounded_text(s, limit=TEXT_LIMIT):
    if len(s) <= limit:
        return s
    return s[:limit] + f"\n…[truncated: {len(s) - limit} more characters]"


def _bounded_tb(s, limit=64 << 10):
    if len(s) <= limit:
        return s
    half = limit // 2
    return s[:half] + f"\n…[{len(s) - limit} characters cut]…\n" + s[-half:]


def format_error(e):
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == THIS_FILE:
        tb = tb.tb_next           # our own frames are not the user's business
    try:
        text = "".join(traceback.TracebackException(type(e), e, tb, compact=True).format())
    except Exception:
        text = f"{type(e).__name__}: (traceback could not be formatted)\n"
    try:
        message = str(e)
    except Exception:
        message = "(message could not be formatted)"
    return {"type": type(e).__name__[:ERROR_TYPE_LIMIT], "message": _bounded_tb(message), "traceback": _bounded_tb(text)}


def render_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


class ImageSink:
    def __init__(self):
        self.images = []          # base64 strings
        self.bytes = 0
        self.truncated = False
        self.errors = []

    def add_png(self, png):
        if self.bytes + len(png) > IMAGES_LIMIT or len(self.images) >= IMAGES_COUNT:
            self.truncated = True
            return
        self.bytes += len(png)
        self.images.append(base64.b64encode(png).decode("ascii"))


def collect_figures(sink):
    """Every open pyplot figure as a PNG into sink, then closes them all."""
    plt = sys.modules.get("matplotlib.pyplot")
    helpers = sys.modules.get("matplotlib._pylab_helpers")
    if plt is None or helpers is None or not getattr(helpers.Gcf, "figs", True):
        return                          # no figure open: nothing to render or close
    try:
        from matplotlib._pylab_helpers import Gcf
        managers = sorted(Gcf.get_all_fig_managers(), key=lambda m: m.num)
    except Exception:
        return
    for m in managers:
        try:
            sink.add_png(render_png(m.canvas.figure))
        except Exception as e:
            sink.errors.append(f"figure {m.num} could not be rendered: {type(e).__name__}: {e}")
    try:
        plt.close("all")
    except Exception:
        pass


def notebook_show(*args, **kwargs):
    """pyplot.show() in a session: the open figures go into this run's images, as in a notebook."""
    if STATE.images is not None:
        collect_figures(STATE.images)


_PLAIN_TYPES = (int, float, complex, bool, str, bytes)


def display_data(value):
    """The MIME bundle of a cell's value."""
    if type(value) in _PLAIN_TYPES:      # nothing richer to show than its repr
        return {"text/plain": _bounded_text(repr(value))}
    data = {}
    pd = sys.modules.get("pandas")
    mfig = sys.modules.get("matplotlib.figure")
    if pd is not None and isinstance(value, pd.DataFrame):
        rows, cols = value.shape
        dims = rows > DF_ROWS or cols > DF_COLS
        data["text/plain"] = value.to_string(max_rows=DF_ROWS, max_cols=DF_COLS, show_dimensions=dims)
        data["text/html"] = value.to_html(max_rows=DF_ROWS, max_cols=DF_COLS, show_dimensions=dims)
    else:
        data["text/plain"] = repr(value)
        if mfig is not None and isinstance(value, mfig.Figure):
            helpers = sys.modules.get("matplotlib._pylab_helpers")
            managed = helpers is not None and any(
                m.canvas.figure is value for m in helpers.Gcf.get_all_fig_managers())
            if not managed:                   # pyplot's own figures come back in "images"
                data["image/png"] = base64.b64encode(render_png(value)).decode("ascii")
        else:
            html = _call_repr(value, "_repr_html_")
            if isinstance(html, str) and len(html) <= TEXT_LIMIT:
                data["text/html"] = html
            png = _call_repr(value, "_repr_png_")
            if isinstance(png, (bytes, bytearray)) and len(png) <= IMAGES_LIMIT:
                data["image/png"] = base64.b64encode(bytes(png)).decode("ascii")
    data["text/plain"] = _bounded_text(data["text/plain"])
    if "text/html" in data and len(data["text/html"]) > TEXT_LIMIT:
        del data["text/html"]
    return data


def _call_repr(value, name):
    if isinstance(value, type):
        return None
    try:
        fn = getattr(value, name, None)
    except Exception:
        return None
    if not callable(fn):
        return None
    try:
        return fn()
    except Exception:
        return None


def _show_value(src, lines, node):
    """False when the last expression is followed by ';' (the notebook way to hide a value)."""
    try:
        line = lines[node.end_lineno - 1].encode("utf-8")[node.end_col_offset:].decode("utf-8", "replace")
        rest = line + "".join(lines[node.end_lineno:])
        return not rest.lstrip(" \t)").startswith(";")
    except Exception:
        return True


class Session:
    def __init__(self, chan, capture, workspace, tmpdir, extra_env):
        self.chan = chan
        self.capture = capture
        self.workspace = workspace
        self.tmpdir = tmpdir
        self.count = 0
        self.loop = None
        self.pid = os.getpid()
        # the environment, from scratch
        env = {"PATH": f"{sys.prefix}/bin:/usr/local/bin:/usr/bin:/bin", "HOME": workspace,
               "LANG": "C.UTF-8", "MPLBACKEND": "Agg", "OPENBLAS_NUM_THREADS": "1"}
        if os.environ.get("MPLCONFIGDIR"):
            env["MPLCONFIGDIR"] = os.environ["MPLCONFIGDIR"]
        if tmpdir:
            env["TMPDIR"] = tmpdir
        env.update(extra_env)
        os.environ.clear()
        os.environ.update(env)
        tf = sys.modules.get("tempfile")
        if tf is not None:
            tf.tempdir = None
        # a fresh __main__ for the user's code; the workspace importable, as '' in a REPL
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = main
        self.ns = main.__dict__
        here = os.path.dirname(os.path.abspath(THIS_FILE))
        sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != here]
        sys.path.insert(0, "")
        sys.argv = [""]
        capture.start()

    def warm_up(self):
        """Runs the exec path once on a throwaway cell, in a throwaway namespace, and encodes the
        reply without sending it; the count, the namespace and the line cache are restored. The
        first run of that path in a new child copies (copy-on-write) the pages of every object it
        touches and fills lazy caches: done here, before the first request can come from a warm
        session's taker, not during it (measured: 0.8 ms of the first run, 0.2 of a later one)."""
        count, ns = self.count, self.ns
        self.ns = {"__builtins__": __builtins__}
        try:
            encode_frame(self.run_exec(None, "1 + 1", False, None))
        except BaseException:
            pass                                 # only a cache warm-up: never the session's fault
        finally:
            linecache.cache.pop(f"<cell {self.count}>", None)
            self.count, self.ns = count, ns

    def serve(self):
        decoder = FrameDecoder()
        sock = self.chan.sock
        buf = bytearray(READ_CHUNK)
        view = memoryview(buf)
        while True:
            try:
                n = sock.recv_into(buf)
            except KeyboardInterrupt:
                continue
            except OSError:
                return
            if not n:
                return
            for kind, payload in decoder.feed(view[:n]):
                if kind == "too_large":
                    self.chan.send(error_frame("too_large", f"frame of {payload} bytes exceeds the "
                                               f"limit of {MAX_FRAME} bytes; its bytes are dropped"))
                    continue
                try:
                    self.handle(payload)
                except KeyboardInterrupt:
                    pass
                except BadRequest as e:
                    self.chan.send(error_frame(e.code, e.message))
                except Exception as e:
                    self.chan.send(error_frame("bad_request", f"{type(e).__name__}: {e}"))

    def handle(self, payload):
        try:
            req = parse_request(payload)
        except BadRequest as e:
            self.chan.send(error_frame(e.code, e.message))
            return
        op, rid = req["op"], request_id(req)
        try:
            if op == "ping":
                self.chan.send({"op": "pong", "id": rid})
                return
            if op not in ("exec", "bash"):
                raise BadRequest("unknown_op", f"unknown op {op!r} on a session channel")
            if rid is None:
                raise BadRequest("bad_request", f'"{op}" needs an integer or string "id"')
            env = check_env(req.get("env"))
            stream = req.get("stream", False)
            if not isinstance(stream, bool):
                raise BadRequest("bad_request", '"stream" must be true or false')
            if op == "exec":
                if not isinstance(req.get("code"), str):
                    raise BadRequest("bad_request", '"exec" needs a string "code"')
                reply = self.run_exec(rid, req["code"], stream, env)
            else:
                command, timeout = req.get("command"), req.get("timeout_s")
                if not isinstance(command, str):
                    raise BadRequest("bad_request", '"bash" needs a string "command"')
                if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                            or not timeout > 0):
                    raise BadRequest("bad_request", '"timeout_s" must be a positive number')
                reply = self.run_bash(rid, command, timeout, stream, env)
        except BadRequest as e:
            self.chan.send(error_frame(e.code, e.message, rid))
            return
        self.send_result(reply)

    def send_result(self, reply):
        data = encode_frame(reply)
        if len(data) - 4 > MAX_FRAME:            # never send what the other side must refuse
            reply["images"], reply["images_truncated"] = [], True
            if reply.get("result"):
                reply["result"] = {"text/plain": reply["result"].get("text/plain", "")[:TEXT_LIMIT]}
            data = encode_frame(reply)
        with self.chan.lock:
            try:
                self.chan.sock.sendall(data)
            except OSError:
                os._exit(0)

    def _with_env(self, env):
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        return saved

    @staticmethod
    def _restore_env(saved):
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def _reply(self, kind, rid, t0, out, **fields):
        reply = {"op": "result", "id": rid, "kind": kind}
        reply.update(out)
        reply.update({"result": None, "images": [], "images_truncated": False, "error": None,
                      "exit_status": None, "signal": None, "timed_out": False,
                      "execution_count": self.count})
        reply.update(fields)
        reply["duration_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        return reply

    # --- Python
    def run_exec(self, rid, src, stream, env):
        t0 = time.perf_counter()
        self.count += 1
        sink = ImageSink()
        saved = self._with_env(env) if env else None
        self.capture.begin(rid, stream)
        result = error = None
        STATE.images = sink
        if _signal.getsignal(signal.SIGINT) is not on_sigint:
            signal.signal(signal.SIGINT, on_sigint)   # a cell may have replaced it
        try:
            try:
                STATE.running = True
                value, show = self._execute(src)
                if show and value is not None:
                    result = display_data(value)
            finally:
                STATE.running = False
        except BaseException as e:       # KeyboardInterrupt and SystemExit included: the session lives
            STATE.running = False
            error = format_error(e)
            e.__traceback__ = None
        self._exit_if_forked()
        try:
            collect_figures(sink)
        except BaseException as e:
            sink.errors.append(f"figures: {type(e).__name__}: {e}")
        STATE.images = None
        if sink.errors:
            try:
                os.write(2, ("\n".join(sink.errors) + "\n").encode("utf-8", "replace"))
            except OSError:
                pass
        out = self.capture.end()
        if saved is not None:
            self._restore_env(saved)
        return self._reply("exec", rid, t0, out, result=result, images=sink.images,
                           images_truncated=sink.truncated, error=error)

    def _exit_if_forked(self):
        """A process the cell forked (os.fork) that ran to the cell's end must not answer or serve."""
        if os.getpid() != self.pid:
            _flush_std()
            os._exit(0)

    def _execute(self, src):
        filename = f"<cell {self.count}>"
        lines = src.splitlines(True)
        linecache.cache[filename] = (len(src), None, lines, filename)
        tree = ast.parse(src, filename=filename, mode="exec")
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        last, show = None, False
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            node = tree.body.pop()
            last = ast.Expression(node.value)
            show = _show_value(src, lines, node)
        if tree.body:
            self._run(compile(tree, filename, "exec", flags=flags, dont_inherit=True))
        if last is None:
            return None, False
        return self._run(compile(last, filename, "eval", flags=flags, dont_inherit=True)), show

    def _run(self, code):
        value = eval(code, self.ns)
        if code.co_flags & 0x80:             # CO_COROUTINE: the cell used top-level await
            import asyncio
            if self.loop is None or self.loop.is_closed():
                self.loop = asyncio.new_event_loop()
            value = self.loop.run_until_complete(value)
        return value

    # --- bash
    def run_bash(self, rid, command, timeout, stream, env):
        t0 = time.perf_counter()
        self.count += 1
        benv = {"PATH": f"{sys.prefix}/bin:/usr/local/bin:/usr/bin:/bin", "HOME": self.workspace,
                "LANG": "C.UTF-8"}
        if self.tmpdir:
            benv["TMPDIR"] = self.tmpdir
        benv.update(env)
        self.capture.begin(rid, stream)
        proc = error = None
        timed_out = interrupted = False
        if _signal.getsignal(signal.SIGINT) is not on_sigint:
            signal.signal(signal.SIGINT, on_sigint)
        try:
            try:
                STATE.running = True
                # stdin=0: the child's fd 0 is /dev/null, opened before hardening; once Landlock
                # applies, /dev/null can no longer be opened for writing (DEVNULL opens O_RDWR).
                proc = subprocess.Popen(["/bin/bash", "-c", command], cwd=self.workspace, env=benv,
                                        stdin=0, start_new_session=True)
                proc.wait(timeout=timeout)
            finally:
                STATE.running = False
        except subprocess.TimeoutExpired:
            timed_out = True
        except KeyboardInterrupt:
            interrupted = True
        except OSError as e:
            error = {"type": type(e).__name__, "message": str(e), "traceback": ""}
        if proc is not None and proc.returncode is None:
            _stop_group(proc)
        if timed_out:
            error = {"type": "Timeout", "message": f"the command did not finish within {timeout} s "
                     "and was stopped", "traceback": ""}
        elif interrupted:
            error = {"type": "KeyboardInterrupt", "message": "the command was interrupted",
                     "traceback": ""}
        exit_status = sig = None
        if proc is not None and proc.returncode is not None:
            rc = proc.returncode
            if rc < 0:
                exit_status, sig = 128 - rc, signal_name(-rc)
            else:
                exit_status = rc
        out = self.capture.end()
        return self._reply("bash", rid, t0, out, error=error, exit_status=exit_status, signal=sig,
                           timed_out=timed_out)


def _stop_group(proc):
    for sig, wait in ((signal.SIGTERM, 0.2), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            pass
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
        except KeyboardInterrupt:
            continue


def main():
    Zygote(_CTRL_FD, _PRELOAD, _HARDEN_LIB).serve()


if __name__ == "__main__":
    main()
