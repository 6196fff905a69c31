#!/usr/bin/env bash
# hack/idle-cost.sh — what an idle topolet costs the machine: wake-ups (voluntary context
# switches of all its threads) per second and CPU seconds per hour, with no container and with
# IDLE_PODS running pods, two topolet binaries side by side in one run.
#
# Usage (root, after hack/install-deps.sh; take the real-stack lock and note the load average):
#   IDLE_BASE_BIN=/a/topolet IDLE_BIN=/b/topolet hack/idle-cost.sh
#
# Method. One isolated containerd (hack/containerd.sh, line CONTAINERD_VERSION, default v2.4.2).
# For each condition (idle: no pod; loaded: IDLE_PODS BestEffort pods of one `sleep` container,
# kubelet-shaped, created through CRI while a topolet is connected), IDLE_ROUNDS rounds, each
# binary once per round in rotating order: a fresh topolet (default configuration: eviction on at
# its default 10 s interval, drift check every 30 s, metrics off) is started, waits until
# containerd logs it connected and synchronized, settles IDLE_SETTLE seconds, then is watched for
# IDLE_SECONDS: every second each of its threads' voluntary_ctxt_switches
# (/proc/<pid>/task/<tid>/status) is read, and a thread's count is its last reading minus its
# first (0 for a thread born during the window), so threads that come and go (the blocking pool)
# are counted while they live; CPU is utime + stime of /proc/<pid>/stat (dead threads included).
# Reported per binary and condition: wake-ups per second and CPU seconds per hour (the median of
# the rounds), and the threads seen. Output: a table on stdout, JSON in IDLE_OUT (default
# target/idle-cost.json).
#
# Environment: IDLE_BASE_BIN, IDLE_BIN (required), IDLE_PODS (100), IDLE_ROUNDS (2),
#   IDLE_SECONDS (120), IDLE_SETTLE (15), IDLE_OUT, CONTAINERD_VERSION.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"
LOG_NAME=idle-cost
SAY_TO_STDERR=1

[[ $EUID -eq 0 ]] || die "needs root (containerd, cgroups)"
declare -A BIN=([base]="${IDLE_BASE_BIN:-}" [topolet]="${IDLE_BIN:-}")
for b in base topolet; do [[ -x "${BIN[$b]}" ]] || die "IDLE_BASE_BIN and IDLE_BIN must be topolet binaries"; done
PODS="${IDLE_PODS:-100}"
ROUNDS="${IDLE_ROUNDS:-2}"
WINDOW="${IDLE_SECONDS:-120}"
SETTLE="${IDLE_SETTLE:-15}"
OUT="${IDLE_OUT:-$REPO_ROOT/target/idle-cost.json}"
export CONTAINERD_VERSION="${CONTAINERD_VERSION:-${TOPOLET_CONTAINERD_VERSION:-v2.4.2}}"

WORK="$(mktemp -d /tmp/topolet-idle.XXXXXX)"
STACK="$WORK/stack"
PLUGIN_PID=""
cleanup() {
  local rc=$?
  [[ -z "$PLUGIN_PID" ]] || { kill -TERM "$PLUGIN_PID" 2>/dev/null || true; wait "$PLUGIN_PID" 2>/dev/null || true; }
  "$HACK_DIR/containerd.sh" stop "$STACK" >/dev/null 2>&1 || echo "idle-cost: stop of $STACK failed" >&2
  ((rc == 0)) && rm -rf "$WORK" || echo "idle-cost: logs kept in $WORK" >&2
  exit "$rc"
}
trap cleanup EXIT

say "starting containerd $CONTAINERD_VERSION"
"$HACK_DIR/containerd.sh" start "$STACK" >/dev/null || die "containerd.sh start failed"
# shellcheck disable=SC1091
source "$STACK/env"
LOG="$CONTAINERD_LOG"
count() { grep -cF -- "$1" "$LOG" || true; }
wait_count() { # wait_count PATTERN N: until PATTERN occurs N times in containerd's log
  local deadline=$((SECONDS + 30))
  until (($(count "$1") >= $2)); do
    ((SECONDS < deadline)) || die "timed out waiting for containerd to log: $1"
    sleep 0.1
  done
}

RUN=0
plugin_on() { # plugin_on NAME: a fresh topolet, connected and synchronized
  local dir="$WORK/run$RUN" connected='plugin \"50-topolet\" connected and synchronized' n
  RUN=$((RUN + 1))
  mkdir -p "$dir"
  cat >"$dir/topolet.toml" <<EOT
[nri]
socket = "$NRI_SOCKET"
name = "topolet"
index = 50

[cpu]
reserved_cpus = "0"

[state]
dir = "$dir/state"

[admin]
socket = "$dir/admin.sock"

[metrics]
enabled = false

[eviction]
cri_endpoint = "${CRI_ENDPOINT#unix://}"
EOT
  n=$(count "$connected")
  "${BIN[$1]}" run --config "$dir/topolet.toml" --log-file "$dir/topolet.log" 2>"$dir/stderr" &
  PLUGIN_PID=$!
  wait_count "$connected" $((n + 1))
}
plugin_off() {
  local closed='connection to plugin \"50-topolet\" closed' n
  [[ -n "$PLUGIN_PID" ]] || return 0
  n=$(count "$closed")
  kill -TERM "$PLUGIN_PID"; wait "$PLUGIN_PID" 2>/dev/null || true
  PLUGIN_PID=""
  wait_count "$closed" $((n + 1))
}

# watch PID SECONDS: one JSON line {wakeups, cpu_s, threads, seconds}.
watch_pid() {
  python3 - "$1" "$2" <<'EOT'
import os, sys, time
pid, window = int(sys.argv[1]), float(sys.argv[2])
tick = os.sysconf("SC_CLK_TCK")
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick
def threads():
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            for line in open(f"/proc/{pid}/task/{tid}/status"):
                if line.startswith("voluntary_ctxt_switches:"):
                    out[tid] = int(line.split()[1])
        except OSError:
            pass
    return out
first, last = threads(), {}
c0, t0 = cpu(), time.monotonic()
born = set()
while time.monotonic() - t0 < window:
    time.sleep(1)
    for tid, n in threads().items():
        if tid not in first and tid not in born:
            born.add(tid)
            first[tid] = 0
        last[tid] = n
c1, t1 = cpu(), time.monotonic()
wake = sum(last.get(t, n) - n for t, n in first.items())
print('{"wakeups": %d, "cpu_s": %.3f, "threads": %d, "seconds": %.1f}' % (wake, c1 - c0, len(first), t1 - t0))
EOT
}

RESULTS="$WORK/results.jsonl"
: >"$RESULTS"
measure() { # measure CONDITION
  local r k b
  for ((r = 0; r < ROUNDS; r++)); do
    for ((k = 0; k < 2; k++)); do
      b=$([[ $(((r + k) % 2)) -eq 0 ]] && echo base || echo topolet)
      plugin_on "$b"
      sleep "$SETTLE"
      say "[$1] round $((r + 1)): $b (pid $PLUGIN_PID) for ${WINDOW}s, load $(cut -d' ' -f1-3 /proc/loadavg)"
      printf '{"condition": "%s", "bin": "%s", "load": "%s", "m": %s}\n' "$1" "$b" \
        "$(cut -d' ' -f1 /proc/loadavg)" "$(watch_pid "$PLUGIN_PID" "$WINDOW")" >>"$RESULTS"
      plugin_off
    done
  done
}

measure idle

say "creating $PODS BestEffort pods (base connected)"
plugin_on base
mkdir -p "$WORK/specs" "$WORK/logs"
for ((i = 0; i < PODS; i++)); do
  uid="idle-$i"
  cat >"$WORK/specs/pod$i.json" <<EOT
{"metadata": {"name": "idle-$i", "namespace": "default", "uid": "$uid", "attempt": 0},
 "labels": {"io.kubernetes.pod.name": "idle-$i", "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": "$uid"},
 "log_directory": "$WORK/logs/$uid",
 "linux": {"cgroup_parent": "$CGROUP_PARENT_BASE/kubepods/besteffort/pod$uid",
           "security_context": {"namespace_options": {"network": 2, "pid": 1, "ipc": 0}}}}
EOT
  cat >"$WORK/specs/ctr$i.json" <<EOT
{"metadata": {"name": "app", "attempt": 0}, "image": {"image": "$TEST_IMAGE"},
 "command": ["sleep", "100000"], "log_path": "app.log",
 "labels": {"io.kubernetes.container.name": "app"},
 "linux": {"resources": {"cpu_shares": 2, "oom_score_adj": 1000},
           "security_context": {"namespace_options": {"network": 2, "pid": 1, "ipc": 0}}}}
EOT
  mkdir -p "$WORK/logs/$uid"
  p=$(crictl runp "$WORK/specs/pod$i.json")
  c=$(crictl create "$p" "$WORK/specs/ctr$i.json" "$WORK/specs/pod$i.json")
  crictl start "$c" >/dev/null
done
running=$(crictl ps -q --state Running | wc -l)
((running >= PODS)) || die "$running containers running, $PODS wanted"
plugin_off
measure "pods_$PODS"

python3 - "$RESULTS" "$OUT" "$WINDOW" <<'EOT'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
out = {}
for r in rows:
    m = r["m"]
    d = out.setdefault(r["condition"], {}).setdefault(r["bin"], {"wakeups_per_s": [], "cpu_s_per_hour": [], "threads": [], "load": []})
    d["wakeups_per_s"].append(m["wakeups"] / m["seconds"])
    d["cpu_s_per_hour"].append(m["cpu_s"] / m["seconds"] * 3600)
    d["threads"].append(m["threads"])
    d["load"].append(float(r["load"]))
print(f"| condition | binary | wake-ups/s (median) | CPU s/hour (median) | runs | threads | load (1 min) |")
print("|---|---|---:|---:|---|---|---|")
for cond, bins in out.items():
    for b in ("base", "topolet"):
        d = bins[b]
        d["median_wakeups_per_s"] = statistics.median(d["wakeups_per_s"])
        d["median_cpu_s_per_hour"] = statistics.median(d["cpu_s_per_hour"])
        print(f"| {cond} | {b} | {d['median_wakeups_per_s']:.2f} | {d['median_cpu_s_per_hour']:.2f} | "
              f"{', '.join(f'{w:.2f}/s {c:.2f}s' for w, c in zip(d['wakeups_per_s'], d['cpu_s_per_hour']))} | "
              f"{d['threads']} | {d['load']} |")
json.dump(out, open(sys.argv[2], "w"), indent=1)
EOT
