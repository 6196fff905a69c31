#!/usr/bin/env bash
# hack/fleet.sh — a fleet of N simulated nodes against one real API server: what N topolets cost
# the control plane in steady state, and when all of them restart at once (issue 38).
#
# Usage (root, after hack/install-deps.sh and hack/install-kube.sh; take the real-stack lock):
#   FLEET_NODES=10 hack/fleet.sh
#   FLEET_NODES=100 FLEET_OUT=/tmp/fleet-100.json hack/fleet.sh
#
# What runs. One etcd and kube-apiserver (`hack/kube-node.sh start-control`: audit log on, as
# hack/api-cost.sh has it with KUBE_AUDIT=1; NodeRestriction on; no scheduler, no kubelet, no
# controller-manager), topolet's CRD, RBAC (deploy/kubernetes/rbac.yaml: the chart's
# ServiceAccount topolet-system/topolet and ClusterRole) and the chart's node-scope
# ValidatingAdmissionPolicy (deploy/kubernetes/nodescope.yaml). For each node i (0 ≤ i < N):
#   - a Node `fleet-<i>` created as a kubelet registers one (capacity and allocatable of this
#     host's CPUs and memory, which is the topology every topolet here discovers from /sys;
#     Ready True, the three pressure conditions False), as admin;
#   - topolet's identity as the DaemonSet's pod has it: a pod `topolet-fleet-<i>` of the
#     ServiceAccount bound to that node (an object only: no kubelet runs it) and a token of the
#     ServiceAccount bound to that pod (TokenRequest: the API server writes the pod's node into
#     the token, user extra authentication.kubernetes.io/node-name, which nodescope.yaml checks),
#     handed to topolet in a kubeconfig. The one difference from a DaemonSet pod: a kubeconfig, not
#     the in-cluster files, so `[kubernetes] evict_as` "auto" resolves to "self" (the chart's
#     rbac.evictAs=self right, pods/eviction create, is bound to the ServiceAccount here);
#   - a fake NRI runtime (integration/src/bin/fleet_driver.rs: all N in one process) replaying a
#     container churn for pods created through the API with spec.nodeName fleet-<i> (FLEET_PODS per
#     node, mean lifetime FLEET_LIFETIME s);
#   - a release topolet (`[kubernetes] enabled = "on"`, `[reclaimed] enabled = true` with every
#     other reclaimed key at its default but `withdraw_on_stop` (FLEET_WITHDRAW_ON_STOP, "never":
#     what "auto" is under the DaemonSet, whose in-cluster credentials these topolets lack; empty:
#     the key unset, for a binary that predates it), `[eviction]` at its defaults: action "api", the kubelet's
#     hard thresholds; nodefs/imagefs paths point at a small tmpfs of this run's (the host has no
#     /var/lib/kubelet, and a host disk under 10 % free would put every simulated node under
#     disk pressure, evicting the churn's pods: a run on such a disk measured mostly evictions); `[cpu] reserved_cpus = "0"` as hack/api-cost.sh).
# Reclaimed CPU's usage: with usage "cpus" (the default) the regular use is read from the host's
# /proc/stat, the same for every instance: the fleet's own load and the host's other work, so the
# amount changes every few seconds but in step on all nodes (the worst case for synchronized
# writes). The fake runtime's containers have no cgroups, so usage "pods" would read 0 forever.
# With FLEET_STEP_LOAD=1 (the default) topolet's usage is "pods" instead and the regular use a
# real one that changes every few seconds: `colocation steps FLEET_SEED` (hack/bench/colocation,
# the load of hack/api-cost.sh API_RECLAIMED=1: 2-8 s steps of 0-600 milli-CPU; at nice 19 here)
# runs in a cgroup of its own (/topolet-fleet-*/kubepods/burstable/pod<uid>, cpuacct), which is the cgroup parent of one
# long-lived Burstable pod per node (fleet_driver --load-cgroup): every node reads the same load,
# in step (the worst case for synchronized writes), and the host's other work does not count.
#
# Phases: all topolets start together (time until every one is synchronized: its log's NRI
# "synchronized" and "pod watch synced" lines, both needed); FLEET_WARMUP s (60: reclaimed's
# default window fills); the steady window, FLEET_WINDOW s (300: [reclaimed] max_age's default, so
# that it holds every instance's aged rewrite once and enough of the load's steps — a 180 s window
# measured steady rates 10x apart with the same code, docs/src/fleet.md); then the fleet restart: every
# topolet gets SIGTERM and is started again as soon as it has exited, one after the other (a
# DaemonSet rolling update with maxUnavailable 100 %), and FLEET_RESTART_WINDOW s (120) observed
# from the first SIGTERM.
#
# Output: a table on stdout, JSON in FLEET_OUT (default target/fleet-<N>.json): per phase the
# requests per second at the API server by client (topolet: the ServiceAccount; driver: the
# churn's pod creates and deletes, admin) and verb and resource (audit log), topolet's writes per
# node per hour (Node status and Node, NRT, Events, evictions), LISTs without a resourceVersion
# (served from etcd, not the watch cache: from the audit log's requestURI), open watches
# (apiserver_longrunning_requests{verb="WATCH"} at the window's end), the API server's and etcd's
# CPU (utime + stime from /proc/<pid>/stat over the window) and RSS, each topolet's CPU and RSS
# (mean and max over the instances), and for the restart: topolet's request rate in the first
# minute after the first SIGTERM and in the rest of the restart window (60 s to
# FLEET_RESTART_WINDOW s after it: issue 38's goal is "no storm beyond 3x the steady rate after
# the first minute"), each as requests per minute and as a ratio to the steady window's rate, in
# all and by verb and resource; and seconds from the first SIGTERM until every instance was
# synchronized.
#
# Environment: FLEET_NODES (10), FLEET_WINDOW (300), FLEET_WARMUP (60), FLEET_RESTART_WINDOW (120),
# FLEET_PODS (8), FLEET_LIFETIME (300), FLEET_SEED (38), FLEET_STEP_LOAD (1),
# FLEET_WITHDRAW_ON_STOP (never), FLEET_OUT, FLEET_BIN (a topolet binary;
# default: built here with `cargo build --release -p topolet`), FLEET_DRIVER (a built fleet_driver;
# default: built here, `-p topolet-integration --bin fleet_driver`), CARGO_TARGET_DIR. The host is
# left as found: every process started here is stopped and the run's directory removed on every
# exit path (kept, with the logs, when the run fails, or with FLEET_KEEP=1).
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"
SAY_TO_STDERR=1

[[ $EUID -eq 0 ]] || die "needs root (the API server's throwaway stack as hack/kube-node.sh runs it)"
NODES="${FLEET_NODES:-10}"
WINDOW="${FLEET_WINDOW:-300}"
WARMUP="${FLEET_WARMUP:-60}"
RESTART_WINDOW="${FLEET_RESTART_WINDOW:-120}"
PODS="${FLEET_PODS:-8}"
LIFETIME="${FLEET_LIFETIME:-300}"
SEED="${FLEET_SEED:-38}"
WITHDRAW_ON_STOP="${FLEET_WITHDRAW_ON_STOP-never}"
[[ "$WITHDRAW_ON_STOP" =~ ^(|auto|always|never)$ ]] || die "FLEET_WITHDRAW_ON_STOP=$WITHDRAW_ON_STOP: want auto, always, never or empty"
for v in NODES WINDOW WARMUP RESTART_WINDOW PODS LIFETIME SEED; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || die "FLEET_$v=${!v}: want a whole number"
done
((NODES >= 1)) || die "FLEET_NODES must be at least 1"
((RESTART_WINDOW >= 90)) || die "FLEET_RESTART_WINDOW must be at least 90 (the first minute and at least 30 s after it are reported)"
OUT="${FLEET_OUT:-$REPO_ROOT/target/fleet-$NODES.json}"
TARGET="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
BIN="${FLEET_BIN:-}"
DRIVER="${FLEET_DRIVER:-}"
if [[ -z "$BIN" || -z "$DRIVER" ]]; then
  say "building topolet and fleet_driver (release)"
  (cd "$REPO_ROOT" && cargo build -q --release -p topolet -p topolet-integration --bin topolet --bin fleet_driver) ||
    die "cargo build failed"
  BIN="${BIN:-$TARGET/release/topolet}" DRIVER="${DRIVER:-$TARGET/release/fleet_driver}"
fi
[[ -x "$BIN" && -x "$DRIVER" ]] || die "no topolet ($BIN) or fleet_driver ($DRIVER) binary"

WORK="$(mktemp -d /tmp/topolet-fleet.XXXXXX)"
CP="$WORK/cp"
# The simulated nodes' nodefs and imagefs: empty, so that no node is under disk pressure.
mkdir -p "$WORK/fs"
DRIVER_PID="" LOAD_PID="" LOAD_CG="" LOAD_CG_DIR="" LOAD_CG_TOP=""
declare -a TPID=()
stop_pid() { # stop_pid PID: TERM, KILL after 10 s, reaped
  local pid="$1" i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local rc=$? pid
  for pid in "${TPID[@]}"; do [[ -z "$pid" ]] || kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${TPID[@]}"; do [[ -z "$pid" ]] || stop_pid "$pid"; done
  [[ -z "$DRIVER_PID" ]] || stop_pid "$DRIVER_PID"
  [[ -z "$LOAD_PID" ]] || stop_pid "$LOAD_PID"
  local d="$LOAD_CG_DIR"
  while [[ -n "$LOAD_CG_TOP" && "$d" == "$LOAD_CG_TOP"* ]]; do # the pod's cgroup up to the run's own
    [[ ! -d "$d" ]] || rmdir "$d" || { echo "fleet: cannot remove $d" >&2; break; }
    d="${d%/*}"
  done
  "$HACK_DIR/kube-node.sh" stop "$CP" >/dev/null 2>&1 || echo "fleet: stop of $CP failed" >&2
  ! mountpoint -q "$WORK/fs" || umount "$WORK/fs" || echo "fleet: cannot unmount $WORK/fs" >&2
  ((rc == 0)) && [[ "${FLEET_KEEP:-0}" != 1 ]] && rm -rf "$WORK" || echo "fleet: logs kept in $WORK" >&2
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now_iso() { date -u +%Y-%m-%dT%H:%M:%S.%6NZ; }
# cpu_ticks PID: utime + stime (clock ticks) of PID, 0 when it is gone.
cpu_ticks() { awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$1/stat" 2>/dev/null || echo 0; }
rss_kib() { awk '$1 == "VmRSS:" {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

mount -t tmpfs -o size=64m,mode=0755 fleet-fs "$WORK/fs" || die "cannot mount a tmpfs on $WORK/fs"
say "starting etcd and kube-apiserver (audit log on; no kubelet, no scheduler)"
KUBE_AUDIT=1 KUBE_NODE_NAME=fleet-control "$HACK_DIR/kube-node.sh" start-control "$CP" >/dev/null ||
  die "kube-node.sh start-control failed"
# shellcheck disable=SC1091
source "$CP/env"
AUDIT="$CP/audit.log"
APISERVER_PID="$(cat "$CP/kube-apiserver.pid")" ETCD_PID="$(cat "$CP/etcd.pid")"
KCTL=(kubectl --kubeconfig "$KUBECONFIG")

"${KCTL[@]}" apply -f "$REPO_ROOT/deploy/kubernetes/nodescope.yaml" >/dev/null || die "applying nodescope.yaml failed"
"${KCTL[@]}" create namespace fleet >/dev/null
"${KCTL[@]}" create clusterrolebinding topolet-fleet-evict-self --clusterrole topolet-evict-self \
  --serviceaccount topolet-system:topolet >/dev/null || die "binding topolet-evict-self failed"

CPUS="$(nproc)"
MEM_KIB="$(awk '$1 == "MemTotal:" {print $2}' /proc/meminfo)"
say "registering $NODES Nodes (capacity: $CPUS CPUs, ${MEM_KIB}Ki) and topolet's pods"
TS="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
for ((i = 0; i < NODES; i++)); do
  res="{\"cpu\": \"$CPUS\", \"memory\": \"${MEM_KIB}Ki\", \"pods\": \"110\", \"ephemeral-storage\": \"100Gi\"}"
  cond() { printf '{"type": "%s", "status": "%s", "reason": "%s", "lastHeartbeatTime": "%s", "lastTransitionTime": "%s"}' "$1" "$2" "$3" "$TS" "$TS"; }
  cat <<EOT
---
{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "fleet-$i", "labels": {"kubernetes.io/hostname": "fleet-$i", "kubernetes.io/os": "linux"}},
 "status": {"capacity": $res, "allocatable": $res,
  "conditions": [$(cond MemoryPressure False KubeletHasSufficientMemory), $(cond DiskPressure False KubeletHasNoDiskPressure),
                 $(cond PIDPressure False KubeletHasSufficientPID), $(cond Ready True KubeletReady)],
  "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": "fleet-$i"}],
  "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "$(uname -r)", "osImage": "fleet", "containerRuntimeVersion": "containerd://2.2.7",
   "kubeletVersion": "$KUBE_VERSION", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}}}
---
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "topolet-fleet-$i", "namespace": "topolet-system", "labels": {"app.kubernetes.io/name": "topolet"}},
 "spec": {"nodeName": "fleet-$i", "serviceAccountName": "topolet", "automountServiceAccountToken": false,
  "containers": [{"name": "topolet", "image": "$PAUSE_IMAGE"}]}}
EOT
done | "${KCTL[@]}" create -f - >/dev/null || die "creating the Nodes and topolet's pods failed"
[[ "$("${KCTL[@]}" get node fleet-0 -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" == True ]] ||
  die "the Node was created without its status"

say "issuing each topolet its pod-bound ServiceAccount token"
for ((i = 0; i < NODES; i++)); do
  d="$WORK/$i"
  mkdir -p "$d/state"
  tok="$("${KCTL[@]}" create token topolet -n topolet-system --bound-object-kind Pod \
    --bound-object-name "topolet-fleet-$i" --duration 6h)" || die "TokenRequest for topolet-fleet-$i failed"
  umask 077
  cat >"$d/kubeconfig" <<EOT
apiVersion: v1
kind: Config
clusters:
- name: fleet
  cluster: {server: "$KUBE_API_URL", certificate-authority: "$KUBE_CA_FILE"}
users:
- name: topolet
  user: {token: "$tok"}
contexts:
- name: topolet@fleet
  context: {cluster: fleet, user: topolet}
current-context: topolet@fleet
EOT
  umask 022
  cat >"$d/topolet.toml" <<EOT
[nri]
socket = "$d/nri.sock"

[cpu]
reserved_cpus = "0"

[state]
dir = "$d/state"

[admin]
socket = "$d/admin.sock"

[metrics]
address = "127.0.0.1:0"

[eviction]
cri_endpoint = "$d/cri.sock"
nodefs_path = "$WORK/fs"
imagefs_path = "$WORK/fs"

[reclaimed]
enabled = true
${WITHDRAW_ON_STOP:+withdraw_on_stop = \"$WITHDRAW_ON_STOP\"}

[kubernetes]
enabled = "on"
kubeconfig = "$d/kubeconfig"
node_name = "fleet-$i"
EOT
done

LOAD_ARGS=() USAGE=cpus
if [[ "${FLEET_STEP_LOAD:-1}" == 1 ]]; then
  GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
  # Standard library only: nothing to fetch (as hack/api-cost.sh builds it).
  (cd "$HACK_DIR/bench/colocation" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false GOCACHE="$WORK/gocache" \
    "$GO" build -trimpath -o "$WORK/colocation" .) || die "building hack/bench/colocation failed"
  # A kubelet pod cgroup's shape (cgroupfs driver): topolet keeps only sandboxes whose cgroup
  # parent names a QoS class and a pod uid.
  LOAD_CG="/topolet-fleet-${WORK##*.}/kubepods/burstable/podf1ee7000-0000-4000-8000-000000000038"
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then LOAD_CG_TOP=/sys/fs/cgroup; else LOAD_CG_TOP=/sys/fs/cgroup/cpuacct; fi
  LOAD_CG_DIR="$LOAD_CG_TOP$LOAD_CG" LOAD_CG_TOP="$LOAD_CG_TOP/topolet-fleet-${WORK##*.}"
  mkdir -p "$LOAD_CG_DIR" || die "cannot create the load cgroup $LOAD_CG_DIR"
  LOAD_ARGS=(--load-cgroup "$LOAD_CG") USAGE=pods
  sed -i 's/^\[reclaimed\]$/[reclaimed]\nusage = "pods"/' "$WORK"/*/topolet.toml
fi
say "starting the fleet driver ($NODES fake runtimes, $PODS pods per node, mean lifetime ${LIFETIME}s; reclaimed usage \"$USAGE\")"
"$DRIVER" --dir "$WORK" --nodes "$NODES" --kubeconfig "$KUBECONFIG" --pods "$PODS" \
  --lifetime-s "$LIFETIME" --seed "$SEED" "${LOAD_ARGS[@]}" 2>"$WORK/driver.log" &
DRIVER_PID=$!
deadline=$((SECONDS + 60))
until [[ -f "$WORK/driver.ready" ]]; do
  kill -0 "$DRIVER_PID" 2>/dev/null || { tail -n 20 "$WORK/driver.log" >&2; die "the fleet driver exited"; }
  ((SECONDS < deadline)) || die "the fleet driver bound no sockets in 60s"
  sleep 0.2
done

# start_topolet I GEN: topolet I's GEN-th run (its own log).
start_topolet() {
  local d="$WORK/$1"
  "$BIN" run --config "$d/topolet.toml" --log-file "$d/topolet.$2.log" 2>>"$d/stderr" &
  TPID[$1]=$!
}
# synced_at I GEN: the log time at which run GEN of topolet I had both its NRI "synchronized"
# and "pod watch synced" lines; fails when it has not.
synced_at() {
  awk '/ synchronized( |$)/ && !a {a = $1} /pod watch synced/ && !b {b = $1}
       END {if (a == "" || b == "") exit 1; print (a > b ? a : b)}' "$WORK/$1/topolet.$2.log" 2>/dev/null
}
# wait_synced GEN T0 FILE: until every instance's run GEN is synchronized (or 300 s); writes
# "I ISO-TIME" lines to FILE.
wait_synced() {
  local gen="$1" file="$3" deadline=$((SECONDS + 300)) i t left
  : >"$file"
  declare -A done_=()
  while :; do
    left=0
    for ((i = 0; i < NODES; i++)); do
      [[ -z "${done_[$i]:-}" ]] || continue
      if t="$(synced_at "$i" "$gen")"; then
        done_[$i]=1
        echo "$i $t" >>"$file"
      else
        left=$((left + 1))
      fi
    done
    ((left > 0)) || return 0
    ((SECONDS < deadline)) || { warn "$left instances not synchronized 300 s after $2"; return 0; }
    sleep 0.5
  done
}

START0="$(now_iso)"
say "starting $NODES topolets"
for ((i = 0; i < NODES; i++)); do start_topolet "$i" 0; done
wait_synced 0 "$START0" "$WORK/synced.0"
if [[ -n "$LOAD_CG" ]]; then
  # The steps' process alone in the load cgroup (moved there before it execs), at nice 19.
  # shellcheck disable=SC2016  # expanded by sh
  setsid sh -c 'echo $$ >"$1/cgroup.procs" && exec nice -n 19 "$2" steps "$3"' _ "$LOAD_CG_DIR" "$WORK/colocation" "$SEED" \
    </dev/null >"$WORK/load.log" 2>&1 &
  LOAD_PID=$!
fi
say "$(wc -l <"$WORK/synced.0") of $NODES synchronized; warm-up ${WARMUP}s"
sleep "$WARMUP"

# snapshot NAME: the processes' CPU ticks and RSS, and the API server's open watches, to NAME.json.
snapshot() {
  local i tl=() rl=() pl=() watches
  for ((i = 0; i < NODES; i++)); do
    tl+=("$(cpu_ticks "${TPID[$i]}")") rl+=("$(rss_kib "${TPID[$i]}")") pl+=("${TPID[$i]}")
  done
  watches="$(curl -fsS -m 10 --cacert "$KUBE_CA_FILE" -H "Authorization: Bearer $KUBE_ADMIN_TOKEN" "$KUBE_API_URL/metrics" |
    awk '/^apiserver_longrunning_requests\{/ && /verb="WATCH"/ {
           r = "-"; if (match($0, /[{,]resource="[^"]*"/)) r = substr($0, RSTART + 11, RLENGTH - 12); w[r] += $NF; t += $NF}
         END {printf "{\"total\": %d", t; for (k in w) printf ", \"%s\": %d", k, w[k]; printf "}"}')" || watches='{}'
  printf '{"time": "%s", "apiserver_ticks": %s, "etcd_ticks": %s, "driver_ticks": %s, "apiserver_rss_kib": %s, "etcd_rss_kib": %s, "topolet_ticks": [%s], "topolet_rss_kib": [%s], "topolet_pids": [%s], "watches": %s}\n' \
    "$(now_iso)" "$(cpu_ticks "$APISERVER_PID")" "$(cpu_ticks "$ETCD_PID")" "$(cpu_ticks "$DRIVER_PID")" \
    "$(rss_kib "$APISERVER_PID")" "$(rss_kib "$ETCD_PID")" \
    "$(IFS=,; echo "${tl[*]}")" "$(IFS=,; echo "${rl[*]}")" "$(IFS=,; echo "${pl[*]}")" "$watches" >"$WORK/$1.json"
}

say "steady window: ${WINDOW}s"
snapshot steady0
sleep "$WINDOW"
snapshot steady1

say "fleet restart: SIGTERM to all $NODES, each started again once it exited"
snapshot restart0
for ((i = 0; i < NODES; i++)); do kill -TERM "${TPID[$i]}" 2>/dev/null || true; done
for ((i = 0; i < NODES; i++)); do
  wait "${TPID[$i]}" 2>/dev/null || true
  start_topolet "$i" 1
done
RESTARTED="$(now_iso)"
wait_synced 1 "$RESTARTED" "$WORK/synced.1" &
SYNC_WAITER=$!
sleep "$RESTART_WINDOW"
wait "$SYNC_WAITER" || true
snapshot restart1
cp "$WORK/driver.json" "$WORK/driver.end.json" 2>/dev/null || true

python3 - "$WORK" "$AUDIT" "$OUT" "$NODES" "$(getconf CLK_TCK)" "$RESTARTED" "$START0" "$USAGE" <<'EOT'
import collections, json, sys, urllib.parse
from datetime import datetime, timedelta
work, audit, out_path, nodes, tck, restarted, start0, usage = sys.argv[1:9]
nodes, tck = int(nodes), int(tck)
def ts(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00"))
snap = {n: json.load(open(f"{work}/{n}.json")) for n in ("steady0", "steady1", "restart0", "restart1")}
SA = "system:serviceaccount:topolet-system:topolet"
entries = []
for line in open(audit):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("stage") != "ResponseComplete":
        continue
    ref = e.get("objectRef") or {}
    res = ref.get("resource", "-") + ("/" + ref["subresource"] if ref.get("subresource") else "")
    user = e["user"]["username"]
    who = "topolet" if user == SA else ("driver" if user == "admin" else "other")
    entries.append((ts(e["requestReceivedTimestamp"]), who, e["verb"], res, e.get("requestURI", ""),
                    (e.get("responseStatus") or {}).get("code", 0)))
def window(t0, t1):
    return [x for x in entries if t0 <= x[0] < t1]
def rv_unset(uri):
    q = urllib.parse.parse_qs(urllib.parse.urlsplit(uri).query, keep_blank_values=True)
    return not q.get("resourceVersion", [""])[0]
def figures(name, a, b, restart_t0=None):
    t0, t1 = ts(a["time"]), ts(b["time"])
    secs = (t1 - t0).total_seconds()
    w = window(t0, t1)
    by = collections.Counter((who, verb, res) for _, who, verb, res, _, _ in w)
    top = [x for x in w if x[1] == "topolet"]
    writes = collections.Counter()
    for _, _, verb, res, _, _ in top:
        if verb in ("patch", "update") and res in ("nodes", "nodes/status"):
            writes["node"] += 1
        elif verb in ("create", "update", "patch") and res == "noderesourcetopologies":
            writes["nrt"] += 1
        elif verb in ("create", "patch") and res == "events":
            writes["events"] += 1
        elif verb == "create" and res == "pods/eviction":
            writes["evictions"] += 1
    per_node_hour = {k: round(writes[k] / nodes / secs * 3600, 1) for k in ("node", "nrt", "events", "evictions")}
    per_node_hour["all_writes"] = round(sum(writes.values()) / nodes / secs * 3600, 1)
    per_node_hour["all_requests"] = round(len(top) / nodes / secs * 3600, 1)
    lists_unset = [x for x in top if x[2] == "list" and rv_unset(x[4])]
    errors = collections.Counter(x[5] for x in top if x[5] >= 400)
    # A restarted instance (another pid at the end) used all its ticks inside the window.
    tt = [(y - (x if pa == pb else 0)) / tck
          for x, y, pa, pb in zip(a["topolet_ticks"], b["topolet_ticks"], a["topolet_pids"], b["topolet_pids"])]
    f = {
        "seconds": round(secs, 1),
        "rps": {f"{who} {verb} {res}": round(k / secs, 3) for (who, verb, res), k in sorted(by.items())},
        "rps_total": {who: round(sum(k for (w_, _, _), k in by.items() if w_ == who) / secs, 3)
                      for who in ("topolet", "driver", "other")},
        "topolet_per_node_per_hour": per_node_hour,
        "topolet_lists_without_resource_version": len(lists_unset),
        "topolet_error_codes": dict(errors),
        "open_watches_end": b["watches"],
        "apiserver_cpu_percent": round((b["apiserver_ticks"] - a["apiserver_ticks"]) / tck / secs * 100, 2),
        "etcd_cpu_percent": round((b["etcd_ticks"] - a["etcd_ticks"]) / tck / secs * 100, 2),
        "driver_cpu_percent": round((b["driver_ticks"] - a["driver_ticks"]) / tck / secs * 100, 2),
        "apiserver_rss_mib": round(b["apiserver_rss_kib"] / 1024, 1),
        "etcd_rss_mib": round(b["etcd_rss_kib"] / 1024, 1),
        "topolet_cpu_percent_mean": round(sum(tt) / len(tt) / secs * 100, 3) if tt else None,
        "topolet_cpu_percent_max": round(max(tt) / secs * 100, 3) if tt else None,
        "topolet_rss_mib_mean": round(sum(b["topolet_rss_kib"]) / len(b["topolet_rss_kib"]) / 1024, 2),
        "topolet_rss_mib_max": round(max(b["topolet_rss_kib"]) / 1024, 2),
    }
    f["topolet_per_minute_by"] = per_minute([x for x in top], secs)
    if restart_t0 is not None:
        minute = restart_t0 + timedelta(seconds=60)
        first = [x for x in top if restart_t0 <= x[0] < minute]
        after = [x for x in top if minute <= x[0] < t1]
        f["topolet_requests_first_minute"] = len(first)
        f["topolet_first_minute_by"] = dict(collections.Counter(f"{v} {r}" for _, _, v, r, _, _ in first))
        f["after_first_minute_seconds"] = round((t1 - minute).total_seconds(), 1)
        f["topolet_requests_after_first_minute"] = len(after)
        f["topolet_after_first_minute_per_minute_by"] = per_minute(after, (t1 - minute).total_seconds())
        f["topolet_lists_without_resource_version_uris"] = sorted({x[4] for x in lists_unset})[:10]
    return f
def per_minute(xs, secs):
    """Requests per minute by "verb resource" over a span of secs seconds."""
    c = collections.Counter(f"{v} {r}" for _, _, v, r, _, _ in xs)
    return {k: round(n / secs * 60, 3) for k, n in sorted(c.items())} if secs > 0 else {}
out = {"nodes": nodes, "reclaimed_usage": usage, "steady": figures("steady", snap["steady0"], snap["steady1"])}
r0 = ts(snap["restart0"]["time"])
out["restart"] = figures("restart", snap["restart0"], snap["restart1"], restart_t0=r0)
steady_per_min = out["steady"]["rps_total"]["topolet"] * 60
out["restart"]["steady_topolet_requests_per_minute"] = round(steady_per_min, 1)
out["restart"]["first_minute_vs_steady"] = round(out["restart"]["topolet_requests_first_minute"] / steady_per_min, 2) if steady_per_min else None
r_ = out["restart"]
after_per_min = r_["topolet_requests_after_first_minute"] / r_["after_first_minute_seconds"] * 60 if r_["after_first_minute_seconds"] > 0 else 0
r_["topolet_after_first_minute_per_minute"] = round(after_per_min, 1)
r_["after_first_minute_vs_steady"] = round(after_per_min / steady_per_min, 2) if steady_per_min else None
# By verb and resource: each window's rate per minute beside the steady one (ratio None: the
# steady window had no such request).
steady_by = out["steady"]["topolet_per_minute_by"]
first_by = {k: round(v, 3) for k, v in r_["topolet_first_minute_by"].items()}  # one minute: count = rate
after_by = r_["topolet_after_first_minute_per_minute_by"]
r_["vs_steady_by"] = {
    k: {"steady_per_min": steady_by.get(k, 0), "first_minute": first_by.get(k, 0),
        "first_minute_ratio": round(first_by.get(k, 0) / steady_by[k], 2) if steady_by.get(k) else None,
        "after_per_min": after_by.get(k, 0),
        "after_ratio": round(after_by.get(k, 0) / steady_by[k], 2) if steady_by.get(k) else None}
    for k in sorted(set(steady_by) | set(first_by) | set(after_by))}
def sync_secs(path, t0):
    try:
        ts_ = [ts(l.split()[1]) for l in open(path) if l.strip()]
    except OSError:
        return None, 0
    return (round(max((t - t0).total_seconds() for t in ts_), 2) if ts_ else None), len(ts_)
out["start_all_synchronized_s"], out["start_synchronized"] = sync_secs(f"{work}/synced.0", ts(start0))
out["restart_all_synchronized_s"], out["restart_synchronized"] = sync_secs(f"{work}/synced.1", r0)
try:
    out["driver"] = json.load(open(f"{work}/driver.end.json"))
except (OSError, ValueError):
    pass
json.dump(out, open(out_path, "w"), indent=1)
s, r = out["steady"], out["restart"]
print(f"## fleet of {nodes}: steady {s['seconds']:.0f} s, restart window {r['seconds']:.0f} s, reclaimed usage {usage!r}")
print()
print("| requests per second (steady) | client | verb | resource |")
print("|---:|---|---|---|")
for k, v in sorted(s["rps"].items(), key=lambda kv: -kv[1]):
    who, verb, res = k.split(" ", 2)
    print(f"| {v:.3f} | {who} | {verb} | {res} |")
print()
print("| figure | steady | restart window |")
print("|---|---:|---:|")
rows = [("topolet requests/s, all nodes", lambda f: f["rps_total"]["topolet"]),
        ("driver (pod churn) requests/s", lambda f: f["rps_total"]["driver"]),
        ("other requests/s (API server's own)", lambda f: f["rps_total"]["other"])]
for k in ("node", "nrt", "events", "evictions", "all_writes", "all_requests"):
    rows.append((f"topolet per node per hour: {k}", lambda f, k=k: f["topolet_per_node_per_hour"][k]))
rows += [("topolet LISTs without resourceVersion", lambda f: f["topolet_lists_without_resource_version"]),
         ("open watches at the end (all clients)", lambda f: f["open_watches_end"].get("total", "-")),
         ("open watches at the end by resource", lambda f: ", ".join(f"{k} {v}" for k, v in sorted(f["open_watches_end"].items()) if k != "total")),
         ("kube-apiserver CPU %", lambda f: f["apiserver_cpu_percent"]),
         ("etcd CPU %", lambda f: f["etcd_cpu_percent"]),
         ("fleet driver CPU %", lambda f: f["driver_cpu_percent"]),
         ("kube-apiserver RSS MiB", lambda f: f["apiserver_rss_mib"]),
         ("etcd RSS MiB", lambda f: f["etcd_rss_mib"]),
         ("topolet CPU % per instance, mean / max", lambda f: f"{f['topolet_cpu_percent_mean']} / {f['topolet_cpu_percent_max']}"),
         ("topolet RSS MiB per instance, mean / max", lambda f: f"{f['topolet_rss_mib_mean']} / {f['topolet_rss_mib_max']}"),
         ("topolet error responses (code: count)", lambda f: f["topolet_error_codes"] or "-")]
for name, get in rows:
    print(f"| {name} | {get(s)} | {get(r)} |")
print()
print("| restart | |")
print("|---|---:|")
print(f"| topolet requests in the first minute | {r['topolet_requests_first_minute']} |")
print(f"| topolet requests per minute, steady | {r['steady_topolet_requests_per_minute']} |")
print(f"| first minute / steady | {r['first_minute_vs_steady']} |")
print(f"| topolet requests per minute after the first minute ({r['after_first_minute_seconds']:.0f} s: 60 s to the window's end) | {r['topolet_after_first_minute_per_minute']} |")
print(f"| after the first minute / steady (goal: at most 3) | {r['after_first_minute_vs_steady']} |")
print(f"| first start: all synchronized after (s), count | {out['start_all_synchronized_s']}, {out['start_synchronized']}/{nodes} |")
print(f"| restart: all synchronized after first SIGTERM (s), count | {out['restart_all_synchronized_s']}, {out['restart_synchronized']}/{nodes} |")
print(f"| first minute by verb and resource | {r['topolet_first_minute_by']} |")
print()
print("| topolet verb resource | steady per minute | first minute | / steady | after it, per minute | / steady |")
print("|---|---:|---:|---:|---:|---:|")
for k, v in r["vs_steady_by"].items():
    ratio = lambda x: "-" if x is None else x
    print(f"| {k} | {v['steady_per_min']} | {v['first_minute']} | {ratio(v['first_minute_ratio'])} | {v['after_per_min']} | {ratio(v['after_ratio'])} |")
if r.get("topolet_lists_without_resource_version_uris"):
    print(f"| LIST URIs without resourceVersion | {r['topolet_lists_without_resource_version_uris']} |")
EOT
