#!/usr/bin/env bash
# searxng-down.sh DIR: stops the searx that scripts/searxng-up.sh started in DIR.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 1; }
[[ -s "$1/pid" ]] && kill "$(cat "$1/pid")" 2>/dev/null || true
