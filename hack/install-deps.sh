#!/usr/bin/env bash
# hack/install-deps.sh — install the containerd + runc test stack into <repo>/.deps (idempotent).
#
# Usage: hack/install-deps.sh            (no arguments)
#
# Builds from source with the Go module proxy (no prebuilt downloads):
#   containerd, containerd-shim-runc-v2, ctr  (CGO_ENABLED=0, tags no_btrfs,no_devmapper,no_zfs)
#   crictl                                    (CGO_ENABLED=0)
#   runc                                      (cgo; needs gcc + libc6-dev; no seccomp tag)
# apt-installs what is missing (busybox-static for the images, gcc, libc6-dev),
# then builds the offline OCI image tarballs (hack/build-images.sh).
#
# Layout of <repo>/.deps (git-ignored):
#   .deps/containerd-<version>/bin/   containerd, containerd-shim-runc-v2, ctr of one line
#   .deps/bin/                        runc, crictl (shared by all lines), plus symlinks
#                                     containerd, containerd-shim-runc-v2, ctr -> the default line
#   .deps/images/                     pause.tar, busybox.tar (OCI image layouts, see build-images.sh)
#   .deps/go/{path,cache}             private GOPATH (module cache) and GOCACHE
#   .deps/logs/                       build logs of the last install
#
# Environment:
#   CONTAINERD_VERSION   containerd line to install: v2.2.7 (default) or v2.3.4
#                        (any v2.2.N with N>=1 or v2.3.N is accepted; older tags cannot be go-installed)
#   CRICTL_VERSION       default v1.34.0
#   RUNC_VERSION         default v1.3.6
#   GO                   go binary (default: `go` from PATH, else /usr/local/go/bin/go)
#
# When everything is already installed it prints one short line.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

CONTAINERD_VERSION="${CONTAINERD_VERSION:-$DEFAULT_CONTAINERD_VERSION}"
CRICTL_VERSION="${CRICTL_VERSION:-v1.34.0}"
RUNC_VERSION="${RUNC_VERSION:-v1.3.6}"

die() { echo "install-deps: error: $*" >&2; exit 1; }
say() { echo "install-deps: $*"; }

validate_versions() {
  validate_containerd_version "$CONTAINERD_VERSION" || exit 1
  [[ "$CRICTL_VERSION" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "CRICTL_VERSION=$CRICTL_VERSION is not a vX.Y.Z tag"
  [[ "$RUNC_VERSION" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "RUNC_VERSION=$RUNC_VERSION is not a vX.Y.Z tag"
}

find_go() {
  if [[ -n "${GO:-}" ]]; then :
  elif command -v go >/dev/null 2>&1; then GO="$(command -v go)"
  elif [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go
  else die "go not found (set GO=/path/to/go or put go on PATH)"
  fi
}

# Private Go environment so nothing depends on (or pollutes) the user's GOPATH.
go_env() {
  env GOPATH="$DEPS/go/path" GOMODCACHE="$DEPS/go/path/pkg/mod" GOCACHE="$DEPS/go/cache" \
    GOTOOLCHAIN=local GOFLAGS=-buildvcs=false "$@"
}

# apt-get install the named packages that are not installed yet.
apt_ensure() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  command -v apt-get >/dev/null || die "packages missing and no apt-get: ${missing[*]}"
  say "apt-get install ${missing[*]}"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >"$DEPS/logs/apt.log" 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$DEPS/logs/apt.log" 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >>"$DEPS/logs/apt.log" 2>&1 ||
      { tail -n 20 "$DEPS/logs/apt.log" >&2; die "apt-get install ${missing[*]} failed (log: $DEPS/logs/apt.log)"; }
  fi
}

# has_version BIN FLAG VERSION: BIN exists and `BIN FLAG` mentions VERSION.
has_version() {
  local out
  [[ -x "$1" ]] && out="$("$1" "$2" 2>/dev/null)" && [[ "$out" == *"$3"* ]]
}

# go_install NAME GOBIN CGO TAGS LDFLAGS PKG...
go_install() {
  local name="$1" gobin="$2" cgo="$3" tags="$4" ldflags="$5"; shift 5
  local log="$DEPS/logs/$name.log" start=$SECONDS
  mkdir -p "$gobin"
  say "building $name ($*)"
  if ! go_env GOBIN="$gobin" CGO_ENABLED="$cgo" "$GO" install -trimpath ${tags:+-tags "$tags"} \
        -ldflags "$ldflags" "$@" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "go install of $name failed (log: $log)"
  fi
  say "built $name in $((SECONDS - start))s"
  CHANGED=1
}

install_containerd() {
  local v="$CONTAINERD_VERSION" bin
  bin="$(containerd_bin_dir "$v")"
  if has_version "$bin/containerd" --version "$v" && has_version "$bin/ctr" --version "$v" &&
     has_version "$bin/containerd-shim-runc-v2" -v "$v"; then
    return 0
  fi
  local m=github.com/containerd/containerd/v2
  go_install "containerd-$v" "$bin" 0 no_btrfs,no_devmapper,no_zfs \
    "-s -w -X $m/version.Version=$v -X $m/version.Revision=go-install" \
    "$m/cmd/containerd@$v" "$m/cmd/containerd-shim-runc-v2@$v" "$m/cmd/ctr@$v"
}

install_crictl() {
  if has_version "$DEPS/bin/crictl" --version "$CRICTL_VERSION"; then return 0; fi
  go_install "crictl-$CRICTL_VERSION" "$DEPS/bin" 0 "" \
    "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
    "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
}

install_runc() {
  if has_version "$DEPS/bin/runc" --version "version ${RUNC_VERSION#v}"; then return 0; fi
  command -v gcc >/dev/null || die "gcc not found (runc needs cgo)"
  go_install "runc-$RUNC_VERSION" "$DEPS/bin" 1 "" \
    "-s -w -X main.version=${RUNC_VERSION#v} -X main.gitCommit=go-install" \
    "github.com/opencontainers/runc@$RUNC_VERSION"
}

# .deps/bin/{containerd,ctr,containerd-shim-runc-v2} point at the default line when it is installed.
link_default_line() {
  local t src="containerd-$DEFAULT_CONTAINERD_VERSION/bin"
  [[ -x "$DEPS/$src/containerd" ]] || return 0
  for t in containerd containerd-shim-runc-v2 ctr; do
    [[ "$(readlink "$DEPS/bin/$t" 2>/dev/null)" == "../$src/$t" ]] || ln -sfn "../$src/$t" "$DEPS/bin/$t"
  done
}

main() {
  validate_versions
  mkdir -p "$DEPS/bin" "$DEPS/logs" "$DEPS/go"
  local start=$SECONDS
  CHANGED=0
  apt_ensure busybox-static gcc libc6-dev
  find_go
  install_runc
  install_crictl
  install_containerd
  link_default_line
  "$HACK_DIR/build-images.sh" --quiet || die "building the test images failed"
  if ((CHANGED)); then
    say "done in $((SECONDS - start))s: containerd $CONTAINERD_VERSION, crictl $CRICTL_VERSION, runc $RUNC_VERSION in $DEPS"
  else
    say "up to date (containerd $CONTAINERD_VERSION, crictl $CRICTL_VERSION, runc $RUNC_VERSION)"
  fi
}

main "$@"
