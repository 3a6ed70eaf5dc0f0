#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests, under target/pg (never a real database).
#   scripts/pg.sh start   initdb once, start the server on 127.0.0.1, print its URL on stdout
#   scripts/pg.sh url     print the URL of the running cluster
#   scripts/pg.sh stop    stop it (the data stays under target/pg until `cargo clean`)
# The server refuses to run as root, so as root it runs as the `postgres` user. Installs
# Debian's `postgresql` package when no server binary is found.
# PG_DIR=DIR puts the cluster elsewhere (a test's own cluster, which it may stop and start
# again: a restart keeps the port the cluster had).
# PG_TLS_DIR=DIR (with start) turns TLS on with DIR/server.crt and DIR/server.key (PEM; the
# certificate file may hold the chain) and accepts TCP connections over TLS only (`hostssl`
# in pg_hba.conf), for the TLS tests. The files are copied into the cluster, which keeps them.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${PG_DIR:-$PWD/target/pg}"
data="$dir/data"
port_file="$dir/port"
say() { echo "pg.sh: $*" >&2; }
die() { say "$*"; exit 1; }

bin_dir() {
    local found
    found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
    if [[ -z "$found" ]]; then
        command -v apt-get >/dev/null || die "no PostgreSQL server found and no apt-get to install one"
        say "installing Debian's postgresql package"
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
        found=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    fi
    echo "$found"
}

as_server() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

url() {
    [[ -f "$port_file" ]] || die "no cluster: run scripts/pg.sh start"
    echo "postgres://postgres@127.0.0.1:$(cat "$port_file")/postgres"
}

start() {
    local bin
    bin=$(bin_dir)
    mkdir -p "$dir"
    if [[ $(id -u) -eq 0 ]]; then
        chown postgres "$dir"
        chmod 755 "$dir"
    fi
    if [[ ! -f "$data/PG_VERSION" ]]; then
        say "initdb in $data"
        as_server "$bin/initdb" -D "$data" -A trust -U postgres --no-sync >/dev/null
    fi
    if as_server "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        url
        return
    fi
    local tls_options=""
    if [[ -n "${PG_TLS_DIR:-}" ]]; then
        tls_options=$(tls_setup "$PG_TLS_DIR")
    fi
    # The port of the last start if it is still free (a restart keeps its URL), else a new one.
    local port
    port=$(python3 -c '
import socket, sys
s = socket.socket()
# As the server binds it: connections of its last run still in TIME_WAIT do not block it.
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(open(sys.argv[1]).read())))
except Exception:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])' "$port_file")
    echo "$port" >"$port_file"
    say "starting on 127.0.0.1:$port"
    as_server "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $data -c fsync=off -c max_connections=300 $tls_options" start >&2 \
        || { cat "$data/server.log" >&2 || true; die "the server did not start"; }
    url
}

# Copies the server's certificate and key into the cluster (the key readable by the server's
# user only, as PostgreSQL insists), allows TCP over TLS only, and prints the server options.
tls_setup() {
    local from="$1"
    [[ -f "$from/server.crt" && -f "$from/server.key" ]] || die "PG_TLS_DIR=$from needs server.crt and server.key"
    local owner=()
    [[ $(id -u) -eq 0 ]] && owner=(-o postgres)
    install -m 644 "${owner[@]}" "$from/server.crt" "$data/server.crt"
    install -m 600 "${owner[@]}" "$from/server.key" "$data/server.key"
    cat >"$data/pg_hba.conf" <<'HBA'
# scripts/pg.sh with PG_TLS_DIR: TCP only over TLS; the Unix socket (pg_ctl's own checks) as is.
local   all all              trust
hostssl all all 127.0.0.1/32 trust
hostssl all all ::1/128      trust
HBA
    [[ $(id -u) -eq 0 ]] && chown postgres "$data/pg_hba.conf"
    echo "-c ssl=on -c ssl_cert_file=$data/server.crt -c ssl_key_file=$data/server.key"
}

stop() {
    local bin
    bin=$(bin_dir)
    if [[ -f "$data/PG_VERSION" ]]; then
        as_server "$bin/pg_ctl" -D "$data" -m fast -w stop >&2 || true
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    url) url ;;
    *) die "usage: scripts/pg.sh start|stop|url" ;;
esac
