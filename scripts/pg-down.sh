#!/usr/bin/env bash
# pg-down.sh DIR: stops the cluster that scripts/pg-up.sh started in DIR (no-op when it is not running).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[[ $# -eq 1 ]] || die "usage: $0 DIR"
DATA="$(cd "$1" && pwd)/data"
find_pgbin
[[ -n "$PGBIN" ]] || die "PostgreSQL is not installed"
if as_pg "$PGBIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
  quiet as_pg "$PGBIN/pg_ctl" -D "$DATA" -w -t 60 -m fast stop
fi
rm -f "$(dirname "$DATA")/url"
