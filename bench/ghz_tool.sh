# Sourced by the bench scripts that drive load with ghz (not run by itself):
# sets `tools` to target/bench-tools and installs ghz there (a Go module, a
# fixed version) the first time. Expects to be sourced from the repository root.

tools="$PWD/target/bench-tools"
mkdir -p "$tools"
if [ ! -x "$tools/ghz" ]; then
    echo "installing ghz (Go module) into $tools" >&2
    GOBIN="$tools" go install github.com/bojand/ghz/cmd/ghz@v0.120.0
fi
