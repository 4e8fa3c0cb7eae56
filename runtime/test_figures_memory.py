"""The figure's fast path (drawn once and cropped, unfiltered PNG rows, cached font heights)
against savefig, and the zygote's preparations for sharing memory with its children
(toolgate/_sharing.py). Each check runs inside a session, where the runtime's modules are."""

import base64

from harness import PNG_SIGNATURE


def _value(s, code):
    r = s.run(code)
    assert r["error"] is None, r["error"]
    return r["result"]["text/plain"]


def test_a_figure_is_the_picture_savefig_makes(zygote):
    s = zygote.fork("figures")
    try:
        r = s.run("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nNone")
        png = base64.b64decode(r["images"][0])
        assert png.startswith(PNG_SIGNATURE)
        # the same size, mode and metadata as savefig's, nearly the same pixels
        code = """
import io
import numpy as np
import matplotlib.pyplot as plt
from PIL import Image
from toolgate._display import render_png, _render_cropped
plt.plot([1, 2, 3])
fig = plt.gcf()
fast = _render_cropped(fig)
buf = io.BytesIO()
fig.savefig(buf, format="png", bbox_inches="tight")
a, b = Image.open(buf), Image.open(io.BytesIO(fast))
diff = np.abs(np.asarray(a).astype(int) - np.asarray(b).astype(int))
plt.close("all")
(a.size == b.size, a.mode == b.mode, a.info == b.info, float(diff.mean()) < 3, len(fast) < len(buf.getvalue()))
"""
        assert _value(s, code) == "(True, True, True, True, True)"
        # what only savefig does is left to it: a legend outside the canvas, a layout engine
        code = """
out = []
for make in (lambda: (plt.plot([1, 2], label="a line"),
                      plt.legend(bbox_to_anchor=(1.05, 1), loc="upper left")),
             lambda: plt.subplots(layout="constrained")):
    make()
    out.append(_render_cropped(plt.gcf()) is None)
    buf = io.BytesIO()
    plt.gcf().savefig(buf, format="png", bbox_inches="tight")
    out.append(render_png(plt.gcf()) == buf.getvalue())
    plt.close("all")
tuple(out)
"""
        assert _value(s, code) == "(True, True, True, True)"
        # smooth shading goes through Pillow's filters (far smaller there), still a valid PNG
        code = """
plt.imshow(np.outer(np.linspace(0, 1, 400), np.linspace(0, 1, 400)), interpolation="bilinear")
fig = plt.gcf()
png, cropped = render_png(fig), _render_cropped(fig)
plt.close("all")
image = Image.open(io.BytesIO(png))
image.load()
(image.mode, png == cropped, len(png) < 150_000)
"""
        assert _value(s, code) == "('RGBA', True, True)"
    finally:
        s.close()


def test_cached_font_heights_change_no_byte(zygote):
    s = zygote.fork("font-heights")
    try:
        code = """
import io
import matplotlib.pyplot as plt
from matplotlib.backends.backend_agg import RendererAgg
from toolgate._display import _font_height_metrics
def render():
    plt.title("Title\\non two lines", fontsize=17)
    plt.xlabel("serif ÄÖ", family="serif")
    plt.ylabel("$\\\\alpha$")
    plt.plot([2, 1])
    buf = io.BytesIO()
    plt.gcf().savefig(buf, format="png", bbox_inches="tight")
    plt.close("all")
    return buf.getvalue()
installed = RendererAgg.__dict__.get("_get_font_height_metrics") is _font_height_metrics
cached = render()
del RendererAgg._get_font_height_metrics
try:
    plain = render()
finally:
    RendererAgg._get_font_height_metrics = _font_height_metrics
(installed, cached == plain)
"""
        assert _value(s, code) == "(True, True)"
    finally:
        s.close()


def test_the_zygote_fills_its_allocators_holes(zygote):
    s = zygote.fork("holes")
    try:
        code = """
import ctypes
from toolgate._sharing import _Mallinfo2, _pool_holes, fill_heap, fill_pools
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = _Mallinfo2
def heap_holes():
    m = libc.mallinfo2()
    return m.fordblks - m.keepcost
garbage = [bytes(i % 500) for i in range(20_000)]
del garbage[::2]                       # holes in the pools and in the heap
before = sum(size * free for size, free in _pool_holes().items())
pools = fill_pools()
after = sum(size * free for size, free in _pool_holes().items())
heap_before = heap_holes()
blocks = fill_heap()
(before > 100_000, after < before / 4, len(blocks) > 0, heap_holes() < heap_before)
"""
        assert _value(s, code) == "(True, True, True, True)"
    finally:
        s.close()


def test_the_rehearsals_leave_the_process_as_it_was(zygote):
    s = zygote.fork("rehearsal")
    try:
        code = """
import os, signal, threading, linecache
from toolgate._sharing import rehearse_session, rehearse_setup
env, threads = dict(os.environ), threading.active_count()
handler = signal.getsignal(signal.SIGINT)
rehearse_setup()
rehearse_session()
(dict(os.environ) == env, threading.active_count() == threads,
 signal.getsignal(signal.SIGINT) is handler,
 [k for k in linecache.cache if k.startswith("<cell") and k != "<cell 2>"])
"""
        assert _value(s, code) == "(True, True, True, [])"
        assert s.value("1 + 1") == "2"        # the session itself serves on
    finally:
        s.close()
