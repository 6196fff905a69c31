#!/usr/bin/env bash
# hack/fuzz.sh — coverage-guided fuzzing of topolet for a bounded time (cargo-fuzz + libFuzzer).
#
# Usage: hack/fuzz.sh [TARGET...]     (default: every target below)
#
# Targets (fuzz/fuzz_targets/, properties in testkit/fuzz-props/src/lib.rs, crate topolet-fuzz-props):
#   mux_frames    the NRI socket multiplexer's frame reader (proto/src/mux.rs)
#   nri_messages  every NRI request the plugin side decodes, fed to TopoletPlugin's handlers
#   config_toml   the TOML configuration (topolet::config) and the placement built from it
#   sysfs_tree    CPU lists and topolet::host::sysfs discovery over a fuzzed sysfs tree
#   plan_input    topolet plan: the JSON/YAML pod parser and the placement pipeline
#   device_numa   a PCI device's numa_node content, read for a container's device node (topolet::host::device_numa)
#
# Steps: installs cargo-fuzz $CARGO_FUZZ_VERSION into $TOPOLET_CACHE/cargo-fuzz-<version> (outside
# the clone, so a fresh CI clone reuses it; idempotent, `cargo install --locked`, used only if its
# --version names that version) and links it as .deps/cargo/bin/cargo-fuzz, builds every target
# with the nightly toolchain, optimized with debug assertions and overflow checks (an overflow is
# a crash), 16 codegen units (cargo-fuzz defaults to 1, which
# serializes code generation of every crate in the cold build), without a sanitizer (the fuzzed code has no `unsafe`,
# so ASan would only slow it down), then runs each target (FUZZ_JOBS at once) for FUZZ_SECONDS on its
# working corpus target/fuzz/corpus/<target> (kept between runs) plus the committed seeds
# fuzz/seeds/<target>. Writes target/fuzz/fuzz.json:
#   {"fuzz_seconds":N,"toolchain":"…","cargo_fuzz":"…","targets":[{"target":…,"executions":…,
#    "seconds":…,"exec_per_sec":…,"corpus_files":…,"new_units":…,"peak_rss_mb":…,"crashes":…}],
#    "total_executions":…,"crashes":…}
# and prints one line per target. Exits 1 if any target crashed (or timed out, or ran out of
# memory); the input is kept under target/fuzz/artifacts/<target>/. A crash is a bug: fix it and
# copy the input to fuzz/regressions/<target>/ (replayed by `cargo test`, plugin/tests/fuzz_replay.rs).
#
# Environment:
#   FUZZ_SECONDS        seconds per target (default 20)
#   FUZZ_JOBS           targets fuzzed at once (default: the number of CPUs)
#   FUZZ_TOOLCHAIN      rustup toolchain for the build (default nightly)
#   CARGO_FUZZ_VERSION  cargo-fuzz to install (default 0.13.2)
#   FUZZ_BUILD_ONLY     1: install cargo-fuzz and build every target, then stop (hack/test.sh runs
#                       this in the background from its start, so that the fuzzing step finds the
#                       build done)
#   TOPOLET_CACHE       the cache directory (hack/lib/common.sh)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/common.sh
source "$HACK_DIR/lib/common.sh"

FUZZ_SECONDS="${FUZZ_SECONDS:-20}"
FUZZ_JOBS="${FUZZ_JOBS:-$(nproc)}"
FUZZ_TOOLCHAIN="${FUZZ_TOOLCHAIN:-nightly}"
CARGO_FUZZ_VERSION="${CARGO_FUZZ_VERSION:-0.13.2}"
ALL_TARGETS="mux_frames nri_messages config_toml sysfs_tree plan_input device_numa"

FUZZ_DIR="$REPO_ROOT/fuzz"
OUT_DIR="$REPO_ROOT/target/fuzz"
# The build directory outlives the clone: $TOPOLET_CACHE/fuzz-build/<key>, the key a hash of the
# toolchain's version and both lock files, so a fresh clone on a machine that fuzzed before builds
# only topolet's own crates (a cold build of every dependency is about 10 minutes on 2 CPUs).
# Cargo's fingerprints decide what is rebuilt; the key only bounds the directory's growth: other
# keys are removed. FUZZ_BUILD_DIR overrides it.
BUILD_DIR="${FUZZ_BUILD_DIR:-}"
CARGO_ROOT="$TOPOLET_CACHE/cargo-fuzz-$CARGO_FUZZ_VERSION"
CARGO_FUZZ="$DEPS/cargo/bin/cargo-fuzz"

[[ "$FUZZ_SECONDS" =~ ^[1-9][0-9]*$ ]] || die "FUZZ_SECONDS=$FUZZ_SECONDS is not a positive number of seconds"
[[ "$FUZZ_JOBS" =~ ^[1-9][0-9]*$ ]] || die "FUZZ_JOBS=$FUZZ_JOBS is not a positive number of jobs"
TARGETS="${*:-$ALL_TARGETS}"
for t in $TARGETS; do
  [[ " $ALL_TARGETS " == *" $t "* ]] || die "unknown target $t (targets: $ALL_TARGETS)"
done

install_cargo_fuzz() {
  cargo_tool_install cargo-fuzz "$CARGO_FUZZ_VERSION" "$CARGO_ROOT" "cargo-fuzz $CARGO_FUZZ_VERSION" "$CARGO_FUZZ"
}

# stat NAME LOG: the value of libFuzzer's final `stat::NAME:` line in LOG (0 if absent).
stat() { sed -n "s/^stat::$1: *\([0-9]*\).*/\1/p" "$2" | tail -n1 | grep . || echo 0; }

main() {
  command -v cargo >/dev/null || die "cargo not found on PATH"
  command -v rustup >/dev/null || die "rustup not found on PATH (needed for the $FUZZ_TOOLCHAIN toolchain)"
  rustup run "$FUZZ_TOOLCHAIN" rustc --version >/dev/null 2>&1 \
    || die "rust toolchain $FUZZ_TOOLCHAIN is not installed (rustup toolchain install $FUZZ_TOOLCHAIN)"
  install_cargo_fuzz

  local start=$SECONDS key
  mkdir -p "$OUT_DIR"
  if [[ -z "$BUILD_DIR" ]]; then
    key="$({ rustup run "$FUZZ_TOOLCHAIN" rustc --version --verbose
      cat "$REPO_ROOT/Cargo.lock" "$FUZZ_DIR/Cargo.lock"; } | sha256sum | cut -c1-16)"
    BUILD_DIR="$TOPOLET_CACHE/fuzz-build/$key"
    mkdir -p "$BUILD_DIR"
    find "$TOPOLET_CACHE/fuzz-build" -mindepth 1 -maxdepth 1 ! -name "$key" -exec rm -rf {} +
    say "build directory $BUILD_DIR"
  fi
  say "building every target with $(rustup run "$FUZZ_TOOLCHAIN" rustc --version)"
  (cd "$FUZZ_DIR" && rustup run "$FUZZ_TOOLCHAIN" "$CARGO_FUZZ" build --sanitizer none --debug-assertions --codegen-units 16 \
    --target-dir "$BUILD_DIR")
  say "build: $((SECONDS - start))s"
  [[ "${FUZZ_BUILD_ONLY:-0}" != 1 ]] || return 0

  # The targets run FUZZ_JOBS at a time (default: one per CPU; each libFuzzer process is one
  # thread), each for FUZZ_SECONDS on a CPU of its own; their stats are read once all are done.
  local t log corpus artifacts pids=() names=()
  for t in $TARGETS; do
    log="$OUT_DIR/$t.log"
    corpus="$OUT_DIR/corpus/$t"
    artifacts="$OUT_DIR/artifacts/$t"
    mkdir -p "$corpus" "$artifacts"
    while (( $(jobs -rp | wc -l) >= FUZZ_JOBS )); do wait -n || true; done
    # Seeds are read-only inputs; new units go to the working corpus (the first directory).
    (
      t0=$SECONDS rc=0
      (cd "$FUZZ_DIR" && rustup run "$FUZZ_TOOLCHAIN" "$CARGO_FUZZ" run --sanitizer none --debug-assertions --codegen-units 16 \
        --target-dir "$BUILD_DIR" "$t" "$corpus" "$FUZZ_DIR/seeds/$t" -- \
        -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$artifacts/") >"$log" 2>&1 || rc=$?
      echo "$rc $((SECONDS - t0))" >"$log.rc"
    ) &
    pids+=("$!")
    names+=("$t")
  done
  local pid
  for pid in "${pids[@]}"; do wait "$pid" || true; done

  local rows=() rc execs secs eps new rss files crashes total=0 crashed=0
  for t in "${names[@]}"; do
    log="$OUT_DIR/$t.log"
    corpus="$OUT_DIR/corpus/$t"
    artifacts="$OUT_DIR/artifacts/$t"
    [[ -s "$log.rc" ]] || die "$t: the fuzzing job left no exit status (log: $log)"
    read -r rc secs <"$log.rc"
    rm -f "$log.rc"
    execs=$(stat number_of_executed_units "$log")
    eps=$(stat average_exec_per_sec "$log")
    new=$(stat new_units_added "$log")
    rss=$(stat peak_rss_mb "$log")
    files=$(find "$corpus" -type f | wc -l)
    crashes=$(find "$artifacts" -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' -o -name 'leak-*' \) | wc -l)
    if ((rc != 0 && crashes == 0)); then
      tail -n 30 "$log" >&2
      die "$t: cargo fuzz run exited $rc without leaving a crash input (log: $log)"
    fi
    ((execs > 0)) || die "$t: no executions recorded (log: $log)"
    total=$((total + execs))
    crashed=$((crashed + crashes))
    printf 'fuzz.sh: %-13s %10d executions in %3ds (%6d/s), corpus %5d files (+%d), peak rss %d MiB, crashes %d\n' \
      "$t" "$execs" "$secs" "$eps" "$files" "$new" "$rss" "$crashes"
    if ((crashes > 0)); then
      grep -m1 -B2 -A20 -E 'panicked|ERROR: libFuzzer|deadly signal' "$log" >&2 || tail -n 40 "$log" >&2
      ls -l "$artifacts" >&2
    fi
    rows+=("{\"target\":\"$t\",\"executions\":$execs,\"seconds\":$secs,\"exec_per_sec\":$eps,\"corpus_files\":$files,\"new_units\":$new,\"peak_rss_mb\":$rss,\"crashes\":$crashes}")
  done

  local joined
  joined=$(IFS=,; echo "${rows[*]}")
  cat >"$OUT_DIR/fuzz.json" <<EOF
{"fuzz_seconds":$FUZZ_SECONDS,"toolchain":"$(rustup run "$FUZZ_TOOLCHAIN" rustc --version)","cargo_fuzz":"$CARGO_FUZZ_VERSION","targets":[$joined],"total_executions":$total,"crashes":$crashed,"wall_seconds":$((SECONDS - start))}
EOF
  say "wrote $OUT_DIR/fuzz.json: $total executions, $crashed crashes, $((SECONDS - start))s"
  ((crashed == 0)) || die "$crashed crash input(s) under $OUT_DIR/artifacts (see the logs there)"
}

main
