#!/usr/bin/env bash
# hack/api-cost.sh — what topolet costs the API server on an idle node, against the kubelet's own
# requests, two topolet binaries side by side in one run.
#
# Usage (root, after hack/install-deps.sh and hack/install-kube.sh; take the real-stack lock):
#   API_BASE_BIN=/a/topolet API_BIN=/b/topolet hack/api-cost.sh
#
# Method. One isolated containerd (hack/containerd.sh) and single-node cluster (hack/kube-node.sh
# with KUBE_AUDIT=1: the API server's audit log, one JSON line per request). For each binary in
# turn (base first), a fresh topolet with its API client on (the cluster's `topolet` user, eviction
# dry-run) waits until its pod store is synced, then the node is left alone for API_SECONDS; the
# audit entries of that window are counted by user, verb and resource (subresource appended), and
# scaled to one hour. The kubelet's (user system:node:<node>) are counted in the same windows.
# Output: a table on stdout, JSON in API_OUT (default target/api-cost.json).
#
# Environment: API_BASE_BIN, API_BIN (required), API_SECONDS (300), API_OUT, CONTAINERD_VERSION,
# API_PRESSURE (0; 1: a node under pressure: a nodefs.available threshold that is always met, so
# the eviction loop ranks the node's pods, dry-run, every 10 s interval and wants their facts),
# API_PODS (0: pods bound to the node before the windows, each asking 1000 CPUs, so the kubelet
# rejects it (OutOfcpu, phase Failed) and runs no container: pod objects for the watch's store
# without containers on a 2-CPU host). Each window also reports topolet's VmRSS and RssAnon at
# its end (/proc/<pid>/status), with its store's pod count (topolet_kube_pod_store_pods).
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

say "starting containerd $CONTAINERD_VERSION and the cluster (audit log on)"
"$HACK_DIR/containerd.sh" start "$STACK" >/dev/null || die "containerd.sh start failed"
KUBE_CONTAINERD_DIR="$STACK" KUBE_AUDIT=1 "$HACK_DIR/kube-node.sh" start "$NODE" >/dev/null || die "kube-node.sh start failed"
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
for b in base topolet; do
  dir="$WORK/$b"
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
  start="$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)"
  say "$b: synced; idle for ${WINDOW}s from $start"
  sleep "$WINDOW"
  end="$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)"
  kib() { awk -v f="$1:" '$1 == f {print $2}' "/proc/$PLUGIN_PID/status"; }
  rss="$(kib VmRSS)" anon="$(kib RssAnon)"
  addr="$(sed -nE 's/.*metrics endpoint listening.*address=([0-9.:]+).*/\1/p' "$dir/topolet.log" | head -1)"
  entries="$(curl -fsS "http://$addr/metrics" | awk '$1 == "topolet_kube_pod_store_pods" {print $2}')"
  [[ -n "$rss" && -n "$entries" ]] || die "$b: no VmRSS or store entries (metrics at ${addr:-?})"
  kill -TERM "$PLUGIN_PID"; wait "$PLUGIN_PID" 2>/dev/null || true
  PLUGIN_PID=""
  printf '{"bin": "%s", "start": "%s", "end": "%s", "rss_kib": %s, "anon_kib": %s, "store_entries": %s}\n' \
    "$b" "$start" "$end" "$rss" "$anon" "$entries" >>"$RESULTS"
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
out = {}
print("| window | client | verb | resource | requests in window | per hour |")
print("|---|---|---|---|---:|---:|")
for r in runs:
    t0, t1 = ts(r["start"]), ts(r["end"])
    hours = (t1 - t0).total_seconds() / 3600
    counts = collections.Counter()
    for t, user, verb, res in entries:
        if t0 <= t < t1:
            who = "topolet" if user == "topolet" else ("kubelet" if user == f"system:node:{node}" else None)
            if who:
                counts[(who, verb, res)] += 1
    w = out.setdefault(r["bin"], {"seconds": (t1 - t0).total_seconds(), "per_hour": {}})
    totals = collections.Counter()
    for (who, verb, res), n in sorted(counts.items()):
        w["per_hour"][f"{who} {verb} {res}"] = round(n / hours, 1)
        totals[who] += n
        print(f"| {r['bin']} | {who} | {verb} | {res} | {n} | {n / hours:.0f} |")
    for who in ("topolet", "kubelet"):
        w["per_hour"][f"{who} total"] = round(totals[who] / hours, 1)
        print(f"| {r['bin']} | **{who} total** | | | {totals[who]} | {totals[who] / hours:.0f} |")
print()
print("| binary | pods in the store | VmRSS (MiB) | RssAnon (MiB) |")
print("|---|---:|---:|---:|")
for r in runs:
    out[r["bin"]].update({"rss_mib": round(r["rss_kib"] / 1024, 2), "anon_mib": round(r["anon_kib"] / 1024, 2),
                          "store_entries": r["store_entries"]})
    print(f"| {r['bin']} | {r['store_entries']:.0f} | {r['rss_kib'] / 1024:.2f} | {r['anon_kib'] / 1024:.2f} |")
json.dump(out, open(sys.argv[3], "w"), indent=1)
EOT
