//! Colocation on reclaimed CPU the way an operator runs it, on a real kubelet v1.37, API server
//! and the stock kube-scheduler, with `[reclaimed]` at its defaults (`usage = "cpus"`: everything
//! that is not batch on the pool's CPUs counts as regular use, this machine's own work included)
//! but for the keys [`reclaimed_toml`] names with the reason the test forces each (in CI,
//! `usage = "pods"` too: the bench's figures are the default's). A regular
//! Burstable pod (500m requested, no limit) and two batch pods asking for 300m of
//! `topolet.io/reclaimed-cpu` each share the pool (CPU 1; CPU 0 is reserved). All run the probe
//! of `hack/bench/colocation` (a static Go program, from a hostPath directory); the regular
//! probe's threads are confined to the batch pods' CPUs (read from their cpuset), so it competes
//! with them instead of escaping to the reserved CPU its own cpuset also allows:
//!
//! 1. **Windows.** The regular probe wakes every 1 ms tick (clock_nanosleep on an absolute time),
//!    records how late it woke and does ~300 µs of CPU-bound work units; its throughput is the
//!    units over the window's wall time, so a late or missed tick is lost work. The batch probes
//!    spin while the control file `hog` exists. Solo and colocated windows alternate (the order
//!    flips every alternation, so drift and the shared machine's noise hit both alike); around
//!    each window the test reads each CPU's busy time (the node's, all CPUs, and the pool's:
//!    the cgroup v1 root's exact `cpuacct.usage_percpu` where the host has it, as topolet does,
//!    else `/proc/stat`; see [`proc_stat`]) and both containers' `cpuacct.usage`.
//! 2. **Suppress reaction.** With the batch probes spinning and the regular one idle, the regular
//!    probe starts two spinning threads (a step to the whole pool); the test polls the batch
//!    containers' `cpu.cfs_quota_us` every 5 ms from the moment it asks for the step, and the
//!    reaction is the time from the threads' start (the probe's own clock, CLOCK_REALTIME on
//!    this host) to the first read where their sum is cut by a tenth of the pool or more (the
//!    step takes the whole pool; the regular probe's own ticking moves the budget by less). The
//!    step ends once the cut is seen; the quotas must grow back before the next repetition.
//! 3. **Advertised amount over a load step.** Every 200 ms: the Node's capacity, the `reclaimed`
//!    section of `topolet status`, and the really idle CPU of the pool since the last sample (its
//!    idle time, [`proc_stat`], plus what the batch pods used: their CPU is for the taking);
//!    the regular probe ticks, then spins until the Node's amount has fallen, then ticks again
//!    until it is back up.
//! 4. **Regular use of the reserved CPU.** The batch pods idle, the amount back up, the regular
//!    probe spins one thread confined to the reserved CPU (its own cpuset allows it, as the
//!    kubelet's shared pool does): the formula's amount (`topolet status`) must fall below what
//!    it was once the usage window held only the idle present, and the Node's amount must not
//!    be above it (any fall is written at once; a small rise is held, so the Node's amount
//!    itself may lag the formula and is no reference). Under `usage = "cpus"` through
//!    the reserved CPU's busy time beyond its headroom (`topolet_core::reclaimed::spill`, the
//!    `reserved` terms of `topolet status`, which must show it counted); under `usage = "pods"`
//!    through the pod's own cgroup time, wherever it ran.
//!
//! The assertions are effects that never depend on speed: the batch pod ran (its cgroup usage
//! grew) in the colocated windows, the regular pod's ticks all completed, the quota was cut
//! after each step and restored after it, the Node's amount fell during the step and rose
//! after it. With `TOPOLET_BENCH_OUT=<file>` (hack/bench.sh part `reclaimed`) the windows are
//! longer and more, and the figures are appended as one JSON line; `TOPOLET_COLOCATION_PROBE`
//! names a prebuilt probe, else the test builds it with `go build` (`GO`, else `go` on PATH,
//! else /usr/local/go/bin/go).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ::topolet::host::cpu_usage::CpuTimeSource;
use ::topolet::host::pod_cgroup::find_controller;
use anyhow::{bail, ensure, Context};
use serde_json::{json, Value};
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::reclaimed::ReclaimedSettings;
use topolet_integration::cluster::{ClusterOptions, KubeContainer, KubeNode, POD_TIMEOUT};
use topolet_integration::manifests::res;
use topolet_integration::observe::cgroup_dir;
use topolet_integration::probe::{self, loadavg, median, read_trimmed, unix_ns, Probe};
use topolet_integration::{colocation_goals, topolet, wait};

const RES: &str = "topolet.io/reclaimed-cpu";
/// The pool: CPU 1 (CPU 0 is reserved).
const POOL: u64 = 1000;
const RESERVED_CPU: u32 = 0;
/// Each batch pod's request and limit: both fit the idle pool less the margin and this
/// machine's own work on it.
const BATCH_MILLIS: u64 = 300;
const BATCHES: [&str; 2] = ["batch-a", "batch-b"];
/// How long the amounts and quotas may take to follow a change (a deadline, not a claim).
const FOLLOW: Duration = Duration::from_secs(60);
/// The advertised run's sampling period.
const SAMPLE_MS: u64 = 200;
/// A cut of the batch quotas: a tenth of the pool (µs per 100 ms period), ten times the
/// suppress step's dead band (`topolet_core::reclaimed::suppress`).
const CUT_US: i64 = (POOL * 100 / 10) as i64;

/// `[reclaimed]` at its defaults but for the keys the test stack forces:
/// - `window = "3s"`, `max_age = "10s"`: the advertised run waits for the amount to fall and
///   rise back after a load step; at the defaults (60 s, 300 s) each wait takes minutes, and the
///   rule is the same at any length;
/// - `starved_percent = 0`: the measurement needs both batch pods for the whole run, while its
///   suppress steps cut them on purpose (starvation is kubelet_reclaimed.rs's subject);
/// - in CI only (no `TOPOLET_BENCH_OUT`), `usage = "pods"`: CI shares the machine's CPUs with
///   builds, and the shake harness spins a hog on every CPU; with the default `usage = "cpus"`
///   that work is regular use of the pool, and the amount would never leave room for the batch
///   pods. The bench runs the default on an idle machine: its figures are the operator's case.
fn reclaimed_toml(plan: &Plan) -> String {
    let usage = if plan.out.is_some() {
        ""
    } else {
        "usage = \"pods\"\n"
    };
    format!(
        "[reclaimed]\nenabled = true\nwindow = \"3s\"\nmax_age = \"10s\"\nstarved_percent = 0\n{usage}"
    )
}

/// The defaults the run uses, in milli-CPU and ms.
struct Defaults {
    margin: u64,
    suppress_interval_ms: u64,
    interval_ms: u64,
    min_change_percent: u64,
}

fn defaults() -> Defaults {
    let d = ReclaimedSettings::default();
    Defaults {
        margin: (POOL * u64::from(d.margin_percent)).div_ceil(100),
        suppress_interval_ms: d.suppress_interval.as_millis() as u64,
        interval_ms: d.interval.as_millis() as u64,
        min_change_percent: u64::from(d.min_change_percent),
    }
}

/// How much to measure: short in CI, the bench's figures with `TOPOLET_BENCH_OUT`.
struct Plan {
    out: Option<PathBuf>,
    window_s: f64,
    alternations: usize,
    steps: usize,
    /// Samples of the advertised run before the step and the least after it.
    adv_before: usize,
    adv_after: usize,
}

impl Plan {
    fn from_env() -> Plan {
        match std::env::var_os("TOPOLET_BENCH_OUT") {
            Some(out) => Plan {
                out: Some(PathBuf::from(out)),
                window_s: 10.0,
                alternations: 6,
                steps: 7,
                adv_before: 40,
                adv_after: 60,
            },
            None => Plan {
                out: None,
                window_s: 3.0,
                alternations: 2,
                steps: 2,
                adv_before: 15,
                adv_after: 15,
            },
        }
    }
}

fn set_hog(dir: &Path, on: bool) -> anyhow::Result<()> {
    let p = dir.join("hog");
    if on {
        std::fs::write(&p, "").with_context(|| format!("writing {}", p.display()))
    } else {
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("removing {}", p.display()))
            }
            _ => Ok(()),
        }
    }
}

/// A container's CPU time (ns) from its cpuacct cgroup.
fn usage_ns(c: &KubeContainer) -> anyhow::Result<u64> {
    let p = cgroup_dir("cpuacct", &c.cgroup_parent, &c.id).join("cpuacct.usage");
    let t = read_trimmed(&p)?;
    t.parse()
        .with_context(|| format!("{} holds {t:?}", p.display()))
}

fn quota_path(c: &KubeContainer) -> PathBuf {
    cgroup_dir("cpu", &c.cgroup_parent, &c.id).join("cpu.cfs_quota_us")
}

fn quota(c: &KubeContainer) -> anyhow::Result<i64> {
    let p = quota_path(c);
    let t = read_trimmed(&p)?;
    t.parse()
        .with_context(|| format!("{} holds {t:?}", p.display()))
}

/// Each CPU's busy time, per line name (`cpu`: the node, `cpu0`, …) its (busy, total). The
/// same source topolet reads ([`CpuTimeSource`]): where the host's cgroup v1 root offers it,
/// `cpuacct.usage_percpu` (run time in ns; total: the monotonic clock's ns, × the CPUs for
/// `cpu`), because `/proc/stat` is sampled at the scheduler tick and the regular probe, which
/// wakes on every 1 ms boundary, is in step with it (on this host's HZ=250 kernel a thread busy
/// 300 µs of each 1 ms reads as anything from 7m to 829m there, by its phase against the tick);
/// else `/proc/stat`'s jiffies (busy: user, nice, system, irq and softirq; guest time is inside
/// user; steal is neither ours nor idle, so it is left out of both). Only online CPUs (those
/// `/proc/stat` lists) count.
fn proc_stat() -> anyhow::Result<Vec<(String, u64, u64)>> {
    exact_over(proc_stat_ticks()?)
}

/// The exact per-CPU source of this host (cgroup v1's root `cpuacct.usage_percpu`), `None` where
/// there is only `/proc/stat`: found at the first call, as topolet finds it at its first reading.
fn exact_source() -> anyhow::Result<Option<&'static CpuTimeSource>> {
    static SOURCE: OnceLock<Option<CpuTimeSource>> = OnceLock::new();
    if let Some(s) = SOURCE.get() {
        return Ok(s.as_ref());
    }
    let mountinfo = read_trimmed(Path::new("/proc/self/mountinfo"))?;
    let found = find_controller(&mountinfo, "cpuacct")
        .map(|c| CpuTimeSource::detect(&c).0)
        .filter(|s| *s != CpuTimeSource::ProcStat);
    Ok(SOURCE.get_or_init(|| found).as_ref())
}

/// `ticks` ([`proc_stat_ticks`]) with each online CPU's busy and total time replaced by the
/// exact source's where the host has one (the node's line: their sums).
fn exact_over(ticks: Vec<(String, u64, u64)>) -> anyhow::Result<Vec<(String, u64, u64)>> {
    let Some(source) = exact_source()? else {
        return Ok(ticks);
    };
    let exact = source.read(Path::new("/proc"))?;
    let mut out = ticks;
    let mut node = (0u64, 0u64);
    for (name, busy, total) in out.iter_mut().filter(|l| l.0 != "cpu") {
        let cpu: usize = name["cpu".len()..]
            .parse()
            .with_context(|| format!("/proc/stat line {name:?}"))?;
        let t = exact
            .get(&cpu)
            .with_context(|| format!("CPU {cpu} is not in {source:?}"))?;
        (*busy, *total) = (t.busy, t.total);
        node = (node.0 + t.busy, node.1 + t.total);
    }
    if let Some(l) = out.iter_mut().find(|l| l.0 == "cpu") {
        (l.1, l.2) = node;
    }
    Ok(out)
}

/// `/proc/stat`'s lines as they are, in jiffies: the bench prints the node's busy CPU by them
/// too, beside [`proc_stat`]'s, to show what the tick's sampling makes of the same windows.
fn proc_stat_ticks() -> anyhow::Result<Vec<(String, u64, u64)>> {
    let text = read_trimmed(Path::new("/proc/stat"))?;
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("cpu")) {
        let mut f = line.split_whitespace();
        let name = f.next().unwrap_or_default().to_string();
        let v: Vec<u64> = f.map(|x| x.parse().unwrap_or(0)).collect();
        ensure!(v.len() >= 8, "/proc/stat line {line:?}");
        let busy = v[0] + v[1] + v[2] + v[5] + v[6];
        out.push((name, busy, busy + v[3] + v[4]));
    }
    Ok(out)
}

/// Milli-CPU busy on line `name` between two [`proc_stat`] readings (`cpu`: the whole node).
fn busy_millis(a: &[(String, u64, u64)], b: &[(String, u64, u64)], name: &str) -> f64 {
    let get = |s: &[(String, u64, u64)]| s.iter().find(|l| l.0 == name).map(|l| (l.1, l.2));
    let (Some((b0, t0)), Some((b1, t1))) = (get(a), get(b)) else {
        return 0.0;
    };
    let cpus = if name == "cpu" {
        a.iter().filter(|l| l.0 != "cpu").count().max(1) as f64
    } else {
        1.0
    };
    if t1 <= t0 {
        return 0.0;
    }
    (b1 - b0) as f64 / (t1 - t0) as f64 * cpus * 1000.0
}

/// The Node's advertised amount (capacity), `None` while it has none.
fn advertised(node: &KubeNode) -> anyhow::Result<Option<u64>> {
    Ok(node.cluster.extended_resource(RES)?.map(|a| a.capacity))
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn r1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The batch containers' CPU time (ns), summed.
fn batch_usage_ns(batches: &[KubeContainer]) -> anyhow::Result<u64> {
    batches.iter().map(usage_ns).sum()
}

/// The batch containers' quotas, summed (µs per 100 ms period).
fn batch_quota(batches: &[KubeContainer]) -> anyhow::Result<i64> {
    batches.iter().map(quota).sum()
}

/// One measured window.
struct Window {
    colocated: bool,
    result: Value,
    node_millis: f64,
    pool_millis: f64,
    /// The pool's busy CPU by `/proc/stat`'s ticks ([`proc_stat_ticks`]), for comparison.
    pool_ticks_millis: f64,
    batch_millis: f64,
    regular_millis: f64,
    /// The batch quotas (summed) and topolet's batch budget when the window ended.
    quota_end: i64,
    budget_end: Option<u64>,
}

fn measure_window(
    node: &KubeNode,
    probe: &mut Probe,
    regular: &KubeContainer,
    batches: &[KubeContainer],
    colocated: bool,
    seconds: f64,
) -> anyhow::Result<Window> {
    set_hog(&probe.dir, colocated)?;
    // Warm-up: the hog starts or stops and the suppress loop settles the batch budget on the
    // regular pod's ticking.
    probe.ticks(1.0)?;
    let k0 = proc_stat_ticks()?;
    let (s0, b0, g0, t0) = (
        exact_over(k0.clone())?,
        batch_usage_ns(batches)?,
        usage_ns(regular)?,
        Instant::now(),
    );
    let result = probe.ticks(seconds)?;
    let k1 = proc_stat_ticks()?;
    let (s1, b1, g1, el) = (
        exact_over(k1.clone())?,
        batch_usage_ns(batches)?,
        usage_ns(regular)?,
        t0.elapsed().as_secs_f64(),
    );
    let w = Window {
        colocated,
        node_millis: busy_millis(&s0, &s1, "cpu"),
        pool_millis: busy_millis(&s0, &s1, "cpu1"),
        pool_ticks_millis: busy_millis(&k0, &k1, "cpu1"),
        batch_millis: b1.saturating_sub(b0) as f64 / 1e6 / el,
        regular_millis: g1.saturating_sub(g0) as f64 / 1e6 / el,
        result,
        quota_end: batch_quota(batches)?,
        budget_end: node.t.topolet.status()?["reclaimed"]["budget_millis"].as_u64(),
    };
    eprintln!(
        "[window] {}: throughput {:.0} units/s (work speed {:.0}), late p50 {} us p99 {} us, \
         missed {}; node {:.0}m, pool {:.0}m, batch {:.0}m, regular {:.0}m; at the end quotas {} \
         budget {:?}",
        if colocated { "colocated" } else { "solo" },
        w.result["throughput_units_per_s"].as_f64().unwrap_or(0.0),
        w.result["work_units_per_s"].as_f64().unwrap_or(0.0),
        w.result["late_p50_us"],
        w.result["late_p99_us"],
        w.result["missed_ticks"],
        w.node_millis,
        w.pool_millis,
        w.batch_millis,
        w.regular_millis,
        w.quota_end,
        w.budget_end
    );
    Ok(w)
}

fn summary(ws: &[&Window]) -> Value {
    let f = |k: &str| -> Vec<f64> {
        ws.iter()
            .map(|w| w.result[k].as_f64().unwrap_or(0.0))
            .collect()
    };
    let m = |v: Vec<f64>| mean(&v);
    json!({
        "windows": ws.len(),
        "throughput_units_per_s": r1(m(f("throughput_units_per_s"))),
        "work_units_per_s": r1(m(f("work_units_per_s"))),
        "late_p50_us": r1(median(&mut f("late_p50_us"))),
        "late_p99_us": r1(median(&mut f("late_p99_us"))),
        "missed_ticks": f("missed_ticks").iter().sum::<f64>(),
        "ticks": f("ticks").iter().sum::<f64>(),
        "node_busy_millis": r1(m(ws.iter().map(|w| w.node_millis).collect())),
        "pool_busy_millis": r1(m(ws.iter().map(|w| w.pool_millis).collect())),
        "pool_busy_ticks_millis": r1(m(ws.iter().map(|w| w.pool_ticks_millis).collect())),
        "batch_millis": r1(m(ws.iter().map(|w| w.batch_millis).collect())),
        "regular_millis": r1(m(ws.iter().map(|w| w.regular_millis).collect())),
    })
}

/// The step's reaction: asks for two spinning threads, polls the batch quotas every 5 ms from
/// then on until their sum is [`CUT_US`] or more below `before`; returns (ms from the threads'
/// start to that read, ms from the request, the cut sum).
fn one_step(
    probe: &mut Probe,
    batches: &[KubeContainer],
    before: i64,
) -> anyhow::Result<(f64, f64, i64)> {
    let asked = unix_ns();
    let id = probe.request("spin", 600.0, 2)?;
    let deadline = Instant::now() + FOLLOW;
    let (seen, q) = loop {
        let q = batch_quota(batches)?;
        if q <= before - CUT_US {
            break (unix_ns(), q);
        }
        if Instant::now() >= deadline {
            probe.stop(id)?;
            bail!(
                "the batch quotas stayed above {} for {FOLLOW:?} after the step",
                before - CUT_US
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let ack = probe.wait("ack", id, POD_TIMEOUT)?;
    let start = ack["start_ns"].as_i64().context("ack without start_ns")? as i128;
    // Hold the step a little so the cut is not undone by the step's own end.
    std::thread::sleep(Duration::from_millis(500));
    probe.stop(id)?;
    probe.wait("res", id, POD_TIMEOUT)?;
    Ok(((seen - start) as f64 / 1e6, (seen - asked) as f64 / 1e6, q))
}

/// Waits until the batch quotas (summed) are back to at least half their limits, and returns
/// the sum: the budget has grown back from a cut (the machine's own work on the pool may keep
/// it below the limits).
fn wait_quotas_grown(batches: &[KubeContainer], what: &str) -> anyhow::Result<i64> {
    let limits = batch_limit_quota() * batches.len() as i64;
    wait::until(
        &format!("the batch quotas back to half their limits or more ({what})"),
        FOLLOW,
        || {
            let q = batch_quota(batches)?;
            Ok((q >= limits / 2).then_some(q))
        },
    )
}

/// One batch container's quota at its limit (period 100 ms).
fn batch_limit_quota() -> i64 {
    (BATCH_MILLIS * 100) as i64
}

/// One sample of the advertised run.
struct AdvSample {
    t_ms: f64,
    node: Option<u64>,
    status_advertised: Option<u64>,
    status_regular_peak: Option<u64>,
    /// The pool's really idle CPU since the last sample: its idle time ([`proc_stat`]) plus
    /// what the batch pods used (theirs is for the taking).
    idle_millis: f64,
    regular_measured: f64,
}

/// Samples every [`SAMPLE_MS`] until `done` says so (or FOLLOW runs out).
fn sample_until(
    node: &KubeNode,
    regular: &KubeContainer,
    batches: &[KubeContainer],
    t0: Instant,
    out: &mut Vec<AdvSample>,
    mut done: impl FnMut(&[AdvSample]) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + FOLLOW + POD_TIMEOUT;
    let mut last = (
        Instant::now(),
        usage_ns(regular)?,
        batch_usage_ns(batches)?,
        proc_stat()?,
    );
    loop {
        let next = last.0 + Duration::from_millis(SAMPLE_MS);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let s = node.t.topolet.status()?;
        let r = &s["reclaimed"];
        let adv = advertised(node)?;
        let (u, b, st) = (usage_ns(regular)?, batch_usage_ns(batches)?, proc_stat()?);
        let now = Instant::now();
        let el = now.duration_since(last.0).as_secs_f64();
        let pool_busy = busy_millis(&last.3, &st, "cpu1");
        let batch = b.saturating_sub(last.2) as f64 / 1e6 / el;
        out.push(AdvSample {
            t_ms: now.duration_since(t0).as_secs_f64() * 1000.0,
            node: adv,
            status_advertised: r["advertised_millis"].as_u64(),
            status_regular_peak: r["node"]["regular_millis"].as_u64(),
            idle_millis: (POOL as f64 - (pool_busy - batch).max(0.0)).max(0.0),
            regular_measured: u.saturating_sub(last.1) as f64 / 1e6 / el,
        });
        last = (now, u, b, st);
        if done(out)? {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "the advertised run did not reach its state"
        );
    }
}

/// The advertised run's figures: against the really idle pool at each sample, and its moves.
fn advertised_figures(samples: &[AdvSample], step: (f64, f64), d: &Defaults) -> Value {
    let mut exceeded = 0;
    let mut exceeded_strict = 0;
    let mut longest = 0.0f64;
    let mut run_from: Option<f64> = None;
    let mut min_headroom = f64::MAX;
    for s in samples {
        let Some(adv) = s.node else { continue };
        let idle = s.idle_millis;
        min_headroom = min_headroom.min(idle - adv as f64);
        if adv as f64 > idle {
            exceeded += 1;
            let from = *run_from.get_or_insert(s.t_ms - SAMPLE_MS as f64);
            longest = longest.max(s.t_ms - from);
        } else {
            run_from = None;
        }
        if adv as f64 > idle - d.margin as f64 {
            exceeded_strict += 1;
        }
    }
    // The moves of the Node's amount (consecutive equal values are one), and how often the
    // direction flips.
    let mut values: Vec<u64> = Vec::new();
    for v in samples.iter().filter_map(|s| s.node) {
        if values.last() != Some(&v) {
            values.push(v);
        }
    }
    let moves: Vec<i64> = values
        .windows(2)
        .map(|w| w[1] as i64 - w[0] as i64)
        .collect();
    let flips = moves
        .windows(2)
        .filter(|w| (w[0] > 0) != (w[1] > 0))
        .count();
    let min_up = moves.iter().filter(|m| **m > 0).min().copied();
    json!({
        "samples": samples.len(),
        "period_ms": SAMPLE_MS,
        "step_ms": [r1(step.0), r1(step.1)],
        "exceeded_idle_samples": exceeded,
        "exceeded_idle_longest_ms": r1(longest),
        "exceeded_idle_less_margin_samples": exceeded_strict,
        "min_headroom_millis": r1(if min_headroom == f64::MAX { 0.0 } else { min_headroom }),
        "changes": moves.len(),
        "direction_flips": flips,
        "min_up_move_millis": min_up,
        "hysteresis_millis": POOL * d.min_change_percent / 100,
        "values": values,
        "timeline": samples.iter().map(|s| json!([
            r1(s.t_ms), s.node, s.status_advertised, s.status_regular_peak, r1(s.idle_millis),
            r1(s.regular_measured)
        ])).collect::<Vec<_>>(),
    })
}

/// topolet's own `topolet_reclaimed_cpu_cut_latency_seconds`: count, mean, and the bucket
/// bounds holding the median and the p99 (upper bounds, in ms).
fn cut_latency_metric(text: &str) -> anyhow::Result<Value> {
    let name = "topolet_reclaimed_cpu_cut_latency_seconds";
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&format!("{name}_bucket{{le=\"")) else {
            continue;
        };
        let Some((le, v)) = rest.split_once("\"} ") else {
            continue;
        };
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().with_context(|| format!("bucket {line:?}"))?
        };
        buckets.push((le, v.trim().parse().with_context(|| format!("{line:?}"))?));
    }
    let count = topolet::sample(text, &format!("{name}_count"), &[])?.unwrap_or(0.0);
    let sum = topolet::sample(text, &format!("{name}_sum"), &[])?.unwrap_or(0.0);
    let bound = |q: f64| {
        buckets
            .iter()
            .find(|(_, c)| *c >= q * count)
            .map(|(le, _)| {
                if le.is_finite() {
                    r3(le * 1000.0)
                } else {
                    -1.0
                }
            })
    };
    Ok(json!({
        "count": count,
        "mean_ms": if count > 0.0 { r3(sum / count * 1000.0) } else { 0.0 },
        "p50_le_ms": bound(0.5),
        "p99_le_ms": bound(0.99),
        "reactions_cut": topolet::sample(text, "topolet_reclaimed_cpu_reactions_total", &[("kind", "cut")])?,
    }))
}

/// The regular pod keeps its work beside two batch pods that take the idle CPU, the batch quotas
/// are cut after a step of regular usage and restored after, and the advertised amount follows
/// the step (figures with `TOPOLET_BENCH_OUT`).
#[test]
fn a_batch_pod_takes_the_idle_pool_beside_a_regular_pod_and_yields_it() -> anyhow::Result<()> {
    let plan = Plan::from_env();
    let d = defaults();
    let both = 2 * BATCH_MILLIS;
    let mut node = KubeNode::start_with_api_config(
        &reclaimed_toml(&plan),
        &ClusterOptions::default(),
        "pod_wait_ms = 1000",
    )?;
    let dir = node.cluster.dir().join("colocation");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    probe::binary(&dir)?;
    // The pool less the margin and this machine's own work on CPU 1 (usage = "cpus").
    wait::until_true("room for both batch pods advertised", FOLLOW, || {
        Ok(advertised(&node)?.is_some_and(|a| (both..=POOL - d.margin).contains(&a)))
    })?;

    node.cluster.create_pod(probe::pod_running(
        "regular",
        &format!("regular {}", probe::MOUNT),
        &dir,
        res("500m", "", "", ""),
    ))?;
    let rp = node.cluster.wait_running("regular")?;
    let regular = node.cluster.container(&rp, "main")?;
    // The regular pod's start is over: room for both batch pods again when the scheduler and
    // then the kubelet's admission look at them.
    wait::until_true("room for both batch pods advertised again", FOLLOW, || {
        Ok(advertised(&node)?.is_some_and(|a| a >= both))
    })?;
    let r = json!({"requests": {RES: BATCH_MILLIS.to_string()}, "limits": {RES: BATCH_MILLIS.to_string()}});
    for name in BATCHES {
        node.cluster.create_pod(probe::pod_running(
            name,
            &format!("batch {}", probe::MOUNT),
            &dir,
            r.clone(),
        ))?;
    }
    let mut batches = Vec::new();
    for name in BATCHES {
        let bp = node.cluster.wait_running(name)?;
        batches.push(node.cluster.container(&bp, "main")?);
    }
    // Each batch container got a quota, and the CPUs the regular probe is confined to: theirs.
    let mut cpus: Option<String> = None;
    for b in &batches {
        wait::until_true(&format!("a quota for {}", b.id), FOLLOW, || {
            Ok((1..=batch_limit_quota()).contains(&quota(b)?))
        })?;
        let c = read_trimmed(&cgroup_dir("cpuset", &b.cgroup_parent, &b.id).join("cpuset.cpus"))?;
        ensure!(
            cpus.as_ref().is_none_or(|x| *x == c),
            "the batch containers run on different CPUs: {cpus:?} and {c:?}"
        );
        cpus = Some(c);
    }
    let cpus = cpus.context("no batch container")?;
    let set = CpuSet::parse(&cpus).with_context(|| format!("batch cpuset {cpus:?}"))?;
    ensure!(
        !set.is_empty() && !set.contains(RESERVED_CPU as usize),
        "the batch containers' cpuset {cpus:?} is empty or holds the reserved CPU"
    );
    let mut probe = Probe::new(&dir);
    probe.cpus = set.iter().map(|c| c as u32).collect();

    // 1. Solo and colocated windows, alternating, the order flipping each time.
    let load_start = loadavg()?;
    let t_windows = Instant::now();
    let mut windows = Vec::new();
    for a in 0..plan.alternations {
        let order = if a % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for colocated in order {
            windows.push(measure_window(
                &node,
                &mut probe,
                &regular,
                &batches,
                colocated,
                plan.window_s,
            )?);
        }
    }
    set_hog(&dir, false)?;
    let load_end = loadavg()?;
    let windows_s = t_windows.elapsed().as_secs_f64();
    for w in &windows {
        let ticks = w.result["ticks"].as_u64().unwrap_or(0);
        ensure!(
            ticks > 0 && w.result["units"].as_u64().unwrap_or(0) > 0,
            "a window of the regular probe did no work: {}",
            w.result
        );
    }
    let solo: Vec<&Window> = windows.iter().filter(|w| !w.colocated).collect();
    let coloc: Vec<&Window> = windows.iter().filter(|w| w.colocated).collect();
    ensure!(
        coloc.iter().all(|w| w.batch_millis > 0.0),
        "the batch pod used no CPU in a colocated window"
    );
    // Where the host has the exact source, topolet reads it, and the pool's busy time holds at
    // least what the pods ran there (the probes' work threads are confined to it; the regular
    // Go runtime's own threads may float to the reserved CPU, hence the slack). `/proc/stat`,
    // in step with the probe's ticks, can read a fraction of it.
    if exact_source()?.is_some() {
        let said = node.t.topolet.status()?["reclaimed"]["cpu_time"].clone();
        ensure!(
            said.as_str()
                .is_some_and(|s| s.contains("cpuacct.usage_percpu")),
            "topolet does not read the exact per-CPU run time the host offers: {said}"
        );
        for w in &windows {
            let ran = w.batch_millis + w.regular_millis;
            ensure!(
                w.pool_millis >= 0.9 * ran - 10.0,
                "the pool's busy time ({:.0}m) is less than the pods ran there ({:.0}m)",
                w.pool_millis,
                ran
            );
        }
    }
    // Paired ratios, alternation by alternation.
    let paired = |k: &str| -> Vec<f64> {
        solo.iter()
            .zip(&coloc)
            .filter_map(|(s, c)| {
                let (s, c) = (s.result[k].as_f64()?, c.result[k].as_f64()?);
                (s > 0.0).then_some(c / s)
            })
            .collect()
    };
    let (tp_ratios, p99_ratios) = (paired("throughput_units_per_s"), paired("late_p99_us"));
    let (s_sum, c_sum) = (summary(&solo), summary(&coloc));

    // 2. Suppress reaction: the regular pod steps up from idle, the batch pods spinning.
    set_hog(&dir, true)?;
    let mut reactions = Vec::new();
    for i in 0..plan.steps {
        let before = wait_quotas_grown(&batches, &format!("before step {i}"))?;
        let (from_start, from_ask, cut) = one_step(&mut probe, &batches, before)?;
        ensure!(
            (0..before).contains(&cut),
            "step {i}: the batch quotas became {cut}, not a cut below {before}"
        );
        eprintln!("[step {i}] quotas {before} -> {cut}: {from_start:.1} ms after the threads started ({from_ask:.1} ms after the request)");
        reactions.push((from_start, from_ask));
        wait_quotas_grown(&batches, &format!("after step {i}"))?;
    }

    // 3. The advertised amount over a load step: ticking, spinning until the Node's amount has
    // fallen, ticking until it is back up.
    let t0 = Instant::now();
    let mut samples = Vec::new();
    let mut id = probe.request("ticks", 600.0, 1)?;
    sample_until(&node, &regular, &batches, t0, &mut samples, |s| {
        Ok(s.len() >= plan.adv_before)
    })?;
    probe.stop(id)?;
    let before = samples.iter().rev().find_map(|s| s.node).unwrap_or(0);
    let step_from = t0.elapsed().as_secs_f64() * 1000.0;
    id = probe.request("spin", 600.0, 2)?;
    let n_before = samples.len();
    sample_until(&node, &regular, &batches, t0, &mut samples, |s| {
        // Fallen, or removed (0 is never written: a noisy peak before the step may have left
        // nothing).
        let fell = s[n_before..]
            .iter()
            .any(|x| x.node.is_none_or(|v| v < before));
        Ok(fell && s.len() >= n_before + plan.adv_before / 2)
    })?;
    probe.stop(id)?;
    // The newest amount; an absent key is 0 (withdrawn).
    let low = samples.last().and_then(|s| s.node).unwrap_or(0);
    let step_to = t0.elapsed().as_secs_f64() * 1000.0;
    id = probe.request("ticks", 600.0, 1)?;
    let n_step = samples.len();
    sample_until(&node, &regular, &batches, t0, &mut samples, |s| {
        let rose = s[n_step..].iter().any(|x| x.node.is_some_and(|v| v > low));
        Ok(rose && s.len() >= n_step + plan.adv_after)
    })?;
    probe.stop(id)?;
    set_hog(&dir, false)?;
    let adv = advertised_figures(&samples, (step_from, step_to), &d);

    // 4. Regular use of the reserved CPU: the amount back up with room for both batch pods,
    // then one thread spinning on the reserved CPU only.
    wait::until(
        "the amount back up before the reserved step",
        FOLLOW,
        || Ok(advertised(&node)?.filter(|a| *a >= both)),
    )?;
    // The reference: the formula's amount once the usage window holds only the present (its
    // peak within 50m of the last reading), not the Node's: a rise smaller than
    // `min_change_percent` is held there until it ages, so the Node's amount can lag the
    // formula by up to that and a later fall need not go below it.
    let calm = wait::until(
        "the usage window holding only the present before the reserved step",
        FOLLOW,
        || {
            let r = node.t.topolet.status()?["reclaimed"].clone();
            let (peak, now) = (
                r["node"]["regular_millis"].as_u64(),
                r["regular_now_millis"].as_u64(),
            );
            Ok(match (peak, now) {
                (Some(p), Some(n)) if p <= n + 50 => r["node"]["reclaimable_millis"].as_u64(),
                _ => None,
            })
        },
    )?;
    let id = probe.request_body(
        json!({"mode": "spin", "seconds": 600.0, "threads": 1, "cpus": [RESERVED_CPU]}),
    )?;
    probe.wait("ack", id, POD_TIMEOUT)?;
    let bench = plan.out.is_some();
    // What the wait saw last, for its error: the status's terms and the reserved CPU's busy time.
    let mut seen = String::new();
    let mut cpu_last = proc_stat()?;
    let found = wait::until(
        "the Node's amount lowered by regular use of the reserved CPU",
        FOLLOW,
        || {
            let s = node.t.topolet.status()?;
            let spill = s["reclaimed"]["reserved"]["spill_millis"]
                .as_u64()
                .unwrap_or(0);
            let formula = s["reclaimed"]["node"]["reclaimable_millis"]
                .as_u64()
                .unwrap_or(u64::MAX);
            let now = advertised(&node)?.unwrap_or(0);
            let cpus = proc_stat()?;
            seen = format!(
                "amount {now}m, the formula's {formula}m (before the step {calm}m); CPU \
                 {RESERVED_CPU} busy {:.0}m since the last look; status: node {}, reserved {}",
                busy_millis(&cpu_last, &cpus, &format!("cpu{RESERVED_CPU}")),
                s["reclaimed"]["node"],
                s["reclaimed"]["reserved"]
            );
            cpu_last = cpus;
            // The formula fell, and the Node carries no more than it (any fall is written at
            // once). usage = "cpus" (the bench): through the reserved CPU's spill.
            Ok((formula < calm && now <= formula && (!bench || spill > 0)).then_some((now, spill)))
        },
    );
    let (during, spill) = found.with_context(|| format!("last seen: {seen}"))?;
    let rule = node.t.topolet.status()?["reclaimed"]["reserved_rule"].clone();
    probe.stop(id)?;
    probe.wait("res", id, POD_TIMEOUT)?;
    eprintln!("[reserved] the formula's amount {calm}m before, the Node's {during}m while a regular thread spun on CPU {RESERVED_CPU}; spill counted {spill}m; rule {rule}");
    let reserved_step = json!({
        "amount_before_millis": calm, "amount_during_millis": during,
        "spill_millis": spill, "rule": rule,
    });

    let addr = node.t.topolet.wait_metrics_address()?;
    let metric = cut_latency_metric(&topolet::metrics_text(&addr)?)?;
    ensure!(
        metric["count"].as_f64().unwrap_or(0.0) >= plan.steps as f64,
        "topolet counted fewer cuts than the steps: {metric}"
    );

    let mut from_start: Vec<f64> = reactions.iter().map(|r| r.0).collect();
    let mut from_ask: Vec<f64> = reactions.iter().map(|r| r.1).collect();
    let (tp, lp) = (
        s_sum["throughput_units_per_s"].as_f64().unwrap_or(0.0),
        s_sum["late_p99_us"].as_f64().unwrap_or(0.0),
    );
    let num = |v: &Value| v.as_f64().unwrap_or(0.0);
    let goals = colocation_goals::judge(&colocation_goals::Figures {
        throughput_ratio: if tp > 0.0 {
            num(&c_sum["throughput_units_per_s"]) / tp
        } else {
            0.0
        },
        late_p99_ratio: if lp > 0.0 {
            num(&c_sum["late_p99_us"]) / lp
        } else {
            0.0
        },
        pool_busy_millis: num(&c_sum["pool_busy_millis"]),
        pool_millis: POOL as f64,
        node_busy_rise_millis: num(&c_sum["node_busy_millis"]) - num(&s_sum["node_busy_millis"]),
        batch_millis: num(&c_sum["batch_millis"]),
        cut_median_ms: median(&mut from_start.clone()),
        cut_max_ms: from_start.iter().copied().fold(0.0, f64::max),
        suppress_interval_ms: d.suppress_interval_ms as f64,
        interval_ms: d.interval_ms as f64,
        exceeded_idle_samples: adv["exceeded_idle_samples"].as_u64().unwrap_or(0),
        exceeded_idle_longest_ms: num(&adv["exceeded_idle_longest_ms"]),
        sample_ms: SAMPLE_MS as f64,
        advertised_samples: adv["samples"].as_u64().unwrap_or(0),
    });
    eprint!("[goals]\n{}", colocation_goals::render(&goals));
    let line = json!({
        "goals": goals.iter().map(|g| json!({
            "name": g.name, "value": g.value, "bound": g.bound, "met": g.met,
        })).collect::<Vec<_>>(),
        "window_s": plan.window_s,
        "alternations": plan.alternations,
        "windows_s": r1(windows_s),
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "solo": s_sum,
        "colocated": c_sum,
        "throughput_ratio": if tp > 0.0 { r3(c_sum["throughput_units_per_s"].as_f64().unwrap_or(0.0) / tp) } else { 0.0 },
        "late_p99_ratio": if lp > 0.0 { r3(c_sum["late_p99_us"].as_f64().unwrap_or(0.0) / lp) } else { 0.0 },
        "throughput_ratio_paired_median": r3(median(&mut tp_ratios.clone())),
        "late_p99_ratio_paired_median": r3(median(&mut p99_ratios.clone())),
        "throughput_ratios_paired": tp_ratios.iter().map(|x| r3(*x)).collect::<Vec<_>>(),
        "late_p99_ratios_paired": p99_ratios.iter().map(|x| r3(*x)).collect::<Vec<_>>(),
        "node_busy_rise_millis": r1(c_sum["node_busy_millis"].as_f64().unwrap_or(0.0) - s_sum["node_busy_millis"].as_f64().unwrap_or(0.0)),
        "pool_busy_rise_millis": r1(c_sum["pool_busy_millis"].as_f64().unwrap_or(0.0) - s_sum["pool_busy_millis"].as_f64().unwrap_or(0.0)),
        "config": reclaimed_toml(&plan),
        "batch_pods": BATCHES.len(),
        "batch_millis_each": BATCH_MILLIS,
        "regular_cpus": probe.cpus,
        "margin_millis": d.margin,
        "suppress_interval_ms": d.suppress_interval_ms,
        "interval_ms": d.interval_ms,
        "cut_reaction_ms": from_start.iter().map(|x| r1(*x)).collect::<Vec<_>>(),
        "cut_reaction_median_ms": r1(median(&mut from_start)),
        "cut_reaction_max_ms": r1(from_start.iter().copied().fold(0.0, f64::max)),
        "cut_reaction_from_request_median_ms": r1(median(&mut from_ask)),
        "cut_latency_metric": metric,
        "advertised": adv,
        "reserved_step": reserved_step,
        "windows": windows.iter().map(|w| json!({
            "colocated": w.colocated, "probe": w.result, "node_busy_millis": r1(w.node_millis),
            "pool_busy_millis": r1(w.pool_millis), "pool_busy_ticks_millis": r1(w.pool_ticks_millis),
            "batch_millis": r1(w.batch_millis),
            "regular_millis": r1(w.regular_millis), "quota_end": w.quota_end,
            "budget_end_millis": w.budget_end,
        })).collect::<Vec<_>>(),
    });
    probe::emit(plan.out.as_deref(), &line)?;
    Ok(())
}
