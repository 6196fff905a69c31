#!/usr/bin/env bash
# hack/bench.sh — topolet's benchmarks, each figure measured side by side with its baseline in one run.
#
# Usage: hack/bench.sh            (as root, after hack/install-deps.sh; ~17 min on 2 CPUs)
#        BENCH_PARTS="wire events" hack/bench.sh    (only those parts; wire and events need no root)
#        BENCH_PARTS=isolation hack/bench.sh        (opt-in, not in the default list: ~6.5 min on 2
#                                                    CPUs, six real kubelet clusters one after another)
#        BENCH_PARTS=reclaimed_writes BENCH_BASE=4f76896~1 hack/bench.sh   (opt-in, needs a base: ~26
#                                                    min, hack/api-cost.sh API_RECLAIMED=1)
#        BENCH_PARTS=sched_ancestor hack/bench.sh   (opt-in: ~2 min, plain cgroups, no Kubernetes)
#        BENCH_BASE=main hack/bench.sh              (also topolet built at git revision main, as
#                                                    plugin "base", interleaved with the working tree)
#        BENCH_BASE_BIN=/a/topolet BENCH_TOPOLET_BIN=/b/topolet hack/bench.sh   (two binaries)
#
# Prints one table and writes target/bench/bench.json (ms / µs / MiB as the key says):
#   nri_roundtrip_us  {PLUGIN|"sdk_floor"|"bare_floor"|"socket_floor": {"median","p99"}}  CreateContainer
#                     round trip (socket_floor: two processes passing a request- and a reply-sized
#                     frame through a Unix socket, no plugin: the machine's floor under every
#                     plugin; bare_floor: the cheapest plugin that still speaks NRI, one blocking
#                     thread decoding the request and encoding a fixed adjustment; sdk_floor: a
#                     plugin on topolet's NRI SDK, topolet's runtime shape, the same answer: the
#                     SDK's floor under topolet)                                               [wire]
#   sync_ms           {"1000","10000"}                                 topolet Synchronize        [wire]
#   sync_ms_go_baseline {"1000","10000"}  the same Synchronize into the Go baseline (which ignores it:
#                     the wire + decode floor, including the driver's own encoding)           [wire]
#   sync_ms_by_plugin {PLUGIN|"sdk_floor": {"1000","10000"}} end to end; sync_plugin_ms {topolet|base: {...}} the
#                     plugin's own Synchronize handling (its histogram's _sum, one observation) [wire]
#   rss_mib           {PLUGIN}               VmRSS after 1,000 containers, median of BENCH_SYNC_REPEATS [wire]
#   rss_parts_mib     {"rss_anon_mib"|"rss_file_mib": {PLUGIN}}  what it is made of: heap and stacks,
#                     and the binary's and libraries' pages (medians)                         [wire]
#   event_us          {"10"|"1000"|"10000": {"median","p99"}}          topolet's own handling time per
#                     NRI event at that many live containers (event_us_base: the base's)      [events]
#   load_create_us    {topolet|base: {"quiet"|"walk"|"slow_state"|"live"|"scrape": {"median","p99"}}}
#                     CreateContainer round trip while nothing else happens / while the eviction
#                     loop measures a 200,000-entry writable layer / while every state write stalls /
#                     beside 1,000 live containers / the same while /metrics is scraped at 10 Hz;
#                     load_scrape_ms {topolet|base: {"median","p99"}} the scrapes' own time  [load]
#   create_start_ms   {"none"|"topolet"|"go_baseline": {"median","p99"}}  CRI CreateContainer +
#                     StartContainer through real containerd; create_start_overhead_ms
#                     {"topolet"|"go_baseline": {"median_diff","ci95_lo","ci95_hi"}} vs none  [create_start]
#   eviction_loop_ms_per_interval {"idle","evicting_interval_est"}  eviction loop CPU per interval
#   eviction_reaction_s {"pid.available","memory.available"}  threshold crossed -> pod's cgroup empty,
#                     with eviction_reaction_bound_s (interval + grace the config implies)   [eviction]
#   event_us_by_kind  {N: {event: {"median","p99"}}}  the same per NRI event kind            [events]
#   reclaimed_colocation {"solo"|"colocated": {"throughput_units_per_s","late_p50_us","late_p99_us",
#                     "node_busy_millis","pool_busy_millis","batch_millis","regular_millis",...},
#                     "throughput_ratio","late_p99_ratio" (colocated/solo; their paired medians),
#                     "node_busy_rise_millis","loadavg_start","loadavg_end"}  a regular pod's work
#                     alone and beside two batch pods on reclaimed CPU                    [reclaimed]
#   reclaimed_cut_ms  {"median","max","samples","from_request_median","suppress_interval_ms",
#                     "interval_ms"}  regular usage steps up -> batch cpu.cfs_quota_us cut, and
#                     reclaimed_cut_latency_metric topolet's own histogram (count, mean, buckets)
#   reclaimed_goals   [{"name","value","bound","met"}]  each goal of issue 34 judged        [reclaimed]
#   reclaimed_by_daemons {"pinned"|"floating": {"reclaimed_colocation","reclaimed_cut_ms",
#                     "reclaimed_goals",...}}  every figure above per placement of the node's daemons
#                     (BENCH_RC_DAEMONS); the keys above are the first placement's      [reclaimed]
#   reclaimed_advertised {"exceeded_idle_samples","direction_flips","changes","min_up_move_millis",
#                     "hysteresis_millis",...}  the Node's amount over a load step      [reclaimed]
#   reclaimed_reserved {"amount_before_millis","amount_during_millis","spill_millis","rule"}  a
#                     regular thread spinning on the reserved CPU lowers the amount   [reclaimed]
#   reclaimed_config  {"toml","batch_pods","batch_millis_each","regular_cpus","margin_millis"}
#   sched_ancestor    [{"condition","n","p50_us","p99_us","max_us","p99_ratio","reference"}]  a
#                     regular task's wake-up lateness beside a batch hog placed as the kubelet
#                     places a BestEffort pod, with and without a task outside kubepods, under
#                     each scheduler lever                                               [sched_ancestor]
#   isolation         {"none"|"static"|"topolet": {"scenarios": {"normal"|"over_quota": {"late_p50_us",
#                     "late_p99_us","late_p999_us","late_max_us","late_over_10ms","late_p99_us_windows",
#                     "burst_p99_ms","nr_throttled","nr_periods","pod_nr_throttled",...}}, "cpuset","cpus_allowed",
#                     "ctr_quota_us","pod_quota_us","neighbours_allowed_until_ms",
#                     "neighbours_ran_until_ms"}}, "topolet_vs_static" (p99 ratios), "loadavg_start",
#                     "loadavg_end"   a Guaranteed 1-CPU probe beside spinning neighbours  [isolation]
#   pod_start_ms      {"none"|"topolet": {"median","p99","p10","p90","n"}}, pod_start_overhead_ms
#                     {"topolet": {"median_diff","ci95_lo","ci95_hi"}} vs none: kubectl apply of N
#                     pods to all Running through the kubelet                            [pod_start]
#   reclaimed_writes  {topolet|base: {"node_writes","nrt_writes","topolet_total","kubelet_total"}}
#                     requests per hour with reclaimed CPU on under a changing load; reclaimed_writes_detail
#                     hack/api-cost.sh's JSON (per verb and resource, the amounts sampled) [reclaimed_writes]
#   plus the raw figures each part measured (event_runs, create_start_detail, eviction_tests,
#   reclaimed_detail, pod_start_detail) and meta.
# A part left out by BENCH_PARTS leaves its keys out. PLUGIN is topolet, go_baseline and, with a base
# (BENCH_BASE / BENCH_BASE_BIN), base; every figure of a base is measured in the same run, interleaved
# with topolet's (parts wire, events and load; create_start and eviction measure topolet only), and
# the table shows topolet/base ratios.
#
# Method.
# [wire] The runtime side is proto/examples/bench_driver.rs, the project's fake runtime
# (topolet_nri::fake_runtime: the real mux + ttrpc protocol, configuring the plugin as containerd
# v2.2.7 / NRI v0.11.0: the fake runtime sends the lifecycle events as StateChange, the NRI v0.11
# wire, which topolet still speaks; 2.2 is no longer a supported line, and the parts against a real
# containerd below use CONTAINERD_VERSION, default v2.4.2). For every measurement the driver binds a fresh socket, this script starts a
# fresh plugin process on it (topolet release build with a temp config and state dir, or the Go
# baseline in hack/bench/go-baseline/ on github.com/containerd/nri v0.11.0 pkg/stub, which returns an
# equivalent fixed adjustment: cpuset, mems, shares, quota, oom_score_adj, pids), the driver
# registers, configures and synchronizes it, then times sequential CreateContainer requests with
# kubelet-shaped pods (Guaranteed/Burstable/BestEffort mix) one by one, as containerd sends them.
# Round trip: BENCH_ROUNDS rounds x BENCH_N requests per plugin, alternating which plugin goes first so
# drift and machine noise hit both; median and p99 over all samples of a plugin pooled. In the same
# rotation, the socket floor: the driver's `floor` mode against its `echo` peer, the same number of
# request- and reply-sized frames through a Unix socket between two processes with no plugin, so a
# plugin's p99 can be read against what the machine itself adds; the bare floor: the driver's
# `bare` mode as the plugin (a blocking thread that cuts frames itself and decodes and encodes
# protobuf, what any plugin must do); and the SDK floor: the driver's `sdk` mode as the plugin
# (topolet_nri's stub and a handler that builds the Go baseline's fixed adjustment), so topolet's
# figure splits into the machine's part, the protocol's, the SDK's and its own handler's.
# Sync: BENCH_SYNC_REPEATS Synchronize calls of 1,000 and 10,000 running containers (2 per pod,
# paged like containerd when the request exceeds ttrpc's 4 MiB limit), each into a fresh plugin,
# alternating; the median per plugin is reported. The timing spans the driver's own encoding too,
# so the Go baseline's figure (it ignores Synchronize) is the floor topolet's is to be read against;
# the SDK floor, in the same rotation, decodes the request as the SDK does for topolet (the same
# container fields skipped) and answers with no updates: what topolet takes beyond it is its own.
# RSS: VmRSS, RssAnon and RssFile from /proc/<pid>/status right after 1,000 CreateContainer into a
# fresh plugin, BENCH_SYNC_REPEATS times per plugin, rotating; the medians are reported.
# [events] The driver (mode `events`) brings a fresh topolet (metrics on 127.0.0.1:0, address read
# from its log) to N live containers, scrapes topolet's own topolet_nri_event_duration_seconds
# histogram from /metrics, drives BENCH_EVENT_CHURN churn pods through their whole life
# (RunPodSandbox, CreateContainer, PostStartContainer, StopContainer, RemoveContainer,
# RemovePodSandbox: 6 events each) while the N stay live, scrapes again, and takes median and p99
# of the difference (churn events only, all kinds pooled) as Prometheus' histogram_quantile does:
# linear interpolation inside the bucket holding the rank (buckets in plugin/src/telemetry/metrics.rs,
# 2.5µs..2.5s, fine steps below 100µs, so a figure is exact to its bucket's width). The driver also
# checks the plugin reports N managed containers. BENCH_EVENT_REPEATS rounds, each over all sizes in
# rotating order; reported: the median over rounds of each round's median and p99.
# [load] Root. The CreateContainer round trip of [wire] (BENCH_LOAD_N requests per run, BENCH_LOAD_ROUNDS
# rounds, every (plugin, condition) pair once per round in rotating order), as churn that writes
# state: the driver's --exclusive-every BENCH_LOAD_EXCLUSIVE_EVERY stops and removes each container
# right after its timed create (untimed), and the app of every K-th pod asks for one whole CPU, a
# grant and a release that the plugin must persist (the run fails unless every one was granted).
# Three conditions: quiet (the [wire] config); walk: [eviction] interval 1s with a nodefs.available threshold that is
# always met, so every interval measures every pod's disk usage, and one pod (the driver's
# --extra-pod, created before the timed requests) is a real cgroup holding a real process whose root
# is an overlay mount with a 200,000-entry upper directory (hack/bench.sh builds it: 200 directories
# x 1,000 empty files; `unshare -m` + overlay + chroot, lower = /usr; the process sits in
# /sys/fs/cgroup/pids/<parent>/<id>), which the loop walks up to its limit each interval
# (the run checks the loop's "evicting one pod" dry-run line names that pod with disk > 0, and
# reports the loop's wall time per interval); slow_state: [state] dir on hack/bench/slowfs, a
# loopback FUSE mount where each rename (every state write ends with one) first waits
# BENCH_SLOW_STATE_DELAY; live: BENCH_LOAD_LIVE containers started (untimed) before the timed ones
# and live throughout, metrics on; scrape: the same while the driver GETs /metrics BENCH_LOAD_SCRAPE_HZ
# times a second from another thread (every scrape reads the placement under the handler lock: what
# it holds the lock for shows as scrape's p99 against live). Reported: median, p99 per plugin and
# condition, and each condition's p99 against quiet.
# [create_start] One isolated containerd (hack/containerd.sh, line CONTAINERD_VERSION) and the Go CRI
# client hack/nri-latency/ (k8s.io/cri-api, in-process gRPC, built offline from .deps) timing
# CreateContainer + StartContainer together (StopContainer and RemoveContainer untimed, one warm-up
# per block discarded) of a BestEffort container in a kubelet-shaped pod
# (<base>/kubepods/besteffort/pod…). Three conditions, BENCH_CS_ROUNDS blocks of BENCH_CS_BLOCK
# each, interleaved in rotating order: none (no NRI plugin), topolet (release build, computing its
# real adjustment), go_baseline (the Go baseline on the same NRI socket, its fixed adjustment made
# valid here: the host's online CPUs and NUMA nodes, oom_score_adj 1000 as the kubelet sets for
# BestEffort and runc cannot lower without CAP_SYS_RESOURCE). Toggling a plugin waits for
# containerd's own "connected and synchronized" / "closed" log lines. Reported: median, p99 per
# condition; overhead = median(condition) − median(none) with a 95% bootstrap interval.
# [eviction] integration/tests/eviction.rs (the pid.available and memory.available eviction tests,
# real containerd + runc + cgroups; built at the start with everything else, run with TOPOLET_BIN =
# the release topolet) with TOPOLET_BENCH_OUT set: each appends its figures (see that
# file's header). idle = the loop's CPU per interval (process-wide, its own stats line) over the
# first ≥ 11 intervals with nothing to do; evicting_interval_est = the CPU of the window from then
# to the eviction's stats line minus idle for its other intervals (pod start-up NRI events fall in
# that window too, so it is an upper estimate). Reaction is compared with interval + grace.
# Both lines in one table; figures are means over the two tests where one number is shown.
# [reclaimed] integration/tests/kubelet_colocation.rs (a real kubelet KUBE_VERSION, API server and
# kube-scheduler on containerd CONTAINERD_VERSION; its header has the method; run with TOPOLET_BIN =
# the release topolet and TOPOLET_COLOCATION_PROBE = hack/bench/colocation built here) with
# TOPOLET_BENCH_OUT set: 2 CPUs, CPU 0 reserved, the pool is CPU 1; [reclaimed] at its defaults
# (usage = "cpus") but window, max_age and starved_percent (the test names why). A regular
# Burstable pod (500m, no limit), its threads confined to the batch pods' CPUs, wakes every 1 ms
# tick and does ~300 µs of work units (throughput = units per second of the window's wall time,
# so a late or missed tick is lost work; wake-up lateness p50/p99 per window); two batch pods
# (300m of topolet.io/reclaimed-cpu each) spin or not. 6 alternations of a 10 s solo and a 10 s colocated
# window (order flipping), each after a 1 s warm-up; /proc/stat around each window gives the
# node's and the pool's busy CPU. Per condition: mean throughput, median of the windows' p99;
# ratios colocated/solo, pooled and paired by alternation. Suppress: 7 steps of the regular pod
# from idle to two spinning threads, the batch quotas polled every 5 ms; reaction = the threads'
# start to the first read of their sum cut to half or less. Advertised: the Node's capacity,
# `topolet status` and the pool's /proc/stat every 200 ms over ticking -> spinning -> ticking; a
# sample exceeds the really idle pool when the Node's amount > pool - (its busy CPU - the batch
# pods' usage) since the last one; the goal bounds the longest such stretch by one interval plus
# one sample (the loop sees a step at its next sample).
# [isolation] integration/tests/kubelet_isolation.rs (its header has the method; run with
# TOPOLET_BIN = the release topolet and TOPOLET_COLOCATION_PROBE = hack/bench/colocation built
# here): three configurations, each a fresh stack and cluster per round, in rotating order over
# BENCH_ISO_ROUNDS rounds: kubelet cpuManagerPolicy none without topolet, kubelet static
# (reservedSystemCPUs 0) without topolet, kubelet none with topolet. A Guaranteed 1-CPU probe pod
# (1 ms ticks, lateness recorded; every 100 ms two threads each burn a fixed CPU time, the burst's
# wall time recorded) beside a BestEffort pod spinning four threads and a Burstable pod two.
# Scenarios, alternating BENCH_ISO_ALTERNATIONS times per session, BENCH_ISO_WINDOW_S each:
# normal (2 x 10 ms per 100 ms) and over_quota (2 x 60 ms per 100 ms, above the 1-CPU quota).
# Per configuration and scenario the pooled tick lateness p50/p99/p99.9/max, burst p99, the probe
# container's (and pod's) cpu.stat nr_throttled over the windows, its cpuset and Cpus_allowed, and
# from 5 ms samples of every neighbour thread's Cpus_allowed_list and last CPU (/proc/<tid>/stat
# field 39): until when after the probe's start a neighbour was allowed on / ran on its CPU.
# [sched_ancestor] hack/bench/sched-ancestor (its header has the method): no Kubernetes, no topolet;
# cgroups shaped like the kubelet's (kubepods 1024, burstable 512, besteffort 2 shares) plus a
# `system` cgroup beside kubepods, every process on one CPU (BENCH_SA_CPU): a regular task ticking
# every 1 ms with 300 us of work, a batch hog (2 threads, 60 ms quota per 100 ms) and a daemon
# (400 us busy per 1 ms) in the conditions solo / batch / batch with cpu.idle on its pod / batch
# with cpu.idle on the BestEffort QoS cgroup, alone and with SCHED_IDLE / batch threads under
# SCHED_IDLE / batch with a 100 ms or a 0.1 ms slice / batch outside kubepods / solo, batch,
# batch under SCHED_IDLE and batch with the QoS cgroup's cpu.idle without the daemon,
# BENCH_SA_ROUNDS rounds of BENCH_SA_SECONDS per condition in rotating order, lateness pooled.
# It tells the kernel's part of [reclaimed]'s wake-up figure from the stack's.
# [pod_start] integration/tests/kubelet_isolation.rs's pod start test: one cluster (kubelet none)
# with topolet stopped (none) or running (topolet), BENCH_PS_ROUNDS rounds of one block per
# condition in rotating order; a block times `kubectl apply -f` of BENCH_PS_PODS pods (one
# Guaranteed 1-CPU, the others BestEffort and Burstable) to the last seen Running by a watch, then
# deletes them. The blocks' times go through the CRI client's stats (hack/nri-latency `json`, as
# [create_start]): median per condition, overhead = median(topolet) - median(none), 95% bootstrap.
# [reclaimed_writes] hack/api-cost.sh with API_RECLAIMED=1 (its header has the method): one real
# cluster with the API server's audit log, base and topolet in BENCH_RW_ROUNDS rounds of a
# BENCH_RW_SECONDS window each (order flipping), `[reclaimed] enabled = true` at its defaults but
# usage = "pods" (the host's other work would count with "cpus": api-cost.sh says why), a
# regular Burstable pod running `colocation steps` (2-8 s steps of 0-600 milli-CPU, one fixed
# sequence); topolet's Node writes (patches of nodes/status and nodes), NodeResourceTopology writes
# (create, update, patch), all its requests and the kubelet's, per hour. Needs a base.
#
# Environment:
#   BENCH_PARTS         parts to run (default "wire events load create_start eviction reclaimed pod_start";
#                       isolation and reclaimed_writes only when named)
#   BENCH_BASE          a git revision: topolet built at it (a detached worktree under the run's temp
#                       dir, built into target/bench-base, the binary copied out, the worktree
#                       removed) runs as plugin "base" beside the working tree's
#   BENCH_BASE_BIN      a topolet binary to run as "base" instead (no build)
#   BENCH_TOPOLET_BIN   the topolet binary to measure as "topolet" instead of building the tree's
#   BENCH_ROUNDS        [wire] rounds per plugin (default 5)
#   BENCH_N             [wire] CreateContainer requests per round (default 2000)
#   BENCH_SYNC_REPEATS  [wire] Synchronize runs per size (default 3)
#   BENCH_EVENT_LIVE    [events] live container counts (default "10 1000 10000")
#   BENCH_EVENT_CHURN   [events] churn pods per run (default 2000, 6 events each)
#   BENCH_EVENT_REPEATS [events] rounds (default 3)
#   BENCH_LOAD_ROUNDS   [load] rounds (default 3)
#   BENCH_LOAD_N        [load] CreateContainer requests per run (default 10000: about 7 s with the
#                       churn, so the eviction loop (1 s interval) completes several walks)
#   BENCH_LOAD_EXCLUSIVE_EVERY [load] every K-th pod's app takes a whole CPU (default 24, a multiple
#                       of 4: about 2% of the requests, so they decide the p99 if writes stall them)
#   BENCH_SLOW_STATE_DELAY [load] wait before each state-file rename on slowfs (default 200ms)
#   BENCH_LOAD_LIVE     [load] live containers in conditions live and scrape (default 1000)
#   BENCH_LOAD_SCRAPE_HZ [load] /metrics scrapes per second in condition scrape (default 10)
#   BENCH_CS_ROUNDS     [create_start] blocks per condition (default 20)
#   BENCH_CS_BLOCK      [create_start] timed create+starts per block (default 25; 20x25 = 500)
#   BENCH_ISO_ROUNDS    [isolation] rounds, each one session per configuration (default 2)
#   BENCH_ISO_WINDOW_S  [isolation] seconds per window (default 8)
#   BENCH_ISO_ALTERNATIONS [isolation] normal/over_quota alternations per session (default 2)
#   BENCH_PS_ROUNDS     [pod_start] rounds, one block per condition each (default 12)
#   BENCH_PS_PODS       [pod_start] pods per block (default 10)
#   BENCH_RW_ROUNDS     [reclaimed_writes] rounds, one window per binary each (default 2)
#   BENCH_RW_SECONDS    [reclaimed_writes] seconds per window (default 300)
#   BENCH_RC_DAEMONS    [reclaimed] where the node's daemons run, each placement one run of the test,
#                       in order (default "pinned floating"): pinned = on the reserved CPU 0, as an
#                       operator with reservedSystemCPUs pins the OS and Kubernetes daemons (the
#                       test binary under `taskset -c 0`: containerd, its shims, the kubelet, the
#                       API server, etcd, the scheduler, topolet and the test's own sampling inherit
#                       that affinity; runc moves each container onto its cgroup's cpuset);
#                       floating = on every CPU, the pods' included (nothing pinned)
#   BENCH_SA_ROUNDS     [sched_ancestor] rounds over every condition (default 3)
#   BENCH_SA_SECONDS    [sched_ancestor] seconds per condition and round (default 5)
#   BENCH_SA_CPU        [sched_ancestor] the CPU every process shares (default: the last one)
#   CONTAINERD_VERSION / TOPOLET_CONTAINERD_VERSION  [create_start, eviction, reclaimed, isolation, pod_start,
#                       reclaimed_writes] line (default as in
#                       hack/lib/common.sh)
#   GO                  go binary (default: go on PATH, else /usr/local/go/bin/go)
#   GOPROXY             used only for Go modules missing from $TOPOLET_CACHE/go (default proxy.golang.org)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

PARTS=" ${BENCH_PARTS:-wire events load create_start eviction reclaimed pod_start} "
ROUNDS="${BENCH_ROUNDS:-5}"
N="${BENCH_N:-2000}"
SYNC_REPEATS="${BENCH_SYNC_REPEATS:-3}"
EVENT_LIVE="${BENCH_EVENT_LIVE:-10 1000 10000}"
EVENT_CHURN="${BENCH_EVENT_CHURN:-2000}"
EVENT_REPEATS="${BENCH_EVENT_REPEATS:-3}"
LOAD_ROUNDS="${BENCH_LOAD_ROUNDS:-3}"
LOAD_N="${BENCH_LOAD_N:-10000}"
LOAD_EXCLUSIVE_EVERY="${BENCH_LOAD_EXCLUSIVE_EVERY:-24}"
SLOW_DELAY="${BENCH_SLOW_STATE_DELAY:-200ms}"
LOAD_LIVE="${BENCH_LOAD_LIVE:-1000}"
LOAD_SCRAPE_HZ="${BENCH_LOAD_SCRAPE_HZ:-10}"
BASE="${BENCH_BASE:-}"
BASE_BIN="${BENCH_BASE_BIN:-}"
TOPOLET_BIN_IN="${BENCH_TOPOLET_BIN:-}"
CS_ROUNDS="${BENCH_CS_ROUNDS:-20}"
CS_BLOCK="${BENCH_CS_BLOCK:-25}"
ISO_ROUNDS="${BENCH_ISO_ROUNDS:-2}"
ISO_WINDOW_S="${BENCH_ISO_WINDOW_S:-8}"
ISO_ALTERNATIONS="${BENCH_ISO_ALTERNATIONS:-2}"
PS_ROUNDS="${BENCH_PS_ROUNDS:-12}"
PS_PODS="${BENCH_PS_PODS:-10}"
RW_ROUNDS="${BENCH_RW_ROUNDS:-2}"
RW_SECONDS="${BENCH_RW_SECONDS:-300}"
SA_ROUNDS="${BENCH_SA_ROUNDS:-3}"
SA_SECONDS="${BENCH_SA_SECONDS:-5}"
SA_CPU="${BENCH_SA_CPU:-$(($(nproc) - 1))}"
RC_DAEMONS="${BENCH_RC_DAEMONS:-pinned floating}"
VERSION="${CONTAINERD_VERSION:-${TOPOLET_CONTAINERD_VERSION:-$DEFAULT_CONTAINERD_VERSION}}"
TARGET_DIR="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
OUT_DIR="$TARGET_DIR/bench"

die() { echo "bench: error: $*" >&2; exit 1; }
say() { echo "bench: $*" >&2; }
part() { [[ "$PARTS" == *" $1 "* ]]; }

for p in $PARTS; do
  case "$p" in wire | events | load | create_start | eviction | reclaimed | isolation | pod_start | reclaimed_writes | sched_ancestor) ;;
    *) die "BENCH_PARTS: unknown part $p (wire events load create_start eviction reclaimed isolation pod_start reclaimed_writes sched_ancestor)" ;;
  esac
done
for v in ROUNDS N SYNC_REPEATS EVENT_CHURN EVENT_REPEATS LOAD_ROUNDS LOAD_N LOAD_EXCLUSIVE_EVERY CS_ROUNDS CS_BLOCK \
  ISO_ROUNDS ISO_WINDOW_S ISO_ALTERNATIONS PS_ROUNDS PS_PODS RW_ROUNDS RW_SECONDS SA_ROUNDS SA_SECONDS; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "BENCH_$v=${!v}: want a positive integer"
done
for n in $EVENT_LIVE; do [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "BENCH_EVENT_LIVE: $n is not a positive integer"; done
[[ "$SLOW_DELAY" =~ ^[0-9]+(ms|s)$ ]] || die "BENCH_SLOW_STATE_DELAY=$SLOW_DELAY: want a duration like 500ms or 1s"
[[ -z "$BASE" || -z "$BASE_BIN" ]] || die "BENCH_BASE and BENCH_BASE_BIN: set one of them"
for b in "$BASE_BIN" "$TOPOLET_BIN_IN"; do [[ -z "$b" || -x "$b" ]] || die "$b: not an executable"; done
if [[ -n "$BASE" ]]; then
  git -C "$REPO_ROOT" rev-parse --verify -q "$BASE^{commit}" >/dev/null || die "BENCH_BASE=$BASE: not a git revision of $REPO_ROOT"
fi
if part load; then
  [[ $EUID -eq 0 ]] || die "part load needs root (cgroups, overlay, FUSE)"
  [[ -e /dev/fuse ]] || die "part load needs /dev/fuse (hack/bench/slowfs)"
fi
if part sched_ancestor; then
  [[ $EUID -eq 0 ]] || die "part sched_ancestor needs root (cgroups)"
  [[ "$SA_CPU" =~ ^[0-9]+$ ]] || die "BENCH_SA_CPU=$SA_CPU: want a CPU number"
fi
if part reclaimed_writes; then
  [[ -n "$BASE$BASE_BIN" ]] || die "part reclaimed_writes compares two binaries: set BENCH_BASE or BENCH_BASE_BIN"
fi
if part create_start || part eviction || part reclaimed || part isolation || part pod_start || part reclaimed_writes; then
  [[ $EUID -eq 0 ]] || die "parts create_start, eviction, reclaimed, isolation, pod_start and reclaimed_writes need root (BENCH_PARTS=\"wire events\" runs without)"
  validate_containerd_version "$VERSION" || exit 1
  [[ -x "$(containerd_bin_dir "$VERSION")/containerd" ]] || die "containerd $VERSION is not installed (run hack/install-deps.sh)"
fi

WORK="$(mktemp -d /tmp/topolet-bench.XXXXXX)"
PLUGIN_PID=""
DRIVER_PID=""
STACK=""
SLEEPER_PID=""   # [load] the process whose root is the 200,000-entry overlay
SLOWFS_PID=""    # [load] the slowfs mount
WALK_CGROUPS=()  # [load] cgroup directories created, deepest first
BASE_SRC=""      # the BENCH_BASE worktree while it exists
cleanup() {
  local rc=$?
  for p in "$DRIVER_PID" "$PLUGIN_PID" "$SLEEPER_PID" "$SLOWFS_PID"; do
    [[ -z "$p" ]] || { kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; }
  done
  for d in "${WALK_CGROUPS[@]}"; do rmdir "$d" 2>/dev/null || echo "bench: rmdir $d failed" >&2; done
  [[ -z "$BASE_SRC" ]] || git -C "$REPO_ROOT" worktree remove --force "$BASE_SRC" || echo "bench: git worktree remove $BASE_SRC failed" >&2
  [[ -z "$STACK" ]] || "$HACK_DIR/containerd.sh" stop "$STACK" >/dev/null 2>&1 || echo "bench: stop of $STACK failed" >&2
  ((rc == 0)) || echo "bench: logs kept in $WORK" >&2
  ((rc != 0)) || rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "bench: error: line $LINENO: $BASH_COMMAND failed" >&2' ERR
mkdir -p "$WORK/parts"
T0=$SECONDS

GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
[[ -x "$GO" ]] || die "go not found (set GO=/path/to/go)"
go_build() { # go_build DIR OUT: offline-first build with the shared module cache ($TOPOLET_CACHE/go)
  (cd "$1" && go_cache_env GOPROXY="${GOPROXY:-https://proxy.golang.org}" \
    GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 "$GO" build -trimpath -o "$2" .)
}

# The plugins measured: topolet (the working tree, or BENCH_TOPOLET_BIN), base when asked for.
declare -A BIN
TOPOLETS=(topolet)
if [[ -n "$BASE" ]]; then
  # Built in a target dir of its own (kept for the next run): cargo names a workspace's path
  # crates by their path relative to the workspace, so the worktree's crates and the tree's share
  # artifact names, and with mtime fingerprints a worktree checked out after the tree's last edit
  # leaves its artifacts "fresh" for the tree's build: the tree would be measured as the base.
  BASE_SRC="$WORK/base-src"
  say "building topolet at $BASE ($(git -C "$REPO_ROOT" rev-parse --short "$BASE^{commit}")) as base"
  git -C "$REPO_ROOT" worktree add -q --detach "$BASE_SRC" "$BASE" || die "git worktree add $BASE failed"
  (cd "$BASE_SRC" && CARGO_TARGET_DIR="$TARGET_DIR/bench-base" cargo build -q --release -p topolet --bin topolet) ||
    die "cargo build of topolet at $BASE failed"
  cp "$TARGET_DIR/bench-base/release/topolet" "$WORK/topolet-base"
  git -C "$REPO_ROOT" worktree remove --force "$BASE_SRC" || die "git worktree remove $BASE_SRC failed"
  BASE_SRC=""
  BASE_BIN="$WORK/topolet-base"
fi
[[ -z "$BASE_BIN" ]] || { BIN[base]="$BASE_BIN"; TOPOLETS+=(base); }
say "building topolet (release) and what the parts need: bench_driver, the Go baseline, the CRI client, the tests"
if [[ -z "$TOPOLET_BIN_IN" ]]; then
  (cd "$REPO_ROOT" && cargo build -q --release -p topolet --bin topolet) || die "cargo build -p topolet failed"
fi
if part wire || part events || part load; then
  (cd "$REPO_ROOT" && cargo build -q --release -p topolet-nri --features test-support --example bench_driver) ||
    die "cargo build of the bench_driver example failed"
fi
TOPOLET="${TOPOLET_BIN_IN:-$TARGET_DIR/release/topolet}"
BIN[topolet]="$TOPOLET"
DRIVER="$TARGET_DIR/release/examples/bench_driver"
GO_BASELINE="$WORK/go-baseline"
if part wire || part create_start; then
  go_build "$HACK_DIR/bench/go-baseline" "$GO_BASELINE" || die "building hack/bench/go-baseline failed"
fi
CLIENT="$WORK/cri-client"
if part create_start || part pod_start; then
  go_build "$HACK_DIR/nri-latency" "$CLIENT" || die "building hack/nri-latency (the CRI client) failed"
fi
SLOWFS="$WORK/slowfs"
if part load; then go_build "$HACK_DIR/bench/slowfs" "$SLOWFS" || die "building hack/bench/slowfs failed"; fi
SCHED_ANCESTOR="$WORK/sched-ancestor"
if part sched_ancestor; then
  go_build "$HACK_DIR/bench/sched-ancestor" "$SCHED_ANCESTOR" || die "building hack/bench/sched-ancestor failed"
fi
EVICTION_TEST=""
if part eviction; then
  # Built now, with everything else, and run as a binary later: one snapshot of the tree for the run.
  EVICTION_TEST="$(cd "$REPO_ROOT" && cargo test -q -p topolet-integration --test eviction --no-run \
    --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "eviction" and m.get("executable"):
        print(m["executable"])')" || die "building integration/tests/eviction.rs failed"
  [[ -x "$EVICTION_TEST" ]] || die "no executable for integration/tests/eviction.rs from cargo"
fi
# test_executable NAME: builds integration/tests/NAME.rs (no run) and prints its executable.
test_executable() {
  (cd "$REPO_ROOT" && cargo test -q -p topolet-integration --test "$1" --no-run --message-format=json |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[1] and m.get("executable"):
        print(m["executable"])' "$1")
}
COLOCATION_TEST=""
COLOCATION_PROBE="$WORK/colocation"
if part reclaimed; then
  COLOCATION_TEST="$(test_executable kubelet_colocation)" || die "building integration/tests/kubelet_colocation.rs failed"
  [[ -x "$COLOCATION_TEST" ]] || die "no executable for integration/tests/kubelet_colocation.rs from cargo"
fi
ISOLATION_TEST=""
if part isolation || part pod_start; then
  ISOLATION_TEST="$(test_executable kubelet_isolation)" || die "building integration/tests/kubelet_isolation.rs failed"
  [[ -x "$ISOLATION_TEST" ]] || die "no executable for integration/tests/kubelet_isolation.rs from cargo"
fi
if part reclaimed || part isolation || part reclaimed_writes; then
  go_build "$HACK_DIR/bench/colocation" "$COLOCATION_PROBE" || die "building hack/bench/colocation failed"
fi

# topolet_config FILE SOCKET DIR METRICS: a topolet config; METRICS "on" serves /metrics on a free port.
# CONF_STATE_DIR (default DIR/state) and CONF_EVICTION (a TOML [eviction] section) come from the caller.
topolet_config() {
  local enabled=false
  [[ "$4" != on ]] || enabled=true
  cat >"$1" <<EOT
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
dir = "${CONF_STATE_DIR:-$3/state}"

[admin]
socket = "$3/admin.sock"

[metrics]
enabled = $enabled
address = "127.0.0.1:0"
EOT
  [[ -z "${CONF_EVICTION:-}" ]] || printf '\n%s\n' "$CONF_EVICTION" >>"$1"
}

RUN=0
J=""
METRICS=off
# start_plugin NAME SOCKET: a fresh plugin process connecting to SOCKET; sets PLUGIN_PID.
start_plugin() {
  local dir="$WORK/run$RUN"
  mkdir -p "$dir"
  case "$1" in
    topolet | base)
      topolet_config "$dir/topolet.toml" "$2" "$dir" "$METRICS"
      "${BIN[$1]}" run --config "$dir/topolet.toml" --log-file "$dir/topolet.log" 2>"$dir/stderr" &
      ;;
    go_baseline) "$GO_BASELINE" --socket "$2" --idx 60 >"$dir/stderr" 2>&1 & ;;
    # Not a plugin: the peer of the driver's `floor` mode (the socket floor; a failure of it
    # fails the driver, which reads its replies).
    socket_floor) "$DRIVER" echo --socket "$2" >"$dir/stderr" 2>&1 & ;;
    # A plugin on the SDK alone (bench_driver's `sdk` mode): the SDK floor.
    sdk_floor) "$DRIVER" sdk --socket "$2" >"$dir/stderr" 2>&1 & ;;
    # The cheapest plugin that speaks NRI (bench_driver's `bare` mode): the bare floor.
    bare_floor) "$DRIVER" bare --socket "$2" >"$dir/stderr" 2>&1 & ;;
    *) die "unknown plugin $1" ;;
  esac
  PLUGIN_PID=$!
}

# drive PLUGIN MODE ARGS...: runs the driver against a fresh PLUGIN; sets J to the driver's JSON line.
# (Not called in $(...), so RUN and the pids stay visible to cleanup.)
# The plugin's pid is written to $WORK/pid-<run> (the driver's --rss-pid-file reads it at the end);
# its log is $WORK/run<run>/topolet.log (the driver's --metrics-log reads it).
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

PLUGINS=("${TOPOLETS[@]}" go_baseline)
NP=${#PLUGINS[@]}
is_topolet() { [[ "$1" == topolet || "$1" == base ]]; }
if part wire; then
  T=$SECONDS
  : >"$WORK/wire.tsv" # lines: FIGURE PLUGIN [SIZE] VALUE
  say "[wire] NRI round trip: $ROUNDS rounds x $N CreateContainer per plugin (${PLUGINS[*]}), rotating"
  # In the same rotation: socket_floor, no plugin, the kernel's part of a round trip (bench_driver
  # floor/echo); bare_floor, what any plugin adds (bench_driver bare as the plugin); sdk_floor,
  # what the SDK adds (bench_driver sdk as the plugin).
  RT=("${PLUGINS[@]}" sdk_floor bare_floor socket_floor)
  NRT=${#RT[@]}
  for ((r = 0; r < ROUNDS; r++)); do
    for ((k = 0; k < NRT; k++)); do
      p="${RT[(r + k) % NRT]}"
      if [[ "$p" == socket_floor ]]; then
        drive "$p" floor --n "$N" --samples "$WORK/samples-$p"
      else
        drive "$p" roundtrip --n "$N" --round "$r" --samples "$WORK/samples-$p"
      fi
      say "  round $((r + 1)) $p: $J"
    done
  done
  for p in "${RT[@]}"; do
    j="$("$DRIVER" stats "$WORK/samples-$p")"
    echo "rt_median $p $(field "$j" median_us)" >>"$WORK/wire.tsv"
    echo "rt_p99 $p $(field "$j" p99_us)" >>"$WORK/wire.tsv"
  done

  # sdk_floor: the SDK decoding the request as it does for topolet (the same skipped fields) and
  # answering with no updates; topolet's figure less this is its handler and its reply.
  SYNC_RT=("${PLUGINS[@]}" sdk_floor)
  NS=${#SYNC_RT[@]}
  say "[wire] Synchronize: $SYNC_REPEATS x {1000, 10000} containers into a fresh plugin (${SYNC_RT[*]}), rotating"
  for size in 1000 10000; do
    for ((i = 0; i < SYNC_REPEATS; i++)); do
      for ((k = 0; k < NS; k++)); do
        p="${SYNC_RT[(i + k) % NS]}"
        if is_topolet "$p"; then
          METRICS=on
          drive "$p" sync --containers "$size" --metrics-log "$WORK/run$((RUN + 1))/topolet.log"
          METRICS=off
          echo "sync_plugin $p $size $(field "$J" plugin_ms)" >>"$WORK/wire.tsv"
        else
          drive "$p" sync --containers "$size"
        fi
        say "  $size $p: $J"
        echo "sync $p $size $(field "$J" sync_ms)" >>"$WORK/wire.tsv"
      done
    done
  done

  say "[wire] RSS after 1000 CreateContainer: $SYNC_REPEATS x each plugin, rotating"
  for ((i = 0; i < SYNC_REPEATS; i++)); do
    for ((k = 0; k < NP; k++)); do
      p="${PLUGINS[(i + k) % NP]}"
      drive "$p" roundtrip --n 1000 --round 99 --rss-pid-file "$WORK/pid-$((RUN + 1))"
      say "  $p: $J"
      for f in rss_mib rss_anon_mib rss_file_mib; do
        echo "$f $p $(field "$J" "$f")" >>"$WORK/wire.tsv"
      done
    done
  done
  python3 - "$WORK/wire.tsv" "$ROUNDS" "$N" "$SYNC_REPEATS" $((SECONDS - T)) >"$WORK/parts/wire.json" <<'EOT'
import json, statistics, sys
rt, sync, plugin, rss = {}, {}, {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] in ("rt_median", "rt_p99"):
        rt.setdefault(f[1], {})["median" if f[0] == "rt_median" else "p99"] = float(f[2])
    elif f[0] == "sync":
        sync.setdefault(f[1], {}).setdefault(f[2], []).append(float(f[3]))
    elif f[0] == "sync_plugin":
        plugin.setdefault(f[1], {}).setdefault(f[2], []).append(float(f[3]))
    elif f[0] in ("rss_mib", "rss_anon_mib", "rss_file_mib"):
        rss.setdefault(f[0], {}).setdefault(f[1], []).append(float(f[2]))
med = lambda d: {p: {n: round(statistics.median(v), 2) for n, v in by.items()} for p, by in d.items()}
sync, plugin = med(sync), med(plugin)
print(json.dumps({
    "nri_roundtrip_us": rt,
    "sync_ms": sync["topolet"],
    "sync_ms_go_baseline": sync["go_baseline"],
    "sync_ms_by_plugin": sync,
    "sync_plugin_ms": plugin,
    "rss_mib": {p: round(statistics.median(v), 2) for p, v in rss["rss_mib"].items()},
    "rss_parts_mib": med({k: rss[k] for k in ("rss_anon_mib", "rss_file_mib")}),
    "meta": {"wire": {"rounds": int(sys.argv[2]), "requests_per_round": int(sys.argv[3]),
                      "sync_repeats": int(sys.argv[4]),
                      "runtime": "fake containerd v2.2.7 / NRI v0.11.0 (topolet_nri::fake_runtime)",
                      "seconds": int(sys.argv[5])}}}))
EOT
fi

if part events; then
  T=$SECONDS
  read -r -a SIZES <<<"$EVENT_LIVE"
  say "[events] $EVENT_REPEATS rounds x {${SIZES[*]}} live containers x {${TOPOLETS[*]}}, $EVENT_CHURN churn pods each, rotating"
  METRICS=on
  : >"$WORK/events.jsonl"
  NT=${#TOPOLETS[@]}
  for ((r = 0; r < EVENT_REPEATS; r++)); do
    for ((k = 0; k < ${#SIZES[@]} * NT; k++)); do
      live="${SIZES[((r + k) / NT) % ${#SIZES[@]}]}"
      v="${TOPOLETS[(r + k) % NT]}"
      drive "$v" events --live "$live" --churn "$EVENT_CHURN" --metrics-log "$WORK/run$((RUN + 1))/topolet.log"
      say "  round $((r + 1)) $v live $live: $J"
      echo "{\"plugin\":\"$v\",${J#\{}" >>"$WORK/events.jsonl"
    done
  done
  METRICS=off
  python3 - "$WORK/events.jsonl" "$EVENT_CHURN" "$EVENT_REPEATS" $((SECONDS - T)) >"$WORK/parts/events.json" <<'EOT'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out = {"event_runs": runs}
for plugin in sorted({r["plugin"] for r in runs}):
    by = {}
    for r in runs:
        if r["plugin"] != plugin:
            continue
        if r["managed_containers"] != r["live"]:
            sys.exit(f"bench: events: {plugin} reported {r['managed_containers']} managed containers, want {r['live']}")
        by.setdefault(str(r["live"]), []).append(r)
    ev = {k: {"median": round(statistics.median(x["all"]["median_us"] for x in v), 1),
              "p99": round(statistics.median(x["all"]["p99_us"] for x in v), 1),
              "events_per_run": v[0]["all"]["n"]} for k, v in by.items()}
    kinds = {k: {e: {"median": round(statistics.median(x["by_event"][e]["median_us"] for x in v), 1),
                     "p99": round(statistics.median(x["by_event"][e]["p99_us"] for x in v), 1)}
                 for e in v[0]["by_event"]} for k, v in by.items()}
    suffix = "" if plugin == "topolet" else "_" + plugin
    out["event_us" + suffix] = ev
    out["event_us_by_kind" + suffix] = kinds
out["meta"] = {"events": {"churn_pods": int(sys.argv[2]), "rounds": int(sys.argv[3]),
                          "seconds": int(sys.argv[4]),
                          "quantiles": "histogram_quantile of the churn-only histogram delta"}}
print(json.dumps(out))
EOT
fi

if part load; then
  T=$SECONDS
  # The walked pod: a real cgroup under a bench-only parent, a real process in it whose root is an
  # overlay with a 200,000-entry upper directory. The driver creates it in the plugin (--extra-pod).
  WALK_PARENT="/topolet-bench-$$/kubepods/besteffort/pod00000007-0000-4003-8000-0000000000ff"
  WALK_ID="$(printf 'b%063d' 0)"
  WALK="$WORK/walk"
  say "[load] building a 200,000-entry writable layer and its container cgroup"
  mkdir -p "$WALK/upper" "$WALK/work" "$WALK/merged"
  python3 - "$WALK/upper" <<'EOT'
import os, sys
for d in range(200):
    p = os.path.join(sys.argv[1], f"d{d:03d}")
    os.mkdir(p)
    for f in range(999):
        os.close(os.open(os.path.join(p, f"f{f:03d}"), os.O_CREAT | os.O_WRONLY, 0o644))
EOT
  CG_PIDS="/sys/fs/cgroup/pids"
  [[ -d "$CG_PIDS" ]] || die "[load] needs the cgroup v1 pids controller at $CG_PIDS"
  rel="" dirs=()
  for part_ in ${WALK_PARENT//\// } "$WALK_ID"; do
    rel="$rel/$part_"
    [[ -d "$CG_PIDS$rel" ]] || { mkdir "$CG_PIDS$rel" || die "mkdir $CG_PIDS$rel failed"; dirs=("$CG_PIDS$rel" "${dirs[@]}"); }
  done
  WALK_CGROUPS=("${dirs[@]}")
  unshare -m --propagation private sh -c "mount -t overlay overlay -o lowerdir=/usr,upperdir=$WALK/upper,workdir=$WALK/work $WALK/merged && echo \$\$ >$CG_PIDS$rel/cgroup.procs && exec chroot $WALK/merged /bin/sleep infinity" &
  SLEEPER_PID=$!
  deadline=$((SECONDS + 20))
  until grep -qx "$SLEEPER_PID" "$CG_PIDS$rel/cgroup.procs" 2>/dev/null && grep -q " / / .*upperdir=$WALK/upper" "/proc/$SLEEPER_PID/mountinfo" 2>/dev/null; do
    kill -0 "$SLEEPER_PID" 2>/dev/null || die "[load] the overlay process exited (unshare/mount/chroot failed)"
    ((SECONDS < deadline)) || die "[load] the overlay process is not in $CG_PIDS$rel with its overlay root"
    sleep 0.05
  done
  # The slow state directory.
  mkdir -p "$WORK/slow-backing" "$WORK/slow"
  "$SLOWFS" --delay "$SLOW_DELAY" "$WORK/slow-backing" "$WORK/slow" >"$WORK/slowfs.log" 2>&1 &
  SLOWFS_PID=$!
  deadline=$((SECONDS + 20))
  until grep -q "^mounted" "$WORK/slowfs.log"; do
    kill -0 "$SLOWFS_PID" 2>/dev/null || die "[load] slowfs failed: $(cat "$WORK/slowfs.log")"
    ((SECONDS < deadline)) || die "[load] slowfs did not mount $WORK/slow"
    sleep 0.05
  done
  WALK_EVICTION='[eviction]
interval = "1s"
hard = { "nodefs.available" = "1000Pi" }'
  CONDS=(quiet walk slow_state live scrape)
  : >"$WORK/load.tsv" # lines: PLUGIN CONDITION SAMPLES-FILE [LOG]
  NT=${#TOPOLETS[@]}
  say "[load] $LOAD_ROUNDS rounds x {${CONDS[*]}} x {${TOPOLETS[*]}}, $LOAD_N CreateContainer each, rotating"
  for ((r = 0; r < LOAD_ROUNDS; r++)); do
    for ((k = 0; k < ${#CONDS[@]} * NT; k++)); do
      c="${CONDS[((r + k) / NT) % ${#CONDS[@]}]}"
      v="${TOPOLETS[(r + k) % NT]}"
      CONF_STATE_DIR="" CONF_EVICTION="" METRICS=off
      extra=()
      case "$c" in
        walk) CONF_EVICTION="$WALK_EVICTION" extra=(--extra-pod "$WALK_PARENT:$WALK_ID") ;;
        slow_state) CONF_STATE_DIR="$WORK/slow/run$((RUN + 1))" ;;
        live) METRICS=on extra=(--live "$LOAD_LIVE") ;;
        scrape) METRICS=on extra=(--live "$LOAD_LIVE" --scrape-hz "$LOAD_SCRAPE_HZ" --metrics-log "$WORK/run$((RUN + 1))/topolet.log") ;;
      esac
      drive "$v" roundtrip --n "$LOAD_N" --round "$((200 + r))" --samples "$WORK/load-$v-$c" \
        --exclusive-every "$LOAD_EXCLUSIVE_EVERY" "${extra[@]}"
      say "  round $((r + 1)) $v $c: $J"
      # Every exclusive container was granted its CPU: the state writes this condition is about happened.
      asked="$(sed -nE 's/.*"exclusive":\{"asked":([0-9]+).*/\1/p' <<<"$J")"
      granted="$(sed -nE 's/.*"exclusive":\{[^}]*"granted":([0-9]+).*/\1/p' <<<"$J")"
      [[ -n "$asked" && "$asked" -gt 0 && "$granted" == "$asked" ]] ||
        die "[load] $v $c: $granted of $asked exclusive containers granted a CPU: $J"
      echo "$v $c $WORK/run$RUN/topolet.log" >>"$WORK/load.tsv"
      [[ "$c" != scrape ]] || echo "scrapes $v $c $J" >>"$WORK/load.tsv"
    done
  done
  CONF_STATE_DIR="" CONF_EVICTION="" METRICS=off
  kill -TERM "$SLEEPER_PID"; wait "$SLEEPER_PID" 2>/dev/null || true; SLEEPER_PID=""
  kill -TERM "$SLOWFS_PID"; wait "$SLOWFS_PID" 2>/dev/null || true; SLOWFS_PID=""
  for d in "${WALK_CGROUPS[@]}"; do rmdir "$d" || die "rmdir $d failed"; done
  WALK_CGROUPS=()
  for v in "${TOPOLETS[@]}"; do
    for c in "${CONDS[@]}"; do
      echo "stats $v $c $("$DRIVER" stats "$WORK/load-$v-$c")" >>"$WORK/load.tsv"
    done
  done
  python3 - "$WORK/load.tsv" "$LOAD_ROUNDS" "$LOAD_N" "$SLOW_DELAY" $((SECONDS - T)) "$LOAD_LIVE" "$LOAD_SCRAPE_HZ" >"$WORK/parts/load.json" <<'EOT'
import json, re, statistics, sys
stats, walk_ms, logs, scrapes = {}, {}, [], {}
for line in open(sys.argv[1]):
    f = line.split(" ", 3)
    if f[0] == "stats":
        d = json.loads(f[3])
        stats.setdefault(f[1], {})[f[2]] = {"median": d["median_us"], "p99": d["p99_us"], "n": d["n"]}
    elif f[0] == "scrapes":
        d = json.loads(f[3])["scrapes"]
        scrapes.setdefault(f[1], []).append(d)
    else:
        logs.append((f[0], f[1], f[2].strip()))
for plugin, cond, log in logs:
    text = open(log).read()
    if cond == "walk":
        # The loop measured the walked pod: its dry-run line names the pod with its disk bytes.
        if not any("evicting one pod" in l and re.search(r"\bdisk=[1-9]", l) for l in text.splitlines()):
            sys.exit(f"bench: load: {plugin} never measured the walked pod's disk usage (log {log})")
        w = [int(x) for x in re.findall(r"wall_us_per_iteration=(\d+)", text)]
        if w:
            walk_ms.setdefault(plugin, []).append(w[-1] / 1000)
print(json.dumps({
    "load_create_us": stats,
    "load_walk_ms_per_interval": {p: round(statistics.median(v), 1) for p, v in walk_ms.items()},
    # Per plugin, the median over runs of each run's median and p99 scrape time, and the scrapes made.
    "load_scrape_ms": {p: {"median": round(statistics.median(r["median_us"] for r in v) / 1000, 2),
                           "p99": round(statistics.median(r["p99_us"] for r in v) / 1000, 2),
                           "scrapes": sum(r["n"] for r in v)} for p, v in scrapes.items()},
    "meta": {"load": {"live": int(sys.argv[6]), "scrape_hz": float(sys.argv[7]), "rounds": int(sys.argv[2]), "requests_per_run": int(sys.argv[3]),
                      "walk_entries": 200_000, "slow_state_delay": sys.argv[4],
                      "seconds": int(sys.argv[5])}}}))
EOT
fi

if part create_start; then
  T=$SECONDS
  STACK="$WORK/stack"
  say "[create_start] starting containerd $VERSION"
  CONTAINERD_VERSION="$VERSION" "$HACK_DIR/containerd.sh" start "$STACK" >/dev/null || die "containerd.sh start failed"
  # shellcheck disable=SC1091
  source "$STACK/env"
  LOG="$CONTAINERD_LOG"
  CS_SAMPLES="$WORK/create-start.txt"
  : >"$CS_SAMPLES"
  mkdir -p "$WORK/cs/ids" "$WORK/cs/logs" "$WORK/cs/topolet"
  topolet_config "$WORK/cs/topolet/topolet.toml" "$NRI_SOCKET" "$WORK/cs/topolet" off
  HOST_CPUS="$(cat /sys/devices/system/cpu/online)"
  HOST_MEMS="$(cat /sys/devices/system/node/online 2>/dev/null || echo 0)"

  count() { grep -cF -- "$1" "$LOG" || true; }
  wait_count() { # wait_count PATTERN N: until PATTERN occurs N times in containerd's log
    local deadline=$((SECONDS + 20))
    until (($(count "$1") >= $2)); do
      ((SECONDS < deadline)) || die "timed out waiting for containerd to log: $1"
      sleep 0.05
    done
  }
  CS_PLUGIN=""  # the condition whose plugin is connected
  declare -A CS_NAME=([topolet]="50-topolet" [go_baseline]="60-go-baseline")
  plugin_off() {
    [[ -n "$CS_PLUGIN" ]] || return 0
    local closed="connection to plugin \\\"${CS_NAME[$CS_PLUGIN]}\\\" closed" n
    n=$(count "$closed")
    kill -TERM "$PLUGIN_PID"; wait "$PLUGIN_PID" 2>/dev/null || true
    PLUGIN_PID="" CS_PLUGIN=""
    wait_count "$closed" $((n + 1))
  }
  plugin_on() { # plugin_on topolet|go_baseline
    [[ "$CS_PLUGIN" != "$1" ]] || return 0
    plugin_off
    local connected="plugin \\\"${CS_NAME[$1]}\\\" connected and synchronized" n
    n=$(count "$connected")
    case "$1" in
      topolet) "$TOPOLET" run --config "$WORK/cs/topolet/topolet.toml" --log-file "$WORK/cs/topolet/topolet.log" \
        2>>"$WORK/cs/topolet/stderr" & ;;
      go_baseline) "$GO_BASELINE" --socket "$NRI_SOCKET" --idx 60 --cpuset "$HOST_CPUS" --mems "$HOST_MEMS" \
        --oom-score-adj 1000 >>"$WORK/cs/go-baseline.log" 2>&1 & ;;
    esac
    PLUGIN_PID=$! CS_PLUGIN="$1"
    wait_count "$connected" $((n + 1))
  }
  CS_CONDS=(none topolet go_baseline)
  say "[create_start] $CS_ROUNDS rounds x $CS_BLOCK create+start per condition (${CS_CONDS[*]}), rotating"
  for ((r = 0; r < CS_ROUNDS; r++)); do
    for ((k = 0; k < ${#CS_CONDS[@]}; k++)); do
      c="${CS_CONDS[(r + k) % ${#CS_CONDS[@]}]}"
      if [[ "$c" == none ]]; then plugin_off; else plugin_on "$c"; fi
      "$CLIENT" run -mode create-start -endpoint "${CRI_ENDPOINT#unix://}" -state "$WORK/cs/ids" -label "$c" \
        -pod cs-be -cgroup-parent "$CGROUP_PARENT_BASE/kubepods/besteffort/podcs-be" -logdir "$WORK/cs/logs" \
        -image "$TEST_IMAGE" -n "$CS_BLOCK" -out "$CS_SAMPLES" || die "CRI client failed in condition $c"
    done
    say "  round $((r + 1)) of $CS_ROUNDS done"
  done
  plugin_off
  grep -q "container placed" "$WORK/cs/topolet/topolet.log" ||
    die "topolet placed no container in its create_start blocks (log: $WORK/cs/topolet/topolet.log)"
  "$CLIENT" stats "$CS_SAMPLES" >&2
  CS_JSON="$("$CLIENT" json "$CS_SAMPLES")"
  RUNC_V="$(runc --version | awk 'NR == 1 {print $3}')"  # awk reads it all: no SIGPIPE under pipefail
  "$HACK_DIR/containerd.sh" stop "$STACK" >/dev/null || die "containerd.sh stop $STACK failed"
  STACK=""
  python3 - "$CS_JSON" "$VERSION" "$RUNC_V" "$CS_ROUNDS" "$CS_BLOCK" $((SECONDS - T)) >"$WORK/parts/create_start.json" <<'EOT'
import json, sys
d = json.loads(sys.argv[1])
r2 = lambda x: round(x, 2)
print(json.dumps({
    "create_start_ms": {k: {"median": r2(v["median"]), "p99": r2(v["p99"])} for k, v in d["conditions"].items()},
    "create_start_overhead_ms": {k: {kk: r2(vv) for kk, vv in v.items()} for k, v in d["overhead"].items()},
    "create_start_detail": d,
    "meta": {"create_start": {"containerd": sys.argv[2], "runc": sys.argv[3], "rounds": int(sys.argv[4]),
                              "block": int(sys.argv[5]), "seconds": int(sys.argv[6]),
                              "pod": "BestEffort, kubepods/besteffort cgroup parent"}}}))
EOT
fi

if part eviction; then
  T=$SECONDS
  say "[eviction] integration/tests/eviction.rs (pid.available, memory.available) on containerd $VERSION"
  # The release topolet the other parts measured (TOPOLET_BIN), cwd as cargo test sets it.
  (cd "$REPO_ROOT/integration" && TOPOLET_BENCH_OUT="$WORK/eviction.jsonl" TOPOLET_CONTAINERD_VERSION="$VERSION" \
    TOPOLET_BIN="$TOPOLET" "$EVICTION_TEST" evicts --test-threads=1 --nocapture \
    >"$WORK/eviction-test.log" 2>&1) || die "the eviction tests failed: $(tail -n 30 "$WORK/eviction-test.log")"
  python3 - "$WORK/eviction.jsonl" $((SECONDS - T)) >"$WORK/parts/eviction.json" <<'EOT'
import json, statistics, sys
tests = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
if len(tests) != 2:
    sys.exit(f"bench: eviction: {sys.argv[1]} has {len(tests)} figure lines, want 2 (pid, memory)")
mean = lambda k: round(statistics.mean(t[k] for t in tests), 3)
print(json.dumps({
    "eviction_loop_ms_per_interval": {"idle": mean("idle_cpu_ms_per_interval"),
                                      "evicting_interval_est": mean("eviction_interval_cpu_ms_est")},
    "eviction_reaction_s": {t["signal"]: round(t["reaction_s"], 3) for t in tests},
    "eviction_reaction_bound_s": {t["signal"]: t["implied_bound_s"] for t in tests},
    "eviction_tests": tests,
    "meta": {"eviction": {"seconds": int(sys.argv[2])}}}))
EOT
fi

if part reclaimed; then
  T=$SECONDS
  RC_FILES=()
  for mode in $RC_DAEMONS; do
    case "$mode" in
      pinned) pin=(taskset -c 0) ;;
      floating) pin=() ;;
      *) die "BENCH_RC_DAEMONS: unknown placement $mode (pinned floating)" ;;
    esac
    say "[reclaimed] integration/tests/kubelet_colocation.rs, the node's daemons $mode: kubelet $KUBE_VERSION, containerd $VERSION (~6 min)"
    (cd "$REPO_ROOT/integration" && TOPOLET_BENCH_OUT="$WORK/reclaimed-$mode.jsonl" TOPOLET_CONTAINERD_VERSION="$VERSION" \
      TOPOLET_BIN="$TOPOLET" TOPOLET_COLOCATION_PROBE="$COLOCATION_PROBE" "${pin[@]}" "$COLOCATION_TEST" --test-threads=1 \
      --nocapture >"$WORK/reclaimed-test-$mode.log" 2>&1) ||
      die "the colocation test ($mode) failed: $(tail -n 30 "$WORK/reclaimed-test-$mode.log")"
    RC_FILES+=("$mode=$WORK/reclaimed-$mode.jsonl")
  done
  python3 - $((SECONDS - T)) "${RC_FILES[@]}" >"$WORK/parts/reclaimed.json" <<'EOT'
import json, sys
keys = ("solo", "colocated", "throughput_ratio", "late_p99_ratio", "throughput_ratio_paired_median",
        "late_p99_ratio_paired_median", "node_busy_rise_millis", "pool_busy_rise_millis",
        "loadavg_start", "loadavg_end", "window_s", "alternations")
def figures(path):
    lines = [json.loads(l) for l in open(path) if l.strip()]
    if len(lines) != 1:
        sys.exit(f"bench: reclaimed: {path} has {len(lines)} figure lines, want 1")
    d = lines[0]
    adv = {k: v for k, v in d["advertised"].items() if k != "timeline"}
    return {
        "reclaimed_colocation": {k: d[k] for k in keys},
        "reclaimed_cut_ms": {"median": d["cut_reaction_median_ms"], "max": d["cut_reaction_max_ms"],
                             "samples": d["cut_reaction_ms"],
                             "from_request_median": d["cut_reaction_from_request_median_ms"],
                             "suppress_interval_ms": d["suppress_interval_ms"], "interval_ms": d["interval_ms"]},
        "reclaimed_cut_latency_metric": d["cut_latency_metric"],
        "reclaimed_advertised": adv,
        "reclaimed_reserved": d["reserved_step"],
        "reclaimed_config": {"toml": d["config"], "batch_pods": d["batch_pods"],
                             "batch_millis_each": d["batch_millis_each"], "regular_cpus": d["regular_cpus"],
                             "margin_millis": d["margin_millis"]},
        "reclaimed_goals": d.get("goals", []),
    }, {"windows": d["windows"], "advertised_timeline": d["advertised"]["timeline"]}, d["windows_s"]
runs = {}
for arg in sys.argv[2:]:
    mode, path = arg.split("=", 1)
    runs[mode] = figures(path)
first = next(iter(runs))
out = dict(runs[first][0])
out["reclaimed_by_daemons"] = {m: r[0] for m, r in runs.items()}
out["reclaimed_detail"] = {m: r[1] for m, r in runs.items()}
out["meta"] = {"reclaimed": {"seconds": int(sys.argv[1]), "windows_s": runs[first][2],
                             "daemons": list(runs), "figures_of": first}}
print(json.dumps(out))
EOT
fi

if part isolation; then
  T=$SECONDS
  say "[isolation] integration/tests/kubelet_isolation.rs: kubelet $KUBE_VERSION, containerd $VERSION, $ISO_ROUNDS rounds x 3 configurations"
  (cd "$REPO_ROOT/integration" && TOPOLET_BENCH_OUT="$WORK/isolation.jsonl" TOPOLET_CONTAINERD_VERSION="$VERSION" \
    TOPOLET_BIN="$TOPOLET" TOPOLET_COLOCATION_PROBE="$COLOCATION_PROBE" TOPOLET_ISOLATION_ROUNDS="$ISO_ROUNDS" \
    TOPOLET_ISOLATION_WINDOW_S="$ISO_WINDOW_S" TOPOLET_ISOLATION_ALTERNATIONS="$ISO_ALTERNATIONS" \
    "$ISOLATION_TEST" a_guaranteed_probe_beside_spinning_neighbours --test-threads=1 --nocapture \
    >"$WORK/isolation-test.log" 2>&1) || die "the isolation test failed: $(tail -n 30 "$WORK/isolation-test.log")"
  python3 - "$WORK/isolation.jsonl" $((SECONDS - T)) >"$WORK/parts/isolation.json" <<'EOT'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
if len(lines) != 1 or lines[0].get("test") != "isolation":
    sys.exit(f"bench: isolation: {sys.argv[1]} has {len(lines)} figure lines, want 1 isolation line")
d = lines[0]
d.pop("test")
print(json.dumps({"isolation": d, "meta": {"isolation": {"seconds": int(sys.argv[2])}}}))
EOT
fi

if part sched_ancestor; then
  T=$SECONDS
  say "[sched_ancestor] hack/bench/sched-ancestor: CPU $SA_CPU, $SA_ROUNDS rounds x 13 conditions x $SA_SECONDS s"
  "$SCHED_ANCESTOR" -cpu "$SA_CPU" -rounds "$SA_ROUNDS" -seconds "$SA_SECONDS" >"$WORK/sched-ancestor.jsonl" \
    2>"$WORK/sched-ancestor.log" || die "sched-ancestor failed: $(tail -n 20 "$WORK/sched-ancestor.log")"
  python3 - "$WORK/sched-ancestor.jsonl" $((SECONDS - T)) "$SA_ROUNDS" "$SA_SECONDS" "$SA_CPU" \
    >"$WORK/parts/sched_ancestor.json" <<'EOT'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
if len(rows) != 13:
    sys.exit(f"bench: sched_ancestor: {sys.argv[1]} has {len(rows)} rows, want 13")
print(json.dumps({"sched_ancestor": rows,
                  "meta": {"sched_ancestor": {"seconds": int(sys.argv[2]), "rounds": int(sys.argv[3]),
                                              "window_s": float(sys.argv[4]), "cpu": int(sys.argv[5])}}}))
EOT
fi

if part pod_start; then
  T=$SECONDS
  say "[pod_start] integration/tests/kubelet_isolation.rs: kubectl apply of $PS_PODS pods, $PS_ROUNDS rounds, with and without topolet"
  (cd "$REPO_ROOT/integration" && TOPOLET_BENCH_OUT="$WORK/pod_start.jsonl" TOPOLET_CONTAINERD_VERSION="$VERSION" \
    TOPOLET_BIN="$TOPOLET" TOPOLET_POD_START_ROUNDS="$PS_ROUNDS" TOPOLET_POD_START_N="$PS_PODS" \
    "$ISOLATION_TEST" kubectl_apply_to_running --test-threads=1 --nocapture \
    >"$WORK/pod_start-test.log" 2>&1) || die "the pod start test failed: $(tail -n 30 "$WORK/pod_start-test.log")"
  # The CRI client's statistics (the same median difference and bootstrap interval as
  # [create_start]) over "<label> <µs>" lines, none first: the baseline.
  python3 - "$WORK/pod_start.jsonl" >"$WORK/pod_start.samples" <<'EOT'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
if len(lines) != 1 or lines[0].get("test") != "pod_start":
    sys.exit(f"bench: pod_start: {sys.argv[1]} has {len(lines)} figure lines, want 1 pod_start line")
for label in ("none", "topolet"):
    for ms in lines[0]["samples_ms"][label]:
        print(label, round(ms * 1000))
EOT
  "$CLIENT" stats "$WORK/pod_start.samples" >&2
  PS_JSON="$("$CLIENT" json "$WORK/pod_start.samples")"
  python3 - "$WORK/pod_start.jsonl" "$PS_JSON" $((SECONDS - T)) >"$WORK/parts/pod_start.json" <<'EOT'
import json, sys
d = json.loads(open(sys.argv[1]).readline())
s = json.loads(sys.argv[2])
r1 = lambda x: round(x, 1)
print(json.dumps({
    "pod_start_ms": {k: {kk: (r1(vv) if kk != "n" else vv) for kk, vv in v.items()} for k, v in s["conditions"].items()},
    "pod_start_overhead_ms": {k: {kk: r1(vv) for kk, vv in v.items()} for k, v in s["overhead"].items()},
    "pod_start_detail": {k: d[k] for k in ("pods", "rounds", "mix", "order", "samples_ms", "loadavg_start", "loadavg_end")},
    "meta": {"pod_start": {"seconds": int(sys.argv[3])}}}))
EOT
fi

if part reclaimed_writes; then
  T=$SECONDS
  say "[reclaimed_writes] hack/api-cost.sh API_RECLAIMED=1: base and topolet, $RW_ROUNDS x ${RW_SECONDS}s windows each"
  API_RECLAIMED=1 API_ROUNDS="$RW_ROUNDS" API_SECONDS="$RW_SECONDS" API_PROBE="$COLOCATION_PROBE" \
    API_BASE_BIN="${BIN[base]}" API_BIN="$TOPOLET" API_OUT="$WORK/reclaimed_writes.json" CONTAINERD_VERSION="$VERSION" \
    "$HACK_DIR/api-cost.sh" >"$WORK/reclaimed_writes.md" 2>"$WORK/reclaimed_writes.log" ||
    die "hack/api-cost.sh failed: $(tail -n 30 "$WORK/reclaimed_writes.log")"
  python3 - "$WORK/reclaimed_writes.json" $((SECONDS - T)) "$RW_ROUNDS" "$RW_SECONDS" >"$WORK/parts/reclaimed_writes.json" <<'EOT'
import json, sys
d = json.load(open(sys.argv[1]))
print(json.dumps({
    "reclaimed_writes": {b: d[b]["summary"] for b in d},
    "reclaimed_writes_detail": d,
    "meta": {"reclaimed_writes": {"seconds": int(sys.argv[2]), "rounds": int(sys.argv[3]), "window_s": int(sys.argv[4])}}}))
EOT
fi

mkdir -p "$OUT_DIR"
python3 - "$WORK/parts" "$OUT_DIR/bench.json" "$(nproc)" $((SECONDS - T0)) <<'EOT'
import glob, json, os, sys
out = {"meta": {"cpus": int(sys.argv[3]), "seconds": int(sys.argv[4])}}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    d = json.load(open(f))
    out["meta"].update(d.pop("meta", {}))
    out.update(d)
json.dump(out, open(sys.argv[2], "w"), indent=2)
rows = []
def row(*cells):
    rows.append(tuple(str(c) for c in cells))
def ratio(a, b, fmt="{:.2f}x"):
    return fmt.format(a / b) if a is not None and b else ""
g = out.get
if "nri_roundtrip_us" in out:
    rt = out["nri_roundtrip_us"]
    base = "base" in rt
    head = ["[wire] fake runtime", "topolet"] + (["base"] if base else []) + ["go_baseline", "topolet/go"]
    rows.append(tuple(head + (["topolet/base"] if base else [])))
    def wire_row(name, t, b, go):
        row(name, t, *([b] if base else []), go if go is not None else "-", ratio(t, go),
            *([ratio(t, b)] if base else []))
    for q in ("median", "p99"):
        wire_row(f"NRI round trip {q} (us)", rt["topolet"][q], rt.get("base", {}).get(q), rt["go_baseline"][q])
    for key, name in (("sdk_floor", "SDK floor, fixed reply"), ("bare_floor", "bare floor, one thread"),
                      ("socket_floor", "socket floor, no plugin")):
        if key in rt:
            f = rt[key]
            row(f"  {name}: median / p99 (us)", f"{f['median']} / {f['p99']}",
                *([""] if base else []), "", f"p99 {ratio(f['p99'], rt['go_baseline']['median'])} go median",
                *([""] if base else []))
    sp, pl = out["sync_ms_by_plugin"], out.get("sync_plugin_ms", {})
    for n in ("1000", "10000"):
        wire_row(f"Synchronize {int(n):,} ctrs, end to end (ms)", sp["topolet"][n], sp.get("base", {}).get(n),
                 sp["go_baseline"][n])
        if n in pl.get("topolet", {}):
            wire_row(f"  of which the plugin's handler (ms)", pl["topolet"][n], pl.get("base", {}).get(n), None)
        if n in sp.get("sdk_floor", {}):
            f = sp["sdk_floor"][n]
            row("  SDK floor, decode and empty reply (ms)", f, *([""] if base else []), "",
                f"{ratio(f, sp['go_baseline'][n])} go", *([""] if base else []))
    rss = out["rss_mib"]
    wire_row("RSS after 1,000 ctrs (MiB)", rss["topolet"], rss.get("base"), rss["go_baseline"])
    for part, name in (("rss_anon_mib", "heap and stacks"), ("rss_file_mib", "binary and libraries")):
        parts = out.get("rss_parts_mib", {}).get(part)
        if parts:
            wire_row(f"  of which {name} (MiB)", parts["topolet"], parts.get("base"), parts["go_baseline"])
for plugin in ("topolet", "base"):
    key = "event_us" + ("" if plugin == "topolet" else "_base")
    if key not in out:
        continue
    rows.append((f"[events] {plugin} histogram", "median", "p99", "median vs smallest"))
    ev = out[key]
    sizes = sorted(ev, key=int)
    for n in sizes:
        row(f"event at {int(n):,} live ctrs (us)", ev[n]["median"], ev[n]["p99"],
            f"{ev[n]['median'] / ev[sizes[0]]['median']:.2f}x")
    kinds, small, big = out.get(key.replace("event_us", "event_us_by_kind"), {}), sizes[0], sizes[-1]
    for kind in sorted(kinds.get(big, {})):
        k, k0 = kinds[big][kind], kinds.get(small, {}).get(kind)
        row(f"  {kind} at {int(big):,} (us)", k["median"], k["p99"],
            f"{k['median'] / k0['median']:.2f}x vs {int(small):,} live" if k0 and k0["median"] else "")
if "event_us" in out and "event_us_base" in out:
    rows.append(("[events] topolet vs base", "topolet p99", "base p99", "topolet/base (median, p99)"))
    for n in sorted(out["event_us"], key=int):
        t, b = out["event_us"][n], out["event_us_base"].get(n)
        if b:
            row(f"event at {int(n):,} live ctrs (us)", t["p99"], b["p99"],
                f"{t['median'] / b['median']:.2f}x, {t['p99'] / b['p99']:.2f}x")
    big = max(out["event_us"], key=int)
    for kind in ("CreateContainer", "StopContainer"):
        t = out["event_us_by_kind"].get(big, {}).get(kind)
        b = out["event_us_by_kind_base"].get(big, {}).get(kind)
        if t and b:
            row(f"  {kind} at {int(big):,} (us)", t["p99"], b["p99"],
                f"{t['median'] / b['median']:.2f}x, {t['p99'] / b['p99']:.2f}x")
if "load_create_us" in out:
    ld = out["load_create_us"]
    rows.append(("[load] CreateContainer", "median", "p99", "p99 vs quiet" + (" | topolet/base p99" if "base" in ld else "")))
    for plugin in ("topolet", "base"):
        for c in ("quiet", "walk", "slow_state", "live", "scrape"):
            if c not in ld.get(plugin, {}):
                continue
            x = ld[plugin][c]
            extra = ""
            if plugin == "topolet" and "base" in ld:
                extra = " | " + ratio(x["p99"], ld["base"][c]["p99"])
            row(f"{plugin}, {c} (us)", x["median"], x["p99"], ratio(x["p99"], ld[plugin]["quiet"]["p99"]) + extra)
    for plugin, ms in out.get("load_walk_ms_per_interval", {}).items():
        row(f"{plugin}: eviction interval wall while walking (ms)", ms, "", "")
    for plugin, sc in out.get("load_scrape_ms", {}).items():
        row(f"{plugin}: /metrics scrape at {out['meta']['load']['live']:,} containers (ms)", sc["median"], sc["p99"], f"{sc['scrapes']} scrapes")
if "create_start_ms" in out:
    rows.append(("[create_start] real CRI", "median", "p99", "overhead vs none (95% CI)"))
    cs, ov = out["create_start_ms"], out["create_start_overhead_ms"]
    for k in ("none", "topolet", "go_baseline"):
        o = ov.get(k)
        extra = f"{o['median_diff']:+.2f} ms [{o['ci95_lo']:+.2f}, {o['ci95_hi']:+.2f}]" if o else "(baseline)"
        row(f"create+start, {k} (ms)", cs[k]["median"], cs[k]["p99"], extra)
if "eviction_loop_ms_per_interval" in out:
    rows.append(("[eviction] real stack", "value", "baseline", "ratio"))
    lp = out["eviction_loop_ms_per_interval"]
    row("loop CPU, evicting interval (ms)", lp["evicting_interval_est"], lp["idle"],
        f"{lp['evicting_interval_est'] / lp['idle']:.1f}x idle" if lp["idle"] else "")
    row("loop CPU, idle interval (ms)", lp["idle"], "", "")
    for sig, s in out["eviction_reaction_s"].items():
        bound = out["eviction_reaction_bound_s"][sig]
        row(f"reaction {sig} (s)", s, f"{bound} (interval+grace)", f"{s / bound:.2f}x")
def reclaimed_rows(f, daemons):
    rc, cut, adv = f["reclaimed_colocation"], f["reclaimed_cut_ms"], f["reclaimed_advertised"]
    so, co = rc["solo"], rc["colocated"]
    rows.append((f"[reclaimed] real kubelet, daemons {daemons}, {rc['alternations']} x {rc['window_s']:g} s windows", "solo",
                 "colocated", "colocated/solo (paired median) | goal"))
    row("regular throughput (units/s)", f"{so['throughput_units_per_s']:,.0f}", f"{co['throughput_units_per_s']:,.0f}",
        f"{rc['throughput_ratio']:.3f}x ({rc['throughput_ratio_paired_median']:.3f}x) | >= 0.97x")
    row("regular wake-up lateness p50 (us)", so["late_p50_us"], co["late_p50_us"], ratio(co["late_p50_us"], so["late_p50_us"]))
    row("regular wake-up lateness p99 (us)", so["late_p99_us"], co["late_p99_us"],
        f"{rc['late_p99_ratio']:.2f}x ({rc['late_p99_ratio_paired_median']:.2f}x) | <= 1.2x")
    row("regular missed ticks / ticks", f"{so['missed_ticks']:.0f} / {so['ticks']:.0f}",
        f"{co['missed_ticks']:.0f} / {co['ticks']:.0f}", "")
    row("node CPU busy, both CPUs (milli-CPU)", so["node_busy_millis"], co["node_busy_millis"],
        f"{rc['node_busy_rise_millis']:+.0f}m; the batch pods got {co['batch_millis']:.0f}m")
    row("pool CPU 1 busy (milli-CPU)", so["pool_busy_millis"], co["pool_busy_millis"], f"{rc['pool_busy_rise_millis']:+.0f}m")
    if "pool_busy_ticks_millis" in so:
        row("pool CPU 1 busy by /proc/stat's ticks (milli-CPU)", so["pool_busy_ticks_millis"],
            co["pool_busy_ticks_millis"], "the tick's sampling, for comparison")
    row("regular pod / batch pods CPU (milli-CPU)", f"{so['regular_millis']:.0f} / {so['batch_millis']:.0f}",
        f"{co['regular_millis']:.0f} / {co['batch_millis']:.0f}", "")
    la0, la1 = rc["loadavg_start"], rc["loadavg_end"]
    row("load average 1/5/15 min, start / end", " ".join(f"{x:.2f}" for x in la0), " ".join(f"{x:.2f}" for x in la1), "")
    rows.append((f"[reclaimed] suppress and advertised, daemons {daemons}", "value", "bound", "ratio"))
    row(f"step -> batch quota cut, median of {len(cut['samples'])} (ms)", cut["median"],
        f"{cut['suppress_interval_ms']} (suppress interval)", f"{cut['median'] / cut['suppress_interval_ms']:.2f}x")
    row("step -> batch quota cut, max (ms)", cut["max"], f"{cut['interval_ms']} (interval)",
        f"{cut['max'] / cut['interval_ms']:.2f}x")
    m = f["reclaimed_cut_latency_metric"]
    row("topolet's cut latency histogram: n, mean (ms)", f"{m['count']:.0f}, {m['mean_ms']}",
        f"p50 <= {m['p50_le_ms']}, p99 <= {m['p99_le_ms']}", "")
    row("Node amount above the idle pool (samples)", f"{adv['exceeded_idle_samples']} of {adv['samples']}",
        f"longest {adv['exceeded_idle_longest_ms']:.0f} ms", "")
    row("Node amount moves / direction flips", f"{adv['changes']} / {adv['direction_flips']}",
        f"smallest rise {adv['min_up_move_millis']}m", f"hysteresis {adv['hysteresis_millis']}m")
    rs = f["reclaimed_reserved"]
    row("regular thread on the reserved CPU: formula before -> Node during (m)", f"{rs['amount_before_millis']} -> {rs['amount_during_millis']}",
        f"spill counted {rs['spill_millis']}m", "")
    if f.get("reclaimed_goals"):
        rows.append((f"[reclaimed] goals, daemons {daemons} (integration/src/colocation_goals.rs)", "value", "goal", "met"))
        for g in f["reclaimed_goals"]:
            row(g["name"], g["value"], g["bound"], "met" if g["met"] else "NOT MET")
for daemons, f in (out.get("reclaimed_by_daemons")
                   or ({"floating": out} if "reclaimed_colocation" in out else {})).items():
    reclaimed_rows(f, daemons)
if "sched_ancestor" in out:
    m = out["meta"]["sched_ancestor"]
    rows.append((f"[sched_ancestor] plain cgroups, CPU {m['cpu']}, {m['rounds']} x {m['window_s']:g} s per condition",
                 "p50 (us)", "p99 (us)", "max (us)", "p99 ratio"))
    for r in out["sched_ancestor"]:
        row(r["condition"], f"{r['p50_us']:.0f}", f"{r['p99_us']:.0f}", f"{r['max_us']:.0f}",
            f"{r['p99_ratio']:.2f}x {r['reference']}" if "p99_ratio" in r else "")
if "isolation" in out:
    iso = out["isolation"]
    cf, cs = iso["configs"], ("none", "static", "topolet")
    rows.append((f"[isolation] real kubelet, {iso['rounds']} x {iso['alternations']} x {iso['window_s']:g} s windows",
                 "kubelet none", "kubelet static", "none + topolet", "topolet/static | goal"))
    for sc, name in (("normal", "bursts 2 x 10 ms/100 ms"), ("over_quota", "bursts 2 x 60 ms/100 ms")):
        f = {c: cf[c]["scenarios"][sc] for c in cs}
        def srow(label, key, goal=""):
            row(f"{name}: {label}", *[f[c][key] for c in cs],
                ratio(f["topolet"][key], f["static"][key]) + (f" | {goal}" if goal else ""))
        srow("lateness p50 (us)", "late_p50_us")
        srow("lateness p99 (us)", "late_p99_us", "<= 1.2x")
        row(f"  p99 of each window (us)", *[" ".join(f"{x:.0f}" for x in f[c]["late_p99_us_windows"]) for c in cs], "")
        srow("lateness p99.9 (us)", "late_p999_us")
        srow("lateness max (us)", "late_max_us")
        srow("ticks late >= 10 ms", "late_over_10ms")
        row(f"{name}: ticks missed (slept through) / woken", *[f"{f[c]['missed_ticks']} / {f[c]['ticks']}" for c in cs], "")
        srow("burst wall p99 (ms)", "burst_p99_ms")
        row(f"{name}: nr_throttled / nr_periods, probe container", *[f"{f[c]['nr_throttled']} / {f[c]['nr_periods']}" for c in cs], "| 0")
        row(f"  the probe's pod cgroup", *[f"{f[c]['pod_nr_throttled']} / {f[c]['pod_nr_periods']}" for c in cs], "")
    row("probe cpuset.cpus (Cpus_allowed_list)", *[f"{cf[c]['cpuset']} ({cf[c]['cpus_allowed']})" for c in cs], "")
    row("probe cfs_quota_us, container / pod", *[f"{cf[c]['ctr_quota_us']} / {cf[c]['pod_quota_us']}" for c in cs], "")
    ms = lambda v: ", ".join("never" if x is None else f"{x:+.0f}" for x in v)
    row("neighbours allowed on its CPU until (ms after start)", *[ms(cf[c]["neighbours_allowed_until_ms"]) for c in cs], "| at once")
    row("neighbours ran on its CPU until (ms after start)", *[ms(cf[c]["neighbours_ran_until_ms"]) for c in cs], "")
    la0, la1 = iso["loadavg_start"], iso["loadavg_end"]
    row("load average 1/5/15 min, start / end", " ".join(f"{x:.2f}" for x in la0), " ".join(f"{x:.2f}" for x in la1), "", "")
if "pod_start_ms" in out:
    ps, ov, det = out["pod_start_ms"], out["pod_start_overhead_ms"], out["pod_start_detail"]
    rows.append((f"[pod_start] kubectl apply of {det['pods']} pods to Running", "median", "p10 / p90",
                 "overhead vs none (95% CI)"))
    for k in ("none", "topolet"):
        o = ov.get(k)
        extra = f"{o['median_diff']:+.1f} ms [{o['ci95_lo']:+.1f}, {o['ci95_hi']:+.1f}]" if o else "(baseline)"
        row(f"{k}, {ps[k]['n']} blocks (ms)", f"{ps[k]['median']:.1f}", f"{ps[k]['p10']:.1f} / {ps[k]['p90']:.1f}", extra)
    la0, la1 = det["loadavg_start"], det["loadavg_end"]
    row("load average 1/5/15 min, start / end", " ".join(f"{x:.2f}" for x in la0), " ".join(f"{x:.2f}" for x in la1), "")
if "reclaimed_writes" in out:
    rw, m = out["reclaimed_writes"], out["meta"]["reclaimed_writes"]
    rows.append((f"[reclaimed_writes] per hour, {m['rounds']} x {m['window_s']} s per binary", "topolet", "base",
                 "topolet/base"))
    for k, name in (("node_writes", "Node writes (nodes/status, nodes)"),
                    ("nrt_writes", "NodeResourceTopology writes"), ("topolet_total", "topolet: all requests"),
                    ("kubelet_total", "kubelet: all requests")):
        row(name, f"{rw['topolet'][k]:.0f}", f"{rw['base'][k]:.0f}", ratio(rw["topolet"][k], rw["base"][k]))
ncol = max(len(r) for r in rows)
rows = [r + ("",) * (ncol - len(r)) for r in rows]
w = [max(len(r[i]) for r in rows) for i in range(ncol)]
print()
for r in rows:
    print(f"{r[0]:<{w[0]}}  " + "  ".join(f"{c:>{w[i + 1]}}" for i, c in enumerate(r[1:])).rstrip())
print(f"({out['meta']['cpus']} CPUs, {out['meta']['seconds']} s; written to {sys.argv[2]})")
EOT
