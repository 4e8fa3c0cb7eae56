"""Framing, request parsing and the limits of toolgate's runtime protocol (see runtime/PROTOCOL.md).

Both channels (the control socket to the zygote and each session socket) carry frames: a 4-byte
big-endian unsigned length, then that many bytes of UTF-8 JSON, an object with a string "op".
"""

import json
import signal

MAX_FRAME = 64 << 20          # 64 MiB, both directions
OUTPUT_LIMIT = 1 << 20        # per stream per request
SPILL_TAIL = 256 << 10        # the last bytes of a stream kept whole in a file, sent with its path
SPILL_DIR = ".toolgate/output"  # where such files go, relative to the workspace
TEXT_LIMIT = 1 << 20          # a result's text/plain or text/html
IMAGES_LIMIT = 24 << 20       # raw PNG bytes per reply (base64 keeps the frame under 64 MiB)
IMAGES_COUNT = 64             # figures per reply (the server refuses more)
ERROR_TYPE_LIMIT = 256        # characters of an exception's type name (the server refuses more)
DF_ROWS, DF_COLS = 60, 30
READ_CHUNK = 64 << 10         # below malloc's mmap threshold: reads reuse heap memory


class FrameDecoder:
    """Splits a byte stream into frames. feed() returns events: ("frame", bytes) or ("too_large", n)."""

    def __init__(self):
        self.buf = bytearray()
        self.body_len = None      # None: reading the 4-byte header
        self.discard = 0          # bytes of a too-long frame still to drop

    def want(self):
        """How many bytes finish the current header, body or discarded frame (never past it)."""
        if self.discard:
            return min(self.discard, READ_CHUNK)
        if self.body_len is None:
            return 4 - len(self.buf)
        return max(1, min(self.body_len - len(self.buf), READ_CHUNK))

    def feed(self, data):
        events = []
        mv = memoryview(data)
        i, n = 0, len(mv)
        while i < n:
            if self.discard:
                k = min(self.discard, n - i)
                self.discard -= k
                i += k
            elif self.body_len is None:
                k = min(4 - len(self.buf), n - i)
                self.buf += mv[i:i + k]
                i += k
                if len(self.buf) == 4:
                    length = int.from_bytes(self.buf, "big")
                    self.buf.clear()
                    if length > MAX_FRAME:
                        self.discard = length
                        events.append(("too_large", length))
                    elif length == 0:
                        events.append(("frame", b""))
                    else:
                        self.body_len = length
            else:
                need = self.body_len - len(self.buf)
                if not self.buf and n - i >= need:       # whole body in hand: no copy through buf
                    events.append(("frame", bytes(mv[i:i + need])))
                    i += need
                    self.body_len = None
                    continue
                k = min(need, n - i)
                self.buf += mv[i:i + k]
                i += k
                if len(self.buf) == self.body_len:
                    events.append(("frame", bytes(self.buf)))
                    self.buf.clear()
                    self.body_len = None
        return events


# one encoder for every frame: json.dumps with these arguments builds a new one per call
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def encode_frame(obj):
    # 'replace' turns lone surrogates (from a user's repr or _repr_html_) into '?': always valid UTF-8
    body = _ENCODE(obj).encode("utf-8", "replace")
    return len(body).to_bytes(4, "big") + body


class BadRequest(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def parse_request(payload):
    """The request object of a frame, or BadRequest."""
    try:
        req = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise BadRequest("bad_json", f"frame is not UTF-8 JSON: {e}") from None
    if not isinstance(req, dict):
        raise BadRequest("bad_frame", "frame is not a JSON object")
    if not isinstance(req.get("op"), str):
        raise BadRequest("bad_frame", 'frame has no string "op"')
    return req


def request_id(req):
    rid = req.get("id") if isinstance(req, dict) else None
    return rid if isinstance(rid, (int, str)) and not isinstance(rid, bool) else None


def error_frame(code, message, rid=None, **extra):
    frame = {"op": "error", "id": rid, "code": code, "message": message}
    frame.update(extra)
    return frame


def too_large_frame(n):
    return error_frame("too_large", f"frame of {n} bytes exceeds the limit of {MAX_FRAME} bytes; "
                       "its bytes are dropped")


def check_env(env):
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise BadRequest("bad_request", '"env" must be an object of strings')
    for k, v in env.items():
        if not (isinstance(v, str) and k and "=" not in k and "\0" not in k and "\0" not in v):
            raise BadRequest("bad_request", f'"env" entry {k!r} is not a valid variable')
    return env


def _abs_path(p):
    return isinstance(p, str) and p.startswith("/") and "\0" not in p


def check_fork(req):
    """Checks the fields of a "fork" request (not its descriptor, nor "harden", which only a
    zygote with the confinement library reads); returns the session name, or raises BadRequest."""
    session = req.get("session")
    if not isinstance(session, str) or not session or len(session) > 1024:
        raise BadRequest("bad_request", '"session" must be a non-empty string')
    if not _abs_path(req.get("cwd")):
        raise BadRequest("bad_request", '"cwd" must be an absolute path')
    tmpdir = req.get("tmpdir")
    if tmpdir is not None and not _abs_path(tmpdir):
        raise BadRequest("bad_request", '"tmpdir" must be an absolute path')
    check_env(req.get("env"))
    if "fd" in req and (not isinstance(req["fd"], int) or isinstance(req["fd"], bool)):
        raise BadRequest("bad_request", '"fd" must be an integer')
    return session


def signal_name(n):
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"SIG{n}"
