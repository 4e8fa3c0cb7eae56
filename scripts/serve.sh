#!/usr/bin/env bash
# serve.sh [ARGS...]: sets up what the service needs on a fresh machine (the Python runtime of the
# sandbox, the release binary and its confinement library) and runs `toolgate serve ARGS...` on the
# embedded SQLite default. Every option of `toolgate serve` works here (see README, Configuration).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
"$ROOT/scripts/python-runtime.sh" "$DEPS/python-runtime"
cargo build --release --locked -p toolgate -p toolgate-sandbox-harden
exec "$ROOT/target/release/toolgate" serve "$@"
