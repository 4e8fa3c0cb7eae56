#!/usr/bin/env bash
# searxng-up.sh DIR UPSTREAM: a real searx (Debian's package: SearXNG's JSON API) in DIR, on
# 127.0.0.1 only, with one engine: a json_engine asking UPSTREAM/search?q=... (a loopback
# stand-in that answers {"results": [{url, title, content}]}). Installs the package when it is
# missing. Prints one line, the base URL; stop it with scripts/searxng-down.sh DIR.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[[ $# -eq 2 ]] || die "usage: $0 DIR UPSTREAM"
if [[ ! -f /usr/share/doc/searx/examples/settings.yml ]]; then
  [[ $EUID -eq 0 ]] || die "searx is not installed and installing needs root"
  export DEBIAN_FRONTEND=noninteractive
  quiet apt-get update
  quiet apt-get install -y --no-install-recommends searx
fi
mkdir -p "$1"
DIR="$(cd "$1" && pwd)"
PORT="$(free_port)"
/usr/bin/python3 - "$DIR/settings.yml" "$PORT" "$2" <<'PY'
import secrets, sys
import yaml
path, port, upstream = sys.argv[1:]
with open("/usr/share/doc/searx/examples/settings.yml") as f:
    s = yaml.safe_load(f)
s["server"].update(port=int(port), bind_address="127.0.0.1", secret_key=secrets.token_hex(16),
                   method="GET")
s["search"]["formats"] = ["html", "json"]
s["ui"].update(static_path="/usr/share/python3-searx/static",
               templates_path="/usr/share/python3-searx/templates")
s["engines"] = [{
    "name": "loopback", "engine": "json_engine", "shortcut": "lb", "categories": "general",
    "search_url": upstream.rstrip("/") + "/search?q={query}", "results_query": "results",
    "url_query": "url", "title_query": "title", "content_query": "content",
    "enable_http": True, "timeout": 5.0,
}]
with open(path, "w") as f:
    yaml.safe_dump(s, f)
PY
SEARX_SETTINGS_PATH="$DIR/settings.yml" /usr/bin/python3 -m searx.webapp \
  </dev/null >>"$DIR/searx.log" 2>&1 &   # not our stdout: a caller reading it would wait
echo $! >"$DIR/pid"
URL="http://127.0.0.1:$PORT"
wait_http "$URL/config" 60 || { cat "$DIR/searx.log" >&2; die "searx did not start"; }
echo "$URL"
