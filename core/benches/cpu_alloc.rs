//! Benchmarks of the CPU manager (`topolet_core::managers::cpu::alloc`, `topolet_core::managers::cpu::policy`): one exclusive
//! allocation and one release on an 8-socket × 512-CPU machine (4096 CPUs) with 1,000
//! containers already placed. Also prints a p99 of single allocations measured directly
//! (criterion reports means/medians with confidence intervals, not percentiles).

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use topolet_core::kube::container_key::ContainerKey;
use topolet_core::machine::topology::SyntheticSpec;
use topolet_core::managers::cpu::policy::{
    ContainerRole, CpuPolicy, CpuPolicyConfig, CpuPolicyName,
};

fn loaded_policy() -> CpuPolicy {
    let topo = SyntheticSpec {
        sockets: 8,
        numa_per_socket: 1,
        l3_per_numa: 8,
        cores_per_l3: 32,
        threads_per_core: 2,
        memory_per_node: 64 << 30,
    }
    .build();
    let cfg = CpuPolicyConfig {
        policy: CpuPolicyName::Static,
        reserved_cpu_count: Some(8),
        ..Default::default()
    };
    let (mut p, _) = CpuPolicy::new(topo, cfg).expect("valid config");
    let sizes = [1usize, 2, 2, 4, 1, 3, 2, 8];
    for i in 0..1000 {
        let key = ContainerKey::new(format!("pod-{i}"), "app");
        p.allocate(&key, sizes[i % sizes.len()], ContainerRole::App, None)
            .expect("room for 1000 containers");
    }
    // Free a scattering so the machine is fragmented, then refill to 1000.
    for i in (0..1000).step_by(7) {
        p.release(&ContainerKey::new(format!("pod-{i}"), "app"));
    }
    for i in 1000..1143 {
        let key = ContainerKey::new(format!("pod-{i}"), "app");
        if p.assignments().len() >= 1000 {
            break;
        }
        p.allocate(&key, sizes[i % sizes.len()], ContainerRole::App, None)
            .expect("room");
    }
    p
}

fn p99_report(base: &CpuPolicy) {
    let mut samples = Vec::new();
    for i in 0..2000 {
        let mut p = base.clone();
        let key = ContainerKey::new("new-pod", "app");
        let n = [1usize, 2, 4, 6, 16][i % 5];
        let t = Instant::now();
        let got = p.allocate(&key, n, ContainerRole::App, None);
        samples.push(t.elapsed());
        black_box(got.ok());
    }
    samples.sort();
    let pct = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize];
    eprintln!(
        "cpu allocate on 4096 cpus / 1000 containers: p50 {:?} p99 {:?} max {:?}",
        pct(0.5),
        pct(0.99),
        samples[samples.len() - 1]
    );
}

fn bench(c: &mut Criterion) {
    let base = loaded_policy();
    assert_eq!(base.assignments().len(), 1000);
    p99_report(&base);
    c.bench_function("cpu_allocate_4_of_4096_with_1000_placed", |b| {
        b.iter_batched(
            || base.clone(),
            |mut p| {
                let key = ContainerKey::new("new-pod", "app");
                black_box(p.allocate(&key, 4, ContainerRole::App, None).ok());
                p
            },
            BatchSize::LargeInput,
        )
    });
    let victim = ContainerKey::new("pod-1", "app");
    c.bench_function("cpu_release_of_4096_with_1000_placed", |b| {
        b.iter_batched(
            || base.clone(),
            |mut p| {
                black_box(p.release(&victim));
                p
            },
            BatchSize::LargeInput,
        )
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
