//! What a Guaranteed integer-CPU pod gets from its node, through a real kubelet v1.37, API server
//! and kube-scheduler on containerd, in three configurations (hack/bench.sh parts `isolation`
//! and `pod_start`):
//!
//! - `none`: the kubelet's `cpuManagerPolicy: none`, no NRI plugin;
//! - `static`: the kubelet's `static` policy (`reservedSystemCPUs: "0"`, reconcile every 5 s as
//!   hack/kube-node.sh sets it), no NRI plugin;
//! - `topolet`: the kubelet's `none` with topolet (its default config: static, CPU 0 reserved).
//!
//! **Isolation.** A fresh stack and cluster per configuration and round, the configurations in
//! rotating order. A BestEffort pod spins four threads and a Burstable pod (a memory request,
//! no CPU request: the static policy's allocatable CPU is the probe's one) two (`colocation spin N`, hack/bench/colocation); then a Guaranteed 1-CPU pod runs the
//! probe (`colocation regular`, request mode `isolation`): one thread sleeps to every 1 ms tick
//! and records how late it woke; every 100 ms two threads each run until their own CPU time grew
//! by the burst's size, and the burst's wall time is recorded. Two scenarios alternate (their
//! order flipping): `normal`, bursts of 2 x 10 ms (under the pod's 100 ms per 100 ms quota), and
//! `over_quota`, bursts of 2 x 60 ms (120 ms of CPU per 100 ms period: above the quota the kubelet
//! sets for one CPU). Facts, all from the effect: the latencies and wall times the probe itself
//! recorded; `nr_periods`/`nr_throttled` of the probe container's and pod's `cpu.stat` around
//! each window; the probe's `cpuset.cpus` and its tasks' `Cpus_allowed_list`; and, every 5 ms from
//! before the probe pod is created, every neighbour thread's `Cpus_allowed_list` and, when it ran
//! since the last sample (`/proc/<tid>/schedstat`), the CPU it last ran on (`/proc/<tid>/stat`
//! field 39), from which: until when, after the probe's start
//! (its own clock, CLOCK_REALTIME), a neighbour was still allowed on / still ran on the probe's
//! CPUs. The windows start once the neighbours are off the probe's CPUs (`static`, `topolet`)
//! or after the same settling time (`none`, where they share every CPU).
//!
//! **Pod start.** One cluster (kubelet `none`) with topolet; blocks of `kubectl apply` of N pods
//! (one Guaranteed 1-CPU, the others alternately BestEffort and Burstable 100m) timed from the
//! command's start to the last pod seen Running by a watch started before it, then deleted
//! (untimed); blocks with topolet stopped (`none`) and running (`topolet`) alternate, the order
//! flipping every round.
//!
//! The assertions never depend on speed: every window ticked and burst, the probe's cpuset in
//! `static` and `topolet` is one CPU its neighbours leave, every pod of a block ran. With
//! `TOPOLET_BENCH_OUT=<file>` the runs are longer and more, and each test appends its figures as
//! one JSON line (the raw lateness and wall times per window stay out of it; their pooled
//! quantiles are in). `TOPOLET_COLOCATION_PROBE` names a prebuilt probe (integration/src/probe.rs).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{json, Value};
use topolet_core::machine::cpuset::CpuSet;
use topolet_integration::cluster::{Cluster, ClusterOptions, KubeContainer, KubeNode, POD_TIMEOUT};
use topolet_integration::manifests::{guaranteed, pod, res, script_ctr, UNTIL_TERM};
use topolet_integration::observe::{cgroup_dir, CGROUP_ROOT};
use topolet_integration::probe::{self, loadavg, median, read_json, read_trimmed, unix_ns, Probe};
use topolet_integration::topolet::TERMINATE_TIMEOUT;
use topolet_integration::{wait, Stack, WithTopolet};

const CONFIGS: [&str; 3] = ["none", "static", "topolet"];
/// (scenario, CPU time of each burst thread in ms).
const SCENARIOS: [(&str, f64); 2] = [("normal", 10.0), ("over_quota", 60.0)];
const BURST_EVERY_MS: f64 = 100.0;
const BURST_THREADS: u32 = 2;
/// How long every configuration's neighbours are watched after the probe's start, at least.
const SETTLE: Duration = Duration::from_secs(8);
/// How long the neighbours may take to leave the probe's CPUs (a deadline, not a claim).
const MOVE_DEADLINE: Duration = Duration::from_secs(60);
const SAMPLE_EVERY: Duration = Duration::from_millis(5);

fn env_num(key: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(key) {
        Ok(v) => v
            .parse()
            .with_context(|| format!("{key}={v:?} is not a number")),
        Err(_) => Ok(default),
    }
}

/// How much to measure: short in CI, the bench's figures with `TOPOLET_BENCH_OUT`.
struct Plan {
    out: Option<PathBuf>,
    rounds: usize,
    window_s: f64,
    alternations: usize,
}

impl Plan {
    fn from_env() -> anyhow::Result<Plan> {
        let out = std::env::var_os("TOPOLET_BENCH_OUT").map(PathBuf::from);
        let bench = out.is_some();
        Ok(Plan {
            rounds: env_num("TOPOLET_ISOLATION_ROUNDS", if bench { 2 } else { 1 })?,
            window_s: env_num("TOPOLET_ISOLATION_WINDOW_S", if bench { 8 } else { 2 })? as f64,
            alternations: env_num("TOPOLET_ISOLATION_ALTERNATIONS", if bench { 2 } else { 1 })?,
            out,
        })
    }
}

/// A cluster in one configuration. Fields drop in order: the cluster before what it runs on.
struct Setup {
    cluster: Cluster,
    _topolet: Option<WithTopolet>,
    _stack: Option<Stack>,
}

impl Setup {
    fn start(config: &str) -> anyhow::Result<Setup> {
        if config == "topolet" {
            let KubeNode { cluster, t } = KubeNode::start("", &ClusterOptions::default())?;
            return Ok(Setup {
                cluster,
                _topolet: Some(t),
                _stack: None,
            });
        }
        let stack = Stack::start()?;
        let opts = if config == "static" {
            ClusterOptions {
                cpu_manager_policy: "static".into(),
                reserved_cpus: Some("0".into()),
                ..ClusterOptions::default()
            }
        } else {
            ClusterOptions::default()
        };
        Ok(Setup {
            cluster: Cluster::start(&stack, &opts)?,
            _topolet: None,
            _stack: Some(stack),
        })
    }
}

/// The threads of a container: its cpuset cgroup's `tasks`.
fn tasks(c: &KubeContainer) -> anyhow::Result<Vec<i32>> {
    let p = cgroup_dir("cpuset", &c.cgroup_parent, &c.id).join("tasks");
    Ok(read_trimmed(&p)?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect())
}

/// A task's `Cpus_allowed_list`.
fn allowed(tid: i32) -> anyhow::Result<CpuSet> {
    let p = format!("/proc/{tid}/status");
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {p}"))?;
    let list = text
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .with_context(|| format!("{p} has no Cpus_allowed_list"))?;
    Ok(CpuSet::parse(list)?)
}

/// The CPU a task last ran on: `/proc/<tid>/stat` field 39 (`processor`, proc(5)).
fn last_cpu(tid: i32) -> anyhow::Result<usize> {
    let p = format!("/proc/{tid}/stat");
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {p}"))?;
    // Fields from 3 (state) on follow the command name's closing parenthesis.
    let rest = text
        .rsplit_once(')')
        .with_context(|| format!("{p}: {text:?}"))?
        .1;
    rest.split_whitespace()
        .nth(39 - 3)
        .and_then(|f| f.parse().ok())
        .with_context(|| format!("{p} has no field 39: {text:?}"))
}

/// A task's time on a CPU so far (ns): `/proc/<tid>/schedstat`'s first field.
fn run_ns(tid: i32) -> anyhow::Result<u64> {
    let p = format!("/proc/{tid}/schedstat");
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {p}"))?;
    text.split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .with_context(|| format!("{p}: {text:?}"))
}

/// The neighbours' threads at one instant: the CPUs they are allowed on, and the CPUs the ones
/// that ran since the last sample last ran on (a sleeping thread keeps its old `processor`).
struct Sample {
    t_ns: i128,
    allowed: CpuSet,
    ran: CpuSet,
}

fn sample(neighbours: &[KubeContainer], seen: &mut HashMap<i32, u64>) -> Sample {
    let t_ns = unix_ns();
    let (mut a, mut r) = (CpuSet::new(), CpuSet::new());
    for c in neighbours {
        // A thread may end between the listing and the reads: it is skipped.
        for tid in tasks(c).unwrap_or_default() {
            if let (Ok(al), Ok(cpu), Ok(ns)) = (allowed(tid), last_cpu(tid), run_ns(tid)) {
                a.extend_from(&al);
                if seen.insert(tid, ns).is_some_and(|before| ns > before) {
                    r.insert(cpu);
                }
            }
        }
    }
    Sample {
        t_ns,
        allowed: a,
        ran: r,
    }
}

/// Samples the neighbours every [`SAMPLE_EVERY`] on a thread of its own until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    log: Arc<std::sync::Mutex<Vec<Sample>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(neighbours: Vec<KubeContainer>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (s, l) = (stop.clone(), log.clone());
        let thread = std::thread::spawn(move || {
            let mut seen = HashMap::new();
            while !s.load(Ordering::Relaxed) {
                let x = sample(&neighbours, &mut seen);
                l.lock().unwrap_or_else(|p| p.into_inner()).push(x);
                std::thread::sleep(SAMPLE_EVERY);
            }
        });
        Sampler {
            stop,
            log,
            thread: Some(thread),
        }
    }

    /// Whether the latest sample has the neighbours no longer allowed on `cpus`.
    fn off(&self, cpus: &CpuSet) -> bool {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.last().is_some_and(|s| s.allowed.is_disjoint(cpus))
    }

    fn finish(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.log.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// ms after `start_ns` of the last sample where `on(sample)` held; `None` when it still held at
/// the last sample (never moved while watched).
fn last_on(samples: &[Sample], start_ns: i128, on: impl Fn(&Sample) -> bool) -> Option<f64> {
    if samples.last().is_some_and(&on) {
        return None;
    }
    let t = samples
        .iter()
        .rev()
        .find(|s| on(s))
        .map_or(samples.first().map_or(start_ns, |s| s.t_ns), |s| s.t_ns);
    Some(r1((t - start_ns) as f64 / 1e6))
}

fn r1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// `cpu.stat` of a cpu cgroup directory: (nr_periods, nr_throttled, throttled_time ns).
fn cpu_stat(dir: &Path) -> anyhow::Result<(u64, u64, u64)> {
    let text = read_trimmed(&dir.join("cpu.stat"))?;
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.trim().parse().ok())
            .with_context(|| format!("{}/cpu.stat has no {k}: {text:?}", dir.display()))
    };
    Ok((
        get("nr_periods ")?,
        get("nr_throttled ")?,
        get("throttled_time ")?,
    ))
}

fn quota(dir: &Path) -> anyhow::Result<i64> {
    let p = dir.join("cpu.cfs_quota_us");
    let t = read_trimmed(&p)?;
    t.parse()
        .with_context(|| format!("{} holds {t:?}", p.display()))
}

/// Nearest-rank quantile of sorted `v` (as hack/nri-latency's `q`).
fn q(v: &[i64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v[((p * (v.len() - 1) as f64) + 0.5) as usize] as f64
}

fn ns_list(v: &Value, key: &str) -> Vec<i64> {
    v[key]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default()
}

/// One measured window.
struct Window {
    config: String,
    scenario: String,
    late_ns: Vec<i64>,
    wall_ns: Vec<i64>,
    missed: u64,
    /// Deltas of (nr_periods, nr_throttled, throttled_time) of the container and of the pod.
    ctr: (u64, u64, u64),
    pod: (u64, u64, u64),
}

fn delta(a: (u64, u64, u64), b: (u64, u64, u64)) -> (u64, u64, u64) {
    (
        b.0.saturating_sub(a.0),
        b.1.saturating_sub(a.1),
        b.2.saturating_sub(a.2),
    )
}

/// One configuration's run: its facts besides the windows.
struct Session {
    config: String,
    round: usize,
    cpuset: String,
    cpus_allowed: String,
    ctr_quota: i64,
    pod_quota: i64,
    allowed_until_ms: Option<f64>,
    ran_until_ms: Option<f64>,
    samples: usize,
    sampled_from_ms: f64,
}

fn run_session(
    config: &str,
    round: usize,
    plan: &Plan,
    windows: &mut Vec<Window>,
) -> anyhow::Result<Session> {
    let setup = Setup::start(config)?;
    let cluster = &setup.cluster;
    let dir = cluster.dir().join("isolation");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    probe::binary(&dir)?;
    let mut neighbours = Vec::new();
    for (name, threads, r) in [
        ("be-spin", 4, json!({})),
        // Burstable by its memory request alone: with the static policy's CPU 0 reserved the
        // node's allocatable CPU is the probe's one CPU.
        ("bu-spin", 2, res("", "", "32Mi", "64Mi")),
    ] {
        cluster.create_pod(probe::pod_running(
            name,
            &format!("spin {threads}"),
            &dir,
            r,
        ))?;
        let p = cluster.wait_running(name)?;
        neighbours.push(cluster.container(&p, "main")?);
    }
    let sampler = Sampler::start(neighbours);
    let t_created = unix_ns();
    cluster.create_pod(probe::pod_running(
        "probe",
        &format!("regular {}", probe::MOUNT),
        &dir,
        guaranteed("1", "128Mi"),
    ))?;
    let pp = cluster.wait_running("probe")?;
    let pc = cluster.container(&pp, "main")?;
    let started = wait::until("the probe's started.json", POD_TIMEOUT, || {
        read_json(&dir.join("started.json"))
    })?;
    let start_ns = started["start_ns"]
        .as_i64()
        .context("started.json without start_ns")? as i128;
    let cpuset_dir = cgroup_dir("cpuset", &pc.cgroup_parent, &pc.id);
    let cpuset = CpuSet::parse(&read_trimmed(&cpuset_dir.join("cpuset.cpus"))?)?;
    let exclusive = config != "none";
    if exclusive {
        ensure!(
            cpuset.len() == 1,
            "{config}: the Guaranteed 1-CPU probe got cpuset {cpuset}, not one CPU"
        );
    }
    let settle_until = Instant::now() + SETTLE;
    wait::until_true(
        &format!("{config}: the neighbours off the probe's CPUs {cpuset}"),
        SETTLE + MOVE_DEADLINE,
        || Ok(Instant::now() >= settle_until && (!exclusive || sampler.off(&cpuset))),
    )?;
    let samples = sampler.finish();
    let touches = |s: &Sample| !s.allowed.is_disjoint(&cpuset);
    let runs = |s: &Sample| !s.ran.is_disjoint(&cpuset);
    let mut probe_allowed = CpuSet::new();
    for tid in tasks(&pc)? {
        probe_allowed.extend_from(&allowed(tid)?);
    }
    let ctr_cpu = cgroup_dir("cpu", &pc.cgroup_parent, &pc.id);
    let pod_cpu = Path::new(CGROUP_ROOT)
        .join("cpu")
        .join(pc.cgroup_parent.trim_start_matches('/'));
    let session = Session {
        config: config.into(),
        round,
        cpuset: cpuset.to_string(),
        cpus_allowed: probe_allowed.to_string(),
        ctr_quota: quota(&ctr_cpu)?,
        pod_quota: quota(&pod_cpu)?,
        allowed_until_ms: last_on(&samples, start_ns, touches),
        ran_until_ms: last_on(&samples, start_ns, runs),
        samples: samples.len(),
        sampled_from_ms: r1(
            (samples.first().map_or(t_created, |s| s.t_ns) - start_ns) as f64 / 1e6,
        ),
    };
    eprintln!(
        "[{config} round {round}] probe cpuset {} (allowed {}), quota ctr {} pod {}; neighbours \
         allowed on it until {:?} ms, ran on it until {:?} ms after its start ({} samples)",
        session.cpuset,
        session.cpus_allowed,
        session.ctr_quota,
        session.pod_quota,
        session.allowed_until_ms,
        session.ran_until_ms,
        session.samples
    );

    let mut probe = Probe::new(&dir);
    for a in 0..plan.alternations {
        let mut order = SCENARIOS;
        if (a + round) % 2 == 1 {
            order.reverse();
        }
        for (scenario, burst_ms) in order {
            let (c0, p0) = (cpu_stat(&ctr_cpu)?, cpu_stat(&pod_cpu)?);
            let id = probe.request_body(json!({
                "mode": "isolation", "seconds": plan.window_s, "burst_ms": burst_ms,
                "burst_every_ms": BURST_EVERY_MS, "burst_threads": BURST_THREADS,
            }))?;
            let r = probe.wait(
                "res",
                id,
                Duration::from_secs_f64(plan.window_s) + POD_TIMEOUT,
            )?;
            let (c1, p1) = (cpu_stat(&ctr_cpu)?, cpu_stat(&pod_cpu)?);
            let w = Window {
                config: config.into(),
                scenario: scenario.into(),
                late_ns: ns_list(&r, "late_ns"),
                wall_ns: ns_list(&r, "burst_wall_ns"),
                missed: r["missed_ticks"].as_u64().unwrap_or(0),
                ctr: delta(c0, c1),
                pod: delta(p0, p1),
            };
            ensure!(
                !w.late_ns.is_empty() && !w.wall_ns.is_empty(),
                "{config} {scenario}: a window without ticks or bursts: ticks {}, bursts {}",
                w.late_ns.len(),
                w.wall_ns.len()
            );
            eprintln!(
                "[{config} round {round}] {scenario}: late p50 {} us p99 {} us max {} us, burst \
                 p99 {:.1} ms ({} bursts), throttled ctr {}/{} pod {}/{}",
                r["late_p50_us"],
                r["late_p99_us"],
                r["late_max_us"],
                {
                    let mut v = w.wall_ns.clone();
                    v.sort_unstable();
                    q(&v, 0.99) / 1e6
                },
                w.wall_ns.len(),
                w.ctr.1,
                w.ctr.0,
                w.pod.1,
                w.pod.0
            );
            windows.push(w);
        }
    }
    Ok(session)
}

/// The pooled figures of a configuration's windows of one scenario.
fn scenario_figures(ws: &[&Window]) -> Value {
    let mut late: Vec<i64> = ws.iter().flat_map(|w| w.late_ns.iter().copied()).collect();
    let mut wall: Vec<i64> = ws.iter().flat_map(|w| w.wall_ns.iter().copied()).collect();
    late.sort_unstable();
    wall.sort_unstable();
    let us = |x: f64| r1(x / 1e3);
    let ms = |x: f64| (x / 1e4).round() / 100.0;
    let window_p99: Vec<f64> = ws
        .iter()
        .map(|w| {
            let mut v = w.late_ns.clone();
            v.sort_unstable();
            us(q(&v, 0.99))
        })
        .collect();
    let sum = |f: fn(&Window) -> u64| ws.iter().map(|w| f(w)).sum::<u64>();
    json!({
        "windows": ws.len(),
        "ticks": late.len(),
        "missed_ticks": sum(|w| w.missed),
        "late_p50_us": us(q(&late, 0.5)),
        "late_p99_us": us(q(&late, 0.99)),
        "late_p999_us": us(q(&late, 0.999)),
        "late_max_us": us(late.last().copied().unwrap_or(0) as f64),
        "late_over_10ms": late.iter().filter(|x| **x >= 10_000_000).count(),
        "late_p99_us_windows": window_p99,
        "bursts": wall.len(),
        "burst_p50_ms": ms(q(&wall, 0.5)),
        "burst_p99_ms": ms(q(&wall, 0.99)),
        "burst_max_ms": ms(wall.last().copied().unwrap_or(0) as f64),
        "nr_periods": sum(|w| w.ctr.0),
        "nr_throttled": sum(|w| w.ctr.1),
        "throttled_ms": r1(sum(|w| w.ctr.2) as f64 / 1e6),
        "pod_nr_periods": sum(|w| w.pod.0),
        "pod_nr_throttled": sum(|w| w.pod.1),
    })
}

/// The probe's tick lateness and bursts beside spinning neighbours in each configuration (figures
/// with `TOPOLET_BENCH_OUT`).
#[test]
fn a_guaranteed_probe_beside_spinning_neighbours_in_three_configurations() -> anyhow::Result<()> {
    let plan = Plan::from_env()?;
    let load_start = loadavg()?;
    let t0 = Instant::now();
    let mut windows = Vec::new();
    let mut sessions = Vec::new();
    for round in 0..plan.rounds {
        for k in 0..CONFIGS.len() {
            let config = CONFIGS[(round + k) % CONFIGS.len()];
            sessions.push(run_session(config, round, &plan, &mut windows)?);
        }
    }
    let load_end = loadavg()?;
    let mut configs = BTreeMap::new();
    for config in CONFIGS {
        let ss: Vec<&Session> = sessions.iter().filter(|s| s.config == config).collect();
        let mut scen = serde_json::Map::new();
        for (scenario, burst_ms) in SCENARIOS {
            let ws: Vec<&Window> = windows
                .iter()
                .filter(|w| w.config == config && w.scenario == scenario)
                .collect();
            let mut f = scenario_figures(&ws);
            f["burst_ms"] = json!(burst_ms);
            scen.insert(scenario.into(), f);
        }
        let uniq = |f: fn(&Session) -> String| {
            let mut v: Vec<String> = ss.iter().map(|s| f(s)).collect();
            v.dedup();
            v.join(" | ")
        };
        configs.insert(
            config,
            json!({
                "scenarios": scen,
                "cpuset": uniq(|s| s.cpuset.clone()),
                "cpus_allowed": uniq(|s| s.cpus_allowed.clone()),
                "ctr_quota_us": uniq(|s| s.ctr_quota.to_string()),
                "pod_quota_us": uniq(|s| s.pod_quota.to_string()),
                "neighbours_allowed_until_ms": ss.iter().map(|s| s.allowed_until_ms).collect::<Vec<_>>(),
                "neighbours_ran_until_ms": ss.iter().map(|s| s.ran_until_ms).collect::<Vec<_>>(),
                "sampled_from_ms": ss.iter().map(|s| s.sampled_from_ms).collect::<Vec<_>>(),
                "samples": ss.iter().map(|s| s.samples).collect::<Vec<_>>(),
                "sessions": ss.len(),
            }),
        );
    }
    let ratio = |scenario: &str, key: &str| {
        let get = |c: &str| {
            configs[c]["scenarios"][scenario][key]
                .as_f64()
                .unwrap_or(0.0)
        };
        let s = get("static");
        if s > 0.0 {
            (get("topolet") / s * 1000.0).round() / 1000.0
        } else {
            0.0
        }
    };
    let ratios = json!({
        "normal_late_p99": ratio("normal", "late_p99_us"),
        "over_quota_late_p99": ratio("over_quota", "late_p99_us"),
        "over_quota_late_p999": ratio("over_quota", "late_p999_us"),
    });
    let rounds = sessions
        .iter()
        .map(|s| format!("{}:{}", s.round, s.config))
        .collect::<Vec<_>>();
    let line = json!({
        "test": "isolation",
        "rounds": plan.rounds,
        "window_s": plan.window_s,
        "alternations": plan.alternations,
        "burst_every_ms": BURST_EVERY_MS,
        "burst_threads": BURST_THREADS,
        "order": rounds,
        "seconds": r1(t0.elapsed().as_secs_f64()),
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "configs": configs,
        "topolet_vs_static": ratios,
    });
    probe::emit(plan.out.as_deref(), &line)
}

/// Pod start through the kubelet with and without topolet (figures with `TOPOLET_BENCH_OUT`).
#[test]
fn kubectl_apply_to_running_with_and_without_topolet() -> anyhow::Result<()> {
    let out = std::env::var_os("TOPOLET_BENCH_OUT").map(PathBuf::from);
    let bench = out.is_some();
    let rounds = env_num("TOPOLET_POD_START_ROUNDS", if bench { 8 } else { 1 })?;
    let n = env_num("TOPOLET_POD_START_N", if bench { 10 } else { 3 })?;
    ensure!(n >= 1, "TOPOLET_POD_START_N must be at least 1");
    let mut node = KubeNode::start("", &ClusterOptions::default())?;
    let conds = ["none", "topolet"];
    let mut on = true;
    let mut samples: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut order = Vec::new();
    let load_start = loadavg()?;
    let t0 = Instant::now();
    let file = node.cluster.dir().join("pod-start.json");
    for round in 0..rounds {
        for k in 0..conds.len() {
            let cond = conds[(round + k) % conds.len()];
            if cond == "none" && on {
                node.t.topolet.terminate(TERMINATE_TIMEOUT)?;
                on = false;
            } else if cond == "topolet" && !on {
                node.t.topolet.restart()?;
                node.t.topolet.wait_nri_synchronized(1)?;
                on = true;
            }
            let names: Vec<String> = (0..n).map(|i| format!("ps{round}-{cond}-{i}")).collect();
            let items: Vec<Value> = names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    // One exclusive CPU is all the node has to give (topolet reserves CPU 0).
                    let r = match i {
                        0 => guaranteed("1", "64Mi"),
                        _ if i % 2 == 1 => json!({}),
                        _ => res("100m", "", "32Mi", ""),
                    };
                    pod(name, vec![script_ctr("main", UNTIL_TERM, r)], vec![])
                })
                .collect();
            let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
            std::fs::write(&file, list.to_string())
                .with_context(|| format!("writing {}", file.display()))?;
            let watch = node.cluster.watch(
                |c| Api::<Pod>::namespaced(c, "default"),
                "metadata.namespace=default",
                |p: &Pod| {
                    let running =
                        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                    (p.metadata.name.clone().unwrap_or_default(), running)
                },
            )?;
            let start = Instant::now();
            node.cluster
                .kubectl(&["apply", "-f", &file.to_string_lossy()])?;
            let first_running = |seen: &[(Instant, Option<(String, bool)>)]| {
                let mut at: BTreeMap<&str, Instant> = BTreeMap::new();
                for (t, v) in seen {
                    if let Some((name, true)) = v {
                        at.entry(name.as_str()).or_insert(*t);
                    }
                }
                names
                    .iter()
                    .map(|nm| at.get(nm.as_str()).copied())
                    .collect::<Option<Vec<Instant>>>()
                    .and_then(|v| v.into_iter().max())
            };
            let seen = watch.wait(
                &format!("the {n} pods of block {round}/{cond} Running"),
                POD_TIMEOUT,
                |s| first_running(s).is_some(),
            )?;
            let last = first_running(&seen).context("all Running, yet no time")?;
            drop(watch);
            let ms = last.saturating_duration_since(start).as_secs_f64() * 1000.0;
            eprintln!(
                "[pod_start round {round}] {cond}: {n} pods Running {ms:.0} ms after kubectl apply"
            );
            samples.entry(cond).or_default().push(r1(ms));
            order.push(cond);
            node.cluster
                .kubectl(&["delete", "-f", &file.to_string_lossy(), "--wait=true"])?;
        }
    }
    if !on {
        node.t.topolet.restart()?;
        node.t.topolet.wait_nri_synchronized(1)?;
    }
    let line = json!({
        "test": "pod_start",
        "pods": n,
        "rounds": rounds,
        "mix": "one Guaranteed 1 CPU, the others alternately BestEffort and Burstable 100m",
        "order": order,
        "samples_ms": samples,
        "median_ms": samples.iter().map(|(k, v)| (*k, median(&mut v.clone()))).collect::<BTreeMap<_, _>>(),
        "seconds": r1(t0.elapsed().as_secs_f64()),
        "loadavg_start": load_start,
        "loadavg_end": loadavg()?,
    });
    probe::emit(out.as_deref(), &line)
}
