#!/usr/bin/env bash
# $TROUPE_PYTHON_SDK without TROUPE_SDK_CORE: check.sh's run of the tests on the
# @grpc/grpc-js core sets TROUPE_SDK_CORE=js, which the Python SDK the
# cross-language tests start would refuse (its cores are "python" and "native").
exec env -u TROUPE_SDK_CORE "${TROUPE_PYTHON_SDK:?TROUPE_PYTHON_SDK names the Python SDK virtualenv python}" "$@"
