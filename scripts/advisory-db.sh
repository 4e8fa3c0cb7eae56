#!/usr/bin/env bash
# The RustSec advisory database for `cargo deny check advisories`, from the snapshot kept in
# third_party/ (this network cannot reach github.com, where the database lives). Unpacks it as a
# git repository (cargo deny reads a database with git) where cargo deny keeps its copy of
# github.com/rustsec/advisory-db, writes a cargo deny config naming that database and deny.toml's
# [graph], and prints the config's path; the check then runs with --offline, so nothing is fetched.
#
#   scripts/advisory-db.sh            prepare (once per snapshot) and print the config's path
#   scripts/advisory-db.sh --refresh  replace the snapshot from github.com (needs the network)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SNAPSHOT="$ROOT/third_party/rustsec-advisory-db.tar.gz"
DIR="$DEPS/advisory-db"
URL="https://github.com/rustsec/advisory-db"
# where cargo deny $CARGO_DENY_VERSION keeps its copy of $URL beneath db-path (a hash of the URL;
# the check says "cannot change to …" if another version names it otherwise)
SOURCE="$DIR/db/advisory-db-3157b0e258782691"
CONFIG="$DIR/deny-advisories.toml"

if [[ "${1:-}" == "--refresh" ]]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  git clone --quiet --depth 1 "$URL" "$tmp/db"
  git -C "$tmp/db" archive --format=tar HEAD crates rust LICENSE.txt README.md | gzip -9 >"$SNAPSHOT"
  log "snapshot of $(git -C "$tmp/db" log -1 --format='%H (%cs)') written to $SNAPSHOT; note it in third_party/README.md"
  exit 0
fi

[[ -f "$SNAPSHOT" ]] || die "no advisory snapshot at $SNAPSHOT"
stamp="$(sha256sum "$SNAPSHOT" | cut -c1-16)"
if [[ "$(cat "$DIR/stamp" 2>/dev/null)" != "$stamp" ]]; then
  rm -rf "$DIR"
  mkdir -p "$SOURCE"
  tar -xzf "$SNAPSHOT" -C "$SOURCE"
  # one commit dated now: cargo deny judges a database by its last commit's age
  quiet git -C "$SOURCE" init --quiet --initial-branch=main
  quiet git -C "$SOURCE" add -A
  quiet git -C "$SOURCE" -c user.name=toolgate -c user.email=toolgate@localhost \
    commit --quiet -m "RustSec advisory database snapshot ($stamp)"
  printf '%s\n' "$stamp" >"$DIR/stamp"
fi

{
  echo "# written by scripts/advisory-db.sh: the advisories check over the vendored snapshot"
  sed -n '/^\[graph\]/,/^\[/{/^\[licenses\]/d;p}' "$ROOT/deny.toml"
  echo "[advisories]"
  echo "db-path = \"$DIR/db\""
  echo "db-urls = [\"$URL\"]"
  echo "# every advisory fails the check (vulnerabilities, unmaintained and unsound crates, yanked versions)"
  echo "unmaintained = \"all\""
  echo "yanked = \"deny\""
} >"$CONFIG"
printf '%s\n' "$CONFIG"
