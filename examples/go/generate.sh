#!/usr/bin/env bash
# Generates the Go code for Troupe's gRPC API (proto/troupe/v1/*.proto) into
# examples/go/troupepb/. The .proto files carry no go_package option, so the
# Go import path of each file is given here with M mappings instead: the protos
# stay language-neutral and untouched.
#
# Installs protoc-gen-go and protoc-gen-go-grpc (pinned) into a cache dir when
# missing; protoc itself comes from the system (Debian: protobuf-compiler).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$here/../.." && pwd)"

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
GO_PACKAGE=example.com/troupe-go/troupepb

tools="${XDG_CACHE_HOME:-$HOME/.cache}/troupe-go-tools/bin"
mkdir -p "$tools"

command -v go >/dev/null || { echo "generate: go not found on PATH (https://go.dev/dl/)" >&2; exit 1; }
command -v protoc >/dev/null || {
    echo "generate: protoc not found on PATH; install it: apt-get install protobuf-compiler" >&2
    exit 1
}

# A plugin is reinstalled when missing or of another version (the version is
# kept in a stamp file beside it, since protoc-gen-go-grpc prints no version
# that is easy to compare).
install_tool() {
    local name=$1 pkg=$2 version=$3
    if [[ -x "$tools/$name" && "$(cat "$tools/$name.version" 2>/dev/null)" == "$version" ]]; then
        return
    fi
    echo "generate: installing $name $version into $tools"
    GOBIN="$tools" GOFLAGS=-buildvcs=false go install "$pkg@$version"
    echo "$version" >"$tools/$name.version"
}
install_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"

# Paths are relative to the repo root, so the generated files name the protos
# as "troupe/v1/app.proto" (their import paths) and nothing of this machine.
cd "$repo_root"
protos=(proto/troupe/v1/*.proto)
maps=()
for p in "${protos[@]}"; do
    rel="${p#proto/}"
    maps+=("--go_opt=M$rel=$GO_PACKAGE" "--go-grpc_opt=M$rel=$GO_PACKAGE")
done

out=examples/go/troupepb
rm -rf "$out"
mkdir -p "$out"
PATH="$tools:$PATH" protoc \
    -I proto \
    --go_out="$out" --go_opt=paths=source_relative \
    --go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
    "${maps[@]}" \
    "${protos[@]#proto/}"

# source_relative keeps the proto's directories (troupe/v1/); flatten them
# into one Go package directory, which is what the M mappings name.
mv "$out"/troupe/v1/*.go "$out"/
rm -rf "$out/troupe"
echo "generate: wrote $(ls "$out" | wc -l) files into examples/go/troupepb"
