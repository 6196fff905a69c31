#!/usr/bin/env bash
# hack/kube-node.sh — an isolated single-node Kubernetes on loopback, beside a hack/containerd.sh or
# hack/crio.sh stack.
#
# Usage:
#   hack/kube-node.sh start DIR            etcd -> kube-apiserver -> kube-scheduler -> kubelet, all under
#                                          DIR, against the running runtime stack KUBE_RUNTIME_DIR
#                                          (containerd or CRI-O); returns when the node is Ready (fails
#                                          with the log tails)
#   hack/kube-node.sh start-control DIR    the control plane only: etcd -> kube-apiserver, topolet's
#                                          CRD and RBAC, DIR/env; no runtime, scheduler or kubelet
#                                          (hack/fleet.sh: Node objects and pods are its own)
#   hack/kube-node.sh start-kubelet DIR    the kubelet only, against a control plane started elsewhere by
#                                          `start-control` (KUBE_CONTROL_DIR, KUBE_API_HOST: the QEMU guest
#                                          of hack/guest.sh's kube shape, the control plane on the host)
#   hack/kube-node.sh stop DIR             stop the kubelet, scheduler, API server and etcd; leaves no
#                                          process, mount or listener (the pods' containers and cgroups
#                                          belong to the runtime's stack: hack/containerd.sh or
#                                          hack/crio.sh stop)
#   hack/kube-node.sh restart-kubelet DIR  stop the kubelet only and start it again (pods keep running)
#   hack/kube-node.sh stop-apiserver DIR   stop kube-apiserver only (an API outage)
#   hack/kube-node.sh start-apiserver DIR  start it again and wait for /readyz
#
# Start order is the one of a real node: etcd, kube-apiserver (--advertise-address=127.0.0.1), the
# scheduler, then the kubelet; the runtime with NRI and topolet are started by the caller before.
#
# Files in DIR (fixed names others rely on):
#   DIR/env                 shell syntax (`export K=V`, %q-escaped): KUBECONFIG (admin), KUBE_NODE_NAME,
#                           KUBE_API_URL, KUBE_CA_FILE, KUBE_ADMIN_TOKEN, KUBE_TOPOLET_TOKEN,
#                           KUBE_TOPOLET_KUBECONFIG, KUBELET_PID_FILE, KUBELET_LOG, KUBE_APISERVER_LOG,
#                           KUBE_CGROUP_ROOT, KUBE_POD_LOGS_DIR, KUBE_RUNTIME (containerd or cri-o: the
#                           stack's RUNTIME), KUBECACHEDIR (kubectl's cache, not ~/.kube), PATH
#                           (.deps/bin first)
#   DIR/admin.kubeconfig    system:masters (kubectl, the tests)
#   DIR/topolet.kubeconfig  user `topolet` (group topolet:nodes): RBAC grants it what deploy/ grants
#   DIR/manifests/          the kubelet's staticPodPath (empty; tests drop static pod manifests here)
#   DIR/*.log               etcd, kube-apiserver, kube-scheduler, kubelet logs (appended across restarts)
#   DIR/pki/                a throwaway CA, the API server's serving cert, the service-account key
#
# Isolation (the host is left exactly as it was):
#   - every listener on 127.0.0.1, on ports chosen free at start (below the ephemeral port range)
#     and kept in DIR/ports;
#   - the kubelet runs in a private mount namespace (unshare -m --propagation private) where
#     /proc/sys entries it insists on (vm.overcommit_memory, vm.panic_on_oom, kernel.panic,
#     kernel.panic_on_oops, kernel.keys.root_maxkeys/root_maxbytes) are files holding the values it
#     wants, bind-mounted over the real ones, /var/log is a tmpfs (it symlinks container logs under
#     /var/log/containers) and so is /var/lib (its device-plugin socket dir is a constant under
#     /var/lib/kubelet, bound to DIR/var-lib-kubelet); with protectKernelDefaults it never writes a sysctl, and
#     makeIPTablesUtilChains: false keeps it off iptables. The namespace dies with the kubelet.
#     Cost: tmpfs volumes it mounts (secrets, projected tokens) don't reach the runtime, so pods use
#     automountServiceAccountToken: false and no secret volumes;
#   - with a CRI-O stack on a host with no hugetlb cgroup hierarchy mounted, /sys/kernel/mm/hugepages
#     is an empty tmpfs in that namespace (the kubelet then sends no hugepage limits, which runc
#     could not apply there: see write_kubelet_wrapper);
#   - the kubelet's cgroupRoot is the runtime stack's CGROUP_PARENT_BASE, created here in every
#     cgroup v1 hierarchy (cpuset.cpus/mems copied from the root); the stack's stop removes it;
#   - --root-dir, --cert-dir, podLogsDir, volumePluginDir all under DIR.
# No controller-manager runs: no ServiceAccount tokens (the ServiceAccount admission plugin is off),
# no node lifecycle controller to lift the not-ready taint (TaintNodesByCondition is off, so the node
# is never tainted), no garbage collector, no namespace deletion, no PDB status (tests write it).
# --client-ca-file makes the API server publish kube-system/extension-apiserver-authentication,
# which the scheduler's delegated authentication reads (no client certificates are issued).
#
# Environment:
#   KUBE_RUNTIME_DIR        the DIR of a running `hack/containerd.sh start DIR` or `hack/crio.sh start
#                           DIR` (required for start): the kubelet's containerRuntimeEndpoint is the
#                           stack's CRI_ENDPOINT, its cgroupRoot the stack's CGROUP_PARENT_BASE (both
#                           runtimes run the cgroupfs driver), the loopback CNI config goes into the
#                           stack's DIR/cni (where either runtime reads it); the pause image is the
#                           one the stack imported and pinned (a runtime setting: containerd's
#                           sandbox image, CRI-O's pause_image). KUBE_CONTAINERD_DIR is the older
#                           name, still read.
#   KUBE_NODE_NAME          node name (default topolet-node)
#   KUBE_CPU_MANAGER_POLICY kubelet cpuManagerPolicy: none (default) or static
#   KUBE_RESERVED_CPUS      kubelet reservedSystemCPUs (default: none; static needs some: use "0")
#   KUBE_TOPOLOGY_MANAGER_POLICY  kubelet topologyManagerPolicy (default none; topolet needs none)
#   KUBE_CONTROL_SCHEDULER  1: start-control starts kube-scheduler too (a kubelet started elsewhere
#                           with start-kubelet gets its pods scheduled); default 0
#   KUBE_API_SANS           more subjectAltNames of the API server's certificate, openssl syntax
#                           (`IP:10.0.2.2`: the host as a QEMU guest's user network reaches it)
#   KUBE_CONTROL_DIR        start-kubelet: a copy of a start-control DIR's ports, pki/ca.crt and
#                           pki/tokens.csv (what the kubelet and the clients need to reach it)
#   KUBE_API_HOST           start-kubelet: the API server's address from here (default 127.0.0.1);
#                           every kubeconfig written names it
#   KUBE_START_TIMEOUT      seconds to wait for each component (default 60)
#   KUBE_MAX_PODS           kubelet maxPods (default 110)
#   KUBE_WITH_CONTROLLERS   1: a node agents can be installed on the way operators install them (the
#                           Helm suite): kube-controller-manager runs the daemonset, job, serviceaccount,
#                           root-ca-cert-publisher, garbagecollector and namespace controllers, the
#                           ServiceAccount admission plugin is on (pods get their projected token), the
#                           kubelet's pod volumes reach the runtime (below), and topolet's namespace,
#                           RBAC and CRD are left to the installer (deploy/helm/topolet). Default 0.
#   KUBE_AUDIT=1            the API server writes an audit log (DIR/audit.log, JSON lines, level
#                           Metadata, one entry per request at ResponseComplete): who asked what,
#                           for measuring each client's requests (hack/api-cost.sh)
#
# With KUBE_WITH_CONTROLLERS=1 the kubelet's root directory (DIR/kubelet) is a shared bind mount of
# itself, made before the kubelet's namespace is created and joined by it (--propagation unchanged;
# every other shared mount is made a slave inside): the tmpfs volumes the kubelet mounts there
# (projected service-account tokens) propagate to the host's namespace, where the runtime bind-mounts
# them into containers. `stop` unmounts DIR/kubelet and everything under it.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

NODE_NAME="${KUBE_NODE_NAME:-topolet-node}"
CPU_MANAGER_POLICY="${KUBE_CPU_MANAGER_POLICY:-none}"
RESERVED_CPUS="${KUBE_RESERVED_CPUS:-}"
TOPOLOGY_MANAGER_POLICY="${KUBE_TOPOLOGY_MANAGER_POLICY:-none}"
API_HOST="${KUBE_API_HOST:-127.0.0.1}"
TIMEOUT="${KUBE_START_TIMEOUT:-60}"
MAX_PODS="${KUBE_MAX_PODS:-110}"
WITH_CONTROLLERS="${KUBE_WITH_CONTROLLERS:-0}"
BIN="$DEPS/bin"

usage() { die "usage: kube-node.sh start|start-control|start-kubelet|stop|restart-kubelet|stop-apiserver|start-apiserver DIR"; }

set_paths() {
  mkdir -p "$1"
  DIR="$(cd "$1" && pwd -P)"
  PKI="$DIR/pki"
  ENV_FILE="$DIR/env"
  PORTS_FILE="$DIR/ports"
  # kubectl keeps a discovery cache in ~/.kube/cache unless told otherwise.
  export KUBECACHEDIR="$DIR/kubectl-cache"
}

# ---------------------------------------------------------------- processes

pid_alive() { kill -0 "$1" 2>/dev/null; }

# component_pid NAME: pid of this node's NAME (DIR/NAME.pid), if it runs and is ours.
component_pid() {
  local pid args
  pid="$(cat "$DIR/$1.pid" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  args="$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")" || return 1
  [[ "$args" == *"$DIR"* ]] || return 1
  echo "$pid"
}

# stop_component NAME: TERM, then KILL after 15 s; waits until it is gone.
stop_component() {
  local pid deadline
  pid="$(component_pid "$1")" || { rm -f "$DIR/$1.pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + 15))
  while pid_alive "$pid"; do
    if ((SECONDS >= deadline)); then kill -KILL "$pid" 2>/dev/null || true; fi
    ((SECONDS < deadline + 10)) || die "$1 (pid $pid) does not exit"
    sleep 0.05
  done
  rm -f "$DIR/$1.pid"
}

# launch NAME CMD...: start CMD detached (own session, no inherited fds), log to DIR/NAME.log.
launch() {
  local name="$1"; shift
  echo "=== kube-node.sh: starting $name at $(date -u +%FT%TZ) ===" >>"$DIR/$name.log"
  setsid "$@" </dev/null >>"$DIR/$name.log" 2>&1 &
  echo "$!" >"$DIR/$name.pid"
}

# wait_for NAME DESCRIPTION CMD...: poll CMD until it succeeds; fail with NAME's log tail when NAME
# exits or TIMEOUT passes.
wait_for() {
  local name="$1" what="$2" deadline=$((SECONDS + TIMEOUT)) pid; shift 2
  pid="$(cat "$DIR/$name.pid")"
  until "$@" >/dev/null 2>&1; do
    if ! pid_alive "$pid"; then
      tail -n 40 "$DIR/$name.log" >&2
      die "$name exited while waiting for $what (log: $DIR/$name.log)"
    fi
    if ((SECONDS >= deadline)); then
      tail -n 40 "$DIR/$name.log" >&2
      die "timed out after ${TIMEOUT}s waiting for $what (log: $DIR/$name.log)"
    fi
    sleep 0.1
  done
}

# ---------------------------------------------------------------- ports

# free_port: sets PORT to a TCP port on 127.0.0.1 no socket uses, not already handed out by this
# script, and below the kernel's ephemeral range (net.ipv4.ip_local_port_range): a port inside it
# can be taken as the local port of some outgoing connection between now and the component's bind
# (the kubelet then fails with "bind: address already in use"). A variable, not output: `$(…)`
# would run it in a subshell and forget TAKEN.
TAKEN=" "
PORT=
free_port() {
  local p used lo=32768 top
  read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
  top=$(( lo < 32768 ? lo : 32768 ))
  (( top > 11000 )) || die "the ephemeral port range starts at $lo: no room below it for the node's listeners"
  used=" $(ss -Htan 2>/dev/null | awk '{n=split($4,a,":"); printf "%s ", a[n]}') "
  while :; do
    p=$((10000 + RANDOM % (top - 10000)))
    [[ "$used" != *" $p "* && "$TAKEN" != *" $p "* ]] || continue
    TAKEN+="$p "
    PORT=$p
    return 0
  done
}

choose_ports() {
  free_port; ETCD_CLIENT_PORT=$PORT
  free_port; ETCD_PEER_PORT=$PORT
  free_port; API_PORT=$PORT
  free_port; SCHED_PORT=$PORT
  free_port; KUBELET_PORT=$PORT
  free_port; KUBELET_HEALTHZ_PORT=$PORT
  cat >"$PORTS_FILE" <<EOF
ETCD_CLIENT_PORT=$ETCD_CLIENT_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
API_PORT=$API_PORT
SCHED_PORT=$SCHED_PORT
KUBELET_PORT=$KUBELET_PORT
KUBELET_HEALTHZ_PORT=$KUBELET_HEALTHZ_PORT
EOF
  # Only the ports of components that run: DIR/ports is the node's listeners, all of them.
  if [[ "$WITH_CONTROLLERS" == 1 ]]; then
    free_port; CM_PORT=$PORT
    echo "CM_PORT=$CM_PORT" >>"$PORTS_FILE"
  fi
}

load_ports() {
  [[ -f "$PORTS_FILE" ]] || die "$PORTS_FILE is missing: was the node started in $DIR?"
  # shellcheck disable=SC1090
  source "$PORTS_FILE"
}

# ---------------------------------------------------------------- credentials

make_pki() {
  mkdir -p "$PKI"
  [[ -f "$PKI/apiserver.crt" ]] && return 0
  local log="$DIR/pki.log"
  {
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/ca.key"
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=topolet-test-ca" -days 2 -out "$PKI/ca.crt"
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/apiserver.key"
    openssl req -new -key "$PKI/apiserver.key" -subj "/CN=kube-apiserver" -out "$PKI/apiserver.csr"
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc%s\nextendedKeyUsage=serverAuth\n' \
      "${KUBE_API_SANS:+,$KUBE_API_SANS}" >"$PKI/apiserver.ext"
    openssl x509 -req -in "$PKI/apiserver.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
      -days 2 -extfile "$PKI/apiserver.ext" -out "$PKI/apiserver.crt"
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/sa.key"
    openssl ec -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"
  } >"$log" 2>&1 || { cat "$log" >&2; die "generating certificates with openssl failed"; }
  chmod 600 "$PKI"/*.key
}

token() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

make_tokens() {
  [[ -f "$PKI/tokens.csv" ]] && { load_tokens; return 0; }
  ADMIN_TOKEN=$(token); NODE_TOKEN=$(token); SCHED_TOKEN=$(token); TOPOLET_TOKEN=$(token)
  # token,user,uid,"group1,group2"
  cat >"$PKI/tokens.csv" <<EOF
$ADMIN_TOKEN,admin,admin,"system:masters"
$NODE_TOKEN,system:node:$NODE_NAME,node,"system:nodes"
$SCHED_TOKEN,system:kube-scheduler,scheduler,""
$TOPOLET_TOKEN,topolet,topolet,"topolet:nodes"
EOF
  chmod 600 "$PKI/tokens.csv"
}

load_tokens() {
  ADMIN_TOKEN="$(awk -F, '$2=="admin"{print $1}' "$PKI/tokens.csv")"
  NODE_TOKEN="$(awk -F, '$3=="node"{print $1}' "$PKI/tokens.csv")"
  SCHED_TOKEN="$(awk -F, '$2=="system:kube-scheduler"{print $1}' "$PKI/tokens.csv")"
  TOPOLET_TOKEN="$(awk -F, '$2=="topolet"{print $1}' "$PKI/tokens.csv")"
}

# kubeconfig FILE USER TOKEN
kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: topolet-test
  cluster:
    server: https://$API_HOST:$API_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    token: $3
contexts:
- name: $2@topolet-test
  context:
    cluster: topolet-test
    user: $2
current-context: $2@topolet-test
EOF
  chmod 600 "$1"
}

# ---------------------------------------------------------------- components

start_etcd() {
  mkdir -p "$DIR/etcd"
  chmod 700 "$DIR/etcd"
  # A throwaway single-member cluster: --unsafe-no-fsync keeps a busy CI disk from slowing the API.
  launch etcd "$BIN/etcd" --name "$NODE_NAME" --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "$NODE_NAME=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync --log-level warn
  wait_for etcd "etcd /health" curl -fsS "http://127.0.0.1:$ETCD_CLIENT_PORT/health"
}

apiserver_ready() {
  curl -fsS --cacert "$PKI/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" "https://127.0.0.1:$API_PORT/readyz"
}

start_apiserver() {
  mkdir -p "$DIR/apiserver"
  # Without a controller manager no ServiceAccount exists (not even `default`): the admission
  # plugin that requires one, and mounts its token, is off then.
  # NodeRestriction on, as kubeadm and managed clusters run it: a node's identity may write only
  # its own Node and evict only pods bound to it (topolet's evictions as the node rely on it).
  local disabled=ServiceAccount,TaintNodesByCondition
  [[ "$WITH_CONTROLLERS" != 1 ]] || disabled=TaintNodesByCondition
  AUDIT_FLAGS=()
  if [[ "${KUBE_AUDIT:-}" == 1 ]]; then
    cat >"$DIR/audit-policy.yaml" <<'EOT'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
EOT
    AUDIT_FLAGS=(--audit-policy-file "$DIR/audit-policy.yaml" --audit-log-path "$DIR/audit.log")
  fi
  launch kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --cert-dir "$DIR/apiserver" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --token-auth-file "$PKI/tokens.csv" --client-ca-file "$PKI/ca.crt" --authorization-mode Node,RBAC \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 --endpoint-reconciler-type none \
    --enable-admission-plugins NodeRestriction \
    --disable-admission-plugins "$disabled" --allow-privileged=true --profiling=false \
    "${AUDIT_FLAGS[@]}"
  wait_for kube-apiserver "kube-apiserver /readyz" apiserver_ready
}

start_scheduler() {
  kubeconfig "$DIR/scheduler.kubeconfig" system:kube-scheduler "$SCHED_TOKEN"
  launch kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig "$DIR/scheduler.kubeconfig" --authorization-kubeconfig "$DIR/scheduler.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --profiling=false
  wait_for kube-scheduler "kube-scheduler /healthz" curl -fsSk "https://127.0.0.1:$SCHED_PORT/healthz"
}

# The controllers a DaemonSet install needs (KUBE_WITH_CONTROLLERS=1): DaemonSet pods, the
# namespaces' `default` ServiceAccount (the admission plugin requires one per pod), the
# kube-root-ca.crt ConfigMap every projected token volume holds, the garbage collector (a deleted
# DaemonSet's pods) and namespace deletion. As admin: a throwaway cluster.
start_controller_manager() {
  launch kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$DIR/admin.kubeconfig" \
    --authentication-kubeconfig "$DIR/admin.kubeconfig" --authorization-kubeconfig "$DIR/admin.kubeconfig" \
    --controllers daemonset,job,serviceaccount,root-ca-cert-publisher,garbagecollector,namespace \
    --root-ca-file "$PKI/ca.crt" --use-service-account-credentials=false \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port "$CM_PORT" --profiling=false
  wait_for kube-controller-manager "kube-controller-manager /healthz" curl -fsSk "https://127.0.0.1:$CM_PORT/healthz"
  wait_for kube-controller-manager "ServiceAccount default/default" \
    "$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" get serviceaccount default -n default
}

# The runtime stack this node drives (hack/containerd.sh or hack/crio.sh: the same DIR/env
# contract): its CRI socket, cgroup base and runtime (hack/crio.sh exports RUNTIME=cri-o;
# hack/containerd.sh exports none).
load_runtime_stack() {
  local rdir="${KUBE_RUNTIME_DIR:-${KUBE_CONTAINERD_DIR:-}}"
  [[ -n "$rdir" && -f "$rdir/env" ]] ||
    die "KUBE_RUNTIME_DIR must name a started hack/containerd.sh or hack/crio.sh stack (no $rdir/env)"
  CRI_ENDPOINT="$(bash -c 'source "$1"; echo "$CRI_ENDPOINT"' _ "$rdir/env")"
  CGROUP_ROOT="$(bash -c 'source "$1"; echo "$CGROUP_PARENT_BASE"' _ "$rdir/env")"
  RUNTIME="$(bash -c 'source "$1"; echo "${RUNTIME:-containerd}"' _ "$rdir/env")"
  RUNTIME_DIR="$(cd "$rdir" && pwd -P)"
  [[ -n "$CRI_ENDPOINT" && "$CGROUP_ROOT" == /topolet-test-* ]] || die "$rdir/env lacks CRI_ENDPOINT or CGROUP_PARENT_BASE"
  [[ "$RUNTIME" == containerd || "$RUNTIME" == cri-o ]] || die "$rdir/env: RUNTIME=$RUNTIME is neither containerd nor cri-o"
  [[ -d "$RUNTIME_DIR/cni/net.d" && -d "$RUNTIME_DIR/cni/bin" ]] ||
    die "$RUNTIME_DIR has no cni/net.d and cni/bin (the runtime's CNI config and plugin directories)"
}

# The kubelet's cgroupRoot must exist in every v1 hierarchy (cpuset with cpus and mems set); on
# the unified hierarchy (cgroup v2: the QEMU guests), once, the kubelet's runc library enabling
# the controllers of each level as it creates its cgroups.
make_cgroup_root() {
  local h
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    mkdir -p "/sys/fs/cgroup/${CGROUP_ROOT#/}"
    return 0
  fi
  for h in /sys/fs/cgroup/*/; do
    [[ -f "${h}cgroup.procs" ]] || continue
    mkdir -p "$h${CGROUP_ROOT#/}"
    if [[ -f "${h}cpuset.cpus" ]]; then
      cat "${h}cpuset.cpus" >"$h${CGROUP_ROOT#/}/cpuset.cpus"
      cat "${h}cpuset.mems" >"$h${CGROUP_ROOT#/}/cpuset.mems"
    fi
  done
}

# A loopback CNI network so the runtime reports NetworkReady and the node turns Ready (pods use
# hostNetwork: nothing else is wired). Both stacks read DIR/cni/net.d with plugins in DIR/cni/bin
# (containerd's [plugins."io.containerd.cri.v1.runtime".cni], CRI-O's [crio.network]), and both
# watch the directory, so the config written after the runtime started is picked up.
write_cni_config() {
  ln -sfn "$DEPS/cni/bin/loopback" "$RUNTIME_DIR/cni/bin/loopback"
  cat >"$RUNTIME_DIR/cni/net.d/10-loopback.conflist" <<'EOF'
{"cniVersion": "1.0.0", "name": "topolet-loopback", "plugins": [{"type": "loopback"}]}
EOF
}

# Disk thresholds are absolute and small: the build hosts share one disk, often nearly full, and
# the kubelet's own disk eviction must not take the suite's pods (topolet's eviction is tested).
write_kubelet_config() {
  local reserved="" cpu_opts=""
  [[ -z "$RESERVED_CPUS" ]] || reserved="reservedSystemCPUs: \"$RESERVED_CPUS\""
  if [[ "$CPU_MANAGER_POLICY" == static ]]; then
    [[ -n "$RESERVED_CPUS" ]] || die "KUBE_CPU_MANAGER_POLICY=static needs KUBE_RESERVED_CPUS"
    cpu_opts="cpuManagerReconcilePeriod: 5s"
  fi
  cat >"$DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: $CRI_ENDPOINT
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
cpuManagerPolicy: $CPU_MANAGER_POLICY
$cpu_opts
$reserved
memoryManagerPolicy: None
topologyManagerPolicy: $TOPOLOGY_MANAGER_POLICY
protectKernelDefaults: true
makeIPTablesUtilChains: false
oomScoreAdj: 0
maxPods: $MAX_PODS
podLogsDir: $DIR/pod-logs
volumePluginDir: $DIR/volume-plugins
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "256Mi"
  nodefs.inodesFree: "1%"
  imagefs.available: "256Mi"
  imagefs.inodesFree: "1%"
evictionPressureTransitionPeriod: 5s
nodeStatusUpdateFrequency: 2s
nodeStatusReportFrequency: 10s
syncFrequency: 10s
fileCheckFrequency: 5s
serializeImagePulls: false
resolvConf: ""
staticPodPath: $DIR/manifests
EOF
}

# Whether a hugetlb cgroup hierarchy is mounted (v1: its own; v2: the unified one lists it).
hugetlb_hierarchy_mounted() {
  [[ -f /sys/fs/cgroup/hugetlb/cgroup.procs ]] && return 0
  grep -qw hugetlb /sys/fs/cgroup/cgroup.controllers 2>/dev/null
}

# The values setupKernelTunables wants (pkg/kubelet/cm/container_manager_linux.go).
KUBELET_SYSCTLS="vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000"

write_kubelet_wrapper() {
  mkdir -p "$DIR/sysctl"
  local kv k v mounts=""
  for kv in $KUBELET_SYSCTLS; do
    k="${kv%%=*}"; v="${kv#*=}"
    [[ "$(cat "/proc/sys/$k")" != "$v" ]] || continue
    echo "$v" >"$DIR/sysctl/${k//\//.}"
    mounts+="mount --bind $(printf %q "$DIR/sysctl/${k//\//.}") /proc/sys/$k"$'\n'
  done
  local unshared="" hugepages=""
  if [[ "$RUNTIME" == cri-o ]] && ! hugetlb_hierarchy_mounted; then
    # CRI-O passes the kubelet's HugepageLimits on to runc whenever the kernel has the hugetlb
    # controller (cri-o/cri-o internal/config/node/cgroups_linux.go, checkRelevantControllers:
    # /proc/cgroups, not what is mounted; internal/factory/container/container.go), and runc then
    # fails every container ("cannot set hugetlb limit: container could not join or create
    # cgroup", opencontainers/cgroups fs/fs.go, which runc links) on a host whose hugetlb v1
    # hierarchy is not mounted. containerd drops them (its disable_hugetlb_controller, true by
    # default). The kubelet sends a limit for every page size under /sys/kernel/mm/hugepages
    # (pkg/kubelet/kuberuntime/kuberuntime_container_linux.go, GetHugepageLimitsFromResources):
    # in its namespace that directory is empty, so it sends none and reports no hugepages.
    hugepages="mount -t tmpfs -o ro,mode=0755,size=4k tmpfs /sys/kernel/mm/hugepages"
  fi
  if [[ "$WITH_CONTROLLERS" == 1 ]]; then
    # Joined with --propagation unchanged: every shared mount but the kubelet's root becomes a
    # slave here, so that of what is mounted in this namespace only the pod volumes reach the host
    # (mountinfo escapes blanks in paths as octal: printf %b undoes it).
    unshared="kubelet_root=$(printf %q "$DIR/kubelet")"$'\n'
    unshared+=$(cat <<'SH'
awk -v root="$kubelet_root" '/ shared:/ && $5 != root {print $5}' /proc/self/mountinfo |
  while read -r m; do mount --make-slave "$(printf '%b' "$m")"; done
SH
)
  fi
  cat >"$DIR/kubelet-ns.sh" <<EOF
#!/usr/bin/env bash
# generated by hack/kube-node.sh: runs inside the kubelet's own mount namespace.
set -euo pipefail
$unshared
mount -t tmpfs -o mode=0755,size=16m tmpfs /var/log
# The device manager's socket dir is a constant (/var/lib/kubelet/device-plugins), whatever --root-dir
# says: /var/lib is a tmpfs here too, with /var/lib/kubelet bound to DIR/var-lib-kubelet.
mount -t tmpfs -o mode=0755,size=16m tmpfs /var/lib
mkdir -p /var/lib/kubelet
mount --bind $(printf %q "$DIR/var-lib-kubelet") /var/lib/kubelet
$mounts
$hugepages
exec $(printf %q "$BIN/kubelet") --config $(printf %q "$DIR/kubelet.yaml") \\
  --kubeconfig $(printf %q "$DIR/kubelet.kubeconfig") --root-dir $(printf %q "$DIR/kubelet") \\
  --cert-dir $(printf %q "$DIR/kubelet/pki") --hostname-override $(printf %q "$NODE_NAME") \\
  --node-ip 127.0.0.1 --v 2
EOF
  chmod +x "$DIR/kubelet-ns.sh"
}

node_ready() {
  local s
  s="$("$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" get node "$NODE_NAME" \
        -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" || return 1
  [[ "$s" == True ]]
}

start_kubelet() {
  mkdir -p "$DIR/kubelet" "$DIR/pod-logs" "$DIR/volume-plugins" "$DIR/var-lib-kubelet" "$DIR/manifests"
  local propagation=private
  if [[ "$WITH_CONTROLLERS" == 1 ]]; then
    if ! mountpoint -q "$DIR/kubelet"; then
      mount --bind "$DIR/kubelet" "$DIR/kubelet"
    fi
    mount --make-shared "$DIR/kubelet"
    propagation=unchanged
  fi
  launch kubelet unshare --mount --propagation "$propagation" "$DIR/kubelet-ns.sh"
  wait_for kubelet "node $NODE_NAME Ready" node_ready
}

# The kubelet's root as a shared mount (KUBE_WITH_CONTROLLERS=1), and every pod volume left under
# it by a kubelet that stopped before its pods: unmounted, deepest first.
unmount_kubelet_root() {
  local m
  [[ -d "$DIR/kubelet" ]] || return 0
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" || die "cannot unmount $m"
  done < <(awk -v root="$DIR/kubelet" '$5 == root || index($5, root "/") == 1 {print $5}' /proc/self/mountinfo |
           sort -r)
}

# RBAC for the `topolet` user: what deploy/ grants the DaemonSet's ServiceAccount; and the
# NodeResourceTopology CRD topolet writes (established before anyone writes an object).
apply_topolet_rbac() {
  local rbac="$REPO_ROOT/deploy/kubernetes/rbac.yaml" ns="$REPO_ROOT/deploy/kubernetes/namespace.yaml"
  local crd="$REPO_ROOT/deploy/kubernetes/noderesourcetopology-crd.yaml"
  [[ -f "$rbac" ]] || return 0
  "$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" apply -f "$crd" >>"$DIR/kubectl.log" 2>&1 ||
    { tail -n 20 "$DIR/kubectl.log" >&2; die "applying $crd failed"; }
  "$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" wait --for condition=Established \
    --timeout "${TIMEOUT}s" crd/noderesourcetopologies.topology.node.k8s.io >>"$DIR/kubectl.log" 2>&1 ||
    { tail -n 20 "$DIR/kubectl.log" >&2; die "the NodeResourceTopology CRD is not established"; }
  # The ServiceAccount lives in topolet's namespace: that first.
  "$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" apply -f "$ns" >>"$DIR/kubectl.log" 2>&1 ||
    { tail -n 20 "$DIR/kubectl.log" >&2; die "applying $ns failed"; }
  "$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" apply -f "$rbac" >>"$DIR/kubectl.log" 2>&1 ||
    { tail -n 20 "$DIR/kubectl.log" >&2; die "applying $rbac failed"; }
  "$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" create clusterrolebinding topolet-test-user \
    --clusterrole topolet --group topolet:nodes --dry-run=client -o yaml |
    "$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" apply -f - >>"$DIR/kubectl.log" 2>&1 ||
    { tail -n 20 "$DIR/kubectl.log" >&2; die "binding the topolet ClusterRole failed"; }
  # The `topolet` user is no pod's service account: it has no node to act as, so its topolet
  # evicts and reads pods as itself (`[kubernetes] evict_as` "auto" with a kubeconfig: "self"),
  # with the rights the chart grants for rbac.evictAs=self (topolet::cluster::permissions::AS_SELF).
  "$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" apply -f - >>"$DIR/kubectl.log" 2>&1 <<'EOF' ||
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: topolet-evict-self
rules:
  - apiGroups: [""]
    resources: ["pods/eviction"]
    verbs: ["create"]
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["list", "watch"]
  - apiGroups: ["resource.k8s.io"]
    resources: ["resourceslices"]
    verbs: ["list", "watch"]
EOF
    { tail -n 20 "$DIR/kubectl.log" >&2; die "creating the topolet-evict-self ClusterRole failed"; }
  "$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" create clusterrolebinding topolet-test-user-evict \
    --clusterrole topolet-evict-self --group topolet:nodes --dry-run=client -o yaml |
    "$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" apply -f - >>"$DIR/kubectl.log" 2>&1 ||
    { tail -n 20 "$DIR/kubectl.log" >&2; die "binding the topolet-evict-self ClusterRole failed"; }
}

write_env() {
  local tmp="$ENV_FILE.tmp" k
  declare -A v=(
    [KUBECONFIG]="$DIR/admin.kubeconfig" [KUBE_NODE_NAME]="$NODE_NAME"
    [KUBE_API_URL]="https://$API_HOST:$API_PORT" [KUBE_CA_FILE]="$PKI/ca.crt"
    [KUBE_ADMIN_TOKEN]="$ADMIN_TOKEN" [KUBE_TOPOLET_TOKEN]="$TOPOLET_TOKEN"
    [KUBE_TOPOLET_KUBECONFIG]="$DIR/topolet.kubeconfig" [KUBELET_PID_FILE]="$DIR/kubelet.pid"
    [KUBELET_LOG]="$DIR/kubelet.log" [KUBE_APISERVER_LOG]="$DIR/kube-apiserver.log"
    [KUBE_CGROUP_ROOT]="$CGROUP_ROOT" [KUBE_POD_LOGS_DIR]="$DIR/pod-logs" [KUBECACHEDIR]="$KUBECACHEDIR"
    [KUBE_RUNTIME]="$RUNTIME"
    [PATH]="$BIN:$PATH"
  )
  {
    echo "# generated by hack/kube-node.sh start $DIR"
    for k in "${!v[@]}"; do printf 'export %s=%q\n' "$k" "${v[$k]}"; done | sort
  } >"$tmp"
  mv "$tmp" "$ENV_FILE"
}

save_start_env() {
  printf 'NODE_NAME=%q\nCPU_MANAGER_POLICY=%q\nRESERVED_CPUS=%q\nTOPOLOGY_MANAGER_POLICY=%q\nKUBE_RUNTIME_DIR=%q\nWITH_CONTROLLERS=%q\nAPI_HOST=%q\n' \
    "$NODE_NAME" "$CPU_MANAGER_POLICY" "$RESERVED_CPUS" "$TOPOLOGY_MANAGER_POLICY" "$RUNTIME_DIR" "$WITH_CONTROLLERS" "$API_HOST" >"$DIR/start.env"
}

load_start_env() {
  [[ -f "$DIR/start.env" ]] || die "$DIR/start.env is missing: was the node started in $DIR?"
  # shellcheck disable=SC1091
  source "$DIR/start.env"
  export KUBE_RUNTIME_DIR
}

# require_binaries [control]: what `start` runs, or with `control` what `start-control` runs.
require_binaries() {
  local b
  if [[ "${1:-}" == control ]]; then
    for b in etcd kube-apiserver kubectl; do
      [[ -x "$BIN/$b" ]] || die "$BIN/$b is missing: run hack/install-kube.sh"
    done
    command -v openssl >/dev/null || die "openssl not found"
    return 0
  fi
  for b in etcd kube-apiserver kube-scheduler kubelet kubectl $([[ "$WITH_CONTROLLERS" != 1 ]] || echo kube-controller-manager); do
    [[ -x "$BIN/$b" ]] || die "$BIN/$b is missing: run hack/install-kube.sh"
  done
  [[ -x "$DEPS/cni/bin/loopback" ]] || die "$DEPS/cni/bin/loopback is missing: run hack/install-kube.sh"
  command -v openssl >/dev/null || die "openssl not found"
  command -v unshare >/dev/null || die "unshare not found"
}

# The kubelet's side of a start (`start`, `start-kubelet`): its cgroup root, CNI config,
# configuration, wrapper and DIR/env, then the kubelet itself, waited for until the node is Ready.
start_node_kubelet() {
  make_cgroup_root
  write_cni_config
  write_kubelet_config
  write_kubelet_wrapper
  write_env
  start_kubelet
}

cmd_start() {
  require_binaries
  load_runtime_stack
  if component_pid kubelet >/dev/null || component_pid kube-apiserver >/dev/null; then
    die "a node already runs in $DIR; stop it first"
  fi
  local start=$SECONDS
  save_start_env
  choose_ports
  make_pki
  make_tokens
  kubeconfig "$DIR/admin.kubeconfig" admin "$ADMIN_TOKEN"
  kubeconfig "$DIR/kubelet.kubeconfig" "system:node:$NODE_NAME" "$NODE_TOKEN"
  kubeconfig "$DIR/topolet.kubeconfig" topolet "$TOPOLET_TOKEN"
  start_etcd
  start_apiserver
  if [[ "$WITH_CONTROLLERS" == 1 ]]; then
    start_controller_manager
  else
    apply_topolet_rbac
  fi
  start_scheduler
  start_node_kubelet
  say "node $NODE_NAME Ready in $((SECONDS - start))s (API https://127.0.0.1:$API_PORT, KUBECONFIG=$DIR/admin.kubeconfig)"
}

# The control plane alone (KUBE_AUDIT applies): no runtime stack, so no cgroup root
# (KUBE_CGROUP_ROOT is empty in DIR/env), and KUBE_NODE_NAME names no Node.
cmd_start_control() {
  require_binaries control
  if component_pid kube-apiserver >/dev/null || component_pid etcd >/dev/null; then
    die "a control plane already runs in $DIR; stop it first"
  fi
  local start=$SECONDS
  RUNTIME_DIR="" RUNTIME="" WITH_CONTROLLERS=0
  save_start_env
  choose_ports
  make_pki
  make_tokens
  kubeconfig "$DIR/admin.kubeconfig" admin "$ADMIN_TOKEN"
  kubeconfig "$DIR/topolet.kubeconfig" topolet "$TOPOLET_TOKEN"
  start_etcd
  start_apiserver
  apply_topolet_rbac
  [[ "${KUBE_CONTROL_SCHEDULER:-0}" != 1 ]] || start_scheduler
  CGROUP_ROOT=""
  write_env
  say "control plane up in $((SECONDS - start))s (API https://127.0.0.1:$API_PORT, KUBECONFIG=$DIR/admin.kubeconfig)"
}

# The kubelet alone, against the control plane of KUBE_CONTROL_DIR (a start-control DIR's ports,
# pki/ca.crt and pki/tokens.csv, copied to where this runs), reached at KUBE_API_HOST: DIR gets
# the same files as `start` (env, kubeconfigs naming KUBE_API_HOST, ports), and `stop` stops the
# kubelet (the rest runs elsewhere: no pid file of theirs is here).
cmd_start_kubelet() {
  local b control="${KUBE_CONTROL_DIR:-}"
  for b in kubelet kubectl; do
    [[ -x "$BIN/$b" ]] || die "$BIN/$b is missing: run hack/install-kube.sh"
  done
  [[ -x "$DEPS/cni/bin/loopback" ]] || die "$DEPS/cni/bin/loopback is missing: run hack/install-kube.sh"
  [[ -n "$control" && -f "$control/ports" && -f "$control/pki/ca.crt" && -f "$control/pki/tokens.csv" ]] ||
    die "KUBE_CONTROL_DIR must hold a start-control DIR's ports, pki/ca.crt and pki/tokens.csv (got '$control')"
  load_runtime_stack
  component_pid kubelet >/dev/null && die "a kubelet already runs in $DIR; stop it first"
  local start=$SECONDS
  save_start_env
  mkdir -p "$PKI"
  cp "$control/ports" "$PORTS_FILE"
  cp "$control/pki/ca.crt" "$control/pki/tokens.csv" "$PKI/"
  chmod 600 "$PKI/tokens.csv"
  load_ports
  load_tokens
  kubeconfig "$DIR/admin.kubeconfig" admin "$ADMIN_TOKEN"
  kubeconfig "$DIR/kubelet.kubeconfig" "system:node:$NODE_NAME" "$NODE_TOKEN"
  kubeconfig "$DIR/topolet.kubeconfig" topolet "$TOPOLET_TOKEN"
  start_node_kubelet
  say "node $NODE_NAME Ready in $((SECONDS - start))s (API https://$API_HOST:$API_PORT, KUBECONFIG=$DIR/admin.kubeconfig)"
}

cmd_stop() {
  stop_component kubelet
  unmount_kubelet_root
  stop_component kube-scheduler
  stop_component kube-controller-manager
  stop_component kube-apiserver
  stop_component etcd
  local p left=""
  if [[ -f "$PORTS_FILE" ]]; then
    load_ports
    for p in $ETCD_CLIENT_PORT $ETCD_PEER_PORT $API_PORT $SCHED_PORT $KUBELET_PORT $KUBELET_HEALTHZ_PORT ${CM_PORT:-}; do
      if ss -Htln "sport = :$p" 2>/dev/null | grep -q .; then left+=" $p"; fi
    done
  fi
  [[ -z "$left" ]] || die "ports still listened on after stop:$left"
}

cmd_restart_kubelet() {
  load_start_env
  load_ports
  load_tokens
  stop_component kubelet
  start_kubelet
}

cmd_start_apiserver() {
  load_start_env
  load_ports
  load_tokens
  component_pid kube-apiserver >/dev/null && die "kube-apiserver already runs for $DIR"
  start_apiserver
}

main() {
  (($# == 2)) || usage
  [[ $EUID -eq 0 ]] || die "must run as root"
  local cmd="$1"
  if [[ "$cmd" == stop && ! -d "$2" ]]; then return 0; fi
  set_paths "$2"
  case "$cmd" in
    start) cmd_start ;;
    start-control) cmd_start_control ;;
    start-kubelet) cmd_start_kubelet ;;
    stop) cmd_stop ;;
    restart-kubelet) cmd_restart_kubelet ;;
    stop-apiserver) stop_component kube-apiserver ;;
    start-apiserver) cmd_start_apiserver ;;
    *) usage ;;
  esac
}

main "$@"
