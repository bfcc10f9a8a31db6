# Sourced by the bench scripts that start daemons (not run by itself):
# waiting for a process's start line, and reading the address it announced.

# Waits up to 30 s for PATTERN in FILE (a process's stdout); if it never
# comes, prints the end of that log and of its .err beside it, and fails.
wait_for() { # file pattern what
    for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    echo "$3 did not start; its log:" >&2; tail -n 30 "$1" "${1%.out}.err" >&2 2>/dev/null; return 1
}

# The address in FILE's "NAME listening on ADDR" line.
announced() { sed -n "s/^$2 listening on //p" "$1"; }
