#!/usr/bin/env bash
# Make `import ... from "@troupe/sdk"` resolve in a directory outside the SDK
# (examples/typescript, bench/typescript): node_modules/@troupe/sdk -> sdks/typescript,
# whose dist/ must be built (npm run build). No network access, no package manager.
#
#   sdks/typescript/scripts/link_sdk.sh DIR
set -euo pipefail
sdk="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$(cd "$1" && pwd)"
mkdir -p "$dir/node_modules/@troupe"
ln -sfn "$sdk" "$dir/node_modules/@troupe/sdk"
