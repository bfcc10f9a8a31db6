#!/usr/bin/env bash
# Transport benchmark over an emulated WAN (issue 15): calls enter daemon A
# and go to echo actors owned by daemon B, so every call and its reply cross
# the link between the two daemons.
#
# The emulated WAN (issue 15's): two network namespaces joined by a veth
# pair (`wan0`) with a `tbf` bandwidth cap (RATE) on both ends, and a
# toxiproxy in front of each daemon's *advertised* address (the proxy for B
# runs in A's namespace and reaches B over the veth, and the other way
# round), adding RTT/2 of latency in each direction (toxiproxy counts whole
# ms: an odd RTT puts the extra ms on the way out). The kernel here has no
# netem, hence the proxy. A second veth pair (`ctl0`, no cap, no latency)
# carries what is not under test: B's placement heartbeats, its PostgreSQL
# connections, and admin reads.
#
#   namespace A: PostgreSQL, one placement replica, daemon A + bench_app,
#                toxiproxy (peer "b": 10.201.0.1:17420 -> B), transport_load
#   namespace B: daemon B + bench_app, toxiproxy (peer "a": 10.201.0.2:17420 -> A)
#
# The proxy's latency is invisible to TCP: the connections that cross the
# link measure a 1-5 ms round trip at an emulated 20 ms, and their
# congestion control acts on that. Two knobs emulate a path TCP sees whole:
# SHAPER=router puts the caps in a third namespace that routes between A
# and B (a full queue then drops packets, as a router does, where a cap on
# the sender's own device refuses its writes without a loss), and
# LATENCY=kernel (with SHAPER=router) has iptables queue each way's
# forwarded packets to delay_line (tests/src/bin/delay_line.rs), which
# holds them RTT/2; the daemons and the calibration then dial each other
# directly, without toxiproxy. What changes (2026-11-29, 128 pairs, 20 ms):
# under this host's BBR, with the proxy one of the four bulk connections
# would stall for seconds while the others ran, and 512 KiB calls had p99
# 3.0-3.8 s; with the latency in the kernel, p99 1.0 s. There, links over
# HTTP/2 streams carried 8 MiB at 73-81 % of the link against plain TCP's
# 94 %; framed links (the default since 2026-11-30) at 86 % (steady 90 %)
# against 76 % (79 %) for --peer-protocol grpc in the same run.
#
# Everything runs inside namespaces this script creates (needs root); it
# removes them, and every process it started, on exit, failure or ctrl-C.
#
# The matrix (Partisan's): PAIRS concurrent closed-loop caller/actor pairs
# (each caller sends one message and waits for the reply before the next) ×
# PAYLOADS echoed, each cell bounded by MESSAGES calls and CELL_SECONDS;
# then, per configuration and RTT, small calls (PROBE_PAIRS callers, 1 KiB)
# while 16 callers of 8 MiB saturate the link. Per cell: calls/s, payload
# MB/s (one direction: calls/s × payload), p50/p99, the share of the link's
# rate that is (over the whole cell, and in its steady state: from WARMUP
# seconds in until the callers stop starting calls, without the ramp and
# the drain), the daemons' CPU (cores), and the ratio to the first
# configuration (the baseline). In the saturation run, plain TCP calls
# (bench/transport_pingpong.py) cross the same emulated link beside the
# same bulk load: the emulator's own small-call latency under exactly that
# load, printed next to the transport's. A cell that fails (errors, or a setup step
# that did not succeed) is reported as such and the matrix goes on; a dead
# app or daemon is restarted before the next cell.
#
# CONFIGS: named daemon flag sets, "NAME: FLAGS" separated by newlines or
# ';', the first being the baseline the others are compared with. The
# default compares the three layouts of issue 15, all from this binary:
#   baseline: one HTTP/2 connection per peer with the library's windows (the
#             transport before links: --peer-protocol grpc --peer-channels single=1
#             --peer-window default)
#   single16: one channel of 16 such connections (... single=16 ...)
#   full:     the defaults (framed links: call and bulk channels)
#
# Knobs (environment):
#   RATE=1gbit          tbf rate on each end of the link (tc syntax: kbit, mbit, gbit)
#   QUEUE_MS=2          tbf queue bound in ms at that rate (the most a full link adds per direction)
#   BURST=              tbf burst in bytes (default: 1 ms at the rate, at least 64 KiB)
#   SHAPER=host         where the caps sit: "host" (each namespace's own wan0) or
#                       "router" (a namespace between the two that routes)
#   LATENCY=proxy       where the RTT is added: "proxy" (toxiproxy) or "kernel" (delay_line,
#                       in the router's forwarding path; SHAPER=router, iptables-legacy)
#   TCP_CC=             congestion control in both namespaces (default: the host's), one of
#                       those the kernel lets a namespace pick
#                       (net.ipv4.tcp_allowed_congestion_control; here reno and bbr)
#   RTTS="20 1"         round-trip times to emulate, in ms
#   PAIRS="16 32 64 128"  PAYLOADS="1024 524288 8388608"
#   MESSAGES=10000  CELL_SECONDS=60   per-cell bounds (calls started / seconds)
#   PROBE_PAIRS=4       small-call callers in the saturation run (0: skip the run)
#   WARMUP=5            seconds of each cell left out of its steady-state figures
#   PROBE_CONNECTION=shared  the probes' client connection to daemon A: shared with the
#                       8 MiB callers, or "own" (then only the daemons' link is shared)
#   CALIBRATE_STREAMS=4 plain TCP streams (iperf3) per direction for the calibration
#                       that precedes each RTT's cells (0: skip it), with small 1 KiB
#                       TCP calls beside them: the emulator's own small-call latency
#                       under that load (bench/transport_pingpong.py)
#   PROBE_APP=shared    the probes' actors: in the bench_app that echoes 8 MiB, or "own" (a
#                       second bench_app on B hosts them, so they share no app stream)
#   CONFIGS=...         see above
#   MAX_PAYLOAD=9437184 the daemons' --max-payload-bytes (9 MiB: room for 8 MiB)
#   TROUPE=PATH         another troupe binary for the daemons (an earlier build, to
#                       compare a change in one script run per build)
#   BENCH_APP=PATH      another bench_app binary (default: the one built here; until it
#                       takes turns over 4 MiB, the 8 MiB cells fail, reported as such)
#   KEEP=1              keep the work dir (daemon logs) instead of removing it
#
#   sudo bench/transport.sh
#   MESSAGES=300 CELL_SECONDS=10 PAIRS="16 128" RTTS=20 bench/transport.sh   (a quick check)
#
# Results: the table on stdout, every cell as JSON in
# target/bench-results/transport-DATE.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/wait_started.sh
[ "$(id -u)" = 0 ] || { echo "bench/transport.sh creates network namespaces: run it as root" >&2; exit 1; }
target=${CARGO_TARGET_DIR:-$PWD/target}
bin="$target/release"
tools="$target/bench-tools"
toxi="$tools/toxiproxy-v2.5.0"

RATE=${RATE:-1gbit}
QUEUE_MS=${QUEUE_MS:-2}
SHAPER=${SHAPER:-host}
case "$SHAPER" in router | host) ;; *) echo "SHAPER=$SHAPER: expected router or host" >&2; exit 2 ;; esac
TCP_CC=${TCP_CC:-}
LATENCY=${LATENCY:-proxy}
case "$SHAPER/$LATENCY" in router/kernel | */proxy) ;;
    *) echo "LATENCY=$LATENCY with SHAPER=$SHAPER: expected LATENCY=kernel (SHAPER=router only) or proxy" >&2; exit 2 ;;
esac
if [ "$LATENCY" = kernel ] && ! command -v iptables-legacy >/dev/null; then
    echo "LATENCY=kernel queues packets with iptables-legacy: apt-get install iptables (or LATENCY=proxy)" >&2
    exit 2
fi
RTTS=${RTTS:-"20 1"}
PAIRS=${PAIRS:-"16 32 64 128"}
PAYLOADS=${PAYLOADS:-"1024 524288 8388608"}
MESSAGES=${MESSAGES:-10000}
CELL_SECONDS=${CELL_SECONDS:-60}
PROBE_PAIRS=${PROBE_PAIRS:-4}
WARMUP=${WARMUP:-5}
PROBE_CONNECTION=${PROBE_CONNECTION:-shared}
PROBE_APP=${PROBE_APP:-shared}
CALIBRATE_STREAMS=${CALIBRATE_STREAMS:-4}
CONFIGS=${CONFIGS:-"baseline: --peer-protocol grpc --peer-channels single=1 --peer-window default;
    single16: --peer-protocol grpc --peer-channels single=16 --peer-window default; full:"}
MAX_PAYLOAD=${MAX_PAYLOAD:-9437184}
TROUPE=${TROUPE:-$bin/troupe}
BENCH_APP=${BENCH_APP:-$bin/bench_app}

mkdir -p "$tools" "$target/bench-results"
if [ "$LATENCY" = proxy ] && { [ ! -x "$toxi/server" ] || [ ! -x "$toxi/cli" ]; }; then
    echo "installing toxiproxy (Go module) into $toxi" >&2
    GOBIN="$toxi" go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0 \
        github.com/Shopify/toxiproxy/v2/cmd/cli@v2.5.0
fi
nice -n 19 cargo build --release -q -p troupe -p troupe-tests \
    --bin troupe --bin bench_app --bin transport_load --bin delay_line

# tc's rate syntax -> bytes per second.
rate_bytes() {
    python3 - "$1" <<'PY'
import re, sys
m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)(bit|bps)", sys.argv[1].lower())
if not m:
    sys.exit(f"RATE {sys.argv[1]!r}: expected e.g. 1gbit, 500mbit")
n = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
print(int(n / 8 if m.group(3) == "bit" else n))
PY
}
link_bytes=$(rate_bytes "$RATE")

ns_a="troupe-bench-$$-a"
ns_b="troupe-bench-$$-b"
ns_r="troupe-bench-$$-r"
wan_a=10.201.0.1 wan_b=10.201.0.2 ctl_a=10.201.1.1 ctl_b=10.201.1.2
port=7420 proxy_port=17420 placement_addr="$ctl_a:7470" iperf_port=5201 iperf_proxy_port=17421
pingpong_port=5202 pingpong_proxy_port=17422
work=$(mktemp -d)
chmod 755 "$work" # the postgres user reaches its dir below it
results="$target/bench-results/transport-$(date +%Y%m%d-%H%M%S).jsonl"

cleanup() {
    set +e
    # Everything started here runs in one of the namespaces (the router's
    # exists only with SHAPER=router; asking about it otherwise is harmless).
    local all=("$ns_a" "$ns_b" "$ns_r")
    for ns in "${all[@]}"; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null
    done
    for _ in $(seq 50); do
        [ -z "$(for ns in "${all[@]}"; do ip netns pids "$ns" 2>/dev/null; done)" ] && break
        sleep 0.1
    done
    for ns in "${all[@]}"; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
        ip netns del "$ns" 2>/dev/null
    done
    wait 2>/dev/null
    if [ -n "${KEEP:-}" ]; then echo "work dir kept: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

in_a() { ip netns exec "$ns_a" "$@"; }
# Runs a command in the background and waits for it: the `wait` builtin,
# unlike a foreground child, lets a signal's trap run at once.
waited() { "$@" & wait "$!"; }
in_b() { ip netns exec "$ns_b" "$@"; }
in_r() { ip netns exec "$ns_r" "$@"; }

# === the emulated WAN ===

ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add ctl0 netns "$ns_a" type veth peer name ctl0 netns "$ns_b"
# 1 ms at the rate, at least 64 KiB. tbf sends a packet larger than its
# burst in segments, so a smaller BURST makes a full queue drop single
# segments instead of a whole offload packet (up to 64 KiB); but with the
# cap on a router (SHAPER=router), 8 KiB kept both cores of this host busy
# with the segments and the link fell to 57 %.
burst=${BURST:-$(( link_bytes / 1000 > 65536 ? link_bytes / 1000 : 65536 ))}
shape() { # namespace device: the link's rate cap on that device's way out
    tc -n "$1" qdisc add dev "$2" root tbf rate "$RATE" burst "$burst" latency "${QUEUE_MS}ms"
}
if [ "$SHAPER" = router ]; then
    # A namespace of its own stands for the WAN's routers: it forwards
    # between A and B (static routes and neighbours, no ARP), and a full
    # queue there drops packets, which the senders learn of from the ACKs,
    # as on a real path. A cap on each sender's own device refuses its
    # writes locally instead, without a loss (a connection with nothing in
    # flight then retries only on a timer).
    ip netns add "$ns_r"
    for side in a b; do
        ns="ns_$side" wan="wan_$side"
        ip link add wan0 netns "${!ns}" address "02:00:00:00:00:0$side" \
            type veth peer name "to_$side" netns "$ns_r" address "02:00:00:00:01:0$side"
        ip -n "$ns_r" link set "to_$side" up
        ip -n "$ns_r" route add "${!wan}/32" dev "to_$side"
        ip -n "$ns_r" neigh add "${!wan}" lladdr "02:00:00:00:00:0$side" dev "to_$side" nud permanent
        shape "$ns_r" "to_$side"
    done
    ip -n "$ns_a" neigh add "$wan_b" lladdr 02:00:00:00:01:0a dev wan0 nud permanent
    ip -n "$ns_b" neigh add "$wan_a" lladdr 02:00:00:00:01:0b dev wan0 nud permanent
    in_r sysctl -qw net.ipv4.ip_forward=1
    if [ "$LATENCY" = kernel ]; then
        # Each way's packets go to a netfilter queue that delay_line holds
        # them in (queue 0: A to B, 1: B to A). Until it runs, they drop.
        in_r iptables-legacy -A FORWARD -i to_a -j NFQUEUE --queue-num 0
        in_r iptables-legacy -A FORWARD -i to_b -j NFQUEUE --queue-num 1
    fi
else
    ip link add wan0 netns "$ns_a" type veth peer name wan0 netns "$ns_b"
    for side in a b; do ns="ns_$side"; shape "${!ns}" wan0; done
fi
for side in a b; do
    ns="ns_$side" wan="wan_$side" ctl="ctl_$side"
    ip -n "${!ns}" link set lo up
    ip -n "${!ns}" addr add "${!wan}/30" dev wan0
    ip -n "${!ns}" addr add "${!ctl}/30" dev ctl0
    ip -n "${!ns}" link set wan0 up
    ip -n "${!ns}" link set ctl0 up
    if [ -n "$TCP_CC" ]; then
        ip netns exec "${!ns}" sysctl -qw net.ipv4.tcp_congestion_control="$TCP_CC" 2>/dev/null || {
            echo "TCP_CC=$TCP_CC: a network namespace here may only pick one of:" \
                "$(sysctl -n net.ipv4.tcp_allowed_congestion_control), or none for the host's default" >&2
            exit 2
        }
    fi
done

# Where A dials B's daemon and the calibration's servers in B, and where B
# dials A's daemon: straight across the link, or (LATENCY=proxy) through a
# toxiproxy on the dialling side, which adds the latency.
if [ "$LATENCY" = kernel ]; then
    dial_b="$wan_b:$port" dial_a="$wan_a:$port"
    iperf_at=("$wan_b" "$iperf_port") pingpong_at=("$wan_b" "$pingpong_port")
else
    dial_b="$wan_a:$proxy_port" dial_a="$wan_b:$proxy_port"
    iperf_at=("$wan_a" "$iperf_proxy_port") pingpong_at=("$wan_a" "$pingpong_proxy_port")
    # In A, "b" -> B's daemon; in B, "a" -> A's daemon. Each daemon
    # advertises its proxy, so the other one dials through it.
    in_a "$toxi/server" -host 127.0.0.1 -port 8474 >"$work/toxi-a.log" 2>&1 &
    in_b "$toxi/server" -host 127.0.0.1 -port 8474 >"$work/toxi-b.log" 2>&1 &
    toxi_cli() { local ns=$1; shift; ip netns exec "$ns" "$toxi/cli" -h http://127.0.0.1:8474 "$@"; }
    for _ in $(seq 100); do
        toxi_cli "$ns_a" list >/dev/null 2>&1 && toxi_cli "$ns_b" list >/dev/null 2>&1 && break
        sleep 0.1
    done
    toxi_cli "$ns_a" create -l "$wan_a:$proxy_port" -u "$wan_b:$port" b >/dev/null
    toxi_cli "$ns_b" create -l "$wan_b:$proxy_port" -u "$wan_a:$port" a >/dev/null
    # The calibration's plain TCP takes the same path: A's toxiproxy, then the link.
    toxi_cli "$ns_a" create -l "$wan_a:$iperf_proxy_port" -u "$wan_b:$iperf_port" iperf >/dev/null
    toxi_cli "$ns_a" create -l "$wan_a:$pingpong_proxy_port" -u "$wan_b:$pingpong_port" pingpong >/dev/null
fi

set_rtt() { # ms: half each way
    if [ "$LATENCY" = kernel ]; then
        # (It may have exited already: that must not end the run here.)
        [ -z "${delay_pid:-}" ] || { kill "$delay_pid" 2>/dev/null || true; wait "$delay_pid" 2>/dev/null || true; }
        # The kernel lets go of an exited holder's queues a moment later,
        # and refuses to bind them to another before that (EPERM).
        for _ in $(seq 100); do
            [ "$(in_r cat /proc/net/netfilter/nfnetlink_queue | wc -l)" = 0 ] && break
            sleep 0.05
        done
        # Started without the in_r function: a function run in the
        # background is a subshell, whose pid is not delay_line's, and
        # killing it left the old delay_line holding the queues (the new
        # one was refused, and the RTT never changed).
        ip netns exec "$ns_r" "$bin/delay_line" --delay-ms "$(python3 -c "print($1 / 2)")" \
            --queue 0 --queue 1 >>"$work/delay_line.log" 2>&1 &
        delay_pid=$!
        # Bound once the kernel lists both queues as taken (the one it
        # replaced let go of them as it exited).
        for _ in $(seq 100); do
            [ "$(in_r cat /proc/net/netfilter/nfnetlink_queue | wc -l)" = 2 ] && return 0
            kill -0 "$delay_pid" 2>/dev/null || break
            sleep 0.05
        done
        echo "delay_line did not take the link's queues; see $work/delay_line.log:" >&2
        cat "$work/delay_line.log" >&2
        exit 1
    fi
    # toxiproxy counts whole ms: an odd RTT puts the extra ms on the way out.
    local up=$(( ($1 + 1) / 2 )) down=$(( $1 / 2 ))
    for pair in "$ns_a b" "$ns_b a" "$ns_a iperf" "$ns_a pingpong"; do
        read -r ns proxy <<<"$pair"
        toxi_cli "$ns" toxic remove -n out "$proxy" >/dev/null 2>&1 || true
        toxi_cli "$ns" toxic remove -n back "$proxy" >/dev/null 2>&1 || true
        if [ "$up" -gt 0 ]; then
            toxi_cli "$ns" toxic add -t latency -a "latency=$up" -u -n out "$proxy" >/dev/null
        fi
        if [ "$down" -gt 0 ]; then
            toxi_cli "$ns" toxic add -t latency -a "latency=$down" -d -n back "$proxy" >/dev/null
        fi
    done
}

# What plain TCP gets through the emulator at the current RTT, both ways at
# once as an echo loads it: the most any transport can reach here, on this
# machine (toxiproxy's copying shares the cores with everything else).
calibrate() { # rtt
    [ "$CALIBRATE_STREAMS" -gt 0 ] || return 0
    if ! command -v iperf3 >/dev/null; then
        echo "  (no iperf3: skipping the plain-TCP calibration; apt-get install iperf3)" >&2
        return 0
    fi
    in_b iperf3 -s -1 -B "$wan_b" -p "$iperf_port" >/dev/null 2>&1 &
    local server=$!
    for _ in $(seq 50); do in_b ss -ltn | grep -q ":$iperf_port " && break; sleep 0.1; done
    in_b python3 bench/transport_pingpong.py serve "$pingpong_port" >/dev/null 2>&1 &
    local pingpong=$!
    for _ in $(seq 50); do in_b ss -ltn | grep -q ":$pingpong_port " && break; sleep 0.1; done
    in_a timeout 60 iperf3 -c "${iperf_at[0]}" -p "${iperf_at[1]}" -P "$CALIBRATE_STREAMS" -t 10 --bidir -J \
        >"$work/calibrate-$1.json" 2>/dev/null &
    local bulk=$!
    # Small calls on their own connections while iperf3 fills the link: the
    # floor for the saturation run's small-call latency on this emulator.
    sleep 2
    local small conns=$((PROBE_PAIRS > 0 ? PROBE_PAIRS : 4))
    small=$(in_a timeout 30 python3 bench/transport_pingpong.py call "${pingpong_at[@]}" \
        "$conns" 6 2>&1 | tail -n 1) || small="failed: $small"
    wait "$bulk" || true
    kill "$server" "$pingpong" 2>/dev/null || true
    wait "$server" "$pingpong" 2>/dev/null || true
    echo "calibration, RTT $1 ms: plain TCP 1 KiB request/reply ($conns connections) during it: $small" \
        >>"$work/calibration-small.txt"
    python3 - "$work/calibrate-$1.json" "$link_bytes" "$1" "$CALIBRATE_STREAMS" <<'PY' >>"$work/calibration.txt" || true
import json, sys
path, link, rtt, streams = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
end = json.load(open(path))["end"]
ways = [end[k]["bits_per_second"] / 8 for k in ("sum_received", "sum_received_bidir_reverse")]
mb = min(ways) / 1e6
print(f"calibration, RTT {rtt} ms: plain TCP ({streams} streams each way, both ways at once) "
      f"{mb:.1f} MB/s each way = {100 * min(ways) / link:.0f}% of the link")
PY
}

# === PostgreSQL and placement, in A, reached by B over ctl0 ===

echo "starting PostgreSQL and placement in $ns_a" >&2
pg_url=$(PG_LISTEN="$ctl_a" in_a scripts/postgres.sh start "$work/pg")
pg_url="${pg_url/127.0.0.1/$ctl_a}"
stop_pg() { in_a scripts/postgres.sh stop "$work/pg" >/dev/null 2>&1 || true; }
trap 'stop_pg; cleanup' EXIT

# A long lease: a loaded 2-core machine may delay heartbeats, and a fenced
# daemon is not what this measures.
in_a "$TROUPE" placement serve --insecure --id 1 --listen "$placement_addr" --data-dir "$work/placement" \
    --lease 10s >"$work/placement.out" 2>"$work/placement.err" &
wait_for "$work/placement.out" "listening on" "the placement replica"

# === the two daemons and their apps ===

gen=0
declare -A pid=()

start_daemon() { # side flags...
    local side=$1; shift
    local ns="ns_$side" advertise="dial_$side"
    local name="$side$gen"
    # --insecure: only the other namespace, through the emulated link, reaches it.
    ip netns exec "${!ns}" "$TROUPE" serve --insecure --listen "0.0.0.0:$port" --advertise "${!advertise}" \
        --node "$name" --placement "$placement_addr" --store "$pg_url" --data-dir "$work/data-$name" \
        --max-payload-bytes "$MAX_PAYLOAD" "$@" >"$work/$name.out" 2>"$work/$name.err" &
    pid[daemon_$side]=$!
    wait_for "$work/$name.out" "listening on" "daemon $name"
}

declare -A app_log=()
start_app() { # side
    local side=$1 ns="ns_$1" name="$1$gen-app-$RANDOM"
    ip netns exec "${!ns}" "$BENCH_APP" "127.0.0.1:$port" >"$work/$name.out" 2>"$work/$name.err" &
    pid[app_$side]=$!
    app_log[$side]="$work/$name.err"
    wait_for "$work/$name.out" registered "the bench app on $side$gen"
    if [ "$side" = b ] && [ "$PROBE_APP" = own ]; then
        ip netns exec "${!ns}" "$BENCH_APP" "127.0.0.1:$port" --types probe_echo \
            >"$work/$name-probe.out" 2>"$work/$name-probe.err" &
        pid[probe_app_b]=$!
        wait_for "$work/$name-probe.out" registered "the probes' bench app on $side$gen"
    fi
}

stop_pid() { # pid: TERM, then KILL after 10 s
    local p=$1
    kill "$p" 2>/dev/null || return 0
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
}

stop_cluster() {
    local k
    for k in app_a app_b probe_app_b daemon_a daemon_b; do
        [ -n "${pid[$k]:-}" ] && stop_pid "${pid[$k]}"
        pid[$k]=
    done
}

alive() { [ -n "${pid[$1]:-}" ] && kill -0 "${pid[$1]}" 2>/dev/null; }

settle() {
    waited ip netns exec "$ns_a" "$bin/transport_load" wait --placement "$placement_addr" \
        --daemons "127.0.0.1:$port,$ctl_b:$port" --type echo --seconds 60 >/dev/null
}

start_cluster() { # flags...
    stop_cluster
    gen=$((gen + 1))
    start_daemon a "$@" && start_daemon b "$@" && start_app a && start_app b && settle
}

# Before each cell: both daemons and apps up, the table settled. A dead
# app (today's bench_app exits on a turn over 4 MiB) is started again; a
# dead daemon restarts the pair. Fails when the cluster cannot be had.
ensure_cluster() { # flags...
    if ! alive daemon_a || ! alive daemon_b; then
        echo "  (a daemon is gone: restarting the cluster)" >&2
        start_cluster "$@" || return 1
        return 0
    fi
    local side restarted=
    for side in a b; do
        if ! alive "app_$side"; then
            echo "  (the bench app on $side$gen is gone: starting it again)" >&2
            start_app "$side" || return 1
            restarted=1
        fi
    done
    [ -z "$restarted" ] || settle
}

# === the cells ===

cell=0
run_cell() { # config rtt kind pairs payload flags...
    local config=$1 rtt=$2 kind=$3 pairs=$4 payload=$5; shift 5
    cell=$((cell + 1))
    local base="$work/cell-$cell"
    printf '%s\n' "$config" "$rtt" "$kind" "$pairs" "$payload" >"$base.meta"
    local args=(run --via "127.0.0.1:$port" --owner "$ctl_b:$port" --pairs "$pairs" --payload "$payload"
        --messages "$MESSAGES" --seconds "$CELL_SECONDS" --call-timeout 60 --warmup "$WARMUP")
    if [ "$kind" = saturation ]; then
        args+=(--probe-pairs "$PROBE_PAIRS" --probe-payload 1024 --probe-after 3 --probe-connection "$PROBE_CONNECTION")
        [ "$PROBE_APP" = own ] && args+=(--probe-type probe_echo)
    fi
    local rc=0
    if ! ensure_cluster "$@" >"$base.setup" 2>&1; then
        echo "the cluster could not be started: $(tail -n 3 "$base.setup" | tr '\n' ' ')" >"$base.err"
        rc=1
    else
        args+=(--cpu-pids "${pid[daemon_a]},${pid[daemon_b]}")
        local server= prober=
        if [ "$kind" = saturation ]; then
            in_b python3 bench/transport_pingpong.py serve "$pingpong_port" >/dev/null 2>&1 &
            server=$!
            # Plain TCP calls beside the bulk, once the transport's own
            # probes (3 s in) run, while the cell's time lasts.
            local for_seconds=$((CELL_SECONDS > 12 ? 6 : (CELL_SECONDS > 5 ? CELL_SECONDS - 5 : 1)))
            ( sleep 4; in_a timeout 30 python3 bench/transport_pingpong.py call "${pingpong_at[@]}" \
                "$PROBE_PAIRS" "$for_seconds" 2>&1 | tail -n 1 >"$base.beside" ) &
            prober=$!
        fi
        waited timeout $((CELL_SECONDS + 180)) ip netns exec "$ns_a" "$bin/transport_load" "${args[@]}" \
            >"$base.out" 2>"$base.err" || rc=$?
        if [ -n "$prober" ]; then
            wait "$prober" 2>/dev/null || true
            kill "$server" 2>/dev/null || true
            wait "$server" 2>/dev/null || true
        fi
    fi
    echo "$rc" >"$base.rc"
    local side
    for side in a b; do
        if [ -n "${pid[app_$side]:-}" ] && ! alive "app_$side"; then
            echo "the bench app on ${side^^} exited: $(tail -n 1 "${app_log[$side]}")" >>"$base.notes"
        fi
    done
    python3 bench/transport_table.py --cell "$base" "$link_bytes" >&2 || true
}

for rtt in $RTTS; do
    set_rtt "$rtt"
    calibrate "$rtt"
done
[ -f "$work/calibration.txt" ] && cat "$work/calibration.txt" "$work/calibration-small.txt" >&2

mapfile -t config_lines < <(printf '%s\n' "$CONFIGS" | tr ';' '\n' | sed 's/^[[:space:]]*//; /^$/d')
for line in "${config_lines[@]}"; do
    name=${line%%:*}
    flags=()
    read -r -a flags <<<"${line#*:}"
    echo "== $name: ${flags[*]:-(no flags)}" >&2
    if ! start_cluster "${flags[@]}" >"$work/start-$name.log" 2>&1; then
        echo "config $name: the cluster did not start:" >&2
        tail -n 20 "$work/start-$name.log" >&2
        continue
    fi
    for rtt in $RTTS; do
        set_rtt "$rtt"
        for payload in $PAYLOADS; do
            for pairs in $PAIRS; do
                run_cell "$name" "$rtt" matrix "$pairs" "$payload" "${flags[@]}"
            done
        done
        if [ "$PROBE_PAIRS" -gt 0 ]; then
            run_cell "$name" "$rtt" saturation 16 8388608 "${flags[@]}"
        fi
    done
    stop_cluster
done

python3 bench/transport_table.py --table "$work" "$link_bytes" "$RATE" "$QUEUE_MS" \
    "$SHAPER" "$LATENCY" "${TCP_CC:-$(sysctl -n net.ipv4.tcp_congestion_control)}" "$results"
if [ -f "$work/calibration.txt" ]; then echo; cat "$work/calibration.txt" "$work/calibration-small.txt"; fi
echo "cells as JSON: $results" >&2
