#!/bin/sh
# pg-test-server.sh: a throwaway PostgreSQL cluster for tests of the PostgreSQL store.
#
#   scripts/pg-test-server.sh start DIR   initdb DIR/data, start it, print the connection string
#   scripts/pg-test-server.sh url DIR     print the connection string again
#   scripts/pg-test-server.sh stop DIR    stop it and delete DIR
#   scripts/pg-test-server.sh pause DIR   stop the server, keep its data (an outage)
#   scripts/pg-test-server.sh resume DIR  start it again after pause
#
# The server runs as the `postgres` user (initdb refuses root), listens on NO TCP address
# (listen_addresses=''), only on a Unix socket in DIR readable by its owner (root can
# always connect; other users cannot), with `trust` authentication for that socket. It is
# started by pg_ctl directly: no system service, nothing left running after `stop`.
# fsync is off: the cluster is thrown away, and the store's crash tests kill the client,
# not the server. Needs Debian's `postgresql` package.
#
# CI:
#   url=$(scripts/pg-test-server.sh start /tmp/space-pg)
#   SPACE_TEST_PG="$url" build/san/tests/test_store_pg
#   scripts/pg-test-server.sh stop /tmp/space-pg
set -eu

usage() { echo "usage: $0 start|url|stop|pause|resume DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1
dir=$2
db=space_test
port=5432

bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$bindir" ] || [ ! -x "$bindir/pg_ctl" ]; then
    echo "pg-test-server: PostgreSQL server binaries not found (apt-get install postgresql)" >&2
    exit 1
fi

# Runs a server binary as postgres (from root) or as ourselves (already postgres).
as_pg() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

url() { echo "postgresql:///$db?host=$dir&port=$port&user=postgres"; }

serve() {
    as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-c listen_addresses='' -c unix_socket_directories='$dir' -c unix_socket_permissions=0700 -p $port -c fsync=off" \
        start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
}

case $cmd in
start)
    case $dir in /*) ;; *) echo "pg-test-server: DIR must be absolute" >&2; exit 2 ;; esac
    if [ -e "$dir/data/postmaster.pid" ]; then
        echo "pg-test-server: a server already runs in $dir" >&2
        exit 1
    fi
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
    as_pg "$bindir/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; exit 1; }
    serve
    # A locale-aware default collation (ICU en-US orders "sb_" < "sba" < "sbA"), so a
    # query whose order silently depends on the database's locale fails the tests.
    as_pg "$bindir/createdb" -h "$dir" -p "$port" -U postgres -T template0 \
        --locale-provider=icu --icu-locale=en-US "$db"
    url
    ;;
url)
    url
    ;;
stop)
    if [ -e "$dir/data/postmaster.pid" ]; then
        as_pg "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    fi
    rm -rf "$dir"
    ;;
pause)
    as_pg "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    ;;
resume)
    serve
    ;;
*)
    usage
    ;;
esac
