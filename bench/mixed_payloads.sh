#!/usr/bin/env bash
# Small calls beside large ones on one daemon and one app (issue 15: "an
# 8 MB message never blocks a small call"). Every turn of an actor type
# reaches its app over one stream, so a small call's turn queued behind the
# turns of BULK_PAIRS callers of 8 MiB waited for all of them; the daemon and
# the SDKs' writer now send small messages ahead of queued large ones, and
# between the pieces (MessagePart) of the large one being written.
#
# Starts, per build and round, one release daemon on an ephemeral loopback
# port (single node, temp data dir) with the Rust bench app (or the app a
# build names, below), then runs
# transport_load three times: PROBE_PAIRS callers of 1 KiB alone (the anchor),
# then the same callers beside BULK_PAIRS callers of BULK_PAYLOAD, each on
# their own client connection, so that what they share is the daemon and
# the app stream, and last the bulk callers alone, with the daemon's and the
# app's CPU per call (what a large message costs them). Each run stops after
# RUN_SECONDS (or 100,000 calls); stops everything it started.
#
#   bench/mixed_payloads.sh
#   TROUPE="/tmp/old/troupe target/release/troupe" bench/mixed_payloads.sh
#       (several daemon builds, e.g. before and after a change, interleaved
#       per round; BENCH_APP=PATH picks the app the same way for all)
#   TROUPE="/tmp/old/troupe:/tmp/old/bench_app target/release/troupe" bench/mixed_payloads.sh
#       (DAEMON:APP: that build with its own app, e.g. an older bench_app, or
#       a script that starts an SDK's echo app, given the daemon's address)
#   ROUNDS=2 RUN_SECONDS=15 BULK_PAIRS=32 BULK_PAYLOAD=8388608 PROBE_PAIRS=4
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/wait_started.sh
ROUNDS=${ROUNDS:-2}
RUN_SECONDS=${RUN_SECONDS:-15}
BULK_PAIRS=${BULK_PAIRS:-32}
BULK_PAYLOAD=${BULK_PAYLOAD:-8388608}
PROBE_PAIRS=${PROBE_PAIRS:-4}
target=${CARGO_TARGET_DIR:-$PWD/target}
bin="$target/release"
nice -n 19 cargo build --release -q -p troupe -p troupe-tests \
    --bin troupe --bin bench_app --bin transport_load
read -r -a builds <<<"${TROUPE:-$bin/troupe}"
app_bin=${BENCH_APP:-$bin/bench_app}
daemon_of() { echo "${1%%:*}"; }
app_of() { if [[ $1 == *:* ]]; then echo "${1#*:}"; else echo "$app_bin"; fi; }
for build in "${builds[@]}"; do
    for exe in "$(daemon_of "$build")" "$(app_of "$build")"; do
        [ -x "$exe" ] || { echo "$exe is not an executable" >&2; exit 2; }
    done
done
# Room for an 8 MiB payload and its framing.
max_payload=$((BULK_PAYLOAD + 1024 * 1024))

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

run() { # build round
    local name="d$RANDOM" daemon app addr
    "$(daemon_of "$1")" serve --listen 127.0.0.1:0 --data-dir "$work/data-$name" --max-payload-bytes "$max_payload" \
        >"$work/$name.out" 2>"$work/$name.err" &
    daemon=$!
    pids+=("$daemon")
    wait_for "$work/$name.out" "listening on" "the daemon"
    addr=$(announced "$work/$name.out" troupe)
    "$(app_of "$1")" "$addr" >"$work/$name-app.out" 2>"$work/$name-app.err" &
    app=$!
    pids+=("$app")
    wait_for "$work/$name-app.out" registered "the bench app"
    echo "== $(basename "$1") round $2: $PROBE_PAIRS callers of 1 KiB alone, then beside $BULK_PAIRS callers of $BULK_PAYLOAD bytes" >&2
    timeout --foreground 120 "$bin/transport_load" run --via "$addr" --owner "$addr" \
        --pairs "$PROBE_PAIRS" --payload 1024 --messages 100000 --seconds "$RUN_SECONDS" \
        | sed "s|^{|{\"build\":\"$1\",\"round\":$2,\"run\":\"alone\",|" >>"$work/results.jsonl"
    timeout --foreground 300 "$bin/transport_load" run --via "$addr" --owner "$addr" \
        --pairs "$BULK_PAIRS" --payload "$BULK_PAYLOAD" --messages 100000 --seconds "$RUN_SECONDS" \
        --call-timeout 60 --connections 4 --probe-pairs "$PROBE_PAIRS" --probe-payload 1024 \
        --probe-after 3 --probe-connection own \
        | sed "s|^{|{\"build\":\"$1\",\"round\":$2,\"run\":\"beside\",|" >>"$work/results.jsonl"
    timeout --foreground 300 "$bin/transport_load" run --via "$addr" --owner "$addr" \
        --pairs "$BULK_PAIRS" --payload "$BULK_PAYLOAD" --messages 100000 --seconds "$RUN_SECONDS" \
        --call-timeout 60 --connections 4 --cpu-pids "$daemon,$app" \
        | sed "s|^{|{\"build\":\"$1\",\"round\":$2,\"run\":\"bulk\",|" >>"$work/results.jsonl"
    kill "$app" "$daemon" 2>/dev/null || true
    wait "$app" "$daemon" 2>/dev/null || true
}
for round in $(seq "$ROUNDS"); do
    for build in "${builds[@]}"; do
        run "$build" "$round"
    done
done

python3 - "$work/results.jsonl" "$BULK_PAIRS" "$BULK_PAYLOAD" <<'PY'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
bulk_pairs, bulk_payload = sys.argv[2], int(sys.argv[3])
def get(build, rnd, run, group):
    return next((r for r in rows if r["build"] == build and r["round"] == rnd
                 and r["run"] == run and r["group"] == group), None)
print()
print(f"1 KiB calls alone (the anchor) and beside {bulk_pairs} callers of {bulk_payload / 2**20:g} MiB,"
      " one daemon and one app on loopback")
print(f"{'build':<32} {'round':>5} {'alone p50':>9} {'p99':>7} {'bulk/s':>7} {'bulk p50':>9}"
      f" {'small/s':>7} {'errors':>6} {'p50 ms':>7} {'p99 ms':>7} {'p99 ÷ anchor':>12}"
      f" {'alone/s':>7} {'CPU ms':>6}")
builds = list(dict.fromkeys(r["build"] for r in rows))
def label(build):
    """A build's name: the daemon's path, or DAEMON:APP by their file names."""
    daemon, _, app = build.partition(":")
    return f"{os.path.basename(daemon)}:{os.path.basename(app)}" if app else build
for rnd in sorted({r["round"] for r in rows}):
    for b in builds:
        alone, bulk, probe = get(b, rnd, "alone", "main"), get(b, rnd, "beside", "main"), get(b, rnd, "beside", "probe")
        solo = get(b, rnd, "bulk", "main")
        if not (alone and bulk and probe and solo):
            print(f"{label(b)[-32:]:<32} {rnd:>5} a run failed: see its errors above")
            continue
        ratio = probe["p99_ms"] / alone["p99_ms"] if alone["p99_ms"] else float("inf")
        print(f"{label(b)[-32:]:<32} {rnd:>5} {alone['p50_ms']:>9.2f} {alone['p99_ms']:>7.2f}"
              f" {bulk['ok'] / max(bulk['elapsed_s'], 1e-9):>7.1f} {bulk['p50_ms']:>9.1f}"
              f" {probe['ok'] / max(probe['elapsed_s'], 1e-9):>7.1f} {probe['errors'] + bulk['errors']:>6}"
              f" {probe['p50_ms']:>7.1f} {probe['p99_ms']:>7.1f} {ratio:>11.1f}x"
              f" {solo['ok'] / max(solo['elapsed_s'], 1e-9):>7.1f}"
              f" {solo['cpu_ticks'] / os.sysconf('SC_CLK_TCK') * 1e3 / max(solo['ok'], 1):>6.1f}")
PY
