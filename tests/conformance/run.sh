#!/usr/bin/env bash
# run.sh URL REVISION: runs the MCP conformance suite (server side) against URL, which must be a
# loopback URL such as the personal URL http://127.0.0.1:PORT/u/svck_…, exactly as the spec
# revision REVISION (2025-11-25 or 2026-07-28) requires, judged against the baseline
# expected-failures-REVISION.yaml beside this script. Exits non-zero on any failure that is not in
# the baseline and on any baseline entry that now passes (stale). Prints the suite's summary; on a
# non-zero exit also every failing or warning check. Per-scenario checks.json files go to
# $CONFORMANCE_OUT (default: a temporary folder that is removed afterwards).
set -euo pipefail
. "$(dirname "$0")/../../scripts/lib.sh"
[[ $# -eq 2 ]] || die "usage: $0 URL 2025-11-25|2026-07-28"
url="$1" rev="$2"
here="$ROOT/tests/conformance"
baseline="$here/expected-failures-$rev.yaml"
[[ -f "$baseline" ]] || die "no baseline $baseline"
cli="$here/node_modules/@modelcontextprotocol/conformance/dist/index.js"
[[ -f "$cli" ]] || die "conformance suite missing: run scripts/deps.sh"
use_node22

out="${CONFORMANCE_OUT:-}"
if [[ -z "$out" ]]; then out="$(mktemp -d)"; trap 'rm -rf "$out"' EXIT; fi
mkdir -p "$out"
redact() { sed -E 's/svck_[0-9a-f]{8,}/svck_<redacted>/g'; }

rc=0
(cd "$out" && node "$cli" server --url "$url" --requirements "$rev" --expected-failures "$baseline" \
  -o "$out/results") >"$out/conformance.log" 2>&1 || rc=$?
# (the suite's "Total: N passed, M failed" counts baselined failures too: reworded so no CI log
# reader takes it for a test runner's verdict)
awk '/=== SUMMARY ===/{p=1} p' "$out/conformance.log" \
  | sed -E 's/^Total: ([0-9]+) passed, ([0-9]+) failed/All checks, baselined ones included: \1 passed, \2 failed/' | redact
# The suite runs the tasks extension's scenarios (io.modelcontextprotocol/tasks, 2026-07-28 only)
# without scoring them; toolgate serves the extension, so here every one of their checks must pass
# (a scenario the suite itself skips counts as passed).
if [[ "$rev" == 2026-07-28 ]]; then
  python3 - "$out/results" <<'PY' || rc=1
import json, pathlib, re, sys
seen, bad = set(), []
for f in sorted(pathlib.Path(sys.argv[1]).glob("server-tasks-*/checks.json")):
    scenario = re.sub(r"-\d{4}-\d\d-\d\dT.*$", "", f.parent.name.removeprefix("server-"))
    seen.add(scenario)
    for c in json.loads(f.read_text()):
        if c.get("status") in ("FAILURE", "WARNING"):
            bad.append(f"{scenario}:{c['id']}  {c['status']}  {(c.get('errorMessage') or '')[:240]}")
print(f"tasks extension: {len(seen)} scenarios run, {len(bad)} failing checks")
for line in bad:
    print("  " + line)
sys.exit(1 if bad or len(seen) < 10 else 0)
PY
fi
if [[ $rc -ne 0 ]]; then
  echo "--- failing or warning checks (scenario:check-id  status  message) ---"
  python3 - "$out/results" "$here/node_modules/@modelcontextprotocol/conformance/requirements/$rev.yaml" <<'PY' | redact
import json, pathlib, re, sys
req, section = set(), None
for line in pathlib.Path(sys.argv[2]).read_text().splitlines():
    if re.match(r"^\S", line):
        section = line.rstrip(":")
    elif section == "server" and (m := re.match(r"^\s+- (\S+)", line)):
        req.add(m.group(1))
for f in sorted(pathlib.Path(sys.argv[1]).glob("*/checks.json")):
    scenario = re.sub(r"-\d{4}-\d\d-\d\dT.*$", "", f.parent.name.removeprefix("server-"))
    note = "" if scenario in req else "  (not scored)"
    for c in json.loads(f.read_text()):
        if c.get("status") in ("FAILURE", "WARNING"):
            print(f"{scenario}:{c['id']}  {c['status']}{note}  {(c.get('errorMessage') or '')[:240]}")
PY
  grep -q "=== SUMMARY ===" "$out/conformance.log" || redact <"$out/conformance.log" | tail -40
fi
if [[ $rc -eq 0 ]]; then echo "conformance $rev: OK against the baseline"; else echo "conformance $rev: FAILED (exit $rc)"; fi
exit "$rc"
