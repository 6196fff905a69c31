#!/usr/bin/env bash
# hack/validate-deploy.sh — validate the deployment artifacts in deploy/ offline.
#
# Usage: hack/validate-deploy.sh      (no arguments; run by hack/test.sh)
#
# Checks, each a failure when it does not pass (nothing is skipped):
#   1. deploy/kubernetes/*.yaml against the Kubernetes OpenAPI schemas (strict: unknown fields are
#      errors) of the oldest and newest versions we support, with kubernetes-validate (PyPI; its
#      schemas ship inside the package, so no network is needed once installed). It is installed
#      in a venv under .deps/validate-venv on first use.
#   2. The ConfigMap's config.toml with `topolet config check` against every sysfs fixture.
#   3. deploy/containerd/nri.toml parses as TOML and enables NRI.
#   4. deploy/systemd/topolet.service with `systemd-analyze verify` (stub containerd and kubelet
#      units, ExecStart pointed at the built binary).
#
# Environment:
#   TOPOLET_BIN                 topolet binary (default: cargo build, then target/debug/topolet)
#   K8S_VALIDATE_VERSIONS       Kubernetes versions to validate against (default "1.30.0 1.37.0")
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

KUBERNETES_VALIDATE_VERSION=1.37.0
VENV="$DEPS/validate-venv"
VERSIONS="${K8S_VALIDATE_VERSIONS:-1.30.0 1.37.0}"
DEPLOY="$REPO_ROOT/deploy"
TMP_DIR=""

die() { echo "validate-deploy.sh: FAIL: $*" >&2; exit 1; }

install_validator() {
  local have=""
  if [[ -x "$VENV/bin/kubernetes-validate" ]]; then
    have="$("$VENV/bin/pip" show kubernetes-validate 2>/dev/null | sed -n 's/^Version: //p')"
  fi
  [[ "$have" == "$KUBERNETES_VALIDATE_VERSION" ]] && return 0
  command -v python3 >/dev/null || die "python3 not found (needed for kubernetes-validate)"
  python3 -m venv "$VENV" || die "python3 -m venv $VENV (install python3-venv)"
  "$VENV/bin/pip" install --quiet "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" \
    || die "pip install kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
}

validate_manifests() {
  local v files=("$DEPLOY"/kubernetes/*.yaml)
  [[ -e "${files[0]}" ]] || die "no manifests in $DEPLOY/kubernetes"
  for v in $VERSIONS; do
    "$VENV/bin/kubernetes-validate" --strict --quiet -k "$v" "${files[@]}" \
      || die "manifests do not validate against Kubernetes $v"
    echo "manifests: valid for Kubernetes $v (strict): ${files[*]##*/}"
  done
}

topolet_bin() {
  if [[ -n "${TOPOLET_BIN:-}" ]]; then
    [[ -x "$TOPOLET_BIN" ]] || die "TOPOLET_BIN=$TOPOLET_BIN is not executable"
    echo "$TOPOLET_BIN"
    return
  fi
  (cd "$REPO_ROOT" && cargo build --quiet -p topolet --bin topolet) >&2 || die "cargo build -p topolet"
  local dir
  dir="$(cd "$REPO_ROOT" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
  echo "$dir/debug/topolet"
}

check_configmap_config() {
  local bin="$1" tmp="$2" fixture
  "$VENV/bin/python" - "$DEPLOY/kubernetes/configmap.yaml" "$tmp/config.toml" <<'PY' \
    || die "cannot extract config.toml from deploy/kubernetes/configmap.yaml"
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
open(sys.argv[2], "w").write(doc["data"]["config.toml"])
PY
  # Every machine the tests know: the generated trees (written here, as testkit/build.rs does)
  # and the captured ones.
  python3 "$REPO_ROOT/hack/gen-sysfs-fixtures.py" --out "$tmp/sysfs" >/dev/null \
    || die "hack/gen-sysfs-fixtures.py --out $tmp/sysfs"
  for fixture in "$tmp"/sysfs/*/ "$REPO_ROOT"/plugin/tests/fixtures/sysfs/*/; do
    "$bin" config check "$tmp/config.toml" --sysfs-root "$fixture" >/dev/null \
      || die "the ConfigMap's config.toml does not fit fixture $fixture"
  done
  echo "configmap: config.toml passes topolet config check on every sysfs fixture"
}

check_containerd_snippet() {
  python3 - "$DEPLOY/containerd/nri.toml" <<'PY' || die "deploy/containerd/nri.toml"
import sys, tomllib
c = tomllib.load(open(sys.argv[1], "rb"))
assert c["version"] == 3, "config version 3 (containerd 2.x)"
nri = c["plugins"]["io.containerd.nri.v1.nri"]
assert nri["disable"] is False and nri["disable_connections"] is False, "NRI enabled"
assert nri["socket_path"] == "/var/run/nri/nri.sock", "the socket topolet's default dials"
PY
  echo "containerd: nri.toml parses and enables NRI"
}

check_systemd_unit() {
  local bin="$1" tmp="$2"
  command -v systemd-analyze >/dev/null || die "systemd-analyze not found (package systemd)"
  mkdir -p "$tmp/units"
  sed "s|/usr/local/bin/topolet|$bin|g" "$DEPLOY/systemd/topolet.service" >"$tmp/units/topolet.service"
  printf '[Service]\nExecStart=/bin/true\n' >"$tmp/units/containerd.service"
  cp "$tmp/units/containerd.service" "$tmp/units/kubelet.service"
  SYSTEMD_UNIT_PATH="$tmp/units:" systemd-analyze verify "$tmp/units/topolet.service" \
    || die "systemd-analyze verify deploy/systemd/topolet.service"
  echo "systemd: topolet.service verifies"
}

main() {
  local bin
  install_validator
  validate_manifests
  bin="$(topolet_bin)"
  TMP_DIR="$(mktemp -d)"
  trap 'rm -rf "$TMP_DIR"' EXIT
  check_configmap_config "$bin" "$TMP_DIR"
  check_containerd_snippet
  check_systemd_unit "$bin" "$TMP_DIR"
  echo "deploy/: all checks passed"
}

main "$@"
