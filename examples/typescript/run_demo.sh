#!/usr/bin/env bash
# Runs the TypeScript bus-tracker demo end to end: a fresh daemon on a free loopback
# port with a temporary data dir, the vehicle app, then the client. Everything
# started here is stopped on exit.
#
#   TROUPE_BIN   daemon binary (default: target/debug/troupe under the repo root)
#
# Builds the SDK first if sdks/typescript/dist is missing (npm ci + tsc).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$repo_root/examples/typescript"
sdk="$repo_root/sdks/typescript"
bin="${TROUPE_BIN:-$repo_root/target/debug/troupe}"

[[ -x "$bin" ]] || { echo "run_demo: daemon binary $bin not found; build it (cargo build) or set TROUPE_BIN" >&2; exit 1; }
command -v node >/dev/null || { echo "run_demo: node (v20+) not found" >&2; exit 1; }
if [[ ! -f "$sdk/dist/index.js" || ! -x "$sdk/node_modules/.bin/tsc" ]]; then
    echo "building the SDK in $sdk"
    (cd "$sdk" && npm ci --no-audit --no-fund >/dev/null && npm run --silent build)
fi
"$sdk/scripts/link_sdk.sh" "$here"
"$sdk/node_modules/.bin/tsc" -p "$here/tsconfig.json"

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

port="$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"
export TROUPE_ADDR="127.0.0.1:$port"

echo "starting troupe serve on $TROUPE_ADDR (data dir $work/data)"
"$bin" serve --listen "$TROUPE_ADDR" --data-dir "$work/data" >"$work/daemon.log" 2>&1 &
daemon_pid=$!

# The app re-connects until the daemon is up, so it can start right away; it
# prints "registered" once the daemon accepted its actor type.
node "$here/build/vehicle_app.js" >"$work/app.log" 2>&1 &
app_pid=$!
for _ in $(seq 1 150); do
    grep -q '^registered' "$work/app.log" 2>/dev/null && break
    kill -0 "$app_pid" 2>/dev/null || { echo "run_demo: the vehicle app exited" >&2; exit 1; }
    kill -0 "$daemon_pid" 2>/dev/null || { echo "run_demo: the daemon exited" >&2; exit 1; }
    sleep 0.1
done
grep -q '^registered' "$work/app.log" || { echo "run_demo: the vehicle app did not register within 15 s" >&2; exit 1; }
echo "vehicle app registered"

node "$here/build/client.js"
