#!/usr/bin/env bash
# Static checks and tests of the Python SDK, its example and its benchmark, with
# the tests run on both of the SDK's cores.
# Assumes an active virtualenv with: pip install -e 'sdks/python[dev]'
# Integration tests use $TROUPE_BIN (default target/debug/troupe); without a
# built daemon they are skipped, and the unit tests still run.
set -euo pipefail
sdk="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repo="$(cd "$sdk/../.." && pwd)"
cd "$sdk"
# The test kit's example (examples/python/test_cart.py) finds the daemon as a
# user's tests would: $TROUPE_BIN, else the one installed with the package.
if [[ -z "${TROUPE_BIN:-}" && -x "$repo/target/debug/troupe" ]]; then
    export TROUPE_BIN="$repo/target/debug/troupe"
fi

python_dirs=(src tests scripts build_backend "$repo/examples/python" "$repo/bench/python")
echo "== ruff check"; ruff check --config pyproject.toml "${python_dirs[@]}"
echo "== ruff format --check"; ruff format --check --config pyproject.toml "${python_dirs[@]}"
echo "== mypy --strict"; mypy --strict src build_backend "$repo/examples/python" "$repo/bench/python"
# Once per core (src/troupe/_core.py): the native one (troupe._native, built by the
# editable install) and the pure-Python fallback; both must pass every test.
echo "== pytest (native core)"; TROUPE_SDK_CORE=native python -m pytest "$@"
echo "== pytest (pure-Python core)"; TROUPE_SDK_CORE=python python -m pytest "$@"
