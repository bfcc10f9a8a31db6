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
#   TROUPE="/tmp/old/troupe target/release/troupe" bench/forward_cpu.sh
#       (several daemon builds, e.g. before and after a change: each round runs
#       every build in turn, so a noisy machine moves them alike; one row each)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/wait_started.sh
calls=${1:-20000}
PAIRS=${PAIRS:-64}
PAYLOAD=${PAYLOAD:-1024}
ROUNDS=${ROUNDS:-2}
target=${CARGO_TARGET_DIR:-$PWD/target}
bin="$target/release"
nice -n 19 cargo build --release -q -p troupe -p troupe-tests \
    --bin troupe --bin bench_app --bin transport_load
read -r -a builds <<<"${TROUPE:-$bin/troupe}"
for build in "${builds[@]}"; do
    [ -x "$build" ] || { echo "TROUPE: $build is not an executable" >&2; exit 2; }
done

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

echo "starting PostgreSQL and placement on loopback" >&2
pg_url=$(scripts/postgres.sh start "$work/pg")
"${builds[0]}" placement serve --id 1 --listen 127.0.0.1:0 --data-dir "$work/placement" --lease 10s \
    >"$work/placement.out" 2>"$work/placement.err" &
pids+=($!)
wait_for "$work/placement.out" "listening on" "the placement replica"
placement=$(announced "$work/placement.out" "troupe placement")

# Two daemons of one build, each with its bench app; a fresh pair (new node
# names) for each build and round.
declare -A addr=() daemon=()
gen=0
start_pair() { # build
    gen=$((gen + 1))
    local node name
    for node in a b; do
        name="$node$gen"
        # shellcheck disable=SC2086 # word splitting of the extra args is wanted
        "$1" serve --listen 127.0.0.1:0 --node "$name" --placement "$placement" --store "$pg_url" \
            --data-dir "$work/data-$name" ${TROUPE_DAEMON_ARGS:-} >"$work/$name.out" 2>"$work/$name.err" &
        daemon[$node]=$!
        pids+=($!)
        wait_for "$work/$name.out" "listening on" "daemon $name"
        addr[$node]=$(announced "$work/$name.out" troupe)
        "$bin/bench_app" "${addr[$node]}" >"$work/$name-app.out" 2>"$work/$name-app.err" &
        app[$node]=$!
        pids+=($!)
        wait_for "$work/$name-app.out" registered "the bench app on $name"
    done
    "$bin/transport_load" wait --placement "$placement" --daemons "${addr[a]},${addr[b]}" --type echo >/dev/null
}
declare -A app=()
stop_pair() { # SIGTERM hands the actors off; the next pair takes them from the store
    local p
    for p in "${app[a]}" "${app[b]}" "${daemon[a]}" "${daemon[b]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${app[a]}" "${app[b]}" "${daemon[a]}" "${daemon[b]}"; do wait "$p" 2>/dev/null || true; done
}

run() { # build case round
    echo "== $(basename "$1") $2 (round $3): $calls calls, $PAIRS callers, $PAYLOAD-byte echo, all through daemon A" >&2
    local owner=${addr[a]}
    [ "$2" = forwarded ] && owner=${addr[b]}
    timeout --foreground 300 "$bin/transport_load" run --via "${addr[a]}" --owner "$owner" --pairs "$PAIRS" \
        --payload "$PAYLOAD" --messages "$calls" --seconds 120 --call-timeout 30 \
        --cpu-pids "${daemon[a]},${daemon[b]}" \
        | sed "s|^{|{\"build\":\"$1\",\"case\":\"$2\",|" >>"$work/results.jsonl"
}
for round in $(seq "$ROUNDS"); do
    for build in "${builds[@]}"; do
        start_pair "$build"
        run "$build" local "$round"
        run "$build" forwarded "$round"
        stop_pair
    done
done

# Which kind of host made the table: forwarding adds wake-ups across
# processes, whose cost depends on the host (bench/python/wake_cost.py).
python3 bench/python/wake_cost.py --round-trips 5000 || true
python3 - "$work/results.jsonl" <<'PY'
import json, os, sys
ticks = os.sysconf("SC_CLK_TCK")
rows = [json.loads(l) for l in open(sys.argv[1])]
builds = list(dict.fromkeys(r["build"] for r in rows))
print()
print("Daemons' combined CPU per call (A + B, utime + stime), calls through daemon A on loopback")
print(f"{'build':<24} {'case':<10} {'calls':>7} {'errors':>6} {'calls/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'CPU us/call':>11}")
per = {(b, c): [0, 0] for b in builds for c in ("local", "forwarded")}
for r in rows:
    secs = r["elapsed_s"] or 1e-9
    us = r["cpu_ticks"] / ticks * 1e6 / max(r["ok"], 1)
    per[(r["build"], r["case"])][0] += r["cpu_ticks"]
    per[(r["build"], r["case"])][1] += r["ok"]
    print(f"{r['build'][-24:]:<24} {r['case']:<10} {r['ok']:>7} {r['errors']:>6} {r['ok'] / secs:>8.0f} "
          f"{r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} {us:>11.1f}")
def us(b, c):
    t, n = per[(b, c)]
    return t / ticks * 1e6 / max(n, 1)
first = builds[0]
for b in builds:
    local, fwd = us(b, "local"), us(b, "forwarded")
    ratio = fwd / local if local else float("inf")
    vs = "" if b == first else (f"; against {first}: local {local / us(first, 'local'):.2f}x,"
                                f" forwarded {fwd / us(first, 'forwarded'):.2f}x")
    print(f"{b}, all rounds: local {local:.1f} us/call, forwarded {fwd:.1f} us/call: forwarded = {ratio:.2f}x"
          f" local (goal ≤ 1.3x: {'MET' if ratio <= 1.3 else 'MISSED'}){vs}")
print(f"CPU is counted in clock ticks ({1e3 / ticks:.0f} ms each) over the timed phase of each run.")
PY
