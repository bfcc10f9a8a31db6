#!/usr/bin/env bash
# Prometheus and promtool for the tests that run the chart's alert rules and
# dashboard queries against real daemons (tests/tests/prometheus_rules.rs) and
# check the rule file (tests/deploy/chart_test.py). Prints the directory holding
# both binaries.
#
#   scripts/prometheus.sh          install once, print the directory
#
# The binaries come out of Debian's `prometheus` package, unpacked into a cache
# outside the repository (TROUPE_PROMETHEUS_HOME, default ~/.cache/troupe/prometheus)
# rather than installed: installing it would also start a Prometheus service on
# :9090, on every interface, and pull in its web UI's JavaScript packages.
set -euo pipefail

die() { echo "prometheus.sh: $*" >&2; exit 1; }

home=${TROUPE_PROMETHEUS_HOME:-$HOME/.cache/troupe/prometheus}
bin=$home/usr/bin
if [ -x "$bin/prometheus" ] && [ -x "$bin/promtool" ]; then
    echo "$bin"
    exit 0
fi

command -v apt-get >/dev/null 2>&1 || die "no apt-get: put Prometheus 2.x's prometheus and promtool in $bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt-get drops privileges to _apt for downloads; a directory it may write keeps
# it from warning as root.
chmod 0777 "$work"
echo "prometheus.sh: unpacking Debian's prometheus package into $home" >&2
if ! (cd "$work" && apt-get download -qq prometheus >/dev/null 2>&1); then
    [ "$(id -u)" = 0 ] || die "apt-get could not download the prometheus package; as root, run: apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    (cd "$work" && apt-get download -qq prometheus >/dev/null) || die "apt-get download prometheus failed"
fi
mkdir -p "$home"
dpkg-deb -x "$work"/prometheus_*.deb "$home"
[ -x "$bin/prometheus" ] && [ -x "$bin/promtool" ] || die "the package held no usr/bin/prometheus and usr/bin/promtool"
echo "$bin"
