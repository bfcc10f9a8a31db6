# Sourced by bench/state.sh and bench/delivery.sh (not run by itself): ghz,
# the release daemon and bench app, a PostgreSQL of the run's own in a temp
# dir, cleanup of everything started, and the flush-log counter both read
# storage writes from. Expects to be sourced from the repository root.

source bench/wait_started.sh
source bench/ghz_tool.sh
cargo build --release -q -p troupe -p troupe-tests --bin troupe --bin bench_app

work=$(mktemp -d)
pgdir=$(mktemp -d)   # its own: the server's user must own it
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    scripts/postgres.sh stop "$pgdir" || true
    rm -rf "$work" "$pgdir"
}
trap cleanup EXIT

echo "starting PostgreSQL" >&2
pg_url=$(scripts/postgres.sh start "$pgdir")
pg_base=${pg_url%/*}

# "batches keys" flushed so far in a daemon log: one "flushed state batch"
# line per StateStore::write_batch, with the keys it wrote.
flush_stats() {
    python3 - "$1" <<'PY'
import re, sys
batches = keys = 0
for line in open(sys.argv[1], errors="replace"):
    line = re.sub(r"\x1b\[[0-9;]*m", "", line)
    if "flushed state batch" in line:
        batches += 1
        m = re.search(r"\bkeys=(\d+)", line)
        keys += int(m.group(1)) if m else 0
print(batches, keys)
PY
}

# Starts a release daemon for one case on BACKEND (sled, or a fresh
# PostgreSQL database DB), with the flush log on and EXTRA flags, and the
# bench app on it; sets `addr`, `daemon` and `app`. $daemon_bin, when set,
# is the daemon to run (another build, to compare builds in one run).
start_case() { # backend db case extra-flags...
    local backend=$1 db=$2 case=$3
    shift 3
    local args=(--listen 127.0.0.1:0 --data-dir "$work/$case-data" --flush-interval 1s "$@")
    if [ "$backend" = postgres ]; then
        # $keep_db set: DB exists already (a daemon restarted on it).
        [ -n "${keep_db:-}" ] || psql -q "$pg_url" -c "CREATE DATABASE $db" >/dev/null
        args+=(--store "$pg_base/$db")
    else
        args+=(--store sled)
    fi
    RUST_LOG=info,troupe_runtime::flush=debug "${daemon_bin:-./target/release/troupe}" serve "${args[@]}" \
        >"$work/$case.out" 2>"$work/$case.err" &
    daemon=$!
    pids+=("$daemon")
    wait_for "$work/$case.out" "listening on" "the daemon"
    addr=$(announced "$work/$case.out" troupe)
    ./target/release/bench_app "$addr" >"$work/$case-app.out" 2>"$work/$case-app.err" &
    app=$!
    pids+=("$app")
    wait_for "$work/$case-app.out" registered "the bench app"
}
