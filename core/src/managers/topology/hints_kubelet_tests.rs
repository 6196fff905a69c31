//! The kubelet's topology-manager merge tables, transcribed (`pkg/kubelet/cm/topologymanager/
//! policy_test.go` `commonPolicyMergeTestCases`, the best-effort / single-numa-node /
//! closest-NUMA case lists, `TestMaxOfMinAffinityCounts`; the distances are the kubelet's
//! `commonNUMAInfoFourNodes` / `commonNUMAInfoEightNodes`), plus property tests.
//!
//! | kubelet table                                   | cases | result                  |
//! |-------------------------------------------------|-------|-------------------------|
//! | commonPolicyMergeTestCases (best-effort, restricted) | 8 | match exactly          |
//! | bestEffortPolicy.mergeTestCases (incl. bestNonPreferredAffinityCount 1–4) | 14 | match exactly |
//! | mergeTestCasesNoPolicies (bestNonPreferred 5, 6) | 2    | match exactly           |
//! | mergeTestCasesClosestNUMA (prefer-closest)      | 4     | match exactly           |
//! | singleNumaNodePolicy.mergeTestCases             | 12    | match exactly           |
//! | restricted: admit = preferred                   | all   | match exactly           |
//! | TestMaxOfMinAffinityCounts                      | 7     | match exactly           |
//! | max-allowable-numa-nodes (topology_manager.go)  | 3     | same rule; our message also names the machine's node count |
//!
//! Differences by design (none changes an answer on the kubelet's tables):
//! - the kubelet walks the whole cross product; we enumerate distinct merged hints per resource
//!   (property `matches_reference_cross_product` checks the answers are identical to a direct
//!   cross-product implementation of the kubelet's `HintMerger.compare`);
//! - the result is independent of provider and hint order (property `order_independent`); the
//!   kubelet's running comparison relies on being a total order, which it is, so no change.

use super::*;
use proptest::prelude::*;

fn m(ids: &[usize]) -> NumaMask {
    NumaMask::from_ids(ids.iter().copied()).expect("test ids are small")
}

fn h(ids: &[usize], preferred: bool) -> TopologyHint {
    TopologyHint::new(m(ids), preferred)
}

fn nil(preferred: bool) -> TopologyHint {
    TopologyHint {
        affinity: None,
        preferred,
    }
}

fn p(resources: &[(&str, Option<Vec<TopologyHint>>)]) -> ProviderHints {
    resources
        .iter()
        .map(|(r, hints)| (r.to_string(), hints.clone()))
        .collect()
}

fn dist4(a: usize, b: usize) -> u32 {
    const D: [[u32; 4]; 4] = [
        [10, 11, 12, 12],
        [11, 10, 12, 12],
        [12, 12, 10, 11],
        [12, 12, 11, 10],
    ];
    D[a][b]
}

fn dist8(a: usize, b: usize) -> u32 {
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

const N4: [usize; 4] = [0, 1, 2, 3];
const N8: [usize; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

struct Case {
    name: &'static str,
    providers: Vec<ProviderHints>,
    expected: TopologyHint,
}

fn case(name: &'static str, providers: Vec<ProviderHints>, expected: TopologyHint) -> Case {
    Case {
        name,
        providers,
        expected,
    }
}

fn two(r1: Vec<TopologyHint>, r2: Vec<TopologyHint>) -> Vec<ProviderHints> {
    vec![p(&[("resource1", Some(r1))]), p(&[("resource2", Some(r2))])]
}

fn common_cases() -> Vec<Case> {
    vec![
        case(
            "same mask, both preferred 1/2",
            two(vec![h(&[0], true)], vec![h(&[0], true)]),
            h(&[0], true),
        ),
        case(
            "same mask, both preferred 2/2",
            two(vec![h(&[1], true)], vec![h(&[1], true)]),
            h(&[1], true),
        ),
        case(
            "1 no hints, 1 single hint preferred 1/2",
            vec![p(&[]), p(&[("resource", Some(vec![h(&[0], true)]))])],
            h(&[0], true),
        ),
        case(
            "1 no hints, 1 single hint preferred 2/2",
            vec![p(&[]), p(&[("resource", Some(vec![h(&[1], true)]))])],
            h(&[1], true),
        ),
        case(
            "1 with 2 hints, 1 with single hint matching 1/2",
            two(vec![h(&[0], true), h(&[1], true)], vec![h(&[0], true)]),
            h(&[0], true),
        ),
        case(
            "1 with 2 hints, 1 with single hint matching 2/2",
            two(vec![h(&[0], true), h(&[1], true)], vec![h(&[1], true)]),
            h(&[1], true),
        ),
        case(
            "both with 2 hints, matching narrower preferred hint from both",
            two(
                vec![h(&[0], true), h(&[1], true)],
                vec![h(&[0], true), h(&[0, 1], false)],
            ),
            h(&[0], true),
        ),
        case(
            "less narrow preferred hints are chosen over narrower non-preferred hints",
            two(
                vec![h(&[1], true), h(&[0, 1], false)],
                vec![h(&[0], true), h(&[1], true), h(&[0, 1], false)],
            ),
            h(&[1], true),
        ),
        case(
            "multiple resources, same provider",
            vec![p(&[
                ("resource1", Some(vec![h(&[1], true), h(&[0, 1], false)])),
                (
                    "resource2",
                    Some(vec![h(&[0], true), h(&[1], true), h(&[0, 1], false)]),
                ),
            ])],
            h(&[1], true),
        ),
    ]
}

fn best_effort_cases() -> Vec<Case> {
    let bnp = |r2: Vec<TopologyHint>| two(vec![h(&[0, 1, 2, 3], false), h(&[0, 1], false)], r2);
    vec![
        case(
            "2 hints each, same mask (some with different bits), same preferred",
            two(
                vec![h(&[0, 1], true), h(&[0, 2], true)],
                vec![h(&[0, 1], true), h(&[0, 2], true)],
            ),
            h(&[0, 1], true),
        ),
        case("TopologyHint not set", vec![], h(&N4, true)),
        case("empty non-nil map", vec![p(&[])], h(&N4, true)),
        case(
            "nil hints for a resource",
            vec![p(&[("resource", None)])],
            h(&N4, true),
        ),
        case(
            "empty hints for a resource",
            vec![p(&[("resource", Some(vec![]))])],
            h(&N4, false),
        ),
        case(
            "single nil-affinity preferred hint",
            vec![p(&[("resource", Some(vec![nil(true)]))])],
            h(&N4, true),
        ),
        case(
            "single nil-affinity non-preferred hint",
            vec![p(&[("resource", Some(vec![nil(false)]))])],
            h(&N4, false),
        ),
        case(
            "no common mask",
            two(vec![h(&[0], true)], vec![h(&[1], true)]),
            h(&N4, false),
        ),
        case(
            "same mask, 1 preferred, 1 not 1/2",
            two(vec![h(&[0], true)], vec![h(&[0], false)]),
            h(&[0], false),
        ),
        case(
            "same mask, 1 preferred, 1 not 2/2",
            two(vec![h(&[1], true)], vec![h(&[1], false)]),
            h(&[1], false),
        ),
        case(
            "1 wider mask, both preferred 1/2",
            two(vec![h(&[0], true)], vec![h(&[0, 1], true)]),
            h(&[0], false),
        ),
        case(
            "1 with 2 hints, 1 with single non-preferred hint matching",
            two(vec![h(&[0], true), h(&[1], true)], vec![h(&[0, 1], false)]),
            h(&[0], false),
        ),
        case(
            "1 wider mask, both preferred 2/2",
            two(vec![h(&[1], true)], vec![h(&[0, 1], true)]),
            h(&[1], false),
        ),
        case(
            "bestNonPreferredAffinityCount (1)",
            bnp(vec![h(&[0, 1], false)]),
            h(&[0, 1], false),
        ),
        case(
            "bestNonPreferredAffinityCount (2)",
            bnp(vec![h(&[0, 3], false)]),
            h(&[0, 3], false),
        ),
        case(
            "bestNonPreferredAffinityCount (3)",
            bnp(vec![h(&[1, 2], false)]),
            h(&[1, 2], false),
        ),
        case(
            "bestNonPreferredAffinityCount (4)",
            bnp(vec![h(&[2, 3], false)]),
            h(&[2, 3], false),
        ),
    ]
}

fn bnp56(closest: bool) -> Vec<Case> {
    let bnp = |r2: Vec<TopologyHint>| two(vec![h(&[0, 1, 2, 3], false), h(&[0, 1], false)], r2);
    let (e5, e6) = if closest {
        (&[2, 3], &[2, 3])
    } else {
        (&[1, 2], &[1, 2])
    };
    vec![
        case(
            "bestNonPreferredAffinityCount (5)",
            bnp(vec![h(&[1, 2], false), h(&[2, 3], false)]),
            h(e5, false),
        ),
        case(
            "bestNonPreferredAffinityCount (6)",
            bnp(vec![
                h(&[1, 2, 3], false),
                h(&[1, 2], false),
                h(&[1, 3], false),
                h(&[2, 3], false),
            ]),
            h(e6, false),
        ),
    ]
}

fn closest_cases() -> Vec<Case> {
    let mut cases = vec![
        case(
            "2 hints each, same mask (some with different bits), same preferred",
            two(
                vec![h(&[0, 4], true), h(&[0, 2], true)],
                vec![h(&[0, 4], true), h(&[0, 2], true)],
            ),
            h(&[0, 2], true),
        ),
        case(
            "2 hints each, different mask",
            two(
                vec![h(&[4], true), h(&[0, 2], true)],
                vec![h(&[4], true), h(&[0, 2], true)],
            ),
            h(&[4], true),
        ),
    ];
    cases.extend(bnp56(true));
    cases
}

fn single_numa_cases() -> Vec<Case> {
    vec![
        case("TopologyHint not set", vec![], nil(true)),
        case("empty non-nil map", vec![p(&[])], nil(true)),
        case(
            "nil hints for a resource",
            vec![p(&[("resource", None)])],
            nil(true),
        ),
        case(
            "empty hints for a resource",
            vec![p(&[("resource", Some(vec![]))])],
            nil(false),
        ),
        case(
            "single nil-affinity preferred hint",
            vec![p(&[("resource", Some(vec![nil(true)]))])],
            nil(true),
        ),
        case(
            "single nil-affinity non-preferred hint",
            vec![p(&[("resource", Some(vec![nil(false)]))])],
            nil(false),
        ),
        case(
            "no common mask",
            two(vec![h(&[0], true)], vec![h(&[1], true)]),
            nil(false),
        ),
        case(
            "same mask, 1 preferred, 1 not 1/2",
            two(vec![h(&[0], true)], vec![h(&[0], false)]),
            nil(false),
        ),
        case(
            "same mask, 1 preferred, 1 not 2/2",
            two(vec![h(&[1], true)], vec![h(&[1], false)]),
            nil(false),
        ),
        case(
            "1 with 2 hints, 1 with single non-preferred hint matching",
            two(vec![h(&[0], true), h(&[1], true)], vec![h(&[0, 1], false)]),
            nil(false),
        ),
        case(
            "single NUMA hint generation",
            vec![p(&[
                ("resource1", Some(vec![h(&[0, 1], true)])),
                (
                    "resource2",
                    Some(vec![h(&[0], true), h(&[1], true), h(&[0, 1], false)]),
                ),
            ])],
            nil(false),
        ),
        case(
            "one no-preference provider",
            vec![
                p(&[(
                    "resource1",
                    Some(vec![h(&[0], true), h(&[1], true), h(&[0, 1], false)]),
                )]),
                p(&[]),
            ],
            h(&[0], true),
        ),
    ]
}

fn run(
    policy: TopologyPolicy,
    nodes: &[usize],
    d: fn(usize, usize) -> u32,
    closest: bool,
    cases: Vec<Case>,
) {
    let options = TopologyOptions {
        prefer_closest_numa_nodes: closest,
        ..TopologyOptions::default()
    };
    for c in cases {
        let got = merge(policy, nodes, d, &options, &c.providers);
        assert_eq!(got.hint, c.expected, "{policy}: {}", c.name);
        let admit = match policy {
            TopologyPolicy::None | TopologyPolicy::BestEffort => true,
            _ => c.expected.preferred,
        };
        assert_eq!(got.admit, admit, "{policy}: {} (admit)", c.name);
    }
}

#[test]
fn kubelet_best_effort_table() {
    let mut cases = common_cases();
    cases.extend(best_effort_cases());
    cases.extend(bnp56(false));
    run(TopologyPolicy::BestEffort, &N4, dist4, false, cases);
}

#[test]
fn kubelet_restricted_table() {
    let mut cases = common_cases();
    cases.extend(best_effort_cases());
    cases.extend(bnp56(false));
    run(TopologyPolicy::Restricted, &N4, dist4, false, cases);
}

#[test]
fn kubelet_closest_numa_table() {
    run(
        TopologyPolicy::BestEffort,
        &N8,
        dist8,
        true,
        closest_cases(),
    );
    run(
        TopologyPolicy::Restricted,
        &N8,
        dist8,
        true,
        closest_cases(),
    );
}

#[test]
fn kubelet_single_numa_node_table() {
    let mut cases = common_cases();
    cases.extend(single_numa_cases());
    run(TopologyPolicy::SingleNumaNode, &N4, dist4, false, cases);
    // prefer-closest is ignored under single-numa-node (as the kubelet's HintMerger does).
    run(
        TopologyPolicy::SingleNumaNode,
        &N4,
        dist4,
        true,
        single_numa_cases(),
    );
}

#[test]
fn none_policy_admits_any() {
    let r = merge(
        TopologyPolicy::None,
        &N4,
        dist4,
        &TopologyOptions::default(),
        &[p(&[("resource", Some(vec![]))])],
    );
    assert_eq!(r.hint, nil(false));
    assert!(r.admit);
}

#[test]
fn kubelet_max_of_min_affinity_counts() {
    let t = |lists: Vec<Vec<TopologyHint>>| best_non_preferred_count(&lists);
    assert_eq!(t(vec![]), 0);
    assert_eq!(t(vec![vec![h(&[], true)]]), 0);
    assert_eq!(t(vec![vec![h(&[0], true)]]), 1);
    assert_eq!(t(vec![vec![h(&[0, 1], true)]]), 2);
    assert_eq!(t(vec![vec![h(&[0, 1], true), h(&[0, 1, 2], true)]]), 2);
    assert_eq!(
        t(vec![
            vec![h(&[0, 1], true), h(&[0, 1, 2], true)],
            vec![h(&[0, 1, 2], true)]
        ]),
        3
    );
    assert_eq!(
        t(vec![
            vec![h(&[0, 1], true), h(&[0, 1, 2], true)],
            vec![h(&[0, 1, 2], true), h(&[0, 1, 2, 3], true)],
        ]),
        3
    );
}

#[test]
fn max_allowable_numa_nodes() {
    let nine: Vec<usize> = (0..9).collect();
    let opts = TopologyOptions::default();
    let err = opts
        .validate(TopologyPolicy::BestEffort, &nine)
        .expect_err("9 nodes > 8");
    let msg = err.to_string();
    assert!(
        msg.contains("more than 8") && msg.contains("has 9"),
        "{msg}"
    );
    assert!(opts.validate(TopologyPolicy::None, &nine).is_ok());
    let raised = TopologyOptions {
        max_allowable_numa_nodes: 16,
        ..opts
    };
    assert!(raised
        .validate(TopologyPolicy::SingleNumaNode, &nine)
        .is_ok());
    let low = TopologyOptions {
        max_allowable_numa_nodes: 4,
        ..opts
    };
    assert!(matches!(
        low.validate(TopologyPolicy::None, &N4),
        Err(TopologyConfigError::MaxAllowableTooSmall(4))
    ));
}

#[test]
fn node_subsets_are_ordered_narrowest_first() {
    let s = node_subsets(&[0, 1, 2]);
    let want: Vec<NumaMask> = [&[0][..], &[1], &[2], &[0, 1], &[0, 2], &[1, 2], &[0, 1, 2]]
        .iter()
        .map(|ids| m(ids))
        .collect();
    assert_eq!(s, want);
    assert_eq!(node_subsets(&N8).len(), 255);
}

/// 8 NUMA nodes, 4 resources each offering every one of the 255 masks: the kubelet's cross
/// product would be 255⁴ ≈ 4.2·10⁹ permutations. Only the answer is checked here; how long the
/// merge takes is measured by the `hints` benchmark (plugin/benches/hints.rs).
#[test]
fn merge_of_every_mask_on_eight_nodes() {
    let subsets = node_subsets(&N8);
    let hints: Vec<TopologyHint> = subsets
        .iter()
        .map(|&mask| TopologyHint::new(mask, mask.count() <= 2))
        .collect();
    let providers: Vec<ProviderHints> = ["cpu", "memory", "hugepages-2Mi", "example.com/nic"]
        .iter()
        .map(|r| p(&[(r, Some(hints.clone()))]))
        .collect();
    let options = TopologyOptions {
        prefer_closest_numa_nodes: true,
        ..TopologyOptions::default()
    };
    let r = merge(TopologyPolicy::BestEffort, &N8, dist8, &options, &providers);
    assert_eq!(r.hint, h(&[0], true));
}

/// A direct implementation of the kubelet's algorithm: every permutation of the cross product,
/// merged with `mergePermutation` and kept with the pairwise `HintMerger.compare` (its cases
/// kept apart, as the kubelet numbers them).
#[allow(clippy::if_same_then_else)]
fn reference_merge(
    policy: TopologyPolicy,
    nodes: &[usize],
    d: fn(usize, usize) -> u32,
    closest: bool,
    providers: &[ProviderHints],
) -> TopologyHint {
    let default = m(nodes);
    let mut lists = provider_hint_lists(providers);
    if policy == TopologyPolicy::SingleNumaNode {
        lists = single_numa_lists(lists);
    }
    let b = best_non_preferred_count(&lists);
    let closest = closest && policy != TopologyPolicy::SingleNumaNode;
    let avg = |mask: NumaMask| -> f64 {
        let ids: Vec<usize> = mask.ids().collect();
        let sum: u32 = ids
            .iter()
            .flat_map(|&a| ids.iter().map(move |&c| d(a, c)))
            .sum();
        f64::from(sum) / (ids.len() * ids.len()) as f64
    };
    let fitter = |cur: NumaMask, cand: NumaMask| -> NumaMask {
        if cur == cand {
            return cur;
        }
        if closest && cur.count() == cand.count() {
            let (a, c) = (avg(cur), avg(cand));
            if a == c {
                if cur.bits() < cand.bits() {
                    cur
                } else {
                    cand
                }
            } else if a < c {
                cur
            } else {
                cand
            }
        } else if cur.is_narrower_than(cand) {
            cur
        } else {
            cand
        }
    };
    let compare = |cur: Option<TopologyHint>, cand: TopologyHint| -> Option<TopologyHint> {
        let cm = cand.affinity.unwrap_or_default();
        if cm.count() == 0 {
            return cur;
        }
        let Some(cur) = cur else { return Some(cand) };
        let um = cur.affinity.unwrap_or_default();
        let pick = |mask: NumaMask| if mask == um { cur } else { cand };
        Some(match (cur.preferred, cand.preferred) {
            (false, true) => cand,
            (true, false) => cur,
            (true, true) => pick(fitter(um, cm)),
            (false, false) => {
                if um.count() > b {
                    pick(fitter(um, cm))
                } else if um.count() == b {
                    if cm.count() != b {
                        cur
                    } else {
                        pick(fitter(um, cm))
                    }
                } else if cm.count() > b {
                    cur
                } else if cm.count() == b {
                    cand
                } else if cm.count() > um.count() {
                    cand
                } else if cm.count() < um.count() {
                    cur
                } else {
                    pick(fitter(um, cm))
                }
            }
        })
    };
    let mut best: Option<TopologyHint> = None;
    let mut idx = vec![0usize; lists.len()];
    if lists.iter().all(|l| !l.is_empty()) {
        loop {
            let perm: Vec<TopologyHint> = idx.iter().zip(&lists).map(|(&i, l)| l[i]).collect();
            let mut preferred = true;
            let mut first: Option<NumaMask> = None;
            let mut and = default;
            for hint in &perm {
                if let Some(a) = hint.affinity {
                    and = and.and(a);
                    match first {
                        None => first = Some(a),
                        Some(f) if f != a => preferred = false,
                        _ => {}
                    }
                }
                preferred &= hint.preferred;
            }
            best = compare(best, TopologyHint::new(and, preferred));
            let mut k = 0;
            while k < idx.len() {
                idx[k] += 1;
                if idx[k] < lists[k].len() {
                    break;
                }
                idx[k] = 0;
                k += 1;
            }
            if k == idx.len() {
                break;
            }
        }
    }
    let mut hint = best.unwrap_or(TopologyHint::new(default, false));
    if policy == TopologyPolicy::SingleNumaNode && hint.affinity == Some(default) {
        hint.affinity = None;
    }
    hint
}

fn arb_hint() -> impl Strategy<Value = TopologyHint> {
    (prop::option::weighted(0.9, 0u64..16), any::<bool>()).prop_map(|(bits, preferred)| {
        TopologyHint {
            affinity: bits.map(NumaMask::from_bits),
            preferred,
        }
    })
}

fn arb_providers() -> impl Strategy<Value = Vec<ProviderHints>> {
    prop::collection::vec(
        prop::collection::btree_map(
            "r[0-9]",
            prop::option::weighted(0.85, prop::collection::vec(arb_hint(), 0..5)),
            0..3,
        ),
        0..4,
    )
}

fn arb_policy() -> impl Strategy<Value = TopologyPolicy> {
    prop_oneof![
        Just(TopologyPolicy::BestEffort),
        Just(TopologyPolicy::Restricted),
        Just(TopologyPolicy::SingleNumaNode),
    ]
}

proptest! {
    #[test]
    fn matches_reference_cross_product(
        providers in arb_providers(),
        policy in arb_policy(),
        closest in any::<bool>(),
    ) {
        let options = TopologyOptions { prefer_closest_numa_nodes: closest, ..TopologyOptions::default() };
        let got = merge(policy, &N4, dist4, &options, &providers);
        prop_assert_eq!(got.hint, reference_merge(policy, &N4, dist4, closest, &providers));
    }

    #[test]
    fn matches_reference_with_masks_outside_the_machine(
        providers in arb_providers(),
        policy in arb_policy(),
        closest in any::<bool>(),
    ) {
        // Node 3 does not exist: hints naming it take the hashed path.
        let nodes = [0, 1, 2];
        let options = TopologyOptions { prefer_closest_numa_nodes: closest, ..TopologyOptions::default() };
        let got = merge(policy, &nodes, dist4, &options, &providers);
        prop_assert_eq!(got.hint, reference_merge(policy, &nodes, dist4, closest, &providers));
    }

    #[test]
    fn order_independent(
        providers in arb_providers(),
        policy in arb_policy(),
        closest in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let options = TopologyOptions { prefer_closest_numa_nodes: closest, ..TopologyOptions::default() };
        let base = merge(policy, &N4, dist4, &options, &providers);
        // Reverse the providers and rotate each hint list by a seed-dependent amount.
        let shuffled: Vec<ProviderHints> = providers
            .iter()
            .rev()
            .map(|prov| {
                prov.iter()
                    .map(|(r, hints)| {
                        let hints = hints.clone().map(|mut v| {
                            if !v.is_empty() {
                                let k = (seed as usize) % v.len();
                                v.rotate_left(k);
                                v.reverse();
                            }
                            v
                        });
                        (r.clone(), hints)
                    })
                    .collect()
            })
            .collect();
        prop_assert_eq!(base, merge(policy, &N4, dist4, &options, &shuffled));
    }
}
