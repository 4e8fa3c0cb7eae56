"""`checkpoint` and `restore`: a session's namespace written to its workspace, the workspace carried
to a NEW session (as the server's archive does), read back there. What pickles comes back (shared
references shared, session functions living in the restored namespace), modules are imported
again, what cannot be kept is named. Helpers and how to run: harness.py.
"""

import os
import shutil

from harness import HARDEN_UID, fork_hardened

STATE = ".toolgate-checkpoint"


def state(s, op, path=STATE, **fields):
    """A checkpoint or restore request; its answer (a reply or an error frame)."""
    s.next_id += 1
    s.send({"op": op, "id": s.next_id, "path": path, **fields})
    f = s.recv()
    assert f["id"] == s.next_id, f
    return f


def checkpointed(s):
    f = state(s, "checkpoint")
    assert f["op"] == "checkpointed", f
    assert f["bytes"] == os.path.getsize(os.path.join(s.cwd, STATE))
    assert not os.path.exists(os.path.join(s.cwd, STATE + ".part"))
    return f


def wake(zygote, old, name):
    """The hibernation: the old session's workspace moves to a new session's, the old session
    ends, the new one restores first. Returns the new session and the `restored` frame."""
    new = zygote.fork(name)
    shutil.copytree(old.cwd, new.cwd, dirs_exist_ok=True)
    old.close()
    f = state(new, "restore")
    assert f["op"] == "restored", f
    assert not os.path.exists(os.path.join(new.cwd, STATE))     # read once, then gone
    return new, f


def test_values_modules_shared_references_and_the_count_come_back(zygote):
    s = zygote.fork("ckpt-values")
    try:
        assert s.run("x = 41\nname = 'ada'\nitems = [1, 2.5, None]\nd = {'k': (1, 'v')}")["error"] is None
        assert s.run("import numpy as np\nimport pandas as pd\nimport os.path\nfrom os import path\n"
                     "arr = np.arange(12).reshape(3, 4)\n"
                     "df = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})\n"
                     "a = [1]\nb = a\npair = (a, arr)")["error"] is None
        f = checkpointed(s)
        names = ["a", "arr", "b", "d", "df", "items", "name", "np", "os", "pair", "path", "pd", "x"]
        assert f["kept"] == names and f["not_kept"] == []
        s, r = wake(zygote, s, "ckpt-values-2")
        assert r["restored"] == names and r["not_restored"] == []
        assert r["execution_count"] == 2
        first = s.run("(x, name, items, d)")
        assert first["execution_count"] == 3            # the count goes on from where it was
        assert first["result"]["text/plain"] == "(41, 'ada', [1, 2.5, None], {'k': (1, 'v')})"
        assert s.value("(arr.sum(), arr.shape, df['a'].sum(), list(df['b']))") == \
            "(np.int64(66), (3, 4), np.int64(3), ['x', 'y'])"
        assert s.value("import sys\n(b is a, pair[0] is a, pair[1] is arr, np is sys.modules['numpy'], "
                       "pd is sys.modules['pandas'], path is os.path)") == \
            "(True, True, True, True, True, True)"
        assert s.value("a.append(2)\nb") == "[1, 2]"
    finally:
        s.close()


SESSION_CODE = """
factor = 2
counter = 0
def double():
    return factor * 2
def bump():
    global counter
    counter += 1
def fact(n):
    return 1 if n <= 1 else n * fact(n - 1)
class Scaled:
    def __init__(self, v):
        self.v = v
    def value(self):
        return self.v * factor
    @classmethod
    def make(cls):
        return cls(factor)
    @property
    def twice(self):
        return self.v * 2
def make_adder(k):
    def add(y):
        return y + k + factor
    return add
add3 = make_adder(3)
plus_factor = lambda y: y + factor
obj = Scaled(5)
"""


def test_session_functions_and_classes_live_in_the_restored_namespace(zygote):
    s = zygote.fork("ckpt-functions")
    try:
        assert s.run(SESSION_CODE)["error"] is None
        f = checkpointed(s)
        assert f["not_kept"] == []
        s, r = wake(zygote, s, "ckpt-functions-2")
        assert r["not_restored"] == [], r
        assert set(r["restored"]) == {"factor", "counter", "double", "bump", "fact", "Scaled",
                                      "make_adder", "add3", "plus_factor", "obj"}
        # before and after a later cell changes the global the functions read
        assert s.value("(double(), obj.value(), add3(1), plus_factor(1), fact(5), obj.twice)") == \
            "(4, 10, 6, 3, 120, 10)"
        assert s.run("factor = 10")["error"] is None
        assert s.value("(double(), obj.value(), add3(1), plus_factor(1), Scaled.make().v)") == \
            "(20, 50, 14, 11, 10)"
        # a function writes the restored namespace itself
        assert s.value("bump(); bump()\ncounter") == "2"
        assert s.value("all(fn.__globals__ is globals() for fn in "
                       "(double, bump, fact, add3, plus_factor, Scaled.value, make_adder(0)))") == "True"
        assert s.value("(isinstance(obj, Scaled), type(obj) is Scaled)") == "(True, True)"
        # a function defined after the restore reads the restored ones
        assert s.value("def quad():\n    return double() * 2\nquad()") == "40"
        # the cells' sources came back too: a traceback through a restored function shows its line
        r = s.run("factor = None\ndouble()")
        assert r["error"]["type"] == "TypeError"
        assert "return factor * 2" in r["error"]["traceback"], r["error"]["traceback"]
    finally:
        s.close()


UNKEEPABLE = """
import socket, threading
def gen():
    yield 1
g = gen()
fh = open('notes.txt', 'w')
fr = open('notes.txt')
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
t = threading.Thread(target=lambda: None)
lock = threading.Lock()
class Holder:
    def __init__(self):
        self.lock = threading.Lock()
holder = Holder()
def reads_lock():
    return lock.locked()
kept = [1, 2]
__private_dunder__ = 7
"""


def test_what_cannot_be_kept_is_named_and_the_rest_is_kept(zygote):
    s = zygote.fork("ckpt-unkeepable")
    try:
        assert s.run(UNKEEPABLE)["error"] is None
        f = checkpointed(s)
        # a function that reads an unkeepable global is kept all the same
        assert f["kept"] == ["Holder", "gen", "kept", "reads_lock", "socket", "threading"]
        by_name = {e["name"]: e for e in f["not_kept"]}
        assert list(by_name) == ["fh", "fr", "g", "holder", "lock", "sock", "t"]
        assert {n: e["type"] for n, e in by_name.items()} == {
            "fh": "TextIOWrapper", "fr": "TextIOWrapper", "g": "generator", "holder": "Holder", "lock": "lock",
            "sock": "socket", "t": "Thread"}
        assert by_name["g"]["reason"] == "TypeError: cannot pickle 'generator' object"
        assert by_name["holder"]["reason"] == "TypeError: cannot pickle '_thread.lock' object"
        for e in f["not_kept"]:
            assert e["reason"].startswith("TypeError: ") and "\n" not in e["reason"], e
        s, r = wake(zygote, s, "ckpt-unkeepable-2")
        assert r["restored"] == f["kept"]
        assert r["not_restored"] == f["not_kept"]
        assert s.value("(kept, list(gen()), Holder().lock.locked())") == "([1, 2], [1], False)"
        assert s.run("g")["error"]["type"] == "NameError"
        assert s.run("reads_lock()")["error"]["message"] == "name 'lock' is not defined"
        assert s.value("lock = threading.Lock()\nreads_lock()") == "False"
        assert s.run("__private_dunder__")["error"]["type"] == "NameError"
    finally:
        s.close()


def test_the_lists_of_what_was_not_kept_are_capped(zygote):
    s = zygote.fork("ckpt-cap")
    try:
        assert s.run("for i in range(1003):\n    globals()[f'g{i:04}'] = (x for x in ())\n"
                     "del i\nkept = 1")["error"] is None
        f = checkpointed(s)
        assert f["kept"] == ["kept"]
        assert len(f["not_kept"]) == 1001
        assert f["not_kept"][0]["name"] == "g0000" and f["not_kept"][999]["name"] == "g0999"
        assert f["not_kept"][1000] == {"name": "…", "type": "", "reason": "3 more not kept"}
        s, r = wake(zygote, s, "ckpt-cap-2")
        assert r["restored"] == ["kept"]
        assert r["not_restored"][:1000] == f["not_kept"][:1000]
        assert r["not_restored"][1000] == {"name": "…", "type": "", "reason": "3 more not restored"}
    finally:
        s.close()


def test_what_fails_at_restore_is_named_and_the_rest_restored(zygote):
    """A module of the workspace that is gone by the restore: the global bound to it, and a value
    of a class of it, are not restored; a value that shares an object with one is not either."""
    s = zygote.fork("ckpt-gone")
    try:
        with open(os.path.join(s.cwd, "mine.py"), "w") as fh:
            fh.write("class Thing:\n    pass\n")
        assert s.run("import mine\nthing = mine.Thing()\nwith_thing = [thing]\n"
                     "zeta = 'fine'\nalpha = 1")["error"] is None
        f = checkpointed(s)
        assert f["kept"] == ["alpha", "mine", "thing", "with_thing", "zeta"]
        os.unlink(os.path.join(s.cwd, "mine.py"))
        shutil.rmtree(os.path.join(s.cwd, "__pycache__"), ignore_errors=True)
        s, r = wake(zygote, s, "ckpt-gone-2")
        assert r["restored"] == ["alpha", "zeta"]
        assert r["not_restored"] == [
            {"name": "mine", "type": "module", "reason": "ModuleNotFoundError: No module named 'mine'"},
            {"name": "thing", "type": "Thing", "reason": "ModuleNotFoundError: No module named 'mine'"},
            {"name": "with_thing", "type": "list",
             "reason": "UnpicklingError: it shares an object with a value not restored"}]
        assert s.value("(alpha, zeta)") == "(1, 'fine')"
    finally:
        s.close()


def test_code_that_exits_while_kept_or_restored_is_named_and_the_session_goes_on(zygote):
    s = zygote.fork("ckpt-exit")
    try:
        with open(os.path.join(s.cwd, "leaving.py"), "w") as fh:
            fh.write("import os\nif os.path.exists('leave-now'):\n    raise SystemExit(3)\n")
        assert s.run("import leaving\nclass Leaves:\n    def __reduce__(self):\n"
                     "        raise SystemExit(4)\nbye = Leaves()\nstay = 1")["error"] is None
        f = checkpointed(s)
        assert f["kept"] == ["Leaves", "leaving", "stay"]
        assert f["not_kept"] == [{"name": "bye", "type": "Leaves", "reason": "SystemExit: 4"}]
        open(os.path.join(s.cwd, "leave-now"), "w").close()
        s, r = wake(zygote, s, "ckpt-exit-2")
        assert r["restored"] == ["Leaves", "stay"]
        assert r["not_restored"][1] == {"name": "leaving", "type": "module", "reason": "SystemExit: 3"}
        assert s.value("stay") == "1"
    finally:
        s.close()


def test_a_missing_cut_or_foreign_file_fails_the_restore_and_the_session_goes_on(zygote):
    s = zygote.fork("ckpt-source")
    try:
        assert s.run("x = list(range(1000))\ny = 'text'")["error"] is None
        checkpointed(s)
        with open(os.path.join(s.cwd, STATE), "rb") as fh:
            whole = fh.read()
    finally:
        s.close()
    cases = {"missing": None, "cut": whole[:len(whole) // 2], "cut at the end": whole[:-1],
             "foreign": b"print('not a checkpoint')\n", "empty": b"",
             "damaged header": whole[:-16].replace(b'"execution_count": 1', b'"execution_count": "x"')
             + whole[-16:]}
    for case, data in cases.items():
        s = zygote.fork(f"ckpt-bad-{case}")
        try:
            if data is not None:
                with open(os.path.join(s.cwd, STATE), "wb") as fh:
                    fh.write(data)
            f = state(s, "restore")
            assert (f["op"], f["code"]) == ("error", "restore_failed"), (case, f)
            assert f["message"] and len(f["message"]) < 200, f
            assert not os.path.exists(os.path.join(s.cwd, STATE)), case
            r = s.run("sorted(k for k in globals() if not k.startswith('__'))")
            assert r["result"]["text/plain"] == "[]" and r["execution_count"] == 1, (case, r)
        finally:
            s.close()
    assert b'"execution_count": 1' in whole    # the damaged case really damaged something


def test_a_checkpoint_that_cannot_be_written_leaves_nothing(zygote):
    """A full disk or quota, here the session's own file-size limit: checkpoint_failed with the
    OS's message, no file, no .part; once there is room, it works."""
    s = zygote.fork("ckpt-full")
    try:
        assert s.run("import resource, numpy as np\nbig = np.ones(1 << 20)\n"
                     "hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]\n"
                     "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, hard))")["error"] is None
        f = state(s, "checkpoint")
        assert (f["op"], f["code"]) == ("error", "checkpoint_failed"), f
        assert "File too large" in f["message"], f
        assert not os.path.exists(os.path.join(s.cwd, STATE))
        assert not os.path.exists(os.path.join(s.cwd, STATE + ".part"))
        assert s.value("big.sum()") == "np.float64(1048576.0)"        # the session goes on
        assert s.run("resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))")["error"] is None
        assert "big" in checkpointed(s)["kept"]
    finally:
        s.close()


def test_the_working_directory_environment_and_sys_path_are_not_restored(zygote):
    s = zygote.fork("ckpt-process")
    try:
        home = s.cwd
        assert s.run("import os, sys\nos.chdir('/')\nos.environ['MINE'] = '1'\n"
                     "sys.path.append('/nowhere')\nx = 1")["error"] is None
        checkpointed(s)        # written in the workspace, not in the cell's working directory
        assert os.path.exists(os.path.join(home, STATE))
        s, r = wake(zygote, s, "ckpt-process-2")
        assert s.value("(os.getcwd() == os.environ['HOME'], 'MINE' in os.environ, "
                       "'/nowhere' in sys.path, x)") == "(True, False, False, 1)"
    finally:
        s.close()


def test_a_restored_session_checkpoints_and_restores_again(zygote):
    s = zygote.fork("ckpt-twice")
    try:
        assert s.run("def f():\n    return n\nn = 1")["error"] is None
        checkpointed(s)
        s, _ = wake(zygote, s, "ckpt-twice-2")
        assert s.run("n = 2")["error"] is None
        assert checkpointed(s)["kept"] == ["f", "n"]
        s, r = wake(zygote, s, "ckpt-twice-3")
        assert r["execution_count"] == 2
        assert s.value("f()") == "2"
    finally:
        s.close()


def test_bad_requests_are_refused(zygote):
    s = zygote.fork("ckpt-bad-requests")
    try:
        for op in ("checkpoint", "restore"):
            for path in ("/etc/passwd", "../out", "a/../../b", "a\0b", "", 5, None):
                f = state(s, op, path=path)
                assert (f["op"], f["code"]) == ("error", "bad_request"), (op, path, f)
            s.send({"op": op, "path": STATE})
            f = s.recv()
            assert (f["op"], f["code"], f["id"]) == ("error", "bad_request", None), f
        assert not os.path.exists(os.path.join(s.cwd, STATE))
        assert s.value("1 + 1") == "2"
    finally:
        s.close()


def test_a_hardened_session_checkpoints_and_restores(hardened, workspaces, base_prefix):
    """Under the real confinement (the runtime's package dir unreadable, the workspace at
    /workspace): the state file is written and read in the workspace, as the session's uid."""
    old = fork_hardened(hardened, "ckpt-hardened", workspaces, base_prefix)
    new = fork_hardened(hardened, "ckpt-hardened-2", workspaces, base_prefix)
    try:
        assert old.run(SESSION_CODE + "import numpy as np\narr = np.arange(10)")["error"] is None
        f = state(old, "checkpoint")
        assert f["op"] == "checkpointed" and f["not_kept"] == [], f
        written = os.path.join(old.host_workspace, STATE)
        assert os.stat(written).st_uid == HARDEN_UID
        shutil.copy(written, new.host_workspace)
        os.chown(os.path.join(new.host_workspace, STATE), HARDEN_UID, HARDEN_UID)
        old.close()
        r = state(new, "restore")
        assert r["op"] == "restored" and r["not_restored"] == [], r
        assert r["restored"] == f["kept"]
        assert not os.path.exists(os.path.join(new.host_workspace, STATE))
        assert new.value("factor = 3\n(double(), obj.value(), add3(1), int(arr.sum()))") == \
            "(6, 15, 7, 45)"
    finally:
        old.close()
        new.close()
