#!/usr/bin/env bash
# hack/nri-latency.sh — round-trip cost of a no-op CreateContainer through a real containerd (or
# CRI-O) + NRI.
# (CreateContainer + StartContainer against no plugin / topolet / the Go baseline: hack/bench.sh.)
#
# Usage: hack/nri-latency.sh        (as root, after hack/install-deps.sh; builds topolet and the client)
#
# Method: one isolated containerd (hack/containerd.sh), or CRI-O (hack/crio.sh, the same contract)
# with LATENCY_RUNTIME=cri-o. A small Go CRI client (hack/nri-latency/,
# k8s.io/cri-api over gRPC, built offline from the module cache install-deps filled for the
# default line, $TOPOLET_CACHE/go) times each
# CreateContainer call in-process (no process start-up inside the measurement); every created
# container is removed again, untimed; the first create of each block is a discarded warm-up.
# Three conditions, interleaved in blocks (rotating order) so drift and other load on the machine
# hit all of them alike:
#   none     no NRI plugin connected (the runtime's own cost)
#   noop     topolet connected; the pod's cgroup parent is not a kubelet pod cgroup, so topolet
#            answers CreateContainer with an empty adjustment: the pure NRI round trip
#   managed  topolet connected; a BestEffort pod (<base>/kubepods/besteffort/pod…): topolet
#            computes and returns a real adjustment (cpuset, pids, …)
# With LATENCY_PODRESOURCES=1, two conditions instead, on containerd: what the kubelet's
# PodResources lookup adds to CreateContainer (docs/src/devices.md):
#   managed  as above, `[kubelet] pod_resources = false`
#   lookup   as above, topolet asking a real kubelet's PodResources API (`Get` for the pod, within
#            pod_resources_wait_ms) at every CreateContainer: the kubelet of a single-node
#            cluster (hack/kube-node.sh) on a second containerd stack of its own (a kubelet on the
#            measured stack would kill the client's pods, which it does not know), running a pod
#            of the same namespace and name as the client's, so every lookup finds its pod
# Reported: per condition n, median, p10, p90, p99, mean; the NRI cost is median(noop) − median(none).
# Toggling the plugin between blocks waits for the runtime's own log lines ("… connected and
# synchronized" / "connection to plugin … closed": containerd/nri's pkg/adaptation logs them through
# either runtime's logger), so no block runs half-connected.
#
# Environment:
#   LATENCY_RUNTIME  containerd (default) or cri-o (hack/install-crio.sh first)
#   CONTAINERD_VERSION / TOPOLET_CONTAINERD_VERSION   line to use (default v2.4.2)
#   CRIO_VERSION     the CRI-O line with LATENCY_RUNTIME=cri-o (default DEFAULT_CRIO_VERSION)
#   LATENCY_ROUNDS   blocks per condition (default 10)
#   LATENCY_BLOCK    timed creates per block (default 25)  → ROUNDS×BLOCK samples per condition
#   LATENCY_OUT      samples file to keep (default: a temp file, removed)
#   LATENCY_PODRESOURCES  1: the managed / lookup conditions above (hack/install-kube.sh first)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

ROUNDS="${LATENCY_ROUNDS:-10}"
BLOCK="${LATENCY_BLOCK:-25}"
VERSION="${CONTAINERD_VERSION:-${TOPOLET_CONTAINERD_VERSION:-$DEFAULT_CONTAINERD_VERSION}}"
RUNTIME="${LATENCY_RUNTIME:-containerd}"
PODRESOURCES="${LATENCY_PODRESOURCES:-0}"
case "$RUNTIME" in
  containerd) STACK_SCRIPT="$HACK_DIR/containerd.sh" ;;
  cri-o) STACK_SCRIPT="$HACK_DIR/crio.sh"; VERSION="${CRIO_VERSION:-$DEFAULT_CRIO_VERSION}" ;;
  *) echo "nri-latency: LATENCY_RUNTIME: unknown runtime $RUNTIME (containerd, cri-o)" >&2; exit 2 ;;
esac

LOG_NAME=nri-latency
SAY_TO_STDERR=1

[[ $EUID -eq 0 ]] || die "must run as root"
WORK="$(mktemp -d /tmp/topolet-lat.XXXXXX)"
STACK="$WORK/s"
TOPOLET_PID=""
KUBE_STACK="$WORK/k"
KUBE_DIR="$WORK/kube"
cleanup() {
  local rc=$?
  [[ -z "$TOPOLET_PID" ]] || { kill -TERM "$TOPOLET_PID" 2>/dev/null || true; wait "$TOPOLET_PID" 2>/dev/null || true; }
  if [[ -f "$KUBE_DIR/env" ]]; then
    "$HACK_DIR/kube-node.sh" stop "$KUBE_DIR" >/dev/null 2>&1 || echo "nri-latency: stop of $KUBE_DIR failed" >&2
  fi
  if [[ -f "$KUBE_STACK/env" ]]; then
    "$HACK_DIR/containerd.sh" stop "$KUBE_STACK" >/dev/null 2>&1 || echo "nri-latency: stop of $KUBE_STACK failed" >&2
  fi
  "$STACK_SCRIPT" stop "$STACK" >/dev/null 2>&1 || echo "nri-latency: stop of $STACK failed" >&2
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT

say "building topolet and the CRI client"
(cd "$REPO_ROOT" && cargo build -q -p topolet --bin topolet) || die "cargo build -p topolet failed"
TOPOLET="$REPO_ROOT/target/debug/topolet"
CLIENT="$DEPS/bin/nri-latency"
(cd "$HACK_DIR/nri-latency" && go_cache_env GOPROXY=off GOFLAGS=-mod=readonly CGO_ENABLED=0 \
  "${GO:-$(command -v go || echo /usr/local/go/bin/go)}" build -o "$CLIENT" .) || die "building hack/nri-latency failed"

say "starting $RUNTIME $VERSION"
if [[ "$RUNTIME" == containerd ]]; then
  CONTAINERD_VERSION="$VERSION" "$STACK_SCRIPT" start "$STACK" >/dev/null || die "containerd.sh start failed"
else
  CRIO_VERSION="$VERSION" "$STACK_SCRIPT" start "$STACK" >/dev/null || die "crio.sh start failed"
fi
# shellcheck disable=SC1091
source "$STACK/env"
LOG="${CONTAINERD_LOG:-${CRIO_LOG:-}}"
[[ -n "$LOG" ]] || die "$STACK/env names no runtime log (CONTAINERD_LOG or CRIO_LOG)"
SAMPLES="${LATENCY_OUT:-$WORK/samples.txt}"
: >"$SAMPLES"
mkdir -p "$WORK/ids" "$WORK/logs" "$WORK/topolet"
cat >"$WORK/topolet/topolet.toml" <<EOT
[nri]
socket = "$NRI_SOCKET"
name = "topolet"
index = 50

[cpu]
policy = "static"
reserved_cpus = "0"

[state]
dir = "$WORK/topolet/state"

[qos]
pids_limit = 1024

[admin]
socket = "$WORK/topolet/admin.sock"
EOT
# Without the lookup (pod_resources = false): the managed condition of either mode.
cp "$WORK/topolet/topolet.toml" "$WORK/topolet/lookup.toml"
printf '\n[kubelet]\npod_resources = false\n' >>"$WORK/topolet/topolet.toml"

if [[ "$PODRESOURCES" == 1 ]]; then
  [[ "$RUNTIME" == containerd ]] || die "LATENCY_PODRESOURCES=1 runs on containerd only"
  say "starting a kubelet beside it (its own containerd stack) for the PodResources lookup"
  CONTAINERD_VERSION="$VERSION" "$HACK_DIR/containerd.sh" start "$KUBE_STACK" >/dev/null || die "containerd.sh start $KUBE_STACK failed"
  KUBE_CONTAINERD_DIR="$KUBE_STACK" "$HACK_DIR/kube-node.sh" start "$KUBE_DIR" >/dev/null || die "kube-node.sh start failed"
  (
    # shellcheck disable=SC1091
    source "$KUBE_DIR/env"
    kubectl create namespace latency >/dev/null
    # The client's pod's namespace and name (hack/nri-latency: namespace latency, -pod lat-be).
    kubectl apply -f - >/dev/null <<EOT
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "lat-be", "namespace": "latency"},
 "spec": {"hostNetwork": true, "automountServiceAccountToken": false,
          "terminationGracePeriodSeconds": 5,
          "containers": [{"name": "c", "image": "$PAUSE_IMAGE", "imagePullPolicy": "Never"}]}}
EOT
    kubectl wait -n latency --for=condition=Ready pod/lat-be --timeout=120s >/dev/null ||
      { kubectl describe -n latency pod/lat-be >&2; exit 1; }
  ) || die "the kubelet's pod latency/lat-be did not start"
  printf '\n[kubelet]\npod_resources_socket = "%s"\n' \
    "$KUBE_DIR/kubelet/pod-resources/kubelet.sock" >>"$WORK/topolet/lookup.toml"
fi

count() { grep -cF -- "$1" "$LOG" || true; }
wait_count() { # wait_count PATTERN N: until PATTERN occurs N times in containerd's log
  local deadline=$((SECONDS + 20))
  until (($(count "$1") >= $2)); do
    ((SECONDS < deadline)) || die "timed out waiting for containerd to log: $1"
    sleep 0.05
  done
}
CONNECTED='plugin \"50-topolet\" connected and synchronized'
CLOSED='connection to plugin \"50-topolet\" closed'
TOPOLET_CONFIG=""
plugin_on() { # plugin_on [CONFIG]: topolet running with CONFIG (default topolet.toml)
  local config="${1:-$WORK/topolet/topolet.toml}"
  [[ -n "$TOPOLET_PID" && "$TOPOLET_CONFIG" != "$config" ]] && plugin_off
  [[ -z "$TOPOLET_PID" ]] || return 0
  local n; n=$(count "$CONNECTED")
  "$TOPOLET" run --config "$config" --log-file "$WORK/topolet/topolet.log" 2>>"$WORK/topolet/stderr" &
  TOPOLET_PID=$!
  TOPOLET_CONFIG="$config"
  wait_count "$CONNECTED" $((n + 1))
}
plugin_off() {
  [[ -n "$TOPOLET_PID" ]] || return 0
  local n; n=$(count "$CLOSED")
  kill -TERM "$TOPOLET_PID"; wait "$TOPOLET_PID" 2>/dev/null || true
  TOPOLET_PID=""
  wait_count "$CLOSED" $((n + 1))
}
block() { # block LABEL POD CGROUP_PARENT
  "$CLIENT" run -endpoint "${CRI_ENDPOINT#unix://}" -state "$WORK/ids" -label "$1" -pod "$2" \
    -cgroup-parent "$3" -logdir "$WORK/logs/$2" -image "$TEST_IMAGE" -n "$BLOCK" -out "$SAMPLES"
}
run_condition() {
  case "$1" in
    none) plugin_off; block none lat-foreign "$CGROUP_PARENT_BASE/other/lat-foreign" ;;
    noop) plugin_on; block noop lat-foreign "$CGROUP_PARENT_BASE/other/lat-foreign" ;;
    managed) plugin_on; block managed lat-be "$CGROUP_PARENT_BASE/kubepods/besteffort/podlat-be" ;;
    lookup)
      plugin_on "$WORK/topolet/lookup.toml"
      block lookup lat-be "$CGROUP_PARENT_BASE/kubepods/besteffort/podlat-be"
      # The block's lookups were answered: the source's state after them (a failed or timed-out
      # lookup leaves it absent or unreachable).
      local state
      state=$("$TOPOLET" status -o json --admin-socket "$WORK/topolet/admin.sock" |
        python3 -c 'import json, sys; print((json.load(sys.stdin).get("pod_resources") or {}).get("state"))')
      [[ "$state" == answering ]] || die "after a lookup block the kubelet's PodResources source is $state, not answering"
      ANSWERED=$((ANSWERED + 1))
      ;;
  esac
}

ANSWERED=0
CONDS=(none noop managed)
[[ "$PODRESOURCES" != 1 ]] || CONDS=(managed lookup)
say "$ROUNDS rounds x $BLOCK creates per condition (${CONDS[*]}), interleaved"
for ((r = 0; r < ROUNDS; r++)); do
  for ((k = 0; k < ${#CONDS[@]}; k++)); do
    run_condition "${CONDS[(r + k) % ${#CONDS[@]}]}"
  done
done
plugin_off

if [[ "$RUNTIME" == containerd ]]; then
  rt="containerd $VERSION ($(containerd --version | awk '{print $3}'))"
else
  rt="CRI-O $VERSION ($(crio version 2>/dev/null | awk '$1 == "Version:" {print $2; exit}'))"
fi
echo "$rt, runc $(runc --version | head -n1 | awk '{print $3}'), $(nproc) CPUs"
"$CLIENT" stats "$SAMPLES"
grep -q "container placed" "$WORK/topolet/topolet.log" || die "topolet placed no container in the managed blocks"
if [[ "$PODRESOURCES" == 1 ]]; then
  echo "the kubelet's PodResources source was answering after every lookup block ($ANSWERED of $ROUNDS)"
fi
