#!/usr/bin/env bash
# hack/demo.sh — a real single-node Kubernetes with topolet, and what its pods really got.
#
# Usage: hack/demo.sh           (as root; needs go, cargo, gcc and openssl)
#
# 1. installs the pinned containerd, runc and crictl (hack/install-deps.sh) and the Kubernetes
#    stack: etcd, kube-apiserver, kube-scheduler, kubelet, kubectl (hack/install-kube.sh; the first
#    run builds them from the Go module proxy: about 15 minutes on 2 CPUs, cached afterwards),
# 2. builds topolet and its image (hack/build-image.sh), starts an isolated containerd in
#    .stack-demo/containerd (hack/containerd.sh) and imports the image into it with ctr, then etcd,
#    the API server, the controller manager, the scheduler and a kubelet in .stack-demo/kube
#    (hack/kube-node.sh, KUBE_WITH_CONTROLLERS=1),
# 3. installs topolet as a user would: `helm install` of deploy/helm/topolet (a DaemonSet pod, CPU 0
#    reserved when the machine has more than one CPU), waits until it is Ready (NRI synchronized),
# 4. applies hack/demo/pods.yaml with kubectl: one pod per QoS class and an exclusive one,
# 5. shows `kubectl get pods` and a table of what each container really got, read from its
#    cgroups and /proc,
# 6. runs the init-container example (hack/demo/init-pod.yaml): the init container's exclusive CPU
#    goes to the app container,
# 7. stops everything, unless DEMO_KEEP=1: then it prints how to poke at the node and stop it.
#
# Environment:
#   CONTAINERD_VERSION   the containerd line: v2.4.2 (default), v2.3.7 or v2.0.14
#   DEMO_KEEP            1 = leave the node running at the end (stop: hack/demo.sh stop)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

DIR="$REPO_ROOT/.stack-demo"
CDIR="$DIR/containerd"
KDIR="$DIR/kube"
TOPOLET="$REPO_ROOT/target/debug/topolet"
ADMIN_SOCKET="$DIR/admin/admin.sock"

LOG_NAME=demo

kubectl_() { KUBECACHEDIR="$KDIR/kubectl-cache" "$DEPS/bin/kubectl" --kubeconfig "$KDIR/admin.kubeconfig" "$@"; }
# helm with its cache, configuration and data under .stack-demo (nothing in ~).
helm_() {
  HOME="$DIR/helm" HELM_CACHE_HOME="$DIR/helm/cache" HELM_CONFIG_HOME="$DIR/helm/config" \
    HELM_DATA_HOME="$DIR/helm/data" KUBECONFIG="$KDIR/admin.kubeconfig" "$DEPS/bin/helm" "$@"
}

stop_all() {
  # The kubelet first (it would restart topolet's pod), then containerd with every container.
  "$HACK_DIR/kube-node.sh" stop "$KDIR" >/dev/null || echo "demo: stopping the Kubernetes node failed" >&2
  "$HACK_DIR/containerd.sh" stop "$CDIR" >/dev/null || echo "demo: stopping containerd failed" >&2
}

topolet_log() {
  local cid
  cid="$(kubectl_ -n topolet-system get pods -l app.kubernetes.io/name=topolet \
    -o jsonpath='{.items[0].status.containerStatuses[0].containerID}' 2>/dev/null)" || return 0
  [[ -n "$cid" ]] && crictl logs --tail 20 "${cid#containerd://}" 2>&1
}

cleanup() {
  local rc=$?
  if [[ "${DEMO_KEEP:-0}" == 1 && $rc -eq 0 ]]; then
    cat <<EOF

demo: the node is left running. Poke at it:
  source $KDIR/env     # KUBECONFIG, PATH with kubectl, KUBECACHEDIR
  kubectl get pods -o wide; kubectl describe pod guaranteed-exclusive
  kubectl apply -f hack/demo/pods.yaml          # (re)create the example pods
  kubectl -n topolet-system get pods,ds          # topolet's DaemonSet pod (helm list -n topolet-system)
  $TOPOLET status --admin-socket $ADMIN_SOCKET
  logs: crictl logs <topolet container>, $KDIR/kubelet.log, $CDIR/containerd.log
Stop it: hack/demo.sh stop
EOF
    exit 0
  fi
  if [[ $rc -ne 0 ]]; then
    echo "--- topolet's pod and its last log lines" >&2
    kubectl_ -n topolet-system get pods -o wide >&2 2>&1 || true
    topolet_log >&2 || true
  fi
  stop_all
  exit "$rc"
}

# wait_for DESCRIPTION SECONDS CMD...: poll CMD until it succeeds.
wait_for() {
  local what="$1" deadline=$((SECONDS + $2)); shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out waiting for $what"
    sleep 0.2
  done
}

# The chart's values for this node: the stack's paths, the API server on loopback (the node's
# only network: pods use the host's), metrics on loopback.
write_values() {
  local reserved="" api_port
  [[ "$(nproc --all)" -gt 1 ]] && reserved='reserved_cpus = "0"'
  api_port="$(bash -c 'source "$1"; echo "${KUBE_API_URL##*:}"' _ "$KDIR/env")"
  cat >"$DIR/values.yaml" <<EOF
image:
  repository: localhost/topolet
  tag: "$IMAGE_TAG"
  pullPolicy: Never
nri:
  socket: $NRI_SOCKET
hostPaths:
  state: $DIR/topolet-state
  admin: $DIR/admin
  nodefs: $DIR/nodefs
  imagefs: $CDIR/root
  mountPropagation: None
hostNetwork: true
metrics:
  bindAddress: 127.0.0.1
  port: 19464
kubernetesServiceHost: 127.0.0.1
kubernetesServicePort: "$api_port"
config: |
  [nri]
  socket = {{ .Values.nri.socket | quote }}
  [cpu]
  policy = "static"
  $reserved
  [qos]
  pids_limit = 1024
  [state]
  dir = {{ .Values.hostPaths.state | quote }}
  [admin]
  socket = {{ printf "%s/admin.sock" .Values.hostPaths.admin | quote }}
  [metrics]
  address = {{ printf "%s:%d" .Values.metrics.bindAddress (int .Values.metrics.port) | quote }}
  [eviction]
  # This machine's disk is shared: decide and log, never evict the demo's pods.
  action = "dry-run"
  nodefs_path = {{ .Values.hostPaths.nodefs | quote }}
  imagefs_path = {{ .Values.hostPaths.imagefs | quote }}
EOF
}

# row POD CONTAINER: what the container really got.
row() {
  local pod="$1" ctr="$2" uid qos cid cg pid class
  uid="$(kubectl_ get pod "$pod" -o jsonpath='{.metadata.uid}')"
  qos="$(kubectl_ get pod "$pod" -o jsonpath='{.status.qosClass}')"
  cid="$(kubectl_ get pod "$pod" -o jsonpath="{.status.containerStatuses[?(@.name==\"$ctr\")].containerID}")"
  cid="${cid#containerd://}"
  case "$qos" in Guaranteed) class="" ;; Burstable) class=/burstable ;; *) class=/besteffort ;; esac
  cg="$CGROUP_PARENT_BASE/kubepods$class/pod$uid/$cid"
  pid="$(crictl inspect -o go-template --template '{{.info.pid}}' "$cid")"
  printf '%-27s %-11s %-7s %-8s %-5s %-7s %-15s %-20s %-6s %s\n' \
    "$pod/$ctr" "$qos" \
    "$(cat "/sys/fs/cgroup/cpuset$cg/cpuset.cpus")" \
    "$(awk '/Cpus_allowed_list/ {print $2}' "/proc/$pid/status")" \
    "$(cat "/sys/fs/cgroup/cpuset$cg/cpuset.mems")" \
    "$(cat "/sys/fs/cgroup/cpu$cg/cpu.shares")" \
    "$(cat "/sys/fs/cgroup/cpu$cg/cpu.cfs_quota_us")/$(cat "/sys/fs/cgroup/cpu$cg/cpu.cfs_period_us")" \
    "$(cat "/sys/fs/cgroup/memory$cg/memory.limit_in_bytes")" \
    "$(cat "/proc/$pid/oom_score_adj")" \
    "$(cat "/sys/fs/cgroup/pids$cg/pids.max")"
}

table() {
  printf '%-27s %-11s %-7s %-8s %-5s %-7s %-15s %-20s %-6s %s\n' \
    pod/container qos cpuset allowed mems shares quota/period mem.limit oom pids.max
  local p
  for p in "$@"; do row "${p%/*}" "${p#*/}"; done
}

main() {
  [[ $EUID -eq 0 ]] || die "must run as root (containerd, runc, cgroups, the kubelet)"
  cd "$REPO_ROOT"
  if [[ "${1:-}" == stop ]]; then stop_all; say "stopped"; return 0; fi
  say "installing containerd, runc, crictl (hack/install-deps.sh)"
  "$HACK_DIR/install-deps.sh"
  say "installing the Kubernetes stack (hack/install-kube.sh; the first run builds it)"
  "$HACK_DIR/install-kube.sh"
  say "building topolet and its image (hack/build-image.sh)"
  cargo build -q -p topolet --bin topolet
  stop_all >/dev/null 2>&1 || true
  rm -rf "$DIR"
  mkdir -p "$DIR"
  trap cleanup EXIT
  local image
  image="$(TOPOLET_BIN="$TOPOLET" "$HACK_DIR/build-image.sh" "$DIR/topolet-image.tar")"
  IMAGE_TAG="$(sed -n 's/^name=.*://p' <<<"$image")"
  say "starting containerd in $CDIR and importing the image (ctr images import)"
  "$HACK_DIR/containerd.sh" start "$CDIR" >/dev/null
  # shellcheck disable=SC1091
  source "$CDIR/env"
  ctr -n k8s.io images import "$DIR/topolet-image.tar" >/dev/null
  say "starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the kubelet in $KDIR"
  KUBE_WITH_CONTROLLERS=1 KUBE_RUNTIME_DIR="$CDIR" "$HACK_DIR/kube-node.sh" start "$KDIR"
  mkdir -p "$DIR/nodefs"
  write_values
  say "helm install topolet deploy/helm/topolet -n topolet-system --create-namespace -f $DIR/values.yaml --wait"
  helm_ install topolet "$REPO_ROOT/deploy/helm/topolet" -n topolet-system --create-namespace \
    -f "$DIR/values.yaml" --wait --timeout 5m
  kubectl_ -n topolet-system get pods -o wide

  say "kubectl apply -f hack/demo/pods.yaml"
  kubectl_ apply -f "$HACK_DIR/demo/pods.yaml"
  kubectl_ wait --for=condition=Ready pod -l app=topolet-demo --timeout=120s >/dev/null
  # Shared containers leave the exclusive CPU through an update after the exclusive pod starts.
  wait_for "shared pods to leave the exclusive CPU" 30 shared_moved
  echo
  kubectl_ get pods -o wide
  echo
  table besteffort/main burstable/main guaranteed-fractional/main guaranteed-exclusive/main
  echo
  say "topolet's view (topolet status):"
  "$TOPOLET" status --admin-socket "$ADMIN_SOCKET" | sed 's/^/  /'

  echo
  say "init containers: deleting guaranteed-exclusive, applying hack/demo/init-pod.yaml"
  kubectl_ delete pod guaranteed-exclusive --wait=true >/dev/null
  kubectl_ apply -f "$HACK_DIR/demo/init-pod.yaml"
  kubectl_ wait --for=condition=Ready pod/with-init --timeout=120s >/dev/null
  say "the init container ran on: $(kubectl_ get pod with-init -o jsonpath='{.status.initContainerStatuses[0].state.terminated.message}')"
  table with-init/app
}

# The BestEffort pod is on the shared pool only (the exclusive CPU left it).
shared_moved() {
  local ex be
  ex="$(row guaranteed-exclusive main | awk '{print $3}')"
  be="$(row besteffort main | awk '{print $3}')"
  [[ -n "$ex" && "$be" != *"$ex"* ]] || [[ "$(nproc --all)" -eq 1 ]]
}

main "$@"
