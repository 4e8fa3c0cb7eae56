#!/usr/bin/env bash
# test-clients.sh: runs the official-SDK client tests (Python mcp 2.3.0, TypeScript SDK 1.32.2)
# against the toolgate binary in TOOLGATE_BIN (default target/release/toolgate). With
# TOOLGATE_TEST_DATABASE_URL set, the servers they start use that PostgreSQL database.
# Exits non-zero when either suite fails. Installs what it needs with scripts/deps.sh first.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

export TOOLGATE_BIN="${TOOLGATE_BIN:-$ROOT/target/release/toolgate}"
[[ -x "$TOOLGATE_BIN" ]] || die "no toolgate binary at $TOOLGATE_BIN (cargo build --release --bin toolgate)"
TOOLGATE_BIN="$(cd "$(dirname "$TOOLGATE_BIN")" && pwd)/$(basename "$TOOLGATE_BIN")"
"$ROOT/scripts/deps.sh"
use_node22

# Sessions of confined servers must live outside /tmp (each session has its own empty /tmp) and
# below directories their unprivileged users may search.
TOOLGATE_SANDBOX_ROOT="$(mktemp -d /var/tmp/toolgate-sessions.XXXXXX)"
chmod 711 "$TOOLGATE_SANDBOX_ROOT"
export TOOLGATE_SANDBOX_ROOT
trap 'rm -rf "$TOOLGATE_SANDBOX_ROOT"' EXIT
status=0
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "$ROOT/tests/clients/python" || status=1
(cd "$ROOT/tests/clients/ts" && node --test --test-reporter=spec test_sdk.mjs) || status=1
exit "$status"
