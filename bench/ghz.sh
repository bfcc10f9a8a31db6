#!/usr/bin/env bash
# Invoke throughput through the sidecar with ghz: 64 concurrent callers over
# 1000 actors, a stateless and a stateful method, against Dapr's anchors
# (PRODUCT.md). Starts its own release daemon on an ephemeral loopback port
# with a temp data dir and a Rust app host; stops everything it started.
#
#   bench/ghz.sh [CALLS_PER_SCENARIO]      (default 100000; each run is also cut at 120 s)
#   TROUPE_DAEMON_ARGS="--metrics-listen 127.0.0.1:0" bench/ghz.sh   (measure a daemon option's cost)
#   MODES="plain secure" bench/ghz.sh   (one run per mode, compared side by side:
#       plain: no credentials; tokens: API and app tokens; tls: TLS on the listener;
#       secure: tokens and TLS, as a production daemon runs;
#       onethread: plain with --threads 1;
#       keyed: plain, each call with a fresh idempotency key, as the SDKs send
#       every invoke (marked new and kept 70 s, as the SDKs send the keys
#       they make for a call with a 10 s timeout), so its answer is recorded
#       with the turn; default: plain)
#   MODES="keyed keyed@/tmp/troupe-old" bench/ghz.sh   (MODE@BINARY: that mode on
#       another build of the daemon, to compare two builds in one run)
#
# The floor: the same ghz loads against a bare tonic echo server of the same
# API (tests/src/bin/echo_floor.rs), so the daemon's CPU per call and calls/s
# print as ratios to what tonic alone costs. Besides 64 callers on one
# connection, the first mode also runs 64 callers on 8 connections and one
# sequential caller (a tenth of the calls), for the daemon and the floor.
# The floor runs three times: with tokio's default threads (one per core, as
# the daemon by default), on one thread (the reference for MODES=onethread),
# and as a relay to a second echo process (`echo_floor --relay`: the least a
# sidecar that asks an app in another process can do, which a sequential
# caller waits for twice).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/wait_started.sh
calls=${1:-100000}
modes=${MODES:-plain}
source bench/ghz_tool.sh
cargo build --release -q -p troupe -p troupe-tests --bin troupe --bin bench_app --bin echo_floor

work=$(mktemp -d)
pids=()
stop_all() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
}
trap 'stop_all; rm -rf "$work"' EXIT

# Development certificates for the TLS modes: the daemon's (for 127.0.0.1
# and localhost) from a CA ghz and the app trust.
./target/release/troupe certs ca --dir "$work/certs" >/dev/null
./target/release/troupe certs issue daemon --dir "$work/certs" >/dev/null

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# One ghz run against process PID at TARGET: OUT.json and OUT.cpu (ticks).
# Called from bench_mode, its `request_extra` (request fields of the mode,
# e.g. keyed's idempotency key) goes into every request, and its `settle`
# (seconds) passes before the CPU is read.
load() { # pid out target actor-type ghz-args...
    local pid=$1 out=$2 target=$3 t=$4
    shift 4
    local before; before=$(cpu_ticks "$pid")
    timeout 120 "$tools/ghz" --call troupe.v1.ActorClient.Invoke "$@" \
        -d "{\"actor\":{\"type\":\"$t\",\"id\":\"a{{randomInt 0 1000}}\"},\"method\":\"m\",\"payload\":{\"data\":\"e30=\"}${request_extra:-}}" \
        -O json "$target" >"$out.json"
    # A daemon writes what the calls left (state, keyed calls' answers) at
    # its next write-behind flush, up to a second later: that is their CPU.
    [ -n "${settle:-}" ] && sleep "$settle"
    echo $(( $(cpu_ticks "$pid") - before )) >"$out.cpu"
}

start_echo() { # dir name [echo_floor args...] -> sets $echo (pid) and $addr
    local dir=$1 name=$2
    shift 2
    ./target/release/echo_floor "$@" >"$dir/$name.out" 2>"$dir/$name.err" &
    pids+=($!)
    echo=$!
    wait_for "$dir/$name.out" "listening on" "the echo floor"
    addr=$(announced "$dir/$name.out" echo)
}

bench_floor() { # [threads|relay] -> $work/floor[-N|-relay]/{echo,echo-c8,echo-seq}.{json,cpu}
    local dir="$work/floor${1:+-$1}" echo addr
    mkdir -p "$dir"
    if [ "${1:-}" = relay ]; then
        # The echo an app would be, and in front of it the relay the load
        # hits: the CPU counted is the relay's, as the daemon's is without
        # its app.
        start_echo "$dir" app
        start_echo "$dir" echo --relay "$addr"
    elif [ -n "${1:-}" ]; then
        TOKIO_WORKER_THREADS=$1 start_echo "$dir" echo
    else
        # tokio's default: a worker thread per core.
        start_echo "$dir" echo
    fi
    load "$echo" "$dir/echo" "$addr" echo --insecure -c 64 -n "$calls"
    load "$echo" "$dir/echo-c8" "$addr" echo --insecure -c 64 --connections 8 -n "$calls"
    load "$echo" "$dir/echo-seq" "$addr" echo --insecure -c 1 -n "$((calls / 10))"
    stop_all
}

bench_mode() { # mode[@binary] -> $work/SPEC/{echo,counter}[-c8|-seq].{json,cpu}, rss
    local spec=$1 mode=${1%%@*} daemon_bin=./target/release/troupe dir="$work/${1//\//_}"
    [[ $spec == *@* ]] && daemon_bin=${spec#*@}
    mkdir -p "$dir"
    local daemon_args=() ghz_args=(--insecure) app_env=() request_extra='' settle=1.5
    case "$mode" in
        plain) ;;
        keyed) request_extra=',"idempotency_key":"{{newUUID}}","new_key":true,"key_retention_ms":70000' ;;
        tokens | secure)
            local api="bench-api-$RANDOM$RANDOM" app="bench-app-$RANDOM$RANDOM"
            local auth="{\"authorization\":\"Bearer $api\"}"
            daemon_args+=(--api-token-file "$dir/api" --app-token-file "$dir/app")
            echo "$api" >"$dir/api"; echo "$app" >"$dir/app"
            # ghz learns the API by reflection, which wants the token too.
            ghz_args+=(-m "$auth" --reflect-metadata "$auth")
            app_env+=(TROUPE_APP_TOKEN="$app")
            ;;&
        tls | secure)
            daemon_args+=(--tls-cert "$work/certs/daemon.pem" --tls-key "$work/certs/daemon.key"
                --tls-ca "$work/certs/ca.pem")
            ghz_args=("${ghz_args[@]/--insecure/}")
            ghz_args+=(--cacert "$work/certs/ca.pem")
            app_env+=(TROUPE_TLS_CA="$work/certs/ca.pem")
            ;;
        tokens) ;;
        onethread) daemon_args+=(--threads 1) ;;
        *) echo "unknown mode $mode (plain, tokens, tls, secure, onethread, keyed)" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2086 # word splitting of the extra args is wanted
    "$daemon_bin" serve --listen 127.0.0.1:0 --data-dir "$dir/data" \
        "${daemon_args[@]}" ${TROUPE_DAEMON_ARGS:-} >"$dir/daemon.out" 2>"$dir/daemon.err" &
    pids+=($!)
    local daemon=$!
    wait_for "$dir/daemon.out" "listening on" "the daemon"
    local addr; addr=$(announced "$dir/daemon.out" troupe)
    env "${app_env[@]}" ./target/release/bench_app "$addr" >"$dir/app.out" 2>"$dir/app.err" &
    pids+=($!)
    wait_for "$dir/app.out" registered "the bench app"
    # The certificate names localhost, not the address.
    local target=${addr/127.0.0.1/localhost}
    local g=()
    for a in "${ghz_args[@]}"; do [ -n "$a" ] && g+=("$a"); done
    # Warm up: activate the 1000 actors of each type.
    "$tools/ghz" "${g[@]}" --call troupe.v1.ActorClient.Invoke -c 16 -n 4000 \
        -d '{"actor":{"type":"echo","id":"a{{randomInt 0 1000}}"},"method":"m"}' "$target" >/dev/null
    for t in echo counter; do
        # Bounded by count; `timeout` bounds it in time too. ghz's default of
        # one connection, as in the anchor's `ghz -c 64`.
        load "$daemon" "$dir/$t" "$target" "$t" -c 64 -n "$calls" "${g[@]}"
        if [ "$spec" = "$first_mode" ] || [ "$mode" = onethread ]; then
            load "$daemon" "$dir/$t-c8" "$target" "$t" -c 64 --connections 8 -n "$calls" "${g[@]}"
            load "$daemon" "$dir/$t-seq" "$target" "$t" -c 1 -n "$((calls / 10))" "${g[@]}"
        fi
    done
    ps -o rss= -p "$daemon" | tr -d ' ' >"$dir/rss"
    stop_all
}

first_mode=${modes%% *}
for mode in $modes; do bench_mode "$mode"; done
bench_floor
# The echo on one thread too, the reference for a daemon on --threads 1.
bench_floor 1
bench_floor relay

# Which kind of host made the tables: sequential figures move twofold with
# what a wake-up across CPUs costs here.
python3 bench/python/wake_cost.py --round-trips 5000 || true
python3 - "$work" $modes <<'PY'
import json, os, sys
work, modes = sys.argv[1], sys.argv[2:]
anchors = {"echo": (8730, 6.2, 18.7), "counter": (3222, 18.8, 40.3)}
names = {"echo": "stateless (echo)", "counter": "stateful (counter)"}
ticks = os.sysconf("SC_CLK_TCK")
def mode_dir(m):  # a mode's directory: MODE@BINARY without the binary's slashes
    return f"{work}/{m.replace('/', '_')}"
print()
print("ghz -c 64 over 1000 actors, Invoke through the daemon to a Rust app host")
print(f"{'mode':<7} {'scenario':<20} {'calls':>8} {'errors':>7} {'calls/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'daemon CPU us/call':>18} {'Dapr calls/s':>12} {'ratio':>6}")
cpu = {}
for m in modes:
    for t in ("echo", "counter"):
        r = json.load(open(f"{mode_dir(m)}/{t}.json"))
        lat = {d["percentage"]: d["latency"] / 1e6 for d in r.get("latencyDistribution") or []}
        errors = sum(v for k, v in (r.get("statusCodeDistribution") or {}).items() if k != "OK")
        rps = r["rps"]
        a = anchors[t]
        cpu_us = int(open(f"{mode_dir(m)}/{t}.cpu").read()) / ticks * 1e6 / max(r["count"], 1)
        cpu[(m, t)] = cpu_us
        print(f"{m:<7} {names[t]:<20} {r['count']:>8} {errors:>7} {rps:>9.0f} {lat.get(50, 0):>7.2f} {lat.get(99, 0):>7.2f} {cpu_us:>18.1f} {a[0]:>12} {rps / a[0]:>5.2f}x")
print(f"Dapr anchors: stateless p50 6.2 ms / p99 18.7 ms; stateful p50 18.8 ms / p99 40.3 ms")
for m in modes:
    rss_kb = int(open(f"{mode_dir(m)}/rss").read())
    print(f"daemon RSS after load ({m}): {rss_kb / 1024:.0f} MB (Dapr daprd: 111 MB)")
def run(path):
    r = json.load(open(f"{path}.json"))
    lat = {d["percentage"]: d["latency"] / 1e6 for d in r.get("latencyDistribution") or []}
    cpu_us = int(open(f"{path}.cpu").read()) / ticks * 1e6 / max(r["count"], 1)
    return r["rps"], lat.get(50, 0), lat.get(99, 0), cpu_us
def against(floor_dir, mode):
    print(f"{'load':<24} {'scenario':<20} {'calls/s':>9} {'p99 ms':>7} {'CPU us/call':>11} {'echo calls/s':>12} {'echo p99':>8} {'echo CPU':>8} {'CPU x':>6} {'calls/s x':>9} {'p99 x':>6}")
    for suffix, load in (("", "64 callers, 1 conn"), ("-c8", "64 callers, 8 conns"), ("-seq", "1 caller, sequential")):
        floor = run(f"{work}/{floor_dir}/echo{suffix}")
        for t in ("echo", "counter"):
            rps, _, p99, cpu_us = run(f"{mode_dir(mode)}/{t}{suffix}")
            print(f"{load:<24} {names[t]:<20} {rps:>9.0f} {p99:>7.2f} {cpu_us:>11.1f} {floor[0]:>12.0f} {floor[2]:>8.2f} {floor[3]:>8.1f} "
                  f"{cpu_us / max(floor[3], 1e-9):>5.2f}x {rps / max(floor[0], 1e-9):>8.2f}x {p99 / max(floor[2], 1e-9):>5.2f}x")
print()
print("Against the floor: a bare tonic echo of the same API, same ghz, same cores (issue 20 goals:")
print("64 callers CPU <= 1.25x and calls/s >= 0.95x the echo's; sequential calls/s >= 0.8x, p99 <= 1.5x)")
against("floor", modes[0])
print()
print("Against a relay floor: the echo passing each call on to a second echo process over one")
print("bidirectional stream, as the daemon to its app; the least a sidecar whose app is another")
print("process can do. CPU is the relay's, as the daemon's is without its app")
against("floor-relay", modes[0])
one = next((m for m in modes if m.split("@")[0] == "onethread"), modes[0])
print()
print(f"Mode '{one}' against the same echo on one thread (TOKIO_WORKER_THREADS=1)")
against("floor-1", one)
if len(modes) > 1:
    base = modes[0]
    print()
    print(f"daemon CPU us/call against '{base}' (each mode's cost on the hot path; the security modes' aim: <= 1.15x)")
    for m in modes[1:]:
        for t in ("echo", "counter"):
            print(f"  {m:<7} {names[t]:<20} {cpu[(m, t)]:>6.1f} vs {cpu[(base, t)]:>6.1f} = {cpu[(m, t)] / cpu[(base, t)]:.2f}x")
print("On 2 cores ghz itself needs about one core at these rates; the daemon's CPU per call")
print("is the figure that does not depend on the load generator.")
PY
