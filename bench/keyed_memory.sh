#!/usr/bin/env bash
# The daemon's memory under keyed calls on sled, optionally inside a memory
# cgroup (a container's limit): ghz -c 64 with a fresh UUID key per call to
# 2,000 counter actors, ROUNDS rounds of 100,000 calls. After each round it
# prints the daemon's RSS, the size of its store on disk, the cgroup's peak usage, what the idempotency
# records' bound holds (troupe_call_records_memory_bytes) and the round's
# calls/s and outcomes, the cgroup's page cache and how many file pages it
# read again after evicting them in the round ("refaults": sled's files
# squeezed out of the cache), and whether the daemon is shedding load (refusing
# new calls near its limit, --memory-shed-percent); it stops when the daemon
# is gone (killed for memory).
# Every record stays in the store for the retention window (24 h), so this
# shows what a window's records cost in memory (docs/delivery.md).
#
#   bench/keyed_memory.sh                     (no limit, 8 rounds)
#   LIMIT_MB=256 ROUNDS=12 bench/keyed_memory.sh   (root: a cgroup of its own)
#   TROUPE=/tmp/troupe-old TROUPE_DAEMON_ARGS="--sled-cache-bytes 16777216" bench/keyed_memory.sh
#   RATE=2000 KEY_RETENTION_MS=70000 LIMIT_MB=192 ROUNDS=6 bench/keyed_memory.sh
#       (ghz at 2,000 calls/s, each call asking the daemon to keep its answer 70 s, as
#       the SDKs ask for the keys they make: key_retention_ms in client.proto; RATE
#       holds the Python client too, which asks for that itself)
#   CLIENT=python LIMIT_MB=256 bench/keyed_memory.sh   (the same calls through the Python
#       SDK, bench/python/keyed_rounds.py, which resends refusals marked with a retry
#       pushback; CLIENT=python-once sends each call once; PYTHON: the interpreter with
#       the SDK installed, default .venv/bin/python as scripts/test sets it up)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/wait_started.sh
source bench/ghz_tool.sh
cargo build --release -q -p troupe -p troupe-tests --bin troupe --bin bench_app
daemon_bin=${TROUPE:-target/release/troupe}
rounds=${ROUNDS:-8}
client=${CLIENT:-ghz}
case $client in
ghz | python | python-once) ;;
*) echo "CLIENT=$client: use ghz, python or python-once" >&2; exit 2 ;;
esac
python=${PYTHON:-.venv/bin/python}

work=$(mktemp -d)
group=""
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    # The cgroup empties once its process is gone.
    if [ -n "$group" ]; then
        for _ in $(seq 50); do rmdir "$group" 2>/dev/null && break; sleep 0.1; done
    fi
    # KEEP_LOG=FILE keeps the daemon's log (when it started shedding, what it gave back).
    [ -n "${KEEP_LOG:-}" ] && cp "$work/daemon.err" "$KEEP_LOG" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

launch=()
if [ -n "${LIMIT_MB:-}" ]; then
    if [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
        group=/sys/fs/cgroup/memory/troupe-bench-$$
        mkdir "$group"
        echo $((LIMIT_MB << 20)) >"$group/memory.limit_in_bytes"
    else
        group=/sys/fs/cgroup/troupe-bench-$$
        mkdir "$group"
        echo $((LIMIT_MB << 20)) >"$group/memory.max"
    fi
    launch=(sh -c 'echo $$ > "$0" && exec "$@"' "$group/cgroup.procs")
fi
# shellcheck disable=SC2086
"${launch[@]}" "$daemon_bin" serve --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
    --data-dir "$work/data" ${TROUPE_DAEMON_ARGS:-} >"$work/daemon.out" 2>"$work/daemon.err" &
daemon=$!
pids+=("$daemon")
wait_for "$work/daemon.out" "listening on" "the daemon"
addr=$(announced "$work/daemon.out" troupe)
metrics=$(sed -n 's/.*metrics listening addr=\([0-9.:]*\).*/\1/p' "$work/daemon.err" | head -1)
target/release/bench_app "$addr" >"$work/app.out" 2>"$work/app.err" &
pids+=($!)
wait_for "$work/app.out" registered "the bench app"

echo "daemon: $daemon_bin ${TROUPE_DAEMON_ARGS:-}; limit: ${LIMIT_MB:-none} MiB; client: $client"
grep -o "memory_limit=[^ ]* sled_cache_bytes=[^ ]* idempotency_memory_bytes=[^ ]*\( memory_shed_percent=[^ ]*\)\?" \
    "$work/daemon.err" || echo "(the start line names no memory bounds: an older build)"
printf '%-8s %-9s %-9s %-11s %-9s %-9s %-11s %-6s %-9s %s\n' calls "RSS MB" "store MB" \
    "cgroup MB" "cache MB" refaults "bound MB" shed calls/s outcome
stat_of() { # FIELD: its value in the cgroup's memory.stat (v1 or v2 name), or nothing
    [ -n "$group" ] || return 0
    awk -v f="$1" '$1 == f || $1 == "total_" f {v = $2} END {if (v != "") print v}' \
        "$group/memory.stat" 2>/dev/null || true
}
refaulted=$(stat_of workingset_refault_file)
keep=""
[ -n "${KEY_RETENTION_MS:-}" ] && keep=",\"key_retention_ms\":\"$KEY_RETENTION_MS\""
request='{"actor":{"type":"counter","id":"k{{randomInt 0 2000}}"},"method":"m","idempotency_key":"{{newUUID}}"'$keep'}'
rate_limit=()
[ -n "${RATE:-}" ] && rate_limit=(-r "$RATE")
for round in $(seq "$rounds"); do
    if ! kill -0 "$daemon" 2>/dev/null; then
        echo "the daemon is gone after $(((round - 1) * 100))k calls (killed for memory?)"
        break
    fi
    if [ "$client" = ghz ]; then
        timeout 150 "$tools/ghz" --insecure --call troupe.v1.ActorClient.Invoke -c 64 -n 100000 \
            "${rate_limit[@]}" -d "$request" "$addr" >"$work/ghz.out" 2>&1 || true
        rate=$(awk '/Requests\/sec/ {printf "%d", $2}' "$work/ghz.out")
        outcome=$(awk '/\[OK\]/ {printf "%s ok ", $2} /\[(Unavailable|DeadlineExceeded|Canceled|ResourceExhausted)\]/ {printf "%s %s ", $2, $1}' "$work/ghz.out")
    else
        client_args=()
        [ "$client" = python-once ] && client_args=(--no-retry)
        [ -n "${RATE:-}" ] && client_args+=(--rate "$RATE")
        # One line: calls/s, p99 ms of the answered calls, then "N outcome" pairs.
        read -r rate p99 ended < <(timeout 200 "$python" bench/python/keyed_rounds.py "$addr" \
            "${client_args[@]}" --max-seconds 150 2>"$work/client.err" || true) || true
        outcome="${ended:-} (p99 ${p99:-?} ms)"
        [ -n "${rate:-}" ] || outcome="the client failed: $(tail -n 1 "$work/client.err")"
    fi
    rss=$(awk '/VmRSS/ {printf "%d", $2 / 1024}' "/proc/$daemon/status" 2>/dev/null || echo -)
    store=$(du -sm "$work/data" 2>/dev/null | cut -f1)
    peak=-
    [ -n "$group" ] && [ -f "$group/memory.max_usage_in_bytes" ] &&
        peak=$(($(cat "$group/memory.max_usage_in_bytes") >> 20))
    [ -n "$group" ] && [ -f "$group/memory.peak" ] && peak=$(($(cat "$group/memory.peak") >> 20))
    # Under the limit the kernel takes page cache first: sled's files are read
    # again from disk (refaults), which is why shedding starts with room left.
    cache=$(stat_of cache)
    [ -z "$cache" ] && cache=$(stat_of file)
    [ -n "$cache" ] && cache=$((cache >> 20))
    now=$(stat_of workingset_refault_file)
    refaults=-
    [ -n "$now" ] && [ -n "$refaulted" ] && refaults=$((now - refaulted)) && refaulted=$now
    scraped=$(curl -s "$metrics/metrics" 2>/dev/null || true)
    held=$(awk '/^troupe_call_records_memory_bytes/ {printf "%.1f", $2 / 1048576}' <<<"$scraped")
    shed=$(awk '/^troupe_memory_shedding / {print ($2 == 1 ? "yes" : "no")}' <<<"$scraped")
    printf '%-8s %-9s %-9s %-11s %-9s %-9s %-11s %-6s %-9s %s\n' "$((round * 100))k" "$rss" "${store:--}" "$peak" \
        "${cache:--}" "$refaults" "${held:--}" \
        "${shed:--}" "${rate:--}" "${outcome:-none answered within 150 s}"
done
