#!/usr/bin/env bash
# Builds and runs bench_sdk.ts (the TypeScript SDK on both sides of a local daemon).
#
#   bench/typescript/run_bench.sh [--duration 5] [--max-calls 20000] [--actors 1000] [--unix]
#
# TROUPE_BIN: daemon binary (default target/debug/troupe). TROUPE_SDK_CORE=js|native
# picks the SDK's core on both sides (default: native when its addon loads; build it
# with sdks/typescript/scripts/build_native.sh --release). Builds the SDK first
# if sdks/typescript/dist is missing.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$repo_root/bench/typescript"
sdk="$repo_root/sdks/typescript"
if [[ ! -f "$sdk/dist/index.js" || ! -x "$sdk/node_modules/.bin/tsc" ]]; then
    (cd "$sdk" && npm ci --no-audit --no-fund >/dev/null && npm run --silent build)
fi
"$sdk/scripts/link_sdk.sh" "$here"
"$sdk/node_modules/.bin/tsc" -p "$here/tsconfig.json"
# Which kind of host made the table (sequential calls move twofold with it).
python3 "$repo_root/bench/python/wake_cost.py" --round-trips 5000 || true
exec node "$here/build/bench_sdk.js" "$@"
