#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for Tally's tests and benchmarks: one command to start it, one to
# stop it (and remove it).
#
#   scripts/pg.sh start    create (if needed) and start the cluster; prints its URL
#   scripts/pg.sh url      print the URL (postgres://…) of the running cluster
#   scripts/pg.sh stop     stop it and remove its files
#
# Settings (environment): TALLY_PG_DIR (default /tmp/tally-pg), TALLY_PG_PORT (54329),
# TALLY_PG_DURABLE=1 for fsync and synchronous_commit on (default off: a test cluster that a crash of
# the machine may lose, which is what tests want; benchmarks name the setting they ran with).
# Uses Debian's postgresql (apt-get install postgresql); as root, the server runs as user postgres.
set -euo pipefail

DIR="${TALLY_PG_DIR:-/tmp/tally-pg}"
PORT="${TALLY_PG_PORT:-54329}"
DB=tally
BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
if [ -z "$BIN" ] || [ ! -x "$BIN/pg_ctl" ]; then
  echo "scripts/pg.sh: no PostgreSQL server found (install it: apt-get install postgresql)" >&2
  exit 1
fi

# PostgreSQL refuses to run as root: run its programs as postgres then.
as_owner() {
  if [ "$(id -u)" = "0" ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

url() {
  echo "postgres://postgres@127.0.0.1:${PORT}/${DB}"
}

case "${1:-}" in
  start)
    if [ ! -f "$DIR/data/PG_VERSION" ]; then
      mkdir -p "$DIR"
      [ "$(id -u)" = "0" ] && chown postgres:postgres "$DIR"
      as_owner "$BIN/initdb" -D "$DIR/data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >/dev/null
      durable=off
      [ "${TALLY_PG_DURABLE:-0}" = "1" ] && durable=on
      cat >>"$DIR/data/postgresql.conf" <<EOF
# scripts/pg.sh
listen_addresses = '127.0.0.1'
port = ${PORT}
unix_socket_directories = '${DIR}'
max_connections = 200
shared_buffers = 256MB
fsync = ${durable}
synchronous_commit = ${durable}
full_page_writes = ${durable}
EOF
    fi
    if ! as_owner "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
      as_owner "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 start >/dev/null
    fi
    if ! as_owner "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '${DB}'" postgres | grep -q 1; then
      as_owner "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -qc "CREATE DATABASE ${DB}" postgres
    fi
    url
    ;;
  url)
    url
    ;;
  stop)
    if [ -f "$DIR/data/PG_VERSION" ]; then
      as_owner "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$DIR"
    ;;
  *)
    echo "usage: scripts/pg.sh start|url|stop" >&2
    exit 2
    ;;
esac
