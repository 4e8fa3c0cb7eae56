"""What the zygote does before its first fork so that a session child shares more of its memory
with it (copy-on-write): every page a child writes becomes the child's own, so the zygote runs
first the code every child would run for the first time, and fills the holes in its allocator's
pools, where a child's first objects would otherwise land, one page each."""

import builtins
import ctypes
import linecache
import os
import select
import signal
import socket
import sys
import tempfile
import threading

from toolgate._capture import Capture, Channel, _Stream
from toolgate._protocol import encode_frame
from toolgate._session import STATE, Session
from toolgate._upcalls import UPCALLS


def rehearse_session(times=20):
    """Serves `times` exec requests of `1 + 1` in the zygote, through a session built without its
    set-up (no pipes on fds 1 and 2, no thread, the zygote's environment untouched) on a socket
    pair. CPython 3.11 rewrites a function's bytecode in place during its first calls (a warm-up
    counter, then quickening and the specialising caches): code every child ran and the zygote
    never had was rewritten, so copied, in each child. Run here first, it stays shared."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    old_sigint = signal.getsignal(signal.SIGINT)
    try:
        capture = Capture.__new__(Capture)
        capture.lock, capture.active, capture.stream_id = threading.Lock(), False, None
        capture.read_fds, capture.keep_w, capture.ready = {}, {}, select.poll()
        capture.idents = {}
        for fd in (1, 2):
            try:
                st = os.fstat(fd)
            except OSError:
                continue          # closed: left out, so that begin() never dup2s onto it
            capture.idents[fd] = (st.st_dev, st.st_ino)
        capture.streams = {1: _Stream("stdout"), 2: _Stream("stderr")}
        chan = Channel(mine)
        capture.chan = chan
        session = Session.__new__(Session)
        session.chan, session.capture, session.count, session.loop = chan, capture, 0, None
        session.workspace, session.tmpdir, session.site_dirs = "/", None, []
        session.ns, session.pid = {"__builtins__": builtins}, os.getpid()
        session.spill_tag = ""
        for n in range(1, times + 1):
            # both ways a cell is compiled: one expression, and statements with a last value
            code = "1 + 1" if n % 2 else "x = 1 + 1\nx"
            for kind, payload in chan.decoder.feed(
                    encode_frame({"op": "exec", "id": n, "code": code})):
                if kind == "frame":
                    session.handle(payload)
            theirs.recv(1 << 16)          # the result, so that the pair's buffer never fills
    except Exception:
        pass                              # only a warm-up: the zygote serves without it
    finally:
        signal.signal(signal.SIGINT, old_sigint)
        STATE.images, STATE.running, UPCALLS.rid, UPCALLS.chan = None, False, None, None
        for n in range(times + 1):
            linecache.cache.pop(f"<cell {n}>", None)
        mine.close()
        theirs.close()


def rehearse_setup(times=10):
    """Runs in the zygote the library code a child's set-up runs (os.environ rebuilt, paths made
    absolute, the output thread started), for the reason rehearse_session gives. Leaves the
    zygote as it was: the same environment, no thread."""
    saved = dict(os.environ)
    try:
        for _ in range(times):
            os.environ.clear()
            os.environ.update(saved)
            for p in list(sys.path):
                os.path.abspath(p or ".")
            os.path.isdir(os.path.join(sys.prefix, "lib"))
            t = threading.Thread(target=select.poll, name="toolgate-rehearsal", daemon=True)
            t.start()
            t.join()
    except Exception:
        pass
    finally:
        if dict(os.environ) != saved:
            os.environ.clear()
            os.environ.update(saved)


def _pool_holes():
    """{block size: free blocks in the pools in use} of the small-object allocator, from
    sys._debugmallocstats() (which writes to fd 2); {} if that cannot be read."""
    try:
        with tempfile.TemporaryFile() as f:
            saved = os.dup(2)
            try:
                os.dup2(f.fileno(), 2)
                sys._debugmallocstats()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            f.seek(0)
            text = f.read().decode("ascii", "replace")
    except (OSError, AttributeError):
        return {}
    holes = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 5 and all(x.isdigit() for x in fields):
            holes[int(fields[1])] = int(fields[4])   # class, size, pools, in use, free
        elif holes:
            break
    return holes


def fill_pools():
    """Objects that take every free block of the pools in use, kept for the zygote's life (a few
    hundred KiB, shared). A child's new objects then go to pools of their own, side by side,
    instead of one into each page of the zygote's that had a hole (each such page copied)."""
    filler = []
    for size, free in _pool_holes().items():
        if size <= 16:
            filler.extend(object() for _ in range(free))            # 16 bytes
        elif size <= 32:
            filler.extend(float(i) + 0.5 for i in range(free + 100))  # 24; floats keep 100 spare
        elif size >= 48:
            filler.extend(bytes(size - 33) for _ in range(free))    # 33 + n bytes
    return filler


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def fill_heap():
    """The same for malloc's heap (objects over 512 bytes, C libraries, the hardening library):
    blocks that take glibc's cached and free chunks, kept for the zygote's life, so that a child's
    allocations come from the heap's untouched top instead of holes in the zygote's pages.
    Returns the blocks ([] where mallinfo2 is missing: not glibc 2.33 or later)."""
    try:
        libc = ctypes.CDLL(None)
        info, malloc, free = libc.mallinfo2, libc.malloc, libc.free
    except (OSError, AttributeError):
        return []
    info.restype, info.argtypes = _Mallinfo2, ()
    malloc.restype, malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
    free.restype, free.argtypes = None, (ctypes.c_void_p,)
    blocks = []
    # the per-thread cache first (up to 7 chunks of each size to 1032 bytes), which malloc
    # serves before any bin
    for size in range(8, 1033, 16):
        blocks.extend(malloc(size) for _ in range(7))
    # then the free chunks, largest blocks first; a block that came from the top (the top's
    # size went down) is given back and the next smaller size tried
    for size in (1 << 16, 1 << 14, 1 << 12, 1 << 10, 256, 64, 24):
        for _ in range(100_000):
            before = info()
            if before.fordblks - before.keepcost < size:
                break
            p = malloc(size)
            if not p:
                break
            if info().keepcost < before.keepcost:
                free(p)
                break
            blocks.append(p)
    return [p for p in blocks if p]
