"""What a cell shows: its value as a MIME bundle (DataFrames, figures, _repr_html_/_repr_png_), the
figures it leaves open as PNGs, and its exception as type, message and traceback (the "result",
"images" and "error" fields of a result frame; see runtime/PROTOCOL.md)."""

import base64
import io
import os
import sys
import traceback
import zlib

from toolgate._protocol import (DF_COLS, DF_ROWS, ERROR_TYPE_LIMIT, IMAGES_COUNT, IMAGES_LIMIT,
                                TEXT_LIMIT)

# frames of the executor's own files (this package) are not the user's business
_OWN_FILES = os.path.dirname(os.path.abspath(__file__)) + os.sep


def bounded_text(s, limit=TEXT_LIMIT):
    if len(s) <= limit:
        return s
    return s[:limit] + f"\n…[truncated: {len(s) - limit} more characters]"


def _bounded_tb(s, limit=64 << 10):
    if len(s) <= limit:
        return s
    half = limit // 2
    return s[:half] + f"\n…[{len(s) - limit} characters cut]…\n" + s[-half:]


def _drop_own_frames(te, seen):
    """Removes the executor's frames from a TracebackException and the exceptions chained to it
    (an upcall's ToolgateError ends at the user's call, not inside toolgate/)."""
    while te is not None and id(te) not in seen:
        seen.add(id(te))
        if any(f.filename.startswith(_OWN_FILES) for f in te.stack):
            te.stack[:] = [f for f in te.stack if not f.filename.startswith(_OWN_FILES)]
        _drop_own_frames(te.__cause__, seen)
        te = te.__context__


def format_error(e):
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_OWN_FILES):
        tb = tb.tb_next           # our own frames are not the user's business
    try:
        te = traceback.TracebackException(type(e), e, tb, compact=True)
        _drop_own_frames(te, set())
        text = "".join(te.format())
    except Exception:
        text = f"{type(e).__name__}: (traceback could not be formatted)\n"
    try:
        message = str(e)
    except Exception:
        message = "(message could not be formatted)"
    return {"type": type(e).__name__[:ERROR_TYPE_LIMIT], "message": _bounded_tb(message),
            "traceback": _bounded_tb(text)}


def render_png(fig):
    """The figure as savefig(format="png", bbox_inches="tight") shows it."""
    try:
        png = _render_cropped(fig)
    except Exception:
        png = None                      # whatever went wrong, savefig is the reference
    if png is not None:
        return png
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def _render_cropped(fig):
    """The tight PNG drawn once: the whole canvas is drawn, the tight box (padded as savefig pads
    it) is found with the same renderer, and those pixels are encoded as savefig encodes them.
    savefig's "tight" draws the figure twice (a layout pass to find the box, then the picture at
    the box's size, with a new renderer whose text metrics start cold): this is 25-30 % of a
    small figure's time. The picture is the same but for a shift under half a pixel (savefig
    draws at the box's fractional offset, this crop starts at a whole pixel). None when this
    figure or the rc settings ask for what only savefig does (another canvas or dpi, a layout
    engine, colours or transparency for saving, a frame on the figure, content outside the
    canvas): the caller then uses savefig."""
    mpl = sys.modules.get("matplotlib")
    agg = sys.modules.get("matplotlib.backends.backend_agg")
    np = sys.modules.get("numpy")
    canvas = fig.canvas
    if mpl is None or agg is None or np is None or type(canvas) is not agg.FigureCanvasAgg:
        return None
    rc = mpl.rcParams
    pad = rc["savefig.pad_inches"]
    if (rc["savefig.dpi"] != "figure" or rc["savefig.facecolor"] != "auto"
            or rc["savefig.edgecolor"] != "auto" or rc["savefig.transparent"]
            or not isinstance(pad, (int, float)) or fig.get_layout_engine() is not None
            or getattr(canvas, "_device_pixel_ratio", 1) != 1
            or getattr(fig, "_original_dpi", fig.dpi) != fig.dpi
            or fig.patch.get_linewidth() != 0):
        return None
    saving = canvas._is_saving
    canvas._is_saving = True            # as in savefig: animated artists are drawn too
    try:
        canvas.draw()
        renderer = canvas.get_renderer()
        box = fig.get_tightbbox(renderer).padded(pad)
    finally:
        canvas._is_saving = saving
    pixels = np.asarray(canvas.buffer_rgba())
    dpi = fig.dpi
    # savefig's canvas is the box's size, truncated; rows count from the top
    width, height = int(box.width * dpi), int(box.height * dpi)
    left, top = round(box.x0 * dpi), round(fig.bbox.height - box.y1 * dpi)
    if left < 0 or top < 0 or left + width > pixels.shape[1] or top + height > pixels.shape[0]:
        return None
    crop = pixels[top:top + height, left:left + width]
    png = _png_unfiltered(np, crop, dpi, f"Matplotlib version{mpl.__version__}, https://matplotlib.org/")
    if png is None:                     # smooth shading: Pillow's filters compress it far better
        buf = io.BytesIO()
        mpl.image.imsave(buf, np.ascontiguousarray(crop), format="png", origin="upper", dpi=dpi)
        png = buf.getvalue()
    return png


def _png_chunk(kind, data):
    return (len(data).to_bytes(4, "big") + kind + data
            + zlib.crc32(data, zlib.crc32(kind)).to_bytes(4, "big"))


def _png_unfiltered(np, rgba, dpi, software):
    """An RGBA PNG with the chunks savefig writes (its Software text, the dpi), its rows
    unfiltered: a chart's flat colours deflate 10-25 % smaller that way, and in 60 % of the
    time Pillow takes to try every filter on every row. None when the pixels deflate to more
    than 1/25 of their size (gradients, images), where the filters pay."""
    height, width, _ = rgba.shape
    rows = np.empty((height, width * 4 + 1), np.uint8)
    rows[:, 0] = 0                          # filter type None
    rows[:, 1:] = rgba.reshape(height, width * 4)
    raw = rows.tobytes()
    idat = zlib.compress(raw, 6)
    if len(idat) * 25 > len(raw):
        return None
    ppm = int(dpi / 0.0254 + 0.5)           # as Pillow writes pHYs
    return b"".join((
        b"\x89PNG\r\n\x1a\n",
        _png_chunk(b"IHDR", width.to_bytes(4, "big") + height.to_bytes(4, "big") + b"\x08\x06\0\0\0"),
        _png_chunk(b"tEXt", b"Software\0" + software.encode("latin-1", "replace")),
        _png_chunk(b"pHYs", ppm.to_bytes(4, "big") * 2 + b"\x01"),
        _png_chunk(b"IDAT", idat),
        _png_chunk(b"IEND", b""),
    ))


class ImageSink:
    def __init__(self):
        self.images = []          # base64 strings
        self.bytes = 0
        self.truncated = False
        self.errors = []

    def add_png(self, png):
        if self.bytes + len(png) > IMAGES_LIMIT or len(self.images) >= IMAGES_COUNT:
            self.truncated = True
            return
        self.bytes += len(png)
        self.images.append(base64.b64encode(png).decode("ascii"))


def collect_figures(sink):
    """Every open pyplot figure as a PNG into sink, then closes them all."""
    plt = sys.modules.get("matplotlib.pyplot")
    helpers = sys.modules.get("matplotlib._pylab_helpers")
    if plt is None or helpers is None or not getattr(helpers.Gcf, "figs", True):
        return                          # no figure open: nothing to render or close
    try:
        from matplotlib._pylab_helpers import Gcf
        managers = sorted(Gcf.get_all_fig_managers(), key=lambda m: m.num)
    except Exception:
        return
    for m in managers:
        try:
            sink.add_png(render_png(m.canvas.figure))
        except Exception as e:
            sink.errors.append(f"figure {m.num} could not be rendered: {type(e).__name__}: {e}")
    try:
        plt.close("all")
    except Exception:
        pass


_PLAIN_TYPES = (int, float, complex, bool, str, bytes)


def display_data(value):
    """The MIME bundle of a cell's value."""
    if type(value) in _PLAIN_TYPES:      # nothing richer to show than its repr
        return {"text/plain": bounded_text(repr(value))}
    data = {}
    pd = sys.modules.get("pandas")
    mfig = sys.modules.get("matplotlib.figure")
    if pd is not None and isinstance(value, pd.DataFrame):
        rows, cols = value.shape
        dims = rows > DF_ROWS or cols > DF_COLS
        data["text/plain"] = value.to_string(max_rows=DF_ROWS, max_cols=DF_COLS, show_dimensions=dims)
        data["text/html"] = value.to_html(max_rows=DF_ROWS, max_cols=DF_COLS, show_dimensions=dims)
    else:
        data["text/plain"] = repr(value)
        if mfig is not None and isinstance(value, mfig.Figure):
            helpers = sys.modules.get("matplotlib._pylab_helpers")
            managed = helpers is not None and any(
                m.canvas.figure is value for m in helpers.Gcf.get_all_fig_managers())
            if not managed:                   # pyplot's own figures come back in "images"
                data["image/png"] = base64.b64encode(render_png(value)).decode("ascii")
        else:
            html = _call_repr(value, "_repr_html_")
            if isinstance(html, str) and len(html) <= TEXT_LIMIT:
                data["text/html"] = html
            png = _call_repr(value, "_repr_png_")
            if isinstance(png, (bytes, bytearray)) and len(png) <= IMAGES_LIMIT:
                data["image/png"] = base64.b64encode(bytes(png)).decode("ascii")
    data["text/plain"] = bounded_text(data["text/plain"])
    if "text/html" in data and len(data["text/html"]) > TEXT_LIMIT:
        del data["text/html"]
    return data


def _call_repr(value, name):
    if isinstance(value, type):
        return None
    try:
        fn = getattr(value, name, None)
    except Exception:
        return None
    if not callable(fn):
        return None
    try:
        return fn()
    except Exception:
        return None


def show_value(src, lines, node):
    """False when the last expression is followed by ';' (the notebook way to hide a value)."""
    try:
        line = lines[node.end_lineno - 1].encode("utf-8")[node.end_col_offset:].decode("utf-8", "replace")
        rest = line + "".join(lines[node.end_lineno:])
        return not rest.lstrip(" \t)").startswith(";")
    except Exception:
        return True


_HEIGHT_METRICS = {}      # (font file, size in points, dpi) -> (ascent, descent, line gap)


def _font_height_metrics(renderer, prop):
    """Text._get_layout's font heights, as it computes them (the font's OS/2 table, else hhea,
    scaled to the size and dpi), kept per font file, size and dpi: matplotlib reads the tables
    afresh, as new dicts, for every text it lays out (hundreds per figure, 5 % of a small
    figure's time). The font is still looked up each time, so rc changes are seen."""
    from matplotlib.font_manager import fontManager, get_font
    font = get_font(fontManager._find_fonts_by_props(prop))
    key = (font.fname, prop.get_size_in_points(), renderer.dpi)
    metrics = _HEIGHT_METRICS.get(key)
    if metrics is None:
        metrics = (None, None, None)            # Text._get_layout then measures "lp" itself
        for table_name, gap, ascent, descent in (
                ("OS/2", "sTypoLineGap", "sTypoAscender", "sTypoDescender"),
                ("hhea", "lineGap", "ascent", "descent")):
            table = font.get_sfnt_table(table_name)
            if table is None:
                continue
            scale = 1 / font.get_sfnt_table("head")["unitsPerEm"] * key[1] * key[2] / 72
            metrics = (table[ascent] * scale, -table[descent] * scale, table[gap] * scale)
            break
        if len(_HEIGHT_METRICS) >= 1024:
            _HEIGHT_METRICS.clear()
        _HEIGHT_METRICS[key] = metrics
    return metrics


def cache_font_heights():
    """Gives the Agg renderer the hook Text._get_layout asks a renderer for its font heights
    (matplotlib's PDF and PS renderers have one), answered from _font_height_metrics. Not where
    the renderer has one of its own already, or when Agg is not loaded."""
    agg = sys.modules.get("matplotlib.backends.backend_agg")
    if agg is not None and not hasattr(agg.RendererAgg, "_get_font_height_metrics"):
        agg.RendererAgg._get_font_height_metrics = _font_height_metrics
