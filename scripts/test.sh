#!/usr/bin/env bash
# test.sh: the whole test suite, from a fresh clone. Installs what it needs (Python venv with the
# MCP SDK, Node 22, the npm packages, PostgreSQL and MariaDB from Debian's packages, Garage from
# crates.io), starts a throw-away PostgreSQL cluster and MariaDB server on 127.0.0.1 (the store's
# backend, and tenants' databases for `sql`) and a Garage (the checkpoint store's S3 tests), and
# runs in order:
#   1. cargo fmt --check and cargo deny: the licences, duplicate versions and sources of
#      Cargo.lock (deny.toml), and its advisories against the vendored RustSec snapshot
#      (third_party/, scripts/advisory-db.sh)
#   2. every Rust unit and integration test, SQLite and PostgreSQL, their build linted by clippy
#      with -D warnings (also the conformance build)
#   3. the official Python and TypeScript SDK client tests, on SQLite and on PostgreSQL
#   3b. the web dashboard in a real browser (chromium, a real SMTP sink, a Stripe stand-in), SQLite
#   4. the MCP conformance suite, both protocol revisions, against its baselines, and its
#      authorization-server scenarios against the OAuth endpoints
#   5. the sandbox's Python side (zygote and session executor) on the project's own runtime
# Exits non-zero at the first failing step.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROOT"

# each step says when it began and how long the run has taken so far: where CI's time goes
step() { printf '\n=== %s (%s UTC, %d s in) ===\n' "$*" "$(date -u +%H:%M:%S)" "$SECONDS" >&2; }

step "dependencies"
"$ROOT/scripts/deps.sh"
"$ROOT/scripts/python-runtime.sh" "$DEPS/python-runtime"
PG_DIR="$(mktemp -d /tmp/toolgate-pg.XXXXXX)"   # under /tmp: the postgres user must reach it
MY_DIR="$(mktemp -d /tmp/toolgate-mysql.XXXXXX)"  # and the mysql user this one
GARAGE_DIR="$(mktemp -d /tmp/toolgate-garage.XXXXXX)"
SERVER_PID=""
cleanup() {
  [[ -z "$SERVER_PID" ]] || kill "$SERVER_PID" 2>/dev/null || true
  "$ROOT/scripts/pg-down.sh" "$PG_DIR" >/dev/null 2>&1 || true
  "$ROOT/scripts/mysql-down.sh" "$MY_DIR" >/dev/null 2>&1 || true
  "$ROOT/scripts/garage-down.sh" "$GARAGE_DIR" >/dev/null 2>&1 || true
  rm -rf "$PG_DIR" "$MY_DIR" "$GARAGE_DIR"
}
trap cleanup EXIT
PG_URL="$("$ROOT/scripts/pg-up.sh" "$PG_DIR")"
MY_URL="$("$ROOT/scripts/mysql-up.sh" "$MY_DIR")"
# TOOLGATE_TEST_S3_URL, _ENDPOINT, _REGION, _KEY_ID and _SECRET, for the checkpoint store's tests
GARAGE_ENV="$("$ROOT/scripts/garage-up.sh" "$GARAGE_DIR")"
eval "$GARAGE_ENV"

step "format and lints"
cargo fmt --all -- --check
# Clippy lints the workspace while the Rust tests' build compiles it: clippy-driver is the
# workspace members' rustc wrapper and `-D warnings` its argument, as `cargo clippy -- -D
# warnings` sets them (CLIPPY_ARGS, its words joined by __CLIPPY_HACKERY__), and `cargo test`
# builds every target `--all-targets` names here (there are no benches). The dependencies are
# then built once, for the tests, instead of checked apart as well by `cargo clippy`: in a
# fresh clone the lints' step took 467 s that way, and the lints now add 151 s to the tests'
# build (2,326 s in all before, 1,988 s after). Every cargo command below runs so; a lint
# fails its build.
export RUSTC_WORKSPACE_WRAPPER=clippy-driver
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# the arguments reach clippy-driver and deny a lint: else the builds below would lint nothing
CANARY="$(mktemp -d)"
printf 'fn main() {\n    let v: Vec<u8> = Vec::new();\n    let _ = v.len() == 0;\n}\n' >"$CANARY/main.rs"
if clippy-driver rustc --edition 2024 --crate-type bin --emit=metadata -o "$CANARY/out" \
  "$CANARY/main.rs" 2>/dev/null; then
  rm -rf "$CANARY"
  die "clippy-driver let a lint through with CLIPPY_ARGS set: the tests' build would not be linted"
fi
rm -rf "$CANARY"
"$CARGO_DENY" --locked check licenses bans sources
"$CARGO_DENY" --locked --offline --config "$("$ROOT/scripts/advisory-db.sh")" check advisories

step "Rust tests (SQLite and PostgreSQL)"
# the confinement library the zygote's children load; cargo test does not build a cdylib
cargo build --locked -p toolgate-sandbox-harden
TOOLGATE_TEST_POSTGRES_URL="$PG_URL" TOOLGATE_TEST_MYSQL_URL="$MY_URL" cargo test --workspace --locked

step "the clients' binaries"
# The SDK, browser and conformance steps run the debug build the Rust tests made (dependencies
# at opt-level 1, see Cargo.toml): what they check is behaviour, not speed (the bench measures
# the release build), and two release builds took 21 of CI's minutes on a cold machine with two
# cores (751 s with the fixtures, 518 s without). The conformance build adds the suite's fixture
# tools and is copied aside. Both are built as `cargo test --workspace` builds, so features
# unify as they did for the Rust tests and only toolgate-server and toolgate are compiled again
# (48 s; `cargo build`, whose features unify without the dev-dependencies, built some
# dependencies once more: 293 s in a fresh clone). The last command finds everything built and
# only puts the plain binary, the one the Rust tests ran, back at target/debug/toolgate.
cargo test --locked --workspace --no-run --features toolgate/conformance-fixtures
cp target/debug/toolgate target/debug/toolgate-conformance
cargo test --locked --workspace --no-run
if grep -q test_simple_text target/debug/toolgate; then die "the plain binary contains conformance fixtures"; fi

step "client SDK tests on SQLite"
TOOLGATE_BIN="$ROOT/target/debug/toolgate" "$ROOT/scripts/test-clients.sh"
step "client SDK tests on PostgreSQL"
TOOLGATE_BIN="$ROOT/target/debug/toolgate" TOOLGATE_TEST_DATABASE_URL="$PG_URL" "$ROOT/scripts/test-clients.sh"

step "dashboard in a real browser"
TOOLGATE_BIN="$ROOT/target/debug/toolgate" "$ROOT/scripts/test-dashboard.sh"

step "MCP conformance suite"
DATA="$(mktemp -d)"
SESSIONS="$(mktemp -d /var/tmp/toolgate-sessions.XXXXXX)"   # not under /tmp: see test-clients.sh
chmod 711 "$SESSIONS"
# port 0: the server takes a free port and announces it on stdout, so no port is bound twice
mkfifo "$DATA/announce"
target/debug/toolgate-conformance serve --listen 127.0.0.1:0 --data-dir "$DATA" \
  --sandbox-root "$SESSIONS" \
  >"$DATA/announce" 2>"$DATA/server.log" &
SERVER_PID=$!
BASE="$(announced_url "$DATA/announce" 60)" || { cat "$DATA/server.log" >&2; die "conformance server did not start"; }
wait_http "$BASE/healthz" 30 || { cat "$DATA/server.log" >&2; die "conformance server did not answer"; }
URL="$(target/debug/toolgate-conformance account create --email conformance@example.test \
  --data-dir "$DATA" --public-url "$BASE" | python3 -c 'import json,sys; print(json.load(sys.stdin)["personal_url"])')"
status=0
"$ROOT/tests/conformance/run.sh" "$URL" 2025-11-25 || status=1
"$ROOT/tests/conformance/run.sh" "$URL" 2026-07-28 || status=1
"$ROOT/tests/conformance/authorization.sh" "$BASE" "$DATA" || status=1
kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
rm -rf "$DATA" "$SESSIONS"
[[ $status -eq 0 ]] || die "conformance suite failed"

step "sandbox zygote and session executor (Python side)"
TOOLGATE_PYTHON_RUNTIME="$DEPS/python-runtime" TOOLGATE_HARDEN_LIB="$ROOT/target/debug/libtoolgate_sandbox_harden.so" \
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$ROOT/runtime/"

step "all tests passed"
