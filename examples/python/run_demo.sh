#!/usr/bin/env bash
# Runs the Python bus-tracker demo end to end: a fresh daemon on a free loopback
# port with a temporary data dir, the vehicle app, then the client. Everything
# started here is stopped on exit.
#
#   TROUPE_BIN   daemon binary (default: target/debug/troupe under the repo root)
#   TROUPE_VENV  virtualenv with the SDK installed (default: .venv under the repo root)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${TROUPE_BIN:-$repo_root/target/debug/troupe}"
venv="${TROUPE_VENV:-$repo_root/.venv}"
python="$venv/bin/python"

[[ -x "$bin" ]] || { echo "run_demo: daemon binary $bin not found; build it (cargo build) or set TROUPE_BIN" >&2; exit 1; }
[[ -x "$python" ]] || { echo "run_demo: no Python at $python; create the venv and pip install -e sdks/python, or set TROUPE_VENV" >&2; exit 1; }
"$python" -c 'import troupe' 2>/dev/null || { echo "run_demo: troupe SDK not installed in $venv; run: $python -m pip install -e $repo_root/sdks/python" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/troupe-demo.XXXXXX")"
daemon_pid=""
app_pid=""
cleanup() {
    local rc=$?
    set +e  # a child's non-zero exit during teardown must not replace the demo's status
    [[ -n "$app_pid" ]] && kill -TERM "$app_pid" 2>/dev/null && wait "$app_pid" 2>/dev/null
    [[ -n "$daemon_pid" ]] && kill -TERM "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
    if [[ $rc -ne 0 ]]; then
        echo "--- daemon log ---" >&2; tail -n 30 "$work/daemon.log" >&2 || true
        echo "--- app log ---" >&2; tail -n 30 "$work/app.log" >&2 || true
    fi
    rm -rf "$work"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
export TROUPE_ADDR="127.0.0.1:$port"

echo "starting troupe serve on $TROUPE_ADDR (data dir $work/data)"
"$bin" serve --listen "$TROUPE_ADDR" --data-dir "$work/data" >"$work/daemon.log" 2>&1 &
daemon_pid=$!

# The app re-connects until the daemon is up, so it can start right away; it
# prints "registered" once the daemon accepted its actor type.
"$python" -u "$repo_root/examples/python/vehicle_app.py" >"$work/app.log" 2>&1 &
app_pid=$!
for _ in $(seq 1 150); do
    grep -q '^registered' "$work/app.log" 2>/dev/null && break
    kill -0 "$app_pid" 2>/dev/null || { echo "run_demo: the vehicle app exited" >&2; exit 1; }
    kill -0 "$daemon_pid" 2>/dev/null || { echo "run_demo: the daemon exited" >&2; exit 1; }
    sleep 0.1
done
grep -q '^registered' "$work/app.log" || { echo "run_demo: the vehicle app did not register within 15 s" >&2; exit 1; }
echo "vehicle app registered"

"$python" "$repo_root/examples/python/client.py"

# What the daemon itself knows, through the CLI.
echo
echo "\$ troupe actors list --type vehicle"
"$bin" actors list --type vehicle --addr "$TROUPE_ADDR"
echo
echo "\$ troupe state get vehicle bus-7 reports"
"$bin" state get vehicle bus-7 reports --addr "$TROUPE_ADDR"
