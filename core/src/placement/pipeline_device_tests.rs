//! The pipeline with a container's observed devices (`crate::managers::observed_devices`):
//! their NUMA nodes pull its exclusive CPUs and pinned memory, under each topology policy.

use super::tests::{guaranteed, pod};
use super::*;
use crate::machine::topology::SyntheticSpec;
use crate::managers::memory::policy::MemoryPolicyKind;
use crate::managers::observed_devices::DeviceSource;
use crate::managers::topology::hints::TopologyPolicy;

/// 2 sockets × 1 NUMA node × 4 cores (node 0: CPUs 0-3, node 1: 4-7), 8 GiB per node.
pub(in crate::placement) fn two_nodes() -> Topology {
    SyntheticSpec {
        sockets: 2,
        numa_per_socket: 1,
        l3_per_numa: 1,
        cores_per_l3: 4,
        threads_per_core: 1,
        memory_per_node: 8 << 30,
    }
    .build()
}

fn settings(policy: TopologyPolicy) -> PlacementSettings {
    let mut c = PlacementSettings::default();
    c.cpu.policy = CpuPolicyName::Static;
    c.cpu.reserved_cpus = Some(CpuSet::from_iter([0]));
    c.topology.policy = policy;
    c.memory.policy = MemoryPolicyKind::Static;
    c.memory.reserved = BTreeMap::from([(0, 512 << 20)]);
    c
}

fn gpu(id: &str, numa: Option<usize>) -> ObservedDevice {
    ObservedDevice {
        source: DeviceSource::DeviceNode,
        id: id.into(),
        numa,
        numa_unknown: None,
    }
}

fn node(id: usize) -> NumaMask {
    NumaMask::single(id).expect("small")
}

#[test]
fn best_effort_places_cpus_and_memory_on_the_device_s_node() {
    let (mut p, _) = Placement::new(&two_nodes(), &settings(TopologyPolicy::BestEffort)).unwrap();
    let web = pod("web", vec![], vec![guaranteed("app", 2, 0)]);
    let devices = [gpu("/dev/nvidia1", Some(1))];
    let got = p
        .admit_with_devices(Candidate::app(&web), &devices, -1000)
        .unwrap();
    assert!(got.exclusive, "{got:?}");
    assert_eq!(got.cpuset.to_string(), "4-5");
    assert_eq!(got.mems, node(1));
    assert!(got.memory_pinned);
    assert_eq!(got.numa_affinity, Some(node(1)));
    assert_eq!(got.observed_devices, devices.to_vec());
    // Without the device, node 0 would have been taken (lowest first).
    let other = pod("other", vec![], vec![guaranteed("app", 2, 0)]);
    let plain = p.admit(Candidate::app(&other), -1000).unwrap();
    assert_eq!(plain.cpuset.to_string(), "1-2");
    // The assignment records the device; release drops it.
    let key = ContainerKey::new("web", "app");
    let held = p.assignments().get(&key).cloned().unwrap();
    assert_eq!(held.observed_devices, Some(devices.to_vec()));
    assert!(p.release(&key));
    assert!(p.assignments().get(&key).is_none());
    p.check_invariants().unwrap();
}

#[test]
fn a_device_without_locality_gives_no_preference() {
    let (mut p, _) =
        Placement::new(&two_nodes(), &settings(TopologyPolicy::SingleNumaNode)).unwrap();
    let web = pod("web", vec![], vec![guaranteed("app", 2, 0)]);
    let got = p
        .admit_with_devices(Candidate::app(&web), &[gpu("/dev/fuse", None)], -1000)
        .unwrap();
    assert_eq!(got.numa_affinity, Some(node(0)), "{got:?}");
}

#[test]
fn single_numa_node_refuses_devices_on_two_nodes_in_the_kubelet_s_words() {
    let (mut p, _) =
        Placement::new(&two_nodes(), &settings(TopologyPolicy::SingleNumaNode)).unwrap();
    let before = p.assignments();
    let web = pod("web", vec![], vec![guaranteed("app", 2, 0)]);
    let devices = [gpu("/dev/nvidia0", Some(0)), gpu("/dev/nvidia1", Some(1))];
    let err = p
        .admit_with_devices(Candidate::app(&web), &devices, -1000)
        .unwrap_err();
    assert_eq!(err.kubelet_reason(), "TopologyAffinityError");
    assert!(
        err.message.starts_with(
            "TopologyAffinityError: container app of pod ns/web asks 2 exclusive CPUs, memory 1Gi; \
             free per NUMA node: node0 cpu 3 memory 7680Mi, node1 cpu 4 memory 8Gi; devices given: \
             /dev/nvidia0 (device-node, numa 0), /dev/nvidia1 (device-node, numa 1); topology \
             manager policy single-numa-node cannot align them"
        ),
        "{}",
        err.message
    );
    assert!(
        err.error.to_string().contains("devices: 2"),
        "{}",
        err.error
    );
    assert_eq!(p.assignments(), before, "a refusal changes nothing");
}

#[test]
fn restricted_refuses_when_the_cpus_do_not_fit_on_the_device_s_node() {
    let (mut p, _) = Placement::new(&two_nodes(), &settings(TopologyPolicy::Restricted)).unwrap();
    // Node 1 has 4 CPUs; 4 of them fit (its preferred hint), 5 do not.
    let devices = [gpu("/dev/nvidia1", Some(1))];
    let fits = pod("fits", vec![], vec![guaranteed("app", 4, 0)]);
    let got = p
        .admit_with_devices(Candidate::app(&fits), &devices, -1000)
        .unwrap();
    assert_eq!(got.cpuset.to_string(), "4-7");
    let more = pod("more", vec![], vec![guaranteed("app", 2, 0)]);
    let err = p
        .admit_with_devices(Candidate::app(&more), &devices, -1000)
        .unwrap_err();
    assert_eq!(err.kubelet_reason(), "TopologyAffinityError", "{err}");
    // best-effort admits the same container off the device's node.
    let (mut p, _) = Placement::new(&two_nodes(), &settings(TopologyPolicy::BestEffort)).unwrap();
    p.admit_with_devices(Candidate::app(&fits), &devices, -1000)
        .unwrap();
    let got = p
        .admit_with_devices(Candidate::app(&more), &devices, -1000)
        .unwrap();
    assert_eq!(got.cpuset.to_string(), "1-2", "{got:?}");
}

#[test]
fn a_restart_restores_the_device_set_from_the_state_file() {
    let c = settings(TopologyPolicy::BestEffort);
    let (mut before, _) = Placement::new(&two_nodes(), &c).unwrap();
    let web = pod("web", vec![], vec![guaranteed("app", 2, 0)]);
    let devices = [gpu("/dev/nvidia1", Some(1))];
    let got = before
        .admit_with_devices(Candidate::app(&web), &devices, -1000)
        .unwrap();
    let saved = before.assignments();
    let (mut after, _) = Placement::new(&two_nodes(), &c).unwrap();
    after.load_saved_assignments(saved.clone());
    let container = crate::placement::nri_container::NriContainer {
        namespace: web.namespace.clone(),
        name: web.name.clone(),
        uid: web.uid.clone(),
        class: crate::kube::qos::class(&web),
        role: None,
        container: web.containers[0].clone(),
    };
    let running = crate::placement::reconcile::RunningContainer {
        id: "ctr",
        container: &container,
        cpuset: Some(&got.cpuset),
    };
    let out = after.reconcile(&[running], -1000);
    assert_eq!(out.targets[0].observed_devices, devices.to_vec());
    assert_eq!(after.assignments(), saved);
}

/// A container with nothing to align (no exclusive CPUs, no pinned memory) is never refused for
/// the devices it holds: they give it no hint, and are recorded all the same.
#[test]
fn a_shared_container_is_not_refused_for_its_devices() {
    let (mut p, _) =
        Placement::new(&two_nodes(), &settings(TopologyPolicy::SingleNumaNode)).unwrap();
    let mut web = pod("web", vec![], vec![guaranteed("app", 1, 0)]);
    // Burstable: a CPU request, no limits.
    web.containers[0].limits = Default::default();
    let devices = [gpu("/dev/nvidia0", Some(0)), gpu("/dev/nvidia1", Some(1))];
    let got = p
        .admit_with_devices(Candidate::app(&web), &devices, -1000)
        .unwrap();
    assert!(!got.exclusive && got.numa_affinity.is_none(), "{got:?}");
    assert_eq!(got.observed_devices, devices.to_vec());
}
