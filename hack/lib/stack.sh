# hack/lib/stack.sh — tearing down an isolated test runtime stack: processes, runc state, mounts
# and cgroups (source it after hack/lib/common.sh; not executable). Used by hack/crio.sh; the
# same steps as hack/containerd.sh's stop.
#
# Reads the caller's globals: DIR (the stack's directory, absolute) and CGROUP_PARENT_BASE
# (/topolet-test-<hash>, the root of every cgroup of the stack's pods).
# Defines: pid_alive PID, kill_and_wait SIGNAL TIMEOUT PID..., stack_cgroup_pids,
#          kill_cgroup_processes TIMEOUT, delete_runc_containers RUNC ROOT, mounts_under,
#          unmount_all TIMEOUT, remove_stack_cgroups TIMEOUT.
# shellcheck shell=bash

pid_alive() { kill -0 "$1" 2>/dev/null; }

# kill_and_wait SIGNAL TIMEOUT PID...: signal the pids and wait until they are gone (1 on timeout).
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

# stack_cgroup_pids: pids in any cgroup under CGROUP_PARENT_BASE, in any hierarchy.
stack_cgroup_pids() {
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ -d "$h${CGROUP_PARENT_BASE#/}" ]] || continue
    find "$h${CGROUP_PARENT_BASE#/}" -name cgroup.procs -exec cat {} + 2>/dev/null || true
  done | sort -un
}

# kill_cgroup_processes TIMEOUT: thaw the stack's freezer cgroups, then SIGKILL what is in them
# until none is left (dies after TIMEOUT seconds).
kill_cgroup_processes() {
  local timeout="$1" f deadline
  if [[ -d "/sys/fs/cgroup/freezer$CGROUP_PARENT_BASE" ]]; then
    while read -r f; do
      [[ "$(cat "$f" 2>/dev/null)" == THAWED ]] || echo THAWED >"$f" 2>/dev/null || true
    done < <(find "/sys/fs/cgroup/freezer$CGROUP_PARENT_BASE" -name freezer.state)
  fi
  local -a pids
  deadline=$((SECONDS + timeout))
  while mapfile -t pids < <(stack_cgroup_pids) && ((${#pids[@]})); do
    ((SECONDS < deadline)) || die "processes ${pids[*]} remain in cgroup $CGROUP_PARENT_BASE"
    kill_and_wait KILL 2 "${pids[@]}" || true
  done
}

# delete_runc_containers RUNC ROOT: `runc delete --force` every container with state in ROOT
# (ROOT/<id>/state.json, as CRI-O passes --root, or ROOT/<namespace>/<id>/, as containerd's shim).
delete_runc_containers() {
  local runc="$1" root="$2" state dir
  [[ -d "$root" ]] || return 0
  while read -r state; do
    dir="$(dirname "$state")"
    "$runc" --root "$(dirname "$dir")" delete --force "$(basename "$dir")" >/dev/null 2>&1 ||
      warn "runc delete --force $(basename "$dir") failed"
  done < <(find "$root" -mindepth 2 -maxdepth 3 -name state.json)
}

# mounts_under: mount points at or below DIR, deepest first.
mounts_under() {
  local mp
  while read -r _ _ _ _ mp _; do
    mp="$(printf '%b' "$mp")"
    if [[ "$mp" == "$DIR" || "$mp" == "$DIR"/* ]]; then echo "$mp"; fi
  done </proc/self/mountinfo | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2-
}

# unmount_all TIMEOUT: unmount everything at or below DIR (lazily if busy).
unmount_all() {
  local deadline=$((SECONDS + $1)) mp left
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

# remove_stack_cgroups TIMEOUT: rmdir the CGROUP_PARENT_BASE subtree in every hierarchy.
remove_stack_cgroups() {
  local deadline=$((SECONDS + $1)) left d
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
