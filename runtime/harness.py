"""Shared helpers of the runtime's tests (test_*.py beside this file): frames, a zygote and its
sessions driven as the server drives them, hardened sessions, golden frames.

How to run (two interpreters, on purpose):
    bash scripts/python-runtime.sh /tmp/tg-runtime           # the runtime under test
    TOOLGATE_PYTHON_RUNTIME=/tmp/tg-runtime TOOLGATE_HARDEN_LIB=target/debug/libtoolgate_sandbox_harden.so \
        .deps/venv/bin/python -m pytest -q runtime/
The zygote under test always runs with the runtime's own interpreter (RUNTIME/bin/python -I), exactly
as toolgate starts it. The test harness itself needs only the standard library and pytest, so it runs
under any Python 3 with pytest, e.g. the project's test venv (.deps/venv, made by scripts/deps.sh,
which pins pytest). pytest is deliberately NOT installed into the runtime: everything in the runtime
is visible to every tenant's code, and the runtime must hold exactly runtime/requirements.txt.
TOOLGATE_PYTHON_RUNTIME defaults to .deps/python-runtime; a missing runtime fails the tests, and so
does a missing TOOLGATE_HARDEN_LIB for the tests that need the confinement library (the build of
crates/sandbox-harden, target/debug/libtoolgate_sandbox_harden.so). Fixtures are in conftest.py.
"""

import ctypes
import json
import os
import signal
import select
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ZYGOTE = HERE / "toolgate_zygote.py"
GOLDEN = HERE / "golden"
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


def recv_frame_from(data):
    (n,) = struct.unpack(">I", data[:4])
    return json.loads(data[4:4 + n])


def nothing_to_read(sock, seconds=0.0):
    """Whether the socket has no byte to read (within SECONDS: an absence, not a synchronisation)."""
    return not select.select([sock], [], [], seconds)[0]


def wait_until(cond, what, seconds=5):
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.02)


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

    def fork(self, session, cwd=None, mount=None, **extra):
        """mount: a hardened fork's workspace, as a detached mount (see detached_mount); the
        descriptor is closed here once sent."""
        if cwd is None:
            cwd = tempfile.mkdtemp(prefix="tg-ws-")
            self.workspaces.append(cwd)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fds = [theirs.fileno()] + ([mount] if mount is not None else [])
        try:
            self.send({"op": "fork", "session": session, "cwd": cwd, "fd": theirs.fileno(),
                       **extra}, fds)
        finally:
            theirs.close()
            if mount is not None:
                os.close(mount)
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

    def send(self, obj):
        self.sock.sendall(frame(obj))

    def recv(self):
        return recv_frame(self.sock)

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


# --- hardened sessions (the confinement library)

HARDEN_UID = 1_000_321          # the host uid of the hardened sessions (1000 inside)
TMP_BYTES = 1 << 20


def harden_lib():
    lib = os.environ.get("TOOLGATE_HARDEN_LIB")
    if not lib or not Path(lib).exists():
        pytest.fail("TOOLGATE_HARDEN_LIB must name the built confinement library "
                    "(cargo build -p toolgate-sandbox-harden; target/debug/libtoolgate_sandbox_harden.so)")
    return lib


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


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long
SYS_OPEN_TREE = 428             # x86_64 and aarch64 alike
OPEN_TREE_CLONE = 1


def detached_mount(path):
    """open_tree(path, OPEN_TREE_CLONE): a detached mount of PATH, as the server sends a hardened
    fork's workspace (the zygote's own mount namespace lacks what was mounted after it started)."""
    fd = _LIBC.syscall(SYS_OPEN_TREE, -100, os.fsencode(path), OPEN_TREE_CLONE | os.O_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"open_tree({path})")
    return fd


def fork_hardened(z, name, root, base, ws=None, **overrides):
    ws = ws or workspace(root)
    # the session finds its workspace at /workspace, in a root of its own
    s = z.fork(name, cwd="/workspace", tmpdir="/tmp", mount=detached_mount(ws),
               harden=hardened_spec(ws, base, **overrides))
    s.host_workspace = ws
    return s


def fork_refused(z, name, mount=True, **fields):
    """A fork request the zygote must refuse: its error frame (no "forked"). mount: whether it
    carries a workspace (a detached mount of /var/tmp), as a hardened fork must."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    fds = [theirs.fileno()] + ([detached_mount("/var/tmp")] if mount else [])
    try:
        z.send({"op": "fork", "session": name, "fd": theirs.fileno(), **fields}, fds)
    finally:
        for fd in fds:
            os.close(fd)
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


# --- golden frames (runtime/golden/, read by the Rust tests too)

def golden(name):
    """The frame of runtime/golden/NAME.json, e.g. golden("session/exec")."""
    return json.loads((GOLDEN / f"{name}.json").read_text())


def json_type(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def shape_differences(real, gold, maps=(), path="$"):
    """How REAL differs in shape from GOLD: the same keys (recursively) and the same JSON types of
    values (int and float told apart), values themselves aside. An array's elements are compared
    with the golden array's first element. MAPS: paths (like "$.skipped") of objects whose keys
    are data, not fields: only their values' types are compared."""
    out = []
    rt, gt = json_type(real), json_type(gold)
    if rt != gt:
        return [f"{path}: {rt} where the golden frame has {gt}"]
    if rt == "object":
        if path in maps:
            proto = next(iter(gold.values()), None)
            if proto is not None:
                for k, v in real.items():
                    out += shape_differences(v, proto, maps, f"{path}[{k!r}]")
            return out
        for k in sorted(set(real) - set(gold)):
            out.append(f"{path}.{k}: not in the golden frame")
        for k in sorted(set(gold) - set(real)):
            out.append(f"{path}.{k}: missing (the golden frame has it)")
        for k in sorted(set(real) & set(gold)):
            out += shape_differences(real[k], gold[k], maps, f"{path}.{k}")
    elif rt == "array" and gold:
        for i, v in enumerate(real):
            out += shape_differences(v, gold[0], maps, f"{path}[{i}]")
    return out


def assert_shape(real, name, maps=()):
    diffs = shape_differences(real, golden(name), maps)
    assert not diffs, f"{name}.json and the real frame differ:\n  " + "\n  ".join(diffs) + f"\nreal: {real}"
