"""The session socket (Channel) and the descriptor-level capture of a session's output.

Output frames and what they carry are described in runtime/PROTOCOL.md.
"""

import codecs
import mmap
import os
import select
import sys
import threading

from toolgate._protocol import OUTPUT_LIMIT, READ_CHUNK, SPILL_TAIL, FrameDecoder, encode_frame


class Channel:
    """The session socket: frames out (from the main and the reader thread, and upcalls), frames
    in. Whoever reads the socket (the executor's loop between requests, an upcall while one runs;
    never both) feeds the one decoder, so a frame read in part is never lost; frames an upcall read
    that are not its answer wait in `pending` for the executor's loop, in order."""

    def __init__(self, sock):
        self.sock = sock
        self.lock = threading.Lock()
        self.decoder = FrameDecoder()
        self.pending = []          # decoder events read by an upcall, for the executor's loop
        # an anonymous map, not a bytearray (zero-filled, so all 16 pages written at once): only
        # the pages a read reaches are ever backed, one or two for most sessions' requests
        self.rbuf = mmap.mmap(-1, READ_CHUNK)
        self.rview = memoryview(self.rbuf)

    def send(self, obj):
        data = encode_frame(obj)
        with self.lock:
            try:
                self.sock.sendall(data)
            except OSError:
                os._exit(0)      # the supervisor closed the session


class _Stream:
    __slots__ = ("name", "buf", "total", "truncated", "decoder", "namer", "spill", "spill_file",
                 "tail")

    def __init__(self, name):
        self.name = name
        self.buf, self.total, self.truncated = bytearray(), 0, False
        self.decoder = self.namer = self.spill = self.spill_file = None
        self.tail = bytearray()

    def reset(self, streaming=False, spill=None):
        if (not streaming and spill is None and not self.total and self.decoder is None
                and self.namer is None and not self.tail):
            return                     # as a reset leaves it: nothing written since
        self.buf = bytearray()
        self.total = 0
        self.truncated = False
        # only streamed output is decoded as it comes
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace") if streaming else None
        self.namer = spill             # names the file (asked at its first byte); None: no file
        self.spill = None              # (absolute path, path relative to the workspace)
        self.spill_file = None
        self.tail = bytearray()

    def keep_whole(self, data):
        """Past the inline limit of a run that asked to spill: the whole stream goes to a file of
        the workspace, its last bytes kept for the result. A file that cannot be written (the
        workspace's quota, the file-size limit) is removed: no file rather than part of one."""
        if self.namer is None:
            return
        try:
            if self.spill_file is None:
                self.spill = self.namer(self.name)
                os.makedirs(os.path.dirname(self.spill[0]), exist_ok=True)
                self.spill_file = open(self.spill[0], "wb")
                self.spill_file.write(self.buf)
                self.tail = bytearray(self.buf[-SPILL_TAIL:])
            self.spill_file.write(data)
        except OSError:
            self.drop_spill()
            return
        self.tail += data
        if len(self.tail) > 2 * SPILL_TAIL:
            del self.tail[:-SPILL_TAIL]

    def drop_spill(self):
        if self.namer is None:
            return
        if self.spill_file is not None:
            try:
                self.spill_file.close()
            except OSError:
                pass
            try:
                os.unlink(self.spill[0])
            except OSError:
                pass
        self.namer = self.spill = self.spill_file = None

    def spilled(self):
        """{"path", "tail"} of the file holding the whole stream, or None."""
        if self.spill_file is None:
            return None
        try:
            self.spill_file.close()
        except OSError:
            self.drop_spill()
            return None
        path = self.spill[1]
        self.namer = self.spill = self.spill_file = None
        tail = bytes(self.tail[-SPILL_TAIL:])
        while tail and tail[0] & 0xC0 == 0x80:   # do not start on half a character
            tail = tail[1:]
        return {"path": path, "tail": tail.decode("utf-8", "replace")}


class Capture:
    """fds 1 and 2 are the write ends of two pipes for the life of the session; a reader thread
    drains them, keeping what a request writes (up to OUTPUT_LIMIT) and dropping the rest."""

    def __init__(self, chan):
        self.chan = chan
        self.lock = threading.Lock()
        self.active = False
        self.stream_id = None      # request id when streaming output frames
        self.read_fds = {}
        self.keep_w = {}           # a spare write end per pipe: fd 1/2 can be restored from it
        self.idents = {}
        self.streams = {1: _Stream("stdout"), 2: _Stream("stderr")}
        for target in (1, 2):
            r, w = os.pipe()                       # both ends close-on-exec
            os.set_blocking(r, False)
            os.dup2(w, target)                     # fd 1/2: inheritable, so subprocesses write here
            self.read_fds[r] = target
            self.keep_w[target] = w
            st = os.fstat(target)
            self.idents[target] = (st.st_dev, st.st_ino)
        for name, fd in (("stdout", 1), ("stderr", 2)):
            f = getattr(sys, name)
            if f is None:                  # the zygote was started with fd 1 or 2 closed
                f = open(fd, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
                setattr(sys, name, f)
                setattr(sys, "__" + name + "__", f)
            try:
                f.reconfigure(line_buffering=True)
            except Exception:
                pass
        self.ready = select.poll()
        for r in self.read_fds:
            self.ready.register(r, select.POLLIN)
        self.thread = None

    def start(self):
        self.thread = threading.Thread(target=self._loop, name="toolgate-output", daemon=True)
        self.thread.start()

    def _loop(self):
        poller = select.poll()
        for r in self.read_fds:
            poller.register(r, select.POLLIN)
        while True:
            try:
                events = poller.poll()
            except InterruptedError:
                continue
            with self.lock:
                for fd, ev in events:
                    if ev & select.POLLNVAL:        # someone closed our pipe: stop reading it
                        poller.unregister(fd)
                        continue
                    self._drain(fd, 256 << 10)

    def _drain_ready(self):
        """Drains the pipes that have data (one poll, rather than a failing read per pipe)."""
        for fd, _ in self.ready.poll(0):
            self._drain(fd, 4 << 20)

    def _drain(self, fd, budget):
        """Reads fd until it is empty or budget bytes were read. Caller holds self.lock."""
        target = self.read_fds.get(fd)
        while budget > 0:
            try:
                data = os.read(fd, 65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if not data:
                return
            budget -= len(data)
            if self.active and target is not None:
                self._take(self.streams[target], data)

    def _take(self, st, data):
        st.total += len(data)
        room = OUTPUT_LIMIT - len(st.buf)
        if room <= 0:
            st.truncated = True
            st.keep_whole(data)
            return
        part = data[:room] if len(data) > room else data
        st.buf += part
        if len(data) > room:
            st.truncated = True
            st.keep_whole(data[room:])
        if self.stream_id is not None:
            text = st.decoder.decode(part)
            if text:
                self.chan.send({"op": "output", "id": self.stream_id, "stream": st.name,
                                "data": text})

    def begin(self, rid, stream, spill=None):
        """Starts keeping a request's output; `spill(name)` names the file (absolute, relative to
        the workspace) a stream's whole goes to once it passes OUTPUT_LIMIT, if given (asked only
        then)."""
        flush_std()
        # a cell may have closed or replaced fd 1/2: put our pipes back
        for target, ident in self.idents.items():
            try:
                st = os.fstat(target)
                ok = (st.st_dev, st.st_ino) == ident
            except OSError:
                ok = False
            if not ok:
                os.dup2(self.keep_w[target], target)
        with self.lock:
            self._drain_ready()                    # what was written between requests: dropped
            for st in self.streams.values():
                st.reset(stream, spill)
            self.stream_id = rid if stream else None
            self.active = True

    def end(self):
        flush_std()
        with self.lock:
            self._drain_ready()
            self.active = False
            self.stream_id = None
            out = {}
            for st in self.streams.values():
                out[st.name] = _decode(st.buf, st.truncated)
                out[st.name + "_truncated"] = st.truncated
                out[st.name + "_bytes"] = st.total
                spilled = st.spilled()
                if spilled is not None:
                    out[st.name + "_file"] = spilled
                st.buf = bytearray()
            return out


def flush_std():
    out, err = sys.stdout, sys.stderr
    if sys.__stdout__ is out and sys.__stderr__ is err:     # unless a cell replaced them
        streams = (out, err)
    else:
        streams = (out, err, sys.__stdout__, sys.__stderr__)
    for f in streams:
        try:
            if f is not None:
                f.flush()
        except Exception:
            pass


def _decode(buf, truncated):
    b = bytes(buf)
    if truncated:                 # do not end on half a character
        n = len(b)
        for k in range(1, min(4, n) + 1):
            c = b[n - k]
            if c & 0xC0 != 0x80:
                need = 1 if c < 0x80 else 2 if c >> 5 == 6 else 3 if c >> 4 == 14 else 4 if c >> 3 == 30 else 1
                if need > k:
                    b = b[:n - k]
                break
    return b.decode("utf-8", "replace")
