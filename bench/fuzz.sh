#!/usr/bin/env bash
# Coverage-guided fuzzing of every decoder that reads bytes from the network
# or from a user (docs/fuzzing.md): libFuzzer (the libfuzzer-sys crate) on
# stable Rust, with LLVM's SanitizerCoverage turned on through stable
# `-C passes` / `-C llvm-args` flags. No nightly toolchain, no cargo-fuzz.
#
#   bench/fuzz.sh [SECONDS_PER_TARGET | --runs N] [TARGET...]
#
# Default: 60 s per target, every target. `--runs N` runs N inputs per target
# instead (still bounded: at most FUZZ_MAX_SECONDS, default 3600, each).
# Builds the targets (release, instrumented, in $CARGO_TARGET_DIR or
# target/fuzz), writes each target's seeds into fuzz/corpus/TARGET (the
# corpus grows there; it is not committed), runs each target, and prints a
# table: executions, executions/s, corpus size, crashes. A crash, hang or
# out-of-memory input is written to fuzz/artifacts/TARGET/ and libFuzzer stops
# that target at the first one; the script exits 1 if any target had one.
# Re-run one with: $BIN/TARGET fuzz/artifacts/TARGET/crash-...
#
# Needs a C++ compiler (libFuzzer is built from the C++ sources the crate
# ships): `apt-get install g++` is run when `c++` is missing. Extra libFuzzer
# flags go in FUZZ_ARGS (e.g. FUZZ_ARGS="-max_len=65536").
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

all=(client_api admin_api app_stream link_stream link_framed link_wire durations config_file page_tokens)
mode=time
amount=60
if [ "${1:-}" = "--runs" ]; then
    mode=runs
    amount=${2:?--runs needs a count}
    shift 2
elif [ -n "${1:-}" ] && [[ "$1" =~ ^[0-9]+$ ]]; then
    amount=$1
    shift
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for t in "${targets[@]}"; do
    [[ " ${all[*]} " == *" $t "* ]] || { echo "unknown target $t; targets: ${all[*]}" >&2; exit 2; }
done
max_seconds=${FUZZ_MAX_SECONDS:-3600}

if ! command -v c++ >/dev/null; then
    echo "installing a C++ compiler for libFuzzer (apt-get install g++)" >&2
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq g++ >/dev/null
    else sudo apt-get update -qq && sudo apt-get install -y -qq g++ >/dev/null; fi
fi

# The instrumentation cargo-fuzz uses, minus its sanitizer (which needs
# nightly's -Z): 8-bit edge counters, the PC table libFuzzer's coverage
# report reads, and comparison tracing so it learns the magic values
# (type names, method names, "PT1M30S") the decoders compare against.
export RUSTFLAGS="-Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/fuzz}
host=$(rustc -vV | sed -n 's/^host: //p')
# An explicit --target keeps RUSTFLAGS off build scripts and proc macros,
# which must not be instrumented (they would not link without libFuzzer).
build=(cargo build --release --target "$host" --manifest-path fuzz/Cargo.toml)
for t in "${targets[@]}"; do build+=(--bin "$t"); done
echo "building ${targets[*]} (instrumented release; the first build takes a while)" >&2
"${build[@]}"
bin=$CARGO_TARGET_DIR/$host/release

results=()
failed=0
for t in "${targets[@]}"; do
    corpus=fuzz/corpus/$t
    artifacts=fuzz/artifacts/$t
    mkdir -p "$corpus" "$artifacts"
    # The seed step: valid inputs from the target's own encoder.
    log=$CARGO_TARGET_DIR/fuzz-$t.log
    TROUPE_FUZZ_SEEDS=$corpus "$bin/$t" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
    before=$(find "$artifacts" -type f | wc -l)
    # Energy scaled by execution time: inputs that sleep (the app stream's
    # waits for turn timeouts) are mutated less often, which tripled
    # app_stream's executions/s with no loss of coverage.
    # The RSS limit leaves room for the ~230 bytes each input's runtime
    # keeps for the life of the process (fuzz/src/daemon.rs): 10 M inputs
    # reach about 2.4 GB. One allocation past 2 GiB still counts as a crash.
    args=(-print_final_stats=1 -timeout=25 -rss_limit_mb=6144 -malloc_limit_mb=2048
        -entropic_scale_per_exec_time=1
        "-artifact_prefix=$artifacts/")
    # The words the target's decoders compare against (type names, units,
    # setting names), so mutations insert them whole; libFuzzer also learns
    # them from traced comparisons (its memcmp/bcmp interceptors), slower.
    case $t in
        client_api | admin_api | link_stream) dict=fuzz/dict/rpc.dict ;;
        *) dict=fuzz/dict/$t.dict ;;
    esac
    [ -f "$dict" ] && args+=("-dict=$dict")
    if [ "$mode" = runs ]; then
        args+=("-runs=$amount" "-max_total_time=$max_seconds")
        limit=$((max_seconds + 60))
    else
        args+=("-max_total_time=$amount")
        limit=$((amount + 60))
    fi
    echo "fuzzing $t ($mode $amount)" >&2
    start=$(date +%s.%N)
    # shellcheck disable=SC2086
    timeout --kill-after=10 "$limit" "$bin/$t" "${args[@]}" ${FUZZ_ARGS:-} "$corpus" >"$log" 2>&1 || true
    end=$(date +%s.%N)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    execs=${execs:-0}
    crashes=$(( $(find "$artifacts" -type f | wc -l) - before ))
    size=$(find "$corpus" -type f | wc -l)
    rate=$(python3 -c "import sys; print(round(int(sys.argv[1]) / max(float(sys.argv[3]) - float(sys.argv[2]), 1e-9)))" "$execs" "$start" "$end")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    results+=("$t $execs $rate ${cov:-?} $size $crashes")
    if [ "$crashes" -gt 0 ] || ! grep -q '^stat::number_of_executed_units' "$log"; then
        failed=1
        echo "$t: see $log" >&2
        grep -E 'panicked at|ERROR: libFuzzer|Test unit written|SUMMARY' "$log" | head -8 >&2 || true
    fi
done

printf '\n%-12s %12s %9s %7s %8s %8s\n' target executions exec/s cov corpus crashes
for r in "${results[@]}"; do
    # shellcheck disable=SC2086
    printf '%-12s %12s %9s %7s %8s %8s\n' $r
done
exit "$failed"
