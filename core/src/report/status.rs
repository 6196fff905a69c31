//! `topolet status`: the model of a status report (what the admin socket answers, what
//! `topolet status -o json` prints) and how it is derived from the machine and a snapshot of the
//! placement. Data only: the human table is `topolet::introspection::status_table`.
//!
//! Pure: the shell takes a [`Snapshot`] under the plugin's lock (clones of a few sets), and
//! everything expensive — per-node breakdowns, the largest aligned free blocks — happens here,
//! outside the lock.
//!
//! "Largest aligned block" is the exclusive allocation topolet could still make without splitting
//! a core: per NUMA node, the whole free cores (every thread free) and, among them, the biggest
//! group sharing one L3 cache. A Guaranteed container asking for more than that cannot be both
//! core- and cache-aligned on the node.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::kube::container_key::ContainerKey;
use crate::machine::cpuset::CpuSet;
use crate::machine::topology::Topology;
use crate::managers::observed_devices::ObservedDevice;
use crate::managers::topology::hints::NumaMask;
use crate::managers::topology::manager::FreePerNode;

/// What the shell copies under the plugin's lock: plain values, no formatting.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub reserved: CpuSet,
    pub shared: CpuSet,
    pub shared_mems: NumaMask,
    /// CPUs still free for exclusive use (all − reserved − exclusive).
    pub assignable: CpuSet,
    pub exclusive: Vec<ExclusiveInput>,
    /// Free capacity per node of every provider (`cpu` in millicores, `memory` in bytes, …).
    pub free: FreePerNode,
    /// Containers topolet manages.
    pub managed: usize,
    /// Containers someone else placed at creation (left alone).
    pub left_alone: usize,
    /// Which source decided each managed container, ordered by pod and container.
    pub admissions: Vec<crate::placement::admission_input::AdmissionRecord>,
    /// Containers that may run on CPUs another holds exclusively (`crate::placement::breach`), as the shell
    /// dated them.
    pub breaches: Vec<BreachStatus>,
    /// Containers given devices (their device set, as held by the placement).
    pub devices: Vec<DevicesInput>,
}

/// One container's device set, as held by the placement, and where it was placed.
#[derive(Debug, Clone)]
pub struct DevicesInput {
    pub key: ContainerKey,
    /// `namespace/pod`, when the container is known from NRI.
    pub pod_ref: Option<String>,
    /// containerd's container id, when known.
    pub id: Option<String>,
    pub devices: Vec<ObservedDevice>,
    /// The topology manager's merged NUMA affinity, when it chose one.
    pub affinity: Option<NumaMask>,
    /// Its exclusive CPUs, if any.
    pub cpus: Option<CpuSet>,
    /// Its `cpuset.mems`, when known.
    pub mems: Option<NumaMask>,
}

/// One container's exclusive CPUs, as held by the placement.
#[derive(Debug, Clone)]
pub struct ExclusiveInput {
    pub key: ContainerKey,
    /// `namespace/pod`, when the container is known from NRI.
    pub pod_ref: Option<String>,
    /// containerd's container id, when known.
    pub id: Option<String>,
    pub cpus: CpuSet,
    pub mems: Option<NumaMask>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// topolet's version.
    pub version: String,
    pub policies: Policies,
    pub machine: Machine,
    pub reserved: CpuSet,
    pub shared: SharedPool,
    /// One entry per NUMA node, ascending id.
    pub numa_nodes: Vec<NumaStatus>,
    /// Containers with exclusive CPUs, ordered by name.
    pub exclusive: Vec<ExclusiveContainer>,
    pub managed_containers: usize,
    pub left_alone_containers: usize,
    pub nri: NriStatus,
    /// Node pressure conditions and eviction signals; `None` while no eviction loop reports them.
    pub pressure: Option<Pressure>,
    /// The address `/metrics` is served on, when enabled and listening.
    pub metrics_address: Option<String>,
    /// Per managed container: which source decided (the pod watch's spec or the inversion).
    #[serde(default)]
    pub admissions: Vec<crate::placement::admission_input::AdmissionRecord>,
    /// Containers that may run, now, on CPUs another container holds exclusively: the runtime
    /// has not applied their new cpuset yet (`crate::placement::breach`). Empty when none.
    #[serde(default)]
    pub breaches: Vec<BreachStatus>,
    /// Reclaimed CPU (`crate::reclaimed`): `None` until its loop has reported.
    #[serde(default)]
    pub reclaimed: Option<crate::reclaimed::ReclaimedStatus>,
    /// Containers given devices, ordered by name: which devices, from which source, on which
    /// NUMA nodes, and where that pulled the container's CPUs and memory.
    #[serde(default)]
    pub devices: Vec<ContainerDevices>,
    /// The kubelet's PodResources API as a device source; `None` when it is not configured.
    #[serde(default)]
    pub pod_resources: Option<PodResourcesStatus>,
    /// The watch of this node's DRA ResourceSlices; `None` without the API client.
    #[serde(default)]
    pub resource_slices: Option<ResourceSlicesStatus>,
    /// topolet's own PodResources socket; `None` when it is not configured.
    #[serde(default)]
    pub pod_resources_export: Option<PodResourcesExportStatus>,
}

/// topolet's PodResources re-export (the shell's `topolet::kubelet::reexport`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodResourcesExportStatus {
    /// The socket served.
    pub socket: String,
    /// `serving`, or `failed` (not served: [`PodResourcesExportStatus::error`] says why).
    pub state: String,
    /// Why it is not served, naming the path and what failed.
    pub error: Option<String>,
}

/// The kubelet's PodResources API as a device source (the shell's `topolet::kubelet`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodResourcesStatus {
    /// The kubelet's socket.
    pub socket: String,
    /// `not-asked` (no call yet), `answering`, `absent` (no socket), `unreachable` (an error or
    /// no answer within the wait).
    pub state: String,
    /// The bound on a CreateContainer's lookup, in milliseconds.
    pub wait_ms: u64,
    /// The last failure, naming the socket and the call.
    pub last_error: Option<String>,
    /// What that means for the containers' devices, and what this source does not do yet.
    pub note: String,
}

/// The watch of this node's DRA ResourceSlices (the shell's `topolet::cluster::resource_slices`),
/// which gives DRA devices their NUMA nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceSlicesStatus {
    /// The field selector's node.
    pub node: String,
    /// The identity the watch reads as: `node` (`system:node:<node>`, `[kubernetes] evict_as`
    /// resolved to the node) or `self`.
    pub read_as: String,
    /// `listed` (the store holds what the API server listed, and follows the watch) or
    /// `not-listed` (not yet, or the watch lost the API server since).
    pub state: String,
    /// Slices of this node and the devices they give a NUMA node (or say have none).
    pub slices: usize,
    pub devices: usize,
    /// The watch's last failure, until it lists again.
    pub last_error: Option<String>,
}

/// A container given devices (`crate::managers::observed_devices`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerDevices {
    /// `namespace/pod/container`, or `pod-uid/container` for a container NRI has not shown us.
    pub name: String,
    pub id: Option<String>,
    /// Each device with its source and NUMA node.
    pub devices: Vec<ObservedDevice>,
    /// The NUMA nodes of its devices (those with locality), ascending.
    pub device_numa_nodes: Vec<usize>,
    /// The merged NUMA affinity its CPUs and memory were placed with (list syntax), if any.
    pub numa_affinity: Option<String>,
    /// Its exclusive CPUs, if any.
    pub cpus: Option<CpuSet>,
    /// `cpuset.mems` (list syntax), when known.
    pub mems: Option<String>,
}

/// A container in breach: its cpuset, as the runtime last applied it, overlaps CPUs another
/// container holds exclusively.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BreachStatus {
    /// `namespace/pod/container` of the container in breach.
    pub container: String,
    /// containerd's container id.
    pub id: String,
    /// The others' exclusive CPUs it may run on.
    pub cpus: CpuSet,
    /// `namespace/pod/container` of the containers holding them.
    pub holders: Vec<String>,
    /// When topolet first saw it (RFC 3339, UTC).
    pub since: String,
    /// How long it has lasted, as of the report.
    pub seconds: f64,
}

/// The configured policies, as named in the config file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policies {
    pub cpu: String,
    pub topology: String,
    pub topology_scope: String,
    pub memory: String,
}

/// The machine's shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    pub cpus: usize,
    pub cores: usize,
    pub threads_per_core: usize,
    /// The kubelet's memory capacity (`/proc/meminfo` `MemTotal`); nodes show their own.
    pub memory_bytes: u64,
    pub sockets: Vec<Socket>,
    pub l3_groups: Vec<L3Group>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Socket {
    pub id: usize,
    pub cpus: CpuSet,
    pub numa_nodes: Vec<usize>,
    pub cores: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct L3Group {
    /// Dense index (order of the lowest CPU id).
    pub id: usize,
    pub cpus: CpuSet,
    pub numa_nodes: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedPool {
    pub cpus: CpuSet,
    /// `cpuset.mems` of shared containers (list syntax).
    pub mems: String,
}

/// One NUMA node: where its CPUs went and what is still free.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaStatus {
    pub id: usize,
    pub sockets: Vec<usize>,
    pub cpus: CpuSet,
    pub memory_bytes: u64,
    pub reserved: CpuSet,
    pub shared: CpuSet,
    pub exclusive: CpuSet,
    /// Free for exclusive use.
    pub free: CpuSet,
    /// Every core of the node whose threads are all free.
    pub free_whole_cores: CpuSet,
    /// The biggest set of whole free cores within one L3 group of this node.
    pub largest_l3_block: CpuSet,
    /// Other providers' free capacity on the node (`memory` and hugepages in bytes, devices in
    /// units), as the topology manager sees it.
    pub free_resources: BTreeMap<String, u64>,
}

/// A container holding exclusive CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExclusiveContainer {
    /// `namespace/pod/container`, or `pod-uid/container` for a container NRI has not shown us.
    pub name: String,
    pub pod_uid: String,
    pub id: Option<String>,
    pub cpus: CpuSet,
    /// `cpuset.mems` (list syntax), when known.
    pub mems: Option<String>,
    pub numa_nodes: Vec<usize>,
}

/// The NRI connection, from the stub's `ConnectionStatus`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NriStatus {
    /// `Idle`, `Connecting`, `Registered`, `Configured`, `Synchronized`, `Disconnected` or
    /// `Stopped`.
    pub state: String,
    pub synchronized: bool,
    pub connects: u64,
    pub reconnects: u64,
    pub runtime: Option<String>,
    pub runtime_version: Option<String>,
    pub last_error: Option<String>,
}

/// What the eviction loop reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pressure {
    /// `MemoryPressure`, `DiskPressure`, `PIDPressure` → set.
    pub conditions: BTreeMap<String, bool>,
    pub signals: Vec<Signal>,
    /// The node's pressure stall information (PSI), informational (no eviction acts on it): one
    /// entry per resource and kind, empty where the kernel has no PSI.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stall: Vec<Stall>,
    /// The last node-level reclaim before a disk eviction, if any ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_reclaim: Option<NodeReclaim>,
}

/// One node-level reclaim (dead containers, unused images) as `topolet status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReclaim {
    /// The signal it reclaimed for, e.g. `imagefs.available`.
    pub signal: String,
    /// `relieved` (no pod evicted), `not_enough` (a pod was evicted after it) or `dry_run`.
    pub result: String,
    pub images: u64,
    /// The removed images' sizes as the runtime listed them.
    pub image_bytes: u64,
    pub containers: u64,
    pub sandboxes: u64,
    /// Node-level reclaims since topolet started.
    pub total: u64,
}

/// One PSI line of the node: `resource` (`cpu`, `memory`, `io`), `kind` (`some`, `full`), the
/// kernel's averages (percent of wall time stalled) and the stall time since boot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    pub resource: String,
    pub kind: String,
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    pub total_seconds: f64,
}

/// One eviction signal: its last observed value and its thresholds, in the signal's unit (bytes
/// for `*.available` of memory and filesystems, a count for inodes and PIDs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Signal {
    pub signal: String,
    pub value: Option<f64>,
    /// Threshold kind (`hard`, `soft`) → value.
    pub thresholds: BTreeMap<String, f64>,
}

/// Everything [`build`] needs besides the machine.
#[derive(Debug, Clone, Default)]
pub struct StatusInput {
    pub version: String,
    pub policies: Policies,
    pub snapshot: Snapshot,
    pub nri: NriStatus,
    pub pressure: Option<Pressure>,
    pub metrics_address: Option<String>,
}

/// Builds the report.
pub fn build(topology: &Topology, input: StatusInput) -> Status {
    let snap = &input.snapshot;
    let node_ids: Vec<usize> = topology.numa_ids().collect();
    let ids = |cpus: &CpuSet| topology.numa_nodes_of(cpus).into_iter().collect::<Vec<_>>();

    let sockets = topology
        .socket_ids()
        .map(|s| {
            let cpus = topology.socket_cpus(s);
            Socket {
                id: s,
                numa_nodes: ids(&cpus),
                cores: cores_within(topology, &cpus).len(),
                cpus,
            }
        })
        .collect();
    let l3_groups = topology
        .l3_groups()
        .iter()
        .enumerate()
        .map(|(i, cpus)| L3Group {
            id: i,
            cpus: cpus.clone(),
            numa_nodes: ids(cpus),
        })
        .collect();
    let machine = Machine {
        cpus: topology.num_cpus(),
        cores: topology.num_cores(),
        threads_per_core: topology.max_threads_per_core(),
        memory_bytes: topology.memory_capacity(),
        sockets,
        l3_groups,
    };

    let mut all_exclusive = CpuSet::new();
    for e in &snap.exclusive {
        all_exclusive.extend_from(&e.cpus);
    }
    let numa_nodes = node_ids
        .iter()
        .map(|&id| {
            let node = topology.numa_node(id);
            let cpus = topology.numa_cpus(id);
            let free = snap.assignable.intersection(&cpus);
            let whole = whole_cores(topology, &free);
            let largest_l3_block = topology
                .l3_groups()
                .iter()
                .map(|l3| whole.intersection(l3))
                .max_by(|a, b| {
                    a.len()
                        .cmp(&b.len())
                        .then_with(|| b.first().cmp(&a.first()))
                })
                .unwrap_or_default();
            let free_resources = snap
                .free
                .get(&id)
                .map(|m| {
                    m.iter()
                        .filter(|(k, _)| k.as_str() != "cpu")
                        .map(|(k, v)| (k.clone(), *v))
                        .collect()
                })
                .unwrap_or_default();
            NumaStatus {
                id,
                sockets: topology.sockets_of(&cpus).into_iter().collect(),
                memory_bytes: node.map(|n| n.memory_bytes).unwrap_or(0),
                reserved: snap.reserved.intersection(&cpus),
                shared: snap.shared.intersection(&cpus),
                exclusive: all_exclusive.intersection(&cpus),
                free,
                free_whole_cores: whole,
                largest_l3_block,
                free_resources,
                cpus,
            }
        })
        .collect();

    let mut exclusive: Vec<ExclusiveContainer> = snap
        .exclusive
        .iter()
        .map(|e| ExclusiveContainer {
            name: match &e.pod_ref {
                Some(p) => format!("{p}/{}", e.key.container),
                None => format!("{}/{}", e.key.pod_uid, e.key.container),
            },
            pod_uid: e.key.pod_uid.clone(),
            id: e.id.clone(),
            numa_nodes: ids(&e.cpus),
            cpus: e.cpus.clone(),
            mems: e.mems.map(|m| m.to_string()),
        })
        .collect();
    exclusive.sort_by(|a, b| {
        a.name
            .cmp(&b.name)
            .then_with(|| a.cpus.first().cmp(&b.cpus.first()))
    });

    let mut devices: Vec<ContainerDevices> = snap
        .devices
        .iter()
        .map(|d| ContainerDevices {
            name: match &d.pod_ref {
                Some(p) => format!("{p}/{}", d.key.container),
                None => format!("{}/{}", d.key.pod_uid, d.key.container),
            },
            id: d.id.clone(),
            device_numa_nodes: crate::managers::observed_devices::nodes_of(&d.devices, &node_ids)
                .into_iter()
                .collect(),
            devices: d.devices.clone(),
            numa_affinity: d.affinity.map(|m| m.to_string()),
            cpus: d.cpus.clone(),
            mems: d.mems.map(|m| m.to_string()),
        })
        .collect();
    devices.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.id.cmp(&b.id)));

    Status {
        version: input.version,
        policies: input.policies,
        machine,
        reserved: snap.reserved.clone(),
        shared: SharedPool {
            cpus: snap.shared.clone(),
            mems: snap.shared_mems.to_string(),
        },
        numa_nodes,
        exclusive,
        managed_containers: snap.managed,
        left_alone_containers: snap.left_alone,
        nri: input.nri,
        pressure: input.pressure,
        metrics_address: input.metrics_address,
        admissions: snap.admissions.clone(),
        breaches: snap.breaches.clone(),
        reclaimed: None,
        pod_resources: None,
        pod_resources_export: None,
        resource_slices: None,
        devices,
    }
}

/// The cores lying entirely within `cpus`, as CPU sets.
fn cores_within<'t>(topology: &'t Topology, cpus: &CpuSet) -> Vec<&'t CpuSet> {
    topology
        .cores()
        .iter()
        .filter(|c| !c.is_empty() && c.is_subset(cpus))
        .collect()
}

/// The union of the cores all of whose threads are in `free`.
fn whole_cores(topology: &Topology, free: &CpuSet) -> CpuSet {
    let mut out = CpuSet::new();
    for core in cores_within(topology, free) {
        out.extend_from(core);
    }
    out
}

/// A machine and a status input the table's tests (`topolet::introspection::status_table`,
/// through feature `test-support`) share with these.
#[cfg(any(test, feature = "test-support"))]
// Test fixtures built from constant literals; compiled outside `cfg(test)` for the shell's tests.
#[allow(clippy::unwrap_used)]
pub mod fixtures {
    use super::*;
    use crate::machine::topology::SyntheticSpec;

    pub const GIB: u64 = 1 << 30;

    /// 1 socket, 2 NUMA nodes, 2 L3 groups per node, 2 cores per L3, 2 threads: 16 cpus.
    /// Synthetic numbering: cpu c is core c's first thread (c < 8), cpu c + 8 its second.
    pub fn machine() -> Topology {
        SyntheticSpec {
            sockets: 1,
            numa_per_socket: 2,
            l3_per_numa: 2,
            cores_per_l3: 2,
            threads_per_core: 2,
            memory_per_node: 8 * GIB,
        }
        .build()
    }

    pub fn set(s: &str) -> CpuSet {
        CpuSet::parse(s).unwrap()
    }

    pub fn input(topology: &Topology) -> StatusInput {
        // Reserved: core 0 (cpus 0,8). Exclusive: core 1 (1,9) to web, cpu 4 alone to db.
        let reserved = set("0,8");
        let exclusive = vec![
            ExclusiveInput {
                key: ContainerKey::new("uid-web", "app"),
                pod_ref: Some("default/web-0".into()),
                id: Some("0123456789abcdef0123".into()),
                cpus: set("1,9"),
                mems: NumaMask::from_ids([0]),
            },
            ExclusiveInput {
                key: ContainerKey::new("uid-db", "pg"),
                pod_ref: None,
                id: None,
                cpus: set("4"),
                mems: None,
            },
        ];
        let mut excl = CpuSet::new();
        for e in &exclusive {
            excl.extend_from(&e.cpus);
        }
        let all = topology.cpus().clone();
        StatusInput {
            version: "0.1.0".into(),
            policies: Policies {
                cpu: "static".into(),
                topology: "best-effort".into(),
                topology_scope: "container".into(),
                memory: "none".into(),
            },
            snapshot: Snapshot {
                shared: all.difference(&excl),
                shared_mems: NumaMask::from_ids([0, 1]).unwrap(),
                assignable: all.difference(&excl).difference(&reserved),
                reserved,
                exclusive,
                free: BTreeMap::from([(
                    0,
                    BTreeMap::from([("cpu".into(), 5000), ("memory".into(), 3 * GIB)]),
                )]),
                managed: 5,
                left_alone: 1,
                ..Snapshot::default()
            },
            nri: NriStatus {
                state: "Synchronized".into(),
                synchronized: true,
                connects: 2,
                reconnects: 1,
                runtime: Some("containerd".into()),
                runtime_version: Some("v2.2.7".into()),
                last_error: None,
            },
            pressure: None,
            metrics_address: Some("127.0.0.1:9464".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{input, machine, set, GIB};
    use super::*;

    #[test]
    fn per_node_breakdown_and_largest_blocks() {
        let t = machine();
        let s = build(&t, input(&t));
        assert_eq!(s.machine.cpus, 16);
        assert_eq!(s.machine.cores, 8);
        assert_eq!(s.machine.sockets.len(), 1);
        assert_eq!(s.machine.l3_groups.len(), 4);
        assert_eq!(s.numa_nodes.len(), 2);
        let n0 = &s.numa_nodes[0];
        assert_eq!(n0.cpus, set("0-3,8-11"));
        assert_eq!(n0.reserved, set("0,8"));
        assert_eq!(n0.exclusive, set("1,9"));
        assert_eq!(n0.free, set("2-3,10-11"));
        assert_eq!(n0.free_whole_cores, set("2-3,10-11"));
        // L3 group {0,1} is reserved/exclusive; {2,3} holds both free cores.
        assert_eq!(n0.largest_l3_block, set("2-3,10-11"));
        assert_eq!(
            n0.free_resources,
            BTreeMap::from([("memory".into(), 3 * GIB)])
        );
        let n1 = &s.numa_nodes[1];
        // cpu 4 is taken, so core {4,12} is not whole: whole free cores 5,6,7.
        assert_eq!(n1.free, set("5-7,12-15"));
        assert_eq!(n1.free_whole_cores, set("5-7,13-15"));
        // L3 {4,5}: one whole core (5,13); L3 {6,7}: two.
        assert_eq!(n1.largest_l3_block, set("6-7,14-15"));
        assert_eq!(s.exclusive.len(), 2);
        // Sorted by name; unknown pods show their uid.
        assert_eq!(s.exclusive[0].name, "default/web-0/app");
        assert_eq!(s.exclusive[0].mems.as_deref(), Some("0"));
        assert_eq!(s.exclusive[1].name, "uid-db/pg");
        assert_eq!(s.exclusive[1].numa_nodes, vec![1]);
    }

    #[test]
    fn json_round_trips_and_pressure_is_absent_until_reported() {
        let t = machine();
        let s = build(&t, input(&t));
        let text = serde_json::to_string_pretty(&s).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(v["pressure"].is_null());
        assert_eq!(v["numa_nodes"][1]["largest_l3_block"], "6-7,14-15");
        assert_eq!(v["exclusive"][0]["cpus"], "1,9");
        assert_eq!(v["nri"]["state"], "Synchronized");
        assert_eq!(v["breaches"], serde_json::json!([]));
        let back: Status = serde_json::from_str(&text).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn breaches_are_carried_as_the_shell_dated_them() {
        let t = machine();
        let mut inp = input(&t);
        inp.snapshot.breaches = vec![BreachStatus {
            container: "default/bu/app".into(),
            id: "c0ffee".into(),
            cpus: set("1,9"),
            holders: vec!["default/web-0/app".into()],
            since: "2025-01-02T03:04:05Z".into(),
            seconds: 70.5,
        }];
        let s = build(&t, inp);
        let v: serde_json::Value = serde_json::to_value(&s).unwrap();
        assert_eq!(v["breaches"][0]["container"], "default/bu/app");
        assert_eq!(v["breaches"][0]["cpus"], "1,9");
        assert_eq!(v["breaches"][0]["holders"][0], "default/web-0/app");
        assert_eq!(v["breaches"][0]["since"], "2025-01-02T03:04:05Z");
        assert_eq!(v["breaches"][0]["seconds"], 70.5);
        // A report from a topolet without breaches still reads.
        let mut old = v.clone();
        old.as_object_mut().unwrap().remove("breaches");
        let back: Status = serde_json::from_value(old).unwrap();
        assert!(back.breaches.is_empty());
    }
}
