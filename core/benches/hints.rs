//! Benchmark of the topology manager's merge (`topolet_core::managers::topology::hints::merge`) at the largest machine its
//! policies accept by default (`max_allowable_numa_nodes` = 8): 8 NUMA nodes, 4 resources each
//! offering every one of the 255 node masks, best-effort with prefer-closest-NUMA-nodes. The
//! kubelet walks the cross product, 255⁴ ≈ 4.2·10⁹ permutations; topolet merges resource by
//! resource, keeping only the distinct merged hints. The unit test
//! `merge_of_every_mask_on_eight_nodes` (core/src/managers/topology/hints_kubelet_tests.rs) checks the answer of the
//! same input; its cost is measured here.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use topolet_core::managers::topology::hints::{
    merge, node_subsets, ProviderHints, TopologyHint, TopologyOptions, TopologyPolicy,
};

const NODES: [usize; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

/// The kubelet's `commonNUMAInfoEightNodes` distances (two sockets of four nodes).
fn distance(a: usize, b: usize) -> u32 {
    const D: [[u32; 8]; 8] = [
        [10, 11, 12, 12, 30, 30, 30, 30],
        [11, 10, 12, 12, 30, 30, 30, 30],
        [12, 12, 10, 11, 30, 30, 30, 30],
        [12, 12, 11, 10, 30, 30, 30, 30],
        [30, 30, 30, 30, 10, 11, 12, 12],
        [30, 30, 30, 30, 11, 10, 12, 12],
        [30, 30, 30, 30, 12, 12, 10, 11],
        [30, 30, 30, 30, 12, 12, 13, 10],
    ];
    D[a][b]
}

/// Four providers, one resource each, every mask a hint (preferred when on at most 2 nodes).
fn every_mask_from_four_resources() -> Vec<ProviderHints> {
    let hints: Vec<TopologyHint> = node_subsets(&NODES)
        .into_iter()
        .map(|mask| TopologyHint::new(mask, mask.count() <= 2))
        .collect();
    ["cpu", "memory", "hugepages-2Mi", "example.com/nic"]
        .iter()
        .map(|r| ProviderHints::from([(r.to_string(), Some(hints.clone()))]))
        .collect()
}

fn bench(c: &mut Criterion) {
    let providers = every_mask_from_four_resources();
    let options = TopologyOptions {
        prefer_closest_numa_nodes: true,
        ..TopologyOptions::default()
    };
    c.bench_function("merge_4_x_255_hints_on_8_numa_nodes", |b| {
        b.iter(|| {
            black_box(merge(
                TopologyPolicy::BestEffort,
                &NODES,
                distance,
                &options,
                black_box(&providers),
            ))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
