#!/usr/bin/env bash
# hack/build-images.sh — build the two test images offline as OCI image-layout tarballs.
#
# Usage: hack/build-images.sh [--quiet] [--force]
#   --quiet   print nothing when the cached tarballs are up to date
#   --force   rebuild even if cached
#        hack/build-images.sh --filler NAME MIB OUT
#             one image NAME at OUT (not cached): the busybox image plus /filler, MIB MiB from
#             /dev/urandom (incompressible, so each such image takes its own space; the eviction
#             suite fills an image filesystem with them)
#
# Images (from Debian's static busybox, /bin/busybox of package busybox-static):
#   registry.k8s.io/pause:3.10.1       -> .deps/images/pause.tar   (/bin/busybox + /bin/sleep;
#                                         Entrypoint ["/bin/sleep","2147483647"])
#   localhost/topolet/busybox:latest   -> .deps/images/busybox.tar (/bin/busybox, every applet as a
#                                         symlink in /bin, /etc/passwd+group, Cmd ["/bin/sh"])
# Each tarball holds oci-layout, index.json (annotation io.containerd.image.name = the full name)
# and blobs/sha256/{layer (uncompressed tar), config, manifest}; import it with
#   ctr -n k8s.io images import FILE
# Tarballs are rebuilt when busybox or this script changes (stamp next to them). Output is
# byte-for-byte reproducible for a given busybox.
#
# Environment:
#   BUSYBOX   static busybox binary to use (default /bin/busybox)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

BUSYBOX="${BUSYBOX:-/bin/busybox}"
QUIET=0
FORCE=0

LOG_NAME=build-images
# say, silent under --quiet.
say() { ((QUIET)) || echo "$LOG_NAME: $*"; }

parse_args() {
  local a
  for a in "$@"; do
    case "$a" in
      --quiet) QUIET=1 ;;
      --force) FORCE=1 ;;
      *) die "unknown argument '$a' (usage: build-images.sh [--quiet] [--force])" ;;
    esac
  done
}

oci_arch() {
  case "$(uname -m)" in
    x86_64) echo amd64 ;;
    aarch64) echo arm64 ;;
    *) die "unsupported machine architecture $(uname -m)" ;;
  esac
}

check_busybox() {
  [[ -x "$BUSYBOX" ]] || die "$BUSYBOX not found (apt-get install busybox-static, or run hack/install-deps.sh)"
  # A dynamically linked busybox would need libc inside the image.
  if file_out="$(LC_ALL=C readelf -l "$BUSYBOX" 2>/dev/null)"; then
    ! grep -q 'Requesting program interpreter' <<<"$file_out" ||
      die "$BUSYBOX is dynamically linked; install busybox-static"
  fi
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# store_blob DIR FILE: move FILE into DIR/blobs/sha256/<digest>, print the digest (hex).
store_blob() {
  local dir="$1" file="$2" d
  d="$(sha256_of "$file")"
  mv "$file" "$dir/blobs/sha256/$d"
  echo "$d"
}

# make_layer ROOTFS OUT: reproducible uncompressed tar of ROOTFS.
make_layer() {
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu \
    -C "$1" -cf "$2" .
}

populate_pause_rootfs() {
  local r="$1"
  mkdir -p "$r/bin" "$r/dev" "$r/proc" "$r/sys" "$r/etc"
  cp "$BUSYBOX" "$r/bin/busybox"
  ln -s busybox "$r/bin/sleep"
  ln -s busybox "$r/bin/sh"
}

populate_busybox_rootfs() {
  local r="$1" applet
  mkdir -p "$r/bin" "$r/dev" "$r/proc" "$r/sys" "$r/etc" "$r/root" "$r/tmp" "$r/var/tmp"
  chmod 1777 "$r/tmp" "$r/var/tmp"
  cp "$BUSYBOX" "$r/bin/busybox"
  while read -r applet; do
    if [[ -n "$applet" && "$applet" != busybox && ! -e "$r/bin/$applet" ]]; then ln -s busybox "$r/bin/$applet"; fi
  done < <("$BUSYBOX" --list)
  for applet in sh sleep cat head yes dd; do
    [[ -L "$r/bin/$applet" ]] || die "$BUSYBOX has no '$applet' applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
}

# build_image NAME OUT_TAR POPULATE_FN CONFIG_PROCESS_JSON
#   CONFIG_PROCESS_JSON: the image config's "config" members besides Env, e.g. "Entrypoint":[...]
build_image() {
  local name="$1" out="$2" populate="$3" process="$4"
  local work layout rootfs layer_d config_d manifest_d arch
  work="$(mktemp -d "$DEPS/images/.build.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" RETURN
  layout="$work/layout"; rootfs="$work/rootfs"
  mkdir -p "$layout/blobs/sha256" "$rootfs"
  arch="$(oci_arch)"

  "$populate" "$rootfs"
  make_layer "$rootfs" "$work/layer.tar"
  local layer_size; layer_size="$(stat -c %s "$work/layer.tar")"
  layer_d="$(store_blob "$layout" "$work/layer.tar")"

  printf '{"architecture":"%s","os":"linux","config":{"Env":["PATH=/bin:/sbin:/usr/bin:/usr/sbin"],%s,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"topolet hack/build-images.sh"}]}' \
    "$arch" "$process" "$layer_d" >"$work/config.json"
  local config_size; config_size="$(stat -c %s "$work/config.json")"
  config_d="$(store_blob "$layout" "$work/config.json")"

  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
    "$config_d" "$config_size" "$layer_d" "$layer_size" >"$work/manifest.json"
  local manifest_size; manifest_size="$(stat -c %s "$work/manifest.json")"
  manifest_d="$(store_blob "$layout" "$work/manifest.json")"

  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":"%s"}}]}' \
    "$manifest_d" "$manifest_size" "$arch" "$name" >"$layout/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"

  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu \
    -C "$layout" -cf "$work/image.tar" oci-layout index.json blobs
  mv "$work/image.tar" "$out"
  say "built $name -> $out"
}

populate_filler_rootfs() {
  populate_busybox_rootfs "$1"
  head -c "$((FILLER_MIB * 1024 * 1024))" /dev/urandom >"$1/filler"
}

main() {
  if [[ "${1:-}" == --filler ]]; then
    (($# == 4)) || die "usage: build-images.sh --filler NAME MIB OUT"
    [[ "$3" =~ ^[1-9][0-9]*$ ]] || die "--filler: MIB must be a positive number, not '$3'"
    check_busybox
    mkdir -p "$DEPS/images"
    FILLER_MIB="$3" QUIET=1 build_image "$2" "$4" populate_filler_rootfs '"Cmd":["/bin/sh"]'
    return 0
  fi
  parse_args "$@"
  check_busybox
  mkdir -p "$DEPS/images"
  local stamp="$DEPS/images/stamp" want
  want="busybox=$(sha256_of "$BUSYBOX") script=$(sha256_of "${BASH_SOURCE[0]}") arch=$(oci_arch)"
  if ((!FORCE)) && [[ -s "$PAUSE_TAR" && -s "$TEST_TAR" && "$(cat "$stamp" 2>/dev/null)" == "$want" ]]; then
    say "images up to date in $DEPS/images"
    return 0
  fi
  build_image "$PAUSE_IMAGE" "$PAUSE_TAR" populate_pause_rootfs '"Entrypoint":["/bin/sleep","2147483647"]'
  build_image "$TEST_IMAGE" "$TEST_TAR" populate_busybox_rootfs '"Cmd":["/bin/sh"]'
  echo "$want" >"$stamp"
}

main "$@"
