#!/usr/bin/env bash
# Where the daemon's CPU goes under a ghz load: a perf profile of the release
# daemon serving the Rust bench app, as a flame graph (inferno) and as the
# share of samples per task (the client's connection, a request's stream,
# the app stream, the workers...), plus syscalls and context switches per
# call. Starts its own daemon on an ephemeral loopback port with a temp data
# dir; stops everything it started.
#
#   bench/profile.sh [LOAD] [CALLS]      LOAD: c64 (default), c8 (64 callers on
#                                        8 connections) or seq (one caller)
#   TYPE=echo bench/profile.sh           the stateless type (default: counter)
#   KEYED=1 bench/profile.sh             each call with a fresh idempotency key, as
#                                        the SDKs send every invoke
#   TROUPE_DAEMON_ARGS="--threads 2" bench/profile.sh
#
# Writes target/profile/LOAD-TYPE[-keyed]/{flame.svg,folded.txt,tasks.txt,syscalls.txt}.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/wait_started.sh
load=${1:-c64}
calls=${2:-30000}
t=${TYPE:-counter}
extra=''
variant=$t
if [ -n "${KEYED:-}" ]; then
    extra=',"idempotency_key":"{{newUUID}}"'
    variant=$t-keyed
fi
case "$load" in
    c64) ghz_load=(-c 64) ;;
    c8) ghz_load=(-c 64 --connections 8) ;;
    seq) ghz_load=(-c 1) ;;
    *) echo "unknown load $load (c64, c8, seq)" >&2; exit 2 ;;
esac
command -v perf >/dev/null || { echo "perf is missing: apt-get install linux-perf" >&2; exit 1; }
source bench/ghz_tool.sh
if [ ! -x "$tools/inferno-flamegraph" ]; then
    cargo install -q --root "$tools/inferno" inferno@0.12.8 --locked
    ln -sf "$tools/inferno/bin/inferno-flamegraph" "$tools/inferno-flamegraph"
    ln -sf "$tools/inferno/bin/inferno-collapse-perf" "$tools/inferno-collapse-perf"
fi
cargo build --release -q -p troupe -p troupe-tests --bin troupe --bin bench_app

out="$PWD/target/profile/$load-$variant"
mkdir -p "$out"
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"' EXIT
# shellcheck disable=SC2086 # word splitting of the extra args is wanted
./target/release/troupe serve --listen 127.0.0.1:0 --data-dir "$work/data" ${TROUPE_DAEMON_ARGS:-} \
    >"$work/daemon.out" 2>"$work/daemon.err" &
pids+=($!)
daemon=$!
wait_for "$work/daemon.out" "listening on" "the daemon"
addr=$(announced "$work/daemon.out" troupe)
./target/release/bench_app "$addr" >"$work/app.out" 2>"$work/app.err" &
pids+=($!)
wait_for "$work/app.out" registered "the bench app"

ghz() { # calls -> ghz json on stdout
    timeout 120 "$tools/ghz" --insecure --call troupe.v1.ActorClient.Invoke "${ghz_load[@]}" -n "$1" \
        -d "{\"actor\":{\"type\":\"$t\",\"id\":\"a{{randomInt 0 1000}}\"},\"method\":\"m\",\"payload\":{\"data\":\"e30=\"}$extra}" \
        -O json "$addr"
}
# Warm up: every actor active.
ghz 4000 >/dev/null
# The measured calls, in both runs below.
request="{\"actor\":{\"type\":\"$t\",\"id\":\"a{{randomInt 0 1000}}\"},\"method\":\"m\"$extra}"
# Syscalls and context switches per call, in a run of their own (perf stat
# ends with ghz).
perf stat -x, -o "$work/stat.csv" -p "$daemon" \
    -e 'syscalls:sys_enter_writev,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex,syscalls:sys_enter_write,context-switches' \
    -- "$tools/ghz" --insecure --call troupe.v1.ActorClient.Invoke "${ghz_load[@]}" -n "$calls" \
    -d "$request" "$addr" >/dev/null
awk -F, -v calls="$calls" '$1 ~ /^[0-9]/ { printf "%-36s %6.2f per call\n", $3, $1 / calls }' \
    "$work/stat.csv" >"$out/syscalls.txt"
# The profile: call stacks by DWARF, so inlined async frames show.
perf record -q -F 1999 -g --call-graph dwarf,16384 -p "$daemon" -o "$work/perf.data" -- \
    "$tools/ghz" --insecure --call troupe.v1.ActorClient.Invoke "${ghz_load[@]}" -n "$calls" \
    -d "$request" "$addr" >/dev/null 2>&1
perf script -i "$work/perf.data" 2>/dev/null >"$work/perf.txt"
"$tools/inferno-collapse-perf" "$work/perf.txt" >"$out/folded.txt"
"$tools/inferno-flamegraph" --title "troupe daemon, ghz $load, $variant" "$out/folded.txt" >"$out/flame.svg"
# Share of samples per tokio task: the future each sampled stack polls.
python3 - "$out/folded.txt" >"$out/tasks.txt" <<'PY'
import collections, sys
shares, total = collections.Counter(), 0
skip = ("tokio::runtime", "tokio::loom", "core::", "std::", "<core::", "tokio::task::coop")
for line in open(sys.argv[1]):
    stack, _, count = line.rstrip().rpartition(" ")
    frames, n = stack.split(";"), int(count)
    total += n
    polls = [i for i, f in enumerate(frames) if f.startswith("tokio::runtime::task::core::Core<T,S>::poll::{{closure}}")]
    if not polls:
        shares["(outside any task: parked, kernel)"] += n
        continue
    task = next((f for f in frames[polls[-1] + 1:] if not f.startswith(skip)), "(the scheduler: parked)")
    shares[task[:100]] += n
for task, n in shares.most_common(12):
    print(f"{100 * n / max(total, 1):5.1f}%  {task}")
PY
echo "profile of the daemon under ghz $load ($variant), $calls calls: $out"
cat "$out/syscalls.txt" "$out/tasks.txt"
