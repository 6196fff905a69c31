#!/usr/bin/env bash
# hack/demo.sh — a real single-node Kubernetes with topolet, and what its pods really got.
#
# Usage: hack/demo.sh           (as root; needs go, cargo, gcc and openssl)
#
# 1. installs the pinned containerd, runc and crictl (hack/install-deps.sh) and the Kubernetes
#    stack: etcd, kube-apiserver, kube-scheduler, kubelet, kubectl (hack/install-kube.sh; the first
#    run builds them from the Go module proxy: about 15 minutes on 2 CPUs, cached afterwards),
# 2. builds topolet, starts an isolated containerd in .stack-demo/containerd (hack/containerd.sh),
#    topolet against it (CPU 0 reserved when the machine has more than one CPU), then etcd, the
#    API server, the scheduler and a kubelet in .stack-demo/kube (hack/kube-node.sh),
# 3. applies hack/demo/pods.yaml with kubectl: one pod per QoS class and an exclusive one,
# 4. shows `kubectl get pods` and a table of what each container really got, read from its
#    cgroups and /proc,
# 5. runs the init-container example (hack/demo/init-pod.yaml): the init container's exclusive CPU
#    goes to the app container,
# 6. stops everything, unless DEMO_KEEP=1: then it prints how to poke at the node and stop it.
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

die() { echo "demo: error: $*" >&2; exit 1; }
say() { echo "demo: $*"; }

kubectl_() { KUBECACHEDIR="$KDIR/kubectl-cache" "$DEPS/bin/kubectl" --kubeconfig "$KDIR/admin.kubeconfig" "$@"; }

topolet_pid() {
  local pid
  pid="$(cat "$DIR/topolet.pid" 2>/dev/null)" || return 1
  [[ "$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")" == *"$DIR/topolet.toml"* ]] || return 1
  echo "$pid"
}

stop_all() {
  local pid
  "$HACK_DIR/kube-node.sh" stop "$KDIR" >/dev/null || echo "demo: stopping the Kubernetes node failed" >&2
  if pid="$(topolet_pid)"; then
    kill "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  fi
  rm -f "$DIR/topolet.pid"
  "$HACK_DIR/containerd.sh" stop "$CDIR" >/dev/null || echo "demo: stopping containerd failed" >&2
}

cleanup() {
  local rc=$?
  if [[ "${DEMO_KEEP:-0}" == 1 && $rc -eq 0 ]]; then
    cat <<EOF

demo: the node is left running. Poke at it:
  source $KDIR/env     # KUBECONFIG, PATH with kubectl, KUBECACHEDIR
  kubectl get pods -o wide; kubectl describe pod guaranteed-exclusive
  kubectl apply -f hack/demo/pods.yaml          # (re)create the example pods
  $TOPOLET status --admin-socket $DIR/admin.sock
  logs: $DIR/topolet.log, $KDIR/kubelet.log, $CDIR/containerd.log
Stop it: hack/demo.sh stop
EOF
    exit 0
  fi
  stop_all
  if [[ $rc -ne 0 && -f "$DIR/topolet.log" ]]; then
    echo "--- last lines of $DIR/topolet.log" >&2; tail -n 20 "$DIR/topolet.log" >&2
  fi
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

topolet_synchronized() { grep -q "nri synchronized" "$DIR/topolet.log"; }

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
  say "building topolet"
  cargo build -q -p topolet --bin topolet
  stop_all >/dev/null 2>&1 || true
  rm -rf "$DIR"
  mkdir -p "$DIR"
  trap cleanup EXIT
  say "starting containerd in $CDIR"
  "$HACK_DIR/containerd.sh" start "$CDIR" >/dev/null
  # shellcheck disable=SC1091
  source "$CDIR/env"

  local reserved=""
  [[ "$(nproc --all)" -gt 1 ]] && reserved='reserved_cpus = "0"'
  cat >"$DIR/topolet.toml" <<EOF
[nri]
socket = "$NRI_SOCKET"
[cpu]
policy = "static"
$reserved
[state]
dir = "$DIR/topolet-state"
[admin]
socket = "$DIR/admin.sock"
[qos]
pids_limit = 1024
EOF
  say "starting topolet (log: $DIR/topolet.log)"
  setsid "$TOPOLET" run --config "$DIR/topolet.toml" </dev/null >"$DIR/topolet.log" 2>&1 &
  echo $! >"$DIR/topolet.pid"
  wait_for "topolet to synchronize with containerd" 30 topolet_synchronized
  say "starting etcd, kube-apiserver, kube-scheduler and the kubelet in $KDIR"
  KUBE_CONTAINERD_DIR="$CDIR" "$HACK_DIR/kube-node.sh" start "$KDIR"

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
  "$TOPOLET" status --admin-socket "$DIR/admin.sock" | sed 's/^/  /'

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
