#!/usr/bin/env bash
# Runs the Go example end to end: a fresh daemon on a free loopback port with
# a temporary data dir, the Go account host, the Go client (which checks every
# answer), then the CLI reading the Go-hosted actors. Everything started here
# is stopped on exit; any failure exits non-zero.
#
#   TROUPE_BIN  daemon binary (default: target/debug/troupe under the repo root)
#   GO          go command (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$here/../.." && pwd)"
bin="${TROUPE_BIN:-$repo_root/target/debug/troupe}"
go="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"

[[ -x "$bin" ]] || { echo "run_demo: daemon binary $bin not found; build it (cargo build -p troupe) or set TROUPE_BIN" >&2; exit 1; }
# Absolute: the script works from the example's directory.
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
[[ -x "$go" ]] || { echo "run_demo: no go command; install Go >= 1.26 or set GO" >&2; exit 1; }
export PATH="$(dirname "$go"):$PATH"

cd "$here"
# The generated code is not committed: make it when missing or older than a proto.
if [[ ! -f troupepb/app.pb.go ]] || [[ -n "$(find "$repo_root/proto/troupe/v1" -name '*.proto' -newer troupepb/app.pb.go)" ]]; then
    ./generate.sh
fi
"$go" build -o bin/host ./host
"$go" build -o bin/client ./client

work="$(mktemp -d "${TMPDIR:-/tmp}/troupe-go-demo.XXXXXX")"
daemon_pid=""
host_pid=""
cleanup() {
    local rc=$?
    set +e  # a child's non-zero exit during teardown must not replace the demo's status
    [[ -n "$host_pid" ]] && kill -TERM "$host_pid" 2>/dev/null && wait "$host_pid" 2>/dev/null
    [[ -n "$daemon_pid" ]] && kill -TERM "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
    if [[ $rc -ne 0 ]]; then
        echo "--- daemon log ---" >&2; tail -n 30 "$work/daemon.log" >&2
        echo "--- host log ---" >&2; tail -n 30 "$work/host.log" >&2
    fi
    rm -rf "$work"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free loopback port: bind port 0 and read what the kernel chose.
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
export TROUPE_ADDR="127.0.0.1:$port"

echo "starting troupe serve on $TROUPE_ADDR"
"$bin" serve --listen "$TROUPE_ADDR" --data-dir "$work/data" >"$work/daemon.log" 2>&1 &
daemon_pid=$!

# The host re-attaches until the daemon is up, so it can start right away; it
# prints "registered" once the daemon accepted its actor type.
./bin/host >"$work/host.log" 2>&1 &
host_pid=$!
for _ in $(seq 1 150); do
    grep -q '^registered' "$work/host.log" 2>/dev/null && break
    kill -0 "$host_pid" 2>/dev/null || { echo "run_demo: the Go host exited" >&2; exit 1; }
    kill -0 "$daemon_pid" 2>/dev/null || { echo "run_demo: the daemon exited" >&2; exit 1; }
    sleep 0.1
done
grep -q '^registered' "$work/host.log" || { echo "run_demo: the Go host did not register within 15 s" >&2; exit 1; }
echo "Go host registered"
echo

./bin/client

echo
echo "host log, the transfer's two turns (the nested one carries the chain, metadata, trace and a shorter deadline):"
grep -E 'call (transfer|deposit) .*request-id:xfer-' "$work/host.log" | sed 's/^/  /'
grep -q 'account/a2 call deposit chain=\[account/a1 > account/a2\] metadata=map\[request-id:xfer-' "$work/host.log" \
    || { echo "run_demo: the nested deposit did not carry the transfer's chain and metadata" >&2; exit 1; }

# What the daemon itself holds, through the CLI.
echo
echo "\$ troupe invoke account a1 balance"
balance="$("$bin" invoke account a1 balance --addr "$TROUPE_ADDR")"
echo "$balance"
[[ "$balance" == 120 ]] || { echo "run_demo: troupe invoke read balance $balance, want 120" >&2; exit 1; }
echo
echo "\$ troupe actors deactivate account a1    # runs the host's deactivate hook"
"$bin" actors deactivate account a1 --addr "$TROUPE_ADDR"
echo
echo "\$ troupe state get account a1"
"$bin" state get account a1 --addr "$TROUPE_ADDR" | tee "$work/state.txt"
grep -Eq '^balance +120$' "$work/state.txt" && grep -Eq '^statements +1$' "$work/state.txt" \
    && grep -Eq '^deactivations +1$' "$work/state.txt" \
    || { echo "run_demo: troupe state get does not show balance 120, statements 1, deactivations 1" >&2; exit 1; }
echo
echo "demo passed"
