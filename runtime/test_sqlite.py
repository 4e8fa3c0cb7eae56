"""The `sqlite` request: a statement on a SQLite file of the session's workspace, run by the
session. Reads are refused writes by SQLite itself; rows, types, caps, scripts, time limits.
Helpers and how to run: harness.py.
"""

import os
import signal
import time

from harness import frame, recv_frame


def sql(s, statement, write=False, max_rows=100, max_bytes=1 << 20, path="db.sqlite", **extra):
    return s.request("sqlite", path=path, statement=statement, write=write, max_rows=max_rows,
                     max_bytes=max_bytes, **extra)


def test_rows_come_back_with_their_columns_and_storage_classes(zygote):
    s = zygote.fork("sqlite-rows")
    try:
        r = sql(s, "CREATE TABLE t(id INTEGER, name TEXT, score REAL, raw BLOB, empty);"
                   "INSERT INTO t VALUES (1, 'ada', 2.5, x'00ff', NULL), (2, 'bob', 1e308*10, x'', NULL)",
                write=True)
        assert r["error"] is None, r["error"]
        assert r["kind"] == "sqlite" and r["table"]["changes"] == 2
        r = sql(s, "SELECT * FROM t ORDER BY id")
        assert r["error"] is None, r["error"]
        table = r["table"]
        assert [(c["name"], c["type"]) for c in table["columns"]] == [
            ("id", "integer"), ("name", "text"), ("score", "real"), ("raw", "blob"), ("empty", "null")]
        assert table["rows"] == [[1, "ada", 2.5, "AP8=", None], [2, "bob", "inf", "", None]]
        assert table["truncated"] is False and table["changes"] == 0
    finally:
        s.close()


def test_a_read_cannot_write_the_database_refuses_it(zygote):
    s = zygote.fork("sqlite-ro")
    try:
        assert sql(s, "CREATE TABLE t(x)", write=True)["error"] is None
        for statement in ("INSERT INTO t VALUES (1)", "DROP TABLE t", "CREATE TABLE u(y)",
                          "PRAGMA user_version = 7"):
            r = sql(s, statement)
            assert r["error"]["type"] == "SqliteError", (statement, r)
            assert "readonly" in r["error"]["message"], r["error"]
        # nothing changed
        assert sql(s, "SELECT count(*) FROM t")["table"]["rows"] == [[0]]
        assert sql(s, "PRAGMA user_version")["table"]["rows"] == [[0]]
        # two statements are not one: the second never runs
        r = sql(s, "SELECT 1; DELETE FROM t")
        assert "one statement" in r["error"]["message"], r["error"]
        # a missing file is not created by a read
        r = sql(s, "SELECT 1", path="absent.db")
        assert "cannot open 'absent.db'" in r["error"]["message"], r["error"]
        assert not os.path.exists(os.path.join(s.cwd, "absent.db"))
    finally:
        s.close()


def test_rows_are_capped_by_count_and_by_bytes(zygote):
    s = zygote.fork("sqlite-cap")
    try:
        sql(s, "CREATE TABLE n(i); WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c "
               "WHERE i < 5000) INSERT INTO n SELECT i FROM c", write=True)
        r = sql(s, "SELECT i FROM n ORDER BY i", max_rows=10)
        assert [row[0] for row in r["table"]["rows"]] == list(range(1, 11))
        assert r["table"]["truncated"] is True
        r = sql(s, "SELECT i FROM n", max_rows=5000)
        assert len(r["table"]["rows"]) == 5000 and r["table"]["truncated"] is False
        r = sql(s, "SELECT zeroblob(100000) FROM n", max_rows=1000, max_bytes=300_000)
        assert 2 <= len(r["table"]["rows"]) <= 4 and r["table"]["truncated"] is True
    finally:
        s.close()


def test_a_row_over_the_byte_cap_is_left_out_even_the_first(zygote):
    """A value is counted as the frame carries it (escapes included), and no row passes the cap:
    a 5 MiB value came back whole, and the server ended the session over the table's size."""
    s = zygote.fork("sqlite-row-cap")
    try:
        cap = 1 << 20
        sql(s, "CREATE TABLE z(a)", write=True)
        # a string as JSON writes it is its characters and two quotes
        r = sql(s, f"SELECT printf('%.{cap - 2}c', 'x') AS v", max_bytes=cap)
        assert r["error"] is None and len(r["table"]["rows"]) == 1, r["error"]
        assert r["table"]["truncated"] is False
        for statement in (f"SELECT printf('%.{cap - 1}c', 'x') AS v",
                          f"SELECT printf('%.{5 * cap}c', 'x') AS v",
                          "SELECT printf('%.300000c', char(1)) AS v"):
            r = sql(s, statement, max_bytes=cap)
            assert r["error"] is None, r["error"]
            assert r["table"]["rows"] == [] and r["table"]["truncated"] is True, statement
            assert r["table"]["columns"] == [{"name": "v", "type": "text"}]
        r = sql(s, "SELECT 1 AS one")
        assert r["table"]["rows"] == [[1]]
    finally:
        s.close()


def test_a_failing_script_changes_nothing(zygote):
    s = zygote.fork("sqlite-atomic")
    try:
        assert sql(s, "CREATE TABLE t(x UNIQUE)", write=True)["error"] is None
        r = sql(s, "INSERT INTO t VALUES (1); INSERT INTO t VALUES ('a;b'); INSERT INTO t VALUES (1)",
                write=True)
        assert "UNIQUE" in r["error"]["message"], r["error"]
        assert sql(s, "SELECT count(*) FROM t")["table"]["rows"] == [[0]]
        r = sql(s, "INSERT INTO t VALUES (5) RETURNING x * 2", write=True)
        assert r["table"]["rows"] == [[10]] and r["table"]["changes"] == 1
    finally:
        s.close()


def test_a_long_statement_stops_at_its_time_limit_and_on_sigint(zygote):
    s = zygote.fork("sqlite-slow")
    endless = ("WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c) "
               "SELECT count(*) FROM c")
    try:
        assert sql(s, "CREATE TABLE t(x)", write=True)["error"] is None
        t0 = time.monotonic()
        r = sql(s, endless, timeout_s=0.3)
        assert "time limit" in r["error"]["message"], r["error"]
        assert 0.3 <= time.monotonic() - t0
        s.next_id += 1
        s.sock.sendall(frame({"op": "sqlite", "id": s.next_id, "path": "db.sqlite",
                              "statement": endless, "write": False, "max_rows": 1,
                              "max_bytes": 100}))
        time.sleep(0.3)
        os.kill(s.pid, signal.SIGINT)
        r = recv_frame(s.sock)
        assert r["op"] == "result" and r["error"] is not None, r
        # the session lives on
        assert s.value("1 + 1") == "2"
    finally:
        s.close()


def test_malformed_requests_are_refused(zygote):
    s = zygote.fork("sqlite-bad")
    try:
        for fields in ({"statement": "SELECT 1"}, {"path": "d", "statement": 3},
                       {"path": "d", "statement": "SELECT 1", "max_rows": -1, "max_bytes": 1},
                       {"path": "d", "statement": "SELECT 1", "max_rows": 1, "max_bytes": 1,
                        "write": "yes"}):
            s.next_id += 1
            s.sock.sendall(frame({"op": "sqlite", "id": s.next_id, **fields}))
            e = recv_frame(s.sock)
            assert e["op"] == "error" and e["code"] == "bad_request", e
        assert s.value("2 * 2") == "4"
    finally:
        s.close()
