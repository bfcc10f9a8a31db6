#!/usr/bin/env bash
# Invoke throughput through the sidecar with ghz: 64 concurrent callers over
# 1000 actors, a stateless and a stateful method, against Dapr's anchors
# (PRODUCT.md). Starts its own release daemon on an ephemeral loopback port
# with a temp data dir and a Rust app host; stops everything it started.
#
#   bench/ghz.sh [CALLS_PER_SCENARIO]      (default 100000; each run is also cut at 120 s)
#   TROUPE_DAEMON_ARGS="--metrics-listen 127.0.0.1:0" bench/ghz.sh   (measure a daemon option's cost)
#   TOKENS=1 bench/ghz.sh   (the daemon requires the API and app tokens; ghz and the app send them)
set -euo pipefail
cd "$(dirname "$0")/.."
calls=${1:-100000}
tools="$PWD/target/bench-tools"
mkdir -p "$tools"
if [ ! -x "$tools/ghz" ]; then
    echo "installing ghz (Go module) into $tools" >&2
    GOBIN="$tools" go install github.com/bojand/ghz/cmd/ghz@v0.120.0
fi
cargo build --release -q -p troupe -p troupe-tests --bin troupe --bin bench_app

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

ghz_auth=()
if [ "${TOKENS:-0}" = 1 ]; then
    TROUPE_API_TOKEN="bench-api-$RANDOM$RANDOM" TROUPE_APP_TOKEN="bench-app-$RANDOM$RANDOM"
    export TROUPE_API_TOKEN TROUPE_APP_TOKEN
    auth="{\"authorization\":\"Bearer $TROUPE_API_TOKEN\"}"
    # ghz learns the API by reflection, which wants the token too.
    ghz_auth=(-m "$auth" --reflect-metadata "$auth")
fi
# shellcheck disable=SC2086 # word splitting of the extra args is wanted
./target/release/troupe serve --listen 127.0.0.1:0 --data-dir "$work/data" ${TROUPE_DAEMON_ARGS:-} \
    >"$work/daemon.out" 2>"$work/daemon.err" &
pids+=($!)
for _ in $(seq 100); do grep -q "listening on" "$work/daemon.out" 2>/dev/null && break; sleep 0.1; done
addr=$(sed -n 's/^troupe listening on //p' "$work/daemon.out")
[ -n "$addr" ] || { echo "daemon did not start:" >&2; cat "$work/daemon.err" >&2; exit 1; }

./target/release/bench_app "$addr" >"$work/app.out" 2>"$work/app.err" &
pids+=($!)
for _ in $(seq 100); do grep -q registered "$work/app.out" 2>/dev/null && break; sleep 0.1; done
grep -q registered "$work/app.out" || { echo "bench app did not register" >&2; cat "$work/app.err" >&2; exit 1; }

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run() { # type -> json report, plus the daemon's CPU ticks spent on it
    local before; before=$(cpu_ticks "${pids[0]}")
    # Bounded by count; `timeout` bounds it in time too. ghz's default of one
    # connection, as in the anchor's `ghz -c 64`.
    timeout 120 "$tools/ghz" --insecure --call troupe.v1.ActorClient.Invoke -c 64 -n "$calls" "${ghz_auth[@]}" \
        -d "{\"actor\":{\"type\":\"$1\",\"id\":\"a{{randomInt 0 1000}}\"},\"method\":\"m\",\"payload\":{\"data\":\"e30=\"}}" \
        -O json "$addr" >"$work/$1.json"
    echo $(( $(cpu_ticks "${pids[0]}") - before )) >"$work/$1.cpu"
}
# Warm up: activate the 1000 actors of each type.
"$tools/ghz" --insecure --call troupe.v1.ActorClient.Invoke -c 16 -n 4000 "${ghz_auth[@]}" \
    -d '{"actor":{"type":"echo","id":"a{{randomInt 0 1000}}"},"method":"m"}' "$addr" >/dev/null
run echo
run counter
rss_kb=$(ps -o rss= -p "${pids[0]}" | tr -d ' ')

python3 - "$work" "$rss_kb" <<'PY'
import json, os, sys
work, rss_kb = sys.argv[1], int(sys.argv[2])
anchors = {"echo": (8730, 6.2, 18.7), "counter": (3222, 18.8, 40.3)}
names = {"echo": "stateless (echo)", "counter": "stateful (counter)"}
print()
print("ghz -c 64 over 1000 actors, Invoke through the daemon to a Rust app host")
ticks = os.sysconf("SC_CLK_TCK")
print(f"{'scenario':<20} {'calls':>8} {'errors':>7} {'calls/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'daemon CPU us/call':>18} {'Dapr calls/s':>12} {'ratio':>6}")
for t in ("echo", "counter"):
    r = json.load(open(f"{work}/{t}.json"))
    lat = {d["percentage"]: d["latency"] / 1e6 for d in r.get("latencyDistribution") or []}
    errors = sum(v for k, v in (r.get("statusCodeDistribution") or {}).items() if k != "OK")
    rps = r["rps"]
    a = anchors[t]
    cpu_us = int(open(f"{work}/{t}.cpu").read()) / ticks * 1e6 / max(r["count"], 1)
    print(f"{names[t]:<20} {r['count']:>8} {errors:>7} {rps:>9.0f} {lat.get(50, 0):>7.2f} {lat.get(99, 0):>7.2f} {cpu_us:>18.1f} {a[0]:>12} {rps / a[0]:>5.2f}x")
print(f"Dapr anchors: stateless p50 6.2 ms / p99 18.7 ms; stateful p50 18.8 ms / p99 40.3 ms")
print(f"daemon RSS after load: {rss_kb / 1024:.0f} MB (Dapr daprd: 111 MB)")
print("On 2 cores ghz itself needs about one core at these rates; the daemon's CPU per call")
print("is the figure that does not depend on the load generator.")
PY
