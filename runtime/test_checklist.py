"""A hardened child's checklist runs beside the zygote's next requests: the zygote does not wait
for it, answers each child when its last word comes, and kills a child that stalls or ends
half-way. A child is stalled on purpose by a frozen cgroup v1 freezer group, which it joins
itself as the first step of its checklist. Helpers and how to run: harness.py.
"""

import os
import socket
from pathlib import Path

import pytest

from harness import (Zygote, detached_mount, fork_hardened, frame, harden_lib, hardened_spec,
                     recv_frame, wait_until, workspace)

FREEZER = Path("/sys/fs/cgroup/freezer")


@pytest.fixture
def frozen_group():
    """A cgroup v1 freezer group, frozen: a child that joins it stops there until it is thawed."""
    if not (FREEZER / "tasks").exists():
        pytest.fail("these tests need the cgroup v1 freezer hierarchy at /sys/fs/cgroup/freezer")
    group = FREEZER / f"toolgate-test-{os.getpid()}"
    group.mkdir()
    (group / "freezer.state").write_text("FROZEN")
    yield group
    (group / "freezer.state").write_text("THAWED")
    wait_until(lambda: not (group / "cgroup.procs").read_text().strip(), "the group empties", 10)
    group.rmdir()


def members(group):
    return [int(p) for p in (group / "cgroup.procs").read_text().split()]


def send_fork(z, name, ws, base, **overrides):
    """A hardened fork request, not waited for: the session's socket (our end)."""
    mine, theirs = socket.socketpair()
    mount = detached_mount(ws)
    try:
        z.send({"op": "fork", "session": name, "cwd": "/workspace", "tmpdir": "/tmp",
                "harden": hardened_spec(ws, base, **overrides)}, [theirs.fileno(), mount])
    finally:
        os.close(mount)
        theirs.close()
    mine.settimeout(60)
    return mine


def test_the_zygote_serves_others_while_a_checklist_stalls(hardened, workspaces, base_prefix,
                                                           frozen_group):
    z = hardened
    stalled = send_fork(z, "stalled", workspace(workspaces), base_prefix,
                        cgroups=[str(frozen_group)])
    wait_until(lambda: members(frozen_group), "the child joins the frozen group")
    pid = members(frozen_group)[0]
    # the zygote answers a ping and forks (and confines) another session meanwhile
    z.send({"op": "ping", "id": 7})
    assert z.expect("pong")["id"] == 7
    other = fork_hardened(z, "other", workspaces, base_prefix)
    try:
        assert other.value("1+1") == "2"
    finally:
        other.close()
        z.expect("exited", lambda e: e["pid"] == other.pid)
    # the zygote said it was free again ("spawned"), and nothing more
    assert [f["op"] for f in z.pending if f.get("session") == "stalled"] == ["spawned"], z.pending
    # thawed, the stalled child finishes its checklist and is announced
    (frozen_group / "freezer.state").write_text("THAWED")
    forked = z.expect("forked", lambda f: f["session"] == "stalled")
    assert forked["pid"] == pid and forked["hardened"].startswith("hardened: landlock="), forked
    stalled.sendall(frame({"op": "exec", "id": 1, "code": "import os\nos.getpid() + 1"}))
    answer = recv_frame(stalled)
    assert answer["result"]["text/plain"] == "2", answer      # pid 1 of its own namespace
    stalled.close()
    z.expect("exited", lambda e: e["pid"] == pid)


def test_a_checklist_that_takes_too_long_is_killed(workspaces, base_prefix, frozen_group):
    z = Zygote(f"--harden-lib={harden_lib()}", "--preload=json", "--checklist-timeout=0.5")
    try:
        sock = send_fork(z, "slow", workspace(workspaces), base_prefix,
                         cgroups=[str(frozen_group)])
        error = z.expect("error", lambda f: f.get("session") == "slow")
        assert error["code"] == "harden_failed", error
        assert error["message"] == ("hardening failed: admission: the session child sent nothing "
                                    "within 0.5 s while entering its user namespace"), error
        (frozen_group / "freezer.state").write_text("THAWED")  # a frozen task dies once thawed
        exited = z.expect("exited", lambda e: e["pid"] == error["pid"])
        assert exited["signal"] == "SIGKILL", exited
        assert not [f for f in z.pending if f["op"] == "forked"], z.pending
        sock.settimeout(5)
        assert sock.recv(65536) == b""       # it ran nothing, and said nothing
        sock.close()
        z.send({"op": "ping"})
        assert z.expect("pong")              # the zygote goes on
    finally:
        z.close()


def test_a_child_that_dies_during_its_checklist_is_answered(hardened, workspaces, base_prefix,
                                                            frozen_group):
    z = hardened
    sock = send_fork(z, "doomed", workspace(workspaces), base_prefix, cgroups=[str(frozen_group)])
    wait_until(lambda: members(frozen_group), "the child joins the frozen group")
    pid = members(frozen_group)[0]
    os.kill(pid, 9)
    (frozen_group / "freezer.state").write_text("THAWED")
    error = z.expect("error", lambda f: f.get("session") == "doomed")
    assert error["code"] == "harden_failed" and error["pid"] == pid, error
    assert "the session child ended while entering its user namespace" in error["message"], error
    assert z.expect("exited", lambda e: e["pid"] == pid)["signal"] == "SIGKILL"
    sock.close()
    z.send({"op": "ping"})
    assert z.expect("pong")
