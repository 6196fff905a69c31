//! What one `/metrics` scrape costs inside topolet: time, heap allocations and bytes, and the
//! exposition's size, for the hand-written renderer (`topolet::telemetry::metrics`) against the
//! Prometheus project's Rust crate (`prometheus-client`) encoding the same series.
//!
//! The registry is filled as on a busy node: every NRI event timed, admissions and refusals,
//! every eviction signal with its thresholds, pressure stall lines for the node and `PODS` pods,
//! Event and API outcomes, reclaimed CPU on. `prometheus-client`'s registry is built from the
//! hand-written renderer's own text (each `# TYPE` family, each sample with its labels; a
//! histogram with the same buckets), so both write the same families, label sets and bucket
//! counts; only the writer differs. Building the registry is not measured, encoding is.
//!
//! Run: `cargo bench -p topolet --bench scrape` (prints a table; `SCRAPE_ROUNDS` renders per
//! writer, default 2,000; `SCRAPE_DUMP=<file>` writes the hand-written exposition there). Allocations are counted by a global allocator wrapper around the
//! system allocator, on this thread only while a render runs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use topolet::telemetry::metrics::{Gauges, Metrics, NodeReclaimCounts, StallLine};

/// Pods with pressure stall lines.
const PODS: usize = 100;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    static BYTES: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting this thread's allocations while `COUNTING` is set.
struct Counting;

// SAFETY: every call is forwarded unchanged to `System`, which upholds `GlobalAlloc`'s contract;
// the bookkeeping touches only thread-local `Cell`s of plain integers (const-initialised, so
// reading them never allocates and never re-enters the allocator).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's layout is passed on as it came.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout (every allocation goes through it).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as `dealloc`; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn note(size: usize) {
    // `try_with`: during thread teardown the locals may be gone; nothing is counted then.
    let _ = COUNTING.try_with(|c| {
        if c.get() {
            let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
            let _ = BYTES.try_with(|b| b.set(b.get() + size as u64));
        }
    });
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f`, returning its output with the allocations and bytes it made.
fn counted<T>(f: impl FnOnce() -> T) -> (T, u64, u64) {
    ALLOCS.with(|a| a.set(0));
    BYTES.with(|b| b.set(0));
    COUNTING.with(|c| c.set(true));
    let out = f();
    COUNTING.with(|c| c.set(false));
    (out, ALLOCS.with(Cell::get), BYTES.with(Cell::get))
}

fn busy_node() -> (Metrics, Gauges) {
    let m = Metrics::new();
    let events = [
        "Synchronize",
        "RunPodSandbox",
        "StopPodSandbox",
        "RemovePodSandbox",
        "CreateContainer",
        "PostCreateContainer",
        "StartContainer",
        "PostStartContainer",
        "UpdateContainer",
        "PostUpdateContainer",
        "StopContainer",
        "RemoveContainer",
    ];
    for (i, e) in events.iter().enumerate() {
        for k in 0..200u64 {
            m.observe_event(
                e,
                Duration::from_micros(20 + (k * 37 + i as u64 * 11) % 5_000),
            );
        }
    }
    for qos in ["Guaranteed", "Burstable", "BestEffort"] {
        m.admitted(qos, false);
        m.admitted(qos, qos == "Guaranteed");
    }
    for reason in [
        "insufficient_cpus",
        "topology_affinity",
        "memory",
        "smt_alignment",
        "bad_request",
    ] {
        m.refused("create", reason);
        m.refused("resize", reason);
    }
    m.state_write(true);
    m.state_write(false);
    m.pod_cgroup_write(true);
    m.refusal_log_suppressed("create");
    let signals = [
        "memory.available",
        "nodefs.available",
        "nodefs.inodesFree",
        "imagefs.available",
        "imagefs.inodesFree",
        "containerfs.available",
        "pid.available",
    ];
    for (i, s) in signals.iter().enumerate() {
        m.set_signal(s, 1e9 + i as f64);
        m.set_threshold(s, "hard", Some(1e8));
        m.set_threshold(s, "soft", Some(2e8));
        m.eviction(s);
        m.node_reclaim(
            s,
            "relieved",
            NodeReclaimCounts {
                images: 2,
                image_bytes: 1 << 30,
                containers: 3,
                sandboxes: 1,
                observed_bytes: 1 << 29,
                ..Default::default()
            },
        );
    }
    let stall = |resource: &'static str, kind: &'static str| StallLine {
        resource,
        kind,
        avg10: 1.25,
        avg60: 0.5,
        avg300: 0.125,
        total_us: 123_456_789,
    };
    let lines = || {
        vec![
            stall("cpu", "some"),
            stall("memory", "some"),
            stall("memory", "full"),
            stall("io", "some"),
            stall("io", "full"),
        ]
    };
    let pods: BTreeMap<String, Vec<StallLine>> = (0..PODS)
        .map(|i| (format!("6f1c2b3a-0000-4000-8000-{i:012}"), lines()))
        .collect();
    m.set_pressure(lines(), pods);
    for c in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        m.set_condition(c, false);
    }
    for r in ["created", "patched", "rate_limited", "failed"] {
        m.kube_event(r);
    }
    m.kube_api_error("patch", "409");
    m.kube_api_error("create", "connection");
    m.nrt_write("updated");
    for a in ["dry-run", "api"] {
        m.eviction_result(a, "evicted");
    }
    m.node_status_patch("conditions", "ok");
    m.set_kube_client(true);
    m.admission_source("create", "api");
    m.pod_resources_call("Get", "ok");
    m.pod_resources_call("List", "ok");
    m.pod_wait("found");
    m.pod_watch_request("watch");
    m.set_pod_store(true, PODS);
    m.reclaimed_publish("written");
    m.set_reclaimed(&[("node".into(), 700), ("0".into(), 700)], 400, 690, 0);
    m.reclaimed_reaction("cut", Some(Duration::from_micros(300)));
    m.reclaimed_reaction("grow", None);
    for r in ["served", "refused_busy", "timed_out"] {
        m.http_connection(r);
    }
    m.config_reload("signal", "applied");
    let g = Gauges {
        shared_pool_cpus: 30,
        reserved_cpus: 2,
        exclusive_cpus: BTreeMap::from([(0, 16), (1, 16)]),
        free_cpus: BTreeMap::from([(0, 8), (1, 8)]),
        managed_containers: 1_000,
        left_alone_containers: 0,
        nri_connects: 1,
        nri_reconnects: 0,
        nri_synchronized: true,
    };
    (m, g)
}

type Labels = Vec<(String, String)>;

/// One sample line: its name, labels and value.
fn sample(line: &str) -> Option<(String, Labels, f64)> {
    let (head, value) = line.rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let (name, labels) = match head.split_once('{') {
        None => (head.to_string(), Vec::new()),
        Some((name, rest)) => {
            let body = rest.strip_suffix('}')?;
            let mut labels = Vec::new();
            for pair in body.split("\",").filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once("=\"")?;
                labels.push((k.to_string(), v.trim_end_matches('"').to_string()));
            }
            (name.to_string(), labels)
        }
    };
    Some((name, labels, value))
}

/// A `prometheus-client` registry holding the families of an exposition text.
fn registry_of(text: &str) -> Registry {
    let mut registry = Registry::default();
    let mut help: BTreeMap<&str, &str> = BTreeMap::new();
    let mut kind: Vec<(&str, &str)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            if let Some((n, h)) = rest.split_once(' ') {
                help.insert(n, h);
            }
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some((n, k)) = rest.split_once(' ') {
                kind.push((n, k));
            }
        }
    }
    let samples: Vec<(String, Labels, f64)> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(sample)
        .collect();
    for (name, k) in kind {
        let h = help.get(name).copied().unwrap_or("");
        match k {
            "counter" => {
                let fam = Family::<Labels, Counter<f64>>::default();
                let total = format!("{name}_total");
                for (n, l, v) in &samples {
                    if *n == total || n == name {
                        fam.get_or_create(l).inc_by(*v);
                    }
                }
                registry.register(name, h, fam);
            }
            "gauge" => {
                let fam = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
                for (n, l, v) in &samples {
                    if n == name {
                        fam.get_or_create(l).set(*v);
                    }
                }
                registry.register(name, h, fam);
            }
            "histogram" => {
                let bucket = format!("{name}_bucket");
                let mut series: BTreeMap<Labels, Vec<f64>> = BTreeMap::new();
                for (n, l, _) in &samples {
                    if *n != bucket {
                        continue;
                    }
                    let mut rest = l.clone();
                    let le = rest
                        .iter()
                        .position(|(k, _)| k == "le")
                        .map(|i| rest.remove(i));
                    if let Some((_, le)) = le {
                        if let Ok(b) = le.parse::<f64>() {
                            series.entry(rest).or_default().push(b);
                        }
                    }
                }
                let buckets: Vec<f64> = series.values().next().cloned().unwrap_or_default();
                let fam = Family::<Labels, Histogram, _>::new_with_constructor(move || {
                    Histogram::new(buckets.clone())
                });
                for (l, b) in &series {
                    let h = fam.get_or_create(l);
                    for x in b.iter().step_by(3) {
                        h.observe(*x);
                    }
                }
                registry.register(name, h, fam);
            }
            _ => {}
        }
    }
    registry
}

struct Figures {
    median: Duration,
    p99: Duration,
    allocs: u64,
    bytes: u64,
    out_bytes: usize,
    out_lines: usize,
    series: usize,
}

fn measure(rounds: usize, mut render: impl FnMut() -> String) -> Figures {
    for _ in 0..50 {
        render();
    }
    let (text, allocs, bytes) = counted(&mut render);
    let mut times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            let s = render();
            let e = t.elapsed();
            drop(s);
            e
        })
        .collect();
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    Figures {
        median: at(0.5),
        p99: at(0.99),
        allocs,
        bytes,
        out_bytes: text.len(),
        out_lines: text.lines().count(),
        series: text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .count(),
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    let rounds: usize = std::env::var("SCRAPE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let (metrics, gauges) = busy_node();
    let text = metrics.render(&gauges);
    // `SCRAPE_DUMP=<file>`: the hand-written exposition, to compare two builds' byte for byte.
    if let Ok(path) = std::env::var("SCRAPE_DUMP") {
        if let Err(e) = std::fs::write(&path, &text) {
            eprintln!("SCRAPE_DUMP {path}: {e}");
        }
    }
    let registry = registry_of(&text);
    let ours = measure(rounds, || metrics.render(&gauges));
    let theirs = measure(rounds, || {
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut s, &registry);
        s
    });
    let mut out = String::new();
    let _ = writeln!(
        out,
        "/metrics render on a busy node ({PODS} pods with stall lines), {rounds} renders each"
    );
    let _ = writeln!(
        out,
        "{:<34} {:>14} {:>18} {:>8}",
        "figure", "hand-written", "prometheus-client", "ratio"
    );
    let row = |out: &mut String, name: &str, a: f64, b: f64, unit: &str| {
        let _ = writeln!(
            out,
            "{:<34} {:>14} {:>18} {:>7.2}x",
            name,
            format!("{a:.1}{unit}"),
            format!("{b:.1}{unit}"),
            if b > 0.0 { a / b } else { 0.0 }
        );
    };
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    row(
        &mut out,
        "time, median",
        us(ours.median),
        us(theirs.median),
        " µs",
    );
    row(&mut out, "time, p99", us(ours.p99), us(theirs.p99), " µs");
    row(
        &mut out,
        "heap allocations per render",
        ours.allocs as f64,
        theirs.allocs as f64,
        "",
    );
    row(
        &mut out,
        "bytes allocated per render",
        ours.bytes as f64,
        theirs.bytes as f64,
        "",
    );
    row(
        &mut out,
        "exposition bytes",
        ours.out_bytes as f64,
        theirs.out_bytes as f64,
        "",
    );
    row(
        &mut out,
        "exposition lines",
        ours.out_lines as f64,
        theirs.out_lines as f64,
        "",
    );
    row(
        &mut out,
        "samples",
        ours.series as f64,
        theirs.series as f64,
        "",
    );
    print!("{out}");
}
