#!/usr/bin/env bash
# hack/test.sh — run every test of topolet: the single "run every test" command (CI runs it via .ci/run).
#
# Usage: hack/test.sh          (no arguments; as root, on Linux with cgroups; needs go, cargo, gcc)
#
# Steps, each under a section header and ending in a "--- NAME: ok (Ns)" line; the first failure
# stops the run with a non-zero exit. Nothing is skipped: a missing tool or dependency is a failure.
# At its end, whether the run passed, failed or was stopped (an EXIT trap, which also stops the
# background Kubernetes build), the script prints a table of the steps it ran: name, outcome (ok;
# FAILED for the step that failed, the last one; stopped for a step a signal ended; skipped for
# the guests under TEST_GUESTS=0) and seconds, and the run's total seconds.
#   1. hack/install-deps.sh for every containerd line (default v2.4.2, v2.3.7 and v2.0.14)
#   2. cargo fmt --all --check; hack/module-cycles.py (no module depends on one that depends back)
#   3. clippy, inside the builds the tests need (`linted`, below): every target of the workspace
#      but topolet-integration, then every target of topolet-integration, with -D warnings
#   4. cargo test --workspace --exclude topolet-integration          (unit tests, no rebuild)
#   5. hack/fuzz.sh                                                  (cargo-fuzz, FUZZ_SECONDS per target;
#                                                                     installs cargo-fuzz, needs nightly)
#   6. hack/validate-deploy.sh                                       (the Helm chart, deploy/ manifests
#                                                                     rendered from it, unit, snippets;
#                                                                     after step 9's install-kube join)
#   7. hack/smoke-stack.sh                                           (the containerd test stack itself)
#   8. the NRI suites (every integration/tests/*.rs but kubelet.rs, kubelet_*.rs) on the newest
#      line, and the version-skew suites (SKEW_SUITES, below) on each older line:
#      TOPOLET_CONTAINERD_VERSION=<v> cargo test -p topolet-integration --test ... -- --test-threads=1
#   9. hack/install-kube.sh (started in the background after step 1, joined before step 7), then
#      the kubelet suite (integration/tests/kubelet.rs and every kubelet_*.rs: a real kubelet,
#      API server and scheduler, hack/kube-node.sh) on the newest line; kubelet_helm.rs installs
#      topolet with the Helm chart from its image (hack/build-image.sh), and upgrades it to an
#      image of a second build whose version string differs (TOPOLET_NEXT_BIN, built here first)
#  10. hack/guest.sh test: the real-kernel suite in QEMU guests of every shape (SMT + 2 NUMA nodes
#      with the cgroupfs driver; 4 SNC-like nodes with a memory-only one under systemd with the
#      systemd driver; image built once and cached: README "Real kernels")
#
# Flakiness is not this script's job: hack/shake.sh runs chosen suites N times each, one test at a
# time, under a CPU and I/O hog on every core, and prints each test's failure count (README
# "Shaking tests under load").
#
# Environment:
#   TEST_CONTAINERD_VERSIONS   lines to install and test (default "v2.4.2 v2.3.7 v2.0.14"); the
#                              newest of them runs every NRI suite, the others SKEW_SUITES
#   GO                         go binary for install-deps (default: go on PATH, else /usr/local/go/bin/go)
#   FUZZ_SECONDS               seconds each fuzz target runs (default 20; see hack/fuzz.sh)
#   TEST_GUESTS                0: skip step 10, the QEMU guests (default 1: run them)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

VERSIONS="${TEST_CONTAINERD_VERSIONS:-$SUPPORTED_CONTAINERD_VERSIONS}"
TARGET_DIR="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
RUN_START=$SECONDS

section() { printf '\n==================== %s ====================\n' "$*"; }
die() { end_step FAILED; echo "test.sh: FAIL: $*" >&2; exit 1; }

# The step table: each step of the run so far, in order, with its outcome and seconds.
STEP_NAMES=()
STEP_OUTCOMES=()
STEP_SECONDS=()
# The step running now ("" between steps) and when it began.
CURRENT_STEP=""
CURRENT_STEP_START=0

# end_step OUTCOME: the running step (if any) ends with OUTCOME; it goes into the table.
end_step() {
  [[ -n "$CURRENT_STEP" ]] || return 0
  STEP_NAMES+=("$CURRENT_STEP")
  STEP_OUTCOMES+=("$1")
  STEP_SECONDS+=("$((SECONDS - CURRENT_STEP_START))")
  CURRENT_STEP=""
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
  printf '%-*s  %-7s  %7s\n' "$width" step outcome seconds
  for i in "${!STEP_NAMES[@]}"; do
    printf '%-*s  %-7s  %7s\n' "$width" "${STEP_NAMES[$i]}" "${STEP_OUTCOMES[$i]}" "${STEP_SECONDS[$i]}"
  done
  ((${#STEP_NAMES[@]})) || echo "(no step ran)"
  printf '%-*s  %-7s  %7s\n' "$width" total "" "$((SECONDS - RUN_START))"
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

# The NRI suites: every test target of integration/ except the kubelet suite (kubelet.rs and
# kubelet_*.rs, run once, below). `nri_suites skew`: only SKEW_SUITES, each of which must exist.
nri_suites() {
  local f args=()
  if [[ "${1:-all}" == skew ]]; then
    for f in $SKEW_SUITES; do
      [[ -f "$REPO_ROOT/integration/tests/$f.rs" ]] || die "SKEW_SUITES: no integration/tests/$f.rs"
      args+=(--test "$f")
    done
  else
    # and the crate's own unit tests (its helpers: metrics parsing, the nested cargo build)
    args+=(--lib)
    for f in "$REPO_ROOT"/integration/tests/*.rs; do
      f="$(basename "$f" .rs)"
      [[ "$f" == kubelet || "$f" == kubelet_* ]] || args+=(--test "$f")
    done
  fi
  echo "${args[@]}"
}
# integration_line VERSION all|skew
integration_line() {
  local suites
  # `step` runs this under `||`, where errexit is off: a bad SKEW_SUITES must stop it here.
  suites="$(nri_suites "$2")" || return 1
  echo "suites: $suites"
  # shellcheck disable=SC2086
  TOPOLET_CONTAINERD_VERSION="$1" linted cargo test -p topolet-integration $suites -- --test-threads=1
}
# The kubelet suites: kubelet.rs and every kubelet_*.rs.
kubelet_suites() {
  local f args=()
  for f in "$REPO_ROOT"/integration/tests/kubelet*.rs; do
    f="$(basename "$f" .rs)"
    [[ "$f" == kubelet || "$f" == kubelet_* ]] && args+=(--test "$f")
  done
  echo "${args[@]}"
}
kubelet_suite() {
  # shellcheck disable=SC2046
  TOPOLET_CONTAINERD_VERSION="$1" linted cargo test -p topolet-integration $(kubelet_suites) -- --test-threads=1
}
# The Helm suite upgrades topolet to an image of another build: the same source with another
# version string (TOPOLET_VERSION, read at compile time). Only the topolet crate is rebuilt;
# TOPOLET_BIN (copied aside before) stays the ordinary build.
build_next_bin() {
  local version
  version="$("$TOPOLET_BIN" --version | awk '{print $2}')-next" || return 1
  TOPOLET_VERSION="$version" linted cargo build -p topolet --bin topolet || return 1
  export TOPOLET_NEXT_BIN="$TARGET_DIR/ci/topolet-next"
  install -D -m 0755 "$TARGET_DIR/debug/topolet" "$TOPOLET_NEXT_BIN" || return 1
  "$TOPOLET_NEXT_BIN" --version | grep -qF -- "$version" || { echo "built topolet is not $version" >&2; return 1; }
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
stop_background() { [[ -z "$KUBE_PID" ]] || kill -- "$KUBE_PID" 2>/dev/null || true; }

# on_exit, the EXIT trap: stops the background build, then prints the step table. A step still
# running here neither finished nor failed (a failure goes through die): a signal (TERM, HUP,
# INT) ended the script during it. The script's exit status stays what it was (a signal's death
# stays one: bash re-raises it after the trap). Only the script's own shell reports: a child
# forked for a background job (install-kube.sh) and stopped before it ran its command still has
# the trap.
on_exit() {
  local rc=$?
  [[ "$BASHPID" == "$$" ]] || return 0
  stop_background
  end_step stopped
  step_table
  exit "$rc"
}

main() {
  cd "$REPO_ROOT"
  trap on_exit EXIT
  require_tools
  local v
  for v in $VERSIONS; do step "install deps (containerd $v)" install_line "$v"; done
  step "start the Kubernetes stack build" start_kube_install
  step "cargo fmt" cargo fmt --all --check
  step "module cycles" python3 "$HACK_DIR/module-cycles.py"
  step "clippy + build (workspace)" \
    linted cargo test --workspace --exclude topolet-integration --all-targets --no-run
  # That build made the topolet binary too (the plugin's own tests run it): one binary for every
  # later step (the integration suites, the deployment checks, the guests), instead of a build
  # of `-p topolet` with its own feature set (about 70 CPU-seconds cold). Copied aside, where no
  # later build can replace it.
  export TOPOLET_BIN="$TARGET_DIR/ci/topolet"
  step "keep the topolet binary" install -D -m 0755 "$TARGET_DIR/debug/topolet" "$TOPOLET_BIN"
  step "unit tests" linted cargo test --workspace --exclude topolet-integration
  step "clippy + build (topolet-integration)" \
    linted cargo test -p topolet-integration --all-targets --no-run
  step "fuzzing" "$HACK_DIR/fuzz.sh"
  step "install the Kubernetes stack (join)" join_kube_install
  # After the join: the chart's checks use the helm it builds.
  step "deployment artifacts" "$HACK_DIR/validate-deploy.sh"
  step "containerd stack smoke test" env SMOKE_VERSIONS="$VERSIONS" "$HACK_DIR/smoke-stack.sh"
  local newest
  newest="$(newest_line)"
  for v in $VERSIONS; do
    if [[ "$v" == "$newest" ]]; then
      step "integration tests (containerd $v, every NRI suite)" integration_line "$v" all
    else
      step "integration tests (containerd $v, SKEW_SUITES)" integration_line "$v" skew
    fi
  done
  step "the upgrade image's topolet (the Helm suite)" build_next_bin
  step "kubelet suite (containerd $(newest_line))" kubelet_suite "$(newest_line)"
  if [[ "${TEST_GUESTS:-1}" == 0 ]]; then
    section "real kernels (QEMU guests): skipped (TEST_GUESTS=0)"
    STEP_NAMES+=("real kernels (QEMU guests)") STEP_OUTCOMES+=(skipped) STEP_SECONDS+=(0)
  else
    step "real kernels (QEMU guests)" linted env CONTAINERD_VERSION="$(newest_line)" "$HACK_DIR/guest.sh" test
  fi
  section "all tests passed in $((SECONDS - RUN_START))s"
}

# Sourced (a harness trying the functions), it defines them and runs nothing.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then main "$@"; fi
