#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests and benchmarks: Debian's server,
# its own cluster in DIR, listening only on 127.0.0.1 on a free port, trust
# authentication, a database named `troupe`.
#
#   scripts/postgres.sh install          install Debian's server if initdb/pg_ctl are missing
#   scripts/postgres.sh start DIR        initdb DIR (once) and start; prints the URL
#   scripts/postgres.sh stop DIR         stop (fast: open sessions are ended)
#   scripts/postgres.sh url DIR          print the URL of the cluster in DIR
#   scripts/postgres.sh pause DIR        SIGSTOP the server and its backends (a frozen host)
#   scripts/postgres.sh resume DIR       SIGCONT them
#
# DIR is created if needed; a restart keeps the port, so the URL stays valid.
# PG_LISTEN=ADDR[,ADDR] makes `start` also listen there and trust clients on
# the subnets the server's host is on (meant for an address in a network
# namespace, as bench/transport.sh does); the printed URL stays 127.0.0.1.
# PostgreSQL refuses to run as root: as root the server runs as the
# `postgres` system user (created by Debian's package), which then owns DIR.
set -euo pipefail

die() { echo "postgres.sh: $*" >&2; exit 1; }

pg_bin() { # the directory holding initdb and pg_ctl, newest version first
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -rn); do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
    done
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(command -v pg_ctl)"; return 0
    fi
    return 1
}

install() {
    pg_bin >/dev/null && return 0
    [ "$(id -u)" = 0 ] || die "PostgreSQL's server is not installed and this is not root; run: sudo apt-get install -y postgresql"
    echo "postgres.sh: installing Debian's PostgreSQL server" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq postgresql >&2
    # The package starts a cluster of its own on port 5432; it is not ours to use.
    pg_bin >/dev/null || die "apt-get installed postgresql but no initdb/pg_ctl under /usr/lib/postgresql/*/bin"
}

# Runs a command as the server's user.
as_pg() {
    if [ "$(id -u)" = 0 ]; then
        id postgres >/dev/null 2>&1 || die "running as root needs the 'postgres' system user (apt-get install postgresql creates it)"
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

url_of() { echo "postgres://postgres@127.0.0.1:$(cat "$1/port")/troupe"; }

start() {
    local dir=$1
    install
    local bin; bin=$(pg_bin)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if [ "$(id -u)" = 0 ]; then
        chown postgres: "$dir"
        as_pg test -x "$dir" || die "the postgres user cannot reach $dir; use a directory under /tmp (mktemp -d)"
    fi
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 \
            || { cat "$dir/initdb.log" >&2; die "initdb failed"; }
        free_port >"$dir/port"
    fi
    local port; port=$(cat "$dir/port")
    if [ -n "${PG_LISTEN:-}" ] && ! grep -q '^host all all samenet trust' "$dir/data/pg_hba.conf"; then
        echo 'host all all samenet trust' | as_pg tee -a "$dir/data/pg_hba.conf" >/dev/null
    fi
    if ! as_pg "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
            -o "-c listen_addresses=127.0.0.1${PG_LISTEN:+,$PG_LISTEN} -p $port -c unix_socket_directories=$dir -c max_connections=200" \
            start >/dev/null \
            || { tail -n 20 "$dir/server.log" >&2; die "the server did not start (log: $dir/server.log)"; }
    fi
    if [ ! -f "$dir/created" ]; then
        as_pg "$bin/psql" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c 'CREATE DATABASE troupe' >/dev/null
        touch "$dir/created"
    fi
    url_of "$dir"
}

stop() {
    local dir=$1
    [ -f "$dir/data/PG_VERSION" ] || return 0
    local bin; bin=$(pg_bin) || return 0
    if as_pg "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null
    fi
}

# Signals the server and every process it started (one backend per
# connection): stopping only the postmaster would leave sessions answering.
signal_all() {
    local dir=$1 sig=$2 pid
    [ -f "$dir/data/postmaster.pid" ] || die "no server runs in $dir"
    pid=$(head -n 1 "$dir/data/postmaster.pid")
    kill "-$sig" "$pid"
    local proc stat fields
    for proc in /proc/[0-9]*; do
        stat=$(cat "$proc/stat" 2>/dev/null) || continue
        # "PID (COMM) STATE PPID ...": read past the command name.
        read -r -a fields <<<"${stat##*) }"
        [ "${fields[1]}" = "$pid" ] && kill "-$sig" "${proc#/proc/}" 2>/dev/null || true
    done
}

cmd=${1:-}
case "$cmd" in
    install) install ;;
    start) [ -n "${2:-}" ] || die "usage: $0 start DIR"; start "$2" ;;
    stop) [ -n "${2:-}" ] || die "usage: $0 stop DIR"; stop "$2" ;;
    pause) [ -n "${2:-}" ] || die "usage: $0 pause DIR"; signal_all "$2" STOP ;;
    resume) [ -n "${2:-}" ] || die "usage: $0 resume DIR"; signal_all "$2" CONT ;;
    url) [ -f "${2:-}/port" ] || die "usage: $0 url DIR (a DIR that '$0 start' set up)"; url_of "$2" ;;
    *) die "usage: $0 install | start DIR | stop DIR | pause DIR | resume DIR | url DIR" ;;
esac
