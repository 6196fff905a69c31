//! Property tests of the whole admission pipeline (`topolet_core::placement::Placement`) and of restart
//! reconciliation (`Placement::reconcile`).
//!
//! Random sequences of admit (every QoS class, init containers, sidecars, memory, hugepages and a
//! device), release, release_pod and resize, under random configurations, on five machine shapes.
//! After every step: no CPU in two exclusive assignments, reserved CPUs never handed out, the
//! shared pool is all − reserved (strict) − exclusive, exclusive ⊆ online, `check_invariants`.
//! Per step: a refused admission changes nothing, release / release_pod restore the exact prior
//! assignments, resize keeps CPUs, cpuset.mems follows the memory rule. Per sequence:
//! determinism, restart reconciliation reproduces the exclusive assignments, corrupted runtime
//! views never double-grant and are reported.

// Test code throughout: clippy's `allow-unwrap-in-tests` (clippy.toml) covers the #[test]
// functions, not the helpers they share here.
#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::collections::BTreeMap;

use proptest::prelude::*;
use topolet::config::{
    Config, CpuPolicyName, MemoryPolicyName, TopologyPolicyName, TopologyScopeName,
};
use topolet_core::kube::container_key::ContainerKey;
use topolet_core::kube::pod::{Container, ContainerRef, ContainerRestartPolicy, Pod, ResourceList};
use topolet_core::kube::qos;
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::machine::topology::{Device, SyntheticSpec, Topology};
use topolet_core::managers::topology::hints::NumaMask;
use topolet_core::placement::assignments::Assignments;
use topolet_core::placement::nri_container::NriContainer;
use topolet_core::placement::reconcile::RunningContainer;
use topolet_core::placement::{Candidate, ContainerResources, Placement};

const MI: u64 = 1 << 20;
const GI: u64 = 1 << 30;
const NIC: &str = "example.com/nic";
const HUGE_2M: u64 = 2 * MI;

// ---------------------------------------------------------------------------------------------
// Machines and configurations
// ---------------------------------------------------------------------------------------------

fn shapes() -> [SyntheticSpec; 5] {
    let s = |sockets, numa_per_socket, l3_per_numa, cores_per_l3, threads_per_core| SyntheticSpec {
        sockets,
        numa_per_socket,
        l3_per_numa,
        cores_per_l3,
        threads_per_core,
        memory_per_node: 4 * GI,
    };
    [
        s(1, 1, 1, 2, 1),  // the CI host: 1 socket, 2 cpus
        s(2, 1, 1, 24, 2), // 2 sockets × 24 cores × 2 threads
        s(2, 2, 1, 6, 2),  // 2 sockets × 2 NUMA nodes (SNC)
        s(1, 1, 8, 4, 2),  // 1 socket, 8 L3 groups
        s(4, 2, 2, 4, 2),  // bigger: 8 NUMA nodes, 256 cpus
    ]
}

/// The shape with 256 MiB of 2 MiB hugepages and one NIC per node.
fn machine(shape: usize) -> Topology {
    let mut raw = shapes()[shape].raw();
    for node in &mut raw.nodes {
        node.hugepages.insert(HUGE_2M, 128);
    }
    raw.devices = raw
        .nodes
        .iter()
        .map(|n| Device {
            address: format!("0000:{:02x}:00.0", n.id + 1),
            numa: Some(n.id),
        })
        .collect();
    Topology::build(&raw).expect("consistent")
}

#[derive(Debug, Clone)]
struct Cfg {
    static_cpu: bool,
    /// 0 none, 1 count, 2 explicit list.
    reserved_kind: u8,
    reserved_count: usize,
    strict: bool,
    /// 0 none, 1 full_pcpus_only, 2 distribute across numa, 3 uncore cache, 4 across cores.
    option: u8,
    topology: u8,
    pod_scope: bool,
    memory_static: bool,
}

fn cfg_strategy() -> impl Strategy<Value = Cfg> {
    (
        prop::bool::weighted(0.85),
        0u8..3,
        1usize..5,
        any::<bool>(),
        0u8..5,
        0u8..4,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(
                static_cpu,
                reserved_kind,
                reserved_count,
                strict,
                option,
                topology,
                pod_scope,
                memory_static,
            )| Cfg {
                static_cpu,
                reserved_kind,
                reserved_count,
                strict,
                option,
                topology,
                pod_scope,
                memory_static,
            },
        )
}

fn config(c: &Cfg, topo: &Topology) -> Config {
    let mut config = Config::default();
    let n = topo.num_cpus();
    config.cpu.policy = if c.static_cpu {
        CpuPolicyName::Static
    } else {
        CpuPolicyName::None
    };
    match c.reserved_kind {
        1 => config.cpu.reserved_cpu_count = Some(c.reserved_count.min(n - 1)),
        2 if n > 2 => config.cpu.reserved_cpus = Some(format!("0,{}", n / 2)),
        2 => config.cpu.reserved_cpus = Some("0".into()),
        _ => {}
    }
    if c.static_cpu {
        config.cpu.strict_cpu_reservation = c.strict;
        match c.option {
            1 => config.cpu.full_pcpus_only = true,
            2 => config.cpu.distribute_cpus_across_numa = true,
            3 => config.cpu.prefer_align_cpus_by_uncorecache = true,
            4 => config.cpu.distribute_cpus_across_cores = true,
            _ => {}
        }
    }
    config.topology.policy = [
        TopologyPolicyName::None,
        TopologyPolicyName::BestEffort,
        TopologyPolicyName::Restricted,
        TopologyPolicyName::SingleNumaNode,
    ][c.topology as usize];
    config.topology.scope = if c.pod_scope {
        TopologyScopeName::Pod
    } else {
        TopologyScopeName::Container
    };
    if c.memory_static {
        config.memory.policy = MemoryPolicyName::Static;
        for node in topo.numa_ids() {
            config
                .memory
                .reserved
                .insert(node.to_string(), "512Mi".into());
        }
    }
    config.devices.insert(
        NIC.into(),
        topo.devices().iter().map(|d| d.address.clone()).collect(),
    );
    config
}

// ---------------------------------------------------------------------------------------------
// Pods
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Qos {
    GuaranteedInteger,
    GuaranteedFractional,
    Burstable,
    BestEffort,
}

#[derive(Debug, Clone)]
struct PodSpec {
    qos: Qos,
    /// (cpu units, memory units, hugepages units, nic) per container: init, sidecar, apps.
    init: Option<(u64, u64, u64, bool)>,
    sidecar: Option<(u64, u64, u64, bool)>,
    apps: Vec<(u64, u64, u64, bool)>,
}

fn res_strategy() -> impl Strategy<Value = (u64, u64, u64, bool)> {
    (1u64..6, 1u64..8, 0u64..3, prop::bool::weighted(0.15))
}

fn pod_strategy() -> impl Strategy<Value = PodSpec> {
    (
        prop_oneof![
            4 => Just(Qos::GuaranteedInteger),
            2 => Just(Qos::GuaranteedFractional),
            2 => Just(Qos::Burstable),
            1 => Just(Qos::BestEffort),
        ],
        prop::option::weighted(0.3, res_strategy()),
        prop::option::weighted(0.25, res_strategy()),
        prop::collection::vec(res_strategy(), 1..3),
    )
        .prop_map(|(qos, init, sidecar, apps)| PodSpec {
            qos,
            init,
            sidecar,
            apps,
        })
}

/// Requests and limits of one container of class `qos`: `cpu` whole cpus (plus 500m when
/// fractional), `mem` × 192 MiB, `huge` × 32 MiB of 2 MiB pages, one NIC when `nic`.
fn resources(qos: Qos, cpu: u64, mem: u64, huge: u64, nic: bool) -> (ResourceList, ResourceList) {
    let mut r = ResourceList::default();
    match qos {
        Qos::BestEffort => return (r.clone(), r),
        Qos::GuaranteedInteger => r.cpu_millis = Some(cpu * 1000),
        Qos::GuaranteedFractional => r.cpu_millis = Some(cpu * 1000 - 500),
        Qos::Burstable => r.cpu_millis = Some(cpu * 250),
    }
    r.memory_bytes = Some(mem * 192 * MI);
    if huge > 0 {
        r.hugepages.insert(HUGE_2M, huge * 32 * MI);
    }
    if nic {
        r.extended.insert(NIC.into(), 1);
    }
    let limits = match qos {
        Qos::Burstable => ResourceList {
            cpu_millis: None,
            memory_bytes: None,
            ..r.clone()
        },
        _ => r.clone(),
    };
    (r, limits)
}

fn container(
    name: &str,
    qos: Qos,
    res: (u64, u64, u64, bool),
    restart: Option<ContainerRestartPolicy>,
) -> Container {
    let (requests, limits) = resources(qos, res.0, res.1, res.2, res.3);
    Container {
        name: name.into(),
        requests,
        limits,
        restart_policy: restart,
    }
}

fn build_pod(i: usize, s: &PodSpec) -> Pod {
    let mut init = Vec::new();
    if let Some(r) = s.init {
        init.push(container("init", s.qos, r, None));
    }
    if let Some(r) = s.sidecar {
        init.push(container(
            "sidecar",
            s.qos,
            r,
            Some(ContainerRestartPolicy::Always),
        ));
    }
    Pod {
        namespace: "ns".into(),
        name: format!("pod{i}"),
        uid: format!("uid-{i:03}"),
        init_containers: init,
        containers: s
            .apps
            .iter()
            .enumerate()
            .map(|(j, &r)| container(&format!("app{j}"), s.qos, r, None))
            .collect(),
        ..Default::default()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Admit(PodSpec),
    /// Release the n-th admitted container (mod the count).
    Release(usize),
    /// Release the n-th admitted pod.
    ReleasePod(usize),
    /// Resize the first app container of the n-th admitted pod to this many cpu units.
    Resize(usize, u64),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => pod_strategy().prop_map(Op::Admit),
        2 => any::<usize>().prop_map(Op::Release),
        1 => any::<usize>().prop_map(Op::ReleasePod),
        2 => (any::<usize>(), 1u64..7).prop_map(|(i, c)| Op::Resize(i, c)),
    ]
}

// ---------------------------------------------------------------------------------------------
// The model the run keeps: which containers run, with which pod spec
// ---------------------------------------------------------------------------------------------

struct Live {
    /// Pod uid → the pod as it now is (resizes applied).
    pods: BTreeMap<String, Pod>,
    /// Admitted containers: key → (pod uid, which).
    containers: BTreeMap<ContainerKey, (String, ContainerRef)>,
}

fn key_of(pod: &Pod, c: &Container) -> ContainerKey {
    ContainerKey::new(pod.uid.clone(), c.name.clone())
}

fn without(a: &Assignments, key: &ContainerKey) -> Assignments {
    Assignments {
        containers: a
            .containers
            .iter()
            .filter(|e| e.key() != *key)
            .cloned()
            .collect(),
    }
}

fn nodes_of(topo: &Topology, cpus: &CpuSet) -> NumaMask {
    NumaMask::from_ids(topo.numa_nodes_of(cpus)).unwrap_or_default()
}

/// The invariants that hold after every step.
fn check_state(p: &Placement, strict: bool, static_cpu: bool) -> Result<(), TestCaseError> {
    p.check_invariants()
        .map_err(|e| TestCaseError::fail(format!("check_invariants: {e}")))?;
    let online = p.topology().cpus().clone();
    let reserved = p.reserved().clone();
    let mut seen = CpuSet::new();
    for (k, set) in p.exclusive() {
        prop_assert!(
            set.is_disjoint(&seen),
            "{k}: {} also held elsewhere",
            set.intersection(&seen)
        );
        prop_assert!(set.is_disjoint(&reserved), "{k} holds reserved cpus");
        prop_assert!(set.is_subset(&online), "{k} holds offline cpus");
        prop_assert!(!set.is_empty(), "{k} holds nothing");
        seen.extend_from(set);
    }
    if static_cpu {
        let mut expect = online.difference(&seen);
        if strict {
            expect.remove_all(&reserved);
        }
        prop_assert_eq!(p.shared_pool(), expect);
    } else {
        prop_assert!(p.exclusive().is_empty());
        prop_assert_eq!(p.shared_pool(), online);
    }
    Ok(())
}

/// The cpuset.mems rule of one admitted container, at admission time.
fn check_mems(
    p: &Placement,
    key: &ContainerKey,
    r: &ContainerResources,
) -> Result<(), TestCaseError> {
    let topo = p.topology();
    let pinned = p.assignments().get(key).and_then(|a| a.memory.clone());
    prop_assert_eq!(r.memory_pinned, pinned.is_some(), "{}", key);
    if let Some(m) = &pinned {
        // Pinned memory: exactly the memory manager's group, which holds the merged affinity
        // (or, without one, the container's own CPUs' nodes).
        prop_assert_eq!(r.mems, m.nodes, "{}", key);
        match r.numa_affinity {
            Some(a) => prop_assert!(
                a.is_subset_of(r.mems),
                "{key}: mems {} ⊉ affinity {a}",
                r.mems
            ),
            None if r.exclusive => {
                let own = nodes_of(topo, &r.cpuset);
                prop_assert!(
                    own.is_subset_of(r.mems),
                    "{key}: mems {} ⊉ cpus' nodes {own}",
                    r.mems
                )
            }
            None => {}
        }
    } else if r.exclusive {
        let own = nodes_of(topo, &r.cpuset);
        prop_assert!(
            own.is_subset_of(r.mems),
            "{key}: mems {} ⊉ cpus' nodes {own}",
            r.mems
        );
        if let Some(a) = r.numa_affinity {
            prop_assert!(
                r.mems == own || r.mems == a,
                "{key}: mems {} neither cpus' nodes nor affinity",
                r.mems
            );
        }
    } else {
        prop_assert_eq!(r.cpuset.clone(), p.shared_pool());
        prop_assert_eq!(r.mems, p.shared_mems());
    }
    Ok(())
}

/// Everything a run observed, for the determinism check.
type Trace = Vec<String>;

/// Runs `ops` on a fresh placement, checking the per-step properties; returns the trace, the
/// placement and the model.
fn run(
    topo: &Topology,
    cfg: &Cfg,
    ops: &[Op],
) -> Result<Option<(Trace, Placement, Live)>, TestCaseError> {
    let config = config(cfg, topo);
    let mut p = match config.placement().and_then(|s| Placement::new(topo, &s)) {
        Ok((p, _)) => p,
        Err(e) => {
            prop_assert!(e.is_config(), "not a config error: {e}");
            return Ok(None);
        }
    };
    let static_cpu = cfg.static_cpu;
    let strict = cfg.strict && static_cpu;
    let mut trace = Trace::new();
    let mut live = Live {
        pods: BTreeMap::new(),
        containers: BTreeMap::new(),
    };
    check_state(&p, strict, static_cpu)?;
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Admit(spec) => {
                let pod = build_pod(i, spec);
                let before_pod = p.assignments();
                let before_pod_shared = p.shared_pool();
                let refs: Vec<ContainerRef> = pod.all_containers().map(|(r, _)| r).collect();
                for which in refs {
                    let c = pod.container(which).unwrap().clone();
                    let key = key_of(&pod, &c);
                    let before = p.assignments();
                    let before_shared = p.shared_pool();
                    let snapshot = p.clone();
                    match p.admit(Candidate::Pod { pod: &pod, which }, -1000) {
                        Ok(r) => {
                            trace.push(format!("admit {key}: {r:?}"));
                            check_mems(&p, &key, &r)?;
                            if r.exclusive {
                                prop_assert_eq!(p.exclusive().get(&key), Some(&r.cpuset));
                            }
                            let after = p.assignments();
                            // Release right away restores the exact prior state, unless the
                            // admission took CPUs over from the pod's init container.
                            let others_kept = without(&after, &key) == before;
                            if others_kept {
                                let mut undo = p.clone();
                                undo.release(&key);
                                prop_assert_eq!(
                                    undo.assignments(),
                                    before.clone(),
                                    "release {}",
                                    key
                                );
                                prop_assert_eq!(undo.shared_pool(), before_shared);
                            } else {
                                // Only init containers of the same pod give CPUs away.
                                for e in &before.containers {
                                    if after.get(&e.key()) != Some(e) {
                                        prop_assert_eq!(&e.pod_uid, &pod.uid);
                                        prop_assert_eq!(&e.container, "init");
                                    }
                                }
                            }
                            live.containers.insert(key, (pod.uid.clone(), which));
                        }
                        Err(e) => {
                            trace.push(format!("refuse {key}: {e}"));
                            prop_assert!(!e.error.is_config(), "{e}");
                            prop_assert_eq!(
                                p.assignments(),
                                before,
                                "refused {} changed state",
                                key
                            );
                            prop_assert_eq!(p.shared_pool(), before_shared);
                            prop_assert_eq!(p.exclusive(), snapshot.exclusive());
                        }
                    }
                    check_state(&p, strict, static_cpu)?;
                }
                // release_pod undoes the whole pod.
                let mut undo = p.clone();
                undo.release_pod(&pod.uid);
                prop_assert_eq!(undo.assignments(), before_pod, "release_pod {}", pod.uid);
                prop_assert_eq!(undo.shared_pool(), before_pod_shared);
                live.pods.insert(pod.uid.clone(), pod);
            }
            Op::Release(n) => {
                if live.containers.is_empty() {
                    continue;
                }
                let key = live
                    .containers
                    .keys()
                    .nth(n % live.containers.len())
                    .unwrap()
                    .clone();
                let before = p.assignments();
                let held = p.exclusive().get(&key).cloned();
                let shared_before = p.shared_pool();
                let had = p.release(&key);
                trace.push(format!("release {key}: {had}"));
                prop_assert_eq!(had, before.get(&key).is_some());
                prop_assert_eq!(p.assignments(), without(&before, &key));
                if let (Some(set), true) = (held, static_cpu) {
                    prop_assert_eq!(p.shared_pool(), shared_before.union(&set));
                }
                live.containers.remove(&key);
            }
            Op::ReleasePod(n) => {
                if live.pods.is_empty() {
                    continue;
                }
                let uid = live.pods.keys().nth(n % live.pods.len()).unwrap().clone();
                let before = p.assignments();
                p.release_pod(&uid);
                trace.push(format!("release_pod {uid}"));
                let expect = Assignments {
                    containers: before
                        .containers
                        .iter()
                        .filter(|a| a.pod_uid != uid)
                        .cloned()
                        .collect(),
                };
                prop_assert_eq!(p.assignments(), expect);
                live.pods.remove(&uid);
                live.containers.retain(|_, (u, _)| *u != uid);
            }
            Op::Resize(n, cpu) => {
                let candidates: Vec<String> = live
                    .pods
                    .iter()
                    .filter(|(_, pod)| {
                        live.containers
                            .contains_key(&key_of(pod, &pod.containers[0]))
                    })
                    .map(|(u, _)| u.clone())
                    .collect();
                if candidates.is_empty() {
                    continue;
                }
                let uid = &candidates[n % candidates.len()];
                let mut pod = live.pods[uid].clone();
                let c = &mut pod.containers[0];
                let key = ContainerKey::new(uid.clone(), c.name.clone());
                let millis = c.requests.cpu_millis.map(|m| {
                    if m % 1000 == 0 {
                        cpu * 1000
                    } else if m % 500 == 0 && m % 1000 != 0 && c.limits.cpu_millis.is_some() {
                        cpu * 1000 - 500
                    } else {
                        cpu * 250
                    }
                });
                c.requests.cpu_millis = millis;
                if c.limits.cpu_millis.is_some() {
                    c.limits.cpu_millis = millis;
                }
                let before = p.assignments();
                let held = p.exclusive().get(&key).cloned();
                match p.resize(Candidate::app(&pod), -1000) {
                    Ok(r) => {
                        trace.push(format!("resize {key}: {r:?}"));
                        if let (Some(old), true) = (&held, r.exclusive) {
                            // KEP-5554: growing keeps every CPU, shrinking keeps a subset.
                            prop_assert!(
                                old.is_subset(&r.cpuset) || r.cpuset.is_subset(old),
                                "{key}: resize {old} -> {}",
                                r.cpuset
                            );
                        }
                        if r.exclusive {
                            prop_assert_eq!(p.exclusive().get(&key), Some(&r.cpuset));
                            prop_assert_eq!(r.cpuset.len() as u64, *cpu);
                        } else {
                            prop_assert!(p.exclusive().get(&key).is_none());
                        }
                        live.pods.insert(uid.clone(), pod);
                    }
                    Err(e) => {
                        trace.push(format!("resize refused {key}: {e}"));
                        prop_assert_eq!(
                            p.assignments(),
                            before,
                            "refused resize {} changed state",
                            key
                        );
                    }
                }
            }
        }
        check_state(&p, strict, static_cpu)?;
    }
    trace.push(format!("final {:?}", p.assignments()));
    Ok(Some((trace, p, live)))
}

/// What the runtime would report after a topolet restart: every running container (app
/// containers and sidecars; plain init containers have finished) with the cpuset it was given.
/// A running container as the test owns it ([`RunningContainer`] borrows from it).
#[derive(Debug, Clone)]
struct Running {
    id: String,
    container: NriContainer,
    cpuset: Option<CpuSet>,
}

fn borrowed(running: &[Running]) -> Vec<RunningContainer<'_>> {
    running
        .iter()
        .map(|r| RunningContainer {
            id: &r.id,
            container: &r.container,
            cpuset: r.cpuset.as_ref(),
        })
        .collect()
}

fn running_view(p: &Placement, live: &Live) -> Vec<Running> {
    let mut out = Vec::new();
    for (key, (uid, which)) in &live.containers {
        let pod = &live.pods[uid];
        let c = pod.container(*which).unwrap().clone();
        if matches!(which, ContainerRef::Init(_)) && !c.is_restartable() {
            continue;
        }
        let cpuset = p
            .exclusive()
            .get(key)
            .cloned()
            .unwrap_or_else(|| p.shared_pool());
        // NRI's view: the class the pod's cgroup path names, this container alone.
        let alone = Pod {
            init_containers: Vec::new(),
            containers: vec![c.clone()],
            ..pod.clone()
        };
        out.push(Running {
            id: format!("ctr-{}-{}", key.pod_uid, key.container),
            container: NriContainer {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                uid: pod.uid.clone(),
                class: qos::class(&alone),
                role: None,
                container: c,
            },
            cpuset: Some(cpuset),
        });
    }
    out
}

fn no_cpu_twice(p: &Placement) -> Result<(), TestCaseError> {
    let mut seen = CpuSet::new();
    for (k, set) in p.exclusive() {
        prop_assert!(set.is_disjoint(&seen), "{k}: double grant");
        seen.extend_from(set);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn pipeline_properties(
        shape in 0usize..5,
        cfg in cfg_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..28),
        corrupt in (any::<usize>(), any::<usize>(), 0u8..3),
    ) {
        let topo = machine(shape);
        let Some((trace, p, live)) = run(&topo, &cfg, &ops)? else { return Ok(()); };

        // Determinism: the same sequence on a fresh placement gives the same everything.
        let (trace2, p2, _) = run(&topo, &cfg, &ops)?.expect("config accepted once");
        prop_assert_eq!(&trace, &trace2);
        prop_assert_eq!(p.assignments(), p2.assignments());

        // Restart safety: a fresh placement reconciling the running set reproduces every
        // running container's exclusive CPUs.
        let config = config(&cfg, &topo);
        let running = running_view(&p, &live);
        let expect: BTreeMap<ContainerKey, CpuSet> = p
            .exclusive()
            .iter()
            .filter(|(k, _)| live.containers.get(*k).is_some_and(|(u, w)| {
                !matches!(w, ContainerRef::Init(_))
                    || live.pods[u].container(*w).unwrap().is_restartable()
            }))
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        let (mut fresh, _) = Placement::new(&topo, &config.placement().unwrap()).unwrap();
        let rec = fresh.reconcile(&borrowed(&running), -1000);
        prop_assert_eq!(fresh.exclusive(), &expect, "notes: {:?}", rec.notes);
        prop_assert!(rec.notes.is_empty(), "clean restart gave notes {:?}", rec.notes);
        fresh.check_invariants().map_err(|e| TestCaseError::fail(e.to_string()))?;
        no_cpu_twice(&fresh)?;
        prop_assert_eq!(rec.targets.len(), running.len());
        for (rc, r) in running.iter().zip(&rec.targets) {
            let id = &rc.id;
            let key = rc.container.key();
            prop_assert_eq!(r.exclusive, expect.contains_key(&key), "{}", id);
            if let Some(set) = expect.get(&key) {
                prop_assert_eq!(&r.cpuset, set);
            }
        }
        // Reconciling the original with its own view changes nothing either.
        let mut same = p.clone();
        same.reconcile(&borrowed(&running), -1000);
        prop_assert_eq!(same.exclusive(), &expect);

        // Corrupted views: two containers claiming the same CPUs, a container on reserved CPUs,
        // a size that does not match. Never a double grant; each correction is reported.
        let exclusive_ids: Vec<usize> = running
            .iter()
            .enumerate()
            .filter(|(_, r)| expect.contains_key(&r.container.key()))
            .map(|(i, _)| i)
            .collect();
        if !exclusive_ids.is_empty() {
            let mut bad = running.clone();
            let a = exclusive_ids[corrupt.0 % exclusive_ids.len()];
            let b = exclusive_ids[corrupt.1 % exclusive_ids.len()];
            let applied = match corrupt.2 {
                0 if a != b => {
                    bad[b].cpuset = bad[a].cpuset.clone();
                    true
                }
                1 if !p.reserved().is_empty() => {
                    let n = bad[a].cpuset.as_ref().unwrap().len();
                    let mut s = p.reserved().clone();
                    s.extend_from(bad[a].cpuset.as_ref().unwrap());
                    bad[a].cpuset = Some(s.lowest(n));
                    true
                }
                2 => {
                    let own = bad[a].cpuset.clone().unwrap();
                    let extra = p.shared_pool().difference(p.reserved()).first();
                    bad[a].cpuset = Some(match extra {
                        Some(c) => { let mut s = own.clone(); s.insert(c); s }
                        None => own.lowest(own.len().saturating_sub(1)),
                    });
                    bad[a].cpuset.as_ref() != Some(&own)
                }
                _ => false,
            };
            let (mut fresh, _) = Placement::new(&topo, &config.placement().unwrap()).unwrap();
            let rec = fresh.reconcile(&borrowed(&bad), -1000);
            fresh.check_invariants().map_err(|e| TestCaseError::fail(e.to_string()))?;
            no_cpu_twice(&fresh)?;
            let reserved = fresh.reserved().clone();
            for (k, s) in fresh.exclusive() {
                prop_assert!(s.is_disjoint(&reserved), "{k} got reserved cpus");
            }
            if applied {
                prop_assert!(!rec.notes.is_empty(), "corruption {} not reported", corrupt.2);
            }
            // Every exclusive grant in the result is a container's own, disjoint from the rest.
            let mut seen = CpuSet::new();
            for (rc, r) in bad.iter().zip(&rec.targets) {
                let id = &rc.id;
                if r.exclusive {
                    prop_assert!(r.cpuset.is_disjoint(&seen), "{id} double granted");
                    seen.extend_from(&r.cpuset);
                }
            }
        }
    }
}
