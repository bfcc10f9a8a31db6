#!/usr/bin/env bash
# State benchmark: state updates/s and storage writes/s on sled and on
# PostgreSQL, for write-behind, durable (group commit) and the write-through
# baseline (each turn's changes written alone before its reply), under a hot
# workload: ghz -c 64 over 1000 counter actors, every call one state update.
#
# Storage writes are counted from the daemon's own flush log
# (RUST_LOG=troupe_runtime::flush=debug: one "flushed state batch" line per
# store write, with its key count), over the measured run only. A "batch" is
# one StateStore::write_batch: one sled apply+fsync, one PostgreSQL
# statement/transaction (one round trip); "keys" are the rows/keys it wrote.
#
# Starts its own release daemon per case on an ephemeral loopback port, a
# Rust app host, and its own PostgreSQL (scripts/postgres.sh, temp dir);
# stops everything it started.
#
#   bench/state.sh [SECONDS_PER_RUN]   (default 10; each run is also killed at +60 s)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
source bench/store_bench_setup.sh

run_case() { # backend mode
    local backend=$1 mode=$2 case="$1-$2"
    local type=counter flags=()
    case "$mode" in
        durable) type=counter_durable ;;
        write_through) flags+=(--write-through) ;;
    esac
    echo "== $backend / $mode: ${secs}s of ghz -c 64 over 1000 actors" >&2
    local addr daemon app
    start_case "$backend" "bench_${mode}" "$case" "${flags[@]}"

    local data="{\"actor\":{\"type\":\"$type\",\"id\":\"a{{randomInt 0 1000}}\"},\"method\":\"incr\",\"payload\":{\"data\":\"e30=\"}}"
    # Warm up: activate (nearly) all 1000 actors, load their state.
    timeout 120 "$tools/ghz" --insecure --call troupe.v1.ActorClient.Invoke -c 64 -n 3000 \
        -d "$data" "$addr" >/dev/null
    cp "$work/$case.err" "$work/$case.before"
    timeout $((secs + 60)) "$tools/ghz" --insecure --call troupe.v1.ActorClient.Invoke -c 64 -z "${secs}s" \
        -d "$data" -O json "$addr" >"$work/$case.json"
    cp "$work/$case.err" "$work/$case.after"
    read -r b0 k0 < <(flush_stats "$work/$case.before")
    read -r b1 k1 < <(flush_stats "$work/$case.after")
    echo "$backend $mode $((b1 - b0)) $((k1 - k0))" >"$work/$case.stats"
    kill "$app" "$daemon" 2>/dev/null || true
    wait "$app" "$daemon" 2>/dev/null || true
}

for backend in sled postgres; do
    for mode in write_behind durable write_through; do
        run_case "$backend" "$mode"
    done
done

python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
rows = {}
codes = set()
for backend in ("sled", "postgres"):
    for mode in ("write_behind", "durable", "write_through"):
        case = f"{backend}-{mode}"
        r = json.load(open(f"{work}/{case}.json"))
        _, _, batches, keys = open(f"{work}/{case}.stats").read().split()
        ok = (r.get("statusCodeDistribution") or {}).get("OK", 0)
        errors = sum(v for k, v in (r.get("statusCodeDistribution") or {}).items() if k != "OK")
        codes |= {k for k in (r.get("statusCodeDistribution") or {}) if k != "OK"}
        secs = r["total"] / 1e9
        lat = {d["percentage"]: d["latency"] / 1e6 for d in r.get("latencyDistribution") or []}
        rows[(backend, mode)] = dict(
            ok=ok, errors=errors, ups=ok / secs, p50=lat.get(50, 0), p99=lat.get(99, 0),
            bps=int(batches) / secs, kps=int(keys) / secs,
            per_batch=ok / max(int(batches), 1), per_key=ok / max(int(keys), 1))
print()
print("State benchmark: ghz -c 64 over 1000 counter actors, every call one state update; flush interval 1 s")
print(f"{'store':<9} {'mode':<14} {'updates':>8} {'errors':>6} {'updates/s':>10} {'p50 ms':>7} {'p99 ms':>7} "
      f"{'batches/s':>10} {'keys/s':>9} {'upd/batch':>10} {'upd/key':>8}")
for (backend, mode), x in rows.items():
    print(f"{backend:<9} {mode:<14} {x['ok']:>8} {x['errors']:>6} {x['ups']:>10.0f} {x['p50']:>7.2f} {x['p99']:>7.2f} "
          f"{x['bps']:>10.1f} {x['kps']:>9.0f} {x['per_batch']:>10.0f} {x['per_key']:>8.1f}")
if codes:
    print(f"errors: {', '.join(sorted(codes))} (calls still in flight when ghz's -z time ran out are cancelled)")
print()
print("Goals (issue 6):")
for backend in ("sled", "postgres"):
    wb = rows[(backend, "write_behind")]
    d, wt = rows[(backend, "durable")], rows[(backend, "write_through")]
    ratio = d["ups"] / max(wt["ups"], 1e-9)
    print(f"  {backend:<9} write-behind ≤ 1 storage write per 50 updates: {wb['per_batch']:.0f} updates per batch "
          f"{'MET' if wb['per_batch'] >= 50 else 'MISSED'}; {wb['per_key']:.1f} updates per key written "
          f"{'MET' if wb['per_key'] >= 50 else 'MISSED'}")
    print(f"  {backend:<9} durable ≥ 10x write-through: {d['ups']:.0f} vs {wt['ups']:.0f} updates/s = {ratio:.1f}x "
          f"{'MET' if ratio >= 10 else 'MISSED'}")
print("Keys written per second are bounded by the actors touched per flush (here ~1000 per 1 s flush);")
print("updates per key grow with the update rate per actor, batches stay at one per flush interval.")
PY
