#!/bin/sh
# hack/guest/guest-init.sh — the guest side of hack/guest.sh, on the payload disk (/payload).
#
# Usage (inside a guest only): guest-init.sh plain|systemd
#   plain    called by /sbin/topolet-guest-init as PID 1: mounts what systemd would (cgroup2 with
#            every controller delegated to the root's children, /run, /tmp, /dev/pts, /dev/shm)
#   systemd  called by topolet-guest.service under systemd (cgroup2 mounted by systemd)
# Then, by /payload/env's MODE:
#   suite    runs /payload/bin/in_guest (the test target integration/guest/in_guest.rs) filtered
#            to the test named like the shape, writes the results disk (/dev/vdc): suite.log, rc,
#            topology.txt, it-logs/ (every stack's logs), and powers the guest off
#   shell    gives a root shell on the console with the suite's environment; powers off after it
# The compiled-in repository path of the suite (REPO_ROOT of the host) is made a symlink to
# /payload/repo (hack/ and .deps/ with containerd, runc, crictl, the test images).
set -u
# Written by hack/guest.sh (make_payload) for each boot; not in the repository.
# shellcheck source=/dev/null
. /payload/env
KIND="$1"

poweroff_now() {
  sync
  echo "TOPOLET-GUEST: power off"
  echo o >/proc/sysrq-trigger
  sleep 60
}

if [ "$KIND" = plain ]; then
  mount -t cgroup2 cgroup2 /sys/fs/cgroup
  # cgroup.controllers is one line of space-separated names (Documentation/admin-guide/cgroup-v2.rst).
  read -r controllers </sys/fs/cgroup/cgroup.controllers
  for c in $controllers; do echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control; done
  mount -t tmpfs -o mode=755 tmpfs /run
  mount -t tmpfs -o mode=1777 tmpfs /tmp
  mkdir -p /dev/pts /dev/shm
  mount -t devpts devpts /dev/pts
  mount -t tmpfs tmpfs /dev/shm
  mount -o remount,rw /
  hostname topolet-guest
  ip link set lo up
fi

# A kube shape (KUBE=1): QEMU's user network, the host's loopback (its control plane) at
# 10.0.2.2; a static address, as there is no DHCP client.
if [ "${KUBE:-0}" = 1 ]; then
  modprobe virtio_net
  # The device appears once the driver has probed it, named by the kernel (ens3 on this machine).
  nic=""
  for _ in $(seq 100); do
    for n in /sys/class/net/*; do [ "${n##*/}" = lo ] || nic="${n##*/}"; done
    [ -z "$nic" ] || break
    sleep 0.1
  done
  [ -n "$nic" ] || { echo "TOPOLET-GUEST: no network device ($(ls /sys/class/net))"; lsmod | grep -i virtio; }
  echo "TOPOLET-GUEST: network device $nic, 10.0.2.15/24"
  ip link set "$nic" up
  ip addr add 10.0.2.15/24 dev "$nic"
  export TOPOLET_KUBE_CONTROL_DIR=/payload/kube-control TOPOLET_KUBE_API_HOST=10.0.2.2
  export TOPOLET_DEVICE_PLUGIN=/payload/bin/device-plugin TOPOLET_DRA_DRIVER=/payload/bin/dra-driver
  # hack/kube-node.sh's bound on the kubelet's start (node Ready), raised for emulation.
  export KUBE_START_TIMEOUT=300
fi

mount -t ext4 /dev/vdc /results || { echo "TOPOLET-GUEST: no results disk"; poweroff_now; }
mkdir -p "$(dirname "$REPO_ROOT")"
ln -sfn /payload/repo "$REPO_ROOT"

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/payload/bin
export HOME=/root
export TOPOLET_BIN=/payload/bin/topolet
# Not under /var/lib: the kubelet's mount namespace has a tmpfs there (hack/kube-node.sh), which
# would hide its own directory under the scratch dirs of this target.
export CARGO_TARGET_DIR=/srv/topolet-guest/target
export BUSYBOX=/payload/bin/busybox
export TOPOLET_GUEST_SHAPE="$SHAPE"
# Where a test writes what hack/guest.sh copies out besides suite.log (the results disk).
export TOPOLET_GUEST_RESULTS=/results
export TOPOLET_CONTAINERD_VERSION="$CONTAINERD_VERSION"
# Emulation (TCG) is 10-50x slower than the host: NRI's per-request deadline, crictl's and the
# stack's start-up timeouts are raised. These are upper bounds, never waited out on success.
export CONTAINERD_NRI_REQUEST_TIMEOUT=60s
export CONTAINERD_START_TIMEOUT=300
export CRICTL_TIMEOUT=300
if [ "$KIND" = systemd ]; then export CONTAINERD_CGROUP_DRIVER=systemd; fi
mkdir -p "$CARGO_TARGET_DIR"

{
  echo "shape: $SHAPE ($KIND init), kernel $(uname -r)"
  echo "--- numactl -H"; numactl -H
  echo "--- lscpu -e"; lscpu -e=CPU,NODE,SOCKET,CORE,CACHE,ONLINE
  echo "--- thread siblings"; grep -H . /sys/devices/system/cpu/cpu*/topology/thread_siblings_list
  echo "--- node memory"; grep -H MemTotal /sys/devices/system/node/node*/meminfo
  echo "--- cgroup"; grep cgroup /proc/self/mountinfo; cat /sys/fs/cgroup/cgroup.subtree_control
  echo "--- PSI"; grep -H . /proc/pressure/* 2>&1
  if [ "$KIND" = systemd ]; then
    echo "--- systemd-analyze (boot time)"; systemd-analyze time; systemd-analyze blame | head -n 15
    systemd-analyze critical-chain topolet-guest.service
  fi
} >/results/topology.txt 2>&1

if [ "$MODE" = shell ]; then
  echo "TOPOLET-GUEST: shape $SHAPE; the suite: in_guest --exact $SHAPE --nocapture; results disk at /results"
  echo "TOPOLET-GUEST: topology in /results/topology.txt; exit the shell to power off"
  setsid -c /bin/bash -l </dev/ttyS0 >/dev/ttyS0 2>&1 || /bin/bash -l
  umount /results
  poweroff_now
fi

echo "TOPOLET-GUEST: suite $SHAPE starting at uptime $(cut -d" " -f1 /proc/uptime)s"
# The suite's output goes to the results disk and to the console (its steps, with the guest's
# uptime: if qemu is killed at the host's timeout, the console shows where the suite was).
# shellcheck disable=SC2086  # SUITE_ARGS is a word list
{ /payload/bin/in_guest --exact "$SHAPE" --test-threads=1 --nocapture $SUITE_ARGS 2>&1; echo "$?" >/results/rc; } | tee /results/suite.log
rc="$(cat /results/rc)"
[ ! -d "$CARGO_TARGET_DIR/it-logs" ] || cp -r "$CARGO_TARGET_DIR/it-logs" /results/it-logs
echo "TOPOLET-GUEST: suite $SHAPE rc=$rc"
umount /results
poweroff_now
