#!/usr/bin/env bash
# garage-down.sh DIR: stops the Garage that scripts/garage-up.sh started in DIR (no-op when it is
# not running).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[[ $# -eq 1 ]] || die "usage: $0 DIR"
DIR="$(cd "$1" && pwd)"
if [[ -s "$DIR/pid" ]]; then
  pid="$(cat "$DIR/pid")"
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    # still there after 5 s: it does not get to hold its ports past the suite
    kill -9 "$pid" 2>/dev/null || true
  fi
fi
rm -f "$DIR/pid" "$DIR/env"
