#!/usr/bin/env bash
# hack/shake.sh — shake the tests: run chosen suites N times each, one test at a time, while a CPU
# and I/O hog loads every core, and report each test's failure count. A flaky test is a failing
# test: before every change that touches a test or the event path, shake the suites and report
# the table.
#
# Usage: hack/shake.sh              (the environment below chooses what runs)
#        hack/shake.sh self-check   (the script's own check: no cargo, root or real stack, seconds)
#   hack/shake.sh                                                 handler tests, faults, soak, qos_resources
#   SHAKE_SUITES="nri_handlers qos_resources kubelet guests" hack/shake.sh
#   SHAKE_LOAD=0 hack/shake.sh                                    the same runs without the hog (a baseline)
#   SHAKE_SUITES=nri_handlers SHAKE_RUNS=1 SHAKE_TESTS=synchronize_gives hack/shake.sh
#                            one handler test, once: cargo's output and --list parsed for real, no root
#
# self-check shakes a fake libtest binary (a passing test, a failing one, one running no test,
# one outliving SHAKE_TIMEOUT, an ignored one) twice, without load, into <target>/shake-self-check/,
# and fails unless shake.json counts exactly that (exit codes, kept logs, runs interleaved).
#
# Suites (SHAKE_SUITES, names separated by spaces):
#   <name>        plugin/tests/<name>.rs (cargo test -p topolet --test <name>; no real stack, no root:
#                 e.g. nri_handlers, the plugin's NRI handler tests) or integration/tests/<name>.rs
#                 (an NRI suite against a real containerd and runc: faults, soak, qos_resources,
#                 nri_foundation, eviction, observability, config_reload; or one kubelet suite:
#                 kubelet_api, ...)
#   nri           every NRI suite (every integration/tests/*.rs but kubelet.rs and kubelet_*.rs)
#   kubelet       every kubelet suite (integration/tests/kubelet.rs and kubelet_*.rs: a real kubelet,
#                 API server and scheduler beside the stack, hack/install-kube.sh)
#   guests        the QEMU guests (hack/guest.sh test SHAPE): one test per shape (hack/guest.sh shapes)
#
# Steps:
#   1. With a real-stack suite (everything but plugin/tests): root required; hack/install-deps.sh
#      for the containerd line (the newest supported one, as hack/test.sh's NRI and kubelet suites),
#      hack/install-kube.sh with kubelet suites, hack/guest.sh image with guests.
#   2. Build once, before any load: the test binaries (cargo test --no-run) and, for the
#      integration suites, topolet itself (handed to them as TOPOLET_BIN).
#   3. List each suite's tests (<binary> --list --format terse, minus --ignored ones), keep those
#      whose name contains SHAKE_TESTS.
#   4. Take the real-stack lock (SHAKE_LOCK; flock, waiting while another run holds it) when a
#      real-stack suite runs or the hog is on: only one real-stack run may happen on a machine at a
#      time, and the hog would make any other one a shake too. Start the hog (SHAKE_LOAD=1): on
#      each of nproc CPUs one spinner and one writer (dd of SHAKE_IO_MB MiB with fsync, again and
#      again, to a file in this run's own temporary directory under target/shake/), in a process
#      group of their own, not niced: contention is the point.
#   5. Run every test alone (<binary> --exact NAME --test-threads=1, in its crate's directory as
#      cargo runs it, with TOPOLET_CONTAINERD_VERSION set as hack/test.sh sets it), SHAKE_RUNS
#      rounds, interleaved: round 1 of every test, then round 2, ... so that drift of the load
#      spreads over all of them. A run fails if it exits non-zero, runs longer than SHAKE_TIMEOUT
#      (killed, exit 124) or runs no test. One progress line per run.
#   6. Stop the hog (its whole process group) and remove the temporary directory; this also
#      happens on any exit, Ctrl-C or TERM: the running test is killed, and the table of the runs
#      done so far is printed and written (marked stopped; "complete": false in shake.json).
#
# Output, under <target>/shake/ (<target>: CARGO_TARGET_DIR, default <repo>/target), replaced on
# every run:
#   shake.md     the table, also printed at the end: suite, test, runs, failures, slowest run (s),
#                and each failed run's exit code and log; with the load average observed
#   shake.json   {"runs_per_test":N,"load":true|false,"cpus":…,"runtime":"containerd v…"|"cri-o v…"|null,"suites":[…],
#                 "filter":…,"wall_seconds":…,"loadavg":{"samples":…,"mean":…,"min":…,"max":…},
#                 "tests":[{"suite":…,"test":…,"runs":…,"failures":…,"seconds":[…],
#                 "failed_runs":[{"run":…,"exit":…,"log":…}]}],"tests_failed":…,"complete":…}
#   logs/<suite>/<test>.run<R>.log   the output of each failed run (passing runs' logs are removed
#                unless SHAKE_KEEP_LOGS=1); a failed guest run also keeps its <target>/guest/<shape>/
#                as logs/guests/<shape>.run<R>.guest/
# The load average is /proc/loadavg's 1-minute figure, sampled as each run ends.
# Exits 1 if any test failed at least once (and on any setup error).
#
# Environment:
#   SHAKE_SUITES     suites to shake (default "nri_handlers faults soak qos_resources")
#   SHAKE_RUNS       runs per test (default 5)
#   SHAKE_TESTS      keep only the tests whose name contains this string (default: all)
#   SHAKE_LOAD       1 (default): the hog runs; 0: no hog (a baseline for the same runs)
#   SHAKE_IO_MB      MiB each I/O writer writes (and fsyncs) per pass, one file per CPU (default 128)
#   SHAKE_TIMEOUT    seconds one run of a test may take before it is killed and counted failed
#                    (default 3600; guests are bounded by hack/guest.sh's own GUEST_TIMEOUT)
#   SHAKE_LOCK       the real-stack lock file (default /tmp/realstack.lock)
#   SHAKE_KEEP_LOGS  1: keep the logs of passing runs too (default 0)
#   SHAKE_CONTAINERD_VERSION  the containerd line under test (default: the newest supported line)
#   SHAKE_RUNTIME    containerd (default) or cri-o: the runtime of the NRI and kubelet suites' stacks
#                    (cri-o: hack/install-crio.sh too, and the suites run with TOPOLET_RUNTIME=cri-o,
#                    as hack/test.sh's CRI-O lane; the guests always run containerd, so they are
#                    refused with cri-o)
#   SHAKE_CRIO_VERSION        the CRI-O line with SHAKE_RUNTIME=cri-o (default DEFAULT_CRIO_VERSION)
#   CARGO_TARGET_DIR cargo's target directory (default <repo>/target)
#   GO, TOPOLET_CACHE, GUEST_*, TOPOLET_SOAK_CYCLES, TOPOLET_FAULT_SEED: passed on to the scripts
#                    and tests that read them
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

SHAKE_SUITES="${SHAKE_SUITES:-nri_handlers faults soak qos_resources}"
SHAKE_RUNS="${SHAKE_RUNS:-5}"
SHAKE_TESTS="${SHAKE_TESTS:-}"
SHAKE_LOAD="${SHAKE_LOAD:-1}"
SHAKE_IO_MB="${SHAKE_IO_MB:-128}"
SHAKE_TIMEOUT="${SHAKE_TIMEOUT:-3600}"
SHAKE_LOCK="${SHAKE_LOCK:-/tmp/realstack.lock}"
SHAKE_KEEP_LOGS="${SHAKE_KEEP_LOGS:-0}"
# shellcheck disable=SC2086 # a list: the newest line, as hack/test.sh's newest_line
NEWEST_LINE="$(printf '%s\n' $SUPPORTED_CONTAINERD_VERSIONS | sort -V | tail -n1)"
VERSION="${SHAKE_CONTAINERD_VERSION:-$NEWEST_LINE}"
RUNTIME="${SHAKE_RUNTIME:-containerd}"
CRIO_LINE="${SHAKE_CRIO_VERSION:-$DEFAULT_CRIO_VERSION}"
case "$RUNTIME" in
  containerd) RUNTIME_LABEL="containerd $VERSION" ;;
  cri-o) RUNTIME_LABEL="cri-o $CRIO_LINE" ;;
  *) die "SHAKE_RUNTIME=$RUNTIME: want containerd or cri-o" ;;
esac
TARGET="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
[[ "$TARGET" == /* ]] || TARGET="$REPO_ROOT/$TARGET"
OUT_DIR="$TARGET/shake"
LOG_DIR="$OUT_DIR/logs"

[[ "$SHAKE_RUNS" =~ ^[1-9][0-9]*$ ]] || die "SHAKE_RUNS=$SHAKE_RUNS: want a positive number of runs"
[[ "$SHAKE_LOAD" == 0 || "$SHAKE_LOAD" == 1 ]] || die "SHAKE_LOAD=$SHAKE_LOAD: want 0 or 1"
[[ "$SHAKE_IO_MB" =~ ^[1-9][0-9]*$ ]] || die "SHAKE_IO_MB=$SHAKE_IO_MB: want a positive number of MiB"
[[ "$SHAKE_TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "SHAKE_TIMEOUT=$SHAKE_TIMEOUT: want a positive number of seconds"

# ---------------------------------------------------------------- cleanup

WORK=""      # this run's temporary directory (the hog's files)
HOG_PID=""   # the hog's process group leader
CHILD_PID="" # the run in progress
LOCK_FD=""   # the real-stack lock's descriptor, while held
RUN_START="" # when the runs began, until their report is written
FAKE_DIR=""  # self-check's fake test binary
stop_hog() {
  [[ -n "$HOG_PID" ]] || return 0
  kill -TERM -- "-$HOG_PID" 2>/dev/null || true
  sleep 0.2
  kill -KILL -- "-$HOG_PID" 2>/dev/null || true
  wait "$HOG_PID" 2>/dev/null || true
  # A writer in the middle of an fsync leaves only once it returns: wait for the whole group.
  local i
  for i in $(seq 50); do pgrep -g "$HOG_PID" >/dev/null || break; sleep 0.1; done
  HOG_PID=""
}
cleanup() {
  if [[ -n "$CHILD_PID" ]]; then
    kill -TERM "$CHILD_PID" 2>/dev/null || true
    wait "$CHILD_PID" 2>/dev/null || true
  fi
  stop_hog
  [[ -z "$WORK" ]] || rm -rf "$WORK"
  [[ -z "$FAKE_DIR" ]] || rm -rf "$FAKE_DIR"
  if [[ -n "$RUN_START" ]]; then
    echo
    say "stopped before the last run: the table counts the runs done"
    report "$((SECONDS - RUN_START))" stopped || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- suites

# Parallel arrays, one entry per suite: name, kind (plugin, nri, kubelet, guest).
SUITE_NAMES=()
SUITE_KINDS=()
add_suite() {
  local s
  for s in "${SUITE_NAMES[@]}"; do [[ "$s" != "$1" ]] || return 0; done
  SUITE_NAMES+=("$1")
  SUITE_KINDS+=("$2")
}
integration_kind() { [[ "$1" == kubelet || "$1" == kubelet_* ]] && echo kubelet || echo nri; }
resolve_suites() {
  local name f
  for name in $SHAKE_SUITES; do
    case "$name" in
      nri | kubelet)
        for f in "$REPO_ROOT"/integration/tests/*.rs; do
          f="$(basename "$f" .rs)"
          [[ "$(integration_kind "$f")" != "$name" ]] || add_suite "$f" "$name"
        done ;;
      guests) add_suite guests guest ;;
      *)
        if [[ -f "$REPO_ROOT/plugin/tests/$name.rs" ]]; then add_suite "$name" plugin
        elif [[ -f "$REPO_ROOT/integration/tests/$name.rs" ]]; then add_suite "$name" "$(integration_kind "$name")"
        else
          die "SHAKE_SUITES: no suite '$name' (plugin/tests/<name>.rs, integration/tests/<name>.rs, nri, kubelet or guests)"
        fi ;;
    esac
  done
  ((${#SUITE_NAMES[@]})) || die "SHAKE_SUITES is empty"
}
has_kind() {
  local k
  for k in "${SUITE_KINDS[@]}"; do [[ "$k" != "$1" ]] || return 0; done
  return 1
}
real_stack() { has_kind nri || has_kind kubelet || has_kind guest; }

# ---------------------------------------------------------------- setup and build

install_stack() {
  [[ $EUID -eq 0 ]] || die "must run as root for the real-stack suites (containerd, runc, cgroups)"
  validate_containerd_version "$VERSION" || die "SHAKE_CONTAINERD_VERSION=$VERSION is not supported"
  if [[ "$RUNTIME" == cri-o ]] && has_kind guest; then
    die "SHAKE_RUNTIME=cri-o: the guests run containerd only (shake them without SHAKE_RUNTIME)"
  fi
  say "hack/install-deps.sh (containerd $VERSION)"
  CONTAINERD_VERSION="$VERSION" "$HACK_DIR/install-deps.sh" || die "hack/install-deps.sh failed"
  if has_kind kubelet; then
    say "hack/install-kube.sh"
    "$HACK_DIR/install-kube.sh" || die "hack/install-kube.sh failed"
  fi
  if [[ "$RUNTIME" == cri-o ]] && { has_kind nri || has_kind kubelet; }; then
    say "hack/install-crio.sh (CRI-O $CRIO_LINE)"
    CRIO_VERSION="$CRIO_LINE" "$HACK_DIR/install-crio.sh" || die "hack/install-crio.sh failed"
  fi
  if has_kind guest; then
    say "hack/guest.sh image"
    CONTAINERD_VERSION="$VERSION" "$HACK_DIR/guest.sh" image >/dev/null || die "hack/guest.sh image failed"
  fi
}

declare -A EXES=() # suite -> test executable
# build_tests PACKAGE SUITE...: cargo test --no-run for SUITE's test targets; fills EXES.
build_tests() {
  local pkg="$1" args=() s json name exe; shift
  for s in "$@"; do args+=(--test "$s"); done
  say "building the tests of $pkg: $*"
  json="$(cd "$REPO_ROOT" && cargo test -p "$pkg" "${args[@]}" --no-run --message-format=json-render-diagnostics)" ||
    die "cargo test -p $pkg --no-run failed"
  while IFS=$'\t' read -r name exe; do EXES["$name"]="$exe"; done < <(python3 -c '
import json, sys
for line in sys.stdin:
    if not line.startswith("{"):
        continue
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in m["target"]["kind"]:
        print(m["target"]["name"] + "\t" + m["executable"])' <<<"$json")
  for s in "$@"; do [[ -x "${EXES[$s]:-}" ]] || die "no test executable for $s in cargo's output"; done
}
build_all() {
  local plugin=() integ=() i
  for i in "${!SUITE_NAMES[@]}"; do
    case "${SUITE_KINDS[$i]}" in
      plugin) plugin+=("${SUITE_NAMES[$i]}") ;;
      nri | kubelet) integ+=("${SUITE_NAMES[$i]}") ;;
    esac
  done
  ((${#plugin[@]} == 0)) || build_tests topolet "${plugin[@]}"
  if ((${#integ[@]})); then
    build_tests topolet-integration "${integ[@]}"
    say "building topolet"
    (cd "$REPO_ROOT" && cargo build -q -p topolet --bin topolet) || die "cargo build -p topolet failed"
    export TOPOLET_BIN="$TARGET/debug/topolet"
  fi
}

# ---------------------------------------------------------------- the tests

# Parallel arrays, one entry per test: suite, kind, name.
T_SUITE=()
T_KIND=()
T_NAME=()
crate_dir() { [[ "$1" == plugin ]] && echo "$REPO_ROOT/plugin" || echo "$REPO_ROOT/integration"; }
# list_tests SUITE KIND: the suite's test names, one a line (ignored ones left out).
list_tests() {
  if [[ "$2" == guest ]]; then
    CONTAINERD_VERSION="$VERSION" "$HACK_DIR/guest.sh" shapes | tr ' ' '\n' | grep -v '^$'
    return
  fi
  local exe="${EXES[$1]}" all ignored
  all="$(cd "$(crate_dir "$2")" && "$exe" --list --format terse)" || die "$exe --list failed"
  ignored="$(cd "$(crate_dir "$2")" && "$exe" --list --format terse --ignored)" || die "$exe --list --ignored failed"
  comm -23 <(sed -n 's/: test$//p' <<<"$all" | sort) <(sed -n 's/: test$//p' <<<"$ignored" | sort)
}
collect_tests() {
  local i t n names
  for i in "${!SUITE_NAMES[@]}"; do
    names="$(list_tests "${SUITE_NAMES[$i]}" "${SUITE_KINDS[$i]}")" || die "listing the tests of ${SUITE_NAMES[$i]} failed"
    n=0
    while IFS= read -r t; do
      [[ -n "$t" && "$t" == *"$SHAKE_TESTS"* ]] || continue
      T_SUITE+=("${SUITE_NAMES[$i]}"); T_KIND+=("${SUITE_KINDS[$i]}"); T_NAME+=("$t")
      n=$((n + 1))
    done <<<"$names"
    if [[ -n "$SHAKE_TESTS" ]]; then say "${SUITE_NAMES[$i]}: $n test(s) matching \"$SHAKE_TESTS\""
    else say "${SUITE_NAMES[$i]}: $n test(s)"; fi
  done
  ((${#T_NAME[@]})) || die "no test matches SHAKE_TESTS='$SHAKE_TESTS' in: ${SUITE_NAMES[*]}"
}

# ---------------------------------------------------------------- lock and hog

take_lock() {
  exec {LOCK_FD}>>"$SHAKE_LOCK" || die "cannot open the lock file $SHAKE_LOCK"
  if ! flock -n "$LOCK_FD"; then
    say "waiting for $SHAKE_LOCK (another real-stack run holds it)"
    flock "$LOCK_FD"
  fi
  say "holding $SHAKE_LOCK"
}

# start_hog: per CPU one spinner and one writer, in a new session (process group) led by HOG_PID.
start_hog() {
  local cpus
  cpus="$(nproc)"
  # shellcheck disable=SC2016 # expanded by the hog's own shell
  spawn "$WORK" setsid bash -c '
    cpus=$1 dir=$2 mb=$3
    for ((i = 0; i < cpus; i++)); do
      (while :; do :; done) &
      (while :; do dd if=/dev/zero of="$dir/io.$i" bs=1M count="$mb" conv=fsync status=none; done) &
    done
    wait' shake-hog "$cpus" "$WORK" "$SHAKE_IO_MB" >/dev/null 2>&1
  HOG_PID=$!
  sleep 1
  [[ "$(ps -o pgid= -p "$HOG_PID" | tr -d ' ')" == "$HOG_PID" ]] || die "the hog did not get a process group of its own"
  say "hog started: $cpus CPU spinners and $cpus I/O writers (${SHAKE_IO_MB} MiB with fsync each, in $WORK), process group $HOG_PID"
}

# spawn DIR CMD...: start CMD in the background in DIR, stdin from /dev/null, $! its own pid (the
# subshell execs it), without the lock's descriptor: a daemon a test leaves must not hold the lock.
spawn() {
  (
    cd "$1"
    shift
    if [[ -n "$LOCK_FD" ]]; then exec {LOCK_FD}>&-; fi
    exec "$@" </dev/null
  ) &
}

LOADS=()
sample_load() { LOADS+=("$(cut -d' ' -f1 /proc/loadavg)"); }

# ---------------------------------------------------------------- runs

safe_name() { printf '%s' "$1" | tr -c 'A-Za-z0-9_.-' '_'; }

# run_one INDEX ROUND: one run of one test, its line in runs.tsv.
run_one() {
  local suite="${T_SUITE[$1]}" kind="${T_KIND[$1]}" name="${T_NAME[$1]}" round="$2"
  local log rc=0 start load
  mkdir -p "$LOG_DIR/$suite"
  log="$LOG_DIR/$suite/$(safe_name "$name").run$round.log"
  start="$(date +%s.%N)"
  if [[ "$kind" == guest ]]; then
    spawn "$REPO_ROOT" env CONTAINERD_VERSION="$VERSION" "$HACK_DIR/guest.sh" test "$name" >"$log" 2>&1
  else
    spawn "$(crate_dir "$kind")" timeout -k 30 "$SHAKE_TIMEOUT" "${EXES[$suite]}" --exact "$name" --test-threads=1 \
      >"$log" 2>&1
  fi
  CHILD_PID=$!
  wait "$CHILD_PID" || rc=$?
  CHILD_PID=""
  local secs
  secs="$(echo "$start $(date +%s.%N)" | awk '{ printf "%.1f", $2 - $1 }')"
  if [[ "$kind" != guest && $rc -eq 0 ]] && ! grep -q '^running 1 test' "$log"; then
    echo "shake.sh: the run ran no test (no 'running 1 test' line)" >>"$log"
    rc=254
  fi
  [[ $rc -ne 124 ]] || echo "shake.sh: killed after SHAKE_TIMEOUT=${SHAKE_TIMEOUT}s" >>"$log"
  sample_load
  load="${LOADS[-1]}"
  if [[ $rc -eq 0 ]]; then
    say "[run $round/$SHAKE_RUNS] $suite $name: ok (${secs}s, load $load)"
    [[ "$SHAKE_KEEP_LOGS" == 1 ]] || { rm -f "$log"; log=""; }
  else
    if [[ "$kind" == guest && -d "$TARGET/guest/$name" ]]; then
      cp -a "$TARGET/guest/$name" "${log%.log}.guest" || true
    fi
    say "[run $round/$SHAKE_RUNS] $suite $name: FAILED, exit $rc (${secs}s, load $load; log $log)"
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$suite" "$name" "$round" "$rc" "$secs" "$load" "$log" >>"$OUT_DIR/runs.tsv"
}

# ---------------------------------------------------------------- report

# report WALL_SECONDS complete|stopped: shake.md and shake.json from tests.tsv and runs.tsv; prints the table.
report() {
  python3 - "$OUT_DIR" "$SHAKE_RUNS" "$SHAKE_LOAD" "$(nproc)" "$RUNTIME_LABEL" "$SHAKE_TESTS" "$1" \
    "${SHAKE_SUITES}" "$(real_stack && echo 1 || echo 0)" "${LOADS[*]}" "$2" <<'EOT'
import json, os, sys

out, runs, load, cpus, runtime, filt, wall, suites, real, loads, state = sys.argv[1:]
tests, index = [], {}
with open(os.path.join(out, "tests.tsv")) as f:
    for line in f:
        suite, test = line.rstrip("\n").split("\t")
        index[(suite, test)] = len(tests)
        tests.append({"suite": suite, "test": test, "runs": 0, "failures": 0, "seconds": [], "failed_runs": []})
path = os.path.join(out, "runs.tsv")
if os.path.exists(path):
    with open(path) as f:
        for line in f:
            suite, test, rnd, rc, secs, _load, log = line.rstrip("\n").split("\t")
            t = tests[index[(suite, test)]]
            t["runs"] += 1
            t["seconds"].append(float(secs))
            if rc != "0":
                t["failures"] += 1
                t["failed_runs"].append({"run": int(rnd), "exit": int(rc), "log": log})
samples = [float(x) for x in loads.split()]
la = {"samples": len(samples)}
if samples:
    la.update(mean=round(sum(samples) / len(samples), 2), min=min(samples), max=max(samples))
failed = sum(1 for t in tests if t["failures"])
doc = {
    "runs_per_test": int(runs), "load": load == "1", "cpus": int(cpus),
    "runtime": runtime if real == "1" else None, "suites": suites.split(),
    "filter": filt or None, "wall_seconds": int(wall), "loadavg": la, "tests": tests,
    "tests_failed": failed, "complete": state == "complete",
}
with open(os.path.join(out, "shake.json"), "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")

def pl(n, word):
    return f"{n} {word}" if int(n) == 1 else f"{n} {word}s"

hog = f"under load ({cpus} CPU spinners + {cpus} I/O writers)" if load == "1" else "without load (SHAKE_LOAD=0)"
md = [f"## shake: {pl(runs, 'run')} per test {hog}, {cpus} CPUs", ""]
facts = [f"suites: {' '.join(suites.split())}"]
if filt:
    facts.append(f"tests matching '{filt}'")
if real == "1":
    facts.append(runtime)
if samples:
    facts.append(f"load average (1 min, as each run ended): mean {la['mean']}, min {la['min']}, max {la['max']}")
facts.append(f"wall {wall} s")
if state != "complete":
    facts.append("**stopped before the last run** (runs counts the runs done)")
md += ["; ".join(facts), ""]
md += ["| suite | test | runs | failures | slowest (s) | failed runs |", "|---|---|---:|---:|---:|---|"]
for t in tests:
    slow = f"{max(t['seconds']):.1f}" if t["seconds"] else "-"
    fails = "<br>".join(f"run {r['run']} (exit {r['exit']}): `{r['log']}`" for r in t["failed_runs"])
    md.append(f"| {t['suite']} | `{t['test']}` | {t['runs']} | {t['failures']} | {slow} | {fails} |")
if state != "complete":
    md += ["", f"Stopped: {failed} of {pl(len(tests), 'test')} failed at least once in the runs done."]
else:
    md += ["", f"{failed} of {pl(len(tests), 'test')} failed at least once." if failed
           else f"{pl(len(tests), 'test')}: every run passed."]
with open(os.path.join(out, "shake.md"), "w") as f:
    f.write("\n".join(md) + "\n")
print("\n".join(md))
EOT
}

# ---------------------------------------------------------------- main

# shake: list, lock, hog, the runs, the report; returns 1 if any test failed at least once.
shake() {
  export CARGO_TARGET_DIR="$TARGET" TOPOLET_CONTAINERD_VERSION="$VERSION" RUST_BACKTRACE=1
  if [[ "$RUNTIME" == cri-o ]]; then export TOPOLET_RUNTIME=cri-o TOPOLET_CRIO_VERSION="$CRIO_LINE"; fi
  collect_tests
  rm -rf "$OUT_DIR"
  mkdir -p "$LOG_DIR"
  local i
  for i in "${!T_NAME[@]}"; do printf '%s\t%s\n' "${T_SUITE[$i]}" "${T_NAME[$i]}"; done >"$OUT_DIR/tests.tsv"
  : >"$OUT_DIR/runs.tsv"
  if real_stack || [[ "$SHAKE_LOAD" == 1 ]]; then take_lock; fi
  WORK="$(mktemp -d "$OUT_DIR/tmp.XXXXXX")"
  sample_load
  say "load average before: ${LOADS[0]} ($(nproc) CPUs)"
  LOADS=()
  if [[ "$SHAKE_LOAD" == 1 ]]; then start_hog; fi
  local round
  RUN_START=$SECONDS
  say "${#T_NAME[@]} test(s) x $SHAKE_RUNS run(s), one test at a time, interleaved"
  for ((round = 1; round <= SHAKE_RUNS; round++)); do
    for i in "${!T_NAME[@]}"; do run_one "$i" "$round"; done
  done
  stop_hog
  rm -rf "$WORK"
  WORK=""
  echo
  report "$((SECONDS - RUN_START))" complete
  RUN_START=""
  say "wrote $OUT_DIR/shake.md and $OUT_DIR/shake.json"
  ! awk -F'\t' '$4 != 0 { bad = 1 } END { exit !bad }' "$OUT_DIR/runs.tsv"
}

# self_check: the script's own check, in seconds, without cargo, root or a real stack. A fake test
# binary (one test passing, one failing, one ignored, one running no test, one outliving
# SHAKE_TIMEOUT) is listed, shaken twice without load into <target>/shake-self-check/, and its
# shake.json must count exactly that, with a kept log per failed run and the runs interleaved.
self_check() {
  OUT_DIR="$TARGET/shake-self-check"
  LOG_DIR="$OUT_DIR/logs"
  SHAKE_RUNS=2 SHAKE_LOAD=0 SHAKE_TIMEOUT=2 SHAKE_TESTS="" SHAKE_SUITES=self-check
  SUITE_NAMES=(self-check)
  SUITE_KINDS=(plugin)
  FAKE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/topolet-shake-self-check.XXXXXX")"
  cat >"$FAKE_DIR/fake-test" <<'EOT'
#!/usr/bin/env bash
# A libtest binary's interface, as hack/shake.sh uses it.
if [[ "$1" == --list ]]; then
  if [[ "$*" == *--ignored* ]]; then echo "ignored: test"; exit 0; fi
  printf 'passes: test\nmod::fails: test\nignored: test\nruns_nothing: test\nhangs: test\nsome_bench: bench\n'
  exit 0
fi
case "$2" in
  passes) echo "running 1 test"; echo "test passes ... ok" ;;
  mod::fails) echo "running 1 test"; echo "test mod::fails ... FAILED"; exit 101 ;;
  runs_nothing) echo "running 0 tests" ;;
  hangs) echo "running 1 test"; sleep 60 ;;
  *) echo "unexpected test $2"; exit 3 ;;
esac
EOT
  chmod +x "$FAKE_DIR/fake-test"
  EXES[self-check]="$FAKE_DIR/fake-test"
  local rc=0
  shake || rc=$?
  [[ $rc -eq 1 ]] || die "self-check: want exit 1 (tests failed), got $rc"
  python3 - "$OUT_DIR" <<'EOT' || die "self-check: the report is not what the fake tests did (above)"
import json, os, sys

out = sys.argv[1]
doc = json.load(open(os.path.join(out, "shake.json")))
got = {t["test"]: (t["runs"], t["failures"], [r["exit"] for r in t["failed_runs"]]) for t in doc["tests"]}
want = {"passes": (2, 0, []), "mod::fails": (2, 2, [101, 101]), "runs_nothing": (2, 2, [254, 254]),
        "hangs": (2, 2, [124, 124])}
problems = []
if got != want:
    problems.append(f"counts: got {got}, want {want}")
if doc["tests_failed"] != 3 or doc["runs_per_test"] != 2 or doc["load"] or not doc["complete"]:
    problems.append(f"summary: {doc['tests_failed']} failed, {doc['runs_per_test']} runs, load {doc['load']}, complete {doc['complete']}")
for t in doc["tests"]:
    for r in t["failed_runs"]:
        if not os.path.isfile(r["log"]) or not r["log"].startswith(os.path.join(out, "logs") + "/"):
            problems.append(f"no kept log for {t['test']} run {r['run']}: {r['log']!r}")
rounds = [int(line.split("\t")[2]) for line in open(os.path.join(out, "runs.tsv"))]
if rounds != sorted(rounds) or len(rounds) != 8:
    problems.append(f"runs not interleaved round by round: {rounds}")
md = open(os.path.join(out, "shake.md")).read()
if "| suite | test | runs | failures |" not in md or "3 of 4 tests failed at least once." not in md:
    problems.append("shake.md lacks the table or its summary")
for p in problems:
    print("shake.sh: self-check:", p, file=sys.stderr)
sys.exit(1 if problems else 0)
EOT
  say "self-check: ok (the table above is the fake tests': 1 passing, 3 failing in 3 ways, 1 ignored and left out)"
}

main() {
  command -v python3 >/dev/null || die "python3 not found (parses cargo's output, writes the report)"
  case "${1:-}" in
    self-check) self_check; return ;;
    "") ;;
    *) die "usage: hack/shake.sh [self-check] (the environment chooses what runs: see the header)" ;;
  esac
  command -v cargo >/dev/null || die "cargo not found on PATH"
  resolve_suites
  if real_stack; then install_stack; fi
  build_all
  shake || exit 1
}

main "$@"
