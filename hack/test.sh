#!/usr/bin/env bash
# hack/test.sh — run every test of topolet: the single "run every test" command (CI runs it via .ci/run).
#
# Usage: hack/test.sh          (no arguments; as root, on Linux with cgroups; needs go, cargo, gcc)
#
# Steps, each under a section header and ending in a "--- NAME: ok (Ns)" line; the first failure
# stops the run with a non-zero exit. Nothing is skipped: a missing tool or dependency is a failure.
# At its end, whether the run passed, failed or was stopped (an EXIT trap, which also stops the
# background Kubernetes build and the lanes), the script prints a table of the steps it ran: name,
# lane (`-` for a step of the script itself), outcome (ok; FAILED for the step that failed, the
# last one; stopped for a step a signal or a failing lane ended; skipped for the guests under
# TEST_GUESTS=0) and seconds, the wall time of the lanes side by side, and the run's total seconds.
#   1. hack/install-deps.sh for every containerd line (default v2.4.2, v2.3.7 and v2.0.14); with
#      cri-o in TEST_RUNTIMES, hack/install-crio.sh (CRI-O built from its Go module, pinns, conmon)
#      starts in the background beside the Kubernetes build and is joined with it, in step 6
#   2. cargo fmt --all --check; hack/module-cycles.py (no module depends on one that depends back,
#      no folder of plugin/src uses one that uses it back or that lib.rs's table does not allow);
#      every shell script under hack/, .ci/ and deploy/ through shellcheck (`shell_scripts`, below);
#      hack/docs.sh links (every relative link of README.md and the manual, docs/src, resolves)
#   3. clippy, inside the builds the tests need (`linted`, below): every target of the workspace
#      but topolet-integration, then every target of topolet-integration, with -D warnings
#   4. cargo test --workspace --exclude topolet-integration          (unit tests, no rebuild)
#   5. the upgrade image's topolet (TOPOLET_NEXT_BIN, for kubelet_helm.rs: a second build whose
#      version string differs), built before the integration build (build_next_bin, below)
#   6. hack/install-kube.sh (started in the background after step 1, joined here), then
#      hack/install-crio.sh (likewise, with cri-o in TEST_RUNTIMES), then
#      hack/smoke-stack.sh                                           (the containerd test stack itself)
#   7. three lanes side by side (docs/src/ci-time.md; `run_lanes`, below), each a process group
#      with its own log ($TARGET_DIR/ci/lanes/<lane>.log: printed whole when the lane fails, its
#      tail when it passes) and its own rows in the table. The kubelet suites (integration/tests/
#      kubelet.rs and every kubelet_*.rs: a real kubelet, API server and scheduler, each its own
#      node under hack/kube-node.sh: its own ports, directory and cgroup root) on the newest line,
#      but ALONE_SUITES, are dealt to lanes A and C in turn (`kubelet_share`, below):
#      A: the NRI suites of the oldest containerd line (SKEW_SUITES), then its kubelet suites
#         (kubelet_helm.rs installs topolet with the Helm chart from its image,
#         hack/build-image.sh, and upgrades it to the image of TOPOLET_NEXT_BIN), then its share
#         of the CRI-O kubelet suites (CRIO_KUBELET_SUITES, below); then the
#         dependency policy: hack/deny.sh check (cargo-deny, offline: bans, licenses, sources of
#         deny.toml; advisories need the network and are not checked), cargo-deny installed by
#         `hack/deny.sh install`, started in the background after step 6 (`start_deny_install`,
#         below) and joined here; hack/validate-deploy.sh (the Helm chart, deploy/ manifests
#         rendered from it, unit, snippets)
#      C: with cri-o in TEST_RUNTIMES, first the CRI-O NRI suites (CRIO_SUITES, below, on
#         TEST_CRIO_VERSION: TOPOLET_RUNTIME=cri-o cargo test -p topolet-integration --test ...)
#         and its share of the CRI-O kubelet suites but ALONE_SUITES (CRIO_KUBELET_SUITES,
#         below), then its kubelet suites, then hack/fuzz.sh (cargo-fuzz, FUZZ_SECONDS per target; installs
#         cargo-fuzz, needs nightly; its build started in the background after step 6 under
#         `nice -n 19`, `start_fuzz_build` below, and joined here), the fuzzing under `nice`; then
#         the manual: hack/docs.sh build (mdBook renders docs/ into target/book; installed by
#         `hack/docs.sh install`, started in the background with cargo-deny's, `start_mdbook_install`
#         below, and joined here)
#      B: the NRI suites (every other integration/tests/*.rs) on the newest line and the version-
#         skew suites (SKEW_SUITES, below) on the other older lines, but ALONE_SUITES:
#           TOPOLET_CONTAINERD_VERSION=<v> cargo test -p topolet-integration --test ... -- --test-threads=1
#         then, once lane A's and lane C's NRI suites are done too, hack/guest.sh test (the real-kernel suite
#         in QEMU guests of every shape: SMT + 2 NUMA nodes with the cgroupfs driver; 4 SNC-like
#         nodes with a memory-only one under systemd with the systemd driver; the 2-NUMA machine
#         with a kubelet, its control plane on the host, device plugin and DRA driver; image built once
#         and cached: docs/src/real-kernels.md), under `nice`: never beside an NRI suite
#      With two lanes (every kubelet suite in A, the guests in B) the warm run at b8021b1~1 had
#      lane A at about 1,430 s and B at 1,210 s, both mostly waiting on real intervals
#   8. ALONE_SUITES, one at a time, with nothing beside them: each judges a host-wide quantity
#      (free memory and pids, /proc/stat) a neighbour lane would move; with cri-o in
#      TEST_RUNTIMES, then those of CRIO_KUBELET_SUITES on CRI-O
#
# Flakiness is not this script's job: hack/shake.sh runs chosen suites N times each, one test at a
# time, under a CPU and I/O hog on every core, and prints each test's failure count
# (docs/src/shaking.md).
#
# Environment:
#   TEST_CONTAINERD_VERSIONS   lines to install and test (default "v2.4.2 v2.3.7 v2.0.14"); the
#                              newest of them runs every NRI suite, the others SKEW_SUITES
#   GO                         go binary for install-deps (default: go on PATH, else /usr/local/go/bin/go)
#   FUZZ_SECONDS               seconds each fuzz target runs (default 20; see hack/fuzz.sh)
#   TEST_GUESTS                0: skip the QEMU guests of lane B (default 1: run them)
#   TEST_RUNTIMES              the runtimes to test (default "containerd cri-o"): containerd must
#                              be one (every suite runs on it); cri-o adds hack/install-crio.sh,
#                              the CRI-O NRI suites (CRIO_SUITES) and kubelet suites
#                              (CRIO_KUBELET_SUITES) in lane C and alone; "containerd" alone
#                              leaves CRI-O out (nothing of it installed or run)
#   TEST_CRIO_VERSION          the CRI-O line (default DEFAULT_CRIO_VERSION of hack/lib/common.sh)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

VERSIONS="${TEST_CONTAINERD_VERSIONS:-$SUPPORTED_CONTAINERD_VERSIONS}"
RUNTIMES="${TEST_RUNTIMES:-containerd cri-o}"
CRIO_LINE="${TEST_CRIO_VERSION:-$DEFAULT_CRIO_VERSION}"
TARGET_DIR="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
RUN_START=$SECONDS

section() { printf '\n==================== %s ====================\n' "$*"; }
die() { end_step FAILED; echo "test.sh: FAIL: $*" >&2; exit 1; }

# The step table: each step of the run so far, in order, with its lane (`-`: the script's own),
# outcome and seconds.
STEP_NAMES=()
STEP_LANES=()
STEP_OUTCOMES=()
STEP_SECONDS=()
# The step running now ("" between steps) and when it began.
CURRENT_STEP=""
CURRENT_STEP_START=0

# add_row NAME LANE OUTCOME SECONDS: a row of the table.
add_row() { STEP_NAMES+=("$1") STEP_LANES+=("$2") STEP_OUTCOMES+=("$3") STEP_SECONDS+=("$4"); }

# end_step OUTCOME: the running step (if any) ends with OUTCOME; it goes into the table.
end_step() {
  [[ -n "$CURRENT_STEP" ]] || return 0
  add_row "$CURRENT_STEP" "${CURRENT_STEP_LANE:--}" "$1" "$((SECONDS - CURRENT_STEP_START))"
  CURRENT_STEP=""
  CURRENT_STEP_LANE=""
}

# step NAME CMD...: run CMD under a header, report its time, fail the run naming NAME.
step() {
  local name="$1" rc=0; shift
  section "$name"
  CURRENT_STEP="$name"
  CURRENT_STEP_START=$SECONDS
  "$@" || rc=$?
  ((rc == 0)) || die "$name (exit $rc)"
  end_step ok
  echo "--- $name: ok (${STEP_SECONDS[-1]}s)"
}

# step_table: the steps so far, then the run's total (from the script's start).
step_table() {
  local i width=4
  for i in "${!STEP_NAMES[@]}"; do
    ((${#STEP_NAMES[$i]} <= width)) || width=${#STEP_NAMES[$i]}
  done
  section "steps"
  printf '%-*s  %-5s  %-7s  %7s\n' "$width" step lane outcome seconds
  for i in "${!STEP_NAMES[@]}"; do
    printf '%-*s  %-5s  %-7s  %7s\n' "$width" "${STEP_NAMES[$i]}" "${STEP_LANES[$i]}" "${STEP_OUTCOMES[$i]}" "${STEP_SECONDS[$i]}"
  done
  ((${#STEP_NAMES[@]})) || echo "(no step ran)"
  printf '%-*s  %-5s  %-7s  %7s\n' "$width" total "" "" "$((SECONDS - RUN_START))"
}

require_tools() {
  local t
  [[ $EUID -eq 0 ]] || die "must run as root (containerd, runc, cgroups)"
  for t in cargo gcc; do command -v "$t" >/dev/null || die "$t not found on PATH"; done
  cargo fmt --version >/dev/null 2>&1 || die "rustfmt (cargo fmt) is not installed"
  cargo clippy --version >/dev/null 2>&1 || die "clippy (cargo clippy) is not installed"
  CLIPPY_DRIVER="$(clippy_driver)" || die "clippy-driver not found (rustup component add clippy)"
  [[ -x "$CLIPPY_DRIVER" ]] || die "clippy-driver $CLIPPY_DRIVER is not executable"
}

install_line() { CONTAINERD_VERSION="$1" "$HACK_DIR/install-deps.sh"; }

# linted CMD...: CMD with clippy as the workspace's compiler. `cargo clippy` is `cargo check` with
# cargo's RUSTC_WORKSPACE_WRAPPER hook pointing at clippy-driver, which takes its lint flags from
# CLIPPY_ARGS (joined by `__CLIPPY_HACKERY__`; clippy's src/driver.rs). Set on the `cargo test`
# builds, the same hook lints every workspace target while compiling it for real, so the
# dependencies are compiled once, for the tests: a separate `cargo clippy` compiles every one of
# them a second time in check mode (clippy took 641 s of a cold CI run on 2 CPUs). Dependencies
# are never linted either way. Every cargo call of this script that builds workspace crates goes
# through `linted`, so none of them rebuilds what another built.
clippy_driver() {
  if command -v rustup >/dev/null; then rustup which clippy-driver; else command -v clippy-driver; fi
}
linted() {
  RUSTC_WORKSPACE_WRAPPER="$CLIPPY_DRIVER" CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__" "$@"
}

# The NRI suites that every containerd line runs; the newest line runs every NRI suite. Version
# skew matters for the NRI protocol and containerd's behaviour, not for topolet's own logic, so
# the older lines run the suites whose subject is the runtime boundary:
#   nri_foundation  registration, Synchronize, topolet killed, containerd restarted, pre-installed
#                   mode: the NRI protocol as each line speaks it (2.0 has no NRI version, sends
#                   StateChange)
#   qos_resources   adjustments and updates as containerd and runc apply them (cgroup files,
#                   /proc, the bundle's config.json), the drift check's repair
#   faults          containerd's side of faults: topolet killed mid-burst, containerd restarted
#                   mid-burst, topolet refusing to start while containerd carries on
#   soak            the UpdateContainers deadlock of containerd 2.0 to 2.3 (NRI v0.8 to v0.12.0),
#                   which only a soak on those lines can show topolet avoids (the full 1,000
#                   cycles run on v2.3.7)
# Newest line only: eviction (pressure signals from /proc and cgroups, ranking, CRI v1 stop calls),
# observability (topolet status, the admin socket, /metrics) and config_reload (topolet's reload
# and migration): topolet's logic over interfaces that do not differ between the lines.
SKEW_SUITES="nri_foundation qos_resources faults soak"

# The suites that never run beside another lane (step 8): each judges a quantity of the whole
# host that a neighbour lane's work moves, so beside one it would judge the neighbour:
#   eviction, kubelet_eviction  `memory.available` and `pid.available` thresholds set relative to
#                   what the node has free when the test starts (2 GiB and 300 tasks under it),
#                   crossed by the test's own pod: a QEMU guest's 3 GiB, a burst of containers or
#                   a fuzzer's RSS beside it would cross them first (or free memory that hides
#                   the crossing), and nodefs/imagefs are this host's disk
#   kubelet_colocation  reclaimed CPU at its defaults (`usage = "cpus"`: every process on the
#                   pool's CPU counts as regular use, the neighbour lane's too), and it reads the
#                   node's busy CPU from /proc/stat around each window
# Every other real-stack suite was audited for what it shares with a neighbour: each stack has its
# own scratch directory under <target>/it (containerd's root, state, sockets, NRI socket, runc
# root, cgroup base /topolet-test-<hash of the directory>; the kubelet's root, pod logs, PKI, and
# its listeners on ports below the ephemeral range, chosen free at start), nothing writes a sysctl
# or drops caches, and their assertions wait on their own stack's state, not on the host's load
# (kubelet_reclaimed counts regular use as `usage = "pods"` for this reason; kubelet_isolation's
# assertions never depend on speed; the shake harness runs each under a CPU and I/O hog).
ALONE_SUITES="eviction kubelet_eviction kubelet_colocation"

# The NRI suites CRI-O runs (with cri-o in TEST_RUNTIMES): SKEW_SUITES, for the same reason as
# the older containerd lines: their subject is the runtime boundary (the NRI protocol as CRI-O
# speaks it, adjustments as CRI-O and runc apply them, CRI-O's side of faults and restarts), which
# is what differs on a second runtime; topolet's own logic does not. The tests whose subject does
# not exist on CRI-O skip by name and say why (integration/src/stack.rs, `skipped_on_crio`).
CRIO_SUITES="$SKEW_SUITES"

# The kubelet suites CRI-O runs (with cri-o in TEST_RUNTIMES), a real kubelet pointed at CRI-O's
# socket (hack/kube-node.sh with a hack/crio.sh stack): `kubelet` (every QoS class, refusals,
# init containers, resize, restarts of topolet, the runtime and the kubelet, the host left as
# found), `kubelet_api` (pod truth from the API through an outage, and the devices a container
# got: a device plugin's through the kubelet's PodResources, a DRA driver's through its
# ResourceSlices, as CRI-O passes their device nodes) and `kubelet_eviction` (eviction through the
# API, node-level reclaim through CRI-O's CRI socket and its containers/storage as imagefs). Those
# are where the runtime shows: pod cgroups and ids as CRI-O names them, its restarts, its device
# nodes, its image store; the other kubelet suites test topolet's own loops (NRT, isolation,
# reclaimed CPU), which do not differ. Those not in ALONE_SUITES are dealt in turn to lanes C and
# A (crio_kubelet_share): `kubelet` in C after the CRI-O NRI suites, `kubelet_api` in A after its
# containerd kubelet suites, where the lane has the most slack; `kubelet_eviction` is in
# ALONE_SUITES and runs alone, after the containerd one. Measured in docs/src/ci-time.md.
CRIO_KUBELET_SUITES="kubelet kubelet_api kubelet_eviction"

# has_runtime NAME: NAME (containerd, cri-o) is in TEST_RUNTIMES.
has_runtime() { [[ " $RUNTIMES " == *" $1 "* ]]; }
# check_runtimes: TEST_RUNTIMES names only known runtimes, containerd among them.
check_runtimes() {
  local r
  for r in $RUNTIMES; do
    [[ "$r" == containerd || "$r" == cri-o ]] || die "TEST_RUNTIMES: unknown runtime $r (containerd, cri-o)"
  done
  has_runtime containerd || die "TEST_RUNTIMES: containerd must be one (every suite runs on it)"
}

is_kubelet_suite() { [[ "$1" == kubelet || "$1" == kubelet_* ]]; }
is_alone() { [[ " $ALONE_SUITES " == *" $1 "* ]]; }

# line_suites VERSION: the NRI suites VERSION runs: every integration/tests/*.rs but the kubelet
# suites on the newest line, SKEW_SUITES (each of which must exist) on the others.
line_suites() {
  local f out=()
  if [[ "$1" == "$(newest_line)" ]]; then
    for f in "$REPO_ROOT"/integration/tests/*.rs; do
      f="$(basename "$f" .rs)"
      is_kubelet_suite "$f" || out+=("$f")
    done
  else
    for f in $SKEW_SUITES; do
      [[ -f "$REPO_ROOT/integration/tests/$f.rs" ]] || { echo "SKEW_SUITES: no integration/tests/$f.rs" >&2; return 1; }
      out+=("$f")
    done
  fi
  echo "${out[*]}"
}
# kubelet_suite_names: kubelet.rs and every kubelet_*.rs (run on the newest line only).
kubelet_suite_names() {
  local f out=()
  for f in "$REPO_ROOT"/integration/tests/kubelet*.rs; do
    f="$(basename "$f" .rs)"
    if is_kubelet_suite "$f"; then out+=("$f"); fi
  done
  echo "${out[*]}"
}
# pick beside|alone SUITE...: the suites that may run beside another lane, or those that may not.
pick() {
  local mode="$1" s out=(); shift
  for s in "$@"; do
    if is_alone "$s"; then [[ "$mode" == beside ]] || out+=("$s"); else [[ "$mode" == alone ]] || out+=("$s"); fi
  done
  echo "${out[*]}"
}
# check_suite_lists: every suite SKEW_SUITES and ALONE_SUITES name exists (before any lane starts).
check_suite_lists() {
  local s
  for s in $SKEW_SUITES $ALONE_SUITES $CRIO_SUITES $CRIO_KUBELET_SUITES; do
    [[ -f "$REPO_ROOT/integration/tests/$s.rs" ]] ||
      die "SKEW_SUITES, ALONE_SUITES, CRIO_SUITES or CRIO_KUBELET_SUITES: no integration/tests/$s.rs"
  done
}

# suites VERSION [--lib] SUITE...: those integration test targets (and with --lib the crate's own
# unit tests: its helpers, metrics parsing, the nested cargo build) on containerd VERSION.
suites() {
  local version="$1" s args=(); shift
  for s in "$@"; do
    if [[ "$s" == --lib ]]; then args+=(--lib); else args+=(--test "$s"); fi
  done
  echo "suites: ${args[*]}"
  TOPOLET_CONTAINERD_VERSION="$version" linted cargo test -p topolet-integration "${args[@]}" -- --test-threads=1
}
# crio_suites SUITE...: those integration test targets on CRI-O CRIO_LINE (hack/crio.sh stacks).
crio_suites() {
  local s args=()
  for s in "$@"; do args+=(--test "$s"); done
  echo "suites on cri-o $CRIO_LINE: ${args[*]}"
  TOPOLET_RUNTIME=cri-o TOPOLET_CRIO_VERSION="$CRIO_LINE" \
    linted cargo test -p topolet-integration "${args[@]}" -- --test-threads=1
}

# The Helm suite upgrades topolet to an image of another build: the same source with another
# version string (TOPOLET_VERSION, read at compile time by the binary's crate, plugin/src/main.rs,
# and handed to the library at start). Only main.rs is recompiled and the binary linked again;
# the library and every test linked against it stay as they are. TOPOLET_BIN (copied aside
# before) stays the ordinary build; the ordinary binary is built back right after, so that
# target/debug/topolet is never the upgrade build when a later step or a developer runs it.
build_next_bin() {
  local version
  version="$("$TOPOLET_BIN" --version | awk '{print $2}')-next" || return 1
  TOPOLET_VERSION="$version" linted cargo build -p topolet --bin topolet || return 1
  export TOPOLET_NEXT_BIN="$TARGET_DIR/ci/topolet-next"
  install -D -m 0755 "$TARGET_DIR/debug/topolet" "$TOPOLET_NEXT_BIN" || return 1
  "$TOPOLET_NEXT_BIN" --version | grep -qF -- "$version" || { echo "built topolet is not $version" >&2; return 1; }
  linted cargo build -p topolet --bin topolet || return 1
  echo "upgrade binary: $TOPOLET_NEXT_BIN ($version)"
}
# shellcheck disable=SC2086 # VERSIONS is a list: one line per version
newest_line() { printf '%s\n' $VERSIONS | sort -V | tail -n1; }

# The Kubernetes stack (Go, CPU-bound, about 10 minutes on a cold cache) builds in the background
# while the Rust steps run, and is joined before the first real-stack step: nothing timing-
# sensitive (containerd's 2 s NRI deadline) ever runs beside it.
KUBE_PID=""
start_kube_install() {
  KUBE_LOG="$REPO_ROOT/.deps/logs/install-kube.out"
  mkdir -p "$(dirname "$KUBE_LOG")"
  "$HACK_DIR/install-kube.sh" >"$KUBE_LOG" 2>&1 &
  KUBE_PID=$!
  echo "install-kube.sh runs in the background (pid $KUBE_PID, log $KUBE_LOG)"
}
join_kube_install() {
  local rc=0
  wait "$KUBE_PID" || rc=$?
  KUBE_PID=""
  cat "$KUBE_LOG"
  return "$rc"
}
# CRI-O (hack/install-crio.sh: a Go build of crio, gcc for pinns; needs install-deps' runc and
# crictl) builds in the background beside the Kubernetes stack, and is joined with it.
CRIO_PID=""
start_crio_install() {
  CRIO_LOG="$REPO_ROOT/.deps/logs/install-crio.out"
  mkdir -p "$(dirname "$CRIO_LOG")"
  CRIO_VERSION="$CRIO_LINE" "$HACK_DIR/install-crio.sh" >"$CRIO_LOG" 2>&1 &
  CRIO_PID=$!
  echo "install-crio.sh ($CRIO_LINE) runs in the background (pid $CRIO_PID, log $CRIO_LOG)"
}
join_crio_install() {
  local rc=0
  wait "$CRIO_PID" || rc=$?
  CRIO_PID=""
  cat "$CRIO_LOG"
  return "$rc"
}

# ---------------------------------------------------------------- lanes
#
# Three lanes of real-stack suites run side by side (step 7): the suites spend most of their
# time waiting on real intervals (the kubelet's sync loops, grace periods, pod starts), so the
# other lanes' work uses the CPUs meanwhile. Each lane runs in the background as a process
# group of its own (its leader's pid in LANE_PIDS), its output in LANE_DIR/<lane>.log and its
# rows, one per step (name, outcome, seconds, tab-separated), in LANE_DIR/<lane>.rows; a lane
# stops at its first failing step. run_lanes waits for all: a lane that fails has its log
# printed whole, the others are stopped (its process group TERMed: its running step is `stopped`),
# and the run fails; a lane that passes has its log's tail printed. The EXIT trap stops the lanes
# still running, and the stacks their killed tests left (stop_leftover_stacks).
LANE_DIR=""
LANE_PIDS=()
LANE_NAMES=()

# Inside a lane: the lane's name, its running step and when that began.
LANE=""
LANE_STEP=""
LANE_STEP_START=0
lane_row() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$LANE_DIR/$LANE.rows"; }
# lane_step NAME CMD...: `step` inside a lane: the lane ends (exit 1) when CMD fails.
lane_step() {
  local name="$1" rc=0; shift
  section "$name"
  LANE_STEP="$name"
  LANE_STEP_START=$SECONDS
  "$@" || rc=$?
  LANE_STEP=""
  if ((rc != 0)); then
    lane_row "$name" FAILED "$((SECONDS - LANE_STEP_START))"
    echo "test.sh: lane $LANE: FAIL: $name (exit $rc)" >&2
    exit 1
  fi
  lane_row "$name" ok "$((SECONDS - LANE_STEP_START))"
  echo "--- $name: ok ($((SECONDS - LANE_STEP_START))s)"
}
# The lane's TERM (from stop_lanes): its running step ends as `stopped`. Its commands got the
# same TERM (one process group); bash runs this once the one in the foreground has exited.
lane_stopped() {
  [[ -z "$LANE_STEP" ]] || lane_row "$LANE_STEP" stopped "$((SECONDS - LANE_STEP_START))"
  LANE_STEP=""
  exit 143
}

# deal N SUITE...: of the SUITEs that may run beside another lane, those at an even index (N=0)
# or an odd one (N=1): one lane's turn when they are dealt to two lanes in turn.
deal() {
  local n="$1" i beside out=(); shift
  read -ra beside <<<"$(pick beside "$@")"
  for i in "${!beside[@]}"; do
    ((i % 2 != n)) || out+=("${beside[$i]}")
  done
  echo "${out[*]}"
}
# kubelet_share N: the kubelet suites that may run beside another lane, dealt in turn to two
# lanes: those at an even index (N=0, lane A) or an odd one (N=1, lane C).
# shellcheck disable=SC2046 # kubelet_suite_names is a list of words
kubelet_share() { deal "$1" $(kubelet_suite_names); }
# crio_kubelet_share C|A: the CRI-O kubelet suites that may run beside another lane, dealt in
# turn: those at an even index to lane C, an odd one to lane A. Nothing without cri-o.
crio_kubelet_share() {
  has_runtime cri-o || return 0
  # shellcheck disable=SC2086 # CRIO_KUBELET_SUITES is a list
  if [[ "$1" == C ]]; then deal 0 $CRIO_KUBELET_SUITES; else deal 1 $CRIO_KUBELET_SUITES; fi
}
# crio_kubelet_steps C|A: that lane's share of the CRI-O kubelet suites, one step.
crio_kubelet_steps() {
  local share
  read -ra share <<<"$(crio_kubelet_share "$1")"
  ((${#share[@]} == 0)) ||
    lane_step "kubelet suites (cri-o $CRIO_LINE): ${share[*]}" crio_suites "${share[@]}"
}
# Lanes A and C: their share of the kubelet suites, one step each (their times in the table say
# how to balance the lanes), then what needs no real stack of its own: in A the dependency
# policy, the deployment artifacts and the guests (CPU-bound for minutes: under `nice` they take
# what the other lanes leave and never delay them); in C the fuzzing.
kubelet_steps() {
  local s newest share
  newest="$(newest_line)"
  read -ra share <<<"$(kubelet_share "$1")"
  for s in "${share[@]}"; do
    lane_step "kubelet suite $s (containerd $newest)" suites "$newest" "$s"
  done
}
# nri_line_step VERSION: the NRI suites VERSION runs that may run beside another lane, one step.
nri_line_step() {
  local v="$1" list all beside
  list="$(line_suites "$v")" || return 1
  read -ra all <<<"$list"
  read -ra beside <<<"$(pick beside "${all[@]}")"
  ((${#beside[@]})) || return 0
  if [[ "$v" == "$(newest_line)" ]]; then
    lane_step "integration tests (containerd $v, every NRI suite but ALONE_SUITES)" \
      suites "$v" --lib "${beside[@]}"
  else
    lane_step "integration tests (containerd $v, SKEW_SUITES but ALONE_SUITES)" \
      suites "$v" "${beside[@]}"
  fi
}
# oldest_line: the oldest line when there are several (lane A runs its suites), else nothing.
# shellcheck disable=SC2086 # VERSIONS is a list: one line per version
oldest_line() {
  local n
  n="$(printf '%s\n' $VERSIONS | wc -l)"
  ((n < 2)) || printf '%s\n' $VERSIONS | sort -V | head -n1
}
# The NRI suites are done in lane A, and in lane C (the CRI-O suites): their marker files; the
# guests wait for both.
nri_done() { : >"$LANE_DIR/$LANE.nri-done"; }
wait_nri_done_elsewhere() {
  while [[ ! -f "$LANE_DIR/A.nri-done" || ! -f "$LANE_DIR/C.nri-done" ]]; do sleep 1; done
}
lane_a() {
  local oldest
  oldest="$(oldest_line)"
  [[ -z "$oldest" ]] || nri_line_step "$oldest"
  nri_done
  kubelet_steps 0
  crio_kubelet_steps A
  lane_step "dependency policy (cargo deny, offline)" deny_check
  lane_step "deployment artifacts" "$HACK_DIR/validate-deploy.sh"
}
# Lane C starts with the CRI-O NRI suites (126 s alone on 2 CPUs, 2026-12-07): by
# docs/src/ci-time.md's warm three-lane figures it had the most slack (707 s against lane B's 887
# and A's 820; the warm run is the tighter goal), and first in the lane they are done long before
# lane B's own NRI suites (about 660 s), so the guests, which wait for them, start no later.
lane_c() {
  local beside
  if has_runtime cri-o; then
    # shellcheck disable=SC2086 # CRIO_SUITES is a list
    read -ra beside <<<"$(pick beside $CRIO_SUITES)"
    ((${#beside[@]} == 0)) ||
      lane_step "integration tests (cri-o $CRIO_LINE, CRIO_SUITES but ALONE_SUITES)" crio_suites "${beside[@]}"
  fi
  nri_done
  crio_kubelet_steps C
  kubelet_steps 1
  lane_step "fuzzing" fuzz_after_build
  lane_step "the manual (mdBook)" docs_build
}
# Lane B: the NRI suites of the other lines, then the guests, once no NRI suite runs anywhere:
# beside the guests' emulation (CPU-bound for minutes) an NRI suite's RunPodSandbox outlasted
# crictl's 10 s (containerd v2.0.14, the three-lane run of 33d930a), while the kubelet suites
# have run beside them since the guests joined CI.
lane_b() {
  local v oldest
  oldest="$(oldest_line)"
  for v in $VERSIONS; do
    [[ "$v" == "$oldest" ]] || nri_line_step "$v"
  done
  if [[ "${TEST_GUESTS:-1}" == 0 ]]; then
    section "real kernels (QEMU guests): skipped (TEST_GUESTS=0)"
    lane_row "real kernels (QEMU guests)" skipped 0
  else
    wait_nri_done_elsewhere
    lane_step "real kernels (QEMU guests)" \
      linted env CONTAINERD_VERSION="$(newest_line)" nice -n 10 "$HACK_DIR/guest.sh" test
  fi
}

# run_lane NAME FUNCTION: the body of a lane's process group.
run_lane() {
  set +m
  LANE="$1"
  trap - EXIT
  trap lane_stopped TERM INT HUP
  "$2"
}

# start_lane NAME FUNCTION: FUNCTION as lane NAME, in the background, a process group of its own
# (job control on while it is forked: `set -m`).
start_lane() {
  : >"$LANE_DIR/$1.rows"
  set -m
  run_lane "$1" "$2" >"$LANE_DIR/$1.log" 2>&1 &
  set +m
  LANE_PIDS+=("$!")
  LANE_NAMES+=("$1")
  echo "lane $1 ($2) runs in the background: process group $!, log $LANE_DIR/$1.log"
}

# lane_rows NAME: the lane's rows into the table.
lane_rows() {
  local name outcome secs
  [[ -f "$LANE_DIR/$1.rows" ]] || return 0
  while IFS=$'\t' read -r name outcome secs; do add_row "$name" "$1" "$outcome" "$secs"; done <"$LANE_DIR/$1.rows"
}

# stop_lanes: TERM every running lane's process group, wait for each.
stop_lanes() {
  local i
  ((${#LANE_PIDS[@]})) || return 0
  for i in "${!LANE_PIDS[@]}"; do
    echo "test.sh: stopping lane ${LANE_NAMES[$i]} (process group ${LANE_PIDS[$i]})" >&2
    kill -TERM -- "-${LANE_PIDS[$i]}" 2>/dev/null || true
  done
  for i in "${!LANE_PIDS[@]}"; do
    wait "${LANE_PIDS[$i]}" 2>/dev/null || true
    section "lane ${LANE_NAMES[$i]} stopped (last 20 lines of $LANE_DIR/${LANE_NAMES[$i]}.log)"
    tail -n 20 "$LANE_DIR/${LANE_NAMES[$i]}.log"
  done
  LANE_PIDS=()
  LANE_NAMES=()
  stop_leftover_stacks
}

# stop_leftover_stacks: a test killed by a signal runs no destructor: the containerd stacks and
# kube nodes it started (their daemons in sessions of their own: not in the lane's process
# group) are stopped here, with whatever still runs from their directories (a pre-installed
# topolet that containerd launched), and their scratch directories removed.
stop_leftover_stacks() {
  local d p
  for d in "$TARGET_DIR"/it/k*/ "$TARGET_DIR"/it/s*/; do
    [[ -d "$d" ]] || continue
    d="${d%/}"
    echo "test.sh: stopping what a stopped test left in $d" >&2
    if [[ -f "$d/ports" ]]; then "$HACK_DIR/kube-node.sh" stop "$d" >&2 || true; fi
    if [[ -f "$d/env" && ! -f "$d/ports" ]]; then
      if grep -qx 'export RUNTIME=cri-o' "$d/env"; then
        "$HACK_DIR/crio.sh" stop "$d" >&2 || true
      else
        "$HACK_DIR/containerd.sh" stop "$d" >&2 || true
      fi
    fi
    for p in /proc/[0-9]*; do
      [[ "${p#/proc/}" != "$$" ]] || continue
      if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$d/"; then kill -KILL "${p#/proc/}" 2>/dev/null || true; fi
    done
    rm -rf "$d" 2>/dev/null || echo "test.sh: cannot remove $d" >&2
  done
}

# The lanes, in the order they start and their rows join the table.
LANES=(A B C)
# run_lanes: step 7. Returns 1 when a lane failed (after printing its log and stopping the others).
run_lanes() {
  LANE_DIR="$TARGET_DIR/ci/lanes"
  rm -rf "$LANE_DIR"
  mkdir -p "$LANE_DIR"
  start_lane A lane_a
  start_lane B lane_b
  start_lane C lane_c
  local pid rc i name failed=""
  while ((${#LANE_PIDS[@]})); do
    rc=0
    wait -n -p pid "${LANE_PIDS[@]}" || rc=$?
    for i in "${!LANE_PIDS[@]}"; do [[ "${LANE_PIDS[$i]}" != "$pid" ]] || break; done
    name="${LANE_NAMES[$i]}"
    unset 'LANE_PIDS[i]' 'LANE_NAMES[i]'
    LANE_PIDS=("${LANE_PIDS[@]}") LANE_NAMES=("${LANE_NAMES[@]}")
    if ((rc != 0)); then
      section "lane $name FAILED (exit $rc): its log $LANE_DIR/$name.log, whole"
      cat "$LANE_DIR/$name.log"
      failed="$name"
      break
    fi
    section "lane $name: ok (last 40 lines of $LANE_DIR/$name.log)"
    tail -n 40 "$LANE_DIR/$name.log"
  done
  stop_lanes
  for name in "${LANES[@]}"; do lane_rows "$name"; done
  [[ -z "$failed" ]] || { echo "test.sh: lane $failed failed" >&2; return 1; }
}

# alone: step 8, ALONE_SUITES of every line, one at a time.
run_alone_suites() {
  local v s newest list all alone
  newest="$(newest_line)"
  for v in $VERSIONS; do
    list="$(line_suites "$v")" || die "SKEW_SUITES of $v"
    read -ra all <<<"$list"
    read -ra alone <<<"$(pick alone "${all[@]}")"
    for s in "${alone[@]}"; do
      step "integration tests alone (containerd $v, $s)" suites "$v" "$s"
    done
  done
  read -ra all <<<"$(kubelet_suite_names)"
  read -ra alone <<<"$(pick alone "${all[@]}")"
  for s in "${alone[@]}"; do
    step "kubelet suite alone: $s (containerd $newest)" suites "$newest" "$s"
  done
  if has_runtime cri-o; then
    # shellcheck disable=SC2086 # CRIO_KUBELET_SUITES is a list
    read -ra alone <<<"$(pick alone $CRIO_KUBELET_SUITES)"
    for s in "${alone[@]}"; do
      step "kubelet suite alone: $s (cri-o $CRIO_LINE)" crio_suites "$s"
    done
  fi
}

# cargo-deny (hack/deny.sh install: about 5 minutes of cargo install on a cold cache, nothing
# once cached) builds in the background while the lanes run, under `nice`; the policy check, lane
# A's last step, joins it (the builds before the lanes downloaded every crate it reads).
DENY_PID=""
start_deny_install() {
  DENY_LOG="$REPO_ROOT/.deps/logs/deny-install.out"
  mkdir -p "$(dirname "$DENY_LOG")"
  setsid nice -n 10 "$HACK_DIR/deny.sh" install >"$DENY_LOG" 2>&1 &
  DENY_PID=$!
  echo "deny.sh install runs in the background (pid $DENY_PID, log $DENY_LOG)"
}
# deny_check, a step of lane A (a process that is not the install's parent): waits for the
# background install to exit, prints its log, installs (a no-op once installed; if the background
# install failed, it fails again here, with its error) and checks. In a lane rather than before
# the lanes: a cold install outlasts the Rust builds, and the kubelet lane mostly waits.
deny_check() {
  join_background "$DENY_PID" "${DENY_LOG:-}"
  "$HACK_DIR/deny.sh" install && "$HACK_DIR/deny.sh" check
}

# mdBook (hack/docs.sh install: a few minutes of cargo install on a cold cache, nothing once
# cached) builds in the background beside cargo-deny, under `nice`; lane C's last step joins it
# and renders the manual.
MDBOOK_PID=""
start_mdbook_install() {
  MDBOOK_LOG="$REPO_ROOT/.deps/logs/mdbook-install.out"
  mkdir -p "$(dirname "$MDBOOK_LOG")"
  setsid nice -n 10 "$HACK_DIR/docs.sh" install >"$MDBOOK_LOG" 2>&1 &
  MDBOOK_PID=$!
  echo "docs.sh install runs in the background (pid $MDBOOK_PID, log $MDBOOK_LOG)"
}
docs_build() {
  join_background "$MDBOOK_PID" "${MDBOOK_LOG:-}"
  "$HACK_DIR/docs.sh" install && "$HACK_DIR/docs.sh" build
}

# shell_scripts: every shell script under hack/, .ci/ and deploy/: a *.sh file, or a file whose
# first line is a sh or bash shebang (.ci/run). Relative to the repository's root.
shell_scripts() {
  local f
  while IFS= read -r -d '' f; do
    if [[ "$f" == *.sh ]] || head -n1 "$f" | grep -qE '^#!.*[/ ](ba)?sh( |$)'; then echo "$f"; fi
  done < <(cd "$REPO_ROOT" && find hack .ci deploy -type f -print0 | sort -z)
}
# check_scripts: shellcheck (Debian's package, apt-installed by hack/install-deps.sh) over them,
# following each `source` (-x) as its `# shellcheck source=` directive names it.
check_scripts() {
  local scripts
  mapfile -t scripts < <(shell_scripts)
  ((${#scripts[@]})) || { echo "no shell script found" >&2; return 1; }
  echo "shellcheck $(shellcheck --version | sed -n 's/^version: //p'): ${#scripts[@]} scripts"
  (cd "$REPO_ROOT" && shellcheck -x "${scripts[@]}")
}

# The fuzz world (a nightly, instrumented build of every dependency: about 16 minutes on a cold
# cache, a few minutes for topolet's own crates once cached) builds in the background while the
# lanes run, under `nice -n 19`: it takes only what the lanes leave (the kubelet lane mostly
# waits on the kubelet's loops), so that lane C's fuzzing step finds it built instead of
# building it there, at the end of its lane. A session of its own (setsid), so that
# stopping it stops its cargo too. The fuzzing step (in lane C, a process that is not its
# parent) waits for it to exit, prints its log and runs hack/fuzz.sh, whose own build is then a
# no-op (or, if the background build failed, fails again in the step, with its error).
FUZZ_BUILD_PID=""
start_fuzz_build() {
  FUZZ_BUILD_LOG="$REPO_ROOT/.deps/logs/fuzz-build.out"
  mkdir -p "$(dirname "$FUZZ_BUILD_LOG")"
  setsid nice -n 19 env FUZZ_BUILD_ONLY=1 "$HACK_DIR/fuzz.sh" >"$FUZZ_BUILD_LOG" 2>&1 &
  FUZZ_BUILD_PID=$!
  echo "fuzz.sh's build runs in the background (pid $FUZZ_BUILD_PID, log $FUZZ_BUILD_LOG)"
}
# alive PID: PID runs (a zombie, exited but not yet reaped by the main shell, does not).
alive() {
  local state
  state="$(cut -d')' -f2 "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ -n "$state" && "$state" != " Z"* ]]
}
# join_background PID LOG: waits for a background build started by this script (PID, empty when
# none was started) from a process that is not its parent (a lane), then prints its log.
join_background() {
  [[ -n "$1" ]] || return 0
  while alive "$1"; do sleep 1; done
  echo "--- the background build's log ($2):"
  cat "$2"
}
fuzz_after_build() {
  join_background "$FUZZ_BUILD_PID" "${FUZZ_BUILD_LOG:-}"
  nice -n 10 "$HACK_DIR/fuzz.sh"
}

stop_background() {
  [[ -z "$KUBE_PID" ]] || kill -- "$KUBE_PID" 2>/dev/null || true
  [[ -z "$CRIO_PID" ]] || kill -- "$CRIO_PID" 2>/dev/null || true
  [[ -z "$DENY_PID" ]] || kill -- "-$DENY_PID" 2>/dev/null || true
  [[ -z "$MDBOOK_PID" ]] || kill -- "-$MDBOOK_PID" 2>/dev/null || true
  [[ -z "$FUZZ_BUILD_PID" ]] || kill -- "-$FUZZ_BUILD_PID" 2>/dev/null || true
}

# on_exit, the EXIT trap: stops the background build and the lanes (their rows join the table),
# then prints the step table. A step still running here neither finished nor failed (a failure
# goes through die): a signal (TERM, HUP, INT) ended the script during it. The script's exit
# status stays what it was (a signal's death stays one: bash re-raises it after the trap). Only
# the script's own shell reports: a child forked for a background job (install-kube.sh, a lane)
# and stopped before it ran its command still has the trap.
on_exit() {
  local rc=$? name
  [[ "$BASHPID" == "$$" ]] || return 0
  stop_background
  if ((${#LANE_PIDS[@]})); then
    stop_lanes
    for name in "${LANES[@]}"; do lane_rows "$name"; done
  fi
  end_step stopped
  step_table
  exit "$rc"
}

main() {
  cd "$REPO_ROOT"
  trap on_exit EXIT
  require_tools
  check_runtimes
  check_suite_lists
  local v
  for v in $VERSIONS; do step "install deps (containerd $v)" install_line "$v"; done
  step "start the Kubernetes stack build" start_kube_install
  if has_runtime cri-o; then step "start the CRI-O build ($CRIO_LINE)" start_crio_install; fi
  step "cargo fmt" cargo fmt --all --check
  step "module cycles" python3 "$HACK_DIR/module-cycles.py"
  step "shellcheck" check_scripts
  step "docs links" "$HACK_DIR/docs.sh" links
  step "clippy + build (workspace)" \
    linted cargo test --workspace --exclude topolet-integration --all-targets --no-run
  # That build made the topolet binary too (the plugin's own tests run it): one binary for every
  # later step (the integration suites, the deployment checks, the guests), instead of a build
  # of `-p topolet` with its own feature set (about 70 CPU-seconds cold). Copied aside, where no
  # later build can replace it.
  export TOPOLET_BIN="$TARGET_DIR/ci/topolet"
  step "keep the topolet binary" install -D -m 0755 "$TARGET_DIR/debug/topolet" "$TOPOLET_BIN"
  step "unit tests" linted cargo test --workspace --exclude topolet-integration
  step "the upgrade image's topolet (the Helm suite)" build_next_bin
  step "clippy + build (topolet-integration)" \
    linted cargo test -p topolet-integration --all-targets --no-run
  step "install the Kubernetes stack (join)" join_kube_install
  if has_runtime cri-o; then step "install CRI-O $CRIO_LINE (join)" join_crio_install; fi
  step "containerd stack smoke test" env SMOKE_VERSIONS="$VERSIONS" "$HACK_DIR/smoke-stack.sh"
  # Started here, not with the Kubernetes build: the steps before are CPU-bound on both CPUs
  # (a warm run's workspace build took 435 s with the fuzz build beside it, against 205 s in the
  # run before, which had none), while the lanes mostly wait on the subjects' loops.
  step "start the cargo-deny build" start_deny_install
  step "start the mdBook build" start_mdbook_install
  step "start the fuzz build" start_fuzz_build
  CURRENT_STEP_LANE="A|B|C"
  step "lanes A, B and C side by side (wall time)" run_lanes
  run_alone_suites
  section "all tests passed in $((SECONDS - RUN_START))s"
}

# Sourced (a harness trying the functions), it defines them and runs nothing.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then main "$@"; fi
