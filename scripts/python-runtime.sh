#!/usr/bin/env bash
# scripts/python-runtime.sh DIR — builds toolgate's Python runtime at DIR: a venv made from the
# machine's python3 (CPython 3.11; another interpreter with TOOLGATE_PYTHON=/path/to/python3),
# WITHOUT the host's site-packages, holding the exact pins of runtime/requirements.txt (numpy,
# pandas, matplotlib and their dependencies), installed from PyPI as wheels only
# (pip --only-binary=:all:, never a source build). The zygote runs as
#   DIR/bin/python -I runtime/toolgate_zygote.py FD
# (-I, not -S: -S would drop the venv's own site-packages).
#
# Idempotent and quiet: the stamp DIR/.toolgate-runtime-stamp holds the sha256 of the inputs (the
# requirements files and the base interpreter's version and path); when it matches, nothing is done.
# When an input changes, the venv is rebuilt from scratch (so a removed pin really goes away),
# keeping DIR/extra-requirements.txt; a working runtime is first checked to resolve (pip --dry-run)
# and is left untouched when the new set does not. Stop toolgate (or restart it afterwards) when rebuilding:
# a running zygote keeps the modules it already imported, not the files it has yet to import.
#
# Adding a package (operator):
#   * for this deployment only: write pinned lines (`name==version`, dependencies pinned too) into
#     DIR/extra-requirements.txt and rerun this script with the same DIR. It is installed in the
#     same pip run as runtime/requirements.txt, so a pin that conflicts with the base set fails
#     the build instead of silently replacing a version. The file survives rebuilds.
#   * for every deployment: add the pinned lines to runtime/requirements.txt and commit them.
#   Either way the package must have a wheel for this interpreter and platform (wheels only), and
#   the new stamp makes the next run of this script rebuild; then restart toolgate so the zygote
#   is started afresh (a package the zygote does not preload is imported by each session itself).
# The installed versions are listed in DIR/installed-versions.txt (pip freeze) after each build.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[[ $# -eq 1 && -n "$1" ]] || die "usage: $0 DIR"
REQ="$ROOT/runtime/requirements.txt"
[[ -f "$REQ" ]] || die "missing $REQ"
PY="${TOOLGATE_PYTHON:-python3}"
command -v "$PY" >/dev/null || die "no $PY on PATH (set TOOLGATE_PYTHON)"

mkdir -p "$1"
DIR="$(cd "$1" && pwd)"
EXTRA="$DIR/extra-requirements.txt"
STAMP="$DIR/.toolgate-runtime-stamp"

base="$("$PY" -c 'import sys; print(sys.version.replace("\n", " ")); print(sys.base_prefix); print(sys.implementation.name)')" \
  || die "$PY does not run"
case "$base" in
  3.11.*) ;;
  *) log "warning: $PY is not CPython 3.11 (${base%%$'\n'*}); the pins were chosen for 3.11" ;;
esac
want="$( { printf 'requirements\n'; sha256sum <"$REQ"
          if [[ -f "$EXTRA" ]]; then printf 'extra\n'; sha256sum <"$EXTRA"; fi
          printf '%s\n' "$base"; } | sha256sum | cut -d' ' -f1)"

if [[ "$(cat "$STAMP" 2>/dev/null)" == "$want" ]] && "$DIR/bin/python" -I -c '' 2>/dev/null; then
  exit 0
fi

# Rebuild. Refuse to wipe a directory that is not (or not yet) a runtime.
if [[ -n "$(ls -A "$DIR")" && ! -f "$DIR/pyvenv.cfg" && ! -f "$STAMP" ]]; then
  [[ "$(ls -A "$DIR")" == "extra-requirements.txt" ]] || die "$DIR is not empty and not a toolgate runtime"
fi
reqs=(-r "$REQ")
[[ -f "$EXTRA" ]] && reqs+=(-r "$EXTRA")
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
PIP_INSTALL=(-I -m pip install --quiet --require-virtualenv --only-binary=:all:)
# A working runtime is only replaced by one that resolves: a conflicting or wheel-less pin fails
# here, before anything is deleted (the wheels land in pip's cache for the real install).
if [[ -f "$STAMP" ]] && "$DIR/bin/python" -I -m pip --version >/dev/null 2>&1; then
  quiet "$DIR/bin/python" "${PIP_INSTALL[@]}" --dry-run --ignore-installed "${reqs[@]}"
fi
rm -f "$STAMP"
find "$DIR" -mindepth 1 -maxdepth 1 ! -name extra-requirements.txt -exec rm -rf {} +

quiet "$PY" -m venv "$DIR"   # a venv has no access to the host's site-packages by default
grep -qx 'include-system-site-packages = false' "$DIR/pyvenv.cfg" || die "$DIR/pyvenv.cfg allows system site-packages"
quiet "$DIR/bin/python" "${PIP_INSTALL[@]}" "${reqs[@]}"
quiet "$DIR/bin/python" -I -m pip check

# The zygote imports these (cloudpickle for every session's checkpoint: no zygote starts without
# it); prove they load from DIR alone, and build matplotlib's font cache into DIR/mplconfig (the
# zygote points MPLCONFIGDIR there, so no session rebuilds it).
mkdir -p "$DIR/mplconfig"
MPLCONFIGDIR="$DIR/mplconfig" MPLBACKEND=Agg quiet "$DIR/bin/python" -I -c '
import sys, os
prefix = os.path.realpath(sys.prefix)
import numpy, pandas, matplotlib, matplotlib.pyplot, cloudpickle
for m in (numpy, pandas, matplotlib, cloudpickle):
    if not os.path.realpath(m.__file__).startswith(prefix + os.sep):
        sys.exit(f"{m.__name__} was loaded from {m.__file__}, outside {prefix}")
matplotlib.pyplot.figure(); matplotlib.pyplot.close("all")
'
"$DIR/bin/python" -I -m pip freeze --all >"$DIR/installed-versions.txt" 2>/dev/null || die "pip freeze failed"
printf '%s\n' "$want" >"$STAMP"
