"""Upcalls: code in a session asks the service for something and waits for its typed answer.

The frames ("upcall" from the session, "upcall_result" from the server) and their rules are in
runtime/PROTOCOL.md. Only while an exec request runs (UPCALLS.rid is its id), one at a time per
session (UPCALLS.lock), from the session's own process. The caller writes its frame through the
channel's locked send, then reads the session socket itself, with the channel's decoder, until its
answer comes: a stale answer (of an upcall interrupted earlier) is dropped, any other frame is left
in the channel's pending list for the executor's loop, which reads the socket only between
requests.
"""

import json
import os
import threading

from toolgate import ToolgateError
from toolgate._protocol import BadRequest, encode_frame, parse_request

# The server's limit of an "upcall" frame (a larger one breaks the protocol and ends the session):
# a request over it is refused here, before anything is written.
MAX_UPCALL_FRAME = 2 << 20

NOT_IN_CALL = ("the service can be reached only while a call runs, from the session's own "
               "process (this thread outlived its cell, or this is a forked process)")


class _Upcalls:
    """The state shared by the executor and the upcalls of one session."""

    def __init__(self):
        self.chan = None          # the session's Channel, once the session is set up
        self.pid = None           # the session's process: a forked copy must not use the socket
        self.rid = None           # the id of the exec request running; None: none runs
        self.counted = None       # the request whose upcalls `count` numbers
        self.count = 0
        self.lock = threading.Lock()      # one upcall in flight per session
        self.critical = False     # the main thread is between the bytes of a frame: SIGINT waits
        self.interrupted = False  # ... and one came


UPCALLS = _Upcalls()


def upcall(request):
    """The "value" object of the server's answer to REQUEST, or ToolgateError."""
    pieces = upcall_stream(request)
    while True:
        try:
            next(pieces)                 # a request that does not stream has no pieces
        except StopIteration as done:
            return done.value


def upcall_stream(request):
    """A generator: yields the pieces of a streamed answer to REQUEST ("upcall_progress"
    frames) as they come, and returns the answer's "value" object (or raises ToolgateError).
    The session's one upcall at a time is held while it runs; a generator dropped before its
    end lets it go, and the rest of its answer is dropped when it comes."""
    if not isinstance(request, dict) or not isinstance(request.get("kind"), str):
        raise ToolgateError("bad_request", 'a request is an object with a string "kind"')
    st = UPCALLS
    if st.rid is None or st.chan is None or os.getpid() != st.pid:
        raise ToolgateError("not_in_call", NOT_IN_CALL)          # nothing written
    main = threading.current_thread() is threading.main_thread()
    with st.lock:
        rid = st.rid                     # the request may have ended while this waited
        if rid is None:
            raise ToolgateError("not_in_call", NOT_IN_CALL)
        if st.counted != rid:
            st.counted, st.count = rid, 0
        st.count += 1
        n = st.count
        frame = {"op": "upcall", "id": rid, "upcall": n, "request": request}
        try:
            # strict JSON (no NaN or Infinity): the server ends a session whose frame it cannot read
            json.dumps(request, allow_nan=False)
            size = len(encode_frame(frame)) - 4
        except (TypeError, ValueError) as e:
            raise ToolgateError("bad_request", f"the request is not JSON: {e}") from None
        if size > MAX_UPCALL_FRAME:
            raise ToolgateError("bad_request", f"the request is {size} bytes; an upcall is at "
                                               f"most {MAX_UPCALL_FRAME} bytes")
        if main:
            _critical(st.chan.send, frame)
        else:
            st.chan.send(frame)
        pieces = []
        while True:
            answer = _read(st.chan, rid, n, main, pieces)
            while pieces:
                yield pieces.pop(0)
            if answer is not None:
                return _answer(answer)


def _critical(f, *args):
    """Runs f with SIGINT held back (the main thread must not stop in the middle of a frame it
    writes or decodes); a SIGINT that came meanwhile raises KeyboardInterrupt after."""
    st = UPCALLS
    st.critical = True
    try:
        return f(*args)
    finally:
        st.critical = False
        if st.interrupted:
            st.interrupted = False
            raise KeyboardInterrupt


def _read(chan, rid, n, main, pieces):
    """Reads the session socket once: the answer to upcall (rid, n) if it came, and the pieces
    of it that came appended to PIECES."""
    sock, buf, view = chan.sock, chan.rbuf, chan.rview
    try:
        k = sock.recv_into(buf)            # KeyboardInterrupt (SIGINT) leaves the decoder whole
    except OSError:
        k = 0
    if not k:
        os._exit(0)                        # the server closed the session
    if main:
        return _critical(_take, chan, view[:k], rid, n, pieces)
    return _take(chan, view[:k], rid, n, pieces)


def _take(chan, data, rid, n, pieces):
    """Feeds DATA to the channel's decoder; returns the answer to (rid, n) if it came, and
    appends its pieces to PIECES."""
    answer = None
    for event in chan.decoder.feed(data):
        if event[0] == "frame":
            try:
                f = parse_request(event[1])
            except BadRequest:
                f = None
            if f is not None and f["op"] in ("upcall_result", "upcall_progress"):
                ours = answer is None and f.get("id") == rid and f.get("upcall") == n \
                    and not isinstance(f.get("upcall"), bool)
                if ours and f["op"] == "upcall_result":
                    answer = f
                elif ours and isinstance(f.get("data"), str):
                    pieces.append(f["data"])
                continue                   # stale (an upcall interrupted or dropped): dropped
        chan.pending.append(event)         # for the executor's loop, after this request
    return answer


def _answer(f):
    has_value, has_error = "value" in f, "error" in f
    if has_value == has_error:
        raise ToolgateError("bad_answer", 'an answer holds exactly one of "value" and "error"')
    if has_error:
        e = f["error"]
        if not (isinstance(e, dict) and isinstance(e.get("code"), str)
                and isinstance(e.get("message"), str)):
            raise ToolgateError("bad_answer", 'an "error" is {"code": str, "message": str}')
        raise ToolgateError(e["code"], e["message"])
    if not isinstance(f["value"], dict):
        raise ToolgateError("bad_answer", 'a "value" is an object')
    return f["value"]
