"""The `sqlite` request: one SQL statement (or, to write, a script) on a SQLite file of the
session's workspace, run by the session itself, so that the file is opened with the session's
identity and inside its confinement: no path, link or `..` can reach anything the session could
not reach anyway, and the work is charged to the session's own memory and CPU.

A read opens the file read-only (`mode=ro`): SQLite itself refuses any write. The answer's
`table` holds the columns (name and the storage class of their first non-null value), the rows
(at most `max_rows`, and values of at most `max_bytes` as JSON writes them: a row that would
pass it is left out, the first one too), whether rows were left out, and the number of rows the
statement changed.
"""

import base64
import json
import math
import sqlite3
import time
import urllib.parse

# How often (in SQLite virtual-machine steps) the deadline is looked at, and Python gets the
# chance to run the SIGINT handler that interrupts a call.
_PROGRESS_STEPS = 10_000
_TYPES = {int: "integer", float: "real", str: "text", bytes: "blob"}


class SqliteFailure(Exception):
    """A statement that SQLite refused or that failed; the message is SQLite's."""


def run(path, statement, write, max_rows, max_bytes, timeout_s):
    """Runs `statement` on the workspace file `path`; returns the `table` object."""
    mode = "rwc" if write else "ro"
    uri = f"file:{urllib.parse.quote(path)}?mode={mode}"
    deadline = time.monotonic() + timeout_s if timeout_s else None
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=min(timeout_s or 5.0, 5.0),
                               isolation_level=None, check_same_thread=False)
    except sqlite3.Error as e:
        raise SqliteFailure(f"cannot open {path!r}: {e}") from None
    try:
        conn.set_progress_handler(lambda: _late(deadline), _PROGRESS_STEPS)
        return _run(conn, statement, write, max_rows, max_bytes)
    except sqlite3.Error as e:
        if deadline is not None and time.monotonic() >= deadline:
            raise SqliteFailure(f"the statement ran past its time limit of {timeout_s:g} s "
                                "and was stopped") from None
        raise SqliteFailure(f"{type(e).__name__}: {e}") from None
    finally:
        conn.close()


def _late(deadline):
    return 1 if deadline is not None and time.monotonic() >= deadline else 0


def _run(conn, statement, write, max_rows, max_bytes):
    before = conn.total_changes
    if write:
        conn.execute("BEGIN IMMEDIATE")
    try:
        try:
            cur = conn.execute(statement)
        except sqlite3.ProgrammingError as e:
            if not write or "one statement at a time" not in str(e):
                raise
            # several statements: run as one script, inside the same transaction, no rows
            for part in _script(conn, statement):
                pass
            cur = None
        table = _collect(cur, max_rows, max_bytes)
        if write and conn.in_transaction:        # the script may have ended it itself
            conn.execute("COMMIT")
    except BaseException:
        if write and conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    table["changes"] = conn.total_changes - before
    return table


def _script(conn, script):
    """Yields once per statement of `script`, run in order on `conn` (no COMMIT of its own, unlike
    `executescript`), so that a failure rolls back the statements before it too."""
    start = 0
    while script[start:].strip():
        end = _statement_end(script, start)
        conn.execute(script[start:end])
        start = end
        yield


def _statement_end(text, start):
    """Where the first complete statement of `text` from `start` ends (SQLite's own notion of
    complete); only that statement is scanned, so a script costs time in proportion to it."""
    at = text.find(";", start)
    while at != -1:
        if sqlite3.complete_statement(text[start:at + 1]):
            return at + 1
        at = text.find(";", at + 1)
    return len(text)


def _collect(cur, max_rows, max_bytes):
    if cur is None or cur.description is None:
        return {"columns": [], "rows": [], "truncated": False}
    names = [d[0] for d in cur.description]
    types = [None] * len(names)
    rows, used, truncated = [], 0, False
    while True:
        row = cur.fetchone()
        if row is None:
            break
        if len(rows) >= max_rows:
            truncated = True
            break
        values, size = [], 0
        for i, value in enumerate(row):
            if value is not None and types[i] is None:
                types[i] = _TYPES.get(type(value), "text")
            value, n = _json_value(value)
            size += n
            values.append(value)
        # a row that would pass the cap is left out, the first one too: the server holds the
        # whole table to a few times max_bytes and ends the session over a larger one
        if used + size > max_bytes:
            truncated = True
            break
        used += size
        rows.append(values)
    cur.close()
    columns = [{"name": n, "type": t or "null"} for n, t in zip(names, types)]
    return {"columns": columns, "rows": rows, "truncated": truncated}


def _json_value(value):
    """The value as JSON holds it (a blob as base64, a non-finite real as text) and its size."""
    if value is None:
        return None, 4
    if isinstance(value, bytes):
        text = base64.b64encode(value).decode("ascii")
        return text, len(text)
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value), 8
    if isinstance(value, str):
        # its size as the frame carries it (escapes included), as the server counts it
        return value, len(json.dumps(value, ensure_ascii=False).encode("utf-8", "replace"))
    return value, 8
