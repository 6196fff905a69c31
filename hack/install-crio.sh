#!/usr/bin/env bash
# hack/install-crio.sh — install the CRI-O test stack beside the containerd one (idempotent).
#
# Usage: hack/install-crio.sh            (no arguments; after hack/install-deps.sh, whose runc and
#                                         crictl it uses)
#
# What comes from where (nothing prebuilt is downloaded):
#   crio      built with `go build` in the Go module github.com/cri-o/cri-o@CRIO_VERSION (module
#             proxy), CGO_ENABLED=1, tags containers_image_openpgp containers_image_ostree_stub
#             exclude_graphdriver_btrfs seccomp (no gpgme, no btrfs, no SELinux/AppArmor), and the
#             version ldflags of CRI-O's Makefile (internal/version.buildDate and buildCommit: the
#             tag's time and commit as the module proxy's .info records them; the version itself is
#             a constant in the source, so `crio version` names CRIO_VERSION)
#   crio-import  hack/crio-import (this repository's Go module, after CRI-O's test/copyimg):
#             copies the project's OCI tarballs (oci-archive:) into a stack's containers-storage, as
#             CRI-O has no image import (hack/crio.sh). Its go.mod pins containers/image and
#             containers/storage (go.podman.io/...) at the versions CRI-O's go.mod requires, and
#             every module the two share at CRI-O's version: checked here, a drift fails the install
#   pinns     compiled with gcc from the C sources in the same module (pinns/src, flags of
#             pinns/Makefile: -std=c99 -Os -O3 -Wall -Werror -Wextra, linked -static, stripped)
#   conmon    Debian's package (apt-get install conmon; bookworm: 2.1.6), linked as .deps/bin/conmon
#   runc      the OCI runtime: hack/install-deps.sh's build (.deps/bin/runc), not built here
#   crictl    hack/install-deps.sh's build (.deps/bin/crictl)
# apt-installs what is missing: conmon, gcc, libc6-dev, libseccomp-dev, pkg-config.
#
# Where things go:
#   $TOPOLET_CACHE/crio-<version>/bin/   crio, pinns, and `stamp` (the module's go.sum hash and
#                                        the build tags: a cached build is used only if both match
#                                        and `crio version` names the version)
#   $TOPOLET_CACHE/crio-import-<hash>/   crio-import, keyed by the sha256 of hack/crio-import's files
#   $TOPOLET_CACHE/go/{path,build}       Go's module and build caches (shared with install-deps.sh)
#   <repo>/.deps/crio-<version>/bin/     symlinks to crio, pinns and crio-import
#   <repo>/.deps/bin/conmon              symlink to Debian's /usr/bin/conmon
#   <repo>/.deps/logs/crio-*.log         build logs of the last install
# Builds go to a temporary directory renamed into place, under $TOPOLET_CACHE/install-crio.lock.
#
# Environment:
#   CRIO_VERSION    default v1.36.3 (the only line tried so far)
#   GO              go binary (default: `go` from PATH, else /usr/local/go/bin/go)
#   TOPOLET_CACHE   the cache directory (default ${XDG_CACHE_HOME:-$HOME/.cache}/topolet)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

LOG_NAME=install-crio
CRIO_VERSION="${CRIO_VERSION:-$DEFAULT_CRIO_VERSION}"
CRIO_MODULE=github.com/cri-o/cri-o
CRIO_TAGS="containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs seccomp"

find_go() {
  if [[ -n "${GO:-}" ]]; then :
  elif command -v go >/dev/null 2>&1; then GO="$(command -v go)"
  elif [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go
  else die "go not found (set GO=/path/to/go or put go on PATH)"
  fi
}

# module_field FIELD: one field of `go mod download -json` for the CRI-O module (downloads it once).
module_field() {
  sed -n "s/^\t\"$1\": \"\(.*\)\",\{0,1\}$/\1/p" <<<"$MODULE_JSON" | head -n1
}

download_module() {
  MODULE_JSON="$(cd "$TOPOLET_CACHE" && go_cache_env "$GO" mod download -json "$CRIO_MODULE@$CRIO_VERSION" 2>&1)" ||
    die "go mod download $CRIO_MODULE@$CRIO_VERSION failed: $MODULE_JSON"
  MODULE_DIR="$(module_field Dir)"
  MODULE_SUM="$(module_field Sum)"
  local info
  info="$(module_field Info)"
  [[ -d "$MODULE_DIR/pinns/src" && -n "$MODULE_SUM" && -f "$info" ]] ||
    die "the module download of $CRIO_MODULE@$CRIO_VERSION has no pinns/src, sum or .info ($MODULE_JSON)"
  # The tag's commit and time, as the proxy's .info records them (CRI-O's Makefile takes them from git).
  BUILD_COMMIT="$(sed -n 's/.*"Hash":"\([0-9a-f]*\)".*/\1/p' "$info")"
  BUILD_DATE="$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$info")"
  [[ -n "$BUILD_DATE" ]] || die "no Time in $info"
}

# crio_ok DIR: DIR holds a complete build of this version with these tags.
crio_ok() {
  local dir="$1" f
  for f in crio pinns; do [[ -x "$dir/$f" ]] || return 1; done
  [[ "$(cat "$dir/stamp" 2>/dev/null)" == "$CRIO_VERSION $MODULE_SUM $CRIO_TAGS" ]] || return 1
  "$dir/crio" version 2>/dev/null | grep -Eq "^Version: +${CRIO_VERSION#v}\$"
}

build_go() {
  local tmp="$1" log="$DEPS/logs/crio-go.log" start=$SECONDS
  local ldflags="-s -w -X $CRIO_MODULE/internal/version.buildDate=$BUILD_DATE -X $CRIO_MODULE/internal/version.buildCommit=$BUILD_COMMIT"
  say "building crio $CRIO_VERSION (go build, tags: $CRIO_TAGS)"
  # `go build` inside the downloaded module, not `go install MODULE@VERSION`: the latter asks the
  # proxy's version list for deprecations, and a proxy that serves only exact versions refuses it.
  # The module's go.mod and go.sum pin every dependency (no replace directives).
  if ! (cd "$MODULE_DIR" && go_cache_env CGO_ENABLED=1 "$GO" build -trimpath -tags "$CRIO_TAGS" -ldflags "$ldflags" \
      -o "$tmp/" ./cmd/crio) >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "go build of crio $CRIO_VERSION failed (log: $log)"
  fi
  say "built crio in $((SECONDS - start))s"
}

# pinns: the module's C sources compiled as pinns/Makefile does (objects in the temporary directory:
# the module cache is read-only).
build_pinns() {
  local tmp="$1" log="$DEPS/logs/crio-pinns.log" c objs=()
  local cflags=(-std=c99 -Os -Wall -Werror -Wextra -static)
  say "compiling pinns from $MODULE_DIR/pinns/src"
  : >"$log"
  for c in "$MODULE_DIR"/pinns/src/*.c; do
    objs+=("$tmp/$(basename "${c%.c}").o")
    gcc "${cflags[@]}" -O3 -o "${objs[-1]}" -c "$c" >>"$log" 2>&1 ||
      { cat "$log" >&2; die "gcc failed on $c (log: $log)"; }
  done
  gcc -o "$tmp/pinns" "${objs[@]}" "${cflags[@]}" >>"$log" 2>&1 ||
    { cat "$log" >&2; die "linking pinns failed (static: needs libc6-dev's libc.a; log: $log)"; }
  strip -s "$tmp/pinns"
  rm -f "${objs[@]}"
}

install_crio() {
  local out="$TOPOLET_CACHE/crio-$CRIO_VERSION/bin" tmp
  if crio_ok "$out"; then
    say "crio $CRIO_VERSION already built ($out)"
  else
    command -v gcc >/dev/null || die "gcc not found (crio needs cgo; pinns is C)"
    pkg-config --exists libseccomp || die "pkg-config does not find libseccomp (apt-get install libseccomp-dev pkg-config)"
    mkdir -p "$(dirname "$out")"
    tmp="$(mktemp -d "$out.tmp.XXXXXX")"
    # shellcheck disable=SC2064  # expand now: tmp is local
    trap "rm -rf '$tmp'" EXIT
    build_go "$tmp"
    build_pinns "$tmp"
    echo "$CRIO_VERSION $MODULE_SUM $CRIO_TAGS" >"$tmp/stamp"
    chmod 755 "$tmp"
    rm -rf "$out"
    mv "$tmp" "$out"
    trap - EXIT
    crio_ok "$out" || die "the crio just built does not report ${CRIO_VERSION#v} ($out/crio version)"
    CHANGED=1
  fi
  local dest="$DEPS/crio-$CRIO_VERSION/bin" n
  mkdir -p "$dest"
  for n in crio pinns; do
    [[ "$(readlink "$dest/$n" 2>/dev/null)" == "$out/$n" ]] || ln -sfn "$out/$n" "$dest/$n"
  done
}

# check_import_pins: every module hack/crio-import/go.mod names that CRI-O's go.mod names too is at
# CRI-O's version (so the copy writes the storage exactly as crio's own code would).
check_import_pins() {
  local drift
  drift="$(LC_ALL=C join <(awk '/^\t/ { print $1, $2 }' "$HACK_DIR/crio-import/go.mod" | LC_ALL=C sort) \
                <(awk '/^\t/ { print $1, $2 }' "$MODULE_DIR/go.mod" | LC_ALL=C sort) | awk '$2 != $3')"
  [[ -z "$drift" ]] || die "hack/crio-import/go.mod differs from CRI-O $CRIO_VERSION's go.mod (module, ours, CRI-O's): $drift"
  grep -q '^[[:space:]]go.podman.io/image/v5 ' "$HACK_DIR/crio-import/go.mod" || die "hack/crio-import/go.mod does not pin go.podman.io/image/v5"
}

install_crio_import() {
  local src="$HACK_DIR/crio-import" hash out tmp log="$DEPS/logs/crio-import.log"
  hash="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -c1-16)"
  out="$TOPOLET_CACHE/crio-import-$hash"
  if [[ -x "$out/crio-import" ]]; then
    say "crio-import already built ($out)"
  else
    check_import_pins
    say "building crio-import (hack/crio-import)"
    tmp="$(mktemp -d "$out.tmp.XXXXXX")"
    if ! (cd "$src" && go_cache_env CGO_ENABLED=1 "$GO" build -trimpath -mod=readonly -tags "$CRIO_TAGS" \
        -ldflags "-s -w" -o "$tmp/" .) >"$log" 2>&1; then
      rm -rf "$tmp"
      tail -n 30 "$log" >&2
      die "go build of hack/crio-import failed (log: $log)"
    fi
    chmod 755 "$tmp"
    rm -rf "$out"
    mv "$tmp" "$out"
    CHANGED=1
  fi
  local link="$DEPS/crio-$CRIO_VERSION/bin/crio-import"
  [[ "$(readlink "$link" 2>/dev/null)" == "$out/crio-import" ]] || ln -sfn "$out/crio-import" "$link"
}

link_conmon() {
  local conmon
  conmon="$(command -v conmon)" || die "conmon not found after apt-get install conmon"
  "$conmon" --version 2>/dev/null | grep -q '^conmon version ' || die "$conmon --version does not answer"
  [[ "$(readlink "$DEPS/bin/conmon" 2>/dev/null)" == "$conmon" ]] || ln -sfn "$conmon" "$DEPS/bin/conmon"
}

main() {
  (($# == 0)) || die "usage: install-crio.sh (no arguments; CRIO_VERSION in the environment)"
  [[ "$CRIO_VERSION" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "CRIO_VERSION=$CRIO_VERSION is not a v1.X.Y tag"
  local f
  for f in runc crictl; do
    [[ -x "$DEPS/bin/$f" ]] || die "$DEPS/bin/$f is missing: run hack/install-deps.sh first"
  done
  mkdir -p "$DEPS/bin" "$DEPS/logs" "$TOPOLET_CACHE"
  local start=$SECONDS
  CHANGED=0
  apt_ensure conmon gcc libc6-dev libseccomp-dev pkg-config
  find_go
  exec 9>"$TOPOLET_CACHE/install-crio.lock"
  flock 9
  download_module
  install_crio
  install_crio_import
  link_conmon
  if ((CHANGED)); then
    say "done in $((SECONDS - start))s: crio $CRIO_VERSION (+ pinns, crio-import) in $TOPOLET_CACHE, conmon $(conmon --version | sed -n 's/^conmon version //p'), linked into $DEPS"
  else
    say "up to date (crio $CRIO_VERSION, conmon $(conmon --version | sed -n 's/^conmon version //p'))"
  fi
}

main "$@"
