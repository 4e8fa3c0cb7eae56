"""The golden frames of runtime/golden/ (runtime/PROTOCOL.md) against the real zygote and real
sessions: every frame of the server is sent as it is and does what the protocol says; every frame
of the runtime has exactly the shape of its golden file (the same keys, recursively, and the same
JSON types), so a field renamed or added on one side alone fails here or in the Rust tests.
Helpers and how to run: harness.py."""

import ast
import json
import os
import shutil
import socket
import subprocess

from harness import (GOLDEN, PYTHON, HERE, Session, assert_shape, detached_mount, fork_refused, golden,
                     hardened_spec, frame, recv_frame, shape_differences, workspace, Zygote)

SERVER_FRAMES = {"control/ping", "control/fork", "control/fork_hardened", "session/ping",
                 "session/exec", "session/bash", "session/sqlite", "session/upcall_result",
                 "session/upcall_error", "session/upcall_progress", "session/checkpoint",
                 "session/restore", "session/upcall_result_fetch", "session/upcall_result_sql",
                 "session/upcall_result_secrets"}
RUNTIME_FRAMES = {"control/hello", "control/pong", "control/forked", "control/forked_hardened",
                  "control/spawned",
                  "control/exited", "control/error", "session/pong", "session/output",
                  "session/result_exec", "session/result_bash", "session/result_sqlite",
                  "session/error", "session/upcall", "session/checkpointed", "session/restored",
                  "session/upcall_fetch", "session/upcall_http", "session/upcall_sql",
                  "session/upcall_secrets"}


def fork_as_is(z, name):
    """Sends the golden fork frame NAME as it is, with a socket's far end; returns our end."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    z.send(golden(name), [theirs.fileno()])
    theirs.close()
    mine.settimeout(60)
    return mine


def test_the_golden_files_are_the_documented_ones():
    files = {str(p.relative_to(GOLDEN).with_suffix("")) for p in GOLDEN.rglob("*.json")}
    assert files == SERVER_FRAMES | RUNTIME_FRAMES
    readme, protocol = (GOLDEN / "README.md").read_text(), (HERE / "PROTOCOL.md").read_text()
    for name in files:
        assert f"`{name}.json`" in readme and f"`{name}.json`" in protocol, name
        text = (GOLDEN / f"{name}.json").read_text()
        f = json.loads(text)
        assert isinstance(f, dict) and isinstance(f["op"], str), name
        assert text == json.dumps(f, indent=2, ensure_ascii=False) + "\n", f"{name}: not pretty-printed"


def test_the_shape_check_sees_a_renamed_added_or_retyped_field():
    gold = golden("session/result_exec")
    assert shape_differences(dict(gold), gold) == []
    renamed = {("stdout_nbytes" if k == "stdout_bytes" else k): v for k, v in gold.items()}
    assert shape_differences(renamed, gold) == ["$.stdout_nbytes: not in the golden frame",
                                                "$.stdout_bytes: missing (the golden frame has it)"]
    assert shape_differences(dict(gold, duration_ms=1), gold) == \
        ["$.duration_ms: int where the golden frame has float"]
    assert shape_differences(dict(gold, result={"text/plain": "5", "text/html": "x"}), gold) == \
        ["$.result.text/html: not in the golden frame"]


def test_control_frames(zygote):
    z = zygote
    assert_shape(z.hello, "control/hello", maps={"$.skipped"})
    z.send(golden("control/ping"))
    pong = z.expect("pong")
    assert_shape(pong, "control/pong")
    assert (pong["pid"], pong["id"]) == (z.proc.pid, None)
    # without its descriptor, the fork is refused
    z.send(golden("control/fork"))
    e = z.expect("error", lambda f: f.get("session") == "acct-1/3f2a#3")
    assert_shape(e, "control/error")
    assert e == dict(golden("control/error"), message=e["message"]) and "carried 0" in e["message"]
    # with it, the session is forked; its workspace does not exist here (unless it does)
    mine = fork_as_is(z, "control/fork")
    forked = z.expect("forked", lambda f: f["session"] == "acct-1/3f2a#3")
    assert_shape(forked, "control/forked")
    cwd = golden("control/fork")["cwd"]
    if os.path.isdir(cwd):
        mine.sendall(frame(golden("session/ping")))
        assert recv_frame(mine) == golden("session/pong")
    else:
        f = recv_frame(mine)
        assert (f["op"], f["code"], f["id"]) == ("error", "session_setup", None), f
        assert "cannot enter the workspace" in f["message"]
        assert z.expect("exited", lambda f: f["pid"] == forked["pid"])["status"] == 70
    mine.close()
    # a session that ends normally
    s = z.fork("acct-1/3f2a#5")
    s.close()
    exited = z.expect("exited", lambda f: f["pid"] == s.pid)
    assert_shape(exited, "control/exited")
    assert (exited["session"], exited["status"], exited["signal"]) == ("acct-1/3f2a#5", 0, None)


def test_a_missing_module_in_hello_is_a_string():
    z = Zygote("--preload=json,toolgate_no_such_package")
    try:
        assert_shape(z.hello, "control/hello", maps={"$.skipped"})
        assert list(z.hello["skipped"]) == ["toolgate_no_such_package"]
    finally:
        z.close()


def test_the_hardened_fork_frame_is_accepted(zygote, hardened, workspaces, base_prefix):
    fork = golden("control/fork_hardened")
    # the runtime's own parser
    check = ("import json, sys\nsys.path.insert(0, sys.argv[1])\n"
             "from toolgate._protocol import check_fork\n"
             "req = json.load(open(sys.argv[2]))\n"
             "print(check_fork(req), type(req['harden']).__name__)")
    out = subprocess.run([str(PYTHON), "-I", "-c", check, str(HERE), str(GOLDEN / "control/fork_hardened.json")],
                         capture_output=True, text=True, check=True).stdout
    assert out == "acct-1/3f2a#4 dict\n"
    # a zygote without the library forks it (it ignores "harden"); /workspace is not here
    mine = fork_as_is(zygote, "control/fork_hardened")
    forked = zygote.expect("forked", lambda f: f["session"] == "acct-1/3f2a#4")
    assert_shape(forked, "control/forked")
    mine.close()
    # the library parses and validates the spec (unknown fields are refused): it fails only on
    # what this machine lacks (its cgroup, its workspace, its runtime)
    f = fork_refused(hardened, fork["session"], **{k: v for k, v in fork.items() if k not in ("op", "session")})
    assert f["code"] == "harden_failed" and "invalid harden spec" not in f["message"], f
    misspelt = dict(fork["harden"], netwrok=False)
    del misspelt["network"]
    f = fork_refused(hardened, "misspelt", cwd="/workspace", harden=misspelt)
    assert f["code"] == "harden_failed" and "invalid harden spec" in f["message"], f
    # and a real hardened fork answers as forked_hardened.json
    mine, theirs = socket.socketpair()
    ws = workspace(workspaces)
    mount = detached_mount(ws)
    hardened.send({"op": "fork", "session": "acct-1/3f2a#6", "cwd": "/workspace", "tmpdir": "/tmp",
                   "fd": theirs.fileno(), "harden": hardened_spec(ws, base_prefix)},
                  [theirs.fileno(), mount])
    theirs.close()
    os.close(mount)
    # first "spawned" (the zygote is free for its next fork), then "forked"
    spawned = hardened.expect("spawned", lambda f: f["session"] == "acct-1/3f2a#6")
    assert_shape(spawned, "control/spawned")
    assert not [f for f in hardened.pending if f.get("session") == "acct-1/3f2a#6"]
    forked = hardened.expect("forked", lambda f: f["session"] == "acct-1/3f2a#6")
    assert_shape(forked, "control/forked_hardened")
    assert forked["hardened"].startswith("hardened: "), forked
    s = Session(hardened, "acct-1/3f2a#6", mine, "/workspace", forked["pid"])
    s.send(golden("session/ping"))
    assert s.recv() == golden("session/pong")
    s.close()


def test_session_frames(zygote):
    s = zygote.fork("golden-session")
    try:
        s.send(golden("session/ping"))
        assert s.recv() == golden("session/pong")
        s.send(golden("session/exec"))
        outputs = []
        while (f := s.recv())["op"] == "output":
            assert_shape(f, "session/output")
            outputs.append(f)
        assert "".join(o["data"] for o in outputs) == "hello\n"
        assert outputs[0] == golden("session/output")
        assert_shape(f, "session/result_exec")
        assert f == dict(golden("session/result_exec"), duration_ms=f["duration_ms"])
        assert s.value("import os\n'GREETING' in os.environ") == "False"    # for that run only
        s.send(golden("session/bash"))
        r = s.recv()
        assert_shape(r, "session/result_bash")
        assert r == dict(golden("session/result_bash"), duration_ms=r["duration_ms"],
                         execution_count=3)
        assert (r["stdout"], r["exit_status"]) == ("hello\n", 3)
        s.send(golden("session/sqlite"))
        r = s.recv()
        assert_shape(r, "session/result_sqlite")
        assert r == dict(golden("session/result_sqlite"), duration_ms=r["duration_ms"],
                         execution_count=4)
        s.send({"op": "exec", "id": 9, "code": 5})
        e = s.recv()
        assert_shape(e, "session/error")
        assert e == golden("session/error")
    finally:
        s.close()


def test_upcall_frames(zygote):
    record = golden("session/upcall_result")["value"]["billing"]
    for answer, code in (("session/upcall_result", "toolgate.billing()"),
                         ("session/upcall_error",
                          "try:\n    toolgate.billing()\nexcept toolgate.ToolgateError as e:\n"
                          "    got = (e.code, e.message, str(e))\ngot")):
        s = zygote.fork("golden-upcall")
        try:
            s.send({"op": "exec", "id": 7, "code": "import toolgate\n" + code})
            up = s.recv()
            assert_shape(up, "session/upcall")
            assert up == golden("session/upcall")
            s.send(golden(answer))
            r = s.recv()
            assert r["op"] == "result" and r["error"] is None, r
            got = ast.literal_eval(r["result"]["text/plain"])
            if answer == "session/upcall_result":
                assert got == record
            else:
                err = golden(answer)["error"]
                assert got == (err["code"], err["message"], f"{err['code']}: {err['message']}")
        finally:
            s.close()


def test_the_web_database_and_vault_upcall_frames(zygote):
    """toolgate.fetch, http, sql and secrets write exactly their golden requests and read the
    golden answers into what they return."""
    cases = (
        ("toolgate.fetch('https://api.example.com/items/1', "
         "headers={'Authorization': 'Bearer {{secret:API_KEY}}'}, max_bytes=65536)",
         "session/upcall_fetch", "session/upcall_result_fetch"),
        ("toolgate.http('POST', 'https://api.example.com/items', json={'name': 'pen'}, "
         "headers={'Authorization': 'Bearer {{secret:API_KEY}}'})",
         "session/upcall_http", "session/upcall_result_fetch"),
        ("toolgate.sql('PG_URL', 'select id, name, tags from items where name = $1', ['pen'], "
         "max_rows=100)",
         "session/upcall_sql", "session/upcall_result_sql"),
        ("toolgate.secrets()", "session/upcall_secrets", "session/upcall_result_secrets"),
    )
    for call, request, answer in cases:
        s = zygote.fork("golden-upcall-web")
        try:
            s.send({"op": "exec", "id": 7, "code": "import toolgate\nr = " + call + "\nr"})
            up = s.recv()
            assert_shape(up, request)
            assert up == golden(request), (up, golden(request))
            value = golden(answer)["value"]
            if request == "session/upcall_http":
                value = {"http": value["fetch"]}
            s.send(dict(golden(answer), value=value))
            r = s.recv()
            assert r["op"] == "result" and r["error"] is None, r
            got = ast.literal_eval(r["result"]["text/plain"])
            kind, expected = next(iter(value.items()))
            if kind in ("fetch", "http"):
                expected = dict(expected, headers=dict(expected["headers"]),
                                json=json.loads(expected["text"]))
            assert got == expected, (got, expected)
        finally:
            s.close()


def test_checkpoint_frames(zygote):
    """checkpoint.json as it is, in a session holding what checkpointed.json names; restore.json
    as it is, first in a new session given the workspace."""
    code = ("import numpy as np\nx = 41\ndef f():\n    return x + 1\n"
            "df = __import__('pandas').DataFrame({'a': [1, 2]})\ng = (i for i in range(3))")
    old, new = zygote.fork("golden-checkpoint"), zygote.fork("golden-restore")
    try:
        for _ in range(7):
            assert old.run(code)["error"] is None
        old.send(golden("session/checkpoint"))
        f = old.recv()
        assert_shape(f, "session/checkpointed")
        gold = golden("session/checkpointed")
        assert f == dict(gold, bytes=f["bytes"], duration_ms=f["duration_ms"])
        path = golden("session/checkpoint")["path"]
        assert f["bytes"] == os.path.getsize(os.path.join(old.cwd, path))
        shutil.copy(os.path.join(old.cwd, path), new.cwd)
        new.send(golden("session/restore"))
        r = new.recv()
        assert_shape(r, "session/restored")
        assert r == dict(golden("session/restored"), duration_ms=r["duration_ms"])
        assert new.value("f()") == "42"
    finally:
        old.close()
        new.close()
