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
# the eviction loop ranks the node's pods, dry-run, every 10 s interval and wants their facts).
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
  kill -TERM "$PLUGIN_PID"; wait "$PLUGIN_PID" 2>/dev/null || true
  PLUGIN_PID=""
  printf '{"bin": "%s", "start": "%s", "end": "%s"}\n' "$b" "$start" "$end" >>"$RESULTS"
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
json.dump(out, open(sys.argv[3], "w"), indent=1)
EOT
