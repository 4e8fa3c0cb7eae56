"""The zygote: start-up, the control channel, the session children it forks and reaps, and the
timings. Helpers and how to run: harness.py; fixtures: conftest.py.

The timing test prints fork-to-first-result, `1+1` round trip, figure time and idle-session PSS at
200 live sessions (no assertion on them).
"""

import os
import signal
import socket
import statistics
import struct
import subprocess
import time
from pathlib import Path

from harness import MAX_FRAME, PYTHON, RUNTIME, Zygote, frame, recv_frame

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
