# Shared steps of scripts/demo and scripts/test. Sourced, not run.

build_daemon() {
    echo "== building the troupe daemon (debug)" >&2
    cargo build --quiet -p troupe
}

# The debug daemon build_daemon built, wherever CARGO_TARGET_DIR puts it.
daemon_bin() {
    local target=${CARGO_TARGET_DIR:-target}
    case $target in /*) ;; *) target=$PWD/$target ;; esac
    echo "$target/debug/troupe"
}

# A virtualenv at .venv with the Python SDK and its dev tools, created once.
python_venv() {
    # Reinstall when the venv predates the SDK's current dependencies: the
    # stamp holds the pyproject it was installed from.
    local stamp=.venv/.pyproject.installed
    if [ ! -x .venv/bin/python ] || ! cmp -s sdks/python/pyproject.toml "$stamp" \
        || ! .venv/bin/python -c 'import troupe, pytest' 2>/dev/null; then
        echo "== setting up .venv with the Python SDK" >&2
        python3 -m venv .venv
        .venv/bin/python -m pip install --quiet --upgrade pip
        # The SDK's build (maturin) builds its native core, troupe._native,
        # in the debug profile, sharing the dependencies build_daemon built
        # (release would take minutes more); the tests run $TROUPE_BIN.
        MATURIN_PEP517_ARGS="--profile dev" \
            .venv/bin/python -m pip install --quiet -e 'sdks/python[dev]'
        cp sdks/python/pyproject.toml "$stamp"
    fi
}
