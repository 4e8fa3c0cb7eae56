"""Hardened sessions, with Rust's confinement library (TOOLGATE_HARDEN_LIB): namespaces, the
private root and /tmp, cgroups, signals, failures, and a notebook workload under the real
confinement. Helpers and how to run: harness.py.
"""

import base64
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from harness import (CANARY, HARDEN_UID, PNG_SIGNATURE, RUNTIME, TMP_BYTES, Zygote, detached_mount,
                     fork_hardened, fork_refused, frame, harden_lib, hardened_spec, recv_frame, wait_until, workspace)

def gone(pid):
    """Whether no process (not even a zombie) has this host pid."""
    return not os.path.exists(f"/proc/{pid}")


def host_status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return next(line.split(":", 1)[1].strip() for line in f if line.startswith(field + ":"))


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
        mount = detached_mount(ws)
        z.send({"op": "fork", "session": f"h{i}", "cwd": "/workspace", "tmpdir": "/tmp", "fd": theirs.fileno(),
                "harden": hardened_spec(ws, base_prefix)}, [theirs.fileno(), mount])
        os.close(mount)
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


def mountinfo_sources(pid):
    """The filesystem source of each mount in PID's mount namespace."""
    with open(f"/proc/{pid}/mountinfo") as f:
        return [line.split(" - ", 1)[1].split(" ")[1] for line in f]


def test_a_hardened_fork_needs_its_workspace_as_a_detached_mount(hardened, workspaces, base_prefix):
    z = hardened
    ws = workspace(workspaces)
    spec = hardened_spec(ws, base_prefix)
    f = fork_refused(z, "no-mount", mount=False, cwd="/workspace", harden=spec)
    assert f["code"] == "bad_fds" and "exactly two descriptors" in f["message"], f
    # a file where the workspace belongs
    mine, theirs = socket.socketpair()
    with open(os.path.join(ws, "plain"), "w") as plain:
        z.send({"op": "fork", "session": "file-mount", "cwd": "/workspace", "fd": theirs.fileno(),
                "harden": spec}, [theirs.fileno(), plain.fileno()])
    theirs.close()
    f = z.expect("error", lambda f: f.get("session") == "file-mount")
    assert f["code"] == "bad_fds" and "not the workspace" in f["message"], f
    mine.close()
    z.send({"op": "ping"})
    assert z.expect("pong")


def test_an_own_mount_namespace_leaves_out_the_workspace_mounts(workspaces, base_prefix):
    """--own-mounts: the zygote's mount namespace is its own and private; workspace mounts made
    before it started are detached there, those made after never reach it, and a session gets
    its workspace (a tmpfs mounted after the zygote started) as a detached mount."""
    source = f"tg-test-ws-{os.getpid()}"
    before, after = workspace(workspaces), workspace(workspaces)
    mounted = []

    def mount(path):
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=1m,uid={HARDEN_UID},gid={HARDEN_UID}",
                        source, path], check=True)
        mounted.append(path)
    z = None
    try:
        mount(before)
        z = Zygote(f"--harden-lib={harden_lib()}", f"--own-mounts={source}", "--preload=json")
        pid = z.proc.pid
        assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
        assert source in mountinfo_sources("self")
        assert source not in mountinfo_sources(pid)
        count = len(mountinfo_sources(pid))
        assert not any("shared:" in line for line in open(f"/proc/{pid}/mountinfo")), \
            "every mount of the zygote's namespace is private"
        mount(after)
        Path(after, "given.txt").write_text("from the host")
        assert len(mountinfo_sources(pid)) == count and source not in mountinfo_sources(pid)
        s = fork_hardened(z, "own-mounts", workspaces, base_prefix, ws=after)
        try:
            assert s.value("open('given.txt').read()") == "'from the host'"
            assert s.value("open('made.txt', 'w').write('inside')") == "6"
            assert Path(after, "made.txt").read_text() == "inside"
        finally:
            s.close()
        assert len(mountinfo_sources(pid)) == count
    finally:
        if z is not None:
            z.close()
        for path in reversed(mounted):
            subprocess.run(["umount", "-l", path], check=False)
