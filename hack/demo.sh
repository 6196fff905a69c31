#!/usr/bin/env bash
# hack/demo.sh — set everything up on this machine and run topolet's main job.
#
# Usage: hack/demo.sh           (as root; needs go, cargo and gcc)
#
# 1. installs the pinned containerd, runc and crictl (hack/install-deps.sh),
# 2. builds topolet and starts an isolated containerd in .stack-demo/ (hack/containerd.sh),
# 3. starts `topolet run` against it (CPU 0 reserved when the machine has more than one CPU),
# 4. creates one pod of each kind the kubelet would: Guaranteed with an integer CPU, Guaranteed
#    with a fractional CPU, Burstable, BestEffort,
# 5. prints what each container really got, read from its cgroups and /proc,
# 6. stops everything (set DEMO_KEEP=1 to leave the stack and topolet running).
#
# Environment:
#   CONTAINERD_VERSION   v2.4.2 (default), v2.3.7 or v2.0.14
#   DEMO_KEEP            1 = leave the stack and topolet running at the end
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

DIR="$REPO_ROOT/.stack-demo"
TOPOLET="$REPO_ROOT/target/debug/topolet"
TOPOLET_PID=""

die() { echo "demo: error: $*" >&2; exit 1; }
say() { echo "demo: $*"; }

cleanup() {
  local rc=$?
  if [[ "${DEMO_KEEP:-0}" == 1 && $rc -eq 0 ]]; then
    say "left running: containerd in $DIR (source $DIR/env), topolet pid $TOPOLET_PID (log $DIR/topolet.log)"
    exit 0
  fi
  [[ -n "$TOPOLET_PID" ]] && kill "$TOPOLET_PID" 2>/dev/null && wait "$TOPOLET_PID" 2>/dev/null
  "$HACK_DIR/containerd.sh" stop "$DIR" >/dev/null || echo "demo: stopping the stack failed" >&2
  if [[ $rc -ne 0 && -f "$DIR/topolet.log" ]]; then
    echo "--- last lines of $DIR/topolet.log" >&2; tail -n 20 "$DIR/topolet.log" >&2
  fi
  exit "$rc"
}

# wait_for FILE TEXT SECONDS: poll until FILE contains TEXT.
wait_for() {
  local file="$1" text="$2" deadline=$((SECONDS + $3))
  until grep -q -- "$text" "$file" 2>/dev/null; do
    ((SECONDS < deadline)) || die "timed out waiting for \"$text\" in $file"
    sleep 0.1
  done
}

write_pod() { # NAME QOS_DIR -> pod config path
  local name="$1" qos_dir="$2" file="$DIR/demo/$1-pod.json"
  cat >"$file" <<EOF
{"metadata":{"name":"$name","namespace":"demo","uid":"demo-$name","attempt":0},
 "log_directory":"$DIR/demo/logs",
 "linux":{"cgroup_parent":"$CGROUP_PARENT_BASE/kubepods${qos_dir}/poddemo-$name",
          "security_context":{"namespace_options":{"network":2,"pid":1}}}}
EOF
  echo "$file"
}

write_ctr() { # NAME RESOURCES_JSON -> container config path
  local file="$DIR/demo/$1-ctr.json"
  cat >"$file" <<EOF
{"metadata":{"name":"app"},"image":{"image":"$TEST_IMAGE"},
 "command":["/bin/sleep","3600"],"log_path":"$1.log",
 "linux":{"resources":$2,
          "security_context":{"namespace_options":{"network":2,"pid":1}}}}
EOF
  echo "$file"
}

run_pod() { # NAME QOS_DIR RESOURCES_JSON -> container id
  local pod_cfg ctr_cfg pod cid
  pod_cfg="$(write_pod "$1" "$2")"
  ctr_cfg="$(write_ctr "$1" "$3")"
  pod="$(crictl runp "$pod_cfg")" || die "RunPodSandbox $1"
  cid="$(crictl create "$pod" "$ctr_cfg" "$pod_cfg")" || die "CreateContainer $1"
  crictl start "$cid" >/dev/null || die "StartContainer $1"
  echo "$cid"
}

row() { # NAME QOS CID
  local name="$1" qos="$2" cid="$3" cg pid quota
  cg="$CGROUP_PARENT_BASE/kubepods$4/poddemo-$name/$cid"
  pid="$(crictl inspect -o go-template --template '{{.info.pid}}' "$cid")"
  quota="$(cat "/sys/fs/cgroup/cpu$cg/cpu.cfs_quota_us")/$(cat "/sys/fs/cgroup/cpu$cg/cpu.cfs_period_us")"
  printf '%-10s %-11s %-8s %-8s %-5s %-7s %-15s %-12s %-6s %s\n' \
    "$name" "$qos" \
    "$(cat "/sys/fs/cgroup/cpuset$cg/cpuset.cpus")" \
    "$(awk '/Cpus_allowed_list/ {print $2}' "/proc/$pid/status")" \
    "$(cat "/sys/fs/cgroup/cpuset$cg/cpuset.mems")" \
    "$(cat "/sys/fs/cgroup/cpu$cg/cpu.shares")" \
    "$quota" \
    "$(cat "/sys/fs/cgroup/memory$cg/memory.limit_in_bytes")" \
    "$(cat "/proc/$pid/oom_score_adj")" \
    "$(cat "/sys/fs/cgroup/pids$cg/pids.max")"
}

main() {
  [[ $EUID -eq 0 ]] || die "must run as root (containerd, runc, cgroups)"
  cd "$REPO_ROOT"
  say "installing dependencies"
  "$HACK_DIR/install-deps.sh"
  say "building topolet"
  cargo build -q -p topolet --bin topolet
  "$HACK_DIR/containerd.sh" stop "$DIR" >/dev/null 2>&1 || true
  rm -rf "$DIR"
  mkdir -p "$DIR"
  trap cleanup EXIT
  say "starting containerd in $DIR"
  "$HACK_DIR/containerd.sh" start "$DIR" >/dev/null
  # shellcheck disable=SC1091
  source "$DIR/env"
  mkdir -p "$DIR/demo/logs"

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
[qos]
pids_limit = 1024
EOF
  say "starting topolet (log: $DIR/topolet.log)"
  "$TOPOLET" run --config "$DIR/topolet.toml" >"$DIR/topolet.log" 2>&1 &
  TOPOLET_PID=$!
  wait_for "$DIR/topolet.log" "nri synchronized" 20

  local be bu gf gi
  be="$(run_pod besteffort /besteffort '{"cpu_shares":2,"oom_score_adj":1000}')"
  bu="$(run_pod burstable /burstable '{"cpu_shares":256,"cpu_quota":100000,"cpu_period":100000,"memory_limit_in_bytes":268435456,"oom_score_adj":999}')"
  gf="$(run_pod guar-half "" '{"cpu_shares":512,"cpu_quota":50000,"cpu_period":100000,"memory_limit_in_bytes":134217728,"oom_score_adj":-997}')"
  gi="$(run_pod guar-1cpu "" '{"cpu_shares":1024,"cpu_quota":100000,"cpu_period":100000,"memory_limit_in_bytes":134217728,"oom_score_adj":-997}')"
  # Shared containers are moved off the exclusive CPU by an update sent after the create.
  wait_for "$DIR/topolet.log" "guar-1cpu" 10
  sleep 0.5

  echo
  printf '%-10s %-11s %-8s %-8s %-5s %-7s %-15s %-12s %-6s %s\n' \
    pod qos cpuset allowed mems shares quota/period mem.limit oom pids.max
  row besteffort BestEffort "$be" /besteffort
  row burstable Burstable "$bu" /burstable
  row guar-half Guaranteed "$gf" ""
  row guar-1cpu Guaranteed "$gi" ""
  echo
  say "topolet's decisions:"
  grep "container placed" "$DIR/topolet.log" | sed 's/^/  /'
}

main "$@"
