"""The fork server ("zygote"): preloads the data stack, then forks a session child for each
"fork" request on its control channel, optionally confined by Rust's hardening library (its C ABI
through ctypes). The control channel, the hardening handshake and the child's set-up are described
in runtime/PROTOCOL.md."""

import ctypes
import errno
import fcntl
import gc
import importlib
import io
import json
import os
import platform
import select
import signal
import _signal
import socket
import stat
import sys
import time

import toolgate                  # noqa: F401  (the public module: every session finds it loaded)
from toolgate import _upcalls    # noqa: F401
from toolgate._capture import Capture, Channel
from toolgate._display import cache_font_heights
from toolgate._protocol import (DF_COLS, DF_ROWS, BadRequest, FrameDecoder, check_fork,
                                encode_frame, error_frame, parse_request, request_id, signal_name,
                                too_large_frame)
from toolgate._session import Session, notebook_show, on_sigint
from toolgate._sharing import fill_heap, fill_pools, rehearse_session, rehearse_setup

HARDEN_ABI_VERSION = 4
CHECKLIST_TIMEOUT = 10.0          # seconds a hardened child may take for each half of its checklist
HARDEN_FAILED_EXIT = 121
SETUP_FAILED_EXIT = 70
_LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


class HardenLib:
    """The confinement library's C ABI (crates/sandbox-harden/src/ffi.rs) through ctypes. Each
    call returns (rc, message): 0 or -1, and the library's NUL-terminated message."""

    def __init__(self, path, own_mounts=None):
        """own_mounts: the source name of the server's workspace mounts; when given, the zygote
        takes a private mount namespace of its own without them (each child then gets its
        workspace as a detached mount, by descriptor)."""
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
        self._begin = function("toolgate_release_begin", ctypes.c_int, *spec)
        self._advance = function("toolgate_release_advance", ctypes.c_int, *spec, ctypes.c_int,
                                 ctypes.c_char_p, ctypes.c_size_t, fd)
        self._harden = function("toolgate_harden_session", *spec, fd, fd, fd)
        own = function("toolgate_zygote_own_mounts", ctypes.c_char_p, ctypes.c_size_t)
        rc, message = self._call(self._init)
        if rc != 0:
            sys.exit(f"toolgate_zygote.py: {message}")
        if own_mounts is not None:
            source = own_mounts.encode()
            rc, message = self._call(own, source, len(source))
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

    def release_begin(self, pid, blob):
        """In the zygote, right after the fork: the child's cgroups (v2). On failure the child
        has been killed."""
        return self._call(self._begin, pid, blob, len(blob))

    def release_advance(self, pid, blob, released, message, release_w):
        """In the zygote, for one message read from the child's status pipe (b"" at end of
        file): 1 when it has been released (id maps written), 0 when its checklist is complete
        (the message is its report line), -1 when it failed and has been killed."""
        return self._call(self._advance, pid, blob, len(blob), int(released), message,
                          len(message), release_w)

    def harden(self, blob, status_w, release_r, workspace):
        """In the child: the whole checklist, the workspace being the detached mount `workspace`.
        Takes all three descriptors."""
        return self._call(self._harden, blob, len(blob), status_w, release_r, workspace)


class Checklist:
    """A hardened child between its fork and its last word: the zygote's ends of its two pipes
    and what it waits for, served from the zygote's poll loop while it forks others."""
    __slots__ = ("pid", "session", "rid", "blob", "status_r", "release_w", "released",
                 "deadline", "t0", "fork_ms")

    def __init__(self, pid, session, rid, blob, status_r, release_w, deadline, t0, fork_ms):
        self.pid, self.session, self.rid, self.blob = pid, session, rid, blob
        self.status_r, self.release_w = status_r, release_w
        self.released, self.deadline, self.t0, self.fork_ms = False, deadline, t0, fork_ms

    def waiting_for(self):
        return "completing its checklist" if self.released else "entering its user namespace"


def _kill(pid):
    if pid <= 0:                 # 0 and -1 would signal a group or everyone
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


class Zygote:
    def __init__(self, ctrl_fd, preload, harden_lib, own_mounts=None, checklist_timeout=None):
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
        self.harden = HardenLib(harden_lib, own_mounts) if harden_lib else None
        self.checklists = {}          # status pipe's read end -> Checklist
        self.checklist_timeout = checklist_timeout or CHECKLIST_TIMEOUT
        self.poller = select.poll()

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
                cache_font_heights()            # Agg is loaded by the first figure
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
        rehearse_session()       # what every child runs, run here once: shared, not copied
        rehearse_setup()

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
        self.filler = fill_pools()    # after the collection, which left the holes it fills
        self.heap_filler = fill_heap()
        gc.freeze()
        self.send({"op": "hello", "pid": os.getpid(), "python": platform.python_version(),
                   "preloaded": loaded, "skipped": skipped, "executable": sys.executable,
                   "prefix": sys.prefix, "base_prefix": sys.base_prefix,
                   "startup_ms": round((time.perf_counter() - self.t0) * 1000, 3)})

        self.poller.register(self.ctrl.fileno(), select.POLLIN)
        self.poller.register(wake_r, select.POLLIN)
        while True:
            for fd, _ in self.poller.poll(self._next_deadline_ms()):
                if fd == wake_r:
                    try:
                        while os.read(wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                    self.reap()
                elif fd in self.checklists:
                    self._advance(self.checklists[fd])
                elif fd == self.ctrl.fileno():
                    self.read_control()
            self._expire_checklists()
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
                self.send(too_large_frame(payload))
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
            check_fork(req)
            # hardened: the session socket and the workspace, a detached mount of it
            want = 1 if self.harden is None else 2
            if ctrunc or len(fds) != want:
                what = "one descriptor" if want == 1 else "two descriptors"
                raise BadRequest("bad_fds", f"a fork frame carries exactly {what} by "
                                 f"SCM_RIGHTS; this one carried {len(fds)}"
                                 + (" (truncated)" if ctrunc else ""))
            if not stat.S_ISSOCK(os.fstat(fds[0]).st_mode):
                raise BadRequest("bad_fds", "the descriptor is not a socket")
            if want == 2 and not stat.S_ISDIR(os.fstat(fds[1]).st_mode):
                raise BadRequest("bad_fds", "the second descriptor is not the workspace "
                                 "(a directory)")
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
        """A child that is pid 1 of its own pid namespace. It is released (cgroups, id maps) and
        confines itself while the zygote serves its next requests: "forked" is sent only once
        its whole checklist succeeded (see _advance); any failure is a harden_failed error
        frame, and the child is killed."""
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
                self._child(req, fds[0], (status_w, release_r, fds[1]), blob)
            fork_ms = round((time.perf_counter() - t_fork) * 1000, 3)
            # only the child may hold the status pipe's write end: its end of file is its death
            for fd in (status_w, release_r):
                os.close(fd)
                ours.discard(fd)
            self.children[pid] = session      # so the "exited" frame names it, failed or not
            rc, message = self.harden.release_begin(pid, blob)
            if rc != 0:
                _kill(pid)                    # the library did already; never leave it running
                self.send(error_frame("harden_failed", f"hardening failed: {message}", rid,
                                      session=session, pid=pid))
                return
            ours -= {status_r, release_w}     # the checklist's until the child's last word
            os.set_blocking(status_r, False)
            deadline = time.monotonic() + self.checklist_timeout
            self.checklists[status_r] = Checklist(pid, session, rid, blob, status_r, release_w,
                                                  deadline, t0, fork_ms)
            self.poller.register(status_r, select.POLLIN)
            # the zygote is free for the next fork: the server holds its pool's forks until then
            self.send({"op": "spawned", "session": session})
        finally:
            for fd in ours:
                os.close(fd)

    def _advance(self, c):
        """The child of checklist c said something (or ended): one step of its release."""
        try:
            message = os.read(c.status_r, 4096)   # one message per write, at most PIPE_BUF
        except BlockingIOError:
            return                            # a stale event of a reused descriptor number
        except OSError as e:
            self._fail_checklist(c, f"admission: reading the status pipe: {e.strerror}")
            return
        rc, text = self.harden.release_advance(c.pid, c.blob, c.released, message, c.release_w)
        if rc == 1:
            c.released = True
            c.deadline = time.monotonic() + self.checklist_timeout
        elif rc == 0:
            self._end_checklist(c)
            self.send({"op": "forked", "session": c.session, "pid": c.pid, "hardened": text,
                       "fork_ms": c.fork_ms,
                       "ready_ms": round((time.perf_counter() - c.t0) * 1000, 3)})
        else:
            self._fail_checklist(c, text)

    def _fail_checklist(self, c, message):
        _kill(c.pid)                          # the library did already; never leave it running
        self._end_checklist(c)
        self.send(error_frame("harden_failed", f"hardening failed: {message}", c.rid,
                              session=c.session, pid=c.pid))

    def _end_checklist(self, c):
        del self.checklists[c.status_r]
        self.poller.unregister(c.status_r)
        os.close(c.status_r)
        os.close(c.release_w)                 # after any kill: the child never acts on it

    def _next_deadline_ms(self):
        if not self.checklists:
            return None
        soonest = min(c.deadline for c in self.checklists.values())
        return max(0, int((soonest - time.monotonic()) * 1000) + 1)

    def _expire_checklists(self):
        now = time.monotonic()
        for c in [c for c in self.checklists.values() if c.deadline <= now]:
            self._fail_checklist(c, f"admission: the session child sent nothing within "
                                    f"{self.checklist_timeout:g} s while {c.waiting_for()}")

    def _settle_dead_checklists(self):
        """Before reaping: a child that died during its checklist has a readable status pipe
        (its last message, or end of file). Taken in while the child is a zombie, so the kill
        that follows a failure can only reach it, never a process that reused its pid."""
        if not self.checklists:
            return
        ready = select.poll()
        for fd in self.checklists:
            ready.register(fd, select.POLLIN)
        for fd, _ in ready.poll(0):
            c = self.checklists.get(fd)
            if c is not None:
                self._advance(c)

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
        self._settle_dead_checklists()
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
            for c in [c for c in self.checklists.values() if c.pid == pid]:
                # died between the settling above and waitpid: its pid is free now, never killed
                self._end_checklist(c)
                self.send(error_frame("harden_failed", "hardening failed: admission: the "
                                      f"session child ended while {c.waiting_for()}", c.rid,
                                      session=c.session, pid=pid))
            self.send({"op": "exited", "pid": pid, "session": self.children.pop(pid, None),
                       "status": code, "signal": sig,
                       "core_dumped": bool(os.WIFSIGNALED(status) and os.WCOREDUMP(status))})

    # --- in the child, right after fork
    def _become_child(self, req, sess_fd, sync, blob):
        """sync: the child's ends of the hardening pipes (status write end, release read end) and
        its workspace (a detached mount), or None without a hardening library; blob: the harden
        spec as the zygote encoded it."""
        zygote_pid = os.getppid()
        signal.set_wakeup_fd(-1)
        # _signal's functions, not signal's: their enum conversions are code the zygote never
        # runs, rewritten (so copied) in each child that did
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
                    signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM):
            _signal.signal(sig, _signal.SIG_DFL)
        _signal.signal(signal.SIGINT, on_sigint)
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
