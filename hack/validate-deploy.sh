#!/usr/bin/env bash
# hack/validate-deploy.sh — validate the deployment artifacts in deploy/ offline.
#
# Usage: hack/validate-deploy.sh            run the checks (run by hack/test.sh)
#        hack/validate-deploy.sh --write    render deploy/helm/topolet into deploy/kubernetes/ first
#
# deploy/kubernetes/ is rendered from the Helm chart deploy/helm/topolet (one source of truth):
# `helm template topolet deploy/helm/topolet -n topolet-system --set namespace.create=true
# --no-hooks`, one file per template (the uninstall hook, templates/withdraw.yaml, is Helm's
# only). Edit the chart, then run this with --write.
#
# Checks, each a failure when it does not pass (nothing is skipped):
#   0. The chart: `helm lint`; deploy/kubernetes/ equals its rendering (file for file); the chart's
#      version and appVersion are the workspace's; the two-pool example
#      (deploy/helm/topolet/examples/two-pools.yaml) renders one DaemonSet and ConfigMap per pool,
#      the pools' node affinities exclude each other, and each pool's config.toml passes
#      `topolet config check` on every sysfs fixture; the uninstall hook's Job reads each pool's
#      config.toml (its own read-only copy, one --config each); the optional ServiceMonitor matches the
#      metrics Service; rbac.evictAs=self and the optional NetworkPolicy render as documented;
#      bad values fail naming the value at fault.
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
#   HELM                        helm binary (default: .deps/bin/helm, from hack/install-kube.sh)
#   K8S_VALIDATE_VERSIONS       Kubernetes versions to validate against (default "1.30.0 1.37.0")
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

KUBERNETES_VALIDATE_VERSION=1.37.0
VENV="$DEPS/validate-venv"
VERSIONS="${K8S_VALIDATE_VERSIONS:-1.30.0 1.37.0}"
DEPLOY="$REPO_ROOT/deploy"
CHART="$DEPLOY/helm/topolet"
HELM="${HELM:-$DEPS/bin/helm}"
TMP_DIR=""

DIE_LABEL=FAIL

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

# render_plain OUT_DIR: the chart rendered as deploy/kubernetes/ holds it, one file per template.
render_plain() {
  local out="$1"
  mkdir -p "$out"
  # Without the hooks (the uninstall's withdraw Job): a `kubectl apply` would run it at once.
  "$HELM" template topolet "$CHART" --namespace topolet-system --set namespace.create=true --no-hooks \
    >"$out/all.yaml" || die "helm template $CHART failed"
  python3 - "$out/all.yaml" "$out" <<'PY' || die "splitting the rendered chart"
import re, sys
text, out = open(sys.argv[1]).read(), sys.argv[2]
files = {}
for doc in re.split(r"^---\n", text, flags=re.M):
    m = re.match(r"# Source: topolet/templates/([a-z-]+\.yaml)\n", doc)
    if not m:
        assert not doc.strip(), "a document without its template's name: " + doc[:200]
        continue
    files.setdefault(m.group(1), []).append(doc[m.end():].rstrip("\n") + "\n")
head = ("# Rendered from the Helm chart deploy/helm/topolet (templates/{}) with its default values,\n"
        "# release topolet, namespace topolet-system: `hack/validate-deploy.sh --write`. Do not edit:\n"
        "# edit the chart (hack/validate-deploy.sh checks that the two agree).\n")
for name, docs in sorted(files.items()):
    open(f"{out}/{name}", "w").write(head.format(name) + "---\n".join(docs))
PY
  rm "$out/all.yaml"
}

check_chart() {
  local tmp="$1" bin="$2" f
  [[ -x "$HELM" ]] || die "$HELM not found (hack/install-kube.sh builds it)"
  "$HELM" lint --strict "$CHART" >"$tmp/lint.log" 2>&1 || { cat "$tmp/lint.log" >&2; die "helm lint $CHART"; }
  local ws chart app
  ws="$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO_ROOT/Cargo.toml" | head -n1)"
  chart="$(sed -n 's/^version: //p' "$CHART/Chart.yaml")"
  app="$(sed -n 's/^appVersion: "\(.*\)"/\1/p' "$CHART/Chart.yaml")"
  [[ "$chart" == "$ws" && "$app" == "$ws" ]] ||
    die "Chart.yaml version $chart / appVersion $app differ from the workspace version $ws (Cargo.toml)"
  if ((WRITE)); then
    rm -f "$DEPLOY"/kubernetes/*.yaml
    render_plain "$DEPLOY/kubernetes"
    echo "chart: rendered into deploy/kubernetes/"
  fi
  render_plain "$tmp/rendered"
  diff -ru "$DEPLOY/kubernetes" "$tmp/rendered" >"$tmp/render.diff" ||
    { cat "$tmp/render.diff" >&2; die "deploy/kubernetes/ differs from the chart's rendering: edit the chart, then hack/validate-deploy.sh --write"; }
  echo "chart: lints; deploy/kubernetes/ is its rendering"

  # Two node pools: one DaemonSet and ConfigMap each, affinities that exclude each other, and
  # every pool's configuration valid on every machine the tests know.
  "$HELM" template topolet "$CHART" --namespace topolet-system -f "$CHART/examples/two-pools.yaml" \
    >"$tmp/pools.yaml" || die "helm template with examples/two-pools.yaml failed"
  "$VENV/bin/python" - "$tmp/pools.yaml" "$tmp/pools" <<'PY' || die "the two-pool rendering is not what the chart promises"
import os, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
out = sys.argv[2]
os.makedirs(out, exist_ok=True)
ds = {d["metadata"]["name"]: d for d in docs if d["kind"] == "DaemonSet"}
def hook(d):
    return "helm.sh/hook" in (d["metadata"].get("annotations") or {})
cms = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap" and not hook(d)}
assert sorted(ds) == ["topolet", "topolet-latency"], sorted(ds)
assert sorted(cms) == ["topolet-config", "topolet-latency-config"], sorted(cms)
def expr(d):
    terms = d["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 1, terms
    return terms[0]["matchExpressions"]
assert expr(ds["topolet"]) == [{"key": "topolet.io/pool", "operator": "NotIn", "values": ["latency"]}], expr(ds["topolet"])
assert expr(ds["topolet-latency"]) == [{"key": "topolet.io/pool", "operator": "In", "values": ["latency"]}], expr(ds["topolet-latency"])
for name, d in ds.items():
    vol = [v for v in d["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"][0]
    assert vol["configMap"]["name"] == name + "-config", (name, vol)
    sel = {s["matchLabels"]["topolet.io/daemonset"] for s in [d["spec"]["selector"]]}
    assert sel == {name}, sel
for name, cm in cms.items():
    open(f"{out}/{name}.toml", "w").write(cm["data"]["config.toml"])
a, b = (open(f"{out}/{n}.toml").read() for n in ("topolet-config", "topolet-latency-config"))
assert a != b, "the two pools' configurations are the same"
# The uninstall hook withdraws every configuration's [reclaimed] resource_name: its own copy of
# each DaemonSet's config.toml (the release's ConfigMaps are gone when it runs), the same text,
# mounted read-only, one --config each.
(copy,) = [d for d in docs if d["kind"] == "ConfigMap" and hook(d)]
assert copy["metadata"]["name"] == "topolet-withdraw", copy["metadata"]
assert copy["data"] == {f"{n}.toml": cms[f"{n}-config"]["data"]["config.toml"] for n in ds}, sorted(copy["data"])
(job,) = [d for d in docs if d["kind"] == "Job"]
spec = job["spec"]["template"]["spec"]
(c,) = spec["containers"]
want = [a for n in ("topolet", "topolet-latency") for a in ("--config", f"/etc/topolet-withdraw/{n}.toml")]
assert c["command"] == ["/usr/local/bin/topolet", "withdraw"] and c["args"] == want, (c["command"], c["args"])
assert c["volumeMounts"] == [{"name": "configs", "mountPath": "/etc/topolet-withdraw", "readOnly": True}], c["volumeMounts"]
assert spec["volumes"] == [{"name": "configs", "configMap": {"name": "topolet-withdraw"}}], spec["volumes"]
PY
  python3 "$REPO_ROOT/hack/gen-sysfs-fixtures.py" --out "$tmp/sysfs" >/dev/null || die "hack/gen-sysfs-fixtures.py"
  for f in "$tmp"/pools/*.toml; do
    for fixture in "$tmp"/sysfs/*/ "$REPO_ROOT"/plugin/tests/fixtures/sysfs/*/; do
      "$bin" config check "$f" --sysfs-root "$fixture" >/dev/null ||
        die "$(basename "$f" .toml) of examples/two-pools.yaml does not fit fixture $fixture"
    done
  done
  echo "chart: two node pools render two DaemonSets with exclusive affinities and valid configs; the withdraw hook reads both"

  # The optional ServiceMonitor selects the metrics Service's pods and port.
  "$HELM" template topolet "$CHART" --namespace topolet-system --set metrics.serviceMonitor.enabled=true \
    >"$tmp/sm.yaml" || die "helm template with metrics.serviceMonitor.enabled=true failed"
  "$VENV/bin/python" - "$tmp/sm.yaml" <<'PY' || die "the ServiceMonitor does not match the metrics Service"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
sm = [d for d in docs if d["kind"] == "ServiceMonitor"]
svc = [d for d in docs if d["kind"] == "Service"]
assert len(sm) == 1 and len(svc) == 1, (len(sm), len(svc))
sm, svc = sm[0], svc[0]
labels = svc["metadata"]["labels"]
assert all(labels.get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items()), sm["spec"]["selector"]
assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"] == "metrics"
assert sm["spec"]["namespaceSelector"]["matchNames"] == ["topolet-system"]
PY
  echo "chart: the optional ServiceMonitor scrapes the metrics Service"

  # rbac.evictAs=self: the eviction and read rights of topolet's own (pods, ResourceSlices), in a
  # ClusterRole of its own, and no impersonation; the optional NetworkPolicy admits the metrics port from the node's CIDRs, the
  # scrapers and the chart's test pod.
  "$HELM" template topolet "$CHART" --namespace topolet-system --set rbac.evictAs=self \
    --set networkPolicy.enabled=true --set 'networkPolicy.nodeCIDRs={10.0.0.0/24}' \
    >"$tmp/self.yaml" || die "helm template with rbac.evictAs=self, networkPolicy.enabled=true failed"
  "$VENV/bin/python" - "$tmp/self.yaml" <<'PY' || die "rbac.evictAs=self or the NetworkPolicy renders wrong"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
verbs = lambda r: {(g, res, v) for rule in r["rules"] for g in rule["apiGroups"] for res in rule["resources"] for v in rule["verbs"]}
assert ("", "pods/eviction", "create") in verbs(roles["topolet-evict-self"]), roles.keys()
assert {("resource.k8s.io", "resourceslices", v) for v in ("list", "watch")} <= verbs(roles["topolet-evict-self"])
assert not any(res == "resourceslices" for _, res, _ in verbs(roles["topolet"])), verbs(roles["topolet"])
assert not any(v.startswith("impersonate") for _, _, v in verbs(roles["topolet"])), verbs(roles["topolet"])
cm = [d for d in docs if d["kind"] == "ConfigMap"][0]
assert 'evict_as = "self"' in cm["data"]["config.toml"], cm["data"]["config.toml"]
np = [d for d in docs if d["kind"] == "NetworkPolicy"]
assert len(np) == 1, len(np)
peers = np[0]["spec"]["ingress"][0]["from"]
assert {"ipBlock": {"cidr": "10.0.0.0/24"}} in peers, peers
PY
  echo "chart: rbac.evictAs=self grants its own eviction right; the NetworkPolicy renders"

  # kubelet.podResourcesExport: the re-export's socket in the config, its directory mounted
  # read-write from the node (created there), the kubelet's directory still read-only.
  "$HELM" template topolet "$CHART" --namespace topolet-system \
    --set kubelet.podResourcesExport=/var/lib/topolet/pod-resources/kubelet.sock \
    >"$tmp/export.yaml" || die "helm template with kubelet.podResourcesExport failed"
  "$VENV/bin/python" - "$tmp/export.yaml" <<'PY' || die "kubelet.podResourcesExport renders wrong"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
cm = [d for d in docs if d["kind"] == "ConfigMap"][0]
toml = cm["data"]["config.toml"]
assert 'pod_resources_export_socket = "/var/lib/topolet/pod-resources/kubelet.sock"' in toml, toml
pod = [d for d in docs if d["kind"] == "DaemonSet"][0]["spec"]["template"]["spec"]
vols = {v["name"]: v for v in pod["volumes"]}
assert vols["pod-resources-export"]["hostPath"] == {"path": "/var/lib/topolet/pod-resources", "type": "DirectoryOrCreate"}, vols
mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
assert mounts["pod-resources-export"]["mountPath"] == "/var/lib/topolet/pod-resources", mounts
assert not mounts["pod-resources-export"].get("readOnly"), mounts["pod-resources-export"]
assert mounts["pod-resources"]["readOnly"] is True, mounts["pod-resources"]
PY
  echo "chart: kubelet.podResourcesExport serves the re-export from a writable directory of its own"

  # Bad values fail, naming the value: SET|what the error must say.
  local case set want
  for case in "nri.socket=relative.sock|'/nri/socket'" "logFormat=yaml|'/logFormat'" \
              "metrics.port=0|'/metrics/port'" "nodePools[0].name=Bad_Name,nodePools[0].config=x|'/nodePools/0/name'" \
              "imagee.tag=x|'imagee'" "metrics.bindAddress=127.0.0.1|metrics.bindAddress 127.0.0.1" \
              "rbac.evictAs=root|'/rbac/evictAs'" "cri.socket=containerd.sock|'/cri/socket'" \
              "nodePools[0].name=a,nodePools[0].config=x,nodePools[1].name=a,nodePools[1].config=x|pool name \"a\" appears twice" \
              "kubelet.podResourcesExport=topolet.sock|'/kubelet/podResourcesExport'" \
              "kubelet.podResourcesExport=/var/lib/kubelet/pod-resources/topolet.sock|kubelet.podResourcesExport /var/lib/kubelet/pod-resources/topolet.sock is in the kubelet's pod-resources directory"; do
    set="${case%%|*}"; want="${case#*|}"
    if "$HELM" template topolet "$CHART" --set "$set" >"$tmp/bad.log" 2>&1; then
      die "helm template --set $set rendered; the chart must refuse it"
    fi
    grep -qF -- "$want" "$tmp/bad.log" ||
      { cat "$tmp/bad.log" >&2; die "helm template --set $set failed without saying $want"; }
  done
  echo "chart: bad values are refused, naming the value"
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

WRITE=0
main() {
  local bin
  case "${1:-}" in
    "") ;;
    --write) WRITE=1 ;;
    *) die "usage: validate-deploy.sh [--write]" ;;
  esac
  install_validator
  bin="$(topolet_bin)"
  TMP_DIR="$(mktemp -d)"
  trap 'rm -rf "$TMP_DIR"' EXIT
  check_chart "$TMP_DIR" "$bin"
  validate_manifests
  check_configmap_config "$bin" "$TMP_DIR"
  check_containerd_snippet
  check_systemd_unit "$bin" "$TMP_DIR"
  echo "deploy/: all checks passed"
}

main "$@"
