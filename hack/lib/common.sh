# hack/lib/common.sh — shared constants and helpers for the hack/ scripts (source it; not executable).
#
# Defines: REPO_ROOT, DEPS (<repo>/.deps), DEFAULT_CONTAINERD_VERSION, SUPPORTED_CONTAINERD_VERSIONS,
#          PAUSE_IMAGE, TEST_IMAGE, PAUSE_TAR, TEST_TAR, and functions
#          containerd_bin_dir VERSION, validate_containerd_version VERSION.
# Environment: none (callers read CONTAINERD_VERSION themselves).
# shellcheck shell=bash
# shellcheck disable=SC2034  # constants used by the scripts that source this file

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEPS="$REPO_ROOT/.deps"
DEFAULT_CONTAINERD_VERSION=v2.2.7
SUPPORTED_CONTAINERD_VERSIONS="v2.2.7 v2.3.4"
# The pause image name must equal the CRI config's pinned sandbox image (see hack/containerd.sh).
PAUSE_IMAGE=registry.k8s.io/pause:3.10.1
TEST_IMAGE=localhost/topolet/busybox:latest
PAUSE_TAR="$DEPS/images/pause.tar"
TEST_TAR="$DEPS/images/busybox.tar"
# Built binaries and Go's module and build caches live outside the clone (CI clones afresh every run):
# a second run on the same machine reuses them. Binaries there are keyed by version and verified
# (their --version output, and the wrapper's go.sum hash for the Kubernetes stack) before use.
TOPOLET_CACHE="${TOPOLET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/topolet}"
KUBE_GO_CACHE="$TOPOLET_CACHE/go"
# The Kubernetes test stack (hack/install-kube.sh): kubelet, kube-apiserver, kube-scheduler, kubectl
# at KUBE_VERSION and the etcd its go.mod pairs with.
KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.7.0

# containerd_bin_dir VERSION: where install-deps puts containerd, its shim and ctr for VERSION.
containerd_bin_dir() { echo "$DEPS/containerd-$1/bin"; }

# validate_containerd_version VERSION: fail (return 1, with a message) unless VERSION can be go-installed.
validate_containerd_version() {
  if [[ ! "$1" =~ ^v2\.(2\.[1-9][0-9]*|3\.[0-9]+)$ ]]; then
    echo "error: CONTAINERD_VERSION=$1 is not supported (supported lines: $SUPPORTED_CONTAINERD_VERSIONS;" \
      "v2.2.0 and older cannot be built with go install)" >&2
    return 1
  fi
}
