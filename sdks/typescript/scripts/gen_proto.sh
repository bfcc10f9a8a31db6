#!/usr/bin/env bash
# Regenerate the protobuf/gRPC code in src/gen from ../../proto.
#
#   scripts/gen_proto.sh [OUT_DIR]
#
# OUT_DIR defaults to src/gen. The staleness test (test/proto_fresh.test.ts)
# passes a temporary directory and compares the result with the committed files.
# Tools come from node_modules (npm ci): buf compiles, ts-proto generates.
set -euo pipefail
sdk="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$sdk/src/gen}"
cd "$sdk"
rm -rf "$out"
"$sdk/node_modules/.bin/buf" generate "$sdk/../../proto" --template "$sdk/buf.gen.yaml" -o "$out.tmp"
mv "$out.tmp/src/gen" "$out"
rm -rf "$out.tmp"
