# hack/lib/common.sh — shared constants and helpers for the hack/ scripts (source it; not executable).
#
# Defines: REPO_ROOT, DEPS (<repo>/.deps), DEFAULT_CONTAINERD_VERSION, SUPPORTED_CONTAINERD_VERSIONS,
#          PAUSE_IMAGE, TEST_IMAGE, PAUSE_TAR, TEST_TAR, TOPOLET_CACHE, KUBE_GO_CACHE, KUBE_VERSION,
#          ETCD_VERSION, HELM_VERSION, DEFAULT_CRIO_VERSION, and functions containerd_bin_dir VERSION, validate_containerd_version VERSION,
#          go_cache_env CMD..., apt_ensure PKG..., and the scripts' messages: die, say, warn.
# Environment: none (callers read CONTAINERD_VERSION themselves).
# shellcheck shell=bash
# shellcheck disable=SC2034  # constants used by the scripts that source this file

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEPS="$REPO_ROOT/.deps"
# The containerd lines the project supports and tests: v2.4 (NRI v0.12.3, has the UpdateContainers
# deadlock fix containerd/nri#301), the v2.3 LTS (NRI v0.12.0, without it) and the v2.0 LTS (NRI
# v0.8.0, built from hack/containerd-wrapper/v2.0.14). 2.2 is end of life.
DEFAULT_CONTAINERD_VERSION=v2.4.2
SUPPORTED_CONTAINERD_VERSIONS="v2.4.2 v2.3.7 v2.0.14"
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
# Helm 4 (hack/install-kube.sh builds it from the Go module proxy): renders and installs
# deploy/helm/topolet.
HELM_VERSION=v4.3.2
# CRI-O, the second runtime (hack/install-crio.sh builds it from the Go module proxy, hack/crio.sh
# runs it): the line tried so far.
DEFAULT_CRIO_VERSION=v1.36.3

# The scripts' messages, each line prefixed with LOG_NAME (the sourcing script's file name unless
# it sets LOG_NAME itself, e.g. LOG_NAME=install-deps):
#   die MESSAGE   "LOG_NAME: DIE_LABEL: MESSAGE" on stderr, then exit 1 (DIE_LABEL: "error", or
#                 what the script sets, e.g. FAIL)
#   say MESSAGE   "LOG_NAME: MESSAGE" on stdout, or on stderr with SAY_TO_STDERR=1 (the scripts
#                 whose stdout is their result: key=value lines, a table)
#   warn MESSAGE  "LOG_NAME: warning: MESSAGE" on stderr
# A script that needs more (hack/test.sh's die ends its step first) defines its own after sourcing.
LOG_NAME="$(basename "${BASH_SOURCE[-1]}")"
DIE_LABEL=error
SAY_TO_STDERR=0
die() { echo "$LOG_NAME: $DIE_LABEL: $*" >&2; exit 1; }
say() { if ((SAY_TO_STDERR)); then echo "$LOG_NAME: $*" >&2; else echo "$LOG_NAME: $*"; fi; }
warn() { echo "$LOG_NAME: warning: $*" >&2; }

# containerd_bin_dir VERSION: where the scripts find containerd, its shim and ctr for VERSION
# (install-deps links them there from $TOPOLET_CACHE/containerd-VERSION/bin).
# cargo_tool_install CRATE VERSION ROOT VERSION_LINE LINK: the cargo-installed tool CRATE at
# VERSION in ROOT (under $TOPOLET_CACHE: a fresh clone reuses it), installed with `cargo install
# --locked --debug` unless ROOT/bin/CRATE already answers --version with VERSION_LINE, and linked
# as LINK. --debug: these tools drive cargo or read a few files; an optimized build costs minutes
# and saves fractions of a second. Without CARGO_TARGET_DIR: cargo install builds in a directory of
# its own, never holding the lock of the workspace's target directory hack/test.sh builds in.
cargo_tool_install() {
  local crate="$1" version="$2" root="$3" line="$4" link="$5" cached="$3/bin/$1"
  command -v cargo >/dev/null || die "cargo not found on PATH"
  if [[ -x "$cached" ]] && "$cached" --version 2>/dev/null | grep -qx "$line"; then
    say "$crate $version already installed ($root)"
  else
    say "installing $crate $version into $root"
    env -u CARGO_TARGET_DIR cargo install --locked --quiet --force --debug "$crate@$version" --root "$root"
    "$cached" --version | grep -qx "$line" || die "$crate $version did not install"
  fi
  mkdir -p "$(dirname "$link")"
  [[ "$(readlink "$link" 2>/dev/null)" == "$cached" ]] || ln -sfn "$cached" "$link"
}

containerd_bin_dir() { echo "$DEPS/containerd-$1/bin"; }

# go_cache_env CMD...: run CMD with Go's module and build caches in $KUBE_GO_CACHE (outside the
# clone, shared by every build of the hack/ scripts), the local toolchain only, no VCS stamping.
go_cache_env() {
  env GOPATH="$KUBE_GO_CACHE/path" GOMODCACHE="$KUBE_GO_CACHE/path/pkg/mod" GOCACHE="$KUBE_GO_CACHE/build" \
    GOTOOLCHAIN=local GOFLAGS=-buildvcs=false "$@"
}

# containerd_wrapper_dir VERSION: the committed wrapper module that builds VERSION when `go install`
# refuses it (its go.mod has an exclude block); exists only for such versions.
containerd_wrapper_dir() { echo "$REPO_ROOT/hack/containerd-wrapper/$1"; }

# validate_containerd_version VERSION: fail (return 1, with a message) unless VERSION is a v2.3 or
# v2.4 release (any patch: `go install` builds them as they are) or has a wrapper module (v2.0.14).
validate_containerd_version() {
  if [[ ! "$1" =~ ^v2\.[34]\.[0-9]+$ && ! ( "$1" =~ ^v2\.[0-9]+\.[0-9]+$ && -f "$(containerd_wrapper_dir "$1")/go.mod" ) ]]; then
    echo "error: CONTAINERD_VERSION=$1 is not supported (supported lines: $SUPPORTED_CONTAINERD_VERSIONS;" \
      "any v2.3.N or v2.4.N builds, and v2.0.14 from hack/containerd-wrapper; 2.2 is end of life)" >&2
    return 1
  fi
}

# apt_ensure PKG...: apt-get install the named packages that are not installed yet (log in
# $DEPS/logs/apt.log; on failure an apt-get update and one retry).
apt_ensure() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  mkdir -p "$DEPS/logs"
  command -v apt-get >/dev/null || die "packages missing and no apt-get: ${missing[*]}"
  say "apt-get install ${missing[*]}"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >"$DEPS/logs/apt.log" 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$DEPS/logs/apt.log" 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >>"$DEPS/logs/apt.log" 2>&1 ||
      { tail -n 20 "$DEPS/logs/apt.log" >&2; die "apt-get install ${missing[*]} failed (log: $DEPS/logs/apt.log)"; }
  fi
}
