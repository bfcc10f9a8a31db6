#!/usr/bin/env bash
# What forwarding costs in CPU (issue 15): two daemons on loopback, each with
# the Rust bench app; the client always talks to daemon A. Measures both
# daemons' CPU time together (utime + stime from /proc/PID/stat, over the
# timed phase only) per call for
#   local:     echo actors that A owns (A runs the turn; B idles)
#   forwarded: echo actors that B owns (A forwards each call to B and back)
# and prints both and their ratio; the goal is forwarded ≤ 1.3 × local.
#
# Starts its own PostgreSQL (scripts/postgres.sh, temp dir), one placement
# replica and the two daemons on ephemeral loopback ports; stops everything
# it started. Each run is bounded by CALLS and by 120 s.
#
#   bench/forward_cpu.sh [CALLS]        (default 20000 per case)
#   PAIRS=64 PAYLOAD=1024 ROUNDS=2 bench/forward_cpu.sh
#   TROUPE_DAEMON_ARGS="--peer-channels ..." bench/forward_cpu.sh   (both daemons get these flags)
set -euo pipefail
cd "$(dirname "$0")/.."
calls=${1:-20000}
PAIRS=${PAIRS:-64}
PAYLOAD=${PAYLOAD:-1024}
ROUNDS=${ROUNDS:-2}
target=${CARGO_TARGET_DIR:-$PWD/target}
bin="$target/release"
nice -n 19 cargo build --release -q -p troupe -p troupe-tests \
    --bin troupe --bin bench_app --bin transport_load

work=$(mktemp -d)
chmod 755 "$work" # the postgres user reaches its dir below it
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    scripts/postgres.sh stop "$work/pg" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

wait_for() { # file pattern what
    for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    echo "$3 did not start; its log:" >&2; tail -n 30 "$1" "${1%.out}.err" >&2 2>/dev/null; return 1
}
announced() { sed -n "s/^$2 listening on //p" "$1"; }

echo "starting PostgreSQL, placement and two daemons on loopback" >&2
pg_url=$(scripts/postgres.sh start "$work/pg")
"$bin/troupe" placement serve --id 1 --listen 127.0.0.1:0 --data-dir "$work/placement" --lease 10s \
    >"$work/placement.out" 2>"$work/placement.err" &
pids+=($!)
wait_for "$work/placement.out" "listening on" "the placement replica"
placement=$(announced "$work/placement.out" "troupe placement")

declare -A addr=() daemon=()
for node in a b; do
    # shellcheck disable=SC2086 # word splitting of the extra args is wanted
    "$bin/troupe" serve --listen 127.0.0.1:0 --node "$node" --placement "$placement" --store "$pg_url" \
        --data-dir "$work/data-$node" ${TROUPE_DAEMON_ARGS:-} >"$work/$node.out" 2>"$work/$node.err" &
    daemon[$node]=$!
    pids+=($!)
    wait_for "$work/$node.out" "listening on" "daemon $node"
    addr[$node]=$(announced "$work/$node.out" troupe)
    "$bin/bench_app" "${addr[$node]}" >"$work/$node-app.out" 2>"$work/$node-app.err" &
    pids+=($!)
    wait_for "$work/$node-app.out" registered "the bench app on $node"
done
"$bin/transport_load" wait --placement "$placement" --daemons "${addr[a]},${addr[b]}" --type echo >/dev/null

run() { # case round
    echo "== $1 (round $2): $calls calls, $PAIRS callers, $PAYLOAD-byte echo, all through daemon A" >&2
    local owner=${addr[a]}
    [ "$1" = forwarded ] && owner=${addr[b]}
    timeout --foreground 300 "$bin/transport_load" run --via "${addr[a]}" --owner "$owner" --pairs "$PAIRS" \
        --payload "$PAYLOAD" --messages "$calls" --seconds 120 --call-timeout 30 \
        --cpu-pids "${daemon[a]},${daemon[b]}" | sed "s/^{/{\"case\":\"$1\",/" >>"$work/results.jsonl"
}
for round in $(seq "$ROUNDS"); do
    run local "$round"
    run forwarded "$round"
done

python3 - "$work/results.jsonl" <<'PY'
import json, os, sys
ticks = os.sysconf("SC_CLK_TCK")
rows = [json.loads(l) for l in open(sys.argv[1])]
print()
print("Daemons' combined CPU per call (A + B, utime + stime), calls through daemon A on loopback")
print(f"{'case':<10} {'calls':>7} {'errors':>6} {'calls/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'CPU us/call':>11}")
per = {"local": [0, 0], "forwarded": [0, 0]}
for r in rows:
    secs = r["elapsed_s"] or 1e-9
    us = r["cpu_ticks"] / ticks * 1e6 / max(r["ok"], 1)
    per[r["case"]][0] += r["cpu_ticks"]
    per[r["case"]][1] += r["ok"]
    print(f"{r['case']:<10} {r['ok']:>7} {r['errors']:>6} {r['ok'] / secs:>8.0f} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} {us:>11.1f}")
local, fwd = (per[c][0] / ticks * 1e6 / max(per[c][1], 1) for c in ("local", "forwarded"))
ratio = fwd / local if local else float("inf")
print(f"all rounds: local {local:.1f} us/call, forwarded {fwd:.1f} us/call: forwarded = {ratio:.2f}x local "
      f"(goal ≤ 1.3x: {'MET' if ratio <= 1.3 else 'MISSED'})")
print(f"CPU is counted in clock ticks ({1e3 / ticks:.0f} ms each) over the timed phase of each run.")
PY
