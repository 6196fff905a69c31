#!/usr/bin/env bash
# hack/build-image.sh — build topolet's container image offline, reproducibly, as an OCI image
# layout tarball (no registry, no Docker), ready for `ctr images import`.
#
# Usage: hack/build-image.sh [OUT.tar]     (default OUT: target/image/topolet-<version>.tar)
#
# Content, nothing else: /usr/local/bin/topolet (stripped of debug info) and, when the binary is
# dynamically linked (glibc), exactly the shared libraries `ldd` says it loads, at the same paths
# (the dynamic loader included). No CA certificates: topolet's only TLS peer is the API server,
# whose CA comes with its credentials (the service account's ca.crt, or the kubeconfig). No shell,
# no /etc/passwd: the DaemonSet runs as uid 0 and execs the binary directly.
#
# Reproducible: the same binary (the same commit, built the same way) gives the same bytes, so the
# same digest. Every file of the layer and of the tarball has mtime 0, owner 0:0, sorted names;
# the layer is gzip'd without a name or time; the config's `created` and the annotations come from
# the commit (its committer date, or SOURCE_DATE_EPOCH: the reproducible-builds convention),
# never from the clock.
#
# Names and annotations:
#   image name        $TOPOLET_IMAGE_REPO:<version> (index annotation io.containerd.image.name,
#                     what ctr names the image on import)
#   manifest          org.opencontainers.image.version (<version>), .revision (the commit),
#                     .created (the commit's date), .title, .source, .licenses
#   config Labels     the same (shown by `crictl inspecti`)
# <version> is what the binary reports (`topolet --version`), so a build with another version
# string (TOPOLET_VERSION=... at compile time, plugin/src/main.rs) is another tag.
#
# Prints, on its last lines: the tarball's path, its size, the image name and the manifest digest
# (`key=value`, for scripts and the Helm suite: integration/src/helm.rs).
#
# Import into a containerd (the Helm suite, hack/demo.sh):
#   ctr --address SOCK -n k8s.io images import OUT.tar
#
# Environment:
#   TOPOLET_BIN          the binary to package (default: cargo build --release -p topolet --bin topolet,
#                        then target/release/topolet)
#   TOPOLET_IMAGE_REPO   repository part of the name (default localhost/topolet)
#   TOPOLET_REVISION     the revision annotation (default: git rev-parse HEAD; "+dirty" appended when
#                        the tree has uncommitted changes)
#   SOURCE_DATE_EPOCH    the image's `created` time, in seconds (default: the commit's date)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

REPO="${TOPOLET_IMAGE_REPO:-localhost/topolet}"
SOURCE_URL="https://github.com/topolet/topolet"
WORK=""

LOG_NAME=build-image
SAY_TO_STDERR=1

oci_arch() {
  case "$(uname -m)" in
    x86_64) echo amd64 ;;
    aarch64) echo arm64 ;;
    *) die "unsupported machine architecture $(uname -m)" ;;
  esac
}

topolet_bin() {
  if [[ -n "${TOPOLET_BIN:-}" ]]; then
    [[ -x "$TOPOLET_BIN" ]] || die "TOPOLET_BIN=$TOPOLET_BIN is not executable"
    echo "$TOPOLET_BIN"
    return
  fi
  say "cargo build --release -p topolet --bin topolet"
  (cd "$REPO_ROOT" && cargo build --quiet --release -p topolet --bin topolet) >&2 ||
    die "cargo build --release -p topolet"
  local dir
  dir="$(cd "$REPO_ROOT" && cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
  echo "$dir/release/topolet"
}

revision() {
  if [[ -n "${TOPOLET_REVISION:-}" ]]; then echo "$TOPOLET_REVISION"; return; fi
  local rev
  rev="$(git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null)" || die "not a git checkout: set TOPOLET_REVISION"
  git -C "$REPO_ROOT" diff --quiet HEAD -- 2>/dev/null || rev+="+dirty"
  echo "$rev"
}

# The commit's date, RFC 3339 in UTC: the image's `created`, the same for every build of it.
created() {
  local epoch="${SOURCE_DATE_EPOCH:-}"
  if [[ -z "$epoch" ]]; then
    epoch="$(git -C "$REPO_ROOT" log -1 --format=%ct 2>/dev/null)" || epoch=0
  fi
  [[ "$epoch" =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH=$epoch is not a number of seconds"
  date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ
}

# populate ROOTFS BIN: the binary and, when it is dynamic, the libraries the loader resolves.
populate() {
  local r="$1" bin="$2" lib
  install -D -m 0755 "$bin" "$r/usr/local/bin/topolet"
  # Debug info is most of a debug or `debug = 1` release binary; symbols stay (backtraces).
  objcopy --strip-debug "$r/usr/local/bin/topolet" || die "objcopy --strip-debug $bin"
  if LC_ALL=C readelf -l "$bin" | grep -q 'Requesting program interpreter'; then
    # ldd lines: `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` and the loader
    # `/lib64/ld-linux-x86-64.so.2 (0x...)`; linux-vdso has no file.
    while read -r lib; do
      [[ -n "$lib" ]] || continue
      install -D -m 0755 "$(readlink -f "$lib")" "$r$lib"
    done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
  fi
  mkdir -p "$r/tmp"
  chmod 1777 "$r/tmp"
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }
size_of() { stat -c %s "$1"; }

# store_blob LAYOUT FILE: move FILE to LAYOUT/blobs/sha256/<digest>; prints the digest (hex).
store_blob() {
  local d
  d="$(sha256_of "$2")"
  mv "$2" "$1/blobs/sha256/$d"
  echo "$d"
}

main() {
  (($# <= 1)) || die "usage: build-image.sh [OUT.tar]"
  local bin version rev created_at arch out
  bin="$(topolet_bin)"
  version="$("$bin" --version | awk '{print $2}')"
  [[ "$version" =~ ^[0-9A-Za-z][0-9A-Za-z._+-]*$ ]] || die "$bin --version gave no usable version: '$version'"
  rev="$(revision)"
  created_at="$(created)"
  arch="$(oci_arch)"
  out="${1:-$REPO_ROOT/target/image/topolet-$version.tar}"
  mkdir -p "$(dirname "$out")"
  out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
  local name="$REPO:${version//+/_}"

  WORK="$(mktemp -d)"
  trap 'rm -rf "$WORK"' EXIT
  local layout="$WORK/layout" rootfs="$WORK/rootfs"
  mkdir -p "$layout/blobs/sha256" "$rootfs"
  populate "$rootfs" "$bin"

  # The layer: a reproducible tar, gzip'd with neither name nor time.
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu \
    -C "$rootfs" -cf "$WORK/layer.tar" .
  local diff_id layer_d layer_size
  diff_id="$(sha256_of "$WORK/layer.tar")"
  gzip -n -6 <"$WORK/layer.tar" >"$WORK/layer.tar.gz"
  layer_size="$(size_of "$WORK/layer.tar.gz")"
  layer_d="$(store_blob "$layout" "$WORK/layer.tar.gz")"

  local annotations config_d config_size manifest_d manifest_size
  annotations="$(python3 - "$version" "$rev" "$created_at" "$SOURCE_URL" <<'PY'
import json, sys
version, rev, created, source = sys.argv[1:]
print(json.dumps({
    "org.opencontainers.image.created": created,
    "org.opencontainers.image.licenses": "Apache-2.0",
    "org.opencontainers.image.revision": rev,
    "org.opencontainers.image.source": source,
    "org.opencontainers.image.title": "topolet",
    "org.opencontainers.image.version": version,
}, sort_keys=True, separators=(",", ":")))
PY
)"
  python3 - "$arch" "$created_at" "$diff_id" "$annotations" >"$WORK/config.json" <<'PY'
import json, sys
arch, created, diff_id, annotations = sys.argv[1:]
print(json.dumps({
    "architecture": arch,
    "os": "linux",
    "created": created,
    "config": {
        "Entrypoint": ["/usr/local/bin/topolet"],
        "Cmd": ["run"],
        "Env": ["PATH=/usr/local/bin"],
        "WorkingDir": "/",
        "Labels": json.loads(annotations),
    },
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + diff_id]},
    "history": [{"created": created, "created_by": "hack/build-image.sh"}],
}, sort_keys=True, separators=(",", ":")), end="")
PY
  config_size="$(size_of "$WORK/config.json")"
  config_d="$(store_blob "$layout" "$WORK/config.json")"

  python3 - "$config_d" "$config_size" "$layer_d" "$layer_size" "$annotations" >"$WORK/manifest.json" <<'PY'
import json, sys
config_d, config_size, layer_d, layer_size, annotations = sys.argv[1:]
print(json.dumps({
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
               "digest": "sha256:" + config_d, "size": int(config_size)},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": "sha256:" + layer_d, "size": int(layer_size)}],
    "annotations": json.loads(annotations),
}, sort_keys=True, separators=(",", ":")), end="")
PY
  manifest_size="$(size_of "$WORK/manifest.json")"
  manifest_d="$(store_blob "$layout" "$WORK/manifest.json")"

  python3 - "$manifest_d" "$manifest_size" "$arch" "$name" "$version" >"$layout/index.json" <<'PY'
import json, sys
manifest_d, manifest_size, arch, name, version = sys.argv[1:]
print(json.dumps({
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": "sha256:" + manifest_d, "size": int(manifest_size),
        "platform": {"architecture": arch, "os": "linux"},
        "annotations": {"io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": version.replace("+", "_")},
    }],
}, sort_keys=True, separators=(",", ":")), end="")
PY
  printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"

  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu \
    -C "$layout" -cf "$WORK/image.tar" oci-layout index.json blobs
  mv "$WORK/image.tar" "$out"
  say "built $name ($(du -h --apparent-size "$out" | cut -f1), layer $((layer_size / 1024)) KiB compressed) -> $out"
  echo "tarball=$out"
  echo "size=$(size_of "$out")"
  echo "layer_size=$layer_size"
  echo "name=$name"
  echo "digest=sha256:$manifest_d"
  echo "version=$version"
}

main "$@"
