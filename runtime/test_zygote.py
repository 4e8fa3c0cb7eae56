"""Tests of runtime/toolgate_zygote.py, the Python fork server and session executor.

How to run (two interpreters, on purpose):
    bash scripts/python-runtime.sh /tmp/tg-runtime           # the runtime under test
    TOOLGATE_PYTHON_RUNTIME=/tmp/tg-runtime .deps/venv/bin/python -m pytest -q runtime/test_zygote.py
The zygote under test always runs with the runtime's own interpreter (RUNTIME/bin/python -I), exactly
as toolgate starts it. The test harness itself needs only the standard library and pytest, so it runs
under any Python 3 with pytest, e.g. the project's test venv (.deps/venv, made by scripts/deps.sh,
which pins pytest). pytest is deliberately NOT installed into the runtime: everything in the runtime
is visible to every tenant's code, and the runtime must hold exactly runtime/requirements.txt.
TOOLGATE_PYTHON_RUNTIME defaults to .deps/python-runtime; a missing runtime fails the tests.

The timing test prints fork-to-first-result, `1+1` round trip, figure time and idle-session PSS at
200 live sessions (no assertion on them).
"""

import base64
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ZYGOTE = HERE / "toolgate_zygote.py"
RUNTIME = Path(os.environ.get("TOOLGATE_PYTHON_RUNTIME", HERE.parent / ".deps" / "python-runtime")).resolve()
PYTHON = RUNTIME / "bin" / "python"
MAX_FRAME = 64 << 20
MIB = 1 << 20
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CANARY = "TOOLGATE_TEST_CANARY"


def frame(obj):
    body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return struct.pack(">I", len(body)) + body


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("peer closed")
        buf += chunk
    return bytes(buf)


def recv_frame(sock):
    (n,) = struct.unpack(">I", recv_exact(sock, 4))
    assert n <= MAX_FRAME
    return json.loads(recv_exact(sock, n))


class Zygote:
    def __init__(self, *args, env=None, wrap=()):
        """wrap: a command the zygote is started under (setpriv, to drop a capability)."""
        if not PYTHON.exists():
            pytest.fail(f"no runtime at {RUNTIME}: run scripts/python-runtime.sh DIR and set "
                        "TOOLGATE_PYTHON_RUNTIME=DIR")
        self.ctrl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ctrl.settimeout(60)
        full_env = dict(os.environ, **(env or {}))
        self.proc = subprocess.Popen([*wrap, str(PYTHON), "-I", str(ZYGOTE), str(theirs.fileno()), *args],
                                     pass_fds=[theirs.fileno()], env=full_env)
        theirs.close()
        self.pending = []           # frames read while waiting for another one
        self.hello = self.expect("hello")
        self.workspaces = []

    def send(self, obj, fds=None):
        data = frame(obj)
        if fds:
            socket.send_fds(self.ctrl, [data], fds)
        else:
            self.ctrl.sendall(data)

    def expect(self, op, pred=lambda f: True):
        for i, f in enumerate(self.pending):
            if f["op"] == op and pred(f):
                return self.pending.pop(i)
        while True:
            f = recv_frame(self.ctrl)
            if f["op"] == op and pred(f):
                return f
            self.pending.append(f)

    def fork(self, session, cwd=None, **extra):
        if cwd is None:
            cwd = tempfile.mkdtemp(prefix="tg-ws-")
            self.workspaces.append(cwd)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.send({"op": "fork", "session": session, "cwd": cwd, "fd": theirs.fileno(), **extra},
                  [theirs.fileno()])
        theirs.close()
        mine.settimeout(60)
        pid = self.expect("forked", lambda f: f["session"] == session)["pid"]
        return Session(self, session, mine, cwd, pid)

    def close(self):
        self.ctrl.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for w in self.workspaces:
            shutil.rmtree(w, ignore_errors=True)


class Session:
    def __init__(self, zygote, name, sock, cwd, pid):
        self.zygote, self.name, self.sock, self.cwd, self.pid = zygote, name, sock, cwd, pid
        self.next_id = 0

    def request(self, op, **fields):
        self.next_id += 1
        rid = self.next_id
        self.sock.sendall(frame({"op": op, "id": rid, **fields}))
        outputs = []
        while True:
            f = recv_frame(self.sock)
            if f["op"] == "output":
                assert f["id"] == rid
                outputs.append(f)
                continue
            assert f["op"] == "result", f
            assert f["id"] == rid
            if outputs:
                f["_outputs"] = outputs
            return f

    def interrupted(self, code):
        """Runs code that never ends, sends SIGINT once it is running, returns the result."""
        self.next_id += 1
        self.sock.sendall(frame({"op": "exec", "id": self.next_id, "stream": True,
                                 "code": "print('started')\n" + code}))
        f = recv_frame(self.sock)
        assert f["op"] == "output" and f["data"] == "started\n", f
        time.sleep(0.05)
        t0 = time.monotonic()
        os.kill(self.pid, signal.SIGINT)
        r = recv_frame(self.sock)
        assert r["op"] == "result" and time.monotonic() - t0 < 2
        return r

    def run(self, code, **fields):
        return self.request("exec", code=code, **fields)

    def value(self, code):
        r = self.run(code)
        assert r["error"] is None, r["error"]
        return r["result"]["text/plain"] if r["result"] else None

    def bash(self, command, **fields):
        return self.request("bash", command=command, **fields)

    def close(self):
        self.sock.close()


@pytest.fixture(scope="module")
def zygote():
    z = Zygote(env={CANARY: "leaked-if-seen"})
    yield z
    z.close()


def test_hello_reports_the_preloaded_data_stack(zygote):
    h = zygote.hello
    assert h["python"].startswith("3.11.")
    assert h["preloaded"] == ["numpy", "pandas", "matplotlib.pyplot"]
    assert h["skipped"] == {}
    assert h["pid"] == zygote.proc.pid
    assert Path(h["prefix"]).resolve() == RUNTIME.resolve()
    base = subprocess.run([str(PYTHON), "-c", "import sys; print(sys.base_prefix)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert Path(h["base_prefix"]).resolve() == Path(base).resolve()


def test_zygote_holds_no_stray_descriptors(zygote):
    fds = sorted(int(x) for x in os.listdir(f"/proc/{zygote.proc.pid}/fd"))
    # 0, 1, 2, the control socket and the SIGCHLD wake-up pipe; nothing a preloaded package opened
    assert len(fds) <= 6, [(fd, os.readlink(f"/proc/{zygote.proc.pid}/fd/{fd}")) for fd in fds]


def test_persistence_within_and_isolation_between_sessions(zygote):
    a, b = zygote.fork("persist-a"), zygote.fork("persist-b")
    try:
        assert a.run("x = 41\nimport json")["error"] is None
        assert a.value("x + 1") == "42"
        assert a.value("json.dumps({'k': x})") == repr('{"k": 41}')
        r = b.run("x")
        assert r["error"]["type"] == "NameError"
        assert b.run("json")["error"]["type"] == "NameError"
        assert b.run("x = 'b'")["error"] is None
        assert a.value("x") == "41"
        assert a.pid != b.pid
    finally:
        a.close()
        b.close()


def test_the_first_request_finds_an_untouched_session(zygote):
    """The child runs the exec path once before serving (a warm-up): nothing of it shows."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    zygote.send({"op": "fork", "session": "untouched", "cwd": "/tmp", "fd": theirs.fileno()},
                [theirs.fileno()])
    theirs.close()
    forked = zygote.expect("forked", lambda f: f["session"] == "untouched")
    assert 0 < forked["fork_ms"] <= forked["ready_ms"], forked
    s = Session(zygote, "untouched", mine, "/tmp", forked["pid"])
    try:
        r = s.run("import linecache\n"
                  "(sorted(k for k in globals() if not k.startswith('__')), "
                  "sorted(k for k in linecache.cache if k.startswith('<cell')))")
        assert r["error"] is None, r["error"]
        assert r["execution_count"] == 1
        assert r["stdout"] == r["stderr"] == ""
        assert r["result"]["text/plain"] == "(['linecache'], ['<cell 1>'])"
    finally:
        s.close()


def test_last_expression_value_as_in_a_notebook(zygote):
    s = zygote.fork("last-expr")
    try:
        assert s.value("1+1") == "2"
        assert s.value("y = 3") is None
        assert s.value("y = 3\ny * 2") == "6"
        assert s.value("None") is None
        assert s.value("print('p')") is None          # print returns None
        assert s.value("y;") is None                   # ';' hides the value
        assert s.value("y  # no semicolon;") == "3"
        assert s.value("'text'") == "'text'"
        assert s.value("import asyncio\nawait asyncio.sleep(0)\n7") == "7"   # top-level await
        assert s.run("")["result"] is None
    finally:
        s.close()


def test_output_captured_at_the_descriptor_level(zygote):
    s = zygote.fork("capture")
    try:
        r = s.run("import os, sys, ctypes\n"
                  "print('from print')\n"
                  "os.system('echo from-subprocess')\n"
                  "os.write(1, b'x')\n"
                  "libc = ctypes.CDLL(None); libc.printf(b'from-c\\n'); libc.fflush(None)\n"
                  "sys.stderr.write('err-py\\n')\n"
                  "os.system('echo err-sub >&2')\n"
                  "os.write(2, b'raw-err')\n")
        assert r["error"] is None
        out = r["stdout"]
        for piece in ("from print\n", "from-subprocess\n", "x", "from-c\n"):
            assert piece in out
        assert out.index("from print") < out.index("from-subprocess") < out.index("x")
        assert r["stderr"] == "err-py\nerr-sub\nraw-err"
        assert not r["stdout_truncated"] and not r["stderr_truncated"]
        # nothing leaks into the next request
        r = s.run("1")
        assert r["stdout"] == "" and r["stderr"] == ""
    finally:
        s.close()


def test_exception_type_message_and_traceback(zygote):
    s = zygote.fork("exceptions")
    try:
        r = s.run("def f(d):\n    return d['missing']\n\nf({})")
        e = r["error"]
        assert e["type"] == "KeyError"
        assert e["message"] == "'missing'"
        tb = e["traceback"]
        assert tb.startswith("Traceback (most recent call last):")
        assert "return d['missing']" in tb and "line 2, in f" in tb
        assert "toolgate_zygote" not in tb
        assert tb.rstrip().endswith("KeyError: 'missing'")
        assert r["result"] is None

        r = s.run("1 +")
        assert r["error"]["type"] == "SyntaxError"
        assert "1 +" in r["error"]["traceback"]

        r = s.run("import os\npid = os.fork()\n'child' if pid == 0 else 'parent'")
        assert r["result"]["text/plain"] == "'parent'"        # the forked copy exits silently
        assert s.value("os.waitpid(pid, 0)[1]") == "0"
        r = s.run("import sys\nsys.exit(3)")
        assert r["error"]["type"] == "SystemExit" and r["error"]["message"] == "3"
        assert s.value("'alive'") == "'alive'"
    finally:
        s.close()


def test_sigint_interrupts_a_busy_loop_and_the_session_survives(zygote):
    s = zygote.fork("interrupt")
    try:
        assert s.run("kept = [1, 2, 3]")["error"] is None
        os.kill(s.pid, signal.SIGINT)                 # idle: ignored
        assert s.value("len(kept)") == "3"
        r = s.interrupted("while True: pass")
        assert r["error"]["type"] == "KeyboardInterrupt"
        assert "while True" in r["error"]["traceback"]
        assert s.value("kept") == "[1, 2, 3]"
        # a cell that ignores SIGINT does not stay in force for the next one
        s.run("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)")
        r = s.interrupted("import time\nwhile True: time.sleep(0.01)")
        assert r["error"]["type"] == "KeyboardInterrupt"
        assert s.value("len(kept)") == "3"
    finally:
        s.close()


def test_figures_and_exception_type_names_stay_within_the_servers_caps(zygote):
    # the server refuses a reply with more than 64 images or a type name over 256 characters
    s = zygote.fork("caps")
    try:
        r = s.run("import matplotlib.pyplot as plt\nfor i in range(70):\n    plt.figure(figsize=(0.2, 0.2))")
        assert r["error"] is None
        assert len(r["images"]) == 64 and r["images_truncated"] is True
        r = s.run("raise type('E' * 1000, (Exception,), {})('m')")
        assert r["error"]["type"] == "E" * 256
    finally:
        s.close()


def test_matplotlib_figures_come_back_as_png(zygote):
    s = zygote.fork("plots")
    try:
        r = s.run("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t');")
        assert r["error"] is None and r["result"] is None
        assert len(r["images"]) == 1
        png = base64.b64decode(r["images"][0])
        assert png.startswith(PNG_SIGNATURE) and len(png) > 1000
        assert s.value("len(plt.get_fignums())") == "0"      # closed after the run
        # plt.show() as in a notebook: each call returns what is open, then a fresh figure
        r = s.run("plt.plot([1, 2]); plt.show()\nplt.plot([2, 1]); plt.show()")
        assert r["error"] is None and len(r["images"]) == 2
        # a Figure that pyplot does not manage, as the value
        r = s.run("from matplotlib.figure import Figure\nfig = Figure()\nfig.subplots().plot([0, 1])\nfig")
        assert r["images"] == []
        assert base64.b64decode(r["result"]["image/png"]).startswith(PNG_SIGNATURE)
    finally:
        s.close()


def test_dataframe_rendered_as_text_and_html(zygote):
    s = zygote.fork("frames")
    try:
        r = s.run("import pandas as pd\npd.DataFrame({'city': ['Oslo', 'Lima'], 'temp': [3.5, 19.0]})")
        res = r["result"]
        assert res["text/plain"].splitlines() == ["   city  temp", "0  Oslo   3.5", "1  Lima  19.0"]
        assert res["text/html"].startswith("<table") and "<td>Oslo</td>" in res["text/html"]
        r = s.run("pd.DataFrame({'n': range(1000)})")
        text = r["result"]["text/plain"]
        assert len(text.splitlines()) < 70 and "[1000 rows x 1 columns]" in text
        assert r["result"]["text/html"].count("<tr>") < 70
    finally:
        s.close()


def test_bash_status_output_environment_and_limits(zygote):
    s = zygote.fork("bash")
    try:
        r = s.bash("echo out; echo err >&2; exit 3")
        assert (r["stdout"], r["stderr"], r["exit_status"], r["signal"]) == ("out\n", "err\n", 3, None)
        assert r["error"] is None and r["kind"] == "bash"
        r = s.bash("pwd; echo $HOME; env | cut -d= -f1 | sort | tr '\\n' ' '")
        lines = r["stdout"].splitlines()
        assert lines[0] == s.cwd and lines[1] == s.cwd
        assert set(lines[2].split()) <= {"HOME", "LANG", "PATH", "PWD", "SHLVL", "_"}
        # Python and bash share the workspace
        s.run("open('from_python.txt', 'w').write('shared')")
        assert s.bash("cat from_python.txt")["stdout"] == "shared"
        r = s.bash("kill -KILL $$")
        assert r["exit_status"] == 137 and r["signal"] == "SIGKILL"
        t0 = time.monotonic()
        r = s.bash("echo start; sleep 30", timeout_s=0.5)
        assert time.monotonic() - t0 < 5
        assert r["timed_out"] and r["error"]["type"] == "Timeout" and r["stdout"] == "start\n"
        assert r["signal"] == "SIGTERM"
        assert s.bash("echo still here")["stdout"] == "still here\n"
    finally:
        s.close()


def test_output_over_one_mib_is_truncated_with_a_flag(zygote):
    s = zygote.fork("truncate")
    try:
        r = s.run("print('é' * (3 << 20))\nimport os\nos.write(2, b'y' * (2 << 20))\n'done'")
        assert r["result"]["text/plain"] == "'done'"
        assert r["stdout_truncated"] and r["stderr_truncated"]
        assert len(r["stdout"].encode()) <= MIB and len(r["stdout"].encode()) > MIB - 4
        assert set(r["stdout"]) == {"é"}                 # cut on a character boundary
        assert r["stdout_bytes"] == 2 * (3 << 20) + 1
        assert r["stderr"] == "y" * MIB and r["stderr_bytes"] == 2 << 20
        r = s.bash("head -c 3000000 /dev/zero | tr '\\0' z")
        assert r["stdout_truncated"] and len(r["stdout"]) == MIB and r["exit_status"] == 0
        r = s.run("print('small')")
        assert r["stdout"] == "small\n" and not r["stdout_truncated"]
    finally:
        s.close()


def test_streamed_output_frames_precede_the_result(zygote):
    s = zygote.fork("stream")
    try:
        r = s.run("import time\nfor i in range(3):\n    print(i)\n    time.sleep(0.15)\n'end'", stream=True)
        chunks = r.get("_outputs", [])
        assert "".join(c["data"] for c in chunks if c["stream"] == "stdout") == "0\n1\n2\n"
        assert len(chunks) >= 2                          # arrived while running, not all at the end
        assert r["stdout"] == "0\n1\n2\n" and r["result"]["text/plain"] == "'end'"
        r = s.bash("echo a; sleep 0.2; echo b >&2", stream=True)
        assert [(c["stream"], c["data"]) for c in r["_outputs"]] == [("stdout", "a\n"), ("stderr", "b\n")]
        assert "_outputs" not in s.run("print('quiet')")          # no frames unless asked
    finally:
        s.close()


def test_environment_is_clean_and_per_request_env_is_temporary(zygote):
    s = zygote.fork("env", tmpdir="/tmp")
    try:
        env = json.loads(s.value("import os, json\njson.dumps(dict(os.environ))")[1:-1])
        assert set(env) == {"PATH", "HOME", "LANG", "MPLBACKEND", "OPENBLAS_NUM_THREADS",
                            "MPLCONFIGDIR", "TMPDIR"}
        assert env["HOME"] == s.cwd and env["LANG"] == "C.UTF-8" and env["TMPDIR"] == "/tmp"
        assert env["PATH"].startswith(str(RUNTIME))
        for path in ("/proc/self/environ", f"/proc/{zygote.proc.pid}/environ"):
            assert s.value(f"{CANARY!r}.encode() in open({path!r}, 'rb').read()") == "False"
        assert s.value("os.getcwd()") == repr(s.cwd)
        assert s.value("os.path.expanduser('~')") == repr(s.cwd)
        r = s.run("os.environ['API_TOKEN']", env={"API_TOKEN": "t0ken"})
        assert r["result"]["text/plain"] == "'t0ken'"
        assert s.value("'API_TOKEN' in os.environ") == "False"
        assert s.bash("echo $API_TOKEN", env={"API_TOKEN": "t1"})["stdout"] == "t1\n"
    finally:
        s.close()


def test_child_holds_only_its_own_descriptors(zygote):
    s = zygote.fork("fds")
    try:
        kinds = s.value("import os\n"
                        "def kind(fd):\n"
                        "    try: return os.readlink(f'/proc/self/fd/{fd}').split(':')[0]\n"
                        "    except OSError: return None\n"
                        "sorted(filter(None, (kind(fd) for fd in os.listdir('/proc/self/fd'))))")
        kinds = eval(kinds)
        # /dev/null on 0, four pipe ends (fds 1 and 2 and the reader's), the session socket
        assert kinds.count("socket") == 1
        assert kinds.count("pipe") == 6
        assert kinds.count("/dev/null") == 1
        assert len(kinds) == 8
    finally:
        s.close()


def test_exited_frames_report_status_and_signal(zygote):
    s = zygote.fork("exit-clean")
    pid = s.pid
    s.close()
    f = zygote.expect("exited", lambda f: f["pid"] == pid)
    assert (f["session"], f["status"], f["signal"]) == ("exit-clean", 0, None)
    s = zygote.fork("exit-killed")
    assert s.value("1") == "1"
    os.kill(s.pid, signal.SIGKILL)
    f = zygote.expect("exited", lambda f: f["pid"] == s.pid)
    assert (f["status"], f["signal"]) == (None, "SIGKILL")
    s.close()
    s = zygote.fork("exit-os", cwd="/")
    s.sock.sendall(frame({"op": "exec", "id": 1, "code": "import os; os._exit(7)"}))
    f = zygote.expect("exited", lambda f: f["pid"] == s.pid)
    assert f["status"] == 7
    s.close()


def test_a_missing_workspace_is_a_setup_error(zygote):
    s = zygote.fork("no-ws", cwd="/nonexistent/toolgate/ws")
    f = recv_frame(s.sock)
    assert f["op"] == "error" and f["code"] == "session_setup"
    assert zygote.expect("exited", lambda f: f["pid"] == s.pid)["status"] == 70
    s.close()


def test_malformed_frames_on_the_control_channel(zygote):
    z = zygote
    ctrl = z.ctrl

    def error_after(data, fds=None):
        if fds:
            socket.send_fds(ctrl, [data], fds)
        else:
            ctrl.sendall(data)
        return z.expect("error")

    assert error_after(frame(b"not json"))["code"] == "bad_json"
    assert error_after(frame(b"\xff\xfe"))["code"] == "bad_json"
    assert error_after(frame(b""))["code"] == "bad_json"
    assert error_after(frame([1, 2]))["code"] == "bad_frame"
    assert error_after(frame({"no": "op"}))["code"] == "bad_frame"
    assert error_after(frame({"op": "exec", "id": 9, "code": "1"}))["code"] == "unknown_op"
    e = error_after(frame({"op": "fork", "session": "x", "cwd": "/tmp"}))
    assert e["code"] == "bad_fds" and e["session"] == "x"
    r, w = os.pipe()
    e = error_after(frame({"op": "fork", "session": "x", "cwd": "/tmp"}), [r])
    assert e["code"] == "bad_fds"                           # a pipe, not a socket
    a, b = socket.socketpair()
    e = error_after(frame({"op": "fork", "session": 5, "cwd": "/tmp"}), [b.fileno()])
    assert e["code"] == "bad_request"
    e = error_after(frame({"op": "fork", "session": "x", "cwd": "relative"}), [b.fileno()])
    assert e["code"] == "bad_request"
    # a descriptor sent with a frame that is not a fork is closed, never kept for a later fork
    e = error_after(frame({"op": "nope"}), [b.fileno()])
    assert e["code"] == "unknown_op"
    os.close(w)
    b.close()
    a.settimeout(5)
    assert a.recv(1) == b""                                  # the zygote holds no copy of b
    os.close(r)
    a.close()
    # too long: answered at once, the declared bytes are read and dropped, the stream stays in step
    n = MAX_FRAME + 1
    ctrl.sendall(struct.pack(">I", n))
    e = z.expect("error")
    assert e["code"] == "too_large"
    ctrl.sendall(b"{" * n)
    z.send({"op": "ping"})
    assert z.expect("pong")["pid"] == z.proc.pid
    assert z.proc.poll() is None
    s = z.fork("after-garbage")
    assert s.value("6*7") == "42"
    s.close()


def test_malformed_frames_on_a_session_channel(zygote):
    s = zygote.fork("garbage")
    sock = s.sock
    try:
        def error_after(data):
            sock.sendall(data)
            f = recv_frame(sock)
            assert f["op"] == "error", f
            return f

        assert error_after(frame(b'{"op":"exec","id":1,"code":"open(\'pwned\',\'w\')"'))["code"] == "bad_json"
        assert error_after(frame(b"[]"))["code"] == "bad_frame"
        assert error_after(frame({"op": "fork", "id": 3}))["code"] == "unknown_op"
        assert error_after(frame({"op": "exec", "code": "open('pwned','w')"}))["code"] == "bad_request"
        e = error_after(frame({"op": "exec", "id": 4, "code": 5}))
        assert (e["code"], e["id"]) == ("bad_request", 4)
        assert error_after(frame({"op": "bash", "id": 5, "command": "true", "timeout_s": -1}))["code"] == "bad_request"
        assert error_after(frame({"op": "exec", "id": 6, "code": "1", "env": {"A": 1}}))["code"] == "bad_request"
        n = MAX_FRAME + 1
        sock.sendall(struct.pack(">I", n)[:2])               # half a header, then the rest
        time.sleep(0.05)
        sock.sendall(struct.pack(">I", n)[2:])
        assert recv_frame(sock)["code"] == "too_large"
        sock.sendall(frame({"op": "exec", "id": 7, "code": "open('pwned','w')"})[:n])  # dropped ...
        sock.sendall(b"\0" * (n - len(frame({"op": "exec", "id": 7, "code": "open('pwned','w')"}))))
        sock.sendall(frame({"op": "ping", "id": "p"}))
        assert recv_frame(sock) == {"op": "pong", "id": "p"}
        assert s.value("import os\nos.path.exists('pwned')") == "False"
    finally:
        s.close()


def test_missing_preload_is_skipped_and_reported():
    z = Zygote("--preload=json,toolgate_no_such_package")
    try:
        assert z.hello["preloaded"] == ["json"]
        assert "ModuleNotFoundError" in z.hello["skipped"]["toolgate_no_such_package"]
        s = z.fork("light")
        assert s.value("import sys\n'numpy' in sys.modules") == "False"
        assert s.value("import numpy\nint(numpy.arange(5).sum())") == "10"
        s.close()
    finally:
        z.close()


def harden_lib():
    lib = os.environ.get("TOOLGATE_HARDEN_LIB")
    if not lib or not Path(lib).exists():
        pytest.fail("TOOLGATE_HARDEN_LIB must name the built confinement library "
                    "(cargo build -p toolgate-sandbox-harden; target/debug/libtoolgate_sandbox_harden.so)")
    return lib


HARDEN_UID = 1_000_321          # the host uid of the hardened sessions below (1000 inside)
TMP_BYTES = 1 << 20


@pytest.fixture(scope="module")
def base_prefix():
    return subprocess.run([str(PYTHON), "-c", "import sys; print(sys.base_prefix)"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def workspaces():
    """A root for hardened workspaces outside /tmp (each session sees its own empty /tmp there),
    searchable by the sessions' uid."""
    root = tempfile.mkdtemp(prefix="tg-hardened-", dir="/var/tmp")
    os.chmod(root, 0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def workspace(root, owner=HARDEN_UID):
    ws = tempfile.mkdtemp(prefix="ws-", dir=root)
    os.chown(ws, owner, owner)
    return ws


def hardened_spec(ws, base, **overrides):
    spec = {"workspace": ws, "tmp": "/tmp", "hostname": "session-test", "network": False,
            "read_only": [str(RUNTIME), base, "/usr", "/lib", "/lib64", "/bin", "/etc/ld.so.cache",
                          "/etc/alternatives"],
            "max_open_files": 256, "max_file_bytes": 64 << 20, "uid": HARDEN_UID,
            "tmp_bytes": TMP_BYTES}
    spec.update(overrides)
    return spec


def fork_hardened(z, name, root, base, **overrides):
    ws = workspace(root)
    # the session finds its workspace at /workspace, in a root of its own
    s = z.fork(name, cwd="/workspace", tmpdir="/tmp", harden=hardened_spec(ws, base, **overrides))
    s.host_workspace = ws
    return s


def fork_refused(z, name, **fields):
    """A fork request the zygote must refuse: its error frame (no "forked")."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    z.send({"op": "fork", "session": name, "fd": theirs.fileno(), **fields}, [theirs.fileno()])
    theirs.close()
    f = z.expect("error", lambda f: f.get("session") == name)
    mine.settimeout(5)
    # nobody keeps the session socket; a child that failed by itself may have said why on it
    data = b""
    while chunk := mine.recv(65536):
        data += chunk
    if data:
        assert recv_frame_from(data)["code"] in ("harden_failed", "session_setup"), data
    mine.close()
    assert not [p for p in z.pending if p["op"] == "forked" and p["session"] == name]
    return f


def recv_frame_from(data):
    (n,) = struct.unpack(">I", data[:4])
    return json.loads(data[4:4 + n])


def gone(pid):
    """Whether no process (not even a zombie) has this host pid."""
    return not os.path.exists(f"/proc/{pid}")


def wait_until(cond, what, seconds=5):
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.02)


def host_status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return next(line.split(":", 1)[1].strip() for line in f if line.startswith(field + ":"))


@pytest.fixture(scope="module")
def hardened():
    """A zygote with the confinement library and the production preload."""
    z = Zygote(f"--harden-lib={harden_lib()}", env={CANARY: "leaked-if-seen"})
    yield z
    z.close()


def probe(s, code):
    """The value of CODE's last expression, which reports 'denied' or what it got."""
    return s.value(code).strip("'")


def test_real_hardening_confines_the_session(hardened, workspaces, base_prefix):
    z = hardened
    other = workspace(workspaces)
    Path(other, "secret.txt").write_text("another session's file")
    s = fork_hardened(z, "confined", workspaces, base_prefix)
    ws = Path(s.host_workspace)
    try:
        assert s.value("1+1") == "2"
        assert s.value("import numpy\nint(numpy.arange(5).sum())") == "10"
        assert s.value("open('note.txt', 'w').write('kept')") == "4"
        assert (ws / "note.txt").read_text() == "kept"
        assert (ws / "note.txt").stat().st_uid == HARDEN_UID
        assert s.value("import socket\nsocket.gethostname()") == "'session-test'"
        denied = "\n    r = 'got it'\nexcept (PermissionError, OSError):\n    r = 'denied'\nr"
        assert probe(s, "try:\n    open('/etc/shadow').read()" + denied) == "denied"
        assert probe(s, f"try:\n    open({str(Path(other, 'secret.txt'))!r}).read()" + denied) == "denied"
        assert probe(s, "try:\n    open('/etc/passwd', 'a')" + denied) == "denied"
        assert probe(s, "import socket\ntry:\n    socket.socket(socket.AF_INET)" + denied) == "denied"
        assert probe(s, f"try:\n    open('/proc/{z.proc.pid}/environ').read()" + denied) == "denied"
        r = s.bash("echo from-bash; cat /etc/shadow")
        assert "from-bash" in r["stdout"] and r["exit_status"] != 0, {k: r[k] for k in ("stdout", "stderr", "exit_status", "error")}
    finally:
        s.close()
    f = fork_refused(z, "no-spec", cwd="/var/tmp")
    assert f["code"] == "harden_failed" and "no harden spec" in f["message"], f
    f = fork_refused(z, "bad-spec", cwd="/var/tmp", harden={"workspace": "relative"})
    assert f["code"] == "harden_failed" and "invalid harden spec" in f["message"], f
    assert z.expect("exited", lambda e: e["pid"] == f["pid"])["session"] == "bad-spec"
    assert gone(f["pid"])


def test_hardened_session_is_pid_1_of_its_own_namespaces(hardened, workspaces, base_prefix):
    z = hardened
    s = fork_hardened(z, "namespaces", workspaces, base_prefix)
    try:
        assert s.value("import os\nos.getpid()") == "1"
        assert s.value("os.getppid()") == "0"                      # the zygote is outside
        assert s.value("(os.getuid(), os.getgid(), os.getgroups())") == "(1000, 1000, [])"
        # /proc lists the session's processes only: not the zygote's, not the test's
        r = s.value("import subprocess\nchild = subprocess.Popen(['/bin/sleep', '30'])\n"
                    "sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), child.pid")
        pids, child = eval(r)
        assert pids == sorted([1, child]), r
        assert s.value("child.kill(); child.wait()") == "-9"
        environ = eval(s.value("open('/proc/1/environ', 'rb').read()"))
        assert b"PATH=" in environ and CANARY.encode() not in environ   # its own, and clean
        assert eval(s.value("[l.split()[1] for l in open('/proc/self/status') if l.startswith('Cap')]")) \
            == ["0" * 16] * 5
        # the host sees the session's host uid, no capability, and new namespaces
        assert host_status(s.pid, "Uid").split() == [str(HARDEN_UID)] * 4
        assert host_status(s.pid, "CapEff") == "0" * 16
        for kind in ("pid", "user", "mnt", "net", "ipc", "uts"):
            assert os.readlink(f"/proc/{s.pid}/ns/{kind}") != os.readlink(f"/proc/{z.proc.pid}/ns/{kind}")
        assert s.value("os.environ['HOME'] == os.getcwd() == " + repr(s.cwd)) == "True"
    finally:
        s.close()


def tmp_skeleton() -> list[str]:
    """A confined session's /tmp before it writes: empty, or the way to a runtime kept beneath /tmp."""
    below = RUNTIME.relative_to("/tmp").parts if RUNTIME.is_relative_to("/tmp") else ()
    return list(below[:1])


def test_hardened_tmp_is_private_empty_and_capped(hardened, workspaces, base_prefix):
    z = hardened
    a = fork_hardened(z, "tmp-a", workspaces, base_prefix)
    b = fork_hardened(z, "tmp-b", workspaces, base_prefix)
    marker = f"tg-tmp-{os.getpid()}"
    try:
        for s in (a, b):
            assert s.value("import os\nos.listdir('/tmp'), os.listdir('/dev/shm')") == repr((tmp_skeleton(), []))
            assert s.value("os.environ['TMPDIR']") == "'/tmp'"
        assert a.value(f"open('/tmp/{marker}', 'w').write('a')") == "1"
        assert a.value("import tempfile\ntempfile.NamedTemporaryFile(delete=False).name.startswith('/tmp/')") == "True"
        assert b.value(f"os.path.exists('/tmp/{marker}')") == "False"
        assert not os.path.exists(f"/tmp/{marker}")
        r = a.run("with open('/tmp/big', 'wb', buffering=0) as f:\n"
                  "    for _ in range(64):\n"
                  "        f.write(b'x' * 65536)")
        assert r["error"]["type"] == "OSError" and "No space left on device" in r["error"]["message"], r["error"]
        assert a.value("os.path.getsize('/tmp/big') <= " + str(TMP_BYTES)) == "True"
    finally:
        a.close()
        b.close()


def test_host_unix_sockets_under_run_and_tmp_are_unreachable(hardened, workspaces, base_prefix):
    z = hardened
    listeners, paths = [], [f"/run/tg-test-{os.getpid()}.sock", f"/tmp/tg-test-{os.getpid()}.sock"]
    s = None
    try:
        for path in paths:
            if os.path.exists(path):
                os.unlink(path)
            listener = socket.socket(socket.AF_UNIX)
            listeners.append(listener)
            listener.bind(path)
            listener.listen(1)
            os.chmod(path, 0o777)              # DAC is not what stops the session
        s = fork_hardened(z, "sockets", workspaces, base_prefix)
        for path in paths:
            socket.socket(socket.AF_UNIX).connect(path)       # control: reachable on the host
            r = s.run(f"import socket\nsocket.socket(socket.AF_UNIX).connect({path!r})")
            assert r["error"]["type"] in ("FileNotFoundError", "PermissionError"), r["error"]
    finally:
        if s is not None:
            s.close()
        for listener in listeners:
            listener.close()
        for path in paths:
            if os.path.exists(path):
                os.unlink(path)


def processes_named(marker):
    """Host pids whose argv[0] is marker."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if f.read().split(b"\0")[0] == marker.encode():
                        found.append(int(name))
            except OSError:
                pass
    return found


def test_sigkill_of_a_hardened_session_leaves_no_process_behind(hardened, workspaces, base_prefix):
    z = hardened
    marker = f"tg-daemon-{os.getpid()}"
    s = fork_hardened(z, "daemon", workspaces, base_prefix)
    try:
        # a daemon the classic way: setsid, its parent exits at once, stdio closed (no /dev/null:
        # the session may not open /dev)
        r = s.bash(f"setsid bash -c 'exec -a {marker} sleep 300' <&- >&- 2>&- & echo started")
        assert r["stdout"] == "started\n", r
        wait_until(lambda: processes_named(marker), "the daemon starts")     # the control
        assert s.value("import os\nlen([p for p in os.listdir('/proc') if p.isdigit()])") == "2"
        os.kill(s.pid, signal.SIGKILL)
        f = z.expect("exited", lambda f: f["pid"] == s.pid)
        assert f["signal"] == "SIGKILL"
        wait_until(lambda: not processes_named(marker), "the daemon dies with the session", 2)
    finally:
        s.close()


def test_sigint_interrupts_a_hardened_session_and_it_survives(hardened, workspaces, base_prefix):
    # pid 1 of a namespace gets only the signals it has a handler for: SIGINT has one
    s = fork_hardened(hardened, "interrupt-hardened", workspaces, base_prefix)
    try:
        assert s.run("kept = [1, 2, 3]")["error"] is None
        os.kill(s.pid, signal.SIGINT)                 # idle: ignored
        assert s.value("len(kept)") == "3"
        r = s.interrupted("while True: pass")
        assert r["error"]["type"] == "KeyboardInterrupt"
        assert s.value("kept") == "[1, 2, 3]"
        r = s.bash("sleep 30", timeout_s=0.3)
        assert r["timed_out"]
        assert s.value("import os\nos.getpid()") == "1"
    finally:
        s.close()


def test_a_failed_admission_is_harden_failed_and_leaves_no_child(hardened, workspaces, base_prefix):
    # a cgroup that does not exist: the zygote cannot add the child, kills it, says so
    z = hardened
    ws = workspace(workspaces)
    spec = hardened_spec(ws, base_prefix, cgroups=["/sys/fs/cgroup/pids/toolgate-no-such-group"])
    f = fork_refused(z, "bad-cgroup", cwd=ws, harden=spec)
    assert f["code"] == "harden_failed", f
    assert "toolgate-no-such-group/cgroup.procs" in f["message"], f
    e = z.expect("exited", lambda e: e["pid"] == f["pid"])
    assert (e["session"], e["signal"]) == ("bad-cgroup", "SIGKILL")
    assert gone(f["pid"])
    # a uid_map the kernel refuses: a zygote without CAP_SETUID may map no other uid
    no_setuid = Zygote(f"--harden-lib={harden_lib()}", "--preload=json",
                       wrap=["setpriv", "--bounding-set", "-setuid"])
    try:
        ws = workspace(workspaces)
        f = fork_refused(no_setuid, "bad-map", cwd=ws, harden=hardened_spec(ws, base_prefix))
        assert f["code"] == "harden_failed" and "uid_map: Operation not permitted" in f["message"], f
        assert no_setuid.expect("exited", lambda e: e["pid"] == f["pid"])["signal"] == "SIGKILL"
        assert gone(f["pid"])
        no_setuid.send({"op": "ping"})
        assert no_setuid.expect("pong")                  # the zygote goes on
    finally:
        no_setuid.close()


def dead(pid):
    """Gone, or a zombie nobody reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_hardened_session_dies_with_its_zygote(workspaces, base_prefix):
    # setresuid clears the parent-death signal; the library sets it again
    z = Zygote(f"--harden-lib={harden_lib()}", "--preload=json")
    try:
        s = fork_hardened(z, "orphan", workspaces, base_prefix)
        assert s.value("1+1") == "2"
        z.proc.kill()
        z.proc.wait()
        wait_until(lambda: dead(s.pid), "the session dies with the zygote", 5)
        s.close()
    finally:
        z.close()


def test_a_hardened_session_joins_its_cgroups_before_it_runs(hardened, workspaces, base_prefix):
    group = Path(f"/sys/fs/cgroup/pids/toolgate-test-{os.getpid()}")
    if not group.parent.is_dir():
        pytest.fail("this test needs the cgroup v1 pids hierarchy at /sys/fs/cgroup/pids")
    group.mkdir()
    try:
        s = fork_hardened(hardened, "cgroup", workspaces, base_prefix, cgroups=[str(group)])
        try:
            with open(f"/proc/{s.pid}/cgroup") as f:
                assert f":pids:/{group.name}\n" in f.read()
            assert int((group / "cgroup.procs").read_text().split()[0]) == s.pid
            assert s.value("1+1") == "2"
        finally:
            s.close()
            hardened.expect("exited", lambda e: e["pid"] == s.pid)
    finally:
        wait_until(lambda: not (group / "cgroup.procs").read_text().strip(), "the group empties")
        group.rmdir()


def test_fifty_hardened_forks_in_a_row(hardened, workspaces, base_prefix, capsys):
    """Each hardened fork restores the zygote's pid namespace for children (setns): without it
    the second unshare(CLONE_NEWPID) would fail and children would nest."""
    z = hardened
    own = os.readlink(f"/proc/{z.proc.pid}/ns/pid")
    ready, first = [], []
    for i in range(50):
        ws = workspace(workspaces)
        mine, theirs = socket.socketpair()
        t0 = time.perf_counter()
        z.send({"op": "fork", "session": f"h{i}", "cwd": "/workspace", "tmpdir": "/tmp", "fd": theirs.fileno(),
                "harden": hardened_spec(ws, base_prefix)}, [theirs.fileno()])
        mine.sendall(frame({"op": "exec", "id": 1, "code": "import os\nos.getpid()"}))
        r = recv_frame(mine)
        first.append(time.perf_counter() - t0)
        theirs.close()
        f = z.expect("forked", lambda f: f["session"] == f"h{i}")
        ready.append(f["ready_ms"] / 1000)
        assert r["result"]["text/plain"] == "1", r
        assert os.readlink(f"/proc/{f['pid']}/ns/pid") != own
        assert os.readlink(f"/proc/{z.proc.pid}/ns/pid_for_children") == own
        mine.close()
        z.expect("exited", lambda e: e["pid"] == f["pid"])
    hello = z.hello

    def pct(xs, p):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] * 1000
    with capsys.disabled():
        print(f"\nhardened zygote (preload {hello['preloaded']}), 50 hardened forks: "
              f"fork request -> forked p50 {pct(ready, 50):.2f} ms, p90 {pct(ready, 90):.2f} ms; "
              f"-> first result (os.getpid()) p50 {pct(first, 50):.2f} ms, p90 {pct(first, 90):.2f} ms")


def test_timings(zygote, capsys):
    """Fork-to-first-result and warm `1+1` round trip, over the sockets (no sandbox yet)."""
    forks = []
    for i in range(50):
        mine, theirs = socket.socketpair()
        t0 = time.perf_counter()
        zygote.send({"op": "fork", "session": f"t{i}", "cwd": "/tmp", "fd": theirs.fileno()},
                    [theirs.fileno()])
        mine.sendall(frame({"op": "exec", "id": 1, "code": "1+1"}))
        r = recv_frame(mine)
        forks.append(time.perf_counter() - t0)
        theirs.close()
        zygote.expect("forked", lambda f: f["session"] == f"t{i}")   # a supervisor reads them all
        zygote.pending = [f for f in zygote.pending if f["op"] != "exited"]
        assert r["result"]["text/plain"] == "2"
        mine.close()
    s = zygote.fork("rtt")
    rtts = []
    msg = frame({"op": "exec", "id": 1, "code": "1+1"})
    for _ in range(1000):
        t0 = time.perf_counter()
        s.sock.sendall(msg)
        recv_frame(s.sock)
        rtts.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    r = s.run("import matplotlib.pyplot as plt\nplt.plot(range(10));")
    fig_ms = (time.perf_counter() - t0) * 1000
    assert len(r["images"]) == 1
    s.close()

    # memory of idle sessions: 200 live ones, each having run one cell
    live = [zygote.fork(f"idle{i}", cwd="/tmp") for i in range(200)]
    for x in live:
        assert x.value("1+1") == "2"
    pss = []
    for x in live:
        with open(f"/proc/{x.pid}/smaps_rollup") as f:
            pss.append(next(int(line.split()[1]) for line in f if line.startswith("Pss:")))
    for x in live:
        x.close()

    def pct(xs, p):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] * 1000

    with capsys.disabled():
        print(f"\nzygote start-up (preload + warm-up) {zygote.hello['startup_ms']:.0f} ms")
        print(f"fork -> first result (1+1), 50 forks: p50 {statistics.median(forks) * 1000:.2f} ms, "
              f"p99 {pct(forks, 99):.2f} ms")
        print(f"warm 1+1 round trip, 1000 calls: p50 {pct(rtts, 50):.3f} ms, p99 {pct(rtts, 99):.3f} ms")
        print(f"matplotlib figure -> PNG in a warm session: {fig_ms:.1f} ms")
        print(f"idle session PSS at 200 live sessions: mean {statistics.mean(pss) / 1024:.2f} MiB, "
              f"max {max(pss) / 1024:.2f} MiB")


def test_real_hardening_runs_a_notebook_workload(hardened, workspaces, base_prefix):
    """What the seccomp allow-list must not break, under the real confinement: numpy (with BLAS
    threads), pandas, matplotlib, threads, bash pipelines with coreutils, fork, multiprocessing
    (fork start method, Pool included), sqlite3 and SIGINT; and what it refuses, as a session sees
    it."""
    import errno
    s = fork_hardened(hardened, "workload", workspaces, base_prefix)
    try:
        # The data stack, preloaded by the zygote.
        assert s.value("import numpy as np\nint((np.ones((300, 300)) @ np.ones((300, 300))).sum())") \
            == str(300 ** 3)
        assert s.value("round(float(np.linalg.eigvalsh(np.diag([1.0, 2.0, 3.0])).sum()), 6)") == "6.0"
        assert s.value("import pandas as pd\n"
                       "df = pd.DataFrame({'k': [i % 3 for i in range(30)], 'v': range(30)})\n"
                       "df.to_csv('df.csv', index=False)\n"
                       "pd.read_csv('df.csv').groupby('k').v.sum().tolist()") == "[135, 145, 155]"
        r = s.run("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]);")
        assert r["error"] is None and len(r["images"]) == 1
        assert base64.b64decode(r["images"][0]).startswith(PNG_SIGNATURE)
        # A fresh interpreter under the inherited filter, with 4 OpenBLAS threads this time.
        blas = ("import numpy as np; a = np.random.default_rng(0).random((500, 500)); "
                "print(round(float(np.trace(a @ np.linalg.inv(a)))))")
        assert s.value("import os, subprocess, sys\n"
                       f"subprocess.run([sys.executable, '-c', {blas!r}], capture_output=True, text=True,"
                       " env={**os.environ, 'OPENBLAS_NUM_THREADS': '4'}, check=True).stdout.strip()") \
            == "'500'"
        # Threads: glibc's clone3 answers ENOSYS, and it falls back to clone.
        assert s.value("from concurrent.futures import ThreadPoolExecutor\n"
                       "with ThreadPoolExecutor(4) as pool:\n"
                       "    total = sum(pool.map(lambda n: n * n, range(100)))\n"
                       "total") == "328350"
        # bash with coreutils, tar, gzip and cp -p (which sets an ACL: EOPNOTSUPP is fine for it).
        r = s.bash("printf 'b,2\\na,1\\nc,3\\n' > d.csv && cat d.csv | grep -v '#' | sed 's/,/ /' "
                   "| awk '{print $2}' | sort -n | head -2 | tr '\\n' ' ' && tar czf d.tgz d.csv "
                   "&& tar tzf d.tgz && gzip -k d.csv && zcat d.csv.gz | wc -l && cp -p d.csv e.csv "
                   "&& ls e.csv")
        assert (r["exit_status"], r["stdout"], r["stderr"]) == (0, "1 2 d.csv\n3\ne.csv\n", "")
        # fork, and multiprocessing with the fork start method (Pool: semaphores in /dev/shm).
        assert s.value("import os\npid = os.fork()\nif pid == 0:\n    os._exit(3)\n"
                       "os.waitpid(pid, 0)[1] >> 8") == "3"
        assert s.value("import multiprocessing as mp\nctx = mp.get_context('fork')\n"
                       "a, b = ctx.Pipe()\np = ctx.Process(target=b.send, args=(42,))\n"
                       "p.start(); got = a.recv(); p.join()\n(got, p.exitcode)") == "(42, 0)"
        assert s.value("with ctx.Pool(2) as pool:\n    squares = pool.map(abs, [-1, -2, -3])\n"
                       "squares") == "[1, 2, 3]"
        # sqlite3 in a file of the workspace.
        assert s.value("import sqlite3\ncon = sqlite3.connect('db.sqlite')\n"
                       "con.execute('pragma journal_mode=wal').fetchone()[0]") == "'wal'"
        assert s.value("con.execute('create table t(x)'); con.executemany('insert into t values (?)',"
                       " [(1,), (2,)]); con.commit()\ncon.execute('select sum(x) from t').fetchone()") \
            == "(3,)"
        # SIGINT still interrupts.
        assert s.interrupted("while True: pass")["error"]["type"] == "KeyboardInterrupt"
        # The refusals as a session sees them (clone3 is syscall 435 on x86_64 and aarch64).
        assert s.value("import ctypes, socket\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                       "def err(f):\n    try:\n        f()\n    except OSError as e:\n"
                       "        return e.errno\n    return 0\n"
                       "def clone3():\n    if libc.syscall(435, None, 0) == -1:\n"
                       "        raise OSError(ctypes.get_errno(), 'clone3')\n"
                       "[err(lambda: socket.socket(socket.AF_INET)), err(clone3),"
                       " err(lambda: os.setxattr('df.csv', 'user.k', b'v'))]") \
            == str([errno.EPERM, errno.ENOSYS, errno.EOPNOTSUPP])
    finally:
        s.close()
