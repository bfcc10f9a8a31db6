#!/usr/bin/env bash
# Keyed calls to busy actors on PostgreSQL: what asking the store about keys
# memory does not know costs. Memory keeps track of the 9,216 newest stored
# keys of each live actor (1,024 fingerprints, 8,192 tags of keys let go);
# past that, a key memory does not know may be in the store, and the call
# reads it first (a round trip before the turn), unless its caller marked
# the key new (`new_key`: made for this call, never sent before; the SDKs
# mark their fresh keys).
#
# ghz -c 64 over ACTORS (default 10) counter actors, each call with a fresh
# UUID key, after a warm-up of WARM_KEYS keys per actor (default 10,000:
# past the bound; 3,000 shows actors within it); once with the keys marked
# new, once not (a caller's own keys, e.g. raw gRPC). Prints
# calls/s, latency and PostgreSQL transactions per call (pg_stat_database:
# the store's reads and its batched writes, the final flush included).
#
#   bench/keyed_hot.sh [CALLS]          (default 30000 per case)
#   TROUPE="/tmp/troupe-old target/release/troupe" bench/keyed_hot.sh   (builds side by side)
set -euo pipefail
cd "$(dirname "$0")/.."
calls=${1:-30000}
actors=${ACTORS:-10}
warm_keys=${WARM_KEYS:-10000}
builds=(${TROUPE:-target/release/troupe})
source bench/store_bench_setup.sh

commits() { psql -qtA "$pg_url" -c "SELECT sum(xact_commit) FROM pg_stat_database"; }
request() { # actors new_key
    echo "{\"actor\":{\"type\":\"counter\",\"id\":\"a{{randomInt 0 $1}}\"},\"method\":\"incr\",\"payload\":{\"data\":\"e30=\"},\"idempotency_key\":\"{{newUUID}}\",\"new_key\":$2}"
}
# The schema from this checkout, not the daemon's reflection: a build older
# than new_key then gets the field as an unknown one, and ignores it.
ghz_calls=("$tools/ghz" --insecure --proto proto/troupe/v1/client.proto --import-paths proto
    --call troupe.v1.ActorClient.Invoke -c 64)

stop_case() {
    kill "$app" "$daemon" 2>/dev/null || true
    wait "$app" "$daemon" 2>/dev/null || true
}

n=0
for build in "${builds[@]}"; do
    for new_key in true false; do
        n=$((n + 1))
        daemon_bin=$build
        echo "== $build, new_key=$new_key: $calls keyed calls over $actors actors" >&2
        keep_db= start_case postgres "keyed_$n" "keyed-$n"
        # Past the bound, by default: every actor stores more keys than
        # memory keeps track of.
        timeout 300 "${ghz_calls[@]}" -n $((actors * warm_keys)) -d "$(request "$actors" true)" "$addr" >/dev/null
        # Then a restart on the same database, so the count below starts
        # clean: a server process reports its transactions when idle (up to
        # 10 s late) or at exit. The actors load their newest 9,216 keys
        # and, past the bound, know the store holds more, as busy actors do
        # after a restart.
        stop_case
        before=$(commits)
        keep_db=1 start_case postgres "keyed_$n" "keyed-$n"
        timeout 300 "${ghz_calls[@]}" -n "$calls" \
            -d "$(request "$actors" "$new_key")" -O json "$addr" >"$work/case-$n.json"
        stop_case
        after=$(commits)
        echo "{\"build\": \"$build\", \"new_key\": $new_key, \"commits\": $((after - before))}" >"$work/case-$n.meta"
    done
done

python3 - "$work" "$n" "$actors" "$warm_keys" <<'PY'
import json, sys
work, n, actors, warm = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
print()
print(f"Keyed calls over {actors} busy actors on PostgreSQL (ghz -c 64, fresh UUID keys, "
      f"after {warm} keys per actor)")
print(f"{'build':<28} {'keys marked new':<16} {'calls':>7} {'errors':>6} {'calls/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'PG transactions':>15} {'per call':>8}")
for i in range(1, n + 1):
    meta = json.load(open(f"{work}/case-{i}.meta"))
    r = json.load(open(f"{work}/case-{i}.json"))
    lat = {x["percentage"]: x["latency"] / 1e6 for x in r.get("latencyDistribution") or []}
    errors = sum((r.get("errorDistribution") or {}).values())
    calls = r["count"]
    per_call = meta["commits"] / max(calls, 1)
    print(f"{meta['build'][-28:]:<28} {str(meta['new_key']).lower():<16} {calls:>7} {errors:>6} {r['rps']:>8.0f} "
          f"{lat.get(50, 0):>7.2f} {lat.get(99, 0):>7.2f} {meta['commits']:>15} {per_call:>8.3f}")
print("A build older than new_key ignores the mark: both of its rows read the store per call.")
PY
