#!/usr/bin/env bash
# Builds the daemon image FROM scratch with podman, from a troupe binary
# built on this machine: the binary (debug symbols stripped), the shared
# libraries `ldd` lists, the dynamic loader, a non-root user's writable
# state directory and /tmp. The same layout as ./Containerfile's image.
#
#   deploy/container/build-scratch.sh BINARY [TAG]     # TAG: localhost/troupe:dev
#
# Needs podman (apt-get install podman runc) and, on machines like ours,
# CONTAINERS_CONF pointing at settings podman can run with here.
set -euo pipefail
binary=${1:?usage: build-scratch.sh BINARY [TAG]}
tag=${2:-localhost/troupe:dev}
here=$(cd "$(dirname "$0")" && pwd)
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
root=$context/rootfs
mkdir -p "$root/usr/local/bin" "$root/tmp" "$root/etc" "$context/state/troupe"
objcopy --strip-debug "$binary" "$root/usr/local/bin/troupe"
# Every library the binary loads, and the loader itself, at the paths the
# binary asks for.
ldd "$binary" | awk '/=> \// { print $3 } /^[ \t]*\// { print $1 }' | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
# A name for the non-root user (tools that print it), nothing else.
printf 'root:x:0:0:root:/root:/sbin/nologin\ntroupe:x:65532:65532:troupe:/var/lib/troupe:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\ntroupe:x:65532:\n' >"$root/etc/group"
chmod 1777 "$root/tmp"
podman build --quiet -t "$tag" -f "$here/Containerfile.scratch" "$context" >/dev/null
echo "$tag"
