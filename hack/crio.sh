#!/usr/bin/env bash
# hack/crio.sh — run an isolated CRI-O (CRI + NRI, runc, conmon, cgroupfs) for tests: the same
# contract as hack/containerd.sh, so a test can be pointed at either runtime.
#
# Usage:
#   hack/crio.sh start   DIR   copy the test images into DIR's storage, start CRI-O with everything
#                              under DIR, return when CRI answers (fails with the log tail otherwise)
#   hack/crio.sh stop    DIR   remove all pods/containers, kill CRI-O and every conmon and container
#                              process of this stack, unmount everything under DIR, remove the
#                              stack's cgroups. Leaves no process, mount or cgroup. Succeeds (and
#                              does nothing) when no stack ran in DIR.
#   hack/crio.sh restart DIR   stop only the crio process (conmon and the containers keep running),
#                              start it again with the same config, wait for CRI
#   hack/crio.sh import DIR NAME TAR   copy the OCI tarball TAR into the running stack's storage
#                              as image NAME (crio-import, as at start; containers/storage's
#                              locks let it write beside crio), then wait until CRI lists it
#                              (what `ctr images import` is to hack/containerd.sh)
#
# Files in DIR (fixed names, as hack/containerd.sh's where the meaning is the same):
#   DIR/crio.sock           CRI socket
#   DIR/nri-socket/nri.sock NRI socket for external plugins ([crio.nri] nri_listen)
#   DIR/nri/plugins, DIR/nri/conf.d   NRI pre-installed plugin dir and plugin config dir
#   DIR/crio.log            crio's log (debug level; appended across restarts)
#   DIR/crio.pid            pid of the running crio
#   DIR/crio.conf           the generated main config; DIR/crio.conf.d/ its drop-ins (10-nri.conf:
#                           the [crio.nri] table; later files override, as crio merges them)
#   DIR/policy.json         the image signature policy (insecureAcceptAnything: images come only
#                           from the project's local tarballs)
#   DIR/env                 shell syntax (`export K=V`, values escaped with printf %q) exporting
#                           RUNTIME=cri-o, CRI_ENDPOINT (unix://DIR/crio.sock),
#                           CONTAINER_RUNTIME_ENDPOINT, IMAGE_SERVICE_ENDPOINT,
#                           CRI_CONFIG_FILE=DIR/crictl.yaml, NRI_SOCKET, NRI_PLUGIN_DIR,
#                           NRI_CONF_DIR, CRIO_VERSION, CRIO_LOG, CRIO_PID_FILE, RUNC_ROOT,
#                           CGROUP_PARENT_BASE, PAUSE_IMAGE, TEST_IMAGE, and PATH (this line's crio,
#                           pinns, crio-import in .deps/crio-<version>/bin, then .deps/bin with runc,
#                           crictl, conmon, then the PATH of the caller of `start`)
#   DIR/root, runroot       containers/storage's graph root and run root (images, containers)
#   DIR/run, lib, ns, runc, pod-logs, tmp, cni/   crio's private state: exits and attach sockets,
#                           version and clean-shutdown files, pinned namespaces (pinns), runc's
#                           state, pod logs, temporary files, an empty CNI config and plugin dir
#
# Runtime: runc (.deps/bin/runc, hack/install-deps.sh) through conmon (Debian's, .deps/bin/conmon),
# conmon in the pod's cgroup (monitor_cgroup = "pod", what cgroupfs requires). No CNI: pods use the
# host network, as hack/containerd.sh's do. CRI-O's own default drop_infra_ctr = true is kept: a
# pod gets no pause container unless it shares its PID namespace (namespaces pinned by pinns).
# Storage driver: overlay, or vfs where DIR is itself on overlayfs (CRIO_STORAGE_DRIVER overrides).
#
# Images: CRI-O has no import command. `start` copies the project's OCI tarballs
# (.deps/images/{pause,busybox}.tar, hack/build-images.sh) into the stack's containers-storage
# with hack/crio-import (after CRI-O's test/copyimg; built by hack/install-crio.sh against the
# containers/image and containers/storage versions crio links), `oci-archive:` to
# `containers-storage:`, with crio's driver and roots, before crio starts; its temporary files and
# blob-info cache under DIR (containers/image would otherwise use /var/tmp and
# /var/lib/containers/cache).
#
# Cgroup convention (as hack/containerd.sh): every pod of a stack must use an absolute
# cgroup_parent under CGROUP_PARENT_BASE=/topolet-test-<first 10 hex of sha256(DIR)>; crio puts a
# container in <cgroup_parent>/crio-<id> and its conmon in <cgroup_parent>/crio-conmon-<id>.
# `stop` kills every process in, and removes, that subtree in every cgroup hierarchy.
#
# oom_score_adj: CRI-O has no restrict_oom_score_adj; it passes the CRI value to runc, which fails
# a container that asks for less than its parent's value on a host without CAP_SYS_RESOURCE. Tests
# send no negative oom_score_adj of their own (topolet reads its floor from crio's process).
#
# Environment:
#   CRIO_VERSION            v1.36.3 (default); must be installed (hack/install-crio.sh). For start
#                           only; restart/stop use the version recorded in DIR/env.
#   CRIO_START_TIMEOUT      seconds to wait for CRI to answer (default 60)
#   CRIO_STOP_TIMEOUT       seconds to wait for processes/cgroups to go away (default 30)
#   CRIO_STORAGE_DRIVER     overlay or vfs (default: see above)
#   CRIO_NRI_REQUEST_TIMEOUT  nri_plugin_request_timeout (default 2s)
#   CRICTL_TIMEOUT          crictl's per-call timeout in seconds, in DIR/crictl.yaml (default 10)
#   CRIO_ROOT_SIZE_MB       when set, DIR/root (containers/storage's graph root: images, layers,
#                           the image filesystem) is a tmpfs of this many MiB, a filesystem of its
#                           own whose free space only this stack changes (the eviction suites'
#                           imagefs pressure, as hack/containerd.sh's CONTAINERD_ROOT_SIZE_MB);
#                           `stop` unmounts it with everything else under DIR
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"
# shellcheck source=hack/lib/stack.sh
source "$HACK_DIR/lib/stack.sh"

START_TIMEOUT="${CRIO_START_TIMEOUT:-60}"
STOP_TIMEOUT="${CRIO_STOP_TIMEOUT:-30}"
NRI_REQUEST_TIMEOUT="${CRIO_NRI_REQUEST_TIMEOUT:-2s}"
CRICTL_TIMEOUT="${CRICTL_TIMEOUT:-10}"

usage() { die "usage: crio.sh start|stop|restart DIR, or crio.sh import DIR NAME TAR"; }

# ---------------------------------------------------------------- paths and naming

set_paths() {
  mkdir -p "$1"
  DIR="$(cd "$1" && pwd -P)"
  SOCK="$DIR/crio.sock"
  NRI_SOCK="$DIR/nri-socket/nri.sock"
  LOG="$DIR/crio.log"
  PID_FILE="$DIR/crio.pid"
  CONFIG="$DIR/crio.conf"
  CONFIG_DIR="$DIR/crio.conf.d"
  POLICY="$DIR/policy.json"
  ENV_FILE="$DIR/env"
  RUNC_ROOT="$DIR/runc"
  CRICTL_CONFIG="$DIR/crictl.yaml"
  CGROUP_PARENT_BASE="/topolet-test-$(printf '%s' "$DIR" | sha256sum | cut -c1-10)"
}

set_binaries() {
  [[ "$CRIO_VERSION" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "CRIO_VERSION=$CRIO_VERSION is not a v1.X.Y tag"
  CRIO_BIN_DIR="$DEPS/crio-$CRIO_VERSION/bin"
  local f
  for f in "$CRIO_BIN_DIR/crio" "$CRIO_BIN_DIR/pinns" "$CRIO_BIN_DIR/crio-import" "$DEPS/bin/conmon"; do
    [[ -x "$f" ]] || die "$f is missing: run CRIO_VERSION=$CRIO_VERSION hack/install-crio.sh"
  done
  for f in "$DEPS/bin/runc" "$DEPS/bin/crictl"; do
    [[ -x "$f" ]] || die "$f is missing: run hack/install-deps.sh"
  done
  STACK_PATH="$CRIO_BIN_DIR:$DEPS/bin:$PATH"
  export PATH="$STACK_PATH"
}

crictl_() { "$DEPS/bin/crictl" --config "$CRICTL_CONFIG" --runtime-endpoint "unix://$SOCK" --image-endpoint "unix://$SOCK" --timeout "${CRICTL_TIMEOUT}s" "$@"; }

# ---------------------------------------------------------------- process discovery

# crio_pid: the pid of this stack's crio, if it runs.
crio_pid() {
  local pid args
  pid="$(cat "$PID_FILE" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  args="$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")" || return 1
  [[ "$args" == *"--config $CONFIG "* ]] || return 1
  echo "$pid"
}

# stack_conmon_pids: conmon processes of this stack (their arguments name paths under DIR:
# the bundle in DIR/runroot, the exit directory in DIR/run).
stack_conmon_pids() {
  local p args
  for p in /proc/[0-9]*; do
    [[ "${p#/proc/}" != "$$" ]] || continue
    [[ "$(cat "$p/comm" 2>/dev/null)" == conmon ]] || continue
    args="$(tr '\0' '\n' 2>/dev/null <"$p/cmdline")" || continue
    if grep -qF -- "$DIR/" <<<"$args"; then echo "${p#/proc/}"; fi
  done
  return 0
}

# ---------------------------------------------------------------- config

choose_storage_driver() {
  local fstype
  if [[ -n "${CRIO_STORAGE_DRIVER:-}" ]]; then
    [[ "$CRIO_STORAGE_DRIVER" == overlay || "$CRIO_STORAGE_DRIVER" == vfs ]] ||
      die "CRIO_STORAGE_DRIVER=$CRIO_STORAGE_DRIVER is neither overlay nor vfs"
    STORAGE_DRIVER="$CRIO_STORAGE_DRIVER"
    return
  fi
  fstype="$(findmnt -no FSTYPE -T "$DIR" 2>/dev/null | head -n1)"
  if [[ "$fstype" == overlay ]]; then STORAGE_DRIVER=vfs; else STORAGE_DRIVER=overlay; fi
}

write_config() {
  cat >"$CONFIG" <<EOF
# generated by hack/crio.sh for CRI-O $CRIO_VERSION: every path under $DIR
[crio]
root = "$DIR/root"
runroot = "$DIR/runroot"
storage_driver = "$STORAGE_DRIVER"
log_dir = "$DIR/pod-logs"
version_file = "$DIR/run/version"
version_file_persist = "$DIR/lib/version"
clean_shutdown_file = "$DIR/lib/clean.shutdown"

[crio.api]
listen = "$SOCK"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
log_level = "debug"
container_exits_dir = "$DIR/run/exits"
container_attach_socket_dir = "$DIR/run"
namespaces_dir = "$DIR/ns"
pinns_path = "$CRIO_BIN_DIR/pinns"
hooks_dir = ["$DIR/hooks.d"]
cdi_spec_dirs = ["$DIR/cdi"]
decryption_keys_path = "$DIR/keys"
irqbalance_config_file = "$DIR/irqbalance"
irqbalance_config_restore_file = "disable"
enable_criu_support = false
# no iptables/nftables here, and a test stack must leave no rule behind: host-port mapping off
disable_hostport_mapping = true

[crio.runtime.runtimes.runc]
runtime_path = "$DEPS/bin/runc"
runtime_type = "oci"
runtime_root = "$RUNC_ROOT"
monitor_path = "$DEPS/bin/conmon"
monitor_cgroup = "pod"

[crio.image]
pause_image = "$PAUSE_IMAGE"
pinned_images = ["$PAUSE_IMAGE"]
signature_policy = "$POLICY"
signature_policy_dir = "$DIR/policies"
big_files_temporary_dir = "$DIR/tmp"
namespaced_auth_dir = "$DIR/auth"

[crio.network]
network_dir = "$DIR/cni/net.d"
plugin_dirs = ["$DIR/cni/bin"]

[crio.metrics]
enable_metrics = false
EOF
  mkdir -p "$CONFIG_DIR"
  cat >"$CONFIG_DIR/10-nri.conf" <<EOF
# generated by hack/crio.sh: NRI for external plugins (topolet) on the stack's own socket
[crio.nri]
enable_nri = true
nri_listen = "$NRI_SOCK"
nri_plugin_dir = "$DIR/nri/plugins"
nri_plugin_config_dir = "$DIR/nri/conf.d"
nri_disable_connections = false
nri_plugin_registration_timeout = "5s"
nri_plugin_request_timeout = "$NRI_REQUEST_TIMEOUT"
EOF
  echo '{"default":[{"type":"insecureAcceptAnything"}]}' >"$POLICY"
}

write_crictl_config() {
  cat >"$CRICTL_CONFIG" <<EOF
runtime-endpoint: unix://$SOCK
image-endpoint: unix://$SOCK
timeout: $CRICTL_TIMEOUT
pull-image-on-create: false
disable-pull-on-run: true
EOF
}

declare -A ENVV
fill_env_values() {
  ENVV=(
    [RUNTIME]=cri-o [CRI_ENDPOINT]="unix://$SOCK" [CONTAINER_RUNTIME_ENDPOINT]="unix://$SOCK"
    [IMAGE_SERVICE_ENDPOINT]="unix://$SOCK" [NRI_SOCKET]="$NRI_SOCK" [NRI_PLUGIN_DIR]="$DIR/nri/plugins"
    [NRI_CONF_DIR]="$DIR/nri/conf.d" [CRIO_VERSION]="$CRIO_VERSION" [CRI_CONFIG_FILE]="$CRICTL_CONFIG"
    [CRIO_LOG]="$LOG" [CRIO_PID_FILE]="$PID_FILE" [RUNC_ROOT]="$RUNC_ROOT"
    [CGROUP_PARENT_BASE]="$CGROUP_PARENT_BASE" [PAUSE_IMAGE]="$PAUSE_IMAGE" [TEST_IMAGE]="$TEST_IMAGE"
    [PATH]="$STACK_PATH"
  )
}

write_env() {
  local tmp="$ENV_FILE.tmp" k
  {
    echo "# generated by hack/crio.sh start $DIR"
    for k in RUNTIME CRI_ENDPOINT CONTAINER_RUNTIME_ENDPOINT IMAGE_SERVICE_ENDPOINT NRI_SOCKET NRI_PLUGIN_DIR \
             NRI_CONF_DIR CRIO_VERSION CRI_CONFIG_FILE CRIO_LOG CRIO_PID_FILE RUNC_ROOT CGROUP_PARENT_BASE \
             PAUSE_IMAGE TEST_IMAGE PATH; do
      printf 'export %s=%q\n' "$k" "${ENVV[$k]}"
    done
  } >"$tmp"
  mv "$tmp" "$ENV_FILE"
}

# ---------------------------------------------------------------- start

fail_with_log() {
  echo "crio.sh: error: $* (DIR=$DIR); last lines of $LOG:" >&2
  tail -n 40 "$LOG" >&2 2>/dev/null || true
  exit 1
}

cri_answers() { crictl_ version; }

launch_crio() {
  echo "=== crio.sh: starting crio $CRIO_VERSION at $(date -u +%FT%TZ) ===" >>"$LOG"
  setsid "$CRIO_BIN_DIR/crio" --config "$CONFIG" --config-dir "$CONFIG_DIR" </dev/null >>"$LOG" 2>&1 &
  local pid=$!
  echo "$pid" >"$PID_FILE"
  local deadline=$((SECONDS + START_TIMEOUT))
  until cri_answers >/dev/null 2>&1; do
    pid_alive "$pid" || fail_with_log "crio (pid $pid) exited during start-up"
    ((SECONDS < deadline)) || { kill -9 "$pid" 2>/dev/null || true; fail_with_log "CRI did not answer on $SOCK within ${START_TIMEOUT}s"; }
    sleep 0.1
  done
}

# import_images: each tarball into the stack's storage under its name (before crio runs: crio
# then finds them as any image it pulled).
import_images() {
  local tar name
  for tar in "$PAUSE_TAR:$PAUSE_IMAGE" "$TEST_TAR:$TEST_IMAGE"; do
    name="${tar#*:}"; tar="${tar%%:*}"
    echo "=== crio.sh: crio-import oci-archive:$tar -> $name ===" >>"$LOG"
    "$CRIO_BIN_DIR/crio-import" --root "$DIR/root" --runroot "$DIR/runroot" --driver "$STORAGE_DRIVER" \
      --policy "$POLICY" --tmp "$DIR/tmp" --cache "$DIR/lib/cache" "$name" "$tar" >>"$LOG" 2>&1 ||
      fail_with_log "crio-import of $tar as $name failed"
  done
}

check_images() {
  local name
  for name in "$PAUSE_IMAGE" "$TEST_IMAGE"; do
    crictl_ inspecti "$name" >/dev/null 2>&1 || fail_with_log "CRI does not list image $name after the copy"
  done
}

check_socket_path_length() {
  ((${#SOCK} < 108 && ${#NRI_SOCK} < 108)) || die "DIR path too long for a unix socket: $NRI_SOCK (use a shorter DIR)"
}

cmd_start() {
  set_binaries
  check_socket_path_length
  if pid="$(crio_pid)"; then die "crio already runs for $DIR (pid $pid); stop it first"; fi
  "$HACK_DIR/build-images.sh" --quiet || die "building the test images failed"
  mkdir -p "$DIR"/{root,runroot,run,lib/cache,ns,auth,runc,pod-logs,tmp,hooks.d,cdi,keys,policies,cni/bin,cni/net.d,nri/plugins,nri/conf.d,nri-socket}
  if [[ -n "${CRIO_ROOT_SIZE_MB:-}" ]]; then
    [[ "$CRIO_ROOT_SIZE_MB" =~ ^[1-9][0-9]*$ ]] ||
      die "CRIO_ROOT_SIZE_MB must be a positive number of MiB, not '$CRIO_ROOT_SIZE_MB'"
    mount -t tmpfs -o "size=${CRIO_ROOT_SIZE_MB}m,mode=0711" tmpfs "$DIR/root" ||
      die "mounting a ${CRIO_ROOT_SIZE_MB} MiB tmpfs on $DIR/root failed"
  fi
  rm -f "$SOCK" "$NRI_SOCK"
  choose_storage_driver
  write_config
  write_crictl_config
  fill_env_values
  write_env
  import_images
  launch_crio
  check_images
}

use_started_version() {
  local v
  v="$(sed -n 's/^export CRIO_VERSION=//p' "$ENV_FILE" 2>/dev/null)" || true
  [[ -z "$v" ]] || CRIO_VERSION="$v"
}

cmd_restart() {
  use_started_version
  set_binaries
  local pid
  pid="$(crio_pid)" || die "no crio runs for $DIR (nothing to restart; use start)"
  kill_and_wait TERM 15 "$pid" || kill_and_wait KILL 5 "$pid" || die "crio pid $pid does not exit"
  launch_crio
  fill_env_values
  write_env
}

# cmd_import NAME TAR: one more image into the running stack's storage, with the driver crio
# runs (its config's storage_driver).
cmd_import() {
  local name="$1" tar="$2" deadline
  use_started_version
  set_binaries
  crio_pid >/dev/null || die "no crio runs for $DIR (start it first)"
  [[ -f "$tar" ]] || die "$tar is not a file"
  STORAGE_DRIVER="$(sed -n 's/^storage_driver = "\(.*\)"$/\1/p' "$CONFIG")"
  [[ -n "$STORAGE_DRIVER" ]] || die "$CONFIG names no storage_driver"
  echo "=== crio.sh: crio-import oci-archive:$tar -> $name ===" >>"$LOG"
  "$CRIO_BIN_DIR/crio-import" --root "$DIR/root" --runroot "$DIR/runroot" --driver "$STORAGE_DRIVER" \
    --policy "$POLICY" --tmp "$DIR/tmp" --cache "$DIR/lib/cache" "$name" "$tar" >>"$LOG" 2>&1 ||
    fail_with_log "crio-import of $tar as $name failed"
  deadline=$((SECONDS + START_TIMEOUT))
  until crictl_ inspecti "$name" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail_with_log "CRI does not list image $name ${START_TIMEOUT}s after the copy"
    sleep 0.1
  done
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

stop_crio_process() {
  local pid
  pid="$(crio_pid)" || return 0
  kill_and_wait TERM 15 "$pid" || kill_and_wait KILL 5 "$pid" || die "crio pid $pid does not exit"
}

kill_stack_processes() {
  local -a pids
  mapfile -t pids < <(stack_conmon_pids)
  kill_and_wait KILL "$STOP_TIMEOUT" "${pids[@]}" || die "conmon processes ${pids[*]} of $DIR do not exit"
  kill_cgroup_processes "$STOP_TIMEOUT"
}

cmd_stop() {
  use_started_version
  CRIO_BIN_DIR="$DEPS/crio-$CRIO_VERSION/bin"
  if [[ -x "$DEPS/bin/crictl" ]]; then remove_pods_via_cri; fi
  stop_crio_process
  if [[ -x "$DEPS/bin/runc" ]]; then delete_runc_containers "$DEPS/bin/runc" "$RUNC_ROOT"; fi
  kill_stack_processes
  unmount_all "$STOP_TIMEOUT"
  remove_stack_cgroups "$STOP_TIMEOUT"
  rm -f "$PID_FILE" "$SOCK" "$NRI_SOCK"
}

main() {
  (($# == 2)) || [[ $# == 4 && "$1" == import ]] || usage
  [[ $EUID -eq 0 ]] || die "must run as root"
  CRIO_VERSION="${CRIO_VERSION:-$DEFAULT_CRIO_VERSION}"
  local cmd="$1"
  if [[ "$cmd" == stop && ! -d "$2" ]]; then return 0; fi
  set_paths "$2"
  case "$cmd" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    restart) cmd_restart ;;
    import) (($# == 4)) || usage; cmd_import "$3" "$4" ;;
    *) usage ;;
  esac
}

main "$@"
