//! Benchmarks of the whole placement pipeline (`topolet_core::placement`, `topolet_core::placement::plan`) on the 8-socket ×
//! 512-CPU machine (4096 CPUs): `topolet plan` of 2,000 pods, and one admission plus one release
//! on a `Placement` with 1,000 containers placed (QoS class, hints from every provider, topology
//! merge, allocation, cgroup values). Also prints p50/p99 of single admissions and releases
//! measured directly (criterion reports means/medians, not percentiles).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use topolet_core::kube::container_key::ContainerKey;
use topolet_core::kube::pod::{Container, Pod, ResourceList};
use topolet_core::machine::topology::{SyntheticSpec, Topology};
use topolet_core::placement::plan::plan;
use topolet_core::placement::settings::PlacementSettings;
use topolet_core::placement::{Candidate, Placement};

fn machine() -> Topology {
    SyntheticSpec {
        sockets: 8,
        numa_per_socket: 1,
        l3_per_numa: 8,
        cores_per_l3: 32,
        threads_per_core: 2,
        memory_per_node: 1 << 40,
    }
    .build()
}

/// The configuration file's defaults (`PlacementSettings::default` is that default) with 8
/// reserved CPUs.
fn settings() -> PlacementSettings {
    let mut s = PlacementSettings::default();
    s.cpu.reserved_cpu_count = Some(8);
    s
}

/// Pod `i`: mostly Guaranteed with 1-8 integer cpus, some fractional, Burstable and BestEffort.
fn pod(i: usize) -> Pod {
    let cpus = [1u64, 2, 2, 4, 1, 3, 2, 8][i % 8];
    let r = |cpu: Option<u64>, mem: Option<u64>| ResourceList {
        cpu_millis: cpu,
        memory_bytes: mem,
        ..Default::default()
    };
    let (requests, limits) = match i % 10 {
        7 => (r(Some(1500), Some(1 << 30)), r(Some(1500), Some(1 << 30))),
        8 => (r(Some(250), Some(256 << 20)), r(None, Some(512 << 20))),
        9 => (r(None, None), r(None, None)),
        _ => {
            let g = r(Some(cpus * 1000), Some(cpus << 30));
            (g.clone(), g)
        }
    };
    Pod {
        namespace: "bench".into(),
        name: format!("pod-{i}"),
        uid: format!("uid-{i}"),
        containers: vec![Container {
            name: "app".into(),
            requests,
            limits,
            restart_policy: None,
        }],
        ..Default::default()
    }
}

fn loaded(topo: &Topology) -> Placement {
    let (mut p, _) = Placement::new(topo, &settings()).expect("valid config");
    for i in 0..1000 {
        p.admit(Candidate::app(&pod(i)), -1000)
            .expect("room for 1000 containers");
    }
    // Free a scattering so the machine is fragmented, then refill to 1000.
    for i in (0..1000).step_by(7) {
        p.release_pod(&format!("uid-{i}"));
    }
    for i in 1000..1143 {
        p.admit(Candidate::app(&pod(i)), -1000).expect("room");
    }
    p
}

fn percentiles(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let pct = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize];
    eprintln!(
        "{what}: p50 {:?} p99 {:?} max {:?}",
        pct(0.5),
        pct(0.99),
        samples[samples.len() - 1]
    );
}

fn p99_report(base: &Placement) {
    let (mut admit, mut release) = (Vec::new(), Vec::new());
    for i in 0..2000 {
        let mut p = base.clone();
        let new = Pod {
            uid: "new-pod".into(),
            name: "new-pod".into(),
            ..pod([0, 1, 3, 6, 7][i % 5] + 2000)
        };
        let t = Instant::now();
        let got = p.admit(Candidate::app(&new), -1000);
        admit.push(t.elapsed());
        black_box(got.ok());
        let victim = ContainerKey::new(format!("uid-{}", 1 + (i % 997)), "app");
        let t = Instant::now();
        let got = p.release(&victim);
        release.push(t.elapsed());
        black_box(got);
    }
    percentiles("placement admit on 4096 cpus / 1000 containers", admit);
    percentiles("placement release on 4096 cpus / 1000 containers", release);
}

fn bench(c: &mut Criterion) {
    let topo = machine();
    let base = loaded(&topo);
    assert!(base.exclusive().len() > 700, "{}", base.exclusive().len());
    p99_report(&base);
    c.bench_function("placement_admit_4_of_4096_with_1000_placed", |b| {
        b.iter_batched(
            || base.clone(),
            |mut p| {
                let new = Pod {
                    uid: "new-pod".into(),
                    ..pod(3)
                };
                black_box(p.admit(Candidate::app(&new), -1000).ok());
                p
            },
            BatchSize::LargeInput,
        )
    });
    let victim = ContainerKey::new("uid-1", "app");
    c.bench_function("placement_release_of_4096_with_1000_placed", |b| {
        b.iter_batched(
            || base.clone(),
            |mut p| {
                black_box(p.release(&victim));
                p
            },
            BatchSize::LargeInput,
        )
    });
    let pods: Vec<Pod> = (0..2000).map(pod).collect();
    let cfg = settings();
    let t = Instant::now();
    let out = plan(&topo, &cfg, &pods).expect("plan");
    eprintln!(
        "plan of 2000 pods on 4096 cpus: {:?} ({} admitted)",
        t.elapsed(),
        out.containers.iter().filter(|c| c.admitted).count()
    );
    let mut g = c.benchmark_group("plan");
    g.sample_size(10);
    g.bench_function("plan_2000_pods_on_4096_cpus", |b| {
        b.iter(|| black_box(plan(&topo, &cfg, &pods).expect("plan")))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
