#!/usr/bin/env bash
# hack/containerd.sh — run an isolated containerd (CRI + NRI, runc, cgroupfs) for tests.
#
# Usage:
#   hack/containerd.sh start   DIR   start containerd with everything under DIR, import the images,
#                                    return when CRI answers (fails with the log tail otherwise)
#   hack/containerd.sh stop    DIR   remove all pods/containers, kill containerd and every shim and
#                                    container process of this stack, unmount everything under DIR,
#                                    remove the stack's cgroups. Leaves no process, mount or cgroup.
#                                    Succeeds (and does nothing) when no stack ran in DIR.
#   hack/containerd.sh restart DIR   stop only the containerd process (containers keep running),
#                                    start it again with the same config, wait for CRI
#
# Files in DIR (fixed names others rely on):
#   DIR/containerd.sock   CRI/containerd gRPC socket (ttrpc at DIR/containerd.sock.ttrpc)
#   DIR/nri-socket/nri.sock  NRI socket for external plugins (a directory of its own, as on a node:
#                         what mounts the socket's directory gets nothing else of the stack)
#   DIR/nri/plugins       NRI pre-installed plugin dir;  DIR/nri/conf.d  NRI plugin config dir
#   DIR/containerd.log    containerd's log (debug level; appended across restarts)
#   DIR/containerd.pid    pid of the running containerd
#   DIR/config.toml       the generated containerd config
#   DIR/env               shell syntax (`export K=V`, values escaped with printf %q) exporting
#                         CRI_ENDPOINT (unix://DIR/containerd.sock), CONTAINER_RUNTIME_ENDPOINT,
#                         IMAGE_SERVICE_ENDPOINT, CRI_CONFIG_FILE=DIR/crictl.yaml (for crictl),
#                         CONTAINERD_ADDRESS,
#                         CONTAINERD_NAMESPACE=k8s.io (for ctr), NRI_SOCKET, NRI_PLUGIN_DIR,
#                         NRI_CONF_DIR, CONTAINERD_VERSION, CONTAINERD_LOG, CONTAINERD_PID_FILE,
#                         RUNC_ROOT, CGROUP_PARENT_BASE, PAUSE_IMAGE, TEST_IMAGE, and PATH
#                         (this line's containerd/ctr/shim in .deps/containerd-<version>/bin, then
#                         .deps/bin with runc and crictl, all symlinks into $TOPOLET_CACHE,
#                         then the PATH of the caller of `start`)
#   DIR/root, state, tmp, opt, runc, cni/   containerd's private directories
#
# Cgroup convention: every pod of a stack must use an absolute cgroup_parent under
#   CGROUP_PARENT_BASE=/topolet-test-<first 10 hex of sha256(DIR)>
# e.g. "$CGROUP_PARENT_BASE/burstable/pod<uid>" (containers land in <cgroup_parent>/<id>).
# `stop` kills every process in, and removes, that subtree in every cgroup hierarchy
# (/sys/fs/cgroup/*/<base>, including the unified one). Pods outside it are still removed via
# CRI/runc, but their parent cgroups are not.
#
# Environment:
#   CONTAINERD_VERSION        v2.4.2 (default), v2.3.7 or v2.0.14; must be installed (hack/install-deps.sh).
#                             For start only; restart/stop use the line recorded in DIR/env.
#   TOPOLET_CONTAINERD_VERSION  used when CONTAINERD_VERSION is unset (what hack/test.sh sets for
#                             the integration suite, so tests that spawn this script inherit it)
#   CONTAINERD_START_TIMEOUT  seconds to wait for CRI to answer (default 60)
#   CONTAINERD_STOP_TIMEOUT   seconds to wait for processes/cgroups to go away (default 30)
#   CONTAINERD_CGROUP_DRIVER  cgroupfs (default) or systemd (runc's SystemdCgroup; pods then use
#                             systemd slice names as cgroup_parent; the QEMU guests of hack/guest.sh)
#   CONTAINERD_NRI_REQUEST_TIMEOUT  NRI plugin_request_timeout (default 2s; raised under emulation)
#   CRICTL_TIMEOUT            crictl's per-call timeout in seconds, in DIR/crictl.yaml (default 10)
#   CONTAINERD_ROOT_SIZE_MB   when set, DIR/root (images, snapshots: the image filesystem) is a
#                             tmpfs of this many MiB, a filesystem of its own whose free space only
#                             this stack changes (the eviction suite's imagefs pressure); `stop`
#                             unmounts it with everything else under DIR
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

START_TIMEOUT="${CONTAINERD_START_TIMEOUT:-60}"
STOP_TIMEOUT="${CONTAINERD_STOP_TIMEOUT:-30}"
CGROUP_DRIVER="${CONTAINERD_CGROUP_DRIVER:-cgroupfs}"
NRI_REQUEST_TIMEOUT="${CONTAINERD_NRI_REQUEST_TIMEOUT:-2s}"
CRICTL_TIMEOUT="${CRICTL_TIMEOUT:-10}"
[[ "$CGROUP_DRIVER" == cgroupfs || "$CGROUP_DRIVER" == systemd ]] ||
  { echo "containerd.sh: error: CONTAINERD_CGROUP_DRIVER=$CGROUP_DRIVER is neither cgroupfs nor systemd" >&2; exit 1; }
K8S_NS=k8s.io

usage() { die "usage: containerd.sh start|stop|restart DIR"; }

# ---------------------------------------------------------------- paths and naming

# set_paths DIR: define the stack's paths (DIR made absolute).
set_paths() {
  mkdir -p "$1"
  DIR="$(cd "$1" && pwd -P)"
  SOCK="$DIR/containerd.sock"
  NRI_SOCK="$DIR/nri-socket/nri.sock"
  LOG="$DIR/containerd.log"
  PID_FILE="$DIR/containerd.pid"
  CONFIG="$DIR/config.toml"
  ENV_FILE="$DIR/env"
  RUNC_ROOT="$DIR/runc"
  CRICTL_CONFIG="$DIR/crictl.yaml"
  CGROUP_PARENT_BASE="/topolet-test-$(printf '%s' "$DIR" | sha256sum | cut -c1-10)"
}

# The line's binaries; PATH used by this script and exported in DIR/env.
set_binaries() {
  validate_containerd_version "$CONTAINERD_VERSION" || exit 1
  CTRD_BIN_DIR="$(containerd_bin_dir "$CONTAINERD_VERSION")"
  local f
  for f in "$CTRD_BIN_DIR/containerd" "$CTRD_BIN_DIR/containerd-shim-runc-v2" "$CTRD_BIN_DIR/ctr" \
           "$DEPS/bin/runc" "$DEPS/bin/crictl"; do
    [[ -x "$f" ]] || die "$f is missing: run CONTAINERD_VERSION=$CONTAINERD_VERSION hack/install-deps.sh"
  done
  STACK_PATH="$CTRD_BIN_DIR:$DEPS/bin:$PATH"
  export PATH="$STACK_PATH"
}

crictl_() { "$DEPS/bin/crictl" --config "$CRICTL_CONFIG" --runtime-endpoint "unix://$SOCK" --image-endpoint "unix://$SOCK" --timeout "${CRICTL_TIMEOUT}s" "$@"; }
ctr_() { "$CTRD_BIN_DIR/ctr" --address "$SOCK" -n "$K8S_NS" "$@"; }

# wait_until TIMEOUT_S DESCRIPTION CMD...: poll CMD every 0.1 s until it succeeds; return 1 on timeout.
wait_until() {
  local timeout="$1" what="$2"; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      warn "timed out after ${timeout}s waiting for $what"
      return 1
    fi
    sleep 0.1
  done
}

# ---------------------------------------------------------------- process discovery

# containerd_pid: print the pid of this stack's containerd, if it runs.
containerd_pid() {
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  local args
  args="$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")" || return 1
  [[ "$args" == *"--config $CONFIG "* ]] || return 1
  echo "$pid"
}

# stack_shim_pids: pids of containerd-shim-runc-v2 processes serving this stack (-address DIR/containerd.sock).
stack_shim_pids() {
  local p args
  for p in /proc/[0-9]*; do
    [[ "${p#/proc/}" != "$$" ]] || continue
    args="$(tr '\0' '\n' 2>/dev/null <"$p/cmdline")" || continue
    [[ "$args" == *containerd-shim* ]] || continue
    if grep -qxF -- "$SOCK" <<<"$args"; then echo "${p#/proc/}"; fi
  done
  return 0
}

# stack_cgroup_pids: pids in any cgroup under CGROUP_PARENT_BASE, in any hierarchy.
stack_cgroup_pids() {
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ -d "$h${CGROUP_PARENT_BASE#/}" ]] || continue
    find "$h${CGROUP_PARENT_BASE#/}" -name cgroup.procs -exec cat {} + 2>/dev/null || true
  done | sort -un
}

pid_alive() { kill -0 "$1" 2>/dev/null; }

# kill_and_wait SIGNAL TIMEOUT PID...: signal the pids and wait until they are gone.
kill_and_wait() {
  local sig="$1" timeout="$2"; shift 2
  (($#)) || return 0
  kill "-$sig" "$@" 2>/dev/null || true
  local deadline=$((SECONDS + timeout)) p alive
  while :; do
    alive=()
    for p in "$@"; do pid_alive "$p" && alive+=("$p"); done
    ((${#alive[@]})) || return 0
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
}

# ---------------------------------------------------------------- config

choose_snapshotter() {
  local fstype
  fstype="$(findmnt -no FSTYPE -T "$DIR" 2>/dev/null | head -n1)"
  if [[ "$fstype" == overlay ]]; then SNAPSHOTTER=native; else SNAPSHOTTER=overlayfs; fi
}

write_config() {
  local unpack="" cni_bin="bin_dirs = [\"$DIR/cni/bin\"]" cdi="enable_cdi = false"
  # containerd 2.0 knows only the single bin_dir (bin_dirs came in 2.1, bin_dir deprecated since).
  if [[ "$CONTAINERD_VERSION" == v2.0.* ]]; then cni_bin="bin_dir = \"$DIR/cni/bin\""; fi
  # 2.4 dropped enable_cdi (CDI always on; it warns about an unknown key); no test asks for CDI.
  if [[ ! "$CONTAINERD_VERSION" =~ ^v2\.[0-3]\. ]]; then cdi="# enable_cdi: gone in $CONTAINERD_VERSION"; fi
  if [[ "$SNAPSHOTTER" == native ]]; then
    unpack="
  [[plugins.'io.containerd.transfer.v1.local'.unpack_config]]
    platform = \"linux/$(uname -m | sed 's/x86_64/amd64/;s/aarch64/arm64/')\"
    snapshotter = \"native\"
    differ = \"walking\""
  fi
  cat >"$CONFIG" <<EOF
# generated by hack/containerd.sh for containerd $CONTAINERD_VERSION
version = 3
root = "$DIR/root"
state = "$DIR/state"
temp = "$DIR/tmp"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.blockfile", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$SOCK"

[debug]
  level = "debug"

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "$DIR/opt"

  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    socket_path = "$NRI_SOCK"
    plugin_path = "$DIR/nri/plugins"
    plugin_config_path = "$DIR/nri/conf.d"
    plugin_registration_timeout = "5s"
    plugin_request_timeout = "$NRI_REQUEST_TIMEOUT"
    disable_connections = false

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "$SNAPSHOTTER"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "$PAUSE_IMAGE"

  [plugins.'io.containerd.cri.v1.runtime']
    $cdi
    # no CAP_SYS_RESOURCE here: never ask for an oom_score_adj below containerd's own
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "$DEPS/bin/runc"
          SystemdCgroup = $([[ "$CGROUP_DRIVER" == systemd ]] && echo true || echo false)
          Root = "$RUNC_ROOT"
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      $cni_bin
      conf_dir = "$DIR/cni/net.d"

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
$unpack
EOF
}

# DIR/crictl.yaml: found by crictl through CRI_CONFIG_FILE (in DIR/env); silences its
# "/etc/crictl.yaml does not exist" warning and never pulls.
write_crictl_config() {
  cat >"$CRICTL_CONFIG" <<EOF
runtime-endpoint: unix://$SOCK
image-endpoint: unix://$SOCK
timeout: $CRICTL_TIMEOUT
pull-image-on-create: false
disable-pull-on-run: true
EOF
}

write_env() {
  local tmp="$ENV_FILE.tmp" k
  {
    echo "# generated by hack/containerd.sh start $DIR"
    for k in CRI_ENDPOINT CONTAINER_RUNTIME_ENDPOINT IMAGE_SERVICE_ENDPOINT CONTAINERD_ADDRESS \
             CONTAINERD_NAMESPACE NRI_SOCKET NRI_PLUGIN_DIR NRI_CONF_DIR CONTAINERD_VERSION \
             CRI_CONFIG_FILE CONTAINERD_LOG CONTAINERD_PID_FILE RUNC_ROOT CGROUP_PARENT_BASE PAUSE_IMAGE TEST_IMAGE PATH; do
      printf 'export %s=%q\n' "$k" "${ENVV[$k]}"
    done
  } >"$tmp"
  mv "$tmp" "$ENV_FILE"
}

declare -A ENVV
fill_env_values() {
  ENVV=(
    [CRI_ENDPOINT]="unix://$SOCK" [CONTAINER_RUNTIME_ENDPOINT]="unix://$SOCK"
    [IMAGE_SERVICE_ENDPOINT]="unix://$SOCK" [CONTAINERD_ADDRESS]="$SOCK"
    [CONTAINERD_NAMESPACE]="$K8S_NS" [NRI_SOCKET]="$NRI_SOCK" [NRI_PLUGIN_DIR]="$DIR/nri/plugins"
    [NRI_CONF_DIR]="$DIR/nri/conf.d" [CONTAINERD_VERSION]="$CONTAINERD_VERSION"
    [CRI_CONFIG_FILE]="$CRICTL_CONFIG" [CONTAINERD_LOG]="$LOG" [CONTAINERD_PID_FILE]="$PID_FILE" [RUNC_ROOT]="$RUNC_ROOT"
    [CGROUP_PARENT_BASE]="$CGROUP_PARENT_BASE" [PAUSE_IMAGE]="$PAUSE_IMAGE" [TEST_IMAGE]="$TEST_IMAGE"
    [PATH]="$STACK_PATH"
  )
}

# ---------------------------------------------------------------- start

fail_with_log() {
  echo "containerd.sh: error: $* (DIR=$DIR); last lines of $LOG:" >&2
  tail -n 40 "$LOG" >&2 2>/dev/null || true
  exit 1
}

cri_answers() { crictl_ version; }

# launch_containerd: start the daemon detached (own session, no inherited fds) and wait for CRI.
launch_containerd() {
  echo "=== containerd.sh: starting containerd $CONTAINERD_VERSION at $(date -u +%FT%TZ) ===" >>"$LOG"
  setsid "$CTRD_BIN_DIR/containerd" --config "$CONFIG" </dev/null >>"$LOG" 2>&1 &
  local pid=$!
  echo "$pid" >"$PID_FILE"
  local deadline=$((SECONDS + START_TIMEOUT))
  until cri_answers >/dev/null 2>&1; do
    pid_alive "$pid" || fail_with_log "containerd (pid $pid) exited during start-up"
    ((SECONDS < deadline)) || { kill -9 "$pid" 2>/dev/null || true; fail_with_log "CRI did not answer on $SOCK within ${START_TIMEOUT}s"; }
    sleep 0.1
  done
}

image_known_to_cri() { crictl_ inspecti "$1"; }

import_images() {
  local tar name
  for tar in "$PAUSE_TAR" "$TEST_TAR"; do
    ctr_ images import "$tar" >>"$LOG" 2>&1 || fail_with_log "ctr images import $tar failed"
  done
  for name in "$PAUSE_IMAGE" "$TEST_IMAGE"; do
    wait_until 30 "CRI to see image $name" image_known_to_cri "$name" ||
      fail_with_log "CRI does not list image $name after import"
  done
}

check_socket_path_length() {
  # sun_path is 108 bytes including the NUL; ttrpc adds ".ttrpc".
  ((${#SOCK} + 6 < 108)) || die "DIR path too long for a unix socket: $SOCK.ttrpc (use a shorter DIR)"
}

cmd_start() {
  set_binaries
  check_socket_path_length
  if pid="$(containerd_pid)"; then die "containerd already runs for $DIR (pid $pid); stop it first"; fi
  "$HACK_DIR/build-images.sh" --quiet || die "building the test images failed"
  mkdir -p "$DIR"/{root,state,tmp,opt,runc,logs,cni/bin,cni/net.d,nri/plugins,nri/conf.d,nri-socket}
  if [[ -n "${CONTAINERD_ROOT_SIZE_MB:-}" ]]; then
    [[ "$CONTAINERD_ROOT_SIZE_MB" =~ ^[1-9][0-9]*$ ]] ||
      die "CONTAINERD_ROOT_SIZE_MB must be a positive number of MiB, not '$CONTAINERD_ROOT_SIZE_MB'"
    mount -t tmpfs -o "size=${CONTAINERD_ROOT_SIZE_MB}m,mode=0711" tmpfs "$DIR/root" ||
      die "mounting a ${CONTAINERD_ROOT_SIZE_MB} MiB tmpfs on $DIR/root failed"
  fi
  rm -f "$SOCK" "$SOCK.ttrpc" "$NRI_SOCK"
  choose_snapshotter
  write_config
  write_crictl_config
  fill_env_values
  write_env
  launch_containerd
  import_images
}

cmd_restart() {
  use_started_version
  set_binaries
  local pid
  pid="$(containerd_pid)" || die "no containerd runs for $DIR (nothing to restart; use start)"
  kill_and_wait TERM 15 "$pid" || kill_and_wait KILL 5 "$pid" || die "containerd pid $pid does not exit"
  launch_containerd
  fill_env_values
  write_env
}

# ---------------------------------------------------------------- stop

remove_pods_via_cri() {
  cri_answers >/dev/null 2>&1 || return 0
  local ids
  ids="$(crictl_ ps -aq 2>/dev/null || true)"
  # shellcheck disable=SC2086
  [[ -z "$ids" ]] || crictl_ rm -f $ids >/dev/null 2>&1 || warn "crictl rm -f failed for some containers"
  ids="$(crictl_ pods -q 2>/dev/null || true)"
  if [[ -n "$ids" ]]; then
    # shellcheck disable=SC2086
    crictl_ stopp $ids >/dev/null 2>&1 || warn "crictl stopp failed for some pods"
    # shellcheck disable=SC2086
    crictl_ rmp -f $ids >/dev/null 2>&1 || warn "crictl rmp failed for some pods"
  fi
}

stop_containerd_process() {
  local pid
  pid="$(containerd_pid)" || return 0
  kill_and_wait TERM 15 "$pid" || kill_and_wait KILL 5 "$pid" || die "containerd pid $pid does not exit"
}

# Shim socket files (/run/containerd/s/<hash>) that SIGKILLed shims would leave behind: the
# addresses in the task bundles' bootstrap.json/address, plus every unix socket path under
# /run/containerd/s/ that a shim of this stack holds open (found via its fds and /proc/net/unix).
collect_shim_sockets() {
  SHIM_SOCKETS=()
  local f a pid fd link inodes=" "
  for f in "$DIR"/state/io.containerd.runtime.v2.task/*/*/{bootstrap.json,address}; do
    [[ -f "$f" ]] || continue
    a="$(grep -o 'unix:///run/containerd/s/[0-9a-f]*' "$f" | head -n1)" || continue
    SHIM_SOCKETS+=("${a#unix://}")
  done
  for pid in $(stack_shim_pids); do
    for fd in /proc/"$pid"/fd/*; do
      link="$(readlink "$fd" 2>/dev/null)" || continue
      if [[ "$link" =~ ^socket:\[([0-9]+)\]$ ]]; then inodes+="${BASH_REMATCH[1]} "; fi
    done
  done
  while read -r _ _ _ _ _ _ inode path; do
    if [[ "$inodes" == *" $inode "* && "$path" == /run/containerd/s/* ]]; then SHIM_SOCKETS+=("$path"); fi
  done </proc/net/unix
  return 0
}

delete_runc_containers() {
  local root id
  for root in "$RUNC_ROOT"/*/; do
    [[ -d "$root" ]] || continue
    for id in "$root"*/; do
      [[ -f "${id}state.json" ]] || continue
      "$DEPS/bin/runc" --root "${root%/}" delete --force "$(basename "$id")" >/dev/null 2>&1 ||
        warn "runc delete --force $(basename "$id") failed"
    done
  done
}

thaw_stack_cgroups() {
  local f
  [[ -d "/sys/fs/cgroup/freezer$CGROUP_PARENT_BASE" ]] || return 0
  while read -r f; do
    [[ "$(cat "$f" 2>/dev/null)" == THAWED ]] || echo THAWED >"$f" 2>/dev/null || true
  done < <(find "/sys/fs/cgroup/freezer$CGROUP_PARENT_BASE" -name freezer.state)
}

kill_stack_processes() {
  local -a pids
  mapfile -t pids < <(stack_shim_pids)
  kill_and_wait KILL "$STOP_TIMEOUT" "${pids[@]}" || die "shim processes ${pids[*]} of $DIR do not exit"
  thaw_stack_cgroups
  local deadline=$((SECONDS + STOP_TIMEOUT))
  while mapfile -t pids < <(stack_cgroup_pids) && ((${#pids[@]})); do
    ((SECONDS < deadline)) || die "processes ${pids[*]} remain in cgroup $CGROUP_PARENT_BASE"
    kill_and_wait KILL 2 "${pids[@]}" || true
  done
}

# mounts_under DIR: mount points at or below DIR, deepest first.
mounts_under() {
  local mp
  while read -r _ _ _ _ mp _; do
    mp="$(printf '%b' "$mp")"
    if [[ "$mp" == "$DIR" || "$mp" == "$DIR"/* ]]; then echo "$mp"; fi
  done </proc/self/mountinfo | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2-
}

unmount_all() {
  local deadline=$((SECONDS + STOP_TIMEOUT)) mp left
  while :; do
    left="$(mounts_under)"
    [[ -n "$left" ]] || return 0
    ((SECONDS < deadline)) || die "mounts remain under $DIR: $(echo "$left" | tr '\n' ' ')"
    while IFS= read -r mp; do
      umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
    done <<<"$left"
  done
}

cgroup_dirs_left() {
  local h
  for h in /sys/fs/cgroup/*/; do
    if [[ -d "$h${CGROUP_PARENT_BASE#/}" ]]; then echo "$h${CGROUP_PARENT_BASE#/}"; fi
  done
  return 0
}

remove_stack_cgroups() {
  local deadline=$((SECONDS + STOP_TIMEOUT)) left d
  while left="$(cgroup_dirs_left)" && [[ -n "$left" ]]; do
    while IFS= read -r d; do
      find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done <<<"$left"
    left="$(cgroup_dirs_left)"
    [[ -n "$left" ]] || break
    ((SECONDS < deadline)) || die "cannot remove cgroups: $(echo "$left" | tr '\n' ' ')"
    sleep 0.1
  done
}

# use_started_version: restart/stop act on the line that `start` used (from DIR/env), whatever the caller's env.
use_started_version() {
  local v
  v="$(sed -n 's/^export CONTAINERD_VERSION=//p' "$ENV_FILE" 2>/dev/null)" || true
  [[ -z "$v" ]] || CONTAINERD_VERSION="$v"
}

cmd_stop() {
  # Binaries may be absent if the stack never started; cleanup below needs only runc for leftovers.
  use_started_version
  CTRD_BIN_DIR="$(containerd_bin_dir "$CONTAINERD_VERSION")"
  if [[ -x "$DEPS/bin/crictl" ]]; then remove_pods_via_cri; fi
  collect_shim_sockets
  stop_containerd_process
  if [[ -x "$DEPS/bin/runc" ]]; then delete_runc_containers; fi
  kill_stack_processes
  unmount_all
  remove_stack_cgroups
  local s
  for s in "${SHIM_SOCKETS[@]}"; do rm -f "$s"; done
  rm -f "$PID_FILE" "$SOCK" "$SOCK.ttrpc" "$NRI_SOCK"
}

main() {
  (($# == 2)) || usage
  [[ $EUID -eq 0 ]] || die "must run as root"
  CONTAINERD_VERSION="${CONTAINERD_VERSION:-${TOPOLET_CONTAINERD_VERSION:-$DEFAULT_CONTAINERD_VERSION}}"
  local cmd="$1"
  if [[ "$cmd" == stop && ! -d "$2" ]]; then return 0; fi
  set_paths "$2"
  case "$cmd" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    restart) cmd_restart ;;
    *) usage ;;
  esac
}

main "$@"
