"""The session executor: one forked child serving exec and bash requests on its session socket,
one at a time (the requests, results and their fields are in runtime/PROTOCOL.md)."""

import ast
import builtins
import linecache
import os
import signal
import _signal          # getsignal without the enum lookup, per cell
import subprocess
import sys
import time
import types

from toolgate._capture import flush_std
from toolgate._display import ImageSink, collect_figures, display_data, format_error, show_value
from toolgate._protocol import (MAX_FRAME, SPILL_DIR, TEXT_LIMIT, BadRequest, check_env, encode_frame,
                                error_frame, parse_request, request_id, signal_name,
                                too_large_frame)
from toolgate._upcalls import UPCALLS
from toolgate import _checkpoint, _packages, _sqlite

# the directory of the entry script (runtime/): never on a session's sys.path
_RUNTIME_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# a session's PATH: the runtime's programs first
_PATH = f"{sys.prefix}/bin:/usr/local/bin:/usr/bin:/bin"

# The network proxy's CA for this session (secrets added at the edge: the proxy terminates the
# session's HTTPS to put a secret's value into a request). It comes at fork in this variable,
# is added to a CA bundle of the session's own and leaves the environment; the bundle is named
# by the variables Python's ssl, requests, httpx, curl and pip read.
_EGRESS_CA = "TOOLGATE_EGRESS_CA"
_BUNDLE_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT")


def _public_roots():
    """The public roots every bundle starts with, read once in the zygote (shared by every
    child): certifi's, else the system's."""
    try:
        import certifi
        path = certifi.where()
    except ImportError:
        path = "/etc/ssl/certs/ca-certificates.crt"
    try:
        with open(path, "rb") as f:
            return f.read().rstrip(b"\n") + b"\n"
    except OSError:
        return b""


_PUBLIC_ROOTS = _public_roots()


def trust_session_ca(extra_env, tmpdir):
    """Takes the session's CA out of `extra_env` and, if there was one, writes the session's
    bundle (the public roots and that CA) into `tmpdir` and names it in `extra_env`."""
    pem = extra_env.pop(_EGRESS_CA, None)
    if not pem:
        return
    path = os.path.join(tmpdir or "/tmp", "toolgate-ca-bundle.pem")
    # one writev without joining the ~230 KB of roots to the CA first: 0.12 ms on tmpfs, where
    # a joined write took 0.4 (measured on the CI machine, 2026-11-27)
    parts = [_PUBLIC_ROOTS, pem.encode(), b"\n"]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if os.writev(fd, parts) != sum(map(len, parts)):
            raise OSError("the session's CA bundle was written short")
    finally:
        os.close(fd)
    for name in _BUNDLE_VARIABLES:
        extra_env[name] = path


class _Forked:
    child = False         # set in every child os.fork() makes (not reset: it stays a child)


_FORKED = _Forked()


def _mark_forked():
    _FORKED.child = True


class _State:
    running = False       # a request is executing: SIGINT raises KeyboardInterrupt
    images = None         # the list plt.show() appends to during an exec


STATE = _State()


def on_sigint(signum, frame):
    if STATE.running:
        if UPCALLS.critical:           # an upcall is between the bytes of a frame: raised after
            UPCALLS.interrupted = True
            return
        raise KeyboardInterrupt


def notebook_show(*args, **kwargs):
    """pyplot.show() in a session: the open figures go into this run's images, as in a notebook."""
    if STATE.images is not None:
        collect_figures(STATE.images)


class Session:
    def __init__(self, chan, capture, workspace, tmpdir, extra_env):
        self.chan = chan
        self.capture = capture
        self.workspace = workspace
        self.tmpdir = tmpdir
        self.count = 0
        self.loop = None
        self.last_value = None
        self.pid = os.getpid()
        # the random part of this session's spill files' names, drawn here, in the forked child
        self.spill_tag = os.urandom(4).hex()
        # registered here, in the session's process: the zygote's own fork of it is not the cell's
        _FORKED.child = False
        os.register_at_fork(after_in_child=_mark_forked)
        UPCALLS.chan, UPCALLS.pid = chan, self.pid
        # the environment, from scratch
        env = {"PATH": _PATH, "HOME": workspace,
               "LANG": "C.UTF-8", "MPLBACKEND": "Agg", "OPENBLAS_NUM_THREADS": "1"}
        if os.environ.get("MPLCONFIGDIR"):
            env["MPLCONFIGDIR"] = os.environ["MPLCONFIGDIR"]
        if tmpdir:
            env["TMPDIR"] = tmpdir
        if "HTTP_PROXY" in extra_env:            # a session with network can pip install
            extra_env = {**_packages.pip_env(workspace, _PATH), **extra_env}
        extra_env = dict(extra_env)
        trust_session_ca(extra_env, tmpdir)
        env.update(extra_env)
        # the fork's variables are the session's whole life's (its network proxy among them):
        # bash commands get them too, though nothing else of Python's environment
        self.session_env = dict(extra_env)
        os.environ.clear()
        os.environ.update(env)
        tf = sys.modules.get("tempfile")
        if tf is not None:
            tf.tempdir = None
        # a fresh __main__ for the user's code; the workspace importable, as '' in a REPL. The
        # executor's own globals live in this package's modules, which sys.modules keeps.
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = main
        self.ns = main.__dict__
        sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != _RUNTIME_DIR]
        sys.path.insert(0, "")
        self.site_dirs = _packages.site_dirs(workspace)
        _packages.add_site_dirs(self.site_dirs)
        sys.argv = [""]
        capture.start()

    def warm_up(self):
        """Runs the exec path once on a throwaway cell, in a throwaway namespace, and encodes the
        reply without sending it; the count, the namespace and the line cache are restored. The
        first run of that path in a new child copies (copy-on-write) the pages of every object it
        touches and fills lazy caches: done here, before the first request can come from a warm
        session's taker, not during it (measured: 0.8 ms of the first run, 0.2 of a later one)."""
        count, ns = self.count, self.ns
        self.ns = {"__builtins__": builtins}
        try:
            encode_frame(self.run_exec(None, "1 + 1", False, None))
        except BaseException:
            pass                                 # only a cache warm-up: never the session's fault
        finally:
            linecache.cache.pop(f"<cell {self.count}>", None)
            self.count, self.ns = count, ns

    def serve(self):
        chan = self.chan
        sock, decoder, pending = chan.sock, chan.decoder, chan.pending
        buf, view = chan.rbuf, chan.rview
        while True:
            if pending:                  # what an upcall read past its answer, in order
                events = pending[:]
                pending.clear()
            else:
                try:
                    n = sock.recv_into(buf)
                except KeyboardInterrupt:
                    continue
                except OSError:
                    return
                if not n:
                    return
                events = decoder.feed(view[:n])
            for kind, payload in events:
                if kind == "too_large":
                    chan.send(too_large_frame(payload))
                    continue
                try:
                    self.handle(payload)
                except KeyboardInterrupt:
                    pass
                except BadRequest as e:
                    chan.send(error_frame(e.code, e.message))
                except Exception as e:
                    chan.send(error_frame("bad_request", f"{type(e).__name__}: {e}"))

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
            if op in ("checkpoint", "restore"):
                self.chan.send(self.run_state(op, rid, req.get("path")))
                return
            if op not in ("exec", "bash", "sqlite"):
                if op in ("upcall_result", "upcall_progress"):
                    return                       # a late answer to an interrupted upcall
                raise BadRequest("unknown_op", f"unknown op {op!r} on a session channel")
            if rid is None:
                raise BadRequest("bad_request", f'"{op}" needs an integer or string "id"')
            env = check_env(req.get("env"))
            stream = req.get("stream", False)
            if not isinstance(stream, bool):
                raise BadRequest("bad_request", '"stream" must be true or false')
            spill = req.get("spill", False)
            if not isinstance(spill, bool):
                raise BadRequest("bad_request", '"spill" must be true or false')
            spill = self._spill_names(rid) if spill else None
            if op == "sqlite":
                reply = self.run_sqlite(rid, req)
            elif op == "exec":
                if not isinstance(req.get("code"), str):
                    raise BadRequest("bad_request", '"exec" needs a string "code"')
                reply = self.run_exec(rid, req["code"], stream, env, spill)
            else:
                command, timeout = req.get("command"), req.get("timeout_s")
                if not isinstance(command, str):
                    raise BadRequest("bad_request", '"bash" needs a string "command"')
                if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                            or not timeout > 0):
                    raise BadRequest("bad_request", '"timeout_s" must be a positive number')
                reply = self.run_bash(rid, command, timeout, stream, env, spill)
        except BadRequest as e:
            self.chan.send(error_frame(e.code, e.message, rid))
            return
        self.send_result(reply)
        self.last_value = None

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
        reply = {"op": "result", "id": rid, "kind": kind, **out, "result": None, "images": [],
                 "images_truncated": False, "error": None, "exit_status": None, "signal": None,
                 "timed_out": False, "execution_count": self.count, **fields}
        reply["duration_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        return reply

    # --- Python
    def _spill_names(self, rid):
        """Names the files a request's streams are kept whole in, under SPILL_DIR of the
        workspace (whatever a cell's chdir did); the session's random part keeps a later session's
        runs from replacing an earlier one's."""
        tag = f"run-{self.count + 1}-{self.spill_tag}"

        def name(stream):
            relative = f"{SPILL_DIR}/{tag}.{stream}.txt"
            return os.path.join(self.workspace, relative), relative
        return name

    def run_exec(self, rid, src, stream, env, spill=None):
        t0 = time.perf_counter()
        self.count += 1
        sink = ImageSink()
        saved = self._with_env(env) if env else None
        self.capture.begin(rid, stream, spill)
        result = error = None
        STATE.images = sink
        if _signal.getsignal(signal.SIGINT) is not on_sigint:
            signal.signal(signal.SIGINT, on_sigint)   # a cell may have replaced it
        UPCALLS.rid = rid                             # upcalls may be made from here ...
        _packages.forget_missing(self.site_dirs)
        try:
            try:
                STATE.running = True
                value, show = self._execute(src)
                if show and value is not None:
                    result = display_data(value)
                # freed once the result is sent, not before (a DataFrame's teardown is ~0.3 ms)
                self.last_value, value = value, None
            finally:
                STATE.running = False
        except BaseException as e:       # KeyboardInterrupt and SystemExit included: the session lives
            STATE.running = False
            error = format_error(e)
            e.__traceback__ = None
        UPCALLS.rid = None                            # ... to here
        self._exit_if_forked()
        if UPCALLS.lock.locked():                     # one still in flight: the result follows it
            with UPCALLS.lock:
                pass
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
        """A process the cell forked (os.fork, multiprocessing) that ran to the cell's end must
        not answer or serve. Python's after-fork hook marks such a child, so that the common
        case costs no getpid() (a system call through the session's filters) per run."""
        if _FORKED.child and os.getpid() != self.pid:
            flush_std()
            os._exit(0)

    def _execute(self, src):
        filename = f"<cell {self.count}>"
        lines = src.splitlines(True)
        linecache.cache[filename] = (len(src), None, lines, filename)
        if _maybe_expression(src):
            # one expression: compiled straight from the text, without the ast module's objects
            # (half the time of parsing it to a tree and compiling the tree)
            try:
                code = compile(src, filename, "eval", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                               dont_inherit=True)
            except Exception:
                code = None               # not one: the general path below, with its own errors
            if code is not None:
                return self._run(code), True
        tree = ast.parse(src, filename=filename, mode="exec")
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        last, show = None, False
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            node = tree.body.pop()
            last = ast.Expression(node.value)
            show = show_value(src, lines, node)
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

    # --- checkpoint and restore (toolgate/_checkpoint.py)
    def run_state(self, op, rid, path):
        """The answer to a checkpoint or restore request: its reply or an error frame."""
        if rid is None:
            raise BadRequest("bad_request", f'"{op}" needs an integer or string "id"')
        if (not isinstance(path, str) or not path or "\0" in path or path.startswith("/")
                or ".." in path.split("/")):
            raise BadRequest("bad_request", f'"{op}" needs a relative "path" without ".."')
        full = os.path.join(self.workspace, path)     # the workspace, whatever a cell's chdir did
        t0 = time.perf_counter()
        if op == "checkpoint":
            try:
                size, kept, not_kept = _checkpoint.checkpoint(self.ns, self.count, full)
            except _checkpoint.CheckpointFailed as e:
                return error_frame("checkpoint_failed", str(e), rid)
            return {"op": "checkpointed", "id": rid, "bytes": size, "kept": kept,
                    "not_kept": not_kept, "duration_ms": round((time.perf_counter() - t0) * 1000, 3)}
        try:
            restored, not_restored, count = _checkpoint.restore(self.ns, full)
        except _checkpoint.RestoreFailed as e:
            return error_frame("restore_failed", str(e), rid)
        self.count = count
        return {"op": "restored", "id": rid, "restored": restored, "not_restored": not_restored,
                "execution_count": count, "duration_ms": round((time.perf_counter() - t0) * 1000, 3)}

    # --- SQLite
    def run_sqlite(self, rid, req):
        path, statement, write = req.get("path"), req.get("statement"), req.get("write", False)
        max_rows, max_bytes, timeout = req.get("max_rows"), req.get("max_bytes"), req.get("timeout_s")
        if not isinstance(path, str) or not path or "\0" in path:
            raise BadRequest("bad_request", '"sqlite" needs a string "path"')
        if not isinstance(statement, str):
            raise BadRequest("bad_request", '"sqlite" needs a string "statement"')
        if not isinstance(write, bool):
            raise BadRequest("bad_request", '"write" must be true or false')
        for name, value in (("max_rows", max_rows), ("max_bytes", max_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise BadRequest("bad_request", f'"{name}" must be a non-negative integer')
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout > 0):
            raise BadRequest("bad_request", '"timeout_s" must be a positive number')
        t0 = time.perf_counter()
        self.count += 1
        table = error = None
        if _signal.getsignal(signal.SIGINT) is not on_sigint:
            signal.signal(signal.SIGINT, on_sigint)
        self.capture.begin(rid, False)        # what SQLite or a callback might print
        try:
            try:
                STATE.running = True
                table = _sqlite.run(path, statement, write, max_rows, max_bytes, timeout)
            finally:
                STATE.running = False
        except _sqlite.SqliteFailure as e:
            error = {"type": "SqliteError", "message": str(e), "traceback": ""}
        except KeyboardInterrupt:
            error = {"type": "KeyboardInterrupt", "message": "the statement was interrupted",
                     "traceback": ""}
        return self._reply("sqlite", rid, t0, self.capture.end(), error=error, table=table)

    # --- bash
    def run_bash(self, rid, command, timeout, stream, env, spill=None):
        t0 = time.perf_counter()
        self.count += 1
        benv = {"PATH": _PATH, "HOME": self.workspace,
                "LANG": "C.UTF-8"}
        if self.tmpdir:
            benv["TMPDIR"] = self.tmpdir
        benv.update(self.session_env)
        benv.update(env)
        self.capture.begin(rid, stream, spill)
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


# first words of a line that make it a statement: such a cell never takes the expression path
_STATEMENT_WORDS = frozenset(("import", "from", "del", "pass", "assert", "raise", "return",
                              "global", "nonlocal", "break", "continue", "if", "for", "while",
                              "with", "try", "def", "class", "async"))


def _maybe_expression(src):
    """Whether a cell may be a single expression (a guess: a wrong "yes" costs one failed
    compile, a wrong "no" the general path): one line, no '=' or ';', no statement's word first."""
    text = src.strip()
    if not text or "\n" in text or "=" in text or ";" in text:
        return False
    return text.split(None, 1)[0].split("(", 1)[0] not in _STATEMENT_WORDS


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
