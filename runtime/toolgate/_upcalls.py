"""Upcalls: code in a session asks the service for something and waits for its typed answer.

The frames ("upcall" from the session, "upcall_result" from the server) and their rules are in
runtime/PROTOCOL.md. Only while an exec request runs (UPCALLS.rid is its id), one at a time per
session (UPCALLS.lock), from the session's own process. The caller writes its frame through the
channel's locked send, then reads the session socket itself, with the channel's decoder, until its
answer comes: a stale answer (of an upcall interrupted earlier) is dropped, any other frame is left
in the channel's pending list for the executor's loop, which reads the socket only between
requests.
"""

import os
import threading

from toolgate import ToolgateError
from toolgate._protocol import BadRequest, MAX_FRAME, encode_frame, parse_request

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
        if len(encode_frame(frame)) - 4 > MAX_FRAME:
            raise ToolgateError("bad_request", f"the request exceeds {MAX_FRAME} bytes")
        if main:
            _critical(st.chan.send, frame)
        else:
            st.chan.send(frame)
        return _answer(_wait(st.chan, rid, n, main))


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


def _wait(chan, rid, n, main):
    """Reads the session socket until the answer to upcall (rid, n) comes; returns it."""
    sock, buf, view = chan.sock, chan.rbuf, chan.rview
    while True:
        try:
            k = sock.recv_into(buf)        # KeyboardInterrupt (SIGINT) leaves the decoder whole
        except OSError:
            k = 0
        if not k:
            os._exit(0)                    # the server closed the session
        answer = _critical(_take, chan, view[:k], rid, n) if main else _take(chan, view[:k], rid, n)
        if answer is not None:
            return answer


def _take(chan, data, rid, n):
    """Feeds DATA to the channel's decoder; returns the answer to (rid, n) if it came."""
    answer = None
    for event in chan.decoder.feed(data):
        if event[0] == "frame":
            try:
                f = parse_request(event[1])
            except BadRequest:
                f = None
            if f is not None and f["op"] == "upcall_result":
                if answer is None and f.get("id") == rid and f.get("upcall") == n \
                        and not isinstance(f.get("upcall"), bool):
                    answer = f
                continue                   # a stale answer: dropped
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
