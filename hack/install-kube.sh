#!/usr/bin/env bash
# hack/install-kube.sh — build the Kubernetes test stack offline and link it into <repo>/.deps/bin.
#
# Usage: hack/install-kube.sh            (no arguments; idempotent, prints progress)
#
# Builds from the Go module proxy, through the wrapper modules under hack/kube/ (their go.mod/go.sum are
# committed; hack/kube/gen-wrapper.sh regenerates them per version):
#   kube-apiserver, kubelet, kube-scheduler, kubectl   k8s.io/kubernetes $KUBE_VERSION (one go build,
#                                                       CGO_ENABLED=0, -tags grpcnotrace, real /version)
#   kube-controller-manager                            the same, a build of its own (only the Helm suite
#                                                       runs it: DaemonSets and ServiceAccounts)
#   helm                                               helm.sh/helm/v4 $HELM_VERSION (go install)
#   etcd                                               go.etcd.io/etcd/server/v3 $ETCD_VERSION
#   loopback                                           CNI loopback plugin (containernetworking/plugins)
# runc with seccomp is hack/install-deps.sh's job (the kubelet always asks RuntimeDefault).
#
# Where things go:
#   $TOPOLET_CACHE/kube/<key>/bin/   the built binaries; <key> = version + a hash of the wrapper's
#                                    go.mod and go.sum, so a changed wrapper is a new key. Kept across
#                                    clones: a second CI run on this machine builds nothing.
#   $TOPOLET_CACHE/go/               Go's module and build caches for these builds
#   <repo>/.deps/bin/                symlinks to the cached binaries (what the scripts and tests use)
# A cached binary is used only if `BIN --version` (or `version`) names the expected version.
#
# Environment: GO (default: go on PATH, else /usr/local/go/bin/go), TOPOLET_CACHE (hack/lib/common.sh).
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

CNI_PLUGINS_VERSION=v1.9.0

LOG_NAME=install-kube

GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
[[ -x "$GO" ]] || die "go not found (set GO=/path/to/go or put go on PATH)"

kube_go_env() {
  env GOPATH="$KUBE_GO_CACHE/path" GOMODCACHE="$KUBE_GO_CACHE/path/pkg/mod" GOCACHE="$KUBE_GO_CACHE/build" \
    GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0 "$@"
}

wrapper_key() { # wrapper_key DIR VERSION: VERSION plus 12 hex of the module files' hash
  echo "$2-$(cat "$1/go.mod" "$1/go.sum" | sha256sum | cut -c1-12)"
}

# version_ok BIN WANT ARGS...: `BIN ARGS...` runs and prints WANT.
version_ok() {
  local bin="$1" want="$2" out; shift 2
  [[ -x "$bin" ]] && out="$("$bin" "$@" 2>&1)" && [[ "$out" == *"$want"* ]]
}

# build LOGNAME DIR OUTDIR LDFLAGS PKG...: go build in module DIR into OUTDIR.
build() {
  local name="$1" dir="$2" out="$3" ldflags="$4" start=$SECONDS log; shift 4
  log="$DEPS/logs/$name.log"
  mkdir -p "$out.tmp"
  say "building $name ($*) — several minutes on a cold cache; log: $log"
  if ! (cd "$dir" && kube_go_env "$GO" build -trimpath -tags grpcnotrace -ldflags "$ldflags" -o "$out.tmp/" "$@") \
      >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "building $name failed (log: $log)"
  fi
  mkdir -p "$out"
  mv -f "$out.tmp"/* "$out/" && rmdir "$out.tmp"
  say "built $name in $((SECONDS - start))s"
}

install_kubernetes() {
  local out ldflags="-s -w" k m
  out="$TOPOLET_CACHE/kube/$(wrapper_key "$HACK_DIR/kube/wrapper" "$KUBE_VERSION")/bin"
  if version_ok "$out/kubelet" "Kubernetes $KUBE_VERSION" --version &&
     version_ok "$out/kube-apiserver" "Kubernetes $KUBE_VERSION" --version &&
     version_ok "$out/kube-scheduler" "Kubernetes $KUBE_VERSION" --version &&
     version_ok "$out/kubectl" "$KUBE_VERSION" version --client; then
    KUBE_BIN_DIR="$out"; return 0
  fi
  local major=${KUBE_VERSION#v}; major=${major%%.*}
  local minor=${KUBE_VERSION#v*.}; minor=${minor%%.*}
  for m in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    for k in "gitVersion=$KUBE_VERSION" "gitMajor=$major" "gitMinor=$minor" gitTreeState=clean \
             "gitCommit=wrapper-$KUBE_VERSION" buildDate=1970-01-01T00:00:00Z; do
      ldflags+=" -X $m.$k"
    done
  done
  build "kubernetes-$KUBE_VERSION" "$HACK_DIR/kube/wrapper" "$out" "$ldflags" \
    ./cmd/kube-apiserver ./cmd/kubelet ./cmd/kube-scheduler ./cmd/kubectl
  version_ok "$out/kubelet" "Kubernetes $KUBE_VERSION" --version || die "built kubelet does not report $KUBE_VERSION"
  KUBE_BIN_DIR="$out"
}

# The controller manager: its own build into the same directory, so a cache built before it was
# added keeps its other binaries.
install_controller_manager() {
  local out="$KUBE_BIN_DIR" ldflags="-s -w" k m
  version_ok "$out/kube-controller-manager" "Kubernetes $KUBE_VERSION" --version && return 0
  local major=${KUBE_VERSION#v}; major=${major%%.*}
  local minor=${KUBE_VERSION#v*.}; minor=${minor%%.*}
  for m in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    for k in "gitVersion=$KUBE_VERSION" "gitMajor=$major" "gitMinor=$minor" gitTreeState=clean \
             "gitCommit=wrapper-$KUBE_VERSION" buildDate=1970-01-01T00:00:00Z; do
      ldflags+=" -X $m.$k"
    done
  done
  build "kube-controller-manager-$KUBE_VERSION" "$HACK_DIR/kube/wrapper" "$out" "$ldflags" ./cmd/kube-controller-manager
  version_ok "$out/kube-controller-manager" "Kubernetes $KUBE_VERSION" --version ||
    die "built kube-controller-manager does not report $KUBE_VERSION"
}

# Helm 4 (the chart deploy/helm/topolet: hack/validate-deploy.sh renders it, the Helm suite installs
# it): `go install` of its module as it is published; version stamped as upstream's Makefile does
# (internal/version.version).
install_helm() {
  local out="$TOPOLET_CACHE/helm-$HELM_VERSION/bin" start=$SECONDS
  if ! version_ok "$out/helm" "$HELM_VERSION" version --short; then
    say "building helm $HELM_VERSION — a few minutes on a cold cache"
    mkdir -p "$out"
    kube_go_env GOBIN="$out" "$GO" install -trimpath \
      -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
      "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" >"$DEPS/logs/helm.log" 2>&1 ||
      { tail -n 20 "$DEPS/logs/helm.log" >&2; die "building helm $HELM_VERSION failed (log: $DEPS/logs/helm.log)"; }
    version_ok "$out/helm" "$HELM_VERSION" version --short || die "built helm does not report $HELM_VERSION"
    say "built helm in $((SECONDS - start))s"
  fi
  HELM_BIN_DIR="$out"
}

install_etcd() {
  local out
  out="$TOPOLET_CACHE/kube/$(wrapper_key "$HACK_DIR/kube/etcd-wrapper" "etcd-$ETCD_VERSION")/bin"
  if ! version_ok "$out/etcd" "etcd Version: ${ETCD_VERSION#v}" --version; then
    # etcd's version is compiled into go.etcd.io/etcd/api/v3/version: no ldflags needed.
    build "etcd-$ETCD_VERSION" "$HACK_DIR/kube/etcd-wrapper" "$out" "-s -w" ./cmd/etcd
    version_ok "$out/etcd" "etcd Version: ${ETCD_VERSION#v}" --version || die "built etcd does not report $ETCD_VERSION"
  fi
  ETCD_BIN_DIR="$out"
}

install_cni_loopback() {
  local out="$TOPOLET_CACHE/cni-$CNI_PLUGINS_VERSION/bin" start=$SECONDS
  if [[ ! -x "$out/loopback" ]]; then
    say "building CNI loopback $CNI_PLUGINS_VERSION"
    mkdir -p "$out"
    kube_go_env GOBIN="$out" "$GO" install -trimpath -ldflags "-s -w" \
      "github.com/containernetworking/plugins/plugins/main/loopback@$CNI_PLUGINS_VERSION" \
      >"$DEPS/logs/cni-loopback.log" 2>&1 || { tail -n 20 "$DEPS/logs/cni-loopback.log" >&2; die "building the CNI loopback plugin failed"; }
    say "built CNI loopback in $((SECONDS - start))s"
  fi
  CNI_BIN_DIR="$out"
}

link() { # link SRC_DIR NAME...: .deps/bin/NAME -> SRC_DIR/NAME
  local src="$1" n; shift
  for n in "$@"; do
    [[ -x "$src/$n" ]] || die "$src/$n is missing after the build"
    [[ "$(readlink "$DEPS/bin/$n" 2>/dev/null)" == "$src/$n" ]] || ln -sfn "$src/$n" "$DEPS/bin/$n"
  done
}

main() {
  mkdir -p "$DEPS/bin" "$DEPS/logs" "$DEPS/cni/bin" "$TOPOLET_CACHE"
  local start=$SECONDS
  # One install at a time per cache (two clones on one machine): a second run waits, then finds
  # the binaries built.
  exec 9>"$TOPOLET_CACHE/install-kube.lock"
  flock 9
  install_etcd
  install_kubernetes
  install_controller_manager
  install_helm
  install_cni_loopback
  link "$KUBE_BIN_DIR" kube-apiserver kubelet kube-scheduler kubectl kube-controller-manager
  link "$HELM_BIN_DIR" helm
  link "$ETCD_BIN_DIR" etcd
  [[ "$(readlink "$DEPS/cni/bin/loopback" 2>/dev/null)" == "$CNI_BIN_DIR/loopback" ]] ||
    ln -sfn "$CNI_BIN_DIR/loopback" "$DEPS/cni/bin/loopback"
  say "ready in $((SECONDS - start))s: Kubernetes $KUBE_VERSION, etcd $ETCD_VERSION, helm $HELM_VERSION, CNI loopback $CNI_PLUGINS_VERSION (binaries in $TOPOLET_CACHE)"
}

main "$@"
