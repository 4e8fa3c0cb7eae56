#!/usr/bin/env bash
# pg-up.sh DIR: a throw-away PostgreSQL cluster in DIR, on 127.0.0.1 only, with database toolgate_test.
# Prints one line, the URL postgres://toolgate:PASS@127.0.0.1:PORT/toolgate_test. Running it again
# while the cluster runs prints the same URL. Stop it with scripts/pg-down.sh DIR.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[[ $# -eq 1 ]] || die "usage: $0 DIR"

find_pgbin
if [[ -z "$PGBIN" ]]; then
  [[ $EUID -eq 0 ]] || die "PostgreSQL is not installed and installing needs root"
  export DEBIAN_FRONTEND=noninteractive
  quiet apt-get update
  quiet apt-get install -y --no-install-recommends postgresql   # its own cluster, if started, has another port
  find_pgbin
  [[ -n "$PGBIN" ]] || die "no initdb/pg_ctl after installing postgresql"
fi
if [[ $EUID -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
  quiet useradd --system --home-dir /var/lib/postgresql --shell /bin/false postgres
fi

mkdir -p "$1"
DIR="$(cd "$1" && pwd)"
DATA="$DIR/data"
DB=toolgate_test USER_NAME=toolgate
if [[ $EUID -eq 0 ]]; then
  chown postgres: "$DIR"
  runuser -u postgres -- test -x "$DIR" || die "user postgres cannot reach $DIR: choose a DIR under /tmp"
fi

if as_pg "$PGBIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1 && [[ -s "$DIR/url" ]]; then
  cat "$DIR/url"
  exit 0
fi

if [[ ! -s "$DATA/PG_VERSION" ]]; then
  python3 -c 'import secrets; print(secrets.token_hex(16))' >"$DIR/password"
  chmod 600 "$DIR/password"
  [[ $EUID -ne 0 ]] || chown postgres: "$DIR/password"
  quiet as_pg "$PGBIN/initdb" -D "$DATA" -U "$USER_NAME" --pwfile="$DIR/password" \
    --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8
  cat >>"$DATA/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$DIR'
shared_buffers = 32MB
max_connections = 200
CONF
fi

PORT="$(free_port)"
quiet as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$DIR/server.log" -w -t 60 -o "-p $PORT" start
if ! as_pg "$PGBIN/psql" -h "$DIR" -p "$PORT" -U "$USER_NAME" -d postgres -Atqc \
     "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1; then
  quiet as_pg "$PGBIN/createdb" -h "$DIR" -p "$PORT" -U "$USER_NAME" "$DB"
fi
echo "postgres://$USER_NAME:$(cat "$DIR/password")@127.0.0.1:$PORT/$DB" | tee "$DIR/url"
