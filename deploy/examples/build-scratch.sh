#!/usr/bin/env bash
# Builds the Python example app's image (examples/python/vehicle_app.py, the
# `vehicle` actor type) FROM scratch with podman, from what this machine has:
# no base image can be pulled here. The same app as ./Containerfile.vehicle-app
# (which users build on a public python image), laid out by hand:
#
#   - the host's python3 interpreter, its standard library (without tests,
#     IDLE, tkinter, ensurepip...) and its compiled modules, at the paths the
#     interpreter was built for (so it finds its prefix with no settings);
#   - the troupe SDK (sdks/python/src/troupe, pure Python) and its runtime
#     dependencies from sdks/python/pyproject.toml (grpcio, protobuf,
#     opentelemetry-api...), installed with pip into /app/lib (PYTHONPATH);
#   - every shared library `ldd` lists for the interpreter and the compiled
#     modules, and the dynamic loader;
#   - a non-root user (10001, as deploy/examples/vehicle-app.yaml runs it) and
#     no shell: the entrypoint is python itself.
#
#   deploy/examples/build-scratch.sh [TAG]      # TAG: localhost/troupe-vehicle-app:dev
#
# PYTHON picks the interpreter (default /usr/bin/python3, else python3 on PATH;
# 3.11 or newer: tomllib); its pip (or python3's on PATH) fetches the dependencies from PyPI (its cache
# makes a rebuild quick). Needs podman and, on machines like ours,
# CONTAINERS_CONF pointing at settings podman can run with here.
set -euo pipefail
tag=${1:-localhost/troupe-vehicle-app:dev}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
if [ -z "${PYTHON:-}" ]; then
    if [ -x /usr/bin/python3 ]; then PYTHON=/usr/bin/python3; else PYTHON=python3; fi
fi
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
root=$context/rootfs
mkdir -p "$root/app/lib" "$root/tmp" "$root/etc" "$root/usr/local/bin"

# Where the interpreter lives and what it was built to find: its real path,
# the standard library, the compiled modules (lib-dynload).
read -r exe stdlib platstdlib version < <("$PYTHON" -c '
import os, sys, sysconfig
p = sysconfig.get_paths()
print(os.path.realpath(sys.executable), p["stdlib"], p["platstdlib"], "%d.%d" % sys.version_info[:2])')
mkdir -p "$root$(dirname "$exe")"
cp -L "$exe" "$root$exe"
ln -s "$exe" "$root/usr/local/bin/python3"
ln -s "$exe" "$root/usr/local/bin/python"
for dir in "$stdlib" "$platstdlib"; do
    [ -d "$root$dir" ] && continue
    mkdir -p "$root$dir"
    # The library the app can use; what only development, tests or a desktop
    # need stays out (and site-packages: the app's packages are in /app/lib).
    tar -C "$dir" -cf - \
        --exclude=./site-packages --exclude=./dist-packages --exclude=./test \
        --exclude=./idlelib --exclude=./tkinter --exclude=./turtledemo \
        --exclude=./ensurepip --exclude=./lib2to3 --exclude=./pydoc_data \
        --exclude='./config-*' --exclude='*/_test*.so' --exclude='*/xxlimited*.so' \
        --exclude=./EXTERNALLY-MANAGED . | tar -C "$root$dir" -xf -
done

# The SDK and its runtime dependencies (wheels only: nothing compiles here).
deps=$("$PYTHON" - "$repo/sdks/python/pyproject.toml" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["dependencies"]))
EOF
)
mapfile -t deps <<<"$deps"
# The interpreter's own pip; without one (Debian's python3 without python3-pip), the pip
# of python3 on PATH, fetching the wheels made for the image's interpreter.
pip=("$PYTHON" -m pip)
pip_target=()
if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
    abi=cp${version/./}
    pip=(python3 -m pip)
    pip_target=(--python-version "$version" --implementation cp --abi "$abi" --platform manylinux2014_x86_64)
fi
"${pip[@]}" install --quiet --disable-pip-version-check --root-user-action=ignore \
    --no-warn-script-location --only-binary=:all: "${pip_target[@]}" \
    --target "$root/app/lib" "${deps[@]}"
rm -rf "$root/app/lib/bin"
cp -r "$repo/sdks/python/src/troupe" "$root/app/lib/troupe"
find "$root/app/lib" -name __pycache__ -prune -exec rm -rf {} +
# Compiled once here: the root file system is read-only at run time.
"$PYTHON" -m compileall -q -j 0 "$root/app/lib" >/dev/null
cp "$repo/examples/python/vehicle_app.py" "$root/app/vehicle_app.py"

# Every shared library the interpreter and the compiled modules load, and the
# loader, at the paths they ask for.
{
    ldd "$exe"
    find "$root" -name '*.so' -o -name '*.so.*' | while read -r so; do ldd "$so" 2>/dev/null || true; done
} | awk '/=> \// { print $3 } /^[ \t]*\/[^ ]*ld-linux/ { print $1 }' | sort -u | while read -r lib; do
    [ -e "$root$lib" ] && continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done

# Names for the users (tools that print them), nothing else.
printf 'root:x:0:0:root:/root:/sbin/nologin\napp:x:10001:10001:app:/app:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\napp:x:10001:\n' >"$root/etc/group"
chmod 1777 "$root/tmp"
podman build --quiet --build-arg "PYTHON_VERSION=$version" -t "$tag" \
    -f "$here/Containerfile.scratch" "$context" >/dev/null
echo "$tag"
