#!/usr/bin/env bash
# Builds the SDK's native core (crates/sdk-node, a Node-API addon) and puts it
# where the SDK looks for it in a checkout: sdks/typescript/native/troupe.<platform>.node
# (src/core.ts). The installed package carries it in @troupe/daemon-<platform> instead
# (scripts/package).
#
#   sdks/typescript/scripts/build_native.sh [--release]
#
# CARGO_TARGET_DIR is honoured (default <repo>/target). Prints the addon's path.
set -euo pipefail
sdk="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repo="$(cd "$sdk/../.." && pwd)"
profile=debug
cargo_args=()
if [[ "${1:-}" == "--release" ]]; then
    profile=release
    cargo_args+=(--release)
fi
target="${CARGO_TARGET_DIR:-$repo/target}"
(cd "$repo" && cargo build -q -p troupe-sdk-node "${cargo_args[@]}")
# The platform key of src/daemon.ts: os-cpu, and on Linux the C library.
key="$(node -p 'const k = `${process.platform}-${process.arch}`; process.platform !== "linux" ? k : `${k}-${process.report.getReport().header.glibcVersionRuntime ? "gnu" : "musl"}`')"
case "$(uname -s)" in
    Darwin) lib="libtroupe_node.dylib" ;;
    *) lib="libtroupe_node.so" ;;
esac
mkdir -p "$sdk/native"
# Copied, not linked: a later cargo build must not swap the file under a running test.
cp "$target/$profile/$lib" "$sdk/native/troupe.$key.node.tmp"
mv "$sdk/native/troupe.$key.node.tmp" "$sdk/native/troupe.$key.node"
echo "$sdk/native/troupe.$key.node"
