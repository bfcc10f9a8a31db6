#!/usr/bin/env bash
# Installs the tools the Kubernetes chart's checks use, once, into a cache outside the
# repository (kept across clones and CI runs on the same machine), and prints the
# directory to put on PATH:
#
#   helm          helm.sh/helm/v3, built from its Go module (with the Kubernetes version
#                 its release builds carry, so `helm template` defaults as a user's would)
#   kubeconform   github.com/yannh/kubeconform, from its Go module
#   checkov       the policy scanner, from PyPI, in a virtualenv of its own (its many
#                 pinned dependencies stay out of .venv); kube-linter's Go module
#                 (golang.stackrox.io) is not served by the module proxy here
#
#   PATH="$(scripts/k8s-tools.sh):$PATH"
#
# kubernetes-validate (the Kubernetes JSON schemas, offline) goes into the repo's .venv:
# scripts/lib.sh's python_venv makes it, this script adds the package.
# TROUPE_K8S_TOOLS overrides the cache (default ~/.cache/troupe/k8s-tools). Needs go
# (Debian's golang-go is installed when missing and we are root) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_VERSION=v3.22.0
HELM_K8S_MINOR=37 # k8s.io/client-go v0.37 in helm v3.22.0's go.mod
KUBECONFORM_VERSION=v0.8.0
CHECKOV_VERSION=3.3.30
KUBERNETES_VALIDATE_VERSION=1.37.0
PROMQL_PARSER_VERSION=0.12.0

tools=${TROUPE_K8S_TOOLS:-$HOME/.cache/troupe/k8s-tools}
bin=$tools/bin
mkdir -p "$bin"
log() { echo "k8s-tools: $*" >&2; }

need_go() {
    command -v go >/dev/null 2>&1 && return
    [ "$(id -u)" = 0 ] || { log "go is missing; run: sudo apt-get install -y golang-go"; exit 1; }
    log "installing Debian's golang-go"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null
}

# A tool is reinstalled when the stamp beside it names another version.
installed() { [ -x "$bin/$1" ] && [ "$(cat "$bin/.$1.version" 2>/dev/null)" = "$2" ]; }

if ! installed helm "$HELM_VERSION"; then
    need_go
    log "building helm $HELM_VERSION (go install, a few minutes once)"
    flags="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
    for pkg in chartutil lint/rules; do
        flags+=" -X helm.sh/helm/v3/pkg/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/$pkg.k8sVersionMinor=$HELM_K8S_MINOR"
    done
    GOBIN=$bin GOFLAGS=-buildvcs=false go install -ldflags "$flags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
    echo "$HELM_VERSION" >"$bin/.helm.version"
fi

if ! installed kubeconform "$KUBECONFORM_VERSION"; then
    need_go
    log "building kubeconform $KUBECONFORM_VERSION (go install)"
    GOBIN=$bin GOFLAGS=-buildvcs=false go install "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
    echo "$KUBECONFORM_VERSION" >"$bin/.kubeconform.version"
fi

if ! installed checkov "$CHECKOV_VERSION"; then
    log "installing checkov $CHECKOV_VERSION (PyPI, its own virtualenv)"
    rm -rf "$tools/checkov"
    python3 -m venv "$tools/checkov"
    "$tools/checkov/bin/python" -m pip install --quiet --upgrade pip
    "$tools/checkov/bin/python" -m pip install --quiet "checkov==$CHECKOV_VERSION"
    ln -sf "$tools/checkov/bin/checkov" "$bin/checkov"
    echo "$CHECKOV_VERSION" >"$bin/.checkov.version"
fi

if [ -x .venv/bin/python ] && ! .venv/bin/python -c "
import importlib.metadata as m, sys
sys.exit(m.version('kubernetes-validate') != '$KUBERNETES_VALIDATE_VERSION')" 2>/dev/null; then
    log "installing kubernetes-validate $KUBERNETES_VALIDATE_VERSION into .venv"
    .venv/bin/python -m pip install --quiet "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi

# The alert rules' PromQL is parsed by the promql-parser crate's Python binding (a wheel:
# no toolchain), into .venv beside kubernetes-validate.
if [ -x .venv/bin/python ] && ! .venv/bin/python -c "
import importlib.metadata as m, sys
sys.exit(m.version('promql-parser') != '$PROMQL_PARSER_VERSION')" 2>/dev/null; then
    log "installing promql-parser $PROMQL_PARSER_VERSION into .venv"
    .venv/bin/python -m pip install --quiet "promql-parser==$PROMQL_PARSER_VERSION"
fi

echo "$bin"
