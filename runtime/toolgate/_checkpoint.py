"""A session's Python state across a hibernation: `checkpoint` writes the globals of the session's
namespace to a file of its workspace, `restore` reads them back into a fresh session (the frames
are in runtime/PROTOCOL.md, "checkpoint" and "restore").

The file is the session's own: only a session unpickles it, the server archives it as bytes. Its
layout: MAGIC, then one pickle per kept global, all written by ONE pickler (its memo spans them,
so two globals that share an object share it again after restore, and a value that fails to load
costs only itself and what shares with it), then a JSON header (the names, where each pickle
starts, the modules, what was not kept, the execution count, the cells' sources), then the
header's offset and END. A file cut short fails the check of END or of the header.

Functions and classes defined in the session are pickled by value (cloudpickle) with the session
namespace itself as their globals: a function restored reads and writes the restored namespace,
not a copy of the globals it named. Modules bound to names are imported again by name.
"""

import builtins
import collections
import copyreg
import importlib
import io
import json
import linecache
import os
import pickle
import re
import struct
import sys
import types

import cloudpickle

MAGIC = b"toolgate-checkpoint\x00"
END = b"tgckpt01"
_TRAILER = struct.Struct(">Q8s")
FORMAT = 1
ENTRIES_LIMIT = 1000          # entries of `not_kept` / `not_restored`, then one "N more" entry
TEXT_LIMIT = 256              # characters of an entry's type name and reason
_PYTHON = "%d.%d" % sys.version_info[:2]     # pickled code objects hold to one minor version
_CELL = re.compile(r"<cell \d+>\Z")


class CheckpointFailed(Exception):
    """The state file could not be written (the OS error's message)."""


class RestoreFailed(Exception):
    """The state file is missing, unreadable, cut short or not of this format."""


class _Restoring:
    ns = None                 # the namespace functions are rebuilt into, while a restore runs


def _session_namespace():
    """Stands, in the pickle, for the namespace of the session that loads it."""
    if _Restoring.ns is None:
        raise pickle.UnpicklingError("a session function outside a restore")
    return _Restoring.ns


class _NamespaceToken:
    """The globals of the session's functions, pickled as a reference to the loading session's."""

    def __reduce__(self):
        return _session_namespace, ()


_TOKEN = _NamespaceToken()


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, but a function whose globals are the session's keeps the session's namespace
    as its globals, and carries none of their values (they are kept as globals of their own).
    An open file is not kept: cloudpickle would keep a copy of a read file's text instead."""

    dispatch_table = collections.ChainMap(
        {k: v for k, v in cloudpickle.Pickler._dispatch_table.items() if k is not io.TextIOWrapper},
        copyreg.dispatch_table)

    def __init__(self, file, ns):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.ns = ns
        self.globals_ref[id(ns)] = _TOKEN

    def _dynamic_function_reduce(self, func):
        reduced = super()._dynamic_function_reduce(func)
        if func.__globals__ is self.ns:
            reduced[2][1]["__globals__"] = {}
        return reduced


class _Sink:
    """The pickler's file: remembers a write that failed, so a full disk is told apart from a
    value that does not pickle."""

    __slots__ = ("file", "error")

    def __init__(self, file):
        self.file, self.error = file, None

    def write(self, data):
        try:
            return self.file.write(data)
        except OSError as e:
            self.error = e
            raise


class _Discard:
    __slots__ = ()

    def write(self, data):
        return len(data)


class _Reader:
    """The file as the unpickler reads it: without `peek`, so it never reads ahead of a pickle
    (a failed one is skipped by seeking to the next)."""

    __slots__ = ("read", "readinto", "readline")

    def __init__(self, f):
        self.read, self.readinto, self.readline = f.read, f.readinto, f.readline


def _is_dunder(name):
    return name.startswith("__") and name.endswith("__")


def _clip(text):
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT - 1] + "…"


def _text(error):
    try:
        return str(error)
    except Exception:             # an exception of the user's whose __str__ fails
        return ""


def _entry(name, type_name, error):
    text = _text(error)
    message = f"{type(error).__name__}: {text}" if text else type(error).__name__
    lines = message.splitlines()
    return {"name": _clip(name), "type": _clip(type_name), "reason": _clip(lines[0] if lines else "")}


def _capped(entries, more, what):
    """At most ENTRIES_LIMIT entries, sorted by name, then one that counts the rest."""
    entries = sorted(entries, key=lambda e: e["name"])
    more += max(0, len(entries) - ENTRIES_LIMIT)
    entries = entries[:ENTRIES_LIMIT]
    if more:
        entries.append({"name": "…", "type": "", "reason": f"{more} more {what}"})
    return entries


def _module_name(value):
    """The name a module bound to a global is imported by again; None for a module that is not
    importable by its name (made by the session): that one is pickled like any value."""
    if isinstance(value, types.ModuleType):
        name = getattr(value, "__name__", None)
        if isinstance(name, str) and sys.modules.get(name) is value:
            return name
    return None


# --- checkpoint

def checkpoint(ns, count, path):
    """Writes the state of namespace NS (and the execution count) to PATH; returns the file's
    size, the names kept and the entries of those not kept. CheckpointFailed when the file
    cannot be written (nothing is left of it then)."""
    # a snapshot: a thread a cell left running may still change the namespace
    values = {k: v for k, v in dict(ns).items() if isinstance(k, str) and not _is_dunder(k)}
    modules, names = {}, []
    for name in sorted(values):
        module = _module_name(values[name])
        if module is not None:
            modules[name] = module
        else:
            names.append(name)
    not_kept = []
    cells = {k: "".join(v[2]) for k, v in list(linecache.cache.items())
             if isinstance(k, str) and _CELL.match(k) and isinstance(v, tuple) and len(v) == 4}
    part = path + ".part"
    try:
        tested = False
        while True:
            header = {"format": FORMAT, "python": _PYTHON, "execution_count": count,
                      "modules": modules, "cells": cells,
                      "not_kept": sorted(not_kept, key=lambda e: e["name"])[:ENTRIES_LIMIT],
                      "not_kept_more": max(0, len(not_kept) - ENTRIES_LIMIT)}
            failure = _write(part, ns, values, names, header)
            if failure is None:
                break
            failed, error = failure
            if tested:            # pickles alone, not with the others: it alone goes
                bad = {failed: error}
            else:                 # find every culprit at once: each value on its own
                tested = True
                bad = {n: e for n in names if (e := _pickle_error(ns, values[n])) is not None}
                bad.setdefault(failed, error)
            not_kept += [_entry(n, type(values[n]).__name__, e) for n, e in bad.items()]
            names = [n for n in names if n not in bad]
        os.replace(part, path)
        size = os.path.getsize(path)
    except OSError as e:
        _remove(part)
        raise CheckpointFailed(f"cannot write the checkpoint: {e.strerror or e}") from None
    return size, sorted([*modules, *names]), _capped(not_kept, 0, "not kept")


def _write(part, ns, values, names, header):
    """Writes the file to PART: the VALUES of NAMES, pickled with the functions of namespace NS
    living in the loading session's; None, or (name, exception) of the first value that did not
    pickle. An OSError of the file itself is raised."""
    with open(part, "wb") as f:
        sink = _Sink(f)
        f.write(MAGIC)
        pickler = _Pickler(sink, ns)
        index = []
        for name in names:
            value = values[name]
            index.append({"name": name, "type": type(value).__name__, "offset": f.tell()})
            try:
                pickler.dump(value)
            except (Exception, SystemExit) as e:
                if sink.error is not None:
                    raise sink.error from None
                return name, e
        header_at = f.tell()
        # ASCII: a name or a cell holding a lone surrogate comes back as it was
        f.write(json.dumps(dict(header, values=index)).encode("ascii"))
        f.write(_TRAILER.pack(header_at, END))
    return None


def _pickle_error(ns, value):
    try:
        _Pickler(_Discard(), ns).dump(value)
    except (Exception, SystemExit) as e:
        return e
    return None


def _remove(path):
    try:
        os.unlink(path)
    except OSError:
        pass


# --- restore

def restore(ns, path):
    """Reads the state file PATH into namespace NS and deletes it; returns the names restored,
    the entries of those not restored (not kept at checkpoint, or failing now) and the execution
    count. RestoreFailed (NS untouched) when the file is missing or not a whole checkpoint."""
    try:
        f = open(path, "rb")
    except OSError as e:
        _remove(path)
        raise RestoreFailed(f"cannot read the checkpoint: {e.strerror or e}") from None
    with f:
        _remove(path)                     # whatever happens next: a checkpoint is read once
        header = _read_header(f)
        restored, failed = [], []
        for name, module in header["modules"].items():
            try:
                ns[name] = importlib.import_module(module)
                restored.append(name)
            except (Exception, SystemExit) as e:    # a module's own code may exit: not the session
                failed.append(_entry(name, "module", e))
        restored += _load_values(f, ns, header["values"], failed)
    ns["__builtins__"] = builtins          # cloudpickle's function set-up writes its own there
    for name, source in header["cells"].items():   # tracebacks and inspect see the cells' lines
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    not_restored = _capped(header["not_kept"] + failed, header["not_kept_more"], "not restored")
    return sorted(restored), not_restored, header["execution_count"]


def _load_values(f, ns, values, failed):
    """Loads each global of VALUES (the header's index) into NS, one pickle at a time; returns
    the names loaded and appends an entry to FAILED for each that did not load."""
    names = []
    reader = _Reader(f)
    unpickler = pickle.Unpickler(reader)
    shared_failure = False
    _Restoring.ns = ns
    try:
        for entry in values:
            f.seek(entry["offset"])
            try:
                ns[entry["name"]] = unpickler.load()
                names.append(entry["name"])
            except (Exception, SystemExit) as e:
                if shared_failure and "Memo value not found" in _text(e):
                    e = pickle.UnpicklingError("it shares an object with a value not restored")
                failed.append(_entry(entry["name"], entry["type"], e))
                shared_failure = True
                # a new unpickler (the old one may hold the rest of the failed pickle's frame),
                # with the objects loaded so far
                memo = unpickler.memo.copy()
                unpickler = pickle.Unpickler(reader)
                unpickler.memo = memo
    finally:
        _Restoring.ns = None
    return names


def _read_header(f):
    """The header of a whole checkpoint file of this format, or RestoreFailed."""
    try:
        size = os.fstat(f.fileno()).st_size
        if size < len(MAGIC) + _TRAILER.size or f.read(len(MAGIC)) != MAGIC:
            raise RestoreFailed("not a checkpoint of this format")
        f.seek(size - _TRAILER.size)
        header_at, end = _TRAILER.unpack(f.read(_TRAILER.size))
        if end != END or not len(MAGIC) <= header_at <= size - _TRAILER.size:
            raise RestoreFailed("the checkpoint is cut short or damaged")
        f.seek(header_at)
        header = json.loads(f.read(size - _TRAILER.size - header_at).decode("utf-8"))
        if header.get("format") != FORMAT:
            raise RestoreFailed("not a checkpoint of this format")
        if header.get("python") != _PYTHON:
            raise RestoreFailed(f"a checkpoint of Python {header.get('python')}, not {_PYTHON}")
        _check_header(header, header_at)
    except RestoreFailed:
        raise
    except OSError as e:
        raise RestoreFailed(f"cannot read the checkpoint: {e.strerror or e}") from None
    except (ValueError, TypeError, KeyError, AttributeError):
        raise RestoreFailed("the checkpoint's header is damaged") from None
    return header


def _check_header(header, header_at):
    def strings(d):
        return isinstance(d, dict) and all(isinstance(k, str) and isinstance(v, str)
                                           for k, v in d.items())
    count, values, more = header["execution_count"], header["values"], header["not_kept_more"]
    offsets = [v["offset"] for v in values]
    ok = (all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (count, more))
          and strings(header["modules"]) and strings(header["cells"])
          and all(_CELL.match(k) for k in header["cells"])
          and isinstance(values, list)
          and all(isinstance(v["name"], str) and isinstance(v["type"], str) for v in values)
          and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
          and offsets == sorted(offsets) and all(len(MAGIC) <= o < header_at for o in offsets)
          and isinstance(header["not_kept"], list)
          and all(strings(e) and {"name", "type", "reason"} <= e.keys() for e in header["not_kept"]))
    if not ok:
        raise ValueError("bad header")
