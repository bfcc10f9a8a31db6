#!/usr/bin/env bash
# Install, build, lint and test the TypeScript SDK, its example and its benchmark,
# with the tests run on both of the SDK's cores (src/core.ts): the native addon
# (crates/sdk-node, built here by scripts/build_native.sh) and @grpc/grpc-js.
#
#   sdks/typescript/scripts/check.sh [extra node --test args]
#
# Integration tests start the real daemon: $TROUPE_BIN (default target/debug/troupe
# at the repo root); they fail when it is missing. The cross-language test needs
# the Python SDK's virtualenv: $TROUPE_PYTHON (default <repo>/.venv/bin/python).
set -euo pipefail
sdk="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repo="$(cd "$sdk/../.." && pwd)"
cd "$sdk"

echo "== npm ci"; npm ci --no-audit --no-fund
echo "== native core (cargo build -p troupe-sdk-node)"; "$sdk/scripts/build_native.sh"
echo "== build (tsc -p tsconfig.build.json)"; npm run --silent build
echo "== typecheck (tsc --noEmit, strict)"; npm run --silent typecheck
echo "== eslint (typescript-eslint strictTypeChecked, no-explicit-any)"; npm run --silent lint
echo "== example and benchmark (tsc --noEmit)"
for dir in "$repo/examples/typescript" "$repo/bench/typescript"; do
    "$sdk/scripts/link_sdk.sh" "$dir"
    "$sdk/node_modules/.bin/tsc" -p "$dir/tsconfig.json" --noEmit
done
npm run --silent pretest
echo "== node --test (native core)"
TROUPE_SDK_CORE=native node --test --test-concurrency=1 --test-timeout=180000 "$@" build/test/
# The cross-language tests' Python inherits the environment, and "js" names no
# Python core: it gets the variable unset (scripts/python_sdk.sh).
echo "== node --test (@grpc/grpc-js core)"
TROUPE_SDK_CORE=js TROUPE_PYTHON_SDK="${TROUPE_PYTHON:-$repo/.venv/bin/python}" TROUPE_PYTHON="$sdk/scripts/python_sdk.sh" \
    node --test --test-concurrency=1 --test-timeout=180000 "$@" build/test/
echo "== example tests (the cart with @troupe/sdk/testing)"
"$sdk/node_modules/.bin/tsc" -p "$repo/examples/typescript/tsconfig.json"
node --test --test-concurrency=1 --test-timeout=60000 "$repo/examples/typescript/build/cart.test.js"
