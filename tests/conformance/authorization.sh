#!/usr/bin/env bash
# authorization.sh BASE DATA_DIR: runs the MCP conformance suite's authorization-server scenarios
# (metadata, authorization code grant with PKCE S256 and the resource) against the toolgate at
# BASE (a loopback URL) whose data directory is DATA_DIR (no smtp_url: sign-in mails land in
# DATA_DIR/outbox). The suite prints an authorization URL for "a person in a browser": this
# script is that person. It signs in with the e-mailed link, registers the suite's client
# (Dynamic Client Registration), opens the consent page, presses Allow and follows the redirect
# to the suite's callback server. Exits non-zero unless every scenario passes.
set -euo pipefail
. "$(dirname "$0")/../../scripts/lib.sh"
[[ $# -eq 2 ]] || die "usage: $0 BASE DATA_DIR"
base="${1%/}" data="$2"
cli="$ROOT/tests/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js"
use_node22
work="$(mktemp -d)"; trap 'rm -rf "$work"; [[ -z "${suite:-}" ]] || kill "$suite" 2>/dev/null || true' EXIT

email="conformance-oauth-$RANDOM@example.test"
curl -sf -X POST "$base/magic-link" -H 'Content-Type: application/json' -d "{\"email\":\"$email\"}" >/dev/null
token=""
for _ in $(seq 50); do
  token="$(grep -h -l "$email" "$data"/outbox/*.eml 2>/dev/null | xargs -r cat | tr -d '\r' | sed 's/=$//' | tr -d '\n' \
    | grep -o 'token=[0-9a-f]\{64\}' | head -1 | cut -d= -f2 || true)"
  [[ -n "$token" ]] && break
  sleep 0.1
done
[[ -n "$token" ]] || die "no sign-in mail for $email in $data/outbox"
cookie="$(curl -s -D - -o /dev/null -X POST "$base/dashboard/sign-in/confirm" -H "Origin: $base" --data "token=$token" \
  | tr -d '\r' | sed -n 's/^[Ss]et-[Cc]ookie: toolgate_session=\([0-9a-f]*\).*/\1/p')"
[[ -n "$cookie" ]] || die "signing in gave no session cookie"

port="$(free_port)"
client="$(curl -sf -X POST "$base/oauth/register" -H 'Content-Type: application/json' \
  -d "{\"redirect_uris\":[\"http://127.0.0.1:$port/callback\"],\"client_name\":\"MCP conformance suite\"}" \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["client_id"])')"

node "$cli" authorization --url "$base" --client-id "$client" --resource "$base/mcp" -p "$port" >"$work/suite.log" 2>&1 &
suite=$!
url=""
for _ in $(seq 100); do
  url="$(grep -o "$base/dashboard/oauth/authorize?[^ ]*" "$work/suite.log" | head -1 || true)"
  [[ -n "$url" ]] && break
  sleep 0.1
done
[[ -n "$url" ]] || { cat "$work/suite.log" >&2; die "the suite printed no authorization URL"; }
sleep 0.5   # its callback server starts right after printing the URL
csrf="$(curl -sf -b "toolgate_session=$cookie" "$url" | grep -o 'name="csrf" value="[0-9a-f]*"' | head -1 | sed 's/.*value="//; s/"$//')"
[[ -n "$csrf" ]] || die "the consent page had no form"
location="$(curl -s -D - -o /dev/null -b "toolgate_session=$cookie" -H "Origin: $base" -X POST \
  "$base/dashboard/oauth/authorize" --data "${url#*\?}&csrf=$csrf&decision=allow" \
  | tr -d '\r' | sed -n 's/^[Ll]ocation: //p')"
[[ "$location" == "http://127.0.0.1:$port/callback?"* ]] || die "consent did not redirect to the suite's callback: $location"
curl -s "$location" >/dev/null
rc=0; wait "$suite" || rc=$?; suite=""
awk '/=== SUMMARY ===/{p=1} p' "$work/suite.log"
if [[ $rc -ne 0 ]] || grep -q "failed, [1-9]\|[1-9][0-9]* failed" "$work/suite.log"; then
  cat "$work/suite.log" >&2
  die "authorization-server scenarios failed"
fi
