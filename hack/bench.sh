#!/usr/bin/env bash
# hack/bench.sh — topolet against a minimal Go NRI plugin, over the real NRI wire protocol.
#
# Usage: hack/bench.sh            (no root, no containerd needed; ~3–5 min on 2 CPUs)
#
# Prints one table and writes target/bench/bench.json with:
#   nri_roundtrip_us  {"topolet"|"go_baseline": {"median","p99"}}   CreateContainer round trip
#   sync_ms           {"1000","10000"}                               topolet Synchronize
#   sync_ms_go_baseline {"1000","10000"}  the same Synchronize into the Go baseline (which ignores it:
#                     the wire + decode floor, including the driver's own encoding, for comparison)
#   rss_mib           {"topolet","go_baseline"}                      VmRSS after 1,000 containers
# Not measured here (keys of issue #7 absent from bench.json): create_start_ms (needs containerd's CRI;
# see hack/nri-latency.sh), event_us, eviction_loop_ms_per_interval, eviction_reaction_s.
#
# Method: the runtime side is proto/examples/bench_driver.rs, the project's fake runtime
# (topolet_nri::fake_runtime: the real mux + ttrpc protocol, configuring the plugin as containerd
# v2.2.7 / NRI v0.11.0). For every measurement the driver binds a fresh socket, this script starts a
# fresh plugin process on it (topolet release build with a temp config and state dir, or the Go
# baseline in hack/bench/go-baseline/ on github.com/containerd/nri v0.11.0 pkg/stub, which returns an
# equivalent fixed adjustment: cpuset, mems, shares, quota, oom_score_adj, pids), the driver
# registers, configures and synchronizes it, then times sequential CreateContainer requests with
# kubelet-shaped pods (Guaranteed/Burstable/BestEffort mix) one by one, as containerd sends them.
# Round trip: BENCH_ROUNDS rounds x BENCH_N requests per plugin, alternating which plugin goes first so
# drift and machine noise hit both; median and p99 over all samples of a plugin pooled.
# Sync: BENCH_SYNC_REPEATS Synchronize calls of 1,000 and 10,000 running containers (2 per pod,
# paged like containerd when the request exceeds ttrpc's 4 MiB limit), each into a fresh plugin,
# alternating; the median per plugin is reported. The timing spans the driver's own encoding too,
# so the Go baseline's figure (it ignores Synchronize) is the floor topolet's is to be read against. RSS: VmRSS from /proc/<pid>/status right after 1,000 CreateContainer.
#
# Environment:
#   BENCH_ROUNDS        rounds per plugin (default 5)
#   BENCH_N             CreateContainer requests per round (default 2000)
#   BENCH_SYNC_REPEATS  Synchronize runs per size (default 3)
#   GO                  go binary (default: go on PATH, else /usr/local/go/bin/go)
#   GOPROXY             used only for Go modules missing from .deps/go (default proxy.golang.org)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

ROUNDS="${BENCH_ROUNDS:-5}"
N="${BENCH_N:-2000}"
SYNC_REPEATS="${BENCH_SYNC_REPEATS:-3}"
OUT_DIR="$REPO_ROOT/target/bench"

die() { echo "bench: error: $*" >&2; exit 1; }
say() { echo "bench: $*" >&2; }

WORK="$(mktemp -d /tmp/topolet-bench.XXXXXX)"
PLUGIN_PID=""
DRIVER_PID=""
cleanup() {
  local rc=$?
  for p in "$DRIVER_PID" "$PLUGIN_PID"; do
    [[ -z "$p" ]] || { kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; }
  done
  ((rc == 0)) || echo "bench: logs kept in $WORK" >&2
  ((rc != 0)) || rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT

GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
[[ -x "$GO" ]] || die "go not found (set GO=/path/to/go)"

say "building topolet, bench_driver (release) and the Go baseline"
(cd "$REPO_ROOT" && cargo build -q --release -p topolet --bin topolet) || die "cargo build -p topolet failed"
(cd "$REPO_ROOT" && cargo build -q --release -p topolet-nri --features test-support --example bench_driver) ||
  die "cargo build of the bench_driver example failed"
TOPOLET="$REPO_ROOT/target/release/topolet"
DRIVER="$REPO_ROOT/target/release/examples/bench_driver"
GO_BASELINE="$WORK/go-baseline"
(cd "$HACK_DIR/bench/go-baseline" && env GOPATH="$DEPS/go/path" GOMODCACHE="$DEPS/go/path/pkg/mod" \
  GOCACHE="$DEPS/go/cache" GOTOOLCHAIN=local GOPROXY="${GOPROXY:-https://proxy.golang.org}" \
  GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 "$GO" build -trimpath -o "$GO_BASELINE" .) ||
  die "building hack/bench/go-baseline failed"

RUN=0
J=""
# start_plugin NAME SOCKET: a fresh plugin process connecting to SOCKET; sets PLUGIN_PID.
start_plugin() {
  local dir="$WORK/run$RUN"
  mkdir -p "$dir"
  case "$1" in
    topolet)
      cat >"$dir/topolet.toml" <<EOT
[nri]
socket = "$2"
name = "topolet"
index = 50

[cpu]
policy = "static"
reserved_cpus = "0"

[qos]
pids_limit = 1024

[state]
dir = "$dir/state"

[admin]
socket = "$dir/admin.sock"

[metrics]
enabled = false
EOT
      "$TOPOLET" run --config "$dir/topolet.toml" --log-file "$dir/topolet.log" 2>"$dir/stderr" &
      ;;
    go_baseline) "$GO_BASELINE" --socket "$2" --idx 60 >"$dir/stderr" 2>&1 & ;;
    *) die "unknown plugin $1" ;;
  esac
  PLUGIN_PID=$!
}

# drive PLUGIN MODE ARGS...: runs the driver against a fresh PLUGIN; sets J to the driver's JSON line.
# (Not called in $(...), so RUN and the pids stay visible to cleanup.)
# The plugin's pid is written to $WORK/pid-<run> (the driver's --rss-pid-file reads it at the end).
drive() {
  local plugin="$1" mode="$2"; shift 2
  RUN=$((RUN + 1))
  local sock="$WORK/nri-$RUN.sock" out="$WORK/driver-$RUN.json" err="$WORK/driver-$RUN.err"
  "$DRIVER" "$mode" --socket "$sock" "$@" >"$out" 2>"$err" &
  DRIVER_PID=$!
  local deadline=$((SECONDS + 10))
  until [[ -S "$sock" ]]; do
    ((SECONDS < deadline)) || die "driver did not bind $sock: $(cat "$err")"
    sleep 0.02
  done
  start_plugin "$plugin" "$sock"
  echo "$PLUGIN_PID" >"$WORK/pid-$RUN"
  wait "$DRIVER_PID" || die "driver $mode against $plugin failed: $(cat "$err") (plugin logs: $WORK/run$RUN)"
  DRIVER_PID=""
  kill -TERM "$PLUGIN_PID" 2>/dev/null || true
  wait "$PLUGIN_PID" 2>/dev/null || true
  PLUGIN_PID=""
  J="$(cat "$out")"
}

# field JSON KEY: a number from the driver's one-line JSON.
field() { sed -E "s/.*\"$2\":([0-9.]+).*/\1/" <<<"$1"; }
# median of the numbers given
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

PLUGINS=(topolet go_baseline)
say "NRI round trip: $ROUNDS rounds x $N CreateContainer per plugin, alternating"
for ((r = 0; r < ROUNDS; r++)); do
  for ((k = 0; k < 2; k++)); do
    p="${PLUGINS[(r + k) % 2]}"
    drive "$p" roundtrip --n "$N" --round "$r" --samples "$WORK/samples-$p"
    j="$J"
    say "  round $((r + 1)) $p: $j"
  done
done
declare -A MED P99
for p in "${PLUGINS[@]}"; do
  j="$("$DRIVER" stats "$WORK/samples-$p")"
  MED[$p]="$(field "$j" median_us)"
  P99[$p]="$(field "$j" p99_us)"
done

say "Synchronize: $SYNC_REPEATS x {1000, 10000} containers into a fresh plugin, alternating"
declare -A SYNC
for size in 1000 10000; do
  declare -A runs=([topolet]="" [go_baseline]="")
  for ((i = 0; i < SYNC_REPEATS; i++)); do
    for ((k = 0; k < 2; k++)); do
      p="${PLUGINS[(i + k) % 2]}"
      drive "$p" sync --containers "$size"
      j="$J"
      say "  $size $p: $j"
      runs[$p]+=" $(field "$j" sync_ms)"
    done
  done
  for p in "${PLUGINS[@]}"; do
    # shellcheck disable=SC2086 # word-split the run list on purpose
    SYNC[$p,$size]="$(median ${runs[$p]})"
  done
done

say "RSS after 1000 CreateContainer"
declare -A RSS
for p in "${PLUGINS[@]}"; do
  drive "$p" roundtrip --n 1000 --round 99 --rss-pid-file "$WORK/pid-$((RUN + 1))"
  j="$J"
  say "  $p: $j"
  RSS[$p]="$(field "$j" rss_mib)"
done

mkdir -p "$OUT_DIR"
cat >"$OUT_DIR/bench.json" <<EOT
{
  "nri_roundtrip_us": {
    "topolet": {"median": ${MED[topolet]}, "p99": ${P99[topolet]}},
    "go_baseline": {"median": ${MED[go_baseline]}, "p99": ${P99[go_baseline]}}
  },
  "sync_ms": {"1000": ${SYNC[topolet,1000]}, "10000": ${SYNC[topolet,10000]}},
  "sync_ms_go_baseline": {"1000": ${SYNC[go_baseline,1000]}, "10000": ${SYNC[go_baseline,10000]}},
  "rss_mib": {"topolet": ${RSS[topolet]}, "go_baseline": ${RSS[go_baseline]}},
  "meta": {"rounds": $ROUNDS, "requests_per_round": $N, "sync_repeats": $SYNC_REPEATS, "cpus": $(nproc),
           "runtime": "fake containerd v2.2.7 / NRI v0.11.0 (topolet_nri::fake_runtime)"}
}
EOT

printf '\n%-34s %12s %12s\n' "measurement" "topolet" "go_baseline"
printf '%-34s %12s %12s\n' "NRI round trip median (us)" "${MED[topolet]}" "${MED[go_baseline]}"
printf '%-34s %12s %12s\n' "NRI round trip p99 (us)" "${P99[topolet]}" "${P99[go_baseline]}"
printf '%-34s %12s %12s\n' "Synchronize 1,000 ctrs (ms)" "${SYNC[topolet,1000]}" "${SYNC[go_baseline,1000]}"
printf '%-34s %12s %12s\n' "Synchronize 10,000 ctrs (ms)" "${SYNC[topolet,10000]}" "${SYNC[go_baseline,10000]}"
printf '%-34s %12s %12s\n' "RSS after 1,000 ctrs (MiB)" "${RSS[topolet]}" "${RSS[go_baseline]}"
echo "($((ROUNDS * N)) requests per plugin, $(nproc) CPUs; written to ${OUT_DIR#"$REPO_ROOT"/}/bench.json)"
