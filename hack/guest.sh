#!/usr/bin/env bash
# hack/guest.sh — real kernels of other shapes for the e2e suite: QEMU guests (TCG) with
# multi-NUMA, SMT, memory-only nodes, cgroup v2 and systemd, booted from a cached Debian image.
#
# Usage:
#   hack/guest.sh image                 build (or find cached) the guest image; prints its directory
#   hack/guest.sh test [SHAPE...]       build topolet and the in-guest suite, boot each SHAPE (default:
#                                       all) with them, run the suite there, report per shape; fails
#                                       if any shape fails
#   hack/guest.sh shell SHAPE           boot SHAPE with the same payload and give a root shell on this
#                                       terminal (the suite is not run; `poweroff -f` or Ctrl-D ends it;
#                                       Ctrl-A X kills qemu)
#   hack/guest.sh shapes                list the shapes
#
# Shapes (every one: cgroup v2 only, `-cpu Skylake-Server` so that the guest sees thread siblings):
#   smt2numa   2 sockets x 2 cores x 2 threads, 2 NUMA nodes (cpus 0-3 / 4-7, 1536 MiB each),
#              plain init (the guest runner is PID 1's child), containerd with the cgroupfs driver
#   snc4       1 socket x 4 cores, no SMT, 4 NUMA nodes of unequal memory (SNC-like): node0 cpus 0-1
#              1280 MiB, node1 cpu 2 768 MiB, node2 cpu 3 512 MiB, node3 512 MiB and no CPUs
#              (memory-only); systemd as PID 1, containerd and runc with the systemd cgroup driver
#              (kubepods.slice parents)
#   kube2numa  smt2numa's machine (cpus 0-3 / 4-7), plain init,
#              cgroupfs driver, and a real kubelet: its control plane (etcd, kube-apiserver,
#              kube-scheduler: hack/kube-node.sh start-control) runs on the host, the kubelet, the
#              device plugin (hack/device-plugin) and the DRA driver (hack/dra-driver) in the guest,
#              which reaches the API server at 10.0.2.2 (QEMU's user network: the host's loopback)
#
# The image (kernel, initrd, ext4 root filesystem) is built offline from Debian's packages with
# mmdebstrap (the host's apt mirror, deb.debian.org) and `mkfs.ext4 -d` (no loop mount), and
# cached in $TOPOLET_CACHE/guest/<key>, key = hash of the package list, the suite and this script's
# image part; linked as .deps/guest. The root disk is opened with snapshot=on: a run never writes it.
# Per run, a payload disk (ext4 from a directory: topolet, the in-guest suite binary, containerd,
# runc, crictl, the test images and hack/) goes in as /dev/vdb, and an empty results disk as
# /dev/vdc; after qemu exits the results are copied out with debugfs (no mount). Every boot runs
# under `timeout` (GUEST_TIMEOUT, default 1800 s) which kills qemu; every temporary file is under one
# directory removed on exit. The host is not changed (apt-installs qemu-system-x86, mmdebstrap and
# e2fsprogs if missing).
#
# Results of `test`: <target>/guest/<shape>/ (suite.log, rc, topology.txt, the stack's logs) and one
# line per shape with its wall time.
#
# Environment:
#   GUEST_TIMEOUT     seconds one boot may take before qemu is killed and the shape fails, with the
#                     console's tail printed (default 1800; a shape took 15 min on a 2-CPU host
#                     at load 14, where other jobs left qemu a fraction of a CPU)
#   GUEST_BOOT_TIMEOUT seconds a boot may take to reach the suite (its start line on the console;
#                     default 600, where a boot takes 30-60 s): a boot that does not is killed and
#                     tried once more (a hung TCG boot was seen once); a suite that started is
#                     never retried, and two boots that hang fail the shape
#   GUEST_TCG_THREAD  multi (default) or single: QEMU's TCG threading (single runs every vCPU on
#                     one host thread: slower, and it hung as well on a loaded host)
#   GUEST_SUITE_ARGS  extra arguments for the in-guest test binary (e.g. --nocapture)
#   CONTAINERD_VERSION  the containerd line put in the guest (default: DEFAULT_CONTAINERD_VERSION)
#   CARGO_TARGET_DIR  cargo's target directory (default <repo>/target)
#   TOPOLET_BIN       the topolet binary to put in the guests (default: cargo build -p topolet)
#   TOPOLET_CACHE     cache directory (see hack/lib/common.sh)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

GUEST_TIMEOUT="${GUEST_TIMEOUT:-1800}"
GUEST_BOOT_TIMEOUT="${GUEST_BOOT_TIMEOUT:-600}"
GUEST_TCG_THREAD="${GUEST_TCG_THREAD:-multi}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-$DEFAULT_CONTAINERD_VERSION}"
TARGET="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
SHAPES="smt2numa snc4 kube2numa"
SUITE=debian-bookworm
MIRROR=http://deb.debian.org/debian
# What the guest's root filesystem holds (besides mmdebstrap's minbase).
PACKAGES="linux-image-cloud-amd64 initramfs-tools systemd-sysv udev dbus iproute2 kmod procps util-linux mount numactl libseccomp2"

SAY_TO_STDERR=1

WORK=""
QEMU_PID=""
# The host-side control plane of a kube shape while it runs (hack/kube-node.sh start-control DIR).
CONTROL_DIR=""
# QEMU_PID is `timeout`'s (a process group of its own, which a signal to ours does not reach):
# TERM makes it pass the signal to qemu and exit with it (a KILL follows after its --kill-after);
# a KILL would end only `timeout` and leave qemu running.
cleanup() {
  if [[ -n "$QEMU_PID" ]]; then kill -TERM "$QEMU_PID" 2>/dev/null || true; wait "$QEMU_PID" 2>/dev/null || true; fi
  stop_control
  [[ -z "$WORK" ]] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
work_dir() { [[ -n "$WORK" ]] || WORK="$(mktemp -d "${TMPDIR:-/tmp}/topolet-guest.XXXXXX")"; }

# ---------------------------------------------------------------- the image

# The guest's fixed files. /sbin/topolet-guest-init (plain-init shapes: PID 1) and the unit
# topolet-guest.service (systemd shape) only mount the payload disk and hand over to its
# guest-init.sh, so that everything that changes per run lives in the payload, not in the image.
write_guest_files() {
  local r="$1"
  cat >"$r/sbin/topolet-guest-init" <<'EOF'
#!/bin/sh
# PID 1 of the plain-init guest shapes (hack/guest.sh): mount the basics and the payload, run it.
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /payload /results
mount -t ext4 /dev/vdb /payload || { echo "TOPOLET-GUEST: no payload disk"; echo o >/proc/sysrq-trigger; }
exec /bin/sh /payload/guest-init.sh plain
EOF
  chmod 755 "$r/sbin/topolet-guest-init"
  cat >"$r/etc/systemd/system/topolet-guest.service" <<'EOF'
[Unit]
Description=topolet guest runner (hack/guest.sh)
After=local-fs.target dbus.service
Wants=dbus.service
[Service]
Type=oneshot
ExecStartPre=/bin/mkdir -p /payload /results
ExecStartPre=/bin/mount -t ext4 /dev/vdb /payload
ExecStart=/bin/sh /payload/guest-init.sh systemd
StandardInput=tty-force
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
TimeoutStartSec=infinity
[Install]
WantedBy=multi-user.target
EOF
  mkdir -p "$r/etc/systemd/system/multi-user.target.wants"
  ln -sf ../topolet-guest.service "$r/etc/systemd/system/multi-user.target.wants/topolet-guest.service"
  # containerd needs /etc/hosts and resolv.conf for host-network sandboxes.
  printf '127.0.0.1 localhost\n::1 localhost\n127.0.1.1 topolet-guest\n' >"$r/etc/hosts"
  : >"$r/etc/resolv.conf"
  echo topolet-guest >"$r/etc/hostname"
  : >"$r/etc/machine-id"
}

image_key() {
  { echo "$SUITE $MIRROR $PACKAGES"; declare -f write_guest_files build_image_into; } | sha256sum | cut -c1-16
}

build_image_into() {
  local out="$1" root="$1/root"
  say "mmdebstrap $SUITE (${PACKAGES// /,}) ..."
  mmdebstrap --variant=minbase --include="${PACKAGES// /,}" bookworm "$root" "$MIRROR" >"$out/mmdebstrap.log" 2>&1 ||
    { tail -n 30 "$out/mmdebstrap.log" >&2; die "mmdebstrap failed (log kept: $out/mmdebstrap.log)"; }
  write_guest_files "$root"
  cp "$root"/boot/vmlinuz-* "$out/vmlinuz"
  cp "$root"/boot/initrd.img-* "$out/initrd.img"
  chroot "$root" dpkg-query -W >"$out/packages.txt"
  rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
  mkfs.ext4 -q -F -L topolet-guest -d "$root" "$out/rootfs.img" 2G >>"$out/mmdebstrap.log" 2>&1 ||
    die "mkfs.ext4 -d of the guest root failed (log: $out/mmdebstrap.log)"
  rm -rf "$root"
}

# ensure_image: IMAGE=the cached image directory (built under a lock if missing), linked .deps/guest.
ensure_image() {
  apt_ensure qemu-system-x86 mmdebstrap e2fsprogs
  local key dir
  key="$(image_key)"
  dir="$TOPOLET_CACHE/guest/$key"
  mkdir -p "$TOPOLET_CACHE/guest" "$DEPS"
  exec 8>"$TOPOLET_CACHE/guest/build.lock"
  flock 8
  if [[ ! -s "$dir/rootfs.img" || ! -s "$dir/vmlinuz" || ! -s "$dir/initrd.img" ]]; then
    local start=$SECONDS tmp
    tmp="$(mktemp -d "$dir.tmp.XXXXXX")"
    build_image_into "$tmp"
    rm -rf "$dir"
    mv "$tmp" "$dir"
    say "built the guest image $key in $((SECONDS - start))s"
  fi
  exec 8>&-
  ln -sfn "$dir" "$DEPS/guest"
  IMAGE="$dir"
}

# ---------------------------------------------------------------- shapes

# shape_args SHAPE: QEMU_ARGS (machine, CPUs, NUMA) and APPEND (kernel command line) of SHAPE.
shape_args() {
  # mitigations=off: the emulated Skylake is "vulnerable", and page-table isolation and retpolines
  # make every syscall and context switch several times slower under TCG.
  # Under TCG on a busy host a vCPU thread can wait seconds for a host CPU. The kernel's own
  # watchdogs then misfire: the soft-lockup and RCU-stall detectors print all-CPU backtraces on the
  # emulated serial port (with the console lock held: every other vCPU stalls behind it, which
  # prints more), and the clocksource watchdog declares the TSC unstable and moves to the HPET,
  # whose every read is an emulated MMIO exit. nowatchdog, rcu_cpu_stall_suppress and
  # tsc=reliable turn those off (the TSC of TCG is the host's monotonic clock, the same on
  # every vCPU); nothing in the suite depends on them.
  local common="root=/dev/vda rw console=ttyS0 panic=-1 psi=1 quiet loglevel=4 mitigations=off nowatchdog rcupdate.rcu_cpu_stall_suppress=1 tsc=reliable systemd.unified_cgroup_hierarchy=1"
  local systemd="systemd.mask=serial-getty@ttyS0.service systemd.mask=getty@tty1.service systemd.show_status=0"
  case "$1" in
    smt2numa)
      # shellcheck disable=SC2054 # -smp takes one comma-separated argument
      QEMU_ARGS=(-cpu Skylake-Server -m 3072 -smp 8,sockets=2,cores=2,threads=2
        -object memory-backend-ram,id=m0,size=1536M -object memory-backend-ram,id=m1,size=1536M
        -numa node,nodeid=0,cpus=0-3,memdev=m0 -numa node,nodeid=1,cpus=4-7,memdev=m1)
      APPEND="$common init=/sbin/topolet-guest-init" ;;
    kube2numa)
      # smt2numa's machine: with the kubelet's reserved CPU 0, each node still has room for a
      # 2-CPU pod, so where a pod lands says whether its device pulled it. (2 sockets x 3 cores
      # without SMT, 6 vCPUs, hung this kernel right after bringing up its CPUs under TCG.)
      # shellcheck disable=SC2054 # -smp takes one comma-separated argument
      QEMU_ARGS=(-cpu Skylake-Server -m 3072 -smp 8,sockets=2,cores=2,threads=2
        -object memory-backend-ram,id=m0,size=1536M -object memory-backend-ram,id=m1,size=1536M
        -numa node,nodeid=0,cpus=0-3,memdev=m0 -numa node,nodeid=1,cpus=4-7,memdev=m1)
      APPEND="$common init=/sbin/topolet-guest-init" ;;
    snc4)
      # shellcheck disable=SC2054 # -smp takes one comma-separated argument
      QEMU_ARGS=(-cpu Skylake-Server -m 3072 -smp 4,sockets=1,cores=4,threads=1
        -object memory-backend-ram,id=m0,size=1280M -object memory-backend-ram,id=m1,size=768M
        -object memory-backend-ram,id=m2,size=512M -object memory-backend-ram,id=m3,size=512M
        -numa node,nodeid=0,cpus=0-1,memdev=m0 -numa node,nodeid=1,cpus=2,memdev=m1
        -numa node,nodeid=2,cpus=3,memdev=m2 -numa node,nodeid=3,memdev=m3)
      APPEND="$common $systemd" ;;
    *) die "unknown shape '$1' (shapes: $SHAPES)" ;;
  esac
}

# is_kube SHAPE: whether SHAPE runs a kubelet (and so a control plane on the host).
is_kube() { [[ "$1" == kube2numa ]]; }

# ---------------------------------------------------------------- the control plane of kube shapes

# start_control DIR: etcd, kube-apiserver (its certificate valid for 10.0.2.2, the address QEMU's
# user network gives the host's loopback) and kube-scheduler on this host, in DIR.
start_control() {
  CONTROL_DIR="$1"
  KUBE_CONTROL_SCHEDULER=1 KUBE_API_SANS=IP:10.0.2.2 "$HACK_DIR/kube-node.sh" start-control "$CONTROL_DIR" >&2 ||
    die "hack/kube-node.sh start-control failed (logs: $CONTROL_DIR)"
}

# stop_control [OUT]: stops the control plane, its logs into OUT/control if given.
stop_control() {
  [[ -n "$CONTROL_DIR" ]] || return 0
  local dir="$CONTROL_DIR"
  CONTROL_DIR=""
  if [[ -n "${1:-}" ]]; then mkdir -p "$1/control"; cp "$dir"/*.log "$1/control/" 2>/dev/null || true; fi
  "$HACK_DIR/kube-node.sh" stop "$dir" >&2 || warn "hack/kube-node.sh stop $dir failed"
}

# ---------------------------------------------------------------- payload

# build_binaries: TOPOLET_BIN and SUITE_BIN (the in-guest test binary), built on the host, and the
# containerd stack they run on (hack/install-deps.sh: a no-op when installed).
build_binaries() {
  CONTAINERD_VERSION="$CONTAINERD_VERSION" "$HACK_DIR/install-deps.sh" >&2 || die "hack/install-deps.sh failed"
  if [[ -n "${TOPOLET_BIN:-}" ]]; then
    [[ -x "$TOPOLET_BIN" ]] || die "TOPOLET_BIN=$TOPOLET_BIN is not executable"
    say "topolet: $TOPOLET_BIN; building the in-guest suite (cargo)"
  else
    say "building topolet and the in-guest suite (cargo)"
    (cd "$REPO_ROOT" && cargo build -q -p topolet --bin topolet) || die "cargo build of topolet failed"
    TOPOLET_BIN="$TARGET/debug/topolet"
  fi
  local json
  json="$(cd "$REPO_ROOT" && cargo test -q -p topolet-integration --test in_guest --no-run --message-format=json)" ||
    die "cargo test --no-run of the in-guest suite failed"
  SUITE_BIN="$(grep '"name":"in_guest"' <<<"$json" | grep -o '"executable":"[^"]*"' | tail -n1 | cut -d'"' -f4)"
  [[ -x "$SUITE_BIN" ]] || die "no in_guest test executable in cargo's output"
}

# build_kube: the Kubernetes binaries (hack/install-kube.sh: a no-op when installed) and the
# device plugin and DRA driver the kube shapes run, built here (the guest has no Go) as
# integration/src/go.rs builds them.
build_kube() {
  "$HACK_DIR/install-kube.sh" >&2 || die "hack/install-kube.sh failed"
  local go="${GO:-$(command -v go || echo /usr/local/go/bin/go)}" prog
  mkdir -p "$TARGET/guest-go"
  for prog in device-plugin dra-driver; do
    (cd "$REPO_ROOT/hack/$prog" && CGO_ENABLED=0 go_cache_env GOFLAGS="-mod=readonly -buildvcs=false" \
      "$go" build -trimpath -o "$TARGET/guest-go/$prog" .) || die "go build of hack/$prog failed"
  done
}

# make_payload SHAPE MODE DIR: the payload disk's tree for SHAPE (MODE: suite or shell).
make_payload() {
  local shape="$1" mode="$2" p="$3"
  local cbin
  cbin="$(containerd_bin_dir "$CONTAINERD_VERSION")"
  [[ -x "$cbin/containerd" && -x "$DEPS/bin/runc" && -x "$DEPS/bin/crictl" && -s "$PAUSE_TAR" ]] ||
    die "the containerd stack is not installed: run CONTAINERD_VERSION=$CONTAINERD_VERSION hack/install-deps.sh"
  mkdir -p "$p/bin" "$p/repo/.deps/bin" "$p/repo/.deps/containerd-$CONTAINERD_VERSION/bin" "$p/repo/.deps/images"
  cp -L "$TOPOLET_BIN" "$p/bin/topolet"
  cp -L "$SUITE_BIN" "$p/bin/in_guest"
  cp -L "$cbin"/{containerd,containerd-shim-runc-v2,ctr} "$p/repo/.deps/containerd-$CONTAINERD_VERSION/bin/"
  cp -L "$DEPS/bin/runc" "$DEPS/bin/crictl" "$p/repo/.deps/bin/"
  cp -L "$DEPS/images/"{pause.tar,busybox.tar,stamp} "$p/repo/.deps/images/"
  cp -L /bin/busybox "$p/bin/busybox"
  cp -a "$REPO_ROOT/hack" "$p/repo/hack"
  cp "$HACK_DIR/guest/guest-init.sh" "$p/guest-init.sh"
  local kube=0
  if is_kube "$shape"; then
    kube=1
    mkdir -p "$p/repo/.deps/cni/bin" "$p/kube-control/pki"
    cp -L "$DEPS/bin/kubelet" "$DEPS/bin/kubectl" "$p/repo/.deps/bin/"
    cp -L "$DEPS/cni/bin/loopback" "$p/repo/.deps/cni/bin/"
    cp -L "$TARGET/guest-go/device-plugin" "$TARGET/guest-go/dra-driver" "$p/bin/"
    # What the guest's kubelet and clients need of the host's control plane (start-kubelet).
    cp "$CONTROL_DIR/ports" "$p/kube-control/"
    cp "$CONTROL_DIR/pki/ca.crt" "$CONTROL_DIR/pki/tokens.csv" "$p/kube-control/pki/"
  fi
  {
    printf 'SHAPE=%q\nMODE=%q\nREPO_ROOT=%q\nCONTAINERD_VERSION=%q\nSUITE_ARGS=%q\nKUBE=%q\n' \
      "$shape" "$mode" "$REPO_ROOT" "$CONTAINERD_VERSION" "${GUEST_SUITE_ARGS:-}" "$kube"
  } >"$p/env"
}

# boot SHAPE MODE OUT: boot SHAPE with a fresh payload; results (suite mode) into OUT.
boot() {
  local shape="$1" mode="$2" out="$3"
  work_dir
  local d="$WORK/$shape" nic=(-nic none)
  rm -rf "$d"; mkdir -p "$d/payload"
  if is_kube "$shape"; then
    start_control "$d/control"
    # The user network (slirp): the guest reaches the host's loopback at 10.0.2.2, nothing of
    # the guest is reachable from the host.
    # No option ROM: the guest boots its kernel directly (-kernel), iPXE would only add its prompt.
    # shellcheck disable=SC2054 # -netdev and -device take one comma-separated argument each
    nic=(-netdev user,id=net0 -device virtio-net-pci,netdev=net0,romfile=)
  fi
  make_payload "$shape" "$mode" "$d/payload"
  mkfs.ext4 -q -F -L payload -d "$d/payload" "$d/payload.img" 1G >/dev/null || die "mkfs.ext4 -d of the payload failed"
  rm -rf "$d/payload"
  mkfs.ext4 -q -F -L results "$d/results.img" 256M >/dev/null || die "mkfs.ext4 of the results disk failed"
  shape_args "$shape"
  local qemu=(qemu-system-x86_64 -accel "tcg,thread=$GUEST_TCG_THREAD" "${QEMU_ARGS[@]}"
    -kernel "$IMAGE/vmlinuz" -initrd "$IMAGE/initrd.img" -append "$APPEND"
    -drive "file=$IMAGE/rootfs.img,format=raw,if=virtio,snapshot=on"
    -drive "file=$d/payload.img,format=raw,if=virtio"
    -drive "file=$d/results.img,format=raw,if=virtio"
    "${nic[@]}" -nographic -no-reboot)
  if [[ "$mode" == shell ]]; then
    "${qemu[@]}" || true
    stop_control
    return 0
  fi
  local start=$SECONDS rc=0 reached attempt
  mkdir -p "$out"
  for attempt in 1 2; do
    rm -rf "${out:?}"/*
    timeout --kill-after=10 "$GUEST_TIMEOUT" "${qemu[@]}" </dev/null >"$out/console.log" 2>&1 &
    QEMU_PID=$!
    reached=0
    wait_for_suite "$shape" "$out/console.log" || reached=$?
    if ((reached != 2)); then
      rc=0
      wait "$QEMU_PID" || rc=$?
      QEMU_PID=""
      break
    fi
    # The guest never reached its suite: a boot that hung (seen once under TCG: the systemd
    # shape silent after the BIOS for 14 minutes, then fine on the next boot). Only the boot is
    # tried again, never a suite that started.
    kill -TERM "$QEMU_PID" 2>/dev/null || true
    wait "$QEMU_PID" 2>/dev/null || true
    QEMU_PID=""
    print_console "$out/console.log"
    cp "$out/console.log" "$d/console-hung-boot.log"
    if ((attempt == 2)); then
      mv "$d/console-hung-boot.log" "$out/"
      say "$shape: the guest did not reach its suite within ${GUEST_BOOT_TIMEOUT}s, twice"
      stop_control "$out"
      return 1
    fi
    say "$shape: the guest did not reach its suite within ${GUEST_BOOT_TIMEOUT}s (its console is above): booting it once more"
    mkfs.ext4 -q -F -L results "$d/results.img" 256M >/dev/null || die "mkfs.ext4 of the results disk failed"
  done
  [[ ! -f "$d/console-hung-boot.log" ]] || mv "$d/console-hung-boot.log" "$out/"
  WALL=$((SECONDS - start))
  stop_control "$out"
  if ((rc == 124 || rc == 137)); then
    # The suite's steps are on the console (tee'd by guest-init.sh), with the guest's uptime.
    print_console "$out/console.log"
    say "$shape: qemu killed after ${GUEST_TIMEOUT}s (the console's tail is above; all of it: $out/console.log)"
    return 1
  fi
  debugfs -R "rdump / $out" "$d/results.img" >/dev/null 2>&1 || die "debugfs could not read the results disk of $shape"
  rm -rf "$out/lost+found" "$d"
  [[ -f "$out/rc" ]] || { print_console "$out/console.log"; say "$shape: the guest wrote no result (console: $out/console.log)"; return 1; }
  return 0
}

# wait_for_suite SHAPE CONSOLE: until the guest's console shows its suite starting (0), qemu
# ($QEMU_PID) has exited without it (1), or GUEST_BOOT_TIMEOUT seconds have passed (2).
wait_for_suite() {
  local t0=$SECONDS
  until grep -q "^TOPOLET-GUEST: suite $1 starting" "$2" 2>/dev/null; do
    kill -0 "$QEMU_PID" 2>/dev/null || return 1
    ((SECONDS - t0 < GUEST_BOOT_TIMEOUT)) || return 2
    sleep 1
  done
  return 0
}

print_console() {
  echo "---------- guest console (last 200 lines of $1) ----------" >&2
  tail -n 200 "$1" >&2 || true
  echo "---------- end of the guest console ----------" >&2
}

# ---------------------------------------------------------------- commands

cmd_test() {
  local shapes=("$@") s failed=() line report=()
  [[ "$GUEST_BOOT_TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "GUEST_BOOT_TIMEOUT=$GUEST_BOOT_TIMEOUT: want a positive number of seconds"
  ((${#shapes[@]})) || read -r -a shapes <<<"$SHAPES"
  for s in "${shapes[@]}"; do shape_args "$s"; done
  ensure_image
  build_binaries
  for s in "${shapes[@]}"; do
    if is_kube "$s"; then build_kube; break; fi
  done
  for s in "${shapes[@]}"; do
    local out="$TARGET/guest/$s"
    say "booting $s (timeout ${GUEST_TIMEOUT}s; host load: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs)"
    if boot "$s" suite "$out"; then
      # The suite's log in full when it failed, else its step lines (per-step guest time).
      if [[ "$(cat "$out/rc")" != 0 ]]; then cat "$out/suite.log" 2>/dev/null || true
      else grep -E '^(\[guest |test result)' "$out/suite.log" 2>/dev/null || true; fi
      if [[ "$(cat "$out/rc")" == 0 ]]; then line="$s: ok (${WALL}s, load after: $(cut -d' ' -f1 /proc/loadavg))"; else line="$s: FAILED, suite exit $(cat "$out/rc") (${WALL}s, $out)"; failed+=("$s"); fi
    else
      line="$s: FAILED, no result ($out/console.log)"; failed+=("$s")
    fi
    say "$line"; report+=("$line")
  done
  printf 'guest.sh: %s\n' "${report[@]}"
  ((${#failed[@]} == 0)) || die "shapes failed: ${failed[*]}"
}

main() {
  [[ $EUID -eq 0 ]] || die "must run as root (mmdebstrap, and the guest's payload keeps root-owned files)"
  local cmd="${1:-}"; shift || true
  case "$cmd" in
    image) ensure_image; echo "$IMAGE" ;;
    test) cmd_test "$@" ;;
    shell)
      [[ $# -eq 1 ]] || die "usage: guest.sh shell SHAPE (shapes: $SHAPES)"
      shape_args "$1"; ensure_image; build_binaries; if is_kube "$1"; then build_kube; fi; boot "$1" shell "" ;;
    shapes) echo "$SHAPES" ;;
    *) die "usage: guest.sh image | test [SHAPE...] | shell SHAPE | shapes" ;;
  esac
}

main "$@"
