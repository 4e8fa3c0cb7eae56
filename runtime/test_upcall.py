"""Upcalls: code in a session asks the service (here: the test, playing the server) and waits for
the typed answer (runtime/PROTOCOL.md, "Upcalls"). Helpers and how to run: harness.py."""

import os
import signal
from pathlib import Path

from harness import fork_hardened, nothing_to_read, wait_until

RECORD = {"tier": "free", "free_remaining_this_month": 998, "free_monthly_limit": 1000,
          "wallet_balance_usd": "0.00", "paid_calls_available": 0, "paid_call_cost_usd": "0.008",
          "min_topup_usd": "5.00", "max_topup_usd": "500.00"}


def answer(rid, n, record=RECORD):
    return {"op": "upcall_result", "id": rid, "upcall": n, "value": {"billing": record}}


def refusal(rid, n, code="refused", message="no calls left"):
    return {"op": "upcall_result", "id": rid, "upcall": n, "error": {"code": code, "message": message}}


def start(s, code, rid=None):
    """Sends an exec request; returns its id."""
    if rid is None:
        s.next_id += 1
        rid = s.next_id
    s.send({"op": "exec", "id": rid, "code": code})
    return rid


def expect_upcall(s, rid, n):
    f = s.recv()
    assert f == {"op": "upcall", "id": rid, "upcall": n, "request": {"kind": "billing"}}, f
    return f


def expect_result(s, rid):
    f = s.recv()
    assert f["op"] == "result" and f["id"] == rid, f
    return f


def test_billing_gets_the_answer_or_raises_toolgate_error(zygote):
    s = zygote.fork("upcall-basic")
    try:
        rid = start(s, "import toolgate\nb = toolgate.billing()\nb")
        expect_upcall(s, rid, 1)
        s.send(answer(rid, 1))
        r = expect_result(s, rid)
        assert r["error"] is None and r["result"]["text/plain"] == repr(RECORD)
        # numbered 1, 2, ... within a request, from 1 again in the next
        rid = start(s, "[toolgate.billing()['tier'] for _ in range(2)]")
        expect_upcall(s, rid, 1)
        s.send(answer(rid, 1))
        expect_upcall(s, rid, 2)
        s.send(answer(rid, 2, dict(RECORD, tier="paid")))
        assert expect_result(s, rid)["result"]["text/plain"] == "['free', 'paid']"
        # an error answer raises ToolgateError; str() shows code and message
        rid = start(s, "toolgate.billing()")
        expect_upcall(s, rid, 1)
        s.send(refusal(rid, 1))
        e = expect_result(s, rid)["error"]
        assert (e["type"], e["message"]) == ("ToolgateError", "refused: no calls left")
        assert "toolgate/" not in e["traceback"] and "toolgate.billing()" in e["traceback"], e
        for code in ("unavailable", "failed", "busy", "bad_request"):
            rid = start(s, "try:\n    toolgate.billing()\nexcept toolgate.ToolgateError as e:\n"
                           "    got = (e.code, e.message)\ngot")
            expect_upcall(s, rid, 1)
            s.send(refusal(rid, 1, code, f"{code}!"))
            assert expect_result(s, rid)["result"]["text/plain"] == repr((code, f"{code}!"))
        # an answer with both (or neither) of value and error is not understood
        rid = start(s, "try:\n    toolgate.billing()\nexcept toolgate.ToolgateError as e:\n"
                       "    got = e.code\ngot")
        expect_upcall(s, rid, 1)
        s.send({**answer(rid, 1), "error": {"code": "failed", "message": "m"}})
        assert expect_result(s, rid)["result"]["text/plain"] == "'bad_answer'"
        assert s.value("'alive'") == "'alive'"
    finally:
        s.close()


def test_no_upcall_outside_a_running_exec(zygote):
    """A thread that outlives its cell, a bash command's time and a forked process get
    not_in_call at once, and nothing is written on the socket."""
    s = zygote.fork("upcall-outside")
    ws = Path(s.cwd)
    try:
        assert s.run("import os, threading, time, toolgate\n"
                     "def late(trigger, out):\n"
                     "    while not os.path.exists(trigger):\n"
                     "        time.sleep(0.01)\n"
                     "    try:\n"
                     "        toolgate.billing()\n"
                     "        got = 'answered'\n"
                     "    except toolgate.ToolgateError as e:\n"
                     "        got = f'{e.code}|{e.message}'\n"
                     "    open(out + '.part', 'w').write(got)\n"
                     "    os.rename(out + '.part', out)\n"
                     "threading.Thread(target=late, args=('go', 'late.txt')).start()\n"
                     "threading.Thread(target=late, args=('go-bash', 'bash.txt')).start()")["error"] is None
        # between requests
        (ws / "go").touch()
        wait_until(lambda: (ws / "late.txt").exists(), "the late thread's upcall fails", 10)
        code, message = (ws / "late.txt").read_text().split("|", 1)
        assert code == "not_in_call" and "only while a call runs" in message, message
        assert nothing_to_read(s.sock)
        assert s.value("6 * 7") == "42"                 # the next request as usual
        # during a bash command (request() refuses any frame but output and result)
        r = s.bash("touch go-bash; while [ ! -e bash.txt ]; do sleep 0.01; done; cut -d'|' -f1 bash.txt")
        assert r["stdout"] == "not_in_call\n", r
        # a process the cell forked
        r = s.run("pid = os.fork()\n"
                  "if pid == 0:\n"
                  "    try:\n"
                  "        toolgate.billing()\n"
                  "    except toolgate.ToolgateError as e:\n"
                  "        os._exit(3 if e.code == 'not_in_call' else 4)\n"
                  "    os._exit(5)\n"
                  "os.waitpid(pid, 0)[1] >> 8")
        assert r["result"]["text/plain"] == "3", r
    finally:
        s.close()


def test_an_interrupted_upcall_leaves_the_session_usable(zygote):
    s = zygote.fork("upcall-interrupted")
    try:
        first = start(s, "import toolgate\ntoolgate.billing()")
        expect_upcall(s, first, 1)
        os.kill(s.pid, signal.SIGINT)                # the server's time-out or cancellation
        e = expect_result(s, first)["error"]
        assert e["type"] == "KeyboardInterrupt" and "toolgate/" not in e["traceback"], e
        # the late answer, between requests: ignored, silently
        s.send(answer(first, 1))
        s.send({"op": "ping", "id": "after"})
        assert s.recv() == {"op": "pong", "id": "after"}
        # a late answer while a later upcall waits: dropped; its own answer is taken
        rid = start(s, "toolgate.billing()['tier']")
        expect_upcall(s, rid, 1)
        s.send(answer(first, 1, dict(RECORD, tier="stale")))     # of the earlier request
        s.send(answer(rid, 1))
        assert expect_result(s, rid)["result"]["text/plain"] == "'free'"
        # ... and the late answer of an upcall interrupted earlier in the same request
        rid = start(s, "try:\n    toolgate.billing()\nexcept KeyboardInterrupt:\n"
                       "    first = 'interrupted'\n(first, toolgate.billing()['tier'])")
        expect_upcall(s, rid, 1)
        os.kill(s.pid, signal.SIGINT)
        expect_upcall(s, rid, 2)
        s.send(answer(rid, 1, dict(RECORD, tier="stale")))
        s.send(answer(rid, 2))
        r = expect_result(s, rid)
        assert r["error"] is None and r["result"]["text/plain"] == "('interrupted', 'free')", r
        assert s.value("1 + 1") == "2"
    finally:
        s.close()


def test_upcalls_of_two_threads_are_serialised(zygote):
    s = zygote.fork("upcall-threads")
    ws = Path(s.cwd)
    try:
        rid = start(s, "import threading, toolgate\n"
                       "got = {}\n"
                       "def call(name):\n"
                       "    with open('calling', 'a') as f:\n"
                       "        f.write(name + '\\n')\n"
                       "    got[name] = toolgate.billing()['free_remaining_this_month']\n"
                       "threads = [threading.Thread(target=call, args=(n,)) for n in 'ab']\n"
                       "for t in threads:\n    t.start()\n"
                       "for t in threads:\n    t.join()\n"
                       "sorted(got.values())")
        expect_upcall(s, rid, 1)
        wait_until(lambda: (ws / "calling").exists() and len((ws / "calling").read_text().split()) == 2,
                   "both threads call")
        assert nothing_to_read(s.sock, 0.3)       # the second waits for the first's answer
        s.send(answer(rid, 1, dict(RECORD, free_remaining_this_month=998)))
        expect_upcall(s, rid, 2)
        s.send(answer(rid, 2, dict(RECORD, free_remaining_this_month=997)))
        assert expect_result(s, rid)["result"]["text/plain"] == "[997, 998]"
    finally:
        s.close()


def test_the_result_waits_for_an_upcall_still_in_flight(zygote):
    """A thread's upcall was written before its cell ended: the result comes after its answer
    (the executor's loop must be the socket's only reader again)."""
    s = zygote.fork("upcall-in-flight")
    ws = Path(s.cwd)
    try:
        rid = start(s, "import os, threading, time, toolgate\n"
                       "box = {}\n"
                       "threading.Thread(target=lambda: box.update(b=toolgate.billing())).start()\n"
                       "while not os.path.exists('release'):\n"
                       "    time.sleep(0.01)\n"
                       "'cell done'")
        expect_upcall(s, rid, 1)
        (ws / "release").touch()
        assert nothing_to_read(s.sock, 0.3)
        s.send(answer(rid, 1))
        r = expect_result(s, rid)
        assert r["result"]["text/plain"] == "'cell done'", r
        assert s.value("box['b']['tier']") == "'free'"
    finally:
        s.close()


def test_toolgate_in_a_hardened_session(hardened, workspaces, base_prefix):
    """The session's root has no runtime/: the zygote loaded the package before the fork."""
    s = fork_hardened(hardened, "upcall-hardened", workspaces, base_prefix)
    try:
        assert s.value("import os, toolgate\nos.path.exists(toolgate.__file__)") == "False"
        rid = start(s, "toolgate.billing()['free_monthly_limit']")
        expect_upcall(s, rid, 1)
        s.send(answer(rid, 1))
        assert expect_result(s, rid)["result"]["text/plain"] == "1000"
        rid = start(s, "toolgate.billing()")
        expect_upcall(s, rid, 1)
        s.send(refusal(rid, 1))
        assert expect_result(s, rid)["error"]["type"] == "ToolgateError"
    finally:
        s.close()


def test_a_streamed_answer_comes_in_pieces_and_an_abandoned_one_is_dropped(zygote):
    s = zygote.fork("upcall-stream")
    llm = {"llm": {"text": "Hello!", "model": "m", "provider": "p", "finish_reason": "stop"}}
    try:
        code = ("import toolgate\n"
                "pieces = []\n"
                "for p in toolgate.invoke_llm('p/m', 'hi', stream=True):\n"
                "    pieces.append(p)\n"
                "pieces")
        rid = start(s, code)
        f = s.recv()
        assert f["op"] == "upcall" and f["request"] == {"kind": "invoke_llm", "model": "p/m",
                                                        "prompt": "hi", "stream": True}, f
        for piece in ("Hel", "lo!"):
            s.send({"op": "upcall_progress", "id": rid, "upcall": 1, "data": piece})
        # another upcall's piece (a stale one) is not this one's
        s.send({"op": "upcall_progress", "id": rid, "upcall": 9, "data": "stale"})
        s.send({"op": "upcall_result", "id": rid, "upcall": 1, "value": llm})
        assert expect_result(s, rid)["result"]["text/plain"] == "['Hel', 'lo!']"
        # code that stops after the first piece lets the upcall go; what comes later is dropped
        code = ("first = next(iter(toolgate.invoke_llm('p/m', 'hi', stream=True)))\n"
                "first")
        rid = start(s, code)
        s.recv()
        s.send({"op": "upcall_progress", "id": rid, "upcall": 1, "data": "only"})
        r = expect_result(s, rid)
        assert r["error"] is None and r["result"]["text/plain"] == "'only'", r
        s.send({"op": "upcall_progress", "id": rid, "upcall": 1, "data": "late"})
        s.send({"op": "upcall_result", "id": rid, "upcall": 1, "value": llm})
        assert s.value("1 + 1") == "2"          # the late frames were ignored between requests
    finally:
        s.close()


PAGE = {"status": 404, "url": "https://api.example/x", "content_type": "application/json",
        "format": "json", "text": '{\n  "error": "gone"\n}', "bytes": 17, "truncated": False,
        "headers": [["content-type", "application/json"], ["set-cookie", "a=1"],
                    ["set-cookie", "b=2"]]}


def test_fetch_http_sql_and_secrets_send_their_requests_and_return_typed_answers(zygote):
    s = zygote.fork("upcall-web")
    try:
        code = ("import toolgate\n"
                "p = toolgate.fetch('https://api.example/x', "
                "headers={'Authorization': 'Bearer {{secret:K}}'}, max_bytes=100)\n"
                "(p['status'], p['json'], p['headers']['set-cookie'], p['text'][:1])")
        rid = start(s, code)
        f = s.recv()
        assert f["request"] == {"kind": "fetch", "url": "https://api.example/x",
                                "headers": {"Authorization": "Bearer {{secret:K}}"},
                                "max_bytes": 100}, f
        s.send({"op": "upcall_result", "id": rid, "upcall": 1, "value": {"fetch": PAGE}})
        r = expect_result(s, rid)
        assert r["error"] is None, r
        assert r["result"]["text/plain"] == "(404, {'error': 'gone'}, 'a=1, b=2', '{')"

        rid = start(s, "h = toolgate.http('post', 'https://api.example/hook', json={'a': [1]})\n"
                       "(h['status'], h['json'])")
        f = s.recv()
        assert f["request"] == {"kind": "http", "method": "POST", "url": "https://api.example/hook",
                                "body": '{"a": [1]}',
                                "headers": {"Content-Type": "application/json"}}, f
        page = dict(PAGE, status=201, truncated=True)
        s.send({"op": "upcall_result", "id": rid, "upcall": 1, "value": {"http": page}})
        # a cut body is not parsed
        assert expect_result(s, rid)["result"]["text/plain"] == "(201, None)"

        rid = start(s, "t = toolgate.sql('PG_URL', 'update t set a = $1', (None,), write=True, "
                       "max_rows=5)\n"
                       "(t['rows'], t['changes'])")
        f = s.recv()
        assert f["request"] == {"kind": "sql", "database": "PG_URL", "query": "update t set a = $1",
                                "params": [None], "write": True, "max_rows": 5}, f
        table = {"database": "postgres", "columns": [{"name": "a", "type": "int4"}],
                 "rows": [[1], [None]], "row_count": 2, "truncated": False, "changes": 2}
        s.send({"op": "upcall_result", "id": rid, "upcall": 1, "value": {"sql": table}})
        assert expect_result(s, rid)["result"]["text/plain"] == "([[1], [None]], 2)"

        rid = start(s, "toolgate.secrets()")
        assert s.recv()["request"] == {"kind": "secrets"}
        s.send({"op": "upcall_result", "id": rid, "upcall": 1, "value": {"secrets": ["A", "B"]}})
        assert expect_result(s, rid)["result"]["text/plain"] == "['A', 'B']"

        # an answer of the wrong kind is not taken for a page
        rid = start(s, "toolgate.fetch('https://x.example/')")
        s.recv()
        s.send({"op": "upcall_result", "id": rid, "upcall": 1, "value": {"http": PAGE}})
        r = expect_result(s, rid)
        assert r["error"]["type"] == "ToolgateError" and "bad_answer" in r["error"]["message"], r
    finally:
        s.close()


def test_bad_arguments_raise_toolgate_error_before_anything_is_sent(zygote):
    """Arguments of the wrong type, and a request over the server's 2 MiB limit of an upcall
    frame (which would end the session), raise bad_request without writing a frame."""
    s = zygote.fork("upcall-bad-arguments")
    try:
        calls = [
            "toolgate.fetch(5)",
            "toolgate.fetch('https://x.example/', headers='Authorization: x')",
            "toolgate.fetch('https://x.example/', headers={'A': 1})",
            "toolgate.fetch('https://x.example/', max_bytes='10')",
            "toolgate.fetch('https://x.example/', max_bytes=True)",
            "toolgate.fetch('https://x.example/' + 'x' * (10 << 20))",
            "toolgate.http('TRACE', 'https://x.example/')",
            "toolgate.http('POST', 'https://x.example/', body='a', json={})",
            "toolgate.http('POST', 'https://x.example/', json=object())",
            "toolgate.http('POST', 'https://x.example/', json=float('nan'))",
            "toolgate.http('POST', 'https://x.example/', body=b'bytes')",
            "toolgate.sql('PG', 'select 1', write='yes')",
            "toolgate.sql(['PG'], 'select 1')",
            "toolgate.sql('PG', 'select 1', max_rows=-1)",
            "toolgate.sql('PG', 'select $1', params='x')",
            "toolgate.sql('PG', 'select $1', params=[{'a': 1}])",
            "toolgate.sql('PG', 'select $1', params=[[1]])",
            "toolgate.sql('PG', 'select $1', params=[1 << 64])",
            "toolgate.sql('PG', 'select $1', params=[float('inf')])",
            "toolgate.sql('PG', 'select $1', params=[b'bytes'])",
            "toolgate.invoke_llm('p/m', 'x' * (3 << 20))",
            "toolgate.invoke_llm('p/m', 'x', temperature=float('nan'))",
        ]
        for call in calls:
            code = (f"import toolgate\ntry:\n    {call}\nexcept toolgate.ToolgateError as e:\n"
                    f"    print(e.code)\n")
            rid = start(s, code)
            r = expect_result(s, rid)
            assert r["error"] is None and r["stdout"] == "bad_request\n", (call, r)
        assert nothing_to_read(s.sock)
    finally:
        s.close()
