#!/usr/bin/env bash
# hack/crio-smoke.sh — topolet on CRI-O, by hand: a smoke run, not a test suite.
#
# Usage: hack/crio-smoke.sh [DIR]   (root; after hack/install-deps.sh and hack/install-crio.sh;
#                                    DIR default .stack-crio-smoke; take the real-stack lock)
#
# Starts CRI-O (hack/crio.sh start DIR), topolet (debug build, `cargo build -p topolet` unless
# TOPOLET_BIN names one) dialing its NRI socket with a minimal config (static policy, CPU 0
# reserved, no Kubernetes API, no kubelet), then through crictl: a Guaranteed pod with one
# container requesting 1 CPU (kubelet-shaped values: shares 1024, quota = period, a memory
# limit, oom_score_adj -997) and a BestEffort one. It prints each container's cgroup files
# (cpuset.cpus, cpuset.mems, cpu.cfs_quota_us, cpu.shares), what topolet status says of the
# runtime and the containers, then updates the Guaranteed container's cpuset through CRI
# (`crictl update --cpuset-cpus`) and prints its cpuset.cpus again, and stops everything
# (hack/crio.sh stop DIR; topolet killed). With NRI_LOGGER=<path of topolet-nri's example
# `logger`> (cargo build -p topolet-nri --example logger), that plugin runs beside topolet (index
# 10) and the events CRI-O sent it, with each container's pid, are printed after the pods are
# stopped and removed. SMOKE_RUNTIME=containerd runs the same against hack/containerd.sh (the
# default line), for comparison. Exit status: 0 when the Guaranteed container's
# cpuset.cpus is CPUs topolet chose exclusively (not the reserved CPU 0) and topolet status names
# the runtime cri-o; 1 otherwise. Everything it ran is logged under DIR (topolet.log, crio.log).
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"
LOG_NAME=crio-smoke

DIR="${1:-$REPO_ROOT/.stack-crio-smoke}"
TOPOLET_BIN="${TOPOLET_BIN:-}"
NRI_LOGGER="${NRI_LOGGER:-}"
SMOKE_RUNTIME="${SMOKE_RUNTIME:-cri-o}"
case "$SMOKE_RUNTIME" in
  cri-o) STACK="$HACK_DIR/crio.sh" CTR_PREFIX=crio- ;;
  containerd) STACK="$HACK_DIR/containerd.sh" CTR_PREFIX= ;;
  *) die "SMOKE_RUNTIME=$SMOKE_RUNTIME is neither cri-o nor containerd" ;;
esac
TOPOLET_PID=
LOGGER_PID=
FAILED=0

cleanup() {
  if [[ -n "$LOGGER_PID" ]]; then kill "$LOGGER_PID" 2>/dev/null || true; wait "$LOGGER_PID" 2>/dev/null || true; fi
  if [[ -n "$TOPOLET_PID" ]]; then kill "$TOPOLET_PID" 2>/dev/null || true; wait "$TOPOLET_PID" 2>/dev/null || true; fi
  "$STACK" stop "$DIR" || warn "$STACK stop $DIR failed"
}

build_topolet() {
  if [[ -z "$TOPOLET_BIN" ]]; then
    say "building topolet (debug)"
    (cd "$REPO_ROOT" && cargo build -q -p topolet --bin topolet) || die "cargo build -p topolet failed"
    TOPOLET_BIN="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug/topolet"
  fi
  [[ -x "$TOPOLET_BIN" ]] || die "$TOPOLET_BIN is not an executable"
}

write_topolet_config() {
  mkdir -p "$DIR/topolet/state"
  cat >"$DIR/topolet/config.toml" <<EOF
[nri]
socket = "$NRI_SOCKET"
name = "topolet"
index = 50

[cpu]
policy = "static"
reserved_cpus = "0"

[admin]
socket = "$DIR/topolet/admin.sock"

[metrics]
address = "127.0.0.1:0"

[state]
dir = "$DIR/topolet/state"

[kubelet]
pod_resources_socket = "$DIR/topolet/no-kubelet.sock"

[kubernetes]
enabled = "off"
EOF
}

status() { "$TOPOLET_BIN" status -o json --admin-socket "$DIR/topolet/admin.sock"; }

start_topolet() {
  TOPOLET_LOG=debug NO_COLOR=1 setsid "$TOPOLET_BIN" run --config "$DIR/topolet/config.toml" \
    --log-file "$DIR/topolet.log" </dev/null >/dev/null 2>"$DIR/topolet.stderr" &
  TOPOLET_PID=$!
  local deadline=$((SECONDS + 30))
  until status 2>/dev/null | jq -e '.nri.synchronized == true' >/dev/null 2>&1; do
    kill -0 "$TOPOLET_PID" 2>/dev/null || { tail -n 20 "$DIR/topolet.stderr" >&2; die "topolet exited"; }
    ((SECONDS < deadline)) || { status >&2 || true; die "topolet did not synchronize with CRI-O within 30s"; }
    sleep 0.2
  done
}

start_logger() {
  [[ -n "$NRI_LOGGER" ]] || return 0
  [[ -x "$NRI_LOGGER" ]] || die "NRI_LOGGER=$NRI_LOGGER is not an executable"
  NO_COLOR=1 setsid "$NRI_LOGGER" --socket "$NRI_SOCKET" --name logger --idx 10 </dev/null >/dev/null 2>"$DIR/logger.log" &
  LOGGER_PID=$!
  local deadline=$((SECONDS + 10))
  until grep -q synchronize "$DIR/logger.log" 2>/dev/null; do
    ((SECONDS < deadline)) || die "the NRI logger did not synchronize (log: $DIR/logger.log)"
    sleep 0.1
  done
}

# pod NAME QOS-DIR: a pod config under CGROUP_PARENT_BASE, kubelet's labels, host network.
pod_json() {
  local name="$1" level="$2" uid="uid-$1"
  cat <<EOF
{"metadata":{"name":"$name","namespace":"topolet-smoke","uid":"$uid","attempt":0},
 "labels":{"io.kubernetes.pod.name":"$name","io.kubernetes.pod.namespace":"topolet-smoke","io.kubernetes.pod.uid":"$uid"},
 "log_directory":"$DIR/pod-logs/$name",
 "linux":{"cgroup_parent":"$CGROUP_PARENT_BASE/kubepods$level/pod$uid",
  "security_context":{"namespace_options":{"network":2,"pid":1,"ipc":0}}}}
EOF
}

# ctr_json NAME RESOURCES: a sleeping busybox container with kubelet-shaped linux.resources.
ctr_json() {
  cat <<EOF
{"metadata":{"name":"$1","attempt":0},"image":{"image":"$TEST_IMAGE"},
 "command":["/bin/sleep","3600"],"log_path":"$1.log",
 "labels":{"io.kubernetes.container.name":"$1"},
 "linux":{"resources":$2,
  "security_context":{"namespace_options":{"network":2,"pid":1,"ipc":0}}}}
EOF
}

# run_pod NAME LEVEL RESOURCES: prints the container id.
run_pod() {
  pod_json "$1" "$2" >"$DIR/smoke-$1-pod.json"
  ctr_json "$1" "$3" >"$DIR/smoke-$1-ctr.json"
  local pod ctr
  pod="$(crictl runp "$DIR/smoke-$1-pod.json")" || die "crictl runp $1 failed"
  ctr="$(crictl create "$pod" "$DIR/smoke-$1-ctr.json" "$DIR/smoke-$1-pod.json")" || die "crictl create $1 failed"
  crictl start "$ctr" >/dev/null || die "crictl start $1 failed"
  echo "$ctr"
}

cg() { cat "/sys/fs/cgroup/$1$CGROUP_PARENT_BASE/kubepods$2/pod$3/$CTR_PREFIX$4/$5" 2>/dev/null || echo "?"; }

show() {
  local name="$1" level="$2" ctr="$3"
  printf '%-10s cpuset.cpus=%s cpuset.mems=%s cfs_quota_us=%s shares=%s oom_score_adj=%s\n' "$name" \
    "$(cg cpuset "$level" "uid-$name" "$ctr" cpuset.cpus)" "$(cg cpuset "$level" "uid-$name" "$ctr" cpuset.mems)" \
    "$(cg cpu "$level" "uid-$name" "$ctr" cpu.cfs_quota_us)" "$(cg cpu "$level" "uid-$name" "$ctr" cpu.shares)" \
    "$(crictl exec "$ctr" cat /proc/1/oom_score_adj 2>/dev/null || echo '?')"
}

main() {
  [[ $EUID -eq 0 ]] || die "must run as root"
  command -v jq >/dev/null || die "jq not found"
  build_topolet
  trap cleanup EXIT
  "$STACK" start "$DIR"
  # shellcheck source=/dev/null
  source "$DIR/env"
  write_topolet_config
  start_logger
  start_topolet
  say "topolet synchronized with $(crictl version | awk '/RuntimeName|RuntimeVersion/ { printf "%s ", $2 }')"

  local g b cpus
  g="$(run_pod guaranteed "" '{"cpu_period":100000,"cpu_quota":100000,"cpu_shares":1024,"memory_limit_in_bytes":67108864,"oom_score_adj":-997}')"
  b="$(run_pod besteffort /besteffort '{"cpu_period":100000,"cpu_shares":2,"oom_score_adj":1000}')"
  say "cgroup files (containers in $CGROUP_PARENT_BASE/kubepods[/besteffort]/pod<uid>/$CTR_PREFIX<id>):"
  show guaranteed "" "$g"
  show besteffort /besteffort "$b"
  cpus="$(cg cpuset "" uid-guaranteed "$g" cpuset.cpus)"
  if [[ "$cpus" == "?" || "$cpus" == *0* || "$cpus" == *-* || "$cpus" == *,* ]]; then
    warn "the Guaranteed container's cpuset.cpus is '$cpus', not one exclusive CPU other than 0"; FAILED=1
  fi

  say "topolet status: runtime and containers"
  status | jq -c '{nri: .nri, reserved, shared, managed_containers, exclusive: [.exclusive[] | {name, cpus, mems}]}' || true
  if ! status | jq -e --arg rt "$SMOKE_RUNTIME" '.nri.runtime == $rt' >/dev/null 2>&1; then
    warn "topolet status does not name the runtime $SMOKE_RUNTIME"; FAILED=1
  fi

  say "crictl update --cpuset-cpus 0-1 of the Guaranteed container (an UpdateContainer through NRI)"
  crictl update --cpuset-cpus 0-1 "$g" >/dev/null || warn "crictl update failed"
  show guaranteed "" "$g"
  say "topolet's log: the runtime's NRI version and the events subscribed"
  grep -E 'nri_version|events' "$DIR/topolet.log" | head -n 5 || true
  if [[ -n "$LOGGER_PID" ]]; then
    local p
    for p in $(crictl pods -q); do crictl stopp "$p" >/dev/null && crictl rmp "$p" >/dev/null; done
    sleep 0.5
    say "events the NRI logger received (pods stopped and removed at the end):"
    sed -E 's/^[^ ]+ +INFO +//; s/^[^ ]+: //' "$DIR/logger.log" | grep -v '^$' || true
  fi
  ((FAILED == 0)) || die "smoke failed (logs: $DIR/topolet.log, $DIR/crio.log)"
  say "ok"
}

main "$@"
