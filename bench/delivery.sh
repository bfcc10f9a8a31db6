#!/usr/bin/env bash
# Delivery benchmark: durable tells and keyed invokes beside plain ones, on
# sled and on PostgreSQL: ghz -c 64 over 1000 counter actors (each call one
# state update), a release daemon and the Rust bench app.
#
# Per case: acknowledged messages/s, latency, and storage writes per
# message from the daemon's flush log (one "flushed state batch" line per
# StateStore::write_batch, its `keys` = state keys + inbox ops + call
# records written). For tells, acknowledgement is not delivery: after the
# run the script waits for the flush log to go quiet (every stored tell
# delivered and its removal written) and reports that drain time and the
# rate counted to the end of it.
#
# Anchor: write-behind invoke (plain) on the same store; Restate's durable
# rate from ../shared/PRODUCT.md (520–730 req/s at 64 concurrent callers on
# this machine class; ~250 sequential).
#
#   bench/delivery.sh [SECONDS_PER_RUN]   (default 10; each run is killed at +60 s)
#   BACKENDS=postgres bench/delivery.sh   (one store only; default: sled postgres)
#   daemon_bin=/tmp/troupe-old bench/delivery.sh   (another build of the daemon)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
backends=${BACKENDS:-sled postgres}
source bench/store_bench_setup.sh

# case: name rpc type extra-json
cases=(
    "invoke_plain Invoke counter "
    "invoke_keyed Invoke counter ,\"idempotency_key\":\"{{newUUID}}\""
    "invoke_durable_keyed Invoke counter_durable ,\"idempotency_key\":\"{{newUUID}}\""
    "tell_best_effort Tell counter ,\"delivery\":\"DELIVERY_BEST_EFFORT\""
    "tell_durable Tell counter ,\"delivery\":\"DELIVERY_DURABLE\""
    "tell_durable_keyed Tell counter ,\"delivery\":\"DELIVERY_DURABLE\",\"idempotency_key\":\"{{newUUID}}\""
)

run_case() { # backend name rpc type extra
    local backend=$1 name=$2 rpc=$3 type=$4 extra=$5 case="$1-$2"
    echo "== $backend / $name: ${secs}s of ghz -c 64 over 1000 actors" >&2
    local addr daemon app
    start_case "$backend" "bench_${name}" "$case"

    local actor="{\"type\":\"$type\",\"id\":\"a{{randomInt 0 1000}}\"}"
    local data="{\"actor\":$actor,\"method\":\"incr\",\"payload\":{\"data\":\"e30=\"}$extra}"
    # Warm up with plain invokes: every actor active, its state loaded.
    local warm="{\"actor\":$actor,\"method\":\"incr\",\"payload\":{\"data\":\"e30=\"}}"
    timeout 120 "$tools/ghz" --insecure --call troupe.v1.ActorClient.Invoke -c 64 -n 3000 \
        -d "$warm" "$addr" >/dev/null
    sleep 1.5   # the warm-up's last flush, so it is not counted below
    cp "$work/$case.err" "$work/$case.before"
    local t0; t0=$(date +%s.%N)
    timeout $((secs + 60)) "$tools/ghz" --insecure --call "troupe.v1.ActorClient.$rpc" -c 64 \
        -z "${secs}s" -d "$data" -O json "$addr" >"$work/$case.json"
    local t1; t1=$(date +%s.%N)
    # Drained: no new flush for two intervals (stored tells all delivered,
    # their removals written). Bounded.
    local last; last=$(flush_stats "$work/$case.err")
    for _ in $(seq 60); do
        sleep 2
        local now; now=$(flush_stats "$work/$case.err")
        [ "$now" = "$last" ] && break
        last=$now
    done
    local t2; t2=$(date +%s.%N)
    cp "$work/$case.err" "$work/$case.after"
    read -r b0 k0 < <(flush_stats "$work/$case.before")
    read -r b1 k1 < <(flush_stats "$work/$case.after")
    echo "$backend $name $((b1 - b0)) $((k1 - k0)) $t0 $t1 $t2" >"$work/$case.stats"
    kill "$app" "$daemon" 2>/dev/null || true
    wait "$app" "$daemon" 2>/dev/null || true
}

for backend in $backends; do
    for c in "${cases[@]}"; do
        read -r name rpc type extra <<<"$c"
        run_case "$backend" "$name" "$rpc" "$type" "${extra:-}"
    done
done

python3 - "$work" "$backends" "${cases[@]%% *}" <<'PY'
import json, sys
work, backends, names = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
RESTATE = (520, 730)  # ../shared/PRODUCT.md: durable, 64 concurrent
print()
print("Delivery benchmark: ghz -c 64 over 1000 counter actors, every message one state update; flush 1 s")
print(f"{'store':<9} {'case':<21} {'acked':>7} {'errors':>6} {'acked/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
      f"{'drain s':>7} {'to drained/s':>12} {'writes/msg':>10} {'keys/msg':>8} {'vs anchor':>9}")
rows = {}
for backend in backends:
    for name in names:
        case = f"{backend}-{name}"
        r = json.load(open(f"{work}/{case}.json"))
        _, _, batches, keys, t0, t1, t2 = open(f"{work}/{case}.stats").read().split()
        dist = r.get("statusCodeDistribution") or {}
        ok = dist.get("OK", 0)
        errors = sum(v for k, v in dist.items() if k != "OK")
        secs = r["total"] / 1e9
        lat = {d["percentage"]: d["latency"] / 1e6 for d in r.get("latencyDistribution") or []}
        drain = max(float(t2) - float(t1) - 4.0, 0.0)  # minus the two quiet intervals
        rows[(backend, name)] = x = dict(
            ok=ok, errors=errors, rate=ok / secs, p50=lat.get(50, 0), p99=lat.get(99, 0),
            drain=drain, drained_rate=ok / (secs + drain),
            per_msg=int(batches) / max(ok, 1), keys_per_msg=int(keys) / max(ok, 1))
for (backend, name), x in rows.items():
    anchor = rows[(backend, "invoke_plain")]["rate"]
    print(f"{backend:<9} {name:<21} {x['ok']:>7} {x['errors']:>6} {x['rate']:>8.0f} {x['p50']:>7.2f} "
          f"{x['p99']:>7.2f} {x['drain']:>7.1f} {x['drained_rate']:>12.0f} {x['per_msg']:>10.4f} "
          f"{x['keys_per_msg']:>8.3f} {x['rate'] / max(anchor, 1e-9):>8.2f}x")
print()
print("Goals (issue 19): durable tell >= 50% of the write-behind invoke rate; >= 10x Restate's durable rate")
for backend in backends:
    anchor = rows[(backend, "invoke_plain")]["rate"]
    for name in ("tell_durable", "tell_durable_keyed"):
        x = rows[(backend, name)]
        half = x["drained_rate"] / max(anchor, 1e-9)
        vs = x["drained_rate"] / RESTATE[1]
        print(f"  {backend:<9} {name:<19} {x['drained_rate']:>7.0f}/s delivered = {half:.2f}x write-behind invoke "
              f"{'MET' if half >= 0.5 else 'MISSED'}; {vs:.1f}x Restate's best ({RESTATE[1]}/s) "
              f"{'MET' if vs >= 10 else 'MISSED'}")
PY
