#!/usr/bin/env bash
# hack/install-deps.sh — install the containerd + runc test stack (idempotent).
#
# Usage: hack/install-deps.sh            (no arguments)
#
# Builds from source with the Go module proxy (no prebuilt downloads):
#   containerd, containerd-shim-runc-v2, ctr  (CGO_ENABLED=0, tags no_btrfs,no_devmapper,no_zfs)
#   crictl                                    (CGO_ENABLED=0)
#   runc                                      (CGO_ENABLED=1, tag seccomp: the kubelet asks seccomp
#                                              RuntimeDefault for every pod sandbox, and a runc
#                                              without it fails them all; needs gcc, libc6-dev,
#                                              libseccomp-dev, pkg-config)
# apt-installs what is missing (busybox-static for the images, gcc, libc6-dev, libseccomp-dev,
# pkg-config; shellcheck for hack/test.sh's check of the scripts), then builds the offline OCI image tarballs (hack/build-images.sh).
#
# Where things go. The binaries and Go's caches live outside the clone (CI clones afresh every
# run), so a second run on this machine builds nothing:
#   $TOPOLET_CACHE/containerd-<version>/bin/  containerd, containerd-shim-runc-v2, ctr of one line
#   $TOPOLET_CACHE/runc-<version>/bin/        runc (with seccomp)
#   $TOPOLET_CACHE/crictl-<version>/bin/      crictl
#   $TOPOLET_CACHE/go/{path,build}            GOPATH (module cache) and GOCACHE, shared with
#                                             hack/install-kube.sh
# A cached binary is used only if its version output names the expected version (and, for runc,
# `libseccomp: x.y.z`: an older seccomp-less runc is rebuilt); otherwise it is rebuilt in place.
# Builds go to a temporary directory renamed into place, under a lock ($TOPOLET_CACHE/install-deps.lock),
# so concurrent runs from several clones neither collide nor build twice.
#
# In the clone, <repo>/.deps (git-ignored), what the scripts use:
#   .deps/containerd-<version>/bin/   symlinks to that line's cached containerd, shim, ctr
#   .deps/bin/                        symlinks runc, crictl (shared by all lines), and
#                                     containerd, containerd-shim-runc-v2, ctr -> the default line
#   .deps/images/                     pause.tar, busybox.tar (OCI image layouts, see build-images.sh)
#   .deps/logs/                       build logs of the last install
#
# Environment:
#   CONTAINERD_VERSION   containerd line to install: v2.4.2 (default), v2.3.7 or v2.0.14
#                        (any v2.3.N or v2.4.N is accepted; v2.0.14 is built from its wrapper module
#                        hack/containerd-wrapper/v2.0.14, as its go.mod has an exclude block)
#   CRICTL_VERSION       default v1.34.0
#   RUNC_VERSION         default v1.3.6
#   GO                   go binary (default: `go` from PATH, else /usr/local/go/bin/go)
#   TOPOLET_CACHE        the cache directory (default ${XDG_CACHE_HOME:-$HOME/.cache}/topolet)
#
# When everything is already installed it prints one short line.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

CONTAINERD_VERSION="${CONTAINERD_VERSION:-$DEFAULT_CONTAINERD_VERSION}"
CRICTL_VERSION="${CRICTL_VERSION:-v1.34.0}"
RUNC_VERSION="${RUNC_VERSION:-v1.3.6}"

LOG_NAME=install-deps

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

# has_version BIN FLAG WANT...: BIN exists and `BIN FLAG` mentions every WANT.
has_version() {
  local bin="$1" flag="$2" out w; shift 2
  [[ -x "$bin" ]] && out="$("$bin" "$flag" 2>/dev/null)" || return 1
  for w in "$@"; do [[ "$out" == *"$w"* ]] || return 1; done
}

# go_install NAME OUTDIR CGO TAGS LDFLAGS PKG...: build PKG... into OUTDIR (in the cache) through a
# temporary directory whose files are then renamed into OUTDIR, so a reader never sees half a binary.
# Runs `go install` in the current directory (a wrapper module, or anywhere for PKG@VERSION).
go_install() {
  local name="$1" out="$2" cgo="$3" tags="$4" ldflags="$5"; shift 5
  local log="$DEPS/logs/$name.log" start=$SECONDS tmp f
  mkdir -p "$out"
  tmp="$(mktemp -d "$out.tmp.XXXXXX")"
  say "building $name ($*)"
  if ! go_cache_env GOBIN="$tmp" CGO_ENABLED="$cgo" "$GO" install -trimpath ${tags:+-tags "$tags"} \
        -ldflags "$ldflags" "$@" >"$log" 2>&1; then
    rm -rf "$tmp"
    tail -n 30 "$log" >&2
    die "go install of $name failed (log: $log)"
  fi
  for f in "$tmp"/*; do mv -f "$f" "$out/"; done
  rmdir "$tmp"
  say "built $name in $((SECONDS - start))s"
  CHANGED=1
}

# link SRC_DIR DEST_DIR NAME...: DEST_DIR/NAME -> SRC_DIR/NAME (replacing whatever was there).
link() {
  local src="$1" dest="$2" n; shift 2
  mkdir -p "$dest"
  for n in "$@"; do
    [[ -x "$src/$n" ]] || die "$src/$n is missing after the build"
    [[ "$(readlink "$dest/$n" 2>/dev/null)" == "$src/$n" ]] || ln -sfn "$src/$n" "$dest/$n"
  done
}

# A line whose go.mod has an exclude block (v2.0.x) is built from its committed wrapper module
# (hack/containerd-wrapper/<version>/, see gen-wrapper.sh there); the others with go install @version.
install_containerd() {
  local v="$CONTAINERD_VERSION" out="$TOPOLET_CACHE/containerd-$CONTAINERD_VERSION/bin"
  if ! { has_version "$out/containerd" --version "$v" && has_version "$out/ctr" --version "$v" &&
         has_version "$out/containerd-shim-runc-v2" -v "$v"; }; then
    local m=github.com/containerd/containerd/v2 wrapper
    local ldflags="-s -w -X $m/version.Version=$v -X $m/version.Revision=go-install"
    wrapper="$(containerd_wrapper_dir "$v")"
    if [[ -f "$wrapper/go.mod" ]]; then
      (cd "$wrapper" && go_install "containerd-$v" "$out" 0 no_btrfs,no_devmapper,no_zfs "$ldflags" \
        "$m/cmd/containerd" "$m/cmd/containerd-shim-runc-v2" "$m/cmd/ctr")
      CHANGED=1
    else
      go_install "containerd-$v" "$out" 0 no_btrfs,no_devmapper,no_zfs "$ldflags" \
        "$m/cmd/containerd@$v" "$m/cmd/containerd-shim-runc-v2@$v" "$m/cmd/ctr@$v"
    fi
    has_version "$out/containerd" --version "$v" || die "the containerd just built does not report $v"
  fi
  link "$out" "$(containerd_bin_dir "$v")" containerd containerd-shim-runc-v2 ctr
}

install_crictl() {
  local out="$TOPOLET_CACHE/crictl-$CRICTL_VERSION/bin"
  if ! has_version "$out/crictl" --version "$CRICTL_VERSION"; then
    go_install "crictl-$CRICTL_VERSION" "$out" 0 "" \
      "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
      "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  fi
  link "$out" "$DEPS/bin" crictl
}

# runc --version of a seccomp build ends with `libseccomp: 2.5.4`; without the tag that line is absent.
install_runc() {
  local out="$TOPOLET_CACHE/runc-$RUNC_VERSION/bin"
  if ! has_version "$out/runc" --version "version ${RUNC_VERSION#v}" "libseccomp: "; then
    command -v gcc >/dev/null || die "gcc not found (runc needs cgo)"
    pkg-config --exists libseccomp || die "pkg-config does not find libseccomp (apt-get install libseccomp-dev pkg-config)"
    go_install "runc-$RUNC_VERSION" "$out" 1 seccomp \
      "-s -w -X main.version=${RUNC_VERSION#v} -X main.gitCommit=go-install" \
      "github.com/opencontainers/runc@$RUNC_VERSION"
    has_version "$out/runc" --version "libseccomp: " || die "the runc just built has no seccomp support"
  fi
  link "$out" "$DEPS/bin" runc
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
  mkdir -p "$DEPS/bin" "$DEPS/logs" "$TOPOLET_CACHE"
  local start=$SECONDS
  CHANGED=0
  apt_ensure busybox-static gcc libc6-dev libseccomp-dev pkg-config shellcheck
  find_go
  # One install at a time per cache: a second run waits, then finds the binaries built.
  exec 9>"$TOPOLET_CACHE/install-deps.lock"
  flock 9
  install_runc
  install_crictl
  install_containerd
  link_default_line
  "$HACK_DIR/build-images.sh" --quiet || die "building the test images failed"
  if ((CHANGED)); then
    say "done in $((SECONDS - start))s: containerd $CONTAINERD_VERSION, crictl $CRICTL_VERSION, runc $RUNC_VERSION in $TOPOLET_CACHE, linked into $DEPS"
  else
    say "up to date (containerd $CONTAINERD_VERSION, crictl $CRICTL_VERSION, runc $RUNC_VERSION)"
  fi
}

main "$@"
