#!/usr/bin/env bash
# hack/smoke-stack.sh — prove the containerd test stack works and cleans up after itself.
#
# Usage: hack/smoke-stack.sh            (no arguments; run as root after hack/install-deps.sh
#                                        for every line in SMOKE_VERSIONS)
#
# For each containerd line: start a stack (hack/containerd.sh), run a host-network pod
# (network=NODE, pid=CONTAINER) with an absolute cgroup_parent under CGROUP_PARENT_BASE via
# crictl runp/create/start running `sleep` from the test image with cpuset_cpus "0", the pod and
# the container with seccomp RuntimeDefault as the kubelet asks (runc must be built with seccomp),
# check `crictl exec` works, that /proc/<pid>/status Cpus_allowed_list is 0 both from the host and
# from inside and that the container runs under a seccomp filter (Seccomp: 2), restart containerd and check the container still runs and answers exec, then stop
# the stack and check it left no process, mount or cgroup behind. Finally two stacks (one per line)
# run side by side, each with a pod, and both are stopped and checked.
#
# Environment:
#   SMOKE_VERSIONS   containerd lines to test (default: SUPPORTED_CONTAINERD_VERSIONS of
#                    hack/lib/common.sh, "v2.4.2 v2.3.7 v2.0.14"; the side-by-side pair is the first two)
#   SMOKE_TMP        parent directory for the stack DIRs (default /tmp)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

SMOKE_VERSIONS="${SMOKE_VERSIONS:-$SUPPORTED_CONTAINERD_VERSIONS}"
WORK="$(mktemp -d "${SMOKE_TMP:-/tmp}/topolet-smoke.XXXXXX")"
STARTED_DIRS=()

LOG_NAME=smoke-stack
DIE_LABEL=FAIL

cleanup() {
  local rc=$? d
  for d in "${STARTED_DIRS[@]}"; do
    if [[ -f "$d/containerd.log" && $rc -ne 0 ]]; then
      echo "--- last lines of $d/containerd.log" >&2; tail -n 20 "$d/containerd.log" >&2
    fi
    "$HACK_DIR/containerd.sh" stop "$d" || echo "smoke-stack: cleanup: stop $d failed" >&2
  done
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT

start_stack() {
  local dir="$1" version="$2"
  STARTED_DIRS+=("$dir")
  CONTAINERD_VERSION="$version" "$HACK_DIR/containerd.sh" start "$dir" || die "start of containerd $version in $dir"
}

stop_stack() {
  "$HACK_DIR/containerd.sh" stop "$1" || die "stop of $1"
}

# in_stack DIR CMD...: run CMD with DIR/env loaded.
in_stack() {
  local dir="$1"; shift
  # shellcheck disable=SC1091
  (source "$dir/env" && "$@")
}

# run_pod DIR NAME: create a host-network pod + sleep container; print the container id.
run_pod() {
  local dir="$1" name="$2" base uid
  base="$(in_stack "$dir" printenv CGROUP_PARENT_BASE)"
  uid="smoke-$name"
  mkdir -p "$dir/smoke/logs"
  cat >"$dir/smoke/$name-pod.json" <<EOF
{"metadata":{"name":"$name","namespace":"smoke","uid":"$uid","attempt":0},
 "log_directory":"$dir/smoke/logs",
 "linux":{"cgroup_parent":"$base/burstable/pod$uid",
          "security_context":{"namespace_options":{"network":2,"pid":1},"seccomp":{"profile_type":0}}}}
EOF
  cat >"$dir/smoke/$name-ctr.json" <<EOF
{"metadata":{"name":"sleeper"},"image":{"image":"$TEST_IMAGE"},
 "command":["/bin/sleep","3600"],"log_path":"sleeper.log",
 "linux":{"resources":{"cpu_shares":512,"cpu_period":100000,"cpu_quota":100000,
          "memory_limit_in_bytes":268435456,"oom_score_adj":500,"cpuset_cpus":"0"},
          "security_context":{"namespace_options":{"network":2,"pid":1},"seccomp":{"profile_type":0}}}}
EOF
  local pod cid
  pod="$(in_stack "$dir" crictl runp "$dir/smoke/$name-pod.json")" || die "crictl runp in $dir"
  cid="$(in_stack "$dir" crictl create "$pod" "$dir/smoke/$name-ctr.json" "$dir/smoke/$name-pod.json")" ||
    die "crictl create in $dir"
  in_stack "$dir" crictl start "$cid" >/dev/null || die "crictl start $cid in $dir"
  echo "$cid"
}

container_state() { in_stack "$1" crictl inspect -o go-template --template '{{.status.state}}' "$2"; }
container_pid() { in_stack "$1" crictl inspect -o go-template --template '{{.info.pid}}' "$2"; }

# check_container DIR CID: running, exec works, cpuset 0 seen from host and inside, cgroup placed,
# seccomp filter on.
check_container() {
  local dir="$1" cid="$2" state pid host_cpus inner_cpus base seccomp
  state="$(container_state "$dir" "$cid")"
  [[ "$state" == CONTAINER_RUNNING ]] || die "container $cid in $dir is $state, want CONTAINER_RUNNING"
  pid="$(container_pid "$dir" "$cid")"
  [[ "$pid" =~ ^[0-9]+$ && -d /proc/$pid ]] || die "container $cid has no live pid ($pid)"
  host_cpus="$(awk '/^Cpus_allowed_list/ {print $2}' "/proc/$pid/status")"
  inner_cpus="$(in_stack "$dir" crictl exec "$cid" cat /proc/1/status | awk '/^Cpus_allowed_list/ {print $2}')" ||
    die "crictl exec into $cid in $dir"
  [[ "$host_cpus" == 0 ]] || die "/proc/$pid/status Cpus_allowed_list=$host_cpus, want 0"
  [[ "$inner_cpus" == 0 ]] || die "inside $cid Cpus_allowed_list=$inner_cpus, want 0"
  seccomp="$(awk '/^Seccomp:/ {print $2}' "/proc/$pid/status")"
  [[ "$seccomp" == 2 ]] || die "/proc/$pid/status Seccomp=$seccomp, want 2 (RuntimeDefault filter)"
  base="$(in_stack "$dir" printenv CGROUP_PARENT_BASE)"
  grep -q "^[0-9]*:cpuset:$base/burstable/" "/proc/$pid/cgroup" ||
    die "container pid $pid is not in a cpuset cgroup under $base: $(grep cpuset "/proc/$pid/cgroup")"
  say "  $cid pid $pid Cpus_allowed_list=$host_cpus (host) / $inner_cpus (exec) seccomp filter, cgroup ok"
}

# check_clean DIR: nothing of the stack is left.
check_clean() {
  local dir="$1" base="$2" left
  left="$(pgrep -af -- "$dir/" || true)"
  [[ -z "$left" ]] || die "processes left after stop of $dir: $left"
  left="$(awk -v d="$dir" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo)"
  [[ -z "$left" ]] || die "mounts left after stop of $dir: $left"
  left="$(find /sys/fs/cgroup/*/"${base#/}" -maxdepth 0 2>/dev/null || true)"
  [[ -z "$left" ]] || die "cgroups left after stop of $dir: $left"
  say "  stop of $dir left no process, mount or cgroup"
}

smoke_one_line() {
  local v="$1" dir="$WORK/$1" cid base pid
  say "== containerd $v: start, pod, exec, restart, stop"
  start_stack "$dir" "$v"
  in_stack "$dir" containerd --version | grep -qF "$v" || die "containerd on PATH of $dir/env is not $v"
  base="$(in_stack "$dir" printenv CGROUP_PARENT_BASE)"
  cid="$(run_pod "$dir" "p-${v//./-}")"
  check_container "$dir" "$cid"
  pid="$(container_pid "$dir" "$cid")"
  "$HACK_DIR/containerd.sh" restart "$dir" || die "restart of $dir"
  [[ "$(container_pid "$dir" "$cid")" == "$pid" ]] || die "container $cid changed pid across restart"
  check_container "$dir" "$cid"
  say "  restart kept $cid running"
  stop_stack "$dir"
  check_clean "$dir" "$base"
}

smoke_side_by_side() {
  local -a versions dirs bases
  read -r -a versions <<<"$SMOKE_VERSIONS"
  ((${#versions[@]} >= 2)) || versions+=("${versions[0]}")
  say "== two stacks side by side: ${versions[0]} and ${versions[1]}"
  local i cid
  for i in 0 1; do
    dirs[i]="$WORK/pair$i"
    start_stack "${dirs[i]}" "${versions[i]}"
    bases[i]="$(in_stack "${dirs[i]}" printenv CGROUP_PARENT_BASE)"
  done
  [[ "${bases[0]}" != "${bases[1]}" ]] || die "both stacks got cgroup base ${bases[0]}"
  for i in 0 1; do
    cid="$(run_pod "${dirs[i]}" "pair$i")"
    check_container "${dirs[i]}" "$cid"
    [[ "$(in_stack "${dirs[1 - i]}" crictl ps -q)" != *"$cid"* ]] || die "stack pair$((1 - i)) sees pair$i's container"
  done
  for i in 0 1; do stop_stack "${dirs[i]}"; check_clean "${dirs[i]}" "${bases[i]}"; done
}

main() {
  [[ $EUID -eq 0 ]] || die "must run as root"
  local v
  for v in $SMOKE_VERSIONS; do smoke_one_line "$v"; done
  smoke_side_by_side
  say "PASS (containerd lines: $SMOKE_VERSIONS)"
}

main "$@"
