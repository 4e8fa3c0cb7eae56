"""A session child: notebook semantics, output capture, figures, DataFrames, bash, the per-run
environment, interruption and malformed frames. Helpers and how to run: harness.py.
"""

import base64
import json
import os
import re
import signal
import socket
import struct
import time
from pathlib import Path

from harness import CANARY, MAX_FRAME, MIB, PNG_SIGNATURE, RUNTIME, Session, frame, recv_frame

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


def test_a_one_line_expression_runs_as_the_general_path_runs_it(zygote):
    """A cell that may be one expression is compiled from its text; the same cell after a
    statement takes the general path. Both give the same value, output and error."""
    s = zygote.fork("expression-path")
    try:
        assert s.run("import asyncio, os\nn = 5")["error"] is None
        cells = ["1+1", "n * 2  # a comment; not a semicolon", "(n,\n n)", "lambda: 1", "print(n)",
                 "await asyncio.sleep(0, 'slept')", "f(x=1)", "n == 5", "undefined_name", "1 / 0",
                 "1 +", " n", "n;", "if n: n", "os.getcwd", "[i for i in range(3)]"]
        for cell in cells:
            fast, general = s.run(cell), s.run("pass\n" + cell)
            for field in ("result", "stdout", "stderr"):
                if cell.startswith("lambda") and field == "result":
                    assert fast[field]["text/plain"].startswith("<function <lambda>")
                    continue
                assert fast[field] == general[field], (cell, field, fast, general)
            assert (fast["error"] is None) == (general["error"] is None), cell
            if fast["error"] is not None:
                assert fast["error"]["type"] == general["error"]["type"], cell
                where = re.compile(r" \(<cell \d+>, line \d+\)")      # a syntax error's place
                assert (where.sub("", fast["error"]["message"])
                        == where.sub("", general["error"]["message"])), cell
                tb = fast["error"]["traceback"]
                assert f'<cell {fast["execution_count"]}>' in tb and "toolgate/" not in tb, tb
        assert s.value("n") == "5"
        # a fork made by a one-expression cell exits in the child; the parent gets the pid
        r = s.run("os.fork()")
        assert r["error"] is None and int(r["result"]["text/plain"]) > 0
        child = int(r["result"]["text/plain"])
        assert s.value(f"os.waitpid({child}, 0)[1]") == "0"
        assert s.value("'one answer each'") == "'one answer each'"
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
        assert "toolgate_zygote" not in tb and "toolgate/" not in tb
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


def test_a_run_that_asks_to_spill_keeps_a_streams_whole_in_a_workspace_file(zygote, tmp_path):
    s = zygote.fork("spill", cwd=str(tmp_path))
    try:
        r = s.run("import os\nos.chdir('/')\nprint('a' * (3 << 20) + 'END')", spill=True)
        assert r["stdout_truncated"] and len(r["stdout"]) == MIB
        kept = r["stdout_file"]
        assert kept["path"].startswith(".toolgate/output/run-1-") and kept["path"].endswith(".stdout.txt")
        other = zygote.fork("spill-2", cwd=str(tmp_path))  # another session of the workspace
        try:
            theirs = other.run("print('b' * (2 << 20))", spill=True)["stdout_file"]["path"]
        finally:
            other.close()
        assert theirs.startswith(".toolgate/output/run-1-") and theirs != kept["path"]
        whole = (tmp_path / kept["path"]).read_bytes()      # in the workspace, whatever the chdir
        assert whole == b"a" * (3 << 20) + b"END\n"
        assert kept["tail"].endswith("aEND\n") and len(kept["tail"]) == 256 << 10
        assert "stderr_file" not in r                       # stderr stayed within its limit
        r = s.bash("head -c 3000000 /dev/zero | tr '\\0' z", spill=True)
        assert (tmp_path / r["stdout_file"]["path"]).stat().st_size == 3000000
        r = s.run("print('x' * (2 << 20))")                 # not asked: nothing kept
        assert r["stdout_truncated"] and "stdout_file" not in r
        r = s.run("print('small')", spill=True)
        assert "stdout_file" not in r
        # a file that cannot be written leaves none behind, and the output as it was
        (tmp_path / ".toolgate" / "output").rename(tmp_path / "kept")
        (tmp_path / ".toolgate" / "output").write_text("in the way")
        r = s.run("print('w' * (2 << 20))", spill=True)
        assert r["stdout_truncated"] and len(r["stdout"]) == MIB and "stdout_file" not in r
        assert r["stdout_bytes"] == (2 << 20) + 1
        r = s.run("print('ok')", spill=True)
        assert r["stdout"] == "ok\n"
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


def test_the_executor_stays_out_of_the_users_namespace(zygote):
    """The executor's code lives in the package toolgate/ (runtime/ is on sys.path only while the
    zygote imports it); a session's __main__ is a fresh module of the user's own."""
    s = zygote.fork("namespace")
    try:
        assert s.value("import builtins, sys\n"
                       "(__name__, __builtins__ is builtins, sys.modules['__main__'].__dict__ is globals())") \
            == "('__main__', True, True)"
        assert s.value("sys.path[0]") == "''"
        runtime = str(Path(__file__).resolve().parent)
        assert s.value(f"[p for p in sys.path if p.startswith({runtime!r})]") == "[]"
        assert s.value("sys.argv") == "['']"
        # a class of a cell pickles by reference to __main__, as in a notebook
        assert s.value("import pickle\nclass Point:\n    pass\n"
                       "type(pickle.loads(pickle.dumps(Point()))) is Point") == "True"
        assert s.value("len([m for m in sys.modules if m.startswith('toolgate')]) > 1") == "True"
    finally:
        s.close()


def test_the_network_proxys_ca_is_trusted_in_the_session_only_through_its_bundle(zygote, tmp_path):
    """TOOLGATE_EGRESS_CA (the session's CA, for secrets added at the edge) becomes a bundle of
    the public roots and that CA in the session's tmp dir, named by the variables clients read,
    and leaves the environment."""
    import certifi
    import subprocess
    roots = Path(certifi.where()).read_text()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", str(tmp_path / "ca.key"), "-out", str(tmp_path / "ca.pem"),
                    "-days", "1", "-subj", "/CN=toolgate test session CA"],
                   check=True, capture_output=True)
    ca = (tmp_path / "ca.pem").read_text().strip()
    s = zygote.fork("edge-ca", tmpdir=str(tmp_path), env={"TOOLGATE_EGRESS_CA": ca})
    try:
        env = json.loads(s.value("import os, json\njson.dumps(dict(os.environ))")[1:-1])
        assert "TOOLGATE_EGRESS_CA" not in env
        bundle = str(tmp_path / "toolgate-ca-bundle.pem")
        for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT"):
            assert env[name] == bundle, (name, env)
        text = Path(bundle).read_text()
        assert text.startswith(roots.rstrip("\n")) and text.rstrip("\n").endswith(ca)
        subjects = s.value("import ssl\nstr([c['subject'] for c in "
                           "ssl.create_default_context().get_ca_certs()])")
        assert "toolgate test session CA" in subjects, "the default context trusts it"
        shown = s.bash("env | cut -d= -f1 | sort | tr '\\n' ' '")["stdout"]
        assert "SSL_CERT_FILE" in shown and "TOOLGATE_EGRESS_CA" not in shown, shown
    finally:
        s.close()
    plain = zygote.fork("edge-no-ca", tmpdir=str(tmp_path / "none"))
    try:
        env = json.loads(plain.value("import os, json\njson.dumps(dict(os.environ))")[1:-1])
        assert "SSL_CERT_FILE" not in env, "no CA, no bundle"
    finally:
        plain.close()
