#!/usr/bin/env bash
# hack/api-cost.sh — what topolet costs the API server on an idle node (or one whose reclaimed CPU
# follows a changing load), against the kubelet's own requests, two topolet binaries side by side in
# one run.
#
# Usage (root, after hack/install-deps.sh and hack/install-kube.sh; take the real-stack lock):
#   API_BASE_BIN=/a/topolet API_BIN=/b/topolet hack/api-cost.sh
#   API_RECLAIMED=1 API_SECONDS=600 API_BASE_BIN=/a/topolet API_BIN=/b/topolet hack/api-cost.sh
#
# Method. One isolated containerd (hack/containerd.sh) and single-node cluster (hack/kube-node.sh
# with KUBE_AUDIT=1: the API server's audit log, one JSON line per request). For each binary in
# turn (base first; with API_ROUNDS=N, N rounds whose order flips: base topolet, topolet base, ...,
# each binary's windows pooled), a fresh topolet with its API client on (the cluster's `topolet` user, eviction
# dry-run) waits until its pod store is synced, then the node is left alone for API_SECONDS; the
# audit entries of that window are counted by user, verb and resource (subresource appended), and
# scaled to one hour. The kubelet's (user system:node:<node>) are counted in the same windows.
# Output: a table on stdout, JSON in API_OUT (default target/api-cost.json): per binary "per_hour"
# (client, verb, resource) and "summary" (per hour: node_writes, topolet's patches of nodes and
# nodes/status; nrt_writes, its creates, updates and patches of noderesourcetopologies;
# topolet_total; kubelet_total), also printed side by side.
#
# API_RECLAIMED=1: the Node and NodeResourceTopology writes of reclaimed CPU under a changing load.
# topolet runs with `[reclaimed] enabled = true` and every other reclaimed key at its default
# (window 1 min at the peak, min_change_percent 10, max_age 5 min; this stack's [cpu]
# reserved_cpus = "0" leaves CPU 1 as the pool on a 2-CPU host) but usage, API_RECLAIMED_USAGE,
# "pods" unless told: the test stack shares its host with other work (the CI host's builds), which
# the default "cpus" counts as regular use; one busy second of it holds the window's peak at the
# whole pool and the amount at 0 for a minute, so the writes would follow the host's builds, not
# the load (seen: a compile beside the cluster kept the amount at 0 through a window). "pods"
# counts the regular pods' cgroups, here the load pod alone. In each window, once the pod
# watch is synced, a regular Burstable pod `load` (300m CPU request, no limit, bound to the node,
# hostNetwork: the stack has no pod network) runs `colocation steps API_SEED` (hack/bench/colocation,
# from a hostPath directory): 2-8 s steps of 0-600 milli-CPU on two threads, the same sequence for
# both binaries. The window starts API_WARMUP seconds (default 60: the default `window`, full of
# the load) after the pod is Running, and the pod is deleted after it, topolet still running. Every
# 5 s the window samples topolet's topolet_reclaimed_cpu_advertised_millicpu{zone="node"}; its
# topolet_reclaimed_cpu_publishes_total and topolet_nrt_writes_total are read at both ends; the
# load average at both ends (the host's other work counts as regular use with usage = "cpus").
#
# Environment: API_BASE_BIN, API_BIN (required), API_SECONDS (300), API_OUT, CONTAINERD_VERSION,
# API_PRESSURE (0; 1: a node under pressure: a nodefs.available threshold that is always met, so
# the eviction loop ranks the node's pods, dry-run, every 10 s interval and wants their facts),
# API_PODS (0: pods bound to the node before the windows, each asking 1000 CPUs, so the kubelet
# rejects it (OutOfcpu, phase Failed) and runs no container: pod objects for the watch's store
# without containers on a 2-CPU host). Each window also reports topolet's VmRSS and RssAnon at
# its end (/proc/<pid>/status), with its store's pod count (topolet_kube_pod_store_pods).
# API_ROUNDS (1), API_RECLAIMED (0), API_RECLAIMED_USAGE (pods), API_SEED (34), API_WARMUP (60 with API_RECLAIMED=1, else 0), API_PROBE (a
# built hack/bench/colocation; default: built here with GO, else go on PATH, else
# /usr/local/go/bin/go).
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"
die() { echo "api-cost: error: $*" >&2; exit 1; }
say() { echo "api-cost: $*" >&2; }

[[ $EUID -eq 0 ]] || die "needs root (containerd, kubelet)"
declare -A BIN=([base]="${API_BASE_BIN:-}" [topolet]="${API_BIN:-}")
for b in base topolet; do [[ -x "${BIN[$b]}" ]] || die "API_BASE_BIN and API_BIN must be topolet binaries"; done
WINDOW="${API_SECONDS:-300}"
OUT="${API_OUT:-$REPO_ROOT/target/api-cost.json}"
RECLAIMED="${API_RECLAIMED:-0}"
USAGE="${API_RECLAIMED_USAGE:-pods}"
SEED="${API_SEED:-34}"
WARMUP="${API_WARMUP:-$([[ "$RECLAIMED" == 1 ]] && echo 60 || echo 0)}"
[[ "$RECLAIMED" == [01] ]] || die "API_RECLAIMED=$RECLAIMED: want 0 or 1"
[[ "$USAGE" == pods || "$USAGE" == cpus ]] || die "API_RECLAIMED_USAGE=$USAGE: want pods or cpus"
ROUNDS="${API_ROUNDS:-1}"
for v in WINDOW SEED WARMUP ROUNDS; do [[ "${!v}" =~ ^[0-9]+$ ]] || die "$v=${!v}: want a whole number"; done
export CONTAINERD_VERSION="${CONTAINERD_VERSION:-${TOPOLET_CONTAINERD_VERSION:-v2.4.2}}"

WORK="$(mktemp -d /tmp/topolet-api.XXXXXX)"
STACK="$WORK/stack"
NODE="$WORK/node"
PLUGIN_PID=""
cleanup() {
  local rc=$?
  [[ -z "$PLUGIN_PID" ]] || { kill -TERM "$PLUGIN_PID" 2>/dev/null || true; wait "$PLUGIN_PID" 2>/dev/null || true; }
  "$HACK_DIR/kube-node.sh" stop "$NODE" >/dev/null 2>&1 || echo "api-cost: stop of $NODE failed" >&2
  "$HACK_DIR/containerd.sh" stop "$STACK" >/dev/null 2>&1 || echo "api-cost: stop of $STACK failed" >&2
  ((rc == 0)) && rm -rf "$WORK" || echo "api-cost: logs kept in $WORK" >&2
  exit "$rc"
}
trap cleanup EXIT

LOAD_DIR="$WORK/load" # the hostPath directory of the load pod: the colocation binary
if [[ "$RECLAIMED" == 1 ]]; then
  mkdir -p "$LOAD_DIR"
  if [[ -n "${API_PROBE:-}" ]]; then
    cp "$API_PROBE" "$LOAD_DIR/colocation" || die "API_PROBE=$API_PROBE: cannot copy it"
  else
    GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
    # Standard library only: nothing to fetch (as integration/src/probe.rs builds it).
    (cd "$HACK_DIR/bench/colocation" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false \
      "$GO" build -trimpath -o "$LOAD_DIR/colocation" .) || die "building hack/bench/colocation failed"
  fi
fi
# metric_sum ADDR NAME [MATCH]: the sum of NAME's samples on topolet's /metrics at ADDR (those
# whose labels contain MATCH), 0 when it has none.
metric_sum() {
  curl -fsS -m 5 "http://$1/metrics" |
    awk -v n="$2" -v m="${3:-}" '($1 == n || index($1, n "{") == 1) && index($1, m) {s += $2} END {print s + 0}'
}
load1() { cut -d' ' -f1 /proc/loadavg; }

say "starting containerd $CONTAINERD_VERSION and the cluster (audit log on)"
"$HACK_DIR/containerd.sh" start "$STACK" >/dev/null || die "containerd.sh start failed"
KUBE_RUNTIME_DIR="$STACK" KUBE_AUDIT=1 "$HACK_DIR/kube-node.sh" start "$NODE" >/dev/null || die "kube-node.sh start failed"
# shellcheck disable=SC1091
source "$STACK/env"
# shellcheck disable=SC1091
source "$NODE/env"
AUDIT="$NODE/audit.log"

RESULTS="$WORK/results.jsonl"
PODS="${API_PODS:-0}"
if ((PODS > 0)); then
  say "creating $PODS pods bound to $KUBE_NODE_NAME that the kubelet rejects (1000 CPUs each)"
  for ((i = 0; i < PODS; i++)); do
    printf -- '---\n{"apiVersion":"v1","kind":"Pod","metadata":{"name":"rss-%d","namespace":"default"},"spec":{"nodeName":"%s","containers":[{"name":"c","image":"%s","resources":{"requests":{"cpu":"1000"}}}]}}\n' \
      "$i" "$KUBE_NODE_NAME" "$TEST_IMAGE"
  done | kubectl create -f - >/dev/null || die "creating $PODS pods failed"
  deadline=$((SECONDS + 600))
  until (($(kubectl get pods -n default --field-selector status.phase=Failed --no-headers 2>/dev/null | wc -l) >= PODS)); do
    ((SECONDS < deadline)) || die "the kubelet did not reject all $PODS pods in 600s"
    sleep 2
  done
  say "$PODS pods Failed (OutOfcpu)"
fi
: >"$RESULTS"
ORDER=()
for ((r = 0; r < ROUNDS; r++)); do
  if ((r % 2 == 0)); then ORDER+=(base topolet); else ORDER+=(topolet base); fi
done
n=0
for b in "${ORDER[@]}"; do
  n=$((n + 1))
  dir="$WORK/$n-$b"
  mkdir -p "$dir"
  cat >"$dir/topolet.toml" <<EOT
[nri]
socket = "$NRI_SOCKET"

[cpu]
reserved_cpus = "0"

[state]
dir = "$dir/state"

[admin]
socket = "$dir/admin.sock"

[metrics]
address = "127.0.0.1:0"

[eviction]
action = "dry-run"
cri_endpoint = "${CRI_ENDPOINT#unix://}"
$([[ "${API_PRESSURE:-0}" != 1 ]] || echo 'hard = { "nodefs.available" = "1000Pi" }')
$([[ "$RECLAIMED" != 1 ]] || printf '\n[reclaimed]\nenabled = true\nusage = "%s"\n' "$USAGE")

[kubernetes]
enabled = "on"
kubeconfig = "$KUBE_TOPOLET_KUBECONFIG"
node_name = "$KUBE_NODE_NAME"
EOT
  "${BIN[$b]}" run --config "$dir/topolet.toml" --log-file "$dir/topolet.log" 2>"$dir/stderr" &
  PLUGIN_PID=$!
  deadline=$((SECONDS + 60))
  until grep -q "pod watch synced" "$dir/topolet.log" 2>/dev/null; do
    ((SECONDS < deadline)) || die "$b: the pod watch never synced (log: $dir/topolet.log)"
    sleep 0.2
  done
  addr="$(sed -nE 's/.*metrics endpoint listening.*address=([0-9.:]+).*/\1/p' "$dir/topolet.log" | head -1)"
  [[ -n "$addr" ]] || die "$b: no metrics address in $dir/topolet.log"
  reclaimed='{}'
  if [[ "$RECLAIMED" == 1 ]]; then
    kubectl create -f - >/dev/null <<EOT || die "$b: creating the load pod failed"
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "load", "namespace": "default"},
 "spec": {"nodeName": "$KUBE_NODE_NAME", "hostNetwork": true, "automountServiceAccountToken": false,
  "terminationGracePeriodSeconds": 5,
  "containers": [{"name": "main", "image": "$TEST_IMAGE", "imagePullPolicy": "Never",
   "command": ["sh", "-c", "trap 'kill \$p; exit 0' TERM; /load/colocation steps $SEED & p=\$!; wait"],
   "resources": {"requests": {"cpu": "300m", "memory": "32Mi"}},
   "volumeMounts": [{"name": "load", "mountPath": "/load"}]}],
  "volumes": [{"name": "load", "hostPath": {"path": "$LOAD_DIR", "type": "Directory"}}]}}
EOT
    kubectl wait --for=condition=Ready pod/load --timeout=120s >/dev/null || die "$b: the load pod is not Ready in 120s"
    say "$b: load pod running (steps from seed $SEED, usage = $USAGE); warm-up ${WARMUP}s"
  fi
  sleep "$WARMUP"
  start="$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)"
  if [[ "$RECLAIMED" == 1 ]]; then
    say "$b: synced; under the load for ${WINDOW}s from $start"
    pub0="$(metric_sum "$addr" topolet_reclaimed_cpu_publishes_total)" nrt0="$(metric_sum "$addr" topolet_nrt_writes_total)"
    la0="$(load1)" samples=()
    until_s=$((SECONDS + WINDOW))
    while ((SECONDS < until_s)); do
      samples+=("$(metric_sum "$addr" topolet_reclaimed_cpu_advertised_millicpu 'zone="node"')")
      sleep "$((until_s - SECONDS < 5 ? until_s - SECONDS : 5))"
    done
  else
    say "$b: synced; idle for ${WINDOW}s from $start"
    sleep "$WINDOW"
  fi
  end="$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)"
  if [[ "$RECLAIMED" == 1 ]]; then
    pub1="$(metric_sum "$addr" topolet_reclaimed_cpu_publishes_total)" nrt1="$(metric_sum "$addr" topolet_nrt_writes_total)"
    reclaimed="$(printf '{"usage": "%s", "seed": %s, "advertised_node_millis": [%s], "publishes": %s, "nrt_writes": %s, "loadavg1": [%s, %s]}' \
      "$USAGE" "$SEED" "$(IFS=,; echo "${samples[*]}")" "$((pub1 - pub0))" "$((nrt1 - nrt0))" "$la0" "$(load1)")"
    kubectl delete pod load --timeout=60s >/dev/null || die "$b: deleting the load pod failed"
  fi
  kib() { awk -v f="$1:" '$1 == f {print $2}' "/proc/$PLUGIN_PID/status"; }
  rss="$(kib VmRSS)" anon="$(kib RssAnon)"
  entries="$(curl -fsS "http://$addr/metrics" | awk '$1 == "topolet_kube_pod_store_pods" {print $2}')"
  [[ -n "$rss" && -n "$entries" ]] || die "$b: no VmRSS or store entries (metrics at $addr)"
  kill -TERM "$PLUGIN_PID"; wait "$PLUGIN_PID" 2>/dev/null || true
  PLUGIN_PID=""
  printf '{"bin": "%s", "start": "%s", "end": "%s", "rss_kib": %s, "anon_kib": %s, "store_entries": %s, "reclaimed": %s}\n' \
    "$b" "$start" "$end" "$rss" "$anon" "$entries" "$reclaimed" >>"$RESULTS"
done

python3 - "$RESULTS" "$AUDIT" "$OUT" "$KUBE_NODE_NAME" <<'EOT'
import collections, json, sys
from datetime import datetime
runs = [json.loads(l) for l in open(sys.argv[1])]
node = sys.argv[4]
def ts(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00"))
entries = []
for line in open(sys.argv[2]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("stage") != "ResponseComplete":
        continue
    ref = e.get("objectRef") or {}
    res = ref.get("resource", "-") + ("/" + ref["subresource"] if ref.get("subresource") else "")
    entries.append((ts(e["requestReceivedTimestamp"]), e["user"]["username"], e["verb"], res))
bins = list(dict.fromkeys(r["bin"] for r in runs))
out = {}
print("| binary | client | verb | resource | requests in its windows | per hour |")
print("|---|---|---|---|---:|---:|")
for b in bins:
    windows = [r for r in runs if r["bin"] == b]
    spans = [(ts(r["start"]), ts(r["end"])) for r in windows]
    seconds = sum((t1 - t0).total_seconds() for t0, t1 in spans)
    hours = seconds / 3600
    counts, n = collections.Counter(), collections.Counter()
    for t, user, verb, res in entries:
        if not any(t0 <= t < t1 for t0, t1 in spans):
            continue
        who = "topolet" if user == "topolet" else ("kubelet" if user == f"system:node:{node}" else None)
        if not who:
            continue
        counts[(who, verb, res)] += 1
        n[f"{who}_total"] += 1
        if who == "topolet":
            n["node_writes"] += verb in ("patch", "update") and res in ("nodes", "nodes/status")
            n["nrt_writes"] += verb in ("create", "update", "patch") and res == "noderesourcetopologies"
    w = out[b] = {"seconds": seconds, "windows": len(windows), "per_hour": {}}
    for (who, verb, res), k in sorted(counts.items()):
        w["per_hour"][f"{who} {verb} {res}"] = round(k / hours, 1)
        print(f"| {b} | {who} | {verb} | {res} | {k} | {k / hours:.0f} |")
    for who in ("topolet", "kubelet"):
        w["per_hour"][f"{who} total"] = round(n[f"{who}_total"] / hours, 1)
        print(f"| {b} | **{who} total** | | | {n[f'{who}_total']} | {n[f'{who}_total'] / hours:.0f} |")
    w["summary"] = {k: round(n[k] / hours, 1) for k in ("node_writes", "nrt_writes", "topolet_total", "kubelet_total")}
    if all(r.get("reclaimed") for r in windows):
        w["reclaimed"] = [r["reclaimed"] for r in windows]
print()
spans = ", ".join(f"{b} {out[b]['seconds']:.0f} s" for b in bins)
print(f"| per hour ({spans}) | " + " | ".join(bins) + " |")
print("|---|" + "---:|" * len(bins))
for k, name in (("node_writes", "topolet: Node writes (patch nodes/status, nodes)"),
                ("nrt_writes", "topolet: NodeResourceTopology writes (create, update, patch)"),
                ("topolet_total", "topolet: all requests"), ("kubelet_total", "kubelet: all requests")):
    print(f"| {name} | " + " | ".join(f"{out[b]['summary'][k]:.0f}" for b in bins) + " |")
if all("reclaimed" in out[b] for b in bins):
    def amounts(b):
        a = [x for rec in out[b]["reclaimed"] for x in rec["advertised_node_millis"]]
        return f"{min(a):.0f}-{max(a):.0f}m, {len(set(a))} values in {len(a)} samples" if a else "-"
    def each(b, f):
        return ", ".join(f(rec) for rec in out[b]["reclaimed"])
    print("| the Node's amount in the windows (every 5 s) | " + " | ".join(amounts(b) for b in bins) + " |")
    print("| topolet's counters per window: publishes / NRT writes | " +
          " | ".join(each(b, lambda rec: f"{rec['publishes']:.0f} / {rec['nrt_writes']:.0f}") for b in bins) + " |")
    print("| load average (1 min) per window, start / end | " +
          " | ".join(each(b, lambda rec: f"{rec['loadavg1'][0]:.2f} / {rec['loadavg1'][1]:.2f}") for b in bins) + " |")
print()
print("| window | binary | pods in the store | VmRSS (MiB) | RssAnon (MiB) |")
print("|---:|---|---:|---:|---:|")
for i, r in enumerate(runs, 1):
    # The last window's figures stand for the binary in the JSON.
    out[r["bin"]].update({"rss_mib": round(r["rss_kib"] / 1024, 2), "anon_mib": round(r["anon_kib"] / 1024, 2),
                          "store_entries": r["store_entries"]})
    print(f"| {i} | {r['bin']} | {r['store_entries']:.0f} | {r['rss_kib'] / 1024:.2f} | {r['anon_kib'] / 1024:.2f} |")
json.dump(out, open(sys.argv[3], "w"), indent=1)
EOT
