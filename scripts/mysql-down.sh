#!/usr/bin/env bash
# mysql-down.sh DIR: stops the server that scripts/mysql-up.sh started in DIR (no-op when it is
# not running).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[[ $# -eq 1 ]] || die "usage: $0 DIR"
DIR="$(cd "$1" && pwd)"
if [[ -s "$DIR/mysqld.pid" ]]; then
  PID="$(cat "$DIR/mysqld.pid")"
  kill "$PID" 2>/dev/null || true
  for _ in $(seq 1 120); do
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.25
  done
fi
rm -f "$DIR/url"
