//! Memory-manager static policy cases, modelled on the kubelet's
//! `pkg/kubelet/cm/memorymanager/policy_static_test.go` (`TestStaticPolicyGetTopologyHints`,
//! `TestStaticPolicyAllocate`): same scenarios and expected outcomes, with our own machine
//! numbers (the kubelet's tables are written against its checkpoint `NUMANodeMap`, which we do not
//! store; we build the same situation through allocations instead).
//!
//! | kubelet scenario                                                        | result |
//! |-------------------------------------------------------------------------|--------|
//! | no hints for non-Guaranteed pods                                        | match  |
//! | hints from the existing assignment (preferred)                          | match  |
//! | new hints: single nodes preferred, the pair non-preferred               | match  |
//! | request above every single node: only the multi-node group, preferred   | match  |
//! | request fits nowhere: empty hint list ("cannot satisfy")               | match  |
//! | node used by a cross-NUMA group is not offered in another group         | match  |
//! | node used by a single-NUMA assignment is not offered in a group         | match  |
//! | single-node hint on a node of a cross-NUMA group                        | differ: not offered (kubelet offers it, then extends the affinity in Allocate; ours never offers a hint allocation must widen) |
//! | Allocate: nothing for non-Guaranteed                                    | match  |
//! | Allocate: idempotent for an existing container                          | match  |
//! | Allocate: default hint when the TM affinity is nil                      | match  |
//! | Allocate: default hint cannot be computed → error                       | match  |
//! | Allocate: multi-node allocation fills nodes in id order                 | match  |
//! | Allocate: TM affinity too small → extended to a group containing it     | match  |
//! | Allocate: extension impossible → error                                  | match  |
//! | hugepages accounted per node and page size; hugepages leave `memory`    | match  |

use super::*;
use crate::machine::topology::{SyntheticSpec, Topology};
use proptest::prelude::*;

const GI: u64 = 1 << 30;
const MI2: u64 = 2 << 20;

fn machine(nodes: usize, memory_per_node: u64, hugepages_2m_per_node: u64) -> Topology {
    let spec = SyntheticSpec {
        sockets: nodes,
        numa_per_socket: 1,
        l3_per_numa: 1,
        cores_per_l3: 2,
        threads_per_core: 1,
        memory_per_node,
    };
    let mut raw = spec.raw();
    for node in &mut raw.nodes {
        if hugepages_2m_per_node > 0 {
            node.hugepages.insert(MI2, hugepages_2m_per_node);
        }
    }
    Topology::build(&raw).expect("synthetic machine")
}

fn policy(topo: &Topology, reserved_per_node: u64) -> MemoryPolicy {
    let config = MemoryPolicyConfig {
        policy: MemoryPolicyKind::Static,
        reserved: topo.numa_ids().map(|n| (n, reserved_per_node)).collect(),
        reserved_hugepages: BTreeMap::new(),
    };
    MemoryPolicy::new(&config, topo).expect("valid config")
}

fn m(ids: &[usize]) -> NumaMask {
    NumaMask::from_ids(ids.iter().copied()).expect("small ids")
}

fn key(c: &str) -> ContainerKey {
    ContainerKey::new("pod-uid", c)
}

fn g(memory: u64) -> MemoryRequest {
    MemoryRequest {
        guaranteed: true,
        memory,
        hugepages: BTreeMap::new(),
    }
}

fn memory_hints(p: &MemoryPolicy, k: &str, req: &MemoryRequest) -> Option<Vec<TopologyHint>> {
    p.hints(Some(&key(k)), req).get("memory").cloned().flatten()
}

#[test]
fn no_hints_for_non_guaranteed() {
    let topo = machine(2, 8 * GI, 0);
    let p = policy(&topo, GI);
    let req = MemoryRequest {
        guaranteed: false,
        ..g(GI)
    };
    assert!(p.hints(Some(&key("c")), &req).is_empty());
}

#[test]
fn hints_from_existing_assignment() {
    let topo = machine(2, 8 * GI, 0);
    let mut p = policy(&topo, GI);
    assert_eq!(
        p.allocate(&key("c"), &g(GI), Some(m(&[1]))).ok(),
        Some(Some(m(&[1])))
    );
    assert_eq!(
        memory_hints(&p, "c", &g(GI)),
        Some(vec![TopologyHint::new(m(&[1]), true)])
    );
}

#[test]
fn new_hints_single_nodes_preferred() {
    let topo = machine(2, 8 * GI, 0);
    let p = policy(&topo, GI);
    assert_eq!(
        memory_hints(&p, "c", &g(GI)),
        Some(vec![
            TopologyHint::new(m(&[0]), true),
            TopologyHint::new(m(&[1]), true),
            TopologyHint::new(m(&[0, 1]), false),
        ])
    );
}

#[test]
fn request_above_single_nodes_gets_preferred_group() {
    let topo = machine(2, 8 * GI, 0);
    let p = policy(&topo, GI);
    // 7Gi allocatable per node.
    assert_eq!(
        memory_hints(&p, "c", &g(10 * GI)),
        Some(vec![TopologyHint::new(m(&[0, 1]), true)])
    );
    assert_eq!(memory_hints(&p, "c", &g(15 * GI)), Some(vec![]));
}

#[test]
fn groups_are_exclusive() {
    let topo = machine(4, 8 * GI, 0);
    let mut p = policy(&topo, GI);
    // A cross-NUMA container on {0,1}; a single-NUMA container on {2}.
    assert_eq!(
        p.allocate(&key("big"), &g(10 * GI), None),
        Ok(Some(m(&[0, 1])))
    );
    assert_eq!(
        p.allocate(&key("small"), &g(GI), Some(m(&[2]))),
        Ok(Some(m(&[2])))
    );
    let hints = memory_hints(&p, "new", &g(GI)).expect("hints");
    let masks: Vec<NumaMask> = hints.iter().filter_map(|h| h.affinity).collect();
    // {0,1} is offered (same group, 4Gi free), {2}, {3}, {2,3}? no: 2 is in group {2}.
    assert!(masks.contains(&m(&[0, 1])));
    assert!(masks.contains(&m(&[2])) && masks.contains(&m(&[3])));
    assert!(!masks.contains(&m(&[0])), "node 0 belongs to group 0-1");
    assert!(!masks.contains(&m(&[2, 3])), "node 2 belongs to group 2");
    assert!(!masks.contains(&m(&[1, 2])));
    p.check_invariants().expect("invariants");
}

#[test]
fn allocate_non_guaranteed_and_idempotent() {
    let topo = machine(2, 8 * GI, 0);
    let mut p = policy(&topo, GI);
    let be = MemoryRequest {
        guaranteed: false,
        ..g(GI)
    };
    assert_eq!(p.allocate(&key("be"), &be, None), Ok(None));
    assert!(p.assignments().is_empty());
    assert_eq!(p.allocate(&key("c"), &g(GI), None), Ok(Some(m(&[0]))));
    let before = p.clone();
    assert_eq!(
        p.allocate(&key("c"), &g(GI), Some(m(&[1]))),
        Ok(Some(m(&[0])))
    );
    assert_eq!(p, before);
}

#[test]
fn allocate_default_hint_fails_when_nothing_fits() {
    let topo = machine(2, 8 * GI, 0);
    let mut p = policy(&topo, GI);
    let err = p
        .allocate(&key("c"), &g(20 * GI), None)
        .expect_err("too big");
    assert!(err.to_string().contains("pod-uid/c"), "{err}");
}

#[test]
fn allocate_multi_node_fills_in_id_order_and_extends() {
    let topo = machine(2, 8 * GI, 0);
    let mut p = policy(&topo, GI);
    // The topology manager said {1}, which cannot hold 10Gi: extended to {0,1}.
    assert_eq!(
        p.allocate(&key("c"), &g(10 * GI), Some(m(&[1]))),
        Ok(Some(m(&[0, 1])))
    );
    let a = p.assignment(&key("c")).expect("assigned");
    assert_eq!(
        a.taken[&MemoryResource::Memory],
        BTreeMap::from([(0, 7 * GI), (1, 3 * GI)])
    );
    assert_eq!(p.free(1, MemoryResource::Memory), 4 * GI);
    // Node 0 is full and node 1 belongs to group {0,1}: {1} cannot be extended for 5Gi.
    assert!(p.allocate(&key("d"), &g(5 * GI), Some(m(&[1]))).is_err());
}

#[test]
fn hugepages_per_node_and_size() {
    // 8Gi per node of which 1Gi is 512 × 2Mi hugepages.
    let topo = machine(2, 8 * GI, 512);
    let mut p = policy(&topo, GI);
    assert_eq!(p.allocatable(0, MemoryResource::Memory), 6 * GI);
    assert_eq!(p.allocatable(0, MemoryResource::Hugepages(MI2)), GI);
    let req = MemoryRequest {
        guaranteed: true,
        memory: GI,
        hugepages: BTreeMap::from([(MI2, 3 * GI / 2)]),
    };
    let hints = p.hints(None, &req);
    assert_eq!(
        hints.keys().cloned().collect::<Vec<_>>(),
        vec!["hugepages-2Mi".to_string(), "memory".to_string()]
    );
    assert_eq!(
        hints["hugepages-2Mi"],
        Some(vec![TopologyHint::new(m(&[0, 1]), true)])
    );
    assert_eq!(p.allocate(&key("c"), &req, None), Ok(Some(m(&[0, 1]))));
    assert_eq!(p.free(0, MemoryResource::Hugepages(MI2)), 0);
    assert_eq!(p.free(1, MemoryResource::Hugepages(MI2)), GI / 2);
    assert_eq!(p.free_per_node()[&1]["hugepages-2Mi"], GI / 2);
}

#[test]
fn config_errors_name_the_key() {
    let topo = machine(2, 8 * GI, 0);
    let mut config = MemoryPolicyConfig {
        policy: MemoryPolicyKind::Static,
        reserved: BTreeMap::from([(5, GI)]),
        reserved_hugepages: BTreeMap::new(),
    };
    let e = MemoryPolicy::new(&config, &topo).expect_err("unknown node");
    assert!(e.to_string().starts_with("memory.reserved.5:"), "{e}");
    config.reserved = BTreeMap::from([(1, 9 * GI)]);
    let e = MemoryPolicy::new(&config, &topo).expect_err("too much");
    assert!(e.to_string().starts_with("memory.reserved.1:"), "{e}");
    config.reserved = BTreeMap::new();
    assert_eq!(
        MemoryPolicy::new(&config, &topo),
        Err(MemoryConfigError::NoReservation)
    );
    config.policy = MemoryPolicyKind::None;
    assert!(MemoryPolicy::new(&config, &topo).is_ok());
}

#[test]
fn restore_checks_invariants() {
    let topo = machine(2, 8 * GI, 0);
    let mut p = policy(&topo, GI);
    let good = MemoryAssignment {
        nodes: m(&[0]),
        taken: BTreeMap::from([(MemoryResource::Memory, BTreeMap::from([(0, 2 * GI)]))]),
    };
    p.restore(&key("a"), good.clone()).expect("fits");
    p.restore(&key("a"), good).expect("same twice");
    let over = MemoryAssignment {
        nodes: m(&[0]),
        taken: BTreeMap::from([(MemoryResource::Memory, BTreeMap::from([(0, 6 * GI)]))]),
    };
    assert!(matches!(
        p.restore(&key("b"), over),
        Err(MemoryError::OverCommitted { node: 0, .. })
    ));
    let cross = MemoryAssignment {
        nodes: m(&[0, 1]),
        taken: BTreeMap::from([(MemoryResource::Memory, BTreeMap::from([(1, GI)]))]),
    };
    assert!(matches!(
        p.restore(&key("c"), cross),
        Err(MemoryError::GroupConflict { node: 0, .. })
    ));
    assert_eq!(p.assignments().len(), 1);
}

#[derive(Debug, Clone)]
enum Op {
    Alloc(u8, u64, Option<u64>),
    Release(u8),
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..12, 1u64..12, prop::option::of(1u64..16))
            .prop_map(|(c, gib, aff)| Op::Alloc(c, gib, aff)),
        (0u8..12).prop_map(Op::Release),
    ]
}

proptest! {
    #[test]
    fn never_over_committed_and_release_restores(ops in prop::collection::vec(arb_op(), 1..40)) {
        let topo = machine(4, 8 * GI, 0);
        let mut p = policy(&topo, GI);
        for op in ops {
            match op {
                Op::Alloc(c, gib, aff) => {
                    let k = key(&format!("c{c}"));
                    let fresh = p.assignment(&k).is_none();
                    let before = p.clone();
                    let r = p.allocate(&k, &g(gib * GI), aff.map(NumaMask::from_bits));
                    match r {
                        Ok(Some(nodes)) => {
                            prop_assert!(!nodes.is_empty());
                            if fresh {
                                let mut undo = p.clone();
                                undo.release(&k);
                                prop_assert_eq!(&undo, &before);
                            }
                        }
                        Ok(None) => prop_assert!(false, "guaranteed memory is always pinned"),
                        Err(_) => prop_assert_eq!(&p, &before),
                    }
                }
                Op::Release(c) => {
                    p.release(&key(&format!("c{c}")));
                }
            }
            prop_assert!(p.check_invariants().is_ok(), "{:?}", p.check_invariants());
            for n in 0..4 {
                let taken: u64 = p
                    .assignments()
                    .values()
                    .filter_map(|a| a.taken.get(&MemoryResource::Memory))
                    .filter_map(|per| per.get(&n))
                    .sum();
                prop_assert!(taken <= 7 * GI);
            }
        }
    }
}
