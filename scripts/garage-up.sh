#!/usr/bin/env bash
# garage-up.sh DIR: a throw-away single-node Garage (S3-compatible object storage) in DIR, on
# 127.0.0.1 only, with one bucket and one key allowed to it. Prints (and keeps in DIR/env) the
# lines the checkpoint store's S3 tests read:
#   export TOOLGATE_TEST_S3_URL=s3://toolgate-test  TOOLGATE_TEST_S3_ENDPOINT=http://127.0.0.1:PORT
#   TOOLGATE_TEST_S3_REGION=garage  TOOLGATE_TEST_S3_KEY_ID=GK…  TOOLGATE_TEST_S3_SECRET=…
# so `eval "$(scripts/garage-up.sh DIR)"` sets them. Running it again while the server runs
# prints the same. Stop it with scripts/garage-down.sh DIR. Builds garage first if missing.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[[ $# -eq 1 ]] || die "usage: $0 DIR"

install_garage
mkdir -p "$1"
DIR="$(cd "$1" && pwd)"
CFG="$DIR/garage.toml"
BUCKET=toolgate-test

if [[ -s "$DIR/pid" ]] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null && [[ -s "$DIR/env" ]]; then
  cat "$DIR/env"
  exit 0
fi

RPC="$(free_port)" S3="$(free_port)"
umask 077
cat >"$CFG" <<CONF
metadata_dir = "$DIR/meta"
data_dir = "$DIR/data"
db_engine = "sqlite"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$RPC"
rpc_public_addr = "127.0.0.1:$RPC"
rpc_secret = "$(python3 -c 'import secrets; print(secrets.token_hex(32))')"

[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:$S3"
root_domain = ".s3.garage.localhost"
CONF

g() { "$GARAGE" -c "$CFG" "$@"; }
# the program itself in the background (not the function `g`, whose subshell's pid $! would be):
# garage-down.sh stops what the pid file names
RUST_LOG=warn "$GARAGE" -c "$CFG" server >"$DIR/server.log" 2>&1 &
echo $! >"$DIR/pid"
deadline=$((SECONDS + 60))
until g status >/dev/null 2>&1; do
  kill -0 "$(cat "$DIR/pid")" 2>/dev/null || { cat "$DIR/server.log" >&2; die "garage exited"; }
  ((SECONDS < deadline)) || { cat "$DIR/server.log" >&2; die "garage did not answer in 60 s"; }
  sleep 0.3
done

NODE="$(g node id -q 2>/dev/null)"
NODE="${NODE%%@*}"
if ! g layout show 2>/dev/null | grep -q "dc1"; then
  quiet g layout assign -z dc1 -c 1G "$NODE"
  quiet g layout apply --version 1
fi
g bucket info "$BUCKET" >/dev/null 2>&1 || quiet g bucket create "$BUCKET"
KEY_OUT="$(g key create toolgate-test-key 2>&1)" || { printf '%s\n' "$KEY_OUT" >&2; die "garage key create failed"; }
KEY_ID="$(sed -n 's/^Key ID:[[:space:]]*//p' <<<"$KEY_OUT" | head -n 1)"
SECRET="$(sed -n 's/^Secret key:[[:space:]]*//p' <<<"$KEY_OUT" | head -n 1)"
[[ -n "$KEY_ID" && -n "$SECRET" ]] || die "could not read the key garage created"
quiet g bucket allow --read --write --owner "$BUCKET" --key "$KEY_ID"

cat >"$DIR/env" <<ENV
export TOOLGATE_TEST_S3_URL=s3://$BUCKET
export TOOLGATE_TEST_S3_ENDPOINT=http://127.0.0.1:$S3
export TOOLGATE_TEST_S3_REGION=garage
export TOOLGATE_TEST_S3_KEY_ID=$KEY_ID
export TOOLGATE_TEST_S3_SECRET=$SECRET
ENV
cat "$DIR/env"
