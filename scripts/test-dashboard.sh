#!/usr/bin/env bash
# test-dashboard.sh: the web dashboard in a real browser (Debian's chromium driven by
# playwright-core) against the toolgate binary in TOOLGATE_BIN (default target/release/toolgate),
# with a real SMTP sink on loopback (Debian's python3-aiosmtpd) and a Stripe Checkout stand-in.
# Screenshots of every page, desktop and phone width, go to $TOOLGATE_TEST_OUTPUT/dashboard
# (default target/test-output/dashboard).
#   scripts/test-dashboard.sh           the browser tests (node --test)
#   scripts/test-dashboard.sh --bench   the sign-in benchmark instead (20 runs; p50/p90/max)
# Installs what it needs with scripts/deps.sh first. Exits non-zero when a test fails.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

mode=test
case "${1:-}" in
  "") ;;
  --bench) mode=bench ;;
  *) die "usage: $0 [--bench]" ;;
esac

export TOOLGATE_BIN="${TOOLGATE_BIN:-$ROOT/target/release/toolgate}"
[[ -x "$TOOLGATE_BIN" ]] || die "no toolgate binary at $TOOLGATE_BIN (cargo build --release --bin toolgate)"
TOOLGATE_BIN="$(cd "$(dirname "$TOOLGATE_BIN")" && pwd)/$(basename "$TOOLGATE_BIN")"
"$ROOT/scripts/deps.sh"
use_node22

# The server is started as test-clients.sh starts it: sessions, should any run, live outside /tmp.
TOOLGATE_SANDBOX_ROOT="$(mktemp -d /var/tmp/toolgate-sessions.XXXXXX)"
chmod 711 "$TOOLGATE_SANDBOX_ROOT"
export TOOLGATE_SANDBOX_ROOT
trap 'rm -rf "$TOOLGATE_SANDBOX_ROOT"' EXIT

cd "$ROOT/tests/dashboard"
if [[ $mode == bench ]]; then
  node bench_signin.mjs
else
  node --test --test-reporter=spec test_dashboard.mjs
fi
