#!/usr/bin/env bash
# Idle-out benchmark: N actors activated at once by tells, then all idle out
# together. Reports the daemon's RSS at start, with the actors active, and
# after they are gone, and whether the app stream stayed up (no actor ended
# "app_detached", no "app stream failed" in the log).
#
# Starts its own release daemon (--store memory, so stored state is not
# counted as daemon memory: the actors are `echo`, stateless) on an
# ephemeral loopback port and one app: the Rust bench app, or the Python
# SDK (bench/python/idle_app.py), both hosting `echo`. Stops everything it
# started; every wait is bounded.
#
#   bench/idle_out.sh [rust|python] [N] [IDLE_SECONDS]   (default rust 200000 10)
#   TROUPE_DAEMON_ARGS="--max-activations 20000" bench/idle_out.sh   (extra daemon flags)
set -euo pipefail
cd "$(dirname "$0")/.."
app=${1:-rust}
n=${2:-200000}
idle=${3:-10}
cargo build --release -q -p troupe -p troupe-tests --bin troupe --bin bench_app --bin tell_many
bin="$PWD/target/release"

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# shellcheck disable=SC2086 # word splitting of the extra args is wanted
"$bin/troupe" serve --listen 127.0.0.1:0 --data-dir "$work/data" --store memory \
    --idle-timeout "${idle}s" --max-pending-calls 1000000 ${TROUPE_DAEMON_ARGS:-} \
    >"$work/daemon.out" 2>"$work/daemon.log" &
daemon=$!
pids+=("$daemon")
for _ in $(seq 100); do grep -q "listening on" "$work/daemon.out" && break; sleep 0.1; done
addr=$(awk '/listening on/ {print $4}' "$work/daemon.out")
[ -n "$addr" ] || { echo "the daemon did not start:" >&2; cat "$work/daemon.log" >&2; exit 1; }

case "$app" in
    rust) "$bin/bench_app" "$addr" >"$work/app.out" 2>"$work/app.log" & actor_type=echo ;;
    python)
        [ -x .venv/bin/python ] || { echo "run scripts/test once first (it sets up .venv)" >&2; exit 1; }
        .venv/bin/python bench/python/idle_app.py "$addr" >"$work/app.out" 2>"$work/app.log" &
        actor_type=echo ;;
    *) echo "usage: bench/idle_out.sh [rust|python] [N] [IDLE_SECONDS]" >&2; exit 2 ;;
esac
pids+=("$!")
for _ in $(seq 300); do grep -q registered "$work/app.out" && break; sleep 0.1; done
grep -q registered "$work/app.out" || { echo "the app did not register:" >&2; cat "$work/app.log" >&2; exit 1; }

rss_mb() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$daemon/status"; }
active() {
    "$bin/troupe" status --addr "$addr" -o json |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["active_actors"])'
}
sleep 1
base=$(rss_mb)
"$bin/tell_many" "$addr" "$actor_type" "$n" 512
peak=$(rss_mb)
peak_active=$(active)
# Idle timeout, one sweep period and the waves; bounded at 10 minutes.
for _ in $(seq 600); do
    [ "$(active)" = 0 ] && break
    sleep 1
done
left=$(active)
sleep 3 # jemalloc returns freed pages within about a second
after=$(rss_mb)
detached=$(grep -c 'reason="app_detached"' "$work/daemon.log" || true)
failed=$(grep -c "app stream failed" "$work/daemon.log" || true)

python3 - "$app" "$n" "$base" "$peak" "$peak_active" "$after" "$left" "$detached" "$failed" <<'EOF'
import sys
app, n, base, peak, peak_active, after, left, detached, failed = sys.argv[1:]
base, peak, after = float(base), float(peak), float(after)
growth = peak - base
kept = (after - base) / growth if growth > 0 else 0.0
print(f"| app | actors | active at peak | RSS base MB | RSS active MB | RSS after idle-out MB | kept of the growth (target <= 50%) | left active | detached | stream failures |")
print(f"|---|---|---|---|---|---|---|---|---|---|")
print(f"| {app} | {n} | {peak_active} | {base:.1f} | {peak:.1f} | {after:.1f} | {kept:.0%} | {left} | {detached} | {failed} |")
EOF
