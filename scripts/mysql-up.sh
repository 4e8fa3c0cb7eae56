#!/usr/bin/env bash
# mysql-up.sh DIR: a throw-away MariaDB server (Debian's mariadb-server, MySQL's protocol) in DIR,
# on 127.0.0.1 only, with database toolgate_test. Prints one line, the URL
# mysql://toolgate:PASS@127.0.0.1:PORT/toolgate_test. Running it again while the server runs
# prints the same URL. Stop it with scripts/mysql-down.sh DIR.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[[ $# -eq 1 ]] || die "usage: $0 DIR"

if ! command -v mariadbd >/dev/null 2>&1 && [[ ! -x /usr/sbin/mariadbd ]]; then
  [[ $EUID -eq 0 ]] || die "MariaDB is not installed and installing needs root"
  export DEBIAN_FRONTEND=noninteractive
  quiet apt-get update
  quiet apt-get install -y --no-install-recommends mariadb-server
fi
MARIADBD="$(command -v mariadbd || echo /usr/sbin/mariadbd)"

mkdir -p "$1"
DIR="$(cd "$1" && pwd)"
DATA="$DIR/data" SOCK="$DIR/mysqld.sock" DB=toolgate_test USER_NAME=toolgate
RUN_AS=()
if [[ $EUID -eq 0 ]]; then
  id mysql >/dev/null 2>&1 || quiet useradd --system --home-dir /nonexistent --shell /bin/false mysql
  chown mysql: "$DIR"
  RUN_AS=(--user=mysql)
fi

client() { mariadb --socket="$SOCK" -uroot "$@"; }

if [[ -S "$SOCK" ]] && client -e 'SELECT 1' >/dev/null 2>&1 && [[ -s "$DIR/url" ]]; then
  cat "$DIR/url"
  exit 0
fi

if [[ ! -d "$DATA/mysql" ]]; then
  quiet mariadb-install-db "${RUN_AS[@]}" --datadir="$DATA" --auth-root-authentication-method=socket \
    --skip-test-db
fi
PORT="$(free_port)"
"$MARIADBD" --no-defaults "${RUN_AS[@]}" --datadir="$DATA" --socket="$SOCK" --port="$PORT" \
  --bind-address=127.0.0.1 --pid-file="$DIR/mysqld.pid" --log-error="$DIR/server.log" \
  --innodb-buffer-pool-size=32M --max-connections=200 --skip-name-resolve \
  </dev/null >>"$DIR/mysqld.out" 2>&1 &   # not our stdout: a caller reading it would wait for the server
for _ in $(seq 1 120); do
  client -e 'SELECT 1' >/dev/null 2>&1 && break
  sleep 0.25
done
client -e 'SELECT 1' >/dev/null 2>&1 || { cat "$DIR/server.log" >&2; die "MariaDB did not start"; }

if [[ ! -s "$DIR/password" ]]; then
  python3 -c 'import secrets; print(secrets.token_hex(16))' >"$DIR/password"
  chmod 600 "$DIR/password"
fi
PASS="$(cat "$DIR/password")"
client -e "CREATE DATABASE IF NOT EXISTS $DB;
  CREATE USER IF NOT EXISTS '$USER_NAME'@'127.0.0.1' IDENTIFIED BY '$PASS';
  GRANT ALL ON $DB.* TO '$USER_NAME'@'127.0.0.1';"
echo "mysql://$USER_NAME:$PASS@127.0.0.1:$PORT/$DB" | tee "$DIR/url"
